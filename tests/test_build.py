"""The real site builds with ``--strict`` and reads offline; the helpers that contradict a claim.

That a contradicted claim fails the strict build is tested in ``tests/test_reader_records.py``, in the
build it makes with the readers' folders (one build of the book, not two).

Needs ``node_modules/`` (``npm ci``): the build serves Mermaid and KaTeX from it and
fails with that instruction when it is missing.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "overrides" / "hooks"))

from examples.lab.records import record_files  # noqa: E402
from lab_site import shortcodes  # noqa: E402

#: Hosts a page must never load anything from (fonts, scripts, styles).
CDNS = ("fonts.googleapis.com", "fonts.gstatic.com", "unpkg.com", "cdn.jsdelivr.net", "cdnjs.cloudflare.com")
#: What a build of the book copies into a scratch folder to build it there.
TREE = ("docs", "overrides", "snippets", "examples", "mkdocs.yml", "package.json")


def build(cwd: Path, out: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=cwd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", **env},
    )


@pytest.fixture(scope="module")
def site(built_site) -> Path:
    return built_site


class _Loads(HTMLParser):
    """Every URL a page loads by itself (scripts, styles, icons, images, frames), in order."""

    def __init__(self):
        super().__init__()
        self.urls: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("script", "img", "iframe", "source", "audio", "video", "embed") and a.get("src"):
            self.urls.append((tag, a["src"]))
        if tag == "link" and a.get("href") and a.get("rel") not in ("next", "prev", "canonical", "alternate"):
            self.urls.append((f"link rel={a.get('rel')}", a["href"]))


def loads(page: Path) -> list[tuple[str, str]]:
    parser = _Loads()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.urls


def test_every_page_loads_only_from_the_site(site):
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= 3, [p.name for p in pages]  # home, chapter 5, 404
    for page in pages:
        for tag, url in loads(page):
            if url.startswith("data:"):
                continue
            parts = urlsplit(url)
            assert not parts.scheme and not parts.netloc, f"{page.relative_to(site)}: <{tag}> loads {url}"
            # 404.html is served at any depth, so its links start from the site's root.
            base = site if parts.path.startswith("/") else page.parent
            target = (base / parts.path.lstrip("/")).resolve()
            assert target.is_file(), f"{page.relative_to(site)}: <{tag}> loads {url}, which the site lacks"
        text = page.read_text(encoding="utf-8")
        for cdn in CDNS:
            assert cdn not in text, f"{page.relative_to(site)} names {cdn}"
    for css in site.rglob("*.css"):
        for cdn in CDNS:
            assert cdn not in css.read_text(encoding="utf-8"), f"{css.relative_to(site)} names {cdn}"


def test_mermaid_is_defined_before_materials_bundle_and_katex_is_local(site):
    home = site / "index.html"
    html = home.read_text(encoding="utf-8")
    assert 'class="mermaid"' in html and 'class="arithmatex"' in html, "the home page exercises both renderers"
    scripts = [url for tag, url in loads(home) if tag == "script"]
    bundle = next(i for i, u in enumerate(scripts) if re.search(r"assets/javascripts/bundle\.\w+\.min\.js$", u))
    # Material's bundle loads Mermaid from unpkg unless `mermaid` is already defined.
    assert scripts.index("assets/vendor/mermaid/mermaid.min.js") < bundle
    assert "assets/vendor/katex/katex.min.js" in scripts and "javascripts/katex.js" in scripts
    css = (site / "assets/vendor/katex/katex.min.css").read_text(encoding="utf-8")
    fonts = set(re.findall(r"url\(([^)]+)\)", css))
    assert fonts and all((site / "assets/vendor/katex" / f.strip("\"'")).is_file() for f in fonts)


def test_search_and_claims_are_in_the_site(site):
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    assert any(doc["location"] == "" for doc in index["docs"])
    report = json.loads((site / "claims.json").read_text(encoding="utf-8"))
    # A violated claim fails the build; a claim whose stale records lack its figure is
    # "unverified" until the topic is re-measured, and never counts as holding.
    assert report["claims"] and all(claim["verdicts"] for claim in report["claims"])
    assert all(claim["holds"] or claim["status"] == "unverified" for claim in report["claims"])
    assert not any(claim["holds"] and claim["status"] == "unverified" for claim in report["claims"])



def test_no_figure_repeats_its_unit(site):
    """A lab:value renders its unit ("92.3 %"): a page that types the unit after it shows "% %"."""
    import re

    doubled = {}
    for page in sorted(site.rglob("index.html")):
        text = re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8"))
        found = re.findall(r"\d\s?(%|ms|µs|TFLOP/s|GB/s)\s+\1(?![\w/])", text)
        if found:
            doubled[str(page.relative_to(site))] = found
    assert not doubled, doubled

def test_no_figure_is_shown_as_markup(site):
    """A measured figure rendered into a block Markdown leaves raw (an admonition's line that lost
    its indentation turns the rest into a code block) shows its HTML as text: never on a page."""
    shown_raw = {}
    for page in sorted(site.rglob("index.html")):
        text = page.read_text(encoding="utf-8")
        if "&lt;span data-lab" in text or '&lt;span class="lab-' in text:
            shown_raw[str(page.relative_to(site))] = text.count("&lt;span")
    assert not shown_raw, shown_raw


# -- a claim that a record contradicts (tests/test_reader_records.py builds with one) ---------

def page_claims() -> list[tuple[Path, shortcodes.ClaimRequest]]:
    """Every lab:claim written in the book's pages (outside code fences)."""
    found = []
    for page in sorted((REPO / "docs").rglob("*.md")):
        def collect(request, code, page=page):
            if isinstance(request, shortcodes.ClaimRequest):
                found.append((page, request))
            return ""
        shortcodes.expand(page.read_text(encoding="utf-8"), collect)
    return found


