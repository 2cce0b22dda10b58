"""The CPU-dispatch budget: is a step CPU-bound or GPU-bound?

    python -m examples.dispatch.budget --ops 600 --cpu-us 8 --gpu-us 3 \\
        --fusion 3 --graph-us 1.5

The CPU issues ``ops`` ops at ``cpu_us`` each while the GPU runs them at
``gpu_us`` each; the two overlap, so a step takes about the larger of the two
totals. Fusion divides the number of launches by ``fusion`` (the GPU work is
assumed unchanged, which is pessimistic for fused memory-bound ops); a CUDA
graph replaces the CPU's per-op cost with one launch and leaves the GPU
``graph_us`` per kernel.

>>> b = budget(ops=600, cpu_us=8, gpu_us=3, fusion=3, graph_us=1.5)
>>> b.bound, b.cpu_ms, b.gpu_ms, b.step_ms
('CPU', 4.8, 1.8, 4.8)
>>> round(b.fused_step_ms, 2), round(b.graph_step_ms, 2)
(1.8, 1.81)
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass

from examples.lab.cli import ArgumentParser, add_json_flag, emit_json, at_least, non_negative, positive

EXAMPLE_ARGV = ["--ops", "600", "--cpu-us", "8", "--gpu-us", "3",
                "--fusion", "3", "--graph-us", "1.5"]


# --8<-- [start:model]
@dataclass(frozen=True)
class Budget:
    cpu_ms: float  # time the CPU needs to issue every op of the step
    gpu_ms: float  # time the GPU needs to run them
    bound: str  # "CPU" or "GPU": whichever total is larger
    step_ms: float  # max of the two: they overlap
    fused_step_ms: float  # ops / fusion launches, same GPU work
    graph_step_ms: float  # one launch; the GPU pays graph_us per kernel


def budget(*, ops: int, cpu_us: float, gpu_us: float, fusion: float = 1,
           graph_us: float = 0) -> Budget:
    cpu = ops * cpu_us / 1e3
    gpu = ops * gpu_us / 1e3
    fused = max(cpu / fusion, gpu)
    graph = ops * max(gpu_us, graph_us) / 1e3 + cpu_us / 1e3
    return Budget(cpu, gpu, "CPU" if cpu > gpu else "GPU", max(cpu, gpu),
                  fused, graph)


# --8<-- [end:model]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m examples.dispatch.budget",
                            description=__doc__.strip().splitlines()[0])
    parser.add_argument("--ops", type=positive(int), required=True,
                        help="ops (kernels) per step")
    parser.add_argument("--cpu-us", type=positive(float), required=True,
                        help="CPU cost of issuing one op, µs")
    parser.add_argument("--gpu-us", type=non_negative(float), required=True,
                        help="GPU time of one op, µs")
    parser.add_argument("--fusion", type=at_least(1), default=1,
                        help="ops fused into one (default 1: no fusion)")
    parser.add_argument("--graph-us", type=non_negative(float), default=0,
                        help="GPU cost per kernel in a graph replay, µs")
    add_json_flag(parser, "the result")
    args = parser.parse_args(argv)
    b = budget(ops=args.ops, cpu_us=args.cpu_us, gpu_us=args.gpu_us,
               fusion=args.fusion, graph_us=args.graph_us)
    if args.json:
        emit_json(json.dumps(asdict(b)) + "\n", args.json)
        return 0
    print(f"CPU issues the step in {b.cpu_ms:.4g} ms, GPU runs it in "
          f"{b.gpu_ms:.4g} ms: {b.bound}-bound, {b.step_ms:.4g} ms per step")
    print(f"fusing {args.fusion:g} ops into one: {b.fused_step_ms:.4g} ms")
    print(f"one CUDA graph:       {b.graph_step_ms:.4g} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
