"""One Triton kernel, registered twice: ``triton_op`` lets ``torch.compile`` see it.

The kernel is SwiGLU's gate, ``silu(a) * b``: one read of each input, one
write. It is registered as ``book::silu_mul_traced`` with
``torch.library.triton_op`` (its launch wrapped in ``wrap_triton``) and as
``book::silu_mul_opaque`` with ``torch.library.custom_op`` (a black box with a
hand-written fake). Both are checked against a PyTorch twin, then each is
compiled inside ``f(a, b) = op(a, b) * 2 + 1`` with ``fullgraph=True``, and
the example records the graph breaks, whether the kernel's name is in
Inductor's generated code, the GPU kernels per call and the time per call for
a small (host-bound) and a large (memory-bound) input, the three compiled
functions of one size timed in interleaved rounds (``lab.compare``, each op's
``speedup`` paired against the twin's samples). The twin, compiled the same
way, is the third row: Inductor writes its own kernel for all of it.

On the CPU only the twin runs (compiled by Inductor for the CPU). The Triton
ops run on CPU tensors in Triton's interpreter when ``TRITON_INTERPRET=1`` is
set before import (the tests do this); compiling them needs a GPU.
"""

from __future__ import annotations

import re
import sys
import types

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

from examples.lab.kernels import gpu_split

#: Elements per Triton program; 8 per thread with the default 4 warps.
BLOCK = 1024
#: A size where a call costs its launches, not its bytes (host-bound on a GPU).
SMALL = 4096


# --8<-- [start:kernel]
@triton.jit
def silu_mul_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n  # the last program may stick out past n
    a = tl.load(a_ptr + offs, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask).to(tl.float32)
    out = a * tl.sigmoid(a) * b  # in float32, rounded once on the store
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


# --8<-- [end:kernel]


def silu_mul_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The PyTorch twin: the same arithmetic, float32 inside, rounded once."""
    return (F.silu(a.float()) * b.float()).to(a.dtype)


# --8<-- [start:triton_op]
@triton_op("book::silu_mul_traced", mutates_args=())
def silu_mul_traced(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.contiguous(), b.contiguous()
    out = torch.empty_like(a)
    n = a.numel()
    # wrap_triton: under torch.compile the launch becomes a node Inductor
    # can read; in eager mode it is a plain launch. This body is also the fake.
    wrap_triton(silu_mul_kernel)[(triton.cdiv(n, BLOCK),)](a, b, out, n, BLOCK=BLOCK)
    return out


# --8<-- [end:triton_op]


# --8<-- [start:custom_op]
@torch.library.custom_op("book::silu_mul_opaque", mutates_args=())
def silu_mul_opaque(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.contiguous(), b.contiguous()
    out = torch.empty_like(a)
    n = a.numel()
    silu_mul_kernel[(triton.cdiv(n, BLOCK),)](a, b, out, n, BLOCK=BLOCK)
    return out


@silu_mul_opaque.register_fake
def _(a, b):  # by hand: the compiler never looks inside the op
    return torch.empty_like(a)


# --8<-- [end:custom_op]


def with_elementwise_work(op):
    """``op(a, b) * 2 + 1``: work around the op that Inductor writes a kernel for.

    Each function returned has a code object of its own: Dynamo keeps compiled
    code per code object, and the registrations, compiled side by side to be
    timed in interleaved rounds, would otherwise share one cache, each call
    testing the guards of the others' entries before finding its own.
    """
    def f(a, b):
        return op(a, b) * 2 + 1
    return types.FunctionType(f.__code__.replace(), f.__globals__, f.__name__,
                              f.__defaults__, f.__closure__)


def registrations(cuda: bool) -> dict:
    """The ways to run ``silu(a) * b`` here: the Triton ops need a GPU to compile."""
    ways = {"torch": silu_mul_reference}
    if cuda:
        ways = {"triton_op": torch.ops.book.silu_mul_traced,
                "custom_op": torch.ops.book.silu_mul_opaque, **ways}
    return ways


def size_label(n: int) -> str:
    """``4096`` -> ``"4Ki"``: a string that page shortcodes cannot misread as a number."""
    for shift, prefix in ((20, "Mi"), (10, "Ki")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{prefix}"
    return f"{n} elements"


def launch_lines(code: str, width: int = 160) -> list[str]:
    """The lines of Inductor's wrapper code that launch a kernel or call an op."""
    lines = [line.strip() for line in code.splitlines()]
    return [line[:width] for line in lines
            if ".run(" in line or re.match(r"(\w+ = )?torch\.ops\.book\.", line)]


