"""The grouped figure, one per mixture-of-experts series: time per launch and achieved FLOP/s against the tokens
each touched expert's GEMM saw (``batch × topk / touched``), the fitted per-expert crossover marked with the
global batch the routing needs for it.  A grouped series' crossover is its experts': this is where it shows."""

from __future__ import annotations

from typing import Any

from roofline.core.units import si
from roofline.report.plots import OKABE_ITO, _style, batch_axes
from roofline.report.tables import series_name
from roofline.report.ticks import readable_log_axis, seconds_text


def grouped_figures(analysis: dict[str, Any]) -> dict[str, Any]:
    """``grouped_<dtype>_<E>x<N>x<K>`` -> figure for every grouped series with at least two ok points."""
    return {f"grouped_{s['dtype']}_{s['experts']}x{s['n']}x{s['k']}_top{s['topk']}": _figure(s)
            for s in analysis["series"] if s["op"] == "grouped" and len(s["points"]) >= 2}


def _figure(s: dict[str, Any]):
    import matplotlib.pyplot as plt

    _style()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    per_expert = [p["tokens_per_expert"] for p in s["points"]]
    left.plot(per_expert, [p["time_s"] for p in s["points"]], marker="o", color=OKABE_ITO[0])
    right.plot(per_expert, [p["flop_per_s"] for p in s["points"]], marker="o", color=OKABE_ITO[1])
    batch_axes(left, right, "tokens per touched expert", "time per launch", "achieved FLOP/s")
    right.set_yscale("log")
    readable_log_axis(left.yaxis, seconds_text)
    readable_log_axis(right.yaxis, lambda value, _position=None: si(value, "FLOP/s"))
    if s.get("critical_tokens_per_expert"):
        for ax in (left, right):
            ax.axvline(s["critical_tokens_per_expert"], color=OKABE_ITO[3], ls="--", lw=1)
        words = (f" crossover ≈ {s['critical_tokens_per_expert']:.0f} tokens/expert\n (global batch ≈ "
                 f"{s['critical_batch']:.0f}, {s['routing']} routing)")
        right.text(s["critical_tokens_per_expert"], right.get_ylim()[0], words, fontsize=8, va="bottom",
                   color=OKABE_ITO[3])
    fig.suptitle(series_name(s), fontsize=10)
    fig.tight_layout()
    return fig
