"""Where a tab's numbers come from: one quiet line above a table or plot that opens, and the stale warning.

The line (a closed ``details``: a reader opens it by tap, click or keyboard) says the
machine, how many runs, on which days, and links to every run's record; opened, it names
the machine and software of the runs, how many runs there were, when and at which
commits, the clocks and power the GPU ran at under load (where the records sampled them;
the power with the reading it is, :mod:`lab_site.power`), and the timers that produced
the figures *shown* (each metric says its own: a page may mix CUDA events with a
profiler's clock).
"""
from __future__ import annotations

import html
from collections.abc import Callable, Iterable

from examples.lab.records import Metric

from lab_site import power as power_mod
from lab_site.fmt import NBSP, date_span, int_span, plural, run_date, short_commit
from lab_site.store import Entry, Group

#: The short names of the months, for the days of a provenance line's summary.
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
STALE_TITLE = "Measured on an earlier version of this code"
#: What a page shows where every run of a group is stale and lacks the figure it asks for:
#: the code as it is now may measure it (or measure it under a new name or case), but no
#: record made by that code exists yet. A current group that lacks it is a page error.
NOT_MEASURED = "not yet measured by the current code"
NOT_MEASURED_TITLE = "Not yet measured by the current code"
INDENT = "    "


def _distinct(values: Iterable) -> list:
    return list(dict.fromkeys(v for v in values if v is not None))


def methods(metrics: Iterable[Metric]) -> str | None:
    """The timers behind ``metrics``, each with its repetitions, warm-up and calls per sample where known."""
    by_timer: dict[str, list[Metric]] = {}
    for m in metrics:
        if m.method != "computed":  # a ratio or a rate of timed figures: its inputs say how they were timed
            by_timer.setdefault(m.method, []).append(m)
    parts = []
    for timer, ms in by_timer.items():
        bits = []
        if (n := int_span(m.n for m in ms)) is not None:
            bits.append(f"{n} repetitions")
        if (warmup := int_span(m.warmup for m in ms)) is not None:
            bits.append(f"after {warmup} warm-up")
        if (inner := int_span(m.inner for m in ms if m.inner and m.inner > 1)) is not None:
            bits.append(f"{inner} calls per sample")
        parts.append(f"timer `{timer}`" + (f" ({' '.join(bits)})" if bits else ""))
    return "; ".join(parts) or None


def under_load(group: Group) -> str | None:
    """``'SM 1,410–1,755 MHz, 690 W of 700 W under load (power: instantaneous)'``: the runs' median
    SM clock and board power, the power named by its reading (its meaning on hover); where no
    run has a power figure (timed windows shorter than NVML's one-second average), none."""
    loads = [e.record.load for e in group.runs if e.record.load is not None]
    if not loads:
        return None
    # Whole numbers: NVML reads clocks to the MHz and board power to the watt or so.
    whole = lambda x: f"{round(x):,}"  # noqa: E731
    low, high = min(s.sm_mhz_median for s in loads), max(s.sm_mhz_median for s in loads)
    text = f"SM {whole(low)}{'' if whole(low) == whole(high) else '–' + whole(high)}{NBSP}MHz"
    power = power_mod.summarize((s.power_w_median, s.power_reading) for s in loads)
    if power.watts is None:
        return text + f' under load (<span title="{html.escape(power.title)}">no power figure</span>)'
    text += f", {whole(power.watts)} W"
    limits = _distinct(e.record.machine.power_limit_w for e in group.runs)
    if limits:
        text += f" of {' / '.join(whole(w) for w in limits)} W"
    return text + f' under load (power: <span title="{html.escape(power.title)}">{power.label}</span>)'


def runs_text(group: Group) -> str:
    """``'3 runs 2026-11-20 to 2026-11-22, commit 0123456'`` (and the stale runs left out)."""
    runs = [e.record.run for e in group.runs]
    commits = _distinct(short_commit(r.commit, r.dirty) for r in runs)
    text = f"{plural(len(runs), 'run')} {date_span([r.date for r in runs])}"
    text += f", commit{'s' if len(commits) > 1 else ''} {', '.join(commits)}"
    if group.left_out:
        text += f" ({plural(len(group.left_out), 'stale run')} of older code left out)"
    return text


def run_links(runs: Iterable[Entry], link: Callable[[Entry], str]) -> str:
    """``runs: 1 2 3``, each a link to that run's JSON, its id and date in the title."""
    items = [f'[{i}]({link(e)} "run {e.run_id}, {run_date(e.record.run.date)}")' for i, e in enumerate(runs, 1)]
    return "runs (JSON): " + " ".join(items)


