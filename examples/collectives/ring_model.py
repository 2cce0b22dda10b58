"""Ring all-reduce cost model: predicted time from GPUs, bytes and bandwidth.

    python -m examples.collectives.ring_model --gpus 8 --bytes 1GB \\
        --bandwidth 600GB/s

>>> t = ring_allreduce_seconds(gpus=8, nbytes=1e9, bandwidth=600e9)
>>> round(t * 1e3, 3)
2.917
>>> round(bus_bandwidth("all_reduce", gpus=8, algbw=100e9) / 1e9, 1)
175.0

Two nodes of eight GPUs, NVLink 450 GB/s each way per GPU, one 400 Gb/s NIC
(50 GB/s) per GPU: the two-level all-reduce against eight flat rings, 1 GB.

>>> link = dict(nodes=2, gpus_per_node=8, intra_bandwidth=450e9, inter_bandwidth=50e9)
>>> round(hierarchical_allreduce_seconds(nbytes=1e9, **link) * 1e3, 3)
6.389
>>> round(flat_ring_seconds(nbytes=1e9, **link) * 1e3, 3)
4.688
>>> faster_by_size(**link)
[(0.0, 'flat rings')]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys

from examples.lab.cli import ArgumentParser, add_json_flag, emit_json

#: The arguments the book's page works through; CI runs the example with them.
EXAMPLE_ARGV = ["--gpus", "8", "--bytes", "1GB", "--bandwidth", "600GB/s"]


# --8<-- [start:model]
def ring_allreduce_seconds(
    *, gpus: int, nbytes: float, bandwidth: float, latency: float = 0.0
) -> float:
    """Time of a ring all-reduce of ``nbytes`` on each of ``gpus`` ranks.

    Reduce-scatter then all-gather: 2(p-1) steps, each sending one chunk of
    nbytes/p over every link at once, and paying the per-step ``latency``.
    """
    p = gpus
    if p == 1:
        return 0.0
    steps = 2 * (p - 1)
    return steps * latency + steps / p * nbytes / bandwidth


# --8<-- [end:model]


def ring_bound(
    *, gpus: int, nbytes: float, bandwidth: float, latency: float = 0.0
) -> str | None:
    """Which term of the model is larger: "latency" or "bandwidth" (None: one GPU)."""
    if gpus == 1:
        return None
    steps = 2 * (gpus - 1)
    lat = steps * latency
    bw = steps / gpus * nbytes / bandwidth
    return "latency" if lat > bw else "bandwidth"


# --8<-- [start:hierarchical]
def hierarchical_allreduce_seconds(
    *, nodes: int, gpus_per_node: int, nbytes: float, intra_bandwidth: float,
    inter_bandwidth: float, intra_latency: float = 0.0, inter_latency: float = 0.0,
    call: float = 0.0,
) -> float:
    """Two-level all-reduce of ``nbytes`` on each of ``nodes`` x ``gpus_per_node`` GPUs.

    1. Reduce-scatter inside each node, a ring of g GPUs over NVLink: g-1 steps
       of M/g; each GPU then holds its node's sum of one M/g shard.
    2. All-reduce of that shard across the nodes, a ring of n nodes: the g
       shards in parallel, each GPU over its own NIC (a rail), 2(n-1) steps
       of M/(g n).
    3. All-gather inside each node: g-1 steps of M/g.
    Each phase that has steps is one collective call and pays ``call`` (beta).
    """
    n, g = nodes, gpus_per_node
    inside = ring_allreduce_seconds(gpus=g, nbytes=nbytes, bandwidth=intra_bandwidth,
                                    latency=intra_latency)  # phases 1 and 3
    across = ring_allreduce_seconds(gpus=n, nbytes=nbytes / g, bandwidth=inter_bandwidth,
                                    latency=inter_latency)  # phase 2
    calls = 2 * (g > 1) + (n > 1)
    return calls * call + inside + across


def flat_ring_seconds(
    *, nodes: int, gpus_per_node: int, nbytes: float, intra_bandwidth: float,
    inter_bandwidth: float, intra_latency: float = 0.0, inter_latency: float = 0.0,
    call: float = 0.0, rings: int | None = None,
) -> float:
    """Flat rings over all p = n x g GPUs, as NCCL runs them across nodes: ``rings``
    rings side by side (NCCL's channels; by default g, one per GPU's NIC, as on a
    rail-optimised fabric), each carrying M/rings. Each ring leaves every node once,
    through its own NIC, so its slowest hop is one NIC at ``inter_bandwidth``: 2(p-1)
    steps of M/(rings p) at the network's pace. Of those steps' latencies only 2(n-1)
    are the network's and the rest NVLink's, as NCCL's own ring model counts them
    (``nInterSteps``, src/graph/tuning.cc, NCCL 2.28). Inside one node: one ring over NVLink."""
    p = nodes * gpus_per_node
    if p == 1:
        return 0.0
    if nodes == 1:
        return call + ring_allreduce_seconds(gpus=p, nbytes=nbytes, bandwidth=intra_bandwidth,
                                             latency=intra_latency)
    share = nbytes / (rings or gpus_per_node)
    network_steps = 2 * (nodes - 1)
    latency = (2 * (p - 1) - network_steps) * intra_latency + network_steps * inter_latency
    return call + latency + ring_allreduce_seconds(gpus=p, nbytes=share, bandwidth=inter_bandwidth)


def faster_by_size(**link) -> list[tuple[float, str]]:
    """Which all-reduce is faster, by message size: ``[(0, name)]`` where one is faster at
    every size, else ``[(0, name), (crossover, other)]``, the crossover in bytes; names
    "two-level" and "flat rings". Both times are a fixed part plus a part in proportion
    to M, so they cross at most once (a tie counts for the flat rings, the simpler)."""
    fixed = {"two-level": hierarchical_allreduce_seconds(nbytes=0.0, **link),
             "flat rings": flat_ring_seconds(nbytes=0.0, **link)}
    per_byte = {name: t(nbytes=1.0, **link) - fixed[name] for name, t in
                (("two-level", hierarchical_allreduce_seconds), ("flat rings", flat_ring_seconds))}
    first = "two-level" if (fixed["two-level"], per_byte["two-level"]) < (
        fixed["flat rings"], per_byte["flat rings"]) else "flat rings"
    other = "flat rings" if first == "two-level" else "two-level"
    if per_byte[other] >= per_byte[first]:
        return [(0.0, first)]
    return [(0.0, first), ((fixed[other] - fixed[first]) / (per_byte[first] - per_byte[other]), other)]


# --8<-- [end:hierarchical]


# --8<-- [start:busbw]
#: nccl-tests' factor from algorithm bandwidth (S/t) to bus bandwidth.
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def bus_bandwidth(collective: str, *, gpus: int, algbw: float) -> float:
    """busbw = algbw x factor: comparable with the link's own bandwidth."""
    return algbw * BUS_FACTOR[collective](gpus)


