"""Leading dimensions, alignment and tile quantisation: a vocabulary of 50,257 against 50,304.

A language model's output layer multiplies every token's hidden vector by a
``vocab x d`` matrix. GPT-2's vocabulary has 50,257 entries, so the logits'
rows are 50,257 bf16 values long: 100,514 bytes, which no 16-byte boundary
divides. Padding the vocabulary to 50,304 (a multiple of 64, as nanoGPT did)
adds 47 rows of work that nobody reads and makes every row start on a
boundary. This example times the three products of that layer (the forward
pass and the two gradients) at both sizes, by the GPU's own kernel durations,
in interleaved rounds after 5 warm-up rounds (:data:`VOCABULARY_WARMUP`), and
notes which kernel cuBLAS picked for each. A control separates the two things
padding changes: the unpadded input gradient with ``dy`` stored 50,304 wide and
sliced to 50,257 has aligned rows but an odd size.

Two neighbours of the same question are timed beside it: the same product
with the weight stored ``[N, K]`` and read transposed (what ``F.linear``
does) against ``[K, N]``; and tile quantisation, the cost of an output a few
columns wider than a tile boundary, for widths that keep every row aligned.
"""

from __future__ import annotations

import sys

import torch

from examples.blas.levels import kernels_of

#: GPT-2's vocabulary and nanoGPT's padded one (the next multiple of 64).
VOCABULARIES = (50257, 50304)
#: The output widths of the tile-quantisation sweep: a multiple of 256, then
#: 8 and 64 columns past it (every row still 16-byte aligned in bf16), then
#: the next multiple of 256.
WIDTHS = (4096, 4104, 4160, 4352)
#: Warm-up rounds before the vocabulary products' samples (at most the run's own). A round
#: takes 5 to 55 ms of GPU time on an H200 (an unpadded product up to 31 ms a call), and each
#: product has already run in its check and its kernel note: the default 25 rounds cost about
#: 3 s and warm nothing that 5 do not.
VOCABULARY_WARMUP = 5


# --8<-- [start:products]
def lm_head_products(x, w, dy):
    """The output layer's three products: logits = x wᵀ, and the gradients
    of the input (dy w) and of the weight (dyᵀ x). ``x`` is [tokens, d],
    ``w`` [vocab, d], ``dy`` [tokens, vocab]."""
    return {
        "forward: x wᵀ": lambda: x @ w.t(),
        "input gradient: dy w": lambda: dy @ w,
        "weight gradient: dyᵀ x": lambda: dy.t() @ x,
    }
# --8<-- [end:products]


#: The output layer's three products, in the order :func:`lm_head_products` returns them.
GEMMS = tuple(lm_head_products(None, None, None))


def _inputs(tokens: int, d: int, vocab: int, *, device, dtype, seed: int):
    """Made in ``dtype`` directly: no float32 copy, so the topic fits a GPU of 8 GiB."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(tokens, d, generator=g, device=device, dtype=dtype) / d**0.25
    w = torch.randn(vocab, d, generator=g, device=device, dtype=dtype) / d**0.25
    dy = torch.randn(tokens, vocab, generator=g, device=device, dtype=dtype) / vocab**0.25
    return x, w, dy


def _expected(x, w, dy, some: slice):
    """A corner of each product in float64, from the same inputs (only the rows it needs)."""
    f64 = torch.float64
    return {
        GEMMS[0]: x[some].to(f64) @ w[some].to(f64).t(),
        GEMMS[1]: dy[some].to(f64) @ w[:, some].to(f64),
        GEMMS[2]: dy[:, some].to(f64).t() @ x[:, some].to(f64),
    }


def measure_vocabulary(lab, tokens: int, d: int, dtype) -> None:
    """The three products at each vocabulary size, unpadded and padded interleaved per product."""
    calls, rows, flops, made = {}, {}, {}, {}
    some = slice(0, 64)
    for vocab in VOCABULARIES:
        inputs = made[vocab] = _inputs(tokens, d, vocab, device=lab.device, dtype=dtype, seed=vocab)
        expected = _expected(*inputs, some)
        products = lm_head_products(*inputs)
        for gemm, call in products.items():
            name = f"{gemm}, vocabulary {vocab}"
            lab.check(name + f", d={d}", call()[some, some], expected[gemm], tolerance=3e-2)
            lab.note(f"kernels, {name}, d={d}", kernels_of(call, lab.device))
            calls[name], flops[name] = call, 2 * tokens * d * vocab
            rows[name] = ({"d": d, "product": gemm, "vocabulary": vocab}, "time")
    # The control: the unpadded input gradient with dy stored in a buffer 50,304 wide and sliced,
    # so its rows are 16-byte aligned while the product's size stays 50,257.
    unpadded = VOCABULARIES[0]
    x, w, _ = made[unpadded]  # the unpadded pass's own x and w: only dy's storage differs
    dy_wide = torch.randn(tokens, VOCABULARIES[1], device=lab.device, dtype=dtype) / unpadded**0.25
    dy = dy_wide[:, :unpadded]
    name = f"{STORED_WIDE}, vocabulary {unpadded}"
    lab.check(name + f", d={d}", (dy @ w)[some, some], _expected(x, w, dy, some)[GEMMS[1]], tolerance=3e-2)
    lab.note(f"kernels, {name}, d={d}", kernels_of(lambda: dy @ w, lab.device))
    calls[name], flops[name] = (lambda: dy @ w), 2 * tokens * d * unpadded
    rows[name] = ({"d": d, "product": STORED_WIDE, "vocabulary": unpadded}, "time")
    times = _compare_pairs(lab, calls, rows, d=d)
    for name, t in times.items():
        lab.value(case=rows[name][0], metric="rate", unit="TFLOP/s", value=flops[name] / t.median / 1e6)


#: The control's product: the unpadded input gradient, its dy's rows stored 50,304 wide.
STORED_WIDE = "input gradient, dy stored 50,304 wide"


def _compare_pairs(lab, calls, rows, *, d: int):
    """Per product, the unpadded and the padded size in alternating rounds: each one's time, and
    the speed-up of padding, the unpadded time over the padded one of the same round. The input
    gradient's rounds also take the control, with its speed-up over the unpadded product."""
    unpadded, padded = VOCABULARIES
    times = {}
    for gemm in GEMMS:
        slow, fast = f"{gemm}, vocabulary {unpadded}", f"{gemm}, vocabulary {padded}"
        variants = {slow: calls[slow], fast: calls[fast]}
        ratios = {fast: ({"d": d, "product": gemm, "vocabulary": padded}, "speedup_of_padding", 1.0)}
        if gemm == GEMMS[1]:
            wide = f"{STORED_WIDE}, vocabulary {unpadded}"
            variants[wide] = calls[wide]
            ratios[wide] = ({"d": d, "product": STORED_WIDE, "vocabulary": unpadded}, "speedup_of_padding", 1.0)
        times |= lab.compare_rows(variants, {v: rows[v] for v in variants}, baseline=slow, timer="kernel",
                                  ratios=ratios, warmup=min(lab.warmup, VOCABULARY_WARMUP))
    return times


