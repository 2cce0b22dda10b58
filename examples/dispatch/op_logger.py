"""Every ATen op one line of Python runs, and what autograd records for it.

    python -m examples.dispatch.op_logger

A ``TorchDispatchMode`` sits at the Python key of the dispatcher, below
autograd: it sees each ATen op that reaches a backend, forward and backward.
``grad_fn`` chains show the graph autograd recorded for the backward pass.

>>> import torch
>>> x, w = torch.randn(2, 3), torch.randn(3, 4)
>>> log_ops(lambda: torch.relu(x @ w + 1))
['aten.mm.default', 'aten.add.Tensor', 'aten.relu.default']
"""

from __future__ import annotations

import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from examples.lab.cli import ArgumentParser

EXAMPLE_ARGV: list[str] = []


# --8<-- [start:logger]
class OpLogger(TorchDispatchMode):
    """Records the name of every ATen op dispatched while it is active."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))  # e.g. "aten.mm.default"
        return func(*args, **(kwargs or {}))


def log_ops(fn) -> list[str]:
    with OpLogger() as logger:
        fn()
    return logger.ops


# --8<-- [end:logger]


# --8<-- [start:graph]
def autograd_graph(t: torch.Tensor) -> list[str]:
    """The backward nodes autograd recorded for ``t``, output first."""
    seen, order, todo = set(), [], [t.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        order.append(type(node).__name__)
        todo.extend(fn for fn, _ in node.next_functions)
    return order


# --8<-- [end:graph]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m examples.dispatch.op_logger",
                            description=__doc__.strip().splitlines()[0])
    parser.parse_args(argv)
    # --8<-- [start:demo]
    x = torch.randn(8, 16)
    w = torch.randn(16, 32, requires_grad=True)
    b = torch.randn(32, requires_grad=True)
    line = lambda: torch.nn.functional.gelu(x @ w + b).sum()  # noqa: E731
    print("forward:        ", log_ops(line))
    y = line()
    print("autograd graph: ", autograd_graph(y))
    print("backward:       ", log_ops(y.backward))
    with torch.no_grad():
        print("no_grad graph:  ", autograd_graph(line()))
    # --8<-- [end:demo]
    return 0


if __name__ == "__main__":
    sys.exit(main())
