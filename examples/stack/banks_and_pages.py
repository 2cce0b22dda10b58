"""Shared-memory banks and the TLB's reach: two costs a memory access can pay that no byte count shows.

**Banks.** Shared memory has 32 banks, each 4 bytes wide; a warp's access is served in one pass
when its 32 addresses fall in 32 different banks, and in one pass per distinct word of the
busiest bank otherwise (CUDA C++ Programming Guide, "Shared Memory" under compute capability 5.x and later,
https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html; the Hopper tuning guide,
https://docs.nvidia.com/cuda/hopper-tuning-guide/index.html, changes the capacity, not this rule). A
CUDA kernel transposes a 16384 x 16384 float32 matrix (1 GiB in, 1 GiB out) through a 32 x 32
shared-memory tile, three ways: a plain tile, whose column read puts all 32 lanes in one bank
(32 passes); a tile padded to 33 columns; and a tile whose column index is XORed with its row
(a swizzle). A tiled copy without shared memory is the yardstick (the design of Mark Harris's
"An Efficient Matrix Transpose in CUDA C/C++", NVIDIA technical blog, 2013). Each is checked
against ``x.t()`` (exactly: a transpose moves bits), then all four are timed by the GPU's own
kernel durations in interleaved rounds (``lab.compare``), with ``speedup`` over the plain tile
paired round by round, and ``bandwidth`` (bytes read plus written over time) and ``of_copy``.
Where Nsight Compute is installed, a child process profiles one launch of each at 8192 x 8192
and keeps the bank conflicts, shared-memory wavefronts and load instructions it counts.

**Pages.** A pointer chase: one thread reads a 64-bit word, which holds the address of the next,
visiting one 128-byte line in each 2 MiB region of a footprint, in a random cyclic order, for
footprints of 4 MiB to 8 GiB. The lines all fit in the L2 and are read with ``ld.global.cg``
(L2 only, past the L1), so the data come from the L2 at every footprint; what grows is the
number of pages whose translations the chase needs. Each launch first walks the whole cycle
once (untimed: the TLBs warm) and then times 4096 hops with the GPU's ``%globaltimer``, so the
figure is ``latency`` per hop in ns, one sample per launch, the footprints interleaved in
shuffled rounds. A chase measures latency: each load waits for the one before, so a miss's
page walk cannot hide behind other loads, as it would among independent gathers.

Cost on an H200: 6 to 8 s a run: the CUDA build (nvcc on a source that includes only
``cuda_runtime.h``; 1.3 to 1.8 s, cold each lab run), the transposes and their checks,
the chases, and where ncu is present its child's four profiled launches (the child starts
before the build, loads during it and waits). GPU memory at the peak: 8.9 GiB (the
chase's 8 GiB buffer; the transposes' 3 GiB are freed before it). On the CPU (``--quick``) no CUDA is built:
the tile layouts' index maths are checked on a small matrix and their bank conflicts counted;
no figure of a GPU is produced.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

TILE = 32  # the tile's side: one warp's width
ROWS = 8  # threads per tile column: a block of 32 x 8 threads moves a tile in 4 steps
BANKS = 32  # 4-byte banks (CUDA C++ Programming Guide, "Shared Memory")
LAYOUTS = {"naive": 0, "padded": 1, "swizzled": 2}
GPU_SIDE = 16384  # 1 GiB of float32: 20 times the L2
NCU_SIDE = 8192  # what the profiled child transposes: one launch each, replayed by ncu
PAGE = 2 << 20  # bytes: the large page the microbenchmark papers measured; a stride, not an assumption checked here
LINE = 128
CHASE_BYTES = 8 << 30  # the largest footprint: fits a 12 GiB card
HOPS = 4096  # timed hops per launch
CHASE_ROUNDS = 12

# --8<-- [start:layouts]
def tile_column(layout: str, row, col):
    """Where element (row, col) of a 32 x 32 tile is stored in its row: as is ('naive', and
    'padded', whose rows are 33 words long), or XORed with its row ('swizzled'), which permutes
    each row's 32 columns and so keeps the tile 32 x 32."""
    return col ^ row if layout == "swizzled" else col


def word_address(layout: str, row, col):
    """The 4-byte word of shared memory that holds element (row, col)."""
    width = TILE + 1 if layout == "padded" else TILE
    return row * width + tile_column(layout, row, col)


