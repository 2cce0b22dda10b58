"""torch.compile in training: what the compiled forward keeps, a compiled optimizer, a warm cache.

Training compiles two graphs. AOTAutograd traces forward and backward into one joint graph
and cuts it in two; its min-cut partitioner (``torch._functorch.partitioners``) picks which
of the forward's values the backward reads from memory (saved) and which it computes again
from those (recomputed: cheap pointwise work in place of memory). Here, for one Llama-style
block (RMSNorm, SwiGLU MLP, residual), the same instrument counts the tensors eager
autograd and the compiled forward save: ``torch.autograd.graph.saved_tensors_hooks`` sees
every tensor saved for backward, eager's ops' and the compiled function's alike, since
AOTAutograd hands its saved values to ``ctx.save_for_backward``. The step's peak memory and
time follow, eager against compiled, and against the partitioner at half its activation
memory budget (``torch._functorch.config.activation_memory_budget``: it then recomputes
more, matrix products included, to save less).

Then the optimizer: AdamW over a small transformer's parameter tensors, its ``foreach`` implementation (a
few kernels per operation over lists of tensors), its ``fused`` one (one kernel per chunk
of tensors for the whole update) and ``torch.compile(opt.step)`` (Inductor fuses the
foreach operations' arithmetic horizontally), by kernels per step, by the time of one step
with the host's issuing of it, and by its kernels' own durations (the profiler's), each
timed in interleaved rounds; then ``fused`` and the compiled step alone, in rounds of their
own, for a ratio of the two paired by round (each comparison pairs with one baseline).

Last, what the on-disk caches save: one small training step (a GELU's forward and
backward) compiled with empty cache folders and again with Inductor's FX graph cache (and
AOTAutograd's cache) already filled by an earlier compile of it, Dynamo's in-memory cache dropped between (``torch._dynamo.reset``).

On a CPU (the quick path) the block is compiled with ``aot_eager_decomp_partition``:
Inductor's decompositions and the same min-cut partitioner, without generating C++, so the
saved tensors are counted as Inductor's partitioner picks them; the optimizer and the cache
parts use Inductor at tiny sizes.
"""

from __future__ import annotations

import contextlib
import copy
import os
import statistics
import sys
import tempfile
import time
from collections import Counter

import torch
import torch.nn.functional as F
from torch import nn

from examples.compile.fusion import gelu_tanh
from examples.lab.kernels import gpu_operations
from examples.lab.recompile import compiled_once
from examples.lab.timing import ops_per_call

#: The partitioner's activation memory budget tried beside its default (1.0, no limit).
BUDGET = 0.5
#: Warm-up rounds before the block's timed steps: a step is about 6 ms of matrix products on an
#: H200, and each variant has run three or more since its compile (the checks, the saved tensors,
#: the peak, the kernel count), so a few rounds settle it; the harness's 25 cost 0.35 s more.
STEP_WARMUP = 5
#: Cold and warm compiles, alternating, in the cache part (one of each on the CPU's quick path,
#: whose times say nothing: it checks that both compile and that the warm one hits the caches).
CACHE_SAMPLES = 3


# --8<-- [start:block]
class SwiGLUBlock(nn.Module):
    """x + down(silu(gate(rmsnorm(x))) * up(rmsnorm(x))): a Llama MLP with its residual."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.norm = nn.RMSNorm(width)
        self.gate = nn.Linear(width, hidden, bias=False)
        self.up = nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x):
        y = self.norm(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))
# --8<-- [end:block]


# Two functions with the same body: Dynamo keeps compiled code on a function's code object
# and reuses it for another torch.compile of that function (of another instance of the
# module too), whatever AOTAutograd's config says then; each variant needs its own code.
def run_block(block, x):
    return block(x)


def run_block_on_budget(block, x):
    return block(x)


def training_step(forward, block, x, dy):
    """One forward and backward: the gradients of the input and of every weight."""
    out = forward(block, x)
    return torch.autograd.grad(out, [x, *block.parameters()], dy)


# --8<-- [start:saved]
def saved_for_backward(forward, block, x) -> list[torch.Tensor]:
    """The activations one forward saves for backward, each storage once: what autograd
    keeps alive until the backward runs. Weights and the input are saved too, but they
    are held anyway, so they are left out."""
    held = {t.untyped_storage().data_ptr() for t in (x, *block.parameters())}
    seen: dict[int, torch.Tensor] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in held:
            seen.setdefault(ptr, t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward(block, x)
    kept = list(seen.values())
    # A cycle Python's gc cannot see: the dict keeps each activation, the activation its
    # autograd node, the node the hooks it saved under (held in C++, PySavedVariableHooks),
    # and the pack hook this dict. Emptied, it breaks; kept, what it holds outlives the topic.
    seen.clear()
    return kept
# --8<-- [end:saved]


def storage_bytes(tensors) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors)


def describe(tensors) -> list[str]:
    return [f"{'x'.join(map(str, t.shape)) or 'scalar'} {str(t.dtype).removeprefix('torch.')}"
            for t in tensors]


def peak_bytes(lab, step) -> int:
    """The allocator's peak during one step, over what was allocated before it."""
    lab.synchronize()
    torch.cuda.reset_peak_memory_stats(lab.device)
    before = torch.cuda.memory_allocated(lab.device)
    grads = step()
    lab.synchronize()
    peak = torch.cuda.max_memory_allocated(lab.device) - before
    del grads
    return peak


