"""The record format: one JSON file per machine and example.

A record is what one run of one example measured on one machine, with enough
provenance to say where every number came from. Records live in
``<records root>/<machine slug>/<topic>.json`` (the book's own are under
``docs/records/``), so that runs on different machines merge without conflicts.

Every load validates: a malformed record is an error that names its file.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

SCHEMA_VERSION = 1

#: A case parameter or a note: plain JSON scalars, so cases can be matched by value.
Scalar = Union[bool, int, float, str, None]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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

    @field_validator("median", "q1", "q3", "min", "max")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v

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
    rel_error: float
    tolerance: float
    passed: bool


class Machine(_Strict):
    slug: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    device: Literal["cuda", "cpu"]
    gpu_name: str | None
    gpu_count: int = Field(ge=0)
    sm_count: int | None
    compute_capability: str | None
    gpu_memory_gib: float | None
    clocks_mhz: dict[str, float] | None = Field(description="from nvidia-smi, where readable")
    driver: str | None
    cuda: str | None
    cudnn: str | None
    nccl: str | None
    torch: str
    triton: str | None
    python: str
    host_cpu: str
    host_cores: int
    os: str


class Run(_Strict):
    date: str = Field(description="ISO 8601, UTC")
    commit: str | None
    dirty: bool | None
    command: str
    quick: bool


class Method(_Strict):
    timer: str = Field(description="default timer of the run: cuda_event, host_sync or do_bench")
    warmup: int = Field(ge=0)
    repetitions: int = Field(ge=1)


class Record(_Strict):
    schema_version: Literal[1]
    topic: str = Field(pattern=r"^[a-z0-9_]+\.[a-z0-9_]+$")
    source: str
    source_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    machine: Machine
    run: Run
    method: Method
    checks: list[Check]
    results: list[Row]
    notes: dict[str, Scalar | list[Scalar] | dict[str, Scalar]] = {}

    @model_validator(mode="after")
    def _not_empty(self) -> "Record":
        if not self.results and not self.notes:
            raise ValueError("a record holds results, notes or both")
        return self

    def rows(self, **where: Scalar) -> list[Row]:
        """Rows whose case has every ``key=value`` of ``where``."""
        return [r for r in self.results if all(r.case.get(k) == v for k, v in where.items())]


class RecordError(Exception):
    """A record that cannot be read or does not follow the schema."""


def parse_record(text: str, origin: str) -> Record:
    """Parse and validate one record; errors name ``origin`` and the field."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{origin}: not JSON ({exc.msg}, line {exc.lineno})") from None
    if isinstance(data, dict) and data.get("schema_version") != SCHEMA_VERSION:
        raise RecordError(
            f"{origin}: schema_version {data.get('schema_version')!r} is not "
            f"{SCHEMA_VERSION}, the one this code reads"
        )
    try:
        record = Record.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<top>"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise RecordError(f"{origin}: {where}: {first['msg']}{more}") from None
    failed = [c.name for c in record.checks if not c.passed]
    if failed:
        raise RecordError(f"{origin}: failed correctness checks: {', '.join(failed)}")
    return record


def load_record(path: Path) -> Record:
    record = parse_record(path.read_text(encoding="utf-8"), str(path))
    expected = f"{record.machine.slug}/{record.topic}.json"
    if not path.as_posix().endswith(expected):
        raise RecordError(f"{path}: a record of {record.topic} on {record.machine.slug} belongs at …/{expected}")
    return record


def load_records(root: Path) -> list[Record]:
    """Every record under ``root`` (``<slug>/<topic>.json``), validated."""
    if not root.is_dir():
        raise RecordError(f"{root}: no such records folder")
    return [load_record(p) for p in sorted(root.glob("*/*.json"))]


def record_path(root: Path, record: Record) -> Path:
    return root / record.machine.slug / f"{record.topic}.json"


def dump_record(record: Record) -> str:
    return json.dumps(record.model_dump(mode="json"), indent=1, sort_keys=False) + "\n"


def write_record(root: Path, record: Record) -> Path:
    path = record_path(root, record)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_record(record), encoding="utf-8")
    return path
