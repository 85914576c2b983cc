"""Inter-token latency: every gap between consecutive tokens of a request, pooled over requests (vLLM's ITL).

The cases are worked by hand: a step of T tokens costs ``PER_STEP + PER_TOKEN × T`` (``token_linear_profile``),
or every step costs 1 s (``constant_profile``).
"""

from __future__ import annotations

import numpy as np
import pytest
from serving_helpers import constant_profile, token_linear_profile

from roofline.core.errors import BadInputError
from roofline.serving.capacity import rate_point, search_capacity
from roofline.serving.latency import (
    ServedRequest,
    inter_token_latencies_s,
    latencies,
    own_inter_token_percentile_s,
    pooled_inter_token_latencies_s,
)
from roofline.serving.metrics import Slo, summarize
from roofline.serving.simulate import simulate
from roofline.serving.workload import Request, make_workload

PER_STEP, PER_TOKEN = 0.01, 1e-4


def step_s(tokens: int) -> float:
    return PER_STEP + PER_TOKEN * tokens


# A decodes alone (prompt 10, 20 tokens); B's long prompt (1000 tokens) arrives at 0.05 s, during A's 5th step.
DECODER, LONG_PROMPT = Request(0, 0.0, 10, 20), Request(1, 0.05, 1000, 2)


def _gaps_of_decoder(policy: str) -> np.ndarray:
    run = simulate(token_linear_profile(PER_STEP, PER_TOKEN), [DECODER, LONG_PROMPT], policy)
    return inter_token_latencies_s(run.requests[0])


def test_paged_stalls_the_decoding_request_for_the_whole_prefill_step():
    # Prefill-first: at 0.0514 s (A's first token at 0.011 s, then four decode steps of one token) B is waiting,
    # so the next step is B's whole prompt alone; A's next token comes one A+B decode step after it.
    gaps = _gaps_of_decoder("paged")
    stall = step_s(1000) + step_s(2)
    assert gaps.max() == pytest.approx(stall)  # 0.1202 s
    assert list(gaps).index(gaps.max()) == 4
    assert np.delete(gaps, 4) == pytest.approx([step_s(1)] * 18)


def test_chunked_bounds_the_decoding_request_gap_by_one_budget_step():
    # Every step runs A's decode first and fills the rest of the 101-token budget with 100 tokens of B's prompt:
    # A's gaps are ten budget-sized steps, never the whole prefill.
    gaps = _gaps_of_decoder("chunked:budget=101")
    assert gaps.max() == pytest.approx(step_s(101))  # 0.0201 s
    assert np.sum(np.isclose(gaps, step_s(101))) == 10
    assert np.sum(np.isclose(gaps, step_s(2))) == 1  # the step B's first decode shares with A
    assert np.sum(np.isclose(gaps, step_s(1))) == 8


def test_chunked_shows_a_far_lower_itl_p99_than_paged_where_tpot_barely_differs():
    profile = token_linear_profile(PER_STEP, PER_TOKEN)
    summaries = {policy: summarize(simulate(profile, [DECODER, LONG_PROMPT], policy), profile, 0.9)
                 for policy in ("paged", "chunked:budget=101")}
    paged, chunked = summaries["paged"], summaries["chunked:budget=101"]
    # 20 gaps pooled: paged's are 18 one-token steps, B's one two-token step and the stall; P99 interpolates
    # 81% of the way from the second largest to the stall.
    assert paged["itl"]["p99_s"] == pytest.approx(step_s(2) + 0.81 * step_s(1000))
    assert paged["itl"]["max_s"] == pytest.approx(step_s(1000) + step_s(2))
    assert chunked["itl"]["p99_s"] == pytest.approx(step_s(101))
    assert chunked["itl"]["p99_s"] < paged["itl"]["p99_s"] / 4
    # TPOT averages the stall over A's 19 gaps: the two policies' TPOT are within 5% of each other.
    assert chunked["tpot"]["p99_s"] == pytest.approx(paged["tpot"]["p99_s"], rel=0.05)


def test_long_prompts_arriving_among_decodes_give_chunked_a_lower_itl_tail_than_paged():
    profile = token_linear_profile(PER_STEP, PER_TOKEN)
    requests = make_workload(200, "poisson:4", "uniform:500:2000", "uniform:50:150", seed=3)
    p99 = {policy: summarize(simulate(profile, requests, policy), profile, 0.9)["itl"]["p99_s"]
           for policy in ("paged", "chunked:budget=256")}
    assert p99["chunked:budget=256"] < p99["paged"] / 2


def test_every_token_is_timed_first_at_ttft_and_last_at_the_finish():
    profile = constant_profile(step_s=0.01, device_bytes=1200, weight_bytes=1, kv_bytes_per_token=1)
    requests = make_workload(60, "poisson:30", "fixed:100", "exp:50:200", 3)
    for policy in ("static:batch=8", "continuous", "paged:block=16", "chunked:budget=64"):
        run = simulate(profile, requests, policy, mem_fraction=1.0)
        for r in run.requests:
            times = np.asarray(r.token_times_s)
            assert len(times) == r.output_tokens
            assert (times[0], times[-1]) == (r.first_token_s, r.finish_s)
            assert (np.diff(times) > 0).all()
    assert sum(r.preemptions for r in run.requests) > 0  # tight memory: preempted requests are timed too


