"""FP8 vs BF16 matrix multiplication through ``torch._scaled_mm``.

FP8 (e4m3: 4 exponent bits, 3 mantissa bits, largest value 448) needs a
scale per tensor so that the values use its range. ``torch._scaled_mm``
multiplies two FP8 matrices with those scales and writes BF16 (cuBLASLt on
a Hopper GPU). The FP8 operands are cast and laid out once, before any
timing: only ``torch._scaled_mm`` itself is timed, with cuBLASLt's fast
(lower-precision) accumulation off and on. Each variant is checked against
float64 products of its own operands, and its error against the FP32
inputs is kept; then it is timed against a BF16 matmul of the same shape.
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


def measure_size(lab, n: int) -> None:
    a = torch.randn(n, n, device=lab.device)
    b = torch.randn(n, n, device=lab.device)
    exact = a.double() @ b.double()
    a16, b16 = a.bfloat16(), b.bfloat16()
    (a8, sa), (b8, sb) = to_fp8(a), to_fp8(b)
    b8 = column_major(b8)  # laid out once, outside every timed region
    dequant = (a8.double() * sa) @ (b8.double() * sb)
    # Each kernel is right for the operands it was given ...
    bf16 = a16 @ b16
    lab.check(f"bf16 matmul, n={n}", bf16, a16.double() @ b16.double(),
              tolerance=1e-2)
    bf16_case = {"format": "bf16", "n": n}
    lab.value(case=bf16_case, metric="error_vs_fp32", unit="",
              value=((bf16.double() - exact).norm() / exact.norm()).item())
    del bf16
    flops = 2 * n**3
    t16 = lab.time(lambda: a16 @ b16, case=bf16_case, metric="time",
                   unit="ms").median
    lab.value(case=bf16_case, metric="rate", unit="TFLOP/s",
              value=flops / (t16 / 1e3) / 1e12)
    for fast in ("off", "on"):
        case = {"format": "fp8 e4m3", "n": n, "fast_accum": fast}
        on = fast == "on"
        out = fp8_matmul(a8, sa, b8, sb, fast_accum=on)
        lab.check(f"fp8 _scaled_mm, fast_accum {fast}, n={n}", out, dequant,
                  tolerance=TOLERANCE[fast])
        # ... and the format costs this much against the fp32 inputs.
        lab.value(case=case, metric="error_vs_fp32", unit="",
                  value=((out.double() - exact).norm() / exact.norm()).item())
        del out
        t8 = lab.time(lambda: fp8_matmul(a8, sa, b8, sb, fast_accum=on),
                      case=case, metric="time", unit="ms").median
        lab.value(case=case, metric="rate", unit="TFLOP/s",
                  value=flops / (t8 / 1e3) / 1e12)
        lab.value(case=case, metric="speedup", unit="x", value=t16 / t8)
        if lab.cuda and n == max(sizes(lab)):
            lab.note(f"kernels, fp8 fast_accum {fast}, n={n}", kernel_names(
                lambda: fp8_matmul(a8, sa, b8, sb, fast_accum=on)))
    if lab.cuda and n == max(sizes(lab)):
        lab.note(f"kernels, bf16, n={n}", kernel_names(lambda: a16 @ b16))


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
