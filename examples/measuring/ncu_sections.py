"""Nsight Compute's memory-workload and warp-state sections on three kernels of the book.

``ncu_capture`` reads six counters; this topic asks ``ncu`` for three of its
sections, by name, and reads them back as raw metrics: ``SpeedOfLight`` (each
unit's throughput against its peak), ``MemoryWorkloadAnalysis`` (hit rates of
the L1 and the L2, bytes between the L2 and DRAM; sectors per request asked by
name) and ``WarpStateStats`` (where a warp's cycles go between two instructions
it issues, by stall reason). The memory section's chart and tables
(``MemoryWorkloadAnalysis_Chart``, ``_Tables``), which the GUI draws, are not
asked for: the record keeps none of their figures, and their counters add
replay passes to every kernel. The kernels are two the book
already measures and one it times in Chapter 1: the coalesced and the
stride-8 read of :mod:`examples.stack.memory_access` (the same Triton kernel,
imported, over 256 MiB of float32) and torch's bf16 matrix product at 8192^3
(cuBLAS). The reasons' meanings are in NVIDIA's Kernel Profiling Guide,
"Warp Stall Reasons"
(https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html).

The capture runs as ``ncu_capture``'s does: a child process, started first,
loads under ``ncu`` and waits while this process checks the kernels against
float64 and times them with the book's own timer (kernel durations, L2
flushed); then the child warms up, and profiling is on only around one launch
of each kernel (``cudaProfilerStart``/``Stop``, ``--profile-from-start
off``). ``ncu`` replays each launch once per pass its counters need, flushing
the caches before each (``--cache-control all``), with the SM clock locked to
its base frequency (``--clock-control base``, ``ncu``'s default, written out
here). Beside each kernel the record keeps the duration ``ncu`` measured, the
book's time for the same kernel and their ratio: ``ncu``'s times are those of
a kernel alone, serialized, at base clock.

Cost on an H200: 11 to 13 s while the chart and tables were asked for too (less
now, not yet measured), most of it ``ncu`` starting the child (hidden behind the
checks and timings) and replaying three launches once per pass its counters need;
3.4 GiB of GPU memory at the peak (the 256 MiB tensor, three 128 MiB matrices, a
float64 reference of 512 MiB in the parent, and the child's own copies). Where
``ncu`` is missing or may not read the GPU's counters (``ERR_NVGPUCTRPERM``), the
topic is skipped in one line. On the CPU
(``--quick``) the kernels are checked and timed (the Triton one in Triton's
interpreter) and the capture is skipped, in one line.
"""
from __future__ import annotations

import csv
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from examples.lab.harness import Unavailable
from examples.stack import memory_access as ma

#: float32 words read: 256 MiB, five times the 50 MB L2 of an H100 or H200.
GPU_WORDS = 1 << 26
GEMM_SIDE = 8192  # the product Chapter 1 profiles (examples/stack/matmul_kernel.py)
QUICK_GEMM_SIDE = 256
#: The kernels, in the order the child launches them.
KERNELS = ("coalesced read", "stride-8 read", "GEMM")
STRIDES = {"coalesced read": 1, "stride-8 read": 8}
#: Each kernel's column in the stall table (a metric per kernel: the reasons are the rows).
SHARE = {"coalesced read": "share_coalesced", "stride-8 read": "share_strided", "GEMM": "share_gemm"}

# --8<-- [start:command]
SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "WarpStateStats")
#: Raw metrics asked for by name too, so that they are there whatever a
#: section of this ncu version holds: ncu metric -> (record's metric, unit).
METRICS = {
    "gpu__time_duration.sum": ("duration", "us"),
    "sm__cycles_elapsed.avg.per_second": ("sm_clock", "MHz"),
    "dram__throughput.avg.pct_of_peak_sustained_elapsed":
        ("dram_throughput", "%"),
    "sm__throughput.avg.pct_of_peak_sustained_elapsed":
        ("compute_throughput", "%"),
    "dram__bytes_read.sum": ("dram_read", "MB"),
    "dram__bytes_write.sum": ("dram_write", "MB"),
    "l1tex__t_sector_hit_rate.pct": ("l1_hit_rate", "%"),
    "lts__t_sector_hit_rate.pct": ("l2_hit_rate", "%"),
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": ("load_sectors", ""),
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": ("load_requests", ""),
}
#: The stall reasons asked for by name (WarpStateStats' metrics; REASONS).
STALLS_ASKED = (
    "long_scoreboard", "short_scoreboard", "barrier", "membar", "wait",
    "math_pipe_throttle", "mio_throttle", "lg_throttle", "tex_throttle",
    "not_selected", "selected", "no_instruction", "branch_resolving",
    "dispatch_stall", "drain", "sleeping")


