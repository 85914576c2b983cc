"""Speculative decoding in the simulator: a verification of K + 1 query tokens per decoding sequence, the drafter's
steps costed, each sequence advancing by 1 + the accepted drafts drawn from the distribution (seeded), KV
lookahead for the drafts, and ITL counted per chunk of tokens that arrive together."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from serving_helpers import constant_profile

from microbench.cli.app import main
from roofline.serving.kv_blocks import KvBlocks
from roofline.serving.latency import latencies
from roofline.serving.metrics import summarize
from roofline.serving.simulate import Engine, SimulationError, simulate
from roofline.serving.step_cost import CostModel
from roofline.serving.workload import Request
from roofline.step.speculative import parse_spec_decode

ALWAYS_ALL_THREE = parse_spec_decode("draft=3,accept=hist:0/0/0/1")  # every draft accepted: 4 tokens a step


def test_accepting_every_draft_gains_k_plus_1_tokens_a_step_and_ends_in_ceil_steps_by_hand():
    """Prompt 5, output 10, K = 3, every draft accepted.  The prefill step (1 s) makes the first token; each decode
    step is the verification (1 s: the constant linear) plus three MTP draft steps of one layer of the one-layer
    model and its free LM head (1 s each): 4 s.  The other 9 tokens come 4, 4, then 1 (cut at the output's end):
    ceil(9 / 4) = 3 decode steps, at 5, 9 and 13 s."""
    run = simulate(constant_profile(), [Request(0, 0.0, 5, 10)], "continuous", spec=ALWAYS_ALL_THREE)
    decode_steps = [s for s in run.steps if s.decodes]
    assert len(decode_steps) == math.ceil((10 - 1) / (3 + 1)) == 3
    assert [s.decode_tokens for s in decode_steps] == [4, 4, 1]
    assert [s.draft_s for s in decode_steps] == [3.0, 3.0, 3.0]
    outcome = run.requests[0]
    assert list(outcome.token_times_s) == [1.0] + [5.0] * 4 + [9.0] * 4 + [13.0]
    assert outcome.finish_s == 13.0 and outcome.tpot_s == pytest.approx(12 / 9)  # TPOT per output token
    # ITL as vLLM streams it: one gap per chunk of tokens that arrive together, never the zero gaps inside one.
    assert latencies(run.requests)["itl"].tolist() == [4.0, 4.0, 4.0]
    figures = summarize(run, constant_profile(), 0.9)["spec_decode"]
    assert figures == {"tokens_per_sequence_step": 3.0, "sequence_steps": 3}  # 9 tokens over 3 sequence-steps


def test_accepting_no_draft_gains_one_token_a_step_as_plain_decoding_does():
    run = simulate(constant_profile(), [Request(0, 0.0, 5, 10)], "continuous",
                   spec=parse_spec_decode("draft=2,accept=hist:1/0/0"))
    assert [s.decode_tokens for s in run.steps if s.decodes] == [1] * 9
    assert len(run.steps) == 10


def test_the_verification_attends_as_a_chunk_of_k_plus_1_tokens_over_each_sequences_cache(analytic_llama):
    """Eight sequences at context 1000: their 4 query tokens each read the cache once (the chunk table at 4 tokens
    over a 1000-token prefix, per layer), not the decode table at 32 rows (which reads each cache four times)."""
    spec = parse_spec_decode("draft=3,accept=geometric:0.7")
    model = CostModel(analytic_llama, None, spec)
    cost = model.cost(8, 8 * (1000 + 4), [])
    layers = analytic_llama.layers
    chunk = analytic_llama.chunk_attention
    assert chunk is not None
    assert cost.attention_s == pytest.approx(8 * layers * chunk.at(4, 1000))
    plain = CostModel(analytic_llama).cost(8, 8 * 1001, [])
    # The linears run 32 tokens: on the memory-bound roofline barely more than 8; the drafter's three steps of one
    # layer and the LM head add their own time.
    assert plain.linear_s < cost.linear_s < 4 * plain.linear_s
    assert cost.draft_s > 0 and cost.time_s > plain.time_s
    assert cost.flop > plain.flop


def test_an_mtp_draft_step_is_one_layer_of_a_plain_decode_at_the_context_without_the_drafts(analytic_llama):
    """Each of the K MTP steps is one layer's share of a plain decode step of the same sequences, and the LM head:
    over the contexts the sequences had before this step's drafts (the drafter proposes them; it never reads them
    from a cache).  Eight sequences at 100 tokens, K = 3: the step's contexts sum to 8 × (100 + 4)."""
    spec = parse_spec_decode("draft=3,accept=geometric:0.7")
    cost = CostModel(analytic_llama, None, spec).cost(8, 8 * (100 + 4), [])
    plain = CostModel(analytic_llama).cost(8, 8 * 101, [])  # the step the drafter's is one layer of: context 101
    head = analytic_llama.lm_head.at(8)
    layers = plain.linear_s - head + plain.attention_s + plain.other_s + plain.comm_s
    assert cost.draft_s == pytest.approx(3 * (layers / analytic_llama.layers + head), rel=1e-12)


