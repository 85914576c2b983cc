"""Every config.json of the models served at the end of 2026 (tests/data/hf-configs/), read as the step model reads it:
total and active parameters against a count written here from the config's own numbers (within 1%, the input
embedding included), what one sequence keeps per token and per sequence exactly, and the layer kinds named.  The
whole commands on each config (decode, the analytic and reference profiles, simulate, plan) are the slow tier's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import needs_database

from roofline.core.errors import BadInputError
from roofline.specs.gpus import SpecError
from roofline.specs.hf_config import load_hf_config
from roofline.step.launches import StepModel
from roofline.step.memory import fixed_bytes_per_sequence, kv_bytes_per_token, parameters, state_bytes_per_sequence

CONFIGS = Path(__file__).resolve().parent / "data" / "hf-configs"


def _mla(h, heads, q_lora, kv_lora, nope, rope, v):
    """One MLA layer's matrices: q_a, kv_a (with the rope key), q_b, kv_b, o."""
    return h * q_lora + h * (kv_lora + rope) + q_lora * heads * (nope + rope) + kv_lora * heads * (nope + v) \
        + heads * v * h


def _gqa(h, heads, kv, hd, vd=None, gate=False, shared_kv=False):
    vd = vd or hd
    return h * (heads * hd * (2 if gate else 1) + kv * hd + (0 if shared_kv else kv * vd)) + heads * vd * h


def _moe(h, experts, width, shared=0, gated=True):
    """Routed experts (all of them), the router and the shared experts."""
    per = (3 if gated else 2) * h * width
    return experts * per, h * experts + (3 if gated else 2) * h * shared


