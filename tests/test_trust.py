"""Noise is shown, not hidden: a busy device, points with wide CIs (whatever their sample count), an
interrupted sweep and a series with too few points appear in fit's output, the report's warnings and the
verdict."""

from __future__ import annotations

from dataclasses import replace

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
