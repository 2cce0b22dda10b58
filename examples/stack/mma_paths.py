"""Hopper's two tensor-core instructions from one Triton kernel: ``wgmma`` against ``mma.sync``.

On sm_90 Triton compiles ``tl.dot`` to the warpgroup instruction ``wgmma``. Its compiler switch
``DISABLE_MMA_V3=1`` (an environment variable that is part of Triton's cache key) makes the same
source use Ampere's warp-level ``mma.sync`` instead, with tiles, loads and pipelining still left
to the compiler. So the book's matmul kernel (``examples/compile/triton_kernels.py``) is compiled
both ways for this GPU, and

* each compiled kernel's PTX is checked for its instruction (``wgmma`` in one, ``mma.sync`` and no
  ``wgmma`` in the other), each output against float64 products;
* each path gets its best of the same candidate configurations (the five that won the book's
  Triton-vs-cuBLAS runs, wgmma's, and three Ampere-style ones with 32-wide K tiles), chosen by a
  short timing of each, and the choice and every candidate's time are noted;
* the two paths and cuBLAS are timed in interleaved rounds by kernel duration (the profiler's,
  ``timer="kernel"``) at 4096 and 8192 on a side in float16, sizes that fill the chip
  (512 to 4,096 output tiles over 132 SMs, by tiling); ``vs_wgmma`` is the paired ratio of the wgmma sample over the
  other's in the same round: below 1, the fraction of wgmma's rate it reaches.

Without a GPU nothing runs compiled: the example still compiles both paths for sm_90 (no GPU
needed) and checks their instructions, and runs the kernel in Triton's interpreter at a small
size against torch.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch

from examples.compile import triton_kernels
from examples.compile.triton_kernels import CONFIGS, INTERPRETED, _config, matmul_kernel, triton
from examples.lab.harness import Unavailable
from examples.stack.triton_ptx import mma_instructions

#: The switch Triton reads while it compiles (``getBoolEnv`` in its C++); in its cache key.
MMA_V3_OFF = "DISABLE_MMA_V3"
PATHS = ("Triton wgmma", "Triton mma.sync")
#: The Triton-vs-cuBLAS winners (wgmma's) and three tilings Ampere's kernels use with mma.sync.
CANDIDATES = [*CONFIGS, _config(128, 128, 32, 4, 4), _config(128, 256, 32, 8, 3),
              _config(256, 128, 32, 8, 3)]
SIZES = (4096, 8192)


@contextmanager
def mma_v3_off(on: bool):
    """``DISABLE_MMA_V3=1`` for what compiles inside (nothing changes where ``on`` is false)."""
    saved = os.environ.get(MMA_V3_OFF)
    if on:
        os.environ[MMA_V3_OFF] = "1"
    try:
        yield
    finally:
        if on:
            if saved is None:
                os.environ.pop(MMA_V3_OFF, None)
            else:
                os.environ[MMA_V3_OFF] = saved


# --8<-- [start:paths]
def own_kernel():
    """The book's matmul kernel as a JIT function of its own, one per path: two objects, two
    in-memory caches, so a kernel compiled with mma.sync is never found for wgmma."""
    return triton.jit(matmul_kernel.fn)


def launch(kernel, path: str, a, b, c, config):
    """One product c = a @ b on ``path``, the switch set on every mma.sync launch: should
    Triton ever compile it again, it compiles it the same way. Returns the compiled kernel."""
    grid, args, options = launch_arguments(a, b, c, config)
    with mma_v3_off(path == "Triton mma.sync"):
        return kernel[grid](*args, **options)


def launch_arguments(a, b, c, config):
    """The grid, arguments and compile options of c = a @ b with ``config``."""
    (M, K), N = a.shape, b.shape[1]
    grid = (triton.cdiv(M, config.kwargs["BM"]) * triton.cdiv(N, config.kwargs["BN"]),)
    args = (a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride())
    return grid, args, dict(EVEN_K=K % config.kwargs["BK"] == 0, num_warps=config.num_warps,
                            num_stages=config.num_stages, **config.kwargs)
# --8<-- [end:paths]


def compile_candidates(kernel, path: str, a, b, c) -> dict:
    """Every candidate compiled for ``path`` at once, in threads, before any is timed (a
    compile is mostly LLVM and ptxas, outside the interpreter, so they overlap):
    {config: None, or the error that stopped it}. The switch is set once around them all,
    since Triton reads it from the process's environment."""
    def build(config):
        grid, args, options = launch_arguments(a, b, c, config)
        try:
            kernel.warmup(*args, grid=grid, **options)
        except Exception as exc:  # noqa: BLE001 - a tiling this path cannot build: noted by the caller
            return exc
        return None

    with mma_v3_off(path == "Triton mma.sync"), ThreadPoolExecutor(len(CANDIDATES)) as pool:
        return dict(zip(CANDIDATES, pool.map(build, CANDIDATES)))


def instruction_check(ptx_instructions: list[str], path: str) -> None:
    """wgmma in the wgmma kernel; mma.sync, and no wgmma, in the other."""
    wgmma = any(i.startswith("wgmma") for i in ptx_instructions)
    mma_sync = any(i.startswith("mma.sync") for i in ptx_instructions)
    if path == "Triton wgmma" and not wgmma:
        raise RuntimeError(f"mma_paths: the wgmma kernel's PTX has no wgmma ({ptx_instructions})")
    if path == "Triton mma.sync" and (wgmma or not mma_sync):
        raise RuntimeError(f"mma_paths: the mma.sync kernel's PTX has {ptx_instructions}, "
                           f"not mma.sync alone (does this Triton still read {MMA_V3_OFF}?)")


