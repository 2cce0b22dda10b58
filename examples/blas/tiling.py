"""How tiling makes a GEMM compute-bound, and when split-K or stream-K help.

    python -m examples.blas.tiling --tile 128x128 --tile 128x256 \\
        --peak-tflops 989 --bandwidth-gbs 3350 --sms 132 --wave 12x11

An ``m x n`` output tile of ``C = A @ B`` reads an ``m x K`` panel of A and a
``K x n`` panel of B, ``(m + n) K`` elements, and does ``2 m n K`` flops: its
intensity, ``2 m n / ((m + n) itemsize)`` flop/byte, does not depend on K.
Tiles that run at the same time and share panels (a ``rows x cols`` block of
them, panels held in the L2) read ``(rows m + cols n) K`` elements between
them, which raises the intensity against HBM. A problem of ``M x N`` has
``ceil(M/m) ceil(N/n)`` tiles; when that is not a multiple of the number of
SMs the last wave runs partly empty, and when it is fewer than the SMs most
of the GPU idles: split-K and stream-K divide the K loop to fill it.

>>> round(tile_intensity(128, 128), 1), round(tile_intensity(128, 256), 1)
(64.0, 85.3)
>>> round(wave_intensity(128, 128, rows=12, cols=11), 1)
734.6
>>> waves(8192, 8192, 128, 256, sms=132)
Waves(tiles=2048, waves=16, busy=0.97)
>>> waves(4096, 8, 128, 8, sms=132)
Waves(tiles=32, waves=1, busy=0.24)
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass

from examples.lab.cli import (ArgumentParser, add_json_flag, emit_json,
                              positive)
from examples.stack.roofline_model import ridge_point

EXAMPLE_ARGV = ["--tile", "128x128", "--tile", "128x256",
                "--peak-tflops", "989", "--bandwidth-gbs", "3350",
                "--sms", "132", "--wave", "12x11"]


# --8<-- [start:model]
def tile_intensity(m: int, n: int, itemsize: int = 2) -> float:
    """Flops per byte an m x n output tile loads: 2mnK / ((m + n) K size)."""
    return 2 * m * n / ((m + n) * itemsize)


def wave_intensity(m: int, n: int, *, rows: int, cols: int,
                   itemsize: int = 2) -> float:
    """The same for rows x cols tiles that share their panels in the L2."""
    return 2 * rows * cols * m * n / ((rows * m + cols * n) * itemsize)


@dataclass(frozen=True)
class Waves:
    tiles: int  # output tiles of the problem
    waves: int  # rounds of one tile per SM
    busy: float  # fraction of SM-rounds that have a tile to work on


def waves(M: int, N: int, m: int, n: int, *, sms: int) -> Waves:
    tiles = math.ceil(M / m) * math.ceil(N / n)
    rounds = math.ceil(tiles / sms)
    return Waves(tiles, rounds, round(tiles / (rounds * sms), 2))


# --8<-- [end:model]


def _pair(text: str) -> tuple[int, int]:
    try:
        a, b = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"expected AxB (two integers), got {text!r}") \
            from None
    if a <= 0 or b <= 0:
        raise ValueError(f"expected two positive integers, got {text!r}")
    return a, b


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m examples.blas.tiling",
                            description=__doc__.strip().splitlines()[0])
    parser.add_argument("--tile", action="append", required=True,
                        metavar="MxN", help="output tile shape (repeatable)")
    parser.add_argument("--itemsize", type=positive(int), default=2,
                        help="bytes per input element (default 2: bf16)")
    parser.add_argument("--peak-tflops", type=positive(float), required=True,
                        help="dense tensor-core peak, TFLOP/s")
    parser.add_argument("--bandwidth-gbs", type=positive(float),
                        required=True, help="memory bandwidth, GB/s")
    parser.add_argument("--sms", type=positive(int), default=132,
                        help="streaming multiprocessors (default 132)")
    parser.add_argument("--wave", default="12x11", metavar="RxC",
                        help="tiles resident at once, rows x cols")
    add_json_flag(parser, "the result")
    args = parser.parse_args(argv)
    try:
        tiles = [_pair(t) for t in args.tile]
        rows, cols = _pair(args.wave)
    except ValueError as exc:
        parser.error(str(exc))
    ridge = ridge_point(peak_tflops=args.peak_tflops,
                        bandwidth_gbs=args.bandwidth_gbs)
    out = []
    for m, n in tiles:
        alone = tile_intensity(m, n, args.itemsize)
        shared = wave_intensity(m, n, rows=rows, cols=cols,
                                itemsize=args.itemsize)
        feed = args.peak_tflops / alone  # TB/s the tile needs at peak
        out.append({"tile": f"{m}x{n}", "flop_per_byte": alone,
                    "feed_tb_s_at_peak": feed,
                    "wave_flop_per_byte": shared})
    if args.json:
        emit_json(json.dumps({"ridge_flop_per_byte": ridge, "tiles": out})
                  + "\n", args.json)
        return 0
    print(f"ridge point: {args.peak_tflops:g} TFLOP/s / "
          f"{args.bandwidth_gbs:g} GB/s = {ridge:.0f} flop/byte")
    for row in out:
        print(f"tile {row['tile']}: {row['flop_per_byte']:.1f} flop/byte "
              f"alone (needs {row['feed_tb_s_at_peak']:.1f} TB/s at peak); "
              f"{rows}x{cols} tiles sharing panels: "
              f"{row['wave_flop_per_byte']:.0f} flop/byte")
    return 0


if __name__ == "__main__":
    sys.exit(main())
