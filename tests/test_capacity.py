"""The capacity search's contracts, checked by simulating again in the test: the capacity meets the SLO and a rate
3% above it does not; the unloaded bound is each request served alone (and no rate beats it); an SLO every request
misses alone is answered without replaying the workload; every simulation of the search reaches ``progress``; the
search's runs keep no step log."""

from __future__ import annotations

import numpy as np
import pytest
from serving_helpers import token_linear_profile

from roofline.fleet.replicas import FleetLayout, simulate_fleet
from roofline.serving.capacity import (
    ALONE_PROMPT_LENGTHS,
    RELATIVE_TOLERANCE,
    capacity_under,
    unloaded_latencies,
)
from roofline.serving.latency import latencies
from roofline.serving.metrics import Slo
from roofline.serving.simulate import simulate
from roofline.serving.workload import Request, make_workload, with_arrivals

# A step of T tokens takes 10 ms + 0.2 ms a token: a 50-token prompt's prefill alone is 20 ms, a decode 10.2 ms.
PROFILE = token_linear_profile(0.01, 0.0002)
POLICY = "continuous:max-batch=16"


def _run_at(workload):
    return simulate(PROFILE, workload, POLICY)


def _met(slo, requests, rate, seed=0):
    return slo.met(latencies(_run_at(with_arrivals(requests, f"poisson:{rate!r}", seed)).requests))


@pytest.mark.parametrize("slo_text", ["ttft_p90=0.05", "tpot_p99=0.03", "e2e_p99=1.5"])
def test_the_capacity_meets_its_slo_and_a_rate_3_percent_above_does_not(slo_text):
    """Simulated again here, at the capacity and 3% above it (the search stops when its bracket is within 2%)."""
    requests = make_workload(150, "burst", "fixed:50", "exp:20:60", seed=0)
    slo = Slo.parse(slo_text)
    found = capacity_under(requests, slo, _run_at)
    capacity = found.capacity_requests_per_s
    assert capacity is not None and not found.lower_bound, found.reason
    assert _met(slo, requests, capacity)
    assert not _met(slo, requests, capacity * (1 + RELATIVE_TOLERANCE + 0.01))
    missed_above = min(p["rate_requests_per_s"] for p in found.tried if not p["met"] and
                       p["rate_requests_per_s"] > capacity)
    assert missed_above <= capacity / (1 - RELATIVE_TOLERANCE)


def _each_alone(requests, run_at):
    """``latencies`` of every request simulated by itself, one simulation each."""
    alone = [run_at([Request(r.id, 0.0, r.prompt_tokens, r.output_tokens)]).requests[0] for r in requests]
    return latencies(alone)


def test_the_unloaded_bound_is_each_request_served_alone_from_one_simulation_per_prompt_length():
    requests = make_workload(40, "poisson:5", "uniform:20:24", "uniform:1:30", seed=3)  # 5 prompt lengths
    calls = []

    def run_at(workload):
        calls.append(workload)
        return simulate(PROFILE, workload, "chunked:budget=8")  # prompts in chunks: TTFT is several steps

    bound = unloaded_latencies(requests, run_at)
    assert len(calls) == len({r.prompt_tokens for r in requests}) == 5
    truth = _each_alone(requests, run_at)
    for kind in ("ttft", "tpot", "e2e", "itl"):
        assert np.sort(bound[kind]) == pytest.approx(np.sort(truth[kind]), rel=1e-12), kind


def test_past_the_simulated_prompt_lengths_the_unloaded_bound_stays_below_each_request_alone_and_any_rate():
    requests = make_workload(150, "burst", "uniform:10:400", "uniform:1:20", seed=1)
    assert len({r.prompt_tokens for r in requests}) > ALONE_PROMPT_LENGTHS
    calls = []

    def run_at(workload):
        calls.append(workload)
        return _run_at(workload)

    bound = unloaded_latencies(requests, run_at)
    assert len(calls) <= ALONE_PROMPT_LENGTHS
    truth = _each_alone(requests, _run_at)
    for kind in ("ttft", "tpot", "e2e", "itl"):
        assert len(bound[kind]) == len(truth[kind]), kind
        assert np.all(np.sort(bound[kind]) <= np.sort(truth[kind]) * (1 + 1e-12)), kind
    assert bound["ttft"].sum() < truth["ttft"].sum()  # prompts between the simulated lengths are rounded down
    for arrivals in ("poisson:1", "poisson:30", "burst"):
        loaded = latencies(_run_at(with_arrivals(requests, arrivals)).requests)
        for kind in ("ttft", "tpot", "e2e", "itl"):
            for percentile in (50, 90, 99):
                assert np.percentile(bound[kind], percentile) <= np.percentile(loaded[kind], percentile) * (1 + 1e-12)


def test_an_slo_each_request_misses_alone_is_answered_from_the_lone_simulations_only():
    """A 50-token prompt's prefill alone takes 10 ms + 50 × 0.2 ms = 20 ms: a 19 ms TTFT limit is missed at any rate,
    and the search says so without simulating the burst or any rate."""
    requests = make_workload(60, "burst", "fixed:50", "exp:20:60", seed=0)
    calls, probes = [], []

    def run_at(workload):
        calls.append(len(workload))
        return _run_at(workload)

    found = capacity_under(requests, Slo.parse("ttft_p90=0.019"), run_at, progress=probes.append)
    assert calls == [1] and found.capacity_requests_per_s is None and found.missed_alone and found.tried == ()
    assert found.reason.endswith("(TTFT p90 20 ms > 19 ms)")
    assert [(p.arrivals, p.met) for p in probes] == [("alone", False)]
    assert probes[0].checks["ttft_p90"]["value_s"] == pytest.approx(0.02)
    met = capacity_under(requests, Slo.parse("ttft_p90=0.021"), _run_at)  # just above: searched, and found
    assert not met.missed_alone and met.capacity_requests_per_s


def test_progress_is_handed_every_simulation_of_the_search_in_order():
    requests = make_workload(100, "burst", "fixed:50", "exp:20:60", seed=0)
    probes = []
    found = capacity_under(requests, Slo.parse("ttft_p90=0.05"), _run_at, progress=probes.append)
    assert [p.arrivals for p in probes[:2]] == ["alone", "burst"] and probes[1].met is False
    rates = [p for p in probes[2:]]
    assert len(rates) == len(found.tried) and all(p.arrivals == "poisson" for p in rates)
    tried = {p["rate_requests_per_s"]: (p["met"], p["checks"]) for p in found.tried}
    assert all(tried[p.rate_requests_per_s] == (p.met, p.checks) for p in rates)


def test_runs_for_latencies_only_keep_no_step_log_and_the_same_requests():
    requests = make_workload(50, "poisson:20", "fixed:50", "exp:20:60", seed=0)
    logged, bare = simulate(PROFILE, requests, "paged"), simulate(PROFILE, requests, "paged", log_steps=False)
    assert len(logged.steps) > 0 and len(bare.steps) == 0 and bare.requests == logged.requests
    layout = FleetLayout(2, "least-loaded")
    logged = simulate_fleet(PROFILE, requests, "paged", layout)
    bare = simulate_fleet(PROFILE, requests, "paged", layout, log_steps=False)
    assert len(logged.steps) > 0 and len(bare.steps) == 0 and bare.requests == logged.requests
