"""Bootstrap confidence intervals for a ratio of two medians: how sure is a speed-up?

The pages quote a speed-up as the median of the per-round ratios of two variants'
times (the harness's paired ratio); a ratio of the two variants' medians is the other
figure one could quote, and the two estimate different things where the ratio moves with
the clock. Both are here. The bootstrap (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993)
asks how far that ratio would move had the rounds come out otherwise: it draws, with
replacement, as many samples as were measured, recomputes the ratio, and does so a
few thousand times; the spread of those ratios gives the interval. Hoefler & Belli
("Scientific Benchmarking of Parallel Computing Systems", SC'15, rule 5) ask for such
intervals around medians of benchmark times, whose distributions are rarely normal.
The resampling treats rounds as independent: where the clock keeps its state over many
rounds, they are not, and the intervals come out too narrow (the page measures how far).

Two ways to resample, matching how the samples were taken:

* **paired**: the harness's interleaved rounds give one sample of each variant per
  round, so a round is the unit: draw rounds, keep both samples of each
  (:func:`examples.lab.timing.measure_interleaved`). A drift that slows both variants
  of a round stays in the pair and cancels in the ratio, as it did in the measurement.
* **unpaired**: each variant's samples drawn on their own, as for two separate runs.

Two intervals from the same resamples:

* **percentile**: the 2.5th and 97.5th percentiles of the resampled ratios
  (Efron & Tibshirani 1993, ch. 13);
* **BCa**, bias-corrected and accelerated (Efron & Tibshirani 1993, ch. 14;
  DiCiccio & Efron, "Bootstrap Confidence Intervals", *Statistical Science* 11(3), 1996):
  the same resamples, read at percentiles moved by the resamples' median bias (``z0``)
  and by how the ratio's spread changes with its value (the acceleration ``a``, from a
  jackknife).

Pure torch on the CPU, float64, seeded: the same samples and seed give the same interval
on any machine. The median is the middle value, or the mean of the two middle values,
as :func:`examples.lab.stats.summarize` takes it.

>>> a = [1.02, 1.05, 1.01, 1.07, 1.03, 1.04, 1.06, 1.02, 1.05, 1.03]
>>> b = [1.00, 1.02, 0.99, 1.04, 1.00, 1.01, 1.03, 0.99, 1.02, 1.00]
>>> round(ratio_of_medians(a, b), 4)
1.0299
>>> ci = ratio_interval(a, b, paired=True, resamples=1000, seed=0)
>>> ci.low < 1.0297 < ci.high, ci.method, ci.resampling
(True, 'percentile', 'paired')
>>> ci == ratio_interval(a, b, paired=True, resamples=1000, seed=0)   # seeded: the same every time
True
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import torch

#: What :func:`ratio_intervals` returns, in this order.
METHODS = ("percentile", "BCa")
_NORMAL = NormalDist()


@dataclass(frozen=True)
class Interval:
    """A confidence interval for a ratio of medians, and how it was made."""

    statistic: str  # a key of STATISTICS
    estimate: float
    low: float
    high: float
    level: float
    method: str  # "percentile" or "BCa"
    resampling: str  # "paired" or "unpaired"
    resamples: int
    n: int  # rounds (paired) or the smaller sample (unpaired)

    @property
    def width(self) -> float:
        return self.high - self.low

    @property
    def relative_width(self) -> float:
        """The width over the estimate: 0.01 is an interval one per cent of the ratio wide."""
        return self.width / self.estimate

    def covers(self, value: float) -> bool:
        return self.low <= value <= self.high


def median(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Medians along ``dim``: the middle value, or the mean of the two middle values."""
    s = x.sort(dim=dim).values
    n = s.shape[dim]
    return (s.select(dim, (n - 1) // 2) + s.select(dim, n // 2)) / 2


def _as_tensor(x: Sequence[float] | torch.Tensor, name: str) -> torch.Tensor:
    t = torch.as_tensor(x, dtype=torch.float64).detach().to("cpu").reshape(-1)
    if t.numel() < 2:
        raise ValueError(f"{name}: at least 2 samples, got {t.numel()}")
    if not torch.isfinite(t).all() or (t <= 0).any():
        raise ValueError(f"{name}: times must be finite and positive")
    return t


def ratio_of_medians(a: Sequence[float] | torch.Tensor, b: Sequence[float] | torch.Tensor) -> float:
    """median(a) / median(b)."""
    return float(median(_as_tensor(a, "a")) / median(_as_tensor(b, "b")))


def _ratio_of_medians(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return median(a) / median(b)


def _median_of_ratios(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return median(a / b)


#: The two ratios a page can quote: median(a) / median(b), and the harness's paired
#: speed-up, the median over rounds of a[i] / b[i] (:meth:`examples.lab.harness.Lab.compare`).
#: Each takes (..., n) tensors and reduces the last dimension.
STATISTICS = {"ratio of medians": _ratio_of_medians, "median of paired ratios": _median_of_ratios}


# --8<-- [start:resample]
def resampled(a: torch.Tensor, b: torch.Tensor, *, statistic: str, paired: bool, resamples: int,
              generator: torch.Generator) -> torch.Tensor:
    """``statistic`` of ``resamples`` sets of samples drawn with replacement.

    Paired, one set of round indices serves both variants, so each drawn round
    brings both of its samples; unpaired, each variant is drawn on its own.
    """
    rounds_a = torch.randint(len(a), (resamples, len(a)), generator=generator)
    rounds_b = rounds_a if paired else torch.randint(len(b), (resamples, len(b)), generator=generator)
    return STATISTICS[statistic](a[rounds_a], b[rounds_b])
# --8<-- [end:resample]


def _leave_one_out(x: torch.Tensor) -> torch.Tensor:
    """Row i is ``x`` without its element i: shape (n, n - 1)."""
    n = len(x)
    keep = ~torch.eye(n, dtype=torch.bool)
    return x.expand(n, n).masked_select(keep).view(n, n - 1)


def _influence(leave_one_out: torch.Tensor) -> torch.Tensor:
    """Jackknife influence values, (n - 1)(mean of the leave-one-out values - each)."""
    return (len(leave_one_out) - 1) * (leave_one_out.mean() - leave_one_out)


def acceleration(a: torch.Tensor, b: torch.Tensor, *, statistic: str, paired: bool) -> float:
    """BCa's acceleration: a sixth of the skewness of the ratio's linear (jackknife) term.

    Paired, one jackknife over rounds, dropping both samples of a round (Efron &
    Tibshirani 1993, eq. 14.15). Unpaired, one jackknife over each variant, each
    variant's influence values divided by its sample count before they are summed:
    the skewness of a statistic of two independent samples, which is the one-sample
    formula when there is one sample.
    """
    stat = STATISTICS[statistic]
    if paired:
        u = [(_influence(stat(_leave_one_out(a), _leave_one_out(b))), len(a))]
    else:
        u = [(_influence(stat(_leave_one_out(a), b.expand(len(a), -1))), len(a)),
             (_influence(stat(a.expand(len(b), -1), _leave_one_out(b))), len(b))]
    third = sum(float((v ** 3).sum()) / n ** 3 for v, n in u)
    second = sum(float((v ** 2).sum()) / n ** 2 for v, n in u)
    return 0.0 if second == 0 else third / (6 * second ** 1.5)


# --8<-- [start:intervals]
def ratio_intervals(a: Sequence[float] | torch.Tensor, b: Sequence[float] | torch.Tensor, *,
                    paired: bool, statistic: str = "ratio of medians", level: float = 0.95,
                    resamples: int = 2000, seed: int = 0) -> dict[str, Interval]:
    """The percentile and BCa intervals of ``statistic`` (:data:`STATISTICS`) of ``a`` over
    ``b``, from one set of resamples.

    ``paired``: ``a[i]`` and ``b[i]`` come from round ``i`` (resample rounds);
    otherwise the two are resampled apart (the ratio of medians only).
    """
    a, b = _as_tensor(a, "a"), _as_tensor(b, "b")
    if statistic not in STATISTICS:
        raise ValueError(f"statistic {statistic!r}: choose from {', '.join(STATISTICS)}")
    if (paired or statistic != "ratio of medians") and len(a) != len(b):
        raise ValueError(f"paired samples must pair up: {len(a)} against {len(b)}")
    if statistic == "median of paired ratios" and not paired:
        raise ValueError("a median of paired ratios resamples rounds: paired=True")
    if not 0 < level < 1 or resamples < 100:
        raise ValueError("level in (0, 1) and at least 100 resamples")
    estimate = float(STATISTICS[statistic](a, b))
    ratios = resampled(a, b, statistic=statistic, paired=paired, resamples=resamples,
                       generator=torch.Generator().manual_seed(seed))
    tail = (1 - level) / 2

    def interval(method: str, low_q: float, high_q: float) -> Interval:
        low, high = torch.quantile(ratios, torch.tensor([low_q, high_q], dtype=torch.float64)).tolist()
        return Interval(statistic, estimate, low, high, level, method, "paired" if paired else "unpaired",
                        resamples, min(len(a), len(b)))

    # BCa: z0 from the share of resampled ratios below the estimate (ties count half:
    # a median's resamples repeat the estimate often), a from the jackknife.
    below = float((ratios < estimate).sum() + 0.5 * (ratios == estimate).sum()) / resamples
    z0 = _NORMAL.inv_cdf(min(max(below, 0.5 / resamples), 1 - 0.5 / resamples))
    acc = acceleration(a, b, statistic=statistic, paired=paired)

    def moved(q: float) -> float:
        z = z0 + _NORMAL.inv_cdf(q)
        if acc * z >= 1:  # past the pole of the correction: the far end of the resamples
            return 0.0 if z < 0 else 1.0
        return _NORMAL.cdf(z0 + z / (1 - acc * z))

    return {"percentile": interval("percentile", tail, 1 - tail),
            "BCa": interval("BCa", moved(tail), moved(1 - tail))}
# --8<-- [end:intervals]


def ratio_interval(a: Sequence[float] | torch.Tensor, b: Sequence[float] | torch.Tensor, *,
                   paired: bool, statistic: str = "ratio of medians", method: str = "percentile",
                   level: float = 0.95, resamples: int = 2000, seed: int = 0) -> Interval:
    """One of :func:`ratio_intervals`' intervals: ``method`` is ``"percentile"`` or ``"BCa"``."""
    if method not in METHODS:
        raise ValueError(f"method {method!r}: choose from {', '.join(METHODS)}")
    return ratio_intervals(a, b, paired=paired, statistic=statistic, level=level, resamples=resamples,
                           seed=seed)[method]


def lognormal_rounds(n: int, *, ratio: float, drift: float, noise: float,
                     generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` rounds of two variants whose true medians are ``ratio`` and 1.

    Each round has its own factor, lognormal with spread ``drift`` (a clock that
    moves), shared by both samples of the round; each sample has its own lognormal
    noise, spread ``noise``. The log of a sample is normal with mean log(median), so
    every sample's median is known exactly: ``ratio`` for ``a``, 1 for ``b``.
    """
    shared = torch.randn(n, generator=generator, dtype=torch.float64) * drift
    a = ratio * torch.exp(shared + noise * torch.randn(n, generator=generator, dtype=torch.float64))
    b = torch.exp(shared + noise * torch.randn(n, generator=generator, dtype=torch.float64))
    return a, b


def coverage(*, trials: int, n: int, paired: bool, drift: float, noise: float,
             statistic: str = "ratio of medians", ratio: float = 1.03, resamples: int = 1000,
             seed: int = 0) -> dict[str, float]:
    """The share of ``trials`` sets of ``n`` rounds whose 95 % interval covers the true ratio,
    per method. Unpaired, each variant gets its own round factors: independent samples.
    Both statistics have the same true value here: the log of a[i] / b[i] is normal about
    log(ratio), so its median is ``ratio`` too."""
    generator = torch.Generator().manual_seed(seed)
    covered = dict.fromkeys(METHODS, 0)
    for trial in range(trials):
        a, b = lognormal_rounds(n, ratio=ratio, drift=drift, noise=noise, generator=generator)
        if not paired:  # a fresh draw for b: no round shared
            b = lognormal_rounds(n, ratio=ratio, drift=drift, noise=noise, generator=generator)[1]
        intervals = ratio_intervals(a, b, paired=paired, statistic=statistic, resamples=resamples,
                                    seed=seed * 100_003 + trial)
        for method, ci in intervals.items():
            covered[method] += ci.covers(ratio)
    return {method: count / trials for method, count in covered.items()}
