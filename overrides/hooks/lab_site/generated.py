"""Pages generated at build time from the records and the glossary: ``<!-- lab:generated NAME -->``.

Each marker stands alone on its line (outside fenced code) and becomes Markdown before
the other shortcodes expand:

- ``machines``: the machines the book's records were measured on (the landing page);
- ``records``: Appendix A, every measured figure per topic and machine, with provenance
  and the command that reproduces it;
- ``claims``: every ``lab:claim`` of the pages with its verdict on each GPU;
- ``glossary``: Appendix B, every abbreviation of ``snippets/glossary.md``, sorted.

Nothing here writes a file: the text goes into the page being built.
"""
from __future__ import annotations

import html
import posixpath
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from lab_site import LabError
from lab_site import claims as claims_mod
from lab_site import markdown as render
from lab_site import shortcodes
from lab_site.fmt import run_date, short_commit
from lab_site.store import Entry, Store

MARKER = re.compile(r"<!-- lab:generated (\w+) -->")
GLOSSARY_LINE = re.compile(r"\*\[([^\]]+)\]: (\S.*)")


@dataclass(frozen=True)
class Page:
    """A page of the book in nav order: its source path and its nav title."""

    src: str
    title: str
    text: str


def expand(markdown: str, render_one: Callable[[str], str]) -> str:
    """Replace each marker line outside fenced code with ``render_one(name)``."""
    out: list[str] = []
    fence: tuple[str, int] | None = None
    for line in markdown.splitlines(keepends=True):
        opened = shortcodes._FENCE.match(line)
        if fence is not None:
            if opened and opened["fence"][0] == fence[0] and len(opened["fence"]) >= fence[1] \
                    and not line[opened.end():].strip():
                fence = None
        elif opened:
            fence = (opened["fence"][0], len(opened["fence"]))
        else:
            whole = MARKER.fullmatch(line.strip())
            if whole is not None:
                line = "\n" + render_one(whole.group(1)).strip("\n") + "\n\n"
            elif MARKER.search(line):
                raise LabError(f"{MARKER.search(line).group(0)} makes a block; put it alone on its line")
        out.append(line)
    return "".join(out)


def nav_pages(nav: list, docs_dir: Path) -> list[Page]:
    """The pages of ``nav`` (a list of ``{title: file}``, possibly nested), in order."""
    found: list[Page] = []

    def walk(items):
        for item in items or []:
            if isinstance(item, dict):
                for title, value in item.items():
                    if isinstance(value, str) and value.endswith(".md"):
                        found.append(Page(value, title, (docs_dir / value).read_text(encoding="utf-8")))
                    elif isinstance(value, list):
                        walk(value)
            elif isinstance(item, str) and item.endswith(".md"):
                found.append(Page(item, item, (docs_dir / item).read_text(encoding="utf-8")))

    walk(nav)
    return found


def requests_of(page: Page) -> list[shortcodes.Request]:
    """Every lab shortcode of a page as written (outside fenced code), in order."""
    found: list[shortcodes.Request] = []

    def collect(request, code):
        found.append(request)
        return ""

    try:
        shortcodes.expand(page.text, collect)
    except LabError:
        return found  # the page's own build reports its broken shortcode
    return found


def _topics_by_page(pages: Sequence[Page]) -> dict[str, str]:
    """topic -> the first page (in nav order) that shows it."""
    where: dict[str, str] = {}
    for page in pages:
        for req in requests_of(page):
            topic = getattr(req, "topic", None)
            if topic:
                where.setdefault(topic, page.src)
    return where


# -- the machines -----------------------------------------------------------------------

