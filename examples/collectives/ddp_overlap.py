"""DDP's gradient buckets and how their all-reduces overlap the backward pass.

Trains a stack of linear layers with DistributedDataParallel on every GPU (or
two CPU processes over gloo). A communication hook records the buckets DDP
builds; three variants are timed in alternating rounds (default buckets, one bucket, no
communication at all); on GPUs the profiler's trace of one step gives when
each bucket's all-reduce ran and how much of it hid behind backward kernels,
and ``NCCL_DEBUG=INFO`` shows what NCCL set up.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from examples.collectives.ring_allreduce import lined_up, spawn
from examples.lab.timing import measure_rounds


#: On a GPU machine this topic needs two GPUs (DDP needs at least two to communicate); the CPU path runs two gloo ranks.
MIN_GPUS = 2

# --8<-- [start:model]
def make_model(width: int, layers: int, device) -> nn.Module:
    blocks = [m for _ in range(layers) for m in (nn.Linear(width, width),
                                                 nn.ReLU())]
    return nn.Sequential(*blocks).to(device)


def recording_hook(sizes: list[int]):
    """A DDP communication hook: note each bucket's bytes, then all-reduce."""

    def hook(state, bucket):  # bucket: a dist.GradBucket
        buffer = bucket.buffer()
        sizes.append(buffer.numel() * buffer.element_size())
        return default_hooks.allreduce_hook(state, bucket)

    return hook


# --8<-- [end:model]


# --8<-- [start:variants]
VARIANTS = {  # name: (bucket_cap_mb, communicate)
    "25 MB buckets (default)": (25, True),
    "one bucket": (100_000, True),
    "no communication": (25, False),
}


def train_step(model: DDP, x: torch.Tensor, communicate: bool) -> None:
    sync = contextlib.nullcontext() if communicate else model.no_sync()
    with sync, torch.autocast(x.device.type, dtype=torch.bfloat16):
        model(x).float().square().mean().backward()
    model.zero_grad(set_to_none=False)


# --8<-- [end:variants]


def worker(config: dict, device: torch.device) -> dict:
    torch.manual_seed(0)  # every rank starts from the same weights anyway
    result = {"buckets": {}}
    x = torch.randn(config["tokens"], config["width"], device=device)
    x += dist.get_rank()  # each rank its own batch
    models, steps = {}, {}
    for name, (cap, communicate) in VARIANTS.items():
        sizes: list[int] = []
        model = DDP(make_model(config["width"], config["layers"], device),
                    bucket_cap_mb=cap)
        model.register_comm_hook(None, recording_hook(sizes))
        for _ in range(3):  # DDP rebuilds its buckets after the first step
            sizes.clear()
            train_step(model, x, communicate)
        result["buckets"][name] = list(sizes)
        models[name] = model
        steps[name] = (lambda m=model, c=communicate: train_step(m, x, c))
    # The variants in alternating rounds (A B C, C B A, ...), both ranks
    # leaving a barrier before every step: step i of each variant comes from
    # round i, so a drift of clocks or heat falls on all three alike.
    result["steps"] = measure_rounds(steps, device=device, warmup=2,
                                     repetitions=config["reps"],
                                     before=lined_up())
    if device.type == "cuda":
        result["trace"] = trace_one_step(models[next(iter(VARIANTS))], x)
    return result


# --8<-- [start:trace]
def trace_one_step(model: DDP, x: torch.Tensor) -> list[dict]:
    """The GPU kernels of one training step, from the profiler's trace."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        train_step(model, x, True)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        prof.export_chrome_trace(f"{tmp}/trace.json")
        events = json.loads(Path(f"{tmp}/trace.json").read_text())
    kernels = [e for e in events["traceEvents"] if e.get("cat") == "kernel"]
    return [{"name": k["name"], "start": k["ts"], "dur": k["dur"],
             "stream": k.get("args", {}).get("stream")} for k in kernels]


def overlap(kernels: list[dict]) -> tuple[list[dict], float]:
    """Each all-reduce's time covered by compute kernels; the overall share."""
    comm = [k for k in kernels if "nccl" in k["name"].lower()]
    busy = _union([(k["start"], k["start"] + k["dur"]) for k in kernels
                   if k not in comm])
    rows = []
    for k in sorted(comm, key=lambda k: k["start"]):
        end = k["start"] + k["dur"]
        hidden = sum(max(0.0, min(end, b) - max(k["start"], a))
                     for a, b in busy)
        rows.append({"start": k["start"], "dur": k["dur"], "hidden": hidden})
    total = sum(r["dur"] for r in rows)
    return rows, (sum(r["hidden"] for r in rows) / total if total else 0.0)


# --8<-- [end:trace]


