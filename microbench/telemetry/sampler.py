"""NVML telemetry while measuring: a sampler thread, per-point window summaries, GPM counters on Hopper+.

The sampler reads through a ``Reader`` seam (``NvmlReader`` on a GPU), so window alignment, summaries and
reason decoding are tested by feeding recorded readings.  Absence is normal: without a driver, without
permission, on a MIG slice or on the CPU, the sweep goes on with telemetry source ``none`` (or
``nvml-basic`` without GPM) and the reason recorded.

NVML's "memory utilisation" is the share of time the memory was busy, not bandwidth: it is stored as
``memory_busy_percent`` and never labelled bandwidth.  GPM's DRAM bandwidth utilisation is bandwidth.

Attribution (which readings describe a point).  Measured on an H200 (tests/data/h200/probe.json), NVML power,
clocks, clock-event reasons and GPM react about ``NVML_LAG_S`` = 0.1 s after the GPU does, and a GPM pair
closer than ~0.1 s apart is NaN.  So a reading *taken* at t describes the GPU at t − 0.1 s, and a GPM pair
taken at [a, b] describes [a − 0.1, b − 0.1].  A point's figures use only readings whose *described* time
lies inside its timed phase [start, end]: a plain reading when t − lag ∈ [start, end], a GPM pair when its
whole described interval does (a pair straddling the boundary mixes two phases and is dropped), and never
a NaN.  The method is recorded in each summary (``attribution``, ``lag_s``) with the described intervals of
the GPM pairs used (``gpm_described_s``).  To hold at least one whole pair, a point's timed phase lasts at
least ``GPM_MIN_POINT_WINDOW_S`` when GPM is on (pairs are 0.10-0.18 s long at a 50 ms sampling interval, so
two pair lengths plus jitter), and the summary waits until the readings describing its end have arrived.
A point with no reading or no valid pair says why (``no_reading_reason``, ``gpm_missing_reason``,
``timer_over_counter_reason``) instead of giving a figure.  Replayed on the first H200 run's timeline this
moves the timer/counter ratio of memory-bound points from 0.96-2.2 to 1.00 ± 0.03 for 33 of 35.

Throttling.  ``sw_power_cap`` (and the other power-capping reasons) is how a Hopper GPU runs sustained
tensor work: it is recorded (``power_capped``, the reasons, the clock) and is never a reason to measure
again.  ``throttled`` means a thermal or hardware slowdown; ``remeasure_reason`` asks for another attempt
only for that, or for an SM clock that moved within the phase without a power cap to explain it.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

# nvmlClocksEventReason* bits (nvml.h), decoded to names.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Slowdowns that make a measurement unrepresentative of the card: measure again after a pause.
THROTTLING = {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
# The power controller holding the card at its limit: the normal state under sustained load, recorded.
POWER_CAPPING = {"sw_power_cap"}
# NVML values and GPM describe the GPU about this long before they are read (H200 probe: ~0.1 s).
NVML_LAG_S = 0.1
# GPM needs sample pairs at least 100 ms apart; a point's timed phase lasts at least this long when GPM is on.
GPM_MIN_PERIOD_S = 0.1
GPM_MIN_POINT_WINDOW_S = 0.4
ATTRIBUTION = (f"lag-corrected: a reading taken at t describes t - {NVML_LAG_S} s; a GPM pair counts when its "
               "whole described interval lies inside the timed phase")
METRICS = ("sm_clock_hz", "memory_clock_hz", "power_w", "gpu_util_percent", "memory_busy_percent",
           "temperature_c", "memory_temperature_c", "memory_used_bytes", "dram_bw_util_percent",
           "tensor_util_percent", "hmma_tensor_util_percent", "sm_util_percent", "sm_occupancy_percent",
           "fp16_util_percent", "fp32_util_percent")
GPM_METRICS = {"dram_bw_util_percent", "tensor_util_percent", "hmma_tensor_util_percent", "sm_util_percent",
               "sm_occupancy_percent", "fp16_util_percent", "fp32_util_percent"}
# A clock that moved more than this within a point's window: the point drifted.  Boost clocks wander by a
# percent or two under steady load; more than this is a real change of operating point.
CLOCK_DRIFT_REL = 0.05


def min_point_window_s(use_gpm: bool, interval_s: float) -> float:
    """How long a timed phase must last so readings describe it: a whole GPM pair, or a few plain readings."""
    return GPM_MIN_POINT_WINDOW_S if use_gpm else 4 * interval_s


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
            metrics = {k: v for k, v in (metrics or {}).items() if _valid(v)}
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


def _valid(value: Any) -> bool:
    return isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value))


def described_s(row: dict[str, Any], lag_s: float = NVML_LAG_S) -> tuple[float, float]:
    """The interval of GPU time a reading describes: its GPM pair's interval, or its instant, moved back by the lag."""
    start, end = row.get("gpm_window_s") or (row["t_s"], row["t_s"])
    return start - lag_s, end - lag_s


