"""Timers side by side: the book's, and Triton's ``do_bench`` and ``do_bench_cudagraph``.

Three kernels, each timed by every timer in interleaved rounds:

* an add of 4 KiB per tensor, shorter than its own launch;
* the same add at 64 MiB per tensor, memory-bound, its working set (192 MiB) over
  three times the L2;
* a bf16 matrix product of 8192³, 1.1 TFLOP, where nothing but the kernel counts.

The timers: the kernel's own duration from the profiler (CUPTI, the harness's ``kernel``
timer: the reference every other timer is divided by), the same with the L2 overwritten
before each call, device events around one call on an idle GPU, a host clock between two
synchronizations, and Triton's two (rows "Triton benchmark" and "Triton benchmark, CUDA
graph"). What Triton's do (``python/triton/testing.py`` and
``backends/nvidia/driver.py`` of Triton 3.6.0, read from its wheel):

* ``do_bench(fn, warmup=25, rep=100, return_mode="mean")``: ``warmup`` and ``rep`` are
  milliseconds, turned into call counts from five calls' estimate. Before each timed call
  it zeroes a 256 MiB buffer (``get_empty_cache_for_benchmark``: the L2 flush), then
  records an event, calls, records an event; it synchronizes only once, after all calls.
  By default it returns the *mean* of the calls (its docstring's first line still says
  the median).
* ``do_bench_cudagraph(fn, rep=20, return_mode="mean")``: captures as many calls as fit
  in ``rep`` ms into one CUDA graph on a stream of its own, replays it ten times between
  two events and returns the mean of the ten per-call averages. No flush: the calls run
  back to back, and no launch but the graph's.

Each timer's samples are kept as ``time`` (median and quartiles of all samples of all
rounds) and as ``vs_kernel`` (per round, the median of its samples over the kernel
timer's median of the same round). Triton's two also get ``returned``: what a default
call returns (the mean), once per round. Without a GPU, Triton's timers are skipped
(noted, not an error) and the host clock stands in for the kernel timer, so the rounds,
the checks and the record still run.
"""

from __future__ import annotations

import inspect
import statistics
import sys
import time
from collections.abc import Callable

import torch

from examples.lab.timing import measure as time_samples, round_order

#: The reference, and its twin with the L2 overwritten before each call.
KERNEL = "kernel duration (profiler)"
KERNEL_FLUSHED = "kernel duration, L2 flushed"
EVENTS = "events around one call"
HOST = "host clock around one call"
DO_BENCH = "Triton benchmark"
DO_BENCH_GRAPH = "Triton benchmark, CUDA graph"
TRITON = (DO_BENCH, DO_BENCH_GRAPH)

#: What each timer's samples are, for the record's ``method``.
METHODS = {
    KERNEL: "kernel: the call's GPU operations' durations (CUPTI), one call per sample",
    KERNEL_FLUSHED: "kernel, flush_l2: as the kernel timer, a buffer twice the L2 zeroed before each call",
    EVENTS: "cuda_event: events around one call, the GPU idle before it (the launch included)",
    HOST: "host_sync: host clock from one synchronize to the next around one call",
    DO_BENCH: "triton.testing.do_bench(fn, return_mode='all'), defaults otherwise: every timed call",
    DO_BENCH_GRAPH: "triton.testing.do_bench_cudagraph(fn, return_mode='all'), defaults otherwise: "
                    "each of its 10 replays' time per call",
}

#: Warm-up calls before each block of the book's timers (the topic warms every kernel first).
BLOCK_WARMUP = 3


# --8<-- [start:triton]
def triton_do_bench(call: Callable[[], object], lab, samples: int) -> list[float]:
    """Seconds per call, one per timed call: Triton's defaults, every sample kept
    (``return_mode="all"``; the default, "mean", returns their mean)."""
    from triton.testing import do_bench

    return [ms / 1e3 for ms in do_bench(call, return_mode="all")]


def triton_do_bench_cudagraph(call: Callable[[], object], lab, samples: int) -> list[float]:
    """Seconds per call, one per graph replay (ten), each the replay over its calls."""
    from triton.testing import do_bench_cudagraph

    return [ms / 1e3 for ms in do_bench_cudagraph(call, return_mode="all")]
# --8<-- [end:triton]


