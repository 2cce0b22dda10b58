"""MkDocs hook: the book's measured numbers, inserted from committed records.

Pages write HTML-comment shortcodes; this hook expands them from the records under the
roots of ``extra.lab.record_roots`` (and the folders named in the environment variable
``extra.lab.extra_records_env``), every file validated by ``examples.lab.records``:

    <!-- lab:table TOPIC [metrics=a,b] [key=value ...] -->
    <!-- lab:plot TOPIC x=KEY y=METRIC xlabel="words" ylabel="words" [series=KEY]
         [legend="value:Text,value:Text"] [logx=true] [logy=true] [title="..."] [key=value ...]
         [kind=bars] [xunit=B|%] [xtransform=1-x] [refline="VALUE:label"] [ymin=N] [ymax=N]
         [lines=SERIES,...] [annotate=SERIES,...] [order="x|x|..."] [anchor=NAME] -->
    <!-- lab:plot TOPIC[,TOPIC] ... series=machine -->            (one plot, a series per GPU)
    <!-- lab:value TOPIC METRIC [machine=SLUG] [stat=median|iqr|q1|q3|n|sm_mhz|mem_mhz|power_w] [spread=range] [key=value ...] -->
    <!-- lab:claim TOPIC METRIC OP BOUND [key=value ...] -->     (OP: >= > <= <)
    <!-- lab:notes TOPIC [keys=a,b] -->                           (what an example observed)
    <!-- lab:timeline TOPIC note=KEY [title="..."] -->            (a profiler timeline in a note: timeline.py)
    <!-- lab:calculator NAME [machine=SLUG] [plot=NAME] -->       (a live model; lab_site/calculators.py;
                                                                   plot= marks its result on the plot anchor=NAME)
    <!-- lab:generated NAME -->                                   (machines, seconds, records, claims, glossary: generated.py)

A topic has many independent runs per kind of machine; a page shows one tab per group
of runs (``lab_site.store.Group``) and every figure is the median across the runs of
each run's median, with the run-to-run range beside it (``lab_site.runs``). A figure
whose runs differ by more than 15 % of that median is *noisy*: tables flag it, and a
``lab:value`` of one is a warning (so ``--strict`` fails) unless it says
``spread=range``, which quotes the range "a–b" instead of one number. A plot names its
axes in words (``xlabel``, ``ylabel``; the y unit is appended), draws the median of
each series with a band from the lowest to the highest run, and labels each series
with its value, or as ``legend=`` renames it. Every plot and timeline is a numbered
figure with a caption that links to itself and to its points as a CSV file, which the
build writes beside the page (``lab_site.captions``); each point says its value, range
and runs on hover.

A power figure (``stat=power_w``, the provenance line) names its NVML reading,
instantaneous or one-second average (``lab_site.power``); a window too short for the
average has none, shown as "—" with the reason in its title.

A reader's records (the roots after the first) never stop the build: a file that does not
load, or a group of runs that a shortcode or a generated section cannot use (a quick run
without the figure a table asks for, odd cases, odd units), is left out of what it breaks
and reported, file and reason, as an INFO line (``records: left out ...``; Appendix A lists
them too); the rest of the book and the reader's other records build. The book's own
records stay strict: a problem in a page or in one of them stops the build with the page
named; a claim that a run
of the book's GPU records contradicts, or that no GPU record can check, is a warning, so
``--strict`` fails. Where every run of a group is stale (its code has changed since) and
lacks the figure a shortcode asks for, the page says "not yet measured by the current
code" (a claim there is *unverified*) instead: the records predate the figure; a group
with a current run that lacks it is still an error (``lab_site.markdown``). Every claim and its verdicts (per GPU, with its runs) go to
``claims.json`` at the top of the built site.
"""
from __future__ import annotations

