"""Summary statistics of timing samples: median and interquartile range.

Pure Python so that the site build and the record checks need no torch.

>>> s = summarize([4.0, 1.0, 3.0, 2.0, 100.0], unit="us")
>>> s.median, s.q1, s.q3, s.n
(3.0, 2.0, 4.0, 5)
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence

from examples.lab.records import Metric


# --8<-- [start:summarize]
def summarize(samples: Sequence[float], *, unit: str, method: str = "computed") -> Metric:
    """Median, quartiles and extremes of ``samples``.

    The median resists the odd slow repetition (a page fault, a context switch);
    the interquartile range says how much a typical repetition moves.
    """
    if not samples:
        raise ValueError("no samples to summarize")
    values = sorted(float(x) for x in samples)
    if len(values) == 1:
        q1 = q3 = values[0]
    else:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return Metric(
        unit=unit,
        median=statistics.median(values),
        q1=q1,
        q3=q3,
        min=values[0],
        max=values[-1],
        n=len(values),
        method=method,
    )


# --8<-- [end:summarize]
