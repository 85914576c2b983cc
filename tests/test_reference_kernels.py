"""Issue 40's kernel model: mixtures of experts measured like GEMMs (the fused MoE table, power-law routing, EP and
past the table's rows), MLA and attention from the database's tables with measured floors, elementwise launches
at the database's launch floor, no efficiency above a format's achievable peak, a SKU the database lacks carried
from its generation, and a profile's token grid never read past.  Checked against the database's own rows, read
here with pyarrow apart from gpubench's reader; the tests without the database run everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import NEEDS_DATABASE, needs_database

from microbench.cli.app import main
from roofline.core.counting import PEAK_DTYPES, count_work
from roofline.core.errors import BadInputError
from roofline.decode.ceilings import sku_basis
from roofline.specs.gpus import load_gpu_spec, load_gpu_specs
from roofline.specs.hf_config import load_hf_config
from roofline.specs.models import load_model, step_formats
from roofline.step.batch import Batch
from roofline.step.launches import StepModel
from roofline.step.routing import Routing

CONFIGS = Path(__file__).parent / "data" / "hf-configs"


def _rows(system: str, family: str, filename: str, **equal) -> list[dict]:
    import pyarrow.parquet as pq

    from roofline.reference import database

    path, _ = database.open_database().table(system, family, "vllm", filename)
    return [r for r in pq.read_table(path).to_pylist() if all(r[k] == v for k, v in equal.items())]


def _step(config: str, tp: int = 1, ep: int = 1, routing: str = "power-law:1.2") -> StepModel:
    model, dtype, kv, _ = step_formats(load_hf_config(CONFIGS / f"{config}.json"), None, None)
    return StepModel.of(model, tp, ep, dtype, kv, routing)


# ------------------------------------------------------------------ routing (no database)
@pytest.mark.parametrize("experts, topk, tokens", [(128, 8, 4), (128, 8, 16), (128, 8, 64), (256, 8, 8),
                                                   (8, 2, 64)])
def test_power_law_routings_expected_touched_is_its_seeded_draws_mean(experts, topk, tokens):
    """The formula (E · P(x ≥ ½·E·E[x]/(T·k))) against 300 seeded draws of the collector's law, laid out as it deals
    them: every row's k experts distinct."""
    law = Routing.parse("power-law:1.2")
    draws = [law.assign(experts, topk, tokens, seed) for seed in range(300)]
    assert all(len(set(row)) == topk for draw in draws for row in draw)
    touched = np.mean([len(np.unique(draw)) for draw in draws])
    assert law.expected_touched(experts, topk, tokens) == pytest.approx(touched, rel=0.05)
    # Skewed: fewer experts touched than balanced routing's min(E, T·k) once the assignments outnumber the experts.
    if tokens * topk > 2 * experts:
        assert law.expected_touched(experts, topk, tokens) <= experts


def test_power_law_is_spelled_as_typed_and_refused_in_one_line_where_the_collector_cannot_draw_it():
    assert Routing.parse("power-law:1.01").spelled == "power-law:1.01"
    for text, message in (("power-law:1", "ALPHA != 1"), ("power-law:x", "needs a number ALPHA"),
                          ("power-law:0", "0 < ALPHA")):
        with pytest.raises(BadInputError, match=message) as caught:
            Routing.parse(text)
        assert "\n" not in str(caught.value)


def test_zipf_says_it_is_gpubenchs_own_law_not_the_databases():
    from roofline.reference.moe import distribution

    assert distribution("power-law:1.2") == "power_law_1.2" and distribution("balanced") == "balanced"
    with pytest.raises(BadInputError, match="gpubench's own law"):
        distribution("zipf:1.2")


