"""From a naïve kernel to cuBLAS, on Hopper: one GEMM written step by step.

Simon Boehm's worklog (siboehm.com, "How to Optimize a CUDA Matmul Kernel for
cuBLAS-like Performance", 2022) takes an FP32 matrix product on an A6000 from a
naïve kernel to near cuBLAS. This example walks the first of those steps on a
Hopper GPU, then the tensor-core steps an A6000 worklog does not have:

* **FP32 on CUDA cores**, CUDA C built once with ``load_inline`` (one build,
  every kernel, called through ctypes as ``examples/stack/banks_and_pages.py``
  does): (1) naïve, one thread per output, consecutive threads on
  consecutive *rows* (uncoalesced); (2) coalesced; (3) 32 × 32 shared-memory
  tiles; (4a) 1-D and (4b) 2-D register blocking; (5) float4 loads. Against
  cuBLAS SGEMM with TF32 off (``allow_tf32 = False``: full FP32 products).
* **BF16 on tensor cores through Triton**: the book's ``tl.dot`` kernel
  (``examples/compile/triton_kernels.py``) without software pipelining
  (``num_stages=1``) and pipelined (``num_stages=3``), then a kernel that reads
  its tiles through TMA tensor descriptors; against cuBLAS BF16. Each compiled
  kernel's PTX is read for its matrix instruction (``mma.sync`` or
  ``wgmma.mma_async``) and its loads (``cp.async`` or TMA's
  ``cp.async.bulk.tensor``), and the findings are kept as notes.

Every step is checked against ``torch.matmul`` (TF32 off, output poisoned with
NaN first) before it is timed, at 4096³, by the GPU's own kernel durations,
interleaved with cuBLAS in rounds; ``fraction_of_cublas`` is cuBLAS's sample
over the step's of the same round (the step's rate as a fraction of cuBLAS's).
The naïve and coalesced kernels take tenths and hundredths of a second a call
at 4096³, so they are timed in rounds of their own with cuBLAS, 3 rounds;
the faster FP32 steps get 20, the tensor-core steps 30.

Cost on an H200: about 7 s a run (estimated; 10 to 12 s while the build's host file
included torch's headers: a build of 6.8 to 7.9 s, most of it that file). The CUDA
build (cold in every lab run; nvcc, and a host file that includes only
``cuda_runtime.h``) runs while the Triton steps compile, are checked and timed; then
the FP32 checks and timing, most of it the naïve kernel's five calls (its check, the
profiler's count of its kernels, three rounds); 1.5 GiB of GPU memory at the peak. Without a GPU the
CUDA kernels, cuBLAS and the Triton kernels' runs are skipped; the quick path
checks the reference, runs the ``tl.dot`` kernel in Triton's interpreter, compiles
the three tensor-core steps for sm_90 (no GPU needed) and reads their PTX, and
keeps each CUDA step's load counts (:func:`loads_per_fma`), the index
arithmetic the page's table explains.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from examples.compile import triton_kernels
from examples.blas.levels import kernels_of
from examples.compile.triton_kernels import matmul_kernel, tl, triton
from examples.lab.harness import Unavailable
from examples.stack.triton_ptx import mma_instructions

#: The side of every product timed on a GPU: 4096³ fills the chip (16,384 output tiles of
#: 32 × 32 for the first steps, 1,024 of 128 × 128, 512 of 128 × 256, over 132 SMs).
N = 4096

#: The CUDA-core steps, in order: (name, the kernel's index in ``sgemm_launch``).
FP32_STEPS = (
    ("1. naive, uncoalesced", 0),
    ("2. coalesced", 1),
    ("3. shared-memory tiles", 2),
    ("4a. 1-D register blocking", 3),
    ("4b. 2-D register blocking", 4),
    ("5. float4 loads", 5),
)
#: Timed in rounds of their own: tenths and hundredths of a second a call at 4096³.
SLOW_STEPS = FP32_STEPS[:2]
CUBLAS_FP32 = "cuBLAS SGEMM, TF32 off"
CUBLAS_BF16 = "cuBLAS BF16"
BF16_STEPS = ("6. tl.dot, no pipelining", "7. tl.dot, pipelined", "8. TMA descriptors, pipelined")
#: The tensor-core tile: the book's best Triton configuration on the H100 and the H200
#: (``triton_kernels.CONFIGS[0]``), 128 × 256 × 64, 8 warps.
BM, BN, BK, WARPS, STAGES = 128, 256, 64, 8, 3


# --8<-- [start:loads]
def loads_per_fma(step: str) -> dict[str, float]:
    """Loads one thread issues per multiply-add, by what each CUDA step's indices do.

    ``global``: elements read from device memory (through the caches); ``shared``:
    elements read from shared memory; ``sectors``: 32-byte sectors one warp's load of A
    and B touches for one k (the coalescing figure, for the two steps without tiles)."""
    if step.startswith("1."):  # 32 threads of a warp on 32 rows: 32 sectors of A, 1 of B
        return {"global": 2.0, "sectors": 33.0}
    if step.startswith("2."):  # one row, 32 columns: 1 sector of A, 4 of B (128 bytes)
        return {"global": 2.0, "sectors": 5.0}
    if step.startswith("3."):  # 32x32 tiles: 2 loads to shared per 32 FMAs, 2 shared reads per FMA
        return {"global": 2 / 32, "shared": 2.0}
    if step.startswith("4a."):  # BM=BN=64, BK=8, 8 outputs a thread in a column
        tm, bk = 8, 8
        return {"global": 2 / (tm * bk), "shared": (tm + 1) / tm}
    if step.startswith(("4b.", "5.")):  # 128x128x8 tiles, 8x8 outputs a thread
        tm = tn = 8
        per_thread_loads = (128 * 8 + 8 * 128) / 256  # each thread's share of both tiles
        return {"global": per_thread_loads / (tm * tn * 8), "shared": (tm + tn) / (tm * tn)}
    raise ValueError(f"loads_per_fma: no step {step!r}")
# --8<-- [end:loads]


# --8<-- [start:cuda]
CUDA = r"""
#include <cuda_runtime.h>

