"""Automatic prefix caching in ``paged`` and ``chunked``: which blocks hit, by hand; a shared block counted once in
the KV in use; LRU eviction; prompts opening with shared system prompts, conversations that resend themselves, and
Mooncake traces whose block hashes say what their prompts share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serving_helpers import token_linear_profile

from roofline.serving.capacity import capacity_under
from roofline.serving.kv_blocks import block_keys
from roofline.serving.metrics import Slo, summarize
from roofline.serving.policies import PolicyError, parse_policy
from roofline.serving.simulate import SimulationError, simulate
from roofline.serving.workload import (
    Request,
    WorkloadError,
    load_trace,
    make_workload,
    parse_prefix,
    parse_sessions,
    with_arrivals,
)

TRACE = Path(__file__).parent / "data" / "mooncake-trace.jsonl"
A, B, C = 0, 1, 2  # system prompts' content ids


def _opening(i: int, arrival_s: float, system: int, own: int = 8, output: int = 2) -> Request:
    """A prompt of a 32-token system prompt and ``own`` tokens of its own."""
    return Request(i, arrival_s, 32 + own, output, ((system, 32),))


# Every step costs 10 ms + 1 ms per token it computes (decodes and prefill tokens), nothing else.
def _profile(device_bytes: int | None = 10**9):
    return token_linear_profile(0.01, 0.001, device_bytes=device_bytes)


def test_two_system_prompts_of_two_blocks_hit_after_their_first_use_by_hand():
    """Block 16: a 40-token prompt is 3 blocks, the first 2 the system prompt's.  Each request arrives alone.
    The first use of A and of B prefills all 40 tokens: 10 + 40 ms.  Every later one finds 32 tokens cached and
    prefills 8: 10 + 8 = 18 ms.  The two B requests at t = 50 prefill together (16 tokens, 26 ms), sharing B's
    two cached blocks: 4 blocks in use, not 6, and 48 tokens of KV, not 80."""
    requests = [_opening(0, 0, A), _opening(1, 10, A), _opening(2, 20, B), _opening(3, 30, B), _opening(4, 40, A),
                _opening(5, 50, B), _opening(6, 50, B)]
    run = simulate(_profile(), requests, "paged:block=16")
    assert [r.cached_tokens for r in run.requests] == [0, 32, 0, 32, 32, 32, 32]
    assert [r.ttft_s for r in run.requests] == pytest.approx([0.05, 0.018, 0.05, 0.018, 0.018, 0.026, 0.026])
    together = next(s for s in run.steps if s.start_s == 50.0)
    assert (together.prefill_tokens, together.kv_blocks_used, together.kv_tokens) == (16, 4, 48)
    summary = summarize(run, _profile(), 0.9)
    assert summary["prefix_hit_rate"] == pytest.approx(5 * 32 / (7 * 40))
    assert summary["cached_prompt_tokens"] == 160 and summary["warnings"] == []

    off = simulate(_profile(), requests, "paged:block=16:prefix-cache=off")
    assert [r.cached_tokens for r in off.requests] == [0] * 7
    assert [r.ttft_s for r in off.requests] == pytest.approx([0.05] * 5 + [0.09, 0.09])
    together = next(s for s in off.steps if s.start_s == 50.0)
    assert (together.prefill_tokens, together.kv_blocks_used, together.kv_tokens) == (80, 6, 80)
    off_summary = summarize(off, _profile(), 0.9)
    assert off_summary["prefix_hit_rate"] is None and "prefix cache is off" in off_summary["warnings"][0]
    assert summary["ttft"]["p50_s"] < off_summary["ttft"]["p50_s"]


def test_chunked_finds_the_same_blocks_and_continuous_says_it_has_none():
    requests = [_opening(0, 0, A), _opening(1, 10, A), _opening(2, 20, B)]
    chunked = simulate(_profile(), requests, "chunked:budget=64:block=16")
    assert [r.cached_tokens for r in chunked.requests] == [0, 32, 0]
    assert [r.ttft_s for r in chunked.requests] == pytest.approx([0.05, 0.018, 0.05])
    continuous = simulate(_profile(), requests, "continuous")
    summary = summarize(continuous, _profile(), 0.9)
    assert summary["prefix_hit_rate"] is None and summary["cached_prompt_tokens"] == 0
    assert "continuous keeps no paged KV cache" in summary["warnings"][0]


def test_the_last_prompt_token_is_always_computed():
    """A 32-token prompt that is all system prompt could match both its blocks, but its last token's logits make
    the first output token: as in vLLM, the block holding it is prefilled again (16 tokens, 26 ms)."""
    requests = [_opening(0, 0, A, own=0), _opening(1, 10, A, own=0)]
    run = simulate(_profile(), requests, "paged:block=16")
    assert [r.cached_tokens for r in run.requests] == [0, 16]
    assert run.requests[1].ttft_s == pytest.approx(0.026)


def test_a_block_only_part_shared_is_not_a_hit():
    """A 20-token system prompt fills one 16-token block and 4 tokens of the next: only the full block is keyed."""
    requests = [Request(0, 0, 28, 1, ((A, 20),)), Request(1, 10, 28, 1, ((A, 20),))]
    assert [r.cached_tokens for r in simulate(_profile(), requests, "paged:block=16").requests] == [0, 16]


def test_block_keys_chain_the_whole_prefix():
    """Block k's key names everything before it: the same tokens after a different first block key differently."""
    one, two = block_keys(((A, 32), (C, 32)), 16), block_keys(((B, 32), (C, 32)), 16)
    assert len(one) == 4 and one[:2] != two[:2] and one[2:] != two[2:]
    assert block_keys(((A, 32),), 16) == one[:2] == block_keys(((A, 40),), 16)[:2]
    assert block_keys(((A, 8), (B, 8)), 16) != block_keys(((A, 8), (C, 8)), 16)  # a block of two pieces
    assert block_keys(((A, 15),), 16) == []  # no full block


