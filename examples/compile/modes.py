"""torch.compile modes side by side: compile time, run time, break-even.

One MLP block (LayerNorm, Linear, GELU, Linear, residual) at a small size
(a few tokens: launch-bound) and a large one (thousands of tokens:
compute-bound), plus a single pointwise op, run eagerly and compiled with
``mode="default"``, ``"reduce-overhead"`` and ``"max-autotune"``. The first
call's wall time is the compile time (a cold cache on a fresh machine); the
break-even is how many calls repay it. The modes and eager run in alternating
rounds (A B C, C B A, ...), and each speedup is the median of the ratios of
eager's time to the mode's within one round.
"""

from __future__ import annotations

import sys
import time

import torch
from torch import nn


# --8<-- [start:block]
class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


# --8<-- [end:block]


class OneOp(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)


def workloads(quick: bool, cuda: bool):
    """(name, module, input shape)"""
    if quick:
        yield "small block", Block(64), (4, 64)
        return
    yield "one op", OneOp(), (1024,)
    yield "small block", Block(256), (8, 256)
    yield "large block", Block(4096), (8192, 4096)


# --8<-- [start:modes]
def compile_and_time_first_call(module, x, mode, synchronize):
    # Each mode compiles anew: Dynamo keeps one cache entry per backend, so
    # no mode reuses another's graph (Inductor's on-disk cache may serve
    # kernels they share), and the earlier modes stay compiled beside it.
    compiled = torch.compile(module, mode=mode)
    start = time.perf_counter()
    compiled(x)
    synchronize()
    return compiled, time.perf_counter() - start


# --8<-- [end:modes]


def measure(lab) -> None:
    import torch._inductor.config as inductor_config

    dtype = torch.bfloat16 if lab.cuda else torch.float32
    modes = ["default"] if not lab.cuda else [
        "default", "reduce-overhead", "max-autotune"]
    g = torch.Generator(device=lab.device).manual_seed(0)
    chosen = note_autotune_choices(lab)
    with inductor_config.patch(prune_unlaunchable_gemm_configs()):
        for name, module, shape in workloads(lab.quick, lab.cuda):
            # max-autotune searches GEMM configurations: it has something
            # to find only in the large block, and costs seconds a GEMM.
            tried = {"one op": ["default"], "small block": modes[:2]}.get(
                name, modes)
            measure_workload(lab, name, module, shape, tried, dtype, g,
                             chosen)
    forget_autotune_choices()


def measure_workload(lab, name, module, shape, tried, dtype, g, chosen):
    torch._dynamo.reset()  # forget earlier compilations: a cold start
    module = module.to(lab.device, dtype).eval()
    x = torch.randn(*shape, generator=g, device=lab.device).to(dtype)
    with torch.no_grad():
        expected = module(x).float()
        calls = {"eager": lambda: module(x)}
        for mode in tried:
            chosen.clear()
            compiled, seconds = compile_and_time_first_call(
                module, x, mode, lab.synchronize)
            lab.check(f"{name} {mode}", compiled(x).float(), expected,
                      tolerance=2e-2)
            lab.value(case={"workload": name, "mode": mode},
                      metric="compile", value=seconds, unit="s")
            if chosen:
                lab.note(f"{name} {mode} autotuned", list(chosen))
            calls[mode] = lambda c=compiled: c(x)
        # Every mode against eager in alternating rounds, so that each
        # sees the same clocks; speedup is eager's time over the mode's
        # in the same round (the median of those paired ratios).
        runs = lab.compare(calls, case={"workload": name}, key="mode",
                           metric="run", baseline="eager")
        for mode in tried:
            saved_us = runs["eager"].median - runs[mode].median
            if saved_us > 0:  # calls needed to repay the compile
                seconds = next(
                    r.metrics["compile"].median for r in lab.rows()
                    if r.case == {"workload": name, "mode": mode})
                lab.value(case={"workload": name, "mode": mode},
                          metric="break_even_calls",
                          value=seconds * 1e6 / saved_us, unit="")


def prune_unlaunchable_gemm_configs() -> dict:
    """Inductor's option to drop, before compiling them, the max-autotune
    GEMM configurations whose shared memory (tile bytes times stages)
    exceeds what the GPU gives one block. On an H100 or H200 that is one
    of the default list, 128 x 128 x 128 tiles in 4 stages (256 KiB of
    227): it cannot run, yet without the option Inductor compiles it,
    and at times compiles it again while benchmarking, to fail each time,
    seconds per GEMM shape. Every configuration that fits is still tried,
    so max-autotune picks from the same candidates; the other modes tune
    no GEMM."""
    import torch._inductor.config as inductor_config

    option = "max_autotune_prune_choices_based_on_shared_mem"
    return {option: True} if hasattr(inductor_config, option) else {}


def note_autotune_choices(lab) -> list[str]:
    """A list that receives, for every matrix product max-autotune tunes,
    which kernel won and by how much it beat the best of the rest: whether
    a Triton template ever beat cuBLAS (``extern_mm`` and the like)."""
    chosen: list[str] = []
    try:
        from torch._inductor.select_algorithm import add_feedback_saver
    except ImportError:  # another torch: the record says nothing
        return chosen

    def saver(timings, name, inputs, choices, *_):
        ranked = sorted(timings.items(), key=lambda kv: kv[1])
        if ranked:
            best, t = ranked[0]
            runner = (f", next {ranked[1][0].name} {ranked[1][1]:.4f} ms"
                      if len(ranked) > 1 else "")
            chosen.append(f"{name}: {best.name} {t:.4f} ms{runner}")

    add_feedback_saver(saver)
    return chosen


def forget_autotune_choices() -> None:
    try:
        from torch._inductor.select_algorithm import clear_feedback_savers
    except ImportError:
        return
    clear_feedback_savers()


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
