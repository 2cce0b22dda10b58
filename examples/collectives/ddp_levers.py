"""DDP's three levers, each against plain DDP: bf16 compression, gradients as bucket views, a static graph.

Trains ddp_overlap's stack of linear layers with DistributedDataParallel on every
GPU (or two CPU processes over gloo), in five variants built from the same
weights: plain DDP; ``bf16_compress_hook`` (each bucket cast to bf16 before its
all-reduce, cast back after); ``gradient_as_bucket_view=True`` (each ``.grad`` a
view into its bucket, so DDP keeps one copy of the gradients, not two);
``static_graph=True`` (DDP told the graph never changes); and all three. Every
variant that does not compress runs ddp_overlap's ``recording_hook`` (DDP's own
all-reduce, ``allreduce_hook``, with each bucket's size noted), so the compress
hook is timed against a Python hook too, not against C++.

Per variant: the training step (every rank's samples, the slower rank's per
sample, the variants in interleaved rounds); the peak memory of one step and what
it holds between steps, against the saving one gradient's size predicts (4 bytes
a parameter) for the bucket views; the bytes handed to ``dist.all_reduce`` in one
step (every call counted); and, after one step on fresh inputs, its gradients
against plain DDP's: equal bit for bit where only the bookkeeping changed, within
bf16's rounding for the compress hook.

Why 16 x Linear(2048, 2048) and 8192 tokens a rank: 67 M parameters make 256 MiB
of fp32 gradients, whose all-reduce took 1.0 ms in one call on two NVLink H200s
(ring_allreduce's record of 2026-11-28; more in ~32 MiB buckets), and 8192 tokens
make the step's products about 5.5 ms of GPU work (6 x 8192 x 2048^2 x 16 FLOP at
some 600 TFLOP/s), so that the GPU, not the host, sets the step's pace: at 2048
tokens (first GPU runs) a step took 10 to 11 ms, host-bound, each sample 20 to 30 %
from the median, too loose to show a lever worth a few per cent. Five models with
their gradients, buckets and activations: under 8 GiB a GPU.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from examples.collectives._launch import note as note_launch
from examples.collectives._launch import world_size
from examples.collectives.ddp_overlap import (
    make_model,
    recording_hook,
    steps_of,
    train_step,
)
from examples.collectives.ddp_probe import sample
from examples.collectives.ring_allreduce import lined_up, spawn
from examples.lab.timing import measure_rounds

#: On a GPU machine this topic needs two GPUs (DDP needs at least two to communicate); the CPU path runs two gloo ranks.
MIN_GPUS = 2

PLAIN = "plain DDP"

# --8<-- [start:levers]
#: name: (compress to bf16, gradient_as_bucket_view, static_graph)
VARIANTS = {
    PLAIN: (False, False, False),
    "bf16_compress_hook": (True, False, False),
    "gradient_as_bucket_view": (False, True, False),
    "static_graph": (False, False, True),
    "all three": (True, True, True),
}


def build(config: dict, device, compress: bool, as_view: bool, static: bool,
          sizes: list[int]) -> DDP:
    torch.manual_seed(0)  # every variant from the same weights
    model = DDP(make_model(config["width"], config["layers"], device),
                gradient_as_bucket_view=as_view, static_graph=static)
    if compress:  # cast each bucket to bf16, all-reduce, cast back
        model.register_comm_hook(None, compress_hook(device))
    else:  # DDP's own all-reduce, each bucket's bytes noted
        model.register_comm_hook(None, recording_hook(sizes))
    return model


# --8<-- [end:levers]


def compress_hook(device):
    """``bf16_compress_hook`` itself on GPUs. DDP refuses it by name where torch was built
    without CUDA (``_check_comm_hook`` asks the build for NCCL >= 2.10, not the backend for
    bf16); gloo's all-reduce sums bf16, so the CPU path calls the same function renamed."""
    if device.type == "cuda":
        return default_hooks.bf16_compress_hook

    def bf16_compress_on_gloo(state, bucket):
        return default_hooks.bf16_compress_hook(state, bucket)

    return bf16_compress_on_gloo


