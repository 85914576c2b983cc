"""The roofline fit: synthetic series with known answers, edge cases, and a peer's real H100/A100 curves."""

import csv
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.analysis import fit
from roofline.analysis.series import analyse
from roofline.core.counting import count_work, critical_intensity_batch
from roofline.result.io import load_result
from tests.conftest import make_point, make_result

VIDUR = os.path.join(os.path.dirname(__file__), "data", "vidur-llama2-70b-fp16.json")
BATCHES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 640, 1024]


def roofline_time(batch, n, k, bw, peak, dtype="bf16", op="gemm"):
    work = count_work(op, dtype, batch, n, k)
    return max(work.bytes / bw, work.flop / peak)


def synthetic_points(bw, peak, n=8192, k=8192, batches=BATCHES, noise=0.03, steps=(), seed=0, dtype="bf16"):
    """Points on a known roofline, with multiplicative noise (always slower: nothing beats the roof),
    bends near the ridge, and tile-quantisation steps at ``steps`` (20-40% slower)."""
    rng = np.random.default_rng(seed)
    points = []
    for batch in batches:
        t = roofline_time(batch, n, k, bw, peak, dtype)
        if batch in steps:
            t *= 1.2 + 0.2 * rng.random()
        samples = [t * (1 + noise * rng.random()) for _ in range(15)]
        points.append(_point(dtype, batch, n, k, samples))
    return points


def _point(dtype, batch, n, k, samples):
    from roofline.result.document import Point

    return Point(op="gemm", dtype=dtype, batch=batch, n=n, k=k, backend="torch", status="ok",
                 timer="test", samples_s=tuple(samples))


def series_fit(points, **kwargs):
    analysis = analyse(make_result(points, **kwargs))
    return analysis, analysis["series"][0]


def test_synthetic_roofline_is_recovered_within_5_percent_through_noise_and_steps():
    bw, peak = 4.0e12, 800e12
    points = synthetic_points(bw, peak, steps=(96, 384, 640), noise=0.03)
    _, s = series_fit(points)
    assert s["status"] == "ok"
    assert s["bandwidth_bytes_per_s"] == pytest.approx(bw, rel=0.05)
    assert s["peak_flop_per_s"] == pytest.approx(peak, rel=0.05)
    truth = critical_intensity_batch("bf16", 8192, 8192, peak / bw)
    assert s["critical_batch"] == pytest.approx(truth, rel=0.05)
    lo, hi = s["critical_batch_ci95"]
    assert lo <= s["critical_batch"] <= hi
    assert 384 in s["cliffs"] or 640 in s["cliffs"]


def test_a_lone_fast_outlier_does_not_lift_the_roof():
    bw, peak = 3.0e12, 700e12
    points = synthetic_points(bw, peak, noise=0.01)
    fast = points[15]
    points[15] = _point("bf16", fast.batch, fast.n, fast.k, [t / 1.4 for t in fast.samples_s])
    _, s = series_fit(points)
    assert s["peak_flop_per_s"] == pytest.approx(peak, rel=0.05)


def test_crossover_beyond_the_largest_batch_is_a_lower_bound():
    points = synthetic_points(4.8e12, 989e12, batches=[1, 2, 4, 8, 16, 32, 64])
    _, s = series_fit(points)
    assert s["status"] == "lower-bound"
    assert s["critical_batch"] is None
    assert s["critical_batch_lower_bound"] == 64
    assert "> 64" in s["message"]


def test_bmm_never_reaches_the_ridge():
    points = [_point_bmm(b) for b in BATCHES]
    analysis, s = series_fit(points)
    assert s["status"] == "memory-bound-at-every-batch"
    assert s["critical_batch"] is None
    assert "memory-bound at every batch" in analysis["verdict"][0]


def _point_bmm(batch, bw=3e12):
    from roofline.result.document import Point

    work = count_work("bmm", "bf16", batch, 4096, 1024)
    return Point(op="bmm", dtype="bf16", batch=batch, n=4096, k=1024, backend="torch", status="ok",
                 timer="test", samples_s=tuple(work.bytes / bw * (1 + 0.001 * i) for i in range(7)))


def test_too_few_points_give_a_message_and_the_rest_is_analysed():
    good = synthetic_points(3e12, 700e12)
    few = [make_point("gemm", "fp16", b, 1024, 1024, 1e-5 * b) for b in (1, 2)]
    analysis = analyse(make_result(good + few))
    statuses = {(s["dtype"], s["status"]) for s in analysis["series"]}
    assert ("bf16", "ok") in statuses and ("fp16", "insufficient") in statuses
    message = next(s["message"] for s in analysis["series"] if s["dtype"] == "fp16")
    assert "at least 3" in message


