"""DDP's work on the host: whether a DDP step waits for its CPU, on one GPU.

``ddp_overlap`` found, on two H200s, that its default-bucket step was longer the slower the
run's host, and read that as the GPU waiting for DDP's host work between buckets. This
topic times that host work directly, on one GPU, so that no other rank's lateness can hide
in it: ``ddp_overlap``'s model and step under DistributedDataParallel with a process group
of one rank (NCCL on a GPU, gloo on the CPU), which still builds the buckets, runs the
communication hook and launches each bucket's all-reduce.

Four variants in interleaved rounds: DDP's default buckets and one single bucket, both
through ``ddp_overlap``'s Python hook (``recording_hook``, which calls DDP's
``allreduce_hook``), the default buckets through DDP's own C++ all-reduce (no hook), and no
communication (``no_sync``). For each sample, two clocks: the host's, from the step's start
until ``backward()`` returns (the kernels are enqueued, not finished), and the GPU's, CUDA
events around the same call. Where the host's time reaches the GPU's, the GPU spent the
step waiting for kernels to arrive: the step is host-bound. Every sample starts from an
idle GPU, so the host never runs ahead; a second timing runs ten steps back to back with no
synchronization between them, as a training loop does, where a host that is quicker than
the GPU hides its work and a slower one cannot. The Python hook's own host time per bucket
is kept too. Costs about 17 s on an H200 (one spawned process, four models of 384 MiB of
fp32 weights, 30 rounds, then 10 of ten steps).
"""

from __future__ import annotations

import contextlib
import sys
import time

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from examples.collectives.ddp_overlap import make_model
from examples.collectives.ring_allreduce import spawn
from examples.lab.timing import measure_rounds

MIN_GPUS = 1  # one rank: what is measured is the host's work, not the link

# --8<-- [start:variants]
VARIANTS = {  # name: (bucket_cap_mb, communicate, through the Python hook)
    "25 MB buckets, Python hook": (25, True, True),
    "one bucket, Python hook": (100_000, True, True),
    "25 MB buckets, DDP's own all-reduce": (25, True, False),
    "no communication": (25, False, False),
}


def timed_hook(seconds: list[float]):
    """ddp_overlap's hook (DDP's all-reduce from Python), with its own host time noted."""

    def hook(state, bucket):
        start = time.perf_counter()
        future = default_hooks.allreduce_hook(state, bucket)
        seconds.append(time.perf_counter() - start)
        return future

    return hook


def host_timed_step(model: DDP, x: torch.Tensor, communicate: bool,
                    host: list[float]) -> None:
    """One training step; ``host`` gets the seconds until backward() returned."""
    start = time.perf_counter()
    sync = contextlib.nullcontext() if communicate else model.no_sync()
    with sync, torch.autocast(x.device.type, dtype=torch.bfloat16):
        model(x).float().square().mean().backward()
    host.append(time.perf_counter() - start)
    model.zero_grad(set_to_none=False)
# --8<-- [end:variants]


def worker(config: dict, device: torch.device) -> dict:
    torch.manual_seed(0)
    x = torch.randn(config["tokens"], config["width"], device=device)
    host = {name: [] for name in VARIANTS}
    hook_seconds = {name: [] for name in VARIANTS}
    steps = {}
    for name, (cap, communicate, python_hook) in VARIANTS.items():
        model = DDP(make_model(config["width"], config["layers"], device), bucket_cap_mb=cap)
        if python_hook:
            model.register_comm_hook(None, timed_hook(hook_seconds[name]))
        for _ in range(2):  # DDP rebuilds its buckets after the first step
            host_timed_step(model, x, communicate, [])
        hook_seconds[name].clear()
        steps[name] = (lambda m=model, c=communicate, h=host[name]: host_timed_step(m, x, c, h))
    warmup, reps = 3, config["reps"]
    device_seconds = measure_rounds(steps, device=device, warmup=warmup, repetitions=reps)
    calls = warmup + reps  # steps each variant took in the rounds, warm-up first
    buckets = {name: len(hook_seconds[name]) // calls for name in VARIANTS}
    hook_seconds = {name: seconds[warmup * buckets[name]:calls * buckets[name]]
                    for name, seconds in hook_seconds.items()}
    host = {name: seconds[warmup:calls] for name, seconds in host.items()}
    # Ten steps back to back, nothing synchronized between them: the host may run ahead.
    free = measure_rounds(steps, device=device, warmup=1, repetitions=config["free_reps"],
                          inner=config["free_steps"])
    return {"device": device_seconds, "free": free,
            "host": host, "hook": hook_seconds,
            "buckets": buckets}


def measure(lab) -> None:
    cuda = lab.cuda
    full = cuda and not lab.quick
    config = {"width": 2048 if full else 256, "layers": 24 if full else 6,
              "tokens": 8192 if full else 64, "reps": 30 if full else 5,
              "free_steps": 10 if full else 2, "free_reps": 10 if full else 2}
    r = spawn(worker, 1, "nccl" if cuda else "gloo", config)
    clock = "cuda_event around the step" if cuda else "host clock, synchronized"
    for name, samples in r["device"].items():
        case = {"variant": name}
        host = r["host"][name]
        if len(host) != len(samples):
            raise RuntimeError(f"{name}: {len(host)} host samples against {len(samples)} timed steps")
        lab.keep_samples([s * 1e3 for s in samples], case=case, metric="step", unit="ms",
                         method=f"{clock}, one rank, interleaved rounds")
        lab.keep_samples([h * 1e3 for h in host], case=case, metric="host", unit="ms",
                         method="host perf_counter from the step's start to backward() returning, "
                                "same samples")
        if cuda:  # on the CPU both clocks time the same work: their ratio says nothing
            lab.keep_samples([h / s for h, s in zip(host, samples, strict=True)], case=case,
                             metric="host_share", unit="x",
                             method="each sample's host time over its GPU time (paired)")
        lab.keep_samples([s * 1e3 for s in r["free"][name]], case=case, metric="free_step", unit="ms",
                         method=f"{clock} around {config['free_steps']} steps back to back, "
                                "not synchronized between them, interleaved rounds")
        if r["hook"][name]:
            lab.keep_samples([h * 1e6 for h in r["hook"][name]], case=case, metric="hook",
                             unit="us", method="host perf_counter around allreduce_hook, every bucket")
            lab.value(case=case, metric="buckets", value=r["buckets"][name], unit="")
    lab.note("model", f"{config['layers']} x Linear({config['width']}, {config['width']}), "
             f"{config['tokens']} tokens, bf16 autocast, one rank ({'NCCL' if cuda else 'gloo'})")


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
