"""What the dispatcher holds for one op, and what a call of it costs by each way in.

Every operator has a table: one entry per dispatch key, filled from what was
registered (a kernel for the key, a kernel for an alias key such as
``Autograd`` or ``CompositeExplicitAutograd``, or a fallback registered for
the key across all ops). ``torch._C._dispatch_dump_table`` prints the computed
table, ``torch._C._dispatch_dump`` the registrations it was computed from,
each marked ``boxed`` (takes a stack of ``IValue``) and/or ``unboxed`` (a typed
C++ function). This example keeps, as notes, the rows of ``aten::add.Tensor``
a reader cares about; the ``BackendSelect`` row of a factory
(``aten::empty.memory_format`` has no tensor argument to take a backend key
from); which keys are fallthroughs (masked out of the key set before the
lookup, so they cost nothing); and the walk a call takes through them.

Then it registers an op of its own with ``torch.library`` (a schema, one
Python kernel for CPU and CUDA, a fake kernel, a Python autograd formula),
checks it against ``torch.add``, shows its table rows and what the book's
op logger sees, and times one call of it against the same addition reached
three built-in ways: ``torch.add`` (Python binding, unboxed call), the op's
handle called boxed (``torch._C._dispatch_call_boxed``: same kernel, a stack in
between), and ``torch.ops.aten.add.Tensor`` (the ``OpOverload`` a Python
kernel or ``__torch_dispatch__`` sees). Each way is a function that makes OPS
calls; a sample is 25 such functions back to back (10 in the quick run), divided
down to one call, and the ways are interleaved in rounds with the run's tiny op
(``op_cost``'s: OPS one-element in-place adds on the run's device), so every
figure is also kept in tiny ops, paired round by round, and as a ratio to
``torch.add`` of the same round.
"""

from __future__ import annotations

import functools
import re
import sys
import time

import torch

from examples.dispatch.dispatch_keys import priority_order
from examples.dispatch.op_cost import OPS, TINY, WARMUP_ROUNDS, tiny_ops
from examples.dispatch.op_logger import log_ops
from examples.lab.timing import measure_interleaved

#: The rows of a table a reader of this chapter needs; the rest are other
#: backends (XLA, MPS, quantized, sparse...) and functorch's keys.
KEYS = ["CPU", "CUDA", "Meta", "BackendSelect", "Python", "Functionalize",
        "ADInplaceOrView", "AutogradCPU", "AutogradCUDA", "AutocastCPU",
        "AutocastCUDA"]


# --8<-- [start:table]
def table_rows(op: str, keys=KEYS) -> dict[str, str]:
    """``op``'s computed dispatch table, trimmed to ``keys``: key -> what is
    there and where it was registered, e.g. ``CPU`` -> ``kernel
    (RegisterCPU_0.cpp)``; ``fallthrough backend fallback (...)``."""
    rows = {}
    for line in torch._C._dispatch_dump_table(op).splitlines():
        key, _, rest = line.partition(": ")
        if key not in keys:
            continue
        # "fallthrough registered at /path/File.cpp:3 [backend fallback]"
        m = re.match(r"(fallthrough )?registered at (.*?)(?::\d+)? \[(.*)\]$", rest)
        fallthrough, where, kind = m.groups() if m else ("", rest, "?")
        rows[key] = f"{'fallthrough ' if fallthrough else ''}{kind} ({where.rsplit('/', 1)[-1]})"
    return rows


def registrations(op: str) -> dict[str, str]:
    """What was registered for ``op`` (not fallbacks): key -> the kernel's
    forms, ``boxed``, ``unboxed``, ``fallthrough``."""
    out = {}
    for line in torch._C._dispatch_dump(op).splitlines():
        m = re.match(r"(\S+?)(?: \(inactive\))?: .* \[ (.*)\]$", line)
        if m and "(inactive)" not in line:
            out[m.group(1)] = m.group(2).strip()
    return out


def walk(op: str, *tensors: torch.Tensor) -> str:
    """The keys a call of ``op`` on ``tensors`` holds, highest priority first,
    each with what the table has there: the tensors' keys plus the thread's
    included keys, less its excluded ones (``computeDispatchKeySet`` in
    ATen/core/dispatch/DispatchKeyExtractor.h). A fallthrough is masked out
    before the lookup; each kernel that runs redispatches to the keys below it."""
    names = set()
    for t in tensors:
        names |= _names(torch._C._dispatch_keys(t))
    names |= _names(torch._C._dispatch_tls_local_include_set())
    names -= _names(torch._C._dispatch_tls_local_exclude_set())
    rows = table_rows(op, keys=names)
    steps = []
    for key in priority_order(sorted(names)).split(", "):
        what = rows.get(key, "nothing")
        steps.append(f"{key}: {'skipped, ' if what.startswith('fallthrough') else ''}{what}")
    return " -> ".join(steps)
