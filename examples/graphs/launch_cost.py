"""Per-kernel cost: tiny kernels launched one by one vs replayed from a graph.

Each step is a chain of ``kernels`` in-place additions on a small tensor, so
the arithmetic is negligible and what is measured is the cost of getting a
kernel onto the GPU. Eager pays Python, the dispatcher and a CUDA launch per
kernel; a graph replay submits the whole chain with one launch. The two are
timed interleaved in rounds (``Lab.compare``), so the speedup is a paired
ratio. The eager cost is the host's, and hosts of one GPU kind differ by up
to 2x: it is also kept in units of this run's tiny op
(``lab.host_reference["tiny_op_us"]``), ``per_tiny_op``.

On a machine without a GPU the eager chain is timed on the CPU, where the same
per-op overhead (Python and the dispatcher) is paid with no launch at all.
"""

from __future__ import annotations

import sys

import torch

from examples.graphs.capture_replay import capture

ELEMENTS = 1024  # 4 KiB of float32: the kernel itself does almost no work


# --8<-- [start:chain]
def add_chain(x: torch.Tensor, kernels: int) -> torch.Tensor:
    """``kernels`` dependent launches of the smallest useful kernel."""
    for _ in range(kernels):
        x.add_(1.0)
    return x


# --8<-- [end:chain]


#: Warm-up calls (rounds on a GPU): the chain is the same op again and again,
#: so a few calls reach the steady state.
WARMUP = 3


def measure(lab) -> None:
    chain_lengths = [1, 16] if lab.quick else [1, 4, 16, 64, 256, 1024]
    tiny_op_us = lab.host_reference["tiny_op_us"]
    x = torch.randn(ELEMENTS, device=lab.device)
    for kernels in chain_lengths:
        eager_row = {"kernels": kernels, "mode": "eager"}
        if not lab.cuda:
            eager = lab.time(lambda: add_chain(x, kernels), case=eager_row,
                             metric="step", warmup=WARMUP)
        else:
            # --8<-- [start:graph]
            static_x = torch.randn(ELEMENTS, device=lab.device)
            # Capture records the chain; nothing runs yet.
            graph, _ = capture(lambda t: add_chain(t, kernels), static_x,
                               warmup=0)
            expected = static_x + kernels
            graph.replay()  # one launch for the whole chain
            # --8<-- [end:graph]
            lab.check(f"graph of {kernels} additions", static_x, expected,
                      tolerance=1e-4)
            timed = lab.compare(
                {"eager": lambda: add_chain(x, kernels),
                 "graph": graph.replay},
                case={"kernels": kernels}, key="mode", metric="step",
                baseline="eager", warmup=WARMUP)
            eager = timed["eager"]
            lab.value(case={"kernels": kernels, "mode": "graph"},
                      metric="per_kernel",
                      value=timed["graph"].median / kernels, unit="us")
        lab.value(case=eager_row, metric="per_kernel",
                  value=eager.median / kernels, unit="us")
        lab.value(case=eager_row, metric="per_tiny_op", unit="x",
                  value=eager.median / kernels / tiny_op_us)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
