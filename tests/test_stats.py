import math
import random

import pytest

from roofline.core.stats import MIN_SAMPLES_FOR_CI, median_ci95, quantile, robust_sd, summarize


def test_quantile_matches_linear_interpolation():
    values = [1.0, 2.0, 3.0, 4.0]
    assert quantile(values, 0.5) == 2.5
    assert quantile(values, 0.25) == 1.75
    assert quantile(values, 0.0) == 1.0
    assert quantile(values, 1.0) == 4.0


def test_summary_of_known_samples():
    stats = summarize([3.0, 1.0, 2.0, 5.0, 4.0])
    assert stats.n == 5
    assert stats.median_s == 3.0
    assert stats.min_s == 1.0
    assert stats.mean_s == 3.0
    assert (stats.q1_s, stats.q3_s) == (2.0, 4.0)
    # Below MIN_SAMPLES_FOR_CI the interval is the whole range: no claim of precision.
    assert stats.ci95_s == (1.0, 5.0)


def test_ci_narrows_with_more_samples_and_covers_the_median():
    rng = random.Random(1)
    widths = []
    for n in (10, 100, 1000):
        values = sorted(rng.lognormvariate(0, 0.1) for _ in range(n))
        lo, hi = median_ci95(values)
        assert lo <= quantile(values, 0.5) <= hi
        widths.append(hi - lo)
    assert widths[0] > widths[1] > widths[2]


def test_ci_coverage_is_about_95_percent():
    rng = random.Random(7)
    true_median = 1.0  # lognormal(0, s) has median exp(0) = 1
    covered = 0
    trials = 400
    for _ in range(trials):
        values = sorted(rng.lognormvariate(0, 0.3) for _ in range(31))
        lo, hi = median_ci95(values)
        covered += lo <= true_median <= hi
    assert 0.90 <= covered / trials <= 0.995


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [1.0, -1.0], [0.0], [math.inf]])
def test_summary_rejects_bad_samples(bad):
    with pytest.raises(ValueError):
        summarize(bad)


def test_below_the_minimum_the_ci_is_the_whole_sample_and_the_minimum_is_the_smallest_that_covers():
    """With n samples, [min, max] misses the median with probability 2·0.5^n: 6 is the smallest n for 95%."""
    values = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0, 2.1]
    for n in range(1, MIN_SAMPLES_FOR_CI):
        assert median_ci95(values[:n]) == (values[0], values[n - 1])
    assert 1 - 2 * 0.5 ** MIN_SAMPLES_FOR_CI >= 0.95 > 1 - 2 * 0.5 ** (MIN_SAMPLES_FOR_CI - 1)
    lo, hi = median_ci95(values)
    assert values[0] < lo <= hi < values[-1]  # with enough samples the interval is inside the sample


def test_the_robust_sd_is_1_4826_mads_and_the_standard_deviation_of_normal_data():
    """By hand: the median of 1, 2, 3, 4, 100 is 3, their distances from it 2, 1, 0, 1, 97, whose median is 1: one
    MAD, 1.4826 robust sd, whatever the outlier.  A seeded normal sample of σ = 2.5: the robust sd is σ within 3%
    (the MAD of a normal distribution is 0.6745 σ)."""
    assert robust_sd([1.0, 2.0, 3.0, 4.0, 100.0]) == robust_sd([1.0, 2.0, 3.0, 4.0, 1e9]) == pytest.approx(1.4826)
    rng = random.Random(7)
    sample = [rng.gauss(10.0, 2.5) for _ in range(20_001)]
    assert robust_sd(sample) / 2.5 == pytest.approx(1.0, abs=0.03)
