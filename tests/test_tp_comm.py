"""Tensor-parallel communication: the ring all-reduce cost, its place in decode, the step profile and the
simulation, TP 1 left as it was, and a real all-reduce between two gloo processes on the CPU."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.core.counting import TP_ALL_REDUCES_PER_LAYER, all_reduce_bytes
from roofline.core.roof import all_to_all_time_s, ring_all_reduce_time_s
from roofline.decode.document import analytic_document
from roofline.decode.step import DecodeSetup, analytic_time
from roofline.serving.document import composition
from roofline.serving.metrics import summarize
from roofline.serving.profile_doc import CommTable, StepProfile
from roofline.serving.profiles.analytic import analytic_profile
from roofline.serving.simulate import simulate
from roofline.serving.step_cost import CostModel
from roofline.serving.workload import make_workload
from roofline.specs.gpus import load_gpu_spec
from roofline.specs.models import load_model
from roofline.step.launches import StepModel

OLD_COMPOSITION = {"linear_s", "attention_s", "other_s", "overhead_s"}


def test_the_ring_all_reduce_by_hand():
    assert ring_all_reduce_time_s(1e6, 1, 1e9, 1e-6, 5e-6) == 0.0  # one rank has nothing to reduce
    # 8 ranks: 14 steps of 1/8 of the message each, and 14 hop latencies.
    assert ring_all_reduce_time_s(8e6, 8, 1e9, 1e-6) == pytest.approx(14 / 8 * 8e6 / 1e9 + 14e-6)
    # NCCL's fixed latency per collective, once, whatever the ranks and the size.
    assert ring_all_reduce_time_s(8e6, 8, 1e9, 1e-6, 5e-6) == pytest.approx(5e-6 + 14 / 8 * 8e6 / 1e9 + 14e-6)
    assert ring_all_reduce_time_s(0, 2, 1e9, 1e-6, 5e-6) == pytest.approx(5e-6 + 2e-6)


def test_the_all_to_all_by_hand():
    assert all_to_all_time_s(8e6, 1, 1e9, 1e-6) == 0.0  # one rank keeps what it holds
    # Each of 8 ranks sends 7/8 of its 8 MB to its peers over its own 1 GB/s link: 7 ms, one step's latency.
    assert all_to_all_time_s(8e6, 8, 1e9, 1e-6) == pytest.approx(7e-3 + 1e-6)
    assert all_to_all_time_s(8e6, 2, 1e9, 0.0) == pytest.approx(4e-3)


def test_the_spec_sheets_all_reduce_pays_nccls_base_latency():
    """A decode step's all-reduce of one token's hidden vector is almost all latency: NCCL's base latency (6.6 us,
    ring LL) and the ring's 2(N-1) step latencies, as NCCL's own cost model charges them."""
    link = load_gpu_spec("h200-sxm").interconnect
    assert link.base_latency_s == pytest.approx(6.6e-6) and "baseLat" in link.base_latency_source
    assert link.all_reduce_time_s(2 * 8192, 8) == pytest.approx(
        6.6e-6 + 14 * 0.6e-6 + 14 / 8 * 2 * 8192 / 450e9)
    assert link.to_dict()["base_latency_s"] == pytest.approx(6.6e-6)
    assert all_reduce_bytes("bf16", 3, 8192) == 3 * 8192 * 2
    assert all_reduce_bytes("fp8", 3, 8192) == 3 * 8192 * 2  # an fp8 GEMM writes bf16: that is what is summed
    assert all_reduce_bytes("w4a16", 3, 8192) == 3 * 8192 * 2


def test_decode_70b_over_eight_h100s_shows_its_communication_share():
    run = CliRunner().invoke(main, ["decode", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-70b",
                                    "--tp", "8", "--batch", "1,64"])
    assert run.exit_code == 0, run.output
    assert "comm" in run.output and "160 all-reduces over 8 GPUs (NVLink 4)" in " ".join(run.output.split())
    document = json.loads(CliRunner().invoke(main, ["decode", "--analytic", "--gpu", "h100-sxm", "--model",
                                                    "llama-3-70b", "--tp", "8", "--batch", "1", "--json"]).output)
    first = document["analytic"]["rows"][0]
    assert 0.01 <= first["comm_share"] <= 0.6
    model, link = load_model("llama-3-70b"), load_gpu_spec("h100-sxm").interconnect
    one = ring_all_reduce_time_s(2 * 8192, 8, link.link_bytes_per_s, link.hop_latency_s, link.base_latency_s)
    assert first["comm_time_s"] == pytest.approx(model.layers * TP_ALL_REDUCES_PER_LAYER * one)


def test_tp_1_decode_is_exactly_as_before():
    model, spec = load_model("llama-3-8b"), load_gpu_spec("h100-sxm")
    setup = DecodeSetup(StepModel.of(model), 4096)
    document = analytic_document(setup, spec, [1, 64], 0.9)  # the achievable ceilings, as profile --analytic
    time_fn = analytic_time(spec.achievable.bandwidth_bytes_per_s, spec.achievable.peak_flop_per_s)
    for row in document["rows"]:
        kernels = sum(time_fn(launch) * launch.count for launch in setup.launches(row["batch"]))
        assert row["step_time_s"] == kernels and row["comm_time_s"] == 0.0  # the kernels alone, to the bit
    assert document["comm"] is None
    run = CliRunner().invoke(main, ["decode", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b"])
    assert run.exit_code == 0 and "comm" not in run.output and "all-reduce" not in run.output


def _profile(tp: int) -> StepProfile:
    return analytic_profile(load_model("llama-3-8b"), tp=tp, dtype="bf16", kv_dtype="bf16", max_tokens=1024,
                            max_context=2048, gpu=load_gpu_spec("h100-sxm"))


def test_an_analytic_tp_profile_carries_the_ring_costs_and_the_simulation_shows_them():
    profile = StepProfile.from_dict(json.loads(json.dumps(_profile(2).to_dict())))
    comm = profile.comm
    assert comm is not None and comm.ranks == 2 and comm.per_layer == 2 and not comm.measured
    assert "spec sheet h100-sxm" in comm.source and "NVLink 4" in comm.source
    link = load_gpu_spec("h100-sxm").interconnect
    index = comm.tokens.index(64)
    assert comm.time_s[index] == pytest.approx(ring_all_reduce_time_s(64 * 4096 * 2, 2, link.link_bytes_per_s,
                                                                      link.hop_latency_s, link.base_latency_s))
    step = CostModel(profile).cost(64, 64 * 500, [])
    assert step.comm_s == pytest.approx(32 * 2 * comm.time_s[index])
    assert step.time_s == pytest.approx(step.linear_s + step.attention_s + step.other_s + step.comm_s)
    run = simulate(profile, make_workload(16, "burst", "fixed:64", "fixed:16", 0), "continuous")
    parts = composition(run, with_comm=True)
    assert parts["comm_s"] > 0
    summary = summarize(run, profile, 0.9)
    assert 0 < summary["comm_time_share"] < 0.5 and summary["binding_limit"] == "bandwidth"


def test_communication_binds_when_it_is_most_of_the_step():
    profile = _profile(2)
    assert profile.comm is not None
    slow = dataclasses.replace(profile.comm, time_s=tuple(1.0 for _ in profile.comm.tokens))
    profile = dataclasses.replace(profile, comm=slow)
    run = simulate(profile, make_workload(4, "burst", "fixed:8", "fixed:4", 0), "continuous")
    summary = summarize(run, profile, 0.9)
    assert summary["binding_limit"] == "communication"
    assert summary["binding_sentence"].startswith("Communication binds")


def test_tp_1_profile_and_simulation_are_exactly_as_before():
    profile = _profile(1)
    assert profile.comm is None and "comm" not in profile.to_dict()
    run = simulate(profile, make_workload(8, "burst", "fixed:32", "fixed:8", 0), "continuous")
    assert all(step.comm_s == 0.0 for step in run.steps)
    assert set(composition(run, with_comm=profile.comm is not None)) == OLD_COMPOSITION
    assert "comm_time_share" not in summarize(run, profile, 0.9)


def test_profile_analytic_tp_2_writes_the_comm_terms_and_simulate_shows_them(tmp_path):
    out = tmp_path / "p.json"
    run = CliRunner().invoke(main, ["profile", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b",
                                    "--tp", "2", "--max-tokens", "1024", "--max-context", "1024", "-o", str(out)])
    assert run.exit_code == 0, run.output
    written = json.loads(out.read_text())
    assert written["comm"]["ranks"] == 2 and len(written["comm"]["time_s"]) == len(written["comm"]["tokens"])
    sim = tmp_path / "sim"
    run = CliRunner().invoke(main, ["simulate", str(out), "--requests", "16", "--arrivals", "burst",
                                    "--prompt", "fixed:64", "--output", "fixed:8", "--policy", "continuous",
                                    "--no-report", "-o", str(sim)])
    assert run.exit_code == 0, run.output
    document = json.loads((sim / "simulation.json").read_text())
    assert document["runs"][0]["composition_s"]["comm_s"] > 0


def test_a_comm_table_of_another_tp_is_refused():
    document = _profile(2).to_dict()
    document["comm"]["ranks"] = 4
    with pytest.raises(Exception, match="comm.ranks 4 is not tp 2"):
        StepProfile.from_dict(document)


@pytest.mark.slow
def test_a_real_all_reduce_between_two_gloo_processes_on_the_cpu():
    from microbench.serving.allreduce import measure_all_reduce

    tokens = (1, 64, 4096)
    timing = measure_all_reduce(2, hidden=256, tokens=tokens, dtype="bf16", device="cpu", repeats=5)
    assert timing.tokens == tokens and all(0 < t < 10 for t in timing.time_s)
    # How the time grows with the bytes is a timing property of a shared 2-core machine (two gloo processes and
    # pytest on two cores: once 3.9 ms at 32 kB against 3.3 ms at 2 MB), not asserted here.
    table = timing.comm_table()
    assert isinstance(table, CommTable) and table.measured and "gloo, 2 local processes" in table.source
    profile = dataclasses.replace(_profile(2), comm=table)
    loaded = StepProfile.from_dict(json.loads(json.dumps(profile.to_dict())))
    assert loaded.comm == table
    step = CostModel(loaded).cost(64, 64 * 100, [])
    assert step.comm_s == pytest.approx(32 * 2 * timing.time_s[1])


@pytest.mark.slow
def test_a_measured_tp_2_profile_on_the_cpu_times_its_all_reduce_with_gloo(tmp_path):
    from microbench.serving.profile_plan import ProfilePlan
    from microbench.serving.profile_run import prepare_profile, run_profile
    from microbench.timing.observer import SweepObserver
    from roofline.serving.profile_doc import load_profile

    tiny = Path(__file__).parent / "data" / "tiny-llama-config.json"
    plan = ProfilePlan(model=None, hf_config=str(tiny), tp=2, max_tokens=8, max_context=32, max_batch=2,
                       device="cpu", budget_s=0.005)
    output = tmp_path / "profile.json"
    run_profile(prepare_profile(plan, output, SweepObserver()), lambda total: None, lambda item, measured: None)
    loaded = load_profile(output)
    comm = loaded.comm
    assert loaded.tp == 2 and comm is not None and comm.measured and comm.ranks == 2
    assert comm.source.startswith("measured: gloo, 2 local processes") and all(t > 0 for t in comm.time_s)
    assert comm.tokens == loaded.linears[0].tokens
    assert CostModel(loaded).cost(2, 20, []).comm_s > 0


def test_the_simulators_all_to_alls_are_charged_on_the_moe_layers_only():
    # DeepSeek-V3 routes 58 of its 61 layers (the first 3 are dense): EP 8 dispatches and combines twice in each
    # of those 58, none in the dense 3.
    from roofline.specs.hf_config import load_hf_config

    model = load_hf_config(Path(__file__).parent / "data" / "hf-configs" / "deepseek-v3.json")
    profile = analytic_profile(model, tp=1, ep=8, dtype="fp8-block", kv_dtype="bf16", max_tokens=64,
                               max_context=512, gpu=load_gpu_spec("h200-sxm"))
    exchange = profile.all_to_all
    assert exchange is not None and exchange.per_layer == 2
    cost = CostModel(profile).cost(64, 64 * 100, ())  # 64 decodes over 8 attention ranks: 8 tokens a rank
    assert cost.comm_s == pytest.approx(58 * 2 * exchange.time_s[exchange.tokens.index(8)])
