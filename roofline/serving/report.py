"""The simulation report: report.html (self-contained), report.md with PNGs beside it, from simulation.json's
content and the runs (a fleet's: the pooled run, and a table of its replicas).  Figures: throughput against
latency over rates, throughput per GPU against tokens/s per user over ``--sweep-load``'s rates with the Pareto
front ringed, batch and KV occupancy over time, MBU/MFU over time, latency distributions, the inter-token
latency's distribution and tail, step-time composition.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from roofline.core.units import seconds, significant  # noqa: E402
from roofline.report import page  # noqa: E402
from roofline.report.page import figure_pngs  # noqa: E402
from roofline.report.plots import OKABE_ITO, _style  # noqa: E402
from roofline.report.ticks import readable_log_axis, seconds_text  # noqa: E402
from roofline.serving.latency import latencies, pooled_inter_token_latencies_s  # noqa: E402
from roofline.serving.metrics import limit_name  # noqa: E402
from roofline.serving.simulate import SimulationRun  # noqa: E402
from roofline.serving.workload import describe_workload  # noqa: E402


def _s(value: float | None) -> str:
    # Significant digits with the unit chosen per value: a tiny model's 40 µs TPOT printed "0.0 ms" in fixed
    # point, and a huge rate "21703.19".
    return "–" if value is None else seconds(value)


def _capacity(cap: dict[str, Any]) -> str:
    if not cap or cap.get("capacity_requests_per_s") is None:
        return "–"
    clients = f" ({cap['capacity_concurrency']} clients)" if cap.get("capacity_concurrency") else ""
    return ("≥" if cap.get("capacity_is_lower_bound") else "") + significant(cap["capacity_requests_per_s"]) + clients


def _goodput(summary: dict[str, Any]) -> list[str]:
    """Goodput under the SLO: requests/s meeting every limit, and their share of the requests served."""
    slo = summary.get("slo")
    if not slo:
        return ["–", "–"]
    share = slo["goodput_requests_per_s"] / summary["requests_per_s"] if summary["requests_per_s"] else 0.0
    return [significant(slo["goodput_requests_per_s"]), f"{share:.0%}"]


def shares_prefixes(document: dict[str, Any]) -> bool:
    """The workload's prompts can share prefixes: drawn with --prefix or --sessions, or a Mooncake trace, or some
    policy found a cached prefix."""
    workload = document["workload"]
    return bool(workload.get("prefix") or workload.get("sessions")
                or str(workload.get("trace") or "").lower().endswith(".jsonl")
                or any(entry["summary"].get("cached_prompt_tokens") for entry in document["runs"]))


def _hit_rate(summary: dict[str, Any]) -> str:
    rate = summary.get("prefix_hit_rate")
    return "–" if rate is None else f"{rate:.0%}"


def summary_table(document: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per policy; with an SLO, its goodput and the share of requests meeting it before the capacity; with
    prompts that share prefixes, the prefix cache's hit rate."""
    with_slo = any(entry["summary"].get("slo") for entry in document["runs"])
    shared = shares_prefixes(document)
    header = ["policy", "tokens/s", "req/s", "vs first", "TTFT p50/p90/p99", "TPOT p50/p90/p99",
              "ITL p50/p99", "e2e p99", "batch mean/max", "KV occ mean/max", *(["prefix hit"] if shared else []),
              "compute-bound", "MBU", "MFU", "waste", *(["goodput req/s", "meet SLO"] if with_slo else []),
              "capacity req/s"]
    rows, base = [], None
    for entry in document["runs"]:
        s = entry["summary"]
        base = base or s["tokens_per_s"]
        kv = "–" if s["kv_occupancy_mean"] is None else f"{s['kv_occupancy_mean']:.0%}/{s['kv_occupancy_max']:.0%}"
        cap = entry.get("capacity") or {}
        rows.append([
            entry["policy"]["policy"], significant(s["tokens_per_s"]), significant(s["requests_per_s"]),
            f"{significant(s['tokens_per_s'] / base)}x" if base else "–",
            "/".join(_s(s["ttft"][f"p{p}_s"]) for p in (50, 90, 99)),
            "/".join(_s(s["tpot"][f"p{p}_s"]) for p in (50, 90, 99)),
            "/".join(_s((s.get("itl") or {}).get(f"p{p}_s")) for p in (50, 99)),  # absent: an older document
            _s(s["e2e"]["p99_s"]), f"{s['batch_mean']:.1f}/{s['batch_max']}", kv,
            *([_hit_rate(s)] if shared else []), f"{s['compute_bound_time_share']:.0%}",
            "–" if s["mbu_mean"] is None else f"{s['mbu_mean']:.0%}",
            "–" if s["mfu_mean"] is None else f"{s['mfu_mean']:.0%}", f"{s['padding_waste']['share']:.0%}",
            *(_goodput(s) if with_slo else []), _capacity(cap),
        ])
    return header, rows


