"""Roofline calculator: is a kernel limited by memory or by arithmetic?

    python -m examples.stack.roofline_model --flops 2.2e9 --bytes 6.3e6 \\
        --peak-tflops 989 --bandwidth-gbs 4800

The attainable rate of a kernel that does ``flops`` operations and moves
``bytes`` through memory is ``min(peak, intensity * bandwidth)``, where the
intensity is ``flops / bytes``. The ridge point ``peak / bandwidth`` is the
intensity at which the two limits meet.

>>> r = roofline(flops=2 * 4096**3, nbytes=3 * 4096**2 * 2,
...              peak_tflops=989, bandwidth_gbs=4800)
>>> round(r.intensity), round(r.ridge), r.bound
(1365, 206, 'compute')
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass

from examples.lab.cli import ArgumentParser, add_json_flag, emit_json, positive

#: A 4096-cubed bf16 GEMM against the H200's datasheet roofs (989 TFLOP/s
#: dense BF16, 4.8 TB/s); the page cites both.
EXAMPLE_ARGV = ["--flops", str(2 * 4096**3), "--bytes", str(3 * 4096**2 * 2),
                "--peak-tflops", "989", "--bandwidth-gbs", "4800"]


# --8<-- [start:model]
def ridge_point(*, peak_tflops: float, bandwidth_gbs: float) -> float:
    """FLOPs per byte at which memory and arithmetic take equal time."""
    return peak_tflops * 1e12 / (bandwidth_gbs * 1e9)


@dataclass(frozen=True)
class Roofline:
    intensity: float  # FLOP per byte
    ridge: float  # FLOP per byte
    attainable_tflops: float  # min(peak, intensity * bandwidth)
    time_us: float  # the floor: no version runs faster
    bound: str  # "memory" or "compute"


def roofline(*, flops: float, nbytes: float, peak_tflops: float,
             bandwidth_gbs: float) -> Roofline:
    intensity = flops / nbytes
    ridge = ridge_point(peak_tflops=peak_tflops, bandwidth_gbs=bandwidth_gbs)
    attainable = min(peak_tflops, intensity * bandwidth_gbs / 1e3)
    time_us = max(flops / (peak_tflops * 1e12),
                  nbytes / (bandwidth_gbs * 1e9)) * 1e6
    bound = "memory" if intensity < ridge else "compute"
    return Roofline(intensity, ridge, attainable, time_us, bound)


# --8<-- [end:model]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m examples.stack.roofline_model",
                            description=__doc__.strip().splitlines()[0])
    parser.add_argument("--flops", type=positive(), required=True,
                        help="floating-point operations of one call")
    parser.add_argument("--bytes", type=positive(), required=True,
                        help="bytes one call must move through memory")
    parser.add_argument("--peak-tflops", type=positive(), required=True,
                        help="the arithmetic roof, TFLOP/s")
    parser.add_argument("--bandwidth-gbs", type=positive(), required=True,
                        help="the memory roof, GB/s")
    add_json_flag(parser, "the result")
    args = parser.parse_args(argv)
    r = roofline(flops=args.flops, nbytes=args.bytes,
                 peak_tflops=args.peak_tflops,
                 bandwidth_gbs=args.bandwidth_gbs)
    if args.json:
        emit_json(json.dumps(asdict(r)) + "\n", args.json)
        return 0
    print(f"intensity:  {r.intensity:.4g} FLOP/B (ridge {r.ridge:.4g} FLOP/B)")
    print(f"attainable: {r.attainable_tflops:.4g} TFLOP/s, {r.bound}-bound")
    print(f"floor:      {r.time_us:.4g} µs per call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
