"""The plan document (``plan.json``, versioned like the simulation document; its keys:
``roofline.serving.schemas.plan``) and the table ``gpubench plan`` prints and its report shows."""

from __future__ import annotations

import datetime as dt
from typing import Any

from roofline.analysis.frontier import pareto_front
from roofline.core.units import seconds, significant
from roofline.fleet.planner import Candidate, Target, parallel_words
from roofline.report.page import PAGE_FILES, page_files
from roofline.result.folders import FolderKind
from roofline.serving.document import profile_identity
from roofline.serving.metrics import limit_name
from roofline.serving.schemas.plan import PLAN_KIND, PLAN_VERSION

# What ``gpubench plan -o`` writes: an earlier plan's folder is replaced whole by the next one's.
PLAN_FOLDER = FolderKind("plan", "plan.json", kind=PLAN_KIND, files=PAGE_FILES, page=page_files)

def plan_document(candidates: list[Candidate], plans: list[list[dict[str, Any]]], target: Target,
                  workload: dict[str, Any], prices: dict[str, float], tool: dict[str, Any], host: dict[str, Any],
                  argv: tuple[str, ...]) -> dict[str, Any]:
    """``plans``: per candidate, per policy, ``roofline.fleet.planner.plan_policy``'s answer (each met point marked
``on_front`` here)."""
    records = [{"profile": profile_identity(c.profile, str(c.path)), "sku": c.sku,
                "gpu_hour_usd": c.price_usd_per_gpu_hour, "power": c.profile.power_figure,
                "kv_link": c.link.to_dict() if c.link is not None else None,
                **({"engine_time": c.engine_time} if c.engine_time is not None else {}), "plans": policy_plans}
               for c, policy_plans in zip(candidates, plans, strict=True)]
    answers = [front_answer(records, rate) for rate in target.rates]
    return {
        "schema_version": PLAN_VERSION, "kind": PLAN_KIND, "tool": tool,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "argv": list(argv),
        "host": host, "workload": {k: v for k, v in workload.items() if k != "arrivals"},
        "slo": dict(target.slo.limits_s), "rates_requests_per_s": list(target.rates), "router": target.router,
        "max_gpus": target.max_gpus, "mem_fraction": target.mem_fraction, "gpu_hour_usd": dict(prices),
        **({"spec_decode": target.spec.to_dict()} if target.spec is not None else {}),
        "candidates": records, "answers": answers,
    }


def _points_at(candidates: list[dict[str, Any]], rate: float):
    """(candidate, policy plan, layout, point) of every plan at ``rate``."""
    for candidate in candidates:
        for plan in candidate["plans"]:
            for layout in ("aggregated", "disaggregated"):
                for point in plan[layout] or []:
                    if point["rate_requests_per_s"] == rate:
                        yield candidate, plan, layout, point


def front_answer(candidates: list[dict[str, Any]], rate: float) -> dict[str, Any]:
    """Mark each plan's point at ``rate`` ``on_front`` (None: not met, or no tokens/s per user) and answer with the
    cheapest point of the front.  The front is over every candidate, policy and layout that meets the SLO at the
    rate: tokens/s per user against tokens per dollar when every one of them is priced (then the cheapest point is
    on it), else against tokens/s per GPU (the cheapest then: the most tokens/s per GPU)."""
    found = list(_points_at(candidates, rate))
    met = [entry for entry in found if entry[3]["met"]]
    priced = bool(met) and all(entry[3]["tokens_per_usd"] is not None for entry in met)
    value = "tokens_per_usd" if priced else "tokens_per_s_per_gpu"
    front = pareto_front([(p["tokens_per_s_per_user"], p[value]) if p["met"] and p["tokens_per_s_per_user"]
                          else None for _, _, _, p in found])
    for (_, _, _, point), on in zip(found, front, strict=True):
        point["on_front"] = on
    basis = ("tokens/s per user against tokens per dollar" if priced else
             "tokens/s per user against tokens/s per GPU (not every plan is priced)")
    choices = [entry for entry in met if entry[3]["on_front"]] or met
    out: dict[str, Any] = {"rate_requests_per_s": rate, "met": bool(met), "front": basis, "candidate": None,
                           "policy": None, "layout": None, "gpus": None, "tokens_per_s_per_gpu": None,
                           "tokens_per_s_per_user": None, "usd_per_million_output_tokens": None,
                           "tokens_per_joule": None}
    if not choices:
        return {**out, "sentence": f"no candidate meets the SLO at {significant(rate)} requests/s"}
    candidate, plan, layout, point = max(choices, key=lambda entry: entry[3][value])
    out.update({"candidate": candidate_label(candidate), "policy": plan["policy"]["policy"], "layout": layout,
                **{k: point[k] for k in ("gpus", "tokens_per_s_per_gpu", "tokens_per_s_per_user",
                                         "usd_per_million_output_tokens", "tokens_per_joule")}})
    cost = "" if point["usd_per_million_output_tokens"] is None else \
        f", ${significant(point['usd_per_million_output_tokens'])} per million output tokens"
    user = "" if point["tokens_per_s_per_user"] is None else \
        f", {significant(point['tokens_per_s_per_user'])} tokens/s per user"
    split = " (prefill:decode apart)" if layout == "disaggregated" else ""
    gpus = f"{point['gpus']} GPU{'s' if point['gpus'] > 1 else ''}"
    # "Cheapest" only when every plan has a price; otherwise the answer is the plan serving most per GPU.
    which = "the cheapest plan on the front" if priced else \
        "the plan on the front with the most tokens/s per GPU (not every plan is priced)"
    models = {c["profile"]["model"]["name"] for c, _, _, _ in met}
    mixed = f" (the candidates serve different models: {', '.join(sorted(models))})" if len(models) > 1 else ""
    return {**out, "sentence": f"at {significant(rate)} requests/s {which} is "
                               f"{out['candidate']}, {out['policy']}{split}: {gpus}, "
                               f"{significant(point['tokens_per_s_per_gpu'])} tokens/s per GPU{user}{cost}{mixed}"}


