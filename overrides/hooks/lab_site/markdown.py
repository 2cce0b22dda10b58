"""What a shortcode turns into: Markdown (tabs, tables, provenance) and inline HTML (values, badges).

Nothing here reads files or knows about MkDocs: it takes groups of runs and requests and
returns text, so it can be tested on its own. Every number is the median across a
group's runs of each run's median (``lab_site.runs``); where a group has several runs,
the run-to-run range stands beside it and a figure whose runs differ by more than
15 % is flagged.

Where every run of a group is stale and lacks what a shortcode asks for (a metric, a
case, a note, a row), the code as it is now may well measure it: the records predate
it. The page then says so instead of failing: "not yet measured by the current code",
inline for a value, as a tab for a table or plot that no group can draw, as a column of
a table that has the others; a claim's verdict there is *unverified*. A group with a
current run that lacks it still fails: the page asks for what the code does not measure.
"""
from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable, Sequence

from examples.lab.records import RUNS_PER_KIND, Metric

from lab_site import LabError
from lab_site import labels
from lab_site import provenance as prov
from lab_site.claims import UNVERIFIED, ClaimResult, Verdict
from lab_site.figures import Figure, GroupRow, SelectionError, metric, power, select, stat, stat_unit, with_metric
from lab_site.fmt import (bare_range, case_value, date_span, format_bare, format_quantity, format_range, plural,
                          run_date, sizes_in_text, unit_text)
from lab_site.runs import NOISY
from lab_site.shortcodes import NotesRequest, PlotRequest, TableRequest, TimelineRequest, ValueRequest
from lab_site.store import Entry, Group
from lab_site.timeline import Timeline, of_group

STALE_TITLE = prov.STALE_TITLE
NOT_MEASURED = prov.NOT_MEASURED
NOT_MEASURED_TITLE = prov.NOT_MEASURED_TITLE
INDENT = prov.INDENT
#: The title of a noisy figure's flag.
NOISY_TITLE = f"runs differ by more than {NOISY * 100:g} %"
#: What a ⚠ means, in the caption of every table that shows one (the range sits beneath the
#: median in a table cell: tables.css sets ``.lab-runs`` on a line of its own).
NOISY_LEGEND = (f'<span class="lab-noisy-legend"><span class="lab-noisy-sign">⚠</span> marks a figure whose runs '
                f"differ by more than {NOISY * 100:g} %; the range beneath its median shows by how much.</span>")


def tabs(items: Sequence[tuple[str, str]]) -> str:
    """Content tabs (pymdownx.tabbed): one ``=== "label"`` per item, its body indented.

    The first tab is ``===!``: it starts a new set, so two shortcodes in a row make two sets.
    """
    out: list[str] = []
    for i, (label, body) in enumerate(items):
        out.append(f'==={"!" if i == 0 else ""} "{label.replace(chr(34), chr(39))}"')
        out.append("")
        out.extend(INDENT + line if line.strip() else "" for line in body.strip("\n").split("\n"))
        out.append("")
    return "\n".join(out)


def cell(text: str) -> str:
    return html.escape(str(text), quote=False).replace("|", "\\|")


def _attr(text: str) -> str:
    return html.escape(text, quote=True)


def shown_metrics(figures: Iterable[Figure]) -> list[Metric]:
    """Every run's metric behind ``figures`` (for the timers the provenance line names)."""
    return [m for f in figures for m in f.metrics]


#: A table of more rows than this is folded: split by its main key, or its first rows shown.
FOLD_ROWS = 15
#: Rows shown above the fold of a long table that no key splits.
FIRST_ROWS = 10