def test_the_least_recently_used_cached_blocks_are_evicted_first():
    """10 blocks of 16 tokens (160 B of KV at 1 B a token).  A, B, C (2 cached blocks each, 1 block of their own)
    run one after the other; D reuses A, so A is the most recent.  E's 70-token prompt (5 blocks, nothing shared)
    finds 4 free and evicts one block: B's second, the least recently used (a sequence's blocks are released last
    first, so its first block outlives its second; by insertion order A's first would go).  Then B finds its first
    block only, C and A both of theirs."""
    requests = [_opening(0, 0, A), _opening(1, 10, B), _opening(2, 20, C), _opening(3, 30, A), Request(4, 40, 70, 2),
                _opening(5, 50, B), _opening(6, 60, C), _opening(7, 70, A)]
    profile = _profile(device_bytes=161)  # weights 1 B: 160 B left, 10 blocks
    run = simulate(profile, requests, "paged:block=16", mem_fraction=1.0)
    assert run.kv_blocks_total == 10
    assert [r.cached_tokens for r in run.requests] == [0, 0, 0, 32, 0, 16, 32, 32]
    assert run.steps.column("kv_blocks_used").max() == 5 and sum(r.preemptions for r in run.requests) == 0


def test_a_decode_takes_an_evictable_cached_block_rather_than_preempt():
    """4 blocks of 4 tokens.  A's 8-token prompt leaves its 2 blocks cached; B's 5-token prompt takes the other 2
    and, growing past 8 tokens, needs a fifth block: it evicts one of A's, and nobody is preempted."""
    requests = [Request(0, 0, 8, 1, ((A, 8),)), Request(1, 10, 5, 6)]
    run = simulate(_profile(device_bytes=17), requests, "paged:block=4", mem_fraction=1.0)
    assert run.kv_blocks_total == 4
    assert [r.preemptions for r in run.requests] == [0, 0]
    assert run.steps.column("kv_blocks_used").max() == 3


def test_a_preempted_sequence_finds_its_own_blocks_again():
    """7 blocks of 1 token, as the recompute test of the simulator: B is preempted, and readmitted it finds both
    blocks of its prompt, which it had keyed, and prefills only its 2 tokens so far (its output is no known
    content): 2 + 2 + 2 prompt tokens in all, where without keys its prompt is prefilled again, 2 + 2 + 4."""
    profile = _profile(device_bytes=8)
    requests = [Request(0, 0, 2, 4, ((A, 2),)), Request(1, 0, 2, 4, ((B, 2),))]
    cached = simulate(profile, requests, "paged:block=1", mem_fraction=1.0)
    plain = simulate(profile, [Request(0, 0, 2, 4), Request(1, 0, 2, 4)], "paged:block=1", mem_fraction=1.0)
    assert [r.preemptions for r in cached.requests] == [r.preemptions for r in plain.requests] == [0, 1]
    assert sum(s.prefill_tokens for s in plain.steps) == 8  # 2 + 2, then B's prompt and its 2 tokens again
    assert sum(s.prefill_tokens for s in cached.steps) == 6
    # What a request found cached is what its first admission found: its own blocks found again on readmission
    # are its recompute saved, not a prefix it shared.
    assert [r.cached_tokens for r in cached.requests] == [0, 0]