# --8<-- [end:table]


def _names(keyset) -> set[str]:
    inside = str(keyset).removeprefix("DispatchKeySet(").rstrip(")")
    return {k for k in inside.split(", ") if k}


# --8<-- [start:register]
@functools.cache
def scaled_add():
    """``book_dispatch::scaled_add(x, y, alpha) = x + alpha * y``, registered
    key by key: one Python kernel for CPU and for CUDA, a fake kernel (shapes
    only: Meta, FakeTensor, torch.compile), and a Python autograd formula,
    which ``register_autograd`` puts at the ``Autograd`` alias key."""
    lib = torch.library.Library("book_dispatch", "DEF")
    lib.define("scaled_add(Tensor x, Tensor y, float alpha) -> Tensor")

    def kernel(x, y, alpha):  # the dispatcher calls it boxed, through Python
        return torch.add(x, y, alpha=alpha)

    lib.impl("scaled_add", kernel, "CPU")
    lib.impl("scaled_add", kernel, "CUDA")
    torch.library.register_fake("book_dispatch::scaled_add", lib=lib)(
        lambda x, y, alpha: torch.empty_like(x))

    def setup_context(ctx, inputs, output):
        ctx.alpha = inputs[2]

    def backward(ctx, grad):  # d/dx = 1, d/dy = alpha, no gradient for alpha
        return grad, grad * ctx.alpha, None

    torch.library.register_autograd("book_dispatch::scaled_add", backward,
                                    setup_context=setup_context, lib=lib)
    scaled_add.library = lib  # registrations last as long as their Library
    return torch.ops.book_dispatch.scaled_add.default
# --8<-- [end:register]


ALPHA = 2.0


# --8<-- [start:calls]
def calls(x: torch.Tensor, y: torch.Tensor, *, builtins: bool = True) -> dict:
    """The same x + ALPHA*y, OPS times a call, by each way in."""
    custom = scaled_add()
    handle = torch._C._dispatch_find_schema_or_throw("aten::add", "Tensor")
    overload = torch.ops.aten.add.Tensor

    def python_binding():  # PythonArgParser, then an unboxed (typed) call
        for _ in range(OPS):
            out = torch.add(x, y, alpha=ALPHA)
        return out

    def boxed_handle():  # args pushed on a stack; the kernel's boxed wrapper unboxes
        for _ in range(OPS):
            out = torch._C._dispatch_call_boxed(handle, x, y, alpha=ALPHA)
        return out

    def op_overload():  # OpOverload.__call__, then the same boxed call
        for _ in range(OPS):
            out = overload(x, y, alpha=ALPHA)
        return out

    def python_kernel():  # boxed call of a Python kernel that calls torch.add
        for _ in range(OPS):
            out = custom(x, y, ALPHA)
        return out

    variants = {"torch.add": python_binding}
    if builtins:
        variants |= {"aten::add, boxed call": boxed_handle,
                     "torch.ops.aten.add.Tensor": op_overload}
    return variants | {"custom op, Python kernel": python_kernel}
# --8<-- [end:calls]