import dataclasses
import hashlib
import html
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
from lab_site.figures import SelectionError  # noqa: E402
from lab_site import calculators  # noqa: E402
from lab_site import captions  # noqa: E402
from lab_site import claims as claims_mod  # noqa: E402
from lab_site import generated  # noqa: E402
from lab_site import page_dates  # noqa: E402
from lab_site import markdown as render  # noqa: E402
from lab_site import plot as plot_mod  # noqa: E402
from lab_site import provenance as prov  # noqa: E402
from lab_site import runs, shortcodes, store  # noqa: E402
from lab_site import timeline as timeline_mod  # noqa: E402
from lab_site.fmt import case_value, format_quantity, format_range, plural  # noqa: E402
from lab_site.series import csv_text, machine_series, series_of  # noqa: E402

log = logging.getLogger("mkdocs.plugins.lab")

#: The keys ``extra.lab`` may hold; any other is a typo and fails the build.
SETTINGS = {"record_roots", "extra_records_env", "primary_machine", "own_machines"}
CLAIMS_FILE = "claims.json"


@dataclass
class _State:
    config_dir: Path = REPO_ROOT
    roots: list[str] = field(default_factory=lambda: ["docs/records"])
    env: str | None = None
    primary: str | None = None
    own: list[str] | None = None  # the GPUs the book measured itself; others in its folder were contributed
    store: store.Store = field(default_factory=store.Store)
    claims: list[claims_mod.ClaimResult] = field(default_factory=list)
    plots: dict[str, dict[str, str]] = field(default_factory=dict)  # page -> token -> <figure>
    figures: dict[str, int] = field(default_factory=dict)  # page -> plots and timelines numbered so far
    csv: dict[str, str] = field(default_factory=dict)  # site path -> a figure's points, written after the build
    stale_noted: set[tuple[str, str]] = field(default_factory=set)  # (page, record) logged once
    anchors: dict[str, dict[str, calculators.PlotInfo]] = field(default_factory=dict)  # page -> anchor= -> plot
    marked: dict[str, list[tuple[str, shortcodes.CalculatorRequest]]] = field(default_factory=dict)  # page -> plot=


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
        own=lab.get("own_machines"),
    )
    if state.own is not None and (not isinstance(state.own, list) or not all(isinstance(m, str) for m in state.own)):
        raise PluginError("extra.lab.own_machines must be a list of machine slugs")
    return config


def on_pre_build(config: MkDocsConfig) -> None:
    env_value = os.environ.get(state.env) if state.env else None
    try:
        roots = store.roots_from(state.config_dir, Path(config.docs_dir), state.roots, env_value)
    except LabError as exc:
        raise PluginError(f"records: {exc}") from None
    state.store = store.load(roots, state.config_dir, state.own)
    for slug in sorted({e.slug for e in state.store.entries if e.contributed}):
        log.info("records: %s is a contributed GPU (not in extra.lab.own_machines): its tabs say so, and "
                 "a claim it contradicts is shown as contradicted, not a failed build", slug)
    log.info("records: %d runs in %d groups loaded from %s", len(state.store.entries), len(state.store.groups),
             ", ".join(str(r.path) for r in roots))
    for path, reason in state.store.left_out.items():
        _report_left_out(path, reason)