# name: (total, active, KV bytes per token, fixed bytes per sequence), each from the config's numbers by hand.
def _expected() -> dict[str, tuple[float, float, int, int]]:
    out = {}
    # DeepSeek-V3: 61 layers, 3 dense (18432), 58 MoE of 256 experts of 2048 (top 8) + 1 shared; MLA 128 heads.
    h, v = 7168, 129280
    mla = _mla(h, 128, 1536, 512, 128, 64, 128)
    experts, rest = _moe(h, 256, 2048, 2048)
    dense = 3 * 3 * h * 18432
    out["deepseek-v3"] = (61 * mla + dense + 58 * (experts + rest) + 2 * v * h,
                          61 * mla + dense + 58 * (experts * 8 / 256 + rest) + 2 * v * h, 61 * 576 * 2, 0)
    # DeepSeek-V3.2: the same and a DSA indexer per layer (wq_b 1536 -> 64 x 128, wk, weights_proj); its fp8 key
    # (128 bytes and a 4-byte scale) cached beside the latent.
    indexer = 1536 * 64 * 128 + h * 128 + h * 64
    out["deepseek-v3.2"] = (out["deepseek-v3"][0] + 61 * indexer, out["deepseek-v3"][1] + 61 * indexer,
                            61 * (576 * 2 + 132), 0)
    # Kimi-K2(.5): DeepSeek-V3's shape with 64 heads, 384 experts, 1 dense layer, a 163840 vocabulary.
    mla = _mla(h, 64, 1536, 512, 128, 64, 128)
    experts, rest = _moe(h, 384, 2048, 2048)
    for name in ("kimi-k2", "kimi-k2.5"):
        out[name] = (61 * mla + 3 * h * 18432 + 60 * (experts + rest) + 2 * 163840 * h,
                     61 * mla + 3 * h * 18432 + 60 * (experts * 8 / 384 + rest) + 2 * 163840 * h, 61 * 576 * 2, 0)
    # GLM-5: 78 layers, 3 dense (12288), 75 MoE of 256 x 2048 top 8 + 1 shared; MLA 64 heads (nope 192, v 256);
    # a DSA indexer of 32 heads of 128.
    h = 6144
    mla = _mla(h, 64, 2048, 512, 192, 64, 256) + 2048 * 32 * 128 + h * 128 + h * 32
    experts, rest = _moe(h, 256, 2048, 2048)
    dense = 3 * 3 * h * 12288
    out["glm-5"] = (78 * mla + dense + 75 * (experts + rest) + 2 * 154880 * h,
                    78 * mla + dense + 75 * (experts * 8 / 256 + rest) + 2 * 154880 * h, 78 * (576 * 2 + 132), 0)
    # Qwen3.5-397B-A17B: 60 layers, 45 Gated DeltaNet (16 key heads, 64 value heads of 128, conv 4) and 15 full
    # attention (32 heads with an output gate, 2 KV heads of 256); every layer 512 experts of 1024 top 10 + a shared
    # expert of 1024 (its one-column gate left out: 0.0001%).  State: 64 x 128 x 128 fp32 and the conv's last 3
    # inputs of 2 x 16 x 128 + 64 x 128 channels in bf16, per linear layer.
    h = 4096
    gdn = h * (2 * 16 * 128 + 2 * 64 * 128) + h * 2 * 64 + 64 * 128 * h
    attention = _gqa(h, 32, 2, 256, gate=True)
    experts, rest = _moe(h, 512, 1024, 1024)
    state = 45 * (64 * 128 * 128 * 4 + (2 * 16 * 128 + 64 * 128) * 3 * 2)
    for name in ("qwen3.5-397b-a17b", "qwen3.5-397b-a17b-nvfp4"):
        out[name] = (45 * gdn + 15 * attention + 60 * (experts + rest) + 2 * 248320 * h,
                     45 * gdn + 15 * attention + 60 * (experts * 10 / 512 + rest) + 2 * 248320 * h,
                     15 * 2 * 2 * 256 * 2, state)
    # Nemotron-3-Super-120B-A12B: 88 blocks, 40 Mamba-2 (128 heads of 64, state 128, 8 groups, conv 4), 8 attention
    # (32 heads, 2 KV heads of 128), 40 latent-MoE (512 experts of 2688 in a 1024 latent, ReLU^2 so up and down,
    # top 22, a shared expert of 5376 on the hidden size).
    h = 4096
    mamba = h * (2 * 8192 + 2 * 8 * 128 + 128) + 8192 * h
    attention = _gqa(h, 32, 2, 128)
    routed, latent = 512 * 2 * 1024 * 2688, 2 * h * 1024
    rest = h * 512 + 2 * h * 5376 + latent
    state = 40 * (128 * 64 * 128 * 4 + (8192 + 2 * 8 * 128) * 3 * 2)
    out["nemotron-3-super-120b-a12b-fp8"] = (40 * mamba + 8 * attention + 40 * (routed + rest) + 2 * 131072 * h,
                                             40 * mamba + 8 * attention + 40 * (routed * 22 / 512 + rest)
                                             + 2 * 131072 * h, 8 * 2 * 2 * 128 * 2, state)
    # gemma-4-26B-A4B: 30 layers, 25 sliding (16 heads, 8 KV heads of 256, a 1024-token window) and 5 global
    # (16 heads, 2 KV heads of 512, keys and values from one projection); each a dense MLP of 2112 beside 128
    # experts of 704 (top 8); tied embeddings of 262144.  The windows' K and V: 25 x 8 x 512 values x 2 B x 1024.
    h = 2816
    attention = 25 * _gqa(h, 16, 8, 256) + 5 * _gqa(h, 16, 2, 512, shared_kv=True)
    experts, rest = _moe(h, 128, 704, 2112)
    out["gemma-4-26b-a4b"] = (attention + 30 * (experts + rest) + 262144 * h,
                              attention + 30 * (experts * 8 / 128 + rest) + 262144 * h,
                              5 * 2 * 2 * 512 * 2, 25 * 8 * 512 * 2 * 1024)
    # MiMo-V2-Flash: 48 layers, 9 full (64 heads, 4 KV heads, q/k 192, v 128) and 39 sliding (8 KV heads, a window
    # of sliding_window_size + 1 = 129); 1 dense layer (16384), 47 of 256 experts of 2048 (top 8).
    h = 4096
    attention = 9 * _gqa(h, 64, 4, 192, 128) + 39 * _gqa(h, 64, 8, 192, 128)
    experts, rest = _moe(h, 256, 2048)
    dense = 3 * h * 16384
    out["mimo-v2-flash"] = (attention + dense + 47 * (experts + rest) + 2 * 152576 * h,
                            attention + dense + 47 * (experts * 8 / 256 + rest) + 2 * 152576 * h,
                            9 * 4 * 320 * 2, 39 * 8 * 320 * 2 * 129)
    # MiniMax-M2.5: 62 layers, 48 heads, 8 KV heads of 128; 256 experts of 1536 (top 8), no shared.
    h = 3072
    experts, rest = _moe(h, 256, 1536)
    attention = _gqa(h, 48, 8, 128)
    out["minimax-m2.5"] = (62 * (attention + experts + rest) + 2 * 200064 * h,
                           62 * (attention + experts * 8 / 256 + rest) + 2 * 200064 * h, 62 * 8 * 256 * 2, 0)
    # Qwen3-Coder-480B-A35B: 62 layers, 96 heads, 8 KV heads of 128; 160 experts of 2560 (top 8).
    h = 6144
    experts, rest = _moe(h, 160, 2560)
    attention = _gqa(h, 96, 8, 128)
    out["qwen3-coder-480b-a35b"] = (62 * (attention + experts + rest) + 2 * 151936 * h,
                                    62 * (attention + experts * 8 / 160 + rest) + 2 * 151936 * h,
                                    62 * 8 * 256 * 2, 0)
    # gpt-oss-120b: 36 layers, 64 heads, 8 KV heads of 64, half of them over a 128-token window; 128 experts of
    # 2880 (top 4).
    h = 2880
    experts, rest = _moe(h, 128, 2880)
    attention = _gqa(h, 64, 8, 64)
    out["gpt-oss-120b"] = (36 * (attention + experts + rest) + 2 * 201088 * h,
                           36 * (attention + experts * 4 / 128 + rest) + 2 * 201088 * h, 18 * 8 * 128 * 2,
                           18 * 8 * 128 * 2 * 128)
    return out