def timed_first_call(lab, call) -> float:
    start = time.perf_counter()
    call()
    lab.synchronize()
    return time.perf_counter() - start


def measure_block(lab, tokens: int, width: int, hidden: int, dtype) -> None:
    g = torch.Generator(device=lab.device).manual_seed(0)
    block = SwiGLUBlock(width, hidden).to(lab.device, dtype)
    with torch.no_grad():
        for p in block.parameters():  # fresh random weights, not the initializer's ones
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g, device=lab.device) / p.shape[1]**0.5)
    x = torch.randn(tokens, width, generator=g, device=lab.device).to(dtype).requires_grad_()
    dy = torch.randn(tokens, width, generator=g, device=lab.device).to(dtype)
    backend = "inductor" if lab.cuda else "aot_eager_decomp_partition"
    import torch._functorch.config as functorch_config

    torch._dynamo.reset()
    variants = {"eager": lambda b, x: b(x), "compiled": torch.compile(run_block, backend=backend)}
    with functorch_config.patch(activation_memory_budget=BUDGET):
        budget_name = f"compiled, budget {BUDGET}"
        compiled_on_budget = torch.compile(run_block_on_budget, backend=backend)
        # The budget is read when the graph is partitioned: at the first call's compile.
        compile_s = {budget_name: timed_first_call(
            lab, lambda: training_step(compiled_on_budget, block, x, dy))}
    variants[budget_name] = compiled_on_budget
    compile_s["compiled"] = timed_first_call(lab, lambda: training_step(variants["compiled"], block, x, dy))
    # The budget holds only for graphs compiled inside the patch above: a later recompile
    # (a guard failing) would measure the default partition under the budget's name.
    with compiled_once("measuring the compiled variants after their first calls"):
        measure_compiled_block(lab, variants, compile_s, block, x, dy, (tokens, width, hidden))


def measure_compiled_block(lab, variants, compile_s, block, x, dy, shape) -> None:
    tokens, width, hidden = shape
    # Correct first: every gradient against float32 eager on the same weights and inputs.
    reference_block = copy.deepcopy(block).float()
    x32 = x.detach().float().requires_grad_()
    expected = training_step(variants["eager"], reference_block, x32, dy.float())
    names = ["input", *(n for n, _ in block.named_parameters())]
    for variant, forward in variants.items():
        got = training_step(forward, block, x, dy)
        for name, a, e in zip(names, got, expected):
            lab.check(f"{variant}: gradient of {name}", a.float(), e, tolerance=2e-2)
    del reference_block, x32, expected

    case = {"tokens": tokens, "width": width, "hidden": hidden}
    for variant, forward in variants.items():
        row = case | {"variant": variant}
        kept = saved_for_backward(forward, block, x)
        lab.value(case=row, metric="saved_tensors", value=len(kept), unit="")
        lab.value(case=row, metric="saved_bytes", value=storage_bytes(kept) / 2**20, unit="MiB")
        lab.note(f"saved for backward, {variant}", describe(kept))
        if variant in compile_s:
            lab.value(case=row, metric="compile", value=compile_s[variant], unit="s")
        if lab.cuda:
            step = lambda f=forward: training_step(f, block, x, dy)  # noqa: E731
            lab.value(case=row, metric="step_peak", value=peak_bytes(lab, step) / 2**20, unit="MiB")
            lab.value(case=row, metric="kernels_per_step", value=ops_per_call(step), unit="")
    # --8<-- [start:compare_step]
    steps = {v: (lambda f=f: training_step(f, block, x, dy)) for v, f in variants.items()}
    times = lab.compare(steps, case=case, key="variant", metric="step_time", baseline="eager",
                        warmup=min(lab.warmup, STEP_WARMUP))
    # --8<-- [end:compare_step]
    flops = 3 * 3 * 2 * tokens * width * hidden  # three products, each forward + two gradients
    for variant, t in times.items():
        lab.value(case=case | {"variant": variant}, metric="rate", unit="TFLOP/s",
                  value=flops / t.median / 1e6)