// (1) One thread per output; threadIdx.x walks rows, so a warp's 32 threads
// read A from 32 rows (32 sectors) and write C down a column.
__global__ void sgemm_naive(int M, int N, int K, const float* A, const float* B, float* C) {
  const int row = blockIdx.x * 32 + threadIdx.x, col = blockIdx.y * 32 + threadIdx.y;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
  C[row * N + col] = acc;
}

// (2) The same, threadIdx.x on columns: a warp reads one A element (broadcast)
// and 32 consecutive B elements (128 bytes), and writes a row segment.
__global__ void sgemm_coalesced(int M, int N, int K, const float* A, const float* B, float* C) {
  const int row = blockIdx.y * 32 + threadIdx.y, col = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
  C[row * N + col] = acc;
}

// (3) A block stages 32x32 tiles of A and B in shared memory: each element
// read from device memory serves 32 multiply-adds.
__global__ void sgemm_smem(int M, int N, int K, const float* A, const float* B, float* C) {
  __shared__ float As[32 * 32], Bs[32 * 32];
  const int ty = threadIdx.y, tx = threadIdx.x;
  const int row = blockIdx.y * 32 + ty, col = blockIdx.x * 32 + tx;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += 32) {
    As[ty * 32 + tx] = A[row * K + k0 + tx];
    Bs[ty * 32 + tx] = B[(k0 + ty) * N + col];
    __syncthreads();
    for (int k = 0; k < 32; ++k) acc += As[ty * 32 + k] * Bs[k * 32 + tx];
    __syncthreads();
  }
  C[row * N + col] = acc;
}

