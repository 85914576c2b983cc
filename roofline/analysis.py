"""Analyse a result: a roofline fit per series, per-point efficiency and bound, and the verdict in words.

Computed from the document, never hand-entered; ``analyse`` returns plain data that ``gpubench fit
--json`` prints and reports store beside their pictures.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from roofline import fit
from roofline.counting import critical_intensity_batch
from roofline.profiles import ProfileError, load_gpu_profile
from roofline.schema import Point, Result
from roofline.summary import group_series, measured_bandwidth, measured_peak
from roofline.units import si


@dataclass(frozen=True)
class Roof:
    """A roofline: attainable FLOP/s at an intensity.  ``peak`` None means bandwidth only."""

    bandwidth_bytes_per_s: float | None
    peak_flop_per_s: float | None

    def attainable(self, intensity: float) -> float | None:
        if not self.bandwidth_bytes_per_s:
            return None
        memory = self.bandwidth_bytes_per_s * intensity
        return min(memory, self.peak_flop_per_s) if self.peak_flop_per_s else memory


@dataclass(frozen=True)
class SeriesFit:
    op: str
    backend: str
    dtype: str
    n: int
    k: int
    status: str  # ok | lower-bound | memory-bound-at-every-batch | bandwidth-only | insufficient
    message: str
    points_ok: int
    batches: list[int]
    bandwidth_bytes_per_s: float | None = None
    peak_flop_per_s: float | None = None
    peak_flop_per_s_lower_bound: float | None = None
    ridge_flop_per_byte: float | None = None
    critical_batch: float | None = None
    critical_batch_ci95: list[float | None] = field(default_factory=lambda: [None, None])
    critical_batch_lower_bound: int | None = None
    spec_ridge_flop_per_byte: float | None = None
    spec_critical_batch: float | None = None
    knee_batch_1p10: int | None = None
    knee_batch_1p25: int | None = None
    cliffs: list[int] = field(default_factory=list)
    points: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def spec_profile(result: Result):
    """The matched SKU's profile, or None with the reason (an unknown SKU is a message, not a crash)."""
    sku = result.device.get("sku")
    if not sku:
        return None, "no SKU matched, so no spec comparison"
    try:
        return load_gpu_profile(sku), None
    except ProfileError as exc:
        return None, f"{exc}: no spec comparison"


def _series_data(points: list[Point]) -> fit.SeriesData:
    first = points[0]
    return fit.SeriesData(
        dtype=first.dtype, n=first.n, k=first.k,
        batches=np.array([p.batch for p in points]),
        flop=np.array([p.flop for p in points], dtype=float),
        bytes=np.array([p.bytes for p in points], dtype=float),
        samples_s=tuple(np.array(p.samples_s) for p in points),
    )


def _point_rows(points, data, fitted: Roof, measured: Roof, spec: Roof) -> list[dict[str, Any]]:
    rows = []
    for point, time_s in zip(points, data.times_s, strict=True):
        intensity = point.intensity_flop_per_byte
        achieved = point.flop / time_s
        ridge = (fitted.peak_flop_per_s / fitted.bandwidth_bytes_per_s
                 if fitted.peak_flop_per_s and fitted.bandwidth_bytes_per_s else None)
        rows.append({
            "batch": point.batch, "time_s": float(time_s), "flop_per_s": achieved,
            "bytes_per_s": point.bytes / time_s, "intensity_flop_per_byte": intensity,
            "bound": "compute" if ridge is not None and intensity >= ridge else "memory",
            "efficiency_fit": _ratio(achieved, fitted.attainable(intensity)),
            "efficiency_measured": _ratio(achieved, measured.attainable(intensity)),
            "efficiency_spec": _ratio(achieved, spec.attainable(intensity)),
        })
    return rows


def _ratio(value: float, reference: float | None) -> float | None:
    return value / reference if reference else None


def fit_one(result: Result, points: list[Point], seed: int = 0) -> SeriesFit:
    first = points[0]
    usable = sorted((p for p in points if p.usable), key=lambda p: p.batch)
    base = {"op": first.op, "backend": first.backend, "dtype": first.dtype, "n": first.n, "k": first.k,
            "points_ok": len(usable), "batches": [p.batch for p in usable]}
    profile, _ = spec_profile(result)
    spec = Roof(profile.bandwidth_bytes_per_s if profile else None,
                profile.peak_flop_per_s.get(first.dtype) if profile else None)
    measured = Roof(measured_bandwidth(result), measured_peak(result, first.dtype))
    spec_ridge = spec.peak_flop_per_s / spec.bandwidth_bytes_per_s if spec.peak_flop_per_s else None
    if spec_ridge and first.op == "gemm":
        spec_batch = critical_intensity_batch(first.dtype, first.n, first.k, spec_ridge)
        base.update(spec_ridge_flop_per_byte=spec_ridge,
                    spec_critical_batch=spec_batch if np.isfinite(spec_batch) else None)
    if not usable:
        return SeriesFit(status="insufficient", message="no ok points", **base)
    data = _series_data(usable)
    if first.op == "gemv" or len(usable) < fit.MIN_POINTS:
        bandwidth = float(np.max(data.bytes / data.times_s))
        fitted = Roof(bandwidth, None)
        rows = _point_rows(usable, data, fitted, measured, spec)
        if first.op == "gemv":
            return SeriesFit(status="bandwidth-only", message="gemv is one point (batch 1): bandwidth only",
                             bandwidth_bytes_per_s=bandwidth, points=rows, **base)
        return SeriesFit(status="insufficient", points=rows, **base,
                         message=f"{len(usable)} ok point(s); a fit needs at least {fit.MIN_POINTS}")
    times = data.times_s
    knees = fit.latency_knees(data.batches, times)
    common = {"knee_batch_1p10": knees[1.10], "knee_batch_1p25": knees[1.25],
              "cliffs": fit.find_cliffs(data.batches, data.flop / times)}
    envelope = fit.fit_envelope(data.flop, data.bytes, times)
    fitted = Roof(envelope.bandwidth_bytes_per_s, envelope.peak_flop_per_s)
    rows = _point_rows(usable, data, fitted, measured, spec)
    if fit.has_flat_intensity(data):
        intensity = float(np.median(data.flop / data.bytes))
        return SeriesFit(status="memory-bound-at-every-batch", points=rows, **base, **common,
                         bandwidth_bytes_per_s=envelope.bandwidth_bytes_per_s,
                         message=f"intensity stays at {intensity:.2f} FLOP/byte whatever the batch: "
                                 "it never reaches a ridge")
    value = fit.critical_batch(data, envelope)
    if value is None:
        return SeriesFit(status="lower-bound", points=rows, **base, **common,
                         bandwidth_bytes_per_s=envelope.bandwidth_bytes_per_s,
                         peak_flop_per_s_lower_bound=envelope.best_flop_per_s,
                         critical_batch_lower_bound=int(data.batches.max()),
                         message=f"no measured batch is clearly compute-bound: B* > {int(data.batches.max())}")
    lo, hi, _ = fit.bootstrap_critical_batch(data, seed=seed)
    return SeriesFit(status="ok", message="", points=rows, **base, **common,
                     bandwidth_bytes_per_s=envelope.bandwidth_bytes_per_s,
                     peak_flop_per_s=envelope.peak_flop_per_s,
                     ridge_flop_per_byte=envelope.ridge_flop_per_byte,
                     critical_batch=value, critical_batch_ci95=[lo, hi])


