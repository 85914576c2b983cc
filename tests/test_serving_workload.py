"""Workload generation and traces: seeded, lengths at least one token and within caps, one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from roofline.serving.workload import Request, WorkloadError, load_trace, make_workload, with_arrivals


def test_the_same_seed_gives_the_same_workload_and_another_seed_another():
    a = make_workload(200, "poisson:5", "uniform:10:20", "exp:50:100", seed=1)
    assert a == make_workload(200, "poisson:5", "uniform:10:20", "exp:50:100", seed=1)
    assert a != make_workload(200, "poisson:5", "uniform:10:20", "exp:50:100", seed=2)


def test_lengths_respect_their_distribution_and_caps():
    requests = make_workload(4000, "burst", "lognormal:100:0.5:300", "exp:128:512", seed=0)
    outputs = np.array([r.output_tokens for r in requests])
    prompts = np.array([r.prompt_tokens for r in requests])
    assert outputs.min() >= 1 and outputs.max() == 512
    assert 117 < outputs.mean() < 135  # exp(128) capped at 512: mean 128·(1 − e^−4) ≈ 125.7, σ/√n ≈ 2
    assert prompts.max() <= 300 and 90 < np.median(prompts) < 110
    assert all(r.arrival_s == 0.0 for r in requests)


def test_poisson_gaps_have_the_rate_asked_for():
    times = np.array([r.arrival_s for r in make_workload(5000, "poisson:20", "fixed:8", "fixed:4", seed=0)])
    assert np.all(np.diff(times) >= 0)
    assert np.mean(np.diff(times)) == pytest.approx(1 / 20, rel=0.05)


def test_a_new_rate_keeps_every_request_length():
    base = make_workload(50, "burst", "uniform:1:100", "uniform:1:100", seed=4)
    moved = with_arrivals(base, "poisson:3", seed=4)
    assert [(r.prompt_tokens, r.output_tokens) for r in moved] == [(r.prompt_tokens, r.output_tokens) for r in base]
    assert moved[-1].arrival_s > 0


@pytest.mark.parametrize("args", [(0, "burst", "fixed:1", "fixed:1"), (5, "poisson", "fixed:1", "fixed:1"),
                                  (5, "burst", "gauss:3", "fixed:1"), (5, "burst", "uniform:5:2", "fixed:1"),
                                  (5, "burst", "fixed:1", "exp:-3"), (5, "steady:3", "fixed:1", "fixed:1")])
def test_bad_specs_are_refused(args):
    with pytest.raises(WorkloadError):
        make_workload(*args)


def test_a_trace_is_read_sorted_by_arrival(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,extra\n2.5,10,3,x\n0.5,20,1,y\n")
    assert load_trace(path) == [Request(0, 0.5, 20, 1), Request(1, 2.5, 10, 3)]


@pytest.mark.parametrize("text, message", [("arrival_s,prompt_tokens\n1,2\n", "lacks column"),
                                           ("arrival_s,prompt_tokens,output_tokens\n1,2,x\n", "line 2"),
                                           ("arrival_s,prompt_tokens,output_tokens\n1,0,4\n", "prompt_tokens"),
                                           ("arrival_s,prompt_tokens,output_tokens\n", "no requests")])
def test_bad_traces_name_the_problem(tmp_path, text, message):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    with pytest.raises(WorkloadError, match=message):
        load_trace(path)


def test_a_trace_longer_than_the_request_limit_is_refused_while_read(tmp_path, monkeypatch):
    import roofline.serving.workload as workload

    monkeypatch.setattr(workload, "MAX_REQUESTS", 3)
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "0,8,8\n" * 4)
    with pytest.raises(WorkloadError, match="more than 3 requests"):
        load_trace(trace)


def test_a_workload_bigger_than_the_free_memory_is_refused_before_it_runs(monkeypatch):
    import roofline.serving.workload as workload

    requests = make_workload(10, "burst", "fixed:8", "fixed:100")
    monkeypatch.setattr(workload, "available_memory_bytes", lambda: 10 * 1024 + 999 * 8)
    with pytest.raises(WorkloadError, match=r"10 requests of 1,000 output tokens under 1 policy need at least"):
        workload.check_fits_in_memory(requests, runs=1)
    workload.check_fits_in_memory(requests[:9], runs=1)  # 9 KiB + 900 tokens' times fit
