"""How sure is a speed-up? A bootstrap confidence interval for a ratio of two medians.

Two bf16 GEMMs that differ only in their inner dimension K, 8192 against 8448: 3.1 %
more multiply-adds over the same 8192 x 8192 output: with the same kernel for both (the
record notes each one's kernels), the same tiles and a K loop 3 % longer. Their times
are taken by the kernels' own durations (``timer="kernel"``) in 300 interleaved rounds
(:func:`examples.lab.timing.measure_interleaved`, which :meth:`Lab.compare` uses and
which returns the samples themselves: ``Lab.compare`` and ``Lab.keep_samples`` keep only
a summary, median, quartiles and extremes).

From the first n = 10, 30, 100 and 300 rounds (what one would have had after stopping
there; one run, so the n share their first rounds and no n costs another warm-up), for
the longer product over the shorter one:

* the ratio of the medians, with its 95 % bootstrap intervals (percentile and BCa;
  :mod:`examples.lab.bootstrap`), resampling rounds with both samples kept (paired) and
  each variant on its own (unpaired);
* the median of the paired ratios, the harness's speed-up, with its quartiles (the
  spread the pages show) and its 95 % bootstrap intervals;
* the correlation of the two variants' samples over the rounds: what pairing can cancel;
* whether the rounds are independent, as the intervals assume (each round's correlation
  with the next), and, over the disjoint windows of 10, 30 and 100 rounds, the share whose
  interval holds the estimate of all 300: the intervals tested on the GPU's own data.

Cost on an H200: 2 x 8192 x 8192 x 8448 flop is about 1.1 TFLOP a product, some 1.7 ms
at a power-held clock, so 25 warm-up and 300 timed rounds of both are about 1.1 s of GEMMs;
the bootstrap (2,000 resamples of at most 300 rounds, on the CPU) well under a second.
Memory: the operands and outputs, about 0.8 GiB, and the float64 check of 256 rows
(one operand in float64, 0.5 GiB).
"""
from __future__ import annotations

import sys
import time

import torch

from examples.lab import bootstrap
from examples.lab.harness import CheckFailed
from examples.lab.kernels import kernel_names
from examples.lab.timing import measure_interleaved

#: Rounds the intervals are computed from: the first n of one run.
ROUNDS = (10, 30, 100, 300)
#: Resamples per interval, and the seed of the first: the same samples give the same interval.
RESAMPLES = 2000
SEED = 0
#: The two products: K and the variant's name; the first is the baseline (the ratio's denominator).
SIDE = 8192
DEPTHS = {"K = 8192": 8192, "K = 8448": 8448}
WARMUP_ROUNDS = 25


def correlation(a: list[float], b: list[float]) -> float:
    """Pearson's correlation of the two variants' samples, round by round."""
    x = torch.tensor([a, b], dtype=torch.float64)
    return float(torch.corrcoef(x)[0, 1])


# --8<-- [start:intervals]
def intervals_at(base: list[float], longer: list[float], n: int) -> dict[str, bootstrap.Interval]:
    """The intervals of the first ``n`` rounds: longer over base, three ways."""
    a, b = longer[:n], base[:n]
    found = {}
    for name, statistic, paired in (("ratio of medians, rounds resampled", "ratio of medians", True),
                                    ("ratio of medians, each variant resampled", "ratio of medians", False),
                                    ("median of paired ratios", "median of paired ratios", True)):
        for method, ci in bootstrap.ratio_intervals(a, b, paired=paired, statistic=statistic,
                                                    resamples=RESAMPLES, seed=SEED + n).items():
            found[f"{name}, {method}"] = ci
    return found
# --8<-- [end:intervals]


def lag1(x: list[float]) -> float:
    """Correlation of each round's value with the next one's: how long the clock's state
    lasts. The intervals resample rounds as if independent; a value near 0 says they nearly
    are, one near 1 that neighbouring rounds share their state and the intervals are too narrow."""
    t = torch.tensor(x, dtype=torch.float64)
    return float(torch.corrcoef(torch.stack([t[:-1], t[1:]]))[0, 1])


# --8<-- [start:windows]
def window_coverage(base: list[float], longer: list[float], n: int, statistic: str,
                    paired: bool) -> float:
    """Of the disjoint windows of ``n`` rounds in this run, the share whose 95 % percentile
    interval holds the estimate from all the rounds: the intervals tested on GPU data."""
    everything = (bootstrap.ratio_of_medians(longer, base) if statistic == "ratio of medians"
                  else float(bootstrap.median(torch.tensor(longer, dtype=torch.float64)
                                              / torch.tensor(base, dtype=torch.float64))))
    starts = range(0, len(base) - n + 1, n)
    held = sum(bootstrap.ratio_interval(longer[i:i + n], base[i:i + n], paired=paired,
                                        statistic=statistic, resamples=RESAMPLES,
                                        seed=SEED + i).covers(everything) for i in starts)
    return held / len(starts)
