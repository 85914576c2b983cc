"""How a comparison is shown: Markdown tables, and overlaid roofline and time-against-batch figures."""

from __future__ import annotations

from typing import Any

from roofline.units import percent, si


def batch_text(row: dict[str, Any]) -> str:
    if row["critical_batch"] is not None:
        lo, hi = row["critical_batch_ci95"]
        interval = f" ({lo:.0f}–{hi:.0f})" if lo is not None and hi is not None else ""
        return f"{row['critical_batch']:.0f}{interval}"
    if row["critical_batch_lower_bound"]:
        return f"> {row['critical_batch_lower_bound']}"
    return "–"


COLUMNS = ("device", "copy BW", "GEMV BW", "% spec BW", "peak", "% spec peak", "ridge", "B* (95% CI)",
           "speed vs baseline")


def row_cells(row: dict[str, Any], ratios: dict[str, dict[int, float]], baseline: str | None) -> list[str]:
    if row["file"] == baseline:
        speed = "baseline"
    elif row["file"] in ratios:
        values = sorted(ratios[row["file"]].values())
        speed = f"{values[len(values) // 2]:.2f}× median ({values[0]:.2f}–{values[-1]:.2f})"
    else:
        speed = "–"
    return [row["device"], si(row["copy_bytes_per_s"], "B/s"), si(row["gemv_bytes_per_s"], "B/s"),
            percent(row["pct_spec_bandwidth"]), si(row["peak_flop_per_s"], "FLOP/s"), percent(row["pct_spec_peak"]),
            "–" if row["ridge_flop_per_byte"] is None else f"{row['ridge_flop_per_byte']:.0f}", batch_text(row),
            speed]


def markdown(comparison: dict[str, Any], fleet: dict[str, Any] | None) -> str:
    out = ["# gpubench comparison", ""]
    if comparison["baseline"]:
        out += [f"Baseline: `{comparison['baseline']}`. Speed = baseline time / this time at the same batch.", ""]
    for group in comparison["groups"]:
        out += [f"## {group['dtype']} {group['n']}x{group['k']}", "", "| " + " | ".join(COLUMNS) + " |",
                "|" + "---|" * len(COLUMNS)]
        for row in group["rows"]:
            cells = row_cells(row, group["speed_vs_baseline"], comparison["baseline"])
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    if comparison["not_comparable"]:
        out += ["## Not comparable", ""] + [f"- {line}" for line in comparison["not_comparable"]] + [""]
    if fleet:
        out += [f"## Fleet (outlier: more than {fleet['k']} robust sd from the SKU's median)", "",
                "| file | device | SKU | outlier | why |", "|---|---|---|---|---|"]
        for unit in fleet["units"]:
            out.append(f"| {unit['file']} | {unit['device']} | {unit['sku']} | "
                       f"{'**yes**' if unit['outlier'] else 'no'} | {'; '.join(unit['why']) or '–'} |")
    return "\n".join(out) + "\n"


def overlay_figures(comparison: dict[str, Any]):
    """Per group: time against batch for every result (spec rows as dashed model lines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from roofline.counting import count_work
    from roofline.plots import MARKERS, OKABE_ITO

    figures = {}
    for group in comparison["groups"]:
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
        for index, row in enumerate(group["rows"]):
            color = OKABE_ITO[index % 8]
            label = row["device"] + ("" if row["measured"] else "")
            if row["times_s"]:
                batches = sorted(row["times_s"])
                times = np.array([row["times_s"][b] for b in batches])
                flops = np.array([count_work("gemm", group["dtype"], b, group["n"], group["k"]).flop
                                  for b in batches])
                left.plot(batches, times * 1e6, marker=MARKERS[index % 8], color=color, ms=4, label=label)
                right.plot(batches, flops / times / 1e12, marker=MARKERS[index % 8], color=color, ms=4)
            elif row["gemv_bytes_per_s"] and row["peak_flop_per_s"]:
                batches = np.unique(np.geomspace(1, 1024, 60).round()).astype(int)
                works = [count_work("gemm", group["dtype"], int(b), group["n"], group["k"]) for b in batches]
                times = np.array([max(w.bytes / row["gemv_bytes_per_s"], w.flop / row["peak_flop_per_s"])
                                  for w in works])
                left.plot(batches, times * 1e6, "--", color=color, label=label)
                right.plot(batches, np.array([w.flop for w in works]) / times / 1e12, "--", color=color)
        for ax in (left, right):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch")
            ax.grid(alpha=0.3)
        left.set_yscale("log")
        left.set_ylabel("time per launch (µs)")
        right.set_ylabel("achieved TFLOP/s")
        left.legend(fontsize=7)
        fig.suptitle(f"{group['dtype']} {group['n']}×{group['k']}: measured (solid) and spec-only (dashed)")
        fig.tight_layout()
        figures[f"compare_{group['dtype']}_{group['n']}x{group['k']}"] = fig
    return figures