# --8<-- [end:busbw]

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_NUMBER = r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*"


def _quantity(text: str, units: dict[str, float], what: str) -> float:
    match = re.fullmatch(_NUMBER + r"([a-zµ]*)\s*", text.lower())
    if not match or match.group(2) not in units:
        known = ", ".join(u for u in units if u)
        raise argparse.ArgumentTypeError(
            f"expected {what} such as 1GB, 1GiB or 512MiB ({known}), got {text!r}"
            if units is _SIZE_UNITS
            else f"expected {what} ({known}), got {text!r}"
        )
    value = float(match.group(1)) * units[match.group(2)]
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def parse_bytes(text: str) -> float:
    """``1GB`` -> 1e9, ``1GiB`` -> 2**30, ``4096`` -> 4096."""
    return _quantity(text, _SIZE_UNITS, "a size")


def parse_bandwidth(text: str) -> float:
    """``600GB/s`` -> 6e11 bytes per second."""
    if not text.lower().rstrip().endswith("/s"):
        raise argparse.ArgumentTypeError(
            f"expected a rate such as 600GB/s, got {text!r}"
        )
    return _quantity(text.rstrip()[:-2], _SIZE_UNITS, "a rate")


def parse_time(text: str) -> float:
    """``5us`` -> 5e-6 seconds; zero is allowed (no latency term)."""
    match = re.fullmatch(_NUMBER + r"([a-zµ]*)\s*", text.lower())
    if match and float(match.group(1)) == 0 and match.group(2) in _TIME_UNITS:
        return 0.0
    return _quantity(text, _TIME_UNITS, "a time such as 5us")


def parse_gpus(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number of GPUs, got {text!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m examples.collectives.ring_model",
        description=__doc__.strip().splitlines()[0],
    )
    parser.add_argument("--gpus", required=True, type=parse_gpus,
                        help="ranks in the ring (p)")
    parser.add_argument("--bytes", required=True, type=parse_bytes,
                        help="message size on each rank (M): 1GB, 1GiB, 4096")
    parser.add_argument("--bandwidth", required=True, type=parse_bandwidth,
                        help="one-way bandwidth of each link (BW): 600GB/s")
    parser.add_argument("--latency", default=0.0, type=parse_time,
                        help="cost of one ring step (alpha): 5us (default 0)")
    add_json_flag(parser, "the prediction")
    args = parser.parse_args(argv)
    seconds = ring_allreduce_seconds(
        gpus=args.gpus, nbytes=args.bytes, bandwidth=args.bandwidth,
        latency=args.latency,
    )
    algbw = args.bytes / seconds if seconds else math.inf
    result = {
        "seconds": seconds,
        "algbw_bytes_per_s": algbw if seconds else None,
        "busbw_bytes_per_s": (
            bus_bandwidth("all_reduce", gpus=args.gpus, algbw=algbw)
            if seconds else None
        ),
        "bound": ring_bound(gpus=args.gpus, nbytes=args.bytes,
                            bandwidth=args.bandwidth, latency=args.latency),
    }
    if args.json:
        emit_json(json.dumps(result) + "\n", args.json)
        return 0
    print(f"predicted all-reduce time: {seconds * 1e3:.4g} ms")
    if seconds:
        print(f"algorithm bandwidth:       {algbw / 1e9:.4g} GB/s")
        print(f"bus bandwidth:             "
              f"{result['busbw_bytes_per_s'] / 1e9:.4g} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