def analyse(result: Result, seed: int = 0) -> dict[str, Any]:
    """Every series fitted, plus the verdict lines; plain data for JSON."""
    fits = [fit_one(result, points, seed) for points in group_series(result.points).values()]
    profile, spec_reason = spec_profile(result)
    return {
        "device": result.device.get("name"),
        "sku": result.device.get("sku"),
        "origin": result.origin,
        "spec_reason": spec_reason,
        "spec": {"bandwidth_bytes_per_s": profile.bandwidth_bytes_per_s,
                 "peak_flop_per_s": dict(profile.peak_flop_per_s)} if profile else None,
        "envelope_quantile": fit.ENVELOPE_QUANTILE,
        "series": [f.to_dict() for f in fits],
        "verdict": verdict_lines(result, fits),
    }


def _batch_text(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f}"


def _knee_text(f: SeriesFit) -> str:
    if f.knee_batch_1p10 is None:
        return " Time per step stays within 10% of batch 1 at every measured batch."
    text = f" Time per step is 10% above batch 1 by batch {f.knee_batch_1p10}"
    if f.knee_batch_1p25 is not None:
        text += f" and 25% above by batch {f.knee_batch_1p25}"
    return text + "."


def verdict_lines(result: Result, fits: list[SeriesFit]) -> list[str]:
    """One sentence per GEMM series (and bmm), in the words a performance engineer would use."""
    name = result.device.get("name") or result.device["kind"]
    sku = result.device.get("sku")
    where = f"On {name}" + (f" ({sku})" if sku else "")
    copy = ((result.ceilings.get("measured") or {}).get("copy") or {}).get("bytes_per_s")
    gemv = {(f.dtype, f.n, f.k, f.backend): f for f in fits if f.op == "gemv"}
    lines = []
    for f in fits:
        backend = "" if f.backend == "torch" else f" [{f.backend}]"
        head = f"{where}, {f.op} {f.dtype} {f.n}x{f.k}{backend}: "
        if f.op == "gemv":
            continue
        if f.status == "ok":
            lo, hi = f.critical_batch_ci95
            interval = f"95% CI {_batch_text(lo)}-{_batch_text(hi) if hi else 'unbounded'}"
            text = f"decode stays memory-bound up to batch ~{f.critical_batch:.0f} ({interval})"
            if f.spec_critical_batch:
                text += (f"; the spec sheet's ridge ({f.spec_ridge_flop_per_byte:.0f} FLOP/byte) puts it at "
                         f"{f.spec_critical_batch:.0f}")
            text += f". Fitted roof: {si(f.bandwidth_bytes_per_s, 'B/s')}, {si(f.peak_flop_per_s, 'FLOP/s')}."
            text += _knee_text(f)
        elif f.status == "lower-bound":
            text = (f"memory-bound at every measured batch; the crossover lies beyond batch "
                    f"{f.critical_batch_lower_bound} (> {f.critical_batch_lower_bound}).")
        elif f.status == "memory-bound-at-every-batch":
            text = f"memory-bound at every batch ({f.message}); moves {si(f.bandwidth_bytes_per_s, 'B/s')}."
        else:
            text = f"not analysed: {f.message}."
        single = gemv.get((f.dtype, f.n, f.k, f.backend))
        if f.op == "gemm" and single and single.bandwidth_bytes_per_s:
            text += f" GEMV moves {si(single.bandwidth_bytes_per_s, 'B/s')}"
            parts = []
            if copy:
                parts.append(f"{100 * single.bandwidth_bytes_per_s / copy:.0f}% of the copy bandwidth measured here")
            spec_bw = (result.ceilings.get("spec") or {}).get("memory_bandwidth_bytes_per_s")
            if spec_bw:
                parts.append(f"{100 * single.bandwidth_bytes_per_s / spec_bw:.0f}% of spec")
            text += (", " + " and ".join(parts) if parts else "") + "."
        lines.append(head + text)
    return lines
