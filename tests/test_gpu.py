"""GPU tests: run with ``pytest -m gpu`` on a CUDA host; skipped elsewhere, saying why.  Never faked."""

from __future__ import annotations

import pytest

from microbench.points.plan import PointSpec
from tests.conftest import requires_gpu

pytestmark = [pytest.mark.gpu, requires_gpu]


def cuda_session(l2_policy="rotate", timer="graph", budget_s=0.3):
    from microbench.points.config import SweepConfig
    from microbench.timing.observer import SweepObserver
    from microbench.timing.session import open_session

    config = SweepConfig(device="cuda", ops=(), budget_s=budget_s, l2_policy=l2_policy, timer=timer, save=False)
    return open_session(config, SweepObserver())


def test_device_record_is_complete():
    session = cuda_session()
    device = session.device
    assert device["kind"] == "cuda"
    for key in ("name", "uuid", "compute_capability", "sm_count", "memory_bytes", "l2_cache_bytes"):
        assert device[key], key
    assert device["nvml"]["available"], device["nvml"]
    assert device["driver_version"] and device["max_sm_clock_hz"]


def test_graph_and_eager_agree_within_the_launch_overhead():
    import torch

    from microbench.timing.measure import measure_point

    session = cuda_session()
    point = measure_point(session, PointSpec("gemv", "bf16", 1, 4096, 14336))
    assert point.ok and point.correct, point.reason
    assert point.timer == "cuda-graph" and point.eager_samples_s
    graph, eager = point.stats.median_s, point.eager_stats.median_s
    # What one eager launch costs beyond its kernel: time a launch of a trivial kernel.
    tiny = torch.zeros(1, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(50):
        start.record()
        tiny.add_(1)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    launch_s = sorted(times)[len(times) // 2]
    assert eager >= 0.97 * graph
    assert eager - graph <= max(3 * launch_s, 10e-6), (graph, eager, launch_s)


def test_a_gemv_that_fits_in_l2_is_faster_warm_than_cold():
    from microbench.timing.measure import measure_point

    spec = PointSpec("gemv", "bf16", 1, 4096, 2048)  # 16 MB of weights: inside any datacenter GPU's L2
    cold = measure_point(cuda_session("rotate"), spec)
    warm = measure_point(cuda_session("warm"), spec)
    assert cold.ok and warm.ok
    assert cold.rotation_copies > 1 and warm.rotation_copies == 1
    assert warm.stats.median_s < 0.9 * cold.stats.median_s, (warm.stats.median_s, cold.stats.median_s)


def test_eager_timer_option():
    from microbench.timing.measure import measure_point

    point = measure_point(cuda_session(timer="eager"), PointSpec("gemm", "bf16", 8, 4096, 4096))
    assert point.ok and point.timer == "cuda-eager" and not point.eager_samples_s


@pytest.mark.parametrize("dtype", ["fp32", "tf32", "fp16", "bf16", "fp8"])
def test_every_dtype_runs_correctly_or_says_why_not(dtype):
    from microbench.timing.measure import measure_point

    session = cuda_session(budget_s=0.1)
    point = measure_point(session, PointSpec("gemm", dtype, 16, 4096, 4096))
    if point.status == "unsupported":
        assert dtype == "fp8" and "compute capability" in point.reason
        return
    assert point.ok, point.reason
    assert point.correct, point.correctness
    if dtype == "tf32":
        fp32 = measure_point(session, PointSpec("gemm", "fp32", 16, 4096, 4096))
        assert point.correctness["rel_err"] > fp32.correctness["rel_err"]


def test_quick_cuda_sweep_end_to_end(tmp_path):
    from click.testing import CliRunner

    from microbench.cli.app import main
    from microbench.telemetry.sampler import remeasure_reason
    from roofline.result.io import load_result

    output = tmp_path / "gpu.json"
    run = CliRunner().invoke(main, ["sweep", "--device", "cuda", "--quick", "-o", str(output)],
                             catch_exceptions=False)
    assert run.exit_code == 0, run.output
    result = load_result(output)
    assert all(p.ok and p.correct for p in result.points)
    assert all(p.launch_overhead_s is not None for p in result.points)
    assert result.ceilings["measured"]["copy"]["bytes_per_s"] > 1e11
    # Telemetry from the real NVML: every point carries clocks and power; on Hopper+, GPM DRAM and tensor.
    assert result.telemetry["source"] in ("nvml-basic", "nvml+gpm"), result.telemetry
    assert len(result.telemetry["timeline"]) > 10
    measured = result.ceilings["measured"]
    assert measured["copy"]["timer"] == "cuda-eager"  # a captured copy_ would run on a copy engine
    assert measured["reference_bandwidth"]["bytes_per_s"] == measured["bandwidth_bytes_per_s"]
    # Every point's timed phase is long enough for its own readings (lag-corrected, whole GPM pairs).
    for point in result.points:
        telemetry = point.telemetry
        assert telemetry["readings"] > 0, telemetry.get("no_reading_reason")
        assert "lag-corrected" in telemetry["attribution"]
        assert telemetry["sm_clock_hz"]["median"] > 1e8
        assert telemetry["power_w"]["median"] > 10
        if result.telemetry["source"] == "nvml+gpm":
            assert telemetry["gpm_covered"], telemetry.get("gpm_missing_reason")
            assert "dram_bw_util_percent" in telemetry and "tensor_util_percent" in telemetry
            if point.op == "gemv" and point.stats.median_s >= 30e-6:  # memory-bound: the counter agrees
                where = f"{point.op} {point.n}x{point.k} B={point.batch} {point.backend}"
                assert 0.9 <= telemetry["timer_over_counter"] <= 1.1, (where, telemetry["timer_over_counter"])
        if point.superseded:  # measured again only for a slowdown or an unexplained clock move, never the cap
            assert remeasure_reason(telemetry), telemetry


def test_ceilings_name_the_reference_and_both_compute_regimes():
    from microbench.sweep.ceilings import measure_ceilings

    session = cuda_session(budget_s=0.2)
    session.start_telemetry(True, 0.05)
    try:
        ceilings = measure_ceilings(session, ["bf16"], quick=True)["measured"]
    finally:
        session.stop_telemetry()
    reference = ceilings["reference_bandwidth"]
    assert reference["kind"] in ("read", "copy") and reference["timer"] in ("cuda-eager", "cuda-graph")
    assert not (reference["kernel"] == "torch.Tensor.copy_" and reference["timer"] == "cuda-graph")
    assert all(entry["timer"] for entry in ceilings["stream_kernels"].values())
    peak = ceilings["peak"]["bf16"]
    burst, sustained = peak["burst"], peak["sustained"]
    assert ceilings["peak_flop_per_s"]["bf16"] == sustained["flop_per_s"] == peak["flop_per_s"]
    assert ceilings["peak_flop_per_s_burst"]["bf16"] == burst["flop_per_s"]
    assert burst["flop_per_s"] >= 0.95 * sustained["flop_per_s"]  # a burst after idle is never slower
    assert sustained["run_s"] >= 3.0 and len(peak["tried"]) == 2
    for regime in (burst, sustained):
        assert regime["sm_clock_hz"]["max"] > 1e8 and regime["power_w"]["median"] > 10, regime
        assert regime["clock_event_reasons"] is not None and regime["timer"] == "cuda-graph"


def test_cupy_cublas_points_are_timed_eagerly_and_say_so():
    pytest.importorskip("cupy")
    from microbench.timing.measure import measure_point

    point = measure_point(cuda_session(budget_s=0.1), PointSpec("gemm", "bf16", 64, 4096, 4096, "cupy"))
    assert point.ok and point.correct, point.reason
    assert point.timer == "cuda-eager" and "gemmEx" in point.kernel
    bmm = measure_point(cuda_session(budget_s=0.1), PointSpec("bmm", "bf16", 8, 1024, 128, "cupy"))
    assert bmm.ok and bmm.correct and "gemmStridedBatchedEx" in bmm.kernel, bmm.reason


@pytest.mark.parametrize("dtype", ["w8a16", "w4a16"])
def test_weight_only_formats_run_correctly_on_the_gpu(dtype):
    """w8a16 on gpubench's Triton kernel (torch 2.11's CUDA _weight_int8pack_mm is a reference kernel:
    microbench/timing/triton_w8a16.py), w4a16 on tinygemm's _weight_int4pack_mm, both timed in a CUDA graph."""
    from microbench.timing import weight_only
    from microbench.timing.measure import measure_point

    session = cuda_session(budget_s=0.2)
    for batch in (1, 16, 200):
        point = measure_point(session, PointSpec("gemm", dtype, batch, 4096, 14336))
        assert point.ok, point.reason
        assert point.correct, point.correctness
        assert point.timer == "cuda-graph"
        assert point.kernel == (weight_only.TRITON_W8A16_KERNEL if dtype == "w8a16" else "torch._weight_int4pack_mm")


@pytest.mark.parametrize("dtype", ["w8a16", "w4a16"])
def test_a_weight_only_format_beats_bf16_at_batch_1(dtype):
    """Half (w8a16) or a quarter (w4a16) of bf16's weight bytes on a default shape, memory-bound at batch 1: the
    format's kernel must be faster than bf16's, or it measures the kernel, not the format."""
    from microbench.timing.measure import measure_point

    session = cuda_session(budget_s=0.3)
    for op in ("gemv", "gemm"):
        bf16 = measure_point(session, PointSpec(op, "bf16", 1, 4096, 14336))
        quantized = measure_point(session, PointSpec(op, dtype, 1, 4096, 14336))
        assert bf16.ok and quantized.ok and quantized.correct, (bf16.reason, quantized.reason)
        assert quantized.stats.median_s < bf16.stats.median_s, (op, quantized.kernel, quantized.stats.median_s,
                                                                bf16.stats.median_s)


@pytest.mark.parametrize("batch", [16, 128])
def test_the_w8a16_gemm_is_not_slower_than_bf16_where_it_reads_half_the_bytes(batch):
    """Tiled as a GEMM (BLOCK_N 128, K split to fill the GPU: microbench/timing/triton_w8a16.py), the kernel reads
    about the counted bytes (tests/test_triton_w8a16_traffic.py): at a memory-bound batch and at M = 128, where
    bf16 turns compute-bound, half of bf16's weight bytes must not take longer than bf16's cuBLAS."""
    from microbench.timing.measure import measure_point

    session = cuda_session(budget_s=0.3)
    bf16 = measure_point(session, PointSpec("gemm", "bf16", batch, 4096, 14336))
    w8a16 = measure_point(session, PointSpec("gemm", "w8a16", batch, 4096, 14336))
    assert bf16.ok and w8a16.ok and w8a16.correct, (bf16.reason, w8a16.reason, w8a16.correctness)
    assert w8a16.stats.median_s <= bf16.stats.median_s, (w8a16.stats.median_s, bf16.stats.median_s)


def test_a_profile_measured_with_energy_carries_a_draw_per_token_count(tmp_path):
    """profile --energy on the GPU: NVML's power over each linear's timed phase, a draw per token count that
    simulate charges (microbench/serving/profile_power.py)."""
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from microbench.cli.app import main
    from roofline.serving.profile_doc import load_profile

    tiny = Path(__file__).parent / "data" / "tiny-llama-config.json"
    output = tmp_path / "p.json"
    run = CliRunner().invoke(main, ["profile", "--hf-config", str(tiny), "--device", "cuda", "--max-tokens", "16",
                                    "--max-context", "64", "--max-batch", "4", "--budget", "0.05", "--energy",
                                    "-o", str(output)])
    assert run.exit_code == 0, run.output
    power = load_profile(output).power_figure
    assert power.get("by_tokens"), power.get("why_none")
    assert all(10 < w < 2000 for w in power["by_tokens"]["watts"]), power
    simulated = CliRunner().invoke(main, ["simulate", str(output), "--requests", "8", "--prompt", "fixed:16",
                                          "--output", "fixed:16", "--no-report", "--json", "-o", str(tmp_path / "sim")])
    assert simulated.exit_code == 0, simulated.output
    energy = json.loads((tmp_path / "sim" / "simulation.json").read_text())["runs"][0]["energy"]
    assert energy["tokens_per_joule"] > 0 and energy["upper_bound"] is False, energy


def test_graphs_mode_compiles_nothing_inside_a_timed_static_batch():
    """validate --engine-mode graphs: the warm-up compiles and records every static batch size on the one cache
    length (microbench/serving/engine/settings.py, read against transformers 5.17 and torch 2.11), so a timed
    batch compiles nothing; each continuous run captures its graphs in manager.warmup() before its clock."""
    pytest.importorskip("transformers")
    import torch
    from torch._dynamo.utils import counters

    from microbench.serving.engine import transformers_engine as te
    from microbench.serving.engine.settings import allow_compiles
    from roofline.serving.workload import make_workload
    from roofline.specs.models import load_hf_config

    lm = te.build_model(torch, load_hf_config("tests/data/tiny-llama-config.json"), "bf16", "cuda", 128, 0)
    requests = make_workload(6, "burst", "fixed:16", "uniform:8:24", 0)
    groups = te.static_groups(requests, 4)
    sizes = sorted({len(g) for g in groups})
    allow_compiles(torch, len(sizes))
    assert te.warm_static_shapes(torch, lm, requests, sizes, "cuda", "graphs", 64) == sizes
    compiled = counters["stats"]["unique_graphs"]
    for group in groups:
        steps = te.run_static_batch(torch, lm, group, "cuda", "wall", "graphs", cache_tokens=64)
        assert len(steps) == max(r.output_tokens for r in group)
    assert counters["stats"]["unique_graphs"] == compiled, "a timed static batch compiled a new graph"
    run = te.run_continuous(torch, lm, requests, 4, 64, "wall", 64, mode="graphs")
    assert run.settings["use_cuda_graph"] is True and len(run.requests) == len(requests)
