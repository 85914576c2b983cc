"""The per-series fit table and the weight-only formats table, shared by the terminal (gpubench fit) and the
reports, and the lines under them that name the references and say why a table is empty."""

from __future__ import annotations

from typing import Any

from roofline.analysis.formats import break_even_text, format_pair, speedup_text
from roofline.analysis.reference import marked_percent, percent_of
from roofline.core.counting import MixerShape, compute_dtype
from roofline.core.units import interval_digits, si
from roofline.result.document import backend_tag

MAX_CLIFFS_SHOWN = 8
CRITICAL_TEXT = {"memory-bound-at-every-batch": "never", "not-a-roofline": "none: not a roofline",
                 "bandwidth-only": "– (gemv)"}


def series_name(s: dict[str, Any]) -> str:
    """A series as tables and figures name it: a grouped one by its experts, top-k and routing too."""
    where = backend_tag(s["backend"])
    if s["op"] == "grouped":
        routing = "" if s.get("routing") == "balanced" else f" {s['routing']}"
        return f"grouped {s['dtype']} {s['experts']}×{s['n']}×{s['k']} top-{s['topk']}{routing}{where}"
    if s.get("mixer"):  # a state update or sparse attention: its mixer's shape beyond n×k
        return f"{s['op']} {s['dtype']} {s['n']}×{s['k']} {MixerShape.from_dict(s['mixer']).tag}{where}"
    return f"{s['op']} {s['dtype']} {s['n']}×{s['k']}{where}"


def _critical(s: dict[str, Any]) -> str:
    if s["status"] == "ok":
        lo, hi = s["critical_batch_ci95"]
        text = f"{s['critical_batch']:.0f} ({_n(lo)}–{_n(hi) if hi else '∞'})"
        if s.get("critical_tokens_per_expert"):  # a grouped series: the global batch, then its experts' own
            text += f"; {s['critical_tokens_per_expert']:.0f}/expert"
        return text
    if s["status"] == "lower-bound":
        return f"> {s['critical_batch_lower_bound']}"
    return CRITICAL_TEXT.get(s["status"]) or s["message"] or "–"


def _flags(s: dict[str, Any]) -> str:
    flags = []
    if s.get("set_aside"):
        flags.append(f"{len(s['set_aside'])} set aside")
    above = s.get("above_measured_ceiling") or []
    if above:
        flags.append("above ceiling: " + ", ".join(f"B={a['batch']} {marked_percent(a['pct'])}" for a in above[:3]))
    return "; ".join(flags) or "–"


