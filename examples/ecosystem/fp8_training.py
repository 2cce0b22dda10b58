"""An FP8 training step with torchao's float8 recipes, against BF16.

The block is a Llama-style SwiGLU feed-forward layer, ``w2(silu(w1 x) * w3 x)``
(w1, w3: d -> h, w2: h -> d, no biases; BF16 on a GPU, float32 on the CPU).
One training step is its forward pass, the loss ``out.float().pow(2).mean()``
(a loss whose gradient depends on the output, so a wrong forward shows in the
gradients too) and the backward pass into the weights *and* the input, as in
a layer inside a network; there is no optimizer. That is 9 matrix products:
3 forward, and for each weight the gradient of its input and of itself.

``convert_to_float8_training`` swaps each ``nn.Linear`` of a deep copy of the
same BF16 block for torchao's ``Float8Linear``, which casts both operands of
each of the 9 products to FP8 (e4m3 forward; for gradients e5m2 in the
``tensorwise`` recipe, e4m3 in the row-wise ones) with scales computed on the
fly from their largest magnitudes, and multiplies them with
``torch._scaled_mm``. The recipes differ in those scales:

* ``tensorwise``: one scale per tensor, the cheapest to compute;
* ``rowwise``: one per row (per token, per output channel), which keeps an
  outlier from crushing the rest of its tensor; a tensor that two products
  read along different dimensions needs scales, and a cast, for each;
* ``rowwise_with_gw_hp``: row-wise, but the weight-gradient products stay
  in BF16, for accuracy, and skip those casts.

Every cast needs a pass over its tensor to find the largest magnitude, then
another to scale and cast: torchao leaves those to ``torch.compile``, which
fuses them into a few kernels and into the neighbouring elementwise work
(SiLU, the product, the loss). torchao's float8 relies on that for speed, so
every variant here, BF16 included, is compiled. Whether FP8 pays depends on how
much GEMM time there is to save against those passes: the Llama 3 8B shape
(16384 tokens, 4096 -> 14336) against a smaller one (4096, 2048 -> 5632).

Each variant is checked first: its output, and the gradients of the input
and of ``w2``, against the same block computed in float64 from the same
weights and inputs. Then the variants of a shape (all four on the large block,
BF16, tensor-wise and row-wise on the small one), each compiled once,
are timed in interleaved rounds (``lab.compare``): one step per sample on
the large block, five back to back on the host-bound small one (``INNER``),
on pre-made random inputs that rotate (made outside the timed region), and
each FP8 recipe's ``speedup`` is the paired ratio of the BF16 sample and its
own in the same round; the gradients are dropped inside the step (``grad =
None``, a few Python assignments) so that none accumulates. On a GPU, the
profiler also sums the durations of one step's kernels (``kernel_time``):
where a step's time exceeds it, the host (guards, launches, autograd), not
the GPU, sets the pace, and FP8's extra kernels cost launches as well as
passes. On the CPU, ``_scaled_mm`` is emulated: the quick run checks the
recipes, its times say nothing of FP8.
"""

from __future__ import annotations

import copy
import logging
import sys
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

from examples.lab.harness import Unavailable
from examples.lab.kernels import kernel_names

RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
#: (tokens, d, h): Llama 3 8B's feed-forward block, then a smaller one where
#: the casts' passes over the activations weigh more against the GEMMs.
SHAPES = ((16384, 4096, 14336), (4096, 2048, 5632))
#: The recipes each shape compares with BF16. The small block asks one question,
#: whether FP8 pays at all there: the cheapest recipe and the costliest answer
#: it. ``rowwise_with_gw_hp`` sits between them, and a compile of its forward and
#: backward costs 4 to 5 s of a lab run.
RECIPES_BY_SHAPE = {SHAPES[0]: RECIPES, SHAPES[1]: ("tensorwise", "rowwise")}
TINY = ((64, 128, 256),)
#: Relative error allowed against float64. FP8 keeps 3 (e4m3) or 2 (e5m2)
#: mantissa bits: a few per cent per product, compounded through the block;
#: a wrong result (a lost scale, a transposed operand) is off by 100 % or more.
TOLERANCE = {"bf16": {"out": 2e-2, "grad": 2e-2}, "fp8": {"out": 0.15, "grad": 0.2}}
INSTALL = 'pip install -e ".[fp8]"'
#: Samples per figure on a GPU: 20 give a stable median (the spread is shown).
REPETITIONS = 20
#: Steps back to back per sample, by shape. The large block's step (16 to 27 ms
#: of GPU work, the host far ahead) is thousands of times the event clock's
#: resolution, so one step is a sample; five would only take five times as long.
#: The small block's steps (1 to 2.5 ms) are host-bound: five back to back are
#: the steady state of a training loop, where each step's launches overlap the
#: last one's kernels, which a lone step after an idle GPU would not show.
INNER = {SHAPES[0]: 1, SHAPES[1]: 5}


