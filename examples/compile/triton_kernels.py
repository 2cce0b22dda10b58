"""Three Triton kernels written for the book: vector add, softmax, matmul.

Each is checked against torch, then timed against torch's own kernel (for the
matmul: cuBLAS) across sizes, the two in alternating rounds (A B, B A, ...)
so that neither runs on a cooler or faster-clocked GPU than the other; each
ratio is the median of the ratios of one round. On a GPU the comparison is by
kernel duration from the profiler (CUPTI, the harness's ``timer="kernel"``) at
every size, so that the host's share of a call (the autotuner's cache look-up
and Triton's launcher, or ATen's dispatch) does not enter it: at 512 and 1024
the products take microseconds, and events around one call time mostly the
host, whose speed varies from run to run. The matmuls are also timed one call
alone with events (``time_one_call``), a figure that includes that host time.

Without a GPU the kernels run on the CPU through Triton's interpreter, which
must be switched on before ``@triton.jit`` runs, so this module sets
``TRITON_INTERPRET=1`` before importing triton when torch sees no GPU. The
interpreter mishandles bfloat16, so the CPU path uses float32 and float16.
"""

from __future__ import annotations

import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


# --8<-- [start:add]
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)  # which block of BLOCK elements is mine
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n  # the last block may stick out past n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out


# --8<-- [end:add]


# --8<-- [start:softmax]
@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)  # one program per row: read once, write once
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    x = x.to(tl.float32)
    x = x - tl.max(x, axis=0)  # subtract the max: exp cannot overflow
    e = tl.exp(x)
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * stride + cols,
             y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    softmax_kernel[(rows,)](x, out, cols, x.stride(0), BLOCK=block,
                            num_warps=8 if block >= 2048 else 4)
    return out


# --8<-- [end:softmax]


# --8<-- [start:matmul]
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  GROUP: tl.constexpr, EVEN_K: tl.constexpr):
    # Which BM x BN tile of C is mine? Tiles are visited in groups of
    # GROUP rows so that neighbouring programs share tiles of A and B in L2.
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP * tiles_n)
    first_m = group * GROUP
    rows_in_group = min(tiles_m - first_m, GROUP)
    pid_m = first_m + (pid % (GROUP * tiles_n)) % rows_in_group
    pid_n = (pid % (GROUP * tiles_n)) // rows_in_group

    rm = (pid_m * BM + tl.arange(0, BM)) % M
    rn = (pid_n * BN + tl.arange(0, BN)) % N
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * s_am + rk[None, :] * s_ak
    b = b_ptr + rk[:, None] * s_bk + rn[None, :] * s_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)  # accumulate in float32
    for k in range(0, tl.cdiv(K, BK)):
        if EVEN_K:  # K is a multiple of BK: no mask, simpler loads
            tile_a = tl.load(a)
            tile_b = tl.load(b)
        else:
            left = K - k * BK
            tile_a = tl.load(a, mask=rk[None, :] < left, other=0.0)
            tile_b = tl.load(b, mask=rk[:, None] < left, other=0.0)
        acc = tl.dot(tile_a, tile_b, acc)  # tensor cores on a GPU
        a += BK * s_ak
        b += BK * s_bk
    c = acc.to(c_ptr.dtype.element_ty)
    cm = pid_m * BM + tl.arange(0, BM)
    cn = pid_n * BN + tl.arange(0, BN)
    mask = (cm[:, None] < M) & (cn[None, :] < N)
    tl.store(c_ptr + cm[:, None] * s_cm + cn[None, :] * s_cn, c, mask=mask)


# --8<-- [end:matmul]

# --8<-- [start:autotune]
def _config(bm, bn, bk, warps, stages):
    return triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP": 8},
                         num_warps=warps, num_stages=stages)


# Five configurations: every one that won a size from 512 to 8192 in the
# book's runs on an H100 and an H200 (the records' notes); the four that
# never won only lengthened each size's tuning.
CONFIGS = [
    _config(128, 256, 64, 8, 3),
    _config(128, 256, 64, 8, 4),
    _config(128, 128, 64, 4, 4),
    _config(128, 128, 64, 8, 5),
    _config(64, 128, 64, 4, 4),
]


def _bench(kernel_call, quantiles):
    # 25 ms of calls per configuration rather than Triton's 100 ms: the
    # winners differ by more than the spread of a few dozen calls.
    return triton.testing.do_bench(kernel_call, warmup=5, rep=25,
                                   quantiles=quantiles)


# Each size is tuned once: every config is timed, the fastest is kept.
matmul_tuned = triton.autotune(configs=CONFIGS, key=["M", "N", "K"],
                               do_bench=_bench)(
    triton.heuristics({"EVEN_K": lambda a: a["K"] % a["BK"] == 0})(
        matmul_kernel))
# --8<-- [end:autotune]


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    (M, K), (_, N) = a.shape, b.shape
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    args = (a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride())
    if INTERPRETED:  # one small config: the interpreter is slow
        grid = (triton.cdiv(M, 32) * triton.cdiv(N, 32),)
        matmul_kernel[grid](*args, BM=32, BN=32, BK=32, GROUP=4,
                            EVEN_K=K % 32 == 0)
    else:
        def grid(meta):
            return (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)

        matmul_tuned[grid](*args)
    return c


def compile_configs(a: torch.Tensor) -> None:
    """Compile the matmul once per configuration, all at once in threads,
    before the autotuner first times them: it would compile each the
    first time it launches it, one after another. Most of a compile runs
    outside the interpreter (LLVM, ptxas), so the threads overlap. The
    kernels are the ones every size launches: the sizes here are all
    multiples of 16, which is what Triton specialises integers on."""
    from concurrent.futures import ThreadPoolExecutor

    c = torch.empty_like(a)
    (M, K), N = a.shape, a.shape[1]
    args = (a, a, c, M, N, K, *a.stride(), *a.stride(), *c.stride())

    def warm(config):
        matmul_kernel.warmup(*args, grid=(1,), EVEN_K=K % config.kwargs[
            "BK"] == 0, num_warps=config.num_warps,
            num_stages=config.num_stages, **config.kwargs)

    with ThreadPoolExecutor(len(CONFIGS)) as pool:
        list(pool.map(warm, CONFIGS))