def test_eight_system_prompts_of_2000_tokens_hit_above_80_percent_and_cut_ttft():
    """Llama-3-8B on the H200's achievable ceilings: 200 requests at 10/s, each one of 8 system prompts of 2,000
    tokens and 128 tokens of its own.  At most the first use of each prompt misses: the hit rate is about
    2,000 / 2,128 of the other 192 (90%), and the prefill of 128 tokens over a cached prefix is far shorter."""
    from roofline.serving.profiles.analytic import analytic_profile
    from roofline.specs.gpus import load_gpu_spec
    from roofline.specs.models import load_model

    profile = analytic_profile(load_model("llama-3-8b"), tp=1, dtype="bf16", kv_dtype="bf16", max_tokens=8192,
                               max_context=8192, gpu=load_gpu_spec("h200-sxm"))
    requests = make_workload(200, "poisson:10", "fixed:128", "exp:128:512", seed=0, prefix="shared:2000:8")
    cached = summarize(simulate(profile, requests, "paged"), profile, 0.9)
    plain = summarize(simulate(profile, requests, "paged:prefix-cache=off"), profile, 0.9)
    assert cached["prefix_hit_rate"] > 0.8
    assert cached["cached_prompt_tokens"] >= 192 * 2000
    for p in ("p50_s", "p90_s", "p99_s"):
        assert cached["ttft"][p] < plain["ttft"][p]
    assert cached["kv_occupancy_mean"] < plain["kv_occupancy_mean"]  # the 2,000 tokens are held once


def test_shared_prefix_workload_draws_a_system_prompt_per_request_and_keeps_the_other_draws():
    plain = make_workload(50, "poisson:4", "uniform:10:20", "exp:8:16", seed=3)
    shared = make_workload(50, "poisson:4", "uniform:10:20", "exp:8:16", seed=3, prefix="shared:100:4")
    assert [(r.arrival_s, r.prompt_tokens + 100, r.output_tokens) for r in plain] == \
        [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in shared]
    systems = [r.segments for r in shared]
    assert {s for s in systems} == {((k, 100),) for k in range(4)}
    assert shared == make_workload(50, "poisson:4", "uniform:10:20", "exp:8:16", seed=3, prefix="shared:100:4")


def test_a_conversation_resends_itself_and_waits_for_each_answer():
    """Two turns of 40 new tokens and 9-token answers, 5 s apart; block 16.  Turn 1 ends with 40 + 8 tokens of KV
    (the last answer token is never fed back): 3 full blocks.  Turn 2 resends 40 + 9 and adds 40: 89 tokens, 48
    of them cached, so it prefills 41 (10 + 41 ms) where without the cache it prefills 89 (10 + 89 ms)."""
    requests = make_workload(2, "burst", "fixed:40", "fixed:9", seed=0, sessions="2:5")
    first, second = requests
    assert (first.prompt_tokens, second.prompt_tokens, second.after, second.think_s) == (40, 89, 0, 5.0)
    run = simulate(_profile(), requests, "paged:block=16")
    turn1, turn2 = run.requests
    assert turn2.arrival_s == pytest.approx(turn1.finish_s + 5)
    assert (turn1.cached_tokens, turn2.cached_tokens) == (0, 48)
    assert turn2.ttft_s == pytest.approx(0.051)
    off = simulate(_profile(), requests, "paged:block=16:prefix-cache=off").requests[1]
    assert off.ttft_s == pytest.approx(0.099)


