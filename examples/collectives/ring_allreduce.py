"""A ring all-reduce by hand over send/recv, against NCCL and the cost model.

Spawns one process per GPU (NCCL) or two CPU processes (gloo), checks the hand
ring against ``dist.all_reduce`` on fresh random inputs, measures the link
with the ring's own step (every rank sends to its right neighbour while it
receives from its left one), then sweeps message sizes: NCCL's all-reduce,
the hand ring, and the model fed with the measured link. Any number of GPUs.

One machine: ``python -m examples.collectives.ring_allreduce`` starts the ranks.
One node or many under torchrun, each process one rank (``_launch``)::

    torchrun --nproc-per-node 8 -m examples.collectives.ring_allreduce --json r.json
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \\
        --rdzv-endpoint node0:29500 -m examples.collectives.ring_allreduce --json r.json
"""

from __future__ import annotations

import gc
import json
import os
import socket
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from examples.collectives._launch import (
    as_one_rank,
    from_environment,
    gather_to_rank0,
    read_results,
    world_size,
)
from examples.collectives._launch import note as note_launch
from examples.collectives.ring_model import (
    bus_bandwidth,
    ring_allreduce_seconds,
)
from examples.lab.timing import measure_rounds

#: NVLink multicast (NVLS) stays off in every process the book starts: the
#: ring is what the model describes, and multicast can wedge shared GPUs.
SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


#: On a GPU machine this topic needs two GPUs (a collective needs at least two); the CPU path runs two gloo ranks.
MIN_GPUS = 2

# --8<-- [start:ring]
def ring_all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum ``x`` over all ranks, in place: reduce-scatter, then all-gather."""
    rank, p = dist.get_rank(), dist.get_world_size()
    chunks = x.view(-1).tensor_split(p)  # p views into x, nearly equal
    right, left = (rank + 1) % p, (rank - 1) % p
    inbox = torch.empty_like(chunks[0])
    # Reduce-scatter: in step s, pass on chunk (rank - s), which already
    # holds s + 1 ranks' sum, and add the left neighbour's into our copy.
    for s in range(p - 1):
        out, into = chunks[(rank - s) % p], chunks[(rank - s - 1) % p]
        _exchange(out, right, inbox[: into.numel()], left)
        into.add_(inbox[: into.numel()])
    # Now chunk (rank + 1) holds the sum of all p ranks. All-gather: pass
    # each finished chunk on around the ring, p - 1 steps, no arithmetic.
    for s in range(p - 1):
        out, into = chunks[(rank - s + 1) % p], chunks[(rank - s) % p]
        _exchange(out, right, into, left)
    return x


def _exchange(send, to, recv, frm) -> None:
    """Send to one neighbour while receiving from the other (one ring step)."""
    ops = [dist.P2POp(dist.isend, send, to), dist.P2POp(dist.irecv, recv, frm)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()


# --8<-- [end:ring]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --8<-- [start:spawn]
def spawn(worker, world: int, backend: str, config: dict) -> dict:
    """Run ``worker(config, device)`` on ``world`` ranks; return what rank 0 wrote.

    Under torchrun this process is one of the ranks (``_launch``); otherwise it
    starts them here, one process per rank on this machine.
    """
    os.environ.update(SAFE_ENV)  # inherited by every rank
    launch = from_environment()
    if launch is not None:
        return as_one_rank(launch, _rank_main, worker, world, backend, config)
    with tempfile.TemporaryDirectory() as tmp:
        config = {**config, "backend": backend, "out": tmp,
                  "init": f"tcp://127.0.0.1:{_free_port()}"}
        mp.spawn(_spawned_rank_main, args=(world, worker, config), nprocs=world)
        return read_results(tmp)


def _spawned_rank_main(rank: int, world: int, worker, config: dict) -> None:
    """A rank this process started: it lives for one group of ranks, so nothing it profiles
    can slow another topic's launches, and the profiler studies of ddp_overlap and ddp_probe
    (a process's first trace, when CUPTI starts) see CUPTI as torch leaves it, attached."""
    os.environ["TEARDOWN_CUPTI"] = "0"  # examples.lab.kernels set 1 as this rank imported it
    _rank_main(rank, world, worker, config)


def _rank_main(rank: int, world: int, worker, config: dict) -> None:
    device = torch.device("cpu")
    if config["backend"] == "nccl":
        device = torch.device("cuda", config.get("local_rank", rank))
        torch.cuda.set_device(device)
    init = config["init"]  # a tcp:// address, or the launcher's store
    dist.init_process_group(
        config["backend"], rank=rank, world_size=world,
        **({"init_method": init} if isinstance(init, str) else {"store": init}),
        **({"device_id": device} if device.type == "cuda" else {}),
    )
    try:
        result = worker(config, device)
        if rank == 0:
            Path(config["out"], "rank0.json").write_text(json.dumps(result))
        del result
        _quiesce(device)
        if config.get("gather"):  # torchrun: the ranks share no folder
            gather_to_rank0(config["out"])
        dist.barrier()  # no rank leaves while a peer still communicates
    finally:
        dist.destroy_process_group()
        gc.collect()  # the group's last owners go while Python is whole


def _quiesce(device: torch.device) -> None:
    """Free what the worker left in reference cycles; let the device finish.

    A DDP model sits in a reference cycle: ``del model`` leaves it, with its
    reducer and the process group it holds, to the garbage collector, which
    may first run at interpreter exit. Gloo's worker threads are then joined
    during finalization, and a tensor they still hold takes the GIL from a
    dying interpreter: SIGABRT, "terminate called without an active
    exception" (pytorch/pytorch#179291). Freed here, they go while every
    rank is still alive and connected.
    """
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --8<-- [end:spawn]


# --8<-- [start:lined_up]
def lined_up(reset=None):
    """``before`` for :func:`examples.lab.timing.measure_rounds` in a rank:
    restore the inputs (``reset(variant)``), let the device finish, then
    leave a barrier with every other rank: all start each sample together."""

    def before(name: str) -> None:
        if reset is not None:
            reset(name)
        if torch.cuda.is_available() and dist.get_backend() == "nccl":
            torch.cuda.synchronize()
        dist.barrier()

    return before


# --8<-- [end:lined_up]


def slowest_rank(per_rank: list[list[float]]) -> list[float]:
    """Sample i of a timing every rank took in the same rounds: the slowest
    rank's (a collective, or a step, ends for the job when its last rank ends)."""
    return [max(s) for s in zip(*per_rank, strict=True)]


CHECK_SIZES = (1, 17, 1_000_003)  # fewer elements than ranks; uneven chunks


def check_ring(config: dict, device: torch.device) -> None:
    """Hand ring and dist.all_reduce on fresh random data, saved per rank.

    The data are small whole numbers stored as floats: their sums are exact in float32 in any
    order, so the two reductions must agree bit for bit whatever order each adds the ranks in
    (with real-valued data, three or more ranks summing to near zero can differ by many ulps).
    """
    rank = dist.get_rank()
    g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4)) + rank)
    for n in CHECK_SIZES:
        x = torch.randint(-1024, 1025, (n,), generator=g).float().to(device)
        ref = x.clone()
        dist.all_reduce(ref)
        mine = ring_all_reduce(x.clone())
        torch.save({"mine": mine.cpu(), "ref": ref.cpu()},
                   Path(config["out"], f"check-{n}-{rank}.pt"))


