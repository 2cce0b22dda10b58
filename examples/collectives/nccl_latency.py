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
import tempfile
import zlib

import torch
import torch.distributed as dist

from examples.collectives._launch import note as note_launch
from examples.collectives._launch import world_size
from examples.collectives.ring_allreduce import lined_up, slowest_rank, spawn
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
    """The most the ring model's per-step latency can be, from one p.

    At 1 KiB the model's bandwidth term is nanoseconds, so all of a graphed
    all-reduce's time is latency: charged entirely to the 2(p-1) steps it
    is an upper bound on alpha, since NCCL also pays a fixed cost per call
    (starting the kernel, setting up its channels) that no step count
    multiplies.
    """
    return t_small / (2 * (gpus - 1))


def fit_latency(points: dict[int, float]) -> tuple[float, float]:
    """(beta, alpha) of t = beta + 2(p-1) alpha, least squares over (p, t).

    beta is the fixed cost of one call, alpha the cost of one ring step.
    Two values of p determine both exactly (two equations, two unknowns:
    nothing is left to test the straight line); each further p tests it.
    """
    if len(points) < 2:
        raise ValueError(f"a fit of two unknowns needs two values of p, "
                         f"got {sorted(points)}")
    xs = [2.0 * (p - 1) for p in points]
    ts = list(points.values())
    mx, mt = sum(xs) / len(xs), sum(ts) / len(ts)
    alpha = (sum((x - mx) * (t - mt) for x, t in zip(xs, ts))
             / sum((x - mx) ** 2 for x in xs))
    return mt - alpha * mx, alpha


# --8<-- [end:fit]


def fit_worlds(gpus: int) -> list[int]:
    """The group sizes whose small all-reduce the fit takes: 2, 4, 8, ...
    below the machine's count, and the count itself (ascending)."""
    worlds, q = [], 2
    while q < gpus:
        worlds.append(q)
        q *= 2
    return worlds + [gpus]


def nccl_modelled_latency(lines: list[str]) -> dict[str, float]:
    """NCCL's own latency (us) for an all-reduce, per algorithm/protocol,
    from the cost table rank 0 logged (0 means NCCL disabled it here)."""
    from examples.collectives._nccl_log import parse_cost_table

    row = parse_cost_table(lines).get("AllReduce", {})
    return {f"{algo}/{proto}": lat for (algo, proto), (lat, bw) in row.items()
            if bw > 0}


def measure(lab) -> None:
    cuda = lab.cuda
    p = world_size(torch.cuda.device_count() if cuda else 2)
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
    keep_checks(lab, saved, config, p, config["sizes"], checked)

    clock = "cuda_event" if cuda else "host clock"
    how = f"{clock}, max over {p} ranks per sample, interleaved rounds"
    t, cases, worst = {}, {}, {}
    for way in ways:
        inner = 1 if way == "one call" else config["calls"]
        for nbytes in config["sizes"]:
            key = f"{way}|{nbytes}"
            per_rank = [saved[f"times-{k}.pt"][key] for k in range(p)]
            worst[way, nbytes] = [s * 1e6 for s in slowest_rank(per_rank)]
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
    note_launch(lab)
    if not cuda:
        lab.note("graphed", "skipped: CUDA graphs need a GPU; gloo on the "
                 "CPU times the two eager ways only")
        return
    # spawn set it for every rank: NVLink SHARP off, so ring or tree ran
    lab.note("NCCL_NVLS_ENABLE", os.environ.get("NCCL_NVLS_ENABLE"))
    fit = {"part": "fit", "gpus": p}
    smallest = config["sizes"][0]
    lab.value(case=fit, metric="alpha_bound", unit="us",
              value=ring_alpha(t["graphed", smallest], p))
    lab.value(case=fit, metric="tp_decode_allreduce", unit="us",
              value=t["graphed", TP_DECODE_BYTES])
    keep_fit(lab, config, p, worst["graphed", smallest])


def keep_fit(lab, config: dict, p: int, graphed_p: list[float]) -> None:
    """The graphed 1 KiB all-reduce at every group size 2, 4, ... p, what
    NCCL chose and modelled for it, and t = beta + 2(q-1) alpha over them.

    A smaller group runs in its own processes on GPUs 0..q-1, with NCCL's
    TUNING log on: a graph's replay does not pass through NCCL's host code,
    so the log costs the graphed figure nothing. The full group's log comes
    from a separate pair of processes, because its host-timed ways would pay
    for a log line on every call.
    """
    from examples.collectives._nccl_log import (
        choice_for, nccl_choices, parse_choices, read_logs, tuning_log)

    smallest = config["sizes"][0]
    points = {}
    for q in fit_worlds(p):
        case = {"part": "fit", "gpus": q}
        if q == p:
            samples = graphed_p
            log = nccl_choices(q, [("all_reduce", smallest)])
        else:
            with tempfile.TemporaryDirectory() as logs:
                with tuning_log(logs):
                    r = spawn(latency, q, "nccl",
                              {**config, "sizes": [smallest]})
                log = read_logs(logs)
            keep_checks(lab, r["saved"], config, q, [smallest],
                        ("eager", "graphed"))
            per_rank = [r["saved"][f"times-{k}.pt"][f"graphed|{smallest}"]
                        for k in range(q)]
            samples = [s * 1e6 for s in slowest_rank(per_rank)]
        points[q] = lab.keep_samples(
            samples, case=case, metric="graphed_small", unit="us",
            method=f"cuda_event, max over {q} ranks per sample, "
                   f"interleaved rounds, {smallest} B graphed",
            warmup=config["warmup"], inner=config["calls"]).median
        for name, lat in nccl_modelled_latency(log).items():
            lab.value(case={"part": "nccl_model", "gpus": q, "algo": name},
                      metric="latency", unit="us", value=lat)
        chosen = choice_for(parse_choices(log), "all_reduce")
        lab.note(f"NCCL's choice, {smallest} B all-reduce, {q} GPUs",
                 "no TUNING line" if chosen is None else
                 f"{chosen[1]['algo']}/{chosen[1]['proto']}, "
                 f"{chosen[1]['channels']} channel(s)")
    if len(points) < 2:
        lab.note("fit", f"one group size ({p} GPUs): beta and alpha need "
                 "two; alpha_bound charges the whole call to the steps")
        return
    beta, alpha = fit_latency(points)
    fit = {"part": "fit", "gpus": p}
    lab.value(case=fit, metric="fit_beta", unit="us", value=beta)
    lab.value(case=fit, metric="fit_alpha", unit="us", value=alpha)
    lab.note("fit", f"t = beta + 2(p-1) alpha, least squares over p = "
             f"{sorted(points)} (graphed {smallest} B medians)")


def keep_checks(lab, saved: dict, config: dict, p: int, sizes: list[int],
                checked: tuple[str, ...]) -> None:
    # bf16 keeps 8 significant bits: each of the p - 1 additions of a ring
    # rounds by at most 2^-8 of the partial sum.
    tolerance = (p - 1) * 2.0**-8
    for nbytes in sizes:
        for i, which in enumerate((0, config["calls"] - 1)):
            want = expected_sum(config["seed"], p, nbytes, which)
            for way in checked:
                got = torch.cat([saved[f"check-{nbytes}-{k}.pt"][way][i]
                                 for k in range(p)])
                lab.check(f"{way}, {nbytes} B, call {which + 1}, {p} ranks "
                          "vs the sum computed locally", got,
                          want.repeat(p), tolerance=tolerance)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
