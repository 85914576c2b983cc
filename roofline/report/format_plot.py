"""The format figure, one per layer shape measured in bf16 and a weight-only format: time per launch against
batch for every dtype measured on it, and each weight-only format's speed-up over bf16 with its 95% interval,
the line at 1 (no gain) and the break-even batch (``roofline.analysis.formats``) with its interval shaded."""

from __future__ import annotations

from typing import Any

import numpy as np

from roofline.analysis.formats import BEYOND, NEVER, break_even_text, format_pair
from roofline.report.plots import MARKERS, OKABE_ITO, _style, batch_axes
from roofline.report.ticks import readable_log_axis, speedup_text
from roofline.result.document import Result, backend_tag


def _layer_series(analysis: dict[str, Any], backend: str, n: int, k: int) -> dict[str, list[tuple[int, float]]]:
    """dtype -> [(batch, median time)] of the layer's gemm series, its gemv point at batch 1 when gemm has none."""
    found: dict[str, dict[int, float]] = {}
    for s in analysis["series"]:
        if s["backend"] == backend and s["n"] == n and s["k"] == k and s["op"] in ("gemm", "gemv"):
            times = found.setdefault(s["dtype"], {})
            for p in s["points"]:
                if s["op"] == "gemm" or p["batch"] not in times:
                    times[p["batch"]] = p["time_s"]
    return {dtype: sorted(times.items()) for dtype, times in found.items() if times}


def _colours(dtypes) -> dict[str, tuple[str, str]]:
    """One colour and marker per dtype, the same in both panels."""
    return {d: (OKABE_ITO[i % 8], MARKERS[i % 8]) for i, d in enumerate(dtypes)}


def _speedup_panel(ax, comparisons: list[dict[str, Any]], colours: dict[str, tuple[str, str]]) -> None:
    for c in comparisons:
        colour, marker = colours[c["format"]]
        batches, speedup = np.array(c["batches"]), np.array(c["speedup"])
        bounds = np.array(c["speedup_ci95"], dtype=float)
        errors = np.vstack([speedup - bounds[:, 0], bounds[:, 1] - speedup]).clip(min=0)
        ax.errorbar(batches, speedup, yerr=errors, marker=marker, color=colour, ms=4, capsize=3,
                    label=format_pair(c))
        if c["status"] in (BEYOND, NEVER):
            ax.plot([], [], " ", label=f"{c['format']}: {break_even_text(c)}")
            continue
        lo, hi = c["break_even_ci95"]
        ax.axvline(c["break_even_batch"], color=colour, ls="--", lw=1.2,
                   label=f"{c['format']} break-even: {break_even_text(c)}")
        ax.axvspan(lo if lo is not None else batches[0], hi if hi is not None else batches[-1], color=colour,
                   alpha=0.15)
    ax.axhline(1.0, color="0.3", lw=1)
    ax.text(0.01, 1.0, " 1× = as fast as bf16", transform=ax.get_yaxis_transform(), fontsize=7, color="0.3",
            va="bottom")
    ax.set_yscale("log", base=2)
    # Powers of two and, where there is room, the halfway ticks between them (0.75×, 1.5×, 3×): a speed-up reads
    # off the axis; over many octaves every second or third power, never none.
    readable_log_axis(ax.yaxis, speedup_text, base=2)
    ax.legend(fontsize=7)


def format_figure(result: Result, analysis: dict[str, Any], comparisons: list[dict[str, Any]]):
    """Both panels for one layer (all ``comparisons`` share backend, n and k)."""
    import matplotlib.pyplot as plt

    first = comparisons[0]
    backend, n, k = first["backend"], first["n"], first["k"]
    series = _layer_series(analysis, backend, n, k)
    _style()
    colours = _colours(series)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 4.4))
    for dtype, points in series.items():
        colour, marker = colours[dtype]
        left.plot([b for b, _ in points], [t * 1e6 for _, t in points], marker=marker, color=colour, ms=4,
                  label=dtype)
    left.legend(fontsize=8)
    left.set_title("time per launch (median)", fontsize=10)
    _speedup_panel(right, comparisons, colours)
    right.set_title("speed-up over bf16 (95% CI); dashed: break-even, shaded: its 95% CI", fontsize=9)
    batch_axes(left, right, "batch (sequences per decode step)", "time per launch (µs)",
               "speed-up (bf16 time / format time)")
    fig.suptitle(f"Weight-only formats, {n}×{k}{backend_tag(backend)}: {result.device.name}")
    fig.tight_layout()
    return fig


def format_figures(result: Result, analysis: dict[str, Any]) -> dict[str, Any]:
    """``formats_<n>x<k>`` (plus the back end when not torch) -> its figure, for every layer compared."""
    layers: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for c in analysis.get("formats") or []:
        layers.setdefault((c["backend"], c["n"], c["k"]), []).append(c)
    figures = {}
    for (backend, n, k), comparisons in layers.items():
        suffix = "" if backend in ("torch", "imported") else f"_{backend}"
        figures[f"formats_{n}x{k}{suffix}"] = format_figure(result, analysis, comparisons)
    return figures
