"""The fixed CPU cost of one op on a tiny tensor, by device and autograd mode.

A chain of additions of two 16-element tensors does no real work, so the time per call
is what Python, the dispatcher, autograd and (on a GPU) the launch cost. Each
mode is timed as the average of many back-to-back chains on a host clock, the
four modes of a device interleaved in rounds (``Lab.compare``): plain tensors;
a tensor that requires grad (autograd records a node per op); the same under
``torch.no_grad()``; and tensors made and used under
``torch.inference_mode()``.

All of it is host work, and hosts of one GPU kind differ by up to 2x, so each
op's cost is also kept in units of this run's own tiny op
(``lab.host_reference["tiny_op_us"]``, the enqueue of a one-element CUDA add):
``per_tiny_op``, a figure that travels between hosts.
"""

from __future__ import annotations

import contextlib
import sys

import torch

OPS = 20  # ops per timed call
MODES = ["plain", "requires_grad", "requires_grad + no_grad",
         "inference_mode"]


# --8<-- [start:modes]
def op_under(mode: str, device: str):
    """A zero-argument call of OPS tiny adds set up for ``mode``; x, w."""
    ctx = {"requires_grad + no_grad": torch.no_grad,
           "inference_mode": torch.inference_mode}.get(
        mode, contextlib.nullcontext)
    with ctx():  # inference tensors must be made in inference mode
        x = torch.randn(16, device=device)
        w = torch.randn(16, device=device,
                        requires_grad=mode.startswith("requires_grad"))

    def call():
        with ctx():  # entered once for OPS ops, as a loop would
            for _ in range(OPS):
                y = torch.add(x, w)
        return y

    return call, x, w


# --8<-- [end:modes]


#: Warm-up rounds: each one runs every mode `calls` times, OPS ops a call.
WARMUP_ROUNDS = 2


def measure(lab) -> None:
    calls = 20 if lab.quick else 50  # 50 calls of 20 ops: milliseconds per sample, plenty for a host clock
    tiny_op_us = lab.host_reference["tiny_op_us"]
    devices = ["cpu"] + (["cuda"] if lab.cuda else [])
    for device in devices:
        chains = {}
        for mode in MODES:
            call, x, w = op_under(mode, device)
            lab.check(f"{device} {mode}", call(),
                      x.double() + w.detach().double(), tolerance=1e-6)
            chains[mode] = call
        case = {"device": device}
        timed = lab.compare(chains, case=case, key="mode", metric="per_call",
                            unit="us", baseline="plain", timer="host_sync",
                            inner=calls, warmup=WARMUP_ROUNDS)
        for mode, t in timed.items():
            row = {**case, "mode": mode}
            lab.value(case=row, metric="per_op", value=t.median / OPS,
                      unit="us")
            lab.value(case=row, metric="per_tiny_op", unit="x",
                      value=t.median / OPS / tiny_op_us)
    # Entering a context manager costs too: time it alone.
    entering = {}
    for mode in ("requires_grad + no_grad", "inference_mode"):
        ctx = torch.no_grad if "no_grad" in mode else torch.inference_mode

        def enter_exit(ctx=ctx):
            with ctx():
                pass

        entering[f"{mode} (entering the context alone)"] = enter_exit
    lab.compare(entering, case={"device": "none"}, key="mode",
                metric="per_call", unit="us", timer="host_sync", inner=calls,
                warmup=WARMUP_ROUNDS)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
