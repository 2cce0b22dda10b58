"""The roofline of this machine, from its own measured streams and GEMMs.

Two roofs, each measured: the memory roof is the best bandwidth of three
streams far larger than the L2 (a copy, an add, a sum that only reads), and
the compute roof is the rate of large GEMMs run back to back for a few
seconds, so that the board's power limit has lowered the SM clock (a GEMM
timed alone runs at the top boost clock and can sit above it). Kernels of
every arithmetic intensity (FLOPs per byte of memory traffic) are timed with
a cold cache and placed under the roofs; each row's ``of_roof`` says how
close it came. The ridge point, where the roofs meet, separates kernels
limited by memory from those limited by arithmetic.
"""

from __future__ import annotations

import sys
import time

import torch

from examples.lab.kernels import kernel_names
from examples.measuring.cpu_bound_trap import checked_elements
from examples.stack.roofline_model import ridge_point


# --8<-- [start:work]
def work(op: str, n: int, elem: int) -> tuple[float, float]:
    """FLOPs and the fewest bytes moved (each input read once, output
    written once) of one call, for ``elem``-byte elements."""
    if op == "add":  # z = x + y on n*n elements: 2 reads, 1 write
        return n * n, 3 * n * n * elem
    if op == "sum":  # x.sum() over n*n elements: reads only
        return n * n, n * n * elem
    if op == "gemv":  # y = A x, A is n x n
        return 2 * n * n, (n * n + 2 * n) * elem
    if op == "gemm":  # C = A B, all n x n
        return 2 * n**3, 3 * n * n * elem
    raise ValueError(op)


# --8<-- [end:work]


