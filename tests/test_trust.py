"""Noise is shown, not hidden: a busy device, points with wide CIs (whatever their sample count), an
interrupted sweep and a series with too few points appear in fit's output, the report's warnings and the
verdict."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from click.testing import CliRunner

from microbench.cli.app import main
from roofline.analysis.series import analyse
from roofline.report.result_report import write_report
from roofline.result.io import save_result
from tests.conftest import make_point, make_result
from tests.test_fit import synthetic_points


def _result():
    points = synthetic_points(3e12, 700e12, batches=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512])
    wide = make_point("gemm", "fp16", 1, 1024, 1024, 1e-5, samples=3)  # 3 samples: CI is the whole range
    wide = replace(wide, samples_s=(1e-5, 1.5e-5, 2e-5))
    few = [wide, make_point("gemm", "fp16", 2, 1024, 1024, 2e-5)]
    settings = {"timer": "perf_counter", "target_rel_ci": 0.01,
                "busy_at_start": {"busy": True, "why": "CPUs 85% busy before the start"},
                "config": {"batches": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]}}
    return make_result(points + few, settings=settings)


def test_every_reason_for_doubt_reaches_fit_report_and_verdict(tmp_path):
    result = _result()
    analysis = analyse(result)
    warnings = " ".join(analysis["warnings"])
    assert "busy device (CPUs 85% busy before the start)" in warnings
    assert "wider than the ±1.0% target" in warnings  # counts the 3-sample point too
    assert "never measured (B=1024: interrupted?)" in warnings
    assert "fewer than 3 ok points: not fitted (gemm fp16 1024x1024)" in warnings
    assert analysis["verdict"][0].startswith("Trust these numbers less: measured on a busy device")
    path = tmp_path / "r.json"
    save_result(result, path)
    run = CliRunner().invoke(main, ["fit", str(path)])
    assert run.exit_code == 0 and "warning: measured on a busy device" in run.output
    assert "warning: gemm bf16 8192x8192: 10 of 11 batches ok" in run.output
    write_report(result, tmp_path / "report")
    report = (tmp_path / "report" / "report.md").read_text()
    assert "Measured on a busy device" in report and "interrupted?" in report


def _pair(tmp_path, busy: bool):
    """A quiet run and the same points 26× slower, measured on a device that was (or was not) busy."""
    quiet = [make_point("gemm", "bf16", b, 4096, 4096, 1e-4 * (1 + b / 64)) for b in (1, 2, 4, 8, 16, 32, 64)]
    slow = [replace(p, samples_s=tuple(26.46 * t for t in p.samples_s)) for p in quiet]
    loaded = {"timer": "perf_counter", "busy_at_start": {"busy": busy, "why": "CPUs 97% busy before the start"}}
    a, b = tmp_path / "quiet.json", tmp_path / "loaded.json"
    save_result(make_result(quiet, device={"kind": "cpu", "name": "cpu", "sku": None, "uuid": "A"}), a)
    save_result(make_result(slow, settings=loaded, device={"kind": "cpu", "name": "cpu", "sku": None, "uuid": "B"}), b)
    return a, b


def test_compare_calls_no_difference_significant_against_a_run_on_a_busy_device(tmp_path):
    import json

    a, b = _pair(tmp_path, busy=False)
    quiet = json.loads(CliRunner().invoke(main, ["compare", str(a), str(b), "--format", "json"]).output)
    decided = quiet["comparison"]["groups"][0]["significance_vs_baseline"][str(b)]
    assert decided["busy"] is None and decided["counts"] == {"slower": 7}  # quiet: the samples decide

    a, b = _pair(tmp_path, busy=True)
    run = CliRunner().invoke(main, ["compare", str(a), str(b), "--format", "json"])
    assert run.exit_code == 0, run.output
    group = json.loads(run.output)["comparison"]["groups"][0]
    decided = group["significance_vs_baseline"][str(b)]
    assert decided["busy"] == "loaded.json was measured on a busy device (CPUs 97% busy before the start)"
    assert decided["counts"] == {"inconclusive": 7}
    why = decided["points"]["64"]["why"]
    assert why.startswith("slower (+2546.0%), but loaded.json was measured on a busy device")
    assert why.endswith(": not significant")
    assert [row["busy_at_start"] for row in group["rows"]] == [None, "CPUs 97% busy before the start"]
    units = {Path(u["file"]).name: u for u in json.loads(run.output)["fleet"]["units"]}
    assert units["loaded.json"]["why"] == ["measured on a busy device (CPUs 97% busy before the start): its figures "
                                           "read slower"] and units["quiet.json"]["why"] == []
    table = CliRunner().invoke(main, ["compare", str(a), str(b)]).output
    assert "7 inconclusive" in table and "B=64 slower" not in table and "B=64 inconclusive (slower" in table


def test_a_profile_built_from_a_busy_run_says_so_in_its_basis(committed_cpu_result):
    from roofline.result.io import load_result
    from roofline.serving.profiles.analytic import analytic_profile
    from roofline.specs.models import load_model

    result = load_result(committed_cpu_result)
    busy = replace(result, settings={**result.settings.to_dict(),
                                     "busy_at_start": {"busy": True, "why": "2 other processes"}})
    quiet, loaded = (analytic_profile(load_model("llama-3-8b"), tp=1, dtype="bf16", kv_dtype="bf16", max_tokens=64,
                                      max_context=256, gpu=None, result=r, result_name="cpu.json").basis
                     for r in (result, busy))
    assert "busy" not in quiet
    assert loaded == quiet.replace(
        "; other kernels", ", measured on a busy device (2 other processes): slower than the device runs quiet; "
        "other kernels")
