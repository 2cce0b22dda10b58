"""What a shortcode turns into: Markdown (tabs, tables, provenance) and inline HTML (values, badges).

Nothing here reads files or knows about MkDocs: it takes loaded records and requests and
returns text, so it can be tested on its own.
"""
from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from lab_site import LabError
from lab_site.claims import ClaimResult, Verdict
from lab_site.fmt import format_quantity, run_date, short_commit, unit_text
from lab_site.shortcodes import NotesRequest, PlotRequest, TableRequest, ValueRequest
from lab_site.store import Entry, SelectionError, metric, select, stat

STALE_TITLE = "Measured on an earlier version of this code"
INDENT = "    "


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


def provenance(entry: Entry, link: str) -> str:
    """One line saying where the numbers of ``entry`` come from, ending with a link to the record."""
    m, run, method = entry.record.machine, entry.record.run, entry.record.method
    parts: list[str] = []
    if entry.is_gpu:
        parts.append(m.gpu_name or "unknown GPU")
        if m.sm_count:
            parts.append(f"{m.sm_count} SMs")
        parts.append(f"driver {m.driver or 'unknown'}")
        parts.append(f"CUDA {m.cuda or 'unknown'}")
    else:
        parts.append(f"{m.host_cpu} ({m.host_cores} cores)")
    parts.append(f"torch {m.torch}")
    parts.append(f"Triton {m.triton}" if m.triton else "no Triton")
    parts.append(f"run {run_date(run.date)}")
    parts.append(f"commit {short_commit(run.commit, run.dirty)}")
    if entry.record.results:  # a record of notes only timed nothing
        parts.append(f"{method.repetitions} repetitions after {method.warmup} warm-up, timer `{method.timer}`")
    if run.quick:
        parts.append("quick run (CI sizes)")
    return " · ".join(parts) + f" · [record (JSON)]({link})\n{{ .lab-provenance }}"


def stale_note(entry: Entry) -> str:
    command = f"python -m examples.lab run {entry.record.topic} --out DIR"
    source = entry.record.source
    reason = (entry.stale_reason or "").replace(source, f"`{source}`", 1)
    return (
        f'!!! warning "{STALE_TITLE}"\n\n'
        f"{INDENT}{reason}: the numbers below were measured by the code as it was on "
        f"{run_date(entry.record.run.date)}. Rerun `{command}` to refresh them.\n"
    )


def _cell(text: str) -> str:
    return html.escape(str(text), quote=False).replace("|", "\\|")


def table_markdown(request: TableRequest, entry: Entry) -> str:
    """One row per case, the case keys as columns, then one column per metric (median and IQR)."""
    rows = select(entry, request.where)
    names = list(request.metrics) if request.metrics else list(dict.fromkeys(n for r in rows for n in r.metrics))
    for name in names:
        if not any(name in r.metrics for r in rows):
            have = ", ".join(dict.fromkeys(n for r in rows for n in r.metrics))
            raise SelectionError(f"topic {entry.record.topic} on {entry.slug} has no metric {name!r} (metrics: {have})")
    # Naming metrics also picks rows: only those that have at least one of them,
    # and only the case keys those rows use.
    rows = [r for r in rows if any(name in r.metrics for name in names)]
    keys = list(dict.fromkeys(k for row in rows for k in row.case))
    lines = [
        "| " + " | ".join([*map(_cell, keys), *map(_cell, names)]) + " |",
        "|" + "|".join([":--"] * len(keys) + ["--:"] * len(names)) + "|",
    ]
    for row in rows:
        cells = [_cell(_case_value(row.case.get(k, ""))) for k in keys]
        for name in names:
            cells.append(_metric_cell(row.metrics[name]) if name in row.metrics else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _case_value(value) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "—"}[value]
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _metric_cell(m) -> str:
    text = format_quantity(m.median, m.unit)
    if m.iqr is not None:
        spread = format_quantity(m.iqr, m.unit)
        text += f' <span class="lab-iqr" title="interquartile range (q3 − q1)">IQR {spread}</span>'
    return text


def _per_machine(topic: str, entries: Sequence[Entry], body: Callable[[Entry], str],
                 link: Callable[[Entry], str]) -> str:
    """Tabs, one per machine that has rows for the request: provenance, the stale warning, ``body``.

    A machine whose record has no row (or no metric) the request asks for is left out
    (a CPU does not replay CUDA graphs); if that leaves none, the first reason is the error.
    """
    if not entries:
        raise LabError(f"no record of topic {topic} in any records folder")
    items, reasons = [], []
    for entry in entries:
        try:
            content = body(entry)
        except SelectionError as exc:
            reasons.append(exc)
            continue
        parts = [provenance(entry, link(entry))]
        if entry.stale:
            parts.append(stale_note(entry))
        parts.append(content)
        items.append((entry.label, "\n\n".join(parts)))
    if not items:
        raise reasons[0]
    return tabs(items)


def table(request: TableRequest, entries: Sequence[Entry], link: Callable[[Entry], str]) -> str:
    """Tabs, one per machine: provenance, the stale warning where due, the table."""
    return _per_machine(request.topic, entries, lambda e: table_markdown(request, e), link)


