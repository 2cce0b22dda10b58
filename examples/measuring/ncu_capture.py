"""One real Nsight Compute capture: why a small matrix-vector product is slow.

Chapter 9's decode step reads 99 % of its bytes in matrix-vector products,
and their durations say that the 4096 x 4096 matrix streams at a smaller
fraction of the copy bandwidth than the 28672 x 4096 one. Nsight Compute
(``ncu``) says why, from the hardware's counters. A child Python process
makes one weight of each shape and multiplies a vector by it through cuBLAS
(``F.linear``) and through the book's Triton kernel
(:func:`examples.capstone.fused.matvec`); profiling is switched on only
around those four products (``cudaProfilerStart``/``Stop`` with
``--profile-from-start off``), after the warm-up that autotunes. The child
starts first and waits, loaded, while this process checks the two kernels
(``examples/measuring/_waiting_child.py``): the profiler's start overlaps
the checks, never the GPU work. ``ncu``
replays each launch with the caches flushed and the clocks left as they are,
and reports, per kernel, its duration, the bytes it read from DRAM, DRAM
throughput as a percentage of peak, the achieved occupancy, the grid and the
registers per thread.
"""
from __future__ import annotations

import csv
import glob
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REQUIRES_CUDA = True

#: Weight shapes [out, in]: the output projection and the gate/up matrix.
CAPTURED = {"wo 4096x4096": (4096, 4096), "w13 28672x4096": (28672, 4096)}

# --8<-- [start:metrics]
#: ncu metric -> (the record's metric, unit, factor from ncu's base unit)
METRICS = {
    "gpu__time_duration.sum": ("duration", "us", 1e-3),  # ns
    "dram__bytes_read.sum": ("dram_read", "MB", 1e-6),  # bytes
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("dram_throughput", "%", 1.0),
    "sm__warps_active.avg.pct_of_peak_sustained_active": ("achieved_occupancy", "%", 1.0),
    "launch__grid_size": ("grid_size", "", 1.0),
    "launch__registers_per_thread": ("registers_per_thread", "", 1.0),
}


def ncu_command(ncu: str, csv_path: str, child: list[str]) -> list[str]:
    return [ncu, "--profile-from-start", "off",  # only between profiler start/stop
            "--cache-control", "all",  # flush the caches before each replay
            "--clock-control", "none",  # leave the clocks as the GPU sets them
            "--metrics", ",".join(METRICS), "--print-units", "base",
            "--csv", "--log-file", csv_path, *child]
# --8<-- [end:metrics]


CHILD = "from examples.measuring.ncu_capture import profiled_products; profiled_products()"


def profiled_products() -> None:
    """Run under ncu: warm up, then the four products with profiling on."""
    import torch.nn.functional as F

    from examples.capstone import fused
    from examples.measuring._waiting_child import wait_for_go
    from examples.measuring.nsys_capture import prepare_cuda

    prepare_cuda()  # context and cuBLAS before waiting: no kernels yet
    wait_for_go()  # loaded; the GPU's kernels are the parent's until it says go
    torch.manual_seed(0)
    operands = []
    for n, k in CAPTURED.values():
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        F.linear(x, w), fused.matvec(x, w)  # cuBLAS's heuristics, Triton's autotuner
        operands.append((x, w))
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for x, w in operands:
        F.linear(x, w)
        fused.matvec(x, w)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def parse(text: str) -> list[dict]:
    """ncu's --csv rows (one per kernel and metric) -> one dict per kernel, in launch order."""
    lines = [line for line in text.splitlines() if line.startswith('"')]  # drop ==PROF== lines
    kernels: dict[str, dict] = {}
    for row in csv.DictReader(lines):
        metric = row.get("Metric Name")
        if metric not in METRICS:
            continue
        kernel = kernels.setdefault(row["ID"], {"name": row["Kernel Name"]})
        name, _, factor = METRICS[metric]
        kernel[name] = float(row["Metric Value"].replace(",", "")) * factor
    return [kernels[i] for i in sorted(kernels, key=int)]


