"""DDP's gradient buckets and how their all-reduces overlap the backward pass.

Trains a stack of linear layers with DistributedDataParallel on every GPU (or
two CPU processes over gloo). A communication hook records the buckets DDP
builds; three variants are timed in alternating rounds (default buckets, one bucket, no
communication at all), every rank's samples kept and the slower rank's taken
per sample. On GPUs the profiler's trace of one step gives when each bucket's
all-reduce ran and how much of it hid behind backward kernels; traces of the
same step with and without communication give each GEMM's slowdown while an
all-reduce shares its GPU; the whole run is repeated with NCCL held to two
CTAs (``NCCL_MAX_CTAS=2``, its own processes) to test whether NCCL's SM share
is what overlap costs; and ``NCCL_DEBUG=INFO`` shows what NCCL set up.
"""

from __future__ import annotations

import contextlib
import json
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

from examples.collectives._nccl_log import environment, refusal
from examples.collectives._launch import note as note_launch
from examples.collectives._launch import world_size
from examples.collectives.ring_allreduce import lined_up, slowest_rank, spawn
from examples.lab.timing import measure_rounds, round_order


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
    steps = measure_rounds(steps, device=device, warmup=2,
                           repetitions=config["reps"], before=lined_up())
    # Every rank's samples: the parent keeps the slower rank's per sample.
    torch.save(steps, f"{config['out']}/steps-{dist.get_rank()}.pt")
    if device.type == "cuda":
        default, alone = next(iter(VARIANTS)), "no communication"
        result["trace"] = trace_one_step(models[default], x)
        # The same step with and without communication, traced in
        # alternating order, for each GEMM's duration in both (SM sharing).
        pairs = []
        for i in range(config["trace_rounds"]):
            traced = {}
            for name in round_order((default, alone), i):
                lined_up()(name)
                traced[name] = trace_one_step(models[name], x,
                                              VARIANTS[name][1])
            pairs.append(gemm_contention(traced[default], traced[alone]))
        torch.save(pairs, f"{config['out']}/gemm-{dist.get_rank()}.pt")
    return result


# --8<-- [start:trace]
def trace_one_step(model: DDP, x: torch.Tensor,
                   communicate: bool = True) -> list[dict]:
    """The GPU kernels of one training step, from the profiler's trace."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        train_step(model, x, communicate)
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


# --8<-- [start:contention]
#: The GEMM kernels of a bf16 linear layer: cuBLAS(Lt)'s nvjet/sm90 kernels.
GEMM = re.compile(r"gemm|nvjet|cutlass|xmma", re.IGNORECASE)


def gemm_contention(with_comm: list[dict], without: list[dict]) -> dict:
    """Each GEMM's duration with communication over the same GEMM's without.

    The two traces are of the same step of the same model, so their GEMMs
    come in the same order; the k-th of one is the k-th of the other. A
    ratio goes to "overlapped" when that GEMM ran while an NCCL kernel was
    running on the same GPU, else to "alone": if NCCL's kernels slow the
    GEMMs by taking SMs and memory bandwidth, the overlapped ratios sit
    above 1 and the alone ones at 1 (their control).
    """
    out = {"overlapped": [], "alone": []}
    a = [k for k in with_comm if GEMM.search(k["name"])
         and "nccl" not in k["name"].lower()]
    b = [k for k in without if GEMM.search(k["name"])
         and "nccl" not in k["name"].lower()]
    if len(a) != len(b) or not a:
        return out  # not the same kernel sequence: nothing to pair
    comm = _union([(k["start"], k["start"] + k["dur"]) for k in with_comm
                   if "nccl" in k["name"].lower()])
    for ka, kb in zip(a, b):
        end = ka["start"] + ka["dur"]
        hit = any(min(end, e) > max(ka["start"], s) for s, e in comm)
        if kb["dur"] > 0:
            out["overlapped" if hit else "alone"].append(ka["dur"] / kb["dur"])
    return out


# --8<-- [end:contention]


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


# --8<-- [start:settings]
#: NCCL's share of the GPU, set per group of processes: NCCL reads its
#: variables once, when the process group's communicator is created, so
#: each setting runs in its own freshly spawned processes.
#: NCCL_MAX_CTAS caps the CTAs (channels: one SM each) of a collective
#: (NCCL environment variables page); 2 leaves the GEMMs nearly every SM.
SETTINGS = {
    "default": {},
    "NCCL_MAX_CTAS=2": {"NCCL_MAX_CTAS": "2"},
}


# --8<-- [end:settings]


def steps_of(r: dict, world: int) -> dict[str, list[float]]:
    """Each variant's step samples of one spawned run: per sample, the
    slowest rank's (every rank saved its own)."""
    per_rank = [r["saved"][f"steps-{k}.pt"] for k in range(world)]
    return {name: slowest_rank([ranks[name] for ranks in per_rank])
            for name in per_rank[0]}


