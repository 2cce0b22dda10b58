"""Pages generated at build time from the records and the glossary: ``<!-- lab:generated NAME -->``.

Each marker stands alone on its line (outside fenced code) and becomes Markdown before
the other shortcodes expand:

- ``machines``: the machines the book's records were measured on (the landing page);
- ``measured``: when the book's records were taken, per GPU setup (the landing page);
- ``seconds``: Appendix A's overview, the seconds each topic took per GPU kind (the median
  of its runs' ``wall_s``, with the range) and their sum, what one ``lab run --all`` costs
  there; multi-GPU topics apart, by how many GPUs they ran on; each topic links to its records;
- ``summary``: Appendix A's overview, how many figures the records hold per machine, how many noisy;
- ``chapters``: Appendix A's overview, one row per chapter: its appendix page, topics, claims, figures;
- ``elsewhere``: Appendix A's overview, the records and claims of no chapter (nothing, when there are none);
- ``chapter``: one page of Appendix A per chapter (``appendix-records/<the chapter's page>``):
  every ``lab:claim`` of the chapter with its verdict on each GPU, over its runs; then every
  measured figure of each topic of the chapter's example packages, per group of runs, with
  its run-to-run range and a flag where runs differ by more than 15 %, every run with its
  provenance, the command that reproduces it, and the records that skipped the topic; above
  them, a filter box (``docs/javascripts/appendix-filter.js``);
- ``glossary``: Appendix B, every abbreviation of ``snippets/glossary.md``, sorted.

A topic belongs to the chapter of its example's package (``examples/<package>/``): the page
that includes most of that package's examples (``lab_site.chapters``, as the notebooks hook
reads it). Nothing here writes a file: the text goes into the page being built.
"""
from __future__ import annotations

import html
import posixpath
import re
import statistics
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from examples.lab.records import RUNS_PER_KIND

from lab_site import LabError
from lab_site import chapters as chapters_mod
from lab_site import claim_context
from lab_site import claims as claims_mod
from lab_site import labels
from lab_site import markdown as render
from lab_site import provenance as prov
from lab_site import shortcodes
from lab_site.figures import Figure, rows as group_rows
from lab_site.fmt import (date_span, duration, duration_range, format_range, int_span, plural, run_date,
                          short_commit)
from lab_site.runs import NOISY
from lab_site.store import Entry, Group, Store

MARKER = re.compile(r"<!-- lab:generated (\w+) -->")
GLOSSARY_LINE = re.compile(r"\*\[([^\]]+)\]: (\S.*)")


@dataclass(frozen=True)
class Page:
    """A page of the book in nav order: its source path and its nav title."""

    src: str
    title: str
    text: str


def expand(markdown: str, render_one: Callable[[str], str]) -> str:
    """Replace each marker line outside fenced code with ``render_one(name)``, indented as the marker."""
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
            if whole is not None:  # indented as the marker is: inside an admonition or a tab too
                indent = line[:len(line) - len(line.lstrip())]
                rendered = render_one(whole.group(1)).strip("\n").splitlines()
                line = "\n" + "".join(f"{indent}{r}\n" if r.strip() else "\n" for r in rendered) + "\n"
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


#: Appendix A's folder: its overview (``index.md``) and one page per chapter, named as the chapter's page.
APPENDIX = "appendix-records"
#: A chapter's title in the nav: "5. CUDA Graphs and launch overhead".
CHAPTER_TITLE = re.compile(r"(\d+)\.\s+(.+)")


@dataclass(frozen=True)
class Chapter:
    """A numbered chapter of the nav, and its page of Appendix A."""

    number: int
    title: str  # the nav's title less its number
    page: Page

    @property
    def appendix(self) -> str:
        return appendix_src(self.page.src)


def appendix_src(chapter_src: str) -> str:
    """The source path of a chapter's page of Appendix A: ``appendix-records/<chapter page>``."""
    return f"{APPENDIX}/{chapter_src}"


def chapters_of(pages: Sequence[Page]) -> list[Chapter]:
    """The numbered chapters of the nav ("N. title"), in nav order."""
    found = []
    for page in pages:
        match = CHAPTER_TITLE.fullmatch(page.title)
        if match and not page.src.startswith(f"{APPENDIX}/"):
            found.append(Chapter(int(match[1]), match[2], page))
    return found


