"""The analytic basis (``roofline.decode.ceilings``): ``decode --analytic`` and ``profile --analytic`` time a launch
the same way, on the SKU's achievable ceilings by default or per-matrix efficiencies from the reference database's
GEMM curves; the datasheet only with ``--ideal``; the efficiencies derived as documented."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import NEEDS_DATABASE, needs_database

from microbench.cli.app import main
from roofline.core.counting import count_work
from roofline.core.roof import roof_time_s
from roofline.decode.ceilings import sku_basis
from roofline.decode.document import analytic_document
from roofline.decode.step import DecodeSetup
from roofline.reference import database
from roofline.serving.profiles.analytic import analytic_profile
from roofline.serving.step_cost import CostModel
from roofline.specs.gpus import load_gpu_spec
from roofline.specs.models import load_model
from roofline.step.launches import StepModel

EFFICIENCIES = ["flat", pytest.param("reference", marks=NEEDS_DATABASE)]


@pytest.mark.parametrize("efficiency", EFFICIENCIES)
@pytest.mark.parametrize("model_id, tp", [("llama-3-8b", 1), ("llama-3-70b", 4), ("mixtral-8x7b", 2)])
def test_decode_and_the_profile_give_the_same_kernel_time(model_id, tp, efficiency):
    """For one model, SKU, batch and context on the profile's grids, decode's analytic step is the profile's
    linears, experts, attention and all-reduces as the simulator reads them (the step's other kernels are the
    profile's alone: decode does not count them)."""
    model, gpu = load_model(model_id), load_gpu_spec("h100-sxm")
    profile = analytic_profile(model, tp=tp, dtype="bf16", kv_dtype="bf16", max_tokens=1024, max_context=8192,
                               gpu=gpu, efficiency=efficiency)
    cost = CostModel(profile)
    for context in (512, 8192):
        setup = DecodeSetup(StepModel.of(model, tp), context)
        rows = analytic_document(setup, gpu, [1, 64], 0.9, efficiency)["rows"]
        for row in rows:
            step = cost.cost(row["batch"], row["batch"] * context, [])
            assert row["step_time_s"] == pytest.approx(step.linear_s + step.attention_s + step.comm_s, rel=1e-9)
            assert row["comm_time_s"] == pytest.approx(step.comm_s, rel=1e-9)


def test_decode_reads_the_achievable_ceilings_as_the_profile_does_and_the_datasheet_only_with_ideal():
    gpu = load_gpu_spec("h100-sxm")
    setup = DecodeSetup(StepModel.of(load_model("llama-3-8b")), 512)
    flat = analytic_document(setup, gpu, [1], 0.9)
    assert flat["source"].startswith("achievable ceilings: ")
    assert flat["bandwidth_bytes_per_s"] == gpu.achievable.bandwidth_bytes_per_s
    ideal = analytic_document(setup, gpu, [1], 0.9, ideal=True)
    assert ideal["source"].startswith("spec sheet: ") and ideal["bandwidth_bytes_per_s"] == gpu.bandwidth_bytes_per_s
    # batch 1 reads its weights: the two bases differ by the bandwidths' ratio (3.07 against 3.35 TB/s here).
    ratio = flat["rows"][0]["step_time_s"] / ideal["rows"][0]["step_time_s"]
    assert ratio == pytest.approx(gpu.bandwidth_bytes_per_s / gpu.achievable.bandwidth_bytes_per_s, rel=0.01)


def test_efficiency_is_refused_beside_what_it_contradicts(tmp_path):
    for args, message in ((["--ideal", "--efficiency", "reference"], "--ideal takes the datasheet's peaks"),
                          (["--efficiency", "best"], "--efficiency")):
        run = CliRunner().invoke(main, ["decode", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b",
                                        *args])
        assert run.exit_code == 2 and message in run.output, run.output
    run = CliRunner().invoke(main, ["profile", "--model", "llama-3-8b", "--efficiency", "flat", "-o",
                                    str(tmp_path / "p.json")])
    assert run.exit_code == 2 and "--efficiency belongs to --analytic" in run.output


@needs_database
def test_each_matrix_has_its_own_efficiency_from_the_reference_curves():
    """A GEMM's efficiency is the datasheet roofline's time over the time the database measured for it: a small
    weight streams at a smaller fraction of the bandwidth than a large one, and the LM head wider than any measured
    matrix is read as measured widths side by side."""
    gpu = load_gpu_spec("h200-sxm")
    basis = sku_basis(gpu, "bf16", {"bf16"}, efficiency="reference")
    assert basis.efficiency == "reference" and "per-matrix efficiencies from aiconfigurator-core" in basis.basis
    step = StepModel.of(load_model("llama-3-8b"))
    from roofline.reference.gemm import GemmTable

    table = GemmTable.read(database.open_database(), gpu, "vllm", "bf16")
    for linear in step.linears[:-1]:  # each of the 8B's layer matrices was measured: the basis gives its time
        launch = step.linear_launch(linear, 1)
        if (1, linear.n, linear.k) in table.latency_s:
            assert basis.time_s(launch) == pytest.approx(table.latency_s[(1, linear.n, linear.k)], rel=1e-9)
    small, large = (count_work("gemm", "bf16", 1, n, 4096) for n in (1024, 28672))
    time_small = basis.time_s(step.linear_launch(type(step.linears[0])("x", 1024, 4096, "bf16", 1, "mlp"), 1))
    time_large = basis.time_s(step.linear_launch(type(step.linears[0])("x", 28672, 4096, "bf16", 1, "mlp"), 1))
    assert small.bytes / time_small < large.bytes / time_large <= gpu.bandwidth_bytes_per_s
    # w4a16's quarter of the bytes keeps its own bytes, at the bf16 shape's efficiency.
    w4 = sku_basis(gpu, "w4a16", {"w4a16", "bf16"}, efficiency="reference")
    bf16_launch = step.linear_launch(step.linears[2], 1)
    w4_launch = StepModel.of(load_model("llama-3-8b"), dtype="w4a16").linear_launch(
        StepModel.of(load_model("llama-3-8b"), dtype="w4a16").linears[2], 1)
    factor = roof_time_s(1, bf16_launch.work.bytes, gpu.bandwidth_bytes_per_s, None) / basis.time_s(bf16_launch)
    assert w4.time_s(w4_launch) == pytest.approx(w4_launch.work.bytes / gpu.bandwidth_bytes_per_s / factor, rel=1e-6)
    assert "w4a16 takes bf16's" in w4.basis


@needs_database
def test_auto_takes_the_reference_where_it_covers_the_sku_and_says_why_not_elsewhere(tmp_path):
    covered = CliRunner().invoke(main, ["decode", "--analytic", "--gpu", "h200-sxm", "--model", "llama-3-8b",
                                        "--batch", "1", "--json"])
    assert json.loads(covered.output)["analytic"]["source"].startswith("per-matrix efficiencies: ")
    uncovered = CliRunner().invoke(main, ["decode", "--analytic", "--gpu", "l4", "--model", "llama-3-8b", "--batch",
                                          "1", "--context", "128", "--json"])
    part = json.loads(uncovered.output[: uncovered.output.rindex("}") + 1])["analytic"]
    # The database has no L4: the nearest covered SKU of its generation (Ada Lovelace), carried and said.
    assert part["source"].startswith("per-matrix efficiencies: ") and \
        part["basis"].startswith("l40s efficiencies carried to l4")
    # A SKU of no generation the database covers: the achievable ceilings, and why.
    from dataclasses import replace

    alone = replace(load_gpu_spec("l4"), sku="custom", name="Custom Accelerator", reference_systems={})
    flat = sku_basis(alone, "bf16", {"bf16"}, efficiency="auto")
    assert flat.efficiency == "flat" and "has no data for custom" in flat.basis
    with pytest.raises(database.ReferenceDataError, match="has no data for custom"):
        sku_basis(alone, "bf16", {"bf16"}, efficiency="reference")


def _steps(model, sku: str, dtype: str, batches: list[int], context: int = 2048, ep: int = 1) -> list[float]:
    setup = DecodeSetup(StepModel.of(model, 1, ep, dtype), context)
    return [r["step_time_s"] for r in analytic_document(setup, load_gpu_spec(sku), batches, 0.9, "reference")["rows"]]


@needs_database
def test_a_reference_format_table_slower_than_its_own_bf16_is_set_aside_and_said():
    """The database's fp8-block GEMMs on a B200 run about 14x slower than its bf16 ones on the same shapes (a
    kernel, not the format): they are not made the basis, the basis says why, and a format that moves fewer bytes
    is not timed slower than bf16 at batch 1."""
    model = load_model("llama-3-8b")
    basis = sku_basis(load_gpu_spec("b200"), "fp8-block", {"fp8-block", "bf16"}, efficiency="reference")
    assert "fp8-block takes bf16's: the database's fp8-block GEMMs run a median" in basis.basis
    assert _steps(model, "b200", "fp8-block", [1])[0] < _steps(model, "b200", "bf16", [1])[0]


@needs_database
def test_a_mixtures_experts_are_one_grouped_launch_not_a_standalone_gemm_per_expert():
    """Qwen3-30B-A3B's 128 small experts: one grouped launch streams their bytes as one launch of as many bytes
    does, so the step does not shrink as the batch grows (each standalone 768x2048 GEMM's launch and tail, counted
    128 times, made batch 16 slower than batch 128)."""
    from roofline.specs.hf_config import load_hf_config

    steps = _steps(load_hf_config("tests/data/hf-configs/qwen3-30b-a3b.json"), "h200-sxm", "bf16", [1, 16, 64, 128])
    assert steps == sorted(steps)


@pytest.mark.parametrize("command", [
    ["decode", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b"],
    ["profile", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b", "-o", "never.json"],
    ["simulate", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--requests", "2"],
])
def test_ideal_beside_an_efficiency_typed_is_refused_in_one_line(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = CliRunner().invoke(main, [*command, "--ideal", "--efficiency", "flat"])
    assert run.exit_code == 2 and run.output.count("\n") == 1, run.output
    assert "--ideal takes the datasheet's peaks; --efficiency flat the SKU's achievable ceilings" in run.output
    assert not (tmp_path / "never.json").exists()


def test_efficiency_beside_reference_says_what_reference_reads(tmp_path):
    run = CliRunner().invoke(main, ["profile", "--reference", "aiconfigurator", "--gpu", "h200-sxm", "--model",
                                    "llama-3-8b", "--efficiency", "flat", "-o", str(tmp_path / "p.json")])
    assert run.exit_code == 2 and "--reference reads the database's kernel times" in run.output, run.output
