"""FP8 vs BF16 matrix multiplication through ``torch._scaled_mm``.

FP8 (e4m3: 4 exponent bits, 3 mantissa bits, largest value 448) needs a
scale per tensor so that the values use its range. ``torch._scaled_mm``
multiplies two FP8 matrices with those scales and writes BF16 (cuBLASLt on
a Hopper GPU). Checked against float64 products, then timed against a BF16
matmul of the same shape.
"""

from __future__ import annotations

import sys

import torch

E4M3 = torch.float8_e4m3fn


# --8<-- [start:fp8]
def to_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale x so that its largest magnitude maps to e4m3's largest, cast."""
    scale = x.abs().max().float() / torch.finfo(E4M3).max
    return (x / scale).to(E4M3), scale


def fp8_matmul(a8, sa, b8, sb) -> torch.Tensor:
    # cuBLASLt wants the second operand column-major: pass b8 transposed.
    return torch._scaled_mm(a8, b8.t().contiguous().t(), scale_a=sa,
                            scale_b=sb, out_dtype=torch.bfloat16)


# --8<-- [end:fp8]


def measure(lab) -> None:
    n = 512 if lab.quick else 8192
    a = torch.randn(n, n, device=lab.device)
    b = torch.randn(n, n, device=lab.device)
    exact = a.double() @ b.double()
    a16, b16 = a.bfloat16(), b.bfloat16()
    (a8, sa), (b8, sb) = to_fp8(a), to_fp8(b)
    # Each kernel is right for the operands it was given ...
    lab.check("bf16 matmul", a16 @ b16, a16.double() @ b16.double(),
              tolerance=1e-2)
    dequant_a, dequant_b = a8.double() * sa, b8.double() * sb
    lab.check("fp8 _scaled_mm", fp8_matmul(a8, sa, b8, sb),
              dequant_a @ dequant_b, tolerance=1e-2)
    # ... and the formats cost this much accuracy against the fp32 inputs.
    for name, out in (("bf16", a16 @ b16), ("fp8 e4m3", fp8_matmul(a8, sa, b8, sb))):
        err = (out.double() - exact).norm() / exact.norm()
        lab.value(case={"format": name, "n": n}, metric="error_vs_fp32",
                  unit="", value=err.item())
    flops = 2 * n**3
    runs = {"bf16": lambda: a16 @ b16,
            "fp8 e4m3": lambda: fp8_matmul(a8, sa, b8, sb)}
    t = {}
    for name, fn in runs.items():
        case = {"format": name, "n": n}
        t[name] = lab.time(fn, case=case, metric="time", unit="ms").median
        lab.value(case=case, metric="rate", unit="TFLOP/s",
                  value=flops / (t[name] / 1e3) / 1e12)
    lab.value(case={"format": "fp8 e4m3", "n": n}, metric="speedup",
              unit="x", value=t["bf16"] / t["fp8 e4m3"])


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