def topic_chapters(store: Store, pages: Sequence[Page]) -> dict[str, str | None]:
    """topic -> the page of the chapter of its example's package, in topic order; ``None`` where no
    chapter includes that package's examples."""
    packages = chapters_mod.package_pages((p.src, p.text) for p in pages)
    numbered = {c.page.src for c in chapters_of(pages)}
    where: dict[str, str | None] = {}
    for e in sorted(store.entries, key=lambda e: e.record.topic):
        page = packages.get(chapters_mod.package_of(e.record.source) or "")
        where.setdefault(e.record.topic, page if page in numbered else None)
    return where


def anchor(topic: str) -> str:
    """A topic's heading id on its appendix page (what the toc would make of it: no dots)."""
    return re.sub(r"[^\w-]", "", topic.lower())


def _relative(target: str, page_src: str) -> str:
    return posixpath.relpath(target, posixpath.dirname(page_src) or ".")


#: A Markdown link's target: ``](target)`` or ``](target "title")``.
_LINK_TARGET = re.compile(r'\]\((?P<target>[^)\s]+)(?P<title>\s+"[^"]*")?\)')


def rebase_links(text: str, from_src: str, to_src: str) -> str:
    """The Markdown links of ``text``, written on the page ``from_src``, as they read from ``to_src``:
    a relative target is rebased (a bare ``#anchor`` names ``from_src``'s anchor), others are kept."""
    if from_src == to_src:
        return text

    def one(match: re.Match) -> str:
        target = match["target"]
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("/"):
            return match[0]  # a URL, or a path from the site's root
        path, hash_, fragment = target.partition("#")
        where = posixpath.normpath(posixpath.join(posixpath.dirname(from_src), path)) if path else from_src
        return f"]({_relative(where, to_src)}{hash_}{fragment}{match['title'] or ''})"

    return _LINK_TARGET.sub(one, text)


# -- the machines -----------------------------------------------------------------------

