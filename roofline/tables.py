"""The per-series fit table, shared by the terminal (gpubench fit) and the reports."""

from __future__ import annotations

from typing import Any

from roofline.units import si

MAX_CLIFFS_SHOWN = 8


def series_table(analysis: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["series", "ok", "bandwidth", "peak", "ridge (FLOP/B)", "B* (95% CI)", "spec B*", "knees 1.1/1.25",
              "cliffs"]
    rows = []
    for s in analysis["series"]:
        if s["status"] == "ok":
            lo, hi = s["critical_batch_ci95"]
            critical = f"{s['critical_batch']:.0f} ({_n(lo)}–{_n(hi) if hi else '∞'})"
        elif s["status"] == "lower-bound":
            critical = f"> {s['critical_batch_lower_bound']}"
        elif s["status"] == "memory-bound-at-every-batch":
            critical = "never"
        else:
            critical = s["message"] or "–"
        where = "" if s["backend"] == "torch" else f" [{s['backend']}]"
        peak = si(s["peak_flop_per_s"], "FLOP/s") if s["peak_flop_per_s"] else (
            f"≥ {si(s['peak_flop_per_s_lower_bound'], 'FLOP/s')}" if s["peak_flop_per_s_lower_bound"] else "–")
        cliffs = ", ".join(map(str, s["cliffs"][:MAX_CLIFFS_SHOWN])) + ("…" if len(s["cliffs"]) > MAX_CLIFFS_SHOWN
                                                                        else "")
        rows.append([f"{s['op']} {s['dtype']} {s['n']}×{s['k']}{where}", str(s["points_ok"]),
                     si(s["bandwidth_bytes_per_s"], "B/s"), peak,
                     _n(s["ridge_flop_per_byte"]), critical, _n(s["spec_critical_batch"]),
                     f"{_n(s['knee_batch_1p10'])}/{_n(s['knee_batch_1p25'])}",
                     cliffs or "–"])
    return header, rows


def _n(value) -> str:
    return "–" if value is None else f"{value:.0f}"