def plot(request: PlotRequest, entries: Sequence[Entry], link: Callable[[Entry], str],
         placeholder: Callable[[Entry], str]) -> str:
    """Tabs, one per machine: provenance, the stale warning where due, a placeholder for the SVG.

    ``placeholder(entry)`` draws the plot and returns the token that stands for it.
    """
    return _per_machine(request.topic, entries, placeholder, link)


def notes_markdown(request: NotesRequest, entry: Entry) -> str:
    """A record's notes (what an example observed rather than timed) as a table.

    One row per note; a note that is a mapping spreads over one column per key, a list
    is joined with semicolons, anything else goes in the column "value".
    """
    notes = entry.record.notes
    names = list(request.keys) if request.keys else list(notes)
    missing = [n for n in names if n not in notes]
    if missing or not names:
        raise SelectionError(
            f"topic {entry.record.topic} on {entry.slug} has no note {missing[0]!r} (notes: {', '.join(notes) or 'none'})"
            if missing else f"topic {entry.record.topic} on {entry.slug} has no notes"
        )
    columns = list(dict.fromkeys(k for n in names if isinstance(notes[n], dict) for k in notes[n]))
    if any(not isinstance(notes[n], dict) for n in names):
        columns.append("value")
    lines = ["| note | " + " | ".join(map(_cell, columns)) + " |", "|" + "|".join([":--"] * (len(columns) + 1)) + "|"]
    for name in names:
        note = notes[name]
        cells = note if isinstance(note, dict) else {"value": note}
        shown = [_note_value(cells[c]) if c in cells else "—" for c in columns]
        lines.append(f"| {_cell(name)} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def _note_value(value) -> str:
    if isinstance(value, list):
        return "; ".join(_cell(_case_value(v)) for v in value)
    return _cell(_case_value(value))


def notes(request: NotesRequest, entries: Sequence[Entry], link: Callable[[Entry], str]) -> str:
    """Tabs, one per machine with the notes asked for: provenance, the stale warning, the notes."""
    return _per_machine(request.topic, entries, lambda e: notes_markdown(request, e), link)


def value(request: ValueRequest, entry: Entry) -> str:
    """The one number a sentence quotes, with its provenance in the ``title``."""
    rows = select(entry, request.where)
    if len(rows) != 1:
        cases = "; ".join(" ".join(f"{k}={v!r}" for k, v in r.case.items()) for r in rows[:4])
        raise LabError(
            f"lab:value needs exactly one row of topic {request.topic} on {entry.slug}, "
            f"the filters select {len(rows)} ({cases}{'; …' if len(rows) > 4 else ''}): add filters"
        )
    m = metric(entry, rows[0], request.metric)
    x = stat(m, request.stat)
    shown = str(int(x)) if request.stat == "n" else format_quantity(x, m.unit)
    details = [f"{entry.label} ({entry.slug})", f"median {format_quantity(m.median, m.unit)}"]
    if m.iqr is not None:
        details.append(f"IQR {format_quantity(m.iqr, m.unit)}")
    if m.n is not None:
        details.append(f"n = {m.n}")
    details.append(f"{m.method}")
    details.append(f"run {run_date(entry.record.run.date)}")
    classes = "lab-value"
    if entry.stale:
        details.append(STALE_TITLE.lower())
        classes += " lab-value--stale"
    title = html.escape(" · ".join(details), quote=True)
    return f'<span class="{classes}" title="{title}">{html.escape(shown, quote=False)}</span>'


def _badge(result: ClaimResult, v: Verdict, label: str) -> str:
    shown = format_quantity(v.worst, v.unit)
    r = result.request
    which = "lowest" if r.op in (">=", ">") else "highest"
    title = (
        f"{r.describe()} · {label} ({v.machine}): {'holds' if v.holds else 'VIOLATED'} "
        f"over {v.rows} row{'s' if v.rows != 1 else ''}, {which} {shown} · run {run_date(v.run_date)}"
    )
    if v.stale:
        title += f" · {STALE_TITLE.lower()}"
    state = "holds" if v.holds else "violated"
    text = f"{label} ✓ {shown}" if v.holds else f"{label} ✗ VIOLATED: {shown}"
    return (f'<span class="lab-claim lab-claim--{state}" title="{html.escape(title, quote=True)}">'
            f"{html.escape(text, quote=False)}</span>")


def claim(result: ClaimResult, labels: dict[str, str]) -> str:
    """One badge per GPU; ``labels`` maps a record's site path to its machine's short name."""
    if not result.verdicts:
        title = html.escape(f"{result.request.describe()}: no GPU record to check it against", quote=True)
        return f'<span class="lab-claim lab-claim--violated" title="{title}">✗ no GPU record</span>'
    badges = " ".join(_badge(result, v, labels.get(v.record, v.machine)) for v in result.verdicts)
    return f'<span class="lab-claims">{badges}</span>'


def plot_axis_label(name: str, unit: str | None) -> str:
    shown = unit_text(unit or "")
    return f"{name} ({shown})" if shown else name
