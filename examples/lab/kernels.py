"""Which GPU kernels one call ran, by the names the profiler gives them.

Many examples note the kernels behind a library call (which cuBLAS or cuDNN
kernel, split-K or not, which attention backend): the note is an observation
for the reader, not a check, so a profiler that fails is noted, not raised.
"""
from __future__ import annotations

import time
from typing import Callable, NamedTuple

import torch


def kernel_names(fn: Callable[[], object], width: int = 120) -> list[str] | str:
    """The distinct GPU kernels one call of ``fn`` launched, sorted, each name cut to ``width``."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sorted({e.key[:width] for e in prof.key_averages()
                       if str(e.device_type).endswith("CUDA")})
    except Exception as exc:  # noqa: BLE001 - the profiler is an observation, not a check
        return f"profiler failed: {type(exc).__name__}: {exc}"[:200]


class GpuSplit(NamedTuple):
    """What the GPU did during ``calls`` calls of a function, per call (:func:`gpu_split`)."""

    calls: int
    kernels: float  # kernels launched (copies and fills not counted)
    busy_us: float  # the union of the intervals in which the GPU ran something
    span_us: float  # first start to last end on the GPU
    host_us: float  # the host's time to issue the calls
    durations_us: dict[str, list[float]]  # each kernel's name -> the duration of each launch

    def costliest(self, n: int, width: int = 120) -> list[str]:
        """The names of the ``n`` kernels with the most GPU time, each cut to ``width``."""
        total = {name: sum(d) for name, d in self.durations_us.items()}
        return [name[:width] for name in sorted(total, key=total.get, reverse=True)[:n]]


def gpu_split(fn: Callable[[], object], calls: int, *, host_ops: bool = True) -> GpuSplit | None:
    """Profile ``calls`` calls of ``fn``: kernels, GPU busy, span and host time per call.

    ``None`` if the profiler saw no GPU work. ``host_ops`` records the host's operators
    too, as a profile of a step usually does: on a host-bound step that is what makes
    the profiled step longer than the unprofiled one. The GPU's intervals are read from
    the profiler's raw events: building its tree of operators (``prof.events()``) takes
    seconds of Python for the tens of thousands of operators of a few eager tokens.
    """
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if host_ops else [])
    torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        host_s = time.perf_counter() - started
        torch.cuda.synchronize()
    spans, durations = [], {}
    for e in prof.profiler.kineto_results.events():
        if e.device_type() != DeviceType.CUDA or getattr(e, "is_hidden_event", lambda: False)():
            continue
        start = e.start_ns() / 1e3
        end = start + e.duration_ns() / 1e3
        spans.append((start, end))
        name = e.name()
        if not name.startswith(("Memcpy", "Memset")):
            durations.setdefault(name, []).append(end - start)
    if not spans:
        return None
    # the names the profiler's tables show (demangled, as its FunctionEvents are)
    durations = {torch._C._demangle(name): d for name, d in durations.items()}
    spans.sort()
    busy, reached = 0.0, spans[0][0]
    for start, end in spans:  # the union of the intervals: overlapping work counts once
        busy += max(0.0, end - max(start, reached))
        reached = max(reached, end)
    return GpuSplit(calls, sum(map(len, durations.values())) / calls, busy / calls,
                    (reached - spans[0][0]) / calls, host_s * 1e6 / calls, durations)
