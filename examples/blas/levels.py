"""BLAS Levels 1, 2 and 3 on one roofline: AXPY, GEMV and GEMM timed.

Each level is timed over the same ``n``: AXPY on n*n elements, GEMV on an
n-by-n matrix, GEMM on n-by-n matrices. Level 1 and 2 touch every byte once
per two flops and so run at memory speed; Level 3 reuses each byte n times and
runs at tensor-core speed. A device-to-device copy measured in the same run
gives the bandwidth roof. The record also notes which BLAS this torch build
uses and which kernels ran.

Every ``time`` (and every rate and bandwidth computed from it) is the GPU's
own duration of the call's kernels, from the profiler (CUPTI), with the L2
cleared before each call. ``one_call`` is the same call timed as one would
from Python, by events around one call: it adds the host's share of the call
(Python, ATen's dispatch, the enqueue), during which the GPU waits.
"""

from __future__ import annotations

import sys

import torch

KERNEL_NOTE_LIMIT = 3


# --8<-- [start:model]
def traffic(level: str, n: int, itemsize: int) -> tuple[float, float]:
    """Flops and the fewest bytes each operation must move, for size n."""
    if level == "axpy":  # y = a*x + y on n*n elements: read x, y; write y
        return 2.0 * n * n, 3.0 * n * n * itemsize
    if level == "gemv":  # y = A x: read A (n*n), x; write y
        return 2.0 * n * n, (n * n + 2 * n) * itemsize
    if level == "gemm":  # C = A B: read A, B; write C
        return 2.0 * n**3, 3.0 * n * n * itemsize
    raise ValueError(level)


# --8<-- [end:model]


# --8<-- [start:ops]
def operation(level: str, n: int, dtype, device):
    """The timed call for one level, with fresh random operands."""
    g = torch.Generator(device=device).manual_seed(n)
    rand = lambda *shape: torch.randn(  # noqa: E731
        *shape, generator=g, device=device, dtype=dtype
    )
    if level == "axpy":
        x, y = rand(n * n), rand(n * n)
        return (lambda: y.add_(x, alpha=0.5)), (x, y)
    if level == "gemv":
        a, x = rand(n, n), rand(n)
        return (lambda: a @ x), (a, x)
    a, b = rand(n, n), rand(n, n)
    return (lambda: a @ b), (a, b)


# --8<-- [end:ops]


def blas_library() -> dict[str, str]:
    """What torch says about its BLAS, read from torch.__config__.show()."""
    # --8<-- [start:library]
    config = torch.__config__.show()
    found = {}
    for line in config.splitlines():
        line = line.strip().removeprefix("- ")
        if "Math Kernel Library" in line or line.startswith("OpenBLAS"):
            found["library line"] = line
        settings = line.removeprefix("Build settings:")
        for part in settings.split(","):
            name, _, value = part.strip().partition("=")
            if name in ("BLAS_INFO", "LAPACK_INFO", "CUDA_VERSION",
                        "CUDNN_VERSION", "TORCH_VERSION"):
                found[name] = value
    found["mkl available"] = str(torch.backends.mkl.is_available())
    if torch.cuda.is_available():
        found["cuBLASLt preferred"] = str(
            torch.backends.cuda.preferred_blas_library()
        )
    # --8<-- [end:library]
    return found


