"""The CPU-bound trap: timing a launch and calling it a kernel.

A compiled pointwise function on a small tensor runs for a few microseconds on
the GPU, less than it takes the CPU to get it there (Python, the compiled
wrapper's guards, the launch). Timed four ways, on a small and a large tensor:

* a host clock with no synchronize: it times only the enqueue;
* CUDA events around one call: the events are queued as fast as the launch
  is, so they time the launch when the kernel is shorter than it;
* events around 100 back-to-back calls: still launch-bound, the GPU waits
  between kernels;
* the kernel's own duration from the profiler (CUPTI): the right answer.

On the large tensor the kernel is long, and every way but the first agrees.
Without a GPU the function is captured by Dynamo without code generation
(``backend="eager"``) and only the host clocks run.
"""

from __future__ import annotations

import sys
import time

import torch


def pointwise(x):
    return torch.relu(x * 2.0 + 1.0)


#: Elements an elementwise check reads from a large tensor.
CHECKED = 1 << 20


def checked_elements(n: int, device) -> slice | torch.Tensor:
    """Where to check an elementwise result of ``n`` elements: all of them up
    to CHECKED, else CHECKED drawn at random across the tensor, its last
    element among them. ``Lab.check`` compares in float64 on the host, and
    copying and comparing hundreds of millions of elements took seconds of a
    topic (2 GiB twice for 2^28 elements) to test what a random million
    tests as well: every element runs the same code."""
    if n <= CHECKED:
        return slice(None)
    picked = torch.randint(n, (CHECKED,), device=device)
    picked[-1] = n - 1  # the tail, where a block of a kernel is partial
    return picked


# --8<-- [start:wrong]
def host_clock_no_sync(fn, x, repetitions: int) -> list[float]:
    """WRONG: returns when the launch is queued, not when the kernel ends."""
    samples = []
    for _ in range(repetitions):
        t0 = time.perf_counter()
        fn(x)
        samples.append((time.perf_counter() - t0) * 1e6)
    return samples


# --8<-- [end:wrong]


def measure(lab) -> None:
    if lab.cuda:
        compiled = torch.compile(pointwise)
    else:  # Dynamo without Inductor: no C++ build on a CPU runner
        compiled = torch.compile(pointwise, backend="eager")
    sizes = [4096, 2**26] if not lab.quick else [4096, 2**16]
    for n in sizes:
        x = torch.randn(n, device=lab.device)
        at = checked_elements(n, lab.device)
        lab.check(f"compiled n={n}", compiled(x)[at],
                  pointwise(x[at].double()), tolerance=1e-6)
        for _ in range(lab.warmup):
            compiled(x)
        lab.synchronize()
        reps = lab.repetitions * 4
        lab.keep_samples(host_clock_no_sync(compiled, x, reps),
                         case={"n": n, "timing": "host clock, no sync"},
                         metric="time", unit="us",
                         method="host clock, no synchronize")
        lab.synchronize()
        lab.time(lambda: compiled(x),
                 case={"n": n, "timing": "events around 1 call"},
                 metric="time", unit="us")
        lab.time(lambda: compiled(x),
                 case={"n": n, "timing": "events around 100 calls"},
                 metric="time", unit="us", inner=100)
        if lab.cuda:
            # --8<-- [start:right]
            # RIGHT: the GPU's own duration of each call's kernels, from the
            # profiler (CUPTI): the harness's kernel timer.
            kernel = lab.time(lambda: compiled(x),
                              case={"n": n, "timing": "profiler kernel time"},
                              metric="time", unit="us", timer="kernel",
                              repetitions=reps)
            # --8<-- [end:right]
            # Each way of timing against the kernel's own duration, from the
            # same run: a ratio that travels across GPUs where microseconds do not.
            for row in lab.rows():
                if row.case.get("n") == n and "time" in row.metrics:
                    lab.value(case=row.case, metric="vs_kernel", unit="x",
                              value=row.metrics["time"].median / kernel.median)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
