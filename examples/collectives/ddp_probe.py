"""Why DDP's profiled step outlasts its timed one, and what a bucket costs.

Two ranks (two GPUs over NCCL, or two CPU processes over gloo) train
ddp_overlap's model with its default 25 MB buckets. Every step is timed, and
a communication hook marks when each rank's backward pass reaches each bucket,
on a clock both ranks share. On GPUs each rank then profiles its own steps:
its process's first trace, as ddp_overlap took it (CUDA kernels only, the
first step after the profiler starts), more of the same, the third step of
a running profiler, and that step with CPU activity, shapes and stacks; both
ranks' traces are laid side by side on the same clock. A bucket-sized
all-reduce is timed alone in the same processes, and again, with a small one,
in a fresh pair of processes for each NCCL_PROTO and NCCL_ALGO setting;
NCCL_DEBUG_SUBSYS=TUNING says which algorithm and protocol NCCL picked.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
import zlib
from collections import defaultdict
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule

from examples.collectives.ddp_overlap import (
    make_model,
    recording_hook,
    train_step,
)
from examples.collectives._nccl_log import CHOICE, environment, payload, read_logs, refusal
from examples.collectives._launch import note as note_launch
from examples.collectives.ring_allreduce import lined_up, slowest_rank, spawn
from examples.collectives.ring_model import bus_bandwidth
from examples.lab.timing import measure_rounds

#: On a GPU machine this topic needs two GPUs; the CPU path runs two gloo
#: ranks. It always runs two ranks, on a machine with more GPUs too.
MIN_GPUS = 2
WORLD = 2

#: The largest bucket ddp_overlap's model makes is two Linear(2048, 2048)
#: layers, 32.02 MiB of fp32 gradients; the probes use 32 MiB and 64 KiB.
BUCKET_BYTES = 32 << 20
SMALL_BYTES = 64 << 10
QUICK_BUCKET_BYTES = 1 << 20  # --quick and the CPU: gloo, two cores


# --8<-- [start:clock]
class Clock:
    """Marks on the device's clock: CUDA events on a GPU, else the host's."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def mark(self):
        if not self.cuda:
            return time.perf_counter_ns()
        event = torch.cuda.Event(enable_timing=True)
        event.record()  # on the current stream: done once all before it is
        return event

    def ms(self, a, b) -> float:
        return a.elapsed_time(b) if self.cuda else (b - a) / 1e6


def marking_hook(sizes: list[int], marks: list, clock: Clock):
    """ddp_overlap's hook, marking when this rank's backward has the bucket.

    DDP calls the hook once the bucket's last gradient has been queued; an
    event recorded then completes when the GPU has computed it.
    """
    record = recording_hook(sizes)

    def hook(state, bucket):
        marks.append(clock.mark())
        return record(state, bucket)

    return hook


def timed_step(model: DDP, x: torch.Tensor, marks: list, clock: Clock):
    """One step's time, and when each bucket was ready, on the wall clock.

    Every process on one host reads the same wall clock (time.time_ns). The
    start event is recorded on an idle GPU between two readings of it, so
    it ran within microseconds of their midpoint; each bucket's mark is
    that midpoint plus the events' elapsed time. Both ranks' marks are then
    on one clock, up to the few microseconds an event takes to run.
    """
    clock.sync()
    marks.clear()
    before = time.time_ns()
    start = clock.mark()
    anchor = (before + time.time_ns()) // 2
    train_step(model, x, True)
    end = clock.mark()
    clock.sync()
    return {
        "step_ms": clock.ms(start, end),
        "anchor_ns": anchor,
        "ready_ns": [anchor + round(clock.ms(start, m) * 1e6) for m in marks],
    }


# --8<-- [end:clock]