def measure(lab) -> None:
    cuda = lab.cuda
    world = world_size(torch.cuda.device_count() if cuda else 2)
    if cuda and world < MIN_GPUS:  # the runner skips this topic before it gets here
        raise RuntimeError(f"needs {MIN_GPUS} GPUs, this machine has {world}")
    full = cuda and not lab.quick
    config = {"width": 2048 if full else 256, "layers": 24 if full else 6,
              "tokens": 8192 if full else 256, "reps": 30 if full else 5,
              "trace_rounds": 4 if full else 2}
    runs, failed = {}, {}
    debug = []
    # NCCL's variables mean nothing to gloo: the CPU runs the default only.
    for setting, env in (SETTINGS if cuda else {"default": {}}).items():
        with tempfile.TemporaryDirectory() as logs:
            if cuda and setting == "default":
                env = {**env, "NCCL_DEBUG": "INFO",
                       "NCCL_DEBUG_FILE": f"{logs}/nccl.%h.%p.log"}
            try:
                with environment(env):
                    runs[setting] = spawn(worker, world,
                                          "nccl" if cuda else "gloo", config)
            except Exception as exc:  # a setting this NCCL refuses, say
                if setting == "default":
                    raise
                failed[setting] = refusal(exc)
            if cuda and setting == "default":
                debug = nccl_debug_lines(Path(logs))
    r = runs["default"]
    clock = "cuda_event" if cuda else "host clock"
    method = f"{clock}, max over {world} ranks per sample, interleaved rounds"
    default = next(iter(VARIANTS))
    steps = {setting: steps_of(run, world) for setting, run in runs.items()}
    for name, samples in steps["default"].items():
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
            [a / b for a, b in zip(samples, steps["default"][default], strict=True)],
            case=case, metric="vs_default", unit="x",
            method=f"paired ratio {name} / {default}, {method}")
    keep_contention(lab, runs, steps, world, method, failed)
    note_launch(lab)
    lab.note("bucket sizes, default (MiB, in all-reduce order)",
             [round(s / 2**20, 2) for s in r["buckets"][default]])
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
             round(statistics.median(steps["default"]["no communication"]) * 1e3, 3))


def keep_contention(lab, runs: dict, steps: dict[str, dict[str, list[float]]],
                    world: int, method: str, failed: dict[str, str]) -> None:
    """Per NCCL setting: what communicating costs the step (paired, round by
    round, against no communication in the same processes), and how much
    longer the GEMMs that overlapped an all-reduce ran than the same GEMMs
    of a step without communication (all ranks' traces pooled). ``steps``:
    each setting's :func:`steps_of`."""
    default = next(iter(VARIANTS))
    for setting, r in runs.items():
        case = {"part": "contention", "nccl": setting, "gpus": world}
        mine = steps[setting]
        lab.keep_samples(
            [a / b for a, b in zip(mine[default], mine["no communication"],
                                   strict=True)],
            case=case, metric="comm_cost", unit="x",
            method=f"paired ratio {default} / no communication, {method}")
        pooled = {"overlapped": [], "alone": []}
        for k in range(world):
            for pair in r["saved"].get(f"gemm-{k}.pt", []):
                for where, ratios in pair.items():
                    pooled[where] += ratios
        for where, ratios in pooled.items():
            if ratios:  # a GPU's traces; none on the CPU
                lab.keep_samples(
                    ratios, case=case, metric=f"gemm_{where}", unit="x",
                    method="each GEMM's duration with communication over the "
                           "same GEMM's without, profiler traces of every "
                           "rank, alternating order")
    for setting, message in failed.items():
        lab.note(f"setting failed: {setting}", message)
    if len(SETTINGS) > 1 and lab.cuda:
        lab.note("NCCL settings", {k: " ".join(f"{a}={b}" for a, b in
                                               v.items()) or "NCCL's own"
                                   for k, v in SETTINGS.items()})


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