def test_unknown_sku_is_a_message_not_a_crash():
    points = synthetic_points(3e12, 700e12)
    analysis = analyse(make_result(points, device={"kind": "cuda", "name": "X9000", "sku": "x9000"}))
    assert "unknown SKU" in analysis["spec_reason"]
    assert analysis["series"][0]["status"] == "ok"


def test_spec_crossover_on_an_h200():
    points = synthetic_points(4.3e12, 750e12, n=8192, k=28672)
    ceilings = {"measured": {"copy": {"bytes_per_s": 4.3e12}, "bandwidth_bytes_per_s": 4.3e12}}
    analysis, s = series_fit(points, device={"kind": "cuda", "name": "NVIDIA H200", "sku": "h200-sxm"},
                             ceilings=ceilings)
    assert s["spec_ridge_flop_per_byte"] == pytest.approx(206, abs=1)
    assert 206 < s["spec_critical_batch"] < 220
    assert "The spec sheet's ridge (206 FLOP/byte)" in analysis["verdict"][0]
    assert all(p["bound"] in ("memory", "compute") for p in s["points"])
    assert all(0 < p["efficiency_spec"] <= 1.0 for p in s["points"])


def test_knees_and_cliffs():
    batches = np.array([1, 2, 4, 8, 16])
    times = np.array([1.0, 1.05, 1.12, 1.3, 2.0])
    assert fit.latency_knees(batches, times) == {1.10: 4, 1.25: 8}
    flops = np.array([1.0, 2.0, 1.5, 1.6, 1.2])
    assert fit.find_cliffs(batches, flops) == [4, 16]


# --- The peer's real curves (microsoft/vidur profiles: Llama-2-70B shapes, fp16, TP1) ---