def measure_layouts(lab, n: int, dtype) -> None:
    """x @ B with B stored [K, N] against B stored [N, K] and read transposed: no copy in either."""
    g = torch.Generator(device=lab.device).manual_seed(n)
    x = torch.randn(n, n, generator=g, device=lab.device).to(dtype)
    b_kn = torch.randn(n, n, generator=g, device=lab.device).to(dtype)
    b_nk = b_kn.t().contiguous()  # the same matrix, stored the other way round
    calls = {"weight stored [K, N]": lambda: x @ b_kn,
             "weight stored [N, K], read transposed": lambda: x @ b_nk.t()}
    reference = x[:64].double() @ b_kn.double()
    for name, call in calls.items():
        lab.check(f"{name}, n={n}", call()[:64], reference, tolerance=3e-2)
        lab.note(f"kernels, {name}, n={n}", kernels_of(call, lab.device))
    times = lab.compare(calls, case={"n": n}, key="layout", metric="time",
                        baseline="weight stored [K, N]", timer="kernel")
    for name, t in times.items():
        lab.value(case={"n": n, "layout": name}, metric="rate", unit="TFLOP/s",
                  value=2 * n**3 / t.median / 1e6)


def measure_widths(lab, m: int, k: int, widths, dtype) -> None:
    """Outputs a few columns past a multiple of 256, each width's rate paired with the narrowest's.

    cuBLAS may pick another kernel (and tile) per width, which the notes record: the rates say
    what a width costs, not by themselves why (one fixed kernel swept over N would)."""
    g = torch.Generator(device=lab.device).manual_seed(m + k)
    x = torch.randn(m, k, generator=g, device=lab.device).to(dtype)
    ws = {n: torch.randn(k, n, generator=g, device=lab.device).to(dtype) for n in widths}
    calls = {f"N={n}": (lambda w=w: x @ w) for n, w in ws.items()}
    for n, w in ws.items():
        lab.check(f"width {n}", calls[f"N={n}"]()[:64, :64], x[:64].double() @ w[:, :64].double(), tolerance=3e-2)
        lab.note(f"kernels, N={n}", kernels_of(calls[f"N={n}"], lab.device))
    rows = {f"N={n}": ({"m": m, "k": k, "n": n}, "time") for n in widths}
    # Each width's rate over the narrowest's, paired per round: its time over the narrowest's,
    # turned into a ratio of rates by the widths' ratio (under 1: each column cost more).
    base = widths[0]
    ratios = {f"N={n}": ({"m": m, "k": k, "n": n}, "rate_over_narrowest", n / base) for n in widths[1:]}
    times = lab.compare_rows(calls, rows, baseline=f"N={base}", ratios=ratios, timer="kernel")
    for n in widths:
        t = times[f"N={n}"]
        lab.value(case={"m": m, "k": k, "n": n}, metric="rate", unit="TFLOP/s",
                  value=2 * m * k * n / t.median / 1e6)


def measure(lab) -> None:
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    if lab.quick:
        tokens, ds, layout_n, (m, k), widths = 64, (32,), 128, (128, 128), (256, 264)
    else:
        tokens, ds, layout_n, (m, k), widths = 8192, (768, 4096), 8192, (8192, 8192), WIDTHS
    for d in ds:
        measure_vocabulary(lab, tokens, d, dtype)
    measure_layouts(lab, layout_n, dtype)
    measure_widths(lab, m, k, widths, dtype)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