# --8<-- [start:book]
def book_timer(timer: str, *, flush_l2: bool = False):
    """One of the harness's timers (examples/lab/timing.py) as a timer of this topic:
    ``samples`` calls, one sample each, after a short warm-up."""

    def run(call: Callable[[], object], lab, samples: int) -> list[float]:
        # Without a GPU the host clock stands in for the GPU's (as Lab.time does).
        chosen = timer if lab.cuda else "host_sync"
        return time_samples(call, device=lab.device, timer=chosen, warmup=BLOCK_WARMUP,
                            repetitions=samples, flush_l2=flush_l2)

    return run
# --8<-- [end:book]


def timers(lab) -> dict[str, Callable]:
    """The timers this machine has: all six on a GPU; without one, the host clock and
    its stand-in for the kernel timer."""
    if not lab.cuda:
        return {KERNEL: book_timer("kernel"), HOST: book_timer("host_sync")}
    return {
        KERNEL: book_timer("kernel"),
        KERNEL_FLUSHED: book_timer("kernel", flush_l2=True),
        EVENTS: book_timer("cuda_event"),
        HOST: book_timer("host_sync"),
        DO_BENCH: triton_do_bench,
        DO_BENCH_GRAPH: triton_do_bench_cudagraph,
    }


# --8<-- [start:rounds]
def time_in_rounds(call, lab, chosen: dict[str, Callable], *, rounds: int, samples: int,
                   windows: dict[str, list[tuple[float, float]]]) -> dict[str, list[list[float]]]:
    """Each timer once per round, in the lab's rotating order (round_order), so
    that a drift of clocks or heat falls on every timer alike: timer -> one list
    of samples (seconds per call) per round. Each timer's blocks go to ``windows``."""
    per_round: dict[str, list[list[float]]] = {name: [] for name in chosen}
    for r in range(rounds):
        for name in round_order(list(chosen), r):
            began = time.monotonic()
            per_round[name].append(chosen[name](call, lab, samples))
            windows.setdefault(name, []).append((began, time.monotonic()))
            lab.load.window(*windows[name][-1])
    return per_round
# --8<-- [end:rounds]


def keep_clocks(lab, op: str, windows: dict[str, list[tuple[float, float]]]) -> None:
    """Each timer's SM clock, the median of the sampler's readings inside its own blocks:
    a timer that runs its op back to back for long (Triton's) heats the GPU, and a GEMM
    under a power cap runs at a lower clock than one that starts from idle."""
    samples = lab.load.stop()  # once every block of every op has ended
    for name, spans in windows.items():
        inside = [s.sm_mhz for s in samples if any(a <= s.t <= b for a, b in spans)]
        if inside:
            lab.value(case={"op": op, "timer": name}, metric="sm_clock", unit="MHz",
                      value=statistics.median(inside))
        else:
            lab.note(f"SM clock, {op}, {name}", "no sampler reading inside its blocks (each too short)")


def keep(lab, op: str, per_round: dict[str, list[list[float]]], *, rounds: int) -> None:
    """Each timer's samples, its ratio to the kernel timer per round and, for Triton's,
    what a default call returns."""
    kernel = [statistics.median(r) for r in per_round[KERNEL]]
    for name, rounds_of in per_round.items():
        case = {"op": op, "timer": name}
        method = METHODS[name] if lab.cuda else "host_sync (no GPU: the host clock stands in)"
        lab.keep_samples([s * 1e6 for r in rounds_of for s in r], case=case, metric="time", unit="us",
                         method=f"{method}; {rounds} interleaved rounds", warmup=BLOCK_WARMUP, inner=1)
        if name != KERNEL:
            lab.keep_samples([statistics.median(r) / k for r, k in zip(rounds_of, kernel)], case=case,
                             metric="vs_kernel", unit="x",
                             method="per round: the median of its samples over the kernel timer's")
        if name in TRITON:
            lab.keep_samples([statistics.mean(r) * 1e6 for r in rounds_of], case=case, metric="returned",
                             unit="us", method="its default return (return_mode='mean'), one per round")
            lab.keep_samples([statistics.mean(r) / k for r, k in zip(rounds_of, kernel)], case=case,
                             metric="returned_vs_kernel", unit="x",
                             method="per round: its default return over the kernel timer's median")


# -- the kernels -------------------------------------------------------------------------
def _written(lab, name: str, out: torch.Tensor) -> None:
    """The output was poisoned with NaN before the checked call: every element must be written."""
    unwritten = torch.isnan(out).sum().reshape(1).double()
    lab.check(f"{name}: every element written", unwritten, torch.zeros_like(unwritten), tolerance=0)


