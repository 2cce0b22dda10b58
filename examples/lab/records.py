"""The record format: one JSON file per run, machine and example.

A record is what one run of one example measured on one machine, with enough
provenance to say where every number came from. A figure of the book is the
median over several *independent runs* (separate processes, on separately
started machines), so records live in
``<records root>/<machine slug>/<topic>/<run id>.json`` (the book's own are under
``docs/records/``): runs on different machines, and many runs on one kind of
machine, merge without conflicts.

Schema version 1 (one file per machine and topic, ``<slug>/<topic>.json``, no run
id, clocks read at idle) is still read: it loads as one run whose id is ``v1``.

Every load validates: a malformed record is an error that names its file, and so is
one that cannot be true (:func:`impossible figures <check_figure>`): statistics out of
order, a negative duration, size, rate or count, a share outside its range.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Annotated, Callable, Literal, NamedTuple, Sequence, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from examples.lab.metrics import SHARES, SIGNED_METRICS, TOPIC_RATIOS

SCHEMA_VERSION = 2
#: Versions this code reads; older ones are upgraded on load.
READABLE_VERSIONS = (1, 2)
#: The run id a version-1 record (which had none) loads with.
LEGACY_RUN_ID = "v1"
#: Current runs a figure of the book needs on each kind of GPU (not all on one machine):
#: ``lab run --stale`` re-runs a topic with fewer; the site calls a figure of fewer provisional.
RUNS_PER_KIND = 3


def enough_runs(boot_ids: list[str | None]) -> bool:
    """Whether runs on these machine boots (one id per run) make a figure of the book:
    :data:`RUNS_PER_KIND` of them, not all on one machine."""
    return len(boot_ids) >= RUNS_PER_KIND and len(set(boot_ids)) >= 2

RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"

#: A case parameter or a note: plain JSON scalars, so cases can be matched by value.
Scalar = Union[bool, int, float, str, None]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: The error type of a figure that cannot be true; its ``field`` (in the error's context)
#: continues the error's location down to the one statistic at fault.
IMPOSSIBLE = "impossible_figure"


def _impossible(field: str, why: str) -> PydanticCustomError:
    return PydanticCustomError(IMPOSSIBLE, "{field}: {why}", {"field": field, "why": why})


def _in_order(named: list[tuple[str, float | None]], unit: str = "") -> None:
    """Raise at the first value of ``named`` (low to high) that is below the one before it."""
    present = [(name, v) for name, v in named if v is not None]
    for (low_name, low), (name, value) in zip(present, present[1:]):
        # A last-bit slack: interpolated quartiles and a median of two may round apart; an edit will not.
        if value < low - 1e-12 * max(abs(low), abs(value)):
            order = " ≤ ".join(n for n, _ in named)
            raise _impossible(name, f"{_quantity(value, unit)} is below {low_name} ({_quantity(low, unit)}), "
                                    f"out of the order {order}")


def _quantity(value: float, unit: str) -> str:
    return f"{value:g} {unit}" if unit else f"{value:g}"


#: What a unit measures, for the units whose figures cannot be negative; a unit not here
#: (one a reader's example invents) has no sign rule.
_DURATIONS = {"s", "ms", "us", "µs", "ns"}
_SIZES = {"B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"}
_FREQUENCIES = {"Hz", "kHz", "MHz", "GHz"}


def unit_kind(unit: str) -> str | None:
    """``'ms'`` -> ``'a duration'``: what a figure in ``unit`` is, if it cannot be negative."""
    if unit in _DURATIONS:
        return "a duration"
    if unit in _SIZES:
        return "a size"
    if unit.endswith("/s") or unit in _FREQUENCIES or unit == "FLOP/B":
        return "a rate"
    return {"": "a count or unitless figure", "x": "a ratio", "%": "a percentage", "W": "a power"}.get(unit)


def check_figure(name: str, metric: "Metric", topic: str | None = None, where: str = "") -> None:
    """Refuse a metric of ``topic`` whose values its unit forbids: below zero for a duration,
    size, rate, count, ratio or percentage (unless :data:`~examples.lab.metrics.SIGNED_METRICS`
    declares it a difference), above 1 for a unitless share (:data:`~examples.lab.metrics.SHARES`),
    above 100 for a percentage that is neither a signed change nor, in its topic, a ratio of two
    measurements (:data:`~examples.lab.metrics.TOPIC_RATIOS`). The error names the statistic
    (``where`` + ``metrics.time.min``)."""
    stats = [(s, getattr(metric, s)) for s in ("min", "q1", "median", "q3", "max")]
    stats = [(s, v) for s, v in stats if v is not None]
    signed = name in SIGNED_METRICS
    kind = None if signed else unit_kind(metric.unit)
    # A percentage is a share unless it is a signed change or a declared ratio; a unitless share is declared.
    ratio = name in TOPIC_RATIOS.get(topic or "", {})
    top = (100.0 if metric.unit == "%" and not (signed or ratio)
           else 1.0 if metric.unit == "" and name in SHARES and not ratio else None)
    for stat, value in stats:
        field = f"{where}metrics.{name}.{stat}"
        if kind is not None and value < 0:
            raise _impossible(field, f"{_quantity(value, metric.unit)} is negative, and "
                                     f"{kind} ({metric.unit or 'no unit'}) cannot be")
        if top is not None and value > top:
            raise _impossible(field, f"{_quantity(value, metric.unit)} is more than the "
                                     f"whole ({_quantity(top, metric.unit)}) of which it is a share")


class Load(_Strict):
    """What the GPU ran at while a metric was timed: medians of samples read through NVML."""

    sm_mhz: float = Field(ge=0)
    mem_mhz: float = Field(ge=0)
    power_w: float | None = Field(default=None, ge=0, description="none where the window was shorter than the reading")
    power_reading: Literal["instant", "one-second average"] | None = Field(
        default=None, description="NVML's instantaneous power field, or its one-second average (older records: unsaid)")
    samples: int = Field(ge=1)


class LoadSummary(_Strict):
    """Clocks and power over every timed region of a record (NVML samples, not an idle reading)."""

    sm_mhz_median: float = Field(ge=0)
    sm_mhz_min: float = Field(ge=0)
    sm_mhz_max: float = Field(ge=0)
    mem_mhz_median: float = Field(ge=0)
    power_w_median: float | None = Field(default=None, ge=0)
    power_w_max: float | None = Field(default=None, ge=0)
    power_reading: Literal["instant", "one-second average"] | None = None
    samples: int = Field(ge=1)
    interval_ms: float = Field(gt=0, description="sampling period")

    @model_validator(mode="after")
    def _ordered(self) -> "LoadSummary":
        _in_order([("sm_mhz_min", self.sm_mhz_min), ("sm_mhz_median", self.sm_mhz_median),
                   ("sm_mhz_max", self.sm_mhz_max)], "MHz")
        _in_order([("power_w_median", self.power_w_median), ("power_w_max", self.power_w_max)], "W")
        return self


class Metric(_Strict):
    """One measured (or computed) quantity: its median and its spread."""

    unit: str
    median: float
    q1: float | None = None
    q3: float | None = None
    min: float | None = None
    max: float | None = None
    n: int | None = Field(default=None, ge=1, description="repetitions behind the figure")
    method: str = Field(description="timer that produced it, or 'computed'")
    warmup: int | None = Field(default=None, ge=0, description="warm-up calls before the first sample")
    inner: int | None = Field(default=None, ge=1, description="calls back to back inside one sample")
    load: Load | None = Field(default=None, description="clocks and power while it was timed (GPU only)")

    @field_validator("median", "q1", "q3", "min", "max")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v

    @model_validator(mode="after")
    def _ordered(self) -> "Metric":
        # Quartiles of one set of samples: a record out of this order was edited or corrupted.
        _in_order([("min", self.min), ("q1", self.q1), ("median", self.median), ("q3", self.q3),
                   ("max", self.max)], self.unit)
        return self

    @property
    def iqr(self) -> float | None:
        if self.q1 is None or self.q3 is None:
            return None
        return self.q3 - self.q1


class Row(_Strict):
    """The metrics measured for one case (one point of the example's grid)."""

    case: dict[str, Scalar]
    metrics: dict[str, Metric]


class Check(_Strict):
    """A correctness check run before timing: the fast path against a reference."""

    name: str
    rel_error: float = Field(ge=0)
    tolerance: float = Field(ge=0)
    passed: bool


class Machine(_Strict):
    slug: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    device: Literal["cuda", "cpu"]
    gpu_name: str | None
    gpu_count: int = Field(ge=0)
    sm_count: int | None = Field(ge=1)
    compute_capability: str | None
    gpu_memory_gib: float | None = Field(gt=0)
    clocks_mhz: dict[str, Annotated[float, Field(ge=0)]] | None = Field(
        description="from nvidia-smi before the run: idle, not under load")
    power_limit_w: float | None = Field(default=None, gt=0, description="the enforced power limit (NVML)")
    driver: str | None
    cuda: str | None
    cudnn: str | None
    nccl: str | None
    torch: str
    triton: str | None
    python: str
    host_cpu: str
    host_cores: int = Field(ge=1)
    os: str


class Run(_Strict):
    id: str = Field(pattern=RUN_ID_PATTERN, description="one per process: every topic of a `lab run` shares it")
    boot_id: str | None = Field(default=None, description="the machine's boot: runs on separately started machines differ")
    wall_s: float | None = Field(default=None, ge=0, description="seconds this topic took, set-up and checks included")
    date: str = Field(description="ISO 8601, UTC")
    commit: str | None
    dirty: bool | None
    command: str
    quick: bool
    host_reference: dict[str, Annotated[float, Field(gt=0)]] | None = Field(
        default=None, description="this run's host speed: a bare Python call (ns) and a tiny device op (us)")

    @field_validator("date")
    @classmethod
    def _iso_date(cls, v: str) -> str:
        # Pages sort runs by this text and print its day: it must be a timestamp with its zone.
        try:
            when = datetime.fromisoformat(v)
        except ValueError:
            raise ValueError(f"{v!r} is not an ISO 8601 timestamp") from None
        if when.tzinfo is None:
            raise ValueError(f"{v!r} has no time zone (the runner writes UTC, +00:00)")
        return v


class Method(_Strict):
    timer: str = Field(description="default timer of the run: cuda_event, host_sync or do_bench")
    warmup: int = Field(ge=0)
    repetitions: int = Field(ge=1)


class Record(_Strict):
    schema_version: Literal[2]
    topic: str = Field(pattern=r"^[a-z0-9_]+\.[a-z0-9_]+$")
    #: The example's path in the repository: the site hashes that file to tell whether the record is current.
    source: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_./-]*$", description="relative to the repository, inside it")
    source_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    machine: Machine
    run: Run
    method: Method
    checks: list[Check]
    results: list[Row]
    #: Observations that are not figures: scalars, lists, mappings, nested as JSON
    #: allows (a profiler timeline is a mapping of lists of events).
    notes: dict[str, JsonValue] = {}
    load: LoadSummary | None = Field(default=None, description="clocks and power under load (GPU only)")

    @field_validator("source")
    @classmethod
    def _inside(cls, v: str) -> str:
        if ".." in v.split("/"):
            raise ValueError(f"{v!r} leaves the repository (a '..' part)")
        return v

    @model_validator(mode="after")
    def _not_empty(self) -> "Record":
        if not self.results and not self.notes:
            raise ValueError("a record holds results, notes or both")
        return self

    @model_validator(mode="after")
    def _possible(self) -> "Record":
        # The sign and range rules need the metric's name and, for a few, its topic.
        for i, row in enumerate(self.results):
            for name, metric in row.metrics.items():
                check_figure(name, metric, self.topic, f"results.{i}.")
        return self

    def rows(self, **where: Scalar) -> list[Row]:
        """Rows whose case has every ``key=value`` of ``where``."""
        return [r for r in self.results if all(r.case.get(k) == v for k, v in where.items())]


