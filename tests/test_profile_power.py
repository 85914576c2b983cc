"""What a measured profile's ``--energy`` gives simulate: the draw per token count from the step's linears'
power readings (here the real H200 sweep's readings, tests/data/h200), the document's check of that table, and
the simulator charging each step at the draw for its tokens, on a run checked by hand."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from serving_helpers import constant_profile

from microbench.serving.profile_power import measured_power, power_by_tokens
from roofline.serving.metrics import energy_figures
from roofline.serving.profile_doc import ProfileDocError, StepProfile, power_record, step_watts
from roofline.serving.simulate import simulate
from roofline.serving.workload import Request

H200_SWEEP = Path(__file__).parent / "data" / "h200" / "first-run-sweep.json"


def _h200_linears() -> dict[int, list[tuple[float, float, int]]]:
    """Per batch, (median power W, seconds per launch, layers) of the H200 sweep's three gemm shapes (Llama-3-70B's
    fused qkv 10240x8192 and down_proj 8192x28672, Llama-3-8B's down_proj 4096x14336), one layer each."""
    points = json.loads(H200_SWEEP.read_text())["points"]
    out: dict[int, list] = {}
    for p in points:
        if p["op"] == "gemm" and p["status"] == "ok" and not p.get("superseded"):
            out.setdefault(p["batch"], []).append((p["telemetry"]["power_w"]["median"], p["time_s"], 1))
    return out


def test_the_h200_draw_per_token_count_is_the_linears_time_weighted_power():
    per_tokens = _h200_linears()
    table = power_by_tokens(per_tokens)
    assert table["tokens"] == sorted(per_tokens) and table["tokens"][0] == 1
    # By hand at batch 1: each shape's median reading weighted by its seconds.
    rows = per_tokens[1]
    assert table["watts"][0] == pytest.approx(sum(w * s for w, s, _ in rows) / sum(s for _, s, _ in rows))
    # A memory-bound GEMV draws less than the compute-bound GEMM at 1024 tokens (about 500 W against 750 W).
    assert table["watts"][0] < 0.8 * table["watts"][-1]
    record = measured_power("cuda", True, per_tokens, "NVIDIA H200")
    assert record["upper_bound"] is False and record["by_tokens"] == table
    assert StepProfile.from_dict({**constant_profile().to_dict(), "power": record}).power == record


def test_decode_charges_a_launch_its_median_power_times_its_time():
    from microbench.decode.job import launch_joules
    from roofline.result.io import load_result

    points = [p for p in load_result(H200_SWEEP).points if p.ok and p.telemetry is not None]
    assert len(points) > 50
    for point in points:
        assert launch_joules(point) == pytest.approx(point.telemetry.power_w.median * point.stats.median_s)


def test_a_token_count_missing_a_reading_is_left_out_and_none_at_all_says_why():
    table = power_by_tokens({1: [(500.0, 1e-5, 2)], 4: [(None, 1e-5, 2)], 8: [(600.0, 1e-5, 1), (400.0, 3e-5, 1)]})
    assert table["tokens"] == [1, 8] and table["watts"] == pytest.approx([500.0, 450.0])
    assert "no NVML power reading" in measured_power("cuda", True, {1: [(None, 1e-5, 1)]})["why_none"]
    assert "without --energy" in measured_power("cuda", False)["why_none"]
    assert "CPU has no energy counter" in measured_power("cpu", True)["why_none"]


def test_the_draw_between_token_counts_is_interpolated_in_log_tokens_and_held_at_the_ends():
    power = power_record(200, "a test table", "this test", False, {"tokens": [1, 4, 64], "watts": [100, 400, 700]})
    assert [step_watts(power, t) for t in (1, 2, 4, 16, 64, 1000)] == pytest.approx([100, 250, 400, 550, 700, 700])
    assert step_watts(power_record(300, "one figure", "this test", True), 17) == 300


@pytest.mark.parametrize("table, message", [
    ({"tokens": [4, 1], "watts": [1.0, 2.0]}, "increasing"),
    ({"tokens": [1, 2], "watts": [1.0]}, "one length"),
    ({"tokens": [1], "watts": [-3.0]}, "positive numbers"),
    ("600 W", "one length"),
])
def test_a_bad_power_table_is_refused(table, message):
    document = {**constant_profile().to_dict(),
                "power": {**power_record(100, "b", "s", False), "by_tokens": table}}
    with pytest.raises(ProfileDocError, match=message):
        StepProfile.from_dict(document)


def test_each_step_is_charged_at_the_draw_for_its_tokens():
    # A constant step of 0.5 s; one request of a 4-token prompt and 5 output tokens: its prefill step (4 tokens,
    # 400 W: 200 J) gives the first token, then 4 decode steps of 1 token (100 W: 4 x 50 J): 400 J for 5 tokens.
    table = {"tokens": [1, 4], "watts": [100.0, 400.0]}
    profile = replace(constant_profile(0.5), power=power_record(250, "a test table", "this test", False, table))
    run = simulate(profile, [Request(0, 0.0, 4, 5)], "continuous")
    assert (run.busy_s, run.busy_j) == pytest.approx((2.5, 400.0))
    energy = energy_figures(5, run.busy_s, run.makespan_s, 2, 1, profile.power_figure, None, run.busy_j)
    assert energy["joules"] == pytest.approx(800.0)  # two GPUs a replica
    assert energy["watts_per_gpu"] == pytest.approx(160.0)  # the mean draw charged, not the table's mean
    assert energy["tokens_per_joule"] == pytest.approx(5 / 800)
    assert energy["upper_bound"] is False