def _report_left_out(path: Path, reason: str, where: str = "the build") -> None:
    """One INFO line per reader's file the book cannot use (never a warning: ``--strict`` builds a
    reader's folder too)."""
    log.info("records: left out %s from %s: %s", path, where, reason)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Records from roots outside ``docs/`` are served from the site too, for their links."""
    for entry in state.store.entries:
        if entry.root.generated:
            files.append(File.generated(config, entry.site_uri, abs_src_path=str(entry.path)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    src = page.file.src_uri
    try:
        markdown = page_dates.with_measured_on(markdown, state.store, state.primary)
        markdown = generated.expand(markdown, lambda name: _generated(name, config, src))
        markdown = shortcodes.expand(markdown, lambda req, code: _render(req, code, page))
        _check_markers(page)
        return markdown
    except LabError as exc:
        raise PluginError(f"{src}: {exc}") from None


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    for token, svg in state.plots.get(page.file.src_uri, {}).items():
        paragraph = f"<p>{token}</p>"
        if paragraph not in html:
            raise PluginError(f"{page.file.src_uri}: a plot's placeholder did not survive Markdown ({token})")
        html = html.replace(paragraph, svg)
    return html


def on_post_build(config: MkDocsConfig) -> None:
    if state.store.broken:  # the book's own files only: a reader's are left out when loaded
        listing = "; ".join(f"{p}: {m}" for p, m in state.store.broken.items())
        raise PluginError(f"records: malformed record(s) that no page uses yet: {listing}")
    report = {
        "about": "Every claim of the book's pages, checked against every GPU record of its topic.",
        "claims": [c.to_json() for c in state.claims],
    }
    path = Path(config.site_dir) / CLAIMS_FILE
    path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for uri, text in state.csv.items():  # each plot's points, linked under it
        out = Path(config.site_dir) / uri
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")


# -- rendering one shortcode ------------------------------------------------------------

def _link(page: Page):
    base = posixpath.dirname(page.file.src_uri) or "."
    return lambda entry: posixpath.relpath(entry.site_uri, base)


def _html_link(page: Page):
    """Links in raw HTML, which MkDocs does not rewrite: relative to the page's URL."""
    url = page.url
    base = url.rstrip("/") if url.endswith("/") else posixpath.dirname(url)
    return lambda entry: posixpath.relpath(entry.site_uri, base or ".")


def _gpu_named(value_html: str, group: store.Group) -> str:
    """A number the page quotes from its primary GPU says so (``data-lab-gpu``): when a reader
    picks another GPU's tab, javascripts/evidence.js names that GPU beside the number."""
    if not group.is_gpu or not value_html.startswith('<span class="lab-value'):
        return value_html
    attrs = (f' data-lab-gpu="{html.escape(group.label, quote=True)}"'
             f' data-lab-gpu-short="{html.escape(group.short_label, quote=True)}"')
    return value_html.replace("<span", "<span" + attrs, 1)


def _book_gpus() -> list[store.Group]:
    """One group per one-GPU machine of the book's own records, the primary first: what the
    calculators offer as GPU presets (only a machine's slug and name are used)."""
    seen: dict[str, store.Group] = {}
    for g in state.store.groups:
        if g.root.index == 0 and g.is_gpu and not g.contributed and g.runs and g.runs[0].record.machine.gpu_count == 1:
            seen.setdefault(g.slug, g)
    return sorted(seen.values(), key=lambda g: (g.slug != state.primary, g.slug))


def _note_stale(page: Page, groups: list[store.Group]) -> None:
    for g in groups:
        key = (page.file.src_uri, g.key)
        if g.stale and key not in state.stale_noted:
            state.stale_noted.add(key)
            log.info("%s: %s on %s: %s (shown as measured on an earlier version of this code)",
                     page.file.src_uri, g.topic, g.slug, g.stale_reason)


def _generated(name: str, config: MkDocsConfig, src: str) -> str:
    """A generated section; a reader's group that breaks it is left out of the whole build (the
    sections read every group: Appendix A, the seconds, the claims) and reported."""
    def render(records: store.Store) -> str:
        return generated.render_named(
            name, store=records, primary=state.primary, nav=config.nav or [], docs_dir=Path(config.docs_dir),
            glossary_path=state.config_dir / "snippets" / "glossary.md", page_src=src)

    try:
        return render(state.store)
    except Exception:  # noqa: BLE001 - any error a reader's odd record causes; the book's re-raised
        readers = [g for g in state.store.groups if g.root.index > 0]
        if not readers:
            raise
    book = [g for g in state.store.groups if g.root.index == 0]

    def with_groups(groups: list[store.Group]) -> store.Store:
        keys = {id(e) for g in groups for e in (*g.runs, *g.left_out)}
        return dataclasses.replace(state.store, groups=groups, entries=[
            e for e in state.store.entries if e.root.index == 0 or id(e) in keys or e.skipped])

    render(with_groups(book))  # the book's own records alone: an error here is the book's, raised
    for g in readers:
        try:
            render(with_groups([*book, g]))
        except Exception as exc:  # noqa: BLE001 - this group breaks the section: out of the build
            _drop(g, exc, f"lab:generated {name} on {src}")
    try:
        return render(state.store)
    except Exception as exc:  # noqa: BLE001 - each renders alone, not together: the book's records alone
        for g in [g for g in state.store.groups if g.root.index > 0]:
            _drop(g, exc, f"lab:generated {name} on {src}")
        return render(state.store)