# ------------------------------------------------------------------ no efficiency above a ceiling
@pytest.mark.parametrize("efficiency", ["flat", pytest.param("reference", marks=NEEDS_DATABASE)])
def test_no_launch_runs_above_its_skus_achievable_peak_of_its_format(efficiency):
    """Every SKU, every format it has a peak for: a GEMM large enough to be compute-bound is never timed faster
    than its FLOP at the SKU's achievable peak of that format (an efficiency from bf16's curves times fp8's datasheet
    peak would be)."""
    for gpu in load_gpu_specs().values():
        for dtype in PEAK_DTYPES:
            peak = gpu.achievable.peak_for(dtype)
            if not peak or not gpu.peak_for(dtype):
                continue
            basis = sku_basis(gpu, dtype, {dtype, "bf16"}, efficiency="auto" if efficiency == "reference" else "flat")
            step = StepModel.of(load_model("llama-3-70b"), dtype=dtype if dtype in ("bf16", "fp16", "fp8") else "bf16")
            launch = step.linear_launch(step.linears[0], 65536)
            if launch.dtype != dtype:
                continue
            work = count_work("gemm", dtype, 65536, launch.n, launch.k)
            assert basis.time_s(launch) >= work.flop / peak * (1 - 1e-12), (gpu.sku, dtype)


# ------------------------------------------------------------------ prefill on the grid it needs (no database)
def test_a_profile_file_whose_grid_ends_before_the_largest_step_is_refused_naming_the_flag(tmp_path):
    profile = tmp_path / "p.json"
    made = CliRunner().invoke(main, ["profile", "--analytic", "--gpu", "h200-sxm", "--model", "llama-3-8b",
                                     "--max-tokens", "4096", "--max-context", "2048", "--efficiency", "flat",
                                     "-o", str(profile)])
    assert made.exit_code == 0, made.output
    run = CliRunner().invoke(main, ["simulate", str(profile), "--policy", "static:batch=8", "--requests", "8",
                                    "--arrivals", "burst", "--prompt", "fixed:1024", "--output", "fixed:16",
                                    "--no-report", "-o", str(tmp_path / "sim")])
    assert run.exit_code == 2 and len(run.output.strip().splitlines()) == 1, run.output
    assert "a static step of up to 8192 tokens" in run.output and "--max-tokens 8192" in run.output


def test_simulate_analytic_builds_its_grid_up_to_the_workloads_largest_step(tmp_path):
    """The same workload on --analytic runs (the refusal above would stop it otherwise): its profile's grid is
    built up to the static batch's 8,192 tokens, read there, not extrapolated from 4,096."""
    run = CliRunner().invoke(main, ["simulate", "--analytic", "--gpu", "h200-sxm", "--model", "llama-3-8b",
                                    "--max-tokens", "4096", "--max-context", "2048", "--efficiency", "flat",
                                    "--policy", "static:batch=8", "--requests", "8", "--arrivals", "burst",
                                    "--prompt", "fixed:1024", "--output", "fixed:16", "--no-report",
                                    "-o", str(tmp_path / "sim")])
    assert run.exit_code == 0, run.output


def test_the_largest_step_of_each_policy():
    from roofline.serving.policies import parse_policy
    from roofline.serving.simulate import largest_step_tokens
    from roofline.serving.workload import Request

    requests = [Request(i, 0.0, 1000 + i, 10) for i in range(20)]
    assert largest_step_tokens(parse_policy("static:batch=8"), requests) == 8 * 1019
    assert largest_step_tokens(parse_policy("chunked:budget=512"), requests) == 512
    assert largest_step_tokens(parse_policy("continuous:max-tokens=4096"), requests) == 4096
    assert largest_step_tokens(parse_policy("continuous:max-tokens=512"), requests) == 1019  # one prompt alone


# ------------------------------------------------------------------ the database
@needs_database
def test_a_fused_moe_layer_is_its_measured_time_fixed_cost_included_under_power_law_routing():
    """Qwen3-30B-A3B at one token: the database's fused layer (~40 us, against ~17 us of two experts' weight
    bytes per token at the datasheet's bandwidth) is what auto and reference charge, split between the two
    grouped GEMMs; at 64 tokens the power_law_1.2 row, not balanced's."""
    step = _step("qwen3-30b-a3b")
    basis = sku_basis(load_gpu_spec("h200-sxm"), "bf16", {"bf16"}, efficiency="reference", step=step)
    for tokens in (1, 64):
        [row] = _rows("h200_sxm", "moe", "moe_perf.parquet", moe_dtype="bfloat16", hidden_size=2048, inter_size=768,
                      topk=8, num_experts=128, moe_tp_size=1, moe_ep_size=1, distribution="power_law_1.2",
                      num_tokens=tokens)
        charged = sum(basis.time_s(step.grouped_launch(g, tokens)) for g in step.grouped)
        assert charged == pytest.approx(row["latency"] * 1e-3, rel=1e-9)
    one = sum(basis.time_s(step.grouped_launch(g, 1)) for g in step.grouped)
    weights = sum(step.grouped_launch(g, 1).work.bytes for g in step.grouped) / 4.8e12
    assert one > 2 * weights


