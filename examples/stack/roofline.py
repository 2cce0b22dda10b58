"""The roofline of this machine, from its own measured copy and GEMM rates.

Four kinds of work span the range of arithmetic intensity (FLOPs per byte of
memory traffic): an elementwise add, a matrix-vector product, and square
matrix products of growing size. Each is checked, timed with a cold cache,
and placed at its intensity; a large device-to-device copy gives the memory
bandwidth and the fastest product the compute roof. Their ratio is the ridge
point: kernels below it are limited by memory, above it by arithmetic.
"""

from __future__ import annotations

import sys

import torch

from examples.lab.timing import L2Flusher
from examples.measuring.cpu_bound_trap import kernel_durations
from examples.stack.roofline_model import ridge_point


# --8<-- [start:work]
def work(op: str, n: int, elem: int) -> tuple[float, float]:
    """FLOPs and the fewest bytes moved (each input read once, output
    written once) of one call, for ``elem``-byte elements."""
    if op == "add":  # z = x + y on n*n elements
        return n * n, 3 * n * n * elem
    if op == "gemv":  # y = A x, A is n x n
        return 2 * n * n, (n * n + 2 * n) * elem
    if op == "gemm":  # C = A B, all n x n
        return 2 * n**3, 3 * n * n * elem
    raise ValueError(op)


# --8<-- [end:work]


def measure(lab) -> None:
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    elem = torch.finfo(dtype).bits // 8
    dev = lab.device
    big = 2048 if lab.quick else 16384  # 16384^2 bf16 = 512 MiB per operand
    gemms = [128, 256] if lab.quick else [256, 1024, 2048, 4096, 8192,
                                          16384]

    # The memory roof: a copy far larger than the L2, bytes read + written.
    src = torch.randn(big * big, device=dev, dtype=dtype)
    dst = torch.empty_like(src)
    dst.copy_(src)
    lab.check("copy", dst, src, tolerance=0)
    copy = {"op": "copy", "n": big, "intensity": 0}  # no FLOPs
    t = lab.time(lambda: dst.copy_(src), case=copy, metric="time",
                 flush_l2=True)
    if lab.cuda:
        t = lab.keep_samples(
            kernel_durations(lambda: dst.copy_(src), lab.repetitions,
                             between=L2Flusher(dev)),
            case=copy, metric="kernel", unit="us",
            method="CUPTI kernel duration, L2 flushed")
    bandwidth = 2 * src.numel() * elem / (t.median * 1e-6) / 1e9
    lab.value(case=copy, metric="bandwidth",
              value=bandwidth, unit="GB/s")
    del src, dst

    cases = [("add", big), ("gemv", big)] + [("gemm", n) for n in gemms]
    peak = 0.0
    for op, n in cases:
        a = torch.randn(n, n, device=dev, dtype=dtype)
        b = torch.randn(n, n, device=dev, dtype=dtype)
        v = torch.randn(n, device=dev, dtype=dtype)
        fn = {"add": lambda: a + b, "gemv": lambda: a @ v,
              "gemm": lambda: a @ b}[op]
        rows = slice(0, 64)
        ref = {"add": lambda: a[rows].double() + b[rows].double(),
               "gemv": lambda: a[rows].double() @ v.double(),
               "gemm": lambda: a[rows].double() @ b.double()}[op]()
        lab.check(f"{op} n={n}", fn()[rows], ref, tolerance=1e-2)
        flops, nbytes = work(op, n, elem)
        case = {"op": op, "n": n, "intensity": round(flops / nbytes, 3)}
        t = lab.time(fn, case=case, metric="time", flush_l2=True)
        if lab.cuda:  # short kernels: their own duration, not the launch
            t = lab.keep_samples(
                kernel_durations(fn, lab.repetitions,
                                 between=L2Flusher(dev)),
                case=case, metric="kernel", unit="us",
                method="CUPTI kernel duration, L2 flushed")
        rate = flops / (t.median * 1e-6) / 1e12
        lab.value(case=case, metric="rate", value=rate, unit="TFLOP/s")
        lab.value(case=case, metric="bandwidth",
                  value=nbytes / (t.median * 1e-6) / 1e9, unit="GB/s")
        if op == "gemm":
            peak = max(peak, rate)
        del a, b, v

    # --8<-- [start:ridge]
    ridge = ridge_point(peak_tflops=peak, bandwidth_gbs=bandwidth)
    at_ridge = {"op": "ridge", "intensity": round(ridge, 3)}
    lab.value(case=at_ridge, metric="ridge", value=ridge, unit="FLOP/B")
    lab.value(case=at_ridge, metric="rate", value=peak, unit="TFLOP/s")
    lab.value(case=at_ridge, metric="bandwidth", value=bandwidth,
              unit="GB/s")
    for intensity in (0.1, 1, 10, 100, 1000, 10000):  # the roof itself
        lab.value(case={"op": "roof", "intensity": intensity},
                  metric="rate", unit="TFLOP/s",
                  value=min(peak, intensity * bandwidth / 1e3))
    # --8<-- [end:ridge]
    lab.note("dtype", str(dtype).removeprefix("torch."))


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
