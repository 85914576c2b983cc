"""The report's figures (matplotlib, Agg).  Each function takes a result and its analysis, draws one
figure and returns it, or None with nothing to draw.  Colour-blind-safe (Okabe-Ito), units on every axis.
"""

from __future__ import annotations

import functools
import textwrap
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from roofline.analysis.reference import reference_bandwidth, result_peak  # noqa: E402
from roofline.core.counting import MixerShape, compute_dtype, count_work  # noqa: E402
from roofline.core.roof import attainable_flop_per_s, ridge_flop_per_byte, roof_time_s  # noqa: E402
from roofline.core.units import si  # noqa: E402
from roofline.result.document import Result, backend_tag  # noqa: E402

OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
# Label only these batches on crowded plots: with the default list, labels never overlap.
LABELLED_BATCHES = {1, 4, 16, 64, 256, 1024}


def _style() -> None:
    plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 110, "font.size": 10, "axes.grid": True,
                         "grid.alpha": 0.3, "axes.prop_cycle": matplotlib.cycler(color=OKABE_ITO)})


def batch_axes(left, right, xlabel: str, left_label: str, right_label: str) -> None:
    """A side-by-side pair against batch: log2 batch on both, log time or rate on the left."""
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    left.set_yscale("log")
    left.set_ylabel(left_label)
    right.set_ylabel(right_label)


def _series(analysis: dict[str, Any], op: str | None = None, dtype: str | None = None) -> list[dict[str, Any]]:
    return [s for s in analysis["series"] if s["points"] and (op is None or s["op"] == op)
            and (dtype is None or s["dtype"] == dtype)]


def _gemm_figure(min_points: int = 1):
    """Decorator for a figure of the GEMM series (those with at least ``min_points``): the drawing function
    gets them, and never runs when there are none (the figure is then None); house style before, tight
    layout after (a drawing that finds nothing to draw returns None itself)."""
    def wrap(draw):
        @functools.wraps(draw)
        def figure(result: Result, analysis: dict[str, Any]):
            series = [s for s in _series(analysis, op="gemm") if len(s["points"]) >= min_points]
            if not series:
                return None
            _style()
            fig = draw(result, analysis, series)
            if fig is not None:
                fig.tight_layout()
            return fig
        return figure
    return wrap


def _label(s: dict[str, Any]) -> str:
    # A figure travels alone (into slides, a chat): unlike the tables, its legend says the data is imported.
    tag = " [imported]" if s.get("backend") == "imported" else backend_tag(s.get("backend"))
    experts = f" {s['experts']} experts top-{s['topk']}" if s["op"] == "grouped" else ""
    if s.get("mixer"):
        experts = f" {MixerShape.from_dict(s['mixer']).tag}"
    return f"{s['op']} {s['n']}×{s['k']}{experts}{tag}"


def _measured_roof_label(result: Result, dtype: str) -> tuple[float | None, float | None, str]:
    bandwidth, peak = reference_bandwidth(result.ceilings), result_peak(result, dtype)
    label = "measured roof: " + (bandwidth.label if bandwidth else "no bandwidth")
    if peak:
        label += f", {si(peak.flop_per_s, 'FLOP/s')} ({peak.regime})"
    return (bandwidth.bytes_per_s if bandwidth else None), (peak.flop_per_s if peak else None), label


def _ceiling_lines(ax, result: Result, analysis: dict[str, Any], dtype: str, x: np.ndarray) -> None:
    """The measured roof (the one reference, its regime named), the burst peak, and the spec roof."""
    bw, peak, label = _measured_roof_label(result, dtype)
    spec = analysis.get("spec") or {}
    spec_bw = spec.get("bandwidth_bytes_per_s")
    spec_peak = (spec.get("peak_flop_per_s") or {}).get(compute_dtype(dtype))
    spec_label = f"spec roof: {si(spec_bw, 'B/s')}" + (f", {si(spec_peak, 'FLOP/s')} (datasheet)" if spec_peak else "")
    for bandwidth, top, style, name in ((bw, peak, "-", label), (spec_bw, spec_peak, "--", spec_label)):
        if bandwidth:
            ax.plot(x, attainable_flop_per_s(x, bandwidth, top), style, color="0.35", lw=1.5, label=name)
            if top:
                ax.axvline(ridge_flop_per_byte(top, bandwidth), ls=style, color="0.6", lw=0.8)
    burst = result_peak(result, dtype)
    if bw and burst and burst.burst_flop_per_s:
        ax.plot(x, attainable_flop_per_s(x, bw, burst.burst_flop_per_s), ":", color="0.35", lw=1,
                label=f"measured roof, burst: {si(burst.burst_flop_per_s, 'FLOP/s')}")


