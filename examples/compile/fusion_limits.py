"""What Inductor fuses and what it leaves apart, read from the code it generated.

Four small functions, each asking one question of Inductor's scheduler, compiled and then
read back as ``torch._inductor.utils.run_and_get_code`` reads them (``compile_and_read``):
the Python module Inductor wrote, whose ``call`` function launches every kernel in order. Counting its launches
(``<kernel>.run(...)`` for a Triton kernel, ``cpp_fused_...(...)`` on a CPU) and its calls
into ``extern_kernels`` (a library: cuBLAS for a matrix product) says how many kernels a
call runs and which ops went together; the kernel names say which ops each one holds. On
a GPU the profiler's count of the operations one call runs confirms it.

* ``pointwise chain``: three pointwise ops, the control: one kernel.
* ``reduction with a prologue``: a row sum of ``gelu(x)``: the pointwise work feeds the
  reduction inside one kernel, or does not.
* ``normalise by the row's mean``: a reduction whose result every element of its row uses
  again: one kernel or two.
* ``matmul, bias and GELU``: ``gelu(x @ w + b)``, compiled the default way (the product an
  extern cuBLAS call, which Inductor cannot fuse into) and with max-autotune restricted to
  Triton's GEMM templates (``max_autotune_gemm_backends="TRITON"``), which can take the
  bias and the GELU as an epilogue. The restriction is the book's: the default search
  also tries cuBLAS and would make this one shape's compile longer; the page says so.
  Max-autotune keeps an epilogue apart where its benchmark finds that faster, so a third
  way compiles it with that benchmark off. That third compile times no GEMM candidate
  again: Inductor's autotune cache (``PersistentCache.lookup`` in
  ``torch/_inductor/codecache.py``, on disk in the run's fresh cache folder) holds the
  second's timings for the same product and candidates, and with all of them there it
  skips compiling the candidates too; the notes say, for each compile, which it was.

Each compiled function is checked against eager in float32, and on a GPU its kernels'
time (``timer="kernel"``) is compared with eager's in interleaved rounds.

Cost on an H200: 18 to 24 s (three runs), nearly all of it compiling (the first
max-autotune way, 13 to 14 s, compiles and benchmarks the GEMM templates' configurations of
one 4096-cube product, then the best one with and without its epilogue; the notes keep how
many and which won; the other, about 2.5 s, reuses those timings); well under a second of
kernels; 1.5 GiB of GPU memory at the peak. The notes also keep each kernel's own
duration, eager's and each compiled way's.
"""
from __future__ import annotations

import re
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from examples.compile.modes import prune_unlaunchable_gemm_configs
from examples.lab.kernels import gpu_split
from examples.lab.recompile import compiled_once
from examples.lab.timing import ops_per_call


# --8<-- [start:patterns]
def pointwise_chain(x):
    return F.gelu(x * 2.0 + 1.0)


def reduction_with_prologue(x):
    return F.gelu(x).sum(dim=-1)


def normalise_by_row_mean(x):
    return x - x.mean(dim=-1, keepdim=True)


def matmul_bias_gelu(x, w, b):
    return F.gelu(x @ w + b)
# --8<-- [end:patterns]


#: name -> (function, its inputs' shapes on a GPU, on the CPU's quick path)
PATTERNS = {
    "pointwise chain": (pointwise_chain, [(8192, 8192)], [(64, 64)]),
    "reduction with a prologue": (reduction_with_prologue, [(8192, 8192)], [(64, 64)]),
    "normalise by the row's mean": (normalise_by_row_mean, [(8192, 8192)], [(64, 64)]),
    "matmul, bias and GELU": (matmul_bias_gelu, [(4096, 4096), (4096, 4096), (4096,)], [(64, 64), (64, 64), (64,)]),
}
#: The ways each pattern is compiled: name -> Inductor options. Max-autotune only where a
#: matrix product gives it something to choose.
DEFAULT = "default"
TRITON_TEMPLATES = "max-autotune, Triton GEMM templates only"
FORCED = "the same, epilogue fusion not benchmarked"
#: Max-autotune benchmarks a template with its epilogue fused against the template and a
#: separate epilogue kernel, and keeps the faster (``benchmark_epilogue_fusion``); the third
#: way turns that off, so Inductor decides by its own estimates and heuristics (register
#: use, spills, occupancy in ``Scheduler.speedup_by_fusion``) instead of a benchmark.
#: Configurations whose shared memory exceeds the GPU's are dropped before compiling
#: (``compile.modes`` explains why): the same candidates that can run, less compile time.
TEMPLATES = {"max_autotune": True, "max_autotune_gemm_backends": "TRITON", **prune_unlaunchable_gemm_configs()}
WAYS = {DEFAULT: {}, TRITON_TEMPLATES: TEMPLATES, FORCED: TEMPLATES | {"benchmark_epilogue_fusion": False}}


# --8<-- [start:read]
def launches(code: str) -> dict[str, list[str]]:
    """The kernels the generated ``call`` function launches, in order: Triton kernels
    (``name.run(``), C++ kernels (``cpp_fused_...(``) and library calls (``extern_kernels.mm(``)."""
    body = code[code.find("def call("):]
    found = re.findall(r"\b(triton_\w+)\.run\(|\b(cpp_fused_\w+)\(|\bextern_kernels\.(\w+)\(", body)
    return {"in order": [triton or cpp or f"extern_kernels.{lib}" for triton, cpp, lib in found],
            "generated": [triton or cpp for triton, cpp, _ in found if triton or cpp],
            "library": [f"extern_kernels.{lib}" for _, _, lib in found if lib]}