def vidur_csv(tmp_path, gpu, scale_640=1.0, drop_640=False):
    document = json.load(open(VIDUR))
    path = tmp_path / f"{gpu}.csv"
    with open(path, "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["op", "dtype", "batch", "n", "k", "time_s"])
        for series in document["series"]:
            if series["gpu"] != gpu:
                continue
            for batch, micros in series["points_us"]:
                if batch == 640 and series["op"] == "mlp_down_proj":
                    if drop_640:
                        continue
                    micros *= scale_640
                writer.writerow(["gemm", series["dtype"], batch, series["n"], series["k"], micros * 1e-6])
    return path


def import_and_fit(tmp_path, gpu, **kwargs):
    name, sku = {"h100": ("NVIDIA H100 80GB HBM3", "h100-sxm"), "a100": ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb")}[gpu]
    output = tmp_path / f"{gpu}.json"
    run = CliRunner().invoke(main, ["import", str(vidur_csv(tmp_path, gpu, **kwargs)), "-o", str(output),
                                    "--device-name", name, "--sku", sku, "--force"], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    result = load_result(output)
    assert result.origin == "imported"
    return analyse(result)


@pytest.mark.parametrize("gpu, band", [("h100", (239, 263)), ("a100", (150, 163))])
def test_reference_curves_land_in_their_bands(tmp_path, gpu, band):
    analysis = import_and_fit(tmp_path, gpu)
    assert len(analysis["series"]) == 3
    for s in analysis["series"]:
        assert s["status"] == "ok", s["message"]
        # The bands are the crossovers as reported (whole batches): H100 239-263, A100 150-163.
        assert band[0] <= round(s["critical_batch"]) <= band[1], (s["n"], s["k"], s["critical_batch"])
        lo, hi = s["critical_batch_ci95"]
        assert band[0] - 10 <= lo <= s["critical_batch"] <= hi <= band[1] + 10
        assert s["cliffs"], "the real curves step"


def test_the_h100_down_proj_step_at_640_does_not_drag_the_fit(tmp_path):
    def down(analysis):
        return next(s for s in analysis["series"] if s["k"] == 28672)

    base = down(import_and_fit(tmp_path, "h100"))
    without = down(import_and_fit(tmp_path, "h100", drop_640=True))
    worse = down(import_and_fit(tmp_path, "h100", scale_640=2.0))
    times = {p["batch"]: p["time_s"] for p in base["points"]}
    assert times[640] > times[768], "the data has the step: M=640 is slower than M=768"
    for other in (without, worse):
        assert other["critical_batch"] == pytest.approx(base["critical_batch"], rel=0.02)
        assert other["peak_flop_per_s"] == pytest.approx(base["peak_flop_per_s"], rel=0.02)


def test_import_drops_bad_times_and_keeps_the_rest(tmp_path):
    path = tmp_path / "bad.csv"
    rows = ["op,dtype,batch,n,k,time_s"]
    rows += [f"gemm,bf16,{b},4096,4096,{roofline_time(b, 4096, 4096, 3e12, 700e12)}" for b in BATCHES]
    rows += ["gemm,bf16,1,4096,4096,nan", "gemm,bf16,2,4096,4096,0", "gemm,bf16,3,4096,4096,-1e-5",
             "gemm,bf16,5,4096,4096,"]
    path.write_text("\n".join(rows) + "\n")
    output = tmp_path / "bad.json"
    run = CliRunner().invoke(main, ["import", str(path), "-o", str(output), "--device-name", "Some GPU"])
    assert run.exit_code == 0, run.output
    result = load_result(output)
    errors = [p for p in result.points if p.status == "error"]
    assert sorted(p.batch for p in errors) == [3, 5]
    assert "NaN, zero or negative" in errors[0].reason
    assert len(result.settings["import_warnings"]) == 2
    fitted = analyse(result)["series"][0]
    assert fitted["status"] == "ok" and fitted["points_ok"] == len(BATCHES)


@pytest.mark.parametrize("content, args, message", [
    ("op,dtype,batch\ngemm,bf16,1\n", [], "missing column"),
    ("op,dtype,batch,n,k,time_s\ngemm,bf16,x,1,1,1\n", [], "integers"),
    ("op,dtype,batch,n,k,time_s\ngemm,bf16,1,1,1,1\n", ["--sku", "h900"], "unknown SKU"),
    ("op,dtype,batch,n,k,time_s\nconv,bf16,1,1,1,1\n", [], "unknown op"),
    ("op,dtype,batch,n,k,time_s\n", [], "no data rows"),
])
def test_bad_imports_exit_2(tmp_path, content, args, message):
    path = tmp_path / "in.csv"
    path.write_text(content)
    output = tmp_path / "out.json"
    run = CliRunner().invoke(main, ["import", str(path), "-o", str(output), "--device-name", "G", *args])
    assert run.exit_code == 2
    assert message in run.output
    assert not output.exists()


def test_fit_json_runs_without_torch(tmp_path):
    analysis_path = tmp_path / "r.json"
    from roofline.result.io import save_result

    save_result(make_result(synthetic_points(3e12, 700e12)), analysis_path)
    code = ("import sys, json; from microbench.cli.app import main\n"
            "sys.modules['torch'] = None  # any import of torch now fails\n"
            f"main(['fit', {str(analysis_path)!r}, '--json'], standalone_mode=False)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=os.getcwd())
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    keys = {"op", "dtype", "n", "k", "bandwidth_bytes_per_s", "peak_flop_per_s", "ridge_flop_per_byte",
            "critical_batch", "critical_batch_ci95", "critical_batch_lower_bound", "knee_batch_1p10",
            "knee_batch_1p25", "cliffs"}
    assert keys <= set(document["series"][0])
    assert math.isfinite(document["series"][0]["critical_batch"])


def test_fit_exports_one_csv_row_per_series_with_the_json_figures():
    import io
    from pathlib import Path

    result = str(Path(__file__).parent.parent / "results" / "cpu-amd-epyc-2core-20261202.json")
    run = CliRunner().invoke(main, ["fit", result, "--format", "csv"], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    rows = list(csv.DictReader(io.StringIO(run.output)))
    analysis = json.loads(CliRunner().invoke(main, ["fit", result, "--format", "json"]).output)
    assert len(rows) == len(analysis["series"]) > 1
    for row, series in zip(rows, analysis["series"], strict=True):
        assert (row["dtype"], row["op"], int(row["n"]), int(row["k"])) == (series["dtype"], series["op"], series["n"],
                                                                          series["k"])
        if series["critical_batch"] is None:
            assert row["critical_batch"] == ""
        else:
            assert float(row["critical_batch"]) == series["critical_batch"]
            assert [float(row["critical_batch_ci95_low"]), float(row["critical_batch_ci95_high"])] == \
                series["critical_batch_ci95"]
    assert {row["dtype"] for row in rows} >= {"w8a16", "w4a16"}
    both = CliRunner().invoke(main, ["fit", result, "--json", "--format", "csv"])
    assert both.exit_code == 2 and "give one" in both.output


def test_the_knee_is_said_against_the_smallest_batch_measured_not_batch_1():
    """An imported table that starts at 32 rows: its knees are measured against batch 32, and said so."""
    from roofline.analysis.series import analyse
    from tests.conftest import make_point, make_result

    batches = [32, 64, 128, 256, 512, 1024]
    points = [make_point(batch=b, time_s=max(40e-6, b * 1e-6)) for b in batches]
    verdict = " ".join(analyse(make_result(points))["verdict"])
    assert "above batch 32 by batch" in verdict and "above batch 1 " not in verdict
