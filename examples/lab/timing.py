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

from examples.lab.kernels import gpu_operations

TIMERS = ("cuda_event", "host_sync", "do_bench", "kernel")
#: What each timer's samples are, in words (a record's ``method`` names the timer).
TIMER_MEANING = {
    "cuda_event": "device events around the calls (host enqueue time of the first call included)",
    "host_sync": "host clock between two device synchronizations",
    "do_bench": "triton.testing.do_bench (events, L2 cleared between calls)",
    "kernel": "the GPU's own durations of the calls' kernels and copies (CUPTI), summed per call",
}


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


# --8<-- [start:sample]
def one_sample(call: Callable[[], None], *, device: torch.device, timer: str,
               inner: int) -> float:
    """Seconds per call of ``inner`` back-to-back calls, by device events or
    a synchronized host clock."""
    if timer == "cuda_event":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / inner
    _synchronize(device)
    t0 = time.perf_counter_ns()
    for _ in range(inner):
        call()
    _synchronize(device)
    return (time.perf_counter_ns() - t0) / 1e9 / inner
# --8<-- [end:sample]


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
    if timer == "kernel":
        for _ in range(warmup):
            call()
        return measure_kernels({"": call}, device=device, rounds=[[""]] * repetitions,
                               inner=inner, flush_l2=flush_l2)[""]

    # --8<-- [start:loop]
    flush = L2Flusher(device) if flush_l2 else None
    for _ in range(warmup):
        call()
    _synchronize(device)

    samples = []
    for _ in range(repetitions):
        if flush:
            flush()
            # Wait for the flush: else the first call is enqueued while the
            # GPU still zeroes the buffer, and its launch latency hides there
            # (an unflushed sample has it).
            _synchronize(device)
        samples.append(one_sample(call, device=device, timer=timer,
                                  inner=inner))
    return samples
    # --8<-- [end:loop]


# --8<-- [start:round_order]
def round_order(names: Sequence[str], round_index: int) -> list[str]:
    """The order of the variants in one round: forward, then backward, and
    every two rounds the list rotated by one (A B C, C B A, B C A, A C B ...).

    Over any two rounds each variant runs once early and once late, so a
    drift of clocks, power or temperature falls on every variant alike; the
    rotation gives each variant every other one as a neighbour, so what one
    leaves behind (a warm cache, a busy host) does not always fall on the
    same one.

    >>> [''.join(round_order("ABC", r)) for r in range(6)]
    ['ABC', 'CBA', 'BCA', 'ACB', 'CAB', 'BAC']
    >>> [''.join(round_order("AB", r)) for r in range(4)]
    ['AB', 'BA', 'BA', 'AB']
    """
    order = list(names)
    shift = (round_index // 2) % len(order) if order else 0
    order = order[shift:] + order[:shift]
    return order if round_index % 2 == 0 else order[::-1]
# --8<-- [end:round_order]


def measure_interleaved(
    fns: dict[str, Callable[..., Any]],
    *,
    device: torch.device,
    timer: str,
    warmup: int,
    repetitions: int,
    inner: int = 1,
    flush_l2: bool = False,
    inputs: Sequence[tuple] | None = None,
    before: Callable[[str], None] | None = None,
) -> dict[str, list[float]]:
    """Seconds per call of each variant, sampled in rounds: one sample of every variant
    per round, in :func:`round_order`. Sample ``i`` of each variant comes from round ``i``,
    so samples of two variants pair up by index (the ratio of a pair is a paired ratio).

    ``before(name)``, if given, runs untimed before every warm-up call and every sample
    of that variant, and the device is idle when each sample starts.
    """
    if timer not in ("cuda_event", "host_sync", "kernel"):
        raise ValueError(f"interleaved timing takes 'cuda_event', 'host_sync' or 'kernel', not {timer!r}")
    if timer != "host_sync" and device.type != "cuda":
        raise ValueError(f"timer 'cuda_event' needs a CUDA device; use 'host_sync' on {device.type}")
    arguments = list(inputs) if inputs else [()]
    calls = dict.fromkeys(fns, 0)

    def call(name: str) -> None:
        fns[name](*arguments[calls[name] % len(arguments)])
        calls[name] += 1

    names = list(fns)
    for r in range(warmup):
        for name in round_order(names, r):
            if before is not None:
                before(name)
            call(name)
    _synchronize(device)

    if timer == "kernel":
        if before is not None:  # its GPU work would be summed into the samples
            raise ValueError("timer 'kernel' takes no 'before'")
        return measure_kernels({name: (lambda name=name: call(name)) for name in names}, device=device,
                               rounds=[round_order(names, r) for r in range(repetitions)],
                               inner=inner, flush_l2=flush_l2)

    flush = L2Flusher(device) if flush_l2 else None
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repetitions):
        for name in round_order(names, r):
            if before is not None:
                before(name)
            if flush:
                flush()
            _synchronize(device)  # as in measure(): the launch latency stays in the sample
            samples[name].append(one_sample(lambda: call(name), device=device, timer=timer, inner=inner))
    return samples


