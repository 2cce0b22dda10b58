"""Which kernel did ``y = x @ w`` run? Ask the profiler.

The profiler's trace holds three kinds of event, and the example notes them
apart: the ATen ops the CPU ran (``aten::matmul``, ``aten::mm``), the CUDA
runtime and driver calls they made (a workspace ``cudaMemsetAsync``, the
launch), and the operations the GPU ran (the memset, then the GEMM kernel,
whose name encodes the architecture, tile shape and data type). On a CPU
there are only ATen ops, and ``torch.__config__.show()`` names the BLAS
library the CPU build calls. The example also times the product and reports
its rate.
"""

from __future__ import annotations

import re
import sys

import torch


# --8<-- [start:trace]
def kernels_of(fn) -> list[tuple[str, str]]:
    """(where, name) of every op and kernel that one call of ``fn`` ran."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    return [
        ("GPU" if e.device_type == DeviceType.CUDA else "CPU", e.name)
        for e in prof.events()
    ]


# --8<-- [end:trace]


#: A CUDA runtime (``cudaLaunchKernel``) or driver (``cuLaunchKernelEx``) call.
_API = re.compile(r"cu(da)?[A-Z]")


def split_trace(trace: list[tuple[str, str]]) -> dict[str, list[str]]:
    """The trace's events by kind: ATen ops, runtime and driver calls (both
    on the CPU) and GPU operations, each in the order they ran.

    ``cudaDeviceSynchronize`` is the tracer's own wait, not the product's,
    and events of neither kind (the profiler's bookkeeping, such as
    "Activity Buffer Request") are left out.
    """
    kinds: dict[str, list[str]] = {"aten": [], "api": [], "gpu": []}
    for where, name in trace:
        if where == "GPU":
            kinds["gpu"].append(name)
        elif "::" in name:  # an op of a namespace: aten::mm
            kinds["aten"].append(name)
        elif _API.match(name) and name != "cudaDeviceSynchronize":
            kinds["api"].append(name)
    return kinds


def blas_of_build() -> str:
    """The BLAS and LAPACK settings of the build (MKL, OpenBLAS, ...)."""
    import re

    config = torch.__config__.show()
    found = re.findall(r"\b(BLAS_INFO|LAPACK_INFO|USE_CUDA)=([^,\s]+)", config)
    return ", ".join(f"{k}={v}" for k, v in found) or "not reported"


def measure(lab) -> None:
    n = 256 if lab.quick else 8192
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    x = torch.randn(n, n, device=lab.device, dtype=dtype)
    w = torch.randn(n, n, device=lab.device, dtype=dtype)
    ref = x[:64].double() @ w.double()
    lab.check("x @ w (first 64 rows)", (x @ w)[:64], ref, tolerance=1e-2)
    x @ w  # warm-up: the library picks its algorithm on the first call
    lab.synchronize()
    kinds = split_trace(kernels_of(lambda: x @ w))
    lab.note("ATen ops (CPU)", ", ".join(dict.fromkeys(kinds["aten"])))
    lab.note("CUDA runtime and driver calls (CPU)",
             ", ".join(kinds["api"]) or "none (CPU run)")
    lab.note("GPU operations, in order",
             ", ".join(kinds["gpu"]) or "none (CPU run)")
    lab.note("BLAS of this build", blas_of_build())
    t = lab.time(lambda: x @ w, case={"n": n, "dtype": str(dtype)[6:]},
                 metric="time", unit="ms")
    lab.value(case={"n": n, "dtype": str(dtype)[6:]}, metric="rate",
              value=2 * n**3 / (t.median * 1e-3) / 1e12, unit="TFLOP/s")


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