# --8<-- [start:sweep]
def sweep(config: dict, device: torch.device) -> dict:
    rank, p = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % p, (rank - 1) % p
    reps, result = config["reps"], {}
    check_ring(config, device)

    # The link, measured with one ring step: send M right, receive M from left.
    link = {}
    for nbytes in (4, config["link_bytes"]):
        a = torch.randn(nbytes // 4, device=device)
        b = torch.empty_like(a)
        link[nbytes] = measure_rounds(
            {"step": lambda: _exchange(a, right, b, left)}, device=device,
            warmup=3, repetitions=reps, inner=config["inner"](nbytes),
            before=lined_up())["step"]
    result["link"] = link

    # NCCL and the hand ring in alternating rounds (A B, B A, ...): sample i
    # of both comes from round i, so their ratio is paired, drift and all.
    result["sweep"] = {}
    for nbytes in config["sizes"]:
        x0 = torch.randn(nbytes // 4, device=device)
        x = x0.clone()
        runs = {"dist.all_reduce": lambda: dist.all_reduce(x),
                "hand ring": lambda: ring_all_reduce(x)}
        samples = measure_rounds(  # the same values every sample: no inf
            runs, device=device, warmup=3, repetitions=reps,
            inner=config["inner"](nbytes),
            before=lined_up(lambda _: x.copy_(x0)))
        for impl, times in samples.items():
            result["sweep"][f"{impl}|{nbytes}"] = times
        del x0, x
    # --8<-- [end:sweep]
    result["collectives"] = _other_collectives(config, device)
    result["gather_scatter"] = _gather_scatter_sweep(config, device)
    return result


def _gather_scatter_sweep(config, device) -> dict:
    """All-gather and reduce-scatter, the two halves of a ring all-reduce (and
    FSDP's two collectives), over the sweep's sizes up to the collectives' one
    size S: a total of S bytes gathered from, or scattered to, p ranks. The two
    in alternating rounds at each size."""
    if device.type != "cuda":
        return {}  # gloo has no reduce-scatter
    p, result = dist.get_world_size(), {}
    for nbytes in [n for n in config["sizes"] if n <= config["collective_bytes"]]:
        full = torch.randn(nbytes // 4, device=device)
        part = torch.randn(nbytes // 4 // p, device=device)
        out = torch.empty_like(full)
        samples = measure_rounds(
            {"all_gather": lambda: dist.all_gather_into_tensor(out, part),
             "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, full)},
            device=device, warmup=3, repetitions=config["reps"],
            inner=config["inner"](nbytes), before=lined_up())
        for name, times in samples.items():
            result[f"{name}|{nbytes}"] = times
        del full, part, out
    return result


def _other_collectives(config, device) -> dict:
    """Each collective at one total size S, timed for nccl-tests' busbw."""
    if device.type != "cuda":
        return {}  # gloo has no reduce-scatter; NCCL runs them all
    p, size = dist.get_world_size(), config["collective_bytes"]
    full = torch.randn(size // 4, device=device)
    part = torch.randn(size // 4 // p, device=device)
    out = torch.empty_like(full)
    calls = {
        "all_reduce": lambda: dist.all_reduce(full),
        "all_gather": lambda: dist.all_gather_into_tensor(out, part),
        "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, full),
        "broadcast": lambda: dist.broadcast(full, src=0),
        "reduce": lambda: dist.reduce(full, dst=0),
        "all_to_all": lambda: dist.all_to_all_single(out, full),
    }
    # Compared with each other on the page (the halves of an all-reduce against it): timed
    # in the same alternating rounds, so that clock and heat drift fall on all alike.
    return measure_rounds(calls, device=device, warmup=3, repetitions=config["reps"],
                          before=lined_up(lambda _: full.normal_()))


def _inner(nbytes: int) -> int:
    """Calls per sample: enough that a sample lasts well over a launch."""
    return max(1, min(50, (64 << 20) // nbytes))


def _inner_cpu_quick(nbytes: int) -> int:
    """A quick run on CPU ranks (CI, where they share two cores): 5 calls a sample at most."""
    return min(5, _inner(nbytes))


def _sizes(quick: bool, cuda: bool) -> list[int]:
    top = (4 << 30) if cuda else (64 << 20)
    if quick:
        top = 1 << 20
    sizes, n = [], 1 << 10
    while n <= top:
        sizes.append(n)
        n *= 4
    return sizes


def measure(lab) -> None:
    cuda = lab.cuda
    world = world_size(torch.cuda.device_count() if cuda else 2)
    if cuda and world < MIN_GPUS:  # the runner skips this topic before it gets here
        raise RuntimeError(f"needs {MIN_GPUS} GPUs, this machine has {world}")
    config = {
        "sizes": _sizes(lab.quick, cuda),
        "link_bytes": (1 << 30) if cuda and not lab.quick else (16 << 20),
        "collective_bytes": (1 << 30) if not lab.quick else (16 << 20),
        "reps": 5 if lab.quick else 30,
        "inner": _inner if cuda or not lab.quick else _inner_cpu_quick,
    }
    if lab.quick:
        config["link_bytes"] = 4 << 20
    backend = "nccl" if cuda else "gloo"
    r = spawn(sweep, world, backend, config)
    method = f"{'cuda_event' if cuda else 'host clock'}, rank 0"
    p = world
    for n in CHECK_SIZES:
        for rank in range(p):
            saved = r["saved"][f"check-{n}-{rank}.pt"]
            lab.check(f"hand ring vs dist.all_reduce, {n} floats, rank {rank}",
                      saved["mine"], saved["ref"], tolerance=0.0)
    alpha, bw = _keep_link(lab, r["link"], p, method)
    for key, samples in r["sweep"].items():
        impl, nbytes = key.split("|")
        nbytes = int(nbytes)
        case = {"part": "sweep", "bytes": nbytes, "gpus": p, "impl": impl}
        t = lab.keep_samples([s * 1e6 for s in samples], case=case,
                             metric="time", unit="us",
                             method=f"{method}, interleaved rounds")
        algbw = nbytes / (t.median / 1e6)
        lab.value(case=case, metric="algbw", value=algbw / 1e9, unit="GB/s")
        lab.value(case=case, metric="busbw", unit="GB/s",
                  value=bus_bandwidth("all_reduce", gpus=p, algbw=algbw) / 1e9)
        if impl == "hand ring":  # NCCL's time over the ring's, round by round
            nccl = r["sweep"][f"dist.all_reduce|{nbytes}"]
            paired = [a / b for a, b in zip(nccl, samples, strict=True)]
            lab.keep_samples(paired, case=case, metric="speedup", unit="x",
                             method="paired ratio dist.all_reduce / hand "
                                    f"ring, {method}, interleaved rounds")
        model = ring_allreduce_seconds(gpus=p, nbytes=nbytes, bandwidth=bw,
                                       latency=alpha)
        lab.value(case=case, metric="model_ratio", unit="x",
                  value=(t.median / 1e6) / model)
        mcase = {"part": "sweep", "bytes": nbytes, "gpus": p, "impl": "model"}
        lab.value(case=mcase, metric="time", unit="us", value=model * 1e6)
    for name, samples in r["collectives"].items():
        case = {"part": "collectives", "collective": name, "gpus": p,
                "bytes": config["collective_bytes"]}
        t = lab.keep_samples([s * 1e6 for s in samples], case=case,
                             metric="time", unit="us", method=method)
        algbw = config["collective_bytes"] / (t.median / 1e6)
        lab.value(case=case, metric="algbw", value=algbw / 1e9, unit="GB/s")
        lab.value(case=case, metric="busbw", unit="GB/s",
                  value=bus_bandwidth(name, gpus=p, algbw=algbw) / 1e9)
    for key, samples in r["gather_scatter"].items():
        name, nbytes = key.split("|")
        nbytes = int(nbytes)
        case = {"part": "collective sweep", "collective": name, "gpus": p, "bytes": nbytes}
        t = lab.keep_samples([s * 1e6 for s in samples], case=case, metric="time", unit="us",
                             method=f"{method}, all-gather and reduce-scatter in interleaved rounds")
        algbw = nbytes / (t.median / 1e6)
        lab.value(case=case, metric="algbw", value=algbw / 1e9, unit="GB/s")
        lab.value(case=case, metric="busbw", unit="GB/s",
                  value=bus_bandwidth(name, gpus=p, algbw=algbw) / 1e9)
    lab.note("ranks", f"{p} ({backend}), one process per rank")
    note_launch(lab)
    if cuda:
        _keep_choices(lab, p, config["collective_bytes"], r["collectives"])


def _keep_choices(lab, p: int, nbytes: int, timed) -> None:
    """NCCL's algorithm, protocol and channels for each timed collective, and
    the transports its channels connected over (the interconnect it chose).

    Asked in a separate group of processes with NCCL's TUNING and INIT logs on
    (the timed ones must not write a line per call), at the same sizes.
    """
    from examples.collectives._nccl_log import (
        NCCL_NAMES, choice_for, describe_interconnect, nccl_choices, parse_choices,
        parse_interconnect)

    names = [n for n in timed if n in NCCL_NAMES]  # all_to_all: send/recv
    log = nccl_choices(p, [(n, nbytes) for n in names])
    lab.note("interconnect NCCL chose (INIT log)", describe_interconnect(parse_interconnect(log)))
    choices = parse_choices(log)
    seen = {}
    for name in names:
        got = choice_for(choices, name)
        if got is None:
            seen[name] = "no TUNING line"
            continue
        logged, c = got
        seen[name] = (f"{c['algo']}/{c['proto']}, {c['channels']} "
                      f"channel(s), logged as {logged} B")
        if c["channels"] is not None:
            lab.value(case={"part": "collectives", "collective": name,
                            "gpus": p, "bytes": nbytes},
                      metric="channels", unit="", value=c["channels"])
    lab.note("NCCL's choice per collective (TUNING log)", seen)


def _keep_link(lab, link, p, method) -> tuple[float, float]:
    """Keep the two link steps; return the model's alpha (s) and BW (B/s)."""
    kept = {}
    for nbytes, samples in link.items():
        nbytes = int(nbytes)
        case = {"part": "link", "bytes": nbytes, "gpus": p}
        t = lab.keep_samples([s * 1e6 for s in samples], case=case,
                             metric="time", unit="us", method=method)
        kept[nbytes] = t.median / 1e6
        lab.value(case=case, metric="bandwidth", unit="GB/s",
                  value=nbytes / kept[nbytes] / 1e9)
    small, large = min(kept), max(kept)
    return kept[small], large / kept[large]


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
