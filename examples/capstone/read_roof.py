"""The read roof: how fast this GPU streams bytes it only reads.

    python -m examples.capstone.read_roof --gib 2

A decode step reads its weights and writes almost nothing, so the bandwidth it can reach
is a streaming read's, not a copy's: a copy writes as many bytes as it reads, and the
memory spends time turning the bus around between the two. The roof here is the best of a
few launch shapes of one Triton kernel, in the style of the book's matrix-vector kernels:
each program reads one contiguous stretch of bf16 values, ``BLOCK`` at a time, and adds
them up in float32 (the sum is what makes the loads necessary). Its result is checked
against a float64 sum. Copy is timed beside it, as ``dst.copy_(src)`` of the same size:
read plus write bytes over the time, the figure the book used as its roof before.

On a CPU the same loop runs as ``torch.sum`` over a small tensor: the path runs, its
numbers say nothing about a GPU.
"""
from __future__ import annotations

import sys
from typing import Callable

import torch

from examples.lab.cli import ArgumentParser, fail, positive

try:  # Triton is optional on the CPU
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - the [triton] extra is installed in CI
    triton = None

#: (BLOCK, warps, programs per SM): launch shapes tried; the roof is the best of them.
SHAPES = ((4096, 8, 4), (8192, 8, 4), (8192, 16, 8))
REPETITIONS = 20


if triton is not None:
    # --8<-- [start:kernel]
    @triton.jit
    def _stream_read(x_ptr, partial_ptr, n, per_program, BLOCK: tl.constexpr):
        # One program: a contiguous stretch of per_program values, BLOCK at a time.
        start = tl.program_id(0) * per_program
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for offset in range(start, start + per_program, BLOCK):
            idx = offset + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + idx, mask=idx < n, other=0.0).to(tl.float32)
        tl.store(partial_ptr + tl.program_id(0), tl.sum(acc, axis=0))
    # --8<-- [end:kernel]


def stream_read(x: torch.Tensor, block: int, warps: int, programs: int) -> torch.Tensor:
    """The sum of ``x`` (bf16, 1-D) as one float32 partial sum per program."""
    n = x.numel()
    per_program = triton.cdiv(triton.cdiv(n, programs), block) * block
    partial = torch.empty(programs, device=x.device, dtype=torch.float32)
    _stream_read[(programs,)](x, partial, n, per_program, BLOCK=block, num_warps=warps)
    return partial


def read_calls(x: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    """The streaming reads of ``x`` to time, by launch shape; each returns partial sums.
    On a CPU (or without Triton): ``torch.sum``."""
    if x.device.type != "cuda" or triton is None:
        return {"torch.sum": lambda: x.sum(dtype=torch.float32).reshape(1)}
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    return {f"BLOCK={block}, {warps} warps, {per_sm} programs per SM":
            (lambda block=block, warps=warps, programs=sms * per_sm: stream_read(x, block, warps, programs))
            for block, warps, per_sm in SHAPES}


def check_read(read: Callable[[], torch.Tensor], exact: float, name: str) -> None:
    """The read's partial sums add up to ``exact`` (the float64 sum); uniform values in
    [0, 1) make the sum large and positive, so a relative error means something."""
    got = float(read().double().sum())
    if abs(got - exact) > 1e-5 * exact:
        raise RuntimeError(f"read_roof: {name}: the sum {got} is not the float64 sum {exact}")


def exact_sum(x: torch.Tensor) -> float:
    return float(sum(chunk.double().sum() for chunk in x.split(1 << 26)))


def _median_s(fn: Callable[[], object], repetitions: int) -> float:
    """Median seconds of ``repetitions`` calls after two warm-up calls: CUDA events on a
    GPU, the host clock around each call elsewhere."""
    import time

    for _ in range(2):
        fn()
    times = []
    for _ in range(repetitions):
        if torch.cuda.is_available():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def read_and_copy_gbs(nbytes: int, device: torch.device, repetitions: int = REPETITIONS
                      ) -> tuple[float, float, dict[str, float]]:
    """(read roof GB/s, copy GB/s, read GB/s of every launch shape) over ``nbytes`` of bf16."""
    x = torch.rand(nbytes // 2, device=device, dtype=torch.bfloat16)
    exact = exact_sum(x)
    by_shape = {}
    for name, read in read_calls(x).items():
        check_read(read, exact, name)
        by_shape[name] = nbytes / _median_s(read, repetitions) / 1e9
    dst = torch.empty_like(x)
    copy_gbs = 2 * nbytes / _median_s(lambda: dst.copy_(x), repetitions) / 1e9
    return max(by_shape.values()), copy_gbs, by_shape


EXAMPLE_ARGV = ["--gib", "0.01"]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m examples.capstone.read_roof",
                            description="Streaming-read and copy bandwidth of this GPU.")
    parser.add_argument("--gib", type=positive(float), default=2.0,
                        help="bytes to stream, in GiB (at least 2 on a GPU for a roof)")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    nbytes = int(args.gib * 2**30) // 2 * 2
    if device.type == "cuda" and torch.cuda.mem_get_info()[0] < 2.2 * nbytes:
        fail(f"read_roof: {args.gib:g} GiB to read and as much to copy into do not fit in "
             f"{torch.cuda.mem_get_info()[0] / 2**30:.1f} GiB free; pass a smaller --gib", status=1)
    read, copy, by_shape = read_and_copy_gbs(nbytes, device)
    where = torch.cuda.get_device_name() if device.type == "cuda" else "the CPU (torch.sum; not a GPU figure)"
    print(f"{where}, {nbytes / 2**30:.2f} GiB:")
    for shape, gbs in by_shape.items():
        print(f"  read  {gbs:8.0f} GB/s  ({shape})")
    print(f"  read roof {read:.0f} GB/s, copy {copy:.0f} GB/s (read + write), read / copy {read / copy:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