def _flag_points(ax, s: dict[str, Any], flagged: dict[str, bool]) -> None:
    """Ring points above a measured ceiling; cross points the fitted roof set aside.  Legend once each."""
    above = [p for p in s["points"] if p.get("above_measured_ceiling")]
    aside = [p for p in s["points"] if p.get("set_aside")]
    ring = {"marker": "o", "ms": 11, "mfc": "none", "mec": OKABE_ITO[3], "mew": 1.6}
    cross = {"marker": "x", "ms": 9, "color": OKABE_ITO[3], "mew": 1.4}
    for points, style, key, label in ((above, ring, "above", "above the measured ceiling (flagged)"),
                                      (aside, cross, "aside", "set aside by the fit (not under its roof)")):
        if points:
            ax.plot([p["intensity_flop_per_byte"] for p in points], [p["flop_per_s"] for p in points], ls="none",
                    label=None if flagged.get(key) else label, **style)
            flagged[key] = True


def roofline_figure(result: Result, analysis: dict[str, Any], dtype: str):
    """Attainable FLOP/s against intensity, log-log: ceilings (regime named), measured points (flagged when
    above a ceiling or set aside), ridge and B*."""
    series = _series(analysis, dtype=dtype)
    if not series:
        return None
    _style()
    fig, ax = plt.subplots(figsize=(8.5, 5.5))
    intensities = np.array([p["intensity_flop_per_byte"] for s in series for p in s["points"]])
    x = np.logspace(np.log10(intensities.min() / 2), np.log10(intensities.max() * 3), 200)
    _ceiling_lines(ax, result, analysis, dtype, x)
    labelled = next((s for s in series if s["op"] == "gemm"), None)  # batch labels once: series share them
    flagged: dict[str, bool] = {}
    for index, s in enumerate(series):
        color, marker = OKABE_ITO[index % 8], MARKERS[index % 8]
        xs = [p["intensity_flop_per_byte"] for p in s["points"]]
        ys = [p["flop_per_s"] for p in s["points"]]
        ax.plot(xs, ys, marker=marker, ls=":", color=color, ms=5, label=_label(s))
        _flag_points(ax, s, flagged)
        for p in s["points"]:
            if p["batch"] in LABELLED_BATCHES and s is labelled:
                ax.annotate(f"B={p['batch']}", (p["intensity_flop_per_byte"], p["flop_per_s"]),
                            textcoords="offset points", xytext=(4, -11), fontsize=7, color=color)
        if s.get("ridge_flop_per_byte"):
            ax.plot([s["ridge_flop_per_byte"]], [s["peak_flop_per_s"]], marker="*", ms=14, color=color, mec="k",
                    ls="none", label=f"fitted ridge {s['ridge_flop_per_byte']:.0f} F/B, B*≈{s['critical_batch']:.0f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved FLOP/s")
    computes_in = compute_dtype(dtype)
    ax.set_title(f"Roofline, {dtype}" + (f" (multiplies in {computes_in})" if computes_in != dtype else "")
                 + f": {result.device.name}")
    if labelled and labelled.get("roof_regime"):
        ax.text(0.01, 0.99, f"fitted ridges (stars): {labelled['roof_regime']}", transform=ax.transAxes,
                fontsize=7, va="top", color="0.3")
    _legend_below(fig, ax)
    return fig


# Characters per line of a legend entry below a roofline: two columns of them fit the figure's width.
LEGEND_WRAP_CHARS = 70


def _legend_below(fig, ax) -> None:
    """The legend under the axes, in two columns, long labels wrapped: inside the axes it hid the points
    it sat on (the GEMV and bmm points at the lowest intensities), and a label naming where the roof came
    from ran off the figure.  The figure grows by the legend's rows, so the plot keeps its size."""
    handles, labels = ax.get_legend_handles_labels()
    wrapped = [textwrap.fill(label, LEGEND_WRAP_CHARS) for label in labels]
    columns = 2 if len(wrapped) > 1 else 1
    rows = sum(max(label.count("\n") + 1 for label in wrapped[i::columns]) for i in range(columns)) / columns
    fig.set_size_inches(fig.get_figwidth(), fig.get_figheight() + 0.16 * max(rows, len(wrapped) / columns))
    ax.legend(handles, wrapped, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncols=columns,
              frameon=False)
    fig.tight_layout()


def _model_time(s: dict[str, Any], batches: np.ndarray) -> np.ndarray | None:
    bw, peak = s.get("bandwidth_bytes_per_s"), s.get("peak_flop_per_s")
    if not bw:
        return None
    mixer = MixerShape.from_dict(s["mixer"]) if s.get("mixer") else None
    works = [count_work(s["op"], s["dtype"], int(b), s["n"], s["k"], mixer=mixer) for b in batches]
    return roof_time_s([w.flop for w in works], [w.bytes for w in works], bw, peak)