def measure_rounds(
    fns: dict[str, Callable[[], Any]],
    *,
    device: torch.device,
    warmup: int,
    repetitions: int,
    inner: int = 1,
    before: Callable[[str], None] | None = None,
) -> dict[str, list[float]]:
    """:func:`measure_interleaved` with the harness's clock for ``device`` (CUDA events on
    a GPU, a synchronized host clock elsewhere), for processes that time together: the
    ranks of ``torch.distributed``.

    Every rank issues the same calls in the same order (the order of a round depends on
    its index only), and ``before`` may restore a variant's inputs and line the ranks up
    with a barrier, so that no sample starts before its peers. One variant alone is a
    plain timing loop.
    """
    timer = "cuda_event" if device.type == "cuda" else "host_sync"
    return measure_interleaved(fns, device=device, timer=timer, warmup=warmup,
                               repetitions=repetitions, inner=inner, before=before)


# --8<-- [start:kernel]
def ops_per_call(fn: Callable[[], None]) -> int:
    """How many GPU operations (kernels, copies, fills) one call of ``fn`` runs."""
    return len(gpu_operations(fn))


def measure_kernels(
    fns: dict[str, Callable[[], None]],
    *,
    device: torch.device,
    rounds: Sequence[Sequence[str]],
    inner: int = 1,
    flush_l2: bool = False,
) -> dict[str, list[float]]:
    """Seconds per call by the GPU's own clock: for each name in each round,
    ``inner`` calls of ``fns[name]``, and the sample is the sum of the
    durations of the GPU operations they ran, divided by ``inner``.

    The host's share of a call (Python, dispatch, the launch) is left out,
    and so are the gaps between kernels: what is left is what the GPU spent
    on the call. Each function must run the same GPU operations every call;
    it is profiled once alone to count them, and the whole schedule is then
    profiled in one session and cut by those counts (an L2 flush, if asked,
    before each sample, is cut away the same way).
    """
    if device.type != "cuda":
        raise ValueError("timer 'kernel' needs a CUDA device; use 'host_sync' on "
                         f"{device.type}")
    flush = L2Flusher(device) if flush_l2 else None
    flush_ops = ops_per_call(flush) if flush else 0
    per_call = {name: ops_per_call(fn) for name, fn in fns.items()}
    for name, count in per_call.items():
        if count == 0:
            raise RuntimeError(f"timer 'kernel': {name or 'the call'} ran nothing on the GPU")

    def schedule() -> None:
        for names in rounds:
            for name in names:
                if flush:
                    flush()
                for _ in range(inner):
                    fns[name]()

    events = gpu_operations(schedule)
    expected = sum(flush_ops + inner * per_call[name] for names in rounds for name in names)
    if len(events) != expected:
        raise RuntimeError(f"timer 'kernel': {len(events)} GPU operations where the calls alone "
                           f"ran {expected}: not the same GPU work every call")
    samples: dict[str, list[float]] = {name: [] for name in fns}
    at = 0
    for names in rounds:
        for name in names:
            at += flush_ops
            ops = inner * per_call[name]
            samples[name].append(sum(op.duration_ns for op in events[at:at + ops]) / 1e9 / inner)
            at += ops
    return samples
# --8<-- [end:kernel]


def _do_bench(call: Callable[[], None], *, inner: int, flush_l2: bool) -> list[float]:
    """Triton's timer: events around each call; it clears the L2 itself between calls."""
    from triton.testing import do_bench

    def many() -> None:
        for _ in range(inner):
            call()

    del flush_l2  # do_bench always flushes the cache between repetitions
    times_ms = do_bench(many, warmup=25, rep=200, return_mode="all")
    return [t / 1e3 / inner for t in times_ms]
