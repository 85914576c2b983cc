"""The simulator on hand-computable cases (every step costs 1 s) and each policy's invariants."""

from __future__ import annotations

import pytest
from serving_helpers import constant_profile

from roofline.serving.metrics import summarize
from roofline.serving.policies import PolicyError, parse_policy
from roofline.serving.simulate import SimulationError, simulate
from roofline.serving.workload import Request, make_workload

OUTPUTS = (1, 2, 3, 10)


def _requests(outputs, prompt=5, arrival=0.0):
    return [Request(i, arrival, prompt, o) for i, o in enumerate(outputs)]


def test_static_batch_of_four_takes_ten_steps_and_wastes_24_of_40_slot_steps():
    profile = constant_profile()
    run = simulate(profile, _requests(OUTPUTS), "static:batch=4")
    assert len(run.steps) == 10
    assert [r.finish_s for r in run.requests] == [1.0, 2.0, 3.0, 10.0]
    waste = summarize(run, profile, 0.9)["padding_waste"]
    assert (waste["wasted_slot_steps"], waste["slot_steps"]) == (24, 40)
    assert waste["share"] == pytest.approx(0.6)


def test_static_pads_prompts_to_the_longest_and_the_next_batch_waits_for_the_whole_batch():
    profile = constant_profile()
    requests = [Request(0, 0.0, 3, 1), Request(1, 0.0, 7, 3), Request(2, 0.0, 5, 2), Request(3, 0.0, 5, 2)]
    run = simulate(profile, requests, "static:batch=2")
    assert [s.prefill_tokens for s in run.steps] == [14, 0, 0, 10, 0]
    assert run.steps[0].padding_tokens == 4
    assert [(r.first_token_s, r.finish_s) for r in run.requests] == [(1, 1), (1, 3), (4, 5), (4, 5)]


def test_continuous_takes_the_same_ten_steps_and_finishes_each_sequence_at_its_own_step():
    profile = constant_profile()
    run = simulate(profile, _requests(OUTPUTS), "continuous:max-batch=4")
    assert len(run.steps) == 10
    assert [r.finish_s for r in run.requests] == [1.0, 2.0, 3.0, 10.0]
    assert sum(s.wasted_slots for s in run.steps) == 0
    assert [s.sequences for s in run.steps] == [4, 3, 2] + [1] * 7


def test_continuous_admits_waiting_requests_into_freed_slots_prefill_first():
    profile = constant_profile()
    run = simulate(profile, _requests(OUTPUTS + (2, 1)), "continuous:max-batch=4")
    # Step 1 prefills four (the 1-token request ends); step 2 prefills the fifth into that slot while the
    # others wait; step 3 decodes four; step 4 prefills the sixth into a slot freed at step 3.
    assert [(s.decodes, s.prefill_tokens) for s in run.steps[:5]] == [(0, 20), (0, 5), (4, 0), (0, 5), (2, 0)]
    assert [(r.first_token_s, r.finish_s) for r in run.requests] == [(1, 1), (1, 3), (1, 5), (1, 12), (2, 3), (4, 4)]


def test_idle_engine_waits_for_the_next_arrival():
    run = simulate(constant_profile(), [Request(0, 0.0, 4, 2), Request(1, 10.0, 4, 1)], "continuous")
    assert [(r.first_token_s, r.finish_s) for r in run.requests] == [(1, 2), (11, 11)]


def test_paged_preempts_the_latest_sequence_and_recomputes_it():
    # 7 KV blocks of one token: two prompts of 2 fit, their growth does not.
    profile = constant_profile(device_bytes=8, weight_bytes=1, kv_bytes_per_token=1)
    run = simulate(profile, [Request(0, 0.0, 2, 4), Request(1, 0.0, 2, 4)], "paged:block=1", mem_fraction=1.0)
    assert run.kv_blocks_total == 7
    a, b = run.requests
    assert (a.finish_s, a.preemptions) == (4.0, 0)
    assert (b.first_token_s, b.finish_s, b.preemptions) == (1.0, 6.0, 1)
    # The recompute prefills B's prompt and its two tokens so far: 2 + 2 + 4 prompt tokens in all.
    assert sum(s.prefill_tokens for s in run.steps) == 8
    assert all(s.kv_blocks_used <= 7 for s in run.steps)
    summary = summarize(run, profile, 1.0)
    assert summary["binding_limit"] == "kv-cache"