def _rates_figure(document: dict[str, Any]):
    fig, ax = plt.subplots(figsize=(7, 4.2))
    drawn = False
    for i, entry in enumerate(document["runs"]):
        points = sorted(entry.get("rates") or [], key=lambda p: p["rate_requests_per_s"])
        if not points:
            continue
        ax.plot([p["tokens_per_s"] for p in points], [p["ttft_p90_s"] for p in points], marker="o",
                color=OKABE_ITO[i % 8], label=entry["policy"]["policy"])
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("throughput (output tokens/s)")
    ax.set_ylabel("TTFT P90")
    ax.set_yscale("log")
    readable_log_axis(ax.yaxis, seconds_text)
    ax.set_title("Throughput against latency over arrival rates")
    ax.legend()
    return fig


def interactivity_figure(document: dict[str, Any]):
    """``--sweep-load``: tokens/s per GPU against tokens/s per user, a line per policy through its loads, the
    Pareto front over every policy ringed (None: no sweep)."""
    sweep = document.get("load_sweep")
    if not sweep:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    policies = list(dict.fromkeys(p["policy"] for p in sweep["points"]))
    for i, policy in enumerate(policies):
        points = sorted((p for p in sweep["points"] if p["policy"] == policy and p["tokens_per_s_per_user"]),
                        key=lambda p: p["rate_requests_per_s"])
        ax.plot([p["tokens_per_s_per_user"] for p in points], [p["tokens_per_s_per_gpu"] for p in points],
                marker="o", color=OKABE_ITO[i % 8], label=policy)
    front = sorted((p for p in sweep["points"] if p["on_front"]), key=lambda p: p["tokens_per_s_per_user"])
    ax.plot([p["tokens_per_s_per_user"] for p in front], [p["tokens_per_s_per_gpu"] for p in front], linestyle="none",
            marker="o", markersize=13, markerfacecolor="none", markeredgecolor="black", label="Pareto front")
    ax.set_xlabel("tokens/s per user (1 / TPOT p50)")
    ax.set_ylabel(f"output tokens/s per GPU ({sweep['gpus']} GPU{'s' if sweep['gpus'] > 1 else ''})")
    ax.set_title("Throughput against interactivity over arrival rates")
    ax.legend()
    return fig


def load_sweep_rows(sweep: dict[str, Any]) -> tuple[tuple[str, ...], ...]:
    """One row per policy and load, in ``LOAD_SWEEP_HEADER``'s columns."""
    def three(point: dict[str, Any], metric: str) -> str:
        return "/".join(_s(point[f"{metric}_p{p}_s"]) for p in (50, 90, 99))

    return tuple((p["policy"], significant(p["rate_requests_per_s"]), significant(p["tokens_per_s_per_gpu"]),
                  "–" if p["tokens_per_s_per_user"] is None else significant(p["tokens_per_s_per_user"]),
                  three(p, "ttft"), three(p, "tpot"),
                  "–" if p["tokens_per_joule"] is None else significant(p["tokens_per_joule"]),
                  "yes" if p["on_front"] else "") for p in sweep["points"])


