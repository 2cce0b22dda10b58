"""A decode-like loop: eager vs a CUDA graph vs ``torch.compile``.

Generating one token runs every layer once at batch size 1: many small
kernels, each too short to hide the cost of launching the next. This example
stacks the step of :mod:`examples.graphs.capture_replay` into ``layers``
layers and times one token's step three ways, and counts the kernels and the
time the GPU was actually busy (from the profiler) so the gap can be read off.
The ways of one size are timed interleaved in rounds (``Lab.compare``), so
each speedup is a paired ratio against the eager step of the same round. The
eager step's cost per kernel is the host's, and hosts of one GPU kind differ
by up to 2x: it is also kept in units of this run's tiny op
(``lab.host_reference["tiny_op_us"]``), ``per_tiny_op``.

On a machine without a GPU only the eager step runs (graphs need CUDA, and
compiling on the CPU takes minutes of C++ builds, which the compiler chapter
covers).
"""

from __future__ import annotations

import sys
import time

import torch

from examples.graphs.capture_replay import Block, capture
from examples.lab import timing
from examples.lab.kernels import gpu_split


# --8<-- [start:model]
def make_decoder(
    layers: int, hidden: int, device: torch.device, dtype: torch.dtype
) -> torch.nn.Module:
    """``layers`` blocks in turn: one token's trip through the model."""
    return torch.nn.Sequential(
        *(Block(hidden, device, dtype) for _ in range(layers))
    )


def with_plain_weights(decoder: torch.nn.Module):
    """The same step, its weights passed as ordinary tensors, not parameters."""
    weights = {name: p.detach() for name, p in decoder.named_parameters()}
    return lambda x: torch.func.functional_call(decoder, weights, (x,))


# --8<-- [end:model]


def profile_kernels(
    fn, steps: int = 5
) -> tuple[float, float, list[str]] | None:
    """Kernels and GPU-busy µs per call of ``fn``, and the costliest kernels."""
    split = gpu_split(fn, steps)
    if split is None or not split.durations_us:
        return None
    # busy here is the kernels' own time, summed (copies and fills left out)
    busy_us = sum(map(sum, split.durations_us.values())) / steps
    return split.kernels, busy_us, split.costliest(3)


def measure(lab) -> None:
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    grid = {64: [2]} if lab.quick else {1024: [8, 32], 4096: [8, 32]}
    for hidden, depths in grid.items():
        # One decoder per width; the shallower step is its first layers, so
        # the weights (8.6 GB of them at 4096 x 32) are made once.
        decoder = make_decoder(max(depths), hidden, lab.device, dtype)
        for layers in depths:
            _measure_size(lab, hidden, layers, decoder[:layers], dtype)
        del decoder
        if lab.cuda:
            torch.cuda.empty_cache()


#: The one size compiled, three times. Dynamo and Inductor trace, lower and
#: generate code for every layer (no layer's code is reused for the next), so
#: a compile's time grows with the depth: about 6 s each at 32 layers on an
#: H200 host (2026-11-25), three quarters of the topic. Eight layers show the
#: same fusion, graphs and pitfall with a quarter of the layers to compile.
COMPILE_AT = {"hidden": 1024, "layers": 8}
#: Warm-up calls (rounds on a GPU): every way has run before it is timed
#: (the checks, the capture, the compiles), so a few rounds reach the steady
#: state; reduce-overhead records its graphs for each order of the calls here.
WARMUP = 3


def _keep_profile(lab, row: dict, fn) -> float | None:
    """Keep the kernel count, GPU-busy time and costliest kernels of ``fn``."""
    counted = profile_kernels(fn)
    if counted is None:
        lab.note(f"no kernels profiled, {row['mode']}", True)
        return None
    kernels, busy_us, costliest = counted
    lab.value(case=row, metric="kernels", value=kernels, unit="")
    lab.value(case=row, metric="gpu_busy", value=busy_us, unit="us")
    size = f"{row['hidden']}x{row['layers']}"
    lab.note(f"costliest kernels, {row['mode']} {size}", costliest)
    return kernels