def by_product(kernels: list[dict]) -> list[tuple[str, str, dict]]:
    """(shape, 'cuBLAS' or 'book', figures) in the order profiled_products launched them.

    The book's kernel is named ``_matvec_kernel``; whatever ran before it in the
    same product is cuBLAS's, which may be two kernels (a split-K product and its
    reduction): their durations and bytes are added, and the counters that are
    rates are the longest kernel's.
    """
    rows, shapes, pending = [], iter(CAPTURED), []
    for kernel in kernels:
        if "_matvec_kernel" in kernel["name"]:
            if not pending:
                break
            shape = next(shapes, None)
            if shape is None:
                break
            rows += [(shape, "cuBLAS", combined(pending)), (shape, "book", combined([kernel]))]
            pending = []
        else:
            pending.append(kernel)
    if pending or len(rows) != 2 * len(CAPTURED):
        raise RuntimeError(f"ncu profiled {len(kernels)} kernels, not cuBLAS's and then the book's "
                           f"for each of {len(CAPTURED)} shapes")
    return rows


def combined(group: list[dict]) -> dict:
    """One product's kernels as one row: times and bytes added, rates of the longest."""
    main = max(group, key=lambda k: k.get("duration", 0.0))
    row = dict(main, kernels=len(group), name=" + ".join(k["name"][:60] for k in group))
    for additive in ("duration", "dram_read"):
        if all(additive in k for k in group):
            row[additive] = sum(k[additive] for k in group)
    return row


def find_ncu() -> str:
    found = shutil.which("ncu") or next(iter(sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))), None)
    if not found:
        raise RuntimeError("Nsight Compute (ncu) is not installed on this machine")
    return found


def measure(lab) -> None:
    import torch.nn.functional as F

    from examples.capstone import fused
    from examples.measuring._waiting_child import WaitingChild

    ncu = find_ncu()
    with tempfile.TemporaryDirectory() as tmp:
        log = str(Path(tmp, "ncu.csv"))
        cmd = ncu_command(ncu, log, [sys.executable, "-c", CHILD])
        # The child starts now: ncu, Python, torch and its CUDA context load
        # while this process checks the kernels; it launches kernels only once
        # told to go.
        with WaitingChild(cmd) as child:
            version = subprocess.run([ncu, "--version"], capture_output=True,
                                     text=True).stdout.strip()
            for shape, (n, k) in CAPTURED.items():  # the two kernels compute the product
                w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
                exact = x.double() @ w.double().T
                lab.check(f"cuBLAS, {shape}", F.linear(x, w), exact, tolerance=1e-2)
                lab.check(f"book matvec, {shape}", fused.matvec(x, w), exact, tolerance=1e-2)
                del w
            torch.cuda.synchronize()
            done = child.go(timeout=480)
        if done.returncode != 0 or not Path(log).exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"ncu exited with {done.returncode}: {' | '.join(tail)}")
        kernels = parse(Path(log).read_text())
    method = "Nsight Compute: one launch, replayed, caches flushed, clocks not locked"
    for shape, library, kernel in by_product(kernels):
        case = {"shape": shape, "kernel": library}
        for name, unit, _ in METRICS.values():
            if name in kernel:
                lab.keep_samples([kernel[name]], case=case, metric=name, unit=unit, method=method)
        lab.keep_samples([kernel["kernels"]], case=case, metric="kernels", unit="", method=method)
        if "dram_read" in kernel and kernel.get("duration"):
            lab.keep_samples([kernel["dram_read"] / kernel["duration"] * 1e3], case=case,
                             metric="dram_bandwidth", unit="GB/s", method=method)
        lab.note(f"kernels, {library}, {shape}", kernel["name"][:130])
    shown = ["ncu" if a == ncu else "ncu.csv" if a == log else a for a in cmd[:-3]]
    lab.note("ncu", f"{version.splitlines()[-1] if version else '?'}; {' '.join(shown)}")


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
