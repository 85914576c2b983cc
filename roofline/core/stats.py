"""Robust statistics of timing samples: median, quartiles, and a distribution-free 95% CI of the median.

Timing samples are skewed (interrupts, clock ramps): the median with an order-statistic interval
(binomial, no normality assumed) is what the stopping rule and every report use.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

# Fewer samples than this and the order-statistic CI spans the whole sample: no claim of precision.
MIN_SAMPLES_FOR_CI = 6
# 1 / Φ⁻¹(3/4): the median absolute deviation of normal data is 0.6745 σ, so this many MADs estimate σ.
MAD_SCALE = 1.4826


def robust_sd(values: Sequence[float]) -> float:
    """``MAD_SCALE`` × the median absolute deviation from the median, in the values' unit: a standard deviation
    (σ, for normal data) that a few outliers do not move."""
    centre = statistics.median(values)
    return MAD_SCALE * statistics.median(abs(v - centre) for v in values)


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted values (numpy's default method)."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    position = q * (len(sorted_values) - 1)
    lo = math.floor(position)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = position - lo
    return sorted_values[lo] * (1 - frac) + sorted_values[hi] * frac


def median_ci95(sorted_values: Sequence[float]) -> tuple[float, float]:
    """95% confidence interval of the median from order statistics (normal approximation to the binomial).

    The ranks are ``n/2 ∓ 1.96·√n/2``; below ``MIN_SAMPLES_FOR_CI`` samples the whole range is returned.
    """
    n = len(sorted_values)
    if n == 0:
        raise ValueError("CI of no values")
    if n < MIN_SAMPLES_FOR_CI:
        return sorted_values[0], sorted_values[-1]
    half_width = 1.96 * math.sqrt(n) / 2
    lo_rank = max(0, math.floor(n / 2 - half_width))
    hi_rank = min(n - 1, math.ceil(n / 2 + half_width) - 1)
    return sorted_values[lo_rank], sorted_values[hi_rank]


def rel_median_ci95_half_width(samples_s: Sequence[float]) -> float:
    """Half the width of the median's 95% CI over the median (what ``Stats.rel_ci95_half_width`` reports),
    straight from samples: the fit's per-point spread and the significance test's noise."""
    ordered = sorted(float(s) for s in samples_s)
    lo, hi = median_ci95(ordered)
    return (hi - lo) / 2 / quantile(ordered, 0.5)


@dataclass(frozen=True)
class Stats:
    """Summary of per-launch times, in seconds."""

    n: int
    median_s: float
    q1_s: float
    q3_s: float
    min_s: float
    mean_s: float
    ci95_s: tuple[float, float]

    def __post_init__(self) -> None:
        if self.n <= 0:
            raise ValueError("stats need at least one sample")
        values = (self.median_s, self.q1_s, self.q3_s, self.min_s, self.mean_s, *self.ci95_s)
        if not all(math.isfinite(v) and v > 0 for v in values):
            raise ValueError("stats must be finite, positive times")

    @property
    def rel_ci95_half_width(self) -> float:
        """Half the CI's width over the median: the precision the stopping rule targets."""
        return (self.ci95_s[1] - self.ci95_s[0]) / 2 / self.median_s

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ci95_s"] = list(self.ci95_s)
        return d


def summarize(samples_s: Sequence[float]) -> Stats:
    """Stats of per-launch times; every sample must be a finite positive number of seconds."""
    if not samples_s:
        raise ValueError("no samples to summarise")
    if not all(math.isfinite(s) and s > 0 for s in samples_s):
        raise ValueError("samples must be finite and positive")
    ordered = sorted(samples_s)
    return Stats(
        n=len(ordered),
        median_s=quantile(ordered, 0.5),
        q1_s=quantile(ordered, 0.25),
        q3_s=quantile(ordered, 0.75),
        min_s=ordered[0],
        mean_s=sum(ordered) / len(ordered),
        ci95_s=median_ci95(ordered),
    )