@needs_database
def test_the_moe_table_is_kept_under_ep_held_below_its_rows_and_carried_past_them():
    from roofline.reference import database
    from roofline.reference.moe import MoeTable

    table = MoeTable.read(database.open_database(), load_gpu_spec("h200-sxm"), "vllm", "bf16", 2048, 768, 8, 128,
                          1, 2, "power-law:1.2")
    assert table.tokens[0] == 1 and table.tokens[-1] == 16384
    assert table.time_for(0.5) == table.time_s[0]  # below: the smallest row's time
    last = table.time_s[-1] / table.tokens[-1]
    assert table.time_for(65536) == pytest.approx(last * 65536)  # past: the largest row's time per token
    # A profile at EP 2 keeps it (it fell back to the analytic basis whole), on the grid of rows EP gives.
    step = _step("qwen3-30b-a3b", ep=2)
    basis = sku_basis(load_gpu_spec("h200-sxm"), "bf16", {"bf16"}, efficiency="reference", step=step)
    assert basis.kernels.moe_exact and "experts: the fused layer" in basis.basis
    rows = step.grouped_tokens(64)  # 64 tokens of the group: 256 rows on each GPU
    charged = sum(basis.time_s(step.grouped_launch(g, rows)) for g in step.grouped)
    assert charged == pytest.approx(table.time_for(64), rel=1e-9)


@needs_database
def test_an_fp8_moe_table_slower_than_bf16_is_set_aside_and_said():
    from roofline.reference import database
    from roofline.reference.moe import MoeTable

    table = MoeTable.read(database.open_database(), load_gpu_spec("h200-sxm"), "vllm", "fp8", 2048, 768, 8, 128,
                          1, 1, "balanced")
    assert table.set_aside > 2  # vLLM 0.24.0's fp8 per-tensor fused MoE on the H200: ~3x bf16's time
    assert "bf16's rows" in table.describe() and "describes that kernel, not the format" in table.describe()


@needs_database
def test_attention_comes_from_the_generation_table_and_a_shape_it_lacks_never_under_its_fastest_launch():
    from roofline.reference import database
    from roofline.reference.kernels import attention_floor

    step = _step("qwen3-30b-a3b")
    basis = sku_basis(load_gpu_spec("h200-sxm"), "bf16", {"bf16"}, efficiency="auto", step=step)
    rows = {r["step"]: r["latency"] * 1e-3 for r in _rows(
        "h200_sxm", "attention", "generation_attention_perf.parquet", batch_size=1, num_heads=32,
        num_key_value_heads=4, head_dim=128, kv_cache_dtype="bfloat16", window_size=0,
        kernel_source="vllm_flash_attn_fa3")}
    launch = step.mixer_launch(step.main_mixer, 1, Batch.decode(1, 1023))
    assert basis.time_s(launch) == pytest.approx(rows[1023], rel=1e-9)
    floor = attention_floor(database.open_database(), "h200_sxm", "vllm").time_s
    assert floor == pytest.approx(min(r["latency"] for r in _rows(
        "h200_sxm", "attention", "generation_attention_perf.parquet")) * 1e-3)
    # A head shape the database never ran (3 heads a GPU): its roofline, but at least the fastest launch measured.
    odd = StepModel.of(load_model("llama-3-8b"), dtype="bf16")
    odd_basis = sku_basis(load_gpu_spec("h200-sxm"), "bf16", {"bf16"}, efficiency="auto", step=odd)
    assert odd_basis.time_s(odd.mixer_launch(odd.main_mixer, 1, Batch.decode(1, 1))) >= floor


