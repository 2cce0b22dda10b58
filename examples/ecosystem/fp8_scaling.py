"""FP8 scaling recipes: one scale per tensor, per row, or per block of 32 values.

FP8 e4m3 keeps 3 mantissa bits and a range of ±448, so a tensor is multiplied
by a scale that brings its largest magnitude near 448 before the cast, and
divided by it after. Where one scale is shared decides what a few large
values (outliers) cost all the others. The recipes here are the ones the
libraries ship:

* ``tensorwise``: one fp32 scale per tensor (torchao's ``TENSORWISE``,
  Transformer Engine's current and delayed scaling);
* ``rowwise``: one per row, rounded down to a power of two (torchao's
  ``ROWWISE``);
* ``block32``: one per 32 consecutive values of a row, a power of two stored
  in one byte (MXFP8, the OCP microscaling format; Transformer Engine's
  ``MXFP8BlockScaling``, in hardware on Blackwell).

It runs on the CPU: PyTorch casts to and from ``float8_e4m3fn`` there too.
"""
from __future__ import annotations

import sys

import torch

E4M3 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(E4M3).max  # 448
RECIPES = ("tensorwise", "rowwise", "block32")
BLOCK = 32


# --8<-- [start:recipes]
def amax_of(x: torch.Tensor, recipe: str) -> torch.Tensor:
    """The largest magnitude each scale must cover, broadcastable to x's blocks."""
    if recipe == "tensorwise":
        return x.abs().amax()
    if recipe == "rowwise":
        return x.abs().amax(dim=-1, keepdim=True)
    if recipe == "block32":
        return x.abs().unflatten(-1, (-1, BLOCK)).amax(dim=-1, keepdim=True)
    raise ValueError(f"unknown recipe {recipe!r}; choose one of {', '.join(RECIPES)}")


def fp8_round_trip(x: torch.Tensor, recipe: str) -> torch.Tensor:
    """x scaled, cast to e4m3 and back: what the FP8 GEMM sees, in fp32."""
    blocks = x.unflatten(-1, (-1, BLOCK)) if recipe == "block32" else x
    multiplier = FP8_MAX / amax_of(x, recipe).clamp(min=1e-30)
    if recipe != "tensorwise":  # powers of two: exact to apply and to undo
        multiplier = torch.exp2(torch.floor(torch.log2(multiplier)))
    q = (blocks * multiplier).clamp(-FP8_MAX, FP8_MAX).to(E4M3)
    return (q.float() / multiplier).reshape(x.shape)
# --8<-- [end:recipes]


def error_of_the_rest(x: torch.Tensor, outliers: torch.Tensor, recipe: str) -> float:
    """Relative error of the ordinary values (not the outliers) after the round trip:
    what the outliers' share of the scale costs everything else."""
    rest = ~outliers
    return ((fp8_round_trip(x, recipe) - x)[rest].norm() / x[rest].norm()).item()


#: The range over which e4m3 keeps its 3 mantissa bits: largest over smallest normal.
NORMAL_RANGE = FP8_MAX / torch.finfo(E4M3).smallest_normal  # 448 / 2^-6 = 28672


def scale_bytes(rows: int, cols: int, recipe: str) -> int:
    """Bytes of scales: an fp32 per tensor or row, one byte (E8M0) per block."""
    return {"tensorwise": 4, "rowwise": 4 * rows, "block32": rows * cols // BLOCK}[recipe]


def activations(rows: int, cols: int, *, outlier: float, where: str,
                seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian values with 0.5 % of the channels (columns) or of the tokens (rows)
    multiplied by ``outlier``, the pattern LLM activations show; and the outliers' mask."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g)
    mask = torch.zeros(rows, cols, dtype=torch.bool)
    if where == "channels":
        mask[:, torch.randperm(cols, generator=g)[: max(1, cols // 200)]] = True
    elif where == "rows":
        mask[torch.randperm(rows, generator=g)[: max(1, rows // 200)]] = True
    else:
        raise ValueError(f"where must be channels or rows, not {where!r}")
    return torch.where(mask, x * outlier, x), mask


EXAMPLE_ARGV = ["--rows", "1024", "--cols", "4096"]


def main(argv: list[str] | None = None) -> int:
    from examples.lab.cli import ArgumentParser, positive

    parser = ArgumentParser(prog="python -m examples.ecosystem.fp8_scaling",
                            description="FP8 e4m3 round-trip error of the ordinary values, per scaling "
                                        "recipe, as outliers grow.")
    parser.add_argument("--rows", type=positive(int), default=1024)
    parser.add_argument("--cols", type=positive(int), default=4096, help="a multiple of 32")
    args = parser.parse_args(argv)
    if args.cols % BLOCK:
        parser.error(f"--cols must be a multiple of {BLOCK}, got {args.cols}")
    print(f"e4m3 keeps 3 mantissa bits over a range of {NORMAL_RANGE:.0f}x (448 / smallest normal)")
    print(f"{'outliers':22s}" + "".join(f"{r:>12s}" for r in RECIPES))
    for where in ("rows", "channels"):
        for factor in (100.0, 1000.0, 10000.0):
            x, outliers = activations(args.rows, args.cols, outlier=factor, where=where)
            errors = "".join(f"{error_of_the_rest(x, outliers, r):12.4f}" for r in RECIPES)
            print(f"{where + ' x' + format(factor, 'g'):22s}{errors}")
    print(f"{'bytes of scales':22s}" + "".join(f"{scale_bytes(args.rows, args.cols, r):12d}" for r in RECIPES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
