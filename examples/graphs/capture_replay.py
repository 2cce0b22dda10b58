"""Capture and replay a CUDA graph correctly, and what goes wrong otherwise.

A graph records kernel launches with the *addresses* of their arguments. Replay
re-runs those launches on the same memory, so inputs must be copied into the
captured (static) tensors, and outputs are overwritten by the next replay.

This example checks the recipe against eager execution on fresh random inputs,
measures the two classic mistakes (rebinding an input instead of copying into
it; keeping a reference to the output across replays), and measures how much
memory a shared pool saves when several graphs are captured.
"""

from __future__ import annotations

import functools
import sys

import torch

REQUIRES_CUDA = True


# --8<-- [start:step]
class Block(torch.nn.Module):
    """Decode-like step: norm, up-projection, GELU, down-projection, residual."""

    def __init__(self, hidden: int, device: torch.device, dtype: torch.dtype):
        super().__init__()

        def weight(
            rows: int, cols: int
        ) -> torch.nn.Parameter:  # inference: no gradients
            w = torch.randn(rows, cols, device=device, dtype=dtype) / rows**0.5
            return torch.nn.Parameter(w, requires_grad=False)

        self.up, self.down = (
            weight(hidden, 4 * hidden),
            weight(4 * hidden, hidden),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return x + torch.nn.functional.gelu(h @ self.up) @ self.down


# --8<-- [end:step]


# --8<-- [start:capture]
def capture(step, *static_inputs: torch.Tensor, warmup: int = 3, pool=None):
    """Record ``step(*static_inputs)`` in a CUDA graph; return graph, output."""
    # Warm up on a side stream: lazy set-up (cuBLAS handles, workspaces, the
    # allocator's first blocks) must happen before capture, not during it.
    side = _warmup_stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step(*static_inputs)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    # Memory allocated during capture comes from the graph's private pool.
    with torch.cuda.graph(graph, pool=pool):
        static_output = step(*static_inputs)
    return graph, static_output


# --8<-- [end:capture]


@functools.cache
def _warmup_stream() -> torch.cuda.Stream:
    # One side stream for every capture: each new stream would get its own
    # cuBLAS workspace, which is memory no graph needs.
    return torch.cuda.Stream()


# --8<-- [start:replay]
def replay(
    graph,
    static_input: torch.Tensor,
    static_output: torch.Tensor,
    new_input: torch.Tensor,
):
    """Run the captured step on ``new_input``; valid until the next replay."""
    # The graph reads this address, whatever Python names point to.
    static_input.copy_(new_input)
    graph.replay()
    return static_output


# --8<-- [end:replay]


# --8<-- [start:mistake]
def replay_rebinding(graph, static_input, static_output, new_input):
    """The classic bug: a tensor bound to the name never reaches the graph."""
    # Rebinds a local name; the address the graph reads is unchanged.
    static_input = new_input  # noqa: F841
    graph.replay()
    return static_output


# --8<-- [end:mistake]


def measure(lab) -> None:
    device, dtype = lab.device, torch.bfloat16
    hidden = 256 if lab.quick else 1024
    step = Block(hidden, device, dtype)
    static_x = torch.randn(1, hidden, device=device, dtype=dtype)
    graph, static_y = capture(step, static_x)

    # The recipe: copy in, replay, read out; equal to eager on fresh inputs.
    for trial in range(5):
        x = torch.randn(1, hidden, device=device, dtype=dtype)
        lab.check(
            f"replay equals eager, input {trial}",
            replay(graph, static_x, static_y, x),
            step(x),
            tolerance=1e-3,
        )

    # Mistake 1: rebinding the input instead of copying into it.
    x = torch.randn(1, hidden, device=device, dtype=dtype)
    rebinding_error = _relative_error(
        replay_rebinding(graph, static_x, static_y, x), step(x)
    )

    # Mistake 2: keeping the output across replays; the next one overwrites it.
    first = replay(
        graph,
        static_x,
        static_y,
        torch.randn(1, hidden, device=device, dtype=dtype),
    )
    first_value = first.clone()
    replay(
        graph,
        static_x,
        static_y,
        torch.randn(1, hidden, device=device, dtype=dtype),
    )
    aliasing_error = _relative_error(first, first_value)
    lab.value(
        case={"mistake": "rebind input"},
        metric="relative_error",
        value=rebinding_error,
        unit="",
    )
    lab.value(
        case={"mistake": "keep output"},
        metric="relative_error",
        value=aliasing_error,
        unit="",
    )

    _measure_pools(lab, dtype)


def _relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    a, e = actual.double(), expected.double()
    return (
        torch.linalg.vector_norm(a - e) / torch.linalg.vector_norm(e)
    ).item()


# --8<-- [start:pools]
def capture_per_batch(step, batches, hidden, dtype, *, share_pool: bool):
    """One graph per batch size, each with a private pool, or all in one."""
    pool = torch.cuda.graph_pool_handle() if share_pool else None
    graphs = []
    for batch in batches:
        x = torch.randn(batch, hidden, device="cuda", dtype=dtype)
        graphs.append((x, *capture(step, x, pool=pool)))
    return graphs


# --8<-- [end:pools]


def _measure_pools(lab, dtype: torch.dtype) -> None:
    hidden = 256 if lab.quick else 4096
    batches = (
        [1, 4, 16] if lab.quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    )
    step = Block(hidden, lab.device, dtype)
    reserved_mib = {}
    for share_pool in (False, True):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_reserved()
        graphs = capture_per_batch(
            step, batches, hidden, dtype, share_pool=share_pool
        )
        # Graphs that share a pool must replay in the order they were captured.
        for _, graph, _ in graphs:
            graph.replay()
        torch.cuda.synchronize()
        pools = "shared" if share_pool else "one per graph"
        reserved_mib[pools] = (torch.cuda.memory_reserved() - before) / 2**20
        lab.value(
            case={"pools": pools, "graphs": len(batches), "hidden": hidden},
            metric="reserved",
            value=reserved_mib[pools],
            unit="MiB",
        )
        del graphs
    lab.value(
        case={"pools": "shared", "graphs": len(batches), "hidden": hidden},
        metric="fraction_of_separate",
        value=reserved_mib["shared"] / reserved_mib["one per graph"],
        unit="",
    )
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
