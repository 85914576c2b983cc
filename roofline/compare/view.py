"""How a comparison is shown: Markdown tables, and overlaid roofline and time-against-batch figures."""

from __future__ import annotations

from typing import Any

from roofline.analysis.formats import break_even_text, speedup_text
from roofline.analysis.reference import marked_percent
from roofline.core.units import percent, si
from roofline.result.document import backend_tag
from roofline.result.folders import FolderKind

# What ``gpubench compare -o`` writes: compare.json (known by its keys), compare.md and a figure per group.
COMPARE_FOLDER = FolderKind("compare", "compare.json", keys=("comparison", "fleet"), files=("compare.md",),
                            patterns=("compare_*.png",))


def batch_text(row: dict[str, Any]) -> str:
    if row["critical_batch"] is not None:
        lo, hi = row["critical_batch_ci95"]
        interval = f" ({lo:.0f}–{hi:.0f})" if lo is not None and hi is not None else ""
        return f"{row['critical_batch']:.0f}{interval}"
    if row["critical_batch_lower_bound"]:
        return f"> {row['critical_batch_lower_bound']}"
    return "–"


COLUMNS = ("device", "reference BW", "GEMV BW (% ref)", "% spec BW", "peak", "% spec peak", "ridge",
           "B* (95% CI)", "speed vs baseline", "vs baseline: points; B*/BW/peak")
VERDICT_ORDER = ("slower", "faster", "same", "inconclusive")


def _reference_cell(row: dict[str, Any]) -> str:
    if not row.get("reference_bandwidth_bytes_per_s"):
        return "–"
    return f"{si(row['reference_bandwidth_bytes_per_s'], 'B/s')} ({row['reference_bandwidth_name']})"


def _gemv_cell(row: dict[str, Any]) -> str:
    pct = row.get("pct_reference_bandwidth")
    # Above its ceiling: said, not hidden (the reference kernel is not the fastest here).
    text = "" if pct is None else f" ({marked_percent(pct, 0)}" + (" above its ceiling)" if pct > 100 else ")")
    return si(row["gemv_bytes_per_s"], "B/s") + text


def significance_cell(significance: dict[str, Any] | None) -> str:
    if not significance:
        return "–"
    counts = significance["counts"]
    points = ", ".join(f"{counts[v]} {v}" for v in VERDICT_ORDER if counts.get(v)) or "no common batch"
    fitted = "/".join((significance.get(key) or {}).get("verdict", "–")
                      for key in ("critical_batch", "bandwidth_bytes_per_s", "peak_flop_per_s"))
    return f"{points}; {fitted}"


def row_cells(row: dict[str, Any], ratios: dict[str, dict[int, float]], baseline: str | None,
              significance: dict[str, Any] | None = None) -> list[str]:
    if row["file"] == baseline:
        speed = "baseline"
    elif row["file"] in ratios:
        values = sorted(ratios[row["file"]].values())
        speed = f"{values[len(values) // 2]:.2f}× median ({values[0]:.2f}–{values[-1]:.2f})"
    else:
        speed = "–"
    decided = "baseline" if row["file"] == baseline else significance_cell((significance or {}).get(row["file"]))
    device = row["device"] + (" (busy device)" if row.get("busy_at_start") else "")
    return [device, _reference_cell(row), _gemv_cell(row), percent(row["pct_spec_bandwidth"]),
            si(row["peak_flop_per_s"], "FLOP/s"), percent(row["pct_spec_peak"]),
            "–" if row["ridge_flop_per_byte"] is None else f"{row['ridge_flop_per_byte']:.0f}", batch_text(row),
            speed, decided]


def difference_lines(group: dict[str, Any]) -> list[str]:
    """Every point and fitted figure that is not "same", with why: the table's counts, itemised."""
    lines = []
    for file, significance in group.get("significance_vs_baseline", {}).items():
        if significance.get("busy"):
            lines.append(f"{file}: {significance['busy']}: no difference from the baseline is called significant")
        for batch, value in significance["points"].items():
            if value["verdict"] != "same":
                lines.append(f"{file}: B={batch} {value['verdict']} ({value['why']})")
        for key in ("gemv", "critical_batch", "bandwidth_bytes_per_s", "peak_flop_per_s"):
            value = significance.get(key)
            if value and value["verdict"] != "same":
                lines.append(f"{file}: {key} {value['verdict']} ({value['why']})")
    return lines


FORMAT_COLUMNS = ("device", "SKU", "kernels", "speed-up at the smallest batch (95% CI)", "break-even batch (95% CI)",
                  "batches compared")


def format_title(group: dict[str, Any]) -> str:
    return (f"{group['format']} against {group['baseline']}, {group['n']}×{group['k']}{backend_tag(group['backend'])}: "
            "break-even batch")


def _kernels_cell(row: dict[str, Any]) -> str:
    """The format's kernel / bf16's, as that result ran them ("?" where a result did not record one)."""
    if not row.get("kernel") and not row.get("baseline_kernel"):
        return "–"
    return f"{row.get('kernel') or '?'} / {row.get('baseline_kernel') or '?'}"


