"""Compute ceilings per dtype: a shape search, then a burst and a sustained figure for the best shape.

A Hopper GPU runs a short burst of tensor work after idle at its top boost clock (H200 bf16 8192³: 793
TFLOP/s at 1980 MHz) and then settles under its power cap (~675 TFLOP/s at 1260-1530 MHz).  A sweep is
long, so the roofline's roof is the *sustained* figure; the burst is reported beside it.  Both come from
one run of the best shape: idle ``BURST_IDLE_S``, then back-to-back launches for ``SUSTAINED_S``; the burst
is the median of the first ``BURST_S``, the sustained figure the median of the last half (settled).  Each
regime records the SM clock, power and clock-event reasons that describe its own window
(``telemetry.attribute``), or null without telemetry.

The shape search (as mamf-finder does) times a few large shapes like any sweep point and keeps the best;
every shape tried is recorded.
"""

from __future__ import annotations

import statistics
from typing import Any

from microbench.points import plan
from microbench.timing.adaptive import Stopped
from microbench.timing.session import Session

# Candidate matmul shapes (M, N, K): square and decode-like-wide, large enough to fill the machine.
GPU_PEAK_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 8192, 16384), (16384, 8192, 4096))
GPU_QUICK_PEAK_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192))
CPU_PEAK_SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048), (1024, 4096, 2048))
CPU_QUICK_PEAK_SHAPES = ((512, 512, 512), (1024, 1024, 1024))
# (idle before, burst window, whole run) in seconds.  The GPU needs ~1 s idle to return to its top clock
# and a few seconds of load to settle at its power cap (H200 probe: settled within 3 s); the CPU has no
# power cap to speak of, so both regimes are measured the same short way.
GPU_REGIMES_S = (1.5, 0.1, 3.0)
CPU_REGIMES_S = (0.0, 0.05, 0.3)
# Samples a regime run takes at the least.  A CPU launch of the bf16 peak shape takes about 1 s, longer than
# the whole run: with one sample, burst and sustained were that one launch, and one slowed launch (1.68 s
# against 0.92 s) halved the bf16 peak and put every bf16 point at up to 191% of it.  Five leave three in the
# settled half, whose median one slow launch cannot move.
MIN_REGIME_SAMPLES = 5


def check_stop(session: Session) -> None:
    if session.stop.is_set():
        raise Stopped()


def shape_search(session: Session, dtype: str, shapes, backends) -> tuple[dict[str, Any] | None, list]:
    """The best (shape, back end) by median FLOP/s over a short measurement each, and everything tried."""
    from microbench.timing.measure import measure_point

    tried, best = [], None
    for (m, n, k), backend in ((shape, backend) for shape in shapes for backend in backends):
        check_stop(session)
        point = measure_point(session, plan.PointSpec("gemm", dtype, m, n, k, backend), interruptible=True)
        session.weights.clear()
        entry = {"m": m, "n": n, "k": k, "backend": backend, "kernel": point.kernel, "status": point.status,
                 "reason": point.reason, "timer": point.timer}
        if point.ok:
            # an ok point has samples, so stats
            entry["flop_per_s"] = point.flop / point.stats.median_s  # pyright: ignore[reportOptionalMemberAccess]
            entry["rel_err"] = (point.correctness or {}).get("rel_err")
            if best is None or entry["flop_per_s"] > best["flop_per_s"]:
                best = entry
        tried.append(entry)
    return best, tried


def _regime_telemetry(session: Session, start_s: float, end_s: float) -> dict[str, Any]:
    """SM clock, power and clock-event reasons from the readings that describe [start, end]."""
    empty = {"sm_clock_hz": None, "power_w": None, "clock_event_reasons": None}
    summary = session.window_summary(start_s, end_s)
    if summary is None:
        return empty
    if not summary["readings"]:
        return {**empty, "telemetry_reason": summary["no_reading_reason"]}
    clock, power = summary.get("sm_clock_hz"), summary.get("power_w")
    return {"sm_clock_hz": {key: clock[key] for key in ("min", "median", "max")} if clock else None,
            "power_w": {key: power[key] for key in ("median", "max")} if power else None,
            "clock_event_reasons": summary["clock_event_reasons"]}


def run_regimes(session: Session, timer, flop: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(burst, sustained): idle, then back-to-back samples; each regime's FLOP/s, window and telemetry."""
    idle_s, burst_s, total_s = GPU_REGIMES_S if session.choice.kind == "cuda" else CPU_REGIMES_S
    clock = session.clock
    if idle_s and session.stop.wait(idle_s):
        raise Stopped()
    samples: list[tuple[float, float]] = []  # (clock when the sample ended, seconds per launch)
    start = clock.now_s()
    while len(samples) < MIN_REGIME_SAMPLES or samples[-1][0] - start < total_s:
        check_stop(session)
        times = timer.sample()
        session.synchronize()
        now = clock.now_s()
        samples.extend((now, t) for t in times)
    end = samples[-1][0]
    burst = [t for at, t in samples if at - start <= burst_s] or [samples[0][1]]
    settled_from = start + (end - start) / 2
    settled = [t for at, t in samples if at >= settled_from]

    def regime(times, window):
        median = statistics.median(times)
        return {"flop_per_s": flop / median, "time_s": median, "samples": len(times), "timer": timer.name,
                "duration_s": window[1] - window[0], "window_s": list(window),
                **_regime_telemetry(session, *window)}

    sustained = {**regime(settled, (settled_from, end)), "run_s": end - start}
    return regime(burst, (start, min(end, start + burst_s))), sustained


def measure_peak(session: Session, dtype: str, shapes, backends=("torch",)) -> dict[str, Any]:
    """Shape search, then burst and sustained FLOP/s of the best shape (``peak_flop_per_s`` is sustained)."""
    from microbench.timing import ops
    from microbench.timing.measure import build_workload, prepared_timer, release_timers

    best, tried = shape_search(session, dtype, shapes, backends)
    if best is None:
        reasons = {e["reason"] for e in tried if e["reason"]}
        return {"flop_per_s": None, "reason": "; ".join(sorted(reasons)) or "no shape ran", "tried": tried,
                "burst": None, "sustained": None}
    spec = plan.PointSpec("gemm", dtype, best["m"], best["n"], best["k"], best["backend"])
    timers = []
    try:
        with ops.matmul_precision(session.torch, dtype == "tf32"):
            # One copy: a compute-bound matmul does not care whether its weights sit in L2.
            workload = build_workload(session, spec, copies=1)
            timers.append(prepared_timer(session, workload))
            burst, sustained = run_regimes(session, timers[0], spec_flop(spec))
    finally:
        release_timers(session, timers)
        session.weights.clear()
    shape = {"m": best["m"], "n": best["n"], "k": best["k"]}
    for entry in (burst, sustained):
        entry.update(shape=shape, kernel=best["kernel"], backend=best["backend"])
    return {"flop_per_s": sustained["flop_per_s"], "regime": "sustained", "best_shape": shape,
            "kernel": best["kernel"], "backend": best["backend"], "timer": sustained["timer"], "tried": tried,
            "burst": burst, "sustained": sustained}


def spec_flop(spec: plan.PointSpec) -> int:
    from roofline.core.counting import count_work

    return count_work(spec.op, spec.dtype, spec.batch, spec.n, spec.k).flop


def peak_shapes(session: Session, quick: bool):
    if session.choice.kind == "cuda":
        return GPU_QUICK_PEAK_SHAPES if quick else GPU_PEAK_SHAPES
    return CPU_QUICK_PEAK_SHAPES if quick else CPU_PEAK_SHAPES