def test_sessions_split_the_requests_into_conversations_and_keep_the_request_rate():
    requests = make_workload(10, "burst", "fixed:5", "fixed:3", seed=0, sessions="4:1", prefix="shared:16:2")
    assert [r.after for r in requests] == [None, 0, 1, 2, None, 4, 5, 6, None, 8]
    assert [r.prompt_tokens for r in requests[:4]] == [21, 29, 37, 45]  # 16 + 5, then + 3 + 5 a turn
    assert requests[3].segments == requests[2].segments[:1] + requests[3].segments[1:]  # same system prompt
    many = make_workload(4000, "poisson:20", "fixed:5", "fixed:3", seed=1, sessions="4:1")
    starts = [r.arrival_s for r in many if r.after is None]
    assert len(starts) == 1000 and starts[-1] == pytest.approx(4000 / 20, rel=0.1)  # sessions at 20/4 per s
    moved = with_arrivals(many, "poisson:40", seed=1)
    firsts = [r.arrival_s for r in moved if r.after is None]
    assert firsts[-1] == pytest.approx(4000 / 40, rel=0.1)
    assert all(m.arrival_s == moved[m.after].arrival_s for m in moved if m.after is not None)


@pytest.mark.parametrize("spec", ["shared:0:2", "shared:10", "private:10:2", "shared:a:2", "shared:10:0"])
def test_bad_prefix_specs_are_refused(spec):
    with pytest.raises(WorkloadError, match="--prefix"):
        parse_prefix(spec)


@pytest.mark.parametrize("spec", ["3", "0:5", "2:-1", "x:1", "2:inf"])
def test_bad_session_specs_are_refused(spec):
    with pytest.raises(WorkloadError, match="--sessions"):
        parse_sessions(spec)


def test_prefix_cache_is_a_switch_of_paged_and_chunked_only():
    assert parse_policy("paged").prefix_cache and parse_policy("chunked:budget=8").prefix_cache
    assert not parse_policy("paged:prefix-cache=off").prefix_cache
    assert parse_policy("chunked:budget=8:prefix-cache=off").to_dict()["prefix_cache"] is False
    assert parse_policy("continuous").to_dict()["prefix_cache"] is None
    for text in ("paged:prefix-cache=maybe", "continuous:prefix-cache=on", "paged:prefix-cache=on:prefix-cache=off"):
        with pytest.raises(PolicyError):
            parse_policy(text)


def test_a_mooncake_trace_gives_each_512_token_block_its_hash():
    requests = load_trace(TRACE)
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in requests] == \
        [(0.0, 1100, 4), (1.0, 700, 2), (2.0, 1300, 3), (2.5, 400, 1)]
    assert requests[0].segments == ((0, 512), (1, 512), (2, 76))
    assert requests[3].segments == ((5, 400),)


def test_a_mooncake_trace_shares_the_blocks_its_hashes_share():
    """The second prompt opens with the first's block 0 (512 tokens), the third with its blocks 0 and 1."""
    run = simulate(_profile(), load_trace(TRACE), "paged:block=16")
    assert [r.cached_tokens for r in run.requests] == [0, 512, 1024, 0]
    assert summarize(run, _profile(), 0.9)["prefix_hit_rate"] == pytest.approx(1536 / 3500)


@pytest.mark.parametrize("row, message", [
    ({"timestamp": 0, "input_length": 1100, "output_length": 4, "hash_ids": [0, 1]}, "2 hash_ids for 1100"),
    ({"timestamp": 0, "input_length": 10, "output_length": 4}, "hash_ids"),
    ({"timestamp": "0", "input_length": 10, "output_length": 4, "hash_ids": [0]}, "timestamp"),
    ({"timestamp": 0, "input_length": 10, "output_length": 0, "hash_ids": [0]}, "output_tokens"),
])
def test_a_bad_mooncake_row_is_refused_naming_its_line(tmp_path, row, message):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 8, "output_length": 1, "hash_ids": [9]}) + "\n"
                    + json.dumps(row) + "\n")
    with pytest.raises(WorkloadError, match=f"line 2: .*{message}"):
        load_trace(path)


def test_a_mooncake_trace_that_is_not_json_is_refused(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("timestamp,input_length\n")
    with pytest.raises(WorkloadError, match=r"line 1: not valid JSON .* \(a Mooncake trace has one JSON object"):
        load_trace(path)


def test_a_mooncake_line_nested_100000_deep_is_refused_in_one_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 8, "output_length": 1, "hash_ids": [9]}) + "\n"
                    + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(WorkloadError, match="line 2: nested 100,000 levels deep") as caught:
        load_trace(path)
    assert "\n" not in str(caught.value)


def test_a_conversation_needs_the_turn_it_follows():
    with pytest.raises(SimulationError, match="later turn"):
        simulate(_profile(), [Request(0, 0, 8, 1), Request(2, 0, 8, 1, after=1)], "paged")