def machines(store: Store, primary: str | None) -> str:
    """One row per machine of the book's own records: what it is and what ran on it."""
    by_slug: dict[str, list[Entry]] = {}
    for e in store.entries:
        if e.root.index == 0:
            by_slug.setdefault(e.slug, []).append(e)
    if not by_slug:
        raise LabError("no records in the book's records folder")
    order = sorted(by_slug, key=lambda s: (not by_slug[s][0].is_gpu, s != primary, s))
    lines = ["| machine | GPU | SMs | memory | driver | CUDA | PyTorch | Triton | records | measured |",
             "|:--|:--|--:|--:|:--|:--|:--|:--|--:|:--|"]
    for slug in order:
        entries = by_slug[slug]
        m = max(entries, key=lambda e: e.record.run.date).record.machine
        dates = sorted(run_date(e.record.run.date) for e in entries)
        when = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
        gpu = f"{m.gpu_count} × {m.gpu_name}" if m.gpu_count > 1 else (m.gpu_name or f"none (CPU: {m.host_cpu})")
        memory = f"{m.gpu_memory_gib:g} GiB" if m.gpu_memory_gib else "—"
        cells = [f"`{slug}`", gpu, str(m.sm_count or "—"), memory, m.driver or "—", m.cuda or "—", m.torch,
                 m.triton or "—", str(len(entries)), when]
        lines.append("| " + " | ".join(html.escape(c, quote=False).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


# -- Appendix A ----------------------------------------------------------------------------

def _status(entry: Entry) -> str:
    if entry.stale:
        return f"**stale**: {entry.stale_reason}"
    return "current: the example is unchanged since this run"


def _figures(entry: Entry) -> str:
    parts = []
    if entry.record.results:
        parts.append(render.table_markdown(shortcodes.TableRequest(entry.record.topic, None), entry))
    if entry.record.notes:
        parts.append(render.notes_markdown(shortcodes.NotesRequest(entry.record.topic), entry))
    return "\n\n".join(parts)


def _machine_tab(entry: Entry, link: str) -> str:
    run = entry.record.run
    count = sum(len(r.metrics) for r in entry.record.results)
    lines = [
        render.provenance(entry, link),
        "",
        f"- Status: {_status(entry)}",
        f"- Measured {run_date(run.date)} at commit {short_commit(run.commit, run.dirty)} by `{run.command}`"
        + (" (quick sizes)" if run.quick else ""),
        f"- Reproduce: `python -m examples.lab run {entry.record.topic} --out DIR`",
        f"- Correctness checks passed before timing: {len(entry.record.checks)}"
        + (f" ({', '.join(c.name for c in entry.record.checks)})" if entry.record.checks else ""),
        "",
        f'??? abstract "{count} figures{" and " + str(len(entry.record.notes)) + " notes" if entry.record.notes else ""}"',
        "",
    ]
    lines += [render.INDENT + line if line.strip() else "" for line in _figures(entry).split("\n")]
    return "\n".join(lines)


def records(store: Store, pages: Sequence[Page], primary: str | None, link: Callable[[Entry], str]) -> str:
    """Appendix A: per chapter, per topic, a tab per machine with provenance and the figures."""
    where = _topics_by_page(pages)
    titles = {p.src: p.title for p in pages}
    topics = sorted({e.record.topic for e in store.entries})
    chapters: dict[str | None, list[str]] = {}
    for topic in topics:
        chapters.setdefault(where.get(topic), []).append(topic)
    order = [p.src for p in pages if p.src in chapters] + ([None] if None in chapters else [])
    out: list[str] = []
    for src in order:
        heading = f"[{titles[src]}]({src})" if src else "Records no page shows"
        out += [f"## {heading}", ""]
        for topic in chapters[src]:
            entries = store.topic(topic, primary)
            source = entries[0].record.source
            out += [f"### `{topic}`", "", f"Measured by `{source}`.", ""]
            out.append(render.tabs([(e.label, _machine_tab(e, link(e))) for e in entries]))
            out.append("")
    return "\n".join(out)


def claims(store: Store, pages: Sequence[Page], primary: str | None) -> str:
    """Every claim of the pages, re-checked here against every GPU record of its topic."""
    lines = ["| chapter | claim | verdict per GPU |", "|:--|:--|:--|"]
    count = 0
    for page in pages:
        first = True
        for req in requests_of(page):
            if not isinstance(req, shortcodes.ClaimRequest):
                continue
            entries = store.gpu(req.topic, primary)
            result = claims_mod.evaluate(page.src, req, entries)
            badges = render.claim(result, {e.site_uri: e.short_label for e in entries})
            claim = req.describe().replace("|", "\\|").replace("`", "'")  # a code span: no HTML escapes
            chapter = f"[{page.title}]({page.src})" if first else ""
            lines.append(f"| {chapter} | `{claim}` | {badges} |")
            first = False
            count += 1
    if not count:
        raise LabError("no page states a claim")
    return "\n".join(lines)


# -- Appendix B ----------------------------------------------------------------------------

def glossary_terms(text: str) -> list[tuple[str, str]]:
    """The ``*[TERM]: meaning`` lines of the glossary snippet, sorted case-insensitively."""
    terms = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = GLOSSARY_LINE.fullmatch(line)
        if match is None:
            raise LabError(f"snippets/glossary.md:{n} is not an abbreviation (*[TERM]: meaning): {line!r}")
        terms.append((match[1], match[2]))
    return sorted(terms, key=lambda t: (t[0].casefold(), t[0]))


def glossary(text: str) -> str:
    terms = glossary_terms(text)
    lines = [f"{len(terms)} abbreviations.", "", "| abbreviation | meaning |", "|:--|:--|"]
    for term, meaning in terms:
        lines.append(f"| **{html.escape(term, quote=False)}** | {html.escape(meaning, quote=False).replace('|', chr(92) + '|')} |")
    return "\n".join(lines)


def relative_link(page_src: str) -> Callable[[Entry], str]:
    base = posixpath.dirname(page_src) or "."
    return lambda entry: posixpath.relpath(entry.site_uri, base)


NAMES = ("machines", "records", "claims", "glossary")


def render_named(name: str, *, store: Store, primary: str | None, nav: list, docs_dir: Path,
                 glossary_path: Path, page_src: str) -> str:
    """The Markdown of one ``<!-- lab:generated NAME -->`` marker."""
    if name == "machines":
        return machines(store, primary)
    if name == "glossary":
        return glossary(glossary_path.read_text(encoding="utf-8"))
    if name in ("records", "claims"):
        pages = nav_pages(nav, docs_dir)
        if name == "claims":
            return claims(store, pages, primary)
        return records(store, pages, primary, relative_link(page_src))
    raise LabError(f"unknown generated section {name!r} (known: {', '.join(NAMES)})")
