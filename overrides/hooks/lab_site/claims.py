"""Claims: a page says a metric stays on one side of a bound, and every GPU's runs are checked.

A claim holds on a kind of GPU (a group of runs) when every row its filters select
satisfies it in *every* run: the median of the runs would hide a run that breaks it.
It holds when it holds on every GPU that has records of its topic, and there must be
at least one.

A GPU whose runs are all stale (made by code that has changed since) and lack the
claim's metric or rows cannot check it: the code as it is now may measure it under
that name, the records predate it. Its verdict is *unverified*, which neither holds
nor breaks the claim. A GPU with a current run that lacks the figure is an error: the
page asks for something the code does not measure.
"""
from __future__ import annotations


import operator
from dataclasses import asdict, dataclass

from lab_site.figures import SelectionError, metric, select, with_metric
from lab_site.shortcodes import ClaimRequest
from lab_site.store import Group, of_kind

OPERATORS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}
#: The verdict of a GPU whose stale records lack the claim's figure, in words.
UNVERIFIED = "unverified: stale records lack this figure"


@dataclass(frozen=True)
class RunVerdict:
    """The claim in one run: the value nearest the bound over the selected rows."""

    run: str
    worst: float
    holds: bool
    record: str  # the run's file in the site


@dataclass(frozen=True)
class Verdict:
    """The claim on one GPU over all its runs: whether it holds in each, and the value closest to breaking it.

    An unverified verdict (``missing`` says what the stale records lack) has no value,
    no unit, no rows and no runs, and does not hold.
    """

    machine: str
    gpu_name: str | None
    holds: bool
    worst: float | None
    unit: str | None
    rows: int
    runs: int
    per_run: tuple[RunVerdict, ...]
    group: str  # Group.key: which tab, and which root, the runs come from
    record: str  # the file of the run with the worst value
    run_date: str  # the latest run's
    commit: str | None
    stale: bool
    missing: str | None = None  # what the stale records lack: the verdict is unverified

    @property
    def failing(self) -> int:
        return sum(not r.holds for r in self.per_run)

    @property
    def unverified(self) -> bool:
        return self.missing is not None

    @property
    def status(self) -> str:
        """``holds``, ``violated`` or ``unverified``."""
        return "unverified" if self.unverified else "holds" if self.holds else "violated"


@dataclass(frozen=True)
class ClaimResult:
    page: str
    request: ClaimRequest
    verdicts: tuple[Verdict, ...]

    @property
    def holds(self) -> bool:
        """Checked and kept on every GPU: an unverified GPU leaves the claim not (yet) holding."""
        return bool(self.verdicts) and all(v.holds for v in self.verdicts)

    @property
    def violated(self) -> tuple[Verdict, ...]:
        return tuple(v for v in self.verdicts if v.status == "violated")

    @property
    def unverified(self) -> tuple[Verdict, ...]:
        return tuple(v for v in self.verdicts if v.unverified)

    @property
    def status(self) -> str:
        """``violated`` if any GPU breaks it, else ``unverified`` if any cannot check it, else ``holds``;
        ``no GPU record`` where none has its topic."""
        if not self.verdicts:
            return "no GPU record"
        return "violated" if self.violated else "unverified" if self.unverified else "holds"

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
            "machine": r.machine,
            "holds": self.holds,
            "status": self.status,
            "runs_min": min((v.runs for v in self.verdicts), default=0),
            "verdicts": [{**asdict(v), "status": v.status} for v in self.verdicts],
        }


def _nearest(op: str, values: list[float]) -> float:
    # The value nearest the bound: the smallest for a lower bound, the largest for an upper one.
    return min(values) if op in (">=", ">") else max(values)


def verdict(request: ClaimRequest, group: Group) -> Verdict:
    """Check ``request`` on every run of ``group``; every selected row of every run must satisfy it.

    Where the selected rows or the metric are missing, a stale group's verdict is unverified;
    a current group's is the :class:`~lab_site.figures.SelectionError`.
    """
    check = OPERATORS[request.op]
    try:
        figures = [metric(group, row, request.metric)
                   for row in with_metric(select(group, request.where), request.metric)]
    except SelectionError as exc:
        if not group.stale:
            raise
        return unverified(group, str(exc))
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


def unverified(group: Group, missing: str) -> Verdict:
    """The verdict of a stale group that lacks the claim's figure: it neither holds nor breaks the claim."""
    return Verdict(
        machine=group.slug,
        gpu_name=group.record.machine.gpu_name,
        holds=False,
        worst=None,
        unit=None,
        rows=0,
        runs=0,
        per_run=(),
        group=group.key,
        record=group.site_uri,
        run_date=group.record.run.date,
        commit=group.record.run.commit,
        stale=True,
        missing=missing,
    )


def evaluate(page: str, request: ClaimRequest, gpu_groups: list[Group]) -> ClaimResult:
    return ClaimResult(page, request, tuple(verdict(request, g) for g in gpu_groups if can_measure(request, g)))


def can_measure(request: ClaimRequest, group: Group) -> bool:
    """A claim about ``gpus=p`` says nothing about a machine with fewer than p GPUs: the
    runs on two GPUs of a topic that measures 2 and 4 are not asked about 4. A claim about
    one kind of GPU (``machine=SLUG``) is asked only of that kind's machines."""
    wanted = request.where.get("gpus")
    if isinstance(wanted, int) and group.record.machine.gpu_count < wanted:
        return False
    return request.machine is None or of_kind(group.slug, request.machine)