// (4a) 64x64 block tiles, BK=8; each of 512 threads computes TM=8 outputs of
// one column: one B value from shared memory serves 8 multiply-adds.
// (No __launch_bounds__ here: with it ptxas capped registers at 40 and spilled.)
template <int BM, int BN, int BK, int TM>
__global__ void sgemm_1d(int M, int N, int K, const float* A, const float* B, float* C) {
  __shared__ float As[BM * BK], Bs[BK * BN];
  const int tcol = threadIdx.x % BN, trow = threadIdx.x / BN;
  A += blockIdx.y * BM * K; B += blockIdx.x * BN; C += blockIdx.y * BM * N + blockIdx.x * BN;
  const int arow = threadIdx.x / BK, acol = threadIdx.x % BK;  // one A element a thread
  const int brow = threadIdx.x / BN, bcol = threadIdx.x % BN;  // one B element a thread
  float acc[TM] = {0.f};
  for (int k0 = 0; k0 < K; k0 += BK) {
    As[arow * BK + acol] = A[arow * K + acol];
    Bs[brow * BN + bcol] = B[brow * N + bcol];
    __syncthreads();
    A += BK; B += BK * N;
    for (int k = 0; k < BK; ++k) {
      const float b = Bs[k * BN + tcol];
      for (int i = 0; i < TM; ++i) acc[i] += As[(trow * TM + i) * BK + k] * b;
    }
    __syncthreads();
  }
  for (int i = 0; i < TM; ++i) C[(trow * TM + i) * N + tcol] = acc[i];
}

// (4b) 128x128 block tiles, BK=8; each of 256 threads computes an 8x8 patch
// from 8 A and 8 B values held in registers: 64 multiply-adds per 16 shared reads.
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__(BM * BN / (TM * TN))
sgemm_2d(int M, int N, int K, const float* A, const float* B, float* C) {
  constexpr int THREADS = BM * BN / (TM * TN);
  __shared__ float As[BM * BK], Bs[BK * BN];
  const int tcol = threadIdx.x % (BN / TN), trow = threadIdx.x / (BN / TN);
  A += blockIdx.y * BM * K; B += blockIdx.x * BN; C += blockIdx.y * BM * N + blockIdx.x * BN;
  const int arow = threadIdx.x / BK, acol = threadIdx.x % BK;
  const int brow = threadIdx.x / BN, bcol = threadIdx.x % BN;
  float acc[TM * TN] = {0.f}, am[TM], bn[TN];
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int r = 0; r < BM; r += THREADS / BK) As[(arow + r) * BK + acol] = A[(arow + r) * K + acol];
    for (int r = 0; r < BK; r += THREADS / BN) Bs[(brow + r) * BN + bcol] = B[(brow + r) * N + bcol];
    __syncthreads();
    A += BK; B += BK * N;
    for (int k = 0; k < BK; ++k) {
      for (int i = 0; i < TM; ++i) am[i] = As[(trow * TM + i) * BK + k];
      for (int j = 0; j < TN; ++j) bn[j] = Bs[k * BN + tcol * TN + j];
      for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j) acc[i * TN + j] += am[i] * bn[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; ++j) C[(trow * TM + i) * N + tcol * TN + j] = acc[i * TN + j];
}

