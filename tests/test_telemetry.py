"""Telemetry through the reader seam with recorded readings, and the real no-NVML path of this machine."""

import pytest

from microbench.telemetry.sampler import (
    GPM_MIN_PERIOD_S,
    NVML_LAG_S,
    Sampler,
    decode_reasons,
    remeasure_reason,
    summarize_window,
)


class RecordedReader:
    """Plays back recorded NVML readings; GPM metrics on every call after the first (which primes)."""

    source = "nvml+gpm"

    def __init__(self, readings, gpm_values=None):
        self.readings = iter(readings)
        self.gpm_values = iter(gpm_values or [])
        self.gpm_calls = 0
        self.power_note = "instantaneous"

    def read(self):
        return next(self.readings)

    def gpm(self):
        self.gpm_calls += 1
        return None if self.gpm_calls == 1 else next(self.gpm_values)


class StepClock:
    def __init__(self, step):
        self.t, self.step = 0.0, step

    def __call__(self):
        self.t += self.step
        return self.t


def reading(sm_mhz=1980, power_w=500, reasons=0, energy_j=0.0):
    return {"sm_clock_hz": sm_mhz * 1e6, "power_w": power_w, "clock_event_reasons": reasons, "energy_j": energy_j,
            "memory_busy_percent": 70}


