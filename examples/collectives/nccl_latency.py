"""NCCL's small-message latency: the host's work against the GPU's own cost.

Spawns one process per GPU (NCCL) or two CPU processes (gloo), checks
``dist.all_reduce`` on bf16 against the sum computed locally, then times every
message size from 1 KiB to 1 MiB three ways: one call between two CUDA events;
N calls back to back between two events; N calls captured in one CUDA graph
and replayed. The graph has no host work per call, so its time per call is
what NCCL's kernels cost, and at 1 KiB it gives the ring model's per-step
latency alpha. On the CPU (gloo) there are no graphs: the two eager ways only.
"""

from __future__ import annotations

import os
import sys
import zlib

import torch
import torch.distributed as dist

from examples.collectives.ring_allreduce import lined_up, spawn
from examples.collectives.ring_model import bus_bandwidth
from examples.lab.timing import measure_rounds

#: On a GPU machine this topic needs two GPUs (a collective needs at least
#: two); the CPU path runs two gloo ranks.
MIN_GPUS = 2

DTYPE = torch.bfloat16
#: The per-layer all-reduce of a tensor-parallel decode step: one token's
#: hidden state of 4096 values in bf16.
TP_DECODE_BYTES = 4096 * 2


def sizes(quick: bool) -> list[int]:
    """Bytes per GPU: 1 KiB to 1 MiB by powers of two (quick: four of them)."""
    if quick:
        return [1 << 10, 1 << 12, TP_DECODE_BYTES, 1 << 16]
    return [1 << k for k in range(10, 21)]