EXPECTED = _expected()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parameters_and_what_a_sequence_keeps_match_the_configs_own_numbers(name):
    model = load_hf_config(CONFIGS / f"{name}.json")
    step = StepModel.of(model, dtype="bf16", kv_dtype="bf16")
    total, active, kv, fixed = EXPECTED[name]
    counts = parameters(step)
    assert counts["total"] + counts["embedding"] == pytest.approx(total, rel=0.01)
    assert counts["active"] + counts["embedding"] == pytest.approx(active, rel=0.01)
    assert kv_bytes_per_token(step) == kv
    assert fixed_bytes_per_sequence(step) == fixed


def test_the_llama_3_1_70b_spec_sheet_is_its_config():
    """profiles/models/llama-3.1-70b.toml (what --model names) has the shapes its config.json has."""
    from roofline.specs.models import load_model

    sheet, config = (StepModel.of(m, dtype="bf16", kv_dtype="bf16") for m in
                     (load_model("llama-3.1-70b"), load_hf_config(CONFIGS / "llama-3.1-70b.json")))
    assert parameters(sheet) == parameters(config)
    assert kv_bytes_per_token(sheet) == kv_bytes_per_token(config)


@pytest.mark.parametrize("name, headline", [("qwen3.5-397b-a17b", (397e9, 17e9)),
                                            ("nemotron-3-super-120b-a12b-fp8", (120e9, 12e9)),
                                            ("gemma-4-26b-a4b", (26e9, 4e9)), ("glm-5", (744e9, 40e9))])
def test_the_headline_sizes(name, headline):
    """The sizes the models are named by: about right (their names round, and gemma's 26B counts its vision tower)."""
    counts = parameters(StepModel.of(load_hf_config(CONFIGS / f"{name}.json")))
    assert counts["total"] + counts["embedding"] == pytest.approx(headline[0], rel=0.05)
    assert counts["active"] + counts["embedding"] == pytest.approx(headline[1], rel=0.1)


def test_linear_attention_keeps_a_quarter_of_the_kv_of_the_same_model_all_full_attention():
    hybrid = load_hf_config(CONFIGS / "qwen3.5-397b-a17b.json")
    config = json.loads((CONFIGS / "qwen3.5-397b-a17b.json").read_text())
    every = dict(config["text_config"], layer_types=["full_attention"] * 60)
    path = Path(pytest.importorskip("tempfile").mkdtemp()) / "full.json"
    path.write_text(json.dumps({**config, "text_config": every}))
    full = load_hf_config(path)
    assert 4 * kv_bytes_per_token(StepModel.of(hybrid)) == kv_bytes_per_token(StepModel.of(full))
    assert state_bytes_per_sequence(StepModel.of(full)) == 0 < state_bytes_per_sequence(StepModel.of(hybrid))


def test_each_config_names_its_layer_kinds():
    words = {name: load_hf_config(CONFIGS / f"{name}.json").describe_layers() for name in EXPECTED}
    assert "45 linear attention" in words["qwen3.5-397b-a17b"] and "15 attention" in words["qwen3.5-397b-a17b"]
    assert "40 Mamba-2" in words["nemotron-3-super-120b-a12b-fp8"] and "in a 1024 latent" in \
        words["nemotron-3-super-120b-a12b-fp8"]
    assert "DSA: top 2048 keys" in words["glm-5"] and "DSA: top 2048 keys" in words["deepseek-v3.2"]
    assert "25 sliding-window attention (1024 tokens" in words["gemma-4-26b-a4b"]
    assert "39 sliding-window attention (129 tokens" in words["mimo-v2-flash"]


