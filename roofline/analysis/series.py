"""Analyse a result: a roofline fit per series, per-point efficiency and bound, and the verdict in words.

Computed from the document, never hand-entered; ``analyse`` returns plain data that ``gpubench fit
--json`` prints and reports store beside their pictures.  Every percentage of a measured ceiling is taken
against the one reference of ``roofline.analysis.reference``; a point above a ceiling is flagged, never clipped.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from roofline.analysis import fit
from roofline.analysis.formats import format_comparisons
from roofline.analysis.reference import reference_bandwidth, result_peak
from roofline.analysis.series_fit import SeriesFit
from roofline.analysis.summary import group_series, spec_bandwidth, spec_peak
from roofline.analysis.trust import trust_lines
from roofline.analysis.verdict import verdict_lines
from roofline.core.counting import critical_intensity_batch
from roofline.core.roof import Roof
from roofline.result.document import Point, Result
from roofline.specs.gpus import SpecError, load_gpu_spec
from roofline.step.routing import Routing

__all__ = ["Roof", "SeriesFit", "analyse", "fit_one", "spec_profile"]


def spec_profile(result: Result):
    """The matched SKU's profile, or None with the reason (an unknown SKU is a message, not a crash)."""
    sku = result.device.sku
    if not sku:
        return None, "no SKU matched, so no spec comparison"
    try:
        return load_gpu_spec(sku), None
    except SpecError as exc:
        return None, f"{exc}: no spec comparison"


def _ratio(value: float, reference: float | None) -> float | None:
    return value / reference if reference else None


def _point_rows(points, data, fitted: Roof, measured: Roof, spec: Roof,
                set_aside: dict[int, str] | None = None) -> list[dict[str, Any]]:
    rows = []
    ridge = fitted.ridge_flop_per_byte
    for index, (point, time_s) in enumerate(zip(points, data.times_s, strict=True)):
        intensity = point.intensity_flop_per_byte
        achieved = point.flop / time_s
        efficiency = _ratio(achieved, measured.attainable(intensity))
        rows.append({
            "batch": point.batch, "time_s": float(time_s), "flop_per_s": achieved,
            "bytes_per_s": point.bytes / time_s, "intensity_flop_per_byte": intensity,
            "ci95_rel_half_width": point.stats.rel_ci95_half_width, "samples": point.stats.n,
            "bound": "compute" if ridge is not None and intensity >= ridge else "memory",
            "efficiency_fit": _ratio(achieved, fitted.attainable(intensity)),
            "efficiency_measured": efficiency,
            "efficiency_spec": _ratio(achieved, spec.attainable(intensity)),
            "above_measured_ceiling": bool(efficiency is not None and efficiency > 1.0),
            "set_aside": (set_aside or {}).get(index),
            # a grouped point: the tokens each touched expert's GEMM saw
            **({"tokens_per_expert": point.batch * point.topk / point.touched} if point.op == "grouped" else {}),
        })
    return rows


def _above_measured(rows: list[dict[str, Any]], measured: Roof) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        if not row["above_measured_ceiling"]:
            continue
        compute = measured.peak_flop_per_s and row["intensity_flop_per_byte"] * measured.bandwidth_bytes_per_s \
            >= measured.peak_flop_per_s
        out.append({"batch": row["batch"], "ceiling": "peak" if compute else "bandwidth",
                    "pct": 100 * row["efficiency_measured"]})
    return out


def _roofs(result: Result, first: Point) -> tuple[Roof, Roof, dict[str, Any]]:
    profile, _ = spec_profile(result)
    spec = Roof(profile.bandwidth_bytes_per_s if profile else spec_bandwidth(result),
                profile.peak_for(first.dtype) if profile else spec_peak(result, first.dtype))
    bandwidth, peak = reference_bandwidth(result.ceilings), result_peak(result, first.dtype)
    measured = Roof(bandwidth.bytes_per_s if bandwidth else None, peak.flop_per_s if peak else None)
    base: dict[str, Any] = {}
    if spec.ridge_flop_per_byte and first.op == "gemm":
        spec_batch = critical_intensity_batch(first.dtype, first.n, first.k, spec.ridge_flop_per_byte)
        base.update(spec_ridge_flop_per_byte=spec.ridge_flop_per_byte,
                    spec_critical_batch=spec_batch if np.isfinite(spec_batch) else None)
    return spec, measured, base


def fit_one(result: Result, points: list[Point], seed: int = 0) -> SeriesFit:
    first = points[0]
    usable = sorted((p for p in points if p.usable), key=lambda p: p.batch)
    spec, measured, extra = _roofs(result, first)
    base = {"op": first.op, "backend": first.backend, "dtype": first.dtype, "n": first.n, "k": first.k,
            "points_ok": len(usable), "batches": [p.batch for p in usable], **extra}
    if first.op == "grouped":
        base.update(experts=first.experts, topk=first.topk, routing=first.routing)
    if first.mixer is not None:
        base.update(mixer=first.mixer.to_dict())
    if not usable:
        statuses = sorted({p.status if p.correct is not False else "wrong" for p in points if not p.superseded})
        reason = next((p.reason for p in points if p.reason), None)
        why = f" ({', '.join(statuses)}: {reason})" if reason else f" ({', '.join(statuses)})"
        return SeriesFit(status="insufficient", message="no ok points" + why, **base)
    data = fit.series_data(usable)
    if first.op == "gemv" or len(usable) < fit.MIN_POINTS:
        bandwidth = float(np.max(data.bytes / data.times_s))
        rows = _point_rows(usable, data, Roof(bandwidth, None), measured, spec)
        common = {"points": rows, "above_measured_ceiling": _above_measured(rows, measured), **base}
        if first.op == "gemv":
            lo, hi = usable[0].stats.ci95_s  # bandwidth's interval from the time's
            return SeriesFit(status="bandwidth-only", message="gemv is one point (batch 1): bandwidth only",
                             bandwidth_bytes_per_s=bandwidth, bandwidth_ci95=[usable[0].bytes / hi,
                                                                              usable[0].bytes / lo], **common)
        return SeriesFit(status="insufficient", **common,
                         message=f"{len(usable)} ok point(s); a fit needs at least {fit.MIN_POINTS}")
    return _fit_series(data, usable, {**base, "roof_regime": _regime(result)}, spec, measured, seed)


