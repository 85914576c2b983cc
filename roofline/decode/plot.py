"""The decode figure: tokens/s and time per token against batch, drawn from a decode document."""

from __future__ import annotations

from typing import Any


def decode_figure(document: dict[str, Any]):
    """Tokens/s and time per token against batch, measured beside analytic, KV cap and crossover marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from roofline.report.plots import OKABE_ITO, batch_axes
    from roofline.report.ticks import number_text, readable_log_axis

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for index, key in enumerate(("measured", "analytic")):
        part = document.get(key)
        if not part:
            continue
        batches = [r["batch"] for r in part["rows"]]
        style = "-o" if key == "measured" else "--s"
        left.plot(batches, [r["tokens_per_s"] for r in part["rows"]], style, color=OKABE_ITO[index], ms=4,
                  label=part["source"])
        right.plot(batches, [r["step_time_s"] * 1e3 for r in part["rows"]], style, color=OKABE_ITO[index], ms=4)
        kv = part["kv"].get("max_batch")
        if kv is not None:
            # Draw the cap where it falls among the batches; far beyond them, the legend says it is off the axis.
            if kv <= 2 * max(batches):
                for ax in (left, right):
                    ax.axvline(max(kv, 0.5), color=OKABE_ITO[index], ls=":", lw=1)
                label = f"KV cache cap ({key}): batch {kv}"
            else:
                label = f"KV cache cap ({key}): batch {kv}, beyond this axis (not drawn)"
            left.plot([], [], ls=":", color=OKABE_ITO[index], label=label)
        crossing = (part.get("crossing") or {}).get("crossover_batch")
        if crossing:
            right.axvline(crossing, color=OKABE_ITO[3 + index], lw=1, label=f"turns compute-bound ({key})")
    batch_axes(left, right, "batch (sequences)", "tokens/s (all sequences)", "time per output token (ms)")
    readable_log_axis(left.yaxis, number_text)  # 300, 1000, 3000: not 3×10^2 beside 4×10^2
    setup = document["setup"]
    fig.suptitle(f"Decode: {setup['model']}, TP {setup['tp']}, context {setup['context']}, {setup['dtype']}")
    left.legend(fontsize=7)
    if right.get_legend_handles_labels()[0]:
        right.legend(fontsize=7)
    fig.tight_layout()
    return fig
