"""Export a model to ONNX, run it in ONNX Runtime, and meet the exporter's limit.

    python -m examples.ecosystem.onnx_export [--json]

The exporter (``torch.onnx.export(..., dynamo=True)``) captures the model with
``torch.export``, decomposes it to ATen and translates each op to ONNX. An op
it has no translation for, such as a custom op of your own, stops the export
until you give it one. Needs the ``onnx``, ``onnxscript`` and ``onnxruntime``
packages (``pip install -e ".[onnx]"``); runs on the CPU.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import sys
import warnings
from dataclasses import asdict, dataclass

import torch

from examples.lab.cli import ArgumentParser, add_json_flag, emit_json

#: CI runs the example with these arguments.
EXAMPLE_ARGV: list[str] = []
NEEDS = ("onnx", "onnxscript", "onnxruntime")


# --8<-- [start:model]
class Mlp(torch.nn.Module):
    """A residual MLP block: the kind of model ONNX carries well."""

    def __init__(self, width: int = 64):
        super().__init__()
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


@torch.library.custom_op("book_onnx::swish", mutates_args=())
def swish(x: torch.Tensor) -> torch.Tensor:
    """A custom op: the exporter knows nothing about it."""
    return x * torch.sigmoid(x)


@swish.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class SwishMlp(Mlp):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(swish(self.up(x)))
# --8<-- [end:model]


@dataclass(frozen=True)
class Exported:
    operators: list[str]  # ONNX node types, in graph order
    opset: int
    relative_error: float  # ‖onnxruntime − torch‖ / ‖torch‖


# --8<-- [start:export]
def export_and_run(model: torch.nn.Module, x: torch.Tensor, **options):
    """Export ``model``, run the ONNX graph in ONNX Runtime, compare with torch."""
    import onnxruntime

    program = torch.onnx.export(model.eval(), (x,), dynamo=True, **options)
    proto = program.model_proto
    session = onnxruntime.InferenceSession(
        proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    want = model(x).detach()
    error = (torch.from_numpy(got) - want).norm() / want.norm()
    opset = next(o.version for o in proto.opset_import if o.domain == "")
    return Exported([n.op_type for n in proto.graph.node], opset, error.item())
# --8<-- [end:export]


# --8<-- [start:translation]
def swish_in_onnx(x):
    """The missing translation, written in ONNX Script: x * sigmoid(x)."""
    from onnxscript import opset18 as op

    return op.Mul(x, op.Sigmoid(x))


def export_with_translation(model, x):
    table = {torch.ops.book_onnx.swish.default: swish_in_onnx}
    return export_and_run(model, x, custom_translation_table=table)
# --8<-- [end:translation]


def _quietly(fn, *args):
    """The exporter narrates every step; keep the example's output its own."""
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args)
    finally:
        exporter_log.setLevel(level)


def run() -> dict:
    x = torch.randn(8, 64)
    plain = _quietly(export_and_run, Mlp(), x)
    try:
        _quietly(export_and_run, SwishMlp(), x)
        refused = "nothing: the export succeeded"
    except Exception as exc:  # noqa: BLE001 -- report what the exporter raised
        refused = _reason(exc)
    fixed = _quietly(export_with_translation, SwishMlp(), x)
    return {"plain": asdict(plain), "custom op": refused,
            "custom op, translated": asdict(fixed)}


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m examples.ecosystem.onnx_export",
                            description=__doc__.strip().splitlines()[0])
    add_json_flag(parser, "the outcome")
    args = parser.parse_args(argv)
    missing = [name for name in NEEDS if not _importable(name)]
    if missing:
        print(f"onnx_export: needs {', '.join(missing)} "
              '(pip install -e ".[onnx]"); nothing to run without them')
        return 0
    outcome = run()
    if args.json:
        emit_json(json.dumps(outcome) + "\n", args.json)
        return 0
    for case in ("plain", "custom op, translated"):
        r = outcome[case]
        print(f"{case}: opset {r['opset']}, nodes {' '.join(r['operators'])}, "
              f"relative error {r['relative_error']:.1e}")
    print(f"custom op without a translation: {outcome['custom op']}")
    return 0


def _reason(exc: Exception) -> str:
    """The line of the exporter's report that names the cause, without colours."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    for line in text.splitlines():
        if "No ONNX function found" in line:
            return re.sub(r"^<class '[\w.]*\.(\w+)'>", r"\1", line.strip())
    return f"{type(exc).__name__}: {text.strip().splitlines()[0]}"


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


if __name__ == "__main__":
    sys.exit(main())
