"""Claims: a page says a metric stays on one side of a bound, and every GPU's runs are checked.

A claim holds on a kind of GPU (a group of runs) when every row its filters select
satisfies it in *every* run: the median of the runs would hide a run that breaks it.
It holds when it holds on every GPU that has records of its topic, and there must be
at least one.
"""
from __future__ import annotations

import operator
from dataclasses import asdict, dataclass

from lab_site.figures import metric, select
from lab_site.shortcodes import ClaimRequest
from lab_site.store import Group

OPERATORS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


@dataclass(frozen=True)
class RunVerdict:
    """The claim in one run: the value nearest the bound over the selected rows."""

    run: str
    worst: float
    holds: bool
    record: str  # the run's file in the site


@dataclass(frozen=True)
class Verdict:
    """The claim on one GPU over all its runs: whether it holds in each, and the value closest to breaking it."""

    machine: str
    gpu_name: str | None
    holds: bool
    worst: float
    unit: str
    rows: int
    runs: int
    per_run: tuple[RunVerdict, ...]
    group: str  # Group.key: which tab, and which root, the runs come from
    record: str  # the file of the run with the worst value
    run_date: str  # the latest run's
    commit: str | None
    stale: bool

    @property
    def failing(self) -> int:
        return sum(not r.holds for r in self.per_run)


@dataclass(frozen=True)
class ClaimResult:
    page: str
    request: ClaimRequest
    verdicts: tuple[Verdict, ...]

    @property
    def holds(self) -> bool:
        return bool(self.verdicts) and all(v.holds for v in self.verdicts)

    @property
    def violated(self) -> tuple[Verdict, ...]:
        return tuple(v for v in self.verdicts if not v.holds)

    def to_json(self) -> dict:
        r = self.request
        return {
            "page": self.page,
            "claim": r.describe(),
            "topic": r.topic,
            "metric": r.metric,
            "op": r.op,
            "bound": r.bound,
            "where": r.where,
            "holds": self.holds,
            "runs_min": min((v.runs for v in self.verdicts), default=0),
            "verdicts": [asdict(v) for v in self.verdicts],
        }


def _nearest(op: str, values: list[float]) -> float:
    # The value nearest the bound: the smallest for a lower bound, the largest for an upper one.
    return min(values) if op in (">=", ">") else max(values)


def verdict(request: ClaimRequest, group: Group) -> Verdict:
    """Check ``request`` on every run of ``group``; every selected row of every run must satisfy it."""
    check = OPERATORS[request.op]
    figures = [metric(group, row, request.metric) for row in select(group, request.where)]
    per_run = []
    for entry in group.runs:
        values = [m.median for f in figures for e, m in f.per_run if e is entry]
        if values:  # a run that measured none of the selected rows says nothing about the claim
            worst = _nearest(request.op, values)
            per_run.append(RunVerdict(entry.run_id, worst, all(check(v, request.bound) for v in values),
                                      entry.site_uri))
    worst = _nearest(request.op, [r.worst for r in per_run])
    return Verdict(
        machine=group.slug,
        gpu_name=group.record.machine.gpu_name,
        holds=all(r.holds for r in per_run),
        worst=worst,
        unit=figures[0].unit,
        rows=len(figures),
        runs=len(per_run),
        per_run=tuple(per_run),
        group=group.key,
        record=next(r.record for r in per_run if r.worst == worst),
        run_date=group.record.run.date,
        commit=group.record.run.commit,
        stale=group.stale,
    )


def evaluate(page: str, request: ClaimRequest, gpu_groups: list[Group]) -> ClaimResult:
    return ClaimResult(page, request, tuple(verdict(request, g) for g in gpu_groups))
