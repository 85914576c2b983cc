"""The plan document (``plan.json``, versioned like the simulation document; its keys:
``roofline.serving.schemas.plan``) and the table ``gpubench plan`` prints and its report shows."""

from __future__ import annotations

import datetime as dt
from typing import Any

from roofline.core.units import seconds, significant
from roofline.fleet.planner import Candidate, Target
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
    """``plans``: per candidate, per policy, ``roofline.fleet.planner.plan_policy``'s answer."""
    return {
        "schema_version": PLAN_VERSION, "kind": PLAN_KIND, "tool": tool,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "argv": list(argv),
        "host": host, "workload": {k: v for k, v in workload.items() if k != "arrivals"},
        "slo": dict(target.slo.limits_s), "rates_requests_per_s": list(target.rates), "router": target.router,
        "max_gpus": target.max_gpus, "mem_fraction": target.mem_fraction, "gpu_hour_usd": dict(prices),
        **({"spec_decode": target.spec.to_dict()} if target.spec is not None else {}),
        "candidates": [{"profile": profile_identity(c.profile, str(c.path)), "sku": c.sku,
                        "gpu_hour_usd": c.price_usd_per_gpu_hour,
                        "kv_link": c.link.to_dict() if c.link is not None else None, "plans": policy_plans}
                       for c, policy_plans in zip(candidates, plans, strict=True)],
    }


def candidate_label(candidate: dict[str, Any]) -> str:
    """A candidate as a person names it: model, SKU, TP and dtype."""
    p = candidate["profile"]
    where = candidate["sku"] or p["device"].get("name") or p["basis"]
    return f"{p['model']['name']}, {where}, TP {p['tp']}, {p['dtype']}"


PLAN_HEADER = ("candidate", "policy", "layout", "req/s", "replicas", "GPUs", "tok/s/GPU", "$/M tokens")


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
                                 str(point["gpus"]) if point["met"] else f"> {document['max_gpus']}",
                                 _number(point["tokens_per_s_per_gpu"]),
                                 _number(point["usd_per_million_output_tokens"]), *_slo_values(point, document)))
    return rows


def slo_text(document: dict[str, Any]) -> str:
    """The SLO in words: "TPOT p99 ≤ 50 ms, TTFT p90 ≤ 2 s"."""
    return ", ".join(f"{limit_name(key)} ≤ {seconds(limit)}" for key, limit in document["slo"].items())


def _number(value: float | None) -> str:
    return "–" if value is None else significant(value)


def plan_sentences(document: dict[str, Any]) -> list[str]:
    """Each plan's answer in words, with its warnings; the sentence of the one-replica search when it failed."""
    lines = []
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
