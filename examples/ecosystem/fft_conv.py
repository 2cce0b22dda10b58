"""cuFFT and cuDNN: batched FFTs, FFT convolution, cuDNN's benchmark mode.

Three measurements. One batched FFT against the same FFTs launched one by
one. A 2-D convolution done directly (``F.conv2d``: cuDNN on a GPU) against
the same convolution done through the FFT (pad, ``rfft2``, multiply,
``irfft2``), over filter sizes from 3x3 to 31x31. And ``F.conv2d`` with
``torch.backends.cudnn.benchmark`` off (cuDNN's heuristic picks an
algorithm) and on (cuDNN times its algorithms on the first call). The
convolutions run twice: with cuDNN's TF32 off (full FP32) and on (PyTorch's
default for convolutions); the flags are restored afterwards.
"""

from __future__ import annotations

import sys
import threading
import time

import torch
import torch.nn.functional as F

from examples.lab.kernels import kernel_names


# --8<-- [start:fft_conv]
def fft_conv2d(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """F.conv2d(x, w, padding=k // 2) for odd k, through the FFT."""
    n, c, h, wd = x.shape
    k = w.shape[-1]
    size = (h + k - 1, wd + k - 1)  # linear, not circular, convolution
    fx = torch.fft.rfft2(x, s=size)  # (n, c, H, W/2 + 1)
    fw = torch.fft.rfft2(w.flip(-2, -1), s=size)  # conv2d correlates: flip
    fy = torch.einsum("nchw,ochw->nohw", fx, fw)  # sum over in-channels
    y = torch.fft.irfft2(fy, s=size)
    p = k // 2
    return y[..., p : p + h, p : p + wd]


# --8<-- [end:fft_conv]


def batched_vs_loop(lab, signals: int, length: int) -> None:
    # --8<-- [start:batched]
    x = torch.randn(signals, length, dtype=torch.complex64, device=lab.device)
    batched = lambda: torch.fft.fft(x)  # one plan, one launch  # noqa: E731
    one_by_one = lambda: [torch.fft.fft(row) for row in x]  # noqa: E731
    # --8<-- [end:batched]
    expected = torch.view_as_real(torch.fft.fft(x.cpu().to(torch.complex128)))
    lab.check("batched FFT", torch.view_as_real(batched()), expected,
              tolerance=1e-5)
    lab.check("FFTs one by one", torch.view_as_real(torch.stack(one_by_one())),
              expected, tolerance=1e-5)
    t = {}
    for name, fn in (("batched", batched), ("one by one", one_by_one)):
        case = {"part": "batched FFT", "fft": name, "signals": signals,
                "length": length}
        t[name] = lab.time(fn, case=case, metric="time", unit="us").median
        lab.value(case=case, metric="per_signal", unit="us",
                  value=t[name] / signals)
    lab.value(case={"part": "batched FFT", "fft": "one by one",
                    "signals": signals, "length": length},
              metric="slowdown", unit="x", value=t["one by one"] / t["batched"])


def in_fresh_thread(lab, fn):
    """fn() in a new thread, its exception re-raised here.

    PyTorch keeps the cuDNN plan it chose for a convolution in a
    thread-local cache keyed by shapes, dtype and the TF32/deterministic
    flags, but not by ``cudnn.benchmark`` (aten/src/ATen/native/cudnn/
    Conv_v8.cpp): in one thread, a benchmark-mode call after a heuristic
    call of the same shape reuses the heuristic's plan and searches
    nothing. A new thread starts with an empty cache.
    """
    out: list = []
    # A new thread starts on device 0: give it the one this thread uses.
    index = (None if not lab.cuda else lab.device.index
             if lab.device.index is not None else torch.cuda.current_device())

    def target():
        try:
            if index is not None:
                torch.cuda.set_device(index)
            out.append(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            out.append(("err", exc))

    worker = threading.Thread(target=target)
    worker.start()
    worker.join()
    status, value = out[0]
    if status == "err":
        raise value
    return value


def conv_sweep(lab, n, c, size, kernels_k, tf32: bool, reps) -> None:
    cudnn = torch.backends.cudnn
    cudnn.allow_tf32 = tf32
    mode = "on" if tf32 else "off"
    # TF32 keeps 10 mantissa bits: ~1e-3 relative error is expected.
    tol = 5e-3 if tf32 else 1e-4
    for k in kernels_k:
        x = torch.randn(n, c, size, size, device=lab.device)
        w = torch.randn(c, c, k, k, device=lab.device) / k
        expected = F.conv2d(x.double(), w.double(), padding=k // 2)
        direct = lambda: F.conv2d(x, w, padding=k // 2)  # noqa: E731
        times = {}

        def run(name, fn, bench):
            cudnn.benchmark = bench
            case = {"part": "conv", "filter": k, "method": name,
                    "cudnn_tf32": mode}
            began = time.perf_counter()
            out = fn()  # benchmark mode searches here, on the first call
            lab.synchronize()
            first = time.perf_counter() - began
            lab.check(f"{name} {k}x{k}, TF32 {mode}", out, expected,
                      tolerance=tol if name != "FFT" else 1e-4)
            del out
            if name != "FFT":
                # The first call's wall time: with benchmark on, the search.
                lab.keep_samples([first * 1e3], case=case,
                                 metric="first_call", unit="ms",
                                 method="host clock, one synchronized call")
            times[name] = lab.time(fn, case=case, metric="time", unit="ms",
                                   warmup=None if reps is None else 5,
                                   repetitions=reps).median
            if lab.cuda and k in NOTED_FILTERS:
                lab.note(f"kernels, {name}, {k}x{k}, TF32 {mode}",
                         kernel_names(fn))
            cudnn.benchmark = False

        # Each cuDNN mode in its own thread: a fresh plan cache for each.
        in_fresh_thread(lab, lambda: run("direct, heuristic", direct, False))
        in_fresh_thread(lab, lambda: run("direct, benchmark", direct, True))
        run("FFT", lambda: fft_conv2d(x, w), False)  # no cuDNN inside
        best_direct = min(times["direct, heuristic"],
                          times["direct, benchmark"])
        lab.value(case={"part": "conv", "filter": k, "method": "FFT",
                        "cudnn_tf32": mode},
                  metric="fft_speedup",
                  unit="x", value=best_direct / times["FFT"])
        lab.value(case={"part": "conv", "filter": k,
                        "method": "direct, benchmark", "cudnn_tf32": mode},
                  metric="benchmark_speedup", unit="x",
                  value=times["direct, heuristic"]
                  / times["direct, benchmark"])


#: Filters whose kernels the record names (the profiler costs a second).
NOTED_FILTERS = (3, 9, 31)


def measure(lab) -> None:
    cudnn = torch.backends.cudnn
    saved = cudnn.allow_tf32, cudnn.benchmark
    lab.note("TF32", "cuDNN convolutions measured with allow_tf32 off and "
             "on (torch's default is on); matmuls (the FFT path's complex "
             f"products) left at allow_tf32="
             f"{torch.backends.cuda.matmul.allow_tf32}")
    try:
        if lab.quick:
            batched_vs_loop(lab, 64, 1024)
            for tf32 in (False, True):
                conv_sweep(lab, 2, 4, 64, (3, 11, 21), tf32, None)
            return
        batched_vs_loop(lab, 1024, 4096)
        for tf32 in (False, True):
            # 20 repetitions: each call is 0.3-50 ms, the spread is small.
            conv_sweep(lab, 8, 32, 256, (3, 5, 7, 9, 11, 15, 21, 31), tf32,
                       20)
    finally:
        cudnn.allow_tf32, cudnn.benchmark = saved


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