def test_the_alone_bound_is_not_taken_for_prompts_a_prefix_cache_shares():
    """Served alone on a cold cache a 40-token prompt takes 50 ms to its first token; beside others that opened
    with the same system prompt, 18 ms.  An SLO of 30 ms at P90 is met at low rates with the cache (2 of 40
    requests miss it) and missed at every rate without: the cold bound answers only the latter."""
    requests = [_opening(i, 0, i % 2) for i in range(40)]
    slo = Slo.parse("ttft_p90=0.03")

    def run_at(policy):
        return lambda workload: simulate(_profile(), workload, policy, log_steps=False)

    cached = capacity_under(requests, slo, run_at("paged:block=16"))
    assert not cached.missed_alone and cached.capacity_requests_per_s is not None
    off = capacity_under(requests, slo, run_at("paged:block=16:prefix-cache=off"))
    assert off.missed_alone and off.capacity_requests_per_s is None


# --- the command ------------------------------------------------------------------------------------------------
def _simulate(tmp_path, *args):
    from click.testing import CliRunner

    from microbench.cli.app import main

    return CliRunner().invoke(main, ["simulate", *args, "-o", str(tmp_path / "sim")])


def _profile_file(tmp_path):
    from roofline.serving.profile_doc import save_profile

    path = tmp_path / "profile.json"
    save_profile(_profile(), path)
    return path


def test_simulate_replays_a_mooncake_trace_and_reports_the_hit_rate(tmp_path):
    import csv

    from tests.test_document_schemas import schema_errors

    run = _simulate(tmp_path, "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--trace", str(TRACE),
                    "--policy", "paged:block=16", "--policy", "continuous")
    assert run.exit_code == 0, run.output
    assert "prefix hit" in run.output
    assert "paged:block=16: the prefix cache held 44% of the prompt tokens (1,536 of 3,500 tokens not prefilled)" \
        in run.output
    assert "continuous: warning: the prompts share prefixes and continuous keeps no paged KV cache" in run.output
    folder = tmp_path / "sim"
    document = json.loads((folder / "simulation.json").read_text(encoding="utf-8"))
    assert schema_errors("simulation", document) == []
    paged, continuous = document["runs"]
    assert (paged["policy"]["prefix_cache"], continuous["policy"]["prefix_cache"]) == (True, None)
    assert paged["summary"]["cached_prompt_tokens"] == 1536 and continuous["summary"]["prefix_hit_rate"] is None
    with (folder / "requests.csv").open() as stream:
        rows = list(csv.DictReader(stream))
    assert [int(r["cached_tokens"]) for r in rows] == [0, 512, 1024, 0, 0, 0, 0, 0]
    assert "the prefix cache held 44%" in (folder / "report.md").read_text(encoding="utf-8")


def test_simulate_draws_shared_prefixes_and_conversations(tmp_path):
    run = _simulate(tmp_path, str(_profile_file(tmp_path)), "--requests", "12", "--prefix", "shared:64:2",
                    "--sessions", "3:0.5", "--prompt", "fixed:20", "--output", "fixed:4", "--policy",
                    "paged:block=16", "--no-report")
    assert run.exit_code == 0, run.output
    document = json.loads((tmp_path / "sim" / "simulation.json").read_text(encoding="utf-8"))
    assert {k: document["workload"][k] for k in ("prefix", "sessions")} == {"prefix": "shared:64:2",
                                                                              "sessions": "3:0.5"}
    assert document["runs"][0]["summary"]["prefix_hit_rate"] > 0.5


@pytest.mark.parametrize("args, message", [
    (["--trace", str(TRACE), "--prefix", "shared:8:2"], "--prefix: these draw a workload"),
    (["--prefix", "shared:8"], "--prefix 'shared:8': give shared:L:N"),
    (["--sessions", "2:x"], "--sessions '2:x': give T:G"),
    (["--sessions", "2:1", "--replicas", "2"], "--sessions: each turn is sent when the one before it ends"),
])
def test_bad_prefix_and_session_options_are_one_line_and_exit_2(tmp_path, args, message):
    run = _simulate(tmp_path, str(_profile_file(tmp_path)), *args)
    assert run.exit_code == 2 and run.output.count("\n") == 1, run.output
    assert run.output.startswith(f"gpubench: error: {message}"), run.output
