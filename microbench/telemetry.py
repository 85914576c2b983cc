"""NVML telemetry while measuring: a sampler thread, per-point window summaries, GPM counters on Hopper+.

The sampler reads through a ``Reader`` seam (``NvmlReader`` on a GPU), so window alignment, summaries and
reason decoding are tested by feeding recorded readings.  Absence is normal: without a driver, without
permission, on a MIG slice or on the CPU, the sweep goes on with telemetry source ``none`` (or
``nvml-basic`` without GPM) and the reason recorded.

NVML's "memory utilisation" is the share of time the memory was busy, not bandwidth: it is stored as
``memory_busy_percent`` and never labelled bandwidth.  GPM's DRAM bandwidth utilisation is bandwidth.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

# nvmlClocksEventReason* bits (nvml.h), decoded to names.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THROTTLING = {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
# GPM needs sample pairs at least 100 ms apart; a point's timed phase lasts at least this long when GPM is on.
GPM_MIN_PERIOD_S = 0.1
GPM_MIN_POINT_WINDOW_S = 0.25
METRICS = ("sm_clock_hz", "memory_clock_hz", "power_w", "gpu_util_percent", "memory_busy_percent",
           "temperature_c", "memory_temperature_c", "memory_used_bytes", "dram_bw_util_percent",
           "tensor_util_percent", "hmma_tensor_util_percent", "sm_util_percent", "sm_occupancy_percent",
           "fp16_util_percent", "fp32_util_percent")
# A clock that moved more than this within a point's window: the point drifted.  Boost clocks wander by a
# percent or two under steady load; more than this is a real change of operating point.
CLOCK_DRIFT_REL = 0.05


def decode_reasons(mask: int | None) -> list[str]:
    if not mask:
        return []
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    return names + ([f"unknown_0x{unknown:x}"] if unknown else [])


class Reader(Protocol):
    source: str

    def read(self) -> dict[str, Any]: ...

    def gpm(self) -> dict[str, float] | None: ...


class Sampler:
    """Reads every ``interval_s`` on a thread; GPM metrics every ``GPM_MIN_PERIOD_S`` or more."""

    def __init__(self, reader: Reader, interval_s: float = 0.05, clock: Callable[[], float] = time.perf_counter):
        self.reader = reader
        self.interval_s = interval_s
        self.clock = clock
        self.timeline: list[dict[str, Any]] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._last_gpm_s: float | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpubench-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample_once()
            self._stop.wait(self.interval_s)

    def sample_once(self) -> None:
        """One reading, plus a GPM reading when one is due; public so tests drive it without a thread.

        ``reader.gpm()`` returns the metrics since its previous call (None on the first, which primes it),
        so each GPM reading covers ``gpm_window_s`` = [previous GPM time, this time].
        """
        try:
            row = dict(self.reader.read())
        except Exception:  # noqa: BLE001 - a failed read is a gap in the timeline, never a crash
            self.errors += 1
            return
        row["t_s"] = self.clock()
        if self._last_gpm_s is None or row["t_s"] - self._last_gpm_s >= GPM_MIN_PERIOD_S:
            try:
                metrics = self.reader.gpm()
            except Exception:  # noqa: BLE001
                metrics = None
                self.errors += 1
            if metrics and self._last_gpm_s is not None:
                row.update(metrics)
                row["gpm_window_s"] = [self._last_gpm_s, row["t_s"]]
            self._last_gpm_s = row["t_s"]
        with self._lock:
            self.timeline.append(row)

    def wait_past(self, t_s: float, timeout_s: float = 1.0) -> None:
        """Block until a reading later than ``t_s`` exists, so a window's end is covered."""
        deadline = time.perf_counter() + timeout_s
        while time.perf_counter() < deadline:
            with self._lock:
                if self.timeline and self.timeline[-1]["t_s"] >= t_s:
                    return
            time.sleep(self.interval_s / 4)

    def rows(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.timeline)


def summarize_window(rows: list[dict[str, Any]], start_s: float, end_s: float, launches: int,
                     theoretical_bandwidth: float | None = None, timer_bytes_per_s: float | None = None
                     ) -> dict[str, Any]:
    """Median/min/max of each metric over [start, end], energy per launch, reasons, throttling, cross-check.

    Plain readings count when taken inside the window; GPM readings when their whole interval lies inside.
    """
    inside = [r for r in rows if start_s <= r["t_s"] <= end_s]
    gpm_inside = [r for r in rows if r.get("gpm_window_s") and start_s <= r["gpm_window_s"][0]
                  and r["gpm_window_s"][1] <= end_s]
    summary: dict[str, Any] = {"window_s": [start_s, end_s], "readings": len(inside), "gpm_readings": len(gpm_inside)}
    for metric in METRICS:
        source = gpm_inside if metric in GPM_METRICS else inside
        values = [r[metric] for r in source if r.get(metric) is not None]
        if values:
            summary[metric] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    energy = [r["energy_j"] for r in inside if r.get("energy_j") is not None]
    if len(energy) >= 2 and launches > 0:
        summary["energy_per_launch_j"] = (energy[-1] - energy[0]) / launches
    reasons = sorted({name for r in inside for name in decode_reasons(r.get("clock_event_reasons"))})
    summary["clock_event_reasons"] = reasons
    summary["throttled"] = bool(THROTTLING & set(reasons))
    clocks = [r["sm_clock_hz"] for r in inside if r.get("sm_clock_hz")]
    summary["sm_clock_drift"] = bool(clocks) and (max(clocks) - min(clocks)) > CLOCK_DRIFT_REL * max(clocks)
    dram = summary.get("dram_bw_util_percent")
    if dram and theoretical_bandwidth and timer_bytes_per_s:
        counter = dram["median"] / 100 * theoretical_bandwidth
        summary["dram_counter_bytes_per_s"] = counter
        summary["timer_over_counter"] = timer_bytes_per_s / counter if counter > 0 else None
    summary["gpm_covered"] = bool(gpm_inside)
    return summary


GPM_METRICS = {"dram_bw_util_percent", "tensor_util_percent", "hmma_tensor_util_percent", "sm_util_percent",
               "sm_occupancy_percent", "fp16_util_percent", "fp32_util_percent"}


def throttled_points(points) -> list:
    return [p for p in points if (p.telemetry or {}).get("throttled")]