@_gemm_figure(min_points=2)
def time_figure(result: Result, analysis: dict[str, Any], series: list[dict[str, Any]]):
    """Time per launch against batch with the fitted max(memory, compute) model and B* shaded."""
    cols = min(3, len(series))
    rows = (len(series) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
    for ax, s in zip(axes.flat, series, strict=False):
        batches = np.array([p["batch"] for p in s["points"]])
        times = np.array([p["time_s"] for p in s["points"]]) * 1e6
        ax.plot(batches, times, "o", color=OKABE_ITO[0], ms=4, label="measured (median)")
        grid = np.unique(np.geomspace(batches.min(), batches.max(), 200).round())
        model = None if s["status"] == "not-a-roofline" else _model_time(s, grid)
        if s["status"] == "not-a-roofline":
            ax.set_title("not a roofline: no fit drawn", fontsize=9, loc="right", color=OKABE_ITO[3])
        if model is not None:
            ax.plot(grid, model * 1e6, "-", color=OKABE_ITO[1], label="fit: max(bytes/BW, FLOP/P)")
        aside = [p for p in s["points"] if p.get("set_aside")]
        if aside:
            ax.plot([p["batch"] for p in aside], [p["time_s"] * 1e6 for p in aside], "x", color=OKABE_ITO[3],
                    ms=8, label="set aside by the fit")
        if s.get("critical_batch"):
            lo, hi = s["critical_batch_ci95"]
            ax.axvline(s["critical_batch"], color=OKABE_ITO[3], lw=1.2, label=f"B* ≈ {s['critical_batch']:.0f}")
            if lo and hi:
                ax.axvspan(lo, hi, color=OKABE_ITO[3], alpha=0.15, label="B* 95% CI")
        elif s.get("critical_batch_lower_bound"):
            ax.set_title(f"B* > {s['critical_batch_lower_bound']}", fontsize=9, loc="right")
        if s.get("spec_critical_batch"):
            ax.axvline(s["spec_critical_batch"], color="0.4", ls="--", lw=1,
                       label=f"spec B* {s['spec_critical_batch']:.0f}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch (sequences per decode step)")
        ax.set_ylabel("time per launch (µs)")
        ax.set_title(f"{s['dtype']} {s['n']}×{s['k']}", loc="left", fontsize=10)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(series):]:
        ax.set_visible(False)
    fig.suptitle("Flat, then rising: time per decode step against batch")
    return fig


