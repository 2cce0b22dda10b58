"""What the GPU ran during a call, read from the profiler (CUPTI): each operation's
name, start and duration.

The harness's kernel timer (:mod:`examples.lab.timing`) sums the durations; the
profiler split of a step (:func:`gpu_split`) adds busy time, span and host time.
Many examples note the kernels behind a library call (which cuBLAS or cuDNN
kernel, split-K or not, which attention backend): that note is an observation
for the reader, not a check, so a profiler that fails is noted, not raised.
"""
from __future__ import annotations

import functools
import os
import time
from typing import Callable, NamedTuple

import torch

# --8<-- [start:teardown]
#: PyTorch's profiler leaves CUPTI attached to the process when a session ends, and every
#: later launch pays for its callbacks: on an H200, launches timed after a profiler session
#: cost 1.3-1.4x more (the book's own probe; pytorch/pytorch#144455, #146604). A lab run
#: profiles in most topics, so a launch figure would depend on which topics ran before it.
#: With ``TEARDOWN_CUPTI=1``, Kineto detaches CUPTI when a session stops: a thread of its own
#: waits for the next CUDA runtime call and finalizes CUPTI as that call returns (Kineto's
#: CuptiActivityApi::teardownContext). Torch sets the variable back to 0 only for CUDA graphs
#: on CUDA < 12.6 (torch/profiler/profiler.py).
os.environ["TEARDOWN_CUPTI"] = "1"

#: Pauses (s) between the runtime calls that let that teardown finish. A session that starts
#: while the last one's teardown still waits for its runtime call blocks for Kineto's 10 s
#: timeout and then traces no GPU work at all (seen on an H200: 'ran nothing on the GPU').
SETTLE_PAUSES = (0.0005, 0.001, 0.002, 0.004, 0.008)


def _settling(stop: Callable) -> Callable:
    """``profile.stop``, then a few CUDA runtime calls (``cudaDeviceSynchronize``) a few
    milliseconds apart, so that Kineto's teardown thread finds its call and finishes."""

    @functools.wraps(stop)
    def stop_and_settle(self, *args, **kwargs):
        result = stop(self, *args, **kwargs)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            for pause in SETTLE_PAUSES:
                time.sleep(pause)
                torch.cuda.synchronize()
        return result

    stop_and_settle.settles = True
    return stop_and_settle


def _settle_every_session() -> None:
    """Every ``torch.profiler.profile`` of this process (an example's own too) settles as it
    stops; a rank of a multi-GPU topic imports this module as its parent does."""
    from torch.profiler import profile

    if not getattr(profile.stop, "settles", False):
        profile.stop = _settling(profile.stop)


_settle_every_session()
# --8<-- [end:teardown]


class GpuOp(NamedTuple):
    """One operation the GPU ran: a kernel, a copy or a fill."""

    start_ns: int
    duration_ns: int
    name: str  # as the profiler's tables show it (demangled)


def gpu_operations(work: Callable[[], object], *, host_ops: bool = False) -> list[GpuOp]:
    """Every GPU operation ``work`` ran (kernels, copies, fills), in start order.

    Read from the profiler's raw events: building its tree of operators
    (``prof.events()``) takes seconds of Python for the tens of thousands of
    operators of a few eager tokens. ``host_ops`` records the host's operators
    too, as a profile of a step usually does (it slows a host-bound step).
    """
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if host_ops else [])
    torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        work()
        torch.cuda.synchronize()
    return sorted(GpuOp(e.start_ns(), e.duration_ns(), torch._C._demangle(e.name()))
                  for e in prof.profiler.kineto_results.events()
                  if e.device_type() == DeviceType.CUDA
                  and not getattr(e, "is_hidden_event", lambda: False)())


def is_kernel(op: GpuOp) -> bool:
    """A kernel, not one of the driver's copies or fills."""
    return not op.name.startswith(("Memcpy", "Memset"))


def kernel_names(fn: Callable[[], object], width: int = 120) -> list[str] | str:
    """The distinct GPU operations one call of ``fn`` ran, sorted, each name cut to ``width``."""
    try:
        return sorted({op.name[:width] for op in gpu_operations(fn)})
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

    ``None`` if the profiler saw no GPU work. ``host_ops``: as in :func:`gpu_operations`;
    on a host-bound step the host's operators are what makes the profiled step
    longer than the unprofiled one.
    """
    host_s = []

    def calls_timed() -> None:
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        host_s.append(time.perf_counter() - started)

    ops = gpu_operations(calls_timed, host_ops=host_ops)
    if not ops:
        return None
    durations: dict[str, list[float]] = {}
    for op in filter(is_kernel, ops):
        durations.setdefault(op.name, []).append(op.duration_ns / 1e3)
    busy, reached = 0.0, ops[0].start_ns / 1e3
    for op in ops:  # the union of the intervals: overlapping work counts once
        start, end = op.start_ns / 1e3, (op.start_ns + op.duration_ns) / 1e3
        busy += max(0.0, end - max(start, reached))
        reached = max(reached, end)
    return GpuSplit(calls, sum(map(len, durations.values())) / calls, busy / calls,
                    (reached - ops[0].start_ns / 1e3) / calls, host_s[0] * 1e6 / calls, durations)
