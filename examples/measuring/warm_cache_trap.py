"""The warm-cache trap: a kernel timed on data that is already in the L2.

A GPU has an L2 cache of tens of MB. A memory-bound kernel whose input
and output fit in it, timed again and again on the same buffers, reads from
the cache, not from HBM, and reports a bandwidth the memory cannot deliver.
Timed three ways on a small and a large tensor: the same buffers every time
(warm), the L2 overwritten before each repetition (flushed), and rotating
through enough buffer pairs to overflow the cache (rotated). The metric is
the apparent bandwidth, bytes read plus written over time. The time is the
kernel's own duration on the GPU (``kernel``, the harness's kernel timer,
which also cuts the flush away), since whether the kernel reads the L2 or
HBM is a question about the kernel; and, as its own figure, events around
one call (``one_call``): at the small size the kernel is shorter than its
launch, and the events time both.
"""

from __future__ import annotations

import sys

import torch

from examples.measuring.cpu_bound_trap import checked_elements


# --8<-- [start:ways]
def ways(x, y, pool):
    """(label, harness arguments) of each way of timing ``y = 2 x``."""
    return [
        ("same buffers (warm L2)", {}),
        ("L2 flushed before each", {"flush_l2": True}),
        ("rotating buffers", {"inputs": pool}),
    ]


# --8<-- [end:ways]


def measure(lab) -> None:
    # float32: 8 MiB and 1 GiB per tensor (16 MiB and 2 GiB in and out)
    sizes = [2**10, 2**14] if lab.quick else [2**21, 2**28]
    one_call_timer = "cuda_event" if lab.cuda else "host_sync"
    for n in sizes:
        x = torch.randn(n, device=lab.device)
        y = torch.empty_like(x)
        torch.mul(x, 2.0, out=y)
        at = checked_elements(n, lab.device)
        lab.check(f"2x n={n}", y[at], 2 * x[at].double(), tolerance=0)
        nbytes = 2 * x.numel() * x.element_size()
        # Enough buffer pairs to hold four times a 50 MB L2.
        pairs = 1 if nbytes >= 200e6 else min(64, int(200e6 // nbytes) + 1)
        pool = [(torch.randn(n, device=lab.device),
                 torch.empty(n, device=lab.device)) for _ in range(pairs)]
        for label, kwargs in ways(x, y, pool):
            case = {"MiB": nbytes / 2**20, "timing": label}
            if "inputs" in kwargs:
                fn = lambda a, b: torch.mul(a, 2.0, out=b)  # noqa: E731
            else:
                fn = lambda: torch.mul(x, 2.0, out=y)  # noqa: E731
            # The kernel alone, by the GPU's clock (CUPTI): no launch, no
            # host, and the flush's own kernel cut away.
            k = lab.time(fn, case=case, metric="kernel", unit="us",
                         timer="kernel", **kwargs)
            lab.value(case=case, metric="kernel_bandwidth",
                      value=nbytes / (k.median * 1e-6) / 1e9, unit="GB/s")
            # Events around one call on an idle GPU: the launch is in it.
            t = lab.time(fn, case=case, metric="one_call", unit="us",
                         timer=one_call_timer, **kwargs)
            lab.value(case=case, metric="one_call_bandwidth",
                      value=nbytes / (t.median * 1e-6) / 1e9, unit="GB/s")
        del pool
    _against_hbm(lab, max(sizes) * 8 / 2**20)


def _against_hbm(lab, hbm_mib: float) -> None:
    """Each kernel bandwidth over that of the largest size with L2 flushed: what HBM
    gives in this run, so "faster than memory" is stated relative to this GPU."""
    rows = {(r.case["MiB"], r.case["timing"]): r for r in lab.rows()}
    hbm = rows[(hbm_mib, "L2 flushed before each")].metrics["kernel_bandwidth"].median
    for (mib, timing), row in rows.items():
        lab.value(case=row.case, metric="vs_hbm", unit="x",
                  value=row.metrics["kernel_bandwidth"].median / hbm)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
