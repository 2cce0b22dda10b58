"""Three Triton kernels written for the book: vector add, softmax, matmul.

Each is checked against torch, then timed against torch's own kernel (for the
matmul: cuBLAS) across sizes. On a GPU the comparison is by kernel duration
from the profiler (CUPTI), so that the host's share of a call (the
autotuner's cache look-up and Triton's launcher, or ATen's dispatch) does not
enter it. The matmuls are also timed one call alone with events
(``time_one_call``), a figure that includes that host time.

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


CONFIGS = [
    _config(128, 256, 64, 8, 3),
    _config(128, 256, 64, 8, 4),
    _config(256, 128, 64, 8, 3),
    _config(256, 128, 64, 8, 4),
    _config(128, 128, 64, 4, 4),
    _config(128, 128, 64, 8, 5),
    _config(128, 128, 128, 8, 3),
    _config(64, 256, 64, 4, 4),
    _config(64, 128, 64, 4, 4),
]
# Each size is tuned once: every config is timed, the fastest is kept.
matmul_tuned = triton.autotune(configs=CONFIGS, key=["M", "N", "K"])(
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


def measure(lab) -> None:
    if lab.cuda == INTERPRETED:
        raise SystemExit("triton_kernels: run on the CPU only where torch "
                         "sees no GPU (the interpreter is chosen at import)")
    from examples.compile.fusion import time_per_call

    device = lab.device
    g = torch.Generator(device=device).manual_seed(0)
    half = torch.float16

    # Vector add: bandwidth against torch's own add.
    n = 100_003 if lab.quick else 2**28  # odd size: the mask matters
    x = torch.randn(n, generator=g, device=device)
    y = torch.randn(n, generator=g, device=device)
    lab.check("add", add(x, y), x + y, tolerance=1e-7)
    for name, fn in (("triton", add), ("torch", torch.add)):
        case = {"kernel": "add", "provider": name, "size": n}
        t, _ = time_per_call(lab, lambda: fn(x, y), case, "kernel_time")
        lab.value(case=case, metric="bandwidth",
                  value=3 * 4 * n / t.median / 1e3, unit="GB/s")
    del x, y

    # Softmax over rows: one read and one write of the matrix.
    rows, cols = (64, 781) if lab.quick else (32768, 4096)
    s = torch.randn(rows, cols, generator=g, device=device, dtype=half)
    lab.check("softmax", softmax(s), torch.softmax(s.float(), dim=-1),
              tolerance=2e-3)
    for name, fn in (("triton", softmax),
                     ("torch", lambda t: torch.softmax(t, dim=-1))):
        case = {"kernel": "softmax", "provider": name, "size": rows * cols}
        t, _ = time_per_call(lab, lambda: fn(s), case, "kernel_time")
        lab.value(case=case, metric="bandwidth",
                  value=2 * 2 * rows * cols / t.median / 1e3, unit="GB/s")
    del s

    # Matmul: float16 in, float32 accumulation, against cuBLAS.
    library = "cuBLAS" if lab.cuda else "torch"
    sms = (torch.cuda.get_device_properties(device).multi_processor_count
           if lab.cuda else None)
    sizes = [64, 80] if lab.quick else [512, 1024, 2048, 3072, 4096,
                                        6144, 8192]
    for size in sizes:
        a = torch.randn(size, size, generator=g, device=device, dtype=half)
        b = torch.randn(size, size, generator=g, device=device, dtype=half)
        # The first call of a new size also runs the autotuner.
        lab.check(f"matmul {size}", matmul(a, b),
                  a.double() @ b.double(), tolerance=2e-3)
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
        rates, one_call = {}, {}
        for name, fn in (("triton", matmul), (library, torch.matmul)):
            case = {"kernel": "matmul", "provider": name, "size": size}
            t, _ = time_per_call(lab, lambda: fn(a, b), case, "kernel_time")
            rates[name] = 2 * size**3 / t.median / 1e6
            lab.value(case=case, metric="rate", value=rates[name],
                      unit="TFLOP/s")
            # Host-inclusive: events around one call from Python also time
            # the launch, while the GPU waits for it.
            single = lab.time(lambda: fn(a, b), case=case,
                              metric="time_one_call")
            one_call[name] = 2 * size**3 / single.median / 1e6
            lab.value(case=case, metric="one_call_vs_kernel", unit="x",
                      value=single.median / t.median)
        lab.value(case=row, metric="fraction_of_library",
                  value=rates["triton"] / rates[library], unit="x")
        lab.value(case=row, metric="fraction_one_call",
                  value=one_call["triton"] / one_call[library], unit="x")
        del a, b


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
