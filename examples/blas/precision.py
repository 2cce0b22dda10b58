"""GEMM in FP32, TF32, FP16 and BF16: rate and error against float64.

The same random float32 matrices are multiplied in each precision; the
reference is their product in float64. The record also keeps the TF32
defaults of the torch in use, read from torch itself, and what
``torch.set_float32_matmul_precision`` changes; and, for float16, what happens
when PyTorch is allowed to let cuBLAS accumulate in float16.
"""

from __future__ import annotations

import sys
import warnings

import torch


# --8<-- [start:flags]
def tf32_flags() -> dict[str, str]:
    """The switches that decide whether float32 matmuls and convolutions
    may use TF32, as this torch reports them."""
    with warnings.catch_warnings():  # newer torch deprecates allow_tf32
        warnings.simplefilter("ignore")
        flags = {
            "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
        }
        for name, obj in (("cuda.matmul", torch.backends.cuda.matmul),
                          ("cudnn.conv", getattr(torch.backends.cudnn,
                                                 "conv", None))):
            if hasattr(obj, "fp32_precision"):  # torch >= 2.9
                flags[f"{name}.fp32_precision"] = obj.fp32_precision
    return {k: str(v) for k, v in flags.items()}


# --8<-- [end:flags]


def record_flags(lab) -> None:
    lab.note("defaults", tf32_flags())
    for setting in ("high", "medium", "highest"):
        torch.set_float32_matmul_precision(setting)
        lab.note(f"after set_float32_matmul_precision('{setting}')",
                 tf32_flags())


# --8<-- [start:modes]
def modes(cuda: bool):
    """(name, dtype of the operands, float32 matmul precision, fp16 acc.)"""
    yield "fp32", torch.float32, "highest", False
    yield "tf32", torch.float32, "high", False
    yield "fp16", torch.float16, "highest", False
    yield "bf16", torch.bfloat16, "highest", False
    if cuda and hasattr(torch.backends.cuda.matmul, "allow_fp16_accumulation"):
        yield "fp16, fp16 accumulation", torch.float16, "highest", True


# --8<-- [end:modes]

TOLERANCE = {"fp32": 1e-5, "tf32": 5e-3, "fp16": 5e-3, "bf16": 2e-2,
             "fp16, fp16 accumulation": 0.1}


def relative_error(actual, expected) -> float:
    diff = torch.linalg.vector_norm(actual.double() - expected)
    return (diff / torch.linalg.vector_norm(expected)).item()


def measure(lab) -> None:
    record_flags(lab)
    n = 256 if lab.quick else 8192
    g = torch.Generator(device=lab.device).manual_seed(0)
    a = torch.randn(n, n, generator=g, device=lab.device)
    b = torch.randn(n, n, generator=g, device=lab.device)
    reference = a.double() @ b.double()
    checked = slice(0, 512)  # rows the host compares in float64
    calls = {}
    for name, dtype, precision, fp16_acc in modes(lab.cuda):
        x, y = a.to(dtype), b.to(dtype)
        call = in_mode(lambda x=x, y=y: x @ y, precision, fp16_acc)
        out = call()
        lab.check(name, out[checked], reference[checked],
                  tolerance=TOLERANCE[name])
        case = {"precision": name, "n": n}
        # Error of the whole path (inputs rounded to dtype), and of the
        # arithmetic alone (reference from the rounded inputs).
        lab.value(case=case, metric="relative_error",
                  value=relative_error(out, reference), unit="")
        rounded = x.double() @ y.double()
        lab.value(case=case, metric="arithmetic_error",
                  value=relative_error(out, rounded), unit="")
        del out, rounded
        calls[name] = call
    # Every precision in alternating rounds, so that all see the same
    # clocks; speedup_vs_fp32 is FP32's time over the other's in one round
    # (the median of those paired ratios). Each call takes milliseconds:
    # five warm-up rounds are plenty.
    times = lab.compare(calls, case={"n": n}, key="precision", metric="time",
                        unit="ms", baseline="fp32",
                        speedup_metric="speedup_vs_fp32",
                        warmup=min(lab.warmup, 5))
    for name, t in times.items():
        lab.value(case={"precision": name, "n": n}, metric="rate",
                  value=2 * n**3 / (t.median / 1e3) / 1e12, unit="TFLOP/s")
    if lab.cuda:
        convolution(lab)


def in_mode(fn, precision: str, fp16_acc: bool):
    """``fn`` run with this float32 matmul precision (and float16
    accumulation allowed or not), the defaults restored after each call."""
    matmul = torch.backends.cuda.matmul

    def call():
        torch.set_float32_matmul_precision(precision)
        if fp16_acc:
            matmul.allow_fp16_accumulation = True
        try:
            return fn()
        finally:
            if fp16_acc:
                matmul.allow_fp16_accumulation = False
            torch.set_float32_matmul_precision("highest")

    return call


# --8<-- [start:conv]
def convolution(lab) -> None:
    """A float32 convolution with cuDNN's TF32 switch on (the default)
    and off: the error says which arithmetic ran."""
    g = torch.Generator(device=lab.device).manual_seed(1)
    x = torch.randn(32, 256, 56, 56, generator=g, device=lab.device)
    w = torch.randn(256, 256, 3, 3, generator=g, device=lab.device)
    conv = torch.nn.functional.conv2d
    reference = conv(x.double(), w.double(), padding=1)
    default = torch.backends.cudnn.allow_tf32
    calls = {}
    for allow in (default, not default):
        def call(allow=allow):
            torch.backends.cudnn.allow_tf32 = allow
            try:
                return conv(x, w, padding=1)
            finally:
                torch.backends.cudnn.allow_tf32 = default

        name = f"conv fp32, cudnn.allow_tf32={allow}"
        lab.value(case={"precision": name}, metric="relative_error",
                  value=relative_error(call(), reference), unit="")
        calls[name] = call
    lab.compare(calls, case={}, key="precision", metric="time", unit="ms",
                warmup=min(lab.warmup, 5))


# --8<-- [end:conv]


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
