"""The memory system in numbers: what a read costs depends on which bytes it asks for.

NVIDIA's guides describe a warp's loads as served in 32-byte sectors: the L1 and the L2 move whole
sectors, four to a 128-byte line, whatever a thread asked for (CUDA C++ Best Practices Guide, "Coalesced Access to
Global Memory", https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/index.html#coalesced-access-to-global-memory;
the Hopper tuning guide, https://docs.nvidia.com/cuda/hopper-tuning-guide/index.html, keeps the
same memory model). Read as a cost model, that is one line: useful bandwidth = peak x useful bytes
per byte fetched, with 32-byte fetches. This topic tests it with two Triton kernels over a 2 GiB float32 tensor (40 times the
50 MB L2, so every sector comes from HBM), each summing what it reads:

* ``strided_sum``: lane i reads word ``i * STRIDE``. Stride 1 is the coalesced stream (the peak of
  the model); strides 2, 4 and 8 use 1/2, 1/4 and 1/8 of each sector; strides 16 and 32 still
  use 4 of its 32 bytes, so the model predicts them no slower *per useful byte* than stride 8;
* ``gather_sum``: an index array (int32, read coalesced) names sectors or lines in the order of a
  random permutation, and the kernel reads 4 bytes of each sector, all 32 bytes of each sector,
  or all 128 bytes of each line. The index costs 4 bytes per gather, counted as fetched.

Every variant is timed by the GPU's own kernel durations (``timer="kernel"``) with the L2 flushed
before each sample, all in the same interleaved rounds; each row keeps its ``bandwidth`` (useful
bytes over time), the model's ``useful_share`` and ``predicted`` bandwidth (the coalesced
stream's times that share), and ``vs_prediction``: its useful bandwidth over the prediction,
paired per round with the stream. Each kernel's sum is checked against torch first; each gather
also on a prefix of its indices, where a kernel that ignored them would read other words.

Shared-memory banks are not measured: Triton picks its kernels' shared-memory layouts and
swizzles itself, so a Triton kernel cannot ask for a bank conflict.

Cost on an H200 (four runs): about 3 s, and 6.2 GiB of GPU memory at the peak (the 2 GiB tensor,
320 MiB of indices, the flush buffer, randperm's transients); 9 variants x 85 rounds of 0.1-2 ms
each are under 1 s of kernels, the rest is set-up, checks and compiling. On the CPU (``--quick``), the kernels run in Triton's
interpreter on 64 Ki words: the path runs and checks, its numbers say nothing about a GPU.
"""
from __future__ import annotations

import os
import sys

import torch

if not torch.cuda.is_available():  # Triton's interpreter must be chosen before @triton.jit
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

#: float32 words: 2 GiB, 40 times the L2 of an H100 or H200; under 2**31, so int32 offsets do.
GPU_WORDS = 1 << 29
#: A whole number of lines, but of no block: the quick path runs the kernels' masks too.
QUICK_WORDS = 3 * 2**14 + 5 * 32
WORD = 4  # bytes
SECTOR = 32  # bytes: what the L1 and the L2 move
LINE = 128  # bytes: four sectors
STRIDES = (1, 2, 4, 8, 16, 32)
#: Bytes each random gather uses, with the unit its index names (bytes).
GATHERS = ((WORD, SECTOR), (SECTOR, SECTOR), (LINE, LINE))
BLOCK_WORDS = 2048  # words each program reads: 8 per thread at 8 warps
WARPS = 8