@pytest.mark.parametrize("policy", ["paged:block=1", "chunked:budget=1000:block=1"])
@pytest.mark.parametrize("second_prompt, admitted", [(98, True), (99, False)])
def test_admission_leaves_1_percent_of_the_kv_blocks_free_while_a_sequence_runs(policy, second_prompt, admitted):
    """200 blocks of one token: the watermark is 2 blocks (vLLM's 1%).  A's 100-token prompt is admitted into the
    idle engine; B, arriving with it, is admitted in the same step only if 2 blocks stay free after it: 98
    tokens leave 2, 99 would leave 1 and wait for A to finish."""
    profile = constant_profile(device_bytes=201, weight_bytes=1, kv_bytes_per_token=1)
    requests = [Request(0, 0.0, 100, 50), Request(1, 0.0, second_prompt, 2)]
    run = simulate(profile, requests, policy, mem_fraction=1.0)
    assert run.kv_blocks_total == 200
    first = run.steps[0]
    assert (first.prefill_tokens, first.kv_blocks_used, first.kv_blocked) == \
        ((100 + second_prompt, 100 + second_prompt, False) if admitted else (100, 100, True))
    b = run.requests[1]
    assert b.first_token_s == (1.0 if admitted else 51.0)  # else after A's 50 steps: prefill, then 49 decodes


def test_chunked_splits_a_prompt_into_budget_sized_chunks_over_its_prefix():
    run = simulate(constant_profile(device_bytes=10**6), [Request(0, 0.0, 10, 2)], "chunked:budget=4")
    assert [(s.decodes, s.prefill_tokens) for s in run.steps] == [(0, 4), (0, 4), (0, 2), (1, 0)]
    assert (run.requests[0].first_token_s, run.requests[0].finish_s) == (3.0, 4.0)


def test_chunked_runs_decodes_first_then_fills_the_budget():
    requests = [Request(0, 0.0, 2, 5), Request(1, 0.0, 2, 5), Request(2, 1.0, 9, 2)]
    run = simulate(constant_profile(device_bytes=10**6), requests, "chunked:budget=5")
    assert [(s.decodes, s.prefill_tokens) for s in run.steps[:3]] == [(0, 4), (2, 3), (2, 3)]