def _union(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


#: The lines of NCCL_DEBUG=INFO worth reading: version, transport, topology.
DEBUG_KEYS = re.compile(
    r"NCCL version|cudaDriverVersion|Bootstrap|NET/|comm 0x|Channel 00|"
    r"via P2P|via SHM|NVLS|Connected all|Init COMPLETE|CC Off|P2P Chunksize"
)


def nccl_debug_lines(folder: Path, limit: int = 24) -> list[str]:
    files = sorted(folder.glob("nccl.*.log"))
    if not files:
        return []
    lines = files[0].read_text(errors="replace").splitlines()
    kept = []
    for line in lines:
        if DEBUG_KEYS.search(line):
            text = line.split(" NCCL INFO ", 1)[-1].strip()
            if text not in kept:
                kept.append(text)
    return kept[:limit]


def measure(lab) -> None:
    cuda = lab.cuda
    world = torch.cuda.device_count() if cuda else 2
    if cuda and world < MIN_GPUS:  # the runner skips this topic before it gets here
        raise RuntimeError(f"needs {MIN_GPUS} GPUs, this machine has {world}")
    full = cuda and not lab.quick
    config = {"width": 2048 if full else 256, "layers": 24 if full else 6,
              "tokens": 8192 if full else 256, "reps": 30 if full else 5}
    with tempfile.TemporaryDirectory() as logs:
        saved = {k: os.environ.get(k) for k in ("NCCL_DEBUG", "NCCL_DEBUG_FILE")}
        if cuda:
            os.environ["NCCL_DEBUG"] = "INFO"
            os.environ["NCCL_DEBUG_FILE"] = f"{logs}/nccl.%h.%p.log"
        try:
            r = spawn(worker, world, "nccl" if cuda else "gloo", config)
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.update({k: v})
        debug = nccl_debug_lines(Path(logs)) if cuda else []
    method = (f"{'cuda_event' if cuda else 'host clock'}, rank 0, "
              "interleaved rounds")
    default = next(iter(VARIANTS))
    for name, samples in r["steps"].items():
        case = {"variant": name, "gpus": world}
        lab.keep_samples([s * 1e3 for s in samples], case=case,
                         metric="step", unit="ms", method=method)
        sizes = r["buckets"][name]
        if name != "no communication":
            lab.value(case=case, metric="buckets", value=len(sizes), unit="")
            lab.value(case=case, metric="largest_bucket", unit="MiB",
                      value=max(sizes) / 2**20)
        if name == default:
            lab.value(case=case, metric="vs_default", unit="x", value=1.0)
            continue
        # Step i of both variants ran in round i: a paired ratio per round.
        lab.keep_samples(
            [a / b for a, b in zip(samples, r["steps"][default], strict=True)],
            case=case, metric="vs_default", unit="x",
            method=f"paired ratio {name} / {default}, {method}")
    lab.note("bucket sizes, default (MiB, in all-reduce order)",
             [round(s / 2**20, 2) for s in r["buckets"][next(iter(VARIANTS))]])
    params = config["layers"] * (config["width"] ** 2 + config["width"])
    lab.note("model", f"{config['layers']} x Linear({config['width']}, "
             f"{config['width']}), {params * 4 / 2**20:.0f} MiB of fp32 "
             f"gradients, {config['tokens']} tokens per rank, bf16 autocast")
    if "trace" in r:
        rows, share = overlap(r["trace"])
        t0 = min(k["start"] for k in r["trace"])
        for i, row in enumerate(rows):
            case = {"all_reduce": i + 1, "gpus": world}
            lab.value(case=case, metric="start", unit="ms",
                      value=(row["start"] - t0) / 1e3)
            lab.value(case=case, metric="duration", unit="ms",
                      value=row["dur"] / 1e3)
            lab.value(case=case, metric="hidden", unit="%",
                      value=100 * row["hidden"] / row["dur"])
        compute_end = max(k["start"] + k["dur"] for k in r["trace"]
                          if "nccl" not in k["name"].lower())
        comm_end = max(r_["start"] + r_["dur"] for r_ in rows)
        lab.value(case={"trace": "one step", "gpus": world},
                  metric="overlap", unit="%", value=100 * share)
        lab.value(case={"trace": "one step", "gpus": world},
                  metric="exposed_comm", unit="ms",
                  value=max(0.0, comm_end - compute_end) / 1e3)
        lab.note("all-reduce kernel", sorted({k["name"] for k in r["trace"]
                                              if "nccl" in k["name"].lower()}))
    if debug:
        lab.note("NCCL_DEBUG=INFO, rank 0 (selected lines)", debug)
    lab.note("median step, no communication (ms)",
             round(statistics.median(r["steps"]["no communication"]) * 1e3, 3))


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
