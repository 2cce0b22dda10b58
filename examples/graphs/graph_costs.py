"""What a CUDA graph costs besides its replay, and what graphing a training step buys.

The chapter's other examples time replays back to back against eager launches.
This one measures the rest of a graph's life:

- **latency against throughput**: one replay of a graph of ``N`` tiny kernels,
  from an idle GPU to the host seeing it finish, against the same replay
  issued back to back (time per replay), for ``N`` = 1 to 1000;
- **one-off costs**: capture (stream capture into a ``cudaGraph_t``),
  instantiation (``CUDAGraph.instantiate``, which ``capture_end`` calls itself
  unless the graph was made with ``keep_graph=True``) and the first replay,
  each per fresh graph, against a later replay from idle;
- **memory**: what a capture takes into the graph's private pool, measured by
  the allocator, against the bytes its intermediates must hold, and what is
  given back when the graph is freed;
- **training**: a small MLP's step eager, with forward and backward graphed by
  ``torch.cuda.make_graphed_callables``, and whole (forward, backward and a
  ``capturable=True`` Adam in one graph), timed in interleaved rounds after a
  check that the graphed ways train the same weights as eager; and dropout
  under capture, checked to draw a fresh mask on every replay.

It also notes whether this torch exposes CUDA graph conditional nodes.

Without a GPU, only the eager training step runs: graphs need CUDA, and the
record notes what was skipped.
"""

from __future__ import annotations

import copy
import sys
import time

import torch
import torch.nn.functional as F

from examples.graphs.capture_replay import _warmup_stream
from examples.graphs.launch_cost import ELEMENTS, add_chain
from examples.lab import timing

#: Kernels per graph: one kernel, where the launch is everything, to a thousand,
#: where the kernels are.
CHAIN_LENGTHS = (1, 10, 100, 1000)
#: Fresh graphs captured per length for the one-off costs (each is one sample).
FRESH_GRAPHS = 5
#: Replays per back-to-back sample: about 2,000 kernels, so that a sample is
#: long against the clock and short against the topic's budget.
KERNELS_PER_SAMPLE = 2000


# --8<-- [start:stages]
def capture_stages(step, static: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, dict[str, float]]:
    """Capture ``step(static)``, instantiate it and replay it twice; seconds of each stage."""
    side = _warmup_stream()
    seconds = {}
    # keep_graph=True: capture_end stops after the capture; instantiate is its own call.
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):  # capture needs a stream other than the default
        started = time.perf_counter()
        graph.capture_begin()
        step(static)
        graph.capture_end()
        seconds["capture"] = time.perf_counter() - started
    started = time.perf_counter()
    graph.instantiate()  # cudaGraphInstantiate: the executable graph
    seconds["instantiate"] = time.perf_counter() - started
    for stage in ("first replay", "replay from idle"):
        torch.cuda.synchronize()  # each replay starts from an idle GPU
        started = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        seconds[stage] = time.perf_counter() - started
    return graph, seconds
# --8<-- [end:stages]


def measure(lab) -> None:
    if lab.cuda:
        _measure_latency(lab)
        _measure_one_off(lab)
        _measure_pool(lab)
        _check_dropout(lab)
        _note_conditional_nodes(lab)
    else:
        lab.note("skipped without a GPU", "latency, one-off costs, the graph's pool, the graphed training "
                 "steps and dropout under capture: CUDA graphs need a CUDA GPU")
    _measure_training(lab)