# --8<-- [start:counted]
@contextlib.contextmanager
def all_reduce_bytes(sent: list[int]):
    """Note the bytes of every ``dist.all_reduce`` call in this process: DDP's
    hooks call it through the module (``default_hooks``), so the wrapper sees
    what each hook really hands the backend, compressed or not."""
    original = dist.all_reduce

    def counted(tensor, *args, **kwargs):
        sent.append(tensor.numel() * tensor.element_size())
        return original(tensor, *args, **kwargs)

    dist.all_reduce = counted
    try:
        yield
    finally:
        dist.all_reduce = original


# --8<-- [end:counted]


def gradients_after_one_step(model: DDP, x: torch.Tensor) -> torch.Tensor:
    """Every parameter's gradient after one averaged backward, as one vector."""
    model.zero_grad(set_to_none=False)
    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        model(x).float().square().mean().backward()
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    model.zero_grad(set_to_none=False)
    return grads


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """‖actual − expected‖ / ‖expected‖ in float64, 16 Mi elements at a time (a
    float64 copy of the whole vector would be the run's largest allocation)."""
    diff = norm = 0.0
    for a, e in zip(actual.split(1 << 24), expected.split(1 << 24), strict=True):
        e = e.double()
        diff += (a.double() - e).square().sum().item()
        norm += e.square().sum().item()
    return math.sqrt(diff / norm)


