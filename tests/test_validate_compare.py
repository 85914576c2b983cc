"""The overhead fit, the comparison, and repeats combined step by step: pure Python on recorded times."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from microbench.engine.timing import EngineRun, RequestTiming, fastest_steps
from microbench.validate_compare import compare_runs, fit_overhead, run_summary


@dataclass(frozen=True)
class FakeStep:
    sequences: int


@dataclass(frozen=True)
class FakeRun:
    steps: tuple
    makespan_s: float


def kernel_only(steps: int, batch: int, kernel_s: float) -> FakeRun:
    return FakeRun(tuple(FakeStep(batch) for _ in range(steps)), kernel_s)


def test_fit_recovers_per_step_and_per_sequence_costs():
    per_step, per_sequence = 3e-3, 2e-4
    runs = [kernel_only(100, 2, 0.1), kernel_only(40, 8, 0.2)]
    measured = [r.makespan_s + per_step * len(r.steps) + per_sequence * sum(s.sequences for s in r.steps)
                for r in runs]
    fit = fit_overhead(list(zip(measured, runs, strict=True)), "test")
    assert fit.per_step_s == pytest.approx(per_step) and fit.per_sequence_s == pytest.approx(per_sequence)
    assert fit.fitted_on == "test"


def test_fit_never_goes_negative():
    runs = [kernel_only(100, 2, 0.1), kernel_only(40, 8, 0.2)]
    # A per-sequence cost that would have to be negative: the fit puts it at zero and refits the step term.
    fit = fit_overhead([(0.1 + 0.5, runs[0]), (0.2 + 0.1, runs[1])], "test")
    assert fit.per_sequence_s >= 0 and fit.per_step_s >= 0
    assert fit_overhead([(0.05, runs[0])], "faster than the kernels").per_step_s == 0


def timing(i, first, finish, out=3, first_step=-1, finish_step=-1):
    return RequestTiming(i, 0.0, first, finish, 8, out, first_step, finish_step)


def test_summary_and_comparison():
    measured = [timing(0, 1.0, 3.0), timing(1, 1.0, 5.0)]
    predicted = [timing(0, 1.1, 3.3), timing(1, 1.1, 5.5)]
    summary = run_summary(measured)
    assert summary["total_s"] == 5.0 and summary["tokens_per_s"] == pytest.approx(6 / 5)
    assert summary["tpot_p50_s"] == pytest.approx(1.5)
    comparison = compare_runs(predicted, measured)
    assert comparison["total_s"]["rel_err"] == pytest.approx(0.1)
    assert comparison["ttft_p90_s"]["rel_err"] == pytest.approx(0.1)


def engine_run(step_s, requests):
    return EngineRun("test", "static", "static:batch=2", tuple(requests), {}, tuple(step_s))


def test_repeats_combine_step_by_step():
    requests = [timing(0, 0, 0, 2, 0, 1), timing(1, 0, 0, 3, 0, 2)]
    a = engine_run((1.0, 2.0, 3.0), requests)  # steps of 1, 1, 1
    b = engine_run((2.0, 2.5, 3.5), requests)  # steps of 2, 0.5, 1: slower overall, one fast step
    combined = fastest_steps([a, b])
    assert combined.step_s == (1.0, 1.5, 2.5)
    assert [r.finish_s for r in combined.requests] == [1.5, 2.5]
    assert combined.settings["combined"] == "fastest of each step"
    other = engine_run((1.0, 2.0), [timing(0, 0, 0, 2, 0, 1), timing(1, 0, 0, 2, 0, 1)])
    assert fastest_steps([other, b]).settings["combined"] == "fastest run"  # different schedules


def test_calibration_batches_never_exceed_the_calibration_requests():
    from microbench.validate_run import calibration_sizes

    assert calibration_sizes(8, 16) == [4, 8]
    assert calibration_sizes(64, 32) == [16, 32]  # 64 slots for 32 requests would run like 32
    assert calibration_sizes(1, 16) == [1]
