"""What each layer under one tiny op costs the CPU, measured layer by layer.

Each case adds one layer to the one before: a Python call, a call across the
binding into C++, a trip through the dispatcher that makes a new tensor
header but runs no kernel (``detach``), a real CPU kernel, a bare CUDA launch
(no dispatcher, no tensor), a whole CUDA op (the same add, on the GPU: dispatcher,
TensorIterator, allocator and launch), and a cuBLAS matrix product (the library
picks an algorithm, then launches). Every sample of a case is the average of
many back-to-back calls on a synchronized host clock, which is the CPU-side
cost: the GPU runs the tiny kernels faster than the CPU issues them. The cases
are timed together in interleaved rounds (``lab.compare``), one sample of each
per round, so that a drift of the host's clock or load falls on every row
alike, and the rows compare within one run. On a GPU every row but the bare
launch also gets ``bare_launch_over_layer``: the bare launch's sample over that
row's sample of the same round (for the CUDA op, the share of its cost that is
the launch).
"""

from __future__ import annotations

import sys
from functools import partial

import torch


# --8<-- [start:layers]
def python_call(t):
    return t  # the cost of calling a Python function, nothing else


def layers(device: torch.device) -> dict[str, tuple]:
    """Each layer's case: the function to call and its arguments."""
    x = torch.randn(4)
    cases = {
        "1 Python call": (python_call, (x,)),
        "2 binding (x.dim())": (torch.Tensor.dim, (x,)),
        "3 dispatcher, no kernel (x.detach())": (torch.Tensor.detach, (x,)),
        "4 CPU kernel (add, 4 floats)": (torch.add, (x, x)),
        "5 CPU matmul (16x16, BLAS)": (torch.mm, (torch.randn(16, 16),) * 2),
    }
    if device.type == "cuda":
        g = torch.randn(4, device=device)
        a = torch.randn(16, 16, device=device)
        # A launch and nothing else: torch.cuda._sleep is a Python function
        # around a C method of torch._C that releases the GIL, gets the
        # current stream and launches ATen's one-thread spin_kernel
        # (aten/src/ATen/cuda/Sleep.cu), then checks cudaGetLastError. No
        # dispatcher, no tensor, no allocator; with 0 cycles the kernel
        # exits at once, so the GPU keeps pace with the host.
        cases["6 bare CUDA launch (torch.cuda._sleep(0))"] = (
            torch.cuda._sleep, (0,))
        cases["7 CUDA op (add, 4 floats)"] = (torch.add, (g, g))
        cases["8 cuBLAS matmul (16x16)"] = (torch.mm, (a, a))
    return cases


# --8<-- [end:layers]

#: The row the others are set against, where there is one: a launch and nothing else.
BARE_LAUNCH = "6 bare CUDA launch (torch.cuda._sleep(0))"


def measure(lab) -> None:
    calls = 200 if lab.quick else 1000
    cases = layers(lab.device)
    # Correctness first: each case computes what it claims to.
    x = cases["4 CPU kernel (add, 4 floats)"][1][0]
    lab.check("add", torch.add(x, x), 2 * x.double(), tolerance=1e-6)
    m = cases["5 CPU matmul (16x16, BLAS)"][1][0]
    lab.check("mm", torch.mm(m, m), m.double() @ m.double(), tolerance=1e-5)
    if lab.cuda:
        a = cases["8 cuBLAS matmul (16x16)"][1][0]
        lab.check("cuBLAS mm", torch.mm(a, a), a.double() @ a.double(),
                  tolerance=1e-2)  # TF32 may be on
    # All rows in the same interleaved rounds, one sample of each per round, so that
    # the host's drift (its clock, what else it runs) falls on every row alike. A
    # host_sync sample synchronizes the device before its first call and after its
    # last, inside the sample: a CUDA row's kernels are done within its own sample
    # and none is still queued when the next row's sample starts. partial binds
    # each case's arguments in C: the example adds no Python frame of its own to
    # the harness's per-call floor.
    lab.compare(
        {name: partial(fn, *args) for name, (fn, args) in cases.items()},
        case={},
        key="layer",
        metric="per_call",
        unit="us",
        timer="host_sync",
        inner=calls,
        baseline=BARE_LAUNCH if BARE_LAUNCH in cases else None,
        speedup_metric="bare_launch_over_layer",
    )
    if lab.cuda:
        # What the GPU ran for each CUDA rung: the page says the bare launch is one
        # kernel and nothing else, and the record shows it. Read after the timing: a
        # profiler session leaves CUPTI attached, and every launch after it costs more
        # (pytorch/pytorch#144455; measured here at about a third more a launch).
        from examples.lab.kernels import kernel_names

        for name in list(cases)[-3:]:
            fn, args = cases[name]
            names = kernel_names(lambda fn=fn, args=args: fn(*args), width=60)
            lab.note(f"GPU operations of {name[2:]}",
                     ", ".join(names) if isinstance(names, list) else names)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
