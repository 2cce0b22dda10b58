"""Your own op: the same function in Triton and in C++/CUDA, registered with
``torch.library``, given a backward, and tested against torch.

The function is swish, ``x * sigmoid(x)`` (torch calls it ``F.silu``). The
Triton version is a ``torch.library.custom_op`` that launches a Triton kernel
(through Triton's interpreter on a machine without a GPU). The C++ version is
built with ``torch.utils.cpp_extension.load_inline``, registers its kernels
with ``TORCH_LIBRARY`` (a CPU loop, and on a GPU a CUDA kernel), and gets its
backward and its fake (shape-only) implementation from Python. Both pass
``torch.library.opcheck`` and match ``F.silu``; then the three are timed in
interleaved rounds (``lab.compare``), each op's ``speedup`` paired against
``F.silu``'s samples of the same rounds, twice: by the GPU's own duration of
the kernel (``time``, and the ``bandwidth`` it gives), and by events around
one call (``one_call``, the host's share included). The C++ build runs in a
thread while the Triton op is compiled and tested (see ``measure``), in a
folder under ``TORCH_EXTENSIONS_DIR`` (see ``build_folder``).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F

if not torch.cuda.is_available():  # must precede @triton.jit
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


# --8<-- [start:triton]
@triton.jit
def swish_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * tl.sigmoid(x), mask=mask)


@torch.library.custom_op("book::swish_triton", mutates_args=())
def swish_triton(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), 1024),)
    swish_kernel[grid](x, y, x.numel(), BLOCK=1024)
    return y


@swish_triton.register_fake
def _(x):  # what torch.compile and meta tensors see: shape and dtype only
    return torch.empty_like(x)


# --8<-- [end:triton]


# --8<-- [start:autograd]
def _setup(ctx, inputs, output):
    (x,) = inputs
    ctx.save_for_backward(x)


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    s = torch.sigmoid(x)
    return grad * (s + x * s * (1 - s))  # d/dx x*sigmoid(x)


torch.library.register_autograd("book::swish_triton", _backward,
                                setup_context=_setup)
# --8<-- [end:autograd]

# --8<-- [start:cpp]
CPP = r"""
#include <cmath>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

at::Tensor swish_cpu(const at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "swish: float32 only");
  at::Tensor xc = x.contiguous(), y = at::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  float* out = y.data_ptr<float>();
  for (int64_t i = 0, n = xc.numel(); i < n; ++i)
    out[i] = in[i] / (1.0f + std::exp(-in[i]));
  return y;
}