def conflict_ways(layout: str, phase: str) -> int:
    """The most lanes of one warp in one bank (distinct words), worst over the tile's steps:
    the number of passes the warp's access takes. 'write': lane c stores element (r, c) of a
    row of the input; 'read': lane c loads element (c, r), a column, to store a row of the output."""
    worst = 0
    for r in range(TILE):
        lanes = range(TILE)
        words = [word_address(layout, r, c) if phase == "write" else word_address(layout, c, r) for c in lanes]
        per_bank: dict[int, set[int]] = {}
        for w in words:
            per_bank.setdefault(w % BANKS, set()).add(w)
        worst = max(worst, max(len(s) for s in per_bank.values()))
    return worst
# --8<-- [end:layouts]


def emulate_transpose(x: torch.Tensor, layout: str) -> torch.Tensor:
    """The kernel's index maths in torch, tile by tile: write each tile into a flat 'shared
    memory' at word_address(row, col), read it back by columns; the CPU's check of the layouts."""
    n = x.shape[0]
    out = torch.full_like(x, float("nan"))
    r = torch.arange(TILE).view(-1, 1).expand(TILE, TILE)
    c = torch.arange(TILE).view(1, -1).expand(TILE, TILE)
    write_at = word_address(layout, r, c).reshape(-1)
    read_at = word_address(layout, c, r).reshape(-1)  # lane c of step r reads element (c, r)
    shared = torch.empty(TILE * (TILE + 1), dtype=x.dtype)
    for bi in range(0, n, TILE):
        for bj in range(0, n, TILE):
            shared[write_at] = x[bi:bi + TILE, bj:bj + TILE].reshape(-1)
            out[bj:bj + TILE, bi:bi + TILE] = shared[read_at].view(TILE, TILE)
    return out


# --8<-- [start:cuda]
CUDA = r"""
#include <cuda_runtime.h>
#include <cstdint>
constexpr int TILE = 32, ROWS = 8;

// LAYOUT 0: tile[32][32]; 1: tile[32][33]; 2: tile[32][32], column XOR row.
template <int LAYOUT>
__device__ __forceinline__ int col_of(int row, int col) { return LAYOUT == 2 ? (col ^ row) : col; }

template <int LAYOUT>
__global__ void transpose_tile(const float* __restrict__ in, float* __restrict__ out, int n) {
  __shared__ float tile[TILE][TILE + (LAYOUT == 1)];
  int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += ROWS) {  // a row of the input: coalesced; lanes in 32 banks
    int r = threadIdx.y + j;
    tile[r][col_of<LAYOUT>(r, threadIdx.x)] = in[(size_t)(y + j) * n + x];
  }
  __syncthreads();
  x = blockIdx.y * TILE + threadIdx.x; y = blockIdx.x * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += ROWS) {  // a column of the tile: lane c reads row c
    int r = threadIdx.y + j;
    out[(size_t)(y + j) * n + x] = tile[threadIdx.x][col_of<LAYOUT>(threadIdx.x, r)];
  }
}

__global__ void copy_tile(const float* __restrict__ in, float* __restrict__ out, int n) {
  int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += ROWS)
    out[(size_t)(y + j) * n + x] = in[(size_t)(y + j) * n + x];
}

// The chase: one thread; `warm` hops untimed, then `hops` timed by the GPU's ns clock.
__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}
__global__ void chase(const long long* __restrict__ next, long long start, int warm, int hops,
                      long long* end, unsigned long long* ns) {
  long long at = start;
  for (int i = 0; i < warm; ++i) at = __ldcg(next + at);
  uint64_t t0 = now_ns();
  for (int i = 0; i < hops; ++i) at = __ldcg(next + at);
  uint64_t t1 = now_ns();  // the last load may still be in flight: one hop in 4096
  *end = at;
  *ns = t1 - t0;
}

extern "C" int book_transpose(const float* in, float* out, int n, int layout, void* stream) {
  dim3 grid(n / TILE, n / TILE), block(TILE, ROWS);
  cudaStream_t s = (cudaStream_t)stream;
  if (layout == 0) transpose_tile<0><<<grid, block, 0, s>>>(in, out, n);
  else if (layout == 1) transpose_tile<1><<<grid, block, 0, s>>>(in, out, n);
  else if (layout == 2) transpose_tile<2><<<grid, block, 0, s>>>(in, out, n);
  else copy_tile<<<grid, block, 0, s>>>(in, out, n);
  return (int)cudaGetLastError();
}

extern "C" int book_chase(const long long* next, long long start, int warm, int hops,
                          long long* end, unsigned long long* ns, void* stream) {
  chase<<<1, 1, 0, (cudaStream_t)stream>>>(next, start, warm, hops, end, ns);
  return (int)cudaGetLastError();
}
"""
# --8<-- [end:cuda]
COPY = 3  # book_transpose's layout number for the plain copy