// (5) As (4b), with 16-byte loads and stores: A's tile is read as float4 and
// stored transposed in shared memory (so a thread's 8 A values are contiguous),
// B's tile and C are moved as float4.
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__(BM * BN / (TM * TN))
sgemm_vec(int M, int N, int K, const float* A, const float* B, float* C) {
  __shared__ float As[BK * BM], Bs[BK * BN];
  const int tcol = threadIdx.x % (BN / TN), trow = threadIdx.x / (BN / TN);
  A += blockIdx.y * BM * K; B += blockIdx.x * BN; C += blockIdx.y * BM * N + blockIdx.x * BN;
  const int arow = threadIdx.x / (BK / 4), acol = threadIdx.x % (BK / 4);  // one float4 of A
  const int brow = threadIdx.x / (BN / 4), bcol = threadIdx.x % (BN / 4);  // one float4 of B
  float acc[TM * TN] = {0.f}, am[TM], bn[TN];
  for (int k0 = 0; k0 < K; k0 += BK) {
    const float4 a4 = reinterpret_cast<const float4*>(&A[arow * K + acol * 4])[0];
    As[(acol * 4 + 0) * BM + arow] = a4.x;
    As[(acol * 4 + 1) * BM + arow] = a4.y;
    As[(acol * 4 + 2) * BM + arow] = a4.z;
    As[(acol * 4 + 3) * BM + arow] = a4.w;
    reinterpret_cast<float4*>(&Bs[brow * BN + bcol * 4])[0] =
        reinterpret_cast<const float4*>(&B[brow * N + bcol * 4])[0];
    __syncthreads();
    A += BK; B += BK * N;
    for (int k = 0; k < BK; ++k) {
      for (int i = 0; i < TM; ++i) am[i] = As[k * BM + trow * TM + i];
      for (int j = 0; j < TN; ++j) bn[j] = Bs[k * BN + tcol * TN + j];
      for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j) acc[i * TN + j] += am[i] * bn[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; j += 4)
      reinterpret_cast<float4*>(&C[(trow * TM + i) * N + tcol * TN + j])[0] =
          make_float4(acc[i * TN + j], acc[i * TN + j + 1], acc[i * TN + j + 2], acc[i * TN + j + 3]);
}

// Every kernel needs M, N, K multiples of 128 and 16-byte aligned rows (the
// caller checks): no bounds checks, so each step changes one thing only.
void sgemm_launch(int step, int M, int N, int K, const float* A, const float* B, float* C,
                  cudaStream_t s) {
  switch (step) {
    case 0: sgemm_naive<<<dim3(M / 32, N / 32), dim3(32, 32), 0, s>>>(M, N, K, A, B, C); break;
    case 1: sgemm_coalesced<<<dim3(N / 32, M / 32), dim3(32, 32), 0, s>>>(M, N, K, A, B, C); break;
    case 2: sgemm_smem<<<dim3(N / 32, M / 32), dim3(32, 32), 0, s>>>(M, N, K, A, B, C); break;
    case 3: sgemm_1d<64, 64, 8, 8><<<dim3(N / 64, M / 64), 512, 0, s>>>(M, N, K, A, B, C); break;
    case 4: sgemm_2d<128, 128, 8, 8, 8><<<dim3(N / 128, M / 128), 256, 0, s>>>(M, N, K, A, B, C); break;
    case 5: sgemm_vec<128, 128, 8, 8, 8><<<dim3(N / 128, M / 128), 256, 0, s>>>(M, N, K, A, B, C); break;
  }
}
"""
# --8<-- [end:cuda]

#: The host side: one C entry point that Python calls through ctypes. No torch header: with
#: ``torch/library.h`` (a ``TORCH_LIBRARY`` op) this file took longer to compile than all six
#: kernels (the build: 6.8 to 7.9 s on an H200's host); :class:`Sgemm` checks the shapes instead.
CPP = r"""
#include <cuda_runtime.h>
void sgemm_launch(int, int, int, int, const float*, const float*, float*, cudaStream_t);

// C = A @ B by kernel ``step`` on ``stream``; the launch's error code (0: none).
extern "C" int book_worklog_sgemm(int step, int M, int N, int K, const float* A, const float* B,
                                  float* C, void* stream) {
  sgemm_launch(step, M, N, K, A, B, C, static_cast<cudaStream_t>(stream));
  return static_cast<int>(cudaGetLastError());
}
"""


def build_folder(name: str) -> Path:
    """Where ``load_inline`` keeps the build, as ``examples/ecosystem/custom_op.py`` does:
    under ``TORCH_EXTENSIONS_DIR`` (a new folder per lab run, so a run's build is cold),
    else torch's cache folder, where a reader's second run reuses the first one's build."""
    from torch.utils.cpp_extension import get_default_build_root

    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root(), name)


class Sgemm:
    """The built library's entry point on torch tensors: ``sgemm(a, b, c, step)`` writes
    a @ b into c with kernel ``step`` (:data:`FP32_STEPS`), on torch's current stream."""

    def __init__(self, path: str):
        import ctypes

        self.entry = ctypes.CDLL(path).book_worklog_sgemm
        self.entry.argtypes = [ctypes.c_int] * 4 + [ctypes.c_void_p] * 4
        self.entry.restype = ctypes.c_int

    def __call__(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, step: int) -> None:
        # The kernels have no bounds checks: every side a multiple of 128, contiguous float32.
        (M, K), N = a.shape, b.shape[1]
        tensors = (a, b, c)
        if not all(t.is_cuda and t.dtype == torch.float32 and t.is_contiguous() for t in tensors):
            raise ValueError("sgemm: contiguous float32 CUDA tensors")
        if b.shape[0] != K or c.shape != (M, N) or M % 128 or N % 128 or K % 128:
            raise ValueError("sgemm: shapes [M, K] @ [K, N] -> [M, N], sides multiples of 128")
        if not 0 <= step <= 5 or len({t.device for t in tensors}) != 1:
            raise ValueError("sgemm: step 0 to 5, tensors on one device")
        with torch.cuda.device(a.device):
            code = self.entry(step, M, N, K, a.data_ptr(), b.data_ptr(), c.data_ptr(),
                              torch.cuda.current_stream(a.device).cuda_stream)
        if code != 0:
            raise RuntimeError(f"sgemm: CUDA error {code} at launch")


def build_sgemm() -> tuple[Sgemm, float, bool]:
    """Compile and load every CUDA step at once; the entry point, the seconds it took and
    whether the build folder held this build already (the lab runner gives each run a new folder)."""
    from torch.utils.cpp_extension import CUDA_HOME, load_inline

    if CUDA_HOME is None:
        raise Unavailable("gemm_worklog: needs the CUDA toolkit (nvcc) to build its kernels")
    flags = ["-O3"]
    text = "".join([CPP, CUDA, *flags, torch.__version__])
    name = f"book_worklog_{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    folder = build_folder(name)
    warm = folder.is_dir() and any(folder.glob("*.so"))
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    path = load_inline(name=name, cpp_sources=[CPP], cuda_sources=[CUDA], is_python_module=False,
                       no_implicit_headers=True, build_directory=str(folder),
                       extra_cflags=["-O1"], extra_cuda_cflags=flags)
    return Sgemm(str(path)), time.perf_counter() - start, warm


# --8<-- [start:tma]
@triton.jit
def matmul_tma_kernel(a_desc, b_desc, c_desc, M, N, K,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    """c = a @ bᵀ in bf16, every tile moved by TMA through a tensor descriptor built on the host
    (``TensorDescriptor``): no pointer arithmetic, no masks; the copy engine fetches
    whole boxes into shared memory."""
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP * tiles_n)
    first_m = group * GROUP
    rows_in_group = min(tiles_m - first_m, GROUP)
    pid_m = first_m + (pid % (GROUP * tiles_n)) % rows_in_group
    pid_n = (pid % (GROUP * tiles_n)) // rows_in_group
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([pid_m * BM, k * BK])  # BM x BK
        b = b_desc.load([pid_n * BN, k * BK])  # BN x BK: b is stored [N, K]
        acc = tl.dot(a, b.T, acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.bfloat16))