def _drop(group: store.Group, exc: BaseException, where: str) -> None:
    reason = _reason(exc)
    state.store.drop(group, reason)
    for e in (*group.runs, *group.left_out):
        _report_left_out(e.path, reason, where)


def _reason(exc: BaseException) -> str:
    """An error as one line: a LabError's message, any other's type and first line."""
    text = " ".join(str(exc).split())
    return text if isinstance(exc, LabError) else f"{type(exc).__name__}: {text}"


def _reader_groups(req: shortcodes.Request) -> list[store.Group]:
    """The readers' groups a shortcode may draw: of its topics, or every one (a calculator looks up its own)."""
    topics = getattr(req, "topics", None) or ([req.topic] if getattr(req, "topic", None) else None)
    return [g for g in state.store.groups if g.root.index > 0 and g.key not in state.store.hidden
            and (topics is None or g.topic in topics)]


def _snapshot(page: Page) -> tuple:
    """What rendering a shortcode adds to the build's state, to put back before rendering it again."""
    src = page.file.src_uri
    return (state.figures.get(src), dict(state.plots.get(src, {})), dict(state.csv), len(state.claims),
            dict(state.anchors.get(src, {})), list(state.marked.get(src, [])))


def _restore(page: Page, snapshot: tuple) -> None:
    src = page.file.src_uri
    figures, plots, csv, claims, anchors, marked = snapshot
    if figures is None:
        state.figures.pop(src, None)
    else:
        state.figures[src] = figures
    # Copies: a snapshot is put back more than once, and rendering adds to what it is given.
    state.plots[src], state.csv, state.anchors[src] = dict(plots), dict(csv), dict(anchors)
    state.marked[src] = list(marked)
    del state.claims[claims:]


def _render(req: shortcodes.Request, code: shortcodes.Shortcode, page: Page) -> str:
    """One shortcode; a reader's group that breaks it is left out of it, with a report, and the
    shortcode rendered again (the book's records alone must render: their error is raised)."""
    snapshot = _snapshot(page)
    try:
        return _render_one(req, code, page)
    except Exception:  # noqa: BLE001 - any error a reader's odd record causes; the book's re-raised
        readers = _reader_groups(req)
        if not readers:
            raise
    keys = {g.key for g in readers}
    if getattr(req, "topic", None) or getattr(req, "topics", None):
        # Cheap first: each reader's group alone (one tab), the book's hidden.
        book = {g.key for g in state.store.groups if g.root.index == 0}
        failing = _failing(req, code, page, snapshot, readers, book | keys)
        _restore(page, snapshot)
        try:
            with state.store.hiding(state.store.hidden | set(failing)):
                out = _render_one(req, code, page)
        except Exception:  # noqa: BLE001 - they fail beside the book's only: the thorough way below
            pass
        else:
            _report_failing(page, code, failing)
            return out
    # Each reader's group beside the book's; the book's alone first, whose error is the book's own.
    _restore(page, snapshot)
    with state.store.hiding(state.store.hidden | keys):
        _render_one(req, code, page)
    failing = _failing(req, code, page, snapshot, readers, keys)
    _restore(page, snapshot)
    try:
        with state.store.hiding(state.store.hidden | set(failing)):
            out = _render_one(req, code, page)
    except Exception as exc:  # noqa: BLE001 - each renders beside the book's, not all together
        failing = {g.key: (g, exc) for g in readers}
        _restore(page, snapshot)
        with state.store.hiding(state.store.hidden | keys):
            out = _render_one(req, code, page)
    _report_failing(page, code, failing)
    return out