@pytest.mark.parametrize("policy", ["static:batch=8", "continuous:max-batch=16", "paged:block=16",
                                    "chunked:budget=64", "paged:block=4:max-batch=64"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_invariants_of_every_policy(policy, seed):
    """No request lost; tokens after arrival; KV within capacity; chunk budget held; max batch held."""
    profile = constant_profile(step_s=0.01, device_bytes=4000, weight_bytes=1, kv_bytes_per_token=1)
    requests = make_workload(120, "poisson:40", "uniform:5:120", "exp:30:200", seed)
    run = simulate(profile, requests, policy, mem_fraction=1.0)
    parsed = parse_policy(policy)
    assert len(run.requests) == len(requests)
    for r in run.requests:
        assert r.arrival_s < r.first_token_s <= r.finish_s
    assert sum(s.decodes for s in run.steps) + sum(1 for r in run.requests) >= sum(r.output_tokens for r in requests)
    if parsed.paged:
        assert all(s.kv_blocks_used <= run.kv_blocks_total for s in run.steps)
        assert all(s.kv_tokens <= run.kv_tokens_capacity for s in run.steps)
    if parsed.kind == "chunked":
        assert all(s.prefill_tokens <= max(0, 64 - s.decodes) for s in run.steps)
    assert max(s.sequences for s in run.steps) <= parsed.max_batch
    starts = [s.start_s for s in run.steps]
    assert starts == sorted(starts)


def test_tight_memory_forces_preemptions_and_every_request_still_finishes():
    profile = constant_profile(step_s=0.01, device_bytes=1200, weight_bytes=1, kv_bytes_per_token=1)
    requests = make_workload(60, "burst", "fixed:100", "exp:200:400", 3)
    run = simulate(profile, requests, "paged:block=16", mem_fraction=1.0)
    assert sum(r.preemptions for r in run.requests) > 0
    assert all(r.finish_s > 0 for r in run.requests)
    recomputed = sum(s.prefill_tokens for s in run.steps) - sum(r.prompt_tokens for r in requests)
    assert recomputed > 0


def test_a_profile_of_zero_times_is_refused_not_divided_by():
    run = simulate(constant_profile(step_s=0.0), [Request(0, 0.0, 5, 2)], "continuous")
    with pytest.raises(SimulationError, match="no time"):
        summarize(run, constant_profile(), 0.9)


def test_requests_that_cannot_fit_are_refused_in_one_line():
    with pytest.raises(SimulationError, match="KV blocks"):
        simulate(constant_profile(device_bytes=100), [Request(0, 0.0, 500, 10)], "paged", mem_fraction=1.0)
    with pytest.raises(SimulationError, match="device memory"):
        simulate(constant_profile(), [Request(0, 0.0, 5, 1)], "paged")


@pytest.mark.parametrize("text, message", [("static", "batch=B"), ("chunked", "budget=T"), ("fifo", "unknown policy"),
                                           ("paged:block=0", "positive"), ("continuous:batch=3", "unknown option"),
                                           ("static:batch=x", "integer")])
def test_bad_policies(text, message):
    with pytest.raises(PolicyError, match=message):
        parse_policy(text)


def test_a_capacity_search_whose_slo_always_holds_stops_at_a_bounded_rate():
    from roofline.serving.capacity import RATE_LIMIT_OVER_BURST, search_capacity
    from roofline.serving.metrics import Slo

    profile = constant_profile()
    requests = make_workload(20, "burst", "fixed:64", "fixed:8", seed=0)

    def run_at(workload):
        return simulate(profile, workload, "continuous")

    result = search_capacity(requests, Slo.parse("ttft_p90=1000"), run_at, start_rate=10.0)
    rates = [p["rate_requests_per_s"] for p in result.tried]
    assert max(rates) <= RATE_LIMIT_OVER_BURST * 10.0 and result.lower_bound
    assert result.capacity_requests_per_s == max(rates) and "capacity ≥ 40 requests/s" in result.reason


def test_a_capacity_search_whose_slo_never_holds_stops_before_the_arrivals_run_past_the_workload_limit():
    """Dividing the rate by 4 while the SLO fails once reached rates whose arrivals span past 10^9 s, which the
    workload refuses: the search stops above them and says no rate meets the SLO (every step takes 1 s, so a
    TTFT of 0.5 s is never met)."""
    from roofline.serving.capacity import LOWEST_RATE_PER_REQUEST, search_capacity
    from roofline.serving.metrics import Slo

    requests = make_workload(5, "burst", "fixed:16", "fixed:4", seed=0)

    def run_at(workload):
        return simulate(constant_profile(), workload, "continuous")

    result = search_capacity(requests, Slo.parse("ttft_p90=0.5"), run_at, start_rate=1.0)
    rates = [p["rate_requests_per_s"] for p in result.tried]
    assert result.capacity_requests_per_s is None and result.reason.startswith("no rate down to")
    assert min(rates) >= LOWEST_RATE_PER_REQUEST * 5 and not any(p["met"] for p in result.tried)


def test_the_step_log_gives_back_by_name_what_each_step_was_logged_with_and_takes_it_only_by_name():
    """Every field a different number, passed by name and read back by name: a column stored in another's place
    reads as the other's number (reading back through the log's own field order would not see it)."""
    import numpy as np

    from roofline.serving.step_cost import StepCost
    from roofline.serving.step_log import FIELDS, StepLog

    cost = StepCost(time_s=1.5, linear_s=2.5, attention_s=3.5, other_s=4.5, overhead_s=5.5, comm_s=6.5, draft_s=6.75,
                    flop=7.5, bytes=8.5, compute_bound=True)
    state = {"start_s": 9.5, "decodes": 10, "prefill_tokens": 11, "sequences": 12, "waiting": 13, "kv_tokens": 14,
             "kv_blocks_used": 15, "wasted_slots": 16, "padding_tokens": 17, "kv_blocked": False, "preempted": 18,
             "decode_tokens": 19}
    log = StepLog()
    log.append(cost=cost, **state)
    expected = {**{name: getattr(cost, name) for name in ("time_s", "linear_s", "attention_s", "other_s",
                                                          "overhead_s", "comm_s", "draft_s", "flop", "bytes",
                                                          "compute_bound")},
                **state}
    assert set(expected) == set(FIELDS)
    for name, value in expected.items():
        assert getattr(log[0], name) == value and log.column(name).tolist() == [float(value)], name
    assert np.isnan(StepLog().column("time_s")).all()
    with pytest.raises(TypeError):
        log.append(cost, *state.values())  # type: ignore[misc]


def test_the_step_log_holds_the_cost_the_simulator_computed_for_each_step_and_the_engine_state_by_hand(monkeypatch):
    """Llama-3-8B at TP 2 with an engine overhead, so a step's linears, attention, other kernels, overhead and
    all-reduces all differ; each step's logged cost is checked against the ``StepCost`` the cost model returned for
    it, field by field.  The KV cache holds 8 blocks of 16 tokens: A (60-token prompt, 40 tokens) and B (50, 3) take
    4 blocks each, so C (40, 2) waits for blocks until B ends in step 3, then prefills alone."""
    from dataclasses import replace

    import roofline.serving.simulate as simulator
    from roofline.serving.profile_doc import EngineOverhead
    from roofline.serving.profiles.analytic import analytic_profile
    from roofline.serving.step_cost import CostModel
    from roofline.specs.gpus import load_gpu_spec
    from roofline.specs.models import load_model

    computed = []

    class Recorded(CostModel):
        def cost(self, decodes, context_sum, chunks, packed=None):
            out = super().cost(decodes, context_sum, chunks, packed)
            computed.append((out, decodes, list(chunks)))
            return out

    monkeypatch.setattr(simulator, "CostModel", Recorded)
    profile = analytic_profile(load_model("llama-3-8b"), tp=2, dtype="bf16", kv_dtype="bf16", max_tokens=2048,
                               max_context=512, gpu=load_gpu_spec("h100-sxm"))
    memory = profile.memory
    profile = replace(profile, memory={**memory, "device_bytes": memory["weight_bytes"] + 128 * memory[
        "kv_bytes_per_token"]})
    requests = [Request(0, 0.0, 60, 40), Request(1, 0.0, 50, 3), Request(2, 0.0, 40, 2)]
    run = simulate(profile, requests, "paged", EngineOverhead(1e-4, 1e-5, "test", 1e-7, 2e-4), mem_fraction=1.0)
    assert run.kv_blocks_total == 8 and len(run.steps) == len(computed)
    clock = 0.0
    for step, (cost, decodes, chunks) in zip(run.steps, computed, strict=True):
        for name in ("time_s", "linear_s", "attention_s", "other_s", "overhead_s", "comm_s", "flop", "bytes",
                     "compute_bound"):
            assert getattr(step, name) == getattr(cost, name), name
        assert (step.decodes, step.prefill_tokens, step.sequences) == (decodes, sum(c for c, _ in chunks),
                                                                       decodes + len(chunks))
        assert step.start_s == pytest.approx(clock, rel=1e-12, abs=0)  # every request is there at 0: no idle time
        clock += cost.time_s
    first = computed[0][0]
    assert len({first.time_s, first.linear_s, first.attention_s, first.other_s, first.overhead_s, first.comm_s}) == 6
    # (waiting, KV tokens held after the step, blocks used, refused for blocks, preempted, wasted, padding):
    # 1. A and B prefill (60 + 50 tokens, 8 blocks), C refused; 2. both decode (61 + 51); 3. both decode, B ends
    # and frees 4 blocks (62 held); 4. C prefills (3 blocks; 62 + 40); 5. A and C decode, C ends (63 held, 4 blocks).
    assert [(s.waiting, s.kv_tokens, s.kv_blocks_used, s.kv_blocked, s.preempted, s.wasted_slots, s.padding_tokens)
            for s in run.steps[:5]] == [(3, 110, 8, True, 0, 0, 0), (1, 112, 8, True, 0, 0, 0),
                                        (1, 62, 4, True, 0, 0, 0), (1, 102, 7, False, 0, 0, 0),
                                        (0, 63, 4, False, 0, 0, 0)]


def test_each_decode_step_reads_the_kv_of_every_token_so_far_and_its_own_by_hand():
    """Llama-3-8B in bf16 keeps 131,072 B of KV a token (32 layers x 8 KV heads x 128 dims x K and V x 2 bytes).
    A lone 100-token prompt's i-th decode attends to 100 + i keys (the prompt, the tokens since, its own): the
    step's bytes and FLOP past a decode of no keys are (100 + i) x 131,072 B and (100 + i) x 4 x 32 heads x 128
    x 32 layers."""
    from roofline.serving.profiles.analytic import analytic_profile
    from roofline.serving.step_cost import CostModel
    from roofline.specs.gpus import load_gpu_spec
    from roofline.specs.models import load_model

    profile = analytic_profile(load_model("llama-3-8b"), tp=1, dtype="bf16", kv_dtype="bf16", max_tokens=512,
                               max_context=512, gpu=load_gpu_spec("h100-sxm"))
    run = simulate(profile, [Request(0, 0.0, 100, 4)], "continuous")
    no_keys = CostModel(profile).cost(1, 0, [])
    decodes = [s for s in run.steps if s.decodes]
    assert [s.bytes - no_keys.bytes for s in decodes] == [(100 + i) * 131_072 for i in (1, 2, 3)]
    assert [s.flop - no_keys.flop for s in decodes] == [(100 + i) * 4 * 32 * 128 * 32 for i in (1, 2, 3)]


def test_the_step_log_gives_back_each_field_as_logged_and_joins_logs_without_copying_them():
    """Steps are stored as doubles, column by column: a record read back has its integers, booleans and a missing
    block count as they were, and two runs' logs read as one, in order."""
    import numpy as np

    from roofline.serving.step_log import FIELDS, StepLog

    paged = simulate(constant_profile(device_bytes=10**6), _requests(OUTPUTS), "paged:block=4")
    free = simulate(constant_profile(), _requests(OUTPUTS), "continuous")
    first = paged.steps[0]
    assert (type(first.decodes), type(first.kv_blocked), type(first.kv_blocks_used)) == (int, bool, int)
    assert free.steps[-1].kv_blocks_used is None and free.steps[-1] == list(free.steps)[-1]
    joined = StepLog.joined([paged.steps, free.steps])
    assert len(joined) == len(paged.steps) + len(free.steps) and joined[len(paged.steps)] == free.steps[0]
    for name in FIELDS:
        expected = [getattr(s, name) for s in [*paged.steps, *free.steps]]
        np.testing.assert_array_equal(joined.column(name), [np.nan if v is None else v for v in expected])