def measure(lab) -> None:
    if lab.cuda == INTERPRETED:
        raise SystemExit("triton_kernels: run on the CPU only where torch "
                         "sees no GPU (the interpreter is chosen at import)")
    device = lab.device
    g = torch.Generator(device=device).manual_seed(0)
    half = torch.float16

    # Vector add: bandwidth against torch's own add. Checked on an odd
    # size (the mask matters) small enough to compare on the host quickly.
    n = 100_003 if lab.quick else 2**28
    checked = n if lab.quick else 1_000_003
    x = torch.randn(checked, generator=g, device=device)
    y = torch.randn(checked, generator=g, device=device)
    lab.check("add", add(x, y), x + y, tolerance=1e-7)
    x = torch.randn(n, generator=g, device=device)
    y = torch.randn(n, generator=g, device=device)
    versus(lab, {"triton": lambda: add(x, y), "torch": lambda: x + y},
           {"kernel": "add", "size": n}, baseline="torch",
           nbytes=3 * 4 * n)
    del x, y

    # Softmax over rows: one read and one write of the matrix; checked on
    # its first rows (the kernel runs one program per row, all alike).
    rows, cols = (64, 781) if lab.quick else (32768, 4096)
    s = torch.randn(rows, cols, generator=g, device=device, dtype=half)
    head = s[:512]
    lab.check("softmax", softmax(head), torch.softmax(head.float(), dim=-1),
              tolerance=2e-3)
    versus(lab, {"triton": lambda: softmax(s),
                 "torch": lambda: torch.softmax(s, dim=-1)},
           {"kernel": "softmax", "size": rows * cols}, baseline="torch",
           nbytes=2 * 2 * rows * cols)
    del s

    # Matmul: float16 in, float32 accumulation, against cuBLAS.
    library = "cuBLAS" if lab.cuda else "torch"
    sms = (torch.cuda.get_device_properties(device).multi_processor_count
           if lab.cuda else None)
    sizes = [64, 80] if lab.quick else [512, 1024, 2048, 3072, 4096,
                                        6144, 8192]
    for size in sizes:
        a = torch.randn(size, size, generator=g, device=device, dtype=half)
        if lab.cuda and size == sizes[0]:
            compile_configs(a)
        b = torch.randn(size, size, generator=g, device=device, dtype=half)
        # The first call of a new size also runs the autotuner.
        c = matmul(a, b)
        rows_checked = slice(0, 256)
        lab.check(f"matmul {size}", c[rows_checked],
                  a[rows_checked].double() @ b.double(), tolerance=2e-3)
        del c
        row = {"kernel": "matmul", "provider": "triton", "size": size}
        best = getattr(matmul_tuned, "best_config", None)
        if lab.cuda and best is not None:
            # How full the GPU is: output tiles per SM (the last wave of a
            # fractional count runs with SMs idle).
            tiles = (triton.cdiv(size, best.kwargs["BM"])
                     * triton.cdiv(size, best.kwargs["BN"]))
            lab.note(f"matmul config {size}", str(best))
            lab.value(case=row, metric="tiles", value=tiles, unit="")
            lab.value(case=row, metric="waves", value=tiles / sms, unit="")
        calls = {"triton": lambda: matmul(a, b),
                 library: lambda: torch.matmul(a, b)}
        kernel = versus(lab, calls, {"kernel": "matmul", "size": size},
                        baseline=library, flops=2 * size**3,
                        ratio="fraction_of_library")
        # Host-inclusive: events around one call from Python also time the
        # launch, while the GPU waits for it; interleaved in rounds too.
        single = lab.compare(calls, case={"kernel": "matmul", "size": size},
                             key="provider", metric="time_one_call",
                             baseline=library,
                             speedup_metric="fraction_one_call")
        for name in calls:
            lab.value(case={"kernel": "matmul", "provider": name,
                            "size": size},
                      metric="one_call_vs_kernel", unit="x",
                      value=single[name].median / kernel[name].median)
        del a, b


# --8<-- [start:versus]
def versus(lab, calls, case, *, baseline, nbytes=None, flops=None,
           ratio="speedup"):
    """Time ``calls`` (provider -> fn) against each other in interleaved
    rounds (``lab.compare``) by the GPU's own durations of their kernels
    (``timer="kernel"``: the profiler's, summed per call; the host clock
    on a CPU), kept as ``kernel_time``; keep each one's bandwidth or rate,
    and as ``ratio`` the paired ratio of the baseline's time over the
    other's: the other's rate as a fraction of the baseline's.

    Each call must run the same GPU work every time, which the kernel
    timer checks: the autotuner's first call of a size (which benchmarks
    every configuration) has run before, in the correctness check, and
    ``lab.compare`` warms every variant up before it counts a call's
    kernels."""
    times = lab.compare(calls, case=case, key="provider", metric="kernel_time",
                        baseline=baseline, speedup_metric=ratio,
                        timer="kernel")
    for name, t in times.items():
        row = case | {"provider": name}
        if nbytes is not None:
            lab.value(case=row, metric="bandwidth", unit="GB/s",
                      value=nbytes / t.median / 1e3)
        if flops is not None:
            lab.value(case=row, metric="rate", unit="TFLOP/s",
                      value=flops / t.median / 1e6)
    return times
# --8<-- [end:versus]


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