def _failing(req: shortcodes.Request, code: shortcodes.Shortcode, page: Page, snapshot: tuple,
             readers: list, hide: set[str]) -> dict[str, tuple[store.Group, Exception]]:
    """The reader's groups that fail rendered each alone beside what ``hide`` leaves shown:
    {key: (group, error)}."""
    failing = {}
    for g in readers:
        error = _try(req, code, page, snapshot, hide - {g.key})
        if error is not None:
            failing[g.key] = (g, error)
    return failing


def _try(req: shortcodes.Request, code: shortcodes.Shortcode, page: Page, snapshot: tuple,
         hide: set[str]) -> Exception | None:
    """Render the shortcode with the groups of ``hide`` left out, quietly, and put the state back:
    the error it raised, or None."""
    _restore(page, snapshot)
    log.addFilter(_silent)  # a trial's warnings are not the build's: the final render says what holds
    try:
        with state.store.hiding(state.store.hidden | hide):
            _render_one(req, code, page)
        return None
    except Exception as exc:  # noqa: BLE001
        return exc
    finally:
        log.removeFilter(_silent)
        _restore(page, snapshot)


def _silent(record: logging.LogRecord) -> bool:
    return False


def _report_failing(page: Page, code: shortcodes.Shortcode,
                    failing: dict[str, tuple[store.Group, Exception]]) -> None:
    for g, exc in failing.values():
        _left_out_of(page, code, g, exc)


def _left_out_of(page: Page, code: shortcodes.Shortcode, group: store.Group, exc: BaseException) -> None:
    reason = _reason(exc).removeprefix(code.text + ": ")
    for e in group.runs:
        _report_left_out(e.path, reason, f"{page.file.src_uri} {code.text}")


def _render_one(req: shortcodes.Request, code: shortcodes.Shortcode, page: Page) -> str:
    try:
        if isinstance(req, shortcodes.TableRequest):
            groups = state.store.topic(req.topic, state.primary)
            _note_stale(page, groups)
            return render.table(req, groups, _link(page))
        if isinstance(req, shortcodes.PlotRequest):
            number = _number(page)
            keys: set[str] = set()
            xs: set[str] = set()
            units: set[str] = set()
            anchors = state.anchors.setdefault(page.file.src_uri, {})
            if req.anchor is not None and req.anchor in anchors:
                raise LabError(f"anchor={req.anchor} names another plot of this page already")
            if req.per_machine:
                out = _machine_plot(req, page, number, keys, xs, units)
            else:
                groups = state.store.topic(req.topic, state.primary)
                _note_stale(page, groups)
                made: list[str] = []  # the figure ids of this plot's tabs so far
                drawn: list[tuple[store.Group, str]] = []
                out = render.plot(req, groups, _link(page),
                                  lambda g: _plot(req, g, page, keys, xs, number, made, units, drawn))
                if req.anchor is not None:
                    units = _anchored_units(req, drawn)
            if req.anchor is not None:
                anchors[req.anchor] = calculators.PlotInfo(req.kind, req.xunit, frozenset(units))
            # A legend is checked against the series drawn, order= against the x values drawn; where
            # every group's stale runs lack the plot (tabs saying so), nothing was drawn to check them.
            unknown = sorted(set(req.legend) - keys) if keys else []
            if unknown:
                raise LabError(f"legend= names {', '.join(map(repr, unknown))}, which no series of {req.series} has "
                               f"(values: {', '.join(sorted(keys))})")
            unknown = sorted(set(req.lines + req.annotate) - keys) if keys else []
            if unknown:
                raise LabError(f"lines=/annotate= name {', '.join(map(repr, unknown))}, which no series of "
                               f"{req.series} has (values: {', '.join(sorted(keys))})")
            unknown = [x for x in req.order or () if x not in xs] if xs else []
            if unknown:
                raise LabError(f"order= names {', '.join(map(repr, unknown))}, which no row drawn has at {req.x}")
            return out
        if isinstance(req, shortcodes.NotesRequest):
            groups = state.store.topic(req.topic, state.primary)
            _note_stale(page, groups)
            return render.notes(req, groups, _link(page))
        if isinstance(req, shortcodes.TimelineRequest):
            groups = state.store.topic(req.topic, state.primary)
            _note_stale(page, groups)
            number = _number(page)
            made = []
            return render.timeline(req, groups, _link(page), lambda g, t: _timeline(req, g, t, page, number, made))
        if isinstance(req, shortcodes.CalculatorRequest):
            if req.plot is not None:  # checked once the whole page is expanded: the plot may come after
                state.marked.setdefault(page.file.src_uri, []).append((code.text, req))
            return calculators.render(req, lambda topic, slug: _group(page, topic, slug), _html_link(page),
                                      gpus=_book_gpus())
        if isinstance(req, shortcodes.ValueRequest):
            group = _group(page, req.topic, req.machine)
            _warn_if_noisy(req, group, page)
            value_html = render.value(req, group)
            # A number whose shortcode names its machine is named by its sentence too.
            return value_html if req.machine else _gpu_named(value_html, group)
        return _claim(req, code, page)
    except LabError as exc:
        raise LabError(f"{code.text}: {exc}") from None


