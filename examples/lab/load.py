"""Clocks and power *under load*: NVML read in a separate process while the harness times.

An idle GPU reports its top boost clock; a sustained GEMM on an H100 or H200 is held
down by its power limit. So the lab reads the SM clock, the memory clock and the board
power every few milliseconds *during* each measurement and keeps, per metric, the
medians of the samples that fall inside its timed region.

The sampler is a child process (``python -m examples.lab.load``), not a thread: a
thread would take the interpreter lock from the very host code the lab times.
Where NVML cannot be read (no GPU, no driver, no ``nvidia-ml-py``), there are simply
no samples and the record says nothing about load.

Board power: ``nvmlDeviceGetPowerUsage`` is a one-second average on Hopper, so in a
window of tens of milliseconds it reports what ran before. The sampler reads the
instantaneous field (``NVML_FI_DEV_POWER_INSTANT``) where the driver has it, and says
which reading it took; with only the average, a window gets a power figure from the
samples taken at least one averaging period after it began, and none if it is shorter.
"""
from __future__ import annotations

import argparse
import atexit
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from examples.lab.records import Load, LoadSummary

INTERVAL_MS = 10.0
#: How long the harness waits for the sampler's first reading before it times anything:
#: a topic that times for a tenth of a second would otherwise finish before the child
#: process has imported NVML.
READY_TIMEOUT_S = 10.0
#: What the sampler's power column is, and the period each reading averages over (s).
INSTANT, AVERAGE = "instant", "one-second average"
AVERAGING_S = {INSTANT: 0.0, AVERAGE: 1.0}


@dataclass(frozen=True)
class Sample:
    t: float  # time.monotonic() of the reading, shared by every process of the machine
    sm_mhz: float
    mem_mhz: float
    power_w: float


class _Sampler:
    """One sampler process per GPU and per Python process, started when a record first needs it.

    A topic lasts seconds; starting a Python process with NVML costs a good part of one. So the
    topics of one ``lab run`` share the sampler, each reading the samples of its own windows.
    """

    def __init__(self, device_index: int, interval_ms: float):
        self.owner = os.getpid()  # a forked rank inherits this object: only its owner stops it
        self.process = None  # None: the sampler could not start (its file stays empty)
        file = tempfile.NamedTemporaryFile("w+", suffix=".load", delete=False)
        file.close()
        self.path = Path(file.name)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_repo_root(), os.environ.get("PYTHONPATH")]))}
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "examples.lab.load", "--index", str(device_index),
                 "--interval-ms", str(interval_ms), "--out", str(self.path)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            )
        except OSError:
            self.process = None
            return
        self._wait_until_sampling()

    def _wait_until_sampling(self) -> None:
        """Return once the sampler has written its first line, or has given up (no NVML)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and self.process.poll() is None:
            if self.path.stat().st_size > 0:
                return
            time.sleep(0.005)

    def read(self) -> tuple[str | None, list[Sample]]:
        """Which power reading the sampler takes, and every sample it has written so far."""
        return read_power_reading(self.path), read_samples(self.path)

    def close(self) -> None:
        if os.getpid() != self.owner:
            return
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.path.unlink(missing_ok=True)


_SAMPLERS: dict[tuple[int, float], _Sampler] = {}


def _shared_sampler(device_index: int, interval_ms: float) -> _Sampler:
    key = (device_index, interval_ms)
    sampler = _SAMPLERS.get(key)
    if sampler is None or sampler.owner != os.getpid():
        sampler = _SAMPLERS[key] = _Sampler(device_index, interval_ms)
    return sampler


@atexit.register
def close_samplers() -> None:
    """Stop this process's samplers (at exit; tests call it to end a fake one)."""
    for key in list(_SAMPLERS):
        if _SAMPLERS[key].owner == os.getpid():
            _SAMPLERS.pop(key).close()


class LoadMonitor:
    """The load of one record: its timed windows and the shared sampler's samples; a no-op
    when the sampler cannot run."""

    def __init__(self, device_index: int | None, interval_ms: float = INTERVAL_MS):
        self.interval_ms = interval_ms
        self.windows: list[tuple[float, float]] = []
        self._samples: list[Sample] | None = None
        #: INSTANT or AVERAGE, as the sampler wrote in its first line.
        self.power_reading: str | None = None
        self._sampler = None if device_index is None else _shared_sampler(device_index, interval_ms)

    def window(self, start: float, end: float) -> None:
        """A timed region, in ``time.monotonic()`` seconds."""
        self.windows.append((start, end))

    def stop(self) -> list[Sample]:
        """Take (once) every sample written so far: the record's windows have all ended."""
        if self._samples is not None:
            return self._samples
        self._samples = []
        if self._sampler is not None:
            self.power_reading, self._samples = self._sampler.read()
        return self._samples

    def load_between(self, start: float, end: float) -> Load | None:
        samples = self.stop()
        inside = [s for s in samples if start <= s.t <= end]
        return summarize_window(inside, power=_power_samples(samples, [(start, end)], self.power_reading),
                                power_reading=self.power_reading)

    def summary(self) -> LoadSummary | None:
        samples = self.stop()
        inside = [s for s in samples if any(a <= s.t <= b for a, b in self.windows)]
        return summarize_all(inside, self.interval_ms, power=_power_samples(samples, self.windows, self.power_reading),
                             power_reading=self.power_reading)


