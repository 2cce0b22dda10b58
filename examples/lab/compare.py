"""Your records beside the book's: ``python -m examples.lab compare DIR``.

A *figure* is one metric of one case of one topic: ``(topic, case, metric)``. Each side
may hold several independent runs of a topic (``<machine>/<topic>/<run id>.json``);
its figure is then the median across its runs of each run's median, as the site shows
it. The comparison pairs every figure that both the book's machine
(``docs/records/nvidia-h200`` unless told otherwise) and a machine of the reader's
``DIR`` measured, with the ratio reader / book and the book's run-to-run range (the
lowest and highest run median: a ratio inside it is no difference), and counts the
figures only one side has. A reader's CPU run overlaps the book's GPU records only
where the quick sizes match the book's cases; no overlap is a result, not an error.
"""
from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from examples.lab.records import Record, Scalar, load_records

BOOK_ROOT = Path(__file__).resolve().parents[2] / "docs" / "records"
BOOK_MACHINE = "nvidia-h200"

Key = tuple[str, tuple[tuple[str, Scalar], ...], str]


@dataclass(frozen=True)
class Figure:
    topic: str
    case: dict[str, Scalar]
    metric: str
    unit: str
    #: Median across the book's runs, and the lowest and highest of their medians.
    book: float
    book_low: float
    book_high: float
    book_runs: int
    #: Median across the reader's runs.
    reader: float
    reader_runs: int
    #: reader / book; None where the units differ or the book's figure is zero.
    ratio: float | None


@dataclass(frozen=True)
class _Runs:
    """One figure of one side: each run's median, in one unit."""

    unit: str
    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values)


@dataclass
class MachineComparison:
    """The book's machine against one machine of the reader's folder."""

    machine: str
    label: str
    figures: list[Figure] = field(default_factory=list)
    #: topic -> how many figures only the book has / only the reader has.
    only_book: dict[str, int] = field(default_factory=dict)
    only_reader: dict[str, int] = field(default_factory=dict)


@dataclass
class Comparison:
    book_root: str
    book_machine: str
    book_label: str
    reader_root: str
    machines: list[MachineComparison]


def _label(record: Record) -> str:
    m = record.machine
    return m.gpu_name if m.device == "cuda" and m.gpu_name else f"CPU: {m.host_cpu}"


def _figures(records: list[Record]) -> dict[Key, _Runs]:
    """Every figure of some records of one machine, over all the runs that measured it."""
    values: dict[Key, list[float]] = {}
    units: dict[Key, str] = {}
    for record in sorted(records, key=lambda r: (r.run.date, r.run.id)):
        for row in record.results:
            case = tuple(sorted(row.case.items()))
            for name, m in row.metrics.items():
                key = (record.topic, case, name)
                # A run in another unit cannot share a median: the first run's unit counts.
                if units.setdefault(key, m.unit) == m.unit:
                    values.setdefault(key, []).append(m.median)
    return {key: _Runs(units[key], tuple(v)) for key, v in values.items()}


def _same_value(a: Scalar, b: Scalar) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def _case_key(case: tuple[tuple[str, Scalar], ...]) -> tuple:
    # JSON-equal cases (32 and 32.0) match; True and 1 do not.
    return tuple((k, type(v) is bool, v) for k, v in case)


def compare_machine(book: list[Record], reader: list[Record]) -> MachineComparison:
    first = reader[0]
    result = MachineComparison(first.machine.slug, _label(first))
    mine = _figures(book)
    theirs = _figures(reader)
    by_key = {(t, _case_key(c), m): (t, c, m) for (t, c, m) in mine}
    matched_book: set[Key] = set()
    for (topic, case, name), reader in theirs.items():
        key = by_key.get((topic, _case_key(case), name))
        if key is None:
            result.only_reader[topic] = result.only_reader.get(topic, 0) + 1
            continue
        matched_book.add(key)
        book = mine[key]
        ratio = reader.median / book.median if reader.unit == book.unit and book.median != 0 else None
        result.figures.append(Figure(topic, dict(case), name, reader.unit, book.median, min(book.values),
                                     max(book.values), len(book.values), reader.median, len(reader.values), ratio))
    left = Counter(t for (t, _c, _m) in mine if (t, _c, _m) not in matched_book)
    result.only_book = dict(sorted(left.items()))
    result.only_reader = dict(sorted(result.only_reader.items()))
    result.figures.sort(key=lambda f: (f.topic, f.metric, json.dumps(f.case, sort_keys=True)))
    return result


