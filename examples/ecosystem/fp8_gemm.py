"""FP8 vs BF16 matrix multiplication through ``torch._scaled_mm``.

FP8 (e4m3: 4 exponent bits, 3 mantissa bits, largest value 448) needs a
scale per tensor so that the values use its range. ``torch._scaled_mm``
multiplies two FP8 matrices with those scales and writes BF16 (cuBLASLt on
a Hopper GPU). The FP8 operands are cast and laid out once, before any
timing: only ``torch._scaled_mm`` itself is timed, with cuBLASLt's fast
(lower-precision) accumulation off and on. Each variant is checked against
float64 products of its own operands, and its error against the FP32
inputs is kept; then the three are timed in interleaved rounds against a
BF16 matmul of the same shape (``lab.compare``), and FP8's ``speedup`` is
the paired ratio of the BF16 and FP8 samples of each round.
"""

from __future__ import annotations

import sys

import torch

from examples.lab.kernels import kernel_names

E4M3 = torch.float8_e4m3fn


# --8<-- [start:fp8]
def to_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale x so that its largest magnitude maps to e4m3's largest, cast."""
    scale = x.abs().max().float() / torch.finfo(E4M3).max
    return (x / scale).to(E4M3), scale


def column_major(b8: torch.Tensor) -> torch.Tensor:
    """The same matrix stored column by column, as cuBLASLt wants the
    second FP8 operand. A full copy: do it once, not per product."""
    return b8.t().contiguous().t()


def fp8_matmul(a8, sa, b8_cm, sb, fast_accum=False) -> torch.Tensor:
    # a8 row-major, b8_cm column-major (column_major above), scales fp32.
    return torch._scaled_mm(a8, b8_cm, scale_a=sa, scale_b=sb,
                            out_dtype=torch.bfloat16,
                            use_fast_accum=fast_accum)


# --8<-- [end:fp8]

#: cuBLASLt's fast accumulation keeps fewer bits in the running sums, so
#: its check allows more error against the exact product of its operands.
TOLERANCE = {"off": 1e-2, "on": 5e-2}


#: The variants, as the record names them (its ``format``), and the fast
#: accumulation flag of each FP8 one.
FP8_VARIANTS = {"fp8 e4m3": False, "fp8 e4m3, fast accum": True}


def measure_size(lab, n: int) -> None:
    a = torch.randn(n, n, device=lab.device)
    b = torch.randn(n, n, device=lab.device)
    exact = a.double() @ b.double()
    a16, b16 = a.bfloat16(), b.bfloat16()
    (a8, sa), (b8, sb) = to_fp8(a), to_fp8(b)
    b8 = column_major(b8)  # laid out once, outside every timed region
    dequant = (a8.double() * sa) @ (b8.double() * sb)
    variants = {"bf16": lambda: a16 @ b16}
    # Each kernel is right for the operands it was given ...
    outputs = {"bf16": (a16 @ b16, a16.double() @ b16.double(), 1e-2)}
    for name, fast in FP8_VARIANTS.items():
        variants[name] = (lambda fast=fast:
                          fp8_matmul(a8, sa, b8, sb, fast_accum=fast))
        outputs[name] = (variants[name](), dequant,
                         TOLERANCE["on" if fast else "off"])
    for name, (out, reference, tolerance) in outputs.items():
        lab.check(f"{name} matmul, n={n}", out, reference, tolerance=tolerance)
        # ... and the format costs this much against the fp32 inputs.
        lab.value(case={"format": name, "n": n}, metric="error_vs_fp32",
                  unit="", value=((out.double() - exact).norm()
                                  / exact.norm()).item())
    del outputs, out, reference, dequant, exact
    # Interleaved rounds: FP8's gain is the BF16 sample over the FP8 one of
    # the same round (``speedup``), so that a drift in the power-limited
    # clocks falls on both formats alike.
    times = lab.compare(variants, case={"n": n}, key="format", metric="time",
                        unit="ms", baseline="bf16")
    for name, t in times.items():
        lab.value(case={"format": name, "n": n}, metric="rate",
                  unit="TFLOP/s", value=2 * n**3 / (t.median / 1e3) / 1e12)
    if lab.cuda and n == max(sizes(lab)):
        for name, fn in variants.items():
            lab.note(f"kernels, {name}, n={n}", kernel_names(fn))


def sizes(lab) -> tuple[int, ...]:
    # Full sizes fill the chip: 8192^3 is ~1.1 TFLOP per product.
    return (256,) if lab.quick else (4096, 8192)


def measure(lab) -> None:
    for n in sizes(lab):
        measure_size(lab, n)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