@pytest.fixture(scope="module")
def analytic_llama():
    from roofline.serving.profiles.analytic import analytic_profile
    from roofline.specs.gpus import load_gpu_spec
    from roofline.specs.models import load_model

    return analytic_profile(load_model("llama-3-8b"), tp=1, dtype="bf16", kv_dtype="bf16", max_tokens=8192,
                            max_context=4096, gpu=load_gpu_spec("h100-sxm"), efficiency="flat")


def test_the_paged_scheduler_reserves_blocks_for_the_k_drafts_before_the_step():
    """A sequence holding 13 tokens in one 16-token block: a plain decode writes the 14th there, a verification
    of 3 drafts writes 4 (13 + 4 > 16) and needs a second block first."""
    for spec, blocks in ((None, 1), (ALWAYS_ALL_THREE, 2)):
        engine = Engine([Request(0, 0.0, 13, 5)], kv_blocks=10, block=16, spec=spec)
        engine.arrive()
        (seq,) = engine.admit(8, None)
        assert seq.blocks == 1
        seq.prefill_left, seq.kv_tokens = 0, 13
        assert engine.decodable() == [seq] and seq.blocks == blocks
        assert isinstance(engine.kv, KvBlocks)


def test_a_request_that_fills_the_cache_is_refused_when_its_drafts_would_not_fit():
    profile = constant_profile(device_bytes=100, weight_bytes=4)  # 0.9 × 100 - 4 = 86 tokens: 5 blocks of 16
    request = [Request(0, 0.0, 40, 40)]  # 80 tokens: 5 blocks; with 3 drafts' room, 83: 6
    simulate(profile, request, "paged")
    with pytest.raises(SimulationError, match="a request of 80 tokens \\(and 3 draft tokens\\) needs more than"):
        simulate(profile, request, "paged", spec=ALWAYS_ALL_THREE)


def test_the_acceptances_are_drawn_from_the_seed():
    spec = parse_spec_decode("draft=4,accept=geometric:0.6")
    requests = [Request(i, 0.0, 8, 50) for i in range(6)]

    def tokens(seed):
        return [s.decode_tokens for s in simulate(constant_profile(), requests, "continuous", spec=spec,
                                                  seed=seed).steps]

    assert tokens(1) == tokens(1) and tokens(1) != tokens(2)


