"""Launch-overhead budget: how much of a token's time goes to launches.

    python -m examples.graphs.launch_budget --layers 32 --kernels-per-layer 8 \\
        --launch-us 10 --tokens-per-second 50

>>> b = launch_budget(
...     layers=32, kernels_per_layer=8, launch_us=10, tokens_per_second=50
... )
>>> round(b.overhead_ms, 3), round(b.budget_ms, 3), round(b.fraction, 3)
(2.56, 20.0, 0.128)
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass

from examples.lab.cli import ArgumentParser, add_json_flag, emit_json, positive

#: The arguments the book's page works through; CI runs the example with them.
EXAMPLE_ARGV = [
    "--layers",
    "32",
    "--kernels-per-layer",
    "8",
    "--launch-us",
    "10",
    "--tokens-per-second",
    "50",
]


# --8<-- [start:model]
@dataclass(frozen=True)
class LaunchBudget:
    overhead_ms: float  # time spent launching kernels, per token
    budget_ms: float  # time one token may take at the target rate
    fraction: float  # overhead_ms / budget_ms


def launch_budget(
    *,
    layers: int,
    kernels_per_layer: int,
    launch_us: float,
    tokens_per_second: float,
) -> LaunchBudget:
    """Every layer launches its kernels once per generated token."""
    overhead_ms = layers * kernels_per_layer * launch_us / 1e3
    budget_ms = 1e3 / tokens_per_second
    return LaunchBudget(overhead_ms, budget_ms, overhead_ms / budget_ms)


# --8<-- [end:model]


def verdict(b: LaunchBudget) -> str:
    """``"over budget"`` when the launches alone take a token's whole time."""
    return "over budget" if b.fraction >= 1 else "within budget"


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m examples.graphs.launch_budget",
        description=__doc__.strip().splitlines()[0],
    )
    parser.add_argument(
        "--layers",
        required=True,
        type=positive(int),
        help="transformer layers run per token",
    )
    parser.add_argument(
        "--kernels-per-layer",
        required=True,
        type=positive(int),
        help="kernels each layer launches",
    )
    parser.add_argument(
        "--launch-us",
        required=True,
        type=positive(float),
        help="CPU cost of one launch, in µs",
    )
    parser.add_argument(
        "--tokens-per-second",
        required=True,
        type=positive(float),
        help="target generation rate",
    )
    add_json_flag(parser, "the result")
    args = parser.parse_args(argv)
    result = launch_budget(
        layers=args.layers,
        kernels_per_layer=args.kernels_per_layer,
        launch_us=args.launch_us,
        tokens_per_second=args.tokens_per_second,
    )
    if args.json:
        out = {**asdict(result), "verdict": verdict(result)}
        emit_json(json.dumps(out) + "\n", args.json)
        return 0
    print(f"launch overhead per token: {result.overhead_ms:.4g} ms")
    print(f"time budget per token:     {result.budget_ms:.4g} ms")
    print(f"fraction spent launching:  {result.fraction:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
