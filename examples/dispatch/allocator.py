"""The caching allocator's share of an op's cost.

Every op that returns a new tensor needs memory for it. On a GPU, PyTorch's
caching allocator keeps the blocks that freed tensors leave and hands them
out again, so ``cudaMalloc`` and ``cudaFree`` (which synchronizes the device)
are almost never called. Three ways to run the same chain of additions are
timed on a synchronized host clock:

* ``out=``: written into a tensor made once: no allocation at all;
* ``new tensor``: each add returns a new tensor, from the allocator's cache;
* ``new tensor, no cache``: the same in a child process started with
  ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``, where every allocation is a
  ``cudaMalloc`` and every free a ``cudaFree`` (GPU only).

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


def _per_op_samples(fn, calls: int, samples: int, cuda: bool) -> list[float]:
    """µs per op: `calls` back-to-back calls of fn between two synchronized host reads."""
    import time

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(3):
        fn()
    out = []
    for _ in range(samples):
        sync()
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        out.append((time.perf_counter() - started) / (calls * OPS) * 1e6)
    return out


def uncached_child() -> None:
    """Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1: print µs-per-op samples as JSON."""
    result = {}
    for n in SIZES:
        c = chains(n, "cuda")
        for name in ("new tensor", "empty"):
            result[f"{n}/{name}"] = _per_op_samples(c[name], calls=5, samples=15, cuda=True)
    print(json.dumps(result))


def measure(lab) -> None:
    calls = 10 if lab.quick else 50
    sizes = SIZES[:1] if lab.quick else SIZES
    cached = {}
    for n in sizes:
        c = chains(n, lab.device)
        expected = c["x"].double() + c["y"].double()
        lab.check(f"out=, n={n}", c["out="](), expected, tolerance=1e-6)
        lab.check(f"new tensor, n={n}", c["new tensor"](), expected, tolerance=1e-6)
        t = {}
        for way in ("out=", "new tensor", "empty"):
            case = {"elements": n, "way": way, "allocator": "caching" if lab.cuda else "CPU"}
            timed = lab.time(c[way], case=case, metric="per_call", unit="us",
                             timer="host_sync", inner=calls)
            t[way] = cached[n, way] = timed.median / OPS
            lab.value(case=case, metric="per_op", value=t[way], unit="us")
        share_case = {"elements": n, "way": "new tensor", "allocator": "caching" if lab.cuda else "CPU"}
        lab.value(case=share_case, metric="allocation_share", unit="",
                  value=(t["new tensor"] - t["out="]) / t["new tensor"])
    if lab.cuda and not lab.quick:
        _uncached(lab, sizes, cached)
    lab.note("allocator", torch.cuda.get_allocator_backend() if lab.cuda else "CPU (no cache switch)")


def _uncached(lab, sizes, cached: dict) -> None:
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    code = "from examples.dispatch.allocator import uncached_child; uncached_child()"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"the uncached child failed: {done.stderr.strip().splitlines()[-1:]}")
    samples = json.loads(done.stdout.strip().splitlines()[-1])
    method = ("host clock, synchronized around 5 calls of 20 ops, 15 samples after 3 warm-up calls, "
              "in a child process with PYTORCH_NO_CUDA_MEMORY_CACHING=1")
    for n in sizes:
        for way in ("new tensor", "empty"):
            case = {"elements": n, "way": way, "allocator": "no cache (cudaMalloc/cudaFree)"}
            kept = lab.keep_samples(samples[f"{n}/{way}"], case=case, metric="per_op", unit="us",
                                    method=method)
            lab.value(case=case, metric="vs_caching", unit="x", value=kept.median / cached[n, way])


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