LOAD_SWEEP_HEADER = ("policy", "req/s", "tok/s/GPU", "tok/s/user", "TTFT p50/p90/p99", "TPOT p50/p90/p99", "tok/J",
                     "on front")


def energy_rows(document: dict[str, Any]) -> tuple[tuple[str, ...], ...]:
    """One row per policy: its GPU-seconds of steps, the power charged, joules, tokens per joule and per dollar
    (a TDP's tokens per joule is a floor: "≥")."""
    rows = []
    for entry in document["runs"]:
        e = entry.get("energy")
        if not e:
            continue
        bound = "≥ " if e["upper_bound"] else ""
        rows.append((entry["policy"]["policy"], significant(e["gpu_busy_s"]),
                     "–" if e["watts_per_gpu"] is None else f"{e['watts_per_gpu']:g}",
                     "–" if e["joules"] is None else significant(e["joules"]),
                     "–" if e["tokens_per_joule"] is None else bound + significant(e["tokens_per_joule"]),
                     "–" if e["tokens_per_usd"] is None else significant(e["tokens_per_usd"])))
    return tuple(rows)


ENERGY_HEADER = ("policy", "GPU-s busy", "W per GPU", "J", "tokens/J", "tokens/$")


def energy_sentence(document: dict[str, Any]) -> str | None:
    """Where the power figure comes from, once (every policy is charged the same), or why there is none."""
    energy = next((entry["energy"] for entry in document["runs"] if entry.get("energy")), None)
    if energy is None:
        return None
    if energy["watts_per_gpu"] is None:
        return f"No tokens per joule: {energy['why_none']}."
    bound = (" At a TDP the joules are an upper bound, so tokens per joule is a lower bound." if energy["upper_bound"]
             else "")
    return (f"Energy: every GPU at {energy['watts_per_gpu']:g} W over its busy time, idle time not charged "
            f"({energy['basis']}; {energy['source']}).{bound}")


def _timeline_figure(document: dict[str, Any]):
    fig, (top, mid, bottom) = plt.subplots(3, 1, figsize=(8, 7.5), sharex=True)
    for i, entry in enumerate(document["runs"]):
        t, colour, label = entry["timeline"], OKABE_ITO[i % 8], entry["policy"]["policy"]
        top.plot(t["t_s"], t["batch"], color=colour, label=label)
        if t["kv_occupancy"] is not None:
            mid.plot(t["t_s"], np.array(t["kv_occupancy"]) * 100, color=colour, label=label)
        if t["mbu"] is not None:
            bottom.plot(t["t_s"], np.array(t["mbu"]) * 100, color=colour, label=f"{label} MBU")
            bottom.plot(t["t_s"], np.array(t["mfu"]) * 100, color=colour, linestyle="--", label=f"{label} MFU")
    top.set_ylabel("sequences per step")
    mid.set_ylabel("KV occupancy (%)")
    bottom.set_ylabel("MBU — / MFU -- (%)")
    bottom.set_xlabel("simulated time (s)")
    top.set_title("Batch, KV occupancy and roofline utilisation over time")
    top.legend(fontsize=8)
    fig.tight_layout()
    return fig


def latency_figure(runs: list[SimulationRun]):
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6))
    for i, run in enumerate(runs):
        lat = latencies(run.requests)
        for ax, key in zip(axes, ("ttft", "tpot", "e2e"), strict=True):
            values = np.sort(lat[key])
            if len(values):
                ax.plot(values, np.linspace(0, 1, len(values)), color=OKABE_ITO[i % 8], label=run.policy["policy"])
    for ax, name in zip(axes, ("TTFT", "time per output token", "end-to-end latency"), strict=True):
        ax.set_xlabel(name)
        ax.set_xscale("log")
        readable_log_axis(ax.xaxis, seconds_text)  # units on the ticks: 20 ms, 1 s
    axes[0].set_ylabel("share of requests")
    axes[0].legend(fontsize=8)
    fig.suptitle("Latency distributions (CDF)")
    fig.tight_layout()
    return fig


