"""The figures of a group of runs: its rows merged across runs, selected by case.

Each run of a group holds rows (a case and its metrics). Rows of different runs with
the same case (equal as JSON values) merge into one :class:`GroupRow`, whose metrics
are :class:`Figure`\\ s: every run's :class:`~examples.lab.records.Metric` for that case,
and the median of their medians (``lab_site.runs``). A page's filters select among the
merged rows, so a table, a plot, a value and a claim all see the same figures.
"""
from __future__ import annotations

import functools
import math
import weakref
from dataclasses import dataclass

from examples.lab.records import Metric

from lab_site import LabError
from lab_site import power as power_mod
from lab_site.runs import Across, across, median_of
from lab_site.shortcodes import Scalar
from lab_site.store import Entry, Group


class SelectionError(LabError):
    pass


@dataclass(frozen=True)
class Figure:
    """One metric of one case over the runs that measured it."""

    unit: str
    per_run: tuple[tuple[Entry, Metric], ...]  # in run order

    @functools.cached_property
    def across(self) -> Across:
        return across(m.median for _, m in self.per_run)

    @property
    def median(self) -> float:
        return self.across.median

    @property
    def runs(self) -> int:
        return self.across.count

    @property
    def metrics(self) -> tuple[Metric, ...]:
        return tuple(m for _, m in self.per_run)


@dataclass(frozen=True)
class GroupRow:
    case: dict[str, Scalar]
    metrics: dict[str, Figure]


def _same(a: Scalar, b: Scalar) -> bool:
    """Equal as JSON values: ``True`` is not ``1``, ``32`` is ``32.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def _case_key(case: dict[str, Scalar]) -> tuple:
    # 32 and 32.0 hash and compare equal; the flag keeps True apart from 1.
    return tuple(sorted((k, isinstance(v, bool), v) for k, v in case.items()))


#: Merged rows per group, kept while the group lives (a build asks for each topic many times).
_MERGED: weakref.WeakKeyDictionary[Group, tuple[GroupRow, ...]] = weakref.WeakKeyDictionary()


def _merged(group: Group) -> tuple[GroupRow, ...]:
    if group not in _MERGED:
        _MERGED[group] = _merge(group)
    return _MERGED[group]


def _merge(group: Group) -> tuple[GroupRow, ...]:
    cases: dict[tuple, dict[str, Scalar]] = {}
    per: dict[tuple, dict[str, list[tuple[Entry, Metric]]]] = {}
    for entry in group.runs:
        for row in entry.record.results:
            key = _case_key(row.case)
            cases.setdefault(key, row.case)
            metrics = per.setdefault(key, {})
            for name, m in row.metrics.items():
                metrics.setdefault(name, []).append((entry, m))
    out = []
    for key, case in cases.items():
        figures = {}
        for name, pairs in per[key].items():
            units = {m.unit for _, m in pairs}
            if len(units) > 1:
                raise LabError(f"topic {group.topic} on {group.slug}: metric {name!r} comes in several units "
                               f"across runs ({', '.join(sorted(units))})")
            figures[name] = Figure(units.pop(), tuple(pairs))
        out.append(GroupRow(case, figures))
    return tuple(out)


def rows(group: Group) -> list[GroupRow]:
    """Every case any run of ``group`` measured, in the order the runs first measured them."""
    return list(_merged(group))


def select(group: Group, where: dict[str, Scalar]) -> list[GroupRow]:
    """The rows of ``group`` whose case has every ``key=value`` of ``where``; at least one."""
    merged = rows(group)
    keys = {k for r in merged for k in r.case}
    for key in where:
        if key not in keys:
            raise SelectionError(
                f"topic {group.topic} on {group.slug} has no case key {key!r} "
                f"(keys: {', '.join(sorted(keys)) or 'none'})"
            )
    chosen = [r for r in merged if all(k in r.case and _same(r.case[k], v) for k, v in where.items())]
    if not chosen:
        seen = "; ".join(
            f"{k}: {', '.join(sorted({repr(r.case.get(k)) for r in merged}))}" for k in where
        )
        wanted = " ".join(f"{k}={v!r}" for k, v in where.items())
        raise SelectionError(f"no row of topic {group.topic} on {group.slug} has {wanted} (values seen: {seen})")
    return chosen


def with_metric(rows: list[GroupRow], name: str) -> list[GroupRow]:
    """The selected rows a figure of ``name`` is read from. A filter that names fewer keys
    than a case has may also select rows of another case layout, refined by a key that no
    row with the metric has (counts per grad mode beside the step's timings): those are
    left out. A row of the metric's own layout that lacks it stays, so that the missing
    figure is still reported, as is a metric that no row has."""
    have = [r for r in rows if name in r.metrics]
    keys = {k for r in have for k in r.case}
    return [r for r in rows if name in r.metrics or not have or set(r.case) <= keys]


def metric(group: Group, row: GroupRow, name: str) -> Figure:
    found = row.metrics.get(name)
    if found is None:
        case = " ".join(f"{k}={v!r}" for k, v in row.case.items())
        raise SelectionError(
            f"topic {group.topic} on {group.slug} has no metric {name!r} for {case} "
            f"(metrics: {', '.join(row.metrics) or 'none'})"
        )
    return found


#: Statistics of the GPU's state while a metric was timed (NVML samples), with their units.
LOAD_STATS = {"sm_mhz": "MHz", "mem_mhz": "MHz", "power_w": "W"}


def stat_unit(figure: Figure, which: str) -> str:
    """The unit a statistic is quoted in: the metric's own, or a clock's or power's."""
    return LOAD_STATS.get(which, figure.unit)


def power(figure: Figure) -> power_mod.Power:
    """The board power sampled while ``figure`` was timed: the median over runs that have a figure,
    which reading each is, and how many runs have none (a window shorter than the averaged reading)."""
    loads = [m.load for m in figure.metrics if m.load is not None]
    if not loads:
        raise SelectionError("the metric has no power_w: no clocks or power were sampled while it "
                             "was timed (a CPU run, or a region shorter than the sampling period)")
    return power_mod.summarize((load.power_w, load.power_reading) for load in loads)


def stat(figure: Figure, which: str) -> float:
    """One statistic across runs: the median over runs of each run's median, iqr, q1, q3 or n,
    or of the SM clock, memory clock or board power sampled while the metric was timed."""
    if which == "power_w":
        watts = power(figure).watts
        if watts is None:
            raise SelectionError(f"the metric has no power_w: {power_mod.NO_FIGURE}")
        return watts
    if which in LOAD_STATS:
        values = [getattr(m.load, which) for m in figure.metrics if m.load is not None]
        if not values:
            raise SelectionError(f"the metric has no {which}: no clocks or power were sampled while it "
                                 "was timed (a CPU run, or a region shorter than the sampling period)")
        return median_of(values)
    values = [m.iqr if which == "iqr" else getattr(m, which) for m in figure.metrics]
    values = [v for v in values if v is not None]
    if not values:
        raise SelectionError(f"the metric has no {which} (computed figures carry only a median)")
    value = median_of(values)
    if not math.isfinite(value):
        raise SelectionError(f"the metric's {which} is not finite")
    return value
