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
    checked = slice(0, 256)  # rows the host compares in float64
    for tokens, d_in, d_out in shapes:
        g = torch.Generator(device=lab.device).manual_seed(tokens)
        x = torch.randn(tokens, d_in, generator=g, device=lab.device)
        w = torch.randn(d_out, d_in, generator=g, device=lab.device)
        w /= d_in**0.5
        b = torch.randn(d_out, generator=g, device=lab.device)
        ref = F.gelu(x[checked].double() @ w.double().t() + b.double(),
                     approximate="tanh")
        x, w, b = x.to(dtype), w.to(dtype), b.to(dtype)
        shape = f"{tokens}x{d_in}x{d_out}"
        calls = {}
        for name, fn in (("gemm, then gelu", unfused),
                         ("gelu in the epilogue", fused)):
            lab.check(f"{name} {shape}", fn(x, w, b)[checked], ref,
                      tolerance=2e-2)
            calls[name] = lambda fn=fn: fn(x, w, b)
            lab.note(f"{name} {shape}", kernels_of(calls[name], lab.device))
        # Fused and unfused in alternating rounds; the speedup is the
        # median of the paired ratios unfused / fused of one round.
        times = lab.compare(calls, case={"shape": shape}, key="variant",
                            metric="time", baseline="gemm, then gelu",
                            warmup=min(lab.warmup, 5))
        for name, t in times.items():
            lab.value(case={"shape": shape, "variant": name}, metric="rate",
                      value=2 * tokens * d_in * d_out / t.median / 1e6,
                      unit="TFLOP/s")
        if lab.cuda:
            libraries(lab, x, w, shape)


# --8<-- [start:libraries]
def libraries(lab, x, w, shape) -> None:
    """The same GEMM with cuBLAS, then cuBLASLt, preferred by PyTorch,
    in alternating rounds."""
    before = torch.backends.cuda.preferred_blas_library()

    def with_library(library):
        def call():
            torch.backends.cuda.preferred_blas_library(library)
            try:
                return x @ w.t()
            finally:
                torch.backends.cuda.preferred_blas_library(before)
        return call

    calls = {f"mm, {lib}": with_library(lib) for lib in ("cublas", "cublaslt")}
    for name, call in calls.items():
        lab.note(f"{name} {shape}", kernels_of(call, lab.device))
    times = lab.compare(calls, case={"shape": shape}, key="variant",
                        metric="time", warmup=min(lab.warmup, 5))
    m, k = x.shape
    flops = 2 * m * k * w.shape[0]
    for name, t in times.items():
        lab.value(case={"shape": shape, "variant": name}, metric="rate",
                  unit="TFLOP/s", value=flops / t.median / 1e6)


# --8<-- [end:libraries]


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