def table_markdown(request: TableRequest, group: Group, partial: bool = False) -> tuple[str, list[Figure]]:
    """One row per case, the case keys as columns, then one column per metric; and the figures shown.

    Every metric named must be in some row. With ``partial`` a stale group keeps the
    metrics it has and marks the column of each it lacks "not yet measured" (it must
    have one of them at least). Headers say each metric in words with its unit
    (``lab_site.labels``); a case key whose value is the same in every row is said once,
    above the table, instead of on every row; a table of more than :data:`FOLD_ROWS`
    rows is folded (:func:`_fold`).
    """
    rows = select(group, request.where)
    names = list(request.metrics) if request.metrics else list(dict.fromkeys(n for r in rows for n in r.metrics))
    absent = [name for name in names if not any(name in r.metrics for r in rows)]
    have = ", ".join(dict.fromkeys(n for r in rows for n in r.metrics))
    if absent and not (partial and group.stale and len(absent) < len(names)):
        raise SelectionError(f"topic {group.topic} on {group.slug} has no metric {absent[0]!r} (metrics: {have})")
    missing = {name: not_measured_cell(group, f"topic {group.topic} on {group.slug} has no metric {name!r} "
                                              f"(metrics: {have})") for name in absent}
    words = {name: labels.metric(group.topic, name) for name in names}  # a metric without words fails here
    # Naming metrics also picks rows: only those that have at least one of them,
    # and only the case keys those rows use.
    rows = [r for r in rows if any(name in r.metrics for name in names)]
    keys = list(dict.fromkeys(k for row in rows for k in row.case))
    fixed = [k for k in keys if all(k in r.case for r in rows) and len({_json(r.case[k]) for r in rows}) == 1]
    keys = [k for k in keys if k not in fixed]
    # A column whose figures share one unit says it in its header; its cells are bare numbers.
    units = {name: {f.unit for r in rows if (f := r.metrics.get(name))} for name in names}
    unit = {name: next(iter(u)) if len(u) == 1 else None for name, u in units.items()}
    header = [cell(labels.key(group.topic, k)) for k in keys]
    header += [cell(labels.with_unit(words[name], unit[name])) for name in names]

    shown: list[Figure] = []

    def line(row: GroupRow, columns: list[str]) -> list[str]:
        cells = [cell(labels.case(k, row.case.get(k, ""), group.topic)) for k in columns]
        for name in names:
            figure = row.metrics.get(name)
            cells.append(figure_cell(figure, len(group.runs), bare=unit[name] is not None) if figure
                         else missing.get(name, "—"))
            if figure:
                shown.append(figure)
        return cells

    def grid(part: list[GroupRow], columns: list[str]) -> list[str]:
        heads = [cell(labels.key(group.topic, k)) for k in columns] + header[len(keys):]
        return grid_lines(heads, [":--"] * len(columns) + ["--:"] * len(names), [line(row, columns) for row in part])

    body = _fold(group, rows, keys, grid)
    lines = [_caption(group, [(k, rows[0].case[k]) for k in fixed], shown), "", *body]
    if absent:
        lines += ["", f"{', '.join(cell(words[n]) for n in absent)}: {NOT_MEASURED} (these runs predate "
                      f"{'it' if len(absent) == 1 else 'them'})."]
    return "\n".join(lines), shown


#: What a cell holds where it carries nothing: no value for its key, or no figure ("—").
EMPTY_CELLS = frozenset({"", "—"})


