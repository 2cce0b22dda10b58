"""Timers: device events, a synchronized host clock, and ``triton.testing.do_bench``.

Each returns one sample per repetition, in seconds per call of ``fn``. GPU work
is asynchronous, so every timer either brackets the work with events on the
stream or waits for the device before reading the host clock.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

TIMERS = ("cuda_event", "host_sync", "do_bench")


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --8<-- [start:flush]
class L2Flusher:
    """Writes a buffer twice the size of the L2 cache, so the next read comes from HBM."""

    def __init__(self, device: torch.device):
        self.buffer = None
        if device.type == "cuda":
            l2_bytes = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 * 2**20)
            self.buffer = torch.empty(2 * l2_bytes, dtype=torch.uint8, device=device)

    def __call__(self) -> None:
        if self.buffer is not None:
            self.buffer.zero_()


# --8<-- [end:flush]


def measure(
    fn: Callable[..., Any],
    *,
    device: torch.device,
    timer: str,
    warmup: int,
    repetitions: int,
    inner: int = 1,
    flush_l2: bool = False,
    inputs: Sequence[tuple] | None = None,
) -> list[float]:
    """Seconds per call of ``fn``, one sample per repetition.

    ``inner`` calls run back to back inside one sample: use it when one call is
    too short for the clock. ``inputs`` rotates argument tuples between calls,
    so that repeated calls do not read the same (cached) buffers.
    """
    if timer not in TIMERS:
        raise ValueError(f"unknown timer {timer!r}; choose from {', '.join(TIMERS)}")
    if timer != "host_sync" and device.type != "cuda":
        raise ValueError(f"timer {timer!r} needs a CUDA device; use 'host_sync' on {device.type}")
    # --8<-- [start:rotate]
    arguments = list(inputs) if inputs else [()]
    calls = 0

    def call() -> None:
        nonlocal calls
        fn(*arguments[calls % len(arguments)])
        calls += 1

    # --8<-- [end:rotate]

    if timer == "do_bench":
        return _do_bench(call, inner=inner, flush_l2=flush_l2)

    # --8<-- [start:loop]
    flush = L2Flusher(device) if flush_l2 else None
    for _ in range(warmup):
        call()
    _synchronize(device)

    samples = []
    for _ in range(repetitions):
        if flush:
            flush()
        if timer == "cuda_event":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                call()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / inner)
        else:
            _synchronize(device)
            t0 = time.perf_counter_ns()
            for _ in range(inner):
                call()
            _synchronize(device)
            samples.append((time.perf_counter_ns() - t0) / 1e9 / inner)
    return samples
    # --8<-- [end:loop]


def _do_bench(call: Callable[[], None], *, inner: int, flush_l2: bool) -> list[float]:
    """Triton's timer: events around each call; it clears the L2 itself between calls."""
    from triton.testing import do_bench

    def many() -> None:
        for _ in range(inner):
            call()

    del flush_l2  # do_bench always flushes the cache between repetitions
    times_ms = do_bench(many, warmup=25, rep=200, return_mode="all")
    return [t / 1e3 / inner for t in times_ms]