def _regime(result: Result) -> str:
    """Which regime a fitted roof describes: that of the points it was fitted to."""
    if result.settings.reference:
        return f"fitted to reference points {result.settings.reference.words()}; regime not recorded"
    if result.origin == "imported":
        return "fitted to imported points; regime not recorded"
    if result.device.kind == "cpu":
        return "fitted to this sweep's points; a CPU has one regime"
    return "fitted to this sweep's points: sustained, as a long sweep runs"


def _fit_series(data: fit.SeriesData, usable: list[Point], base: dict[str, Any], spec: Roof, measured: Roof,
                seed: int) -> SeriesFit:
    times, spread = data.times_s, data.rel_spread
    knees = fit.latency_knees(data.batches, times)
    envelope = fit.fit_envelope(data.flop, data.bytes, times, spread)
    fitted = Roof(envelope.bandwidth_bytes_per_s, envelope.peak_flop_per_s)
    rows = _point_rows(usable, data, fitted, measured, spec, envelope.set_aside)
    common = {**base, "points": rows, "knee_batch_1p10": knees[1.10], "knee_batch_1p25": knees[1.25],
              "cliffs": fit.find_cliffs(data.batches, data.flop / times),
              "bandwidth_bytes_per_s": envelope.bandwidth_bytes_per_s,
              "set_aside": [{"batch": int(data.batches[i]), "why": why} for i, why in envelope.set_aside.items()],
              "above_measured_ceiling": _above_measured(rows, measured)}
    if fit.has_flat_intensity(data):
        intensity = float(np.median(data.flop / data.bytes))
        return SeriesFit(status="memory-bound-at-every-batch", **common,
                         message=f"intensity stays at {intensity:.2f} FLOP/byte whatever the batch: "
                                 "it never reaches a ridge")
    intervals = fit.bootstrap_intervals(data, envelope, seed=seed)
    common["bandwidth_ci95"] = list(intervals.get("bandwidth_bytes_per_s", (None, None)))
    contradiction = fit.roofline_contradiction(data, times, envelope)
    if contradiction:
        return SeriesFit(status="not-a-roofline", message=contradiction, **common,
                         peak_flop_per_s_lower_bound=envelope.best_flop_per_s)
    value = fit.critical_batch(data, envelope)
    if value is None:
        largest = int(data.batches.max())
        return SeriesFit(status="lower-bound", **common, peak_flop_per_s_lower_bound=envelope.best_flop_per_s,
                         critical_batch_lower_bound=largest,
                         message=f"no measured batch is clearly compute-bound: B* > {largest}")
    interval = list(intervals.get("critical_batch", (None, None)))
    crossover = {"critical_batch": value, "critical_batch_ci95": interval}
    if base["op"] == "grouped":  # the fit's B* is one expert's: say it, and the global batch it implies
        crossover = {"critical_tokens_per_expert": value, "critical_tokens_per_expert_ci95": interval,
                     "critical_batch": _global(base, value),
                     "critical_batch_ci95": [_global(base, v) if v is not None else None for v in interval]}
    return SeriesFit(status="ok", message="", **common, peak_flop_per_s=envelope.peak_flop_per_s,
                     ridge_flop_per_byte=envelope.ridge_flop_per_byte, **crossover,
                     peak_ci95=list(intervals.get("peak_flop_per_s", (None, None))))


def _global(base: dict[str, Any], per_expert: float) -> float:
    """The global token count at which the series' routing gives each touched expert ``per_expert`` tokens."""
    return Routing.parse(base["routing"]).global_tokens(base["experts"], base["topk"], per_expert)


def analyse(result: Result, seed: int = 0) -> dict[str, Any]:
    """Every series fitted, each weight-only format against bf16 (``formats``: speed-up per batch and the
    break-even batch), the verdict lines and the warnings; plain data for JSON."""
    series = group_series(result.points)
    fits = [fit_one(result, points, seed) for points in series.values()]
    profile, spec_reason = spec_profile(result)
    bandwidth = reference_bandwidth(result.ceilings)
    dtypes = sorted({p.dtype for p in result.points})
    peaks = {d: result_peak(result, d) for d in dtypes}
    warnings = trust_lines(result, series, fit.MIN_POINTS)
    formats = [c.to_dict() for c in format_comparisons(result, seed)]
    return {
        "device": result.device.name,
        "sku": result.device.sku,
        "origin": result.origin,
        # Imported from a reference database: which, who measured it, with which engine and version.
        "reference": result.settings.reference.to_dict() if result.settings.reference else None,
        "spec_reason": spec_reason,
        "spec": {"bandwidth_bytes_per_s": profile.bandwidth_bytes_per_s,
                 "peak_flop_per_s": dict(profile.peak_flop_per_s)} if profile else None,
        "reference_bandwidth": bandwidth.to_dict() if bandwidth else None,
        "reference_peak": {d: p.to_dict() for d, p in peaks.items() if p},
        "envelope_quantile": fit.ENVELOPE_QUANTILE,
        "roof_tolerance": fit.ROOF_TOLERANCE,
        "warnings": warnings,
        "series": [f.to_dict() for f in fits],
        "formats": formats,
        "verdict": verdict_lines(result, fits, warnings, formats),
    }