# Points drawn per policy: a run of 10,000 requests has millions of gaps, and the tail is what matters, so the
# sorted gaps are sampled evenly and, towards the longest, geometrically closer.
ITL_CURVE_POINTS = 1000


def _itl_curve(gaps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sampled sorted gaps with the share of gaps at or below each (CDF) and at or above it (tail)."""
    ordered = np.sort(gaps[gaps > 0])  # log axes: a zero gap (two tokens stamped together) has no place
    n = len(ordered)
    index = np.unique(np.concatenate([np.linspace(0, n - 1, ITL_CURVE_POINTS),
                                      n - np.geomspace(1, n, ITL_CURVE_POINTS)]).astype(int))
    return ordered[index], (index + 1) / n, (n - index) / n


def itl_figure(runs: list[SimulationRun]):
    """Every gap between consecutive tokens, pooled per policy: the CDF, and the tail on log-log axes with P99
    marked, where a prefill that stalls the running decodes shows as a shelf at the prefill step's length."""
    fig, (cdf, tail) = plt.subplots(1, 2, figsize=(11, 3.8))
    drawn = False
    for i, run in enumerate(runs):
        gaps = pooled_inter_token_latencies_s(run.requests)
        if not (gaps > 0).any():
            continue
        x, below, above = _itl_curve(gaps)
        colour, label = OKABE_ITO[i % 8], run.policy["policy"]
        cdf.plot(x, below, color=colour, label=label)
        tail.plot(x, above, color=colour, label=label)
        tail.plot([np.percentile(gaps, 99)], [0.01], marker="o", color=colour)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    for ax in (cdf, tail):
        ax.set_xlabel("inter-token latency")
        ax.set_xscale("log")
        readable_log_axis(ax.xaxis, seconds_text)
    cdf.set_ylabel("share of gaps at or below")
    tail.set_ylabel("share of gaps at or above (o: P99)")
    tail.set_yscale("log")
    cdf.legend(fontsize=8)
    fig.suptitle("Inter-token latency: every gap between consecutive tokens, all requests")
    fig.tight_layout()
    return fig


def _composition_figure(document: dict[str, Any]):
    fig, ax = plt.subplots(figsize=(7, 3.8))
    names = [e["policy"]["policy"] for e in document["runs"]]
    left = np.zeros(len(names))
    parts = ("linear_s", "attention_s", "other_s", "overhead_s", "comm_s")  # comm_s: a TP profile's only
    for i, part in enumerate(p for p in parts if p in document["runs"][0]["composition_s"]):
        values = np.array([e["composition_s"][part] for e in document["runs"]])
        ax.barh(names, values, left=left, color=OKABE_ITO[i], label=part.removesuffix("_s"))
        left += values
    ax.set_xlabel("busy time (s)")
    ax.set_title("Where the step time went")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def render_figures(document: dict[str, Any], runs: list[SimulationRun]) -> dict[str, bytes]:
    _style()
    figures = {"throughput_latency": _rates_figure(document),
               "throughput-interactivity": interactivity_figure(document), "timeline": _timeline_figure(document),
               "latency": latency_figure(runs), "itl": itl_figure(runs),
               "composition": _composition_figure(document)}
    return figure_pngs(figures)[0]


def _prefix_sentence(summary: dict[str, Any]) -> str:
    """What the prefix cache saved: the share of prompt tokens it held, and how many."""
    rate, cached = summary["prefix_hit_rate"], summary.get("cached_prompt_tokens", 0)
    of = f" ({cached:,} of {round(cached / rate):,} tokens not prefilled)" if rate else ""
    return f"the prefix cache held {rate:.0%} of the prompt tokens{of}."


def _means_sentence(summary: dict[str, Any]) -> str | None:
    """The mean latencies every engine benchmark reports beside its percentiles, TTFT with its queueing and
    prefill parts (None: a document written before means were recorded)."""
    if "mean_s" not in summary["ttft"]:
        return None
    ttft = f"TTFT {_s(summary['ttft']['mean_s'])}"
    if summary.get("queue") and summary.get("prefill"):
        ttft += f" (queueing {_s(summary['queue']['mean_s'])} + prefill {_s(summary['prefill']['mean_s'])})"
    rest = ", ".join(f"{name} {_s((summary.get(key) or {}).get('mean_s'))}"
                     for name, key in (("TPOT", "tpot"), ("ITL", "itl"), ("e2e", "e2e")))
    return f"mean {ttft}, {rest}."


def _goodput_sentence(summary: dict[str, Any]) -> str:
    slo = summary["slo"]
    rate, share = _goodput(summary)
    limits = ", ".join(f"{limit_name(name)} ≤ {_s(limit)}" for name, limit in slo["limits_s"].items())
    return f"goodput {rate} req/s: {share} of the requests meet every limit ({limits})."


def verdict_lines(document: dict[str, Any]) -> list[str]:
    p = document["profile"]
    # A weight-only format quantizes the layers' linears only: say what stays bf16.
    head = p.get("lm_head_dtype") or p["dtype"]
    dtype = p["dtype"] if head == p["dtype"] else f"{p['dtype']} (embeddings and LM head {head})"
    lines = [f"{p['model']['name']} on {p['device'].get('name') or p['basis']} ({p['source']}: {p['basis']}), "
             f"{dtype}, KV {p['kv_dtype']}, TP {p['tp']}."]
    if document.get("engine_time"):  # whose engine time the steps carry (older documents: not said)
        lines.append(f"Engine time: {document['engine_time']['words']}.")
    moe = _moe_sentence(p, document["runs"])
    if moe:
        lines.append(moe)
    if document.get("fleet"):
        lines.append(_fleet_sentence(document["fleet"], p["tp"]))
    spec = document.get("spec_decode")
    if spec:
        lines.append(f"Speculative decoding {spec['spelled']}: {spec['draft']} draft tokens a step, "
                     f"{spec['tokens_per_step']:.2f} tokens per sequence-step expected; the drafter: "
                     f"{spec.get('drafter_cost') or spec['drafter']}.")
    shared = shares_prefixes(document)
    for entry in document["runs"]:
        lines.append(f"{entry['policy']['policy']}: {entry['summary']['binding_sentence']}")
        figures = entry["summary"].get("spec_decode")
        if figures and figures["tokens_per_sequence_step"] is not None:
            lines.append(f"{entry['policy']['policy']}: {figures['tokens_per_sequence_step']:.2f} tokens per "
                         f"sequence-step (over {figures['sequence_steps']:,} decoding sequence-steps).")
        means = _means_sentence(entry["summary"])
        if means:
            lines.append(f"{entry['policy']['policy']}: {means}")
        if shared and entry["summary"].get("prefix_hit_rate") is not None:
            lines.append(f"{entry['policy']['policy']}: {_prefix_sentence(entry['summary'])}")
        if entry.get("fleet"):
            lines.append(f"{entry['policy']['policy']}: {_spread_sentence(entry['fleet'])}")
        if entry["summary"].get("slo"):
            lines.append(f"{entry['policy']['policy']}: {_goodput_sentence(entry['summary'])}")
        lines += [f"{entry['policy']['policy']}: warning: {w}" for w in entry["summary"].get("warnings", [])]
        if (entry.get("capacity") or {}).get("reason"):
            lines.append(f"{entry['policy']['policy']}: capacity: {entry['capacity']['reason']}")
        if (entry.get("energy") or {}).get("tokens_per_joule") is not None:
            lines.append(f"{entry['policy']['policy']}: {energy_words(entry['energy'])}.")
    energy = next((entry["energy"] for entry in document["runs"] if entry.get("energy")), None)
    if energy is not None and energy["watts_per_gpu"] is None:
        lines.append(f"No tokens per joule: {energy['why_none']}.")
    if document.get("load_sweep"):
        lines.append(front_sentence(document["load_sweep"]))
    return lines


def energy_words(energy: dict[str, Any]) -> str:
    """"≥ 3.47 output tokens per joule (700 W a GPU, its TDP, over 3.37 busy GPU-s), 3.5e+06 per dollar"."""
    bound = ("≥ ", ", its TDP") if energy["upper_bound"] else ("", "")
    dollars = "" if energy["tokens_per_usd"] is None else f", {significant(energy['tokens_per_usd'])} per dollar"
    return (f"{bound[0]}{significant(energy['tokens_per_joule'])} output tokens per joule "
            f"({energy['watts_per_gpu']:g} W a GPU{bound[1]}, over {significant(energy['gpu_busy_s'])} busy GPU-s)"
            f"{dollars}")


def front_sentence(sweep: dict[str, Any]) -> str:
    """Which policy at which rates is on the throughput-interactivity front."""
    on: dict[str, list[str]] = {}
    for point in sweep["points"]:
        if point["on_front"]:
            on.setdefault(point["policy"], []).append(significant(point["rate_requests_per_s"]))
    where = "; ".join(f"{policy} at {', '.join(rates)} requests/s" for policy, rates in on.items()) or "no point"
    return f"On the throughput-interactivity front (tokens/s per GPU against tokens/s per user): {where}."


# The context the bytes per token of a mixture's sentence are taken at (the weights dominate them at batch 1).
MOE_WORDS_CONTEXT = 1024


def _moe_sentence(profile: dict[str, Any], runs: list[dict[str, Any]]) -> str | None:
    """What a mixture of experts changes, in words: parameters, bytes per token, the experts' crossover, and how
    many tokens each touched expert saw at the first policy's mean decode batch."""
    from roofline.decode.moe import experts_crossover, moe_summary, moe_words
    from roofline.specs.models import ModelSpec
    from roofline.step.launches import StepModel

    model = ModelSpec.from_record(profile["model"])
    if not model.is_moe:
        return None
    step = StepModel.of(model, profile["tp"], profile.get("ep", 1), profile["dtype"], profile["kv_dtype"],
                        profile.get("routing", "balanced"))
    roof = profile.get("roof") or {}
    ridge = roof["peak_flop_per_s"] / roof["bandwidth_bytes_per_s"] if roof else None
    text = moe_words(moe_summary(step, MOE_WORDS_CONTEXT), experts_crossover(step, ridge))  # pyright: ignore[reportArgumentType]
    batch = runs[0]["summary"].get("decode_batch_mean") if runs else None
    if batch:
        seen = step.routing.tokens_per_expert(model.experts, model.experts_per_token, batch)
        text = text[:-1] + (f"; at {runs[0]['policy']['policy']}'s mean decode batch of {batch:.0f} each touched "
                            f"expert sees ~{seen:.1f} tokens.")
    return text


def _fleet_sentence(fleet: dict[str, Any], tp: int) -> str:
    """The layout: how many replicas of how many GPUs, the router, and a split's KV link."""
    gpus = f"{fleet['replicas'] * tp} GPUs"
    if fleet.get("prefill_replicas"):
        link = fleet["kv_link"]
        return (f"Fleet: {fleet['prefill_replicas']} prefill and {fleet['decode_replicas']} decode replicas of TP {tp} "
                f"({gpus}) behind {fleet['router']}; each prompt's KV cache crosses {link['source']}.")
    return f"Fleet: {fleet['replicas']} replicas of TP {tp} ({gpus}) behind {fleet['router']}."


def _spread_sentence(fleet: dict[str, Any]) -> str:
    """How evenly the router spread the requests, and how busy the replicas were."""
    parts = []
    for role in ("serving", "prefill", "decode"):
        members = [r for r in fleet["replicas"] if r["role"] == role]
        if not members:
            continue
        counts, busy = [r["requests"] for r in members], [r["busy_share"] for r in members]
        imbalance = fleet["decode_load_imbalance"] if role == "decode" else fleet["load_imbalance"]
        who = "requests per replica" if role == "serving" else f"requests per {role} replica"
        parts.append(f"{who} {min(counts)}–{max(counts)} (load imbalance {imbalance:.2f}), busy "
                     f"{min(busy):.0%}–{max(busy):.0%} of the makespan")
    if fleet.get("kv_transfer_s"):
        transfer = fleet["kv_transfer_s"]
        parts.append(f"KV handovers {_s(transfer['mean_s'])} on average, {_s(transfer['max_s'])} at most")
    return "; ".join(parts) + "."


REPLICA_HEADER = ("replica", "role", "requests", "tokens", "busy", "TTFT p90", "TPOT p99", "ITL p99", "e2e p99",
                  "batch mean", "KV occ mean", "preemptions")


def replica_rows(fleet: dict[str, Any]) -> tuple[tuple[str, ...], ...]:
    """One row per replica: its own requests' figures from their arrival there."""
    return tuple((str(r["replica"]), r["role"], str(r["requests"]), str(r["output_tokens"]), f"{r['busy_share']:.0%}",
                  _s(r["ttft_p90_s"]), _s(r["tpot_p99_s"]), _s(r["itl_p99_s"]), _s(r["e2e_p99_s"]),
                  "–" if r["batch_mean"] is None else f"{r['batch_mean']:.1f}",
                  "–" if r["kv_occupancy_mean"] is None else f"{r['kv_occupancy_mean']:.0%}", str(r["preemptions"]))
                 for r in fleet["replicas"])


CSS = ("body{font-family:system-ui,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em}"
       "table{border-collapse:collapse;font-size:13px;margin:0.5em 0}td,th{border:1px solid #bbb;padding:3px 6px}"
       "td{white-space:nowrap}img{max-width:100%;display:block;margin:1em 0}")
# The policy table's second half starts here: seventeen columns side by side ran off a 1280-pixel page.
SECOND_HALF_FROM = "batch mean/max"


def policy_tables(document: dict[str, Any]) -> list[page.Block]:
    """``summary_table`` as two tables that each fit a page, the policy first in both: throughput and latency,
    then batch, memory, roofline, goodput and capacity."""
    header, rows = summary_table(document)
    cut = header.index(SECOND_HALF_FROM)
    return [page.Table(tuple(header[:cut]), tuple(tuple(row[:cut]) for row in rows)),
            page.Table((header[0], *header[cut:]), tuple((row[0], *row[cut:]) for row in rows))]


def write_report(document: dict[str, Any], runs: list[SimulationRun], folder: Path) -> None:
    """The report's files, each through ``write_output_file``: a link or FIFO in the folder is refused, not
    replaced."""
    images = render_figures(document, runs)
    workload = describe_workload(document["workload"])
    blocks: list[page.Block] = [
        page.Heading("Verdict"), page.Bullets(tuple(verdict_lines(document))),
        page.Heading("Policies"), *policy_tables(document),
        page.Paragraph(f"Workload: {workload}.", f"Workload: {html.escape(workload)}.")]
    energy, sentence = energy_rows(document), energy_sentence(document)
    if energy:
        blocks += [page.Heading("Energy and cost"), page.Table(ENERGY_HEADER, energy)]
    if sentence:
        blocks.append(page.Paragraph(sentence, html.escape(sentence)))
    if document.get("load_sweep"):
        sweep = document["load_sweep"]
        gpus = f"{sweep['gpus']} GPU{'s' if sweep['gpus'] > 1 else ''}"
        text = (f"Tokens/s per user: {sweep['tokens_per_s_per_user_basis']}; per GPU: over {gpus}. "
                "On the front: no point of any policy has as many tokens/s per user and per GPU and more of one.")
        blocks += [page.Heading("Throughput against interactivity"),
                   page.Table(LOAD_SWEEP_HEADER, load_sweep_rows(sweep)), page.Paragraph(text, html.escape(text))]
    for entry in document["runs"]:
        if entry.get("fleet"):
            blocks += [page.Heading(f"Replicas under {entry['policy']['policy']}"),
                       page.Table(REPLICA_HEADER, replica_rows(entry["fleet"]))]
    blocks.append(page.Images())
    page.write_page(folder, f"gpubench simulate: {document['profile']['model']['name']}", CSS, blocks, images)