def tiny_add(lab):
    """4 KiB per tensor: the kernel lasts less than its launch."""
    n = 1024
    a, b = torch.randn(n, device=lab.device), torch.randn(n, device=lab.device)
    out = torch.full_like(a, float("nan"))

    def call():
        torch.add(a, b, out=out)

    call()
    name = "add, 4 KiB per tensor"
    lab.check(name, out, a.double() + b.double(), tolerance=1e-6)
    _written(lab, name, out)
    return name, call


def big_add(lab):
    """The same add at 64 MiB per tensor (256 KiB on the CPU): memory-bound, its working set
    (two reads and a write, 192 MiB) over three times the L2."""
    n = 2**16 if lab.quick else 2**24
    a, b = torch.randn(n, device=lab.device), torch.randn(n, device=lab.device)
    out = torch.full_like(a, float("nan"))

    def call():
        torch.add(a, b, out=out)

    call()
    name = f"add, {n * 4 // 2**10} KiB per tensor" if lab.quick else f"add, {n * 4 // 2**20} MiB per tensor"
    lab.check(name, out, a.double() + b.double(), tolerance=1e-6)
    _written(lab, name, out)
    return name, call


def gemm(lab):
    """bf16 8192³ (float32 128³ on the CPU): the kernel is all there is."""
    n, dtype = (128, torch.float32) if lab.quick or not lab.cuda else (8192, torch.bfloat16)
    g = torch.Generator(device=lab.device).manual_seed(n)
    a = (torch.randn(n, n, generator=g, device=lab.device) / n**0.25).to(dtype)
    b = (torch.randn(n, n, generator=g, device=lab.device) / n**0.25).to(dtype)
    c = torch.full((n, n), float("nan"), device=lab.device, dtype=dtype)

    def call():
        torch.mm(a, b, out=c)

    call()
    name = f"{'bf16' if dtype == torch.bfloat16 else 'float32'} GEMM {n}³"
    # 64 rows against float64: bf16 operands land between 1e-3 and 1e-2.
    lab.check(name, c[:64], a[:64].double() @ b.double(), tolerance=1e-2)
    _written(lab, name, c)
    return name, call


OPS = (tiny_add, big_add, gemm)


def triton_facts() -> dict:
    """The Triton that ran, and the defaults its timers ran with (read from its signatures)."""
    import triton
    from triton.testing import do_bench, do_bench_cudagraph

    def defaults(fn):
        return {k: p.default for k, p in inspect.signature(fn).parameters.items()
                if k in ("warmup", "rep", "return_mode")}

    facts = {"version": triton.__version__, "do_bench defaults": defaults(do_bench),
             "do_bench_cudagraph defaults": defaults(do_bench_cudagraph)}
    try:  # the flush buffer do_bench zeroes before each call (a runtime internal: noted if it moved)
        from triton.runtime import driver

        cache = driver.active.get_empty_cache_for_benchmark()
        facts["do_bench flush buffer (MiB)"] = cache.numel() * cache.element_size() / 2**20
        del cache
    except Exception as exc:  # noqa: BLE001 - an observation, not a check
        facts["do_bench flush buffer (MiB)"] = f"not read: {type(exc).__name__}"
    return facts


def measure(lab) -> None:
    if lab.cuda:
        try:
            lab.note("triton", triton_facts())
        except ImportError:
            from examples.lab.harness import Unavailable

            raise Unavailable("needs triton (triton.testing's do_bench): pip install triton") from None
    else:
        lab.note("triton", "do_bench and do_bench_cudagraph skipped: they need a CUDA GPU")
    # 4 rounds: each timer twice early and twice late. About 9 s on an H200, most of it
    # Triton's own loops (~0.13 s per do_bench call, ~0.3 s per do_bench_cudagraph call).
    rounds, samples = (2, 3) if lab.quick else (4, 25)
    chosen = timers(lab)
    windows: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for build in OPS:
        op, call = build(lab)
        for _ in range(lab.warmup):
            call()
        lab.synchronize()
        windows[op] = {}
        keep(lab, op, time_in_rounds(call, lab, chosen, rounds=rounds, samples=samples, windows=windows[op]),
             rounds=rounds)
        del call
        if lab.cuda:
            torch.cuda.empty_cache()
    if lab.cuda:
        for op, of_op in windows.items():
            keep_clocks(lab, op, of_op)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
