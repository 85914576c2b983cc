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
    # By hand from the measured model: 1,000 tokens at most 256 a step are at least 4 steps; one run holds
    # 64 MB + 10 x 493 + 4 x 162 + 1,000 x 48.6 bytes = 64,054,178; a second keeps 10 x 491 + 4 x 180 + 1,000 x 16.8.
    one = 64e6 + 10 * 493 + 4 * 162 + 1000 * 48.6
    assert workload.estimated_bytes(10, 1000, 4, runs=1) == pytest.approx(one)
    assert workload.estimated_bytes(10, 1000, 8, runs=2) == pytest.approx(one + 10 * 491 + 4 * 180 + 1000 * 16.8)
    monkeypatch.setattr(workload, "available_memory_bytes", lambda: one - 1)
    with pytest.raises(WorkloadError, match=r"10 requests of 1,000 output tokens under 1 policy need at least "
                                            r"0.1 GB \(measured: 493 bytes a request and 48.6 an output token\)"):
        workload.check_fits_in_memory(requests, runs=1, tokens_per_step=256)
    monkeypatch.setattr(workload, "available_memory_bytes", lambda: one)
    workload.check_fits_in_memory(requests, runs=1, tokens_per_step=256)


@pytest.mark.slow  # a million requests drawn: ~7 s
def test_a_million_requests_the_memory_cannot_hold_is_refused_before_anything_is_simulated(monkeypatch):
    """simulate --requests 1000000 --arrivals poisson:200 took 7.3 GB and 204 s with no word (the old estimate
    said ~2 GB); the measured model says at least 6 GB before the first step."""
    import roofline.serving.workload as workload

    requests = make_workload(1_000_000, "poisson:200", "fixed:512", "exp:128:512")
    tokens = sum(r.output_tokens for r in requests)
    needed = workload.estimated_bytes(len(requests), tokens, -(-tokens // 256), runs=1)
    assert 6e9 < needed < 7.3e9
    monkeypatch.setattr(workload, "available_memory_bytes", lambda: 4e9)
    with pytest.raises(WorkloadError, match=r"1,000,000 requests of [\d,]+ output tokens under 1 policy need at "
                                            r"least 6\.\d GB .* and 4\.0 GB is available"):
        workload.check_fits_in_memory(requests, runs=1, tokens_per_step=256)


# --- the arrival and length registries -----------------------------------------------------------------------

GAMMA_SAMPLE = 200_000


def _gaps(spec: str, seed: int = 7) -> np.ndarray:
    from roofline.serving.workload import arrival_times

    return np.diff([0.0, *arrival_times(spec, GAMMA_SAMPLE, np.random.default_rng(seed))])


@pytest.mark.parametrize("rate, cv", [(4.0, 0.5), (4.0, 1.0), (50.0, 2.0), (0.5, 4.0)])
def test_gamma_arrivals_come_at_the_rate_and_spread_asked_for(rate, cv):
    """A contract on a large seeded sample: the mean gap is 1 / RATE and the gaps' coefficient of variation CV.
    Tolerances are five standard errors of each estimate for n gamma gaps of shape k = 1/CV² (a seeded draw
    outside them is a wrong draw, not bad luck: p < 1e-6): the mean's relative error CV/√n; the CV's, the mean's
    plus the standard deviation's, √((κ − 1)/4n) with the gamma's kurtosis κ = 3 + 6/k."""
    gaps = _gaps(f"gamma:{rate:g}:{cv:g}")
    mean_tolerance = 5 * cv / np.sqrt(GAMMA_SAMPLE)
    kurtosis = 3 + 6 * cv**2
    cv_tolerance = mean_tolerance + 5 * np.sqrt((kurtosis - 1) / (4 * GAMMA_SAMPLE))
    assert 1 / gaps.mean() == pytest.approx(rate, rel=mean_tolerance)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=cv_tolerance)


def test_gamma_arrivals_of_cv_1_have_poissons_spread():
    """CV 1 is a gamma of shape 1, the exponential: its gaps' distribution is Poisson arrivals' own.  Checked as
    Kolmogorov-Smirnov distances from the exponential's CDF, each below the 0.1% critical value 1.95/√n."""
    rate = 8.0
    critical = 1.95 / np.sqrt(GAMMA_SAMPLE)
    for spec in (f"gamma:{rate:g}:1", f"poisson:{rate:g}"):
        gaps = np.sort(_gaps(spec))
        expected = 1 - np.exp(-rate * gaps)
        empirical_above = np.arange(1, GAMMA_SAMPLE + 1) / GAMMA_SAMPLE
        distance = max(np.max(empirical_above - expected), np.max(expected - empirical_above + 1 / GAMMA_SAMPLE))
        assert distance < critical, spec


def test_gamma_arrivals_are_seeded_and_keep_every_length():
    a = make_workload(300, "gamma:5:3", "uniform:10:20", "exp:50:100", seed=1)
    assert a == make_workload(300, "gamma:5:3", "uniform:10:20", "exp:50:100", seed=1)
    assert a != make_workload(300, "gamma:5:3", "uniform:10:20", "exp:50:100", seed=2)
    poisson = make_workload(300, "poisson:5", "uniform:10:20", "exp:50:100", seed=1)
    assert [(r.prompt_tokens, r.output_tokens) for r in a] == [(r.prompt_tokens, r.output_tokens) for r in poisson]
    assert with_arrivals(a, "gamma:9:2", seed=1) == with_arrivals(a, "gamma:9:2", seed=1)


@pytest.mark.parametrize("spec, words", [("gamma:4", "wrong number of fields"), ("gamma:4:0", "positive"),
                                         ("gamma:4:11", "CV must be from 0.01 to 10"),
                                         ("gamma:4:1e-300", "CV must be from 0.01 to 10"),
                                         ("gamma:nan:1", "positive"), ("burst:3", "burst takes no fields"),
                                         ("steady:3", "arrivals are burst or poisson:RATE or gamma:RATE:CV")])
def test_bad_arrival_specs_are_one_line_naming_the_spec(spec, words):
    with pytest.raises(WorkloadError, match=words) as caught:
        make_workload(5, spec, "fixed:1", "fixed:1")
    assert spec in str(caught.value) and "\n" not in str(caught.value)


def test_the_options_help_and_the_schemas_read_the_registries():
    """Every arrival process and length distribution of the registries is in --arrivals', --prompt's and
    validate's --arrivals' help and in the simulation and validation documents' schemas."""
    from microbench.serving.validate_options import FLAGS as VALIDATE_FLAGS
    from roofline.serving.schemas.simulation import Workload
    from roofline.serving.schemas.validation import ValidateSettings
    from roofline.serving.simulate_config import FLAGS
    from roofline.serving.workload import ARRIVALS, LENGTHS

    for process in ARRIVALS.values():
        for text in (FLAGS["arrivals"].help, VALIDATE_FLAGS["arrivals"].help, Workload.registry()["arrivals"].doc,
                     ValidateSettings.registry()["arrivals"].doc):
            assert process.SYNTAX in str(text), (process.SYNTAX, text)
    for kind, shape in LENGTHS.items():
        syntax = shape.SYNTAX or kind  # a preset is typed by its name
        for text in (FLAGS["prompt"].help, Workload.registry()["prompt"].doc,
                     ValidateSettings.registry()["prompt"].doc):
            assert syntax in str(text), (syntax, text)


def test_a_length_spec_is_drawn_and_described_by_its_registry_entry():
    from roofline.serving.workload import describe_lengths, parse_lengths

    assert parse_lengths("exp:128:512").describe("prompt") == describe_lengths("exp:128:512") \
        == "exponential, mean 128 tokens, capped at 512"
    assert describe_lengths("gauss:3") == "gauss:3"  # a spec this version does not know: as written
    with pytest.raises(WorkloadError, match="lengths are fixed:N, uniform:A:B, .* or sharegpt"):
        parse_lengths("gauss:3")
    with pytest.raises(WorkloadError, match="the preset sharegpt takes no fields"):
        parse_lengths("sharegpt:3")
