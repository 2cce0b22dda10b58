"""MkDocs hook: the book's measured numbers, inserted from committed records.

Pages write HTML-comment shortcodes; this hook expands them from the records under the
roots of ``extra.lab.record_roots`` (and the folders named in the environment variable
``extra.lab.extra_records_env``), every file validated by ``examples.lab.records``:

    <!-- lab:table TOPIC [metrics=a,b] [key=value ...] -->
    <!-- lab:plot TOPIC x=KEY y=METRIC [series=KEY] [logx=true] [logy=true] [title="..."] [key=value ...] -->
    <!-- lab:value TOPIC METRIC [machine=SLUG] [stat=median|iqr|q1|q3|n] [key=value ...] -->
    <!-- lab:claim TOPIC METRIC OP BOUND [key=value ...] -->     (OP: >= > <= <)
    <!-- lab:notes TOPIC [keys=a,b] -->                           (what an example observed)
    <!-- lab:calculator NAME [machine=SLUG] -->                   (a live model; lab_site/calculators.py)
    <!-- lab:generated NAME -->                                   (machines, records, claims, glossary: generated.py)

A problem in a page or a record stops the build with the page named; a claim that a GPU
record contradicts, or that no GPU record can check, is a warning, so ``--strict`` fails.
Every claim and its verdicts go to ``claims.json`` at the top of the built site.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import sys
from dataclasses import dataclass, field
from pathlib import Path

# The hook imports the repository's own ``examples`` package (the record schema).
REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from mkdocs.config.defaults import MkDocsConfig  # noqa: E402
from mkdocs.exceptions import PluginError  # noqa: E402
from mkdocs.structure.files import File, Files  # noqa: E402
from mkdocs.structure.pages import Page  # noqa: E402

from lab_site import LabError  # noqa: E402
from lab_site import calculators  # noqa: E402
from lab_site import claims as claims_mod  # noqa: E402
from lab_site import generated  # noqa: E402
from lab_site import markdown as render  # noqa: E402
from lab_site import plot as plot_mod  # noqa: E402
from lab_site import shortcodes, store  # noqa: E402
from lab_site.fmt import format_quantity  # noqa: E402
from lab_site.series import series_of  # noqa: E402

log = logging.getLogger("mkdocs.plugins.lab")

#: The keys ``extra.lab`` may hold; any other is a typo and fails the build.
SETTINGS = {"record_roots", "extra_records_env", "primary_machine"}
CLAIMS_FILE = "claims.json"


@dataclass
class _State:
    config_dir: Path = REPO_ROOT
    roots: list[str] = field(default_factory=lambda: ["docs/records"])
    env: str | None = None
    primary: str | None = None
    store: store.Store = field(default_factory=store.Store)
    claims: list[claims_mod.ClaimResult] = field(default_factory=list)
    plots: dict[str, dict[str, str]] = field(default_factory=dict)  # page -> token -> svg
    stale_noted: set[tuple[str, str]] = field(default_factory=set)  # (page, record) logged once


state = _State()


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    lab = config.extra.get("lab") or {}
    unknown = set(lab) - SETTINGS
    if unknown:
        raise PluginError(f"extra.lab: unknown setting(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(SETTINGS))})")
    roots = lab.get("record_roots", ["docs/records"])
    if not isinstance(roots, list) or not roots or not all(isinstance(r, str) for r in roots):
        raise PluginError("extra.lab.record_roots must be a non-empty list of folders")
    global state
    state = _State(
        config_dir=Path(config.config_file_path).resolve().parent,
        roots=roots,
        env=lab.get("extra_records_env"),
        primary=lab.get("primary_machine"),
    )
    return config


def on_pre_build(config: MkDocsConfig) -> None:
    env_value = os.environ.get(state.env) if state.env else None
    try:
        roots = store.roots_from(state.config_dir, Path(config.docs_dir), state.roots, env_value)
    except LabError as exc:
        raise PluginError(f"records: {exc}") from None
    state.store = store.load(roots, state.config_dir)
    log.info("records: %d loaded from %s", len(state.store.entries), ", ".join(str(r.path) for r in roots))


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Records from roots outside ``docs/`` are served from the site too, for their links."""
    for entry in state.store.entries:
        if entry.root.generated:
            files.append(File.generated(config, entry.site_uri, abs_src_path=str(entry.path)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    src = page.file.src_uri
    try:
        markdown = generated.expand(markdown, lambda name: generated.render_named(
            name, store=state.store, primary=state.primary, nav=config.nav or [],
            docs_dir=Path(config.docs_dir), glossary_path=state.config_dir / "snippets" / "glossary.md",
            page_src=src))
        return shortcodes.expand(markdown, lambda req, code: _render(req, code, page))
    except LabError as exc:
        raise PluginError(f"{src}: {exc}") from None


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    for token, svg in state.plots.get(page.file.src_uri, {}).items():
        paragraph = f"<p>{token}</p>"
        if paragraph not in html:
            raise PluginError(f"{page.file.src_uri}: a plot's placeholder did not survive Markdown ({token})")
        html = html.replace(paragraph, f'<figure class="lab-plot">{svg}</figure>')
    return html


def on_post_build(config: MkDocsConfig) -> None:
    if state.store.broken:
        listing = "; ".join(f"{p}: {m}" for p, m in state.store.broken.items())
        raise PluginError(f"records: malformed record(s) that no page uses yet: {listing}")
    report = {
        "about": "Every claim of the book's pages, checked against every GPU record of its topic.",
        "claims": [c.to_json() for c in state.claims],
    }
    path = Path(config.site_dir) / CLAIMS_FILE
    path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


# -- rendering one shortcode ------------------------------------------------------------

def _link(page: Page):
    base = posixpath.dirname(page.file.src_uri) or "."
    return lambda entry: posixpath.relpath(entry.site_uri, base)


def _html_link(page: Page):
    """Links in raw HTML, which MkDocs does not rewrite: relative to the page's URL."""
    url = page.url
    base = url.rstrip("/") if url.endswith("/") else posixpath.dirname(url)
    return lambda entry: posixpath.relpath(entry.site_uri, base or ".")


def _note_stale(page: Page, entries: list[store.Entry]) -> None:
    for e in entries:
        key = (page.file.src_uri, e.site_uri)
        if e.stale and key not in state.stale_noted:
            state.stale_noted.add(key)
            log.info("%s: %s on %s: %s (shown as measured on an earlier version of this code)",
                     page.file.src_uri, e.record.topic, e.slug, e.stale_reason)


def _render(req: shortcodes.Request, code: shortcodes.Shortcode, page: Page) -> str:
    try:
        if isinstance(req, shortcodes.TableRequest):
            entries = state.store.topic(req.topic, state.primary)
            _note_stale(page, entries)
            return render.table(req, entries, _link(page))
        if isinstance(req, shortcodes.PlotRequest):
            entries = state.store.topic(req.topic, state.primary)
            _note_stale(page, entries)
            return render.plot(req, entries, _link(page), lambda e: _plot(req, e, page))
        if isinstance(req, shortcodes.NotesRequest):
            entries = state.store.topic(req.topic, state.primary)
            _note_stale(page, entries)
            return render.notes(req, entries, _link(page))
        if isinstance(req, shortcodes.CalculatorRequest):
            return calculators.render(req, lambda topic, slug: _entry(page, topic, slug), _html_link(page))
        if isinstance(req, shortcodes.ValueRequest):
            entry = state.store.machine(req.topic, req.machine, state.primary)
            _note_stale(page, [entry])
            return render.value(req, entry)
        return _claim(req, code, page)
    except LabError as exc:
        raise LabError(f"{code.text}: {exc}") from None


def _entry(page: Page, topic: str, slug: str | None) -> store.Entry:
    entry = state.store.machine(topic, slug, state.primary)
    _note_stale(page, [entry])
    return entry


def _plot(req: shortcodes.PlotRequest, entry: store.Entry, page: Page) -> str:
    series, unit = series_of(req, entry)
    plots = state.plots.setdefault(page.file.src_uri, {})
    digest = hashlib.sha1(f"{page.file.src_uri}:{len(plots)}".encode()).hexdigest()[:8]
    token = f"LABPLOT{digest}"
    plots[token] = plot_mod.line_plot(
        series,
        xlabel=req.x,
        ylabel=render.plot_axis_label(req.y, unit),
        logx=req.logx,
        logy=req.logy,
        title=req.title,
        uid=f"labplot-{digest}",
        description=f"{req.title + ': ' if req.title else ''}{req.y} against {req.x} on {entry.label}",
    )
    return token


def _claim(req: shortcodes.ClaimRequest, code: shortcodes.Shortcode, page: Page) -> str:
    src = page.file.src_uri
    entries = state.store.gpu(req.topic, state.primary)
    result = claims_mod.evaluate(src, req, entries)
    state.claims.append(result)
    if not result.verdicts:
        log.warning("%s: claim '%s' has no GPU record to check it against", src, req.describe())
    readers = {e.site_uri for e in entries if e.root.index > 0}
    for v in result.violated:
        # The book's records must keep the book's claims; a reader's GPU that does not is
        # a finding shown on the badge (and in claims.json), not a broken build.
        report = log.info if v.record in readers else log.warning
        report("%s: claim '%s' is VIOLATED on %s: measured %s, bound %s %g (record %s)", src,
               req.describe(), v.machine, format_quantity(v.worst, v.unit), req.op, req.bound, v.record)
    _note_stale(page, entries)
    return render.claim(result, {e.site_uri: e.short_label for e in entries})