def _check_markers(page: Page) -> None:
    """Every calculator's ``plot=`` names a plot of its page that draws what the calculator marks."""
    plots = state.anchors.get(page.file.src_uri, {})
    for text, req in state.marked.get(page.file.src_uri, []):
        try:
            calculators.check_plot(req, plots)
        except LabError as exc:
            raise LabError(f"{text}: {exc}") from None


def _group(page: Page, topic: str, slug: str | None) -> store.Group:
    group = state.store.machine(topic, slug, state.primary)
    _note_stale(page, [group])
    return group


def _warn_if_noisy(req: shortcodes.ValueRequest, group: store.Group, page: Page) -> None:
    """A sentence must not quote one number for a figure whose runs disagree: say the range instead."""
    try:
        row, figure = render.pick(req, group)
    except SelectionError:
        if group.stale:
            return  # no figure to quote: render.value says it is not yet measured by the current code
        raise
    a = figure.across
    if req.spread == "range" or req.stat != "median" or not a.noisy:
        return
    case = " ".join(f"{k}={v}" for k, v in row.case.items())
    log.warning("%s: lab:value %s %s (%s) on %s: the runs differ by more than %g %% (%s over %s); "
                "quote the range with spread=range", page.file.src_uri, req.topic, req.metric, case, group.slug,
                runs.NOISY * 100, format_range(a.low, a.high, figure.unit), plural(a.count, "run"))


def _placeholder(page: Page) -> tuple[str, str]:
    """A new token for an SVG on ``page`` (``on_page_content`` swaps it in) and the digest in it."""
    plots = state.plots.setdefault(page.file.src_uri, {})
    digest = hashlib.sha1(f"{page.file.src_uri}:{len(plots)}".encode()).hexdigest()[:8]
    return f"LABPLOT{digest}", digest


def _number(page: Page) -> int:
    """The next figure number on ``page`` (plots and timelines, in page order)."""
    state.figures[page.file.src_uri] = state.figures.get(page.file.src_uri, 0) + 1
    return state.figures[page.file.src_uri]


def _figure(page: Page, token: str, svg: str, *, number: int, made: list[str], group: store.Group | None,
            caption: str, csv: str, points: int, anchor: str | None = None) -> None:
    """Keep the ``<figure>`` of one tab (SVG, numbered caption, CSV link) under ``token``, and its CSV.

    The first tab drawn (``made`` is empty) is ``#figure-N``; another adds its machine.
    """
    fid = captions.figure_id(number, None if not made or group is None
                             else group.slug if group.root.index == 0 else f"{group.root.index}-{group.slug}")
    made.append(fid)
    site_path, href = captions.csv_path(page.file.src_uri, page.url, fid)
    state.csv[site_path] = csv
    state.plots[page.file.src_uri][token] = captions.figure_html(
        svg, fid=fid, number=number, caption=caption, machine=group.label if group else None, csv_href=href,
        points=points, anchor=anchor)