TORCH_LIBRARY(book_ext, m) { m.def("swish(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(book_ext, CPU, m) { m.impl("swish", &swish_cpu); }
"""
# --8<-- [end:cpp]

# --8<-- [start:cuda]
CUDA = r"""
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>

__device__ __forceinline__ float swish(float v) { return v / (1.0f + __expf(-v)); }

// Four floats a thread per step, through one 16-byte load and one store:
// a 4-byte load a thread keeps too few bytes in flight to cover HBM's
// latency. A grid-stride loop, with only as many blocks as fill the GPU.
__global__ void swish_kernel(const float* __restrict__ x, float* __restrict__ y,
                             int64_t n, bool aligned) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t quads = aligned ? n / 4 : 0;  // float4 needs 16-byte addresses
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* y4 = reinterpret_cast<float4*>(y);
  for (int64_t i = first; i < quads; i += stride) {
    float4 v = x4[i];
    v.x = swish(v.x); v.y = swish(v.y); v.z = swish(v.z); v.w = swish(v.w);
    y4[i] = v;
  }
  for (int64_t i = 4 * quads + first; i < n; i += stride)  // the tail, or all
    y[i] = swish(x[i]);
}

void swish_launch(const float* x, float* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  int device, sms;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const bool aligned = (reinterpret_cast<uintptr_t>(x) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(y) % 16 == 0);
  const int64_t work = aligned ? (n + 3) / 4 : n, threads = 256;
  // 8 blocks of 256 threads an SM: Hopper's 2048 threads, if each thread used
  // at most 32 registers. It uses more, so fewer blocks fit at once and the
  // grid runs in two waves (the page discusses what that costs).
  const int64_t blocks = std::min<int64_t>((work + threads - 1) / threads, 8LL * sms);
  swish_kernel<<<(unsigned)blocks, (unsigned)threads, 0, s>>>(x, y, n, aligned);
}
"""

CPP_CUDA = r"""
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
void swish_launch(const float*, float*, int64_t, cudaStream_t);

at::Tensor swish_cuda(const at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "swish: float32 only");
  const c10::cuda::CUDAGuard guard(x.device());  // x's GPU, and its stream
  at::Tensor xc = x.contiguous(), y = at::empty_like(xc);
  swish_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(),
               c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
TORCH_LIBRARY_IMPL(book_ext, CUDA, m) { m.impl("swish", &swish_cuda); }
"""
# --8<-- [end:cuda]


# --8<-- [start:build]
def build_folder(name: str) -> Path:
    """Where ``load_inline`` keeps the build of ``name``: under
    ``TORCH_EXTENSIONS_DIR`` (the lab runner points it at a new folder per
    run, so a run's build is always cold), else torch's cache folder, where
    a reader's second run finds the first one's build and skips it."""
    from torch.utils.cpp_extension import get_default_build_root

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()
    return Path(root, name)


def build_extension(cuda: bool) -> tuple[float, bool]:
    """Compile and load the C++ (and CUDA) op; return the seconds it took,
    and whether the build folder held a build already (a warm build)."""
    from torch.utils.cpp_extension import load_inline

    sources = [CPP + (CPP_CUDA if cuda else "")]
    flags = ["-O1"]  # the host code only checks and launches: not timed
    # The library links against this torch: another torch, another build.
    text = "".join(sources + [CUDA * cuda] + flags + [torch.__version__])
    name = f"book_swish_{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    folder = build_folder(name)
    warm = folder.is_dir() and any(folder.glob("*.so"))
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    load_inline(
        name=name,
        cpp_sources=sources,
        cuda_sources=[CUDA] if cuda else None,
        is_python_module=False,  # the library registers ops; no bindings
        # Only the headers the sources include: not torch/extension.h
        # (all of torch and pybind11) nor ATen in the .cu, which would
        # make most of the build's time.
        no_implicit_headers=True,
        build_directory=str(folder),
        extra_cflags=flags,
    )
    torch.library.register_fake("book_ext::swish")(torch.empty_like)
    torch.library.register_autograd("book_ext::swish", _backward,
                                    setup_context=_setup)
    return time.perf_counter() - start, warm


# --8<-- [end:build]


def check_ops(device, ops: dict, n: int = 4099) -> dict:
    """opcheck and a gradient check of each op; errors against F.silu."""
    x = torch.randn(n, device=device, requires_grad=True)
    # --8<-- [start:opcheck]
    for op in ops.values():
        torch.library.opcheck(op, (x,))  # schema, fake, autograd, dispatch
    # --8<-- [end:opcheck]
    y_ref = F.silu(x)
    (g_ref,) = torch.autograd.grad(y_ref.sum(), x)
    out = {}
    for name, op in ops.items():
        y = op(x)
        (g,) = torch.autograd.grad(y.sum(), x)
        out[name] = (y, y_ref, g, g_ref)
    return out


def measure(lab) -> None:
    # The build is seconds of compilers in subprocesses (mostly parsing
    # torch/library.h), with the GIL released: a thread waits for it while
    # this one compiles the Triton kernel and runs the Triton op's opcheck,
    # which needs nothing from the extension. Its registrations touch only
    # the book_ext namespace, and the dispatcher's registry takes a lock.
    with ThreadPoolExecutor(max_workers=1) as pool:
        build = pool.submit(build_extension, lab.cuda)
        results = check_ops(lab.device, {"Triton": torch.ops.book.swish_triton})
        seconds, warm = build.result()
    lab.note("C++ extension built and loaded in",
             f"{seconds:.1f} s ({'C++ and CUDA' if lab.cuda else 'C++'};"
             f" {'a build found in the folder, reused' if warm else 'a cold build'};"
             " the Triton op was compiled and tested meanwhile)")
    results.update(check_ops(lab.device, {"C++": torch.ops.book_ext.swish}))
    for name, (y, y_ref, g, g_ref) in results.items():
        lab.check(f"{name} swish = F.silu", y, y_ref, tolerance=1e-6)
        lab.check(f"{name} swish backward", g, g_ref, tolerance=1e-6)
    lab.note("opcheck", "passed for book::swish_triton and book_ext::swish")
    n = 1 << 16 if lab.quick else 1 << 26
    xs = [(torch.randn(n, device=lab.device),) for _ in range(2)]
    runs = {"F.silu": F.silu, "Triton": torch.ops.book.swish_triton,
            "C++" + ("/CUDA" if lab.cuda else ""): torch.ops.book_ext.swish}
    # Two questions, two timers, each in interleaved rounds (the three share
    # the clocks and the heat; ``speedup`` is F.silu's sample over each op's,
    # round by round). How fast is the kernel: ``time``, the GPU's own
    # duration of the kernel a call ran, which is what the bytes moved are
    # divided by. What does one call cost a caller that waits for it:
    # ``one_call``, events around one call on an idle GPU, which adds the
    # host's work before the kernel starts (the dispatcher, and for the
    # Triton op a Python function and Triton's launcher).
    times = lab.compare(runs, case={"elements": n}, key="op", metric="time",
                        unit="us", baseline="F.silu", inputs=xs, timer="kernel")
    for name, t in times.items():
        lab.value(case={"elements": n, "op": name}, metric="bandwidth",
                  unit="GB/s", value=8 * n / (t.median / 1e6) / 1e9)  # 4 B in, 4 out
    lab.compare(runs, case={"elements": n}, key="op", metric="one_call",
                unit="us", baseline="F.silu", speedup_metric="one_call_speedup",
                inputs=xs, timer="cuda_event" if lab.cuda else "host_sync")


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