def _measure_size(lab, hidden: int, layers: int, decode_step, dtype) -> None:
    case = {"hidden": hidden, "layers": layers}
    x = torch.randn(1, hidden, device=lab.device, dtype=dtype)
    eager_row = {**case, "mode": "eager"}
    if not lab.cuda:
        lab.time(lambda: decode_step(x), case=eager_row, metric="step",
                 warmup=WARMUP)
        return

    # --8<-- [start:graph]
    static_x = torch.randn(1, hidden, device=lab.device, dtype=dtype)
    graph, static_y = capture(decode_step, static_x)
    # --8<-- [end:graph]
    fresh = torch.randn(1, hidden, device=lab.device, dtype=dtype)
    static_x.copy_(fresh)
    graph.replay()
    lab.check(
        f"graph equals eager, {hidden}x{layers}",
        static_y,
        decode_step(fresh),
        tolerance=1e-3,
    )
    ways = {"eager": lambda: decode_step(x), "graph": graph.replay}
    timed = lab.compare(ways, case=case, key="mode", metric="step",
                        unit="us", baseline="eager", warmup=WARMUP)
    kernels = _keep_profile(lab, eager_row, lambda: decode_step(x))
    if kernels:
        per_kernel = timed["eager"].median / kernels
        lab.value(case=eager_row, metric="per_kernel", value=per_kernel,
                  unit="us")
        lab.value(case=eager_row, metric="per_tiny_op", unit="x",
                  value=per_kernel / lab.host_reference["tiny_op_us"])
    if case == COMPILE_AT:
        _measure_compiled(lab, case, decode_step, dtype, eager_step=lambda: decode_step(x))


def _measure_compiled(lab, case, decode_step, dtype, eager_step) -> None:
    """Compile: fusion alone, fusion replayed as graphs, and a pitfall.

    Each variant is compiled after a reset, so that compile times compare, and
    is timed interleaved with eager alone: two reduce-overhead functions (or
    one beside a hand-captured graph of the same module) timed in one set of
    rounds made CUDAGraph Trees replay into memory another graph had reused
    (an illegal memory access on an H200, 2026-11-25).
    """
    plain = with_plain_weights(decode_step)
    variants = {
        "compile-default": ("default", decode_step),
        "compile-reduce-overhead": ("reduce-overhead", decode_step),
        "compile-reduce-overhead, plain-tensor weights": (
            "reduce-overhead",
            plain,
        ),
    }
    hidden = case["hidden"]
    for label, (mode, fn) in variants.items():
        torch._dynamo.reset()  # compile afresh, so compile times compare
        # --8<-- [start:compiled]
        # "reduce-overhead" replays Inductor's kernels as CUDA graphs
        compiled = torch.compile(fn, mode=mode)
        # --8<-- [end:compiled]
        row = {**case, "mode": label}
        x = torch.randn(1, hidden, device=lab.device, dtype=dtype)
        started = time.perf_counter()
        for _ in range(3):  # compile; reduce-overhead records on a later call
            compiled(x)
        torch.cuda.synchronize()
        lab.value(
            case=row,
            metric="compile_time",
            value=time.perf_counter() - started,
            unit="s",
        )
        fresh = torch.randn(1, hidden, device=lab.device, dtype=dtype)
        lab.check(
            f"{label} equals eager (bf16, fused)",
            compiled(fresh).clone(),
            decode_step(fresh),
            tolerance=5e-2,
        )
        # Its own rounds against eager: the paired speedup, without another graph.
        samples = timing.measure_interleaved(
            {"eager": eager_step, label: lambda: compiled(x)}, device=lab.device,
            timer=lab.timer, warmup=WARMUP, repetitions=lab.repetitions)
        method = f"{lab.timer}, interleaved rounds with eager"
        lab.keep_samples([s * 1e6 for s in samples[label]], case=row, metric="step",
                         unit="us", method=method, warmup=WARMUP, inner=1)
        lab.keep_samples([e / c for e, c in zip(samples["eager"], samples[label])],
                         case=row, metric="speedup", unit="x",
                         method=f"paired ratio eager / {label}, {method}")
        _keep_profile(lab, row, lambda: compiled(x))


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