def _draw(req: shortcodes.PlotRequest, series: list, unit: str, uid: str, description: str) -> str:
    """The SVG of a plot request's series: bars or lines, with its axes' options."""
    options = dict(xlabel=req.xlabel, ylabel=render.plot_axis_label(req.ylabel, unit), uid=uid,
                   description=description, yunit=unit, ymin=req.ymin, ymax=req.ymax,
                   refline=plot_mod.RefLine(*req.refline) if req.refline else None)
    if req.kind == "bars":
        return plot_mod.bar_plot(series, **options)
    return plot_mod.line_plot(series, logx=req.logx, logy=req.logy, xunit=req.xunit, lines=req.lines,
                              annotate=req.annotate, **options)


def _caption(req: shortcodes.PlotRequest, unit: str) -> str:
    """The caption's words: the plot's title (drawn as text under it, not in the SVG), or its axes."""
    return req.title or f"{render.plot_axis_label(req.ylabel, unit)} against {req.xlabel}"


def _drawn_x(series: list) -> set[str]:
    """The x values drawn, written as order= names them."""
    return {case_value(p.x) for s in series for p in s.points}


def _plot(req: shortcodes.PlotRequest, group: store.Group, page: Page, keys: set[str], xs: set[str],
          number: int, made: list[str], units: set[str], drawn: list | None = None) -> tuple[str, list]:
    series, unit, figures = series_of(req, group)
    units.add(unit)
    if drawn is not None:
        drawn.append((group, unit))
    keys.update(s.key for s in series if s.key is not None)
    xs.update(_drawn_x(series))
    token, digest = _placeholder(page)
    ylabel = render.plot_axis_label(req.ylabel, unit)
    svg = _draw(req, series, unit, f"labplot-{digest}",
                f"{req.title + ': ' if req.title else ''}{ylabel} against {req.xlabel} on {group.label}"
                + (f", median of {plural(len(group.runs), 'run')} with their range" if len(group.runs) > 1 else ""))
    _figure(page, token, svg, number=number, made=made, group=group, caption=_caption(req, unit),
            csv=csv_text(series, req, unit), points=sum(len(s.points) for s in series), anchor=req.anchor)
    return token, figures


def _anchored_units(req: shortcodes.PlotRequest, drawn: list[tuple[store.Group, str]]) -> set[str]:
    """The y units a calculator may mark on an ``anchor=`` plot: the book's tabs'. A reader's tab in
    another unit would be marked wrongly, so it cannot be drawn there (the hook leaves it out)."""
    book = {unit for g, unit in drawn if g.root.index == 0}
    for g, unit in drawn:
        if book and unit not in book:
            raise LabError(f"{g.label}: its y is in {unit}, the book's tabs' in {', '.join(sorted(book))}; "
                           f"a calculator marks this plot (anchor={req.anchor}) in the book's unit")
    return book or {unit for _, unit in drawn}


def _machine_plot(req: shortcodes.PlotRequest, page: Page, number: int, keys: set[str], xs: set[str],
                  units: set[str]) -> str:
    """``series=machine``: one figure, a series per GPU, over one topic or several; above it the
    provenance of every group drawn (named by its topic) and the stale warning of each stale one."""
    topics = []
    for topic in req.topics:
        groups = state.store.topic(topic, state.primary)
        if not groups:
            raise LabError(f"no record of topic {topic} in any records folder")
        _note_stale(page, groups)
        topics.append(groups)
    try:
        series, unit, drawn = machine_series(req, topics)
    except SelectionError as exc:
        if any(not g.stale for groups in topics for g in groups):
            raise
        # Every run is stale and lacks it: the code may measure it now, no record says yet (as a tab says).
        return "\n\n".join(render.not_measured_tab(g, exc, _link(page)) for groups in topics for g in groups)
    keys.update(s.key for s in series if s.key is not None)
    xs.update(_drawn_x(series))
    units.add(unit)
    token, digest = _placeholder(page)
    svg = _draw(req, series, unit, f"labplot-{digest}",
                f"{req.title + ': ' if req.title else ''}{render.plot_axis_label(req.ylabel, unit)} by {req.xlabel} "
                f"on {', '.join(s.label for s in series)}: the median of each GPU's runs, with their range")
    _figure(page, token, svg, number=number, made=[], group=None, caption=_caption(req, unit),
            csv=csv_text(series, req, unit), points=sum(len(s.points) for s in series), anchor=req.anchor)
    link = _link(page)
    parts = []
    for group, figures in drawn:
        parts.append(prov.line(group, link, render.shown_metrics(figures), lead=f"`{group.topic}` · "))
        if group.stale:
            parts.append(prov.stale_note(group))
    return "\n\n".join([*parts, token])


