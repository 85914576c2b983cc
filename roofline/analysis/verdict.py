"""The verdict in words: one sentence per GEMM (and bmm) series, the warnings a reader needs first.

Every percentage of a measured ceiling names that ceiling (``roofline.analysis.reference``) and says so when it is
above it; a fit that set a point aside names it; a curve that is not a roofline claims no crossover.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from roofline.analysis.formats import format_sentence
from roofline.analysis.reference import (
    CEILING_MISSED,
    marked_percent,
    over_ceiling_note,
    peak_read_against,
    percent_of,
    reference_bandwidth,
    result_peak,
    why_above_peak,
)
from roofline.analysis.series_fit import SeriesFit
from roofline.core.counting import MixerShape
from roofline.core.units import si
from roofline.result.document import Result, backend_tag
from roofline.step.routing import Routing

MAX_NAMED = 6


def _batch_text(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f}"


def _knee_text(f: SeriesFit) -> str:
    # The knees are against the smallest batch measured: batch 1 in a sweep, 32 in some imported tables.
    first = f.points[0]["batch"] if f.points else 1
    if f.knee_batch_1p10 is None:
        return f" Time per step stays within 10% of batch {first} at every measured batch."
    text = f" Time per step is 10% above batch {first} by batch {f.knee_batch_1p10}"
    if f.knee_batch_1p25 is not None:
        text += f" and 25% above by batch {f.knee_batch_1p25}"
    return text + "."


def series_name(f: SeriesFit) -> str:
    """How a series is named in words: a grouped one by its experts, top-k and routing too."""
    if f.op == "grouped":
        return (f"grouped {f.dtype} {f.experts} experts of {f.n}x{f.k}, top-{f.topk}, {f.routing} routing"
                f"{backend_tag(f.backend)}")
    if f.mixer:  # a state update or sparse attention: its mixer in words
        return f"{f.op} {f.dtype} ({MixerShape.from_dict(f.mixer).describe(f.n, f.k)}){backend_tag(f.backend)}"
    return f"{f.op} {f.dtype} {f.n}x{f.k}{backend_tag(f.backend)}"


def _grouped_text(f: SeriesFit, series: str, device: str) -> str:
    """A grouped series' crossover is its experts': tokens per expert, and the global batch that gives them."""
    lo, hi = f.critical_tokens_per_expert_ci95
    glo, ghi = f.critical_batch_ci95
    routing = Routing.parse(f.routing or "balanced")
    widest = max(f.batches)
    seen = routing.tokens_per_expert(f.experts or 1, f.topk or 1, widest)
    return (f"{series}: each expert turns compute-bound at ~{f.critical_tokens_per_expert:.0f} tokens "
            f"(95% CI {_batch_text(lo)}–{_batch_text(hi) if hi else 'unbounded'}) on {device}: a global batch of "
            f"~{f.critical_batch:.0f} tokens under {f.routing} routing (95% CI {_batch_text(glo)}–"
            f"{_batch_text(ghi) if ghi else 'unbounded'}); at batch {widest} each touched expert sees ~{seen:.0f} "
            f"tokens. Fitted roof ({f.roof_regime}): {si(f.bandwidth_bytes_per_s, 'B/s')}, "
            f"{si(f.peak_flop_per_s, 'FLOP/s')}.")


def _status_text(f: SeriesFit, series: str, device: str) -> str:
    """The answer in one short sentence (the series, where it turns compute-bound, on which device), then the
    details: what a reader at 100 columns needs first is the batch, not how it was fitted."""
    if f.status == "ok" and f.op == "grouped":
        return _grouped_text(f, series, device) + _knee_text(f)
    if f.status == "ok":
        lo, hi = f.critical_batch_ci95
        interval = f"95% CI {_batch_text(lo)}–{_batch_text(hi) if hi else 'unbounded'}"
        text = (f"{series} turns compute-bound at batch ~{f.critical_batch:.0f} ({interval}) on {device}. "
                "Decode below it is memory-bound.")
        if f.spec_critical_batch:
            text += (f" The spec sheet's ridge ({f.spec_ridge_flop_per_byte:.0f} FLOP/byte) puts it at "
                     f"{f.spec_critical_batch:.0f}.")
        text += (f" Fitted roof ({f.roof_regime}): {si(f.bandwidth_bytes_per_s, 'B/s')}, "
                 f"{si(f.peak_flop_per_s, 'FLOP/s')}.")
        return text + _knee_text(f)
    if f.status == "lower-bound":
        return (f"{series} stays memory-bound at every measured batch on {device}. The crossover lies beyond "
                f"batch {f.critical_batch_lower_bound}.")
    if f.status == "memory-bound-at-every-batch":
        return (f"{series} is memory-bound at every batch on {device}: it moves "
                f"{si(f.bandwidth_bytes_per_s, 'B/s')}. Why: {f.message}.")
    if f.status == "not-a-roofline":
        return f"{series} on {device}: not a roofline, so no crossover is claimed. Why: {f.message}."
    return f"{series} on {device}: not analysed. Why: {f.message}."


def _aside_text(f: SeriesFit) -> str:
    text = ""
    if f.set_aside:
        shown = "; ".join(f"B={a['batch']} ({a['why']})" for a in f.set_aside[:MAX_NAMED])
        more = f"; and {len(f.set_aside) - MAX_NAMED} more" if len(f.set_aside) > MAX_NAMED else ""
        text += (f" Set aside ({len(f.set_aside)} point(s) the roof does not bound; a few fast points do not lift "
                 f"it): {shown}{more}.")
    return text


def _above_ceiling_text(result: Result, f: SeriesFit) -> str:
    if not f.above_measured_ceiling:
        return ""
    bandwidth, peak = reference_bandwidth(result.ceilings), result_peak(result, f.dtype)
    names = {"peak": f"the {peak_read_against(f.dtype)} {peak.label}" if peak else "the measured peak",
             "bandwidth": f"the reference bandwidth ({bandwidth.label})" if bandwidth else "the measured bandwidth"}
    whys = {"peak": why_above_peak(f.dtype), "bandwidth": CEILING_MISSED}
    parts, reasons = [], []
    for ceiling, name in names.items():
        above = [a for a in f.above_measured_ceiling if a["ceiling"] == ceiling]
        if above:
            shown = ", ".join(f"B={a['batch']} at {marked_percent(a['pct'])}" for a in above[:MAX_NAMED])
            parts.append(f"{name}: {shown}")
            reasons += [whys[ceiling]] if whys[ceiling] not in reasons else []
    return (f" Above a measured ceiling (flagged, not clipped: {'; '.join(reasons)}) — " + "; ".join(parts) + ".")


def _gemv_text(result: Result, single: SeriesFit) -> str:
    value = single.bandwidth_bytes_per_s
    text = f" GEMV moves {si(value, 'B/s')}"
    parts = []
    bandwidth = reference_bandwidth(result.ceilings)
    if bandwidth:
        part = (f"{marked_percent(percent_of(value, bandwidth.bytes_per_s), 0)} of the reference bandwidth "
                f"({bandwidth.label})")
        note = over_ceiling_note(value, bandwidth.bytes_per_s, "the reference bandwidth")
        parts.append(part + (f" — {note}" if note else ""))
    spec_bw = result.ceilings.spec_bandwidth_bytes_per_s()
    if spec_bw:
        note = over_ceiling_note(value, spec_bw, "spec")
        parts.append(f"{marked_percent(percent_of(value, spec_bw), 0)} of spec" + (f" — {note}" if note else ""))
    return text + (", " + " and ".join(parts) if parts else "") + "."


def verdict_lines(result: Result, fits: list[SeriesFit], warnings: Sequence[str] = (),
                  formats: Sequence[dict[str, Any]] = ()) -> list[str]:
    """One sentence per GEMM series (and bmm), in the words a performance engineer would use; a result
    with reasons for doubt starts with them.  Weight-only formats against bf16 (``roofline.analysis.formats``)
    come next, before the series: which format to deploy up to which batch is the question such a sweep asks."""
    name = result.device.name or result.device.kind
    sku = result.device.sku
    device = f"{name}" + (f" ({sku})" if sku else "")
    gemv = {(f.dtype, f.n, f.k, f.backend): f for f in fits if f.op == "gemv"}
    lines = []
    if warnings:
        more = f" ({len(warnings) - 3} more under warnings)" if len(warnings) > 3 else ""
        lines.append(f"Trust these numbers less: {'; '.join(warnings[:3])}{more}.")
    lines += [format_sentence(c, f"on {device}") for c in formats]
    for f in fits:
        if f.op == "gemv":
            continue
        text = _status_text(f, series_name(f), device)
        text += _aside_text(f) + _above_ceiling_text(result, f)
        single = gemv.get((f.dtype, f.n, f.k, f.backend))
        if f.op == "gemm" and single and single.bandwidth_bytes_per_s:
            text += _gemv_text(result, single)
        lines.append(text)
    return lines
