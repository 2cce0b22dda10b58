"""Occupancy: how many blocks of a kernel one SM holds, and how many warps.

    python -m examples.stack.occupancy --threads 256 --registers 64 \\
        --smem-kb 48

A block stays on its SM until all its threads finish, holding its warps'
registers and its shared memory the whole time. Four limits decide how many
blocks are resident at once: warps, blocks, registers and shared memory per
SM. Occupancy is the resident warps over the most an SM can hold. The
defaults are Hopper's limits (compute capability 9.0, H100 and H200); the
rounding rules (256 registers per warp, 128 bytes of shared memory, 1 KB
reserved per block) are the CUDA occupancy calculator's (cuda_occupancy.h).

>>> occupancy(threads=256, registers=32).limiter
'warps, registers'
>>> r = occupancy(threads=256, registers=64, smem=40 * 1024)
>>> r.blocks, r.warps, r.occupancy, r.limiter
(4, 32, 0.5, 'registers')
>>> occupancy(threads=128, registers=168, smem=144 * 1024)
Occupancy(blocks=1, warps=4, occupancy=0.0625, limiter='shared memory')
>>> occupancy(threads=1024, registers=255).blocks
0
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass

from examples.lab.cli import (ArgumentParser, add_json_flag, emit_json,
                              non_negative, positive)

EXAMPLE_ARGV = ["--threads", "256", "--registers", "64", "--smem-kb", "48"]


# --8<-- [start:model]
@dataclass(frozen=True)
class SM:
    """Per-SM limits; the defaults are Hopper's (compute capability 9.0)."""

    max_warps: int = 64  # 2048 threads
    max_blocks: int = 32
    registers: int = 65536  # 32-bit registers, in 4 sub-partitions
    sub_partitions: int = 4
    max_registers_per_thread: int = 255
    smem: int = 228 * 1024  # shared memory per SM, bytes
    smem_per_block: int = 227 * 1024  # the most one block may have
    reserved_per_block: int = 1024  # kept by the driver for each block
    register_unit: int = 256  # registers are given to a warp in these
    smem_unit: int = 128  # shared memory is given to a block in these


HOPPER = SM()


@dataclass(frozen=True)
class Occupancy:
    blocks: int  # resident blocks per SM
    warps: int  # resident warps per SM
    occupancy: float  # warps / max_warps
    limiter: str  # the limits that gave the fewest blocks


def occupancy(*, threads: int, registers: int, smem: int = 0,
              sm: SM = HOPPER) -> Occupancy:
    """Blocks of `threads` threads, `registers` per thread and `smem`
    bytes of shared memory per block that one SM holds at once."""
    warps_per_block = math.ceil(threads / 32)
    if (registers > sm.max_registers_per_thread
            or smem > sm.smem_per_block or warps_per_block > 32):
        return Occupancy(0, 0, 0.0, "cannot launch")
    # Registers go to warps, rounded up, and each sub-partition (one warp
    # scheduler) has its own quarter of the register file.
    per_warp = math.ceil(registers * 32 / sm.register_unit) * sm.register_unit
    per_part = sm.registers // sm.sub_partitions
    reg_warps = (per_part // max(per_warp, 1)) * sm.sub_partitions
    smem_block = (math.ceil(smem / sm.smem_unit) * sm.smem_unit
                  + sm.reserved_per_block)
    limits = {
        "warps": sm.max_warps // warps_per_block,
        "blocks": sm.max_blocks,
        "registers": reg_warps // warps_per_block,
        "shared memory": sm.smem // smem_block,
    }
    blocks = min(limits.values())
    limiter = ", ".join(k for k, v in limits.items() if v == blocks)
    warps = blocks * warps_per_block
    return Occupancy(blocks, warps, warps / sm.max_warps, limiter)


# --8<-- [end:model]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m examples.stack.occupancy",
                            description=__doc__.strip().splitlines()[0])
    parser.add_argument("--threads", type=positive(int), required=True,
                        help="threads per block")
    parser.add_argument("--registers", type=positive(int), required=True,
                        help="registers per thread (ptxas -v reports it)")
    parser.add_argument("--smem-kb", type=non_negative(float), default=0.0,
                        help="shared memory per block, KiB (default 0)")
    add_json_flag(parser, "the result")
    args = parser.parse_args(argv)
    if args.threads > 1024:
        parser.error("--threads: a block has at most 1024 threads")
    r = occupancy(threads=args.threads, registers=args.registers,
                  smem=round(args.smem_kb * 1024))
    if args.json:
        emit_json(json.dumps(asdict(r)) + "\n", args.json)
        return 0
    print(f"{args.threads} threads x {args.registers} registers, "
          f"{args.smem_kb:g} KiB shared memory per block (Hopper limits):")
    print(f"  {r.blocks} blocks, {r.warps} of {HOPPER.max_warps} warps "
          f"resident per SM: occupancy {r.occupancy:.0%}, "
          f"limited by {r.limiter}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