# --8<-- [end:windows]


def measure(lab) -> None:
    gpu = lab.cuda and not lab.quick
    side = SIDE if gpu else 128
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    g = torch.Generator(device=lab.device).manual_seed(0)
    calls, products = {}, {}
    for name, depth in DEPTHS.items():
        k = depth if gpu else depth * side // SIDE  # 128 and 132 on the CPU
        x = torch.randn(side, k, generator=g, device=lab.device, dtype=dtype)
        w = torch.randn(k, side, generator=g, device=lab.device, dtype=dtype)
        out = torch.full((side, side), float("nan"), device=lab.device, dtype=dtype)
        torch.matmul(x, w, out=out)
        if out.isnan().any():  # poisoned before: every element must have been written
            raise CheckFailed(f"{name}: the product left elements of its output unwritten")
        rows = torch.randperm(side, generator=g, device=lab.device)[:256]
        lab.check(f"{name}: 256 rows against float64", out[rows], x[rows].double() @ w.double(),
                  tolerance=1e-2 if dtype == torch.bfloat16 else 1e-5)
        products[name] = (x, w, out)
        calls[name] = lambda x=x, w=w, out=out: torch.matmul(x, w, out=out)
    if lab.cuda:  # the same kernel for both, or not: the ratio is 1.03 only if it is
        for name, call in calls.items():
            lab.note(f"kernels, {name}", kernel_names(call))
    timer = "kernel" if lab.cuda else "host_sync"
    method = f"{timer}, interleaved rounds"
    began = time.monotonic()
    samples = measure_interleaved(calls, device=lab.device, timer=timer, warmup=WARMUP_ROUNDS,
                                  repetitions=max(ROUNDS))
    lab.load.window(began, time.monotonic())
    base, longer = (samples[name] for name in DEPTHS)
    for name, s in samples.items():
        lab.keep_samples([v * 1e6 for v in s], case={"variant": name}, metric="time", unit="us",
                         method=method, warmup=WARMUP_ROUNDS, inner=1)
    lab.value(case={"variant": "K = 8448"}, metric="correlation", value=correlation(base, longer), unit="")
    first = intervals_at(base, longer, ROUNDS[0])
    for n in ROUNDS:
        row = {"rounds": n}
        ratios = lab.keep_samples([a / b for a, b in zip(longer[:n], base[:n])], case=row, metric="paired_ratio",
                                  unit="x", method=f"paired ratio K = 8448 / K = 8192, {method}")
        lab.value(case=row, metric="ratio_of_medians", unit="x",
                  value=bootstrap.ratio_of_medians(longer[:n], base[:n]))
        found = intervals_at(base, longer, n)
        for interval, ci in found.items():
            case = {"rounds": n, "interval": interval}
            lab.value(case=case, metric="ci_low", value=ci.low, unit="x")
            lab.value(case=case, metric="ci_high", value=ci.high, unit="x")
            lab.value(case=case, metric="ci_width", value=100 * ci.relative_width, unit="%")
            lab.value(case=case, metric="width_over_first", value=ci.width / first[interval].width, unit="x")
        # What pairing buys, and the interval against the spread the pages show today.
        unpaired = found["ratio of medians, each variant resampled, percentile"].width
        lab.value(case=row, metric="paired_over_unpaired", unit="x",
                  value=found["ratio of medians, rounds resampled, percentile"].width / unpaired)
        lab.value(case=row, metric="median_of_ratios_over_unpaired", unit="x",
                  value=found["median of paired ratios, percentile"].width / unpaired)
        lab.value(case=row, metric="interval_over_iqr", unit="x",
                  value=found["median of paired ratios, percentile"].width / max(ratios.iqr, 1e-12))
    # Are the rounds independent, as the intervals assume? And do windows' intervals hold
    # the whole run's estimate as often as 95 % says?
    lab.value(case={"variant": "K = 8192"}, metric="lag1", value=lag1(base), unit="")
    lab.value(case={"rounds": max(ROUNDS)}, metric="lag1_ratio", unit="",
              value=lag1([a / b for a, b in zip(longer, base)]))
    for n in ROUNDS[:-1]:
        for name, statistic, paired in (("median of paired ratios", "median of paired ratios", True),
                                        ("ratio of medians, each variant resampled", "ratio of medians", False)):
            lab.value(case={"rounds": n, "interval": f"{name}, percentile"}, metric="window_coverage",
                      value=100 * window_coverage(base, longer, n, statistic, paired), unit="%")
    lab.note("intervals", f"95 %, {RESAMPLES} resamples each, seeded; the first n of "
                          f"{max(ROUNDS)} interleaved rounds")
    del products


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