def library_path() -> tuple[str, Path]:
    """The library's name and its build folder: under ``TORCH_EXTENSIONS_DIR`` (a new folder each
    lab run, so a run's build is cold), else torch's cache, where a second run finds the first's."""
    from torch.utils.cpp_extension import get_default_build_root

    name = "book_banks_" + hashlib.sha256((CUDA + torch.__version__).encode()).hexdigest()[:12]
    return name, Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root(), name)


def build() -> tuple[str, float]:
    """Compile the CUDA source into a shared library; its path and the seconds it took. No torch
    header is included anywhere (the C++ file is empty), so nvcc parses only cuda_runtime.h."""
    from torch.utils.cpp_extension import load_inline

    name, folder = library_path()
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    path = load_inline(name=name, cpp_sources=[""], cuda_sources=[CUDA], is_python_module=False,
                       no_implicit_headers=True, build_directory=str(folder), extra_cflags=["-O1"],
                       extra_cuda_cflags=["-O3"])
    return str(path), time.perf_counter() - start


class Kernels:
    """The library's two entry points, on torch tensors and torch's current stream."""

    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)
        self.lib.book_transpose.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                            ctypes.c_void_p]
        self.lib.book_chase.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_int,
                                        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]

    @staticmethod
    def _ok(code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{what}: CUDA error {code} at launch")

    def transpose(self, x: torch.Tensor, out: torch.Tensor, layout: int) -> None:
        n = x.shape[0]
        if x.shape != (n, n) or n % TILE or not (x.is_contiguous() and out.is_contiguous()):
            raise ValueError(f"transpose: a contiguous square matrix whose side is a multiple of {TILE}")
        self._ok(self.lib.book_transpose(x.data_ptr(), out.data_ptr(), n, layout,
                                         torch.cuda.current_stream().cuda_stream), "transpose")

    def chase(self, buffer: torch.Tensor, start: int, warm: int, hops: int, end: torch.Tensor,
              ns: torch.Tensor) -> None:
        self._ok(self.lib.book_chase(buffer.data_ptr(), start, warm, hops, end.data_ptr(), ns.data_ptr(),
                                     torch.cuda.current_stream().cuda_stream), "chase")


def quick_checks(lab) -> None:
    """What the CPU can check: each layout transposes, and its bank conflicts by the index maths."""
    x = torch.randn(3 * TILE, 3 * TILE, dtype=torch.float64)
    for layout in LAYOUTS:
        lab.check(f"{layout} tile, index maths on the CPU: = x.t()", emulate_transpose(x, layout), x.t(), tolerance=0)
        # A swizzle is a permutation of each row's columns: no two elements share a word.
        words = {word_address(layout, r, c) for r in range(TILE) for c in range(TILE)}
        if len(words) != TILE * TILE:
            raise AssertionError(f"{layout}: two elements of the tile share a word")
        for phase in ("write", "read"):
            lab.value(case={"layout": layout, "phase": phase}, metric="conflict_ways", unit="",
                      value=conflict_ways(layout, phase))


# --8<-- [start:transpose]
def measure_transposes(lab, kernels: Kernels) -> None:
    n = GPU_SIDE
    x = torch.randn(n, n, device=lab.device)
    out = torch.empty_like(x)
    expected = x.t().contiguous()
    for layout, number in {**LAYOUTS, "copy": COPY}.items():
        out.fill_(float("nan"))  # an element the kernel misses stays NaN: the check fails
        kernels.transpose(x, out, number)
        lab.check(f"{layout}: every element", out, x if layout == "copy" else expected, tolerance=0)
    del expected
    calls = {name: (lambda number=number: kernels.transpose(x, out, number))
             for name, number in {"copy": COPY, **LAYOUTS}.items()}
    times = lab.compare(calls, case={"n": n}, key="layout", baseline="naive", timer="kernel")
    moved = 2 * 4 * n * n  # each element read once and written once
    for name, t in times.items():
        lab.value(case={"n": n, "layout": name}, metric="bandwidth", unit="GB/s", value=moved / t.median / 1e3)
        lab.value(case={"n": n, "layout": name}, metric="of_copy", unit="x",
                  value=times["copy"].median / t.median)
# --8<-- [end:transpose]


# --8<-- [start:chase]
def footprints(limit: int = CHASE_BYTES) -> list[int]:
    """4 MiB to ``limit``: each power of two, and 1.5 times it, for a knee's place."""
    sizes, size = [], 2 * PAGE
    while size <= limit:
        sizes += [size] + ([size * 3 // 2] if size * 3 // 2 <= limit else [])
        size *= 2
    return sizes


def chain(pages: int, slot: int, rng: random.Random) -> list[int]:
    """Word indices (8-byte words) of one line in each of ``pages`` 2 MiB regions, in a random
    cyclic order: each holds the next's index. The line within a region differs by region (not
    every address the same modulo 2 MiB: the L2's sets) and by footprint (``slot``), so that every
    footprint's chain has lines of its own in one buffer."""
    order = list(range(pages))
    rng.shuffle(order)
    lines = PAGE // LINE
    return [p * (PAGE // 8) + ((p * 97 + slot) % lines) * (LINE // 8) for p in order]


def measure_chase(lab, kernels: Kernels) -> None:
    buffer = torch.empty(CHASE_BYTES // 8, device=lab.device, dtype=torch.int64)
    rng = random.Random(int.from_bytes(os.urandom(8), "little"))  # a fresh order every run
    sizes = footprints()
    chains = {}
    for slot, size in enumerate(sizes):
        words = chain(size // PAGE, slot, rng)
        at = torch.tensor(words, device=lab.device)
        buffer[at] = torch.roll(at, -1)  # each line holds the next line's index; the last, the first's
        chains[size] = words
    end = torch.empty(1, device=lab.device, dtype=torch.int64)
    ns = torch.empty(1, device=lab.device, dtype=torch.int64)
    # A chase that followed any other path ends elsewhere; HOPS + 1 hops, so that no cycle (a
    # power of two long) ends where it began, which a kernel that never moved would pass.
    for size, words in chains.items():
        end.fill_(-1)
        kernels.chase(buffer, words[0], len(words), HOPS + 1, end, ns)
        lab.check(f"chase over {size >> 20} MiB ends where the chain says", end.double(),
                  torch.tensor([words[(len(words) + HOPS + 1) % len(words)]], dtype=torch.float64,
                               device=lab.device), tolerance=0)
    # Rounds: every footprint once, in a new shuffled order each round; the first is a warm-up.
    samples = torch.empty(CHASE_ROUNDS + 1, len(sizes), device=lab.device, dtype=torch.int64)
    for r in range(CHASE_ROUNDS + 1):
        order = list(range(len(sizes)))
        rng.shuffle(order)
        for k in order:
            words = chains[sizes[k]]
            kernels.chase(buffer, words[0], len(words), HOPS, end, samples[r, k:k + 1])
    lab.synchronize()
    per_hop = (samples[1:].double() / HOPS).cpu()
    for k, size in enumerate(sizes):
        lab.keep_samples(per_hop[:, k].tolist(), case={"MiB": size >> 20, "pages": size // PAGE},
                         metric="latency", unit="ns", method="%globaltimer in the kernel, shuffled rounds",
                         warmup=1, inner=HOPS)
# --8<-- [end:chase]


# --8<-- [start:ncu]
NCU_METRICS = {
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "conflicts_load",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "conflicts_store",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "wavefronts_load",
    "smsp__sass_inst_executed_op_shared_ld.sum": "instructions_load",
}


def profiled_transposes(path: str) -> None:
    """Run under ncu (a child process): one launch of each layout, profiling on around them."""
    from examples.measuring._waiting_child import wait_for_go

    # The context before waiting, and no kernel while the parent measures. Not cuBLAS, which
    # nothing here uses: loading it under ncu would delay the parent's timings for nothing.
    torch.cuda.init()
    torch.cuda.synchronize()
    wait_for_go()  # the parent has built the library and finished with the GPU
    kernels = Kernels(path)
    x = torch.randn(NCU_SIDE, NCU_SIDE, device="cuda")
    out = torch.empty_like(x)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for number in (COPY, *LAYOUTS.values()):
        kernels.transpose(x, out, number)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
# --8<-- [end:ncu]


def ncu_rows(text: str) -> list[dict[str, float]]:
    """ncu's --csv rows -> one dict per kernel (metric -> value), in launch order."""
    import csv

    lines = [line for line in text.splitlines() if line.startswith('"')]
    kernels: dict[str, dict[str, float]] = {}
    for row in csv.DictReader(lines):
        if row.get("Metric Name") in NCU_METRICS:
            kernels.setdefault(row["ID"], {})[NCU_METRICS[row["Metric Name"]]] = float(
                row["Metric Value"].replace(",", ""))
    return [kernels[i] for i in sorted(kernels, key=int)]


def start_ncu_child(path: str):
    """The profiled child, started now (it loads while the parent measures); None without ncu."""
    from examples.measuring._waiting_child import WaitingChild
    from examples.measuring.ncu_capture import find_ncu

    try:
        ncu = find_ncu()
    except RuntimeError:
        return None, None
    log = tempfile.NamedTemporaryFile(suffix=".csv", delete=False).name
    child = [sys.executable, "-c",
             f"from examples.stack.banks_and_pages import profiled_transposes; profiled_transposes({path!r})"]
    cmd = [ncu, "--profile-from-start", "off", "--cache-control", "all", "--clock-control", "none",
           "--metrics", ",".join(NCU_METRICS), "--print-units", "base", "--csv", "--log-file", log, *child]
    return WaitingChild(cmd), log


def keep_ncu(lab, child, log: str) -> None:
    with child:
        done = child.go(timeout=300)
    text = Path(log).read_text() if os.path.exists(log) else ""
    Path(log).unlink(missing_ok=True)
    rows = ncu_rows(text)
    if done.returncode != 0 or len(rows) != 1 + len(LAYOUTS):
        tail = " | ".join((done.stderr or done.stdout or "").strip().splitlines()[-2:])
        lab.note("Nsight Compute", f"no counts: ncu exited with {done.returncode}, {len(rows)} kernels ({tail})")
        return
    method = "Nsight Compute: one launch, replayed, caches flushed, clocks not locked"
    for name, row in zip(("copy", *LAYOUTS), rows):
        for metric, value in row.items():
            lab.keep_samples([value], case={"n": NCU_SIDE, "layout": name}, metric=metric, unit="", method=method)
    lab.note("Nsight Compute", f"one launch of each kernel at {NCU_SIDE} x {NCU_SIDE}")


def measure(lab) -> None:
    quick_checks(lab)
    if not lab.cuda:
        lab.note("skipped on the CPU", "the CUDA kernels (transposes, chase, ncu): they need a GPU and nvcc")
        return
    name, folder = library_path()
    # The profiled child starts first: ncu, Python, torch and its CUDA context load during the
    # build; it waits, launching nothing, until the parent has finished with the GPU.
    child, log = start_ncu_child(str(folder / f"{name}.so"))
    if child is None:
        lab.note("Nsight Compute", "skipped: ncu is not installed on this machine")
    try:
        path, seconds = build()
        lab.note("CUDA build", f"{seconds:.1f} s (nvcc and the host compiler; no torch header)")
        kernels = Kernels(path)
        if child is not None:
            child.ready(timeout=120)  # its start-up (host work, a context) stays out of the timings
        measure_transposes(lab, kernels)
        torch.cuda.empty_cache()  # the transposes' 3 GiB back before the chase's 8 GiB
        measure_chase(lab, kernels)
        lab.synchronize()
        torch.cuda.empty_cache()  # the chase's 8 GiB back before the profiled child allocates
    except BaseException:
        if child is not None:
            child.__exit__(None, None, None)
        raise
    if child is not None:
        keep_ncu(lab, child, log)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
