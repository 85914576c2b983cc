"""The overhead fit, the comparison, and repeats combined step by step: pure Python on recorded times."""

from __future__ import annotations

import numpy as np
import pytest

from microbench.serving.engine.timing import EngineRun, RequestTiming, mean_steps, step_durations
from microbench.serving.validate_compare import CalibrationRun, compare_runs, fit_overhead, nnls, run_summary
from roofline.serving.profile_doc import EngineOverhead
from roofline.serving.workload import Request

TRUE = EngineOverhead(per_step_s=3e-3, per_sequence_s=2e-4, per_cached_token_s=5e-7, per_prefill_step_s=4e-3)


def calibration_run(batch: int, steps: int, overhead: EngineOverhead, noise=lambda i: 0.0) -> CalibrationRun:
    """A static-like run: a prefill step, then decodes whose cache grows by ``batch`` tokens a step."""
    sequences = (batch,) * steps
    cached = tuple(float(batch * (8 + i)) for i in range(steps))
    prefill = (1.0,) + (0.0,) * (steps - 1)
    kernel = tuple(1e-3 + 1e-4 * batch for _ in range(steps))
    measured = tuple(k + overhead.step_s(batch, c, bool(p)) + noise(i)
                     for i, (k, c, p) in enumerate(zip(kernel, cached, prefill, strict=True)))
    terms = {"per_step_s": (1.0,) * steps, "per_sequence_s": tuple(map(float, sequences)),
             "per_cached_token_s": cached, "per_prefill_step_s": prefill}
    return CalibrationRun(measured, kernel, terms)


def test_fit_recovers_every_term_step_by_step():
    runs = [calibration_run(4, 30, TRUE), calibration_run(8, 20, TRUE)]
    fit = fit_overhead(runs, "test")
    for name in EngineOverhead.TERMS:
        assert getattr(fit, name) == pytest.approx(getattr(TRUE, name), rel=1e-6), name
    assert fit.fitted_on == "test"


def test_fit_is_steady_against_step_noise():
    """Noise of ±20% of a step on every step moves the fitted total of a run by little: hundreds of rows."""
    def noise(i):
        return 0.2 * 5e-3 * (1 if i % 3 else -2) * ((i * 7919) % 5 - 2) / 2

    runs = [calibration_run(4, 60, TRUE, noise), calibration_run(8, 40, TRUE, noise)]
    fit = fit_overhead(runs, "noisy")
    workload = calibration_run(8, 120, TRUE)
    true_total = sum(workload.measured_s)
    predicted = sum(k + fit.step_s(int(s), c, bool(p)) for k, s, c, p in zip(
        workload.kernel_s, *(workload.terms[n] for n in EngineOverhead.TERMS[1:]), strict=True))
    assert predicted == pytest.approx(true_total, rel=0.03)


def test_fit_never_goes_negative():
    faster = EngineOverhead(per_step_s=0.0)
    runs = [calibration_run(4, 30, faster, lambda i: -1e-4), calibration_run(8, 20, faster, lambda i: -1e-4)]
    fit = fit_overhead(runs, "faster than the kernels")
    assert all(getattr(fit, name) == 0 for name in EngineOverhead.TERMS)
    assert list(nnls(np.array([[1.0, 1.0], [1.0, 2.0]]), np.array([2.0, 1.0]))) == pytest.approx([1.5, 0.0])


def test_fit_falls_back_to_totals_when_the_steps_do_not_align():
    aligned = calibration_run(4, 30, TRUE)
    # The engine stamped one step fewer than the simulator planned: only the run's total can be compared.
    shifted = CalibrationRun(aligned.measured_s[:-2] + (aligned.measured_s[-2] + aligned.measured_s[-1],),
                             aligned.kernel_s, aligned.terms)
    assert not shifted.aligned
    fit = fit_overhead([shifted], "totals")
    total = sum(k + fit.step_s(4, c, bool(p)) for k, c, p in zip(
        aligned.kernel_s, aligned.terms["per_cached_token_s"], aligned.terms["per_prefill_step_s"], strict=True))
    assert total == pytest.approx(sum(aligned.measured_s), rel=1e-6)


def timing(i, first, finish, out=3, first_step=-1, finish_step=-1, token_steps=(), token_times_s=()):
    return RequestTiming(Request(i, 0.0, 8, out), first, finish, token_times_s, first_step, finish_step, token_steps)