def compiled_for_hopper(path: str):
    """The matmul kernel compiled for sm_90 on ``path``, with no GPU: only its PTX is used.
    Needs a process where Triton compiles (not one that chose its interpreter at import)."""
    from triton.backends.compiler import GPUTarget

    source = triton.compiler.ASTSource(
        fn=matmul_kernel,
        signature={"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16",
                   **{name: "i32" for name in ("M", "N", "K", "s_am", "s_ak", "s_bk", "s_bn",
                                               "s_cm", "s_cn")},
                   **{name: "constexpr" for name in ("BM", "BN", "BK", "GROUP", "EVEN_K")}},
        constexprs={"BM": 128, "BN": 128, "BK": 64, "GROUP": 8, "EVEN_K": True},
    )
    with mma_v3_off(path == "Triton mma.sync"):
        return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})


#: Run where torch sees no GPU: this module is imported with Triton compiling, not interpreting.
_HOPPER_PTX = ("import json; from examples.stack.mma_paths import PATHS, compiled_for_hopper; "
               "from examples.stack.triton_ptx import mma_instructions; "
               "print(json.dumps({p: mma_instructions(compiled_for_hopper(p))['ptx'] for p in PATHS}))")


def hopper_instructions() -> dict[str, list[str]]:
    """Each path's sm_90 PTX matrix instructions, compiled in a child process: this one runs
    Triton's interpreter, whose library functions (``tl.cdiv``) cannot be compiled for a target."""
    import json
    import subprocess

    from examples.lab.provenance import REPO_ROOT

    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", _HOPPER_PTX], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"mma_paths: compiling for sm_90 failed: {last}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_without_gpu(lab) -> None:
    for path, found in hopper_instructions().items():
        instruction_check(found, path)
        lab.note(f"{path}: sm_90 PTX matrix instructions", found)
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(64, 64, generator=g) for _ in range(2))
    lab.check("matmul, interpreted", triton_kernels.matmul(a, b), a.double() @ b.double(), tolerance=1e-5)


def best_config(lab, kernel, path: str, a, b, c):
    """The fastest candidate for ``path`` by a short timing of each (25 ms of calls after
    a warm-up; the profiler-timed rounds come after); every candidate's time is noted, and
    every one that could not be built."""
    import triton.testing

    times = {}
    for config, failed in compile_candidates(kernel, path, a, b, c).items():
        try:
            if failed is not None:
                raise failed
            launch(kernel, path, a, b, c, config)  # loaded onto the GPU now, outside the timing
        except Exception as exc:  # noqa: BLE001 - a tiling this path cannot build: noted, skipped
            lab.note(f"{path} {config}", f"not built: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        times[config] = triton.testing.do_bench(lambda: launch(kernel, path, a, b, c, config),
                                                warmup=5, rep=25)
    if not times:
        raise RuntimeError(f"mma_paths: no candidate configuration built for {path}")
    lab.note(f"{path}: candidate times (ms, n={a.shape[0]})",
             {str(cfg): round(ms, 4) for cfg, ms in sorted(times.items(), key=lambda kv: kv[1])})
    return min(times, key=times.get)


def measure_size(lab, n: int, kernels: dict) -> None:
    g = torch.Generator(device=lab.device).manual_seed(n)
    a = torch.randn(n, n, generator=g, device=lab.device, dtype=torch.float16)
    b = torch.randn(n, n, generator=g, device=lab.device, dtype=torch.float16)
    c = {path: torch.empty(n, n, device=lab.device, dtype=torch.float16) for path in PATHS}
    rows = slice(0, 256)
    reference = a[rows].double() @ b.double()
    calls = {}
    for path in PATHS:
        config = best_config(lab, kernels[path], path, a, b, c[path])
        lab.note(f"{path}: chosen at n={n}", str(config))
        compiled = launch(kernels[path], path, a, b, c[path], config)
        found = mma_instructions(compiled)["ptx"]
        instruction_check(found, path)
        lab.note(f"{path}: PTX matrix instructions", found)
        lab.check(f"{path}, n={n}", c[path][rows], reference, tolerance=2e-3)
        calls[path] = lambda path=path, config=config: launch(kernels[path], path, a, b, c[path], config)
    calls["cuBLAS"] = lambda: torch.mm(a, b)
    times = lab.compare(calls, case={"n": n}, key="variant", metric="kernel_time", unit="ms",
                        baseline="Triton wgmma", speedup_metric="vs_wgmma", timer="kernel")
    for name, t in times.items():
        lab.value(case={"n": n, "variant": name}, metric="rate", unit="TFLOP/s",
                  value=2 * n**3 / (t.median * 1e-3) / 1e12)


def measure(lab) -> None:
    if not lab.cuda:
        return measure_without_gpu(lab)
    if INTERPRETED:
        raise SystemExit("mma_paths: Triton's interpreter was chosen at import; run on the GPU "
                         "without TRITON_INTERPRET")
    major, minor = torch.cuda.get_device_capability(lab.device)
    if (major, minor) != (9, 0):
        raise Unavailable(f"needs a Hopper GPU (compute capability 9.0, wgmma); this one is {major}.{minor}")
    kernels = {path: own_kernel() for path in PATHS}
    for n in SIZES[:1] if lab.quick else SIZES:
        measure_size(lab, n, kernels)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