def _timeline(req: shortcodes.TimelineRequest, group: store.Group, timeline: timeline_mod.Timeline,
              page: Page, number: int, made: list[str]) -> str:
    token, digest = _placeholder(page)
    panels = "; ".join(p.title for p in timeline.panels)
    svg = plot_mod.timeline_plot(
        timeline,
        uid=f"labplot-{digest}",
        description=f"{req.title + ': ' if req.title else ''}Timeline of {panels} on {group.label} "
                    f"(run {group.runs[-1].run_id}): lanes {', '.join(timeline.lane_names)}",
    )
    events = sum(len(lane.events) for panel in timeline.panels for lane in panel.lanes)
    _figure(page, token, svg, number=number, made=made, group=group, caption=req.title or f"Timeline of {panels}",
            csv=timeline_mod.csv_text(timeline), points=events)
    return token


def _claim(req: shortcodes.ClaimRequest, code: shortcodes.Shortcode, page: Page) -> str:
    src = page.file.src_uri
    groups = state.store.gpu(req.topic, state.primary)
    result = claims_mod.evaluate(src, req, groups)
    state.claims.append(result)
    if not result.verdicts:
        log.warning("%s: claim '%s' has no GPU record to check it against", src, req.describe())
    # A reader's folder or a contributed GPU: its contradiction is a finding on the page, not a failed build.
    readers = {g.key for g in groups if g.root.index > 0 or g.contributed}
    for v in result.unverified:
        # Records made by earlier code that lack the figure cannot check the claim: shown as
        # unverified on the badge (and in claims.json and Appendix A) until the GPU reruns.
        log.info("%s: claim '%s' is unverified on %s: its stale records lack this figure (%s)", src,
                 req.describe(), v.machine, v.missing)
    for v in result.violated:
        # The book's records must keep the book's claims; a reader's GPU that does not is
        # a finding shown on the badge (and in claims.json), not a broken build.
        report = log.info if v.group in readers else log.warning
        report("%s: claim '%s' is VIOLATED on %s: measured %s, bound %s %g, in %d of %s (record %s)", src,
               req.describe(), v.machine, format_quantity(v.worst, v.unit), req.op, req.bound, v.failing,
               plural(v.runs, "run"), v.record)
    _note_stale(page, groups)
    badges = render.claim(result, {g.key: g.short_label for g in groups})
    return badges + _contradictions(result, [g for g in groups if g.contributed], page)


def _contradictions(result: claims_mod.ClaimResult, contributed: list[store.Group], page: Page) -> str:
    """After a claim's badges: each contributed GPU that contradicts it, with its record, in words."""
    labels = {g.key: g.label for g in contributed}
    found = [v for v in result.violated if v.group in labels]
    if not found:
        return ""
    url = page.url
    base = (url.rstrip("/") if url.endswith("/") else posixpath.dirname(url)) or "."
    items = ", ".join(f'<a href="{html.escape(posixpath.relpath(v.record, base), quote=True)}">'
                      f"{html.escape(labels[v.group], quote=False)}</a> measured "
                      f"{html.escape(format_quantity(v.worst, v.unit), quote=False)}" for v in found)
    return (f' <span class="lab-claim-contradicted">(contradicted by a contributed record: {items}; '
            "the book measured its own GPUs only)</span>")