# -- latency against throughput ---------------------------------------------------------------
def _measure_latency(lab) -> None:
    """One replay from an idle GPU against replays back to back, in the same rounds.

    Both on the host clock between synchronizations: a replay from idle holds the launch,
    the GPU's work and the host noticing it finished; back to back, each replay's launch
    hides under the previous one's work, and only the slower of the two rates is left. A
    back-to-back sample starts from idle too, so a share of one idle replay's overhead
    (one part in ``replays``) stays in its time per replay."""
    lengths = CHAIN_LENGTHS[:2] if lab.quick else CHAIN_LENGTHS
    for kernels in lengths:
        static = torch.randn(ELEMENTS, device=lab.device)
        graph, _ = _captured_chain(static, kernels)
        replays = min(50, max(4, KERNELS_PER_SAMPLE // kernels))

        def back_to_back(graph=graph, replays=replays) -> None:
            for _ in range(replays):
                graph.replay()

        # --8<-- [start:latency]
        samples = timing.measure_interleaved(
            {"one from idle": graph.replay, "back to back": back_to_back},
            device=lab.device, timer="host_sync", warmup=lab.warmup, repetitions=lab.repetitions)
        per_replay = {"one from idle": samples["one from idle"],
                      "back to back": [s / replays for s in samples["back to back"]]}
        # --8<-- [end:latency]
        method = "host_sync, interleaved rounds"
        for timing_name, values in per_replay.items():
            lab.keep_samples([v * 1e6 for v in values], case={"kernels": kernels, "timing": timing_name},
                             metric="replay", unit="us", method=method + ("" if timing_name == "one from idle"
                                                                          else f", {replays} replays a sample"),
                             warmup=lab.warmup, inner=1 if timing_name == "one from idle" else replays)
        lab.keep_samples([i / b for i, b in zip(*per_replay.values())],
                         case={"kernels": kernels, "timing": "one from idle"}, metric="idle_over_back_to_back",
                         unit="x", method=f"paired ratio one from idle / back to back, {method}")
        back = sorted(per_replay["back to back"])[len(per_replay["back to back"]) // 2]
        lab.value(case={"kernels": kernels, "timing": "back to back"}, metric="per_kernel",
                  value=back / kernels * 1e6, unit="us")


def _captured_chain(static: torch.Tensor, kernels: int):
    """A graph of ``kernels`` in-place additions on ``static``, and its stages' seconds."""
    add_chain(static.clone(), 1)  # load the kernel before any capture (lazy module loading)
    graph, seconds = capture_stages(lambda t: add_chain(t, kernels), static)
    return graph, seconds


# -- one-off costs ----------------------------------------------------------------------------
def _measure_one_off(lab) -> None:
    lengths = CHAIN_LENGTHS[:2] if lab.quick else CHAIN_LENGTHS
    for kernels in lengths:
        stages: dict[str, list[float]] = {}
        for trial in range(FRESH_GRAPHS):
            static = torch.randn(ELEMENTS, device=lab.device)
            expected = static + 2 * kernels  # the two replays capture_stages made
            graph, seconds = _captured_chain(static, kernels)
            if trial == 0:
                lab.check(f"graph of {kernels} additions, replayed twice", static, expected, tolerance=1e-4)
            for stage, s in seconds.items():
                stages.setdefault(stage, []).append(s * 1e6)
            del graph
        method = f"host_sync, one fresh graph a sample ({FRESH_GRAPHS})"
        for stage, samples in stages.items():
            lab.keep_samples(samples, case={"kernels": kernels, "stage": stage}, metric="time", unit="us",
                             method=method)
        median = sorted(stages["instantiate"])[len(stages["instantiate"]) // 2]
        lab.value(case={"kernels": kernels, "stage": "instantiate"}, metric="per_kernel",
                  value=median / kernels, unit="us")


# -- memory: the graph's private pool ---------------------------------------------------------
# --8<-- [start:pool]
def every_layer(x: torch.Tensor, layers: int) -> list[torch.Tensor]:
    """``layers`` new tensors the size of ``x``, all returned: all alive after capture."""
    outputs = []
    for _ in range(layers):
        x = x * 1.5
        outputs.append(x)
    return outputs


def last_layer(x: torch.Tensor, layers: int) -> torch.Tensor:
    """The same work, only the last tensor returned: each one dies when the next is made."""
    for _ in range(layers):
        x = x * 1.5
    return x
# --8<-- [end:pool]


def _measure_pool(lab) -> None:
    """Allocated and reserved bytes a capture adds, against the bytes its outputs must hold.

    The static input is allocated before the first reading; the warm-up frees what it made,
    and the cache is emptied before each reading, so the growth is the private pool's."""
    elements, layers = (1 << 16, 4) if lab.quick else (1 << 22, 8)  # 16 MiB of float32 a tensor
    tensor_bytes = elements * 4
    # What must be alive after the capture (the outputs), and at its peak (then, if a block
    # freed during the capture is reused by the next allocation of the same capture).
    expected = {"every layer's": {"expected_allocated": layers, "expected_reserved": layers},
                "last layer's only": {"expected_allocated": 1, "expected_reserved": 2}}
    for outputs, fn in (("every layer's", every_layer), ("last layer's only", last_layer)):
        static = torch.randn(elements, device=lab.device)
        fn(static, layers)  # warm up: the kernels load outside the capture
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=_warmup_stream()):
            result = fn(static, layers)
        torch.cuda.synchronize()
        grown = {"allocated": torch.cuda.memory_allocated() - allocated,
                 "reserved": torch.cuda.memory_reserved() - reserved}
        graph.replay()
        last = result[-1] if isinstance(result, list) else result
        lab.check(f"pool graph, {outputs} outputs", last, static * 1.5**layers, tolerance=1e-5)
        case = {"outputs": outputs, "layers": layers, "elements": elements}
        for metric, value in grown.items():
            lab.value(case=case, metric=metric, value=value / 2**20, unit="MiB")
        for metric, tensors in expected[outputs].items():
            lab.value(case=case, metric=metric, value=tensors * tensor_bytes / 2**20, unit="MiB")
        # The pool lives as long as the graph and its outputs: free both, and it goes back.
        del graph, result, last
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        lab.value(case=case, metric="released", unit="MiB",
                  value=(torch.cuda.memory_reserved() - reserved) / 2**20)
        del static


# -- random numbers under capture -------------------------------------------------------------
# --8<-- [start:dropout]
def dropout_masks(p: float, elements: int, replays: int, device) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Capture one dropout of a tensor of ones; return its output and each replay's kept mask."""
    ones = torch.ones(elements, device=device)
    side = _warmup_stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        F.dropout(ones, p)  # warm-up
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = F.dropout(ones, p)  # the mask comes from the default CUDA generator
    masks = []
    for _ in range(replays):
        graph.replay()  # advances the generator's offset by what the capture drew
        masks.append(out != 0)
    return out, masks
# --8<-- [end:dropout]


def _check_dropout(lab) -> None:
    p, elements, replays = 0.5, 1 << 20, 4
    out, masks = dropout_masks(p, elements, replays, lab.device)
    # What is kept is scaled by 1/(1-p): the values say the kernel ran, not only the mask.
    lab.check("dropout replay: kept values are 1/(1-p)", out[masks[-1]],
              torch.full_like(out[masks[-1]], 1 / (1 - p)), tolerance=1e-6)
    changed = [(a != b).float().mean().item() for a, b in zip(masks, masks[1:])]
    if min(changed) == 0:
        from examples.lab.harness import CheckFailed

        raise CheckFailed("dropout under capture: two replays drew the same mask")
    case = {"p": p, "elements": elements, "replays": replays}
    lab.value(case=case, metric="dropped_fraction", unit="",
              value=sum(1 - m.float().mean().item() for m in masks) / replays)
    # Independent masks differ where exactly one dropped: 2p(1-p) of the elements.
    lab.value(case=case, metric="masks_differ", unit="", value=sum(changed) / len(changed))


# -- conditional nodes ------------------------------------------------------------------------
def _note_conditional_nodes(lab) -> None:
    """What this torch exposes of CUDA graph conditional nodes (CUDA 12.4+): read, not run."""
    methods = [m for m in dir(torch._C._CUDAGraph) if "conditional" in m or "_node" in m]
    lab.note("conditional nodes in this torch", {
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "CUDAGraph methods": methods,
        "IF node (begin_capture_to_if_node)": "begin_capture_to_if_node" in methods,
        "WHILE node": any("while" in m for m in methods),
    })


# -- training ---------------------------------------------------------------------------------
# --8<-- [start:mlp]
def make_mlp(width: int, depth: int, device) -> torch.nn.Module:
    layers = []
    for _ in range(depth - 1):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, width)).to(device)


def eager_step(model, optimizer, x, y) -> None:
    optimizer.zero_grad(set_to_none=True)
    F.mse_loss(model(x), y).backward()
    optimizer.step()
# --8<-- [end:mlp]


# --8<-- [start:whole]
def capture_whole_step(model, optimizer, warmup_batches):
    """Forward, backward and ``optimizer.step()`` in one graph (``optimizer`` capturable).

    The warm-up runs real steps on the given batches, so the optimizer's state exists
    before the capture; the gradients are set to None, so the captured backward
    allocates them in the graph's pool and every replay refills them in place."""
    static_x, static_y = (t.clone() for t in warmup_batches[0])
    side = _warmup_stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for x, y in warmup_batches:
            static_x.copy_(x)
            static_y.copy_(y)
            eager_step(model, optimizer, static_x, static_y)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph, stream=side):
        F.mse_loss(model(static_x), static_y).backward()
        optimizer.step()

    def step(x, y) -> None:
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()

    return step
