"""FP8 with 128-element block scales (DeepSeek-V3's recipe) against tensor-wise and
row-wise scales, and the accumulator behind cuBLASLt's fast accumulation.

DeepSeek-V3 (arXiv:2412.19437, section 3.3) scales activations per 1 x 128 tile
(one token, 128 channels) and weights per 128 x 128 block, so that an outlier
channel crushes only the 127 values that share its tile; and it promotes the
tensor cores' partial sums to FP32 every 128 elements of K, because the FP8
accumulation of its H800 GPUs (Hopper) keeps "around 14 bits". ``torch._scaled_mm`` takes those scales
on Hopper through cuBLASLt (``BlockWise1x128`` for ``a``, ``BlockWise128x128``
for ``b``, in ``aten/src/ATen/native/cuda/ScaledBlas.cpp``; cuBLASLt 12.9 or
later, compute capability 9.0). Three measurements:

* time: BF16, and FP8 tensor-wise, row-wise and block-wise, each product's own
  kernel durations (``timer="kernel"``) in interleaved rounds (``lab.compare``),
  at 8192^3 and at Llama 3 8B's up-projection (16384 tokens, 4096 -> 14336);
* error of each recipe's product against float64 on the FP32 inputs, with
  outlier channels or outlier tokens (``fp8_scaling.activations``), and of the
  ordinary values' FP8 round trip alone (runs on the CPU too);
* accumulation: each FP8 recipe with ``use_fast_accum`` off and on as K grows,
  FP32 output, its error against float64 products of its own (dequantized)
  operands, so that the inputs' rounding is out of it and what is left is the
  summing's (with FP32 promotion too: the sums between promotions are not FP32's;
  on the H200 about 1e-4); and its kernel time.

Cost on an H200: 5 to 7 s a run; 10.4 GiB of GPU memory at the peak (the float64
references of the error products), so it needs a card of 12 GiB or more.

Every FP8 operand, scale and layout is made before any timing. On the CPU the
quick run checks the quantisation and the round-trip errors; the GEMMs need
compute capability 9.0 and are skipped in one line.
"""
from __future__ import annotations

import sys

import torch

from examples.ecosystem.fp8_scaling import activations
from examples.lab.kernels import kernel_names

E4M3 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(E4M3).max  # 448
BLOCK = 128
RECIPES = ("tensorwise", "rowwise", "blockwise")
#: (M, K, N): a square product that fills the chip, and Llama 3 8B's w1 at 16384 tokens.
SHAPES = ((8192, 8192, 8192), (16384, 4096, 14336))
#: The accumulation sweep: M = N = 4096, K from 1024 to 32768.
SWEEP_MN = 4096
SWEEP_K = (1024, 4096, 16384, 32768)
OUTLIER = 1e4
ACCUMULATION = {"fp32 promotion": False, "fast": True}
#: Against the exact product of the kernel's own operands: FP32 sums land far under
#: 1e-2; fast accumulation's narrower sums lose more; a lost scale or a transposed
#: operand is off by 100 % or more.
TOLERANCE = {"fp32 promotion": 1e-2, "fast": 0.1}


def shape_name(m: int, k: int, n: int) -> str:
    return f"{m}×{k}×{n}"


