"""Clocks and power *under load*: NVML read in a separate process while the harness times.

An idle GPU reports its top boost clock; a sustained GEMM on an H100 or H200 is held
down by its power limit. So the lab reads the SM clock, the memory clock and the board
power every few milliseconds *during* each measurement and keeps, per metric, the
medians of the samples that fall inside its timed region.

The sampler is a child process (``python -m examples.lab.load``), not a thread: a
thread would take the interpreter lock from the very host code the lab times.
Where NVML cannot be read (no GPU, no driver, no ``nvidia-ml-py``), there are simply
no samples and the record says nothing about load.
"""
from __future__ import annotations

import argparse
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


@dataclass(frozen=True)
class Sample:
    t: float  # time.monotonic() of the reading, shared by every process of the machine
    sm_mhz: float
    mem_mhz: float
    power_w: float


class LoadMonitor:
    """Starts the sampler for one GPU and collects its samples; a no-op when it cannot run."""

    def __init__(self, device_index: int | None, interval_ms: float = INTERVAL_MS):
        self.interval_ms = interval_ms
        self.windows: list[tuple[float, float]] = []
        self._samples: list[Sample] | None = None
        self._process = None
        self._file = None
        if device_index is None:
            return
        self._file = tempfile.NamedTemporaryFile("w+", suffix=".load", delete=False)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_repo_root(), os.environ.get("PYTHONPATH")]))}
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "examples.lab.load", "--index", str(device_index),
                 "--interval-ms", str(interval_ms), "--out", self._file.name],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            )
        except OSError:
            self._process = None
            return
        self._wait_until_sampling()

    def _wait_until_sampling(self) -> None:
        """Return once the sampler has written its first line, or has given up (no NVML)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        path = Path(self._file.name)
        while time.monotonic() < deadline and self._process.poll() is None:
            if path.stat().st_size > 0:
                return
            time.sleep(0.005)

    def window(self, start: float, end: float) -> None:
        """A timed region, in ``time.monotonic()`` seconds."""
        self.windows.append((start, end))

    def stop(self) -> list[Sample]:
        """Stop the sampler (once) and return every sample it wrote."""
        if self._samples is not None:
            return self._samples
        self._samples = []
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
        if self._file is not None:
            self._samples = read_samples(Path(self._file.name))
            self._file.close()
            Path(self._file.name).unlink(missing_ok=True)
        return self._samples

    def load_between(self, start: float, end: float) -> Load | None:
        inside = [s for s in self.stop() if start <= s.t <= end]
        return summarize_window(inside)

    def summary(self) -> LoadSummary | None:
        samples = self.stop()
        inside = [s for s in samples if any(a <= s.t <= b for a, b in self.windows)]
        return summarize_all(inside, self.interval_ms)


def _repo_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def read_samples(path: Path) -> list[Sample]:
    samples = []
    try:
        text = path.read_text()
    except OSError:
        return samples
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue  # a line cut short when the sampler was stopped
        try:
            samples.append(Sample(*map(float, parts)))
        except ValueError:
            continue
    return samples


def summarize_window(samples: Sequence[Sample]) -> Load | None:
    """Medians over one timed region; ``None`` when no sample fell inside it (a region shorter than the period)."""
    if not samples:
        return None
    return Load(
        sm_mhz=statistics.median(s.sm_mhz for s in samples),
        mem_mhz=statistics.median(s.mem_mhz for s in samples),
        power_w=round(statistics.median(s.power_w for s in samples), 1),
        samples=len(samples),
    )


def summarize_all(samples: Sequence[Sample], interval_ms: float) -> LoadSummary | None:
    """Medians and extremes over every timed region of a record.

    >>> s = [Sample(0.0, 1980, 2619, 100.0), Sample(0.01, 1500, 2619, 690.0), Sample(0.02, 1410, 2619, 700.0)]
    >>> x = summarize_all(s, 10.0)
    >>> x.sm_mhz_median, x.sm_mhz_min, x.power_w_max
    (1500.0, 1410.0, 700.0)
    """
    if not samples:
        return None
    sm = [s.sm_mhz for s in samples]
    power = [s.power_w for s in samples]
    return LoadSummary(
        sm_mhz_median=statistics.median(sm),
        sm_mhz_min=min(sm),
        sm_mhz_max=max(sm),
        mem_mhz_median=statistics.median(s.mem_mhz for s in samples),
        power_w_median=round(statistics.median(power), 1),
        power_w_max=round(max(power), 1),
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
    with out.open("a", buffering=1) as f:
        while True:
            t = time.monotonic()
            sm = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
            mem = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)
            power = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000
            f.write(f"{t:.6f} {sm} {mem} {power:.1f}\n")
            time.sleep(max(0.0, period - (time.monotonic() - t)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.lab.load", description="NVML sampler (used by the harness)")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--interval-ms", type=float, default=INTERVAL_MS)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    return _sample_forever(args.index, args.interval_ms, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
