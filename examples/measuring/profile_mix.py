"""Reading torch.profiler output: a healthy and an unhealthy kernel mix.

Two of the book's own workloads, profiled the same way:

* healthy: the large step of :mod:`examples.dispatch.sync_points`, eight
  2048x4096 by 4096x4096 products with a tanh each: a few long GEMM kernels,
  the GPU busy nearly all the time;
* unhealthy: one decode step of the transformer layers of
  :mod:`examples.dispatch.kernel_count`, batch 1: dozens of tiny kernels per
  layer, the GPU idle between them while the CPU launches the next.

For each: the step time (unprofiled), the kernels per step and the kernels
that took most of the GPU's time (one profiled window), and, from seven more
profiled windows of five steps each, the time the GPU was busy per step and
the busy fraction, each window's busy time over that same window's wall time
(:func:`busy_windows` says why that wall and not the unprofiled step). On a
CPU the profiler sees only CPU ops; the example then reports the step and op
counts.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from examples.dispatch.kernel_count import DecoderLayer
from examples.dispatch.sync_points import make_step

#: Profiled windows for the busy time and fraction, and steps in each.
WINDOWS, STEPS = 7, 5


# --8<-- [start:profile]
def profile_step(step, steps: int = 5):
    """Kernels, GPU-busy µs per step and the costliest kernels' shares,
    from one profiled window of ``steps`` steps."""
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


def busy_windows(step, windows: int = WINDOWS, steps: int = STEPS):
    """GPU-busy µs and wall µs per step, one pair per profiled window.

    A window is ``steps`` steps between two synchronizations, timed by the
    host clock while the profiler records the GPU's operations (CUPTI), so
    busy time and wall time are two timings of the same steps. One window is
    profiled alone first, to count its GPU operations; then all the windows
    in one session, cut by that count, as the harness's kernel timer does.

    The wall is the profiled window's, not the unprofiled step: a fraction
    of two separate timings can pass 100 % and moves with whatever differed
    between them. The profiler's cost falls on the host, which is why it
    records the GPU alone here (no host operators): it delays the launches,
    which a GPU-bound step hides behind its queue, while a host-bound step's
    window grows by it, so its fraction reads somewhat low (the record's
    ``tracing_cost`` says by how much).
    """
    from examples.lab.kernels import gpu_operations

    walls: list[float] = []

    def window() -> None:
        torch.cuda.synchronize()
        started = time.perf_counter_ns()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        walls.append((time.perf_counter_ns() - started) / 1e3 / steps)

    per_window = len(gpu_operations(window))
    ops = gpu_operations(lambda: [window() for _ in range(windows)])
    if not per_window or len(ops) != windows * per_window:
        raise RuntimeError(f"{len(ops)} GPU operations in {windows} windows "
                           f"of {per_window}: not the same work every step")
    busy = [union_us(ops[i * per_window:(i + 1) * per_window]) / steps
            for i in range(windows)]
    return busy, walls[1:]  # walls[0]: the window profiled alone


def union_us(ops) -> float:
    """µs in which the GPU ran at least one of ``ops`` (sorted by start)."""
    busy, reached = 0, ops[0].start_ns
    for op in ops:  # overlapping operations count once
        end = op.start_ns + op.duration_ns
        busy += max(0, end - max(op.start_ns, reached))
        reached = max(reached, end)
    return busy / 1e3


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
        kernels, _, shares, prof = profile_step(step)
        if not lab.cuda:
            ops = prof.key_averages()
            lab.value(case=case, metric="cpu_ops",
                      value=sum(e.count for e in ops) / 5, unit="")
            continue
        busy, walls = busy_windows(step)
        lab.value(case=case, metric="kernels", value=kernels, unit="")
        window = f"{STEPS} steps a window, GPU activity profiled"
        gpu_busy = lab.keep_samples(
            busy, case=case, metric="gpu_busy", unit="us", inner=STEPS,
            method=f"profiler (CUPTI), GPU busy per step, {window}")
        lab.keep_samples(
            [100 * b / w for b, w in zip(busy, walls)], case=case,
            metric="busy_fraction", unit="%", inner=STEPS,
            method=f"a window's GPU busy over its wall (host clock between "
                   f"two synchronizations), {window}")
        lab.value(case=case, metric="mean_kernel",
                  value=gpu_busy.median / kernels, unit="us")
        # what the profiler added to the wall: a profiled window's step
        # against the unprofiled one (two timings, hence signed)
        lab.value(case=case, metric="tracing_cost", unit="%",
                  value=100 * (statistics.median(walls) / t.median - 1))
        for rank, (kernel, calls, share) in enumerate(shares, 1):
            lab.note(f"{name.split(':')[0]} #{rank}", {
                "kernel": kernel[:90], "calls per step": calls,
                "share of GPU time": f"{100 * share:.0f}%"})


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
