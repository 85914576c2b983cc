import pytest

from microbench.timers import CpuTimer, launches_for


def test_launches_fill_the_sample_in_whole_rotation_cycles():
    assert launches_for(1e-3, 2e-3, 1) == 2
    assert launches_for(1e-5, 2e-3, 8) == 200
    assert launches_for(1e-5, 2e-3, 8) % 8 == 0
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