def test_the_checkpoints_quantization_sets_each_parts_format_and_dtype_replaces_it():
    from roofline.specs.models import step_formats

    kimi = load_hf_config(CONFIGS / "kimi-k2.5.json")
    assert dict(kimi.formats) == {"experts": "w4a16-g32"}  # compressed-tensors: the routed experts only
    step = StepModel.of(*step_formats(kimi, None, None)[:1], dtype=step_formats(kimi, None, None)[1])
    stored = {lin.name: lin.dtype for lin in step.linears}
    assert {g.dtype for g in step.grouped} == {"w4a16-g32"} and stored["q_b_proj"] == stored["lm_head"] == "bf16"
    model, dtype, kv, note = step_formats(kimi, "w4a16", None)
    assert not model.formats and dtype == "w4a16" and "replaces the checkpoint's quantization" in note
    nvfp4 = load_hf_config(CONFIGS / "qwen3.5-397b-a17b-nvfp4.json")  # ModelOpt's exclude list beside it
    assert dict(nvfp4.formats) == {"experts": "nvfp4"} and nvfp4.kv_format == "fp8"
    assert step_formats(nvfp4, None, None)[2] == "fp8"
    deepseek = load_hf_config(CONFIGS / "deepseek-v3.json")
    assert set(dict(deepseek.formats).values()) == {"fp8-block"}
    assert "router" not in dict(deepseek.formats) and "head" not in dict(deepseek.formats)
    oss = load_hf_config(CONFIGS / "gpt-oss-120b.json")
    assert dict(oss.formats) == {"experts": "mxfp4"}  # its modules_to_not_convert: attention, router, LM head


@pytest.mark.parametrize("change, words", [
    ({"mlp_only_layers": 3}, "mlp_only_layers must be a list of layer indices"),
    ({"mlp_only_layers": [[1]]}, "mlp_only_layers must be a list of layer indices"),
    ({"layer_types": 7}, "layer_types must be a list of one entry per layer"),
    ({"layer_types": [["full_attention"]] * 48}, "layer_types holds"),
    ({"num_hidden_layers": 1073741824}, "is not a model's"),
    ({"first_k_dense_replace": 99}, "leaves none of its 48 layers routed"),
    ({"num_kv_shared_layers": 4}, "num_kv_shared_layers=4"),
    ({"brand_new_key": 1}, "brand_new_key is not a key gpubench knows"),
    ({"attn_logit_softcap": 1}, "attn_logit_softcap is not a key gpubench knows"),
])
def test_a_config_key_it_cannot_model_is_refused_naming_it(tmp_path, change, words):
    config = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, **change}))
    with pytest.raises(SpecError, match=words):
        load_hf_config(path)


def test_the_first_real_reason_comes_before_a_key_it_would_need_after_it(tmp_path):
    config = json.loads((CONFIGS / "qwen3.5-397b-a17b.json").read_text())
    text = dict(config["text_config"])
    text["layer_types"] = ["retention"] + text["layer_types"][1:]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "text_config": text}))
    with pytest.raises(SpecError, match="layer_types holds 'retention'"):
        load_hf_config(path)  # not "lacks intermediate_size", which an all-MoE model never needs


def test_deep_nesting_and_a_huge_name_are_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BadInputError, match="nested 100,000 levels deep"):
        load_hf_config(path)
    config = json.loads((CONFIGS / "qwen3-32b.json").read_text())
    path.write_text(json.dumps({**config, "_name_or_path": "x" * 100_000}))
    assert len(load_hf_config(path).name) <= 200


def _run(*args):
    from microbench.cli.app import main

    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# The split each model is served at on H200s (one HGX board; Kimi-K2 in fp8 needs two, and an NVFP4 checkpoint a