def candidate_label(candidate: dict[str, Any]) -> str:
    """A candidate as a person names it: model, SKU, TP and dtype."""
    p = candidate["profile"]
    where = candidate["sku"] or p["device"].get("name") or p["basis"]
    return f"{p['model']['name']}, {where}, {parallel_words(p['tp'], p.get('ep') or 1)}, {p['dtype']}"


PLAN_HEADER = ("candidate", "policy", "layout", "req/s", "replicas", "GPUs", "tok/s/GPU", "$/M tokens", "tok/J",
               "front")


def plan_header(document: dict[str, Any]) -> tuple[str, ...]:
    """The table's columns: the plan, then each SLO limit's metric at its percentile, beside its limit (a TPOT SLO
    shows TPOT p99, never another metric's tail that the plan was not held to)."""
    return PLAN_HEADER + tuple(f"{limit_name(key)} (≤ {seconds(limit)})" for key, limit in document["slo"].items())


def _slo_values(point: dict[str, Any], document: dict[str, Any]) -> tuple[str, ...]:
    """Each SLO limit's value for the fleet found; a document written before ``slo_s`` has the fixed tails
    (``ttft_p90_s`` ...), which stand in where one is the limit's own."""
    values = point.get("slo_s") or {}
    cells = []
    for key in document["slo"]:
        value = values.get(key, point.get(f"{key}_s"))
        cells.append("–" if value is None or not point["met"] else seconds(value))
    return tuple(cells)


def plan_rows(document: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row per candidate, policy, layout and rate, in ``plan_header``'s columns."""
    rows = []
    for candidate in document["candidates"]:
        label = candidate_label(candidate)
        for plan in candidate["plans"]:
            for layout in ("aggregated", "disaggregated"):
                for point in plan[layout] or []:
                    split = point["prefill_replicas"] is not None
                    replicas = "–" if not point["met"] else (
                        f"{point['prefill_replicas']}:{point['decode_replicas']}" if split else str(point["replicas"]))
                    rows.append((label, plan["policy"]["policy"], "P:D" if layout == "disaggregated" else "one",
                                 significant(point["rate_requests_per_s"]), replicas,
                                 # "> the bound": fleets were simulated up to it; "–": none could be (the SLO is
                                 # missed alone, or the workload is too short to show the rate)
                                 str(point["gpus"]) if point["met"] else
                                 f"> {document['max_gpus']}" if point.get("tried") else "–",
                                 _number(point["tokens_per_s_per_gpu"]),
                                 _number(point["usd_per_million_output_tokens"]),
                                 _tokens_per_joule(point, candidate), "yes" if point.get("on_front") else "",
                                 *_slo_values(point, document)))
    return rows


def _tokens_per_joule(point: dict[str, Any], candidate: dict[str, Any]) -> str:
    """Tokens per joule, "≥" on a TDP (an upper bound on the draw); "–" without a power figure (or a plan written
    before it was reported)."""
    value = point.get("tokens_per_joule")
    if value is None:
        return "–"
    return ("≥ " if (candidate.get("power") or {}).get("upper_bound") else "") + significant(value)


def slo_text(document: dict[str, Any]) -> str:
    """The SLO in words: "TPOT p99 ≤ 50 ms, TTFT p90 ≤ 2 s"."""
    return ", ".join(f"{limit_name(key)} ≤ {seconds(limit)}" for key, limit in document["slo"].items())


def _number(value: float | None) -> str:
    return "–" if value is None else significant(value)


def plan_sentences(document: dict[str, Any]) -> list[str]:
    """Each rate's answer (the cheapest plan on the front), whose engine time each candidate carries, then each plan's
    in words, with its warnings; the sentence of the one-replica search when it failed."""
    lines = [answer["sentence"][0].upper() + answer["sentence"][1:] + "." for answer in document.get("answers", [])]
    for candidate in document["candidates"]:
        if candidate.get("engine_time"):  # whose engine time its steps carry (older plans: not said)
            lines.append(f"{candidate_label(candidate)}: engine time: {candidate['engine_time']['words']}.")
        power = candidate.get("power") or {}
        if power.get("watts_per_gpu") is None and power.get("why_none"):
            lines.append(f"{candidate_label(candidate)}: no tokens per joule: {power['why_none']}.")
    for candidate in document["candidates"]:
        label = candidate_label(candidate)
        for plan in candidate["plans"]:
            head = f"{label}, {plan['policy']['policy']}"
            capacity = plan["one_replica_capacity"]
            if capacity["capacity_requests_per_s"] is None:
                lines.append(f"{head}: one replica: {capacity['reason']}")
            for layout in ("aggregated", "disaggregated"):
                for point in plan[layout] or []:
                    lines.append(f"{head}: {point['sentence']}.")
                    lines += [f"{head}: warning: {w}" for w in point["warnings"]]
    return lines
