"""search.json (``kind: gpubench-search``), its Pareto front and its choices, and the tables ``gpubench search``
prints and its report shows.

Every configuration that was planned gives a point per rate and layout (one pool, or prefill and decode apart):
the planner's fleet that meets the SLO there, with its tokens/s per GPU and tokens/s per user (1 / TPOT p50).  At
each rate the front is every met point no other met point beats on both; the choice is the front's cheapest point
where every met point is priced (``--gpu-hour-usd``: most tokens per dollar), else its most tokens/s per GPU; each
SKU gets its own choice the same way over its own points.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from roofline.analysis.frontier import pareto_front
from roofline.core.units import seconds, significant
from roofline.report.page import PAGE_FILES, page_files
from roofline.result.folders import FolderKind
from roofline.serving.metrics import limit_name

SEARCH_KIND = "gpubench-search"
SEARCH_VERSION = 1
LAYOUTS = ("aggregated", "disaggregated")
TOP = 10
# What ``gpubench search -o`` writes: an earlier search's folder is replaced whole by the next one's.
SEARCH_FOLDER = FolderKind("search", "search.json", kind=SEARCH_KIND, files=PAGE_FILES + ("front.png",),
                           patterns=("deploy",), page=page_files)


def configurations(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each planned configuration and layout with its points, one entry each."""
    out = []
    for record in records:
        if record.get("status") != "planned":
            continue
        plan = record["plan"]
        for layout in LAYOUTS:
            points = plan.get(layout)
            if points is None:
                continue
            out.append({"key": f"{record['key']}/{'pd' if layout == 'disaggregated' else 'one'}",
                        "setting": record["setting"], "layout": layout, "points": points,
                        "one_replica_capacity": plan["one_replica_capacity"]})
    return out


def _value_basis(met: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    return "tokens_per_usd" if met and all(p["tokens_per_usd"] is not None for _, p in met) else "tokens_per_s_per_gpu"


def _at(configs: list[dict[str, Any]], rate: float) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(c, p) for c in configs for p in c["points"] if p["rate_requests_per_s"] == rate]


def mark_front(configs: list[dict[str, Any]], rates: tuple[float, ...]) -> None:
    """Each point's ``on_front`` at its rate (None: not met, or no tokens/s per user)."""
    for rate in rates:
        found = _at(configs, rate)
        flags = pareto_front([(p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"])
                              if p["met"] and p["tokens_per_s_per_user"] else None for _, p in found])
        for (_, point), on in zip(found, flags, strict=True):
            point["on_front"] = on


def choose(configs: list[dict[str, Any]], rate: float, sku: str | None = None) -> dict[str, Any]:
    """The choice at ``rate`` over every configuration (``sku`` None) or one SKU's: the cheapest point of their
    front where every met point is priced, else the one with the most tokens/s per GPU."""
    met = [(c, p) for c, p in _at(configs, rate) if p["met"] and (sku is None or c["setting"]["sku"] == sku)]
    scope = sku or "all"
    if not met:
        return {"rate_requests_per_s": rate, "scope": scope, "met": False, "key": None,
                "sentence": f"at {significant(rate)} requests/s no configuration{' of ' + sku if sku else ''} meets "
                            "the SLO"}
    flags = pareto_front([(p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]) if p["tokens_per_s_per_user"]
                          else None for _, p in met])
    front = [entry for entry, on in zip(met, flags, strict=True) if on] or met
    value = _value_basis(met)
    config, point = max(front, key=lambda entry: (entry[1][value], entry[1]["tokens_per_s_per_user"] or 0))
    return {"rate_requests_per_s": rate, "scope": scope, "met": True, "key": config["key"],
            "setting": config["setting"], "layout": config["layout"], "basis": value,
            **{k: point[k] for k in ("gpus", "replicas", "prefill_replicas", "decode_replicas", "tokens_per_s",
                                     "tokens_per_s_per_gpu", "tokens_per_s_per_user",
                                     "usd_per_million_output_tokens", "tokens_per_usd", "slo_s")},
            "sentence": _choice_sentence(config, point, rate, sku, value)}


def _fleet_words(point: dict[str, Any]) -> str:
    if point["prefill_replicas"] is not None:
        return f"{point['prefill_replicas']} prefill + {point['decode_replicas']} decode replicas"
    return f"{point['replicas']} replica{'s' if point['replicas'] > 1 else ''}"


def config_words(config: dict[str, Any]) -> str:
    s = config["setting"]
    split = (f"TP {s['tp']} x DP {s['attention_dp']}, EP {s['ep']}" if s["ep"] > 1 and s["attention_dp"] > 1 else
             f"TP {s['tp']}, EP {s['ep']}" if s["ep"] > 1 else f"TP {s['tp']}")
    return (f"{s['sku']}, {split}, KV {s['kv_dtype']}, max-batch {s['max_batch']}, chunks of {s['budget']}"
            f"{', speculative' if s['spec'] else ''}{', P:D' if config['layout'] == 'disaggregated' else ''}")


def _choice_sentence(config: dict[str, Any], point: dict[str, Any], rate: float, sku: str | None,
                     value: str) -> str:
    which = "the cheapest on the front" if value == "tokens_per_usd" else "the most tokens/s per GPU on the front"
    cost = "" if point["usd_per_million_output_tokens"] is None else \
        f", ${significant(point['usd_per_million_output_tokens'])} per million output tokens"
    user = "" if not point["tokens_per_s_per_user"] else \
        f", {significant(point['tokens_per_s_per_user'])} tokens/s per user"
    return (f"at {significant(rate)} requests/s{' on ' + sku if sku else ''} {which}: {config_words(config)}; "
            f"{_fleet_words(point)}, {point['gpus']} GPUs, {significant(point['tokens_per_s_per_gpu'])} tokens/s per "
            f"GPU{user}{cost}")


