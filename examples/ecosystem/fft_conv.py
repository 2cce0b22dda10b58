"""cuFFT and cuDNN: batched FFTs, FFT convolution, cuDNN's benchmark mode.

Three measurements. One batched FFT against the same FFTs launched one by
one. A 2-D convolution done directly (``F.conv2d``: cuDNN on a GPU) against
the same convolution done through the FFT (pad, ``rfft2``, multiply,
``irfft2``), over filter sizes from 3x3 to 31x31. And ``F.conv2d`` with
``torch.backends.cudnn.benchmark`` off (cuDNN's heuristic picks an
algorithm) and on (cuDNN times its algorithms on the first call).
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F


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


def conv_sweep(lab, n, c, size, kernels) -> None:
    cudnn = torch.backends.cudnn
    for k in kernels:
        x = torch.randn(n, c, size, size, device=lab.device)
        w = torch.randn(c, c, k, k, device=lab.device) / k
        expected = F.conv2d(x.double(), w.double(), padding=k // 2)
        lab.check(f"FFT conv {k}x{k}", fft_conv2d(x, w), expected,
                  tolerance=1e-4)
        times = {}
        runs = {"direct, heuristic": (False, lambda: F.conv2d(x, w, padding=k // 2)),
                "direct, benchmark": (True, lambda: F.conv2d(x, w, padding=k // 2)),
                "FFT": (False, lambda: fft_conv2d(x, w))}
        for name, (bench, fn) in runs.items():
            cudnn.benchmark = bench
            lab.check(f"{name} {k}x{k}", fn(), expected, tolerance=1e-4)
            case = {"part": "conv", "filter": k, "method": name}
            times[name] = lab.time(fn, case=case, metric="time",
                                   unit="ms").median
        cudnn.benchmark = False
        best_direct = min(times["direct, heuristic"],
                          times["direct, benchmark"])
        lab.value(case={"part": "conv", "filter": k, "method": "FFT"},
                  metric="fft_speedup",
                  unit="x", value=best_direct / times["FFT"])
        lab.value(case={"part": "conv", "filter": k,
                        "method": "direct, benchmark"},
                  metric="benchmark_speedup", unit="x",
                  value=times["direct, heuristic"] / times["direct, benchmark"])


def measure(lab) -> None:
    # Full FP32 on both paths: cuDNN would otherwise use TF32 for conv2d.
    torch.backends.cudnn.allow_tf32 = False
    lab.note("TF32", "off for cuDNN convolutions (torch's default is on)")
    if lab.quick:
        batched_vs_loop(lab, 64, 1024)
        conv_sweep(lab, 2, 4, 64, (3, 11, 21))
        return
    batched_vs_loop(lab, 1024, 4096)
    conv_sweep(lab, 8, 32, 256, (3, 5, 7, 9, 11, 15, 21, 31))


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