def compare(reader_root: Path, book_root: Path = BOOK_ROOT, book_machine: str = BOOK_MACHINE) -> Comparison:
    """Load both sides (validating every record) and pair their figures.

    Raises :class:`examples.lab.records.RecordError` naming the file for any record that
    does not load, and :class:`LookupError` when the book has no records of ``book_machine``.
    """
    book = [r for r in load_records(book_root) if r.machine.slug == book_machine]
    if not book:
        raise LookupError(f"{book_root}: no records of machine {book_machine}")
    reader = load_records(reader_root)
    machines: dict[str, list[Record]] = {}
    for record in reader:
        machines.setdefault(record.machine.slug, []).append(record)
    return Comparison(
        book_root=str(book_root),
        book_machine=book_machine,
        book_label=_label(book[0]),
        reader_root=str(reader_root),
        machines=[compare_machine(book, records) for _slug, records in sorted(machines.items())],
    )


# -- output ----------------------------------------------------------------------------

def _number(value: float, unit: str) -> str:
    return f"{value:.4g} {unit}".rstrip()


def _range(low: float, high: float, unit: str) -> str:
    return _number(low, unit) if f"{low:.4g}" == f"{high:.4g}" else f"{low:.4g}-{_number(high, unit)}"


def _case_text(case: dict[str, Scalar]) -> str:
    return " ".join(f"{k}={json.dumps(v) if isinstance(v, str) else v}" for k, v in case.items()) or "-"


def _topics(counts: dict[str, int]) -> str:
    return ", ".join(f"{t} ({n})" for t, n in counts.items())


def text(result: Comparison) -> str:
    lines = [f"book:   {result.book_label} ({result.book_machine}) from {result.book_root}"]
    if not result.machines:
        lines.append(f"reader: {result.reader_root} holds no records (expected <machine>/<topic>/<run>.json)")
        return "\n".join(lines)
    for m in result.machines:
        lines += ["", f"reader: {m.label} ({m.machine}) from {result.reader_root}"]
        if m.figures:
            lines.append("each figure: the median across runs of each run's median; "
                         "book range: the lowest and highest of the book's run medians")
            header = ("topic", "case", "metric", "book", "book range (runs)", "reader (runs)", "reader/book")
            rows = [
                (f.topic, _case_text(f.case), f.metric, _number(f.book, f.unit),
                 f"{_range(f.book_low, f.book_high, f.unit)} ({f.book_runs})",
                 f"{_number(f.reader, f.unit)} ({f.reader_runs})",
                 f"{f.ratio:.3g}x" if f.ratio is not None else "n/a")
                for f in m.figures
            ]
            widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
            for row in [header, *rows]:
                cells = [c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
                lines.append("  ".join(cells).rstrip())
            lines.append(f"{len(m.figures)} figures in both")
        else:
            lines.append("no figure in common with the book's records (same topic, case and metric): nothing to compare")
        if m.only_book:
            lines.append(f"only in the book: {sum(m.only_book.values())} figures: {_topics(m.only_book)}")
        if m.only_reader:
            lines.append(f"only in {result.reader_root}: {sum(m.only_reader.values())} figures: {_topics(m.only_reader)}")
    return "\n".join(lines)


def to_json(result: Comparison) -> dict:
    return asdict(result)
