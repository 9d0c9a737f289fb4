"""Confidence intervals for means over a few seeds: Student's t without scipy.

The benchmarks report a mean over seeds, or a mean paired difference between two recipes, with its two-sided
95 % t-interval (the seeds' values are treated as independent draws).
"""

from __future__ import annotations

import math
import statistics

# Two-sided 95 % critical values of Student's t for 1..30 degrees of freedom (scipy.stats.t.ppf(0.975, df)).
T_975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t_critical_975(df: int) -> float:
    """The 97.5 % quantile of Student's t with ``df`` degrees of freedom (the table up to 30, then the
    Cornish-Fisher expansion around the normal quantile, within 1e-3 of the exact value)."""
    if df < 1:
        raise ValueError(f"a t interval needs at least 1 degree of freedom, got {df}")
    if df <= len(T_975):
        return T_975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean and its two-sided 95 % t-interval (NaN bounds for fewer than 2 values)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = t_critical_975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


__all__ = ["T_975", "mean_interval", "t_critical_975"]