def graph_breaks(fn, *args) -> int:
    return torch._dynamo.explain(fn)(*args).graph_break_count


def check_ops(lab) -> None:
    """Both Triton ops against the twin, in float32 and in bfloat16."""
    for dtype, tolerance in ((torch.float32, 1e-6), (torch.bfloat16, 1e-2)):
        g = torch.Generator(device=lab.device).manual_seed(0)
        a, b = (torch.randn(4099, generator=g, device=lab.device, dtype=dtype)  # masked tail
                for _ in range(2))
        want = silu_mul_reference(a, b)
        for name, op in (("triton_op", torch.ops.book.silu_mul_traced),
                         ("custom_op", torch.ops.book.silu_mul_opaque)):
            got = op(a, b)
            lab.check(f"{name} = twin, {str(dtype).removeprefix('torch.')}", got, want,
                      tolerance=tolerance)


def compile_and_get_code(compiled, *args):
    """The first call of ``compiled`` (which compiles it) and Inductor's code for
    it: ``run_and_get_code`` without its ``torch._dynamo.reset()``, which would
    drop the other registrations' compiled code."""
    from unittest import mock

    from torch._inductor.graph import GraphLowering

    codes: list[str] = []
    with mock.patch.object(GraphLowering, "save_output_code", codes.append):
        out = compiled(*args)
    return out, codes


def measure_size(lab, n: int, dtype: torch.dtype) -> None:
    """``op(a, b) * 2 + 1`` under ``torch.compile`` for every registration, on
    one input size: breaks, code and kernels, then the times, interleaved."""
    g = torch.Generator(device=lab.device).manual_seed(n)
    a, b = (torch.randn(n, generator=g, device=lab.device, dtype=dtype) for _ in range(2))
    size = size_label(n)
    fs = {name: with_elementwise_work(op) for name, op in registrations(lab.cuda).items()}
    if n == SMALL:  # what Dynamo sees does not depend on the size
        for name, f in fs.items():  # (explain resets Dynamo: before any compile)
            lab.value(case={"registration": name, "size": size}, metric="graph_breaks",
                      value=graph_breaks(f, a, b), unit="")
    torch._dynamo.reset()  # the last size's compiled code is of no more use
    want = with_elementwise_work(silu_mul_reference)(a, b)
    compiled = {}
    for name, f in fs.items():
        case = {"registration": name, "size": size}
        compiled[name] = torch.compile(f, fullgraph=True, dynamic=False)
        out, codes = compile_and_get_code(compiled[name], a, b)
        lab.check(f"compiled {name}, {size}", out, want,
                  tolerance=1e-2 if dtype == torch.bfloat16 else 1e-6)
        if lab.cuda:
            code = "\n".join(codes)
            lab.value(case=case, metric="kernel_in_code", unit="",  # 1: Inductor launches it itself
                      value=float(silu_mul_kernel.__name__ in code))
            if n == SMALL:
                lab.note(f"Inductor's launches, {name}", launch_lines(code))
    # Interleaved rounds; each op's ``speedup`` is the twin's sample over its own.
    lab.compare(compiled, case={"size": size}, key="registration", metric="time",
                unit="us", baseline="torch", inputs=[(a, b)])
    if lab.cuda:
        for name, fn in compiled.items():
            lab.value(case={"registration": name, "size": size}, metric="kernels_per_call",
                      unit="", value=gpu_split(lambda fn=fn: fn(a, b), 10, host_ops=False).kernels)


def measure(lab) -> None:
    if lab.cuda:
        check_ops(lab)
    else:  # no Triton on the CPU: the twin against silu's definition, in float64
        g = torch.Generator().manual_seed(0)
        a, b = (torch.randn(4099, generator=g) for _ in range(2))
        lab.check("twin = a * sigmoid(a) * b", silu_mul_reference(a, b),
                  a.double() * torch.sigmoid(a.double()) * b.double(), tolerance=1e-6)
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    large = 1 << 20 if lab.quick else 1 << 26  # 64 Mi bf16 = 128 MiB a tensor: past any L2
    for n in (SMALL, large):
        measure_size(lab, n, dtype)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
