"""Per-step traffic of DDP and FSDP: bytes each GPU sends, and its time.

    python -m examples.collectives.sharding_traffic --params 8e9 --gpus 8 \\
        --bandwidth 450GB/s

DDP all-reduces every gradient once per step. FSDP (full sharding) all-gathers
the parameters before the forward pass, again before the backward pass, and
reduce-scatters the gradients after it. Each all-gather and reduce-scatter is
half of a ring all-reduce, so the ring model of ``ring_model.py`` prices all
three.

>>> ddp = ddp_step(params=8e9, gpus=8, bandwidth=450e9)
>>> fsdp = fsdp_step(params=8e9, gpus=8, bandwidth=450e9)
>>> round(fsdp.bytes_sent / ddp.bytes_sent, 2)
1.5
>>> fsdp_step(params=8e9, gpus=8, bandwidth=450e9,
...           reshard_after_forward=False).bytes_sent == ddp.bytes_sent
True
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass

from examples.collectives.ring_model import (
    parse_bandwidth,
    parse_gpus,
    parse_time,
    ring_allreduce_seconds,
)
from examples.lab.cli import ArgumentParser, add_json_flag, emit_json, positive

#: The arguments the book's page works through; CI runs the example with them.
EXAMPLE_ARGV = ["--params", "8e9", "--gpus", "8", "--bandwidth", "450GB/s"]


# --8<-- [start:model]
@dataclass(frozen=True)
class Step:
    scheme: str
    collectives: tuple[str, ...]  # what runs, in order, once per step
    bytes_sent: float  # by each GPU, over its ring link, per step
    seconds: float  # the ring model's time for all of them


def _half_ring(*, gpus, nbytes, bandwidth, latency, pieces):
    """All-gather or reduce-scatter of nbytes in `pieces` calls: half a ring
    all-reduce each, p-1 steps of one chunk of the piece."""
    one = ring_allreduce_seconds(
        gpus=gpus, nbytes=nbytes / pieces, bandwidth=bandwidth,
        latency=latency,
    )
    return pieces * one / 2


def ddp_step(*, params, gpus, bandwidth, bytes_per_param=2, latency=0.0,
             buckets=1) -> Step:
    """DDP: one all-reduce of every gradient (in `buckets` calls)."""
    m = params * bytes_per_param
    p = gpus
    seconds = 2 * _half_ring(gpus=p, nbytes=m, bandwidth=bandwidth,
                             latency=latency, pieces=buckets)
    return Step("DDP", ("all-reduce (gradients)",),
                2 * (p - 1) / p * m, seconds)


def fsdp_step(*, params, gpus, bandwidth, bytes_per_param=2,
              grad_bytes_per_param=None, latency=0.0, units=1,
              reshard_after_forward=True) -> Step:
    """FSDP, full sharding: all-gather parameters before forward (and again
    before backward if they were freed after forward), reduce-scatter the
    gradients after backward; each in `units` calls, one per wrapped block."""
    m = params * bytes_per_param
    g = params * (grad_bytes_per_param or bytes_per_param)
    p = gpus
    gathers = 2 if reshard_after_forward else 1
    names = ("all-gather (forward)",) + (
        ("all-gather (backward)",) if reshard_after_forward else ()
    ) + ("reduce-scatter (gradients)",)
    kw = dict(gpus=p, bandwidth=bandwidth, latency=latency, pieces=units)
    seconds = (gathers * _half_ring(nbytes=m, **kw)
               + _half_ring(nbytes=g, **kw))
    sent = (p - 1) / p * (gathers * m + g)
    return Step("FSDP", names, sent, seconds)


# --8<-- [end:model]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m examples.collectives.sharding_traffic",
        description=__doc__.strip().splitlines()[0],
    )
    parser.add_argument("--params", required=True, type=positive(float),
                        help="parameters of the model: 8e9")
    parser.add_argument("--gpus", required=True, type=parse_gpus,
                        help="data-parallel GPUs (p)")
    parser.add_argument("--bandwidth", required=True, type=parse_bandwidth,
                        help="one-way bandwidth of each link (BW): 450GB/s")
    parser.add_argument("--bytes-per-param", default=2.0, type=positive(float),
                        help="bytes of a parameter as communicated "
                             "(default 2: bf16)")
    parser.add_argument("--grad-bytes-per-param", default=None,
                        type=positive(float),
                        help="bytes of a gradient as reduce-scattered "
                             "(default: as --bytes-per-param)")
    parser.add_argument("--latency", default=0.0, type=parse_time,
                        help="cost of one ring step (alpha): 5us (default 0)")
    parser.add_argument("--units", default=1, type=positive(int),
                        help="FSDP units, one collective each (default 1)")
    parser.add_argument("--buckets", default=1, type=positive(int),
                        help="DDP buckets, one all-reduce each (default 1)")
    add_json_flag(parser, "both steps")
    args = parser.parse_args(argv)
    common = dict(params=args.params, gpus=args.gpus,
                  bandwidth=args.bandwidth,
                  bytes_per_param=args.bytes_per_param, latency=args.latency)
    steps = [
        ddp_step(**common, buckets=args.buckets),
        fsdp_step(**common, grad_bytes_per_param=args.grad_bytes_per_param,
                  units=args.units),
        fsdp_step(**common, grad_bytes_per_param=args.grad_bytes_per_param,
                  units=args.units, reshard_after_forward=False),
    ]
    labels = ["DDP", "FSDP", "FSDP, no reshard after forward"]
    if args.json:
        rows = [dict(asdict(s), label=label)
                for s, label in zip(steps, labels)]
        emit_json(json.dumps(rows) + "\n", args.json)
        return 0
    for step, label in zip(steps, labels):
        gb = step.bytes_sent / 1e9
        print(f"{label + ':':32} {gb:8.3g} GB sent per GPU, "
              f"{step.seconds * 1e3:8.4g} ms  ({', '.join(step.collectives)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