def test_summary_and_comparison():
    measured = [timing(0, 1.0, 3.0), timing(1, 1.0, 5.0)]
    predicted = [timing(0, 1.1, 3.3), timing(1, 1.1, 5.5)]
    summary = run_summary(measured)
    assert summary["total_s"] == 5.0 and summary["tokens_per_s"] == pytest.approx(6 / 5)
    assert summary["tpot_p50_s"] == pytest.approx(1.5)
    comparison = compare_runs(predicted, measured)
    assert comparison["total_s"]["rel_err"] == pytest.approx(0.1)
    assert comparison["ttft_p90_s"]["rel_err"] == pytest.approx(0.1)


def test_itl_is_compared_from_each_requests_token_times():
    # Measured: request 0's gaps 1, 1 and request 1's 0.5, 3.5; predicted: every gap 1.
    measured = [timing(0, 1.0, 3.0, token_times_s=(1.0, 2.0, 3.0)), timing(1, 1.0, 5.0, token_times_s=(1.0, 1.5, 5.0))]
    predicted = [timing(0, 1.0, 3.0, token_times_s=(1.0, 2.0, 3.0)), timing(1, 1.0, 3.0, token_times_s=(1.0, 2.0, 3.0))]
    summary = run_summary(measured)
    assert summary["itl_p50_s"] == pytest.approx(1.0)
    assert summary["itl_p99_s"] == pytest.approx(np.percentile([1.0, 1.0, 0.5, 3.5], 99))
    comparison = compare_runs(predicted, measured)
    assert comparison["itl_p50_s"]["rel_err"] == pytest.approx(0.0)
    assert comparison["itl_p99_s"]["rel_err"] == pytest.approx(1.0 / summary["itl_p99_s"] - 1)


def test_repeats_combined_step_by_step_retime_every_token():
    requests = [timing(0, 1.0, 3.0, 3, 0, 2, (0, 1, 2), (1.0, 2.0, 3.0))]
    a = engine_run((1.0, 2.0, 3.0), requests)
    b = engine_run((3.0, 4.0, 7.0), [timing(0, 3.0, 7.0, 3, 0, 2, (0, 1, 2), (3.0, 4.0, 7.0))])
    combined = mean_steps([a, b])
    assert combined.requests[0].token_times_s == pytest.approx((2.0, 3.0, 5.0))
    assert combined.requests[0].to_dict()["token_steps"] == [0, 1, 2]
    assert "token_times_s" not in combined.requests[0].to_dict()  # the document keeps the steps, not the times
    assert run_summary(combined.requests)["itl_p99_s"] == pytest.approx(np.percentile([1.0, 2.0], 99))


def engine_run(step_s, requests):
    return EngineRun("test", "static", "static:batch=2", tuple(requests), {}, tuple(step_s))


def test_repeats_combine_step_by_step():
    requests = [timing(0, 0, 0, 2, 0, 1), timing(1, 0, 0, 3, 0, 2)]
    a = engine_run((1.0, 2.0, 3.0), requests)  # steps of 1, 1, 1
    b = engine_run((2.0, 2.5, 3.5), requests)  # steps of 2, 0.5, 1
    combined = mean_steps([a, b])
    assert combined.step_s == pytest.approx((1.5, 2.25, 3.25))
    assert step_durations(combined) == pytest.approx((1.5, 0.75, 1.0))
    assert [r.finish_s for r in combined.requests] == pytest.approx([2.25, 3.25])
    assert combined.settings["combined"] == "mean of each step" and combined.settings["repeats"] == 2
    # Different schedules cannot be combined step by step: the run of median total time stands for them.
    runs = [engine_run((1.0, 2.0), [timing(0, 1.0, 2.0, 2, 0, 1)]),
            engine_run((1.0, 4.0), [timing(0, 1.0, 4.0, 2, 0, 1)]),
            engine_run((3.0,), [timing(0, 3.0, 3.0, 1, 0, 0)])]
    median = mean_steps(runs)
    assert median.settings["combined"] == "median run" and median.total_s == 3.0