def _simulate(tmp_path, *extra):
    out = tmp_path / "sim"
    run = CliRunner().invoke(main, ["simulate", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b",
                                    "--max-context", "2048", "--requests", "40", "--prompt", "fixed:256", "--output",
                                    "fixed:400", "--no-report", "-o", str(out), *extra], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    return json.loads((out / "simulation.json").read_text()), run.output


def test_simulate_spec_decode_gains_more_than_one_token_per_sequence_step_near_the_distributions_mean(tmp_path):
    """K = 3 at acceptance rate 0.7: (1 - 0.7^4) / 0.3 = 2.533 tokens per sequence-step expected.  40 requests of
    399 decoded tokens draw about 6,300 sequence-steps (standard error about 0.016 tokens); each output's last
    step is cut at its end, which lowers the mean by about half a token per request (0.013)."""
    document, output = _simulate(tmp_path, "--spec-decode", "draft=3,accept=geometric:0.7")
    spec = parse_spec_decode("draft=3,accept=geometric:0.7")
    assert spec is not None and spec.tokens_per_step == pytest.approx(2.533)
    assert document["spec_decode"]["draft"] == 3 and document["spec_decode"]["drafter"] == "mtp"
    figures = document["runs"][0]["summary"]["spec_decode"]
    assert figures["tokens_per_sequence_step"] > 1
    assert figures["tokens_per_sequence_step"] == pytest.approx(spec.tokens_per_step, abs=0.08)
    assert f"{figures['tokens_per_sequence_step']:.2f} tokens per sequence-step" in output
    plain, _ = _simulate(tmp_path / "plain")
    # The same workload decodes in fewer, costlier steps: each output token comes sooner.
    assert document["runs"][0]["summary"]["tpot"]["p50_s"] < plain["runs"][0]["summary"]["tpot"]["p50_s"]
    assert document["runs"][0]["summary"]["steps"] < plain["runs"][0]["summary"]["steps"]
    assert "spec_decode" not in plain and "spec_decode" not in plain["runs"][0]["summary"]


def test_a_draft_model_is_costed_on_the_profiles_roofline_and_says_so(tmp_path):
    document, _ = _simulate(tmp_path, "--spec-decode", "draft=2,accept=geometric:0.5,drafter=llama-2-7b")
    assert "roofline" in document["spec_decode"]["drafter_cost"]
    assert document["runs"][0]["composition_s"]["draft_s"] > 0
    run = CliRunner().invoke(main, ["simulate", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b",
                                    "--spec-decode", "draft=2,accept=geometric:0.5,drafter=nope",
                                    "-o", str(tmp_path / "unknown")])
    assert run.exit_code == 2 and run.output.startswith("gpubench: error: --spec-decode drafter=nope: unknown model")
    assert not (tmp_path / "unknown").exists()


@pytest.mark.parametrize(("value", "words"), [
    ("draft=3,accept=geometric:1.5", "the acceptance rate must be in [0, 1)"),
    ("draft=3", "give both draft=K and accept="),
    ("draft=2,accept=hist:0.5/0.5", "must be 3 non-negative numbers summing to 1"),
])
def test_simulate_and_plan_refuse_a_bad_spec_decode_in_one_line(tmp_path, value, words):
    run = CliRunner().invoke(main, ["simulate", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b",
                                    "--spec-decode", value, "-o", str(tmp_path / "sim")])
    assert run.exit_code == 2 and words in run.output and run.output.count("\n") == 1, run.output
    assert run.output.startswith("gpubench: error: ")
    assert not (tmp_path / "sim").exists()
    run = CliRunner().invoke(main, ["plan", str(tmp_path / "none.json"), "--rate", "1", "--slo", "ttft_p90=1",
                                    "--spec-decode", value])
    assert run.exit_code == 2 and words in run.output, run.output


def test_plan_takes_spec_decode_and_records_it(tmp_path):
    profile = tmp_path / "h100.json"
    run = CliRunner().invoke(main, ["profile", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b",
                                    "--max-tokens", "8192", "--max-context", "2048", "--efficiency", "flat",
                                    "-o", str(profile)])
    assert run.exit_code == 0, run.output
    run = CliRunner().invoke(main, ["plan", str(profile), "--rate", "2", "--slo", "ttft_p90=1", "--requests", "20",
                                    "--spec-decode", "draft=2,accept=geometric:0.8", "--no-report",
                                    "-o", str(tmp_path / "plan")], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    document = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert document["spec_decode"]["spelled"] == "draft=2,accept=geometric:0.8"
    from test_document_schemas import schema_errors

    assert schema_errors("plan", document) == []


def test_chunked_counts_each_speculative_decode_as_its_k_plus_1_tokens_of_the_budget():
    """Budget 16, two decodes verifying 3 drafts each: 8 tokens, so a third prompt prefills 8 tokens beside them
    (plain decodes would leave it 14)."""
    requests = [Request(0, 0.0, 4, 50), Request(1, 0.0, 4, 50), Request(2, 1.5, 40, 5)]
    for spec, chunk in ((None, 14), (ALWAYS_ALL_THREE, 8)):
        run = simulate(constant_profile(device_bytes=10**6), requests, "chunked:budget=16", spec=spec)
        mixed = next(s for s in run.steps if s.decodes and s.prefill_tokens)
        assert (mixed.decodes, mixed.prefill_tokens) == (2, chunk)


def test_a_run_where_no_sequence_decodes_has_no_mean_tokens_per_sequence_step():
    run = simulate(constant_profile(), [Request(0, 0.0, 5, 1)], "continuous", spec=ALWAYS_ALL_THREE)
    assert summarize(run, constant_profile(), 0.9)["spec_decode"] == {"tokens_per_sequence_step": None,
                                                                      "sequence_steps": 0}
