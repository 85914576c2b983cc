import pytest

from microbench.timing.adaptive import FLOOR_SAMPLES, StoppingRule, measure, warm_up
from tests.conftest import SeededClock


def test_converges_on_quiet_samples_after_min_samples():
    clock = SeededClock(seed=1, median_s=1e-3, spread=0.001)
    rule = StoppingRule(target_rel_ci=0.01, budget_s=100, min_samples=10, warmup_s=0.0, min_warmup_samples=2)
    result = measure(clock.sample, rule, clock)
    assert result.stop_reason == "converged"
    assert len(result.samples_s) == 10
    assert len(result.warmup_samples_s) >= 2
    assert clock.calls == len(result.samples_s) + len(result.warmup_samples_s)


def test_noisy_samples_need_more_samples_than_quiet_ones():
    quiet, noisy = SeededClock(2, spread=0.005), SeededClock(2, spread=0.1)
    rule = StoppingRule(target_rel_ci=0.01, budget_s=1e6, min_samples=10, max_samples=100000, warmup_s=0.0)
    n_quiet = len(measure(quiet.sample, rule, quiet).samples_s)
    n_noisy = len(measure(noisy.sample, rule, noisy).samples_s)
    assert n_noisy > 5 * n_quiet


def test_budget_stops_noisy_sampling():
    clock = SeededClock(seed=3, median_s=1e-3, spread=0.5)
    rule = StoppingRule(target_rel_ci=0.001, budget_s=0.05, min_samples=10, max_samples=100000, warmup_s=0.0)
    result = measure(clock.sample, rule, clock)
    assert result.stop_reason == "budget"
    # The budget is wall time of the sampling phase: about 50 samples of ~1 ms.
    assert 30 <= len(result.samples_s) <= 80


def test_budget_never_stops_below_the_floor():
    clock = SeededClock(seed=4, median_s=10.0, spread=0.3)  # each sample is longer than the budget
    rule = StoppingRule(target_rel_ci=0.01, budget_s=1.0, min_samples=10, warmup_s=0.0)
    result = measure(clock.sample, rule, clock)
    assert result.stop_reason == "budget"
    assert len(result.samples_s) == FLOOR_SAMPLES


def test_max_samples_caps():
    clock = SeededClock(seed=5, spread=0.5)
    rule = StoppingRule(target_rel_ci=0.0001, budget_s=1e9, min_samples=10, max_samples=25, warmup_s=0.0)
    result = measure(clock.sample, rule, clock)
    assert result.stop_reason == "max_samples"
    assert len(result.samples_s) == 25


def test_warm_up_waits_for_settled_samples():
    # A clock ramp: the first samples are slow (clocks ramping up), then they settle.
    values = iter([5.0, 3.0, 2.0, 1.5, 1.0, 1.0, 1.0, 1.0])
    clock = SeededClock()

    def sample():
        value = next(values)
        clock.t += value
        return [value]

    rule = StoppingRule(warmup_s=10.0, min_warmup_samples=2)  # at least 10 s, then wait to settle
    seen = warm_up(sample, rule, clock)
    assert seen == [5.0, 3.0, 2.0, 1.5, 1.0, 1.0]


def test_warm_up_gives_up_after_four_times_its_time():
    clock = SeededClock()
    values = iter([1.0, 2.0] * 100)

    def sample():
        value = next(values)
        clock.t += value
        return [value]

    seen = warm_up(sample, StoppingRule(warmup_s=3.0), clock)
    assert sum(seen) >= 12.0 and len(seen) < 12


@pytest.mark.parametrize("kwargs", [{"target_rel_ci": 0}, {"budget_s": 0}, {"min_samples": 3},
                                    {"min_samples": 20, "max_samples": 10}])
def test_rule_validation(kwargs):
    with pytest.raises(ValueError):
        StoppingRule(**kwargs)