def describe(lab) -> None:
    """The tables, registrations and walks, kept as notes (no timing)."""
    devices = ["cpu"] + (["cuda"] if lab.cuda else [])
    for op in ("aten::add.Tensor", "aten::empty.memory_format", "aten::mm"):
        for key, row in table_rows(op).items():
            lab.note(f"table {op} [{key}]", row)
    for op in ("aten::add.Tensor", "aten::empty.memory_format"):
        lab.note(f"registrations {op}", registrations(op))
    custom = scaled_add()
    name = "book_dispatch::scaled_add"
    for key, row in table_rows(name).items():
        lab.note(f"table {name} [{key}]", row)
    lab.note(f"registrations {name}", registrations(name))
    for device in devices:
        x = torch.randn(4, device=device)
        w = torch.randn(4, device=device, requires_grad=True)
        # requires_grad adds no key (every tensor made outside inference_mode has
        # its Autograd key): the walk is the same with or without it.
        lab.note(f"walk aten::add.Tensor, {device}", walk("aten::add.Tensor", x, w))
        lab.note(f"walk {name}, {device}", walk(name, x, w))
        with torch.autocast(device, dtype=torch.bfloat16):
            lab.note(f"walk aten::mm in autocast, {device}", walk("aten::mm", x, x))
            lab.note(f"walk aten::add.Tensor in autocast, {device}",
                     walk("aten::add.Tensor", x, x))
    # No tensor argument: only the thread's keys, and BackendSelect's kernel picks
    # the backend from the dtype, layout and device arguments, then redispatches.
    lab.note("walk aten::empty.memory_format (no tensor argument)",
             walk("aten::empty.memory_format")
             + " -> (backend key from the device argument) -> CPU or CUDA: kernel")
    # What a TorchDispatchMode (the Python key) sees: the custom op is one op;
    # its backward is the formula's aten ops.
    x = torch.randn(4, device=lab.device)
    w = torch.randn(4, device=lab.device, requires_grad=True)
    lab.note("op logger, forward of the custom op", log_ops(lambda: custom(x, w, ALPHA)))
    out = custom(x, w, ALPHA)
    grad = torch.ones_like(out)
    lab.note("op logger, its backward", log_ops(lambda: torch.autograd.grad(out, w, grad)))
    lab.note("autograd node of the custom op", type(out.grad_fn).__name__)


def check(lab) -> None:
    custom = scaled_add()
    for device in ["cpu"] + (["cuda"] if lab.cuda else []):
        x = torch.randn(1000, device=device, dtype=torch.float64, requires_grad=True)
        y = torch.randn(1000, device=device, dtype=torch.float64, requires_grad=True)
        out = custom(x, y, ALPHA)
        lab.check(f"custom op = x + alpha*y ({device})", out, x.detach() + ALPHA * y.detach(),
                  tolerance=1e-12)
        g = torch.randn_like(out)
        gx, gy = torch.autograd.grad(out, (x, y), g)
        lab.check(f"custom op gradient of x ({device})", gx, g, tolerance=1e-12)
        lab.check(f"custom op gradient of y ({device})", gy, ALPHA * g, tolerance=1e-12)
        # Schema, fake kernel, autograd registration and dispatch, all checked by torch.
        torch.library.opcheck(custom, (x, y, ALPHA))
        a, b = torch.randn(16, device=device), torch.randn(16, device=device)
        for name, call in calls(a, b).items():
            lab.check(f"{name} ({device})", call(), a.double() + ALPHA * b.double(),
                      tolerance=1e-6)
    lab.note("opcheck", "passed for book_dispatch::scaled_add")


def measure(lab) -> None:
    check(lab)
    describe(lab)
    calls_per_sample = 10 if lab.quick else 25
    method = "host_sync, interleaved rounds"
    for device in ["cpu"] + (["cuda"] if lab.cuda else []):
        for inputs in ("plain", "requires_grad"):
            x = torch.randn(16, device=device)
            y = torch.randn(16, device=device, requires_grad=inputs == "requires_grad")
            # With a grad, the built-in boxed ways add nothing torch.add's row does not.
            variants = calls(x, y, builtins=inputs == "plain")
            tiny, _ = tiny_ops(lab.device.type)
            variants[TINY] = tiny
            began = time.monotonic()
            samples = measure_interleaved(variants, device=lab.device, timer="host_sync",
                                          warmup=WARMUP_ROUNDS, repetitions=lab.repetitions,
                                          inner=calls_per_sample)
            lab.load.window(began, time.monotonic())
            for name, s in samples.items():
                if name == TINY and device != lab.device.type:
                    continue  # a CUDA op in the CPU rounds: there only as their unit
                row = {"device": device, "inputs": inputs, "variant": name}
                lab.keep_samples([v * 1e6 / OPS for v in s], case=row, metric="per_op",
                                 unit="us", method=method, warmup=WARMUP_ROUNDS,
                                 inner=calls_per_sample)
                if name == TINY:
                    continue
                lab.keep_samples([v / t for v, t in zip(s, samples[TINY])], case=row,
                                 metric="per_tiny_op", unit="x",
                                 method=f"paired ratio {name} / {TINY}, {method}")
                if name != "torch.add":
                    lab.keep_samples([v / b for v, b in zip(s, samples["torch.add"])],
                                     case=row, metric="slowdown", unit="x",
                                     method=f"paired ratio {name} / torch.add, {method}")


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