# --8<-- [end:tma]


def triton_steps(a, bt, c):
    """The three tensor-core steps on c = a @ btᵀ (bt stored [N, K], as a linear layer's
    weight): name -> a call that launches one kernel and returns it compiled."""
    (M, K), n = a.shape, bt.shape[0]
    b = bt.t()  # a [K, N] view: the pointer kernel reads it through its strides
    grid = (triton.cdiv(M, BM) * triton.cdiv(n, BN),)
    pointer_args = (a, b, c, M, n, K, *a.stride(), *b.stride(), *c.stride())
    tile = dict(BM=BM, BN=BN, BK=BK, GROUP=8, num_warps=WARPS)

    def pointer(stages):
        return lambda: matmul_kernel[grid](*pointer_args, EVEN_K=K % BK == 0, num_stages=stages, **tile)

    steps = {BF16_STEPS[0]: pointer(1), BF16_STEPS[1]: pointer(STAGES)}
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError as exc:
        return steps, f"this Triton has no host tensor descriptors ({exc})"
    if torch.cuda.get_device_capability(a.device) < (9, 0):
        return steps, "TMA needs compute capability 9.0 or later"
    descriptors = (TensorDescriptor.from_tensor(a, [BM, BK]), TensorDescriptor.from_tensor(bt, [BN, BK]),
                   TensorDescriptor.from_tensor(c, [BM, BN]))
    steps[BF16_STEPS[2]] = lambda: matmul_tma_kernel[grid](*descriptors, M, n, K, num_stages=STAGES, **tile)
    return steps, None


