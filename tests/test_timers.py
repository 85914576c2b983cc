import pytest
from hypothesis import given
from hypothesis import strategies as st

from microbench.timing.timers import MAX_LAUNCHES_PER_SAMPLE, CpuTimer, launches_for


def test_launches_fill_the_sample_in_whole_rotation_cycles():
    assert launches_for(1e-3, 2e-3, 1) == 2
    assert launches_for(1e-5, 2e-3, 8) == 200
    assert launches_for(1e-5, 2e-3, 7) == 203  # 200 wanted, rounded up to whole cycles of 7
    assert launches_for(1.0, 2e-3, 3) == 3  # never fewer than one cycle
    assert launches_for(1e-12, 1.0, 7) <= 4096


def test_cpu_timer_rotates_and_divides_by_launches():
    ticks = iter(range(0, 10**9, 1000))  # every clock read advances 1 µs
    seen = []
    timer = CpuTimer(seen.append, copies=3, clock_ns=lambda: next(ticks))
    timer.launches = 6
    samples = timer.sample()
    assert seen == [0, 1, 2, 0, 1, 2]
    assert samples == [pytest.approx(1e-6 / 6)]
    timer.sample()
    assert seen[6:] == [0, 1, 2, 0, 1, 2]  # the index keeps advancing across samples


@given(single_s=st.floats(1e-9, 10.0), min_sample_s=st.floats(1e-6, 1.0), copies=st.integers(1, 1024))
def test_a_sample_is_whole_cycles_long_enough_or_capped(single_s, min_sample_s, copies):
    launches = launches_for(single_s, min_sample_s, copies)
    assert launches % copies == 0 and launches >= copies
    capped = launches + copies > max(MAX_LAUNCHES_PER_SAMPLE, copies)
    assert launches * single_s >= min_sample_s * (1 - 1e-9) or capped
    assert (launches - copies) * single_s < min_sample_s or launches == copies  # no whole cycle too many


def test_a_cpu_sample_is_whole_cycles_unless_a_cycle_is_too_long():
    """A cheap cycle stays whole (every sample reads every copy: exchangeable samples); a slow compute-bound
    launch over 32 copies is one launch a sample (whole cycles made it 32): cold weights come from the rotation
    index running on across samples."""
    assert launches_for(0.2, 2e-3, 32, whole_cycles=False) == 1
    assert launches_for(1e-4, 2e-3, 32, whole_cycles=False) == 20
    assert launches_for(1e-12, 1.0, 7, whole_cycles=False) == MAX_LAUNCHES_PER_SAMPLE
    ticks = iter(range(0, 10**12, 200_000_000))  # every clock read advances 0.2 s: one launch is 0.2 s
    seen = []
    timer = CpuTimer(seen.append, copies=32, clock_ns=lambda: next(ticks))
    timer.prepare()
    assert timer.launches == 1
    timer.sample()
    timer.sample()
    assert seen == [0, 1, 2]  # the estimate's launch, then each sample reads the next copy
    ticks = iter(range(0, 10**12, 500_000))  # one launch 0.5 ms: a cycle of 32 is 16 ms, kept whole
    cheap = CpuTimer(lambda i: None, copies=32, clock_ns=lambda: next(ticks))
    cheap.prepare()
    assert cheap.launches == 32