def test_continuous_gaps_count_the_prefill_steps_a_decode_waits_through():
    # Every step 1 s; four requests fill the batch, the 1-token one ends at step 1, the fifth prefills at step 2
    # and the sixth at step 4 (tests/test_serving_simulate.py): the 10-token request's tokens come at the ends
    # of steps 1, 3, 5, 6, ..., 12.
    requests = [Request(i, 0.0, 5, o) for i, o in enumerate((1, 2, 3, 10, 2, 1))]
    run = simulate(constant_profile(), requests, "continuous:max-batch=4")
    assert list(run.requests[3].token_times_s) == [1, 3, 5, 6, 7, 8, 9, 10, 11, 12]
    assert list(inter_token_latencies_s(run.requests[3])) == [2, 2, 1, 1, 1, 1, 1, 1, 1]
    assert run.requests[3].tpot_s == pytest.approx(11 / 9)  # the mean hides the two 2-s gaps


def _timed(times: tuple[float, ...]) -> ServedRequest:
    """A served request whose tokens came at ``times`` (none: a request that streamed none, kept for the seams)."""
    return ServedRequest(Request(0, 0.0, 1, max(len(times), 1)), times[0] if times else 0.0,
                         times[-1] if times else 0.0, times)


def test_pooled_gaps_never_span_two_requests_even_around_requests_without_gaps():
    requests = [_timed(()), _timed((1.0,)), _timed((2.0, 5.0, 6.0)), _timed(()), _timed((10.0,)),
                _timed((20.0, 20.5)), _timed(())]
    assert list(pooled_inter_token_latencies_s(requests)) == [3.0, 1.0, 0.5]
    assert list(pooled_inter_token_latencies_s([_timed((1.0,))])) == []
    assert list(latencies(requests)["itl"]) == [3.0, 1.0, 0.5]


def test_each_requests_own_itl_percentile_is_numpys_percentile_of_its_gaps():
    rng = np.random.default_rng(7)
    requests = [_timed(tuple(np.cumsum(rng.exponential(1.0, size=n)))) for n in (0, 1, 2, 3, 7, 50, 2, 130)]
    for pct in (50, 90, 99):
        own = own_inter_token_percentile_s(requests, pct)
        for r, value in zip(requests, own, strict=True):
            gaps = np.diff(r.token_times_s)
            if len(gaps):
                assert value == pytest.approx(np.percentile(gaps, pct))
            else:
                assert np.isnan(value)


def test_summary_itl_has_its_percentiles_and_the_longest_gap():
    profile = constant_profile()
    run = simulate(profile, [Request(i, 0.0, 5, o) for i, o in enumerate((1, 2, 3, 10, 2, 1))],
                   "continuous:max-batch=4")
    itl = summarize(run, profile, 0.9)["itl"]
    gaps = pooled_inter_token_latencies_s(run.requests)
    assert set(itl) == {"p50_s", "p90_s", "p99_s", "mean_s", "max_s"}
    assert itl["max_s"] == 2.0
    assert itl["p90_s"] == pytest.approx(np.percentile(gaps, 90))
    one_token = simulate(profile, [Request(0, 0.0, 5, 1)], "continuous")
    assert summarize(one_token, profile, 0.9)["itl"] == {"p50_s": None, "p90_s": None, "p99_s": None,
                                                             "mean_s": None, "max_s": None}


def test_an_itl_slo_is_parsed_checked_and_counted_per_request_for_goodput():
    assert Slo.parse("itl_p99=0.05,ttft_p90=2").limits_s == {"itl_p99": 0.05, "ttft_p90": 2.0}
    with pytest.raises(BadInputError, match="itl"):
        Slo.parse("itll_p99=0.05")
    profile = token_linear_profile(PER_STEP, PER_TOKEN)
    run = simulate(profile, [DECODER, LONG_PROMPT], "paged")
    slo = summarize(run, profile, 0.9, Slo.parse("itl_p99=0.05"))["slo"]
    assert slo["checks"]["itl_p99"]["value_s"] == pytest.approx(step_s(2) + 0.81 * step_s(1000))
    assert not slo["met"]
    # A's own gaps: P99 of 19 is 82% of the way from a one-token step to the stall (0.1 s); B's only gap is a
    # two-token step.  Only B is good.
    assert slo["goodput_requests_per_s"] == pytest.approx(1 / run.makespan_s)
    loose = summarize(run, profile, 0.9, Slo.parse("itl_p50=0.05"))["slo"]
    assert loose["met"] and loose["goodput_requests_per_s"] == pytest.approx(2 / run.makespan_s)


def test_capacity_search_holds_an_itl_slo_and_rate_points_carry_itl_p99():
    profile = token_linear_profile(PER_STEP, PER_TOKEN)
    requests = make_workload(80, "burst", "uniform:200:1000", "uniform:20:60", seed=1)

    def run_at(workload):
        return simulate(profile, workload, "paged")

    slo = Slo.parse("itl_p99=0.05")
    result = search_capacity(requests, slo, run_at, start_rate=20.0, seed=1)
    assert result.tried and all("itl_p99" in p["checks"] for p in result.tried)
    for point in result.tried:
        assert point["met"] == (point["itl_p99_s"] <= 0.05)
    assert "itl_p99_s" in rate_point(1.0, run_at(requests))
