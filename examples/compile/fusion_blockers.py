"""What stops Inductor from fusing a chain it would otherwise fuse, read from its own output.

One computation, ``gelu(tanh(2x + 1))``, compiled three ways that differ only in what
Inductor is allowed to see, and a row-wise pattern turned by 90 degrees:

* ``one graph``: the control. Four pointwise ops, one kernel.
* ``a graph break``: the same ops with ``torch._dynamo.graph_break()`` between ``tanh``
  and ``gelu``, as a ``print``, an ``.item()`` or an unsupported call puts one. Dynamo
  hands Inductor two graphs, and Inductor fuses only within a graph.
* ``an opaque op``: ``tanh`` wrapped in a custom operator (``torch.library.custom_op``),
  as a hand-written CUDA kernel would be. Inductor calls it as it is and cannot fuse
  into it or out of it.
* ``x minus its rows' means`` against ``x minus its columns' means``: ``x - x.mean(dim)``,
  the mean of each row against the mean of each column, each then used by every element
  it averaged; the columns also compiled with ``split_reductions`` off, a control for
  whether splitting the reduction is what costs.

Each compiled function is read back as ``compile.fusion_limits`` reads them (its
``launches``, over the code ``run_and_get_code`` returns), with one more kind of launch:
a call to an operator Inductor has no code for (``torch.ops.book.opaque_tanh.default(...)``
in the generated ``call``). On a GPU the profiler counts the operations one call runs, and
the kernels' own time (``timer="kernel"``) compares each compiled function with eager in
interleaved rounds: the claim is about the GPU's work, not the host's (a graph break
also costs a second guard check and launch on the host, which this leaves out). Each
operation's own duration goes in the notes, and so does the block size each generated
kernel kept from its first call's benchmark (which may differ between runs of the same
code). Nothing is compiled after it was read (a
compile while counting or timing is an error), and after timing each way must still run
exactly the operations its code launches.

Inputs are 8192 x 8192 float32 (256 MiB) on a GPU, 64 x 64 on the CPU's quick path.
Cost on an H200: 6 to 11 s alone, 4 to 5 s after another topic has compiled in the same run
(the compiler's worker processes are then up), nearly all compiling (seven small graphs); under a second of
kernels; 1.9 GiB of GPU memory at the peak (input, output, eager's intermediates).
"""
from __future__ import annotations

import re
import sys
import time

import torch
import torch.nn.functional as F

from examples.compile.fusion_limits import kernel_durations
from examples.lab.recompile import compiled_once
from examples.lab.timing import ops_per_call


def register_opaque_tanh() -> None:
    """Registers ``book::opaque_tanh`` once: ``tanh`` behind a custom operator, so that
    Inductor sees a call it cannot look into. Its fake (meta) function tells the compiler
    the output's shape without running it. Registered before compiling, not inside the
    compiled function: Dynamo cannot trace the registration, and breaking the graph there
    made every call recompile, then fall back to eager."""
    if not hasattr(torch.ops.book, "opaque_tanh"):
        @torch.library.custom_op("book::opaque_tanh", mutates_args=())
        def opaque_tanh(x: torch.Tensor) -> torch.Tensor:
            return torch.tanh(x)

        @opaque_tanh.register_fake
        def _(x):
            return torch.empty_like(x)


# --8<-- [start:patterns]
def one_graph(x):
    return F.gelu(torch.tanh(x * 2.0 + 1.0))


def a_graph_break(x):
    y = torch.tanh(x * 2.0 + 1.0)
    torch._dynamo.graph_break()  # where a print, an .item() or an unsupported call would be
    return F.gelu(y)


def an_opaque_op(x):
    return F.gelu(torch.ops.book.opaque_tanh(x * 2.0 + 1.0))  # registered beforehand


def mean_over_rows(x):
    return x - x.mean(dim=1, keepdim=True)


def mean_over_columns(x):
    return x - x.mean(dim=0, keepdim=True)
# --8<-- [end:patterns]


def mean_over_columns_again(x):
    """The same as ``mean_over_columns``, as code of its own: Dynamo keeps compiled code per
    function, and a second compile of the same one with other options is a recompile."""
    return x - x.mean(dim=0, keepdim=True)


#: pattern -> way -> function; the ways of one pattern compute the same thing, and the
#: first, run eagerly, is the reference and the baseline of the pattern's rounds.
PATTERNS = {
    "gelu(tanh(2x + 1))": {"one graph": one_graph, "a graph break": a_graph_break,
                           "an opaque op": an_opaque_op},
    "x minus its rows' means": {"compiled": mean_over_rows},
    "x minus its columns' means": {"compiled": mean_over_columns,
                                   "compiled, reduction not split": mean_over_columns_again},
}
#: Inductor options of a way (the others compile with its defaults).
OPTIONS = {"compiled, reduction not split": {"split_reductions": False}}


# --8<-- [start:read]
def compile_and_read(fn, x, options=None):
    """``fn`` compiled by Inductor (its defaults, or ``options``), its first call's output
    and seconds, and the module Inductor wrote for each graph Dynamo gave it, in order.

    Read as ``torch._inductor.utils.run_and_get_code`` reads it, less the
    ``torch._dynamo.reset()`` that function starts with: a reset drops the code of the ways
    compiled before, and they would compile again inside the timed rounds' warm-up."""
    from unittest import mock

    from torch._inductor.graph import GraphLowering

    codes: list[str] = []
    compiled = torch.compile(fn, options=options)
    start = time.perf_counter()
    with mock.patch.object(GraphLowering, "save_output_code",
                           lambda code: codes.append(code) if code not in codes else None):
        out = compiled(x)
    return compiled, out, time.perf_counter() - start, codes