def test_reason_bitmasks_decode_to_names():
    assert decode_reasons(0) == []
    assert decode_reasons(None) == []
    assert decode_reasons(0x1) == ["gpu_idle"]
    assert decode_reasons(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert decode_reasons(0x8 | 0x10000) == ["hw_slowdown", "unknown_0x10000"]


def test_gpm_readings_are_at_least_100_ms_apart_and_cover_their_window():
    reader = RecordedReader([reading() for _ in range(40)], [{"dram_bw_util_percent": 90.0}] * 40)
    sampler = Sampler(reader, interval_s=0.05, clock=StepClock(0.05))
    for _ in range(40):
        sampler.sample_once()
    gpm_rows = [r for r in sampler.timeline if r.get("gpm_window_s")]
    assert gpm_rows
    for row in gpm_rows:
        start, end = row["gpm_window_s"]
        assert end - start >= GPM_MIN_PERIOD_S - 1e-9
        assert end == row["t_s"]
    windows = [r["gpm_window_s"] for r in gpm_rows]
    assert all(a[1] == b[0] for a, b in zip(windows, windows[1:], strict=False))  # back to back, no gaps


def test_window_summary_aligns_readings_and_flags_throttling():
    rows = [dict(reading(sm_mhz=1980 if t < 1.0 else 1500, reasons=0 if t < 1.0 else 0x20, energy_j=10 * t,
                         power_w=400 + t), t_s=t) for t in [i * 0.05 for i in range(41)]]
    rows[10]["gpm_window_s"], rows[10]["dram_bw_util_percent"] = [0.35, 0.5], 80.0
    rows[30]["gpm_window_s"], rows[30]["dram_bw_util_percent"] = [1.35, 1.5], 60.0
    early = summarize_window(rows, 0.2, 0.8, launches=1000, theoretical_bandwidth=4.8e12,
                             timer_bytes_per_s=3.9e12)
    assert early["readings"] == 13 and early["gpm_readings"] == 1
    assert early["throttled"] is False and early["clock_event_reasons"] == []
    assert early["sm_clock_hz"]["median"] == 1980e6
    assert early["energy_per_launch_j"] == pytest.approx(10 * 0.6 / 1000)
    assert early["dram_counter_bytes_per_s"] == pytest.approx(0.8 * 4.8e12)
    assert early["timer_over_counter"] == pytest.approx(3.9 / 3.84)
    late = summarize_window(rows, 0.8, 1.6, launches=10)
    assert late["throttled"] is True and late["clock_event_reasons"] == ["sw_thermal_slowdown"]
    assert late["sm_clock_drift"] is True
    assert late["timer_over_counter"] is None and "no theoretical bandwidth" in late["timer_over_counter_reason"]
    assert late["sm_clock_hz"]["min"] == 1500e6 and late["sm_clock_hz"]["max"] == 1980e6


def test_energy_per_launch_counts_the_whole_phase_not_only_the_readings_span():
    """Readings 0.1 s apart inside a 0.45 s phase span 0.4 s of it: at a steady 600 W the phase's 1000 launches
    drew 600 W x 0.45 s, not the 240 J between the first and last reading."""
    rows = [dict(reading(energy_j=600 * t, power_w=600), t_s=t) for t in [0.1 * i for i in range(12)]]
    summary = summarize_window(rows, 0.25, 0.70, launches=1000, lag_s=0.0)
    assert summary["readings"] == 4  # 0.3, 0.4, 0.5, 0.6: a 0.3 s span of the 0.45 s phase
    assert summary["energy_per_launch_j"] == pytest.approx(600 * 0.45 / 1000)


def test_gpm_reading_straddling_the_window_is_not_counted():
    rows = [dict(reading(), t_s=t) for t in (0.0, 0.1, 0.2, 0.3)]
    rows[2]["gpm_window_s"], rows[2]["dram_bw_util_percent"] = [0.05, 0.2], 50.0
    summary = summarize_window(rows, 0.1, 0.3, launches=1)
    assert summary["gpm_readings"] == 0 and "dram_bw_util_percent" not in summary
    assert summary["gpm_covered"] is False


def test_failed_reads_are_gaps_not_crashes():
    class Broken(RecordedReader):
        def read(self):
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")

    sampler = Sampler(Broken([]), clock=StepClock(0.05))
    sampler.sample_once()
    assert sampler.timeline == [] and sampler.errors == 1


def test_sampler_thread_runs_and_stops():
    reader = RecordedReader([reading() for _ in range(10_000)], [{"dram_bw_util_percent": 1.0}] * 10_000)
    sampler = Sampler(reader, interval_s=0.01)
    import time

    started = time.perf_counter()
    sampler.start()
    deadline = started + 60
    while len(sampler.rows()) < 3 and time.perf_counter() < deadline:  # a starved thread reads late, not never
        time.sleep(0.01)
    sampler.stop()
    elapsed = time.perf_counter() - started
    count = len(sampler.rows())
    # It reads repeatedly, and never faster than its interval (the count depends on the load, not these bounds).
    assert 3 <= count <= elapsed / 0.01 + 1, (count, elapsed)
    time.sleep(0.05)
    assert len(sampler.rows()) == count  # nothing after stop


def test_no_nvml_on_this_machine_is_recorded_not_fatal():
    pytest.importorskip("pynvml")
    import torch

    from microbench.telemetry.nvml import init_nvml
    from microbench.telemetry.nvml_reader import start_telemetry

    module, why = init_nvml()
    if module is not None or torch.cuda.is_available():
        pytest.skip("this machine has an NVIDIA driver")
    assert "NVML unavailable" in why
    sampler, record = start_telemetry({"kind": "cuda", "index": 0}, 0.05)
    assert sampler is None and record["source"] == "none" and "NVML" in record["reason"]
    sampler, record = start_telemetry({"kind": "cpu"}, 0.05)
    assert sampler is None and "CPU" in record["reason"]


def test_readings_are_attributed_to_the_time_they_describe_not_when_taken():
    """A reading taken just after a phase starts describes the phase before it (NVML lags ~0.1 s)."""
    rows = [dict(reading(power_w=100 if t < 1.0 else 600), t_s=t) for t in [i * 0.05 for i in range(60)]]
    # Readings show the new load from t = 1.1 on (the lag); the phase itself runs from 1.0 to 2.0.
    for row in rows:
        row["power_w"] = 600 if row["t_s"] >= 1.0 + NVML_LAG_S - 1e-9 else 100
    early_pair, late_pair = rows[22], rows[26]  # taken at [1.0, 1.1] and [1.2, 1.3]
    early_pair["gpm_window_s"], early_pair["dram_bw_util_percent"] = [1.0, 1.1], 5.0  # describes [0.9, 1.0]
    late_pair["gpm_window_s"], late_pair["dram_bw_util_percent"] = [1.2, 1.3], 85.0  # describes [1.1, 1.2]
    summary = summarize_window(rows, 1.0, 2.0, launches=1, theoretical_bandwidth=4.8e12, timer_bytes_per_s=4e12)
    assert summary["power_w"]["min"] == 600  # no reading of the idle phase before
    assert summary["gpm_readings"] == 1 and summary["dram_bw_util_percent"]["median"] == 85.0
    assert summary["gpm_described_s"] == [[pytest.approx(1.1), pytest.approx(1.2)]]
    assert summary["timer_over_counter"] == pytest.approx(4e12 / (0.85 * 4.8e12))
    assert summary["lag_s"] == NVML_LAG_S and "lag-corrected" in summary["attribution"]
    unshifted = summarize_window(rows, 1.0, 2.0, launches=1, lag_s=0.0)  # what the first run did
    assert unshifted["power_w"]["min"] == 100 and unshifted["gpm_readings"] == 2


def test_a_phase_with_no_reading_says_why():
    rows = [dict(reading(), t_s=t) for t in (0.0, 0.2, 0.4)]
    summary = summarize_window(rows, 0.21, 0.29, launches=1, theoretical_bandwidth=4.8e12, timer_bytes_per_s=1e12)
    assert summary["readings"] == 0 and "no NVML reading" in summary["no_reading_reason"]
    assert summary["timer_over_counter"] is None and summary["gpm_covered"] is False
    assert "no valid GPM pair" in summary["gpm_missing_reason"]


def test_nan_gpm_metrics_are_dropped_at_the_source():
    reader = RecordedReader([reading() for _ in range(4)],
                            [{"dram_bw_util_percent": float("nan"), "sm_util_percent": 40.0}] * 4)
    sampler = Sampler(reader, interval_s=0.05, clock=StepClock(0.1))
    for _ in range(4):
        sampler.sample_once()
    gpm_rows = [r for r in sampler.timeline if r.get("gpm_window_s")]
    assert gpm_rows and all("dram_bw_util_percent" not in r and r["sm_util_percent"] == 40.0 for r in gpm_rows)


@pytest.mark.parametrize("telemetry, why", [
    ({"throttled": False, "power_capped": True, "clock_event_reasons": ["sw_power_cap"], "sm_clock_drift": True},
     None),
    ({"throttled": True, "power_capped": True, "clock_event_reasons": ["hw_thermal_slowdown", "sw_power_cap"]},
     "throttled: hw_thermal_slowdown"),
    ({"throttled": False, "power_capped": False, "clock_event_reasons": [], "sm_clock_drift": True},
     "SM clock changed during the point"),
    ({"throttled": False, "power_capped": False, "clock_event_reasons": [], "sm_clock_drift": False}, None),
    (None, None),
])
def test_only_slowdowns_and_unexplained_clock_moves_are_measured_again(telemetry, why):
    assert remeasure_reason(telemetry) == why


def test_power_capping_is_recorded_not_called_throttling():
    rows = [dict(reading(reasons=0x4, sm_mhz=1300 + 50 * (i % 5)), t_s=i * 0.05) for i in range(20)]
    summary = summarize_window(rows, 0.1, 0.8, launches=1)
    assert summary["power_capped"] and not summary["throttled"] and summary["sm_clock_drift"]
    assert summary["clock_event_reasons"] == ["sw_power_cap"] and remeasure_reason(summary) is None


def test_a_timed_phase_lasts_long_enough_for_its_readings_even_past_max_samples():
    """The first run stopped points at max_samples after 0.16 s: too short for one lag-corrected GPM pair."""
    from microbench.telemetry.sampler import GPM_MIN_POINT_WINDOW_S
    from microbench.timing.adaptive import StoppingRule, measure

    class Clock:
        t = 0.0

        def now_s(self):
            return self.t

    clock = Clock()

    def sample():
        clock.t += 1e-3
        return [1e-3 * (1 + 0.5 * (int(clock.t * 1e3) % 3))]  # noisy: never converges

    rule = StoppingRule(target_rel_ci=0.001, budget_s=0.05, max_samples=100, warmup_s=0.0,
                        min_time_s=GPM_MIN_POINT_WINDOW_S)
    result = measure(sample, rule, clock)
    assert result.finished_s - result.started_s >= GPM_MIN_POINT_WINDOW_S
    assert len(result.samples_s) > rule.max_samples