def memory_worker(config: dict, device: torch.device) -> dict:
    """One variant in processes of its own: peak bytes over one step and bytes held after
    it, above what the process held before the model was built.

    Processes of its own, because in a process that had built another variant's model
    first the figures were not repeatable: a held figure of one variant read 24 to
    1,090 MiB over six runs, even with Python's collector run and the allocator's count
    left to settle, and once went negative."""
    torch.manual_seed(1000 + dist.get_rank())
    x = torch.randn(config["tokens"], config["width"], device=device)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    model = build(config, device, *VARIANTS[config["variant"]], [])
    for _ in range(3):  # buckets rebuilt after the first step, as in the timed models
        train_step(model, x, True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    train_step(model, x, True)
    torch.cuda.synchronize()
    return {"peak": torch.cuda.max_memory_allocated() - before,
            "held": torch.cuda.memory_allocated() - before}


def worker(config: dict, device: torch.device) -> dict:
    rank = dist.get_rank()
    torch.manual_seed(1000 + rank)  # each rank its own batch
    x = torch.randn(config["tokens"], config["width"], device=device)
    result = {"buckets": {}, "sent": {}, "error": {}, "equal": {}}
    models, steps, samples = {}, {}, {}
    reference = None
    for name, levers in VARIANTS.items():
        sizes: list[int] = []
        model = build(config, device, *levers, sizes)
        for _ in range(3):  # DDP rebuilds its buckets after the first step
            sizes.clear()
            train_step(model, x, True)
        sent: list[int] = []
        sizes.clear()
        with all_reduce_bytes(sent):
            train_step(model, x, True)
        result["sent"][name] = sum(sent)
        result["buckets"][name] = len(sent)
        if sizes:  # recording_hook's count: the same calls, seen from the hook
            assert sum(sizes) == sum(sent), (name, sizes, sent)
        # Correctness: one step on fresh inputs (the same on every variant),
        # gradients against plain DDP's over the whole vector, and a sample
        # kept for the parent's lab.check.
        torch.manual_seed(2000 + rank)
        fresh = torch.randn(config["tokens"], config["width"], device=device)
        grads = gradients_after_one_step(model, fresh)
        if reference is None:
            reference = grads
        else:
            result["error"][name] = relative_error(grads, reference)
            result["equal"][name] = bool(torch.equal(grads, reference))
        samples[name] = sample(grads)
        del grads, fresh
        models[name] = model
        steps[name] = (lambda m=model: train_step(m, x, True))
    torch.save(samples, f"{config['out']}/grads-{rank}.pt")
    # The variants in alternating rounds, every rank in the same order, all
    # leaving a barrier before each step: step i of every variant is round i's.
    steps = measure_rounds(steps, device=device, warmup=2,
                           repetitions=config["reps"], before=lined_up())
    torch.save(steps, f"{config['out']}/steps-{rank}.pt")
    return result


#: Relative error of the compressed step's gradients against plain DDP's: each
#: rank's bucket rounded to bf16 (8 significant bits: at most 2^-8 relative,
#: rounding to nearest) and the sum rounded again, so a few 2^-8 (4e-3 each)
#: at most. Both run under the same bf16 autocast with float32 gradients, so
#: the hook's rounding is the only difference; a lost or doubled all-reduce
#: is off by 0.5 or more.
BF16_TOLERANCE = 1e-2


def measure(lab) -> None:
    cuda = lab.cuda
    world = world_size(torch.cuda.device_count() if cuda else 2)
    if cuda and world < MIN_GPUS:  # the runner skips this topic before it gets here
        raise RuntimeError(f"needs {MIN_GPUS} GPUs, this machine has {world}")
    full = cuda and not lab.quick
    config = {"width": 2048 if full else 256, "layers": 16 if full else 4,
              "tokens": 8192 if full else 128, "reps": 40 if full else 5}
    r = spawn(worker, world, "nccl" if cuda else "gloo", config)
    memory = {}  # CUDA's allocator only: each variant in processes of its own
    if cuda:
        for name in VARIANTS:
            memory[name] = spawn(memory_worker, world, "nccl", {**config, "variant": name})

    # Correctness first: nothing is kept from a run that fails a check.
    for k in range(world):
        saved = r["saved"][f"grads-{k}.pt"]
        for name, compress_tol in ((n, BF16_TOLERANCE if VARIANTS[n][0] else 0.0)
                                   for n in VARIANTS if n != PLAIN):
            lab.check(f"{name} vs plain DDP, gradients after one step, rank {k} (sampled)",
                      saved[name], saved[PLAIN], tolerance=compress_tol)
    for name, error in r["error"].items():  # rank 0's whole gradient vector
        compress = VARIANTS[name][0]
        if not compress and not r["equal"][name]:
            raise RuntimeError(f"{name}: gradients differ from plain DDP's (relative error {error:.3g})")
        if compress and not error <= BF16_TOLERANCE:
            raise RuntimeError(f"{name}: gradient error {error:.3g} exceeds {BF16_TOLERANCE:g}")

    clock = "cuda_event" if cuda else "host clock"
    method = f"{clock}, max over {world} ranks per sample, interleaved rounds"
    steps = steps_of(r, world)
    params = config["layers"] * (config["width"] ** 2 + config["width"])
    one_gradient = 4 * params  # fp32 gradients: 4 bytes a parameter
    plain_memory = memory.get(PLAIN)
    for name, (compress, as_view, _) in VARIANTS.items():
        case = {"variant": name, "gpus": world}
        lab.keep_samples([s * 1e3 for s in steps[name]], case=case,
                         metric="step", unit="ms", method=method)
        if name != PLAIN:  # step i of both ran in round i: a paired ratio per round
            lab.keep_samples(
                [a / b for a, b in zip(steps[name], steps[PLAIN], strict=True)],
                case=case, metric="vs_plain", unit="x",
                method=f"paired ratio {name} / {PLAIN}, {method}")
        lab.value(case=case, metric="all_reduced", unit="MiB",
                  value=r["sent"][name] / 2**20)
        lab.value(case=case, metric="buckets", unit="", value=r["buckets"][name])
        if name != PLAIN:
            lab.value(case=case, metric="grad_error", unit="",
                      value=r["error"][name])
        if name in memory:
            lab.value(case=case, metric="peak_memory", unit="MiB",
                      value=memory[name]["peak"] / 2**20)
            lab.value(case=case, metric="held_memory", unit="MiB",
                      value=memory[name]["held"] / 2**20)
            if as_view:
                lab.value(case=case, metric="memory_saved", unit="MiB",
                          value=(plain_memory["peak"] - memory[name]["peak"]) / 2**20)
                lab.value(case=case, metric="expected_saving", unit="MiB",
                          value=one_gradient / 2**20)
    note_launch(lab)
    lab.note("model", f"{config['layers']} x Linear({config['width']}, {config['width']}), "
             f"{params:,} parameters, {one_gradient / 2**20:.1f} MiB of fp32 gradients, "
             f"{config['tokens']} tokens per rank, bf16 autocast, 25 MB buckets")
    lab.note("memory", "rank 0, each variant in processes of its own: "
             "torch.cuda.max_memory_allocated over one step and memory_allocated after it, "
             "less what the process held before the model was built: its weights, "
             "gradients, buckets and activations")
    lab.note("median step, plain DDP (ms)",
             round(statistics.median(steps[PLAIN]) * 1e3, 3))


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