def _repo_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def _power_samples(samples: Sequence[Sample], windows: Sequence[tuple[float, float]],
                   reading: str | None) -> list[Sample]:
    """The samples whose power belongs to a window: for an averaged reading, only those
    taken a whole averaging period after the window began (earlier ones average what ran before).

    >>> s = [Sample(t, 1980, 2619, 100.0 * t) for t in (0.5, 1.5, 2.5)]
    >>> [x.t for x in _power_samples(s, [(0.0, 3.0)], AVERAGE)], len(_power_samples(s, [(0.0, 0.9)], AVERAGE))
    ([1.5, 2.5], 0)
    >>> len(_power_samples(s, [(0.0, 0.9)], INSTANT))
    1
    """
    lag = AVERAGING_S.get(reading or AVERAGE, 1.0)
    return [s for s in samples if any(a + lag <= s.t <= b for a, b in windows)]


def read_power_reading(path: Path) -> str | None:
    """The sampler's first line says which power reading it took: ``# power instant``."""
    try:
        with path.open() as f:
            first = f.readline().strip()
    except OSError:
        return None
    value = first.removeprefix("# power ").strip() if first.startswith("# power ") else None
    return value if value in AVERAGING_S else None


def read_samples(path: Path) -> list[Sample]:
    samples = []
    try:
        text = path.read_text()
    except OSError:
        return samples
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 4:
            continue  # a line cut short when the sampler was stopped
        try:
            samples.append(Sample(*map(float, parts)))
        except ValueError:
            continue
    return samples


def summarize_window(samples: Sequence[Sample], *, power: Sequence[Sample] | None = None,
                     power_reading: str | None = INSTANT) -> Load | None:
    """Medians over one timed region; ``None`` when no sample fell inside it (a region shorter than the period).

    ``power`` are the samples whose power reading belongs to the region (all of them by default);
    with none, the region has no power figure.
    """
    if not samples:
        return None
    power = samples if power is None else power
    return Load(
        sm_mhz=statistics.median(s.sm_mhz for s in samples),
        mem_mhz=statistics.median(s.mem_mhz for s in samples),
        power_w=round(statistics.median(s.power_w for s in power), 1) if power else None,
        power_reading=power_reading if power else None,
        samples=len(samples),
    )


def summarize_all(samples: Sequence[Sample], interval_ms: float, *, power: Sequence[Sample] | None = None,
                  power_reading: str | None = INSTANT) -> LoadSummary | None:
    """Medians and extremes over every timed region of a record.

    >>> s = [Sample(0.0, 1980, 2619, 100.0), Sample(0.01, 1500, 2619, 690.0), Sample(0.02, 1410, 2619, 700.0)]
    >>> x = summarize_all(s, 10.0)
    >>> x.sm_mhz_median, x.sm_mhz_min, x.power_w_max, x.power_reading
    (1500.0, 1410.0, 700.0, 'instant')
    """
    if not samples:
        return None
    power = samples if power is None else power
    sm = [s.sm_mhz for s in samples]
    watts = [s.power_w for s in power]
    return LoadSummary(
        sm_mhz_median=statistics.median(sm),
        sm_mhz_min=min(sm),
        sm_mhz_max=max(sm),
        mem_mhz_median=statistics.median(s.mem_mhz for s in samples),
        power_w_median=round(statistics.median(watts), 1) if watts else None,
        power_w_max=round(max(watts), 1) if watts else None,
        power_reading=power_reading if watts else None,
        samples=len(samples),
        interval_ms=interval_ms,
    )


def power_limit_w(device_index: int) -> float | None:
    """The enforced board power limit, or ``None`` where NVML cannot be read."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
            return pynvml.nvmlDeviceGetEnforcedPowerManagementLimit(handle) / 1000
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML, no driver, no permission: the limit is unknown
        return None


def _sample_forever(index: int, interval_ms: float, out: Path) -> int:
    """The child process: one line ``t sm_mhz mem_mhz power_w`` per period until terminated."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001 - nothing to read: the record will say nothing about load
        return 1
    period = interval_ms / 1e3
    reading, read_power = _power_reader(pynvml, handle)
    with out.open("a", buffering=1) as f:
        f.write(f"# power {reading}\n")
        while True:
            t = time.monotonic()
            sm = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
            mem = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)
            power = read_power()
            f.write(f"{t:.6f} {sm} {mem} {power:.1f}\n")
            time.sleep(max(0.0, period - (time.monotonic() - t)))


def _power_reader(pynvml, handle):
    """(INSTANT, read) through the instantaneous field where the driver answers it, else
    (AVERAGE, read) through ``nvmlDeviceGetPowerUsage``; ``read()`` gives watts."""
    field = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", 186)

    def instant() -> float:
        value = pynvml.nvmlDeviceGetFieldValues(handle, [field])[0]
        if value.nvmlReturn != pynvml.NVML_SUCCESS:
            raise RuntimeError("NVML_FI_DEV_POWER_INSTANT is not supported here")
        number = {pynvml.NVML_VALUE_TYPE_DOUBLE: value.value.dVal,
                  pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: value.value.uiVal,
                  pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: value.value.ulVal,
                  pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: value.value.ullVal}.get(value.valueType)
        if number is None:
            raise RuntimeError(f"NVML_FI_DEV_POWER_INSTANT has value type {value.valueType}")
        return float(number) / 1000  # milliwatts

    try:
        if instant() > 0:
            return INSTANT, instant
    except Exception:  # noqa: BLE001 - an older driver or binding: fall back to the average
        pass
    return AVERAGE, lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.lab.load", description="NVML sampler (used by the harness)")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--interval-ms", type=float, default=INTERVAL_MS)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    return _sample_forever(args.index, args.interval_ms, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