# --8<-- [start:scales]
def block_amax(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Largest magnitude of each rows x cols block of x (2-D, sizes multiples)."""
    m, k = x.shape
    return x.abs().reshape(m // rows, rows, k // cols, cols).amax(dim=(1, 3))


def quantize_a(x: torch.Tensor, recipe: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Activations (M x K) to e4m3 and the scale that undoes it, as _scaled_mm
    wants it: one number, one per row (M x 1), or one per 1 x 128 tile
    (M x K/128, stored column by column)."""
    if recipe == "tensorwise":
        scale = x.abs().amax() / FP8_MAX
        return (x / scale).to(E4M3), scale.float()
    if recipe == "rowwise":
        scale = x.abs().amax(dim=1, keepdim=True) / FP8_MAX
        return (x / scale).to(E4M3), scale.float()
    if recipe == "blockwise":
        scale = block_amax(x, 1, BLOCK) / FP8_MAX  # M x K/128
        q = (x / scale.repeat_interleave(BLOCK, dim=1)).to(E4M3)
        return q, scale.float().t().contiguous().t()
    raise ValueError(f"unknown recipe {recipe!r}; choose one of {', '.join(RECIPES)}")


def quantize_w(w: torch.Tensor, recipe: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights as nn.Linear holds them (N x K) to the second operand, K x N
    column-major (w8.t(), no copy), and its scale: one number, one per
    output column (1 x N), or one per 128 x 128 block (K/128 x N/128)."""
    if recipe == "tensorwise":
        scale = w.abs().amax() / FP8_MAX
        return (w / scale).to(E4M3).t(), scale.float()
    if recipe == "rowwise":
        scale = w.abs().amax(dim=1, keepdim=True) / FP8_MAX  # N x 1
        return (w / scale).to(E4M3).t(), scale.float().reshape(1, -1)
    if recipe == "blockwise":
        scale = block_amax(w, BLOCK, BLOCK) / FP8_MAX  # N/128 x K/128
        full = scale.repeat_interleave(BLOCK, dim=0).repeat_interleave(BLOCK, dim=1)
        return (w / full).to(E4M3).t(), scale.float().t()
    raise ValueError(f"unknown recipe {recipe!r}; choose one of {', '.join(RECIPES)}")


def fp8_matmul(a8, sa, b8, sb, *, fast_accum=False, out_dtype=torch.bfloat16):
    return torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb, out_dtype=out_dtype,
                            use_fast_accum=fast_accum)
# --8<-- [end:scales]


def dequantize_a(q: torch.Tensor, scale: torch.Tensor, recipe: str) -> torch.Tensor:
    """What the kernel multiplies, in float64: the e4m3 values times their scales."""
    s = scale.double()
    if recipe == "blockwise":
        s = s.repeat_interleave(BLOCK, dim=1)
    return q.double() * s


def dequantize_w(q_t: torch.Tensor, scale: torch.Tensor, recipe: str) -> torch.Tensor:
    """The K x N second operand in float64."""
    s = scale.double()
    if recipe == "blockwise":
        s = s.repeat_interleave(BLOCK, dim=0).repeat_interleave(BLOCK, dim=1)
    return q_t.double() * s


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def round_trip_error(x: torch.Tensor, outliers: torch.Tensor, recipe: str) -> float:
    """Relative error of the ordinary values (not the outliers) after e4m3 and back."""
    q, s = quantize_a(x, recipe)
    back = dequantize_a(q, s, recipe)
    rest = ~outliers
    return ((back - x.double())[rest].norm() / x.double()[rest].norm()).item()


def blockwise_refusal(device: torch.device) -> str | None:
    """Why this torch and GPU cannot run a block-scaled product, or None."""
    a = torch.randn(256, 512, device=device)
    w = torch.randn(256, 512, device=device)
    try:
        out = fp8_matmul(*quantize_a(a, "blockwise"), *quantize_w(w, "blockwise"))
    except (RuntimeError, NotImplementedError, ValueError) as exc:
        return str(exc).strip().splitlines()[0]
    ref = dequantize_a(*quantize_a(a, "blockwise"), "blockwise") @ dequantize_w(*quantize_w(w, "blockwise"), "blockwise")
    error = relative_error(out, ref)
    return None if error < 1e-2 else f"a wrong block-scaled product (relative error {error:.3g})"


def fp8_refusal(lab) -> str | None:
    """Why FP8 products cannot run here, or None."""
    if not lab.cuda:
        return "no CUDA device"
    major, minor = torch.cuda.get_device_capability(lab.device)
    if major < 9:
        return f"compute capability {major}.{minor}; block-scaled FP8 needs 9.0"
    return None


def measure_errors(lab, recipes) -> None:
    """Each recipe's product on activations with outliers, against float64."""
    m, k, n = (512, 1024, 512) if lab.quick else SHAPES[0]
    g = torch.Generator().manual_seed(1)
    w = torch.randn(n, k, generator=g).to(lab.device)
    for where in ("channels", "rows"):
        x, outliers = activations(m, k, outlier=OUTLIER, where=where)
        x, outliers = x.to(lab.device), outliers.to(lab.device)
        pattern = f"outlier {'channels' if where == 'channels' else 'tokens'} ×10⁴"
        for recipe in RECIPES:  # the quantisation alone: runs on the CPU too
            lab.value(case={"recipe": recipe, "pattern": pattern}, metric="round_trip_error",
                      unit="", value=round_trip_error(x, outliers, recipe))
        if not recipes:
            continue
        ref = x.double() @ w.double().t()
        ordinary = ~outliers.any(dim=1)
        for recipe in recipes:
            (a8, sa), (b8, sb) = quantize_a(x, recipe), quantize_w(w, recipe)
            out = fp8_matmul(a8, sa, b8, sb)
            exact = dequantize_a(a8, sa, recipe) @ dequantize_w(b8, sb, recipe)
            lab.check(f"{recipe} product, {pattern}", out, exact, tolerance=1e-2)
            case = {"recipe": recipe, "pattern": pattern}
            lab.value(case=case, metric="error_vs_fp64", unit="", value=relative_error(out, ref))
            if where == "rows":  # the tokens no outlier shares a row with
                lab.value(case=case, metric="error_ordinary_tokens", unit="",
                          value=relative_error(out[ordinary], ref[ordinary]))
            del out, exact
        del ref


def measure_speed(lab, recipes) -> None:
    """BF16 and each FP8 recipe, kernel durations in interleaved rounds."""
    for m, k, n in SHAPES:
        x = torch.randn(m, k, device=lab.device)
        w = torch.randn(n, k, device=lab.device)
        x16, w16 = x.bfloat16(), w.bfloat16().t()
        variants = {"bf16": lambda: x16 @ w16}
        for recipe in recipes:
            (a8, sa), (b8, sb) = quantize_a(x, recipe), quantize_w(w, recipe)
            exact = dequantize_a(a8, sa, recipe) @ dequantize_w(b8, sb, recipe)
            lab.check(f"{recipe} product, {shape_name(m, k, n)}", fp8_matmul(a8, sa, b8, sb), exact,
                      tolerance=1e-2)
            del exact
            variants[recipe] = lambda a8=a8, sa=sa, b8=b8, sb=sb: fp8_matmul(a8, sa, b8, sb)
        lab.check(f"bf16 product, {shape_name(m, k, n)}", variants["bf16"](),
                  x16.double() @ w16.double(), tolerance=1e-2)
        del x, w
        shape = shape_name(m, k, n)
        times = lab.compare(variants, case={"shape": shape}, key="recipe", metric="time", unit="ms",
                            baseline="bf16", timer="kernel", repetitions=30)
        for name, t in times.items():
            lab.value(case={"shape": shape, "recipe": name}, metric="rate", unit="TFLOP/s",
                      value=2 * m * k * n / (t.median / 1e3) / 1e12)
        if (m, k, n) == SHAPES[0]:
            for name, fn in variants.items():
                lab.note(f"kernels, {name}, {shape}", kernel_names(fn))
        del variants


def sweep_refusal(lab, recipe: str, fast: bool) -> str | None:
    """Why this recipe cannot run with this accumulation and FP32 output, or None."""
    a = torch.randn(256, 512, device=lab.device)
    w = torch.randn(256, 512, device=lab.device)
    (a8, sa), (b8, sb) = quantize_a(a, recipe), quantize_w(w, recipe)
    try:
        fp8_matmul(a8, sa, b8, sb, fast_accum=fast, out_dtype=torch.float32)
    except (RuntimeError, NotImplementedError, ValueError) as exc:
        return str(exc).strip().splitlines()[0]
    return None


def measure_accumulation(lab, pairs) -> None:
    """Fast accumulation off and on as K grows: error against the exact product
    of the kernel's own operands (FP32 output), and kernel time."""
    for k in SWEEP_K:
        x = torch.randn(SWEEP_MN, k, device=lab.device)
        w = torch.randn(SWEEP_MN, k, device=lab.device)
        variants, rows = {}, {}
        for recipe in dict.fromkeys(r for r, _ in pairs):
            (a8, sa), (b8, sb) = quantize_a(x, recipe), quantize_w(w, recipe)
            exact = dequantize_a(a8, sa, recipe) @ dequantize_w(b8, sb, recipe)
            for accumulation, fast in ACCUMULATION.items():
                if (recipe, accumulation) not in pairs:
                    continue
                name = f"{recipe}, {accumulation}"
                fn = (lambda a8=a8, sa=sa, b8=b8, sb=sb, fast=fast:
                      fp8_matmul(a8, sa, b8, sb, fast_accum=fast, out_dtype=torch.float32))
                case = {"recipe": recipe, "accumulation": accumulation, "k": k}
                out = fn()
                lab.check(f"{name}, k={k}", out, exact, tolerance=TOLERANCE[accumulation])
                lab.value(case=case, metric="accumulation_error", unit="", value=relative_error(out, exact))
                del out
                variants[name], rows[name] = fn, (case, "sweep_time")
            del exact
        del x, w
        lab.compare_rows(variants, rows, unit="ms", timer="kernel", repetitions=20)


def measure(lab) -> None:
    refusal = fp8_refusal(lab)
    recipes: tuple[str, ...] = ()
    if refusal:
        print(f"fp8_blockwise: FP8 products skipped ({refusal}); the quantisation errors only",
              file=sys.stderr)
    else:
        blockwise = blockwise_refusal(lab.device)
        if blockwise:
            print(f"fp8_blockwise: block-scaled products skipped, torch._scaled_mm refused them: {blockwise}",
                  file=sys.stderr)
            lab.note("blockwise refused", blockwise)
        recipes = RECIPES if not blockwise else RECIPES[:2]
    measure_errors(lab, recipes)
    if not recipes:
        return
    measure_speed(lab, recipes)
    pairs = []
    for recipe in recipes:
        for accumulation, fast in ACCUMULATION.items():
            refused = sweep_refusal(lab, recipe, fast)
            if refused:
                print(f"fp8_blockwise: {recipe}, {accumulation} accumulation, FP32 output left out of "
                      f"the accumulation sweep: {refused}", file=sys.stderr)
                lab.note(f"accumulation sweep, {recipe}, {accumulation}: refused", refused)
            else:
                pairs.append((recipe, accumulation))
    if pairs:
        measure_accumulation(lab, pairs)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