def days(isos: Iterable[str]) -> str:
    """The days of some ISO timestamps, short: ``'27 Nov 2026'``, ``'25–27 Nov 2026'``,
    ``'30 Nov – 2 Dec 2026'``, ``'30 Dec 2026 – 2 Jan 2027'``."""
    found = sorted({run_date(d) for d in isos})
    (y0, m0, d0), (y1, m1, d1) = (tuple(map(int, found[i].split("-"))) for i in (0, -1))
    first, last = f"{d0} {MONTHS[m0 - 1]}", f"{d1} {MONTHS[m1 - 1]} {y1}"
    if (y0, m0, d0) == (y1, m1, d1):
        return last
    if (y0, m0) == (y1, m1):
        return f"{d0}–{last}"
    return f"{first} – {last}" if y0 == y1 else f"{first} {y0} – {last}"


def summary(group: Group, link: Callable[[Entry], str]) -> str:
    """The line a reader sees before opening the provenance: ``'NVIDIA H200 · 3 runs · 20–22 Nov 2026 ·
    JSON: 1 2 3'``, each number a link to that run's record."""
    runs = group.runs
    items = [f'[{i}]({link(e)} "run {e.run_id}, {run_date(e.record.run.date)}")' for i, e in enumerate(runs, 1)]
    name = group.label.replace('"', "'")
    return f"{name} · {plural(len(runs), 'run')} · {days([e.record.run.date for e in runs])} · JSON: {' '.join(items)}"


def line(group: Group, link: Callable[[Entry], str], metrics: Iterable[Metric] = (), lead: str = "") -> str:
    """The provenance of a tab, folded: a closed ``details`` whose summary (after ``lead``) is
    :func:`summary` and whose body is the whole of :func:`text` (machine, software, runs, load,
    the timers of ``metrics``, links)."""
    body = text(group, link, metrics, links=False)  # the summary has them
    title = (lead + summary(group, link)).replace("\n", " ")
    return f'??? lab-provenance "{title}"\n\n{INDENT}{body}'


def text(group: Group, link: Callable[[Entry], str], metrics: Iterable[Metric] = (), links: bool = True) -> str:
    """The provenance of a tab in full: machine, software, runs, load, the timers of ``metrics``, links
    to the runs' records (unless ``links`` is false: the folded line's summary holds them)."""
    machines = [e.record.machine for e in group.runs]
    m = group.record.machine
    joined = lambda values: " / ".join(_distinct(values)) or "unknown"  # noqa: E731
    parts: list[str] = []
    if group.is_gpu:
        parts.append(m.gpu_name or "unknown GPU")
        if m.sm_count:
            parts.append(f"{m.sm_count} SMs")
        parts.append(f"driver {joined(x.driver for x in machines)}")
        parts.append(f"CUDA {joined(x.cuda for x in machines)}")
    else:
        parts.append(f"{m.host_cpu} ({m.host_cores} cores)")
    parts.append(f"torch {joined(x.torch for x in machines)}")
    tritons = _distinct(x.triton for x in machines)
    parts.append(f"Triton {' / '.join(tritons)}" if tritons else "no Triton")
    parts.append(runs_text(group))
    if (load := under_load(group)) is not None:
        parts.append(load)
    if (timers := methods(metrics)) is not None:
        parts.append(timers)
    if any(e.record.run.quick for e in group.runs):
        parts.append("quick run (CI sizes)")
    if links:
        parts.append(run_links(group.runs, link))
    return " · ".join(parts)


def stale_reason(group: Group) -> str:
    """The group's stale reason as a sentence starts, its source file in code."""
    source = group.record.source
    reason = (group.stale_reason or "").replace(source, f"`{source}`", 1)
    return reason[:1].upper() + reason[1:]


def rerun_command(group: Group) -> str:
    return f"python -m examples.lab run {group.topic} --out DIR"


def stale_note(group: Group) -> str:
    return (
        f'!!! warning "{STALE_TITLE}"\n\n'
        f"{INDENT}{stale_reason(group)}: the numbers below were measured by the code as it was on "
        f"{date_span([e.record.run.date for e in group.runs])}. Rerun `{rerun_command(group)}` to refresh them.\n"
    )


def not_measured_note(group: Group, missing: str) -> str:
    """The body of a tab whose group is stale and lacks what the shortcode asks for (``missing`` says what)."""
    return (
        f'!!! warning "{NOT_MEASURED_TITLE}"\n\n'
        f"{INDENT}{stale_reason(group)}, and its records (made on "
        f"{date_span([e.record.run.date for e in group.runs])}) lack what this shows: "
        f"{html.escape(missing, quote=False)}. Rerun `{rerun_command(group)}` to measure it with the code "
        f"as it is now.\n"
    )

