"""Weight-only int8: each weight row stored as int8 with one bf16 scale.

At batch 1 a decode step is a stream of matrix-vector products: the time is
the bytes of the weights, so storing them in one byte instead of two halves
the floor. The activations stay bf16; each weight is turned back into a
number (int8 × its row's scale) in registers, inside the kernel that reads
it, so the bf16 copy of the weight never exists in memory.

:func:`int8_gemv` is that kernel, in Triton, written for a handful of rows
of ``x`` (decode). It is registered as the operator ``p2s::int8_linear`` so
that ``torch.compile`` treats it as one opaque call and CUDA graphs capture
its launch; on the CPU the operator runs the same arithmetic in PyTorch.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from examples.capstone.model import Layer, Weights
from examples.lab.compile_candidates import compile_candidates

try:  # Triton is optional on the CPU
    import triton
    import triton.language as tl
    import triton.testing
except ImportError:  # pragma: no cover - the [triton] extra is installed in CI
    triton = None


class Int8Weight(NamedTuple):
    q: torch.Tensor  # int8 [out, in]
    scale: torch.Tensor  # [out], the activations' dtype


# --8<-- [start:quantize]
def quantize(w: torch.Tensor) -> Int8Weight:
    """Symmetric per-row int8: row i is q[i] × scale[i], |q| ≤ 127."""
    scale = w.float().abs().amax(dim=1).clamp(min=1e-8) / 127.0
    q = torch.round(w.float() / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return Int8Weight(q, scale.to(w.dtype))
# --8<-- [end:quantize]


def quantized(w: Weights, then: Callable[[int], None] | None = None) -> Weights:
    """The same model with every matrix a step multiplies by in int8 (the embedding and
    the norms stay shared). ``then(i)`` runs once layer ``i``'s int8 copy exists, and
    ``then(-1)`` after the head's: where the GPU has no room for both models, the caller
    moves those bf16 matrices out there, so that the two never sit on it whole."""
    layers = []
    for i, lay in enumerate(w.layers):
        layers.append(Layer(lay.attn_norm, quantize(lay.wqkv), quantize(lay.wo), lay.ffn_norm,
                            quantize(lay.w13), quantize(lay.w2)))
        if then:
            then(i)
    output = quantize(w.output)
    if then:
        then(-1)
    return Weights(w.config, w.embed, layers, w.norm, output)


def autotune_bench(kernel_call, quantiles):
    """The timer the book's autotuned kernels choose with: 25 ms of calls per
    candidate, not Triton's default 100. Each call follows an L2 flush; a
    matrix-vector product of Llama 3 8B takes 10-250 µs, so that is the median
    of 80 to 300 calls, which already separates candidates a per cent apart,
    and every candidate of every shape costs a quarter of the time."""
    return triton.testing.do_bench(kernel_call, warmup=5, rep=25, quantiles=quantiles)


if triton is not None:
    # --8<-- [start:kernel]
    # The blocks that can win. Of the six first searched (BLOCK_N 8-64, BLOCK_K 128-512,
    # 4 or 8 warps), every committed run on the H100 and the H200 (8 runs, the record's
    # note "int8 blocks the autotuner kept") chose (8, 512) for the layers' products and
    # (16, 256) for the head, with 4 warps; (16, 512) stays as their neighbour. A choice
    # at the edge of the list in that note says to widen it again.
    @triton.autotune(
        configs=[
            triton.Config({"BLOCK_N": bn, "BLOCK_K": bk}, num_warps=4)
            for bn, bk in [(8, 512), (16, 256), (16, 512)]
        ],
        key=["N", "K"],
        do_bench=autotune_bench,
    )
    @triton.jit
    def _int8_gemv_kernel(x_ptr, q_ptr, scale_ptr, y_ptr, N, K,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        # One program: BLOCK_N outputs of one row of x, reading BLOCK_N
        # weight rows once, in BLOCK_K-wide strips of int8.
        row = tl.program_id(1)
        n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            x = tl.load(x_ptr + row * K + k, mask=k < K, other=0.0)
            w = tl.load(q_ptr + n[:, None] * K + k[None, :],
                        mask=(n[:, None] < N) & (k[None, :] < K), other=0)
            acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
        scale = tl.load(scale_ptr + n, mask=n < N, other=0.0).to(tl.float32)
        y = tl.sum(acc, axis=1) * scale
        tl.store(y_ptr + row * N + n, y.to(y_ptr.dtype.element_ty), mask=n < N)
    # --8<-- [end:kernel]


def int8_gemv(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor,
              blocks: dict | None = None) -> torch.Tensor:
    """x [rows, K] (bf16) times the int8 weight [N, K]ᵀ with its scales: [rows, N].

    ``blocks`` fixes BLOCK_N/BLOCK_K instead of autotuning (Triton's CPU
    interpreter, which the tests use, has no benchmarker to autotune with).
    """
    rows, k = x.shape
    n = q.shape[0]
    y = torch.empty(rows, n, device=x.device, dtype=x.dtype)
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_N"]), rows)  # noqa: E731
    if blocks is None:
        compile_candidates(_int8_gemv_kernel, grid, x, q, scale, y, n, k)  # all at once, before it times them
        _int8_gemv_kernel[grid](x, q, scale, y, n, k)
    else:
        _int8_gemv_kernel.fn[grid](x, q, scale, y, n, k, **blocks)
    return y


def int8_chosen_configs() -> list[str]:
    """What the autotuner kept for each shape it has seen: (N, K) -> blocks (the
    evidence a later pruning of its candidates can cite)."""
    if triton is None:
        return []
    return [f"N={key[0]} K={key[1]}: BLOCK_N={cfg.kwargs['BLOCK_N']} BLOCK_K={cfg.kwargs['BLOCK_K']} "
            f"warps={cfg.num_warps}" for key, cfg in _int8_gemv_kernel.cache.items()]


def reference_int8_linear(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The same product in PyTorch: dequantize, then multiply (a bf16 copy exists)."""
    return torch.nn.functional.linear(x, q.to(x.dtype)) * scale


