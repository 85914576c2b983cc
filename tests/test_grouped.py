"""Grouped GEMM (a mixture of experts' experts) measured end to end on the CPU: the sweep's points, their counts,
the fit's per-expert crossover and the global batch it implies, and the refusals of the options."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from microbench.timing.grouped import FALLBACK
from roofline.core.counting import count_work, matrix_weight_bytes
from roofline.result.io import load_result
from roofline.step.routing import Routing

EXPERTS, TOPK, N, K = 8, 2, 1024, 512
BATCHES = (1, 4, 16, 64, 256)


@pytest.fixture(scope="module")
def grouped_result(tmp_path_factory):
    path = tmp_path_factory.mktemp("grouped") / "R.json"
    run = CliRunner().invoke(main, ["sweep", "--device", "cpu", "--op", "grouped", "--experts", str(EXPERTS),
                                    "--topk", str(TOPK), "--shape", f"{N}x{K}", "--dtype", "fp32", "--batch",
                                    ",".join(map(str, BATCHES)), "--budget", "0.05", "--no-ceilings", "-o",
                                    str(path)])
    assert run.exit_code == 0, run.output
    return path


def test_grouped_points_count_the_touched_experts(grouped_result):
    points = load_result(grouped_result).points
    assert [p.batch for p in points] == list(BATCHES) and all(p.ok and p.correct for p in points)
    every = EXPERTS * matrix_weight_bytes("fp32", N, K)
    for p in points:
        assert p.flop == 2 * p.batch * TOPK * N * K
        activations = 4 * p.batch * TOPK * (N + K)  # each assignment's row read once, its output written once
        assert matrix_weight_bytes("fp32", N, K) * min(EXPERTS, TOPK) + activations <= p.bytes <= every + activations
        # balanced routing: as many experts touched as assignments allow
        assert p.touched == min(EXPERTS, p.batch * TOPK)
        assert p.bytes == count_work("grouped", "fp32", p.batch, N, K, EXPERTS, TOPK, p.touched).bytes
        # the CPU runs torch's fallback of its grouped GEMM (microbench/timing/grouped.py), and the point says so
        assert p.kernel in (f"torch.nn.functional.grouped_mm ({FALLBACK})", f"torch._grouped_mm ({FALLBACK})",
                            "torch.matmul per expert")


def test_fit_gives_the_per_expert_crossover_and_the_global_batch(grouped_result):
    run = CliRunner().invoke(main, ["fit", str(grouped_result), "--format", "json"])
    assert run.exit_code == 0, run.output
    [series] = json.loads(run.output)["series"]
    assert (series["op"], series["experts"], series["topk"], series["routing"]) == ("grouped", 8, 2, "balanced")
    if series["status"] == "ok":  # a busy CPU may not give a roofline: then it says why, and claims nothing
        per_expert, total = series["critical_tokens_per_expert"], series["critical_batch"]
        assert total == pytest.approx(Routing().global_tokens(EXPERTS, TOPK, per_expert))
        lo, hi = series["critical_tokens_per_expert_ci95"]
        assert lo is None or lo <= per_expert
    else:
        assert series["message"] and series["critical_batch"] is None
    table = CliRunner().invoke(main, ["fit", str(grouped_result)])
    assert "8 experts of 1024x512, top-2, balanced routing" in " ".join(table.output.split())


@pytest.mark.parametrize("args, message", [
    (["--op", "grouped", "--experts", "8", "--shape", "64x64"], "--experts and --topk go together"),
    (["--op", "gemm", "--experts", "8", "--topk", "2", "--shape", "64x64"], "add --op grouped"),
    (["--op", "grouped", "--experts", "8", "--topk", "9", "--shape", "64x64"], "--topk 9"),
    (["--op", "grouped", "--experts", "8", "--topk", "2"], "needs --shape"),
    (["--op", "grouped", "--experts", "8", "--topk", "2", "--shape", "64x64", "--routing", "zipf:x"], "zipf"),
])
def test_bad_grouped_options_are_one_line(args, message):
    run = CliRunner().invoke(main, ["sweep", "--device", "cpu", *args])
    assert run.exit_code == 2 and message in run.output, run.output


def test_a_zipf_routing_touches_fewer_experts_than_balanced(tmp_path):
    path = tmp_path / "zipf.json"
    run = CliRunner().invoke(main, ["sweep", "--device", "cpu", "--op", "grouped", "--experts", "64", "--topk",
                                    "2", "--shape", "64x64", "--dtype", "fp32", "--batch", "16", "--routing",
                                    "zipf:1.5", "--budget", "0.02", "--no-ceilings", "-o", str(path)])
    assert run.exit_code == 0, run.output
    [point] = load_result(path).points
    assert point.routing == "zipf:1.5" and point.touched < 32  # balanced would touch all 32 assignments' experts


def test_the_report_draws_each_grouped_series_against_tokens_per_expert(grouped_result, tmp_path):
    run = CliRunner().invoke(main, ["report", str(grouped_result), "-o", str(tmp_path / "report")])
    assert run.exit_code == 0, run.output
    assert (tmp_path / "report" / "grouped_fp32_8x1024x512_top2.png").stat().st_size > 10_000
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "grouped fp32 8×1024×512 top-2" in markdown
    analysis = json.loads((tmp_path / "report" / "analysis.json").read_text())
    [series] = analysis["series"]
    # each point says how many tokens a touched expert saw: 2 assignments per token over the touched experts
    assert [p["tokens_per_expert"] for p in series["points"]] == [b * TOPK / min(EXPERTS, b * TOPK) for b in BATCHES]


def test_compare_puts_grouped_series_side_by_side(grouped_result, tmp_path):
    import shutil

    other = tmp_path / "other.json"
    shutil.copy(grouped_result, other)
    run = CliRunner().invoke(main, ["compare", str(grouped_result), str(other), "--format", "json"])
    assert run.exit_code == 0, run.output
    [group] = json.loads(run.output)["comparison"]["grouped"]
    assert (group["experts"], group["topk"], group["n"], group["k"]) == (EXPERTS, TOPK, N, K)
    assert len(group["rows"]) >= 1
