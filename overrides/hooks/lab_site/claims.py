"""Claims: a page says a metric stays on one side of a bound, and every GPU record is checked.

A claim holds on a GPU when every row its filters select satisfies it; it holds when
it holds on every GPU that has a record of its topic, and there must be at least one.
"""
from __future__ import annotations

import operator
from dataclasses import asdict, dataclass

from lab_site.shortcodes import ClaimRequest
from lab_site.store import Entry, metric, select

OPERATORS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


@dataclass(frozen=True)
class Verdict:
    """The claim on one GPU: whether it holds and the value closest to breaking it."""

    machine: str
    gpu_name: str | None
    holds: bool
    worst: float
    unit: str
    rows: int
    record: str
    run_date: str
    commit: str | None
    stale: bool


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
            "verdicts": [asdict(v) for v in self.verdicts],
        }


def verdict(request: ClaimRequest, entry: Entry) -> Verdict:
    """Check ``request`` on one record; every selected row must satisfy it."""
    check = OPERATORS[request.op]
    metrics = [metric(entry, row, request.metric) for row in select(entry, request.where)]
    values = [m.median for m in metrics]
    # The value nearest the bound: the smallest for a lower bound, the largest for an upper one.
    worst = min(values) if request.op in (">=", ">") else max(values)
    return Verdict(
        machine=entry.slug,
        gpu_name=entry.record.machine.gpu_name,
        holds=all(check(v, request.bound) for v in values),
        worst=worst,
        unit=metrics[0].unit,
        rows=len(values),
        record=entry.site_uri,
        run_date=entry.record.run.date,
        commit=entry.record.run.commit,
        stale=entry.stale,
    )


def evaluate(page: str, request: ClaimRequest, gpu_entries: list[Entry]) -> ClaimResult:
    return ClaimResult(page, request, tuple(verdict(request, e) for e in gpu_entries))
