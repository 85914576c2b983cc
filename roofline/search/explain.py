"""The chosen configuration explained: its fleet simulated once more at the rate with every step logged
(``roofline.fleet.replicas.simulate_fleet``, ``roofline.serving.metrics.summarize``: the binding limit, the decode
batch, the KV cache's occupancy), where its busy time went (``roofline.serving.document.composition``), where its
decode step turns compute-bound (``roofline.decode.step.ridge_crossing`` at the workload's mean context) and what
limits its batch: the engine's max-batch, or the KV cache and states that fit beside the weights
(``roofline.step.memory.kv_capacity``).
"""

from __future__ import annotations

from typing import Any

from roofline.core.roof import ridge_flop_per_byte
from roofline.core.units import si_bytes, significant
from roofline.decode.step import DecodeSetup, ridge_crossing
from roofline.fleet.handover import kv_link
from roofline.fleet.replicas import FleetLayout, simulate_fleet
from roofline.search.evaluate import SearchContext, profile_of
from roofline.search.space import Setting
from roofline.serving.document import composition
from roofline.serving.metrics import summarize
from roofline.serving.policies import parse_policy
from roofline.serving.workload import with_arrivals
from roofline.step.grids import DECODE_BATCHES
from roofline.step.memory import kv_capacity, state_bytes_per_sequence
from roofline.step.speculative import parse_spec_decode


def mean_context(context: SearchContext) -> int:
    """The context a decode sees on average: a prompt plus half its output, over the workload."""
    requests = context.plan.requests
    return max(1, round(sum(r.prompt_tokens + r.output_tokens / 2 for r in requests) / len(requests)))


def explain(answer: dict[str, Any], context: SearchContext) -> dict[str, Any]:
    """``answer`` (a met choice) with why: the binding limit of its fleet at the rate, its composition, its
    crossover and its batch limit."""
    setting = Setting.from_dict(answer["setting"])
    profile = profile_of(context, setting)
    spec = parse_spec_decode(setting.spec)
    policy = parse_policy(setting.policy)
    split = answer["prefill_replicas"] is not None
    plan = context.plan
    layout = FleetLayout(router=plan.router, split=(answer["prefill_replicas"], answer["decode_replicas"]),
                         link=kv_link(profile, None)) if split else FleetLayout(answer["replicas"], plan.router)
    workload = with_arrivals(list(plan.requests), f"poisson:{answer['rate_requests_per_s']!r}", plan.seed)
    run = simulate_fleet(profile, workload, policy, layout, profile.engine_overhead, plan.mem_fraction,
                         log_steps=True, spec=spec, seed=plan.seed)
    summary = summarize(run, profile, plan.mem_fraction, plan.slo)
    parts = composition(run, with_comm=profile.comm is not None)
    if profile.all_to_all is not None and "comm_s" not in parts:
        parts["comm_s"] = 0.0
    busy = sum(parts.values()) or 1.0
    step = profile.step_model()
    at = mean_context(context)
    roof = profile.roof or {}
    ridge = ridge_flop_per_byte(roof.get("peak_flop_per_s"), roof.get("bandwidth_bytes_per_s"))
    crossing = ridge_crossing(DecodeSetup(step, at, spec), ridge, list(DECODE_BATCHES)) if ridge else None
    memory = kv_capacity(step, at, profile.memory.get("device_bytes"), plan.mem_fraction)
    states = state_bytes_per_sequence(step)
    kv_batch = memory["max_batch"]
    limit = "max-batch" if kv_batch is None or setting.max_batch <= kv_batch else \
        ("states" if states and states >= memory["kv_bytes_per_sequence"] / 2 else "kv-cache")
    out = {"binding_limit": summary["binding_limit"], "binding_sentence": summary["binding_sentence"],
           "decode_batch_mean": summary["decode_batch_mean"], "kv_occupancy_mean": summary["kv_occupancy_mean"],
           "kv_blocked_step_share": summary["kv_blocked_step_share"], "mbu_mean": summary["mbu_mean"],
           "mfu_mean": summary["mfu_mean"], "composition_s": parts,
           "composition_share": {k: v / busy for k, v in parts.items()}, "mean_context_tokens": at,
           "crossover": crossing, "ridge_flop_per_byte": ridge,
           "batch_limit": {"limit": limit, "max_batch": setting.max_batch, "kv_max_batch": kv_batch,
                           "kv_bytes_per_sequence": memory["kv_bytes_per_sequence"],
                           "state_bytes_per_sequence": states, "weight_bytes": memory["weight_bytes"]}}
    out["sentences"] = _sentences(out, setting)
    return out


def _sentences(out: dict[str, Any], setting: Setting) -> list[str]:
    parts = ", ".join(f"{name.removesuffix('_s')} {share:.0%}" for name, share in
                      sorted(out["composition_share"].items(), key=lambda kv: -kv[1]) if share >= 0.005)
    lines = [f"Its busy time: {parts}."]
    crossing = out["crossover"]
    if crossing is None:
        lines.append("The roofline's ridge is unknown (no peak for its dtype): no crossover.")
    elif crossing["never"]:
        lines.append(f"Its decode step never turns compute-bound at a context of {out['mean_context_tokens']} tokens "
                     f"(its intensity tends to {significant(crossing['limit_intensity_flop_per_byte'])} FLOP/byte, "
                     f"under the ridge of {significant(crossing['ridge_flop_per_byte'])}).")
    else:
        batch = crossing["crossover_batch"] or crossing.get("crossover_batch_beyond_list")
        lines.append(f"Its decode step turns compute-bound at a batch of {batch} at a context of "
                     f"{out['mean_context_tokens']} tokens (the ridge: {significant(crossing['ridge_flop_per_byte'])} "
                     f"FLOP/byte); it ran a decode batch of {out['decode_batch_mean']:.1f} on average.")
    limit = out["batch_limit"]
    kv = limit["kv_max_batch"]
    if limit["limit"] == "max-batch":
        lines.append(f"Its batch is limited by max-batch {setting.max_batch}: the KV cache beside the weights "
                     f"({si_bytes(limit['weight_bytes'])} a GPU) holds {kv} sequences at that context.")
    else:
        what = "the recurrent states" if limit["limit"] == "states" else "the KV cache"
        lines.append(f"Its batch is limited by {what}: {kv} sequences of {si_bytes(limit['kv_bytes_per_sequence'])} "
                     f"fit beside the weights, under max-batch {setting.max_batch}.")
    return lines