# --8<-- [start:ptx]
def what_the_ptx_uses(compiled) -> dict[str, object]:
    """The matrix instruction and the kind of load the compiled kernel's PTX holds."""
    ptx = compiled.asm["ptx"]
    return {
        "matrix instructions": mma_instructions(compiled)["ptx"],
        "TMA (cp.async.bulk.tensor)": "cp.async.bulk.tensor" in ptx,
        "cp.async (Ampere's asynchronous copy)": bool(re.search(r"\bcp\.async\.(ca|cg)\b", ptx)),
    }
# --8<-- [end:ptx]


def _fresh(shape, *, device, dtype, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(dtype)


def measure_fp32(lab, sgemm: Sgemm) -> None:
    """The CUDA-core steps: each checked, then timed with cuBLAS SGEMM in rounds."""
    a, b = (_fresh((N, N), device=lab.device, dtype=torch.float32, seed=s) for s in (1, 2))
    reference = torch.matmul(a, b)  # cuBLAS, full FP32 (TF32 is off)
    exact = a[:128].double() @ b.double()
    lab.check(f"{CUBLAS_FP32} against float64 (first 128 rows)", reference[:128], exact, tolerance=1e-5)
    lab.note(f"kernels, {CUBLAS_FP32}", kernels_of(lambda: torch.matmul(a, b), lab.device))
    c = {name: torch.empty(N, N, device=lab.device) for name, _ in FP32_STEPS}
    calls = {CUBLAS_FP32: lambda: torch.matmul(a, b)}
    for name, step in FP32_STEPS:
        c[name].fill_(float("nan"))  # an output the kernel leaves unwritten fails the check
        sgemm(a, b, c[name], step)
        lab.check(f"{name} against torch.matmul", c[name], reference, tolerance=1e-4)
        calls[name] = lambda name=name, step=step: sgemm(a, b, c[name], step)
    del reference, exact
    flops, measured = 2 * N**3, {}
    # The slow steps' warm-up is their check, just run: a round of them costs up to a second.
    for group, rounds, warmup in ((SLOW_STEPS, 3, 0), (FP32_STEPS[2:], 20, 3)):
        names = [name for name, _ in group]
        variants = {CUBLAS_FP32: calls[CUBLAS_FP32], **{name: calls[name] for name in names}}
        rows = {name: ({"precision": "fp32", "n": N, "step": name}, "time") for name in names}
        if group is not SLOW_STEPS:  # cuBLAS's own row comes from the rounds of the faster steps
            rows[CUBLAS_FP32] = ({"precision": "fp32", "n": N, "step": CUBLAS_FP32}, "time")
        ratios = {name: ({"precision": "fp32", "n": N, "step": name}, "fraction_of_cublas", 1.0)
                  for name in names}
        times = lab.compare_rows(variants, rows, baseline=CUBLAS_FP32, ratios=ratios, unit="ms",
                                 timer="kernel", repetitions=rounds, warmup=warmup)
        for name, t in times.items():
            lab.value(case=rows[name][0], metric="rate", unit="TFLOP/s", value=flops / (t.median * 1e-3) / 1e12)
        measured |= times
    keep_over_previous(lab, [name for name, _ in FP32_STEPS], measured, precision="fp32")


def keep_over_previous(lab, steps, times, *, precision: str) -> None:
    """Each step's speed-up over the step before it: the ratio of their median times (the
    first steps and the rest are timed in different rounds, so not a paired ratio)."""
    for before, name in zip(steps, steps[1:]):
        if before in times and name in times:
            lab.value(case={"precision": precision, "n": N, "step": name}, metric="over_previous", unit="x",
                      value=times[before].median / times[name].median)


def measure_bf16(lab) -> None:
    """The tensor-core steps: each compiled kernel's PTX read, each output checked, then
    all timed with cuBLAS BF16 in rounds."""
    a = _fresh((N, N), device=lab.device, dtype=torch.bfloat16, seed=3)
    bt = _fresh((N, N), device=lab.device, dtype=torch.bfloat16, seed=4)  # stored [N, K]
    reference = torch.matmul(a, bt.t())
    exact = a[:128].double() @ bt.double().t()
    lab.check(f"{CUBLAS_BF16} against float64 (first 128 rows)", reference[:128], exact, tolerance=1e-2)
    lab.note(f"kernels, {CUBLAS_BF16}", kernels_of(lambda: torch.matmul(a, bt.t()), lab.device))
    c = {name: torch.empty(N, N, device=lab.device, dtype=torch.bfloat16) for name in BF16_STEPS}
    calls = {CUBLAS_BF16: lambda: torch.matmul(a, bt.t())}
    for name in BF16_STEPS:
        steps, missing = triton_steps(a, bt, c[name])
        if name not in steps:
            lab.note(f"{name}: skipped", missing)
            continue
        c[name].fill_(float("nan"))
        compiled = steps[name]()
        for what, found in what_the_ptx_uses(compiled).items():
            lab.note(f"{name}: {what}", found)
        lab.note(f"{name}: shared memory (bytes), registers a thread",
                 [compiled.metadata.shared, getattr(compiled, "n_regs", None)])
        lab.check(f"{name} against torch.matmul", c[name], reference, tolerance=1e-2)
        calls[name] = steps[name]
    del reference, exact
    names = [name for name in calls if name != CUBLAS_BF16]
    rows = {name: ({"precision": "bf16", "n": N, "step": name}, "time") for name in calls}
    ratios = {name: ({"precision": "bf16", "n": N, "step": name}, "fraction_of_cublas", 1.0) for name in names}
    times = lab.compare_rows(calls, rows, baseline=CUBLAS_BF16, ratios=ratios, unit="ms", timer="kernel",
                             repetitions=30, warmup=5)
    for name, t in times.items():
        lab.value(case=rows[name][0], metric="rate", unit="TFLOP/s", value=2 * N**3 / (t.median * 1e-3) / 1e12)
    keep_over_previous(lab, list(BF16_STEPS), times, precision="bf16")


def keep_load_counts(lab) -> None:
    """Each CUDA step's loads per multiply-add (no timing: the index arithmetic)."""
    for name, _ in FP32_STEPS:
        counts = loads_per_fma(name)
        case = {"precision": "fp32", "n": N, "step": name}
        lab.value(case=case, metric="global_loads_per_fma", unit="loads", value=counts["global"])
        if "shared" in counts:
            lab.value(case=case, metric="shared_loads_per_fma", unit="loads", value=counts["shared"])


def compiled_for_hopper() -> dict[str, dict]:
    """The three tensor-core steps compiled for sm_90 with no GPU, specialised as a launch on
    4096-wide row-major tensors would be (pointers and strides divisible by 16, unit strides
    constant), and what each one's PTX uses. Needs Triton compiling, not interpreting."""
    from triton.backends.compiler import GPUTarget

    target, tile = GPUTarget("cuda", 90, 32), {"BM": BM, "BN": BN, "BK": BK, "GROUP": 8}
    names = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "s_am", "s_ak", "s_bk", "s_bn", "s_cm", "s_cn")
    unit = {"s_ak", "s_bk", "s_cn"}  # a and c row-major, b = btᵀ read with K contiguous
    signature = {n: "*bf16" if n.endswith("_ptr") else "constexpr" if n in unit else "i32" for n in names}
    pointer = triton.compiler.ASTSource(
        fn=matmul_kernel, signature={**signature, **dict.fromkeys([*tile, "EVEN_K"], "constexpr")},
        constexprs={**dict.fromkeys(unit, 1), **tile, "EVEN_K": True},
        attrs={(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n not in unit})
    descriptors = {"a_desc": f"tensordesc<bf16[{BM},{BK}]>", "b_desc": f"tensordesc<bf16[{BN},{BK}]>",
                   "c_desc": f"tensordesc<bf16[{BM},{BN}]>"}
    tma = triton.compiler.ASTSource(
        fn=matmul_tma_kernel, signature={**descriptors, "M": "i32", "N": "i32", "K": "i32",
                                         **dict.fromkeys(tile, "constexpr")}, constexprs=tile)
    sources = {BF16_STEPS[0]: (pointer, 1), BF16_STEPS[1]: (pointer, STAGES), BF16_STEPS[2]: (tma, STAGES)}
    return {name: what_the_ptx_uses(triton.compile(src, target=target,
                                                   options={"num_warps": WARPS, "num_stages": stages}))
            for name, (src, stages) in sources.items()}


#: Run in a child process: this one chose Triton's interpreter, which cannot compile for a target.
_HOPPER_PTX = ("import json; from examples.stack.gemm_worklog import compiled_for_hopper; "
               "print(json.dumps(compiled_for_hopper()))")


def hopper_ptx_without_gpu() -> dict[str, dict] | str:
    """:func:`compiled_for_hopper` in a child process; the reason, if it could not compile."""
    import json
    import subprocess

    from examples.lab.provenance import REPO_ROOT

    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", _HOPPER_PTX], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return "not compiled: " + (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_without_gpu(lab) -> None:
    lab.note("skipped without a GPU", "the CUDA kernels, cuBLAS and the tensor-core steps' runs; "
             "the tensor-core steps are compiled for sm_90 and their PTX read, and the tl.dot "
             "kernel runs in Triton's interpreter")
    found = hopper_ptx_without_gpu()
    if isinstance(found, str):
        lab.note("tensor-core steps compiled for sm_90 (no GPU)", found)
    else:
        for name, uses in found.items():
            for what, value in uses.items():
                lab.note(f"{name}, compiled for sm_90 with no GPU: {what}", value)
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(64, 64, generator=g) for _ in range(2))
    lab.check("torch.matmul against float64", torch.matmul(a, b), a.double() @ b.double(), tolerance=1e-5)
    lab.check("tl.dot kernel, interpreted", triton_kernels.matmul(a, b), a.double() @ b.double(), tolerance=1e-5)


def measure(lab) -> None:
    keep_load_counts(lab)
    if not lab.cuda:
        return measure_without_gpu(lab)
    if triton_kernels.INTERPRETED:
        raise SystemExit("gemm_worklog: Triton's interpreter was chosen at import; run on the GPU "
                         "without TRITON_INTERPRET")
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # cuBLAS SGEMM in full FP32, like the CUDA steps
    try:
        # The build is compilers in subprocesses: the tensor-core part runs meanwhile.
        with ThreadPoolExecutor(max_workers=1) as pool:
            build = pool.submit(build_sgemm)
            measure_bf16(lab)
            sgemm, seconds, warm = build.result()
        lab.note("CUDA kernels built and loaded in",
                 f"{seconds:.1f} s ({'a build found in the folder, reused' if warm else 'a cold build'};"
                 " the Triton steps were compiled, checked and timed meanwhile)")
        measure_fp32(lab, sgemm)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    lab.note("cuBLAS SGEMM", "torch.backends.cuda.matmul.allow_tf32 = False for the FP32 part: "
             "full FP32 multiply-adds, the CUDA cores' work")


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
