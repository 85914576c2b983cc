"""Step-profile documents: round trip, validation on load, the analytic builder and the step-cost model."""

from __future__ import annotations

import json

import pytest

from roofline.core.counting import count_work
from roofline.core.interpolate import interp1
from roofline.serving.profile_doc import EngineOverhead, ProfileDocError, StepProfile, load_profile, save_profile
from roofline.serving.profiles.analytic import analytic_profile, token_grid
from roofline.serving.step_cost import CostModel
from roofline.specs.gpus import load_gpu_spec
from roofline.specs.models import load_model


@pytest.fixture(scope="module")
def llama_h200() -> StepProfile:
    return analytic_profile(load_model("llama-3-8b"), tp=1, dtype="bf16", kv_dtype="bf16", max_tokens=8192,
                            max_context=8192, gpu=load_gpu_spec("h200-sxm"))


def test_round_trip_through_a_file(tmp_path, llama_h200):
    path = tmp_path / "p.json"
    save_profile(llama_h200, path)
    assert load_profile(path) == llama_h200
    assert json.loads(path.read_text())["kind"] == "gpubench-step-profile"


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(kind="gpubench-result"), "not a step profile"),
    (lambda d: d.update(schema_version=2), "schema_version 2"),
    (lambda d: d["model"].update(mlp="moe"), "model.mlp"),
    (lambda d: d["linears"][0].update(tokens=[4, 2, 8]), "strictly increasing"),
    (lambda d: d["linears"][0]["time_s"].pop(), "list of"),
    (lambda d: d["decode_attention"]["time_s"][0].__setitem__(0, -1.0), "seconds from 0"),
    (lambda d: d.update(device="h100"), "device must be an object"),
    (lambda d: d.update(model="llama"), "model must be an object"),
    (lambda d: d.update(memory="80GB"), "memory must be an object"),
    (lambda d: d.update(roof="3.35TB/s"), "roof must be an object"),
    (lambda d: d["model"].update(max_positions="x"), "model.max_positions"),
    (lambda d: d["lm_head"]["time_s"].__setitem__(0, 1e308), r"lm_head.time_s must hold seconds from 0 to 3600"),
    (lambda d: d["device"].update(kind=float("nan")), "NaN is not a JSON number"),
    (lambda d: d.update(engine_overhead={"per_step_s": 1e308}), "engine overhead per_step_s"),
    (lambda d: d.pop("lm_head"), "lacks 'lm_head'"),
    (lambda d: d.update(dtype="int3"), "dtype"),
])
def test_bad_documents_are_one_line_errors(tmp_path, llama_h200, edit, message):
    document = json.loads(json.dumps(llama_h200.to_dict()))  # a deep copy: the fixture's dicts stay as built
    edit(document)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ProfileDocError, match=message) as info:
        load_profile(path)
    assert "\n" not in str(info.value)


def test_token_grid_is_dense_and_ends_at_the_maximum():
    assert token_grid(16) == (1, 2, 3, 4, 6, 8, 12, 16)
    assert token_grid(20)[-2:] == (16, 20)


def test_interpolation_is_linear_in_tokens_and_extrapolates():
    assert interp1((2, 4), (1.0, 3.0), 3) == 2.0
    assert interp1((2, 4), (1.0, 3.0), 6) == 5.0
    assert interp1((2, 4), (1.0, 3.0), 0) == 0.0  # clamped at zero, never negative