def rank_input(seed: int, rank: int, nbytes: int, which: int) -> torch.Tensor:
    """Rank ``rank``'s message ``which``, reproducible in any process."""
    # The CPU generator keeps 32 bits of a seed: hash all four into 32.
    key = f"{seed} {rank} {nbytes} {which}".encode()
    g = torch.Generator().manual_seed(zlib.crc32(key))
    return torch.randn(nbytes // 2, generator=g).to(DTYPE)


def expected_sum(seed: int, gpus: int, nbytes: int,
                 which: int) -> torch.Tensor:
    """The all-reduced message, summed here in float64 from every rank's."""
    return sum(rank_input(seed, r, nbytes, which).double()
               for r in range(gpus))


# --8<-- [start:methods]
def capture(bufs: list[torch.Tensor]) -> torch.cuda.CUDAGraph:
    """One all-reduce per buffer, all captured in one CUDA graph.

    Every rank captures the same sequence, after an eager all-reduce has
    set up the communicator. torch.cuda.graph captures on its own side
    stream; "thread_local" lets c10d's watchdog thread go on querying the
    events of earlier calls while this thread captures.
    """
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for b in bufs:
            dist.all_reduce(b)
    return graph


def methods(bufs: list[torch.Tensor], graphed: bool) -> dict:
    """Each way to time: (function, all-reduces it makes per sample)."""

    def one_call():  # host work, launch and the kernel, end to end
        dist.all_reduce(bufs[0])

    def back_to_back():  # the host queues call i + 1 while the GPU runs i
        for b in bufs:
            dist.all_reduce(b)

    ways = {"one call": (one_call, 1),
            "back to back": (back_to_back, len(bufs))}
    if graphed:  # one launch replays every call: no host work per call
        ways["graphed"] = (capture(bufs).replay, len(bufs))
    return ways


# --8<-- [end:methods]


def latency(config: dict, device: torch.device) -> dict:
    """One rank: check, then time every size every way; save per rank."""
    rank = dist.get_rank()
    calls, times = config["calls"], {}
    graphed = device.type == "cuda"
    alive = []  # every buffer and graph stays until the end: NCCL may have
    # registered a captured buffer, so none is freed while it might be used
    for nbytes in config["sizes"]:
        # One buffer per call, so no sum feeds the next call within a sample;
        # the first and last are the checked ones.
        x0 = torch.randn(calls, nbytes // 2, device=device, dtype=DTYPE)
        for which in (0, calls - 1):
            x0[which] = rank_input(config["seed"], rank, nbytes, which)
        x = x0.clone()
        bufs = list(x.unbind())

        def reset(_=None, x=x, x0=x0):
            x.copy_(x0)

        # Eager first: it is checked, and it connects whatever NCCL chose
        # for this size before a graph captures it.
        reset()
        for b in bufs:
            dist.all_reduce(b)
        saved = {"eager": [x[0].cpu(), x[-1].cpu()]}
        ways = methods(bufs, graphed)
        if graphed:
            reset()
            ways["graphed"][0]()
            saved["graphed"] = [x[0].cpu(), x[-1].cpu()]
        torch.save(saved, f"{config['out']}/check-{nbytes}-{rank}.pt")
        # --8<-- [start:aligned]
        # The ways in alternating rounds (A B C, C B A, ...); before every
        # sample the messages are restored and a barrier releases all ranks.
        samples = measure_rounds({name: fn for name, (fn, _) in ways.items()},
                                 device=device, warmup=config["warmup"],
                                 repetitions=config["reps"],
                                 before=lined_up(reset))
        for name, (_, count) in ways.items():
            times[f"{name}|{nbytes}"] = [t / count for t in samples[name]]
        # --8<-- [end:aligned]
        alive.append((x0, x, ways))
    if graphed:
        torch.cuda.synchronize()
    alive.clear()  # each graph goes before the buffers its closures hold
    torch.save(times, f"{config['out']}/times-{rank}.pt")
    return {"calls": calls}


# --8<-- [start:fit]
def ring_alpha(t_small: float, gpus: int) -> float:
    """The ring model's per-step latency from a latency-bound all-reduce.

    At 1 KiB the model's bandwidth term is nanoseconds, so t = 2(p-1) alpha.
    """
    return t_small / (2 * (gpus - 1))


# --8<-- [end:fit]


def measure(lab) -> None:
    cuda = lab.cuda
    p = torch.cuda.device_count() if cuda else 2
    if cuda and p < MIN_GPUS:  # the runner skips the topic before this
        raise RuntimeError(f"needs {MIN_GPUS} GPUs, this machine has {p}")
    config = {
        "sizes": sizes(lab.quick),
        "calls": 8 if lab.quick else 64,
        "warmup": 2 if lab.quick else 5,
        "reps": 5 if lab.quick else 40,
        "seed": int.from_bytes(os.urandom(4), "little"),  # fresh inputs
    }
    backend = "nccl" if cuda else "gloo"
    r = spawn(latency, p, backend, config)
    saved = r["saved"]
    ways = ("one call", "back to back", "graphed") if cuda else (
        "one call", "back to back")
    checked = ("eager", "graphed") if cuda else ("eager",)
    # bf16 keeps 8 significant bits: each of the p - 1 additions of a ring
    # rounds by at most 2^-8 of the partial sum.
    tolerance = (p - 1) * 2.0**-8
    for nbytes in config["sizes"]:
        for i, which in enumerate((0, config["calls"] - 1)):
            want = expected_sum(config["seed"], p, nbytes, which)
            for way in checked:
                got = torch.cat([saved[f"check-{nbytes}-{k}.pt"][way][i]
                                 for k in range(p)])
                lab.check(f"{way}, {nbytes} B, call {which + 1}, all ranks "
                          "vs the sum computed locally", got,
                          want.repeat(p), tolerance=tolerance)

    clock = "cuda_event" if cuda else "host clock"
    how = f"{clock}, max over {p} ranks per sample, interleaved rounds"
    t, cases, worst = {}, {}, {}
    for way in ways:
        inner = 1 if way == "one call" else config["calls"]
        for nbytes in config["sizes"]:
            key = f"{way}|{nbytes}"
            per_rank = [saved[f"times-{k}.pt"][key] for k in range(p)]
            worst[way, nbytes] = [max(s) * 1e6 for s in zip(*per_rank)]
            case = {"part": "sweep", "bytes": nbytes, "method": way, "gpus": p}
            t[way, nbytes] = lab.keep_samples(
                worst[way, nbytes], case=case, metric="time", unit="us",
                method=how,
                warmup=config["warmup"], inner=inner).median
            cases[way, nbytes] = case
    for (way, nbytes), case in cases.items():
        algbw = nbytes / (t[way, nbytes] / 1e6)
        lab.value(case=case, metric="algbw", value=algbw / 1e9, unit="GB/s")
        lab.value(case=case, metric="busbw", unit="GB/s",
                  value=bus_bandwidth("all_reduce", gpus=p,
                                      algbw=algbw) / 1e9)
        lab.value(case=case, metric="vs_smallest", unit="x",
                  value=t[way, nbytes] / t[way, config["sizes"][0]])
        if cuda and way != "graphed":  # sample i of each: the same round
            lab.keep_samples(
                [a / b for a, b in zip(worst[way, nbytes],
                                       worst["graphed", nbytes], strict=True)],
                case=case, metric="vs_graphed", unit="x",
                method=f"paired ratio {way} / graphed, {how}")
    lab.note("ranks", f"{p} ({backend}), one process per rank")
    if not cuda:
        lab.note("graphed", "skipped: CUDA graphs need a GPU; gloo on the "
                 "CPU times the two eager ways only")
        return
    # spawn set it for every rank: NVLink SHARP off, so ring or tree ran
    lab.note("NCCL_NVLS_ENABLE", os.environ.get("NCCL_NVLS_ENABLE"))
    fit = {"part": "fit", "gpus": p}
    smallest = config["sizes"][0]
    lab.value(case=fit, metric="alpha", unit="us",
              value=ring_alpha(t["graphed", smallest], p))
    lab.value(case=fit, metric="tp_decode_allreduce", unit="us",
              value=t["graphed", TP_DECODE_BYTES])


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
