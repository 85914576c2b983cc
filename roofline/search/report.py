"""The search's report: report.html (self-contained) and report.md with the front figure (every configuration's
point at each rate, tokens/s per GPU against tokens/s per user, the front joined and the choice ringed), the top
ten, the choices with their binding limits, and the chosen configuration's step composition, crossover and batch
limit."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from roofline.core.units import significant  # noqa: E402
from roofline.report import page  # noqa: E402
from roofline.report.page import figure_pngs  # noqa: E402
from roofline.report.plots import OKABE_ITO, _style  # noqa: E402
from roofline.search.document import (  # noqa: E402
    FRONT_HEADER,
    answer_lines,
    front_rows,
    pruned_lines,
    slo_text,
    top_header,
    top_rows,
)
from roofline.serving.report import CSS  # noqa: E402
from roofline.serving.workload import describe_workload  # noqa: E402

MARKERS = {"aggregated": "o", "disaggregated": "s"}


def front_figure(document: dict[str, Any]):
    """Every met configuration at each rate (a colour per SKU, squares for P:D), the front joined, each rate's
    choice ringed."""
    rates = document["rates_requests_per_s"]
    fig, axes = plt.subplots(1, len(rates), figsize=(7.5 * len(rates), 5), squeeze=False)
    skus = sorted({c["setting"]["sku"] for c in document["configurations"]})
    drawn = False
    for ax, rate in zip(axes[0], rates, strict=True):
        front = []
        for config in document["configurations"]:
            for point in config["points"]:
                if point["rate_requests_per_s"] != rate or not point["met"] or not point["tokens_per_s_per_user"]:
                    continue
                xy = (point["tokens_per_s_per_user"], point["tokens_per_s_per_gpu"])
                ax.scatter(*xy, s=22, alpha=0.6, marker=MARKERS[config["layout"]],
                           color=OKABE_ITO[skus.index(config["setting"]["sku"]) % 8])
                drawn = True
                if point.get("on_front"):
                    front.append(xy)
        if front:
            front.sort()
            ax.plot([x for x, _ in front], [y for _, y in front], color="black", linewidth=1, label="Pareto front")
        for answer in document["answers"]:
            if answer["rate_requests_per_s"] == rate and answer["met"] and answer["tokens_per_s_per_user"]:
                ax.scatter(answer["tokens_per_s_per_user"], answer["tokens_per_s_per_gpu"], s=220,
                           facecolors="none", edgecolors="red", linewidths=2, label="chosen")
        for i, sku in enumerate(skus):
            ax.scatter([], [], color=OKABE_ITO[i % 8], label=sku)
        ax.set_xlabel("tokens/s per user (1 / TPOT p50)")
        ax.set_ylabel("output tokens/s per GPU")
        ax.set_title(f"{significant(rate)} requests/s within {slo_text(document)}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    if not drawn:
        plt.close(fig)
        return None
    return fig


def write_report(document: dict[str, Any], folder: Path) -> None:
    _style()
    images = figure_pngs({"front": front_figure(document)})[0]
    setting = (f"Model {document['model']['name']}; workload: {describe_workload(document['workload'])}, at each "
               f"rate as Poisson arrivals; router {document['router']}; SLO {slo_text(document)}. Space: "
               f"{document['space']['configurations']} configurations, policy {document['space']['policy']}. "
               f"Engine time every step: {document['space']['engine_time']}.")
    blocks: list[page.Block] = [page.Heading("Answer"), page.Bullets(tuple(answer_lines(document)))]
    for answer in document["answers"]:
        if answer["met"]:
            blocks += [page.Heading(f"Why the choice at {significant(answer['rate_requests_per_s'])} requests/s"),
                       page.Bullets((answer.get("binding_sentence", ""), *answer.get("sentences", [])))]
            parts = answer.get("composition_s") or {}
            total = sum(parts.values()) or 1.0
            blocks.append(page.Table(("part of the busy time", "seconds", "share"),
                                     tuple((k.removesuffix("_s"), significant(v), f"{v / total:.0%}")
                                           for k, v in parts.items())))
    blocks.append(page.Images())
    for rate in document["rates_requests_per_s"]:
        blocks += [page.Heading(f"Top ten at {significant(rate)} requests/s"),
                   page.Table(top_header(document), tuple(top_rows(document, rate))),
                   page.Heading(f"The front at {significant(rate)} requests/s"),
                   page.Table(FRONT_HEADER, tuple(front_rows(document, rate)))]
    blocks += [page.Heading("Pruned"), page.Bullets(tuple(pruned_lines(document)) or ("nothing",)),
               page.Heading("Not searched"), page.Bullets(tuple(document["space"]["not_modelled"])),
               page.Paragraph(setting, html.escape(setting))]
    page.write_page(folder, "gpubench search", CSS, blocks, images)