class SwiGLU(nn.Module):
    """Llama's feed-forward block: w2(silu(w1 x) * w3 x)."""

    def __init__(self, d: int, h: int):
        super().__init__()
        self.w1 = nn.Linear(d, h, bias=False)
        self.w3 = nn.Linear(d, h, bias=False)
        self.w2 = nn.Linear(h, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def training_flops(tokens: int, d: int, h: int) -> int:
    """9 products of 2*T*d*h FLOPs each: 3 forward, and for each of the 3
    weights the gradient of its input and of the weight itself."""
    return 9 * 2 * tokens * d * h


class MissingTorchao(Unavailable):
    """torchao is not installed, or refuses this torch: ``main`` says so in one line."""


def torchao_float8():
    """torchao's float8 training API, or :class:`MissingTorchao` saying how to get it."""
    loggers = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [log.level for log in loggers]
    for log in loggers:  # "Failed to load ... .so": kernels this example does not use
        log.setLevel(logging.ERROR)
    try:
        import torchao
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except Exception as exc:  # noqa: BLE001 - missing, or refusing this torch
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MissingTorchao(f"needs torchao 0.17 ({INSTALL}; torch {torch.__version__}): {why}") from None
    finally:
        for log, level in zip(loggers, levels):
            log.setLevel(level)
    return convert_to_float8_training, Float8LinearConfig, torchao.__version__


def build(block: nn.Module, recipe: str):
    """A deep copy of ``block``, its linear layers converted to ``recipe``, and
    its compiled forward pass and loss."""
    convert_to_float8_training, Float8LinearConfig, _ = torchao_float8()
    # --8<-- [start:recipe]
    block = copy.deepcopy(block)  # the same BF16 weights for every recipe
    if recipe != "bf16":
        config = Float8LinearConfig.from_recipe_name(recipe)
        convert_to_float8_training(block, config=config)  # nn.Linear -> Float8Linear

    def forward(x):
        out = block(x)
        return out, out.float().pow(2).mean()

    # Compiled: fuses the amax and cast passes; own_code: one cache each.
    forward = torch.compile(own_code(forward), dynamic=False)
    # --8<-- [end:recipe]
    return block, forward


def own_code(fn):
    """``fn`` with a code object of its own.

    Dynamo keeps compiled code per code object, and every ``forward`` that
    ``build`` makes shares one: the recipes, compiled side by side to be timed
    in interleaved rounds, would share one cache, and each call would test
    the guards of the other recipes' entries before finding its own.
    """
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)


def training_step(block: nn.Module, forward, x: torch.Tensor) -> torch.Tensor:
    """Forward, loss and backward; the old gradients dropped first, not accumulated."""
    x.grad = None
    for p in block.parameters():
        p.grad = None
    out, loss = forward(x)
    loss.backward()
    return out


