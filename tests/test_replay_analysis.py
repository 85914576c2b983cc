"""Replay the first real H200 run (tests/data/h200) through summary, fit, report and compare: one named
reference bandwidth everywhere, no figure above 100% of its ceiling without a warning, the point above the
compute ceiling flagged, ceilings that name their regime, and a telemetry figure with lines."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.analysis.reference import (
    NOT_RECORDED,
    reference_bandwidth,
    reference_bandwidth_from_measured,
    reference_peak,
    result_peak,
)
from roofline.analysis.series import analyse
from roofline.report import plots
from roofline.result.io import load_result

DATA = Path(__file__).parent / "data" / "h200"
SWEEP, CEILINGS = DATA / "first-run-sweep.json", DATA / "first-run-ceilings.json"
PERCENT = re.compile(r"(\d+(?:\.\d+)?)%(⚠?)")


def unexplained_over_100(text: str) -> list[str]:
    """Percentages above 100 printed without the mark that says they are above their ceiling."""
    return [f"{value}% in: {line}" for line in text.splitlines() for value, mark in PERCENT.findall(line)
            if float(value) > 100 and not mark]


@pytest.fixture(scope="module")
def sweep():
    return load_result(SWEEP)


def test_the_reference_is_the_best_read_or_copy_kernel_not_the_copy_engine(sweep):
    reference = reference_bandwidth(sweep.ceilings)
    assert reference.name == "cupy read" and reference.kind == "read"
    assert reference.bytes_per_s == pytest.approx(4.596e12, rel=1e-3)
    # The graph-captured copy_ (a memcpy node on a copy engine, 2.71 TB/s) is never the reference.
    measured = sweep.ceilings["measured"]
    only_torch = {"copy": measured["copy"], "read": measured["read"]}
    assert reference_bandwidth_from_measured(only_torch).name == "torch read"
    assert reference_bandwidth_from_measured({"copy": measured["copy"]}) is None or \
        reference_bandwidth_from_measured({"copy": measured["copy"]}).kind != "copy"
    # A new document names its own: the reader uses it as written.
    recorded = {**measured, "reference_bandwidth": {"bytes_per_s": 4.2e12, "name": "torch copy (eager)",
                                                    "kind": "copy", "kernel": "torch.Tensor.copy_",
                                                    "timer": "cuda-eager", "why": "best kernel"}}
    assert reference_bandwidth_from_measured(recorded).label == "torch copy (eager) 4.2 TB/s"
    peak = reference_peak(sweep.ceilings, "bf16")
    assert peak.regime == NOT_RECORDED and peak.burst_flop_per_s is None


def test_burst_and_sustained_when_recorded(sweep):
    ceilings = json.loads(json.dumps(sweep.ceilings.to_dict()))
    ceilings["measured"]["peak_flop_per_s_burst"] = {"bf16": 793e12}
    ceilings["measured"]["peak"]["bf16"]["sustained"] = {"flop_per_s": 687e12, "sm_clock_hz": None}
    peak = reference_peak(ceilings, "bf16")
    assert peak.regime == "sustained" and peak.burst_flop_per_s == 793e12


def test_fit_verdict_and_table_name_the_reference_and_its_own_fastest_point(sweep):
    analysis = analyse(sweep)
    assert analysis["reference_bandwidth"]["name"] == "cupy read"
    # The sweep's down_proj B=1024 ran at 103.3% of the ceilings' bf16 peak: a ceiling its own points beat is
    # no ceiling, so the compute reference is that point, and it says so.
    peak = analysis["reference_peak"]["bf16"]
    assert peak["basis"] == "own point" and peak["details"]["batch"] == 1024 and peak["details"]["k"] == 28672
    assert peak["flop_per_s"] / peak["ceilings_flop_per_s"] == pytest.approx(1.033, abs=0.002)
    assert "above the ceilings' 687 TFLOP/s" in peak["regime"] and NOT_RECORDED in peak["regime"]
    down = next(s for s in analysis["series"] if s["op"] == "gemm" and s["k"] == 28672 and s["backend"] == "torch")
    assert [a for a in down["above_measured_ceiling"] if a["ceiling"] == "peak"] == []
    assert "sustained" in down["roof_regime"]
    verdict = "\n".join(analysis["verdict"])
    assert "158%" not in verdict and "copy bandwidth measured here" not in verdict
    assert "93% of the reference bandwidth (cupy read 4.6 TB/s)" in verdict
    # A bandwidth ceiling is still a ceiling: the bmm points a hair above the best read kernel stay flagged.
    assert "the reference bandwidth (cupy read 4.6 TB/s): B=512 at 100.1%⚠" in verdict
    run = CliRunner().invoke(main, ["fit", str(SWEEP)])
    assert run.exit_code == 0 and "cupy read" in run.output
    assert "the sweep's own fastest point, gemm bf16 8192x28672 B=1024" in " ".join(run.output.split())
    assert unexplained_over_100(run.output) == []


def test_sweep_summary_names_the_reference_and_its_peak(sweep, capsys):
    from microbench.cli.render import print_sweep_summary

    print_sweep_summary(sweep, None)
    out = capsys.readouterr().out
    assert "reference bandwidth: cupy read 4.6 TB/s" in out
    assert "of the measured bf16 peak, above that ceiling" not in out
    assert "the sweep's own fastest point" in " ".join(out.split())
    assert unexplained_over_100(out) == []


def test_report_and_its_roofline_plot(sweep, tmp_path):
    run = CliRunner().invoke(main, ["report", str(SWEEP), "-o", str(tmp_path)])
    assert run.exit_code == 0, run.output
    markdown = (tmp_path / "report.md").read_text()
    assert "cupy read" in markdown and unexplained_over_100(markdown) == []
    stored = json.loads((tmp_path / "analysis.json").read_text())
    assert any(a["batch"] == 1024 and a["ceiling"] == "bandwidth" for s in stored["series"]
               for a in s["above_measured_ceiling"])
    figure = plots.roofline_figure(sweep, analyse(sweep), "bf16")
    labels = [line.get_label() for line in figure.axes[0].get_lines()]
    assert any(label.startswith("measured roof: cupy read 4.6 TB/s") and NOT_RECORDED in label for label in labels)
    assert "above the measured ceiling (flagged)" in labels
    assert any(label.startswith("spec roof") and "datasheet" in label for label in labels)


def test_compare_names_each_reference(sweep, tmp_path):
    other = tmp_path / "again.json"
    shutil.copy(SWEEP, other)
    run = CliRunner().invoke(main, ["compare", str(SWEEP), str(other), "--format", "md"])
    assert run.exit_code == 0, run.output
    assert "cupy read" in run.output and unexplained_over_100(run.output) == []
    # The same file twice: every matching point is the same.
    assert "slower" not in run.output.split("## Fleet")[0].replace("faster / slower", "")


def test_fit_on_a_ceilings_only_result_says_why_it_is_empty():
    run = CliRunner().invoke(main, ["fit", str(CEILINGS)])
    assert run.exit_code == 0, run.output
    assert "No series: this result holds no points" in run.output
    assert "cupy read" in run.output  # the reference it would be against is still named


def test_telemetry_figure_draws_each_metric_over_the_rows_that_carry_it(sweep):
    figure = plots.telemetry_figure(sweep, analyse(sweep))
    timeline = sweep.telemetry["timeline"]
    carried = {key: sum(row.get(key) is not None for row in timeline)
               for key in ("sm_clock_hz", "power_w", "dram_bw_util_percent", "tensor_util_percent")}
    assert carried["dram_bw_util_percent"] < 0.6 * len(timeline), "GPM fills about every other reading"
    for ax, key in zip(figure.axes, carried, strict=True):
        ys = np.asarray(ax.get_lines()[0].get_ydata(), dtype=float)
        assert len(ys) == carried[key] and np.isfinite(ys).all(), key


def test_a_cpu_sweeps_peak_bounds_its_own_points():
    """The committed default CPU sweep: its fp32 points ran at up to 122% of the ceilings' short sustained run.
    The reference is then its own fastest GEMM, every plain GEMM point is at most 100% of it, and the weight-only
    formats (drawn against bf16) never raise it."""
    result = load_result(Path(__file__).resolve().parent.parent / "results" / "cpu-amd-epyc-2core-20261202.json")
    for dtype in ("fp32", "bf16"):
        peak = result_peak(result, dtype)
        gemms = [p for p in result.points if p.op == "gemm" and p.dtype == dtype and p.usable]
        fastest = max(p.flop / p.stats.median_s for p in gemms)
        assert peak.flop_per_s == pytest.approx(max(fastest, peak.ceilings_flop_per_s))
        assert all(p.flop / p.stats.median_s <= peak.flop_per_s for p in gemms)
    fp32 = result_peak(result, "fp32")
    assert fp32.basis == "own point" and fp32.flop_per_s > 1.2 * fp32.ceilings_flop_per_s
    assert fp32.regime.startswith("the sweep's own fastest point, gemm fp32 2048x4096 B=")
    # Formats multiply in bf16 but are not bf16 GEMMs: a w4a16 point cannot become the bf16 ceiling.
    fast_format = [replace(p, samples_s=[s / 100 for s in p.samples_s]) if p.dtype == "w4a16" else p
                   for p in result.points]
    assert result_peak(replace(result, points=fast_format), "w4a16") == result_peak(result, "bf16")
    # Without points (another result's ceilings, an old caller), the ceilings' own figure.
    assert reference_peak(result.ceilings, "fp32").basis == "ceilings"


def test_a_lone_spike_the_fit_sets_aside_is_not_the_measured_peak(tmp_path):
    """A sweep whose B=640 GEMM ran 1.5× faster than both its neighbours, once: the fit sets it aside as a lone
    spike, so it is not the ceiling either.  The reference is the fastest point the fit keeps, and the spike is
    flagged above it."""
    from roofline.result.io import save_result
    from tests.conftest import make_result
    from tests.test_fit import synthetic_points

    points = synthetic_points(3e12, 700e12, noise=0.01)
    spike = next(i for i, p in enumerate(points) if p.batch == 640)
    points[spike] = replace(points[spike], samples_s=tuple(t / 1.5 for t in points[spike].samples_s))
    result = make_result(points, ceilings={"measured": {"bandwidth_bytes_per_s": 3.2e12,
                                                         "peak_flop_per_s": {"bf16": 600e12}}})
    analysis = analyse(result)
    gemm = next(s for s in analysis["series"] if s["op"] == "gemm")
    assert gemm["set_aside"][0]["batch"] == 640 and gemm["set_aside"][0]["why"].startswith("lone spike")
    peak = result_peak(result, "bf16")
    kept = [p for p in points if p.batch != 640]
    assert peak.basis == "own point" and peak.details["batch"] != 640
    assert peak.flop_per_s == pytest.approx(max(p.flop / p.stats.median_s for p in kept))
    assert [a["batch"] for a in gemm["above_measured_ceiling"]] == [640]
    path = tmp_path / "spike.json"
    save_result(result, path)
    run = CliRunner().invoke(main, ["fit", str(path)])
    assert run.exit_code == 0 and "B=640, above the ceilings'" not in run.output, run.output
