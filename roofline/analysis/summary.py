"""The per-series summary a sweep prints: GEMV bandwidth and peak FLOP/s against the ceilings (the one
reference of ``roofline.analysis.reference``), with a warning for every figure above its ceiling."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from roofline.analysis.reference import (
    CEILING_MISSED,
    marked_percent,
    peak_read_against,
    reference_bandwidth,
    result_peak,
    why_above_peak,
)
from roofline.result.document import Point, Result, backend_tag


@dataclass(frozen=True)
class SeriesSummary:
    op: str
    backend: str
    dtype: str
    n: int
    k: int
    points_ok: int
    points_total: int
    failed_checks: int
    low_batch: int | None
    low_batch_bytes_per_s: float | None  # bandwidth at the smallest measured batch (GEMV for gemv/gemm)
    peak_flop_per_s: float | None
    # Each figure's 95% interval, from its point's median-time CI (a rate is work over time: bounds swap).
    low_batch_bytes_per_s_ci95: tuple[float, float] | None
    peak_flop_per_s_ci95: tuple[float, float] | None
    peak_batch: int | None
    pct_of_spec_bandwidth: float | None
    pct_of_measured_bandwidth: float | None
    pct_of_spec_peak: float | None
    pct_of_measured_peak: float | None
    mixer_tag: str = ""  # a state_update or sparse_attention series: its mixer beyond n×k (MixerShape.tag)


def group_series(points) -> dict[tuple, list[Point]]:
    series: dict[tuple, list[Point]] = defaultdict(list)
    for point in points:
        series[point.series_key].append(point)
    return {key: sorted(ps, key=lambda p: p.batch) for key, ps in series.items()}


def _ratio(value: float | None, reference: float | None) -> float | None:
    return 100.0 * value / reference if value and reference else None


def spec_bandwidth(result: Result) -> float | None:
    return result.ceilings.spec_bandwidth_bytes_per_s()


def spec_peak(result: Result, dtype: str) -> float | None:
    return result.ceilings.spec_peak_flop_per_s(dtype)


def measured_bandwidth(result: Result) -> float | None:
    """The one reference bandwidth (``roofline.analysis.reference``): what every "% of measured bandwidth" is of.

    A point faster than it is flagged where it is shown, not hidden by raising the reference to it.
    """
    reference = reference_bandwidth(result.ceilings)
    return reference.bytes_per_s if reference else None


def measured_peak(result: Result, dtype: str) -> float | None:
    """The measured compute ceiling for ``dtype``: the sustained figure, or the sweep's own fastest GEMM where it
    is faster (``roofline.analysis.reference``)."""
    reference = result_peak(result, dtype)
    return reference.flop_per_s if reference else None


def over_ceiling_lines(result: Result, rows: list[SeriesSummary]) -> list[str]:
    """A warning for every printed percentage above the ceiling it is of."""
    lines = []
    for row in rows:
        label = f"{row.op} {row.dtype} {row.n}x{row.k}{backend_tag(row.backend)}"
        for pct, what, why in ((row.pct_of_measured_bandwidth, "reference bandwidth", CEILING_MISSED),
                               (row.pct_of_measured_peak, peak_read_against(row.dtype), why_above_peak(row.dtype))):
            if pct and pct > 100:
                lines.append(f"{label}: {marked_percent(pct)} of the {what}, above that ceiling ({why})")
    return lines


def _rate_ci95(work: float, point: Point) -> tuple[float, float] | None:
    low_s, high_s = point.stats.ci95_s
    return (work / high_s, work / low_s) if low_s > 0 else None


def summarize_series(result: Result) -> list[SeriesSummary]:
    rows = []
    for (op, backend, dtype, n, k, *_), points in group_series(result.points).items():
        good = [p for p in points if p.usable]
        low = good[0] if good else None
        best = max(good, key=lambda p: p.flop / p.stats.median_s) if good else None
        low_bw = low.bytes / low.stats.median_s if low else None
        peak = best.flop / best.stats.median_s if best else None
        rows.append(SeriesSummary(
            op=op, backend=backend, dtype=dtype, n=n, k=k, mixer_tag=points[0].mixer.tag if points[0].mixer else "",
            points_ok=sum(p.ok and not p.superseded for p in points),
            points_total=sum(not p.superseded for p in points),
            failed_checks=sum(p.correct is False for p in points),
            low_batch=low.batch if low else None,
            low_batch_bytes_per_s=low_bw,
            peak_flop_per_s=peak,
            low_batch_bytes_per_s_ci95=_rate_ci95(low.bytes, low) if low else None,
            peak_flop_per_s_ci95=_rate_ci95(best.flop, best) if best else None,
            peak_batch=best.batch if best else None,
            pct_of_spec_bandwidth=_ratio(low_bw, spec_bandwidth(result)),
            pct_of_measured_bandwidth=_ratio(low_bw, measured_bandwidth(result)),
            pct_of_spec_peak=_ratio(peak, spec_peak(result, dtype)),
            pct_of_measured_peak=_ratio(peak, measured_peak(result, dtype)),
        ))
    return rows
