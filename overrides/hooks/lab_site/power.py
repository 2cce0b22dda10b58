"""Board power from the records, and which reading each figure is.

NVML reports board power two ways, and they are not the same quantity over a short
window: ``NVML_FI_DEV_POWER_INSTANT`` (``"instant"``) reads what the board draws now,
while ``nvmlDeviceGetPowerUsage`` (``"one-second average"``) is, on Hopper, an average
over the last second, so in a window of tens of milliseconds it mostly reports what ran
before. A record says which reading its sampler took (``power_reading``); records made
before they said took the one-second average. With only the average, the harness keeps
no power figure for a window shorter than the average (``power_w`` is ``None``).

So wherever the site prints a power figure it names the reading, and where there is no
figure it prints none and says why. Pure functions of (watts, reading) pairs.
"""
from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

INSTANT, AVERAGE = "instant", "one-second average"
#: A figure whose record does not name its reading: made before records did, by the average.
UNSAID = "unsaid"

#: How each reading is named beside a figure.
NAMES = {INSTANT: "instantaneous", AVERAGE: "one-second average", UNSAID: "one-second average"}
#: What each reading is, for a title (tooltip).
EXPLAINED = {
    INSTANT: "NVML's instantaneous board power (NVML_FI_DEV_POWER_INSTANT)",
    AVERAGE: "NVML's board power averaged over the last second (nvmlDeviceGetPowerUsage; this driver has "
             "no instantaneous field), read only from a second into each timed window",
    UNSAID: "NVML's board power averaged over the last second (nvmlDeviceGetPowerUsage): records made before "
            "they named their power reading took that one, which in a window shorter than a second partly "
            "reports what ran before it",
}
#: Why a figure has no power, for a title.
NO_FIGURE = ("no power figure: the timed window was shorter than NVML's one-second average "
             "(nvmlDeviceGetPowerUsage), which would report what ran before it")


@dataclass(frozen=True)
class Power:
    """Board power over some runs: the median of the figures there are, and which readings they are."""

    watts: float | None  # None: no run has a figure
    readings: tuple[tuple[str, int], ...]  # (INSTANT / AVERAGE / UNSAID, how many figures), in order seen
    missing: int  # runs with no figure (their window was shorter than the averaged reading)

    @property
    def label(self) -> str:
        """``'instantaneous'``, ``'one-second average'``, or how many of each where runs mix them."""
        if self.watts is None:
            return "no power figure"
        names: dict[str, int] = {}
        for reading, count in self.readings:
            names[NAMES[reading]] = names.get(NAMES[reading], 0) + count
        if len(names) == 1:
            return next(iter(names))
        return ", ".join(f"{name} in {count} run{'s' if count > 1 else ''}" for name, count in names.items())

    @property
    def title(self) -> str:
        """What the figure is (each reading explained), and the runs that have none."""
        if self.watts is None:
            return NO_FIGURE
        parts = [EXPLAINED[reading] for reading, _ in self.readings]
        if self.missing:
            total = self.missing + sum(count for _, count in self.readings)
            parts.append(f"{self.missing} of {total} runs have no power figure (their timed window was "
                         "shorter than the one-second average)")
        return "; ".join(parts)


def reading(power_w: float | None, power_reading: str | None) -> str | None:
    """Which reading a figure is: INSTANT, AVERAGE or UNSAID; ``None`` where there is no figure."""
    if power_w is None:
        return None
    return power_reading or UNSAID


def summarize(pairs: Iterable[tuple[float | None, str | None]]) -> Power:
    """The median of the figures among (watts, reading) pairs, one pair per run, and their readings.

    >>> p = summarize([(690.0, "instant"), (700.0, "instant"), (None, None)])
    >>> p.watts, p.label, p.missing
    (695.0, 'instantaneous', 1)
    >>> summarize([(120.0, None)]).label, summarize([(None, None)]).watts
    ('one-second average', None)
    """
    watts: list[float] = []
    counts: dict[str, int] = {}
    missing = 0
    for power_w, power_reading in pairs:
        which = reading(power_w, power_reading)
        if which is None:
            missing += 1
            continue
        watts.append(power_w)
        counts[which] = counts.get(which, 0) + 1
    return Power(statistics.median(watts) if watts else None, tuple(counts.items()), missing)
