"""What a simulation says: throughput, latency percentiles, batch and KV statistics, roofline bound, MBU/MFU,
padding waste, goodput, and the sentence naming the limit that binds.  Plain data for JSON."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from roofline.core.errors import BadInputError
from roofline.serving.latency import (
    PERCENTILES,
    latencies,
    mean_s,
    own_inter_token_percentile_s,
    percentile_s,
    request_latencies,
)
from roofline.serving.profile_doc import StepProfile
from roofline.serving.simulate import SimulationError, SimulationRun, kv_blocks_that_fit

# queue and prefill: TTFT's two parts, arrival to first admission (scheduling delay: Sarathi-Serve's capacity
# criterion) and that admission to the first token.
SLO_METRICS = ("ttft", "tpot", "itl", "e2e", "queue", "prefill")


def limit_name(key: str) -> str:
    """An SLO limit's key as a table names it: ``tpot_p99`` -> "TPOT p99", ``e2e_p90`` -> "e2e p90"."""
    metric, _, pct = key.partition("_p")
    return f"{metric if metric in ('e2e', 'queue', 'prefill') else metric.upper()} p{pct}" if pct else key


@dataclass(frozen=True)
class Slo:
    """Latency objectives in seconds, keyed ``<metric>_p<percentile>`` (``ttft_p90``, ``tpot_p99``, …)."""

    limits_s: dict[str, float]

    @classmethod
    def parse(cls, text: str) -> Slo:
        limits = {}
        for part in text.split(","):
            key, sep, value = part.strip().partition("=")
            metric, _, pct = key.partition("_p")
            try:
                seconds = float(value)
                valid = (bool(sep) and metric in SLO_METRICS and 0 < float(pct) < 100 and math.isfinite(seconds)
                         and seconds > 0)  # inf: a limit no run can miss, and not JSON
            except ValueError:
                valid = False
            if not valid:
                raise BadInputError(f"--slo {text!r}: give metric_pNN=SECONDS, metric one of {', '.join(SLO_METRICS)}"
                                " (e.g. ttft_p90=2,itl_p99=0.05)")
            # One limit per objective: a second would silently replace the first (ttft_p90 and ttft_p90.0 too).
            same = next((given for given in limits if given.partition("_p")[0] == metric
                         and float(given.partition("_p")[2]) == float(pct)), None)
            if same is not None:
                raise BadInputError(f"--slo {text!r}: {same} is given twice; give each objective once")
            limits[key] = seconds
        return cls(limits)

    def check(self, latencies: dict[str, np.ndarray]) -> dict[str, dict[str, float | bool]]:
        out = {}
        for key, limit in self.limits_s.items():
            metric, _, pct = key.partition("_p")
            values = latencies[metric]
            value = percentile_s(values, float(pct))
            value = 0.0 if value is None else value  # no latency of this kind: nothing misses the limit
            out[key] = {"value_s": value, "limit_s": limit, "met": value <= limit}
        return out

    def met(self, latencies: dict[str, np.ndarray]) -> bool:
        return all(c["met"] for c in self.check(latencies).values())

    def requests_meeting(self, requests) -> np.ndarray:
        """Per request, whether each of its own latencies is within its limit (goodput's rule): its TTFT, TPOT
        and end-to-end latency, and for an ITL limit the same percentile of its own gaps.  A latency the
        request does not have (no TPOT or ITL for one token) misses nothing."""
        own = request_latencies(requests)
        meets = np.ones(len(requests), dtype=bool)
        for key, limit in self.limits_s.items():
            metric, _, pct = key.partition("_p")
            values = own_inter_token_percentile_s(requests, float(pct)) if metric == "itl" else own[metric]
            meets &= np.isnan(values) | (values <= limit)
        return meets


def _percentiles(values: np.ndarray) -> dict[str, float | None]:
    return {f"p{p}_s": percentile_s(values, p) for p in PERCENTILES} | {"mean_s": mean_s(values)}


def _percentiles_and_max(values: np.ndarray) -> dict[str, float | None]:
    """ITL's percentiles and its longest gap: a stall each request meets once among hundreds of gaps can sit
    below P99, and the longest gap still shows it."""
    return {**_percentiles(values), "max_s": float(values.max()) if len(values) else None}