# --8<-- [start:kernels]
@triton.jit
def strided_sum(x_ptr, partial_ptr, count, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    # Lane i reads word i * STRIDE: neighbouring lanes of a warp are STRIDE words apart.
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    values = tl.load(x_ptr + i * STRIDE, mask=i < count, other=0.0)
    tl.store(partial_ptr + tl.program_id(0), tl.sum(values, axis=0))


@triton.jit
def gather_sum(x_ptr, index_ptr, partial_ptr, count, UNIT: tl.constexpr, WIDTH: tl.constexpr,
               BLOCK: tl.constexpr):
    # Index k names unit index[k] of UNIT words, in random order; read its first WIDTH words.
    k = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    unit = tl.load(index_ptr + k, mask=k < count, other=0)
    words = unit[:, None] * UNIT + tl.arange(0, WIDTH)[None, :]
    values = tl.load(x_ptr + words, mask=(k < count)[:, None], other=0.0)
    tl.store(partial_ptr + tl.program_id(0), tl.sum(tl.sum(values, axis=1), axis=0))
# --8<-- [end:kernels]


# --8<-- [start:model]
def useful_share(used: int, fetched_per_use: int, index: int = 0) -> float:
    """The model: of the bytes that cross from HBM, the share a kernel uses. ``used`` bytes of
    every ``fetched_per_use`` (whole sectors), plus ``index`` bytes read to find them."""
    return used / (fetched_per_use + index)


def strided_share(stride: int) -> float:
    """Stride s words, in the sector model: each sector fetched holds 8/s of the words asked for,
    and at least one (past stride 8 the sectors between are skipped, not fetched)."""
    return useful_share(WORD * max(1, SECTOR // WORD // stride), SECTOR)


def gather_share(used: int, unit: int) -> float:
    """A gather of ``used`` bytes from a random ``unit``: the unit's sectors, and a 4-byte index."""
    return useful_share(used, -(-used // SECTOR) * SECTOR, index=WORD)
# --8<-- [end:model]


def strided_read(x: torch.Tensor, stride: int, partial: torch.Tensor):
    """A call summing every ``stride``-th word of ``x`` into ``partial`` (one sum per program)."""
    count = x.numel() // stride
    grid = (triton.cdiv(count, BLOCK_WORDS),)
    return lambda: strided_sum[grid](x, partial, count, STRIDE=stride, BLOCK=BLOCK_WORDS,
                                     num_warps=WARPS)


def gather_read(x: torch.Tensor, index: torch.Tensor, unit: int, used: int, partial: torch.Tensor,
                count: int | None = None):
    """A call summing the first ``used`` bytes of the ``unit``-byte units ``index`` names, in its
    order (the first ``count`` of them), into ``partial``."""
    count = index.numel() if count is None else count
    width = used // WORD
    block = BLOCK_WORDS // width  # indices per program: the same 2048 words read, at most
    grid = (triton.cdiv(count, block),)
    return lambda: gather_sum[grid](x, index, partial, count, UNIT=unit // WORD, WIDTH=width,
                                    BLOCK=block, num_warps=WARPS)


def partials_for(count: int, per_program: int, device) -> torch.Tensor:
    return torch.empty(triton.cdiv(count, per_program), device=device, dtype=torch.float32)


def exact_sum(t: torch.Tensor) -> torch.Tensor:
    """float64 sum, 64 Mi elements at a time (a 2 GiB tensor in float64 whole would be 4 GiB)."""
    return sum(chunk.double().sum() for chunk in t.split(1 << 26))


def check_call(lab, name: str, call, partial: torch.Tensor, expected: torch.Tensor, programs: int) -> None:
    """Poison the partial sums, run once, compare the total of the first ``programs`` (those the
    call writes) with the float64 reference."""
    partial.fill_(float("nan"))  # an unwritten partial makes the total NaN: the check fails
    call()
    lab.check(name, partial[:programs].double().sum().reshape(1), expected.reshape(1), tolerance=1e-5)


def measure(lab) -> None:
    words = QUICK_WORDS if lab.quick or not lab.cuda else GPU_WORDS
    dev = lab.device
    # Permutations first: randperm's int64 output and its sort are the largest transients.
    sectors = torch.randperm(words * WORD // SECTOR, device=dev).to(torch.int32)
    lines = torch.randperm(words * WORD // LINE, device=dev).to(torch.int32)
    x = torch.rand(words, device=dev, dtype=torch.float32)  # positive: no cancelling in the sums
    by_unit = {SECTOR: sectors, LINE: lines}

    calls, rows, shares = {}, {}, {}
    for stride in STRIDES:
        name = "coalesced" if stride == 1 else f"stride {stride}"
        partial = partials_for(words // stride, BLOCK_WORDS, dev)
        calls[name] = strided_read(x, stride, partial)
        check_call(lab, f"{name}: sum of the words read", calls[name], partial, exact_sum(x[::stride]),
                   partial.numel())
        rows[name] = {"pattern": "strided", "stride": stride, "bytes_used": WORD}
        shares[name] = (strided_share(stride), WORD * (words // stride))
    for used, unit in GATHERS:
        index = by_unit[unit]
        name = f"random {used} B of each {unit} B"
        per_program = BLOCK_WORDS // (used // WORD)
        partial = partials_for(index.numel(), per_program, dev)
        units = x.view(-1, unit // WORD)[:, :used // WORD]
        # A prefix first: a kernel that ignored the indices would sum other words there.
        some = 1000 + index.numel() // 7
        check_call(lab, f"{name}: the first {some} indices", gather_read(x, index, unit, used, partial, some),
                   partial, units[index[:some].long()].double().sum(), triton.cdiv(some, per_program))
        calls[name] = gather_read(x, index, unit, used, partial)
        check_call(lab, f"{name}: every index", calls[name], partial,
                   sum(units[part.long()].double().sum() for part in index.split(1 << 20)), partial.numel())
        rows[name] = {"pattern": "random gather", "unit_bytes": unit, "bytes_used": used}
        shares[name] = (gather_share(used, unit), used * index.numel())

    # --8<-- [start:compare]
    # One set of interleaved rounds: the stream's samples pair with every other variant's, so
    # vs_prediction is (its useful bandwidth / its share) over the stream's, round by round.
    base_bytes = shares["coalesced"][1]
    times = lab.compare_rows(
        calls, {name: (rows[name], "time") for name in calls}, baseline="coalesced",
        ratios={name: (rows[name], "vs_prediction", useful / base_bytes / share)
                for name, (share, useful) in shares.items() if name != "coalesced"},
        timer="kernel", flush_l2=True)
    peak = base_bytes / (times["coalesced"].median * 1e-6) / 1e9
    for name, t in times.items():
        share, useful = shares[name]
        lab.value(case=rows[name], metric="bandwidth", unit="GB/s", value=useful / (t.median * 1e-6) / 1e9)
        lab.value(case=rows[name], metric="useful_share", unit="x", value=share)
        lab.value(case=rows[name], metric="predicted", unit="GB/s", value=peak * share)
    # --8<-- [end:compare]
    lab.note("tensor read", f"{words * WORD / 2**30:g} GiB of float32 ({words} words)")
    lab.note("gathers", f"{sectors.numel()} random sectors, {lines.numel()} random lines; "
                        "int32 indices from torch.randperm, read coalesced")


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