# --8<-- [end:read]


def kernel_durations(call) -> list[str] | str:
    """Each GPU operation of one call, costliest first, with its median duration over five calls."""
    split = gpu_split(call, calls=5, host_ops=False)
    if split is None:
        return "the profiler saw no GPU work"
    ranked = sorted(split.durations_us.items(), key=lambda kv: -statistics.median(kv[1]))
    return [f"{statistics.median(d):.1f} us, {name[:100]}" for name, d in ranked]


def note_autotuning(chosen: list[str]):
    """Let max-autotune report, for every product it tunes, how many candidates it had timings
    for and which won, into ``chosen`` (Inductor's feedback hook; absent in other torch versions).
    The hook also gets timings read back from Inductor's autotune cache: ``autotune_benchmarks``
    says whether a compile measured them."""
    try:
        from torch._inductor.select_algorithm import add_feedback_saver
    except ImportError:
        return

    def saver(timings, name, inputs, choices, *_):
        ranked = sorted(timings.items(), key=lambda kv: kv[1])
        if ranked:
            chosen.append(f"{name}: {len(ranked)} candidates, {ranked[0][0].name} won at {ranked[0][1]:.4f} ms")

    add_feedback_saver(saver)


def autotune_benchmarks() -> int:
    """How many times Inductor has benchmarked a set of autotuning candidates in this process
    (``AlgorithmSelectorCache.benchmark``); a lookup its autotune cache answers does not count."""
    from torch._dynamo.utils import counters

    return counters["inductor"]["select_algorithm_autotune"]


def compile_and_read(fn, args, options: dict):
    """``fn`` compiled with Inductor ``options``; its first call's output, seconds and
    generated code. Each way is a backend of its own to Dynamo, so ways compiled one after
    the other keep their own compiled code.

    Read as ``torch._inductor.utils.run_and_get_code`` reads it, less the
    ``torch._dynamo.reset()`` that function starts with: a reset drops the code of the ways
    compiled before, and the timed rounds' warm-up would compile them again (from Inductor's
    FX graph cache, if it held them; else anew, not necessarily to the code that was read)."""
    from unittest import mock

    from torch._inductor.graph import GraphLowering

    codes: list[str] = []
    compiled = torch.compile(fn, options=options) if options else torch.compile(fn)
    start = time.perf_counter()
    with mock.patch.object(GraphLowering, "save_output_code",
                           lambda code: codes.append(code) if code not in codes else None):
        out = compiled(*args)
    return compiled, out, time.perf_counter() - start, "\n".join(codes)


def measure(lab) -> None:
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    chosen: list[str] = []
    if lab.cuda:
        note_autotuning(chosen)
    g = torch.Generator(device=lab.device).manual_seed(0)
    for name, (fn, gpu_shapes, cpu_shapes) in PATTERNS.items():
        shapes = gpu_shapes if lab.cuda and not lab.quick else cpu_shapes
        args = [(torch.randn(s, generator=g, device=lab.device) / s[-1] ** 0.25).to(dtype) for s in shapes]
        expected = fn(*(a.float() for a in args))
        ways = WAYS if name == "matmul, bias and GELU" and lab.cuda else {DEFAULT: {}}
        calls = {"eager": lambda fn=fn, args=args: fn(*args)}
        torch._dynamo.reset()  # a cold start for each pattern
        for way, options in ways.items():
            chosen.clear()
            benchmarked_before = autotune_benchmarks()
            compiled, out, seconds, code = compile_and_read(fn, args, options)
            if chosen:
                benchmarked = autotune_benchmarks() - benchmarked_before
                source = (f"timed in this compile ({benchmarked} benchmarking runs)" if benchmarked else
                          "all read from Inductor's autotune cache, none timed in this compile")
                lab.note(f"autotuned, {name}, {way}", [*chosen, f"the candidates' timings: {source}"])
            lab.check(f"{name}, {way}", out.float(), expected, tolerance=2e-2)
            case = {"pattern": name, "way": way}
            found = launches(code)
            lab.value(case=case, metric="generated_kernels", value=len(found["generated"]), unit="")
            lab.value(case=case, metric="library_calls", value=len(found["library"]), unit="")
            lab.value(case=case, metric="compile_time", value=seconds, unit="s")
            lab.note(f"launches, {name}, {way}", found["in order"])
            if lab.cuda:
                lab.value(case=case, metric="gpu_operations", unit="",
                          value=ops_per_call(lambda c=compiled, a=args: c(*a)))
                lab.note(f"kernel durations, {name}, {way}", kernel_durations(lambda c=compiled, a=args: c(*a)))
            calls[way] = lambda c=compiled, a=args: c(*a)
        with compiled_once(f"counting and timing {name}"):  # what is timed is the code read
            if lab.cuda:
                lab.value(case={"pattern": name, "way": "eager"}, metric="gpu_operations", unit="",
                          value=ops_per_call(calls["eager"]))
                lab.note(f"kernel durations, {name}, eager", kernel_durations(calls["eager"]))
            # Kernels against kernels: compiled over eager, paired by round.
            lab.compare(calls, case={"pattern": name}, key="way", metric="time", baseline="eager",
                        timer="kernel")
    torch._dynamo.reset()
    if lab.cuda:
        from examples.compile.modes import forget_autotune_choices

        forget_autotune_choices()


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
