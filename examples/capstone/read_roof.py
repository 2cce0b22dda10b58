"""Is a streaming read faster than a copy? Chapter 9's roof, tested.

    python -m examples.capstone.read_roof

Chapter 9 divides the bytes a decode step reads by the copy bandwidth
(``dst.copy_(src)``: read plus write bytes over the time). A decode step only
reads, and a copy writes as many bytes as it reads, so reading alone might be
faster. This topic streams the same 2 GiB of bf16 (uniform in [0, 1)) four
ways, timed in interleaved rounds:

* ``copy``: ``dst.copy_(src)``, the book's denominator (4 GiB moved);
* ``torch.sum``: PyTorch's reduction, accumulating in float32;
* two Triton read kernels, the best two of an exploration of about a hundred
  launch shapes on one H100 and one H200: a grid-stride loop, and a
  contiguous stretch per program read four blocks per iteration. Each program
  adds its values up in float32 (the sum is what makes the loads necessary)
  and writes one partial sum.

Every read is checked first: its sum against a float64 sum. Each variant gets
its ``time`` (us) and ``bandwidth`` (GB/s: bytes moved over the median time);
each read its ``fraction_of_copy``, its bandwidth over copy's from samples of
the same round; and the run ``read_roof`` (the best read's bandwidth) and
``best_read_over_copy`` (that read's fraction of copy).

Times are the GPU's own kernel durations (the profiler's), in 85 interleaved
rounds (25 of them warm-up). Cost on an H100 or H200: 4.5 GiB of GPU memory;
about 3.6 ms a round on an H100 (less on an H200), 0.3 s in all; with the
set-up, the checks, the profiler and compiling the two kernels, about 2-3 s.
On the CPU, and with ``--quick``, 1 MiB runs (host clock): the path runs, its
numbers say nothing about a GPU.
"""
from __future__ import annotations

import sys
from collections.abc import Callable

import torch

from examples.lab.harness import Unavailable

try:  # Triton is optional on the CPU, where only copy and torch.sum run
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - the [triton] extra is installed in CI
    triton = None

#: bf16 values: 2 GiB, 40 times an H100's or H200's L2, so every byte comes from memory;
#: under 2**31, so int32 offsets address them all.
GPU_ELEMENTS = 1 << 30
SMALL_ELEMENTS = 1 << 19
#: (BLOCK, warps, programs per SM), the best of each kernel in the exploration.
GRID_STRIDE = (2048, 8, 16)
UNROLLED = (1024, 8, 8)
UNROLL = 4


if triton is not None:
    # --8<-- [start:kernels]
    @triton.jit
    def _grid_stride_sum(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
        # Program p reads blocks p, p + P, p + 2P, ...: at every moment the programs
        # together read one contiguous stretch of memory.
        pid = tl.program_id(0)
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for block in range(pid, tl.cdiv(n, BLOCK), tl.num_programs(0)):
            idx = block * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + idx, mask=idx < n, other=0.0).to(tl.float32)
        tl.store(partial_ptr + pid, tl.sum(acc, axis=0))

    @triton.jit
    def _unrolled_sum(x_ptr, partial_ptr, n, per_program, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
        # Each program reads its own contiguous stretch, UNROLL independent loads per
        # iteration: more bytes in flight per program than one load at a time.
        start = tl.program_id(0) * per_program
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for offset in range(start, start + per_program, BLOCK * UNROLL):
            for u in tl.static_range(UNROLL):
                idx = offset + u * BLOCK + tl.arange(0, BLOCK)
                acc += tl.load(x_ptr + idx, mask=idx < n, other=0.0).to(tl.float32)
        tl.store(partial_ptr + tl.program_id(0), tl.sum(acc, axis=0))
    # --8<-- [end:kernels]


def grid_stride_sum(x: torch.Tensor, programs: int) -> torch.Tensor:
    """One float32 partial sum of 1-D ``x`` per program, by the grid-stride kernel."""
    block, warps, _ = GRID_STRIDE
    partial = torch.empty(programs, device=x.device, dtype=torch.float32)
    _grid_stride_sum[(programs,)](x, partial, x.numel(), BLOCK=block, num_warps=warps)
    return partial


def unrolled_sum(x: torch.Tensor, programs: int) -> torch.Tensor:
    """One float32 partial sum of 1-D ``x`` per program, by the unrolled kernel."""
    block, warps, _ = UNROLLED
    step = block * UNROLL
    per_program = triton.cdiv(triton.cdiv(x.numel(), programs), step) * step
    partial = torch.empty(programs, device=x.device, dtype=torch.float32)
    _unrolled_sum[(programs,)](x, partial, x.numel(), per_program, BLOCK=block, UNROLL=UNROLL,
                               num_warps=warps)
    return partial


def reads(x: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    """The ways to read ``x``, by name; each returns sums whose total is ``x``'s sum.
    The Triton kernels compile for a GPU only (the tests run them in the interpreter)."""
    calls = {"torch.sum": lambda: x.sum(dtype=torch.float32)}
    if x.is_cuda:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        calls["Triton, grid-stride"] = lambda: grid_stride_sum(x, GRID_STRIDE[2] * sms)
        calls["Triton, unrolled x4"] = lambda: unrolled_sum(x, UNROLLED[2] * sms)
    return calls


def measure(lab) -> None:
    if lab.cuda and triton is None:
        raise Unavailable("the Triton read kernels need Triton (pip install -e '.[triton]')")
    count = GPU_ELEMENTS if lab.cuda and not lab.quick else SMALL_ELEMENTS
    nbytes = 2 * count
    x = torch.rand(count, device=lab.device, dtype=torch.bfloat16)
    dst = torch.empty_like(x)
    exact = sum(chunk.double().sum() for chunk in x.split(1 << 26))  # 512 MiB of float64 at a time
    variants = {"copy": lambda: dst.copy_(x)}
    for name, read in reads(x).items():
        lab.check(f"{name}: sum of the bf16 values", read().double().sum(), exact, tolerance=1e-5)
        variants[name] = read
    # Interleaved rounds, so that drift in clocks and heat falls on all alike. Each read's
    # fraction of copy is (bytes / its time) over (2 x bytes / copy's time) from the same
    # round. The GPU's own kernel durations: a Triton launch's host time (tens of us,
    # against 0.7 ms of reading) would otherwise count against the Triton reads alone.
    times = lab.compare_rows(
        variants, {name: ({"variant": name}, "time") for name in variants}, baseline="copy",
        ratios={name: ({"variant": name}, "fraction_of_copy", 0.5) for name in variants if name != "copy"},
        timer="kernel")
    bandwidth = {}
    for name, t in times.items():
        moved = 2 * nbytes if name == "copy" else nbytes  # a copy reads and writes every byte
        bandwidth[name] = moved / (t.median * 1e-6) / 1e9
        lab.value(case={"variant": name}, metric="bandwidth", value=bandwidth[name], unit="GB/s")
    best = max((name for name in variants if name != "copy"), key=bandwidth.get)
    fraction = next(r.metrics["fraction_of_copy"] for r in lab.rows() if r.case == {"variant": best})
    lab.value(case={"part": "roof"}, metric="read_roof", value=bandwidth[best], unit="GB/s")
    lab.value(case={"part": "roof"}, metric="best_read_over_copy", value=fraction.median, unit="x")
    lab.note("best read", best)
    lab.note("bytes read", f"{nbytes / 2**20:g} MiB of bf16")


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