@pytest.mark.parametrize("ideal", [True, False])
def test_analytic_linear_is_exact_between_grid_points(llama_h200, ideal):
    """A roofline is affine in tokens on each side of the ridge, so interpolation reproduces it exactly; --ideal
    puts it on the datasheet's peaks (the spec sheet's figures, as analytic profiles had before achievable
    ceilings), the default on the SKU's achievable ones."""
    gpu = load_gpu_spec("h200-sxm")
    profile = analytic_profile(load_model("llama-3-8b"), tp=1, dtype="bf16", kv_dtype="bf16", max_tokens=8192,
                               max_context=8192, gpu=gpu, ideal=True) if ideal else llama_h200
    bandwidth, peak = (gpu.bandwidth_bytes_per_s, gpu.peak_flop_per_s["bf16"]) if ideal else \
        (gpu.achievable.bandwidth_bytes_per_s, gpu.achievable.peak_flop_per_s["bf16"])
    assert (bandwidth, peak) == ((4.8e12, 989.4e12) if ideal else (4.387e12, 794.5e12))
    assert profile.roof["bandwidth_bytes_per_s"] == bandwidth and profile.roof["peak_flop_per_s"] == peak
    assert profile.basis.startswith("spec sheet h200-sxm (--ideal)" if ideal else "achievable ceilings of h200-sxm: "
                                    "4.39 TB/s (measured by gpubench")
    for tokens in (5, 48, 100, 3000):
        cost = CostModel(profile).cost(0, 0, [(tokens - 1, 0)])
        expected = 0.0
        for t in profile.linears:
            w = count_work("gemm", "bf16", tokens - 1, t.n, t.k)
            expected += 32 * max(w.bytes / bandwidth, w.flop / peak)
        head = count_work("gemm", "bf16", 1, profile.lm_head.n, profile.lm_head.k)
        expected += max(head.bytes / bandwidth, head.flop / peak)
        assert cost.linear_s == pytest.approx(expected, rel=0.02)
    # The rule itself, by hand: Llama-3-8B's linears hold 32 × 218,103,808 + 525,336,576 (lm_head) = 7.50e9
    # weights, 15.01 GB in bf16.  Four tokens read them once; 2999 tokens are compute-bound (2 × 2999 × 6.98e9 FLOP
    # in the layers) with the lm_head's one token still reading 1.05 GB.
    assert CostModel(profile).cost(0, 0, [(4, 0)]).linear_s == pytest.approx(15.01e9 / bandwidth, rel=0.005)
    assert CostModel(profile).cost(0, 0, [(2999, 0)]).linear_s == \
        pytest.approx(2 * 2999 * 6_979_321_856 / peak + 1.0507e9 / bandwidth, rel=0.005)


def test_step_counts_match_the_gemm_counts(llama_h200):
    cost = CostModel(llama_h200).cost(8, 8, [])  # 8 decodes of context 1
    linear_flop = sum(32 * count_work("gemm", "bf16", 8, t.n, t.k).flop for t in llama_h200.linears)
    linear_flop += count_work("gemm", "bf16", 8, llama_h200.lm_head.n, llama_h200.lm_head.k).flop
    attention_flop = 8 * 4 * 32 * 128 * 32  # 8 sequences of 1 key: QK and PV over 32 heads × 128 dims, 32 layers
    assert cost.flop == linear_flop + attention_flop


def test_a_prefill_chunk_attends_to_its_prefix_and_causally_within_itself_by_hand(llama_h200):
    """A chunk of 4 prompt tokens over a 10-token prefix: its i-th token attends to the prefix and the chunk's
    first i tokens, 11 + 12 + 13 + 14 = 50 keys in all (not 4 x 10 + 4 x 4 / 2 = 48), each 4 FLOP per head and
    dim (QK^T and PV) over 32 heads x 128 dims x 32 layers; the step's one logit is the LM head's."""
    cost = CostModel(llama_h200).cost(0, 0, [(4, 10)])
    linear_flop = sum(32 * count_work("gemm", "bf16", 4, t.n, t.k).flop for t in llama_h200.linears)
    linear_flop += count_work("gemm", "bf16", 1, llama_h200.lm_head.n, llama_h200.lm_head.k).flop
    assert cost.flop == linear_flop + 50 * 4 * 32 * 128 * 32


def test_the_analytic_chunk_table_times_the_chunks_attention_by_hand(llama_h200):
    """The table's entry for 512 tokens over a 2048-token prefix, one layer: 512 x 2048 + 512 x 513 / 2 query-keys
    at 4 FLOP per head and dim (32 heads x 128 dims); Q read and output written (512 x 32 x 128 x 2 B each), K and
    V of 2048 + 512 tokens read once (8 KV heads x 128 dims x 2 B each); on the roofline, whichever takes longer."""
    table = llama_h200.chunk_attention
    assert table is not None
    row, col = table.rows.index(512), table.cols.index(2048)
    flop = 4 * 32 * 128 * (512 * 2048 + 512 * 513 / 2)
    nbytes = 2 * 512 * 32 * 128 * 2 + 2 * (2048 + 512) * 8 * 128 * 2
    roof = llama_h200.roof
    assert table.time_s[row][col] == pytest.approx(max(flop / roof["peak_flop_per_s"],
                                                       nbytes / roof["bandwidth_bytes_per_s"]), rel=1e-12)
    assert flop / roof["peak_flop_per_s"] > nbytes / roof["bandwidth_bytes_per_s"]  # compute-bound: FLOP decide


