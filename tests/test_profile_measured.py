"""gpubench profile, measured on the CPU: the grids, a whole tiny profile end to end (it loads as a step
profile and simulates), interruption and --resume, the attention kernels against each other, bad input."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from microbench.cli.engine import item_reporter
from microbench.points.plan import PlanError
from microbench.serving.profile_plan import ProfilePlan, grids_for, plan_items, power_grid, token_grid
from microbench.serving.profile_run import partial_path, prepare_profile, run_profile
from microbench.timing.observer import Interrupted, SweepObserver
from roofline.serving.profile_doc import load_profile
from roofline.serving.simulate import simulate
from roofline.serving.workload import make_workload
from roofline.specs.gpus import SpecError

TINY = Path(__file__).parent / "data" / "tiny-llama-config.json"


def tiny_plan(**extra) -> ProfilePlan:
    fields = {"model": None, "hf_config": str(TINY), "max_tokens": 8, "max_context": 32, "max_batch": 2,
              "device": "cpu", "budget_s": 0.005}
    return ProfilePlan(**{**fields, **extra})


def after_items(run, count: int, action):
    """An on_item callback for run_profile that calls ``action()`` once ``count`` items are measured."""
    def on_item(item, measured):
        if len(run.measured) == count:
            action()
    return on_item


def test_grids_are_dense_where_time_bends_and_end_at_the_limit():
    assert token_grid(16) == (1, 2, 3, 4, 6, 8, 12, 16)
    assert token_grid(10) == (1, 2, 3, 4, 6, 8, 10)
    assert power_grid(16, 100) == (16, 32, 64, 100)
    assert power_grid(16, 8) == (8,)
    grids = grids_for(tiny_plan())
    assert grids.lm_head_tokens == (1, 2) and grids.batches == (1, 2) and grids.contexts == (16, 32)


def test_plan_has_one_item_per_kernel_and_grid_point():
    items = plan_items(tiny_plan(), tiny_plan().check())
    kinds = [item.kind for item in items]
    # 4 linears × 6 token counts + lm_head × 2; decode 2×2; prefill 1 (16 > 8: the limit); chunk 1×2; other 6
    assert kinds.count("linear") == 4 * 6 + 2
    assert (kinds.count("decode"), kinds.count("prefill"), kinds.count("chunk"), kinds.count("other")) == (4, 1, 2, 6)
    assert len({item.key for item in items}) == len(items)


def test_each_item_kind_is_labelled_by_what_it_measures():
    """The progress bar names each kernel as it is ("linear o_proj T=12"), not through a sweep point's fields
    ("linear o_proj 12288x0 B=-")."""
    items = plan_items(tiny_plan(), tiny_plan().check())
    described: list[str] = []
    report = item_reporter(SweepObserver(on_item=described.append))
    for item in items:
        report(item, {"time_s": 1.5e-3})
    first = {}
    for item, text in zip(items, described, strict=True):
        first.setdefault((item.kind, item.name if item.kind == "linear" else ""), text)
    assert first[("linear", "o_proj")] == "linear o_proj T=1  1.5 ms"
    assert first[("linear", "lm_head")] == "linear lm_head T=1  1.5 ms"
    assert first[("decode", "")] == "decode attention B=1 ctx=16  1.5 ms"
    assert first[("prefill", "")] == "prefill attention T=8  1.5 ms"
    assert first[("chunk", "")] == "chunk attention T=8 prefix=16  1.5 ms"
    assert first[("other", "")] == "other kernels T=1  1.5 ms"
    assert not [text for text in described if "B=-" in text or "x0" in text]


@pytest.mark.parametrize("extra, message", [
    ({"hf_config": None}, "one of --model"),
    ({"max_tokens": 0}, "--max-tokens must be positive"),
    ({"attention": "flash"}, "unknown attention kernel"),
    ({"dtype": "fp8"}, "fp32, fp16 or bf16"),
    ({"model": "llama-3-8b", "hf_config": None, "ep": 2}, "has no experts to split"),
])
def test_bad_plans_are_one_line_errors(extra, message):
    with pytest.raises((PlanError, SpecError), match=message):
        tiny_plan(**extra).check()


@pytest.mark.slow
def test_a_tiny_profile_is_measured_whole_and_simulates(tmp_path):
    output = tmp_path / "profile.json"
    run = prepare_profile(tiny_plan(), output, SweepObserver())
    seen = []
    run_profile(run, lambda total: seen.append(total), lambda item, measured: seen.append(item.key))
    assert seen[0] == len(seen) - 1 == len(plan_items(tiny_plan(), tiny_plan().check()))
    assert not partial_path(output).exists()
    loaded = load_profile(output)
    assert loaded.source == "measured" and loaded.dtype == "fp32" and loaded.model["mlp"] == "gated"
    assert [t.name for t in loaded.linears] == ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]
    assert (loaded.linears[0].n, loaded.linears[0].k) == ((4 + 2 * 2) * 64, 256)  # GQA: 4 heads, 2 KV heads
    assert all(t > 0 for table in loaded.linears for t in table.time_s)
    assert all(t > 0 for row in loaded.decode_attention.time_s for t in row)
    assert loaded.roof["bandwidth_bytes_per_s"] > 0
    # The KV capacity is sized from what the device reports: CUDA's own total on a GPU, MemTotal on the CPU.
    import torch

    from microbench.device.provenance import meminfo_bytes
    choice = run.session.choice
    assert loaded.memory["device_bytes"] == (torch.cuda.mem_get_info(choice.index)[1] if choice.kind == "cuda"
                                             else meminfo_bytes("MemTotal"))
    requests = make_workload(8, "burst", "fixed:4", "uniform:2:6", 0)  # a batch of 2 prompts: 8 tokens, the grid's top
    assert simulate(loaded, requests, "static:batch=2").makespan_s > 0


@pytest.mark.slow
def test_an_interrupted_profile_resumes_where_it_stopped(tmp_path):
    output = tmp_path / "profile.json"
    run = prepare_profile(tiny_plan(), output, SweepObserver())
    total = len(run.items)

    def stop() -> None:
        run.session.stop.signum = 2
        run.session.stop.set()

    with pytest.raises(Interrupted):
        run_profile(run, lambda n: None, after_items(run, 3, stop))
    saved = json.loads(partial_path(output).read_text())
    assert len(saved["measured"]) == 3 and not output.exists()
    with pytest.raises(PlanError, match="--resume"):
        prepare_profile(tiny_plan(), output, SweepObserver())
    resumed = prepare_profile(tiny_plan(), output, SweepObserver(), resume=True)
    assert len(resumed.items) == total - 3
    resumed.session.stop = threading.Event()
    run_profile(resumed, lambda n: None, lambda item, measured: None)
    assert load_profile(output).decode_attention.kernel == "sdpa"


def test_attention_kernels_agree_gqa_and_chunk_mask():
    """The bmm path (grouped query heads per KV head, explicit causal mask over the prefix) computes the same
    attention as SDPA: decode, a whole causal prompt, and a chunk over a cached prefix."""
    import torch

    from microbench.serving.profile_kernels import AttentionShape, AttentionWorkload

    shape = AttentionShape(heads=4, kv_heads=2, head_dim=16)
    for batch, q_len, kv_len in ((3, 1, 20), (1, 12, 12), (1, 5, 17)):
        outs = []
        for kernel in ("sdpa", "bmm"):
            workload = AttentionWorkload(torch, shape, batch, q_len, kv_len, "fp32", kernel, "cpu", 1, seed=3)
            workload.launch(0)
            outs.append(workload.out[0].reshape(batch, shape.heads, q_len, shape.head_dim))
        assert torch.allclose(outs[0], outs[1], atol=1e-5), (batch, q_len, kv_len)


def test_a_chunk_over_a_prefix_calls_sdpa_as_transformers_does(monkeypatch):
    """With a mask, K and V repeated to every query head and no enable_gqa (on CUDA, mask plus GQA leaves SDPA
    only its math path, which the engine never runs); without one, GQA is passed to SDPA."""
    import torch

    from microbench.serving.profile_kernels import AttentionShape, AttentionWorkload

    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def recording(q, k, v, **kwargs):
        calls.append((k.shape[1], kwargs.get("attn_mask") is not None, kwargs.get("enable_gqa", False)))
        return real(q, k, v, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    shape = AttentionShape(heads=8, kv_heads=2, head_dim=16)
    for q_len, kv_len in ((5, 17), (1, 17)):
        AttentionWorkload(torch, shape, 2, q_len, kv_len, "fp32", "sdpa", "cpu", 1, seed=3).launch(0)
    assert calls == [(8, True, False), (2, False, True)]


def test_profile_command_bad_input_and_analytic_passthrough(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["profile", "--hf-config", str(TINY), "--attention", "bmm", "--max-tokens", "0",
                                  "--device", "cpu", "-o", str(tmp_path / "p.json")])
    assert result.exit_code == 2 and "--max-tokens must be positive" in result.output
    result = runner.invoke(main, ["profile", "--analytic", "--gpu", "h200-sxm", "--model", "llama-3-8b",
                                  "--device", "cpu", "-o", str(tmp_path / "a.json")])
    assert result.exit_code == 2 and "--analytic measures nothing: drop --device" in result.output
    result = runner.invoke(main, ["profile", "--analytic", "--gpu", "h200-sxm", "--model", "llama-3-8b",
                                  "-o", str(tmp_path / "a.json")])
    assert result.exit_code == 0, result.output
    assert load_profile(tmp_path / "a.json").source == "analytic"
    assert not (tmp_path / "p.json").exists()


def test_an_existing_file_that_is_not_a_profile_is_never_overwritten(tmp_path):
    result_file = tmp_path / "sweep.json"
    result_file.write_text('{"kind": "gpubench-result"}')
    run = CliRunner().invoke(main, ["profile", "--hf-config", str(TINY), "--device", "cpu", "-o", str(result_file)])
    assert run.exit_code == 2 and "not overwriting it" in run.output
    assert result_file.read_text() == '{"kind": "gpubench-result"}'


TINY_MLA = Path(__file__).parent / "data" / "tiny-mla-config.json"


@pytest.mark.parametrize("batch, q_len, kv_len", [(3, 1, 20), (1, 6, 6), (2, 4, 12)])
def test_absorbed_mla_attention_is_the_attention_of_the_up_projected_keys_and_values(batch, q_len, kv_len):
    """The tiny MLA model's attention as the profile times it (absorbed: every head's query against the shared
    latent + rope cache, the weights times the latent), checked against MLA written out: each head's keys and
    values up-projected from the latent (W_UK, W_UV), its nope and rope parts, the softmax scaled by the
    query-key width; decode, a whole causal prompt, and a chunk over a cached prefix."""
    import torch

    from microbench.serving.profile_kernels import AttentionWorkload
    from microbench.serving.profile_plan import attention_shape
    from roofline.specs.hf_config import load_hf_config

    model = load_hf_config(TINY_MLA)
    shape = attention_shape(model, 1)
    heads, latent, rope = shape.heads, model.kv_lora_rank, model.qk_rope_head_dim
    nope, v_dim = model.head_dim - rope, model.v_head_dim
    assert (heads, shape.latent, shape.rope, shape.head_dim, shape.cached_values) == (4, 64, 16, 48, 80)
    g = torch.Generator().manual_seed(7)
    q_nope, q_rope = (torch.randn(batch, heads, q_len, d, generator=g) for d in (nope, rope))
    cache, k_rope = torch.randn(batch, kv_len, latent, generator=g), torch.randn(batch, kv_len, rope, generator=g)
    w_uk, w_uv = torch.randn(heads, nope, latent, generator=g), torch.randn(heads, v_dim, latent, generator=g)
    # Written out: per head, keys [nope from the latent, the shared rope key], values from the latent.
    keys = torch.cat([torch.einsum("hnl,bcl->bhcn", w_uk, cache), k_rope[:, None].expand(-1, heads, -1, -1)], -1)
    values = torch.einsum("hvl,bcl->bhcv", w_uv, cache)
    scores = torch.cat([q_nope, q_rope], -1) @ keys.transpose(-1, -2) / (nope + rope) ** 0.5
    allowed = torch.arange(kv_len)[None, :] <= torch.arange(q_len)[:, None] + (kv_len - q_len)
    expected = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ values  # [b, h, q, v]

    workload = AttentionWorkload(torch, shape, batch, q_len, kv_len, "fp32", "sdpa", "cpu", 1, seed=3)
    absorbed_q = torch.cat([torch.einsum("bhqn,hnl->bhql", q_nope, w_uk), q_rope], -1)  # [b, h, q, latent + rope]
    assert workload.q[0].shape == (batch, heads * q_len, latent + rope)
    assert workload.k[0].shape == (batch, kv_len, latent + rope)
    workload.q[0] = absorbed_q.reshape(batch, heads * q_len, latent + rope)
    workload.k[0] = torch.cat([cache, k_rope], -1)
    workload.launch(0)
    out = workload.out[0]
    assert out.shape == (batch, heads * q_len, latent)  # one latent per head and query, up-projected by W_UV after
    got = torch.einsum("bhql,hvl->bhqv", out.reshape(batch, heads, q_len, latent), w_uv)
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_a_tiny_mla_mixture_is_profiled_and_simulates(tmp_path):
    """A DeepSeek-V3-like model (MLA, 8 routed experts top-2, one shared, the first layer dense) measured on the
    CPU: every table of its step (MLA's projections, the dense layer's MLP, router, shared and routed experts, the
    absorbed attention over its latent cache), loaded as a profile and simulated."""
    output = tmp_path / "mla.json"
    run = CliRunner().invoke(main, ["profile", "--hf-config", str(TINY_MLA), "--device", "cpu", "--max-tokens", "4",
                                    "--max-context", "16", "--max-batch", "2", "--budget", "0.002", "--energy", "-o",
                                    str(output)])
    assert run.exit_code == 0, run.output
    profile = load_profile(output)
    assert "CPU has no energy counter" in profile.power_figure["why_none"]  # --energy on the CPU: says why none
    assert profile.model["attention"] == "mla" and profile.model["kv_lora_rank"] == 64
    assert [t.name for t in profile.linears] == ["qkv_a_proj", "q_b_proj", "kv_b_proj", "o_proj", "gate_up_proj",
                                                 "down_proj", "router", "shared_gate_up_proj", "shared_down_proj"]
    by_name = {t.name: t for t in profile.linears}
    assert (by_name["qkv_a_proj"].n, by_name["kv_b_proj"].n, by_name["kv_b_proj"].k) == (96 + 64 + 16, 4 * 64, 64)
    assert by_name["gate_up_proj"].layers == 1 and by_name["router"].layers == 1  # one dense layer, one routed
    assert [(g.name, g.n, g.k, g.experts, g.topk) for g in profile.grouped] == [
        ("experts_gate_up_proj", 256, 256, 8, 2), ("experts_down_proj", 256, 128, 8, 2)]
    assert profile.memory["kv_bytes_per_token"] == 2 * (64 + 16) * 4  # two layers of latent + rope key, fp32
    tables = [t.time_s for t in (*profile.linears, *profile.grouped)] + list(profile.decode_attention.time_s)
    assert all(t > 0 for times in tables for t in times)
    simulated = CliRunner().invoke(main, ["simulate", str(output), "--requests", "8", "--prompt", "fixed:2",
                                          "--output", "uniform:2:6", "--policy", "static:batch=2", "--no-report",
                                          "-o", str(tmp_path / "sim")])
    assert simulated.exit_code == 0, simulated.output
    document = json.loads((tmp_path / "sim" / "simulation.json").read_text())
    assert document["runs"][0]["composition_s"]["linear_s"] > 0