def scratch_copy(tmp_path: Path) -> Path:
    tree = tmp_path / "book"
    tree.mkdir()
    for name in TREE:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, tree / name)
    (tree / "node_modules").symlink_to(REPO / "node_modules", target_is_directory=True)
    return tree


def without_plugins(tree: Path, names: tuple[str, ...]) -> None:
    """``tree``'s mkdocs.yml less the plugins ``names`` (each entry of its ``plugins:`` list, with
    its options and the comment lines just above it)."""
    config = tree / "mkdocs.yml"
    lines = config.read_text(encoding="utf-8").splitlines(keepends=True)
    start = lines.index("plugins:\n") + 1
    end = next(i for i in range(start, len(lines)) if lines[i].strip() and not lines[i].startswith(" "))
    kept, comments, dropping, found = [], [], False, set()
    for line in lines[start:end]:
        if line.startswith("  #"):
            comments.append(line)
            continue
        entry = re.match(r"  - ([\w-]+)", line)
        if entry:
            found.add(entry[1])
            dropping = entry[1] in names
        if not dropping:
            kept += comments + [line]
        comments = []
    assert set(names) <= found, f"mkdocs.yml has no plugin {sorted(set(names) - found)}"
    config.write_text("".join(lines[:start] + kept + comments + lines[end:]), encoding="utf-8")


def breaking(op: str, bound: float) -> float:
    """A value on the wrong side of ``op bound`` that a record may still hold: no negative one where
    the bound is positive (a duration, a ratio), and below 1 or 100 from a bound under them (a share)."""
    if op in (">=", ">"):
        return bound / 2 if bound > 0 else bound - max(1.0, abs(bound))
    if 0 <= bound < 1:
        return (bound + 1) / 2
    if 1 <= bound < 100:
        return (bound + 100) / 2
    return bound + max(1.0, abs(bound))


def contradict(root: Path, claim: shortcodes.ClaimRequest) -> Path:
    """Rewrite one GPU record (one run) of the claim's topic so the claim no longer holds in it.

    The newest run of a folder is the one rewritten: it always counts (a run of today's code, or of
    the newest version measured: ``counted_runs``), where an older version's run would not be checked."""
    for path in reversed(record_files(root)):  # run ids begin with their time: newest last
        data = json.loads(path.read_text(encoding="utf-8"))
        if data["topic"] != claim.topic or data["machine"]["device"] != "cuda":
            continue
        for row in data["results"]:
            if all(row["case"].get(k) == v for k, v in claim.where.items()) and claim.metric in row["metrics"]:
                metric = row["metrics"][claim.metric]
                metric["median"] = breaking(claim.op, claim.bound)
                for key in ("q1", "q3", "min", "max"):  # keep the spread around the new median
                    if metric.get(key) is not None:
                        metric[key] = metric["median"]
                assert math.isfinite(metric["median"])
                path.write_text(json.dumps(data, indent=1), encoding="utf-8")
                return path
    raise AssertionError(f"no GPU record under {root} has a row for the claim {claim.describe()}")


def checkable(root: Path, claim: shortcodes.ClaimRequest) -> bool:
    for path in record_files(root):
        data = json.loads(path.read_text(encoding="utf-8"))
        if data["topic"] == claim.topic and any(
                all(r["case"].get(k) == v for k, v in claim.where.items()) and claim.metric in r["metrics"]
                for r in data["results"]):
            return True
    return False


def as_runs(root: Path, topic: str, count: int) -> list[Path]:
    """Each legacy record of ``topic`` under ``root`` becomes ``count`` independent runs (schema 2)."""
    written = []
    for legacy in sorted(root.glob(f"*/{topic}.json")):
        data = json.loads(legacy.read_text(encoding="utf-8"))
        legacy.unlink()
        for i in range(1, count + 1):
            run = {**data["run"], "id": f"run-{i}"}
            path = legacy.parent / topic / f"run-{i}.json"
            path.parent.mkdir(exist_ok=True)
            path.write_text(json.dumps({**data, "schema_version": 2, "run": run}, indent=1), encoding="utf-8")
            written.append(path)
    assert written, f"no legacy record of {topic} under {root}"
    return written