def format_cells(row: dict[str, Any]) -> list[str]:
    """One result's row of a weight-only format's group: where it starts and where it stops paying off."""
    batches = row["batches"]
    return [row["device"], row["sku"] or "–", _kernels_cell(row), f"B={batches[0]}: {speedup_text(row, named=False)}",
            break_even_text(row, named=False), f"{len(batches)} ({batches[0]}–{batches[-1]})"]


def _format_markdown(comparison: dict[str, Any]) -> list[str]:
    groups = comparison.get("formats") or []
    out = ["Weight-only formats: speed-up is each result's own bf16 median time over the format's at the same "
           "batch; the break-even batch is where it first falls below 1 (linear in log batch); 95% bootstrap "
           "intervals.", ""] if groups else []
    for group in groups:
        out += [f"## {format_title(group)}", "", "| " + " | ".join(FORMAT_COLUMNS) + " |",
                "|" + "---|" * len(FORMAT_COLUMNS)]
        out += ["| " + " | ".join(format_cells(row)) + " |" for row in group["rows"]] + [""]
    return out


GROUPED_COLUMNS = ("device", "SKU", "crossover per expert (95% CI)", "global batch (95% CI)", "peak",
                   "speed vs baseline")


def grouped_title(group: dict[str, Any]) -> str:
    return (f"grouped {group['dtype']}: {group['experts']} experts of {group['n']}x{group['k']}, top-{group['topk']}, "
            f"{group['routing']} routing")


def grouped_cells(row: dict[str, Any]) -> list[str]:
    """One result's row of a grouped series: its experts' crossover, the global batch, its peak, its speed."""
    def crossover(value, interval):
        if value is None:
            return "–" if row["status"] == "ok" else row["status"]
        lo, hi = interval or (None, None)
        return f"{value:.0f} ({'?' if lo is None else f'{lo:.0f}'}–{'∞' if hi is None else f'{hi:.0f}'})"

    speeds = row.get("speed_vs_baseline") or {}
    speed = ", ".join(f"B={b}: {v:.2f}×" for b, v in list(speeds.items())[:4]) or "–"
    busy = " (busy device)" if row.get("busy_at_start") else ""
    return [row["device"] + busy, row["sku"] or "–",
            crossover(row["critical_tokens_per_expert"], row["critical_tokens_per_expert_ci95"]),
            crossover(row["critical_batch"], row["critical_batch_ci95"]), si(row["peak_flop_per_s"], "FLOP/s"), speed]


def _grouped_markdown(comparison: dict[str, Any]) -> list[str]:
    out = []
    for group in comparison.get("grouped") or []:
        out += [f"## {grouped_title(group)}", "", "| " + " | ".join(GROUPED_COLUMNS) + " |",
                "|" + "---|" * len(GROUPED_COLUMNS)]
        out += ["| " + " | ".join(grouped_cells(row)) + " |" for row in group["rows"]] + [""]
    return out


def markdown(comparison: dict[str, Any], fleet: dict[str, Any] | None) -> str:
    out = ["# gpubench comparison", ""]
    if comparison["baseline"]:
        out += [f"Baseline: `{comparison['baseline']}`. Speed = baseline time / this time at the same batch. "
                "Each point: faster / slower / same / inconclusive from its samples (Mann-Whitney U, p < 0.01, or "
                "non-overlapping 95% CIs with few samples) and a 5% minimum effect; B*, bandwidth and peak from "
                "their 95% bootstrap intervals; inconclusive against a run measured on a busy device, whatever "
                "the samples say. % ref BW: of each result's own reference bandwidth.", ""]
    for group in comparison["groups"]:
        out += [f"## {group['dtype']} {group['n']}x{group['k']}", "", "| " + " | ".join(COLUMNS) + " |",
                "|" + "---|" * len(COLUMNS)]
        for row in group["rows"]:
            cells = row_cells(row, group["speed_vs_baseline"], comparison["baseline"],
                              group.get("significance_vs_baseline"))
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        lines = difference_lines(group)
        if lines:
            out += ["Differences from the baseline that are not \"same\":", ""] + [f"- {x}" for x in lines] + [""]
    out += _format_markdown(comparison)
    out += _grouped_markdown(comparison)
    if comparison.get("reference_verdicts"):
        out += ["## Against the reference", ""] + [f"- {line}" for line in comparison["reference_verdicts"]] + [""]
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

    from roofline.core.counting import count_work
    from roofline.core.roof import roof_time_s
    from roofline.report.plots import MARKERS, OKABE_ITO, batch_axes

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
                times = roof_time_s([w.flop for w in works], [w.bytes for w in works], row["gemv_bytes_per_s"],
                                    row["peak_flop_per_s"])
                left.plot(batches, times * 1e6, "--", color=color, label=label)
                right.plot(batches, np.array([w.flop for w in works]) / times / 1e12, "--", color=color)
        batch_axes(left, right, "batch", "time per launch (µs)", "achieved TFLOP/s")
        left.legend(fontsize=7)
        fig.suptitle(f"{group['dtype']} {group['n']}×{group['k']}: measured (solid) and spec-only (dashed)")
        fig.tight_layout()
        figures[f"compare_{group['dtype']}_{group['n']}x{group['k']}"] = fig
    return figures
