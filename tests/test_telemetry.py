"""Telemetry through the reader seam with recorded readings, and the real no-NVML path of this machine."""

import pytest

from microbench.telemetry import GPM_MIN_PERIOD_S, Sampler, decode_reasons, summarize_window


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
    assert "timer_over_counter" not in late
    assert late["sm_clock_hz"]["min"] == 1500e6 and late["sm_clock_hz"]["max"] == 1980e6


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
    sampler.start()
    import time

    time.sleep(0.3)
    sampler.stop()
    count = len(sampler.rows())
    assert 5 <= count <= 40
    time.sleep(0.05)
    assert len(sampler.rows()) == count


def test_no_nvml_on_this_machine_is_recorded_not_fatal():
    pytest.importorskip("pynvml")
    import torch

    from microbench.nvml import init_nvml
    from microbench.nvml_reader import start_telemetry

    module, why = init_nvml()
    if module is not None or torch.cuda.is_available():
        pytest.skip("this machine has an NVIDIA driver")
    assert "NVML unavailable" in why
    sampler, record = start_telemetry({"kind": "cuda", "index": 0}, 0.05)
    assert sampler is None and record["source"] == "none" and "NVML" in record["reason"]
    sampler, record = start_telemetry({"kind": "cpu"}, 0.05)
    assert sampler is None and "CPU" in record["reason"]
