"""The plan's report: report.html (self-contained) and report.md with the GPUs-against-rate curve of every
candidate and policy (and, with prices, the cost per million output tokens against rate) beside the table."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from roofline.fleet.plan_document import (  # noqa: E402
    candidate_label,
    plan_header,
    plan_rows,
    plan_sentences,
    slo_text,
)
from roofline.report import page  # noqa: E402
from roofline.report.page import figure_pngs  # noqa: E402
from roofline.report.plots import OKABE_ITO, _style  # noqa: E402
from roofline.serving.report import CSS  # noqa: E402
from roofline.serving.workload import describe_workload  # noqa: E402

MARKERS = ("o", "s", "^", "D", "v", "P")  # curves that coincide stay told apart


def _curves(document: dict[str, Any]):
    """(label, layout, met points) for every candidate, policy and layout that met the SLO at some rate."""
    for candidate in document["candidates"]:
        for plan in candidate["plans"]:
            for layout in ("aggregated", "disaggregated"):
                points = [p for p in plan[layout] or [] if p["met"]]
                if points:
                    yield f"{candidate_label(candidate)}, {plan['policy']['policy']}", layout, points


def _figure(document: dict[str, Any], key: str, ylabel: str, title: str):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    drawn = False
    for i, (label, layout, points) in enumerate(_curves(document)):
        values = [p[key] for p in points]
        if any(v is None for v in values):
            continue
        ax.plot([p["rate_requests_per_s"] for p in points], values, marker=MARKERS[i % len(MARKERS)],
                color=OKABE_ITO[i % 8],
                linestyle="--" if layout == "disaggregated" else "-",
                label=label + (" (prefill:decode apart)" if layout == "disaggregated" else ""))
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("request rate (requests/s)")
    ax.set_ylabel(ylabel)
    if key == "gpus":  # a GPU count: whole ticks
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def render_figures(document: dict[str, Any]) -> dict[str, bytes]:
    _style()
    return figure_pngs({
        "gpus_rate": _figure(document, "gpus", "GPUs needed", f"GPUs that meet {slo_text(document)}, against the rate"),
        "cost_rate": _figure(document, "usd_per_million_output_tokens", "USD per million output tokens",
                             "What a million output tokens cost at each rate (the prices given)")})[0]


def write_report(document: dict[str, Any], folder: Path) -> None:
    """The report's files, each through ``write_output_file`` (a link or FIFO in the folder is refused)."""
    images = render_figures(document)
    setting = (f"Workload: {describe_workload(document['workload'])}, at each rate as Poisson arrivals; router "
               f"{document['router']}; SLO {slo_text(document)}.")
    blocks: list[page.Block] = [
        page.Heading("Answer"), page.Bullets(tuple(plan_sentences(document))),
        page.Heading("Plans"), page.Table(plan_header(document), tuple(plan_rows(document))),
        page.Paragraph(setting, html.escape(setting)),
        page.Images()]
    page.write_page(folder, "gpubench plan", CSS, blocks, images)