def machines(store: Store, primary: str | None) -> str:
    """One row per machine of the book's own records: what it is, how many topics and runs per topic."""
    by_slug: dict[str, list[Group]] = {}
    for g in store.groups:
        if g.root.index == 0:
            by_slug.setdefault(g.slug, []).append(g)
    if not by_slug:
        raise LabError("no records in the book's records folder")
    order = sorted(by_slug, key=lambda s: (not by_slug[s][0].is_gpu, s != primary, s))
    lines = ["| machine | GPU | SMs | memory | driver | CUDA | PyTorch | Triton | topics | runs per topic | measured |",
             "|:--|:--|--:|--:|:--|:--|:--|:--|--:|--:|:--|"]
    for slug in order:
        groups = by_slug[slug]
        runs = [e for g in groups for e in g.runs]
        m = max(runs, key=lambda e: e.record.run.date).record.machine
        count = max(e.record.machine.gpu_count for e in runs)
        gpu = f"{count} × {m.gpu_name}" if count > 1 else (m.gpu_name or f"none (CPU: {m.host_cpu})")
        if groups[0].contributed:  # a GPU the book does not own: a reader's records, in the book's folder
            gpu += " (contributed)"
        memory = f"{m.gpu_memory_gib:g} GiB" if m.gpu_memory_gib else "—"
        cells = [f"`{slug}`", gpu, str(m.sm_count or "—"), memory, m.driver or "—", m.cuda or "—", m.torch,
                 m.triton or "—", str(len(groups)), int_span(len(g.runs) for g in groups),
                 date_span([e.record.run.date for e in runs])]
        lines.append("| " + " | ".join(html.escape(c, quote=False).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


# -- Appendix A: what re-measuring costs -----------------------------------------------------

#: The mark of a time measured by code that has changed since, and what it means.
STALE_MARK = "†"
STALE_SECONDS = "measured by code that has changed since: the code as it is now may take more or less"
NO_SECONDS = "no run of it on this GPU kept its time (records made before runs kept wall_s)"


def _wall_times(group: Group) -> list[float]:
    return [e.record.run.wall_s for e in group.runs if e.record.run.wall_s is not None]


def _seconds_cell(group: Group | None) -> str:
    """A topic's seconds on one GPU kind: the median of its runs, the fastest and slowest run beside it."""
    if group is None:
        return "—"
    times = _wall_times(group)
    if not times:
        return f'<span title="{html.escape(NO_SECONDS)}">—</span>'
    text = duration(statistics.median(times))
    if len(times) > 1:
        title = f"the fastest and the slowest of {plural(len(times), 'run')}"
        text += f' <span class="lab-runs" title="{title}">{duration_range(min(times), max(times))}</span>'
    if group.stale:
        text += f" {STALE_MARK}"  # explained once, under the table
    return text


def _seconds_total(groups: Sequence[Group], topics: int) -> str:
    """The medians added up (one ``lab run --all``), and the fastest and slowest runs added up."""
    timed = [g for g in groups if _wall_times(g)]
    if not timed:
        return "—"
    medians = [statistics.median(_wall_times(g)) for g in timed]
    lows = [min(_wall_times(g)) for g in timed]
    highs = [max(_wall_times(g)) for g in timed]
    text = f"**{duration(sum(medians))}**"
    if any(len(_wall_times(g)) > 1 for g in timed):
        title = "each topic's fastest run added up, and each topic's slowest"
        text += f' <span class="lab-runs" title="{title}">{duration_range(sum(lows), sum(highs))}</span>'
    if len(timed) < topics:
        text += f" ({len(timed)} of {plural(topics, 'topic')})"
    if any(g.stale for g in timed):
        text += f" {STALE_MARK}"
    return text


#: The header of the memory column: what the runner's table of needs holds (examples/lab/memory.py).
MEMORY_HEADER = "GPU memory at its peak"


def _memory_cell(topic: str, needs: dict[str, dict]) -> str:
    """A topic's peak GPU memory from the committed table of needs, with the GPUs it was read on."""
    entry = needs.get(topic)
    if entry is None:
        return "—"
    cell = _memory_span(entry)
    # Chapter 9's smaller Llama shapes (``--model``), each its own row of the table: topic@model
    smaller = [(key.split("@", 1)[1], e) for key, e in needs.items() if key.startswith(f"{topic}@")]
    if smaller:
        cell += "<br>" + "<br>".join(f"{model}: {_memory_span(e)}" for model, e in smaller)
    return cell


def _memory_span(entry: dict) -> str:
    where = ", ".join(entry.get("gpus", ())) or "the book's GPUs"
    title = f"the largest peak of {plural(int(entry.get('runs', 1)), 'run')} on {where}, per GPU"
    if entry.get("memory_limit_gib"):
        title += f", capped at {entry['memory_limit_gib']:g} GiB (the topic keeps less on the GPU when it must)"
    return f'<span title="{html.escape(title)}">{float(entry["gib"]):.1f} GiB</span>'


def _seconds_table(groups: Sequence[Group], order: Callable[[Group], tuple], total: str,
                   topic_link: Callable[[str], str | None], needs: dict[str, dict] | None = None) -> str:
    """One row per topic (a link to its records where ``topic_link`` gives one), one column per
    GPU kind (and records folder), a last row of sums; with ``needs`` (the runner's table of
    GPU memory needs), a last column of each topic's peak GPU memory."""
    columns: dict[tuple[int, str], dict[str, Group]] = {}
    for g in sorted(groups, key=order):
        columns.setdefault((g.root.index, g.slug), {})[g.topic] = g
    topics = sorted({g.topic for g in groups})
    labels = [render.cell(next(iter(by_topic.values())).short_label) for by_topic in columns.values()]
    memory = bool(needs)
    lines = ["| topic | " + " | ".join(labels) + (f" | {MEMORY_HEADER}" if memory else "") + " |",
             "|:--|" + "--:|" * (len(columns) + memory)]
    for topic in topics:
        href = topic_link(topic)
        name = f"[`{topic}`]({href})" if href else f"`{topic}`"
        cells = [_seconds_cell(c.get(topic)) for c in columns.values()]
        if memory:
            cells.append(_memory_cell(topic, needs))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    sums = [_seconds_total(list(c.values()), len(topics)) for c in columns.values()]
    if memory:
        sums.append("")
    lines.append(f"| {total} | " + " | ".join(sums) + " |")
    return "\n".join(lines)


def memory_needs() -> dict[str, dict]:
    """The runner's committed table of GPU memory needs (topic -> entry), {} where there is none."""
    from examples.lab.memory import entries

    return entries()


def seconds(store: Store, primary: str | None, topic_link: Callable[[str], str | None] = lambda topic: None,
            needs: dict[str, dict] | None = None) -> str:
    """What each topic, and one ``lab run --all``, costs on each GPU kind of the records (``run.wall_s``).

    Each cell is the median of the topic's counted runs on that kind (current runs where
    there are any), the fastest and slowest run beside it; the last row adds the medians:
    one ``--all``. Multi-GPU topics run only where there are enough GPUs, so they have
    their own table, one column per GPU count. ``topic_link`` gives each topic's link (to its
    records), or ``None``. ``needs`` (the runner's table of GPU memory needs, topic -> entry)
    adds a column of each one-GPU topic's peak GPU memory and a line saying what it is.
    """
    gpu = [g for g in store.groups if g.is_gpu]
    if not gpu:
        raise LabError("no GPU record: nothing to say what a run costs")
    single = [g for g in gpu if not g.multi_gpu]
    multi = [g for g in gpu if g.multi_gpu]
    out = []
    if single:
        out += [_seconds_table(single, lambda g: (g.root.index, g.slug != primary, g.label),
                               "**one `lab run --all`**", topic_link, needs), ""]
        if needs:
            out += [f"{MEMORY_HEADER}: the most GPU memory the topic held at once in the book's runs "
                    f"(sampled through NVML by the runner's watcher, the processes it starts included, "
                    f"less what was in use before it), the figure the runner checks before it starts the "
                    f"topic on your GPU. A card with less free skips the topic in one line.", ""]
    if multi:
        counts = sorted({g.record.machine.gpu_count for g in multi})
        out += [f"Topics that need several GPUs run only on a machine that has them: there `lab run --all` "
                f"costs the single-GPU topics' sum above plus the sum below for its number of GPUs "
                f"({' or '.join(map(str, counts))} in these records).", "",
                _seconds_table(multi, lambda g: (g.root.index, g.record.machine.gpu_count, g.label),
                               "**all of them**", topic_link), ""]
    if any(g.stale and _wall_times(g) for g in gpu):  # a time marked stale above
        out.append(f"{STALE_MARK} {STALE_SECONDS[0].upper()}{STALE_SECONDS[1:]}.")
    return "\n".join(out).strip("\n")


# -- Appendix A ----------------------------------------------------------------------------

def _status(group: Group) -> str:
    if group.stale:
        return f"**stale**: {group.stale_reason}"
    text = "current: the example is unchanged since these runs"
    if group.left_out:
        text += f"; {plural(len(group.left_out), 'older run')} of changed code left out"
    return text


def _figure_rows(group: Group) -> list[tuple[dict, str, Figure]]:
    return [(row.case, name, f) for row in group_rows(group) for name, f in row.metrics.items()]


#: A topic whose figures use more case keys than this gets a table per set of keys: one table of
#: every key ran past the text column (graphs.graph_costs: nine keys, most cells "—").
MAX_TABLE_KEYS = 5


def figures_markdown(group: Group) -> str:
    """Every figure of a group, one per line: case (keys constant over the group said once above),
    metric in words, median with the run-to-run range beneath, runs, a noisy flag. A topic of more
    than :data:`MAX_TABLE_KEYS` case keys gets one such table per set of keys its cases use."""
    figures = _figure_rows(group)
    if len(dict.fromkeys(k for case, _, _ in figures for k in case)) <= MAX_TABLE_KEYS:
        return _figures_table(group, figures)
    kinds: dict[tuple, list] = {}
    for row in figures:
        kinds.setdefault(tuple(row[0]), []).append(row)
    return "\n\n".join(_figures_table(group, rows) for rows in kinds.values())


def _figures_table(group: Group, figures: list) -> str:
    keys = list(dict.fromkeys(k for case, _, _ in figures for k in case))
    # A key with one value in every figure is said once above the table, as the chapters' tables do.
    fixed = [k for k in keys if all(k in c for c, _, _ in figures)
             and len({(isinstance(c[k], bool), c[k]) for c, _, _ in figures}) == 1]
    keys = [k for k in keys if k not in fixed]
    heads = [render.cell(labels.key(group.topic, k)) for k in keys]
    # Above the table, its caption: the case every figure shares, and what ⚠ means where one shows.
    said = (["Every figure: " + ", ".join(f"{render.cell(labels.key(group.topic, k))} "
                                          f"{render.cell(labels.case(k, figures[0][0][k], group.topic))}" for k in fixed)
             + "."] if fixed else [])
    if any(f.across.noisy for _, _, f in figures):
        said.append(render.NOISY_LEGEND)
    lead = [" ".join(said), "{ .lab-caption }", ""] if said else []
    # The run-to-run range sits beneath the median, as in the chapters' tables: one column fewer,
    # so that a topic of many case keys still fits the text column.
    heads = [*heads, "metric", "median, run to run", "runs", f"> {NOISY * 100:g} %"]
    aligns = [":--"] * (len(keys) + 1) + ["--:"] * 2 + [":-:"]
    rows: list[list[str]] = []
    for case, name, f in figures:
        a = f.across
        spread = (f' <span class="lab-runs" title="run-to-run range: the lowest and highest median of '
                  f'{plural(a.count, "run")}">{format_range(a.low, a.high, f.unit)}</span>' if a.count > 1 else "")
        flag = (f'<span class="lab-noisy" title="{render.NOISY_TITLE}: here {a.spread * 100:.0f} %">⚠</span>'
                if a.noisy else "")
        cells = [render.cell(labels.case(k, case.get(k, ""), group.topic)) for k in keys]
        # The metric in words; its identifier (what a shortcode names) on hover.
        words = html.escape(labels.metric_or_name(group.topic, name), quote=False)
        cells += [f'<span title="{html.escape(name)}">{words}</span>', render.median_html(f) + spread,
                  str(a.count), flag]
        rows.append(cells)
    # A column that carries nothing (no figure noisy, a key none has) is left out, as in the chapters.
    return "\n".join(lead + render.grid_lines(heads, aligns, rows))


def runs_markdown(group: Group, link: Callable[[Entry], str]) -> str:
    """Every run of a group, those left out included: id (a link to its JSON), date, boot, commit, wall time."""
    lines = ["| run | date | boot | commit | wall time | counted |", "|:--|:--|:--|:--|--:|:--|"]
    counted = {id(e) for e in group.runs}
    for e in sorted([*group.runs, *group.left_out], key=lambda e: (e.record.run.date, e.run_id)):
        run = e.record.run
        state = ("yes" if not e.stale else "yes (stale)") if id(e) in counted else "no: stale, newer runs exist"
        cells = [f"[`{e.run_id}`]({link(e)})", run_date(run.date), f"`{run.boot_id[:8]}`" if run.boot_id else "—",
                 short_commit(run.commit, run.dirty), duration(run.wall_s) if run.wall_s is not None else "—", state]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _group_tab(group: Group, link: Callable[[Entry], str]) -> str:
    record = group.record
    figures = _figure_rows(group)
    noisy = sum(f.across.noisy for _, _, f in figures)
    commands = list(dict.fromkeys(e.record.run.command for e in group.runs))
    quick = any(e.record.run.quick for e in group.runs)
    lines = [
        prov.line(group, link, [m for _, _, f in figures for m in f.metrics]),
        "",
        f"- Status: {_status(group)}",
        f"- Measured by `{'`, `'.join(commands)}`" + (" (quick sizes)" if quick else ""),
        f"- Reproduce: `python -m examples.lab run {group.topic} --out DIR` (add `--repeat N` for N runs)",
        f"- Correctness checks passed before timing: {len(record.checks)}"
        + (f" ({', '.join(c.name for c in record.checks)})" if record.checks else ""),
        "",
        runs_markdown(group, link),
        "",
    ]
    if figures:
        title = plural(len(figures), "figure") + (f", {noisy} noisy" if len(group.runs) > 1 else "")
        lines += [f'??? abstract "{title}"', ""]
        lines += [render.INDENT + line if line.strip() else "" for line in figures_markdown(group).split("\n")]
        lines.append("")
    if record.notes:
        lines += [f'??? abstract "{plural(len(record.notes), "note")} (latest run)"', ""]
        notes = render.notes_markdown(shortcodes.NotesRequest(group.topic), group)
        lines += [render.INDENT + line if line.strip() else "" for line in notes.split("\n")]
    return "\n".join(lines)


def _machine_name(entry: Entry) -> str:
    m = entry.record.machine
    name = m.gpu_name if entry.is_gpu and m.gpu_name else f"CPU: {m.host_cpu}"
    return f"{name} · {entry.root.label}" if entry.root.label else name


def _skipped_tab(entry: Entry, link: Callable[[Entry], str]) -> str:
    run = entry.record.run
    return (f"skipped: {entry.skipped}\n\n"
            f"Run `{entry.run_id}` of {run_date(run.date)}, commit {short_commit(run.commit, run.dirty)}, "
            f"by `{run.command}` · [record (JSON)]({link(entry)})")


def summary(store: Store, topics: Collection[str] | None = None) -> str:
    """How many figures the records hold, how many are noisy, per machine (and what was skipped):
    of every topic, or of ``topics`` only."""
    per: dict[tuple[int, str], list[Group]] = {}
    for g in store.groups:
        if topics is None or g.topic in topics:
            per.setdefault((g.root.index, g.slug), []).append(g)
    total = noisy = 0
    lines = []
    for (_, slug), groups in sorted(per.items()):
        figures = [f for g in groups for _, _, f in _figure_rows(g)]
        bad = sum(f.across.noisy for f in figures)
        total, noisy = total + len(figures), noisy + bad
        skipped = [e for e in store.skipped if (e.root.index, e.slug) == (groups[0].root.index, slug)
                   and (topics is None or e.record.topic in topics)]
        lines.append(f"- {_machine_name(groups[0].runs[-1])} (`{slug}`): {plural(len(figures), 'figure')} of "
                     f"{plural(len(groups), 'topic')}, runs per topic: {int_span(len(g.runs) for g in groups)}, "
                     f"{bad} noisy" + (f", {len(skipped)} topics skipped" if skipped else "")
                     + _provisional(groups))
    head = (f"{plural(total, 'figure')}, {noisy} noisy (their runs differ by more than {NOISY * 100:g} % of "
            f"the median: shown with ⚠). Each figure is the median across its runs of each run's median.")
    if topics is None and store.left_out:  # a reader's files the book could not use, and why
        lines += ["", f"Left out of this build: {plural(len(store.left_out), 'record')} of your own "
                      "that the book cannot use (the build's log says where each was to be shown):", ""]
        lines += [f"- `{html.escape(str(path), quote=False)}`: {html.escape(reason, quote=False)}"
                  for path, reason in sorted(store.left_out.items())]
    return "\n".join([head, "", *lines])


def _provisional(groups: Sequence[Group]) -> str:
    """The topics of one machine whose figures come from fewer runs than the book's rule asks."""
    few = [g for g in groups if g.provisional]
    if not few:
        return ""
    return (f"; provisional, from fewer than {RUNS_PER_KIND} runs or from one machine, until measured again: "
            + ", ".join(f"`{g.topic}` ({plural(len(g.runs), 'run')})" for g in few))


def topic_section(store: Store, topic: str, primary: str | None, link: Callable[[Entry], str]) -> str:
    """One topic of Appendix A: its heading (``#`` :func:`anchor`, a block the filter shows or hides),
    its example, a tab per group of runs and per skipped record."""
    groups = store.topic(topic, primary)
    skipped = [e for e in store.skipped if e.record.topic == topic]
    source = (groups[0].record if groups else skipped[0].record).source
    items = [(g.label, _group_tab(g, link)) for g in groups]
    items += [(_machine_name(e), _skipped_tab(e, link)) for e in skipped]
    return "\n".join([f"### `{topic}` {{ #{anchor(topic)} .lab-record }}", "", f"Measured by `{source}`.", "",
                      render.tabs(items)])


def records(store: Store, pages: Sequence[Page], primary: str | None, link: Callable[[Entry], str],
            chapter: str | None) -> str:
    """Appendix A: every topic of the chapter whose page is ``chapter`` (``None``: the topics of no
    chapter), in topic order, each :func:`topic_section`; nothing when there are none."""
    topics = [t for t, src in topic_chapters(store, pages).items() if src == chapter]
    return "\n\n".join(topic_section(store, t, primary, link) for t in topics)


def claims(store: Store, pages: Sequence[Page], primary: str | None, page_src: str = "") -> str:
    """Every claim of the pages, re-checked here against every run of every GPU of its topic; the
    chapter links are relative to the page ``page_src``. A table whose rows the filter shows or hides."""
    lines = ["| chapter | what the chapter says, and the check | verdict per GPU (its runs) |", "|:--|:--|:--|"]
    count = 0
    for page in pages:
        first = True
        requests = [r for r in requests_of(page) if isinstance(r, shortcodes.ClaimRequest)]
        said = claim_context.contexts(page.text)
        if len(said) != len(requests):  # cannot pair them: the check alone, as before
            said = [None] * len(requests)
        for req, context in zip(requests, said):
            # A reader's group the claim cannot be checked on (its page left it out and said why) is
            # left out here too; the book's own are all checked, their error raised.
            groups = [g for g in store.gpu(req.topic, primary) if g.root.index == 0 or _checkable(req, g)]
            result = claims_mod.evaluate(page.src, req, groups)
            badges = render.claim(result, {g.key: g.short_label for g in groups})
            claim = req.describe().replace("|", "\\|").replace("`", "'")  # a code span: no HTML escapes
            chapter = f"[{page.title}]({_relative(page.src, page_src)})" if first else ""
            words = render.cell(labels.metric(req.topic, req.metric))
            check = f"{words}: `{claim}`"
            if context is not None and context.sentence:
                # The sentence keeps its lab:value shortcodes: the hook renders them after this.
                # Its links lead where they lead from the chapter's page.
                sentence = rebase_links(context.sentence, page.src, page_src or page.src).replace("|", "\\|")
                where = f" ({html.escape(context.section, quote=False)})" if context.section else ""
                check = f"{sentence}{where}<br><small>check: {check}</small>"
            lines.append(f"| {chapter} | {check} | {badges} |")
            first = False
            count += 1
    if not count:
        raise LabError("no page states a claim")
    return "\n".join(lines)


def _checkable(req: shortcodes.ClaimRequest, group: Group) -> bool:
    try:
        if claims_mod.can_measure(req, group):
            claims_mod.verdict(req, group)
        return True
    except Exception:  # noqa: BLE001 - any error of a reader's odd record: not checkable
        return False


def claim_count(page: Page) -> int:
    return sum(isinstance(r, shortcodes.ClaimRequest) for r in requests_of(page))


#: The filter box of a chapter's appendix page; ``docs/javascripts/appendix-filter.js`` shows it
#: (it stays hidden where scripts do not run) and hides the claims and topics that do not match.
FILTER_HTML = (
    '<div class="lab-filter" data-lab-filter hidden>\n'
    '<label class="lab-filter__label" for="lab-filter-input">Filter</label>\n'
    '<input class="lab-filter__input" id="lab-filter-input" type="search" autocomplete="off" spellcheck="false" '
    'placeholder="a topic, GPU, metric, word or claim status (holds, unverified, stale)" '
    'aria-describedby="lab-filter-count">\n'
    '<output class="lab-filter__count" id="lab-filter-count" for="lab-filter-input" aria-live="polite"></output>\n'
    '</div>'
)
#: The class of the block that holds a chapter's claims table (the rows the filter shows or hides).
CLAIMS_CLASS = "lab-appendix-claims"


def _chapter(pages: Sequence[Page], page_src: str) -> Chapter:
    found = [c for c in chapters_of(pages) if c.appendix == page_src]
    if not found:
        names = ", ".join(c.appendix for c in chapters_of(pages))
        raise LabError(f"<!-- lab:generated chapter --> belongs on a chapter's page of Appendix A ({names}), "
                       f"not on {page_src}")
    return found[0]


def chapter_page(store: Store, pages: Sequence[Page], primary: str | None, page_src: str) -> str:
    """A chapter's page of Appendix A: its title, what it holds, the filter, the chapter's claims
    and the records of its topics."""
    chapter = _chapter(pages, page_src)
    link = relative_link(page_src)
    topics = [t for t, src in topic_chapters(store, pages).items() if src == chapter.page.src]
    packages = sorted(p for p, src in chapters_mod.package_pages((p.src, p.text) for p in pages).items()
                      if src == chapter.page.src)
    claimed = claim_count(chapter.page)
    to_chapter = _relative(chapter.page.src, page_src)
    overview = _relative(f"{APPENDIX}/index.md", page_src)
    folders = ", ".join(f"`examples/{p}/`" for p in packages) or "none"
    out = [
        f"# A.{chapter.number} Chapter {chapter.number}: {chapter.title}", "",
        f"What [Chapter {chapter.number}]({to_chapter}) claims, each claim checked against every run of every "
        f"GPU of its topic, and every figure that the examples of its folder ({folders}) measured: "
        f"{plural(claimed, 'claim')}, {plural(len(topics), 'topic')}. [The overview]({overview}) says how a "
        f"figure is made, what each column means and what rerunning costs.", "",
        FILTER_HTML, "",
        "## Claims", "",
    ]
    if claimed:
        out += ["Each claim as the chapter states it, its section, and the check the build makes: a claim holds "
                "only if it holds in every run; one that a run of the book's own records contradicts fails the "
                "build. A GPU you add with `RECORDS=DIR` is checked too.", "",
                f'<div class="{CLAIMS_CLASS}" markdown="1">', "",
                claims(store, [chapter.page], primary, page_src), "", "</div>", ""]
    else:
        out += ["This chapter states no claim.", ""]
    out += ["## Records", ""]
    if topics:
        out += ["One section per topic, one tab per machine. Open \"figures\" under a machine for its full "
                "table: the median across runs of each metric and, beside it, the run-to-run range, with ⚠ "
                "where the runs differ by more than 15 %.", "",
                summary(store, set(topics)), "",
                records(store, pages, primary, link, chapter.page.src)]
    else:
        out += ["No record measures a topic of this chapter.", ""]
    return "\n".join(out)


def chapters_table(store: Store, pages: Sequence[Page], page_src: str) -> str:
    """Appendix A's overview: one row per chapter, a link to its appendix page, with how many claims,
    topics and figures (noisy ones) that page holds."""
    where = topic_chapters(store, pages)
    lines = ["| records and claims of | claims | topics | figures | noisy |", "|:--|--:|--:|--:|--:|"]
    for chapter in chapters_of(pages):
        topics = {t for t, src in where.items() if src == chapter.page.src}
        figures = [f for g in store.groups if g.topic in topics for _, _, f in _figure_rows(g)]
        name = f"A.{chapter.number} Chapter {chapter.number}: {chapter.title}"
        lines.append(f"| [{render.cell(name)}]({_relative(chapter.appendix, page_src)}) | {claim_count(chapter.page)} "
                     f"| {len(topics)} | {len(figures)} | {sum(f.across.noisy for f in figures)} |")
    return "\n".join(lines)


def elsewhere(store: Store, pages: Sequence[Page], primary: str | None, page_src: str) -> str:
    """Appendix A's overview: the claims of pages that are no chapter, and the records of topics whose
    package no chapter includes (a reader's own, say); nothing when every one has its chapter."""
    numbered = {c.page.src for c in chapters_of(pages)}
    others = [p for p in pages if p.src not in numbered and not p.src.startswith(f"{APPENDIX}/") and claim_count(p)]
    section = records(store, pages, primary, relative_link(page_src), None)
    if not others and not section:
        return ""
    out = ["## Records and claims of no chapter", ""]
    if others:
        out += [f'<div class="{CLAIMS_CLASS}" markdown="1">', "", claims(store, others, primary, page_src), "",
                "</div>", ""]
    if section:
        out += [section, ""]
    return "\n".join(out)


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


NAMES = ("machines", "measured", "seconds", "summary", "chapters", "chapter", "elsewhere", "glossary", "built")


_COUNT_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 8: "eight"}


def measured(store: Store) -> str:
    """When the book's own records were taken, one line per GPU setup: the landing page's
    "when it was measured" (the machines table below it has the rest)."""
    setups: dict[tuple[str, int], tuple[str, list[str], set[str]]] = {}
    for g in store.groups:
        if g.root.index != 0 or not g.is_gpu:
            continue
        for e in g.runs:
            m = e.record.machine
            key = (m.gpu_name or g.slug, m.gpu_count or 1)
            name, dates, topics = setups.setdefault(key, (m.gpu_name or g.slug, [], set()))
            dates.append(e.record.run.date)
            topics.add(e.record.topic)
    if not setups:
        raise LabError("no GPU records in the book's records folder")
    lines = []
    for (name, count), (_, dates, topics) in sorted(setups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        gpus = f"{_COUNT_WORDS.get(count, str(count))} {name}" + ("s of one host" if count > 1 else "")
        lines.append(f"- {gpus}: {date_span(dates)}, {plural(len(topics), 'topic')}")
    return "\n".join(lines)


def render_named(name: str, *, store: Store, primary: str | None, nav: list, docs_dir: Path,
                 glossary_path: Path, page_src: str) -> str:
    """The Markdown of one ``<!-- lab:generated NAME -->`` marker on the page ``page_src``."""
    if name == "machines":
        return machines(store, primary)
    if name == "measured":
        return measured(store)
    if name == "built":
        from lab_site.page_dates import built_from

        return built_from(docs_dir.parent)
    if name == "summary":
        return summary(store)
    if name == "glossary":
        return glossary(glossary_path.read_text(encoding="utf-8"))
    if name in ("seconds", "chapters", "chapter", "elsewhere"):
        pages = nav_pages(nav, docs_dir)
        if name == "seconds":
            where = topic_chapters(store, pages)
            return seconds(store, primary, lambda topic: (
                f"{_relative(appendix_src(where[topic]), page_src)}#{anchor(topic)}" if where.get(topic) else None),
                memory_needs())
        if name == "chapters":
            return chapters_table(store, pages, page_src)
        if name == "elsewhere":
            return elsewhere(store, pages, primary, page_src)
        return chapter_page(store, pages, primary, page_src)
    raise LabError(f"unknown generated section {name!r} (known: {', '.join(NAMES)})")