# --8<-- [start:optimizer]
def adamw_variants(params, grads, lab):
    """Three AdamWs over three copies of ``params``, the same gradients in each."""
    made = {}
    for variant, options in {"foreach": {"foreach": True}, "fused": {"fused": True},
                             "torch.compile(step)": {}}.items():
        copies = [p.detach().clone().requires_grad_() for p in params]
        for p, g in zip(copies, grads):
            p.grad = g  # shared: an optimizer only reads the gradients
        made[variant] = (copies, torch.optim.AdamW(copies, lr=1e-3, weight_decay=0.1, **options))
    return made
# --8<-- [end:optimizer]


def measure_optimizer(lab, layers: int, width: int, hidden: int) -> None:
    """A transformer's worth of parameter tensors: per layer q, k, v, o, the MLP's three and
    two norms' weights, in float32 (AdamW's master weights)."""
    g = torch.Generator(device=lab.device).manual_seed(1)
    shapes = [(width, width)] * 4 + [(hidden, width)] * 2 + [(width, hidden), (width,), (width,)]
    params = [torch.randn(s, generator=g, device=lab.device) for _ in range(layers) for s in shapes]
    grads = [torch.randn(p.shape, generator=g, device=lab.device) * 1e-2 for p in params]
    made = adamw_variants(params, grads, lab)
    case = {"tensors": len(params), "elements": sum(p.numel() for p in params)}
    del params  # each variant has its copy
    steps = {v: opt.step for v, (_, opt) in made.items()}
    compiled = torch.compile(made["torch.compile(step)"][1].step)
    steps["torch.compile(step)"] = compiled
    for variant, step in steps.items():
        if variant == "torch.compile(step)":
            lab.value(case=case | {"variant": variant}, metric="compile",
                      value=timed_first_call(lab, step), unit="s")
        else:
            step()
    # Correct first: after one step from the same state, parameters and both moments agree.
    reference, reference_opt = made["foreach"]
    for variant in ("fused", "torch.compile(step)"):
        copies, opt = made[variant]
        lab.check(f"{variant}: parameters after a step", torch.cat([p.detach().reshape(-1) for p in copies]),
                  torch.cat([p.detach().reshape(-1) for p in reference]), tolerance=1e-6)
        # fp32 rounding, in another order of operations: the fused kernel's exp_avg_sq was
        # 1.3e-5 from foreach's on an H200; a moment not updated, or updated twice, is off by
        # 10 % or more (beta2's 0.999 against the gradient's square).
        for moment in ("exp_avg", "exp_avg_sq"):
            lab.check(f"{variant}: {moment} after a step",
                      torch.cat([opt.state[p][moment].reshape(-1) for p in copies]),
                      torch.cat([reference_opt.state[p][moment].reshape(-1) for p in reference]),
                      tolerance=1e-4)
    for step in steps.values():  # a second step each, from initialised state: any recompile happens here
        step()
    with compiled_once("counting and timing the optimizer steps after their first two calls"):
        time_optimizer_steps(lab, steps, case)


def time_optimizer_steps(lab, steps, case) -> None:
    if lab.cuda:
        for variant, step in steps.items():
            ops = gpu_operations(step)
            lab.value(case=case | {"variant": variant}, metric="kernels_per_step",
                      value=len(ops), unit="")
            # Which kernels, and how often each: a foreach operation may launch more than once.
            # Whole names: the template arguments say which operation, and which launch limits.
            launches = Counter(op.name for op in ops)
            lab.note(f"GPU operations of one step, {variant}", dict(sorted(launches.items())))
    lab.compare(steps, case=case, key="variant", metric="step_time", baseline="foreach",
                speedup_metric="speedup_over_foreach")
    # ``fused`` against the compiled step, host included, paired by round: a comparison of the
    # two alone, since one comparison pairs every variant with a single baseline.
    lab.compare({v: steps[v] for v in ("torch.compile(step)", "fused")},
                case=case | {"pair": "fused and the compiled step"}, key="variant",
                metric="paired_step_time", baseline="torch.compile(step)",
                speedup_metric="speedup_over_compiled")
    if lab.cuda:
        # The same steps by the durations of their kernels alone (the profiler's), in rounds of
        # their own: what ``step_time`` holds beyond these is the host's issuing of the step.
        kernels = lab.compare(steps, case=case, key="variant", metric="kernel_time", baseline="foreach",
                              speedup_metric="kernel_speedup_over_foreach", timer="kernel")
        # The fused ideal's bytes (parameter, gradient and both moments read, three of them
        # written back) over each variant's kernel time: how near its kernels came to one pass.
        moved = 7 * 4 * case["elements"]
        for variant, t in kernels.items():
            lab.value(case=case | {"variant": variant}, metric="bandwidth", unit="GB/s",
                      value=moved / t.median / 1e3)


