"""Reports: every figure renders from builder-made results; the HTML is self-contained; partial results."""

import base64
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.analysis.series import analyse
from roofline.report import plots
from roofline.report.result_report import write_report
from roofline.result.document import Point
from roofline.result.io import save_result
from tests.conftest import make_result
from tests.test_fit import _point_bmm, synthetic_points

H200 = {"kind": "cuda", "name": "NVIDIA H200", "sku": "h200-sxm", "driver_version": "580", "ecc": {"current": True}}
CEILINGS = {"measured": {"copy": {"bytes_per_s": 4.3e12}, "read": {"bytes_per_s": 4.4e12},
                         "bandwidth_bytes_per_s": 4.4e12, "peak_flop_per_s": {"bf16": 780e12}}}


def full_result(with_telemetry=True):
    points = synthetic_points(4.2e12, 760e12, n=8192, k=28672) + [_point_bmm(b) for b in (1, 4, 16, 64, 256)]
    telemetry = {"source": "none", "reason": "test"}
    if with_telemetry:
        timeline = [{"t_s": 100 + 0.05 * i, "sm_clock_hz": 1.98e9 - (3e8 if 40 < i < 60 else 0),
                     "power_w": 400 + i, "dram_bw_util_percent": 80.0, "tensor_util_percent": 10.0 + i % 30}
                    for i in range(200)]
        telemetry = {"source": "nvml+gpm", "interval_s": 0.05, "timeline": timeline}
        points = [Point.from_dict({**p.to_dict(), "telemetry": {"window_s": [100 + 0.4 * i, 100.3 + 0.4 * i],
                                                                "throttled": i == 5}})
                  for i, p in enumerate(points)]
    return make_result(points, device=H200, ceilings=CEILINGS, telemetry=telemetry)


@pytest.mark.parametrize("name", sorted(plots.FIGURES))
def test_every_figure_renders(name):
    result = full_result()
    figure = plots.FIGURES[name](result, analyse(result))
    assert figure is not None
    drawn = [ax for ax in figure.axes if ax.get_visible() and ax.has_data()]
    assert drawn and all(ax.get_ylabel() for ax in drawn)
    assert drawn[-1].get_xlabel()


def test_roofline_figure_per_dtype():
    result = full_result()
    figure = plots.roofline_figure(result, analyse(result), "bf16")
    ax = figure.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    labels = [t.get_text() for t in ax.texts]
    assert "B=1" in labels and "B=1024" in labels and "B=24" not in labels
    assert plots.roofline_figure(result, analyse(result), "fp8") is None


def test_html_is_self_contained_and_holds_the_verdict(tmp_path):
    result = full_result()
    analysis = write_report(result, tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert "turns compute-bound at batch" in page
    assert analysis["verdict"][0] in page.replace("&#x27;", "'")
    images = re.findall(r"src='data:image/png;base64,([^']+)'", page)
    # roofline_bf16, time_vs_batch, throughput, efficiency, gemm_vs_bmm, telemetry
    assert len(images) == 6
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    assert "http" not in page  # nothing to fetch: opens offline
    markdown = (tmp_path / "report.md").read_text()
    for png in sorted(tmp_path.glob("*.png")):
        assert f"({png.name})" in markdown
    assert json.loads((tmp_path / "analysis.json").read_text())["series"]
    assert "1 point(s) measured while the GPU was throttled" in page


@pytest.mark.parametrize("case", ["no-ok-points", "one-dtype-no-telemetry", "imported"])
def test_partial_results_still_render_and_say_what_is_missing(tmp_path, case):
    if case == "no-ok-points":
        result = make_result([Point(op="gemm", dtype="bf16", batch=1, n=64, k=64, backend="torch",
                                    status="oom", reason="out of memory")])
    elif case == "one-dtype-no-telemetry":
        result = full_result(with_telemetry=False)
    else:
        points = synthetic_points(3e12, 700e12)
        result = make_result(points, origin="imported", device={"kind": "cuda", "name": "G", "sku": None},
                             settings={"timer": "imported", "source_file": "x.csv", "import_warnings": []})
    write_report(result, tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert "<h2>Missing</h2>" in page
    if case == "no-ok-points":
        assert "No ok points" in page and "not measured (oom)" in page
    if case == "one-dtype-no-telemetry":
        assert "telemetry: no telemetry timeline" in page and "No telemetry" in page
    if case == "imported":
        assert "Imported data" in page


def test_report_command_writes_beside_the_result(tmp_path):
    path = tmp_path / "run.json"
    save_result(full_result(), path)
    run = CliRunner().invoke(main, ["report", str(path)], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    assert (tmp_path / "run-report" / "report.html").exists()
    bad = CliRunner().invoke(main, ["report", str(tmp_path / "missing.json")])
    assert bad.exit_code == 2 and "no such file" in bad.output


def test_time_figure_shades_the_interval():
    result = full_result()
    figure = plots.time_figure(result, analyse(result))
    ax = figure.axes[0]
    assert any(type(p).__name__ in ("Polygon", "Rectangle") for p in ax.patches)
    gemm = next(s for s in analyse(result)["series"] if s["op"] == "gemm")
    assert np.isfinite(gemm["critical_batch"])


def test_cross_check_disagreement_is_reported(tmp_path):
    result = full_result()
    points = []
    for p in result.points:
        telemetry = dict(p.telemetry or {})
        telemetry["timer_over_counter"] = 1.6 if (p.op == "gemm" and p.batch == 4) else 1.02
        points.append(Point.from_dict({**p.to_dict(), "telemetry": telemetry}))
    from dataclasses import replace

    write_report(replace(result, points=tuple(points)), tmp_path)
    page = (tmp_path / "report.md").read_text()
    assert "Cross-check (timer bytes/s over GPM DRAM counter" in page
    assert "disagree with the DRAM counter" in page and "B=4: 1.60" in page


def test_an_imported_result_reports_what_it_recorded_and_never_none(tmp_path):
    # An import records a device name and SKU only: the report said "Driver None, ... ECC None; gpubench None".
    from pathlib import Path

    from roofline.report.result_report import write_report
    from roofline.result.io import load_result

    source = Path(__file__).resolve().parent.parent / "results" / "reference-vidur-a100-fp16.json"
    write_report(load_result(source), tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    assert "None" not in text
    assert "Driver, clocks, power limit, ECC and MIG: not recorded" in text
    assert "Imported by gpubench from" in text