def attribute(rows: list[dict[str, Any]], start_s: float, end_s: float, lag_s: float = NVML_LAG_S
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(plain readings, GPM readings) that describe only [start_s, end_s] (see the module docstring)."""
    plain = [r for r in rows if start_s <= r["t_s"] - lag_s <= end_s]
    gpm = []
    for row in rows:
        if row.get("gpm_window_s") and any(_valid(row.get(m)) for m in GPM_METRICS):
            low, high = described_s(row, lag_s)
            if start_s <= low and high <= end_s:
                gpm.append(row)
    return plain, gpm


def summarize_window(rows: list[dict[str, Any]], start_s: float, end_s: float, launches: int,
                     theoretical_bandwidth: float | None = None, timer_bytes_per_s: float | None = None,
                     lag_s: float = NVML_LAG_S) -> dict[str, Any]:
    """Median/min/max of each metric over the readings that describe [start, end], energy per launch,
    clock-event reasons, power capping, throttling, and the timer/DRAM-counter cross-check."""
    inside, gpm_inside = attribute(rows, start_s, end_s, lag_s)
    summary: dict[str, Any] = {"window_s": [start_s, end_s], "attribution": ATTRIBUTION, "lag_s": lag_s,
                               "readings": len(inside), "gpm_readings": len(gpm_inside),
                               "gpm_described_s": [list(described_s(r, lag_s)) for r in gpm_inside]}
    for metric in METRICS:
        source = gpm_inside if metric in GPM_METRICS else inside
        values = [r[metric] for r in source if _valid(r.get(metric))]
        if values:
            summary[metric] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    # The counter's rise between the first and last readings inside the phase is the energy of their span, which
    # is shorter than the phase (on the H200, 0.64-0.93 of it): its rate over that span, over the whole phase.
    energy = [(r["t_s"], r["energy_j"]) for r in inside if _valid(r.get("energy_j"))]
    if len(energy) >= 2 and launches > 0 and energy[-1][0] > energy[0][0]:
        rate_w = (energy[-1][1] - energy[0][1]) / (energy[-1][0] - energy[0][0])
        summary["energy_per_launch_j"] = rate_w * (end_s - start_s) / launches
    reasons = sorted({name for r in inside for name in decode_reasons(r.get("clock_event_reasons"))})
    summary["clock_event_reasons"] = reasons
    summary["throttled"] = bool(THROTTLING & set(reasons))
    summary["power_capped"] = bool(POWER_CAPPING & set(reasons))
    clocks = [r["sm_clock_hz"] for r in inside if r.get("sm_clock_hz")]
    summary["sm_clock_drift"] = bool(clocks) and (max(clocks) - min(clocks)) > CLOCK_DRIFT_REL * max(clocks)
    duration = end_s - start_s
    if not inside:
        summary["no_reading_reason"] = (f"no NVML reading describes this {duration:.3g} s timed phase "
                                        f"(readings lag {lag_s} s)")
    summary["gpm_covered"] = bool(gpm_inside)
    if not gpm_inside:
        summary["gpm_missing_reason"] = (f"no valid GPM pair lies inside this {duration:.3g} s timed phase "
                                         f"(pairs are >= {GPM_MIN_PERIOD_S} s long and lag {lag_s} s)")
    summary.update(_counter_check(summary, theoretical_bandwidth, timer_bytes_per_s))
    return summary


def _counter_check(summary: dict[str, Any], theoretical_bandwidth: float | None,
                   timer_bytes_per_s: float | None) -> dict[str, Any]:
    """Timer bytes/s over GPM DRAM bytes/s, or the reason there is no ratio."""
    dram = summary.get("dram_bw_util_percent")
    if not dram:
        return {"timer_over_counter": None, "timer_over_counter_reason": summary.get("gpm_missing_reason")
                or "GPM gave no DRAM bandwidth utilisation"}
    if not (theoretical_bandwidth and timer_bytes_per_s):
        return {"timer_over_counter": None,
                "timer_over_counter_reason": "no theoretical bandwidth or timed bytes/s to compare with"}
    counter = dram["median"] / 100 * theoretical_bandwidth
    if counter <= 0:
        return {"timer_over_counter": None, "dram_counter_bytes_per_s": counter,
                "timer_over_counter_reason": "GPM counted no DRAM traffic"}
    return {"dram_counter_bytes_per_s": counter, "timer_over_counter": timer_bytes_per_s / counter}


def remeasure_reason(telemetry: Mapping[str, Any] | None) -> str | None:
    """Why a point must be measured again, decided from its own attributed readings, or None.

    Thermal or hardware slowdown, or an SM clock that moved within the phase with no power cap to explain
    it.  A power-capped point (sw_power_cap) is recorded with its clock, never measured again: the cap is
    the card's steady state under load and a second attempt would meet it too.
    """
    telemetry = telemetry or {}
    if telemetry.get("throttled"):
        slow = sorted(THROTTLING & set(telemetry.get("clock_event_reasons") or []))
        return "throttled: " + ", ".join(slow or ["slowdown"])
    if telemetry.get("sm_clock_drift") and not telemetry.get("power_capped"):
        return "SM clock changed during the point"
    return None