def stall_metric(reason: str) -> str:
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


def ncu_command(ncu: str, csv_path: str, child: list[str]) -> list[str]:
    sections = [a for name in SECTIONS for a in ("--section", name)]
    metrics = [*METRICS, *map(stall_metric, STALLS_ASKED)]
    return [ncu,
            "--profile-from-start", "off",  # only between start and stop
            "--cache-control", "all",  # flush the caches before each replay
            "--clock-control", "base",  # SM clock locked at base (default)
            *sections, "--metrics", ",".join(metrics),
            "--page", "raw", "--csv",  # every metric by name, a row a kernel
            "--print-units", "base",
            "--log-file", csv_path, *child]
# --8<-- [end:command]


# --8<-- [start:stalls]
#: A warp's state between two instructions it issues, as WarpStateStats
#: reports it: ``..._issue_stalled_<reason>_per_issue_active.ratio`` is the
#: cycles a warp spent in <reason> per instruction issued. The reasons add
#: up to the cycles between two issues, "selected" (issuing) among them.
#: Names and meanings: the Kernel Profiling Guide's warp stall reasons.
STALL_PATTERNS = (
    re.compile(r"smsp__average_warps_issue_stalled_"
               r"([a-z_]+?)_per_issue_active\.ratio"),
    # the same cycles under another name, should a version report only that
    re.compile(r"smsp__average_warp_latency_issue_stalled_([a-z_]+?)\.ratio"),
)
REASONS = {
    "long_scoreboard": "long scoreboard",  # on an L1TEX result: global memory
    "short_scoreboard": "short scoreboard",  # on an MIO result: shared memory
    "barrier": "barrier",  # at a barrier, for the other warps of its block
    "membar": "memory barrier",  # on a memory fence
    "wait": "wait",  # a fixed-latency dependency the compiler scheduled
    "math_pipe_throttle": "math pipe throttle",  # its math pipe is busy
    "mio_throttle": "MIO throttle",  # the MIO instruction queue is full
    "lg_throttle": "LG throttle",  # the local/global memory queue is full
    "tex_throttle": "TEX throttle",
    "not_selected": "not selected",  # eligible, but another warp issued
    "gmma": "GMMA (Hopper only)",  # by its name, warpgroup MMA (wgmma); not in NVIDIA's table
    "selected": "selected (issuing)",  # not a stall: the cycle it issues
    "no_instruction": "no instruction",  # instruction cache miss, branch
    "branch_resolving": "branch resolving",
    "dispatch_stall": "dispatch stall",
    "drain": "drain",  # its stores draining at exit
    "imc_miss": "constant cache miss",
    "sleeping": "sleeping",
    "misc": "misc",
}
#: Rows of the stall table in every run; another reason gets its own row
#: where it holds MINOR % of some kernel's cycles, else joins "other".
ALWAYS = ("long_scoreboard", "short_scoreboard", "barrier", "wait",
          "math_pipe_throttle", "mio_throttle", "lg_throttle",
          "not_selected", "selected")
MINOR = 2.0  # % of a warp's cycles
# --8<-- [end:stalls]

CHILD = "from examples.measuring.ncu_sections import profiled_kernels; profiled_kernels()"


