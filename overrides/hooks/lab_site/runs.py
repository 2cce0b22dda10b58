"""One figure over independent runs: the median of the runs' medians, and how far apart they are.

A run is one process on one started machine; its record keeps, per case and metric,
the median of its repetitions. Repetitions inside a run share the machine's state (its
clocks, its memory placement, what else ran), so only separate runs show how much a
figure moves from one machine to the next. The book quotes the median of the run
medians, and shows the run-to-run range (lowest and highest run median) beside it.
A figure whose runs differ by more than :data:`NOISY` of that median is *noisy*: a
page must not quote it as one number.

Pure arithmetic on floats: nothing here knows about records or pages.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

#: Run-to-run spread, (max − min) / |median|, above which a figure is noisy.
NOISY = 0.15


@dataclass(frozen=True)
class Across:
    """The per-run medians of one figure, in run order."""

    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError("a figure across runs needs at least one run")
        if not all(math.isfinite(v) for v in self.values):
            raise ValueError(f"run medians must be finite: {self.values}")

    @property
    def count(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    @property
    def spread(self) -> float:
        """(max − min) / |median|: 0 for one run (or equal runs), infinite around a zero median."""
        width = self.high - self.low
        if width == 0:
            return 0.0
        return width / abs(self.median) if self.median else math.inf

    @property
    def noisy(self) -> bool:
        return self.spread > NOISY


def across(values: Iterable[float]) -> Across:
    return Across(tuple(float(v) for v in values))


def median_of(values: Iterable[float]) -> float:
    """The median of some per-run statistic (a quartile, a clock); at least one value."""
    values = list(values)
    if not values:
        raise ValueError("no values")
    return statistics.median(values)
