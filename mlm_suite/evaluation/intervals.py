"""Confidence intervals for means over a few seeds: the benchmarks report a mean over seeds, or a mean paired
difference between two recipes, with its two-sided 95 % Student's t-interval, the seeds' values being treated
as independent draws. See docs/metrics.md#intervals-over-seeds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from scipy import stats


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean and its two-sided 95 % t-interval (NaN bounds for fewer than 2 values)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    # t.ppf rather than t.interval: identical values give a zero-width interval, not NaN (scale 0).
    half = float(stats.t.ppf(0.975, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half
