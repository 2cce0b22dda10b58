"""The caching allocator's share of an op's cost.

Every op that returns a new tensor needs memory for it. On a GPU, PyTorch's
caching allocator keeps the blocks that freed tensors leave and hands them
out again, so ``cudaMalloc`` and ``cudaFree`` (which synchronizes the device)
are almost never called. Three ways to run the same chain of additions are
timed on a synchronized host clock, interleaved in rounds (``Lab.compare``):

* ``out=``: written into a tensor made once: no allocation at all;
* ``new tensor``: each add returns a new tensor, from the allocator's cache;
* ``new tensor, no cache``: the same in a child process started with
  ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``, where every allocation is a
  ``cudaMalloc`` and every free a ``cudaFree`` (GPU only). The switch is read
  once, when the allocator starts, so the child times its variants with the
  harness's own interleaved timer and hands the samples back.

An allocation alone (``torch.empty``) is timed the same three ways. On the
CPU the first two run (the CPU allocator has no such switch).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

OPS = 20  # ops per timed call
#: float32 elements per tensor: 16 (no work at all) and 1 Mi (4 MiB, a few µs of work)
SIZES = (16, 1 << 20)


# --8<-- [start:chains]
def chains(n: int, device) -> dict:
    """The same OPS additions three ways (and OPS allocations), as zero-argument calls."""
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    out = torch.empty_like(x)

    def into_out():
        for _ in range(OPS):
            torch.add(x, y, out=out)  # no allocation
        return out

    def new_tensor():
        for _ in range(OPS):
            z = torch.add(x, y)  # a new output each time, freed at the next
        return z

    def empty():
        for _ in range(OPS):
            z = torch.empty(n, device=device)  # the allocation alone
        return z

    return {"x": x, "y": y, "out=": into_out, "new tensor": new_tensor, "empty": empty}
# --8<-- [end:chains]


#: Warm-up rounds: each one already runs every variant `calls` times, OPS
#: ops a call, so that the cache holds its blocks before the first sample.
WARMUP_ROUNDS = 2
#: The uncached child: samples of UNCACHED_CALLS calls each (a cudaMalloc and
#: a cudaFree per op make a call of 20 ops tens of microseconds per op).
UNCACHED_CALLS, UNCACHED_SAMPLES = 5, 15


def uncached_child() -> None:
    """Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1: print µs-per-op samples as JSON.

    The harness's interleaved timer (the one ``Lab.compare`` uses), so that the
    cached and the uncached figures come from one timer. It has imported torch
    (host work only) while the parent timed; it starts CUDA and times only once
    the parent says so on stdin, so that no two timings overlap.
    """
    from examples.lab.timing import measure_interleaved

    sys.stdin.readline()
    result = {}
    for n in SIZES:
        c = chains(n, "cuda")
        samples = measure_interleaved(
            {name: c[name] for name in ("new tensor", "empty")},
            device=torch.device("cuda"), timer="host_sync",
            warmup=WARMUP_ROUNDS, repetitions=UNCACHED_SAMPLES,
            inner=UNCACHED_CALLS)
        for name, values in samples.items():  # seconds per call -> µs per op
            result[f"{n}/{name}"] = [v / OPS * 1e6 for v in values]
    print(json.dumps(result))


def measure(lab) -> None:
    # Calls per sample: ten calls of OPS ops last about a millisecond even
    # for the cheapest way (empty, some 5 us an op), a thousand times the
    # host clock's resolution; the rounds (their count unchanged) give the
    # spread, and 50 calls a sample made this timing five times as long.
    calls = 10
    sizes = SIZES[:1] if lab.quick else SIZES
    # Started first, the child imports torch (seconds of host work on another
    # core) while this process times; it touches the GPU only after that.
    child = _start_uncached() if lab.cuda and not lab.quick else None
    try:
        cached = _cached(lab, sizes, calls)
        if child is not None:
            _uncached(lab, sizes, cached, child)
    finally:
        if child is not None and child.poll() is None:
            child.kill()  # this process failed first: leave no child waiting
            child.wait()
    lab.note("allocator", torch.cuda.get_allocator_backend() if lab.cuda else "CPU (no cache switch)")


def _cached(lab, sizes, calls: int) -> dict:
    """Time the chains with this process's allocator; µs per op by (size, way)."""
    cached = {}
    allocator = "caching" if lab.cuda else "CPU"
    for n in sizes:
        c = chains(n, lab.device)
        expected = c["x"].double() + c["y"].double()
        lab.check(f"out=, n={n}", c["out="](), expected, tolerance=1e-6)
        lab.check(f"new tensor, n={n}", c["new tensor"](), expected, tolerance=1e-6)
        case = {"elements": n, "allocator": allocator}
        ways = ("out=", "new tensor", "empty")
        timed = lab.compare(
            {way: c[way] for way in ways}, case=case, key="way",
            metric="per_call", unit="us", baseline="new tensor",
            timer="host_sync", inner=calls, warmup=WARMUP_ROUNDS)
        for way in ways:
            cached[n, way] = timed[way].median / OPS
            lab.value(case={**case, "way": way}, metric="per_op",
                      value=cached[n, way], unit="us")
        # The speedup of out= is new tensor / out= within one round, so the
        # allocation's share of the new tensor's cost is 1 - 1/speedup: a
        # monotone function, whose median is 1 - 1/(the median speedup).
        paired = _metric(lab, {**case, "way": "out="}, "speedup")
        lab.value(case={**case, "way": "new tensor"}, metric="allocation_share",
                  unit="", value=1 - 1 / paired.median)
    return cached


def _metric(lab, case: dict, metric: str):
    """The ``metric`` that ``Lab.compare`` kept under ``case`` (its paired ratio)."""
    for row in lab.rows():
        if row.case == case and metric in row.metrics:
            return row.metrics[metric]
    raise KeyError(f"no {metric} kept for {case}")


def _start_uncached() -> subprocess.Popen:
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    code = "from examples.dispatch.allocator import uncached_child; uncached_child()"
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _uncached(lab, sizes, cached: dict, child: subprocess.Popen) -> None:
    try:
        stdout, stderr = child.communicate("go\n", timeout=300)
    except subprocess.TimeoutExpired:
        child.kill()
        raise RuntimeError("the uncached child ran past 300 s") from None
    if child.returncode != 0:
        raise RuntimeError(f"the uncached child failed: {stderr.strip().splitlines()[-1:]}")
    samples = json.loads(stdout.strip().splitlines()[-1])
    method = (f"host_sync, interleaved rounds, {UNCACHED_CALLS} calls of {OPS} ops a sample, "
              f"after {WARMUP_ROUNDS} warm-up rounds, in a child process with "
              "PYTORCH_NO_CUDA_MEMORY_CACHING=1")
    for n in sizes:
        for way in ("new tensor", "empty"):
            case = {"elements": n, "allocator": "no cache (cudaMalloc/cudaFree)", "way": way}
            kept = lab.keep_samples(samples[f"{n}/{way}"], case=case, metric="per_op", unit="us",
                                    method=method, warmup=WARMUP_ROUNDS, inner=UNCACHED_CALLS)
            # Two processes cannot share rounds: a ratio of the two medians.
            lab.value(case=case, metric="vs_caching", unit="x", value=kept.median / cached[n, way])


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