def step_arrays(run: SimulationRun, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    return {name: run.steps.column(name) for name in names}


def kv_capacity_tokens(run: SimulationRun, profile: StepProfile, mem_fraction: float) -> int | None:
    """The policy's KV capacity, or what the memory would hold for policies that do not manage it."""
    if run.kv_tokens_capacity is not None:
        return run.kv_tokens_capacity
    return kv_blocks_that_fit(profile, mem_fraction)


def summarize(run: SimulationRun, profile: StepProfile, mem_fraction: float, slo: Slo | None = None) -> dict[str, Any]:
    s = step_arrays(run, ("time_s", "sequences", "decodes", "kv_tokens", "wasted_slots", "padding_tokens", "flop",
                          "bytes", "compute_bound", "overhead_s", "kv_blocked", "waiting", "prefill_tokens"))
    lat = latencies(run.requests)
    makespan = run.makespan_s
    if makespan <= 0:
        raise SimulationError("every step took no time: the profile's kernel times are all zero")
    tokens = sum(r.output_tokens for r in run.requests)
    busy = float(s["time_s"].sum())
    capacity = kv_capacity_tokens(run, profile, mem_fraction)
    roof = profile.roof
    slot_steps = float(s["sequences"].sum())  # static: every slot of every step, finished or not
    out: dict[str, Any] = {
        "requests": len(run.requests), "output_tokens": tokens, "makespan_s": makespan, "busy_s": busy,
        "tokens_per_s": tokens / makespan, "requests_per_s": len(run.requests) / makespan,
        "ttft": _percentiles(lat["ttft"]), "tpot": _percentiles(lat["tpot"]), "itl": _percentiles_and_max(lat["itl"]),
        "e2e": _percentiles(lat["e2e"]), "queue": _percentiles(lat["queue"]), "prefill": _percentiles(lat["prefill"]),
        "steps": len(run.steps), "batch_mean": float(s["sequences"].mean()), "batch_max": int(s["sequences"].max()),
        "decode_batch_mean": float(s["decodes"][s["decodes"] > 0].mean()) if (s["decodes"] > 0).any() else 0.0,
        "kv_tokens_capacity": capacity, "kv_occupancy_mean": None, "kv_occupancy_max": None,
        "compute_bound_step_share": float(s["compute_bound"].mean()),
        "compute_bound_time_share": float((s["compute_bound"] * s["time_s"]).sum() / busy) if busy else 0.0,
        "overhead_time_share": float(s["overhead_s"].sum() / busy) if busy else 0.0,
        # Only a profile that costs all-reduces has their share: a TP 1 summary is the one it always was.
        **({"comm_time_share": float(sum(run.steps.column("comm_s").tolist()) / busy) if busy else 0.0}
           if profile.comm is not None else {}),
        "kv_blocked_step_share": float(s["kv_blocked"].mean()),
        **prefix_figures(run),
        "preemptions": sum(r.preemptions for r in run.requests),
        "mbu_mean": float(s["bytes"].sum() / busy / roof["bandwidth_bytes_per_s"]) if roof and busy else None,
        "mfu_mean": float(s["flop"].sum() / busy / roof["peak_flop_per_s"]) if roof and busy else None,
        "padding_waste": {"wasted_slot_steps": int(s["wasted_slots"].sum()), "slot_steps": int(slot_steps),
                          "share": float(s["wasted_slots"].sum() / slot_steps) if slot_steps else 0.0,
                          "padding_prompt_tokens": int(s["padding_tokens"].sum())},
    }
    if capacity:
        out["kv_occupancy_mean"] = float((s["kv_tokens"] * s["time_s"]).sum() / busy / capacity) if busy else 0.0
        out["kv_occupancy_max"] = float(s["kv_tokens"].max() / capacity)
    if slo is not None:
        good = [r for r, meets in zip(run.requests, slo.requests_meeting(run.requests), strict=True) if meets]
        out["slo"] = {"limits_s": slo.limits_s, "checks": slo.check(lat), "met": slo.met(lat),
                      "goodput_requests_per_s": len(good) / makespan,
                      "goodput_tokens_per_s": sum(r.output_tokens for r in good) / makespan}
    out["binding_limit"], out["binding_sentence"] = binding_limit(out, run)
    if "comm_time_share" in out and out["binding_limit"] != "communication":  # their share, binding or not
        out["binding_sentence"] += (f" The tensor-parallel all-reduces take {out['comm_time_share']:.0%} of the "
                                    "busy time.")
    if run.speculation:
        out["spec_decode"] = speculation_figures(run)
    out["warnings"] = [] if run.policy.get("prefix_cache") or not run.shared_prefixes else [uncached_warning(run)]
    if out["kv_occupancy_max"] is not None and out["kv_occupancy_max"] > 1:
        # Only policies without a block-limited cache can get here: they model kernels, not memory.
        out["warnings"].append(f"needs up to {out['kv_occupancy_max']:.1f}x the KV cache that fits beside the weights "
                               f"({capacity} tokens): it would not run on this device; paged or chunked would")
    return out


def energy_figures(output_tokens: int, busy_s: float, makespan_s: float, gpus: int, replicas: int,
                   power: dict[str, Any], usd_per_gpu_hour: float | None = None,
                   busy_j: float | None = None) -> dict[str, Any]:
    """Output tokens per joule and per dollar of one run.  Energy: each replica's ``gpus`` GPUs at the profile's
    ``power`` (``StepProfile.power_figure``: W per GPU) over its busy time (``busy_s``, summed over the
    replicas); the idle time between steps is not charged.  At a TDP the joules are an upper bound, so tokens per
    joule is a lower bound.  Cost: every GPU of the ``replicas`` over the whole makespan (a rented GPU is paid for
    idle too) at ``usd_per_gpu_hour`` (None: no price, no tokens per dollar).  No power figure: no joules, and
    ``why_none`` says why (never a made-up number).  ``busy_j``: the joules one GPU drew over the busy time, each
    step at the draw for its tokens (a measured power table, ``SimulationRun.busy_j``), which replaces the one
    figure; ``watts_per_gpu`` is then their mean."""
    watts = power.get("watts_per_gpu")
    gpu_busy_s = busy_s * gpus
    joules = gpu_busy_s * watts if watts is not None else None
    if watts is not None and busy_j is not None:
        joules = busy_j * gpus
        watts = busy_j / busy_s if busy_s > 0 else watts
    gpu_hours = makespan_s * gpus * replicas / 3600
    return {"watts_per_gpu": watts, "upper_bound": power.get("upper_bound") if watts is not None else None,
            "basis": power.get("basis"), "source": power.get("source"), "why_none": power.get("why_none"),
            "gpu_busy_s": gpu_busy_s, "joules": joules,
            "tokens_per_joule": output_tokens / joules if joules else None,
            "gpu_hours": gpu_hours, "usd_per_gpu_hour": usd_per_gpu_hour,
            "tokens_per_usd": output_tokens / (gpu_hours * usd_per_gpu_hour)
            if usd_per_gpu_hour is not None and gpu_hours > 0 else None}


def speculation_figures(run: SimulationRun) -> dict[str, Any]:
    """Tokens a decoding sequence gained per step, mean over the run's decode sequence-steps (a static batch's
    finished slots not counted; None when no sequence decoded: every output one token), and how many sequence-steps
    that is."""
    s = step_arrays(run, ("decodes", "wasted_slots", "decode_tokens"))
    sequence_steps = int((s["decodes"] - s["wasted_slots"]).sum())
    tokens = float(s["decode_tokens"].sum())
    return {"tokens_per_sequence_step": tokens / sequence_steps if sequence_steps else None,
            "sequence_steps": sequence_steps}


def prefix_figures(run: SimulationRun) -> dict[str, Any]:
    """The prefix cache's hit rate: prompt tokens each request found cached when first admitted, over every prompt
    token (None: the policy keeps no prefix cache), and those tokens."""
    cached = sum(r.cached_tokens for r in run.requests)
    prompts = sum(r.prompt_tokens for r in run.requests)
    return {"prefix_hit_rate": cached / prompts if run.policy.get("prefix_cache") else None,
            "cached_prompt_tokens": cached}


def uncached_warning(run: SimulationRun) -> str:
    """What a policy without a prefix cache does to a workload whose prompts share prefixes."""
    policy = run.policy
    why = ("its prefix cache is off (prefix-cache=off)" if policy.get("block_tokens") else
           f"{policy['kind']} keeps no paged KV cache to find them in (paged and chunked do)")
    if policy.get("prefix_cache_off"):
        why = f"its prefix cache cannot apply ({policy['prefix_cache_off']})"
    return f"the prompts share prefixes and {why}: every prompt is prefilled in full"


def binding_limit(summary: dict[str, Any], run: SimulationRun) -> tuple[str, str]:
    """Name the limit: the KV cache when admission waited for blocks in a large share of steps, else the engine
    overhead when it is most of the busy time, else the tensor-parallel all-reduces when they are, else compute or
    bandwidth by where the step time went."""
    batch = summary["decode_batch_mean"]
    cap = run.policy.get("max_batch")
    if summary["kv_blocked_step_share"] >= 0.2 or summary["preemptions"]:
        return "kv-cache", (f"The KV cache binds: in {summary['kv_blocked_step_share']:.0%} of steps a waiting request "
                            f"was refused for lack of blocks ({summary['preemptions']} preemptions); the decode batch "
                            f"averaged {batch:.1f} of the {cap} slots.")
    if summary["overhead_time_share"] >= 0.5:
        return "engine-overhead", (f"The engine overhead binds: {summary['overhead_time_share']:.0%} of the busy time "
                                   "is per-step overhead, not kernels.")
    if summary.get("comm_time_share", 0.0) >= 0.5:
        return "communication", (f"Communication binds: {summary['comm_time_share']:.0%} of the busy time is in the "
                                 f"tensor-parallel all-reduces between GPUs (decode batch {batch:.1f}).")
    if summary["compute_bound_time_share"] >= 0.5:
        return "compute", (f"Compute binds: {summary['compute_bound_time_share']:.0%} of the busy time is in steps "
                           f"above the roofline ridge (decode batch {batch:.1f}, MFU {_pct(summary['mfu_mean'])}).")
    return "bandwidth", (f"Memory bandwidth binds: {1 - summary['compute_bound_time_share']:.0%} of the busy time "
                         f"is in memory-bound steps (decode batch {batch:.1f}, MBU {_pct(summary['mbu_mean'])}).")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"
