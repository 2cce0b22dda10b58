"""The fixed CPU cost of one op on a tiny tensor, by device and autograd mode.

A chain of additions of two 16-element tensors does no real work, so the time per call
is what Python, the dispatcher, autograd and (on a GPU) the launch cost. Each
mode is timed as the average of many back-to-back chains on a host clock, the
four modes of a device interleaved in rounds (the harness's interleaved timer, the
one ``Lab.compare`` uses): plain tensors; a tensor that requires grad (autograd
records a node per op); the same under ``torch.no_grad()``; and tensors made and
used under ``torch.inference_mode()``.

All of it is host work, and hosts of one GPU kind differ by up to 2x, so each
op's cost is also kept in units of the host's **tiny op** (the enqueue of a
one-element in-place add on the run's device, the op ``lab.host_reference`` times
once per process): a chain of tiny ops is a fifth variant of the same rounds, and
``per_tiny_op`` is the paired ratio of each chain to it, round by round, so that
the host's speed at that moment cancels. Within a run the samples of one chain
can fall in two groups, one near its fastest and one well above it:
``slow_samples`` is the share of them more than ``SLOW`` times its fastest.
"""

from __future__ import annotations

import contextlib
import sys
import time

import torch

from examples.lab.timing import measure_interleaved

OPS = 20  # ops per timed call
MODES = ["plain", "requires_grad", "requires_grad + no_grad",
         "inference_mode"]
#: The reference variant: OPS one-element in-place adds, timed in the modes' rounds.
TINY = "tiny op"
#: A sample this much over the variant's fastest counts as slow: the two groups of
#: samples in the book's earlier runs were about 1.5x apart (some 10 and 16 us an
#: op on the GPU), each a few percent wide.
SLOW = 1.25


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


def tiny_ops(device: str):
    """The host's tiny op, OPS to a call as the chains have them: a one-element
    in-place add (no output to allocate); and the tensor it adds into."""
    one = torch.zeros(1, device=device)

    def call():
        for _ in range(OPS):
            one.add_(1)
        return one

    return call, one


# --8<-- [end:modes]


#: Warm-up rounds: each one runs every variant once (OPS ops).
WARMUP_ROUNDS = 2


def slow_share(samples: list[float]) -> float:
    """Percent of ``samples`` more than SLOW times the fastest of them."""
    fastest = min(samples)
    return 100 * sum(s > SLOW * fastest for s in samples) / len(samples)


def measure(lab) -> None:
    # Calls per sample: 40 calls of 20 ops last milliseconds on a GPU, plenty for a
    # host clock; 40, not 50, so that the tiny op's chain, a fifth variant of each
    # device's rounds, leaves the topic's time about as it was.
    calls = 20 if lab.quick else 40
    devices = ["cpu"] + (["cuda"] if lab.cuda else [])
    method = "host_sync, interleaved rounds"
    for device in devices:
        chains = {}
        for mode in MODES:
            call, x, w = op_under(mode, device)
            lab.check(f"{device} {mode}", call(),
                      x.double() + w.detach().double(), tolerance=1e-6)
            chains[mode] = call
        # The run's tiny op (a CUDA one on a GPU, in the CPU chains' rounds too):
        # the unit every chain of these rounds is divided by.
        tiny, one = tiny_ops(lab.device.type)
        lab.check(f"{device} rounds: {TINY}", tiny(),
                  torch.full((1,), float(OPS), device=lab.device), tolerance=0)
        chains[TINY] = tiny
        # Host clock, the device synchronized around each sample (as Lab.compare's
        # "host_sync"); sample i of every variant comes from round i.
        began = time.monotonic()
        samples = measure_interleaved(chains, device=lab.device, timer="host_sync",
                                      warmup=WARMUP_ROUNDS, repetitions=lab.repetitions,
                                      inner=calls)
        lab.load.window(began, time.monotonic())
        # The tiny op gets a row where it ran on the rows' device; in the CPU
        # rounds of a GPU run it is a CUDA op, there only as their unit.
        kept = MODES + ([TINY] if device == lab.device.type else [])
        for mode in kept:
            row = {"device": device, "mode": mode}
            s = samples[mode]
            lab.keep_samples([v * 1e6 for v in s], case=row, metric="per_call", unit="us",
                             method=method, warmup=WARMUP_ROUNDS, inner=calls)
            lab.keep_samples([v * 1e6 / OPS for v in s], case=row, metric="per_op", unit="us",
                             method=method, warmup=WARMUP_ROUNDS, inner=calls)
            lab.value(case=row, metric="slow_samples", value=slow_share(s), unit="%")
            if mode == TINY:
                continue
            if mode != "plain":
                lab.keep_samples([p / v for p, v in zip(samples["plain"], s)], case=row,
                                 metric="speedup", unit="x",
                                 method=f"paired ratio plain / {mode}, {method}")
            # Both chains are OPS ops a call: the ratio of calls is the ratio of ops.
            lab.keep_samples([v / t for v, t in zip(s, samples[TINY])], case=row,
                             metric="per_tiny_op", unit="x",
                             method=f"paired ratio {mode} / {TINY}, {method}")
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
