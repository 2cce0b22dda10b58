"""cuBLAS vs cuBLASLt, and what a fused epilogue saves.

A linear layer followed by GELU runs as two kernels (the GEMM with its bias,
then GELU reading and writing the whole output again) or as one cuBLASLt
kernel whose epilogue adds the bias and applies GELU before the result is
written (``torch._addmm_activation``). The plain GEMM is also timed with
cuBLAS and with cuBLASLt preferred, and the kernels that ran are noted.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from examples.blas.levels import kernels_of


# --8<-- [start:variants]
def unfused(x, w, b):
    """Two kernels: GEMM + bias, then GELU over the whole output."""
    return F.gelu(F.linear(x, w, b), approximate="tanh")


def fused(x, w, b):
    """One cuBLASLt call; bias and GELU applied in the epilogue."""
    return torch._addmm_activation(b, x, w.t(), use_gelu=True)


# --8<-- [end:variants]


def measure(lab) -> None:
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    shapes = [(256, 256, 512)] if lab.quick else [
        (2048, 4096, 4096), (8192, 4096, 16384)]
    for tokens, d_in, d_out in shapes:
        g = torch.Generator(device=lab.device).manual_seed(tokens)
        x = torch.randn(tokens, d_in, generator=g, device=lab.device)
        w = torch.randn(d_out, d_in, generator=g, device=lab.device)
        w /= d_in**0.5
        b = torch.randn(d_out, generator=g, device=lab.device)
        ref = F.gelu(x.double() @ w.double().t() + b.double(),
                     approximate="tanh")
        x, w, b = x.to(dtype), w.to(dtype), b.to(dtype)
        shape = f"{tokens}x{d_in}x{d_out}"
        times = {}
        for name, fn in (("gemm, then gelu", unfused),
                         ("gelu in the epilogue", fused)):
            lab.check(f"{name} {shape}", fn(x, w, b), ref, tolerance=2e-2)
            case = {"shape": shape, "variant": name}
            t = lab.time(lambda: fn(x, w, b), case=case, metric="time")
            times[name] = t.median
            lab.value(case=case, metric="rate",
                      value=2 * tokens * d_in * d_out / t.median / 1e6,
                      unit="TFLOP/s")
            lab.note(f"{name} {shape}", kernels_of(lambda: fn(x, w, b),
                                                   lab.device))
        lab.value(case={"shape": shape, "variant": "gelu in the epilogue"},
                  metric="speedup", unit="x",
                  value=times["gemm, then gelu"]
                  / times["gelu in the epilogue"])
        if lab.cuda:
            libraries(lab, x, w, shape)


# --8<-- [start:libraries]
def libraries(lab, x, w, shape) -> None:
    """The same GEMM with cuBLAS, then cuBLASLt, preferred by PyTorch."""
    before = torch.backends.cuda.preferred_blas_library()
    try:
        for library in ("cublas", "cublaslt"):
            torch.backends.cuda.preferred_blas_library(library)
            case = {"shape": shape, "variant": f"mm, {library}"}
            t = lab.time(lambda: x @ w.t(), case=case, metric="time")
            m, k = x.shape
            lab.value(case=case, metric="rate", unit="TFLOP/s",
                      value=2 * m * k * w.shape[0] / t.median / 1e6)
            lab.note(f"mm, {library} {shape}",
                     kernels_of(lambda: x @ w.t(), lab.device))
    finally:
        torch.backends.cuda.preferred_blas_library(before)


# --8<-- [end:libraries]


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