@_gemm_figure()
def throughput_figure(result: Result, analysis: dict[str, Any], series: list[dict[str, Any]]):
    """Achieved FLOP/s and bytes/s against batch, as % of the measured ceilings on second axes."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8.5, 7), sharex=True)
    for index, s in enumerate(series):
        batches = [p["batch"] for p in s["points"]]
        top.plot(batches, [p["flop_per_s"] / 1e12 for p in s["points"]], marker=MARKERS[index % 8],
                 color=OKABE_ITO[index % 8], label=f"{s['dtype']} {_label(s)}")
        bottom.plot(batches, [p["bytes_per_s"] / 1e9 for p in s["points"]], marker=MARKERS[index % 8],
                    color=OKABE_ITO[index % 8], label=f"{s['dtype']} {s['n']}×{s['k']}")
    top.set_ylabel("achieved TFLOP/s")
    bottom.set_ylabel("achieved GB/s")
    bottom.set_xlabel("batch")
    bottom.set_xscale("log", base=2)
    reference = reference_bandwidth(result.ceilings)
    if reference:
        bw = reference.bytes_per_s
        second = bottom.secondary_yaxis("right", functions=(lambda v: 100 * v * 1e9 / bw, lambda p: p * bw / 1e11))
        second.set_ylabel(f"% of {reference.name} ({si(bw, 'B/s')})", fontsize=8)
        bottom.axhline(bw / 1e9, color="0.4", ls="--", lw=1, label=f"reference bandwidth: {reference.label}")
        bottom.legend(fontsize=7)
    peak = result_peak(result, series[0]["dtype"])
    if peak and len({s["dtype"] for s in series}) == 1:
        value = peak.flop_per_s
        second = top.secondary_yaxis("right", functions=(lambda v: 100 * v * 1e12 / value,
                                                         lambda p: p * value / 1e14))
        second.set_ylabel(f"% of measured peak ({peak.regime.split(' (')[0]})", fontsize=8)
        top.axhline(value / 1e12, color="0.4", ls="--", lw=1, label=f"measured peak: {peak.label}")
    top.legend(fontsize=8)
    top.set_title("Throughput against batch")
    return fig


@_gemm_figure()
def efficiency_figure(result: Result, analysis: dict[str, Any], series: list[dict[str, Any]]):
    """Achieved over attainable (fitted, measured and spec roofs) against batch."""
    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    drawn = False
    for index, s in enumerate(series):
        color = OKABE_ITO[index % 8]
        batches = [p["batch"] for p in s["points"]]
        for key, style, name in (("efficiency_measured", "-", "measured roof"), ("efficiency_spec", "--", "spec")):
            values = [p[key] for p in s["points"]]
            if any(v is not None for v in values):
                drawn = True
                ax.plot(batches, [np.nan if v is None else 100 * v for v in values], style, marker=MARKERS[index % 8],
                        color=color, ms=4, label=f"{s['dtype']} {s['n']}×{s['k']} vs {name}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch")
    ax.set_ylabel("efficiency (% of attainable)")
    if not drawn:  # neither measured ceilings nor a spec: nothing to be efficient against
        plt.close(fig)
        return None
    ax.axhline(100, color="0.4", ls="--", lw=1)
    ax.set_title("Efficiency: achieved FLOP/s over the roofline at each point's intensity (above 100%: flagged)",
                 fontsize=9)
    ax.legend(fontsize=7.5)
    return fig


def gemm_vs_bmm_figure(result: Result, analysis: dict[str, Any]):
    """gemm and bmm over the same batches: one crosses the ridge, the other never does."""
    gemm, bmm = _series(analysis, op="gemm"), _series(analysis, op="bmm")
    if not gemm or not bmm:
        return None
    _style()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for index, s in enumerate(gemm + bmm):
        color, marker = OKABE_ITO[index % 8], MARKERS[index % 8]
        batches = [p["batch"] for p in s["points"]]
        left.plot(batches, [p["intensity_flop_per_byte"] for p in s["points"]], marker=marker, color=color,
                  ms=4, label=f"{s['op']} {s['dtype']} {s['n']}×{s['k']}")
        right.plot(batches, [p["flop_per_s"] / 1e12 for p in s["points"]], marker=marker, color=color, ms=4)
    ridges = {s["ridge_flop_per_byte"] for s in gemm if s.get("ridge_flop_per_byte")}
    for ridge in ridges:
        left.axhline(ridge, color="0.4", ls="--", lw=1)
    if ridges:
        left.plot([], [], color="0.4", ls="--", lw=1, label="fitted ridge(s)")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch")
    left.set_ylabel("intensity (FLOP/byte)")
    right.set_ylabel("achieved TFLOP/s")
    left.legend(fontsize=7)
    left.set_title("gemm's intensity grows with the batch; bmm's does not", fontsize=10)
    fig.tight_layout()
    return fig


def telemetry_figure(result: Result, analysis: dict[str, Any]):
    """Clocks, power and utilisation over the run, point boundaries marked, throttled spans shaded."""
    timeline = result.telemetry.timeline or ()
    if not timeline:
        return None
    _style()
    t0 = timeline[0]["t_s"]
    t = np.array([row["t_s"] - t0 for row in timeline])
    panels = [("sm_clock_hz", 1e-6, "SM clock (MHz)"), ("power_w", 1, "power (W)"),
              ("dram_bw_util_percent", 1, "DRAM bandwidth util. (%)"), ("tensor_util_percent", 1, "tensor util. (%)")]
    panels = [p for p in panels if any(row.get(p[0]) is not None for row in timeline)]
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 1.9 * len(panels) + 0.8), sharex=True, squeeze=False)
    throttled = [p.window_s for p in result.points if p.throttled and p.window_s]
    for ax, (key, scale, label) in zip(axes[:, 0], panels, strict=True):
        # Only the rows that carry the metric: GPM fills every other reading, and NaN gaps would break
        # the line into isolated points.
        carried = [(ti, row[key] * scale) for ti, row in zip(t, timeline, strict=True)
                   if row.get(key) is not None and np.isfinite(row[key])]
        ax.plot([c[0] for c in carried], [c[1] for c in carried], lw=1, color=OKABE_ITO[0])
        ax.set_ylabel(label, fontsize=8)
        for start, end in throttled:
            ax.axvspan(start - t0, end - t0, color=OKABE_ITO[3], alpha=0.2)
        for point in result.points:
            window = point.window_s
            if window:
                ax.axvline(window[0] - t0, color="0.8", lw=0.5)
    axes[-1, 0].set_xlabel("time since the first sample (s)")
    axes[0, 0].set_title("Telemetry (NVML); grey lines: point starts; red: throttled")
    fig.tight_layout()
    return fig


FIGURES = {
    "time_vs_batch": time_figure,
    "throughput": throughput_figure,
    "efficiency": efficiency_figure,
    "gemm_vs_bmm": gemm_vs_bmm_figure,
    "telemetry": telemetry_figure,
}