@needs_database
def test_each_elementwise_launch_costs_at_least_the_databases_elementwise_launch_floor(tmp_path):
    small = [r["latency"] * 1e-3 for r in _rows("h200_sxm", "quantize", "scale_matrix_perf.parquet")
             if 3 * r["m"] * r["k"] < 64 * 1024]
    floor = float(np.median(small))
    path = tmp_path / "p.json"
    made = CliRunner().invoke(main, ["profile", "--analytic", "--gpu", "h200-sxm", "--hf-config",
                                     str(CONFIGS / "qwen3-30b-a3b.json"), "--max-tokens", "64", "--max-context",
                                     "2048", "-o", str(path)])
    assert made.exit_code == 0, made.output
    other = json.loads(path.read_text())["other"]
    step = _step("qwen3-30b-a3b")
    # 48 layers: 2 norms (the residual add fused) and a rotary embedding each, the final norm; the MoE's activation
    # is inside its fused kernel.
    assert step.elementwise_launches() == 48 * 3 + 1
    assert other["time_s"][0] >= step.elementwise_launches() * floor
    assert "the launch floor" in json.loads(path.read_text())["basis"]


@needs_database
def test_mla_takes_the_databases_module_table_less_its_projections():
    """DeepSeek-V3 at TP 8: one layer's MLA projections and attention at batch 1 add up to vLLM's measured
    DeepseekV2MLAAttention module (16 heads a GPU, fp8-block projections, bf16 KV)."""
    step = _step("deepseek-v3", tp=8, routing="power-law:1.01")
    basis = sku_basis(load_gpu_spec("h200-sxm"), "fp8-block", {"fp8-block", "bf16"}, efficiency="auto", step=step)
    assert basis.kernels.mla and basis.kernels.generation is not None
    rows = {r["step"]: r["latency"] * 1e-3 for r in _rows(
        "h200_sxm", "mla", "mla_generation_module_perf.parquet", num_heads=16, batch_size=1,
        gemm_type="fp8_block", kv_cache_dtype="bfloat16")}
    attention = basis.time_s(step.mixer_launch(step.main_mixer, 1, Batch.decode(1, 1024)))
    projections = sum(basis.time_s(step.linear_launch(lin, 1)) for lin in step.linears if lin.part == "attention")
    assert attention + projections == pytest.approx(rows[1024], rel=1e-6)


@needs_database
def test_a_sku_the_database_lacks_carries_its_generations_nearest_covered_skus_efficiencies():
    target, source = load_gpu_spec("h100-nvl"), load_gpu_spec("h100-sxm")
    step = StepModel.of(load_model("llama-3-8b"), dtype="bf16")
    carried = sku_basis(target, "bf16", {"bf16"}, efficiency="auto", step=step)
    own = sku_basis(source, "bf16", {"bf16"}, efficiency="auto", step=step)
    assert carried.efficiency == "reference"
    assert carried.basis.startswith("h100-sxm efficiencies carried to h100-nvl")
    from roofline.core.roof import roof_time_s

    for tokens in (1, 64):  # the same fraction of each SKU's datasheet roofline (memory-bound: no peak cap)
        launch = step.linear_launch(step.linears[0], tokens)
        work = launch.work
        ratio = roof_time_s(work.flop, work.bytes, target.bandwidth_bytes_per_s, target.peak_for("bf16")) / \
            roof_time_s(work.flop, work.bytes, source.bandwidth_bytes_per_s, source.peak_for("bf16"))
        assert carried.time_s(launch) == pytest.approx(own.time_s(launch) * ratio, rel=1e-9)


@needs_database
def test_profile_reference_sets_aside_a_gemm_table_slower_than_bf16_as_the_basis_does():
    """vLLM 0.24.0's fp8-block GEMMs (DeepGEMM) on the H200 run a median 3.1x bf16's: a reference profile of
    DeepSeek-V3 reads none of them (a step of 64 tokens on them and one of 1 token on bf16's efficiency would not be
    one model), and says so per linear."""
    from roofline.serving.profiles.reference import reference_profile

    model, dtype, kv, _ = step_formats(load_hf_config(CONFIGS / "deepseek-v3.json"), None, None)
    profile = reference_profile(model, tp=8, dtype=dtype, kv_dtype=kv, max_tokens=256, max_context=2048,
                                gpu=load_gpu_spec("h200-sxm"), routing="power-law:1.01")
    o_proj = next(t for t in profile.linears if t.name == "o_proj")
    assert "slower than its bf16 ones" in o_proj.source and "set aside" in o_proj.source
