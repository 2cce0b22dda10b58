"""The torch.compile pipeline on this machine: graphs, breaks, recompiles.

Dynamo reads the function's bytecode and records the tensor operations into an
FX graph; what it cannot record (a print, a branch on a tensor's value) splits
the graph. ``torch._dynamo.explain`` counts the graphs and says why they
split. A new input shape makes Dynamo compile again unless the size is marked
dynamic. Inductor then writes the code: Triton kernels on a GPU, C++ with
OpenMP on a CPU. The example prints that code and notes what it found.
"""

from __future__ import annotations

import sys

import torch


# --8<-- [start:breaks]
def with_breaks(x):
    y = torch.sin(x)
    print("debug", file=sys.stderr)  # a side effect: Dynamo stops here
    if y.sum() > 0:  # a branch on a tensor's value: and here
        y = y * 2
    return torch.cos(y)


def without_breaks(x):
    y = torch.sin(x)
    y = torch.where(y.sum() > 0, y * 2, y)  # both branches, in the graph
    return torch.cos(y)


# --8<-- [end:breaks]


# --8<-- [start:recompiles]
class CountingBackend:
    """A backend that only counts the graphs it is given, and runs them."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


def compilations(dynamic, mark=False, sizes=(8, 16, 32, 64)) -> int:
    torch._dynamo.reset()
    backend = CountingBackend()
    f = torch.compile(lambda x: torch.relu(x) * 2, backend=backend,
                      dynamic=dynamic)
    for n in sizes:
        x = torch.randn(n, 4)
        if mark:
            torch._dynamo.mark_dynamic(x, 0)  # "dim 0 will vary"
        f(x)
    return backend.graphs


# --8<-- [end:recompiles]


def explain(fn, x) -> dict:
    out = torch._dynamo.explain(fn)(x)
    return {
        "graphs": out.graph_count,
        "graph breaks": out.graph_break_count,
        "reasons": "; ".join(
            str(b.reason).splitlines()[0][:100] for b in out.break_reasons
        ) or "none",
    }


# --8<-- [start:codegen]
def generated_code(device) -> list[str]:
    """Compile a small fused function with Inductor; return its source."""
    from torch._inductor.utils import run_and_get_code

    def f(x, y):
        return torch.relu(x * y + 1.0).sum(dim=-1)

    torch._dynamo.reset()
    x = torch.randn(64, 128, device=device)
    y = torch.randn(64, 128, device=device)
    _, sources = run_and_get_code(torch.compile(f), x, y)
    return sources


# --8<-- [end:codegen]


def kernel_names(source: str) -> list[str]:
    names = []
    for line in source.splitlines():
        line = line.strip()
        if line.startswith("def triton_"):
            names.append(line.split("(")[0].removeprefix("def "))
        elif line.startswith("cpp_fused") and "=" in line:
            names.append(line.split("=")[0].strip())
    return names


def measure(lab) -> None:
    x = torch.randn(16, device=lab.device)
    lab.note("with a print and a data-dependent if", explain(with_breaks, x))
    lab.note("with torch.where, no print", explain(without_breaks, x))
    torch._dynamo.reset()
    # Dynamo's one graph, run as captured (backend="eager"): the check is
    # that the rewrite computes what the original did, which needs no
    # kernels generated; Inductor compiles once, below, to show its code.
    lab.check("without_breaks == with_breaks",
              torch.compile(without_breaks, backend="eager",
                            fullgraph=True)(x),
              with_breaks(x), tolerance=1e-6)
    lab.note("compilations for sizes 8, 16, 32, 64", {
        "dynamic=False": compilations(False),
        "default (dynamic=None)": compilations(None),
        "dynamic=True": compilations(True),
        "mark_dynamic(x, 0)": compilations(None, mark=True),
    })
    sources = generated_code(lab.device)
    code = "\n".join(sources)
    lab.note("generated code", {
        "backend": "Triton" if lab.cuda else "C++/OpenMP",
        "lines": len(code.splitlines()),
        "kernels": ", ".join(kernel_names(code)) or "none found",
    })
    print(code, file=sys.stderr)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