class RecordError(Exception):
    """A record that cannot be read or does not follow the schema."""


def _upgrade(data: dict) -> dict:
    """A version-1 record as version 2: one run with the id ``v1``, no load readings."""
    if data.get("schema_version") == 1 and isinstance(data.get("run"), dict):
        data = {**data, "schema_version": 2, "run": {"id": LEGACY_RUN_ID, **data["run"]}}
    return data


def parse_record(text: str, origin: str) -> Record:
    """Parse and validate one record; errors name ``origin`` and the field."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{origin}: not JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{origin}: a record is a JSON object, not {type(data).__name__}")
    if data.get("schema_version") not in READABLE_VERSIONS:
        raise RecordError(
            f"{origin}: schema_version {data.get('schema_version')!r} is not one this code reads "
            f"({', '.join(map(str, READABLE_VERSIONS))})"
        )
    try:
        record = Record.model_validate(_upgrade(data))
    except ValidationError as exc:
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise RecordError(f"{origin}: {error_line(exc.errors()[0])}{more}") from None
    failed = [c.name for c in record.checks if not c.passed]
    if failed:
        raise RecordError(f"{origin}: failed correctness checks: {', '.join(failed)}")
    return record


def error_line(error: dict) -> str:
    """One pydantic error as ``where: what``: ``results.3.metrics.time.q1: 0.5 ms is below ...``.

    An impossible figure's error continues its location down to the statistic (its context's
    ``field``); any error's text is one line, whatever the input held.
    """
    loc = [str(p) for p in error["loc"]]
    message = str(error["msg"]).removeprefix("Value error, ")
    if error.get("type") == IMPOSSIBLE:
        loc.append(error["ctx"]["field"])
        message = error["ctx"]["why"]
    return " ".join(f"{'.'.join(loc) or '<top>'}: {message}".split())


def relative_path(record: Record) -> str:
    """Where a record belongs under its root: ``<slug>/<topic>/<run id>.json`` (``<slug>/<topic>.json`` for v1)."""
    if record.run.id == LEGACY_RUN_ID:
        return f"{record.machine.slug}/{record.topic}.json"
    return f"{record.machine.slug}/{record.topic}/{record.run.id}.json"


def load_record(path: Path) -> Record:
    record = parse_record(path.read_text(encoding="utf-8"), str(path))
    expected = relative_path(record)
    if not path.as_posix().endswith("/" + expected) and path.as_posix() != expected:
        raise RecordError(f"{path}: a record of {record.topic} on {record.machine.slug} "
                          f"(run {record.run.id}) belongs at …/{expected}")
    return record


def record_files(root: Path) -> list[Path]:
    """Every record file under ``root``: ``<slug>/<topic>/<run>.json`` and legacy ``<slug>/<topic>.json``."""
    return sorted([*root.glob("*/*.json"), *root.glob("*/*/*.json")])


def load_records(root: Path) -> list[Record]:
    """Every record under ``root``, validated. The book's own (:data:`BOOK_RECORDS`) are read and
    validated once a process while their files are unchanged (:func:`_load_unchanged`: the tests
    ask for all of them a dozen times a worker); those records are shared, not to be modified."""
    if not root.is_dir():
        raise RecordError(f"{root}: no such records folder")
    load = _load_unchanged if root.resolve() == BOOK_RECORDS.resolve() else load_record
    return [load(p) for p in record_files(root)]


def record_path(root: Path, record: Record) -> Path:
    return root / relative_path(record)


def dump_record(record: Record) -> str:
    return json.dumps(record.model_dump(mode="json"), indent=1, sort_keys=False) + "\n"


def write_record(root: Path, record: Record) -> Path:
    """Write ``record`` under ``root``, whole or not at all (:func:`write_whole`); never what
    the loader would refuse."""
    path = record_path(root, record)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = dump_record(record)
    parse_record(text, str(path))  # never write what the loader would refuse
    write_whole(path, text)
    return path


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a run killed mid-write leaves the file
    that was there before (or none), never half a file (a temporary file in the same folder,
    flushed to disk, then renamed over the name). Raises OSError as ``open`` would."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp's file is private; the output is not
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)  # atomic on one file system: readers see the old file or the new
    except BaseException:  # KeyboardInterrupt too: no temporary file is left behind
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: The book's committed records (``docs/records/<machine>/<topic>/<run>.json``).
BOOK_RECORDS = Path(__file__).resolve().parents[2] / "docs" / "records"


_Counted = TypeVar("_Counted")  # a run as its caller holds it: a site entry, a (path, record) pair


def counted_runs(runs: Sequence[_Counted], *, version: Callable[[_Counted], str | None],
                 is_current: Callable[[_Counted], bool]) -> list[_Counted]:
    """Of one GPU kind's runs of a topic, oldest first, those whose figures the book shows: the
    runs of the code as it is now where there are any, else those of the newest code version
    that was measured (never a mix of versions). The site's groups, the pages' doctests and the
    tests that recompute a figure all count runs by this rule."""
    current = [run for run in runs if is_current(run)]
    if current or not runs:
        return current
    newest = version(runs[-1])
    return [run for run in runs if version(run) == newest]


class RunFigure(NamedTuple):
    """One committed run's median of a metric: the pages' doctests check bounds over these."""

    machine: str  # the records folder's slug: the GPU kind
    gpus: int
    run: str
    median: float


def book_records(topic: str, machine: str | None = None, *, root: Path = BOOK_RECORDS) -> list[tuple[Path, Record]]:
    """The committed runs of ``topic`` (on ``machine`` only, if given) whose figures the pages
    show, each as its path and record, in file order. As on the pages: where some runs of a GPU
    kind (and GPU count) were made by the code as it is now, only those count; a kind with none
    keeps the runs of the newest code version it measured (:func:`counted_runs`)."""
    from examples.lab.provenance import source_sha256
    from examples.lab.registry import EXAMPLES_ROOT

    source = EXAMPLES_ROOT.joinpath(*topic.split(".")).with_suffix(".py")
    current = source_sha256(source) if source.is_file() else None
    runs = [(path, _load_unchanged(path)) for path in sorted(root.glob(f"{machine or '*'}/{topic}/*.json"))]
    kinds: dict[tuple[str, int], list[tuple[Path, Record]]] = {}  # (kind, GPU count) -> its runs, oldest first
    for run in sorted(runs, key=lambda run: (run[1].run.date, run[0].stem)):
        kinds.setdefault((run[0].parts[-3], run[1].machine.gpu_count), []).append(run)
    counted = {path for of_kind in kinds.values()
               for path, _ in counted_runs(of_kind, version=lambda run: run[1].source_sha256,
                                           is_current=lambda run: run[1].source_sha256 == current)}
    return [(path, record) for path, record in runs if path in counted]


def book_figures(topic: str, metric: str, machine: str | None = None, *, root: Path = BOOK_RECORDS,
                 **case) -> list[RunFigure]:
    """``metric``'s median in every counted run of ``topic`` (:func:`book_records`), from the
    rows whose case has every ``key=value`` of ``case``; in file order."""
    return [RunFigure(path.parts[-3], record.machine.gpu_count, path.stem, row.metrics[metric].median)
            for path, record in book_records(topic, machine, root=root)
            for row in record.results
            if metric in row.metrics and all(row.case.get(k) == v for k, v in case.items())]


#: path -> (its modification time and size, its record): the pages' doctests ask for the same
#: records hundreds of times a session; a file is read and validated again only if it changed.
_LOADED: dict[Path, tuple[tuple[int, int], Record]] = {}


def _load_unchanged(path: Path) -> Record:
    stat = path.stat()
    stamp = (stat.st_mtime_ns, stat.st_size)
    kept = _LOADED.get(path)
    if kept is None or kept[0] != stamp:
        kept = _LOADED[path] = (stamp, load_record(path))
    return kept[1]


def book_medians(topic: str, metric: str, machine: str | None = None, **case) -> list[float]:
    """The medians of :func:`book_figures`: one figure per committed run."""
    return [figure.median for figure in book_figures(topic, metric, machine, **case)]