# --8<-- [start:profiled]
CPU, CUDA = ProfilerActivity.CPU, ProfilerActivity.CUDA
PROFILERS = {  # name: (options of torch.profiler.profile, untraced steps)
    "CUDA only, 1st step": ({"activities": [CUDA]}, 0),  # ddp_overlap's
    "CUDA only, 3rd step": ({"activities": [CUDA]}, 2),
    "CPU+CUDA, shapes, stack, 3rd step": (
        {"activities": [CPU, CUDA], "record_shapes": True,
         "with_stack": True}, 2),
}
#: A process's first trace also starts CUPTI; ddp_overlap's table shows one.
#: It is kept apart, one per run.
FIRST_TRACE = "CUDA only, 1st step, 1st trace"


def profiled_step(model, x, marks, clock, options: dict, untraced: int):
    """timed_step under the profiler, every rank tracing its own GPU.

    Both ranks leave a barrier together and start their profilers, as
    ddp_overlap's ranks did after their timed loop; with ``untraced`` > 0
    the profiler runs that many steps before the one it keeps.
    """
    clock.sync()
    dist.barrier()
    kept, extra = [], {}
    if untraced:
        extra = {"schedule": schedule(wait=0, warmup=untraced, active=1,
                                      repeat=1),
                 "on_trace_ready": lambda p: kept.append(kernels_of(p))}
    with profile(**options, **extra) as prof:
        for _ in range(untraced + 1):
            step = timed_step(model, x, marks, clock)
            if untraced:
                prof.step()
    if not untraced:
        kept.append(kernels_of(prof))
    step["trace"] = timeline(kept[-1]) if kept else None
    return step


def kernels_of(prof) -> list[dict]:
    """The GPU kernels of a finished profile, times in ns on the wall clock.

    The trace's timestamps are microseconds after ``baseTimeNanoseconds``
    of the Unix epoch: the clock timed_step reads, in both ranks.
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "trace.json")
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    base = int(trace.get("baseTimeNanoseconds", 0))
    return [{"name": e["name"], "start": base + round(float(e["ts"]) * 1e3),
             "dur": round(float(e["dur"]) * 1e3)}
            for e in trace["traceEvents"] if e.get("cat") == "kernel"]


def timeline(kernels: list[dict]) -> dict | None:
    """One rank's step: its first kernel, its end, and each all-reduce."""
    if not kernels:
        return None
    comm = sorted((k for k in kernels if "nccl" in k["name"].lower()),
                  key=lambda k: k["start"])
    return {"first": min(k["start"] for k in kernels),
            "end": max(k["start"] + k["dur"] for k in kernels),
            "comm": [[k["start"], k["dur"]] for k in comm],
            "names": sorted({k["name"].split("(")[0] for k in comm})}


# --8<-- [end:profiled]


# -- correctness: fresh random inputs, a sample of every result ---------------
CHECK_POINTS = 1 << 16