# --8<-- [start:cache]
@contextlib.contextmanager
def cache_folder(path: str):
    """Inductor's and Triton's on-disk caches in ``path``, and no in-memory cache of either
    (``clear_caches``) nor of Dynamo (``reset``): what a new process pointed there finds."""
    from torch._inductor.utils import clear_caches

    names = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
    before = {name: os.environ.get(name) for name in names}
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = path
    os.environ["TRITON_CACHE_DIR"] = os.path.join(path, "triton")
    torch._dynamo.reset()
    clear_caches()
    try:
        yield
    finally:
        torch._dynamo.reset()
        clear_caches()
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def gelu_step(x, dy):
    """A training step of the smallest kind: GELU forward and its gradient."""
    return torch.autograd.grad(gelu_tanh(x), x, dy)


def compile_seconds(lab, x, dy) -> float:
    start = time.perf_counter()
    torch.compile(gelu_step)(x, dy)
    lab.synchronize()
    return time.perf_counter() - start
# --8<-- [end:cache]


def measure_cache(lab, shape) -> None:
    """Cold and warm compiles alternating: each warm one in the folder the cold one before it
    filled, so that both sample the same stretch of the run."""
    from torch._dynamo.utils import counters
    import torch._inductor.config as inductor_config

    samples_each = 1 if lab.quick else CACHE_SAMPLES
    g = torch.Generator(device=lab.device).manual_seed(2)
    x = torch.randn(*shape, generator=g, device=lab.device).requires_grad_()
    dy = torch.randn(*shape, generator=g, device=lab.device)
    expected = torch.autograd.grad(gelu_tanh(x), x, dy)[0]
    samples = {"cold": [], "warm": []}
    hits = []
    with inductor_config.patch(fx_graph_cache=True), tempfile.TemporaryDirectory() as root:
        for i in range(samples_each):
            folder = os.path.join(root, str(i))
            for kind in ("cold", "warm"):
                with cache_folder(folder):
                    counters.clear()
                    samples[kind].append(compile_seconds(lab, x, dy))
                    hits.append(f"{kind}: FX graph cache {counters['inductor']['fxgraph_cache_hit']} hit(s), "
                                f"{counters['inductor']['fxgraph_cache_miss']} miss(es); AOTAutograd cache "
                                f"{counters['aot_autograd']['autograd_cache_hit']} hit(s)")
                    if i == 0:
                        lab.check(f"{kind} compile: gradient", torch.compile(gelu_step)(x, dy)[0],
                                  expected, tolerance=1e-5)
    lab.note("caches, each compile", hits)
    case = {"elements": x.numel()}
    for kind, values in samples.items():
        lab.keep_samples(values, case=case | {"cache": kind}, metric="compile", unit="s",
                         method="host clock around the first call, synchronized; cold and warm alternating",
                         warmup=0, inner=1)
    # Each cold compile over the warm one after it in its folder, paired: the median of those ratios.
    lab.value(case=case | {"cache": "warm"}, metric="speedup_of_cache", unit="x",
              value=statistics.median(c / w for c, w in zip(samples["cold"], samples["warm"])))


def measure(lab) -> None:
    if lab.quick:
        measure_block(lab, tokens=64, width=64, hidden=176, dtype=torch.float32)
        measure_optimizer(lab, layers=1, width=32, hidden=64)
        measure_cache(lab, (64,))
        return
    measure_block(lab, tokens=4096, width=4096, hidden=11008, dtype=torch.bfloat16)
    # 27 tensors: an earlier version's 108 tensors of the same 38.5 million elements took 21 to
    # 34 s to compile on an H200 (the tensor count is the likely driver, not measured apart).
    measure_optimizer(lab, layers=3, width=1024, hidden=2816)
    measure_cache(lab, (4096, 4096))


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