def series_table(analysis: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["series", "ok", "bandwidth", "% ref BW", "peak", "ridge (FLOP/B)", "B* (95% CI)", "spec B*",
              "knees 1.1/1.25", "cliffs", "flags"]
    reference = (analysis.get("reference_bandwidth") or {}).get("bytes_per_s")
    rows = []
    for s in analysis["series"]:
        peak = _with_interval(s["peak_flop_per_s"], s.get("peak_ci95"), "FLOP/s") if s["peak_flop_per_s"] else (
            f"≥ {si(s['peak_flop_per_s_lower_bound'], 'FLOP/s')}" if s["peak_flop_per_s_lower_bound"] else "–")
        cliffs = ", ".join(map(str, s["cliffs"][:MAX_CLIFFS_SHOWN])) + ("…" if len(s["cliffs"]) > MAX_CLIFFS_SHOWN
                                                                        else "")
        pct = percent_of(s["bandwidth_bytes_per_s"], reference)
        rows.append([series_name(s), str(s["points_ok"]),
                     _with_interval(s["bandwidth_bytes_per_s"], s.get("bandwidth_ci95"), "B/s"), marked_percent(pct, 0),
                     peak, _n(s["ridge_flop_per_byte"]), _critical(s), _n(s["spec_critical_batch"]),
                     f"{_n(s['knee_batch_1p10'])}/{_n(s['knee_batch_1p25'])}", cliffs or "–", _flags(s)])
    return header, rows


def _with_interval(value: float | None, interval: list[float | None] | None, unit: str) -> str:
    """A fitted figure to the digits its bootstrap interval supports (``interval_digits``); three without one."""
    low, high = interval or (None, None)
    return si(value, unit, interval_digits(value, low, high))


def reference_lines(analysis: dict[str, Any]) -> list[str]:
    """What the percentages are of, and why the table may be empty or a row unqualified."""
    lines = []
    bandwidth = analysis.get("reference_bandwidth")
    if bandwidth:
        lines.append(f"% ref BW: of the reference bandwidth, {bandwidth['name']} "
                     f"{si(bandwidth['bytes_per_s'], 'B/s')} ({bandwidth['why']}); ⚠ marks a figure above it.")
    else:
        lines.append("% ref BW: no measured bandwidth in this result (run with ceilings), so no percentage.")
    peaks = analysis.get("reference_peak") or {}
    for dtype, peak in peaks.items():
        if compute_dtype(dtype) != dtype and compute_dtype(dtype) in peaks:
            continue  # a weight-only format's peak is its compute dtype's, said on that line
        burst = f", burst {si(peak['burst_flop_per_s'], 'FLOP/s')}" if peak.get("burst_flop_per_s") else ""
        drawn = sorted(d for d in peaks if d != dtype and compute_dtype(d) == compute_dtype(dtype))
        against = f"; {', '.join(drawn)} multiply in {compute_dtype(dtype)} and are drawn against it" if drawn else ""
        lines.append(f"measured {compute_dtype(dtype)} peak: {si(peak['flop_per_s'], 'FLOP/s')} "
                     f"({peak['regime']}{burst}){against}.")
    lines.append("Fitted roofs are each series' own upper envelope (the regime its points ran in); flags: points "
                 "the roof does not bound, and points above a measured ceiling.")
    if not analysis["series"]:
        lines.append("No series: this result holds no points (a ceilings-only or interrupted run).")
    for s in analysis["series"]:
        if s["status"] in ("insufficient", "not-a-roofline"):
            lines.append(f"{s['op']} {s['dtype']} {s['n']}x{s['k']}: {s['message']}")
    return lines


def _n(value) -> str:
    return "–" if value is None else f"{value:.0f}"


FORMAT_HEADER = ["layer", "format (kernel) / baseline (kernel)", "speed-up at the smallest batch (95% CI)",
                 "break-even batch (95% CI)", "batches compared"]


def formats_table(analysis: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per weight-only format and layer: its speed-up over bf16 where both start, and where it stops
    paying off (``roofline.analysis.formats``); no rows when the result has no format to compare."""
    rows = []
    for c in analysis.get("formats") or []:
        smallest = c["batches"][0]
        rows.append([f"{c['n']}×{c['k']}{backend_tag(c['backend'])}", format_pair(c),
                     f"B={smallest}: {speedup_text(c, named=False)}", break_even_text(c, named=False),
                     f"{len(c['batches'])} ({smallest}–{c['batches'][-1]})"])
    return FORMAT_HEADER, rows


# One row per series for spreadsheets and dashboards: SI units, the unit in each column's name, empty for none.
CSV_COLUMNS = ("dtype", "op", "backend", "n", "k", "status", "points_ok", "bandwidth_bytes_per_s",
               "bandwidth_ci95_low", "bandwidth_ci95_high", "peak_flop_per_s", "peak_ci95_low", "peak_ci95_high",
               "peak_flop_per_s_lower_bound", "ridge_flop_per_byte", "critical_batch", "critical_batch_ci95_low",
               "critical_batch_ci95_high", "critical_batch_lower_bound", "spec_critical_batch", "knee_batch_1p10",
               "knee_batch_1p25", "roof_regime")


def series_csv(analysis: dict[str, Any]) -> str:
    """``gpubench fit --format csv``: every fitted series as one CSV row (``CSV_COLUMNS``), numbers unrounded."""
    import csv
    import io

    def interval(series: dict[str, Any], key: str) -> list[Any]:
        return list(series.get(key) or [None, None])

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for s in analysis["series"]:
        row = {**s}
        for key in ("bandwidth", "peak", "critical_batch"):
            row[f"{key}_ci95_low"], row[f"{key}_ci95_high"] = interval(s, f"{key}_ci95")
        writer.writerow(["" if row.get(column) is None else row[column] for column in CSV_COLUMNS])
    return out.getvalue()