def recording_job(order: list, key, pieces: int, ordered: bool = False):
    """A validate job whose n-th piece "lasts" n + 1 s and appends (key, n) to ``order`` when it runs."""
    from microbench.serving.validate_run import Job

    def run_piece(i):
        order.append((key, i))
        return float(i + 1)

    def assemble(parts):
        stamps = [sum(parts[:n + 1]) for n in range(len(parts))]
        return engine_run(tuple(stamps), [timing(0, stamps[0], stamps[-1], len(parts), 0, len(parts) - 1)])

    return Job(key, pieces, run_piece, assemble, ordered)


def test_rounds_shuffle_the_pieces_of_every_job_and_put_each_run_back_together():
    from microbench.serving.validate_run import interleaved_runs

    order = []
    jobs = [recording_job(order, ("static", "w", 4), 3), recording_job(order, ("static", "c", 8), 2),
            recording_job(order, ("continuous", "w", 8), 1)]
    best = interleaved_runs(jobs, 6, lambda message: None, seed=0,
                            profile=(4, lambda i: order.append((("profile", "kernel", i), i))))
    rounds = [order[i:i + 10] for i in range(0, 60, 10)]
    assert len(order) == 60  # every round: the 6 engine pieces and the profile's 4 kernels, each once
    assert all(sorted(r) == sorted([(j.key, i) for j in jobs for i in range(j.pieces)]
                                   + [(("profile", "kernel", i), i) for i in range(4)]) for r in rounds)
    # the kernels are shuffled among the engine's pieces, not measured in one block
    assert any(max(n for n, (key, _) in enumerate(r) if key[0] == "profile")
               - min(n for n, (key, _) in enumerate(r) if key[0] == "profile") > 3 for r in rounds)
    assert len({tuple(r) for r in rounds}) > 1  # a new order each round
    first = {r[0][0] for r in rounds}
    assert len(first) > 1  # no job always starts the round (a fixed rotation would keep its neighbours)
    # Put back together in piece order whatever order the pieces ran in: durations 1, 2, 3.
    assert best[("static", "w", 4)].step_s == pytest.approx((1.0, 3.0, 6.0))
    assert best[("static", "w", 4)].settings["repeats"] == 6


def test_an_ordered_job_runs_its_pieces_in_order_wherever_the_shuffle_puts_them():
    """A continuous run's segments continue one manager run: the n-th slot of the job in a round runs piece n."""
    from microbench.serving.validate_run import interleaved_runs

    order = []
    jobs = [recording_job(order, ("static", "w", 4), 3), recording_job(order, ("continuous", "w", 8), 4, ordered=True)]
    interleaved_runs(jobs, 8, lambda message: None, seed=0)
    rounds = [order[i:i + 7] for i in range(0, len(order), 7)]
    continuous = [[i for key, i in r if key[0] == "continuous"] for r in rounds]
    assert all(pieces == [0, 1, 2, 3] for pieces in continuous)
    static = [[i for key, i in r if key[0] == "static"] for r in rounds]
    assert any(pieces != [0, 1, 2] for pieces in static)  # the unordered job's pieces are still shuffled
    assert len({tuple(key[0] for key, _ in r) for r in rounds}) > 1  # and the two jobs' pieces mixed anew


def test_calibration_batches_never_exceed_the_calibration_requests():
    from microbench.serving.validate_run import calibration_sizes

    assert calibration_sizes(8, 16) == [4, 8]
    assert calibration_sizes(64, 32) == [16, 32]  # 64 slots for 32 requests would run like 32
    assert calibration_sizes(1, 16) == [1]


def test_only_a_burst_is_cut_into_pieces():
    """Static batches and continuous segments are shuffled apart only when every request is there at t=0: a run
    with arrivals over time follows the wall clock, which does not stop between pieces, so it runs in one."""
    from microbench.serving.engine import transformers_engine
    from microbench.serving.validate_options import ValidateConfig as ValidateSetup
    from microbench.serving.validate_run import engine_jobs
    from roofline.serving.workload import make_workload

    setup = ValidateSetup(static_batch=4, max_batch=4, budget_tokens=64)
    for arrivals, split in (("burst", True), ("poisson:50", False)):
        workload = make_workload(32, arrivals, "fixed:8", "uniform:4:40", 0)
        jobs = engine_jobs(None, transformers_engine, None, setup, {"workload": workload, "calibration": workload},
                           {"static": [4], "continuous": [4]}, "cpu", "wall", 64)
        assert {job.key[0] for job in jobs} == {"static", "continuous"}
        assert all((job.pieces > 1) == split for job in jobs), [(job.key, job.pieces) for job in jobs]