def make_inputs(quick: bool, device) -> dict:
    """The read's tensor and partial sums, and the product's operands (seeded)."""
    torch.manual_seed(0)
    words = ma.QUICK_WORDS if quick or device.type != "cuda" else GPU_WORDS
    side = QUICK_GEMM_SIDE if quick or device.type != "cuda" else GEMM_SIDE
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    x = torch.rand(words, device=device, dtype=torch.float32)
    partials = {name: ma.partials_for(words // s, ma.BLOCK_WORDS, device) for name, s in STRIDES.items()}
    a = torch.randn(side, side, device=device, dtype=dtype)
    b = torch.randn(side, side, device=device, dtype=dtype)
    return {"x": x, "partials": partials, "a": a, "b": b}


def calls_of(inputs: dict) -> dict:
    """One call per kernel, in KERNELS' order: the two reads (the book's Triton kernel) and the GEMM."""
    calls = {name: ma.strided_read(inputs["x"], s, inputs["partials"][name]) for name, s in STRIDES.items()}
    a, b = inputs["a"], inputs["b"]
    calls["GEMM"] = lambda: a @ b
    return calls


def profiled_kernels() -> None:
    """Run under ncu: warm up, then one launch of each kernel with profiling on."""
    from examples.measuring._waiting_child import wait_for_go
    from examples.measuring.nsys_capture import prepare_cuda

    prepare_cuda()  # context and cuBLAS before waiting: no kernels yet
    wait_for_go()  # loaded; the GPU is the parent's until it says go
    quick = "--quick" in sys.argv
    calls = calls_of(make_inputs(quick, torch.device("cuda")))
    for call in calls.values():  # Triton compiles (from the parent's cache), cuBLAS chooses
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for call in calls.values():
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


# --8<-- [start:parse]
#: ncu's units -> (the record's unit, factor): times to us, bytes to MB,
#: clock rates to MHz.
UNITS = {
    "nsecond": ("us", 1e-3), "usecond": ("us", 1.0), "msecond": ("us", 1e3),
    "ns": ("us", 1e-3), "us": ("us", 1.0), "ms": ("us", 1e3),
    "byte": ("MB", 1e-6), "Kbyte": ("MB", 1e-3), "Mbyte": ("MB", 1.0),
    "Gbyte": ("MB", 1e3), "cycle/second": ("MHz", 1e-6), "Hz": ("MHz", 1e-6),
    "cycle/usecond": ("MHz", 1.0), "MHz": ("MHz", 1.0),
    "cycle/nsecond": ("MHz", 1e3), "GHz": ("MHz", 1e3), "%": ("%", 1.0)}
#: Where a page has no row of units: the base units of those asked for.
BASE_UNITS = {"gpu__time_duration.sum": "nsecond",
              "sm__cycles_elapsed.avg.per_second": "cycle/second",
              "dram__bytes_read.sum": "byte", "dram__bytes_write.sum": "byte"}


def unit_factor(unit: str) -> float:
    """The factor to the record's unit (UNITS) of one of ncu's units; a rate
    of cycles ncu writes many ways (``cycle/second``, ``cycle/nsecond``,
    ``Hz``, ``GHz``) goes to MHz whichever it writes. 1 where unknown."""
    if unit in UNITS:
        return UNITS[unit][1]
    per = re.fullmatch(r"(?:cycle)?/(n|u|m|)s(?:ec(?:ond)?)?", unit)
    hz = re.fullmatch(r"([kmg]?)hz", unit.lower())  # ncu 2025.3 writes "hz"
    if per:
        return {"": 1e-6, "m": 1e-3, "u": 1.0, "n": 1e3}[per.group(1)]
    if hz:
        return {"": 1e-6, "k": 1e-3, "m": 1.0, "g": 1e3}[hz.group(1)]
    return 1.0


def parse_raw(text: str) -> list[dict[str, float | str]]:
    """``ncu --page raw --csv`` -> a dict per kernel, in launch order: its
    name and every numeric metric, converted by UNITS where it can be.

    The page is a header (ID, ..., Kernel Name, then a column per metric),
    a row of units (no ID) and a row per kernel; ncu's own lines
    (``==PROF==``) are not quoted and are dropped.
    """
    lines = (line for line in text.splitlines() if line.startswith('"'))
    rows = list(csv.reader(lines))
    header = next((r for r in rows if "ID" in r and "Kernel Name" in r), None)
    if header is None:
        raise RuntimeError("ncu's output holds no table of raw metrics "
                           "(no ID and Kernel Name columns)")
    at, name_at = header.index("ID"), header.index("Kernel Name")
    units: list[str] = [""] * len(header)
    kernels = []
    for row in rows[rows.index(header) + 1:]:
        if len(row) != len(header) or row == header:
            continue
        if not row[at].strip():
            units = row
            continue
        kernel: dict[str, float | str] = {"id": int(row[at]),
                                          "name": row[name_at]}
        for column, unit, cell in zip(header, units, row):
            try:
                value = float(cell.replace(",", ""))
            except ValueError:
                continue  # n/a, a launch's grid "(256, 1, 1)", a name
            unit = unit.strip() or BASE_UNITS.get(column, "")
            kernel[column] = value * unit_factor(unit)
            kernel[f"{column} unit"] = unit  # kept for a note where it is not understood
        kernels.append(kernel)
    return sorted(kernels, key=lambda k: k["id"])


def stall_cycles(kernel: dict) -> dict[str, float]:
    """Cycles per issued instruction by reason (REASONS' keys; one it does
    not know keeps ncu's name), from the first of STALL_PATTERNS that the
    kernel's metrics match. A sub-reason (``long_scoreboard_pipe_l1tex``)
    is inside its reason already: left out."""
    for pattern in STALL_PATTERNS:
        found = {}
        for column, value in kernel.items():
            m = pattern.fullmatch(column)
            if not m or m.group(1).endswith("not_issued"):
                continue
            reason = m.group(1)
            if reason not in REASONS and any(
                    reason.startswith(r + "_") for r in REASONS):
                continue
            found[reason] = float(value)
        if found:
            return found
    return {}


def stall_shares(cycles: dict[str, float]) -> dict[str, float]:
    """Each reason's share (%) of a warp's cycles between two issues."""
    total = sum(cycles.values())
    if total <= 0:
        return {}
    return {reason: 100.0 * c / total for reason, c in cycles.items()}
# --8<-- [end:parse]


def by_kernel(kernels: list[dict]) -> dict[str, dict]:
    """KERNELS -> its ncu row: the two reads are the Triton kernel's two launches, in
    order; the GEMM is the longest of the rest (cuBLAS may add a small kernel)."""
    reads = [k for k in kernels if "strided_sum" in str(k["name"])]
    rest = [k for k in kernels if "strided_sum" not in str(k["name"])]
    if len(reads) != 2 or not rest:
        names = ", ".join(str(k["name"])[:40] for k in kernels) or "none"
        raise RuntimeError(f"ncu profiled {len(kernels)} kernels ({names}), not two reads and a GEMM")
    gemm = max(rest, key=lambda k: k.get("gpu__time_duration.sum", 0.0))
    return {"coalesced read": reads[0], "stride-8 read": reads[1], "GEMM": gemm}


def find_ncu() -> str:
    from examples.measuring.ncu_capture import find_ncu as find  # the book's one search for ncu

    try:
        return find()
    except RuntimeError as exc:
        raise Unavailable(f"{exc}: install Nsight Compute, or put ncu on the PATH") from None


def refusal(output: str) -> str | None:
    """ncu's reason for reading no counters, in one line, or None."""
    if "ERR_NVGPUCTRPERM" in output:
        return ("ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM): run as root or "
                "allow it, https://developer.nvidia.com/ERR_NVGPUCTRPERM")
    return None


def check(lab, inputs: dict, calls: dict) -> None:
    """Each kernel against float64 (which also compiles the Triton kernel, once)."""
    x = inputs["x"]
    for name, stride in STRIDES.items():
        partial = inputs["partials"][name]
        ma.check_call(lab, f"{name}: sum of the words read", calls[name], partial,
                      ma.exact_sum(x[::stride]), partial.numel())
    a, b, rows = inputs["a"], inputs["b"], 64  # a float64 reference of 64 rows
    lab.check("GEMM: first 64 rows", calls["GEMM"]()[:rows], a[:rows].double() @ b.double(),
              tolerance=1e-2)


def time_each(lab, calls: dict) -> dict:
    """The book's time of each kernel: its own duration, L2 flushed before each sample."""
    return {name: lab.time(call, case={"kernel": name}, metric="book_time", unit="us",
                           timer="kernel", flush_l2=True)
            for name, call in calls.items()}


def measure(lab) -> None:
    quick = lab.quick or not lab.cuda
    ncu = find_ncu() if lab.cuda else None  # before any work: without ncu, one line
    inputs = make_inputs(quick, lab.device)
    calls = calls_of(inputs)
    if not lab.cuda:
        check(lab, inputs, calls)
        time_each(lab, calls)
        print("[ncu_sections] no CUDA GPU: the Nsight Compute capture is skipped", file=sys.stderr)
        lab.note("ncu", "not run: no CUDA GPU")
        return
    book: dict = {}
    asked: dict = {}

    def while_loading() -> None:  # ncu's version (a start-up of its own) and the checks
        asked["version"] = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip()
        check(lab, inputs, calls)

    clock = "base"
    # The version and the checks run while the child loads; the timings once it waits, idle.
    cmd, text, failure = capture(ncu, clock, quick, while_loading,
                                 lambda: book.update(time_each(lab, calls)))
    del inputs, calls
    if failure and "clock" in failure.lower():  # a machine that refuses to lock the clocks
        clock = "none"
        cmd, text, failure = capture(ncu, clock, quick, lambda: None, lambda: None)
    version = asked.get("version", "")
    if failure:
        raise RuntimeError(failure)
    kernels = by_kernel(parse_raw(text))
    keep(lab, kernels, book, clock)
    lab.note("ncu", f"{version.splitlines()[-1] if version else '?'}; {' '.join(cmd)}")


def capture(ncu: str, clock: str, quick: bool, while_loading, while_waiting
            ) -> tuple[list[str], str, str | None]:
    """One ncu run of the child: ``while_loading()`` runs here as ncu, Python, torch
    and the child's CUDA context load, ``while_waiting()`` once the child waits, idle.
    Returns the command as shown, the raw CSV, and why it failed (or None)."""
    from examples.measuring._waiting_child import WaitingChild

    with tempfile.TemporaryDirectory() as tmp:
        log = str(Path(tmp, "ncu.csv"))
        child_cmd = [sys.executable, "-c", CHILD] + (["--quick"] if quick else [])
        cmd = ncu_command(ncu, log, child_cmd)
        cmd[cmd.index("--clock-control") + 1] = clock
        with WaitingChild(cmd) as child:
            while_loading()
            child.ready(timeout=300)
            while_waiting()
            torch.cuda.synchronize()
            torch.cuda.empty_cache()  # the checks' float64 copies, freed before the child runs
            done = child.go(timeout=420)
        text = Path(log).read_text() if Path(log).exists() else ""
        shown = ["ncu" if a == ncu else "ncu.csv" if a == log else a for a in cmd[:-len(child_cmd)]]
    why = refusal("\n".join([done.stdout or "", done.stderr or "", text]))
    if why:
        raise Unavailable(why)
    if done.returncode != 0 or not text:
        tail = (done.stderr or done.stdout or "").strip().splitlines()[-3:]
        return shown, text, f"ncu exited with {done.returncode}: {' | '.join(tail)}"
    return shown, text, None


def keep(lab, kernels: dict[str, dict], book: dict, clock: str = "base") -> None:
    """The record: each kernel's sections' figures, and the stall table (reasons x kernels)."""
    locked = "SM clock locked at base" if clock == "base" else "clocks not locked"
    method = f"Nsight Compute: one launch, replayed, caches flushed, {locked}"
    for name, k in kernels.items():
        case = {"kernel": name}
        for ncu_name, (metric, unit) in METRICS.items():
            if metric == "sm_clock" and not 100 <= k.get(ncu_name, 0) <= 5000:
                lab.note(f"SM clock, {name}", f"not kept: {k.get(ncu_name)} is no clock in MHz "
                                               f"(ncu's unit: {k.get(ncu_name + ' unit')!r})")
            elif ncu_name in k and metric not in ("load_sectors", "load_requests"):
                lab.keep_samples([k[ncu_name]], case=case, metric=metric, unit=unit, method=method)
        sectors = k.get("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")
        requests = k.get("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")
        if sectors is not None and requests:  # a GEMM loading through TMA makes few or none
            lab.keep_samples([sectors / requests], case=case, metric="sectors_per_request", unit="",
                             method=method)
        if "gpu__time_duration.sum" in k:
            lab.value(case=case, metric="ncu_over_book", unit="x",
                      value=k["gpu__time_duration.sum"] / book[name].median)
        cycles = stall_cycles(k)
        if cycles:
            lab.keep_samples([sum(cycles.values())], case=case, metric="cycles_per_issue", unit="cycles",
                             method=method)
        top = sorted(stall_shares(cycles).items(), key=lambda kv: -kv[1])[:3]
        lab.note(f"kernel, {name}", str(k["name"])[:120])
        lab.note(f"top stalls, {name}",
                 ", ".join(f"{REASONS.get(r, r)} {s:.0f} %" for r, s in top) or "none reported")
    shares = {name: stall_shares(stall_cycles(k)) for name, k in kernels.items()}
    reasons = sorted({r for s in shares.values() for r in s})
    rows = [r for r in reasons if r in ALWAYS or max(s.get(r, 0.0) for s in shares.values()) >= MINOR]
    rows.sort(key=lambda r: ALWAYS.index(r) if r in ALWAYS else len(ALWAYS))
    for reason in rows:
        for name, s in shares.items():
            if s:
                lab.value(case={"stall": REASONS.get(reason, reason)}, metric=SHARE[name], unit="%",
                          value=s.get(reason, 0.0))
    if len(rows) < len(reasons):
        for name, s in shares.items():
            if s:
                lab.value(case={"stall": "other reasons"}, metric=SHARE[name], unit="%",
                          value=sum(v for r, v in s.items() if r not in rows))


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