def top(configs: list[dict[str, Any]], rate: float, count: int = TOP) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The ``count`` best met points at ``rate``, by the choice's measure."""
    met = [(c, p) for c, p in _at(configs, rate) if p["met"]]
    value = _value_basis(met)
    return sorted(met, key=lambda entry: -entry[1][value])[:count]


def search_document(*, model: dict[str, Any], space: dict[str, Any], pruned: list[dict[str, Any]],
                    records: list[dict[str, Any]], rates: tuple[float, ...], slo: dict[str, float],
                    workload: dict[str, Any], router: str, mem_fraction: float, prices: dict[str, float],
                    skus: tuple[str, ...], tool: dict[str, Any], host: dict[str, Any], argv: tuple[str, ...],
                    timing: dict[str, Any]) -> dict[str, Any]:
    configs = configurations(records)
    mark_front(configs, rates)
    slo_pruned = [{"what": r["key"], "reason": "slo", "why": r["why"], "count": 1, "sku": r["setting"]["sku"]}
                  for r in records if r.get("status") == "pruned"]
    answers = [choose(configs, rate) for rate in rates]
    per_sku = [choose(configs, rate, sku) for rate in rates for sku in skus]
    for answer in per_sku:  # a SKU nothing of which was simulated: say why
        if not answer["met"] and not any(c["setting"]["sku"] == answer["scope"] for c in configs):
            reasons = sorted({p["reason"] for p in pruned + slo_pruned if p["sku"] == answer["scope"]})
            answer["sentence"] = (f"at {significant(answer['rate_requests_per_s'])} requests/s nothing on "
                                  f"{answer['scope']} was simulated: every configuration was pruned "
                                  f"({', '.join(reasons) or 'none planned'}; see the pruned list)")
    return {"schema_version": SEARCH_VERSION, "kind": SEARCH_KIND, "tool": tool,
            "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "argv": list(argv),
            "host": host, "model": model, "workload": {k: v for k, v in workload.items() if k != "arrivals"},
            "slo": slo, "rates_requests_per_s": list(rates), "router": router, "mem_fraction": mem_fraction,
            "gpu_hour_usd": prices, "space": space, "pruned": pruned + slo_pruned, "configurations": configs,
            "answers": answers, "answers_per_sku": per_sku, "timing": timing}


def slo_text(document: dict[str, Any]) -> str:
    return ", ".join(f"{limit_name(key)} ≤ {seconds(limit)}" for key, limit in document["slo"].items())


TOP_HEADER = ("#", "configuration", "fleet", "GPUs", "tok/s/GPU", "tok/s/user", "$/M tokens", "front")


def top_header(document: dict[str, Any]) -> tuple[str, ...]:
    return TOP_HEADER + tuple(f"{limit_name(key)} (≤ {seconds(limit)})" for key, limit in document["slo"].items())


def _number(value: float | None) -> str:
    return "–" if value is None else significant(value)


def top_rows(document: dict[str, Any], rate: float) -> list[tuple[str, ...]]:
    rows = []
    for rank, (config, point) in enumerate(top(document["configurations"], rate), start=1):
        fleet = (f"{point['prefill_replicas']}:{point['decode_replicas']}" if point["prefill_replicas"] is not None
                 else str(point["replicas"]))
        slo = tuple(seconds(point["slo_s"][key]) if point.get("slo_s") and key in point["slo_s"] else "–"
                    for key in document["slo"])
        rows.append((str(rank), config_words(config), fleet, str(point["gpus"]),
                     _number(point["tokens_per_s_per_gpu"]), _number(point["tokens_per_s_per_user"]),
                     _number(point["usd_per_million_output_tokens"]), "yes" if point.get("on_front") else "", *slo))
    return rows


FRONT_HEADER = ("configuration", "fleet", "GPUs", "tok/s/GPU", "tok/s/user", "$/M tokens")


def front_rows(document: dict[str, Any], rate: float) -> list[tuple[str, ...]]:
    """The front at ``rate``, from the most interactive point to the most throughput per GPU."""
    found = [(c, p) for c, p in _at(document["configurations"], rate) if p.get("on_front")]
    found.sort(key=lambda entry: -(entry[1]["tokens_per_s_per_user"] or 0))
    return [(config_words(c), _fleet_words(p), str(p["gpus"]), _number(p["tokens_per_s_per_gpu"]),
             _number(p["tokens_per_s_per_user"]), _number(p["usd_per_million_output_tokens"])) for c, p in found]


def pruned_lines(document: dict[str, Any]) -> list[str]:
    """What was pruned and why: memory and splits by configuration group, SLO by configuration (counted)."""
    lines = [f"pruned ({p['reason']}, {p['count']} configuration{'s' if p['count'] > 1 else ''}): {p['what']}: "
             f"{p['why']}" for p in document["pruned"] if p["reason"] != "slo"]
    slo = [p for p in document["pruned"] if p["reason"] == "slo"]
    if slo:
        lines.append(f"pruned (slo, {len(slo)} configurations, no load simulated): {slo[0]['why']} (e.g. "
                     f"{slo[0]['what']})")
    return lines


def answer_lines(document: dict[str, Any]) -> list[str]:
    lines = [a["sentence"][0].upper() + a["sentence"][1:] + "." + (f" {a['binding_sentence']}" if
             a.get("binding_sentence") else "") for a in document["answers"]]
    lines += ["  " + a["sentence"] + "." + (f" {a['binding_sentence']}" if a.get("binding_sentence") else "")
              for a in document["answers_per_sku"]]
    return lines