# --8<-- [end:whole]


def _measure_training(lab) -> None:
    width, depth = (64, 3) if lab.quick else (1024, 4)
    batches = (8,) if lab.quick else (32, 4096)
    for batch in batches:
        _measure_training_size(lab, width, depth, batch)


def _measure_training_size(lab, width: int, depth: int, batch: int) -> None:
    device = lab.device
    case = {"width": width, "layers": depth, "batch": batch}
    torch.manual_seed(batch)
    base = make_mlp(width, depth, device)
    x, y = torch.randn(batch, width, device=device), torch.randn(batch, width, device=device)
    if not lab.cuda:
        model = copy.deepcopy(base)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        lab.time(lambda: eager_step(model, optimizer, x, y), case={**case, "mode": "eager"}, metric="step")
        return

    def adam(model, **kwargs):
        return torch.optim.Adam(model.parameters(), lr=1e-3, **kwargs)

    # Six batches every way trains on, in order; the whole-step graph's warm-up takes three.
    data = [(torch.randn(batch, width, device=device), torch.randn(batch, width, device=device))
            for _ in range(6)]
    models = {name: copy.deepcopy(base) for name in
              ("eager", "eager, capturable Adam", "graphed forward+backward", "whole step graphed")}
    optimizers = {"eager": adam(models["eager"]),
                  "eager, capturable Adam": adam(models["eager, capturable Adam"], capturable=True),
                  "graphed forward+backward": adam(models["graphed forward+backward"]),
                  "whole step graphed": adam(models["whole step graphed"], capturable=True)}
    # Each graphed way's one-off cost: its warm-up (three iterations, either way) and capture.
    torch.cuda.synchronize()
    started = time.perf_counter()
    # --8<-- [start:graphed]
    # Forward and backward captured as two graphs; the optimizer stays eager.
    graphed = torch.cuda.make_graphed_callables(models["graphed forward+backward"], (x.clone(),))
    # --8<-- [end:graphed]
    torch.cuda.synchronize()
    lab.value(case={**case, "mode": "graphed forward+backward"}, metric="warmup_and_capture",
              value=(time.perf_counter() - started) * 1e3, unit="ms")
    models["graphed forward+backward"] = graphed
    started = time.perf_counter()
    whole = capture_whole_step(models["whole step graphed"], optimizers["whole step graphed"], data[:3])
    torch.cuda.synchronize()
    lab.value(case={**case, "mode": "whole step graphed"}, metric="warmup_and_capture",
              value=(time.perf_counter() - started) * 1e3, unit="ms")
    steps = {name: (lambda a, b, m=models[name], o=optimizers[name]: eager_step(m, o, a, b))
             for name in models if name != "whole step graphed"}
    steps["whole step graphed"] = whole
    for at, (bx, by) in enumerate(data):
        for name, step in steps.items():
            if name != "whole step graphed" or at >= 3:
                step(bx, by)
    # The check is on the updates (weights now less weights at the start): a wrong step is
    # a large error there, where against the weights it would hide under their size. Two
    # orders of the same fp32 arithmetic (capturable Adam's step on the GPU against the
    # host's) drift apart over six steps: Adam divides by sqrt(v), so an element whose
    # gradient is near zero turns a rounding difference into a visible difference of its
    # step, 1.9 % of the update at batch 4096 on an H200. One step of the six skipped or
    # applied twice is off by about a sixth, a graph replaying stale inputs by more.
    start = _flat(base)
    reference = _flat(models["eager"]) - start
    for name in steps:
        if name != "eager":
            lab.check(f"{name}: update after 6 Adam steps equals eager's, batch {batch}",
                      _flat(models[name]) - start, reference, tolerance=0.1)
    lab.compare({name: (lambda s=step: s(x, y)) for name, step in steps.items()}, case=case, key="mode",
                metric="step", unit="us", baseline="eager")


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
