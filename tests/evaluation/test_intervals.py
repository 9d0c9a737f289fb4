"""mlm_suite.evaluation.intervals: the benchmarks' 95 % t-intervals over seeds."""

import math
import statistics

import pytest
from scipy import stats

from mlm_suite.evaluation.intervals import mean_interval


def test_t_interval():
    values = [0.01, 0.03, -0.02, 0.04, 0.02]
    mean, low, high = mean_interval(values)
    half = 2.776445 * statistics.stdev(values) / math.sqrt(5)  # t quantile 0.975 at 4 degrees of freedom
    assert mean == pytest.approx(0.016) and low == pytest.approx(mean - half) and high == pytest.approx(mean + half)
    assert (low, high) == pytest.approx(stats.t.interval(0.95, 4, loc=mean, scale=stats.sem(values)))


def test_degenerate_intervals():
    mean, low, high = mean_interval([0.1])
    assert mean == 0.1 and math.isnan(low) and math.isnan(high)
    assert mean_interval([0.5, 0.5, 0.5]) == (0.5, 0.5, 0.5)  # no spread: zero width, not NaN