def sample(t: torch.Tensor, points: int = CHECK_POINTS) -> torch.Tensor:
    """Every n-th element, about ``points`` of them, on the CPU."""
    flat = t.detach().flatten()
    return flat[:: max(1, flat.numel() // points)].cpu()


def rank_input(seed: int, rank: int, numel: int) -> torch.Tensor:
    """Rank ``rank``'s fp32 message, reproducible in any process."""
    key = f"{seed} {rank} {numel}".encode()  # the generator keeps 32 bits
    g = torch.Generator().manual_seed(zlib.crc32(key))
    return torch.randn(numel, generator=g)


def expected_sum(seed: int, nbytes: int) -> torch.Tensor:
    """The all-reduced message's sample, summed here in float64."""
    numel = nbytes // 4
    return sample(sum(rank_input(seed, r, numel).double()
                      for r in range(WORLD)))


def save_ddp_check(model: DDP, config: dict, device) -> None:
    """DDP's gradients after one step, and this rank's own, on fresh data."""
    rank = dist.get_rank()
    key = f"{config['seed']} ddp {rank}".encode()
    g = torch.Generator().manual_seed(zlib.crc32(key))
    x = torch.randn(config["tokens"], config["width"], generator=g)
    x = x.to(device)
    grads = {}
    for way in ("ddp", "local"):
        sync = contextlib.nullcontext() if way == "ddp" else model.no_sync()
        model.zero_grad(set_to_none=False)
        with sync, torch.autocast(device.type, dtype=torch.bfloat16):
            model(x).float().square().mean().backward()
        grads[way] = torch.cat([sample(p.grad, 4096)
                                for p in model.parameters()])
    model.zero_grad(set_to_none=False)
    torch.save(grads, Path(config["out"], f"ddp-{rank}.pt"))


# -- the ranks' work ----------------------------------------------------------
def calls_per_sample(nbytes: int) -> int:
    """All-reduces back to back per sample: 8 of 32 MiB, 50 of 64 KiB."""
    return max(1, min(50, (256 << 20) // nbytes))


# --8<-- [start:alone]
def time_all_reduce(config: dict, device, sizes: list[int]) -> dict:
    """Seconds per all-reduce of each size, back to back, nobody waiting.

    Every sample starts with both ranks leaving a barrier together, then
    runs calls_per_sample(n) all-reduces in a row: no compute between them,
    so each rank is ready for the next one when its peer is.
    """
    rank, times = dist.get_rank(), {}
    for nbytes in sizes:
        x0 = rank_input(config["seed"], rank, nbytes // 4).to(device)
        x = x0.clone()
        dist.all_reduce(x)  # the checked call
        torch.save(sample(x), Path(config["out"], f"sum-{nbytes}-{rank}.pt"))
        times[str(nbytes)] = measure_rounds(  # seconds per call
            {"alone": lambda x=x: dist.all_reduce(x)}, device=device,
            warmup=config["warmup"], repetitions=config["reps"],
            inner=calls_per_sample(nbytes),
            before=lined_up(lambda _, x=x, x0=x0: x.copy_(x0)))["alone"]
    return times


# --8<-- [end:alone]


def ddp_worker(config: dict, device: torch.device) -> dict:
    torch.manual_seed(0)  # the same weights and batches as ddp_overlap
    x = torch.randn(config["tokens"], config["width"], device=device)
    x += dist.get_rank()
    clock, sizes, marks = Clock(device), [], []
    model = DDP(make_model(config["width"], config["layers"], device),
                bucket_cap_mb=25)
    model.register_comm_hook(None, marking_hook(sizes, marks, clock))
    for _ in range(3):  # DDP rebuilds its buckets after the first step
        sizes.clear()
        train_step(model, x, True)
    mine = {"buckets": list(sizes), "runs": {}}
    save_ddp_check(model, config, device)
    for _ in range(config["warmup"]):
        timed_step(model, x, marks, clock)
    mine["runs"]["off"] = [timed_step(model, x, marks, clock)
                           for _ in range(config["reps"])]
    if config["profile"]:
        # The process's first trace, as ddp_overlap's was: CUPTI starts here.
        options, _ = PROFILERS["CUDA only, 1st step"]
        mine["runs"][FIRST_TRACE] = [profiled_step(model, x, marks, clock,
                                                   options, 0)]
        for name, (options, untraced) in PROFILERS.items():
            mine["runs"][name] = [
                profiled_step(model, x, marks, clock, options, untraced)
                for _ in range(config["traces"])
            ]
    del model
    mine["alone"] = time_all_reduce(config, device, [config["bucket_bytes"]])
    small = torch.ones(SMALL_BYTES // 4, device=device)
    for _ in range(3):  # untimed: NCCL's TUNING lines say what it picks
        dist.all_reduce(small)
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return {"ranks": everyone}


def probe_worker(config: dict, device: torch.device) -> dict:
    """Time each size, then trace one call of it; save what this rank saw.

    Only all-reduces run here (barriers are all-reduces too): under
    NCCL_ALGO=Tree an all-gather, such as all_gather_object's, has no
    algorithm left and fails, so each rank writes a file instead.
    """
    mine = {"times": time_all_reduce(config, device, config["sizes"]),
            "kernels": {}}
    if config["profile"]:  # after the timing: CUPTI is not on for it
        clock = Clock(device)
        for nbytes in config["sizes"]:
            x = torch.ones(nbytes // 4, device=device)
            clock.sync()
            with profile(**PROFILERS["CUDA only, 1st step"][0]) as prof:
                dist.all_reduce(x)
                clock.sync()
            mine["kernels"][str(nbytes)] = sorted(
                {k["name"].split("(")[0] for k in kernels_of(prof)
                 if "nccl" in k["name"].lower()})
    torch.save(mine, Path(config["out"], f"probe-{dist.get_rank()}.pt"))
    return {}


# --8<-- [start:probes]
#: Each setting in a fresh pair of processes: NCCL reads its variables once
#: per process. spawn() adds NCCL_NVLS_ENABLE=0 to every one of them.
SETTINGS = {
    "default": {},
    "NCCL_PROTO=LL": {"NCCL_PROTO": "LL"},
    "NCCL_PROTO=LL128": {"NCCL_PROTO": "LL128"},
    "NCCL_PROTO=Simple": {"NCCL_PROTO": "Simple"},
    "NCCL_ALGO=Ring": {"NCCL_ALGO": "Ring"},
    "NCCL_ALGO=Tree": {"NCCL_ALGO": "Tree"},
}
NCCL_VARIABLES = ("NCCL_PROTO", "NCCL_ALGO", "NCCL_DEBUG",
                  "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")


def nccl_environment(settings: dict[str, str]):
    """Exactly these NCCL_VARIABLES for the processes started inside."""
    if not set(settings) <= set(NCCL_VARIABLES):
        raise ValueError(f"not one of NCCL_VARIABLES: {settings}")
    return environment({k: settings.get(k) for k in NCCL_VARIABLES})


# --8<-- [end:probes]


# -- NCCL_DEBUG_SUBSYS=TUNING -------------------------------------------------
#: tuning.cc, at init, the cost model's table: "Algorithm |", "Protocol |",
#: one row per collective (each enqueued collective's choice: _nccl_log.CHOICE).
TABLE = re.compile(r"^\s*(Algorithm|Protocol|AllReduce)\s+\|")


def tuning_lines(texts: list[str], limit: int = 10) -> list[str]:
    """The table's first block, then each all-reduce size's choice, once."""
    table, choices, seen = {}, [], set()
    for line in texts:
        text = payload(line)
        choice = CHOICE.search(text)
        if choice:
            func, nbytes, algo, proto = choice.group(1, 2, 3, 4)
            new = (nbytes, algo, proto) not in seen
            if func == "AllReduce" and int(nbytes) >= 1024 and new:
                seen.add((nbytes, algo, proto))  # >= 1 KiB: not barriers
                choices.append(text.strip())
            continue
        row = TABLE.match(text)
        if row and row.group(1) not in table:
            table[row.group(1)] = text
    return (list(table.values()) + choices)[:limit]


# -- from both ranks' steps to figures ----------------------------------------
def step_figures(runs: list[list[dict]], full: list[int]) -> dict:
    """Per rank, step by step, the figures of one step (ms).

    ``runs[r][i]`` is rank r's i-th step (the same step on every rank);
    ``full`` lists the full-size buckets, over which a step's medians go.
    "peer_later": how much later the last other rank started the same
    all-reduce (positive: this rank's kernel waited that long for it);
    "transfer": the kernel's duration less that wait.
    """
    med = statistics.median
    ranks = [defaultdict(list) for _ in runs]
    buckets = [defaultdict(lambda: defaultdict(list)) for _ in runs]
    out = {"ranks": ranks, "buckets": buckets, "end_mismatch": [],
           "dropped": 0}
    for steps in zip(*runs, strict=True):
        nb = len(steps[0]["ready_ns"])
        traced = all(s.get("trace") is not None for s in steps)
        if (any(len(s["ready_ns"]) != nb for s in steps)
                or (traced and any(len(s["trace"]["comm"]) != nb
                                   for s in steps))
                or ("trace" in steps[0] and not traced)):
            out["dropped"] += 1
            continue
        for r, s in enumerate(steps):
            others = [o for j, o in enumerate(steps) if j != r]
            fig, per = ranks[r], buckets[r]
            fig["step"].append(s["step_ms"])
            ready = [(max(o["ready_ns"][k] for o in others)
                      - s["ready_ns"][k]) / 1e6 for k in range(nb)]
            fig["peer_ready_later"].append(med(ready[k] for k in full))
            for k in range(nb):
                per[k]["peer_ready_later"].append(ready[k])
            if not traced:
                continue
            t = s["trace"]
            start = [(c[0] - t["first"]) / 1e6 for c in t["comm"]]
            dur = [c[1] / 1e6 for c in t["comm"]]
            later = [(max(o["trace"]["comm"][k][0] for o in others)
                      - t["comm"][k][0]) / 1e6 for k in range(nb)]
            transfer = [dur[k] - max(0.0, later[k]) for k in range(nb)]
            fig["span"].append((t["end"] - t["first"]) / 1e6)
            fig["first_kernel_delay"].append(
                (t["first"] - s["anchor_ns"]) / 1e6)
            fig["first_bucket_start"].append(start[0])
            fig["last_bucket_start"].append(start[-1])
            fig["bucket_duration"].append(med(dur[k] for k in full))
            fig["peer_later"].append(med(later[k] for k in full))
            fig["transfer"].append(med(transfer[k] for k in full))
            for k in range(nb):
                per[k]["start"].append(start[k])
                per[k]["duration"].append(dur[k])
                per[k]["peer_later"].append(later[k])
        if traced:  # an all-reduce ends on every rank at once: a clock check
            ends = [[c[0] + c[1] for c in s["trace"]["comm"]] for s in steps]
            out["end_mismatch"].append(med(
                max(e[k] for e in ends) - min(e[k] for e in ends)
                for k in range(nb)) / 1e3)
    return out


#: The runs whose buckets get a row each; the others, a step's medians only.
BUCKET_ROWS = ("off", FIRST_TRACE, "CUDA only, 1st step")


def keep_ddp(lab, ranks: list[dict], alone_ms: float, clock: str) -> None:
    sizes = ranks[0]["buckets"]
    full = [k for k, s in enumerate(sizes) if s >= max(sizes) / 2]
    off = {}
    for name in ranks[0]["runs"]:
        figs = step_figures([r["runs"][name] for r in ranks], full)
        if figs["dropped"]:
            lab.note(f"steps dropped ({name})",
                     f"{figs['dropped']}: a rank's trace lacked an "
                     "all-reduce or the ranks' buckets differed")
        for r, fig in enumerate(figs["ranks"]):
            if not fig["step"]:
                continue
            case = {"part": "step", "profiler": name, "rank": r,
                    "gpus": WORLD}
            for metric, values in fig.items():
                lab.keep_samples(values, case=case, metric=metric,
                                 unit="ms", method=_method(metric, name,
                                                           clock, r))
            medians = {m: statistics.median(v) for m, v in fig.items()}
            if name == "off":
                off[r] = medians["step"]
                continue
            lab.value(case=case, metric="span_vs_step", unit="x",
                      value=medians["span"] / off[r])
            lab.value(case=case, metric="bucket_vs_alone", unit="x",
                      value=medians["bucket_duration"] / alone_ms)
            lab.value(case=case, metric="transfer_vs_alone", unit="x",
                      value=medians["transfer"] / alone_ms)
        for r, per in enumerate(figs["buckets"] if name in BUCKET_ROWS
                                else []):
            for k, metrics in sorted(per.items()):
                case = {"part": "bucket", "profiler": name, "rank": r,
                        "bucket": k + 1, "gpus": WORLD}
                for metric, values in metrics.items():
                    lab.keep_samples(values, case=case, metric=metric,
                                     unit="ms", method=_method(
                                         metric, name, clock, r))
        if figs["end_mismatch"]:
            lab.keep_samples(
                figs["end_mismatch"],
                case={"part": "alignment", "profiler": name, "gpus": WORLD},
                metric="end_mismatch", unit="us",
                method="profiler traces of both ranks on the wall clock: "
                       "median over buckets of the spread of one "
                       "all-reduce's end")
    lab.note("bucket sizes in all-reduce order (MiB)",
             [round(s / 2**20, 2) for s in sizes])
    names = sorted({n for r in ranks for name, steps in r["runs"].items()
                    for s in steps if s.get("trace")
                    for n in s["trace"]["names"]})
    if names:
        lab.note("DDP's all-reduce kernel", names)


def _method(metric: str, profiler: str, clock: str, rank: int) -> str:
    if metric == "step":
        under = "" if profiler == "off" else " under the profiler"
        return f"{clock}{under}, rank {rank}"
    if metric in ("peer_ready_later",):
        return (f"{clock} marks in the comm hook, both ranks on the wall "
                f"clock, seen from rank {rank}")
    if metric in ("peer_later", "transfer", "first_kernel_delay"):
        return (f"profiler traces of both ranks on the wall clock, seen "
                f"from rank {rank}")
    return f"profiler trace (CUPTI kernel timestamps), rank {rank}"


def keep_all_reduce(lab, setting: str, ranks: list[dict], config: dict,
                    clock: str) -> dict[int, float]:
    """Keep each size's time (max over ranks per sample); medians, us."""
    medians = {}
    for key in ranks[0]["times"]:
        nbytes = int(key)
        worst = [s * 1e6 for s in slowest_rank([r["times"][key] for r in ranks])]
        case = {"part": "all_reduce", "setting": setting, "bytes": nbytes,
                "gpus": WORLD}
        t = lab.keep_samples(
            worst, case=case, metric="time", unit="us",
            method=f"{clock}, max over {WORLD} ranks per sample",
            warmup=config["warmup"], inner=calls_per_sample(nbytes))
        algbw = nbytes / (t.median / 1e6)
        lab.value(case=case, metric="busbw", unit="GB/s",
                  value=bus_bandwidth("all_reduce", gpus=WORLD,
                                      algbw=algbw) / 1e9)
        medians[nbytes] = t.median
    return medians


def check_sums(lab, setting: str, saved: dict, want: dict) -> None:
    for nbytes, expected in want.items():
        for r in range(WORLD):
            got = saved.get(f"sum-{nbytes}-{r}.pt")
            if got is None:
                continue
            # fp32: one addition of two values rounds by at most 2^-24
            lab.check(f"all-reduce, {setting}, {nbytes} B, rank {r}: "
                      f"{got.numel()} elements vs the sum computed locally",
                      got, expected, tolerance=1e-6)


def measure(lab) -> None:
    cuda = lab.cuda
    if cuda and torch.cuda.device_count() < MIN_GPUS:  # the runner skips
        raise RuntimeError(f"needs {MIN_GPUS} GPUs, this machine has "
                           f"{torch.cuda.device_count()}")
    full = cuda and not lab.quick
    bucket = BUCKET_BYTES if full else QUICK_BUCKET_BYTES
    config = {"width": 2048 if full else 256, "layers": 24 if full else 6,
              "tokens": 8192 if full else 256, "reps": 30 if full else 5,
              "warmup": 5 if full else 2, "traces": 8 if full else 2,
              "bucket_bytes": bucket, "sizes": [SMALL_BYTES, bucket],
              "seed": int.from_bytes(os.urandom(4), "little"),
              "profile": cuda}  # the kernel traces need a GPU
    backend, clock = ("nccl", "cuda_event") if cuda else ("gloo",
                                                          "host clock")

    # 1 and 2: DDP's steps, then a bucket alone, in the same two processes;
    # rank 0 logs NCCL's choice for every all-reduce (a line to a file).
    with tempfile.TemporaryDirectory() as logs:
        debug = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING",
                 "NCCL_DEBUG_FILE": f"{logs}/nccl.%h.%p.log"} if cuda else {}
        with nccl_environment(debug):
            ddp = spawn(ddp_worker, WORLD, backend, config)
        log = read_logs(Path(logs))
    # 3: each setting in a fresh pair of processes (gloo: NCCL's are moot).
    probes, failed = {}, {}
    for setting, env in (SETTINGS if cuda else {"default": {}}).items():
        try:
            with nccl_environment(env):
                probes[setting] = spawn(probe_worker, WORLD, backend, config)
        except Exception as exc:  # a forced choice NCCL refuses, say
            if setting == "default":
                raise
            failed[setting] = refusal(exc)

    # Correctness first: nothing is kept from a run that fails a check.
    saved = ddp["saved"]
    local = [saved[f"ddp-{r}.pt"]["local"].double() for r in range(WORLD)]
    mean = sum(local) / WORLD
    for r in range(WORLD):
        # The same backward twice: any difference is the order of a bf16
        # GEMM's sums, a few 2^-8 roundings; a missing all-reduce is ~1.
        lab.check(f"DDP gradients, rank {r}, vs the mean of both ranks' "
                  "own (sampled)", saved[f"ddp-{r}.pt"]["ddp"], mean,
                  tolerance=1e-2)
    lab.check("DDP gradients, rank 1 vs rank 0 (sampled)",
              saved["ddp-1.pt"]["ddp"], saved["ddp-0.pt"]["ddp"],
              tolerance=1e-6)
    want = {n: expected_sum(config["seed"], n) for n in config["sizes"]}
    check_sums(lab, "in DDP's processes", saved, want)
    for setting, result in probes.items():
        check_sums(lab, setting, result["saved"], want)

    ranks = ddp["ranks"]
    alone = keep_all_reduce(lab, "default, DDP's processes",
                            [{"times": r["alone"]} for r in ranks], config,
                            clock)
    keep_ddp(lab, ranks, alone[bucket] / 1e3, clock)
    seen = {setting: [result["saved"][f"probe-{r}.pt"] for r in range(WORLD)]
            for setting, result in probes.items()}
    default = keep_all_reduce(lab, "default", seen["default"], config, clock)
    kernels = {}
    for setting, ranks in seen.items():
        times = (default if setting == "default" else keep_all_reduce(
            lab, setting, ranks, config, clock))
        for nbytes, t in times.items():
            lab.value(case={"part": "all_reduce", "setting": setting,
                            "bytes": nbytes, "gpus": WORLD},
                      metric="vs_default", unit="x",
                      value=t / default[nbytes])
        for nbytes, names in ranks[0]["kernels"].items():
            kernels[f"{setting}, {nbytes} B"] = "; ".join(names) or "none"
    _notes(lab, config, cuda, backend, log, kernels, failed)


def _notes(lab, config, cuda, backend, log, kernels, failed) -> None:
    params = config["layers"] * (config["width"] ** 2 + config["width"])
    lab.note("model", f"{config['layers']} x Linear({config['width']}, "
             f"{config['width']}), {params * 4 / 2**20:.0f} MiB of fp32 "
             f"gradients, {config['tokens']} tokens per rank, bf16 "
             "autocast, 25 MB buckets")
    lab.note("ranks", f"{WORLD} ({backend}), one process per rank")
    note_launch(lab)
    for setting, message in failed.items():
        lab.note(f"probe failed: {setting}", message)
    if not cuda:
        lab.note("profiler", "skipped: the kernel trace needs a GPU; on "
                 "gloo, NCCL_PROTO and NCCL_ALGO mean nothing (default "
                 "only)")
        return
    lab.note("NCCL_NVLS_ENABLE", os.environ.get("NCCL_NVLS_ENABLE"))
    lab.note("DDP's processes", "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING "
             "to a file: rank 0 writes one line per collective")
    lines = tuning_lines(log)
    lab.note("NCCL TUNING lines of rank 0",
             lines or [f"no line matched, of {len(log)} read"])
    if kernels:
        lab.note("all-reduce kernel per setting", kernels)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
