"""One real Nsight Systems capture: where the time of a step goes, on both sides.

``torch.profiler`` showed (in :mod:`examples.measuring.profile_mix`) how busy
the GPU was. A timeline shows the host beside it: every CUDA API call of the
Python thread, every kernel on the GPU, and the NVTX ranges the program
marked. A child process builds three steps, warms them up (autotuning, cuBLAS's
first call, the CUDA graph's capture), then runs each of them five times inside
``cudaProfilerStart``/``Stop``, one NVTX range per step, with a synchronize at
the end of each step so that the range holds the step's GPU work:

* the GEMM-bound step of ``profile_mix`` (eight 2048x4096 @ 4096x4096 products);
* ``profile_mix``'s decode step of four small transformer layers, batch 1, eager;
* the same decode step replayed from a CUDA graph.

``nsys`` records only that region (``--capture-range=cudaProfilerApi``),
exports it to SQLite, and this module reads, per step: the time on the host,
the kernels, the GPU's busy time (the union of its kernels), the time the host
spent inside launch calls and blocked in the synchronize, and how long after
the step began its first kernel started. The median step of each kind is kept
as a timeline the page draws. The same steps are also timed without ``nsys``,
in this process, in interleaved rounds, so the record shows what tracing
itself costs. The child starts first and waits, with Python and torch loaded
but no CUDA context, while this process checks and times the steps
(``examples/measuring/_waiting_child.py``): the profiler's start overlaps that
work, the untraced timing begins only once the child waits idle, and the
child touches CUDA (its context, cuBLAS, then kernels) only after the
parent's timing is done, so that no second context on the GPU is in the
parent's figures.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import torch

from examples.measuring._waiting_child import WaitingChild, wait_for_go

REQUIRES_CUDA = True

#: Steps per kind inside the captured region (each one NVTX range).
STEPS = 5
#: Step kinds, in the order the child runs them.
KINDS = ("GEMM-bound step", "decode step, eager", "decode step, CUDA graph")

# --8<-- [start:command]
def nsys_command(nsys: str, report: str, child: list[str]) -> list[str]:
    return [nsys, "profile",
            "--trace=cuda,nvtx,osrt",  # CUDA API + kernels, NVTX ranges, OS calls
            "--capture-range=cudaProfilerApi",  # only between profiler start/stop
            "--capture-range-end=stop",
            "--cuda-graph-trace=node",  # each kernel of a graph, not one bar
            "--sample=none", "--cpuctxsw=none",  # no CPU sampling: less overhead
            "--export=sqlite",  # REPORT.sqlite too, without a second nsys run
            "--force-overwrite=true", "--output", report, *child]


def export_command(nsys: str, report: str, database: str) -> list[str]:
    """The export as a command of its own, for a report that has no SQLite yet."""
    return [nsys, "export", "--type=sqlite", "--force-overwrite=true",
            "--output", database, report]
# --8<-- [end:command]


CHILD = "from examples.measuring.nsys_capture import captured_steps; captured_steps()"


def build_steps() -> tuple[dict, dict[str, torch.Tensor]]:
    """The three steps, warmed up, each ending with a synchronize; and their outputs."""
    from examples.measuring.profile_mix import workloads

    full = types.SimpleNamespace(quick=False, device=torch.device("cuda"), cuda=True)
    gemm, decode = workloads(full).values()
    for _ in range(3):  # cuBLAS's heuristics, the caching allocator
        gemm(), decode()
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream before capture
        decode()
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        replayed = decode()
    graph.replay()
    torch.cuda.synchronize()
    outputs = {"GEMM-bound step": gemm(), "decode step, eager": decode(), "decode step, CUDA graph": replayed}

    def synced(fn):
        def step():
            fn()
            torch.cuda.synchronize()
        return step

    return dict(zip(KINDS, (synced(gemm), synced(decode), synced(graph.replay)))), outputs


# --8<-- [start:child]
def captured_steps() -> None:
    """Run under nsys: warm up, then STEPS steps of each kind with capture on."""
    # Nothing of CUDA before the word, not even the context: a second context
    # on the GPU (nsys's injection in it) while the parent timed was the
    # likely cause of slower untraced figures. The GPU is the parent's until
    # it says go.
    wait_for_go()
    steps, _ = build_steps()  # the context, cuBLAS and the warm-up, all after
    # the go: seconds of host work under nsys, before the capture range opens
    torch.cuda.profiler.start()  # cudaProfilerStart: nsys begins recording
    for kind, step in steps.items():
        for _ in range(STEPS):
            with torch.cuda.nvtx.range(kind):
                step()
    torch.cuda.profiler.stop()
# --8<-- [end:child]


def prepare_cuda() -> None:
    """Create this process's CUDA context and cuBLAS handle, launching nothing.

    Under a profiler both take seconds of host work (its injection and CUPTI
    start with the context, cuBLAS loads its library), which a parent that
    only checks can hide (``ncu_capture``'s child calls this before it
    waits). ``captured_steps`` does not: its parent times while it waits,
    and the child's context would be in those times.
    """
    torch.cuda.init()
    torch.cuda.synchronize()  # makes the context (a synchronize on no work)
    torch.cuda.current_blas_handle()  # loads cuBLAS, allocates its handle


# -- reading the export --------------------------------------------------------

#: Runtime API calls that launch work, and those that block the host.
LAUNCHES = re.compile(r"^(cudaLaunchKernel|cudaLaunchKernelExC|cudaGraphLaunch|cuLaunchKernel)")
SYNCS = re.compile(r"^(cudaDeviceSynchronize|cudaStreamSynchronize|cudaEventSynchronize)")


def api_name(raw: str) -> str:
    """'cudaLaunchKernel_v7000' -> 'cudaLaunchKernel' (nsys keeps CUPTI's versioned names)."""
    return re.sub(r"(_v\d+)+$", "", raw)


def read_capture(database: str) -> dict[str, list[dict]]:
    """Each NVTX range of the capture, by its text, with the API calls and kernels in it.

    A kernel belongs to the range in which the host called the API that launched it
    (matched by CUPTI's correlation id), even if it ran after the range ended.
    """
    db = sqlite3.connect(database)
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    for needed in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"):
        if needed not in tables:
            raise RuntimeError(f"the nsys export has no {needed} table: nothing of that kind was recorded")
    ranges = db.execute(
        "SELECT e.start, e.end, COALESCE(e.text, s.value) FROM NVTX_EVENTS e "
        "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.end IS NOT NULL ORDER BY e.start").fetchall()
    calls = db.execute(
        "SELECT r.start, r.end, s.value, r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "JOIN StringIds s ON s.id = r.nameId ORDER BY r.start").fetchall()
    kernels = db.execute(
        "SELECT k.start, k.end, s.value, k.correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.shortName ORDER BY k.start").fetchall()
    db.close()
    by_correlation: dict[int, list[tuple]] = {}
    for kernel in kernels:
        by_correlation.setdefault(kernel[3], []).append(kernel)
    found: dict[str, list[dict]] = {}
    for start, end, text in ranges:
        inside = [c for c in calls if start <= c[0] <= end]
        launched = sorted((k for c in inside for k in by_correlation.get(c[3], ())), key=lambda k: k[0])
        found.setdefault(text, []).append({
            "start": start, "end": end,
            "calls": [(c[0], c[1], api_name(c[2])) for c in inside],
            "kernels": [(k[0], k[1], k[2]) for k in launched]})
    return found


def busy_ns(intervals: list[tuple]) -> int:
    """Length of the union of [start, end) intervals: time the GPU ran anything."""
    total, reach = 0, None
    for start, end, *_ in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def step_figures(step: dict) -> dict[str, float]:
    """What one NVTX range says, in µs (counts as counts)."""
    span = step["end"] - step["start"]
    launches = [c for c in step["calls"] if LAUNCHES.match(c[2])]
    syncs = [c for c in step["calls"] if SYNCS.match(c[2])]
    kernels = step["kernels"]
    return {
        "step": span / 1e3,
        "kernels": float(len(kernels)),
        "gpu_busy": busy_ns(kernels) / 1e3,
        "busy_fraction": 100.0 * busy_ns(kernels) / span if span else 0.0,
        "api_calls": float(len(step["calls"])),
        "launch_calls": float(len(launches)),
        "in_launch": sum(c[1] - c[0] for c in launches) / 1e3,
        "in_sync": sum(c[1] - c[0] for c in syncs) / 1e3,
        "first_kernel": (kernels[0][0] - step["start"]) / 1e3 if kernels else float("nan"),
    }


#: metric -> unit, for step_figures' keys.
UNITS = {"step": "us", "kernels": "", "gpu_busy": "us", "busy_fraction": "%", "api_calls": "",
         "launch_calls": "", "in_launch": "us", "in_sync": "us", "first_kernel": "us"}


def timeline_panel(title: str, step: dict, limit: int = 400) -> dict:
    """One step as the lanes the page draws: µs from the range's start."""
    t0 = step["start"]

    def lane(events):
        return [[(s - t0) / 1e3, (e - t0) / 1e3, name[:60]] for s, e, name in events[:limit]]

    end = max([step["end"]] + [k[1] for k in step["kernels"]])
    return {"title": title, "span": [0.0, (end - t0) / 1e3],
            "lanes": [{"name": "NVTX range", "events": lane([(step["start"], step["end"], title)])},
                      {"name": "CPU: CUDA API", "events": lane(step["calls"])},
                      {"name": "GPU: kernels", "events": lane(step["kernels"])}]}


# -- running nsys --------------------------------------------------------------

def find_nsys() -> str:
    """$NSYS, then nsys on the PATH, then NVIDIA's install folders."""
    from examples.lab.harness import Unavailable  # not in the child: it loads faster

    candidates = [os.environ.get("NSYS"), shutil.which("nsys"),
                  *sorted(glob.glob("/opt/nvidia/nsight-systems/*/bin/nsys"), reverse=True),
                  *sorted(glob.glob("/usr/local/cuda*/bin/nsys"), reverse=True)]
    for found in candidates:
        if found and os.access(found, os.X_OK):
            return found
    raise Unavailable("Nsight Systems (nsys) is not installed on this machine (set NSYS=/path/to/nsys)")


def run(cmd: list[str], what: str, timeout: int) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{what} exited with {done.returncode}: {' | '.join(tail)}")
    return done.stdout + done.stderr


def capture(nsys: str, parent_work) -> tuple[dict[str, list[dict]], str]:
    """The child's steps under nsys, exported and read; ``parent_work()`` runs
    while nsys and the child start, and the child touches CUDA only after it."""
    with tempfile.TemporaryDirectory() as tmp:
        # nsys writes REPORT.nsys-rep and, with --export=sqlite, REPORT.sqlite
        report, database = str(Path(tmp, "steps")), str(Path(tmp, "steps.sqlite"))
        cmd = nsys_command(nsys, report, [sys.executable, "-c", CHILD])
        with WaitingChild(cmd) as child:
            parent_work(child)
            done = child.go(timeout=600)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"nsys profile exited with {done.returncode}: {' | '.join(tail)}")
        log = done.stdout + done.stderr
        if not Path(report + ".nsys-rep").exists():
            said = [line.strip() for line in log.replace("\r", "\n").splitlines()
                    if line.strip() and "%" not in line][-3:]  # nsys's last words, not its progress bars
            raise RuntimeError("nsys wrote no .nsys-rep report (an nsys without its host importer "
                               f"leaves only a .qdstrm file); nsys said: {' | '.join(said) or 'nothing'}")
        if not Path(database).exists():  # an nsys whose profile did not export
            run(export_command(nsys, report + ".nsys-rep", database), "nsys export", 300)
        importer_errors = "Importer error status" in log or "Errors occurred while processing" in log
        return read_capture(database), ("the importer reported non-fatal errors" if importer_errors else "")


def measure(lab) -> None:
    nsys = find_nsys()
    untraced, version = {}, []

    def untraced_steps(child) -> None:
        """This process's share, while nsys and the child load: check the steps, then
        time them untraced once the child waits idle."""
        version.append(run([nsys, "--version"], "nsys --version", 60).strip().splitlines()[-1])
        steps, outputs = build_steps()
        for kind, out in outputs.items():  # first: the steps compute something finite ...
            lab.check(f"{kind}: finite", out.isfinite().double(),
                      torch.ones_like(out, dtype=torch.float64), tolerance=0)
        # ... and the graph replays the eager decode step (same token, same cache position).
        lab.check("decode step: graph replay = eager", outputs["decode step, CUDA graph"],
                  outputs["decode step, eager"], tolerance=1e-2)
        child.ready()  # loaded and waiting: nothing else on the host's clock
        # The same steps without nsys, interleaved in rounds.
        times = lab.compare(steps, case={}, key="step", metric="untraced", unit="us",
                            timer="host_sync", warmup=3, repetitions=30)
        untraced.update((kind, t.median) for kind, t in times.items())
        del steps, outputs
        torch.cuda.empty_cache()

    captured, warning = capture(nsys, untraced_steps)
    method = "Nsight Systems trace (CUPTI), one NVTX range per step"
    timeline = {"unit": "us", "panels": []}
    for kind in KINDS:
        ranges = captured.get(kind, [])
        if len(ranges) != STEPS or not all(r["kernels"] for r in ranges):
            raise RuntimeError(f"the capture has {len(ranges)} ranges '{kind}', "
                               f"{sum(bool(r['kernels']) for r in ranges)} of them with kernels; expected {STEPS}")
        figures = [step_figures(r) for r in ranges]
        case = {"step": kind}
        for metric, unit in UNITS.items():
            lab.keep_samples([f[metric] for f in figures], case=case, metric=metric, unit=unit,
                             method=method, warmup=3, inner=1)
        traced = statistics.median(f["step"] for f in figures)
        lab.value(case=case, metric="tracing_cost", unit="%", value=100 * (traced / untraced[kind] - 1))
        middle = sorted(ranges, key=lambda r: r["end"] - r["start"])[STEPS // 2]
        timeline["panels"].append(timeline_panel(kind, middle))
    lab.note("timeline", timeline)
    lab.note("nsys", f"{version[0]}; nsys {' '.join(nsys_command('nsys', 'steps', [])[1:])} python ...")
    if warning:
        lab.note("nsys import", warning)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
