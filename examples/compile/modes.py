"""torch.compile modes side by side: compile time, run time, break-even.

One MLP block (LayerNorm, Linear, GELU, Linear, residual) at a small size
(a few tokens: launch-bound) and a large one (thousands of tokens:
compute-bound), plus a single pointwise op, run eagerly and compiled with
``mode="default"``, ``"reduce-overhead"`` and ``"max-autotune"``. The first
call's wall time is the compile time (a cold cache on a fresh machine); the
break-even is how many calls repay it.
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
    torch._dynamo.reset()  # forget earlier compilations: a cold start
    compiled = torch.compile(module, mode=mode)
    start = time.perf_counter()
    compiled(x)
    synchronize()
    return compiled, time.perf_counter() - start


# --8<-- [end:modes]


def measure(lab) -> None:
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    modes = ["default"] if not lab.cuda else [
        "default", "reduce-overhead", "max-autotune"]
    g = torch.Generator(device=lab.device).manual_seed(0)
    for name, module, shape in workloads(lab.quick, lab.cuda):
        module = module.to(lab.device, dtype).eval()
        x = torch.randn(*shape, generator=g, device=lab.device).to(dtype)
        with torch.no_grad():
            expected = module(x).float()
            eager = lab.time(lambda: module(x),
                             case={"workload": name, "mode": "eager"},
                             metric="run")
            # max-autotune searches GEMM configurations: it has something to
            # find only in the large block, and costs tens of seconds a try.
            chosen = {"one op": ["default"], "small block": modes[:2]}.get(name, modes)
            for mode in chosen:
                compiled, seconds = compile_and_time_first_call(
                    module, x, mode, lab.synchronize)
                lab.check(f"{name} {mode}", compiled(x).float(), expected,
                          tolerance=2e-2)
                case = {"workload": name, "mode": mode}
                lab.value(case=case, metric="compile", value=seconds,
                          unit="s")
                run = lab.time(lambda: compiled(x), case=case, metric="run")
                lab.value(case=case, metric="speedup", unit="x",
                          value=eager.median / run.median)
                saved_us = eager.median - run.median
                if saved_us > 0:  # calls needed to repay the compile
                    lab.value(case=case, metric="break_even_calls",
                              value=seconds * 1e6 / saved_us, unit="")
        torch._dynamo.reset()


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