@torch.library.custom_op("p2s::int8_linear", mutates_args=())
def int8_linear_op(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1])
    if flat.is_cuda and triton is not None:
        out = int8_gemv(flat.contiguous(), q, scale)
    else:
        out = reference_int8_linear(flat, q, scale)
    return out.view(*x.shape[:-1], q.shape[0])


@int8_linear_op.register_fake
def _(x, q, scale):
    return x.new_empty(*x.shape[:-1], q.shape[0])


def int8_linear(x: torch.Tensor, w: Int8Weight) -> torch.Tensor:
    """A drop-in for ``F.linear(x, weight)`` when the weight is an :class:`Int8Weight`."""
    return int8_linear_op(x, w.q, w.scale)


# -- command line: the error and the bytes of one quantized matrix ---------------------
EXAMPLE_ARGV = ["--rows", "4096", "--cols", "4096"]


def main(argv: list[str] | None = None) -> int:
    from examples.lab.cli import ArgumentParser, positive

    parser = ArgumentParser(prog="python -m examples.capstone.int8_linear",
                            description="Quantize a random weight matrix to int8 rows; report error and bytes.")
    parser.add_argument("--rows", type=positive(int), default=4096, help="output features")
    parser.add_argument("--cols", type=positive(int), default=4096, help="input features")
    args = parser.parse_args(argv)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(args.rows, args.cols, generator=g) / args.cols**0.5
    x = torch.randn(8, args.cols, generator=g)
    q = quantize(w)
    exact = x @ w.T
    err = ((int8_linear(x, q) - exact).norm() / exact.norm()).item()
    bf16_bytes = w.numel() * 2
    int8_bytes = q.q.numel() + q.scale.numel() * 2
    print(f"bytes: {bf16_bytes / 1e6:.2f} MB in bf16, {int8_bytes / 1e6:.2f} MB as int8 rows + scales "
          f"({int8_bytes / bf16_bytes:.3f} of bf16)")
    print(f"product error: {err:.2e} relative (the products of {x.shape[0]} random vectors)")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