def measure_shape(lab, tokens: int, d: int, h: int) -> None:
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    torch.manual_seed(0)
    with torch.device(lab.device):  # 176 M weights: 1.5 s to initialize on the host
        base = SwiGLU(d, h).to(dtype)
    x = torch.randn(tokens, d, device=lab.device, dtype=dtype)
    # The reference: the same weights and input, in float64, kept on the
    # device for the checks of every recipe (``lab.check`` computes the error
    # where the output lives: 1.5 GB of float64 need not cross to the host).
    ref = copy.deepcopy(base).double()
    x_ref = x.double().requires_grad_()
    out_ref = ref(x_ref)
    out_ref.pow(2).mean().backward()
    out_ref, grad_x_ref, grad_w_ref = (t.detach() for t in (
        out_ref, x_ref.grad, ref.w2.weight.grad))
    del ref, x_ref
    inputs = [(torch.randn_like(x).requires_grad_(),) for _ in range(3)]
    large = (tokens, d, h) == max(shapes(lab))
    torch._dynamo.reset()  # the last shape's compiled code is of no more use
    steps = {}
    for recipe in ("bf16", *RECIPES_BY_SHAPE.get((tokens, d, h), RECIPES)):
        case = {"recipe": recipe, "tokens": tokens, "d": d, "h": h}
        block, forward = build(base, recipe)  # compiled once, on the first step
        xi = x.clone().requires_grad_()
        out = training_step(block, forward, xi)
        tol = TOLERANCE["bf16" if recipe == "bf16" else "fp8"]
        where = f"{recipe}, tokens={tokens}, d={d}, h={h}"
        err_out = lab.check(f"{where}: output", out, out_ref, tolerance=tol["out"])
        err_x = lab.check(f"{where}: grad of input", xi.grad, grad_x_ref, tolerance=tol["grad"])
        err_w = lab.check(f"{where}: grad of w2", block.w2.weight.grad, grad_w_ref,
                          tolerance=tol["grad"])
        lab.value(case=case, metric="error_out", unit="", value=err_out)
        lab.value(case=case, metric="error_grad_x", unit="", value=err_x)
        lab.value(case=case, metric="error_grad_w", unit="", value=err_w)
        del out, xi
        steps[recipe] = (lambda x, block=block, forward=forward:
                         training_step(block, forward, x))
    del out_ref, grad_x_ref, grad_w_ref
    # Interleaved rounds, one sample of every recipe per round; each FP8
    # recipe's ``speedup`` is BF16's sample over its own in the same round.
    times = lab.compare(steps, case={"tokens": tokens, "d": d, "h": h},
                        key="recipe", metric="time", unit="ms", baseline="bf16",
                        inner=1 if lab.quick else INNER[tokens, d, h], inputs=inputs,
                        warmup=None if lab.quick else 5,
                        repetitions=None if lab.quick else REPETITIONS)
    gpu_ms = {}
    for recipe, step in steps.items():
        case = {"recipe": recipe, "tokens": tokens, "d": d, "h": h}
        lab.value(case=case, metric="rate", unit="TFLOP/s",
                  value=training_flops(tokens, d, h) / (times[recipe].median * 1e-3) / 1e12)
        gpu_ms[recipe] = kernel_ms(lab, lambda: step(inputs[0][0]), case, names=large)
        if recipe != "bf16" and gpu_ms[recipe] and gpu_ms["bf16"]:
            lab.value(case=case, metric="kernel_speedup", unit="x",
                      value=gpu_ms["bf16"] / gpu_ms[recipe])


def kernel_ms(lab, step, case, names: bool = False) -> float | None:
    """On a GPU, keep the durations of one step's GPU operations, summed
    (``kernel_time``, the harness's kernel timer): against ``time``, it says
    whether the GPU or the host sets the pace. With ``names``, note the
    kernels too."""
    if not lab.cuda:
        return None
    try:
        kept = lab.time(step, case=case, metric="kernel_time", unit="ms", timer="kernel", warmup=0,
                        repetitions=lab.repetitions if lab.quick else REPETITIONS)
    except RuntimeError as exc:  # an observation: a profiler that fails is noted
        lab.note(f"kernel_time, {case['recipe']}, tokens={case['tokens']}", str(exc)[:200])
        return None
    if names:
        lab.note(f"kernels, {case['recipe']}, tokens={case['tokens']}", kernel_names(step))
    return kept.median


def shapes(lab) -> tuple[tuple[int, int, int], ...]:
    # Emulated on the CPU, the GPU shapes would take hours: tiny there.
    return TINY if lab.quick or not lab.cuda else SHAPES


def wake_compile_workers() -> None:
    """Start Inductor's Triton compile workers now, not at the first compile.

    Compiling is most of this topic's time (seven compiles of a forward and a
    backward graph, over 200 Triton kernels), and the workers take seconds to
    start (10 s or more on an H200 host): a pool started only at the first
    compile is not ready for it, and its kernels wait or compile one by one
    in this process. Started here, the workers come up while torchao loads
    and the float64 reference runs (in a ``lab run`` of several topics the
    pool of an earlier topic is kept, and this finds it ready). The same pool and
    kernels either way: only when they start changes.
    """
    try:
        from torch._inductor.async_compile import maybe_warm_pool
    except ImportError:  # another torch: the pool starts at the first compile, as before
        return
    maybe_warm_pool()


def measure(lab) -> None:
    if lab.cuda:
        wake_compile_workers()
    _, _, version = torchao_float8()  # fails first, in one line, without torchao
    for tokens, d, h in shapes(lab):
        measure_shape(lab, tokens, d, h)
    lab.note("torchao", version)
    if lab.cuda:
        lab.note("torch", torch.__version__)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