#: A launch in a generated ``call``, as ``compile.fusion_limits`` reads them (a Triton kernel,
#: a C++ kernel, a library call), and a fourth kind: an operator Inductor runs as it is.
LAUNCH = re.compile(r"\b(triton_\w+)\.run\(|\b(cpp_fused_\w+)\(|\bextern_kernels\.(\w+)\("
                    r"|\b(torch\.ops\.\w+\.\w+\.\w+)\(")


def read_launches(codes: list[str]) -> dict[str, list[str]]:
    """What the ``call`` functions of the modules launch, graph after graph, in order."""
    found = {"in order": [], "generated": [], "library": [], "fallback": []}
    for code in codes:
        for triton, cpp, library, op in LAUNCH.findall(code[code.find("def call("):]):
            kind, name = (("generated", triton or cpp) if triton or cpp else
                          ("library", f"extern_kernels.{library}") if library else ("fallback", op))
            found[kind].append(name)
            found["in order"].append(name)
    return found
# --8<-- [end:read]


def blocks_kept(modules) -> list[str]:
    """Each generated Triton kernel of Inductor's ``modules`` and the launch configuration its
    first call kept: Inductor benchmarks a few block sizes for a kernel at that call and keeps
    the fastest (``CachingAutotuner``, ``torch/_inductor/runtime/triton_heuristics.py``), so two
    runs of the same code may launch it differently. ``name: XBLOCK=1024, 4 warps``, each line
    once: on an H200 one graph's kernels were found in two of the modules Inductor had loaded
    (why, not looked into), each copy with the same block."""
    kept = []
    for module in modules:
        for name, kernel in vars(module).items():
            launchers = getattr(kernel, "launchers", None)
            if not name.startswith("triton_") or not launchers:
                continue
            if len(launchers) != 1:  # not benchmarked yet: nothing was kept
                kept.append(f"{name}: {len(launchers)} configurations, none kept yet")
                continue
            config = launchers[0].config
            sizes = ", ".join(f"{key}={value}" for key, value in config.kwargs.items())
            kept.append(f"{name}: {sizes}, {config.num_warps} warps")
    return list(dict.fromkeys(kept))


def measure(lab) -> None:
    from torch._inductor.codecache import PyCodeCache

    size = (8192, 8192) if lab.cuda and not lab.quick else (64, 64)
    g = torch.Generator(device=lab.device).manual_seed(0)
    register_opaque_tanh()
    torch._dynamo.reset()  # each way is a function of its own: its cache starts empty
    for pattern, ways in PATTERNS.items():
        x = torch.randn(size, generator=g, device=lab.device)
        reference = next(iter(ways.values()))
        expected = reference(x.double())
        calls = {"eager": lambda f=reference: f(x)}
        launched = {}
        for way, fn in ways.items():
            loaded = len(PyCodeCache.modules)  # the modules Inductor loads for this way come after
            compiled, out, seconds, codes = compile_and_read(fn, x, OPTIONS.get(way))
            lab.check(f"{pattern}, {way}", out, expected, tolerance=1e-5)
            with compiled_once(f"calling {pattern}, {way} again"):
                compiled(x)  # a second call runs the code that was read, on any device
            case = {"pattern": pattern, "way": way}
            found = read_launches(codes)
            lab.value(case=case, metric="graphs", value=len(codes), unit="")
            lab.value(case=case, metric="generated_kernels", value=len(found["generated"]), unit="")
            lab.value(case=case, metric="fallback_calls", value=len(found["fallback"]), unit="")
            lab.value(case=case, metric="compile_time", value=seconds, unit="s")
            lab.note(f"launches, {pattern}, {way}", found["in order"])
            # Only Triton kernels keep a block size from a benchmark at their first call; on the
            # CPU Inductor writes C++ kernels, which have none to note.
            if lab.cuda:
                lab.note(f"blocks kept, {pattern}, {way}", blocks_kept(PyCodeCache.modules[loaded:]))
            calls[way] = lambda c=compiled: c(x)
            launched[way] = len(found["in order"])
        if lab.cuda:
            with compiled_once(f"counting and timing {pattern}"):
                for way, call in calls.items():
                    lab.value(case={"pattern": pattern, "way": way}, metric="gpu_operations", unit="",
                              value=ops_per_call(call))
                    lab.note(f"kernel durations, {pattern}, {way}", kernel_durations(call))
                # Kernels against kernels: each compiled way over eager, paired by round.
                lab.compare(calls, case={"pattern": pattern}, key="way", metric="time",
                            baseline="eager", timer="kernel")
                for way, count in launched.items():  # what was timed is what was read
                    ran = ops_per_call(calls[way])
                    if ran != count:
                        raise RuntimeError(f"{pattern}, {way}: {ran} GPU operations a call after "
                                           f"timing, where Inductor's code launches {count}")
        del x, expected, calls
    torch._dynamo.reset()


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
