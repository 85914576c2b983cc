"""Replays of the first real H200 run (tests/data/h200, see its README): telemetry attribution, the
timer/counter cross-check and the throttle decision, decided offline on what the GPU really recorded."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from microbench.telemetry.sampler import NVML_LAG_S, attribute, described_s, remeasure_reason, summarize_window

DATA = Path(__file__).resolve().parent / "data" / "h200"
# Memory-bound and long enough for the counter to mean something (issue 13.3).
MEMORY_BOUND_FLOP_PER_BYTE = 20
MIN_TIME_S = 30e-6


@pytest.fixture(scope="module")
def sweep():
    return json.loads((DATA / "first-run-sweep.json").read_text())


def measured(sweep):
    return [p for p in sweep["points"] if p["status"] == "ok" and p.get("telemetry")]


def replayed(sweep, point):
    start, end = point["telemetry"]["window_s"]
    return summarize_window(sweep["telemetry"]["timeline"], start, end, launches=1,
                            theoretical_bandwidth=sweep["device"]["theoretical_bandwidth_bytes_per_s"],
                            timer_bytes_per_s=point["bytes_per_s"])


def test_the_fixture_is_the_first_run(sweep):
    points = measured(sweep)
    assert len(points) == 88 and len(sweep["telemetry"]["timeline"]) == 915
    assert sum(p["telemetry"]["throttled"] for p in points) == 42  # what the first run flagged
    assert {r for p in points if p["telemetry"]["throttled"] for r in p["telemetry"]["clock_event_reasons"]} \
        == {"sw_power_cap"}


def test_no_point_uses_a_reading_that_describes_another_phase(sweep):
    timeline = sweep["telemetry"]["timeline"]
    windows = sorted(p["telemetry"]["window_s"] for p in measured(sweep))
    for start, end in windows:
        plain, gpm = attribute(timeline, start, end)
        for row in plain:
            assert start <= row["t_s"] - NVML_LAG_S <= end  # the instant a plain reading describes
        for row in gpm:
            low, high = described_s(row)
            assert start <= low and high <= end
            # ... and so inside no other point's phase (phases do not overlap)
            assert not any(s < high and low < e for s, e in windows if (s, e) != (start, end))


def test_the_timer_and_the_dram_counter_agree_on_memory_bound_points(sweep):
    ratios, without = [], []
    for point in measured(sweep):
        summary = replayed(sweep, point)
        if not summary["gpm_covered"]:
            assert summary["timer_over_counter"] is None and summary["timer_over_counter_reason"]
            without.append(point)
            continue
        if point["intensity_flop_per_byte"] < MEMORY_BOUND_FLOP_PER_BYTE and point["time_s"] >= MIN_TIME_S:
            ratios.append(summary["timer_over_counter"])
    # What we find: 87 of the 88 phases (0.16-0.27 s long) hold a whole lag-corrected GPM pair; of the 35
    # memory-bound points of >= 30 µs, 33 agree within 10% (median 1.01); the other two are 0.87 and 1.24.
    assert len(without) <= 2
    assert len(ratios) == 35
    assert statistics.median(ratios) == pytest.approx(1.0, abs=0.03)
    assert sum(abs(r - 1) <= 0.10 for r in ratios) >= 33
    assert all(0.8 <= r <= 1.3 for r in ratios), sorted(ratios)


def test_the_first_runs_own_attribution_was_off(sweep):
    """The recorded (unshifted) figures are what this replaces: many ratios far from 1."""
    recorded = [p["telemetry"].get("timer_over_counter") for p in measured(sweep)
                if p["intensity_flop_per_byte"] < MEMORY_BOUND_FLOP_PER_BYTE and p["time_s"] >= MIN_TIME_S]
    recorded = [r for r in recorded if r]
    assert max(recorded) > 2 and sum(abs(r - 1) > 0.15 for r in recorded) >= 8


def test_no_point_of_the_first_run_is_measured_again(sweep):
    decisions = {}
    for point in measured(sweep):
        summary = replayed(sweep, point)
        decisions[(point["op"], point["n"], point["k"], point["batch"], point["backend"], point["attempt"])] = \
            (remeasure_reason(summary), summary["power_capped"])
    assert all(why is None for why, _ in decisions.values())
    # The power cap is still recorded where its readings describe the point.
    assert sum(capped for _, capped in decisions.values()) >= 30


def test_devices_prints_the_recorded_h200_as_nvml_described_it(monkeypatch):
    # The GPU table of `gpubench devices`, fed the device record the H200 run wrote (describe_cuda's own
    # output there), so a key it reads under another name than describe_cuda writes shows up off a GPU.
    from click.testing import CliRunner

    import microbench.device.discovery as discovery
    import microbench.device.provenance as provenance
    from microbench.cli.app import main

    recorded = json.loads((DATA / "first-run-ceilings.json").read_text())["device"]
    monkeypatch.setattr(discovery, "cuda_status", lambda: (1, None))
    monkeypatch.setattr(provenance, "describe_cuda", lambda index: recorded)
    result = CliRunner().invoke(main, ["devices"], env={"COLUMNS": "250"}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "NVIDIA H200" in result.output, result.output
    row = next(line for line in result.output.splitlines() if "NVIDIA H200" in line)
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert cells == ["0", "NVIDIA H200", "h200-sxm", "150 GB", "1.98 GHz / 3.2 GHz", "700 W", "True", "False",
                     "True", "0", "True"], cells
    assert "no NVML" not in result.output


def test_devices_without_nvml_shows_dashes_not_a_traceback(monkeypatch):
    from click.testing import CliRunner

    import microbench.device.discovery as discovery
    import microbench.device.provenance as provenance
    from microbench.cli.app import main

    recorded = json.loads((DATA / "first-run-ceilings.json").read_text())["device"]
    keep = ("kind", "index", "name", "uuid", "pci_bus_id", "compute_capability", "sm_count", "memory_bytes",
            "l2_cache_bytes", "sku")  # what torch alone knows: NVML could not be opened
    bare = {key: recorded[key] for key in keep} | {"nvml": {"available": False, "reason": "no libnvidia-ml"}}
    monkeypatch.setattr(discovery, "cuda_status", lambda: (1, None))
    monkeypatch.setattr(provenance, "describe_cuda", lambda index: bare)
    result = CliRunner().invoke(main, ["devices"], env={"COLUMNS": "250"}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "NVIDIA H200" in result.output, result.output
    row = next(line for line in result.output.splitlines() if "NVIDIA H200" in line)
    assert [cell.strip() for cell in row.strip("│ ").split("│")][5:] == ["–"] * 6, row
    assert "GPU 0: no NVML (no libnvidia-ml)" in result.output
