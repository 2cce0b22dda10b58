"""What an MMA shape such as m16n8k16 means, and a tensor core's work per clock.

    python -m examples.stack.mma_shape --shape m16n8k16

``mMnNkK`` is one warp-level matrix instruction: D (M x N) = A (M x K) times
B (K x N) plus C, so it does ``2*M*N*K`` FLOPs. The second half divides each
GPU's datasheet peak by its SM count and boost clock, which gives the dense
FP16 work one SM (and one of its four tensor cores) does per clock.

>>> mma_flops("m16n8k16")
4096
>>> [round(g.flops_per_sm_clock / 1024, 1) for g in GENERATIONS]
[2.0, 4.0]
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict, dataclass

from examples.lab.cli import ArgumentParser, add_json_flag, emit_json

EXAMPLE_ARGV = ["--shape", "m16n8k16"]


# --8<-- [start:shape]
def mma_flops(shape: str) -> int:
    """FLOPs of one MMA instruction ``mMnNkK``: M*N*K multiply-adds."""
    match = re.fullmatch(r"m(\d+)n(\d+)k(\d+)", shape)
    if not match:
        raise ValueError(f"expected a shape like m16n8k16, got {shape!r}")
    m, n, k = map(int, match.groups())
    return 2 * m * n * k


# --8<-- [end:shape]


# --8<-- [start:generations]
@dataclass(frozen=True)
class Generation:
    gpu: str
    peak_fp16_dense_tflops: float  # datasheet, without sparsity
    sms: int
    boost_mhz: float
    tensor_cores_per_sm: int = 4

    @property
    def flops_per_sm_clock(self) -> float:
        return self.peak_fp16_dense_tflops * 1e12 / (
            self.sms * self.boost_mhz * 1e6)

    @property
    def flops_per_tensor_core_clock(self) -> float:
        return self.flops_per_sm_clock / self.tensor_cores_per_sm


GENERATIONS = [  # sources on the page: NVIDIA's datasheets and whitepapers
    Generation("A100 SXM (Ampere, sm_80)", 312, 108, 1410),
    Generation("H100 SXM5 (Hopper, sm_90)", 989.4, 132, 1830),
]
# --8<-- [end:generations]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m examples.stack.mma_shape",
                            description=__doc__.strip().splitlines()[0])
    parser.add_argument("--shape", default="m16n8k16",
                        help="an MMA shape mMnNkK (default m16n8k16)")
    add_json_flag(parser, "the result")
    args = parser.parse_args(argv)
    try:
        flops = mma_flops(args.shape)
    except ValueError as exc:
        parser.error(str(exc))
    rows = [{**asdict(g), "flops_per_sm_clock": g.flops_per_sm_clock,
             "flops_per_tensor_core_clock": g.flops_per_tensor_core_clock,
             "clocks_per_mma_per_tensor_core":
                 flops / g.flops_per_tensor_core_clock}
            for g in GENERATIONS]
    if args.json:
        emit_json(json.dumps({"shape": args.shape, "flops": flops,
                              "generations": rows}) + "\n", args.json)
        return 0
    print(f"{args.shape}: {flops} FLOPs per instruction (one warp)")
    for r in rows:
        print(f"{r['gpu']}:\n  {r['flops_per_sm_clock']:.0f} FLOP per clock "
              f"per SM, {r['flops_per_tensor_core_clock']:.0f} per tensor "
              f"core; {args.shape} in "
              f"{r['clocks_per_mma_per_tensor_core']:.0f} clocks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