def kernels_of(fn, device) -> list[str]:
    """Names of the device kernels (or CPU ops) one call of fn ran."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    fn()
    with profile(activities=activities) as prof:
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
    names = []
    for e in prof.key_averages():
        on_device = getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
        if device.type == "cuda" and not on_device:
            continue
        if device.type != "cuda" and not e.key.startswith("aten::"):
            continue
        names.append(e.key[:90])
    return names[:KERNEL_NOTE_LIMIT]


def measure(lab) -> None:
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    itemsize = torch.empty(0, dtype=dtype).element_size()
    sizes = [256, 512] if lab.quick else [2048, 4096, 8192, 16384]
    for key, value in blas_library().items():
        lab.note(key, value)

    # Correct first: each level against float64 on fresh inputs.
    n = 256 if lab.quick else 2048
    for level in ("gemv", "gemm"):
        fn, args = operation(level, n, dtype, lab.device)
        ref = args[0].double() @ args[1].double()
        lab.check(f"{level} n={n}", fn(), ref, tolerance=2e-2)
    fn, (x, y) = operation("axpy", n, dtype, lab.device)
    expected = y.double() + 0.5 * x.double()
    fn()
    lab.check(f"axpy n={n}", y, expected, tolerance=2e-2)

    # Every time below that a rate is computed from is the GPU's own
    # duration of the call's kernels (timer="kernel"; the host clock on a
    # CPU): a GEMV of a few microseconds timed by events around one call
    # from Python is mostly the host's share (Python, ATen's dispatch, the
    # enqueue) spent before the kernel starts, and reads as a slow kernel.

    # The roof: a device-to-device copy of 2 GiB (bytes read + written).
    count = (2**20 if lab.quick else 2**30) // itemsize
    src = torch.randn(count, device=lab.device).to(dtype)
    dst = torch.empty_like(src)
    roof = {"level": "copy", "part": "roof"}
    copy = lab.time(lambda: dst.copy_(src), case=roof, metric="time",
                    timer="kernel")
    copy_bandwidth = 2 * count * itemsize / copy.median / 1e3
    lab.value(case=roof, metric="bandwidth", value=copy_bandwidth, unit="GB/s")

    copy_bytes = 2 * count * itemsize
    for n in sizes:
        # The three levels beside the copy, in alternating rounds, all in
        # one profiler session. AXPY's and GEMV's fraction_of_copy is the
        # paired ratio of the copy's time to its own in one round, times
        # the ratio of their bytes (GEMM is no fraction of a copy). Their
        # inputs fit in L2 at small n: it is cleared before every call (the
        # clear is not part of any call's kernel time).
        calls = {"copy": lambda: dst.copy_(src)}
        fns, rows, ratios, cases = {}, {}, {}, {}
        for level in ("axpy", "gemv", "gemm"):
            flops, nbytes = traffic(level, n, itemsize)
            fns[level], _ = operation(level, n, dtype, lab.device)
            cases[level] = {"level": level, "n": n, "part": "levels",
                            "intensity": round(flops / nbytes, 2)}
            calls[level] = fns[level]
            rows[level] = (cases[level], "time")
            if level != "gemm":
                ratios[level] = (cases[level], "fraction_of_copy",
                                 nbytes / copy_bytes)
            if n == sizes[-1]:
                lab.note(f"{level} kernels", kernels_of(fns[level], lab.device))
        # The levels and the copy in alternating rounds, by the GPU's own
        # durations of their kernels; each level kept under its own case.
        times = lab.compare_rows(calls, rows, baseline="copy", ratios=ratios,
                                 timer="kernel", flush_l2=True)
        for level, t in times.items():
            keep(lab, cases[level], t, *traffic(level, n, itemsize))
            # The same call timed as a reader would from Python: events
            # around one call after the L2 is cleared, the host's share of
            # the call included. Past 4096 a GEMM takes milliseconds and the
            # host's microseconds disappear in it: not timed there.
            if level != "gemm" or n <= 4096:
                one = lab.time(fns[level], case=cases[level],
                               metric="one_call", flush_l2=True)
                lab.value(case=cases[level], metric="one_call_vs_kernel",
                          value=one.median / t.median, unit="x")
    del src, dst


def keep(lab, case, t, flops, nbytes) -> None:
    seconds = t.median / 1e6
    lab.value(case=case, metric="rate", value=flops / seconds / 1e12,
              unit="TFLOP/s")
    lab.value(case=case, metric="bandwidth", value=nbytes / seconds / 1e9,
              unit="GB/s")


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