def grid_lines(heads: list[str], aligns: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table (header, rule, rows) of the columns that carry something: a column whose
    every cell is empty or "—" (a key none of its rows has, a figure none of them measured) is
    left out, since it says nothing; a table whose columns all carry nothing keeps them all."""
    keep = [i for i in range(len(heads)) if any(r[i].strip() not in EMPTY_CELLS for r in rows)] or \
        list(range(len(heads)))
    return ["| " + " | ".join(heads[i] for i in keep) + " |",
            "|" + "|".join(aligns[i] for i in keep) + "|",
            *("| " + " | ".join(r[i] for i in keep) + " |" for r in rows)]


def _json(value) -> tuple:
    """A case value compared as JSON compares it: ``True`` is not ``1``."""
    return (isinstance(value, bool), value)


def _caption(group: Group, fixed: list[tuple[str, object]], shown: list[Figure]) -> str:
    """The line above a table: the case every row shares, what a cell holds, and what ⚠ means
    where a figure of the table has one (:data:`NOISY_LEGEND`)."""
    parts = []
    if fixed:
        parts.append("Every row: " + ", ".join(f"{cell(labels.key(group.topic, k))} "
                                               f"{cell(labels.case(k, v, group.topic))}" for k, v in fixed) + ".")
    if len(group.runs) > 1:
        parts.append(f"Each figure: the median of {len(group.runs)} runs, the lowest and highest run beneath it"
                     + (f" (provisional: a figure of the book takes {RUNS_PER_KIND} runs, on two machines or more)." if group.provisional else "."))
    elif any(_iqr(f) is not None for f in shown):
        parts.append("One run: beneath a timed figure, the interquartile range of its repetitions.")
    if any(f.across.noisy for f in shown):
        parts.append(NOISY_LEGEND)
    return " ".join(parts) + "\n{ .lab-caption }" if parts else ""


def _fold(group: Group, rows: list[GroupRow], keys: list[str],
          grid: Callable[[list[GroupRow], list[str]], list[str]]) -> list[str]:
    """A table short enough to read whole, or one folded by its main key: the first case key
    that splits it into parts of at most :data:`FOLD_ROWS` rows, else the first with several
    values, one collapsible block per value (its value in the title, the first block open, the
    key's column gone), each part folded again the same way while it is still long. Where no key
    splits it, its first :data:`FIRST_ROWS` rows, the others in a closed block."""
    if len(rows) <= FOLD_ROWS:
        return grid(rows, keys)

    def parts(k: str) -> dict:
        out: dict = {}
        for r in rows:
            out.setdefault(_json(r.case.get(k)), []).append(r)
        return out

    splits = [k for k in keys if 1 < len(parts(k)) < len(rows)]
    main = next((k for k in splits if all(len(p) <= FOLD_ROWS for p in parts(k).values())),
                splits[0] if splits else None)
    if main is None:
        rest = rows[FIRST_ROWS:]
        return [*grid(rows[:FIRST_ROWS], keys), "", f'??? lab-rows "{plural(len(rest), "more row")}"', "",
                *(INDENT + text if text else "" for text in grid(rest, keys))]
    out: list[str] = []
    for i, part in enumerate(parts(main).values()):
        # The part's title says the key's value, and any other column that is constant within it.
        same = [k for k in keys if all(k in r.case for r in part) and len({_json(r.case[k]) for r in part}) == 1]
        title = ", ".join(f"{labels.key(group.topic, k)} {labels.case(k, part[0].case.get(k, ''), group.topic)}"
                          for k in [main, *(k for k in same if k != main)])
        title = f"{title} · {plural(len(part), 'row')}".replace('"', "'")
        columns = [k for k in keys if k not in same]
        out += [f'???{"+" if i == 0 else ""} lab-rows "{title}"', ""]
        out += [INDENT + text if text else "" for text in _fold(group, part, columns, grid)]
        out.append("")
    return out


def _iqr(figure: Figure) -> float | None:
    try:
        return stat(figure, "iqr")
    except SelectionError:
        return None


def noisy_flag(figure: Figure) -> str:
    """A visible ⚠ before a figure whose runs differ by more than :data:`~lab_site.runs.NOISY`, else ``''``."""
    if not figure.across.noisy:
        return ""
    title = f"{NOISY_TITLE}: here {figure.across.spread * 100:.0f} % of the median"
    return f'<span class="lab-noisy" title="{_attr(title)}">⚠</span> '


def runs_span(figure: Figure, group_runs: int | None = None, bare: bool = False) -> str:
    """``400–420 µs``, the run-to-run range, its title saying what that is (and the spread within a run).

    In a table (``bare``: the header carries the unit) the number alone; the count of runs
    only where it differs from the group's (``group_runs``), which the caption states.
    """
    a = figure.across
    title = f"run-to-run range: the lowest and highest median of {plural(a.count, 'independent run')}"
    iqr = _iqr(figure)
    if iqr is not None:
        title += f"; within a run, IQR {format_quantity(iqr, figure.unit)} (q3 − q1, median over runs)"
    text = bare_range(a.low, a.high, figure.unit) if bare else format_range(a.low, a.high, figure.unit)
    if a.count != group_runs:
        text += f", {plural(a.count, 'run')}"
    return f'<span class="lab-runs" title="{_attr(title)}">{html.escape(text, quote=False)}</span>'


def median_html(figure: Figure) -> str:
    """The median across runs, the spread within a run (IQR) in its title where the metric has one."""
    text = format_quantity(figure.median, figure.unit)
    iqr = _iqr(figure)
    if iqr is None:
        return text
    title = f"IQR within a run {format_quantity(iqr, figure.unit)} (q3 − q1, median over runs)"
    return f'<span title="{_attr(title)}">{text}</span>'


def figure_cell(figure: Figure, group_runs: int, bare: bool = False) -> str:
    """A table cell: the median across runs, beneath it the run-to-run range (several runs) or the IQR (one).

    ``bare``: the column's header carries the unit, so the cell holds numbers alone.
    """
    shown = format_bare(figure.median, figure.unit) if bare else format_quantity(figure.median, figure.unit)
    text = noisy_flag(figure) + shown
    if group_runs > 1:
        return f"{text} {runs_span(figure, group_runs, bare)}"
    iqr = _iqr(figure)
    if iqr is not None:
        spread = format_bare(iqr, figure.unit) if bare else format_quantity(iqr, figure.unit)
        text += (f' <span class="lab-iqr" title="interquartile range (q3 − q1) of the repetitions of the run">'
                 f"IQR {spread}</span>")
    return text


def _per_machine(topic: str, groups: Sequence[Group], body: Callable[[Group], tuple[str, list[Metric]]],
                 link: Callable[[Entry], str],
                 partial: Callable[[Group], tuple[str, list[Metric]]] | None = None) -> str:
    """Tabs, one per group that has rows for the request: provenance, the stale warning, ``body``.

    ``body(group)`` returns the content and the metrics it shows (whose timers the
    provenance names). A group whose runs have no row (or no metric) the request asks
    for is left out (a CPU does not replay CUDA graphs). If that leaves none, the groups
    whose runs are all stale get a tab saying that what it shows is not yet measured by
    the current code, unless a current GPU group lacks it too (or only current groups
    lack it): then the page asks for what the code does not measure, and the first such
    reason is the error. A current CPU group lacking it beside stale GPU groups says
    nothing either way: a CPU lacks every CUDA-only figure. Where ``partial(group)`` can
    show part of it for a stale group (a table's other columns), that part is its tab.
    Whether the page fails is decided on ``body`` alone, as before stale groups were
    marked: a partial tab never hides a current group's lack.
    """
    if not groups:
        raise LabError(f"no record of topic {topic} in any records folder")
    def tab(group: Group, content: str, metrics: list[Metric]) -> tuple[str, str]:
        parts = [prov.line(group, link, metrics)]
        if group.stale:
            parts.append(prov.stale_note(group))
        parts.append(content)
        return group.label, "\n\n".join(parts)

    items: list[tuple[str, str]] = []
    lacking: list[tuple[Group, SelectionError]] = []
    for group in groups:
        try:
            items.append(tab(group, *body(group)))
        except SelectionError as exc:
            lacking.append((group, exc))
    if not items:
        current = [(g, exc) for g, exc in lacking if not g.stale]
        stale = [(g, exc) for g, exc in lacking if g.stale]
        blocking = [exc for g, exc in current if g.is_gpu] or ([exc for _, exc in current] if not stale else [])
        if blocking:
            raise blocking[0]
        for group, exc in stale:
            try:
                if partial is None:
                    raise exc
                items.append(tab(group, *partial(group)))
            except SelectionError as missing:
                items.append((group.label, not_measured_tab(group, missing, link)))
    return tabs(items)


def not_measured_tab(group: Group, missing: SelectionError | str, link: Callable[[Entry], str]) -> str:
    """The tab of a stale group that lacks what a table, plot, notes or timeline shows: its provenance and why."""
    return f"{prov.line(group, link)}\n\n{prov.not_measured_note(group, str(missing))}"


def not_measured_title(group: Group, missing: str) -> str:
    """The hover text of an inline "not yet measured" marker: the machine, what is missing, why, the command."""
    return (f"{group.label} ({group.slug}) · {missing} · {group.stale_reason} · "
            f"rerun {prov.rerun_command(group)} to measure it")


def not_measured_cell(group: Group, missing: str) -> str:
    """A table cell of a metric the stale group lacks (the sentence under the table says it in full)."""
    return f'<span class="lab-missing" title="{_attr(not_measured_title(group, missing))}">not yet measured</span>'



def not_measured_value(group: Group, missing: str) -> str:
    """What a ``lab:value`` shows where the group is stale and lacks the figure: the words, the reason on hover."""
    return (f'<span class="lab-value lab-value--missing" title="{_attr(not_measured_title(group, missing))}">'
            f"{NOT_MEASURED}</span>")


def table(request: TableRequest, groups: Sequence[Group], link: Callable[[Entry], str]) -> str:
    """Tabs, one per group of runs: provenance, the stale warning where due, the table."""
    def body(group: Group, partial: bool = False) -> tuple[str, list[Metric]]:
        text, figures = table_markdown(request, group, partial)
        return text, shown_metrics(figures)

    return _per_machine(request.topic, groups, body, link, lambda g: body(g, partial=True))


def plot(request: PlotRequest, groups: Sequence[Group], link: Callable[[Entry], str],
         placeholder: Callable[[Group], tuple[str, list[Figure]]]) -> str:
    """Tabs, one per group: provenance, the stale warning where due, a placeholder for the SVG.

    ``placeholder(group)`` draws the plot and returns the token that stands for it and the figures drawn.
    """
    def body(group: Group) -> tuple[str, list[Metric]]:
        token, figures = placeholder(group)
        return token, shown_metrics(figures)

    return _per_machine(request.topic, groups, body, link)


#: Mapping notes spread over one column per key only while their keys are this few; otherwise
#: (a dozen NCCL settings, keys that differ per note) each mapping is one cell, a line per key.
NOTE_COLUMNS = 6
#: A run of characters this long without a space (a kernel's name) may break after ``_ . : , ( <``.
LONG_TOKEN = 24


def notes_markdown(request: NotesRequest, group: Group) -> str:
    """The notes of a group's latest run (what an example observed rather than timed) as tables.

    One row per note; mapping notes with at most :data:`NOTE_COLUMNS` keys in all spread over
    one column per key, any other mapping is one cell with a line per key, a list is joined
    with semicolons, anything else goes in the column "value"; a count of bytes the code wrote
    (``1073741824 B``) in binary units (``1 GiB``). Code names (a key with ``_``
    or ``.``) are set as code; long kernel names may break, so the table fits the column.

    Notes spread over their keys' columns and notes with one value are never rows of the same
    table: each run of consecutive notes of one kind is a table of its own (``note | key ... ``
    or ``note | value``), in the notes' order. A table holding both gave every row a column it
    left empty ('—'), and five collectives' columns beside "value" ran past the text column.
    """
    notes = group.record.notes
    names = list(request.keys) if request.keys else list(notes)
    missing = [n for n in names if n not in notes]
    if missing or not names:
        raise SelectionError(
            f"topic {group.topic} on {group.slug} has no note {missing[0]!r} (notes: {', '.join(notes) or 'none'})"
            if missing else f"topic {group.topic} on {group.slug} has no notes"
        )
    mappings = [notes[n] for n in names if isinstance(notes[n], dict)]
    spread = len(dict.fromkeys(k for m in mappings for k in m)) <= NOTE_COLUMNS
    runs: list[tuple[bool, list[str]]] = []  # (spread over keys, the notes' names), in order
    for name in names:
        kind = isinstance(notes[name], dict) and spread
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(name)
        else:
            runs.append((kind, [name]))
    return "\n\n".join(_notes_table(notes, run, kind) for kind, run in runs)


def _notes_table(notes: dict, names: list[str], spread: bool) -> str:
    """One table of notes: ``names`` spread over one column per key of theirs, or in "value"."""
    columns = list(dict.fromkeys(k for n in names for k in notes[n])) if spread else ["value"]
    lines = ["| note | " + " | ".join(map(_note_key, columns)) + " |",
             "|" + "|".join([":--"] * (len(columns) + 1)) + "|"]
    for name in names:
        note = notes[name]
        if spread:
            shown = [_note_value(note[c]) if c in note else "—" for c in columns]
        elif isinstance(note, dict):
            shown = ["<br>".join(f"{_note_key(k)}: {_note_value(v)}" for k, v in note.items())]
        else:
            shown = [_note_value(note)]
        lines.append(f"| {cell(sizes_in_text(name))} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def _note_key(key: str) -> str:
    """A note's key: a code name (``cuda.matmul.allow_tf32``) as code, breakable after its dots; in
    a key of words, each code name among them as code (``<code>do_bench</code> defaults``)."""
    if ("_" in key or "." in key) and " " not in key:
        return f"<code>{breakable(key, always=True)}</code>"
    return " ".join(_CODE_WORD.sub(lambda m: f"{m[1]}<code>{breakable(m[2], always=True)}</code>{m[3]}",
                                   cell(word)) for word in sizes_in_text(key).split(" "))


#: A word of a note's key that is a code name: an identifier with ``_`` (``do_bench``,
#: ``(begin_capture_to_if_node)``), brackets and punctuation around it kept outside the code.
_CODE_WORD = re.compile(r"^([(\[]*)([A-Za-z_][\w.]*_[\w.]*)([)\],:;]*)$")


def breakable(text: str, always: bool = False) -> str:
    """``text`` escaped for a cell, with a break opportunity (``<wbr>``) after ``_ . : , ( <`` in every
    run of :data:`LONG_TOKEN` characters or more without a space (or in every run, ``always``)."""
    out = []
    for token in text.split(" "):
        if always or len(token) >= LONG_TOKEN:
            out.append("".join(cell(ch) + ("<wbr>" if ch in "_.:,(<" else "") for ch in token))
        else:
            out.append(cell(token))
    return " ".join(out)


def _note_value(value) -> str:
    """A note's value in a cell; a raw count of bytes in its text in binary units (``1 GiB``)."""
    if isinstance(value, list):
        return "; ".join(breakable(sizes_in_text(case_value(v))) for v in value) or "none"
    shown = breakable(sizes_in_text(case_value(value)))
    return shown if shown.strip() else "none"  # an empty note (no such methods) says so


def notes(request: NotesRequest, groups: Sequence[Group], link: Callable[[Entry], str]) -> str:
    """Tabs, one per group with the notes asked for: provenance (of the latest run), the stale warning, the notes."""
    return _per_machine(request.topic, groups, lambda g: (notes_markdown(request, g), []), link)


def timeline_caption(group: Group, link: Callable[[Entry], str]) -> str:
    """Which run a timeline is from: the latest of the group, its date, a link to its record."""
    latest = group.runs[-1]
    when = run_date(latest.record.run.date)
    return (f"Timeline of the latest run, {cell(latest.run_id)} of {when} "
            f'([JSON]({link(latest)} "run {latest.run_id}, {when}"))\n{{ .lab-caption }}')


def timeline(request: TimelineRequest, groups: Sequence[Group], link: Callable[[Entry], str],
             placeholder: Callable[[Group, Timeline], str]) -> str:
    """Tabs, one per group whose latest run has the note: provenance, the stale warning, the SVG, its run.

    ``placeholder(group, timeline)`` draws the timeline and returns the token that stands for it.
    """
    def body(group: Group) -> tuple[str, list[Metric]]:
        token = placeholder(group, of_group(group, request.note))
        return f"{token}\n\n{timeline_caption(group, link)}", []

    return _per_machine(request.topic, groups, body, link)


def pick(request: ValueRequest, group: Group) -> tuple[GroupRow, Figure]:
    """The one figure a ``lab:value`` quotes: its filters must select exactly one row that has it."""
    rows = with_metric(select(group, request.where), request.metric)
    if len(rows) != 1:
        # A selection error: in a stale group, rows that the filters no longer tell apart are
        # rows of an earlier case layout (a key since folded into another), not a page error.
        cases = "; ".join(" ".join(f"{k}={v!r}" for k, v in r.case.items()) for r in rows[:4])
        raise SelectionError(
            f"lab:value needs exactly one row of topic {request.topic} on {group.slug}, "
            f"the filters select {len(rows)} ({cases}{'; …' if len(rows) > 4 else ''}): add filters"
        )
    return rows[0], metric(group, rows[0], request.metric)


def value(request: ValueRequest, group: Group) -> str:
    """The one number a sentence quotes (or its run-to-run range), with its provenance in the ``title``.

    A stale group that lacks the figure (or the statistic) shows "not yet measured by the
    current code" instead; a current one raises the :class:`SelectionError`.
    """
    try:
        return _value(request, group)
    except SelectionError as exc:
        if not group.stale:
            raise
        return not_measured_value(group, str(exc))


def _value(request: ValueRequest, group: Group) -> str:
    row, f = pick(request, group)
    a = f.across
    reading = None
    if request.spread == "range":
        shown = format_range(a.low, a.high, f.unit)
    elif request.stat == "power_w":
        # Board power names its reading (instantaneous or a one-second average), and a figure
        # timed in a window shorter than the average has none: a dash, the reason on hover.
        reading = power(f)
        shown = "—" if reading.watts is None else format_quantity(reading.watts, stat_unit(f, "power_w"))
    else:
        x = stat(f, request.stat)
        shown = str(round(x)) if request.stat == "n" else format_quantity(x, stat_unit(f, request.stat))
    case = ", ".join(f"{labels.key(request.topic, k)} {labels.case(k, v, request.topic)}" for k, v in row.case.items())
    details = [labels.metric(request.topic, request.metric) + (f" ({case})" if case else ""),
               f"{group.label} ({group.slug})"]
    if reading is not None:
        details.append(reading.title if reading.watts is None
                       else f"board power while it was timed ({reading.label}): {reading.title}")
    details.append(f"median of {plural(a.count, 'run')} {format_quantity(a.median, f.unit)}")
    if a.count > 1:
        details.append(f"run-to-run range {format_range(a.low, a.high, f.unit)} ({a.spread * 100:.0f} % of the median)")
    iqr = _iqr(f)
    if iqr is not None:
        details.append(f"IQR within a run {format_quantity(iqr, f.unit)}")
    ns = sorted({m.n for m in f.metrics if m.n is not None})
    if ns:
        details.append(f"n = {ns[0]}" if len(ns) == 1 else f"n = {ns[0]}–{ns[-1]}")
    details.append(" / ".join(dict.fromkeys(m.method for m in f.metrics)))
    details.append(f"runs {date_span([e.record.run.date for e, _ in f.per_run])}")
    classes = "lab-value"
    if group.stale:
        details.append(STALE_TITLE.lower())
        classes += " lab-value--stale"
    title = _attr(" · ".join(details))
    return f'<span class="{classes}" title="{title}">{html.escape(shown, quote=False)}</span>'


def _claim_words(result: ClaimResult) -> str:
    """``'time per token (capstone.decode ms_per_token <= 5)'``: the metric in words, the check as written."""
    r = result.request
    return f"{labels.metric_or_name(r.topic, r.metric)} ({r.describe()})"


def _unverified_badge(result: ClaimResult, v: Verdict, label: str) -> str:
    """A GPU whose stale records lack the claim's figure: neither a tick nor a cross."""
    title = (f"{_claim_words(result)} · {label} ({v.machine}): {UNVERIFIED} · {v.missing} · "
             f"latest run {run_date(v.run_date)} · {STALE_TITLE.lower()}")
    return (f'<span class="lab-claim lab-claim--unverified" title="{_attr(title)}">'
            f"{html.escape(f'{label} ? {UNVERIFIED}', quote=False)}</span>")


def _badge(result: ClaimResult, v: Verdict, label: str) -> str:
    if v.unverified:
        return _unverified_badge(result, v, label)
    shown = format_quantity(v.worst, v.unit)
    r = result.request
    which = "lowest" if r.op in (">=", ">") else "highest"
    per_run = "; ".join(f"run {p.run}: {format_quantity(p.worst, v.unit)}{'' if p.holds else ' ✗'}"
                        for p in v.per_run)
    title = (
        f"{_claim_words(result)} · {label} ({v.machine}): {'holds' if v.holds else 'VIOLATED'} "
        f"over {plural(v.rows, 'row')} in {plural(v.runs, 'run')}, {which} {shown} · "
        f"{which} per run: {per_run} · latest run {run_date(v.run_date)}"
    )
    if v.stale:
        title += f" · {STALE_TITLE.lower()}"
    state = "holds" if v.holds else "violated"
    if v.holds:
        text = f"{label} ✓ {shown} ({plural(v.runs, 'run')})"
    else:
        text = f"{label} ✗ VIOLATED: {shown} ({v.failing} of {plural(v.runs, 'run')})"
    return (f'<span class="lab-claim lab-claim--{state}" title="{_attr(title)}">'
            f"{html.escape(text, quote=False)}</span>")


def claim(result: ClaimResult, labels: dict[str, str]) -> str:
    """One badge per GPU; ``labels`` maps a group's key to its machine's short name."""
    if not result.verdicts:
        title = _attr(f"{result.request.describe()}: no GPU record to check it against")
        return f'<span class="lab-claim lab-claim--violated" title="{title}">✗ no GPU record</span>'
    badges = " ".join(_badge(result, v, labels.get(v.group, v.machine)) for v in result.verdicts)
    return f'<span class="lab-claims">{badges}</span>'


def plot_axis_label(words: str, unit: str | None) -> str:
    """An axis label in words, the unit appended: ``'time per kernel (µs)'``."""
    shown = unit_text(unit or "")
    return f"{words} ({shown})" if shown else words
