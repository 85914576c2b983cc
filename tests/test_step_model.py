"""The step model (roofline.step): what one step of a dense or mixture-of-experts model launches on each GPU, with
FLOP and bytes checked by hand; the Hugging Face configs of the models served in 2026 read into it; routing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from roofline.core.counting import attention_extent, count_work, matrix_weight_bytes
from roofline.specs.gpus import SpecError
from roofline.specs.hf_config import load_hf_config
from roofline.specs.models import ModelSpec, load_model
from roofline.step.comm import collectives
from roofline.step.launches import Batch, StepModel
from roofline.step.memory import kv_bytes_per_token, parameters, weight_bytes
from roofline.step.routing import Routing

CONFIGS = Path(__file__).resolve().parent / "data" / "hf-configs"


def config(name: str) -> ModelSpec:
    return load_hf_config(CONFIGS / f"{name}.json")


def test_deepseek_v3_reads_as_mla_with_shared_and_dense_layers():
    m = config("deepseek-v3")
    assert (m.attention, m.kv_lora_rank, m.qk_rope_head_dim, m.v_head_dim, m.head_dim) == ("mla", 512, 64, 128, 192)
    assert (m.experts, m.experts_per_token, m.expert_intermediate, m.shared_experts) == (256, 8, 2048, 1)
    assert (m.routed_layers, m.dense_layers, m.intermediate) == (58, 3, 18432)  # first_k_dense_replace 3
    step = StepModel.of(m, ep=8, dtype="fp8-block")
    # 61 layers × (512 + 64) latent and rope values × 2 bytes (bf16: what the projections write)
    assert kv_bytes_per_token(step) == 61 * 576 * 2 == 70_272
    assert 80e9 <= weight_bytes(step) <= 105e9
    assert {g.experts for g in step.grouped} == {32}  # 256 experts over 8 GPUs


def test_the_other_families_read_their_own_keys():
    qwen = config("qwen3-30b-a3b")
    assert (qwen.experts, qwen.experts_per_token, qwen.expert_intermediate, qwen.routed_layers) == (128, 8, 768, 48)
    oss = config("gpt-oss-120b")
    assert (oss.experts, oss.experts_per_token, oss.sliding_window, oss.sliding_layers) == (128, 4, 128, 18)
    maverick = config("llama-4-maverick")  # its language model is under text_config
    assert (maverick.experts, maverick.experts_per_token, maverick.routed_layers) == (128, 1, 24)
    assert (maverick.expert_intermediate, maverick.intermediate, maverick.shared_experts) == (8192, 16384, 1)
    kimi = config("kimi-k2")
    assert (kimi.experts, kimi.attention) == (384, "mla")
    mixtral = config("mixtral-8x7b")
    assert (mixtral.experts, mixtral.experts_per_token, mixtral.expert_intermediate) == (8, 2, 14336)
    dense = config("llama-3.1-70b")
    assert not dense.is_moe and dense.attention == "gqa"


def test_parameters_in_all_and_active_match_the_published_sizes():
    # Mixtral 8x7B: 46.7B parameters, 12.9B active (its model card); embeddings aside here: within 2%.
    counts = parameters(StepModel.of(config("mixtral-8x7b")))
    assert counts["total"] == pytest.approx(46.7e9 - 32000 * 4096, rel=0.02)
    assert counts["active"] == pytest.approx(12.9e9 - 32000 * 4096, rel=0.02)
    # DeepSeek-V3: 671B in all, 37B active (its model card, the MTP module's 14B aside).
    counts = parameters(StepModel.of(config("deepseek-v3")))
    assert counts["total"] == pytest.approx(671e9, rel=0.01) and counts["active"] == pytest.approx(37e9, rel=0.03)


def test_a_config_with_a_layer_kind_gpubench_cannot_model_is_refused(tmp_path):
    path = tmp_path / "hybrid.json"
    base = json.loads((CONFIGS / "qwen3-32b.json").read_text())
    path.write_text(json.dumps({**base, "layer_types": ["mamba", "full_attention"] * 32}))
    with pytest.raises(SpecError, match="layer_types holds 'mamba'"):
        load_hf_config(path)
    path.write_text(json.dumps({**base, "layers_block_type": ["mamba", "attention"]}))
    with pytest.raises(SpecError, match="layers_block_type"):
        load_hf_config(path)
    # A kind it models, without the keys that shape it: the key it needs, by name.
    path.write_text(json.dumps({**base, "layer_types": ["linear_attention", "full_attention"] * 32}))
    with pytest.raises(SpecError, match="lacks 'linear_num_key_heads'"):
        load_hf_config(path)


def test_a_decode_step_of_a_dense_model_by_hand():
    model = load_model("llama-3-8b")
    step = StepModel.of(model)
    work = step.work(Batch.decode(4, 100))
    # GEMMs: 32 layers × (qkv 6144×4096, o 4096×4096, gate_up 28672×4096, down 4096×14336) + lm_head 128256×4096
    layer = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]
    linear = sum(32 * count_work("gemm", "bf16", 4, n, k).bytes for n, k in layer) \
        + count_work("gemm", "bf16", 4, 128256, 4096).bytes
    assert work.linear.bytes == linear
    # Attention per layer: Q read and the output written (4 × 32 heads × 128 × 2 × 2 bytes), K and V of 400 keys
    # over 8 KV heads; FLOP 4 · heads · head_dim per query-key pair.
    per_layer = 4 * 32 * 128 * 2 * 2 + 400 * 8 * 2 * 128 * 2
    assert work.attention.bytes == 32 * per_layer
    assert work.attention.flop == 32 * 4 * 32 * 128 * 400


def test_a_grouped_launch_reads_only_the_touched_experts():
    step = StepModel.of(config("qwen3-30b-a3b"))
    down = step.grouped[1]
    one, many = step.grouped_launch(down, 1), step.grouped_launch(down, 256)
    w = matrix_weight_bytes("bf16", 2048, 768)
    assert one.touched == 8 and one.work.weight_bytes == 8 * w  # batch 1 reads its top-8
    assert many.touched == 128 and many.work.weight_bytes == 128 * w  # 2048 assignments touch every expert
    assert many.work.flop == 2 * 256 * 8 * 2048 * 768
    assert many.work.activation_bytes == 2 * 256 * 8 * 768 and many.work.output_bytes == 2 * 256 * 8 * 2048
    # A step's weight bytes are not affine in its tokens: from 1 to 2 tokens they grow by 8 experts, from
    # 255 to 256 by none.
    def weights(tokens):
        return step.work(Batch(tokens, tokens)).linear.weight_bytes
    assert weights(2) - weights(1) > 100 * (weights(256) - weights(255))


def test_expert_parallelism_splits_experts_and_sends_all_to_alls():
    step = StepModel.of(config("deepseek-v3"), ep=8, dtype="fp8-block")
    assert step.parallelism.gpus == 8 and step.parallelism.attention_dp == 8
    [exchange] = collectives(step, 64)
    # 64 sequences over 8 data-parallel ranks: each sends its 8 tokens' hidden vectors in bf16 once to each GPU
    # holding one of a token's 8 experts (32 of the 256 a GPU: with probability 1 - C(224, 8) / C(256, 8)).
    assert exchange.name == "all_to_all" and exchange.count == 2 * 58
    held = 1 - math.comb(224, 8) / math.comb(256, 8)
    assert exchange.message_bytes == pytest.approx(8 * 7168 * 2 * 8 * held)
    assert exchange.message_bytes < 8 * 8 * 7168 * 2  # less than a copy per expert: two of a GPU's go once
    # Each GPU's grouped GEMM is given its share of the 512 assignments, one of its 32 experts each.
    launch = step.grouped_launch(step.grouped[0], step.grouped_tokens(64))
    assert launch.tokens == 64 and launch.topk == 1 and launch.touched == 32
    with pytest.raises(SpecError, match="not a multiple"):
        StepModel.of(config("deepseek-v3"), tp=3, ep=8)
    with pytest.raises(SpecError, match="no experts"):
        StepModel.of(load_model("llama-3-8b"), ep=2)


def test_mla_attention_is_about_twice_the_heads_flop_per_byte():
    step = StepModel.of(config("deepseek-v3"))
    work = step.mixer_layer_work(step.main_mixer, Batch.decode(1, 4096))  # one decode at context 4096
    # By hand: QKᵀ over 576 dims and PV over 512 for 128 heads and 4096 keys; the latent cache read once (bf16), the
    # query (576 per head) read and the output (512 per head) written.
    flop = 2 * 128 * (576 + 512) * 4096
    assert (work.flop, work.bytes) == (flop, 4096 * 576 * 2 + 128 * (576 + 512) * 2)
    # FlashMLA's analysis: about 2 · heads · query tokens FLOP per byte of cache (128 heads: compute-bound on H800)
    assert flop / (4096 * 576 * 2) == pytest.approx(2 * 128, rel=0.1)
    tp8_step = StepModel.of(config("deepseek-v3"), tp=8)
    tp8 = tp8_step.mixer_layer_work(tp8_step.main_mixer, Batch.decode(1, 4096))
    # TP 8: a GPU's 16 heads do an eighth of the FLOP over the whole latent cache (it is not split by heads), so at
    # TP 8's 16 heads MLA decode is memory-bound (FlashMLA's analysis)
    assert tp8.flop == work.flop / 8 and tp8.weight_bytes == work.weight_bytes


def test_a_sliding_window_limits_the_keys_by_hand():
    # Decodes: 3 sequences at 100, 50 and 10 keys with a window of 32: min(160, 3 · 32) = 96 keys read.
    assert attention_extent(160, 3, (), 32) == (3, 96, 96)
    # A chunk of 4 tokens after 30 cached ones, window 32: query i sees min(31 + i, 32) keys: 31 + 32 + 32 + 32.
    queries, keys, pairs = attention_extent(0, 0, ((4, 30),), 32)
    assert (queries, keys, pairs) == (4, 34, 31 + 32 + 32 + 32)
    assert attention_extent(0, 0, ((4, 30),)) == (4, 34, 4 * 30 + 10)


@pytest.mark.parametrize("text", ["balanced", "uniform", "zipf:1.2"])
def test_routing_assignments_are_distinct_per_token_and_seeded(text):
    routing = Routing.parse(text)
    a = routing.assign(16, 4, 100, seed=3)
    assert a.shape == (100, 4) and all(len(set(row)) == 4 for row in a)
    assert (a == routing.assign(16, 4, 100, seed=3)).all()
    counts = np.bincount(a.ravel(), minlength=16)
    if text == "balanced":
        assert counts.max() - counts.min() <= 1  # as evenly as possible
    if text == "zipf:1.2":
        assert counts[0] > 2 * counts[-1]  # the hot expert sees many more


def test_expected_touched_and_its_inverse():
    uniform, balanced = Routing.parse("uniform"), Routing.parse("balanced")
    assert uniform.expected_touched(8, 2, 1) == pytest.approx(2)
    assert uniform.expected_touched(8, 2, 64) == pytest.approx(8 * (1 - (1 - 2 / 8) ** 64))
    assert balanced.expected_touched(128, 8, 4) == 32 and balanced.expected_touched(128, 8, 256) == 128
    # Qwen3-30B-A3B at batch 256, balanced: 2048 assignments over 128 experts, 16 tokens each.
    assert balanced.tokens_per_expert(128, 8, 256) == 16
    for routing in (uniform, balanced, Routing.parse("zipf:1")):
        tokens = routing.global_tokens(128, 8, 40.0)
        assert routing.tokens_per_expert(128, 8, tokens) == pytest.approx(40.0, rel=1e-6)
    assert math.isinf(balanced.global_tokens(8, 2, float("inf")))


def test_block_scaled_and_4_bit_formats_count_their_scales():
    from roofline.core.counting import gemm_activation_bytes

    # fp8-block: a byte a weight and an fp32 scale per 128x128 block; activations a byte each and an fp32 per 128
    assert matrix_weight_bytes("fp8-block", 7168, 2048) == 7168 * 2048 + (7168 // 128) * (2048 // 128) * 4
    assert gemm_activation_bytes("fp8-block", 3, 2048) == 3 * (2048 + 16 * 4)
    # nvfp4: half a byte a value and an e4m3 scale per 16, weights and activations alike
    assert matrix_weight_bytes("nvfp4", 64, 4096) == 64 * 4096 // 2 + 64 * 256
    assert gemm_activation_bytes("nvfp4", 2, 4096) == 2 * (2048 + 256)
    # mxfp4: half a byte a value and a one-byte power-of-two scale per 32, bf16 activations
    assert matrix_weight_bytes("mxfp4", 64, 4096) == 64 * 2048 + 64 * 128
    assert gemm_activation_bytes("mxfp4", 2, 4096) == 2 * 4096 * 2


def test_a_format_without_a_peak_on_the_sku_is_timed_by_its_bytes(tmp_path):
    from click.testing import CliRunner

    from microbench.cli.app import main
    from roofline.specs.gpus import load_gpu_spec

    def decode(gpu):
        run = CliRunner().invoke(main, ["decode", "--analytic", "--gpu", gpu, "--model", "llama-3-8b", "--dtype",
                                        "nvfp4", "--batch", "1,4096", "--context", "128", "--json"])
        assert run.exit_code == 0, run.output
        return json.loads(run.output[: run.output.rindex("}") + 1])["analytic"]

    b200, h200 = decode("b200"), decode("h200-sxm")
    # The achievable fp4 peak (as the analytic profile's), never another precision's.
    assert b200["peak_flop_per_s"] == load_gpu_spec("b200").achievable.peak_flop_per_s["fp4"]
    assert b200["crossing"] is not None
    assert h200["peak_flop_per_s"] is None and h200["crossing"] is None
    assert any("no peak for fp4" in w for w in h200["warnings"])


def test_a_cpu_sweep_of_a_block_scaled_format_says_the_cpu_has_no_kernel(tmp_path):
    from click.testing import CliRunner

    from microbench.cli.app import main
    from roofline.result.io import load_result

    path = tmp_path / "r.json"
    run = CliRunner().invoke(main, ["sweep", "--device", "cpu", "--op", "gemm", "--dtype", "fp32,fp8-block,mxfp4",
                                    "--shape", "256x256", "--batch", "1", "--budget", "0.02", "--no-ceilings", "-o",
                                    str(path)])
    assert run.exit_code == 0, run.output
    reasons = {p.dtype: p.reason for p in load_result(path).points if p.status == "unsupported"}
    assert "the CPU has no kernel" in reasons["fp8-block"] and "counted analytically" in reasons["mxfp4"]


# Hand-checked cases for rules a plausible slip would break silently (each of these broke no test before).

def test_mla_keeps_its_whole_latent_cache_on_every_tensor_parallel_rank():
    # MLA's cache is one latent and one rope key per token, shared by all heads: splitting heads splits nothing.
    m = config("deepseek-v3")
    for tp in (1, 2, 8):
        assert kv_bytes_per_token(StepModel.of(m, tp=tp)) == 61 * (512 + 64) * 2
    # GQA's K and V are per KV head: TP 8 keeps an eighth.
    dense = config("llama-3.1-70b")
    assert kv_bytes_per_token(StepModel.of(dense, tp=8)) * 8 == kv_bytes_per_token(StepModel.of(dense)) == 80 * 2 * 8 \
        * 128 * 2


@pytest.mark.parametrize("dtype", ["w8a16", "w4a16", "fp8-block", "nvfp4", "mxfp4"])
def test_a_quantized_moe_keeps_its_router_and_lm_head_in_bf16(dtype):
    step = StepModel.of(config("mixtral-8x7b"), dtype=dtype)
    stored = {lin.name: lin.dtype for lin in step.linears}
    assert stored["router"] == stored["lm_head"] == "bf16"
    assert {g.dtype for g in step.grouped} == {dtype}


def test_mxfp4_quantizes_a_mixtures_experts_and_nothing_else():
    # gpt-oss's checkpoints: MXFP4 experts; attention, router and LM head in bf16 (its modules_to_not_convert).
    step = StepModel.of(config("gpt-oss-120b"), dtype="mxfp4")
    assert {lin.name: lin.dtype for lin in step.linears} == {"qkv_proj": "bf16", "o_proj": "bf16", "router": "bf16",
                                                             "lm_head": "bf16"}
    assert {g.dtype for g in step.grouped} == {"mxfp4"}


def test_a_verification_step_runs_the_lm_head_on_every_checked_draft():
    # 4 sequences verifying 3 drafts each: 4 × (3 + 1) rows of logits, not one per sequence.
    step = StepModel.of(config("llama-3.1-70b"))
    head = next(launch for launch in step.launches(Batch.decode(4, 100, queries=4)) if launch.name == "lm_head")
    assert head.tokens == 16
    assert head.work.flop == 2 * 16 * 128256 * 8192


def test_an_all_to_all_sends_a_token_once_to_each_rank_holding_one_of_its_experts():
    """One rank: nothing.  Every rank holding one of every token's experts (as many experts as ranks, top-k of all):
    each token to every rank, vLLM's all-gather.  In between, fewer bytes than a copy per expert, more than one."""
    from roofline.core.counting import all_to_all_bytes

    assert all_to_all_bytes("bf16", 100, 4096, 8, 64, 1) == 0
    assert all_to_all_bytes("bf16", 100, 4096, 8, 8, 8) == 100 * 4096 * 2 * 8
    some = all_to_all_bytes("bf16", 100, 4096, 2, 64, 8)  # 2 of 64 experts: a rank holds one w.p. 1 - 56*55/(64*63)
    assert some == pytest.approx(100 * 4096 * 2 * 8 * (1 - 56 * 55 / (64 * 63)))
    assert 100 * 4096 * 2 < some < 100 * 4096 * 2 * 2