def test_decode_memory_bound_prefill_compute_bound_and_overhead(llama_h200):
    decode = CostModel(llama_h200).cost(16, 16 * 1024, [])
    prefill = CostModel(llama_h200).cost(0, 0, [(2048, 0)])
    assert not decode.compute_bound and prefill.compute_bound
    with_overhead = CostModel(llama_h200, EngineOverhead(0.002, 0.0001)).cost(16, 16 * 1024, [])
    assert with_overhead.overhead_s == pytest.approx(0.002 + 16 * 0.0001)
    assert with_overhead.time_s == pytest.approx(decode.time_s + with_overhead.overhead_s)


def test_overhead_per_cached_token_and_per_prefill_step(llama_h200):
    overhead = EngineOverhead(0.002, 0.0001, "test", per_cached_token_s=1e-7, per_prefill_step_s=0.003)
    decode = CostModel(llama_h200, overhead).cost(16, 16 * 1000, [])
    assert decode.overhead_s == pytest.approx(0.002 + 16 * 0.0001 + 16_000 * 1e-7)  # no prefill in the step
    mixed = CostModel(llama_h200, overhead).cost(2, 2 * 1000, [(100, 300)])
    # Cached tokens attended: the decodes' contexts and the chunk's prefix plus itself.
    assert mixed.overhead_s == pytest.approx(0.002 + 3 * 0.0001 + (2000 + 400) * 1e-7 + 0.003)


def test_an_overhead_of_the_two_term_form_loads_with_the_new_terms_at_zero(tmp_path, llama_h200):
    from dataclasses import replace

    document = replace(llama_h200, engine_overhead=EngineOverhead(0.002, 0.0001, "old")).to_dict()
    document["engine_overhead"] = {"per_step_s": 0.002, "per_sequence_s": 0.0001, "fitted_on": "old"}
    loaded = StepProfile.from_dict(document).engine_overhead
    assert loaded == EngineOverhead(0.002, 0.0001, "old", per_cached_token_s=0.0, per_prefill_step_s=0.0)
    assert EngineOverhead.from_dict(loaded.to_dict()) == loaded
    with pytest.raises(ProfileDocError, match="per_cached_token_s"):
        EngineOverhead(0.002, per_cached_token_s=-1.0)


def test_chunk_over_a_prefix_costs_what_the_whole_prompt_costs_less_the_prefix(llama_h200):
    model = CostModel(llama_h200)
    whole = model.cost(0, 0, [(1024, 0)]).attention_s
    halves = model.cost(0, 0, [(512, 0)]).attention_s + model.cost(0, 0, [(512, 512)]).attention_s
    assert halves == pytest.approx(whole, rel=0.05)


def test_a_profile_from_a_real_h200_sweep_uses_each_series_fit_and_the_run_ceilings_elsewhere():
    from pathlib import Path

    from roofline.analysis.series import analyse
    from roofline.analysis.summary import measured_bandwidth
    from roofline.result.io import load_result

    path = Path(__file__).parent / "data" / "h200" / "first-run-sweep.json"
    result = load_result(path)
    profile = analytic_profile(load_model("llama-3-8b"), tp=1, dtype="bf16", kv_dtype="bf16", max_tokens=4096,
                               max_context=4096, gpu=None, result=result, result_name=path.name)
    assert profile.basis.startswith("fit of first-run-sweep.json (") and "the rest on its ceilings" in profile.basis
    assert profile.memory["device_bytes"] == result.device["memory_bytes"]
    fitted = next(s for s in analyse(result)["series"] if (s["op"], s["n"], s["k"], s["status"]) ==
                  ("gemm", 4096, 14336, "ok"))
    down = next(t for t in profile.linears if t.name == "down_proj")
    assert down.time_s[0] == pytest.approx(count_work("gemm", "bf16", 1, 4096, 14336).bytes
                                           / fitted["bandwidth_bytes_per_s"])
    qkv = next(t for t in profile.linears if t.name == "qkv_proj")  # 6144×4096: not in the sweep
    assert qkv.time_s[0] == pytest.approx(count_work("gemm", "bf16", 1, qkv.n, qkv.k).bytes
                                          / measured_bandwidth(result))


def test_other_kernels_are_interpolated_over_the_tokens_of_the_step():
    from dataclasses import replace

    from serving_helpers import constant_profile

    from roofline.serving.profile_doc import Table1D

    profile = replace(constant_profile(), other=Table1D("", "tokens", (1, 101), (0.0, 1.0)))
    cost = CostModel(profile).cost(11, 11 * 10, [(40, 0)])
    assert cost.other_s == pytest.approx(0.5)
    assert cost.time_s == pytest.approx(1.5)


