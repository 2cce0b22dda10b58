"""Two-level all-reduce against flat rings across nodes: the command line of ring_model's pair.

    python -m examples.collectives.two_level --nodes 2 --gpus-per-node 8 --bytes 1GB \\
        --nvlink-bandwidth 450GB/s --network-bandwidth 50GB/s \\
        --nvlink-latency 2us --network-latency 5us --call 0us

The models are ``ring_model``'s (``hierarchical_allreduce_seconds``, ``flat_ring_seconds``,
``faster_by_size``); this module only reads the inputs and reports them, so that the page's
calculator (``docs/javascripts/calculators.js``) has a command line to be tested against.
It lives apart from ring_model.py because measured topics import that file.

>>> r = compare(nodes=2, gpus_per_node=8, nbytes=1e6, intra_bandwidth=450e9,
...             inter_bandwidth=50e9, intra_latency=2e-6, inter_latency=5e-6)
>>> round(r["two_level_seconds"] * 1e6, 1), round(r["flat_rings_seconds"] * 1e6, 1), r["faster"]
(44.4, 70.7, 'two-level')
>>> round(r["crossover_bytes"] / 1e6, 1)
16.5
"""

from __future__ import annotations

import argparse
import json
import sys

from examples.collectives.ring_model import (faster_by_size, flat_ring_seconds,
                                             hierarchical_allreduce_seconds, parse_bandwidth,
                                             parse_bytes, parse_time)
from examples.lab.cli import ArgumentParser, add_json_flag, emit_json

#: The page's worked example (two DGX H100-like nodes; the latencies are assumed inputs).
EXAMPLE_ARGV = ["--nodes", "2", "--gpus-per-node", "8", "--bytes", "1GB",
                "--nvlink-bandwidth", "450GB/s", "--network-bandwidth", "50GB/s",
                "--nvlink-latency", "2us", "--network-latency", "5us", "--call", "0us"]


# --8<-- [start:compare]
def compare(*, nbytes: float, **link) -> dict:
    """Both times for one message, which is faster (a tie goes to the flat rings, as in
    ``faster_by_size``; None on one GPU, where neither moves anything), and the size at
    which the faster one changes (None where one is faster at every size)."""
    two_level = hierarchical_allreduce_seconds(nbytes=nbytes, **link)
    flat = flat_ring_seconds(nbytes=nbytes, **link)
    one_gpu = link["nodes"] * link["gpus_per_node"] == 1
    by_size = faster_by_size(**link)
    return {
        "two_level_seconds": two_level,
        "flat_rings_seconds": flat,
        "faster": None if one_gpu else "two-level" if two_level < flat else "flat rings",
        "crossover_bytes": by_size[1][0] if len(by_size) == 2 else None,
    }


# --8<-- [end:compare]


def parse_count(text: str) -> int:
    """A whole number of nodes or GPUs, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m examples.collectives.two_level",
                            description=__doc__.strip().splitlines()[0])
    parser.add_argument("--nodes", required=True, type=parse_count, help="nodes (n)")
    parser.add_argument("--gpus-per-node", required=True, type=parse_count, help="GPUs per node (g)")
    parser.add_argument("--bytes", required=True, type=parse_bytes,
                        help="message size on each GPU (M): 1GB, 64MiB, 4096")
    parser.add_argument("--nvlink-bandwidth", required=True, type=parse_bandwidth,
                        help="NVLink bandwidth per GPU, one way: 450GB/s")
    parser.add_argument("--network-bandwidth", required=True, type=parse_bandwidth,
                        help="network bandwidth per GPU (its own port), one way: 50GB/s")
    parser.add_argument("--nvlink-latency", default=0.0, type=parse_time,
                        help="cost of one NVLink ring step: 2us (default 0)")
    parser.add_argument("--network-latency", default=0.0, type=parse_time,
                        help="cost of one network ring step: 5us (default 0)")
    parser.add_argument("--call", default=0.0, type=parse_time,
                        help="fixed cost of each collective call (beta): 10us (default 0)")
    add_json_flag(parser, "the two predictions")
    args = parser.parse_args(argv)
    result = compare(nodes=args.nodes, gpus_per_node=args.gpus_per_node, nbytes=args.bytes,
                     intra_bandwidth=args.nvlink_bandwidth, inter_bandwidth=args.network_bandwidth,
                     intra_latency=args.nvlink_latency, inter_latency=args.network_latency,
                     call=args.call)
    if args.json:
        emit_json(json.dumps(result) + "\n", args.json)
        return 0
    print(f"two-level all-reduce: {result['two_level_seconds'] * 1e6:.4g} us")
    print(f"flat rings:           {result['flat_rings_seconds'] * 1e6:.4g} us")
    print(f"faster at this size:  {result['faster'] or 'neither (one GPU)'}")
    if result["crossover_bytes"] is not None:
        print(f"the faster one changes at {result['crossover_bytes'] / 1e6:.4g} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
