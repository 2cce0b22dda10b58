"""A decode-like loop: eager vs a CUDA graph vs ``torch.compile``.

Generating one token runs every layer once at batch size 1: many small
kernels, each too short to hide the cost of launching the next. This example
stacks the step of :mod:`examples.graphs.capture_replay` into ``layers``
layers and times one token's step three ways, and counts the kernels and the
time the GPU was actually busy (from the profiler) so the gap can be read off.

On a machine without a GPU only the eager step runs (graphs need CUDA, and
compiling on the CPU takes minutes of C++ builds, which the compiler chapter
covers).
"""

from __future__ import annotations

import sys
import time

import torch

from examples.graphs.capture_replay import Block, capture


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
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]
    ) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    kernels = [
        e
        for e in prof.events()
        if e.device_type == DeviceType.CUDA
        and not e.name.startswith(("Memcpy", "Memset"))
    ]
    if not kernels:
        return None
    busy_us = sum(e.time_range.elapsed_us() for e in kernels)
    by_name: dict[str, float] = {}
    for e in kernels:
        by_name[e.name] = by_name.get(e.name, 0.0) + e.time_range.elapsed_us()
    costliest = sorted(by_name, key=by_name.get, reverse=True)[:3]
    names = [name[:120] for name in costliest]
    return len(kernels) / steps, busy_us / steps, names


def measure(lab) -> None:
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    if lab.quick:
        grid = [(64, 2)]
    else:
        grid = [(h, n) for h in (1024, 4096) for n in (8, 32)]
    for hidden, layers in grid:
        _measure_size(lab, hidden, layers, dtype)
        if lab.cuda:
            torch.cuda.empty_cache()


#: The one size compiled: each compile costs seconds.
COMPILE_AT = {"hidden": 1024, "layers": 32}


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


def _measure_size(lab, hidden: int, layers: int, dtype) -> None:
    case = {"hidden": hidden, "layers": layers}
    decode_step = make_decoder(layers, hidden, lab.device, dtype)
    x = torch.randn(1, hidden, device=lab.device, dtype=dtype)
    eager_row = {**case, "mode": "eager"}
    eager = lab.time(lambda: decode_step(x), case=eager_row, metric="step")
    if not lab.cuda:
        return
    kernels = _keep_profile(lab, eager_row, lambda: decode_step(x))
    if kernels:
        lab.value(
            case=eager_row,
            metric="per_kernel",
            value=eager.median / kernels,
            unit="us",
        )

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
    graph_row = {**case, "mode": "graph"}
    replayed = lab.time(graph.replay, case=graph_row, metric="step")
    lab.value(
        case=graph_row,
        metric="speedup",
        value=eager.median / replayed.median,
        unit="x",
    )
    if case == COMPILE_AT:
        _measure_compiled(lab, case, decode_step, dtype, eager.median)


def _measure_compiled(lab, case, decode_step, dtype, eager_us: float) -> None:
    """Compile: fusion alone, fusion replayed as graphs, and a pitfall."""
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
        timed = lab.time(lambda: compiled(x), case=row, metric="step")
        lab.value(
            case=row, metric="speedup", value=eager_us / timed.median, unit="x"
        )
        _keep_profile(lab, row, lambda: compiled(x))


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
