"""Weight-only formats against bf16 (issue #21): the speed-up per batch and the break-even batch, hand-checkable
from synthetic times, through fit, verdict, report, compare and import."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.analysis.formats import BEYOND, CROSSES, NEVER, crossing_batch, format_comparisons
from roofline.analysis.series import analyse
from roofline.report.result_report import write_report
from roofline.result.document import Point
from roofline.result.io import load_result, save_result
from tests.conftest import make_point, make_result

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
# w4a16's time over bf16's per batch: 1/r is the speed-up, 1.25 at 32 and 0.8 at 64.
W4_RATIO = {1: 0.3, 2: 0.3, 4: 0.32, 8: 0.4, 16: 0.6, 32: 0.8, 64: 1.25, 128: 1.6}
# Linear in log batch between 32 (speed-up 1.25) and 64 (0.8): 1 is 5/9 of the way.
W4_BREAK_EVEN = 32 * 2 ** (5 / 9)  # 46.97
W8_RATIO = {b: 0.55 for b in BATCHES}  # faster at every batch: the break-even lies beyond 128
H200 = {"kind": "cuda", "name": "NVIDIA H200", "sku": "h200-sxm"}


def bf16_time(batch: int) -> float:
    return 100e-6 * max(1.0, batch / 16)


def noisy_point(dtype: str, batch: int, time_s: float, rng: np.random.Generator, op: str = "gemm",
                noise: float = 0.03, samples: int = 25, **extra) -> Point:
    """Samples scattered around ``time_s`` (seeded, lognormal): a bootstrap has something to resample."""
    values = tuple(time_s * rng.lognormal(0.0, noise, samples))
    return Point(op=op, dtype=dtype, batch=batch, n=4096, k=4096, backend="torch", status="ok", timer="test",
                 samples_s=values, **extra)


def format_points(ratios: dict[str, dict[int, float]], noise: float = 0.0, seed: int = 0) -> list[Point]:
    """bf16 at every batch and each format at bf16's time × its ratio; ``noise`` 0: make_point's ±1% pattern,
    whose median is exactly the time (so the break-even is exactly the hand-computed one)."""
    rng = np.random.default_rng(seed)
    points = []
    for dtype, ratio in {"bf16": dict.fromkeys(BATCHES, 1.0), **ratios}.items():
        for batch, factor in ratio.items():
            time_s = bf16_time(batch) * factor
            points.append(noisy_point(dtype, batch, time_s, rng, noise=noise) if noise
                          else make_point(dtype=dtype, batch=batch, time_s=time_s))
    return points


def comparisons(points, seed=0):
    return {c.format: c for c in format_comparisons(make_result(points, device=H200), seed)}


def test_crossing_is_linear_in_log_batch_between_the_last_batch_above_1_and_the_first_below():
    batches = np.array([16, 32, 64, 128])
    assert crossing_batch(batches, np.array([1.5, 1.25, 0.8, 0.6])) == pytest.approx(W4_BREAK_EVEN)
    assert crossing_batch(batches, np.array([2.0, 1.0, 0.5, 0.4])) == pytest.approx(32)  # exactly 1 still pays
    # The first fall below 1 counts, even when a larger batch pays off again (a kernel switch).
    assert 16 < crossing_batch(batches, np.array([1.2, 0.9, 1.1, 0.8])) < 32
    assert crossing_batch(batches, np.array([1.5, 1.2, 1.1, 1.01])) == math.inf
    assert crossing_batch(batches, np.array([0.9, 1.2, 1.1, 1.01])) == -math.inf


def test_break_even_of_a_format_that_crosses_is_the_hand_computed_batch():
    found = comparisons(format_points({"w4a16": W4_RATIO}))["w4a16"]
    assert found.batches == list(BATCHES)
    assert found.speedup == pytest.approx([1 / W4_RATIO[b] for b in BATCHES])
    assert found.status == CROSSES
    assert found.break_even_batch == pytest.approx(W4_BREAK_EVEN)
    lo, hi = found.break_even_ci95
    assert lo <= W4_BREAK_EVEN <= hi and hi - lo < 8
    assert found.speedup_batch1 == pytest.approx(1 / 0.3)
    lo, hi = found.speedup_batch1_ci95
    assert lo < 1 / 0.3 < hi


def test_the_bootstrap_interval_holds_the_truth_through_noise_and_is_seeded():
    points = format_points({"w4a16": W4_RATIO}, noise=0.05, seed=3)
    first, again, other = comparisons(points, seed=0)["w4a16"], comparisons(points, seed=0)["w4a16"], \
        comparisons(points, seed=1)["w4a16"]
    lo, hi = first.break_even_ci95
    assert lo < W4_BREAK_EVEN < hi
    assert 32 <= lo and hi <= 64  # the crossing stays between the batches that bracket it
    assert first == again
    assert other.break_even_ci95 != first.break_even_ci95  # the seed is what makes it repeat
    assert other.break_even_batch == first.break_even_batch  # the estimate itself is no replicate's


def test_faster_at_every_batch_is_beyond_the_largest_batch_measured():
    found = comparisons(format_points({"w8a16": W8_RATIO}))["w8a16"]
    assert (found.status, found.break_even_batch, found.break_even_ci95) == (BEYOND, None, [None, None])
    analysis = analyse(make_result(format_points({"w8a16": W8_RATIO}), device=H200))
    sentence = next(line for line in analysis["verdict"] if line.startswith("w8a16"))
    assert "still pays off at batch 128, the largest measured" in sentence and "beyond" in sentence


def test_slower_at_the_smallest_batch_is_no_batch_pays_off():
    slower = {b: 1.1 for b in BATCHES}
    found = comparisons(format_points({"w4a16": slower}))["w4a16"]
    assert (found.status, found.break_even_batch) == (NEVER, None)
    assert found.speedup_batch1 == pytest.approx(1 / 1.1)
    analysis = analyse(make_result(format_points({"w4a16": slower}), device=H200))
    sentence = next(line for line in analysis["verdict"] if line.startswith("w4a16"))
    assert sentence.startswith("w4a16 does not pay off on 4096x4096 on NVIDIA H200 (h200-sxm)")


def test_the_verdict_leads_with_the_answer_in_the_digits_its_interval_earns():
    analysis = analyse(make_result(format_points({"w4a16": W4_RATIO, "w8a16": W8_RATIO}), device=H200))
    lines = analysis["verdict"]
    assert lines[0].startswith("w4a16 is 3.3× (95% CI ") and lines[1].startswith("w8a16 is 1.8")
    assert "faster than bf16 on 4096x4096 at batch 1 and stops paying off at batch 47 (" in lines[0]
    assert lines[0].endswith("on NVIDIA H200 (h200-sxm).")
    assert {c["format"] for c in analysis["formats"]} == {"w4a16", "w8a16"}
    json.dumps(analysis, allow_nan=False)  # analysis.json and fit --json: plain, finite data


def test_gemv_stands_in_at_batch_1_and_retried_or_wrong_points_are_left_out():
    points = [p for p in format_points({"w4a16": W4_RATIO}) if p.batch != 1]
    points += [make_point(op="gemv", dtype="bf16", batch=1, time_s=bf16_time(1)),
               make_point(op="gemv", dtype="w4a16", batch=1, time_s=bf16_time(1) * 0.25)]
    # A first attempt that telemetry flagged (superseded), and a wrong result (the only w4a16 point at B=24, where
    # bf16 ran): neither is what the fit uses.
    points += [make_point(dtype="w4a16", batch=64, time_s=1e-6, superseded=True),
               make_point(dtype="bf16", batch=24, time_s=bf16_time(24)),
               make_point(dtype="w4a16", batch=24, time_s=1e-6, correctness={"passed": False})]
    found = comparisons(points)["w4a16"]
    assert found.batches[0] == 1 and found.speedup_batch1 == pytest.approx(4.0) and 24 not in found.batches
    assert found.break_even_batch == pytest.approx(W4_BREAK_EVEN)


def test_no_bf16_or_no_common_batch_means_no_comparison():
    only_formats = [p for p in format_points({"w4a16": W4_RATIO}) if p.dtype != "bf16"]
    assert comparisons(only_formats) == {}
    disjoint = [make_point(dtype="bf16", batch=2), make_point(dtype="w4a16", batch=4)]
    assert comparisons(disjoint) == {}
    plain = [make_point(dtype="bf16", batch=2), make_point(dtype="fp16", batch=2)]
    assert comparisons(plain) == {}  # fp16 is a plain dtype, not a weight-only format


def test_unsupported_bmm_in_a_weight_only_format_is_no_reason_for_doubt():
    points = format_points({"w4a16": W4_RATIO}) + [
        make_point(op="bmm", dtype="w4a16", batch=b, status="unsupported", reason="no int4 bmm") for b in BATCHES]
    analysis = analyse(make_result(points, device=H200))
    assert not any("bmm w4a16" in line for line in analysis["warnings"])
    interrupted = points + [make_point(op="bmm", dtype="bf16", batch=b) for b in BATCHES[:3]]
    assert any("bmm bf16" in line for line in analyse(make_result(interrupted))["warnings"])


def test_faster_again_after_losing_at_the_smallest_batch_is_said():
    ratio = {b: 1.1 for b in BATCHES} | {64: 0.9}
    analysis = analyse(make_result(format_points({"w4a16": ratio}), device=H200))
    sentence = next(line for line in analysis["verdict"] if line.startswith("w4a16"))
    assert "faster again only at batch 64" in sentence and "every larger batch" not in sentence


def format_result_file(tmp_path, ratios=None):
    path = tmp_path / "formats.json"
    save_result(make_result(format_points(ratios or {"w4a16": W4_RATIO, "w8a16": W8_RATIO}), device=H200), path)
    return path


def test_fit_prints_the_break_even_and_its_json_carries_it(tmp_path):
    path = format_result_file(tmp_path)
    text = CliRunner().invoke(main, ["fit", str(path)], catch_exceptions=False)
    assert text.exit_code == 0, text.output
    assert "weight-only formats against bf16" in text.output and "break-even batch" in text.output
    assert "stops paying off at batch 47" in " ".join(text.output.split())
    printed = CliRunner().invoke(main, ["fit", str(path), "--json"], catch_exceptions=False)
    formats = {c["format"]: c for c in json.loads(printed.output)["formats"]}
    assert formats["w4a16"]["break_even_batch"] == pytest.approx(W4_BREAK_EVEN)
    assert formats["w8a16"]["status"] == BEYOND and formats["w8a16"]["break_even_batch"] is None


def test_the_report_draws_the_format_figure_and_says_the_break_even(tmp_path):
    folder = tmp_path / "report"
    analysis = write_report(load_result(format_result_file(tmp_path)), folder)
    assert (folder / "formats_4096x4096.png").stat().st_size > 10_000
    markdown = (folder / "report.md").read_text()
    assert "## Weight-only formats against bf16" in markdown
    assert "![formats_4096x4096](formats_4096x4096.png)" in markdown
    assert analysis["verdict"][0] in markdown and "stops paying off at batch 47" in analysis["verdict"][0]
    html = (folder / "report.html").read_text()
    assert "alt='formats_4096x4096'" in html and "w4a16 / bf16" in html
    saved = json.loads((folder / "analysis.json").read_text())
    assert [c["format"] for c in saved["formats"]] == ["w4a16", "w8a16"]


def test_a_report_without_a_weight_only_format_has_no_format_figure(tmp_path):
    folder = tmp_path / "plain"
    points = [make_point(dtype=d, batch=b, time_s=bf16_time(b)) for d in ("bf16", "fp16") for b in BATCHES]
    write_report(make_result(points), folder)
    assert not list(folder.glob("formats_*.png"))
    assert "Weight-only formats" not in (folder / "report.md").read_text()


def test_import_accepts_the_weight_only_formats(tmp_path):
    rows = ["op,dtype,batch,n,k,time_s"]
    for dtype, ratio in (("bf16", dict.fromkeys(BATCHES, 1.0)), ("w4a16", W4_RATIO)):
        rows += [f"gemm,{dtype},{b},4096,4096,{bf16_time(b) * ratio[b] * (1 + 0.01 * i)}"
                 for b in BATCHES for i in (-1, 0, 1)]
    (tmp_path / "timings.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "imported.json"
    run = CliRunner().invoke(main, ["import", str(tmp_path / "timings.csv"), "-o", str(out),
                                    "--device-name", "NVIDIA H200"], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    result = load_result(out)
    assert {p.dtype for p in result.points if p.ok} == {"bf16", "w4a16"}
    found = analyse(result)["formats"]
    assert [c["format"] for c in found] == ["w4a16"]
    assert found[0]["break_even_batch"] == pytest.approx(W4_BREAK_EVEN)


@pytest.mark.parametrize("fmt", ["table", "md", "json"])
def test_compare_shows_each_results_break_even(tmp_path, fmt):
    h200 = format_result_file(tmp_path)
    slower = {b: 1.1 for b in BATCHES}
    h100 = tmp_path / "h100.json"
    save_result(make_result(format_points({"w4a16": slower}), device={"kind": "cuda", "name": "NVIDIA H100",
                                                                     "sku": "h100-sxm"}), h100)
    run = CliRunner().invoke(main, ["compare", str(h200), str(h100), "--format", fmt], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    if fmt == "json":
        groups = {g["format"]: g for g in json.loads(run.output)["comparison"]["formats"]}
        rows = {row["sku"]: row for row in groups["w4a16"]["rows"]}
        assert rows["h200-sxm"]["break_even_batch"] == pytest.approx(W4_BREAK_EVEN)
        assert (rows["h100-sxm"]["status"], rows["h100-sxm"]["break_even_batch"]) == (NEVER, None)
        assert [row["sku"] for row in groups["w8a16"]["rows"]] == ["h200-sxm"]
        return
    text = " ".join(run.output.split())
    assert "w4a16 against bf16, 4096×4096: break-even batch" in text
    assert "batch 47 (46–48)" in text and "no batch pays off (slower already at batch 1)" in text
    assert "beyond the largest batch measured (128)" in text  # w8a16, measured on the H200 only


def test_no_figure_prints_outside_its_own_interval():
    """A value rounded to the digits its interval earns can fall outside bounds printed one place finer: then
    it is printed at their place; and an interval that misses its estimate (few noisy samples) is widened."""
    from roofline.analysis.formats import _holding, with_interval

    assert with_interval(14.6, 12.1, 15.0) == ("15", "12", "15")
    assert with_interval(2.02, 1.85, 2.36) == ("2", "1.8", "2.4")
    assert _holding([12.0, 15.0], 11.6) == [11.6, 15.0]
    assert _holding([None, 15.0], 20.0) == [None, 20.0]
    assert _holding([12.0, 15.0], float("inf")) == [12.0, 15.0]


def test_every_format_output_names_the_kernels_that_ran(tmp_path):
    """A format's speed-up describes its kernel as much as the format: the verdict, the report's table and figure
    legend, analysis.json and compare each say which kernel ran the format and which ran bf16."""
    triton_name = "triton int8 weight-only (gpubench)"
    kernels = {"bf16": "torch.matmul", "w8a16": triton_name}
    points = [dataclasses.replace(p, kernel=kernels[p.dtype]) for p in format_points({"w8a16": W8_RATIO})]
    path = tmp_path / "named.json"
    save_result(make_result(points, device=H200), path)
    analysis = write_report(load_result(path), tmp_path / "report")
    sentence = next(line for line in analysis["verdict"] if "w8a16" in line)
    assert f"w8a16 ({triton_name})" in sentence and "bf16 (torch.matmul)" in sentence
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert f"w8a16 ({triton_name}) / bf16 (torch.matmul)" in markdown
    saved = json.loads((tmp_path / "report" / "analysis.json").read_text())["formats"][0]
    assert (saved["kernel"], saved["baseline_kernel"]) == (triton_name, "torch.matmul")
    run = CliRunner().invoke(main, ["compare", str(path), str(path), "--format", "md"], catch_exceptions=False)
    assert f"{triton_name} / torch.matmul" in run.output


def test_an_interval_holding_1x_says_the_two_are_not_told_apart_not_faster():
    from roofline.analysis.formats import format_sentence

    told = {"format": "w4a16", "baseline": "bf16", "n": 2048, "k": 4096, "backend": "torch", "batches": [1, 4, 16],
            "speedup": [1.04, 0.9, 0.5], "speedup_ci95": [[0.5, 1.6], [0.8, 1.0], [0.4, 0.6]], "status": CROSSES,
            "break_even_batch": 3.7, "break_even_ci95": [None, None]}
    sentence = format_sentence(told, "on AMD EPYC")
    assert sentence.startswith("w4a16 is not told apart from bf16 on 2048x4096 at batch 1 (1")
    assert "faster" not in sentence
    clear = dict(told, speedup_ci95=[[1.02, 1.06], [0.8, 1.0], [0.4, 0.6]])
    assert format_sentence(clear, "on AMD EPYC").startswith("w4a16 is 1.04× (95% CI 1.02–1.06) faster than bf16")
