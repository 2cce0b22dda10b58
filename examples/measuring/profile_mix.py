"""Reading torch.profiler output: a healthy and an unhealthy kernel mix.

Two of the book's own workloads, profiled the same way:

* healthy: the large step of :mod:`examples.dispatch.sync_points`, eight
  2048x4096 by 4096x4096 products with a tanh each: a few long GEMM kernels,
  the GPU busy nearly all the time;
* unhealthy: one decode step of the transformer layers of
  :mod:`examples.dispatch.kernel_count`, batch 1: dozens of tiny kernels per
  layer, the GPU idle between them while the CPU launches the next.

For each: the step time, the kernels per step, the time the GPU was busy, the
busy fraction, and the kernels that took most of the GPU's time. On a CPU the
profiler sees only CPU ops; the example then reports the step and op counts.
"""

from __future__ import annotations

import sys

import torch

from examples.dispatch.kernel_count import DecoderLayer
from examples.dispatch.sync_points import make_step


# --8<-- [start:profile]
def profile_step(step, steps: int = 5):
    """Kernels, GPU-busy µs per step and the costliest kernels' shares."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    gpu = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    busy = sum(e.time_range.elapsed_us() for e in gpu)
    by_name: dict[str, list[float]] = {}
    for e in gpu:
        by_name.setdefault(e.name, []).append(e.time_range.elapsed_us())
    top = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:4]
    shares = [(name, len(t) / steps, sum(t) / busy) for name, t in top]
    return len(gpu) / steps, busy / steps, shares, prof


# --8<-- [end:profile]


def workloads(lab):
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    batch, hidden = (64, 128) if lab.quick else (2048, 4096)
    gemm_step, x = make_step(batch, hidden, 8, lab.device, dtype)
    small = 256 if lab.quick else 2048
    layers = [DecoderLayer(small, 16, 1024, lab.device, dtype)
              for _ in range(4)]
    token = torch.randn(1, 1, small, device=lab.device, dtype=dtype)

    @torch.inference_mode()
    def decode():
        h = token
        for layer in layers:
            h = layer(h, 512)
        return h

    return {"healthy: GEMM-bound step": lambda: gemm_step(x)[0],
            "unhealthy: decode step, batch 1": decode}


def measure(lab) -> None:
    for name, step in workloads(lab).items():
        out = step()
        lab.check(f"{name}: finite", out.isfinite().double(),
                  torch.ones_like(out, dtype=torch.float64), tolerance=0)
        case = {"workload": name}
        t = lab.time(step, case=case, metric="step", unit="us")
        kernels, busy, shares, prof = profile_step(step)
        if not lab.cuda:
            ops = prof.key_averages()
            lab.value(case=case, metric="cpu_ops",
                      value=sum(e.count for e in ops) / 5, unit="")
            continue
        lab.value(case=case, metric="kernels", value=kernels, unit="")
        lab.value(case=case, metric="gpu_busy", value=busy, unit="us")
        lab.value(case=case, metric="busy_fraction",
                  value=100 * busy / t.median, unit="%")
        lab.value(case=case, metric="mean_kernel", value=busy / kernels,
                  unit="us")
        for rank, (kernel, calls, share) in enumerate(shares, 1):
            lab.note(f"{name.split(':')[0]} #{rank}", {
                "kernel": kernel[:90], "calls per step": calls,
                "share of GPU time": f"{100 * share:.0f}%"})


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