def sm_clocks_during(fn, calls: int, index: int):
    """NVML's SM clock every 10 ms while ``calls`` queued calls of ``fn`` run,
    and the board's top SM clock; ``None`` where NVML cannot be read."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML: the record says nothing
        return None
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        top = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
        for _ in range(calls):  # queued: the host is free to sample
            fn()
        done = torch.cuda.Event()
        done.record()
        samples = []
        while not done.query():
            samples.append(pynvml.nvmlDeviceGetClockInfo(
                handle, pynvml.NVML_CLOCK_SM))
            time.sleep(0.01)
        torch.cuda.synchronize()
        return samples, top
    except Exception:  # noqa: BLE001 - a board that hides its clocks
        return None
    finally:
        pynvml.nvmlShutdown()


def timed(lab, fn, case, nbytes, flops=0.0):
    """Time ``fn`` cold (L2 flushed before each call) by the GPU's own
    durations of the operations it ran, and keep its bandwidth and, if it
    computes, its rate. A 256-cubed GEMM runs for a few microseconds:
    events around one call would time the host's launch more than the
    kernel (Chapter 3's ``one_call_vs_kernel`` measures by how much)."""
    t = lab.time(fn, case=case, metric="kernel", timer="kernel",
                 flush_l2=True)
    return keep_rates(lab, case, t, nbytes, flops)


def keep_rates(lab, case, t, nbytes, flops=0.0):
    """Keep the bandwidth and, if it computes, the rate of time ``t``."""
    seconds = t.median * 1e-6
    bandwidth = nbytes / seconds / 1e9
    lab.value(case=case, metric="bandwidth", value=bandwidth, unit="GB/s")
    rate = flops / seconds / 1e12
    if flops:
        lab.value(case=case, metric="rate", value=rate, unit="TFLOP/s")
    return bandwidth, rate


def measure(lab) -> None:
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    elem = torch.finfo(dtype).bits // 8
    dev = lab.device
    big = 2048 if lab.quick else 16384  # 16384^2 bf16 = 512 MiB per operand
    gemms = [128, 256] if lab.quick else [256, 1024, 2048, 4096, 8192,
                                          16384]
    points = []  # (case, GB/s, TFLOP/s) of every kernel under the roofs

    # Three streams far larger than the L2: the best is the memory roof.
    # They run in alternating rounds, so that the add's lead over the copy
    # is not the GPU's drift from one to the other.
    src = torch.randn(big * big, device=dev, dtype=dtype)
    dst = torch.empty_like(src)
    dst.copy_(src)
    at = checked_elements(src.numel(), dev)
    lab.check("copy", dst[at], src[at], tolerance=0)
    ones = torch.rand(big * big, device=dev, dtype=dtype)  # no cancelling
    lab.check("sum", ones.sum().reshape(1), ones.double().sum().reshape(1),
              tolerance=1e-2)
    a = torch.randn(big, big, device=dev, dtype=dtype)
    b = torch.randn(big, big, device=dev, dtype=dtype)
    rows = slice(0, 64)
    lab.check(f"add n={big}", (a + b)[rows],
              a[rows].double() + b[rows].double(), tolerance=1e-2)
    calls = {"copy": lambda: dst.copy_(src), "add": lambda: a + b,
             "sum": lambda: ones.sum()}
    work_of = {"copy": (0, 2 * src.numel() * elem),
               "add": work("add", big, elem), "sum": work("sum", big, elem)}
    cases = {op: {"op": op, "n": big, "intensity": round(f / nb, 3)}
             for op, (f, nb) in work_of.items()}
    # over_copy: the stream's bandwidth over the copy's, from the paired
    # ratio of their times in one round and the ratio of their bytes.
    over_copy = {op: (cases[op], "over_copy",
                      work_of[op][1] / work_of["copy"][1])
                 for op in ("add", "sum")}
    # On a GPU, timed by the operations' own durations (CUPTI): the streams
    # are about the memory system, not the launch.
    times = lab.compare_rows(calls,
                             {op: (cases[op], "kernel" if lab.cuda else "time")
                              for op in calls},
                             baseline="copy", ratios=over_copy,
                             timer="kernel", flush_l2=True)
    if lab.cuda:
        # The three streams are three different GPU operations, not one
        # kernel: a same-dtype contiguous copy_ is the driver's copy
        # (cudaMemcpyAsync), the add ATen's elementwise kernel, the sum its
        # reduction. The record names each, so the page can say which.
        for op, fn in calls.items():
            names = kernel_names(fn)
            lab.note(f"GPU operations of the {op}",
                     ", ".join(names) if isinstance(names, list) else names)
    for op, t in times.items():
        flops, nbytes = work_of[op]
        points.append((cases[op], *keep_rates(lab, cases[op], t, nbytes,
                                              flops)))
    del src, dst, ones, a, b

    cases = [("gemv", big)] + [("gemm", n) for n in gemms]
    for op, n in cases:
        a = torch.randn(n, n, device=dev, dtype=dtype)
        b = torch.randn(n, n, device=dev, dtype=dtype)
        v = torch.randn(n, device=dev, dtype=dtype)
        fn = {"gemv": lambda: a @ v,
              "gemm": lambda: a @ b}[op]
        rows = slice(0, 64)
        ref = {"gemv": lambda: a[rows].double() @ v.double(),
               "gemm": lambda: a[rows].double() @ b.double()}[op]()
        lab.check(f"{op} n={n}", fn()[rows], ref, tolerance=1e-2)
        flops, nbytes = work(op, n, elem)
        case = {"op": op, "n": n, "intensity": round(flops / nbytes, 3)}
        points.append((case, *timed(lab, fn, case, nbytes, flops)))
        if op == "gemm" and n == 4096:
            # The page's clock and power of one mid-sized product between
            # idle gaps: events around each call, the GPU idle between, so
            # the clocks sampled in this window are those of such calls
            # (the kernel timer's window is mostly the profiler's own).
            lab.time(fn, case=case, metric="one_call", flush_l2=True)
        if op == "gemm" and n == gemms[-1]:
            sustained = sustain(lab, fn, n, elem)  # the board is hot now
        del a, b, v

    # --8<-- [start:ridge]
    streams = [(c["op"], gbs) for c, gbs, _ in points
               if c["op"] in ("copy", "add", "sum")]
    best, bandwidth = max(streams, key=lambda s: s[1])  # the memory roof
    lab.value(case={"op": "memory roof", "intensity": 0},
              metric="bandwidth", value=bandwidth, unit="GB/s")
    peak = sustained  # TFLOP/s that large GEMMs hold for seconds
    for case, gbs, tflops in points:
        # min(peak, I * bandwidth) is the roof at the point's intensity:
        # its fraction is the larger of the two fractions below.
        lab.value(case=case, metric="of_roof", unit="x",
                  value=max(tflops / peak, gbs / bandwidth))
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
    lab.note("memory roof from", best)
    lab.note("dtype", str(dtype).removeprefix("torch."))


# --8<-- [start:sustain]
def sustain(lab, fn, n: int, elem: int) -> float:
    """The compute roof: ``fn`` (an n-cubed GEMM) back to back, no flush,
    for over a second, right after the same GEMM's own point (over a
    second of it), with the SM clock read during it. The harness also keeps
    the clocks and power of the timed window."""
    flops, nbytes = work("gemm", n, elem)
    case = {"op": "sustained", "n": n, "intensity": round(flops / nbytes, 3)}
    quick = lab.quick or not lab.cuda
    # The board is at its power limit already: the point just timed ran
    # this GEMM some 85 times, over a second (its SM clock was the
    # sustained one). So a short warm-up, and 4 calls a sample: 80 calls of
    # ~13 ms, over a second, in the same 20 samples.
    t = lab.time(fn, case=case, metric="time", inner=2 if quick else 4,
                 warmup=3 if quick else 10,
                 repetitions=5 if quick else 20)
    rate = flops / (t.median * 1e-6) / 1e12
    lab.value(case=case, metric="rate", value=rate, unit="TFLOP/s")
    clocks = None
    if lab.cuda:
        index = lab.device.index
        clocks = sm_clocks_during(fn, 40, torch.cuda.current_device()
                                  if index is None else index)
    if clocks and clocks[0]:
        samples, top = clocks
        m = lab.keep_samples(samples, case=case, metric="sm_clock",
                             unit="MHz", method="NVML every 10 ms, "
                             "40 more back-to-back GEMMs")
        lab.value(case=case, metric="top_clock", value=top, unit="MHz")
        lab.value(case=case, metric="clock_of_top", value=m.median / top,
                  unit="x")
    return rate


# --8<-- [end:sustain]


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