def _vidur_h100(dtype: str, model: str = "llama-3-8b") -> StepProfile:
    from pathlib import Path

    from roofline.result.io import load_result

    path = Path(__file__).parent.parent / "results" / "reference-vidur-h100-fp16.json"
    return analytic_profile(load_model(model), tp=1, dtype=dtype, kv_dtype=dtype, max_tokens=1024, max_context=1024,
                            gpu=load_gpu_spec("h100-sxm"), result=load_result(path), result_name=path.name)


def test_a_fit_of_other_shapes_uses_the_runs_best_fit_and_says_so_not_the_spec_sheet():
    spec = load_gpu_spec("h100-sxm")
    profile = _vidur_h100("fp16")
    assert profile.basis == ("fit of reference-vidur-h100-fp16.json (0 of 5 layer shapes fitted; the rest on its "
                             "best fp16 fit); other kernels: their bytes at 3.05 TB/s")
    assert profile.roof["bandwidth_bytes_per_s"] == pytest.approx(3.05e12, rel=0.01)  # the run's best fit
    assert profile.roof["bandwidth_bytes_per_s"] < spec.bandwidth_bytes_per_s
    assert profile.roof["peak_flop_per_s"] < spec.peak_flop_per_s["fp16"]


def test_a_run_without_fits_of_the_dtype_is_labelled_with_the_skus_ceilings():
    profile = _vidur_h100("bf16")
    assert profile.basis == ("achievable ceilings of h100-sxm: 3.07 TB/s (derived: the H100 PCIe's measured triad "
                             "fraction, 92%), 794 TFLOP/s bf16 (measured: mamf-finder) (reference-vidur-h100-fp16.json "
                             "fits no bf16 GEMM); other kernels: their bytes at 3.07 TB/s")
    assert profile.roof["bandwidth_bytes_per_s"] == load_gpu_spec("h100-sxm").achievable.bandwidth_bytes_per_s


def test_shapes_the_run_fitted_use_their_own_fit():
    profile = _vidur_h100("fp16", "llama-2-70b")
    assert profile.basis.startswith("fit of reference-vidur-h100-fp16.json (3 of 5 layer shapes fitted")
    o_proj = next(t for t in profile.linears if (t.n, t.k) == (8192, 8192))
    assert o_proj.time_s[0] == pytest.approx(count_work("gemm", "fp16", 1, 8192, 8192).bytes / 2742671467656.154)


def test_the_kv_capacity_follows_the_memory_the_board_reports_and_the_other_kernels_are_counted():
    from dataclasses import replace

    from roofline.serving.simulate import kv_blocks_that_fit

    profile = analytic_profile(load_model("llama-2-70b"), tp=2, dtype="fp16", kv_dtype="fp16", max_tokens=64,
                               max_context=1024, gpu=load_gpu_spec("a100-sxm-80gb"))
    assert profile.memory["device_bytes"] == profile.device["memory_bytes"] == 81920 * 2**20  # nvidia-smi's total
    # 68.71 GB of weights per GPU: 0.9 of the board's 85.90 GB leaves 8.60 GB of KV, 3279 blocks of 16 tokens at
    # 160 KiB a token; the datasheet's "80 GB" left 3.29 GB, 1253 blocks: 2.6x fewer than the engine has.
    assert profile.memory["weight_bytes"] == 68_713_185_280
    assert kv_blocks_that_fit(profile, 0.9, 16) == 3279
    assert kv_blocks_that_fit(replace(profile, memory={**profile.memory, "device_bytes": 80 * 10**9}), 0.9, 16) == 1253
    # Per token and layer on one of two ranks (fp16): two norms 2 × 2 × 8192 × 2, two residual adds 2 × 3 × 8192 × 2,
    # RoPE on 32 + 4 heads of 128 read and written 2 × 36 × 128 × 2, SiLU(gate) × up 3 × 14336 × 2: 268,288 B;
    # 80 layers and the final norm (32,768 B): 21,495,808 B a token, at the achievable 1.759 TB/s.
    assert profile.other is not None and profile.other.kernel == "roofline"
    for tokens, time_s in zip(profile.other.grid, profile.other.time_s, strict=True):
        assert time_s == pytest.approx(tokens * 21_495_808 / 1.759e12)
    assert CostModel(profile).cost(6, 6 * 100, []).other_s == pytest.approx(6 * 21_495_808 / 1.759e12)