# Blackwell GPU): its weights fit, and its heads divide.
SPLITS = {"deepseek-v3": ("--tp", "8"), "deepseek-v3.2": ("--tp", "8"), "kimi-k2": ("--ep", "16"),
          "kimi-k2.5": ("--tp", "8"), "glm-5": ("--tp", "8", "--dtype", "fp8-block"),
          "qwen3.5-397b-a17b": ("--tp", "8"), "qwen3.5-397b-a17b-nvfp4": ("--tp", "4", "--gpu", "b200"),
          "nemotron-3-super-120b-a12b-fp8": ("--tp", "2"), "gemma-4-26b-a4b": ("--tp", "1"),
          "mimo-v2-flash": ("--tp", "4"), "minimax-m2.5": ("--tp", "4"), "qwen3-coder-480b-a35b": ("--tp", "8"),
          "gpt-oss-120b": ("--tp", "1"), "gpt-oss-20b": ("--tp", "1"), "llama-3.1-70b": ("--tp", "2"),
          "llama-4-maverick": ("--tp", "8"), "mixtral-8x7b": ("--tp", "1"), "qwen3-235b-a22b": ("--tp", "4"),
          "qwen3-30b-a3b": ("--tp", "1"), "qwen3-32b": ("--tp", "1")}


def test_every_shared_config_has_a_split_here():
    assert sorted(SPLITS) == sorted(p.stem for p in CONFIGS.glob("*.json") if "hf_quant" not in p.name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SPLITS))
def test_decode_profile_simulate_and_plan_run_on_every_config(tmp_path, name):
    config, split = str(CONFIGS / f"{name}.json"), SPLITS[name]
    split = split if "--gpu" in split else (*split, "--gpu", "h200-sxm")
    window = load_hf_config(CONFIGS / f"{name}.json").max_positions or 131072
    for context in (4096, min(131072, window)):
        decoded = _run("decode", "--analytic", "--hf-config", config, *split, "--batch", "1,64",
                       "--context", str(context), "--json")
        assert decoded.exit_code == 0, decoded.output
        setup = json.loads(decoded.output)["setup"]
        assert "blocks:" in setup["layers"]
    profile = tmp_path / "p.json"
    made = _run("profile", "--analytic", "--hf-config", config, *split, "--max-tokens", "8192",
                "--max-context", "8192", "-o", str(profile))
    assert made.exit_code == 0, made.output
    simulated = _run("simulate", str(profile), "--requests", "30", "--arrivals", "poisson:2", "--prompt", "fixed:1024",
                     "--output", "fixed:128", "--policy", "paged", "--no-report", "-o", str(tmp_path / "sim"))
    assert simulated.exit_code == 0, simulated.output
    planned = _run("plan", str(profile), "--rate", "1", "--slo", "ttft_p90=5,tpot_p99=0.5", "--requests", "30",
                   "--prompt", "fixed:1024", "--output", "fixed:128", "--no-report", "-o", str(tmp_path / "plan"))
    assert planned.exit_code == 0, planned.output


@needs_database
@pytest.mark.parametrize("name", sorted(SPLITS))
def test_the_reference_profile_of_every_config_simulates(tmp_path, name):
    """The database's tables where it has the kernel (GQA attention, GEMMs, MoE layers of the hidden size), the
    analytic basis elsewhere (latent, sparse, linear and state-space mixers; latent MoE), each table naming which."""
    config, split = str(CONFIGS / f"{name}.json"), SPLITS[name]
    split = split if "--gpu" in split else (*split, "--gpu", "h200-sxm")
    profile = tmp_path / "p.json"
    made = _run("profile", "--reference", "aiconfigurator", "--hf-config", config, *split, "--max-tokens", "8192",
                "--max-context", "4096", "-o", str(profile))
    if "has no data for" in made.output or "has no nvfp4" in made.output:
        pytest.skip(made.output.strip())  # a SKU or format the database does not cover
    assert made.exit_code == 0, made.output
    document = json.loads(profile.read_text())
    for table in document.get("mixers") or []:
        assert table["source"].startswith("not in aiconfigurator-core")
    simulated = _run("simulate", str(profile), "--requests", "20", "--prompt", "fixed:512", "--output", "fixed:64",
                     "--policy", "paged", "--no-report", "-o", str(tmp_path / "sim"))
    assert simulated.exit_code == 0, simulated.output


def test_a_profile_in_a_dtype_of_the_users_says_it_replaces_the_checkpoints_quantization(tmp_path):
    profile = tmp_path / "p.json"
    made = _run("profile", "--analytic", "--gpu", "h200-sxm", "--hf-config", str(CONFIGS / "kimi-k2.5.json"), "--tp",
                "8", "--dtype", "w4a16", "--max-tokens", "256", "--max-context", "512", "-o", str(profile))
    assert made.exit_code == 0, made.output
    document = json.loads(profile.read_text())
    assert "--dtype w4a16 replaces the checkpoint's quantization (experts w4a16-g32)" in document["basis"]
    assert "formats" not in document["model"]  # every matrix in w4a16 as asked
