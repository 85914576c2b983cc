"""How many replicas of a candidate meet an SLO at a rate, and what their output costs.

For one candidate (a step profile: SKU, model, format, tensor-parallel width) and one policy: the one-replica
capacity under the SLO (``roofline.serving.capacity``, as ``simulate --slo`` finds it) gives a first guess,
ceil(rate / capacity) replicas; the fleet is then simulated at the rate (Poisson arrivals, the workload's
lengths) and the guess confirmed, stepped down while a smaller fleet still meets the SLO, or searched upward
(doubling the step, then bisecting) until one meets it or the ``--max-gpus`` bound is reached.  A fleet's
latency is taken as falling with its size and rising with the rate, as the capacity search takes it: sizes
below the answer at a lower rate are not tried at a higher one, so the count never falls as the rate rises.
With ``--disaggregate`` the prefill and decode pools are searched one after the other from the aggregated
answer (each pool first as large as the whole aggregated fleet): fewest prefill replicas with the decode pool
held, then fewest decode replicas.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofline.core.units import seconds, significant
from roofline.fleet.handover import KvLink
from roofline.fleet.replicas import FleetLayout, simulate_fleet
from roofline.serving.capacity import CapacityResult, Probe, Progress, capacity_under, rate_point
from roofline.serving.latency import latencies, percentile_s
from roofline.serving.metrics import Slo, energy_figures
from roofline.serving.policies import Policy
from roofline.serving.profile_doc import StepProfile
from roofline.serving.simulate import simulate
from roofline.serving.workload import MAX_REQUESTS, Request, with_arrivals
from roofline.step.speculative import SpecDecode

# The workload's requests are replayed at each rate, so at a high rate they arrive within a short span; when that
# span is under this many times the end-to-end latency, the run is mostly its start (queues have no time to
# build) and the answer is flagged as optimistic.
STEADY_SPANS = 5
# The share of the output tokens/s a rate asks for (rate x the workload's mean output) that a fleet must be seen
# to produce for the plan to claim the rate: a fleet that keeps up finishes the last request about one end-to-end
# latency after it arrives, which over a workload arriving across STEADY_SPANS latencies costs 1/(STEADY_SPANS + 1)
# of the throughput (5/6 kept).  Below it the plan answered "10 replicas meet the SLO at 1e9 requests/s" for a
# fleet making 33k of the 1.3e11 tokens/s asked: its requests arrived in a microsecond, a burst it served.
COVERED = STEADY_SPANS / (STEADY_SPANS + 1)


@dataclass(frozen=True)
class Candidate:
    """One configuration to plan: its step profile, the SKU it runs on, the price of that SKU's GPU-hour
    (None: not given) and, for a disaggregated plan, the link its KV cache crosses."""

    path: Path
    profile: StepProfile
    sku: str | None
    price_usd_per_gpu_hour: float | None
    link: KvLink | None = None
    engine_time: dict[str, Any] | None = None  # whose engine time its profile's steps carry (engine_time.EngineTime)


@dataclass(frozen=True)
class Target:
    """What every plan meets: the SLO at each rate, the workload's lengths, the router, the bound."""

    requests: list[Request]
    slo: Slo
    rates: tuple[float, ...]
    router: str
    max_gpus: int
    mem_fraction: float
    seed: int
    disaggregate: bool
    spec: SpecDecode | None = None  # --spec-decode: every replica decodes speculatively


def usd_per_million_output_tokens(usd_per_gpu_hour: float, gpus: int, tokens_per_s: float) -> float:
    """What a million output tokens cost on ``gpus`` GPUs producing ``tokens_per_s`` together."""
    return usd_per_gpu_hour * gpus / 3600 / tokens_per_s * 1e6


def smallest_meeting(met: Callable[[int], bool], guess: int, low: int, high: int) -> int | None:
    """The smallest n in [low, high] with ``met(n)``, ``met`` taken as monotone in n (None: not even ``high``):
    from ``guess``, down while it holds or up with a doubling step, then bisection."""
    n = min(max(guess, low), high)
    if met(n):
        good, bad, step = n, low - 1, 1
        while good - step >= low:
            if not met(good - step):
                bad = good - step
                break
            good, step = good - step, step * 2
    else:
        bad, step = n, 1
        while True:
            if bad >= high:
                return None
            probe = min(bad + step, high)
            if met(probe):
                good = probe
                break
            bad, step = probe, step * 2
    while good - bad > 1:
        middle = (good + bad) // 2
        if met(middle):
            good = middle
        else:
            bad = middle
    return good


def one_replica_capacity(candidate: Candidate, policy: Policy, target: Target,
                         progress: Progress | None = None) -> CapacityResult:
    """The highest Poisson rate one replica serves within the SLO (``simulate --slo``'s search)."""
    profile, mem = candidate.profile, target.mem_fraction

    def run_at(workload):
        return simulate(profile, workload, policy, profile.engine_overhead, mem, log_steps=False, spec=target.spec,
                        seed=target.seed)

    return capacity_under(target.requests, target.slo, run_at, target.seed, progress)


class RateTrial:
    """Fleets of one candidate and policy simulated at one rate, each size once (each handed to ``progress``)."""

    def __init__(self, candidate: Candidate, policy: Policy, target: Target, rate: float,
                 progress: Progress | None = None) -> None:
        self.candidate, self.policy, self.target, self.rate = candidate, policy, target, rate
        self.workload = with_arrivals(target.requests, f"poisson:{rate!r}", target.seed)
        self.tried: dict[tuple[int, int | None], tuple[bool, dict[str, Any]]] = {}
        self.progress = progress

    def met(self, replicas: int, decode: int | None = None) -> bool:
        """Whether ``replicas`` replicas (with ``decode``: that many prefill and ``decode`` decode replicas)
        meet the SLO at the rate."""
        key = (replicas, decode)
        if key not in self.tried:
            t, c = self.target, self.candidate
            layout = FleetLayout(replicas, t.router) if decode is None else \
                FleetLayout(router=t.router, split=(replicas, decode), link=c.link)
            run = simulate_fleet(c.profile, self.workload, self.policy, layout, c.profile.engine_overhead,
                                 t.mem_fraction, log_steps=False, spec=t.spec, seed=t.seed)
            lat = latencies(run.requests)
            checks = t.slo.check(lat)
            met = all(check["met"] for check in checks.values())
            tpot_p50 = percentile_s(lat["tpot"], 50)
            energy = energy_figures(sum(r.output_tokens for r in run.requests), run.busy_s, run.makespan_s,
                                    c.profile.gpus, layout.size, c.profile.power_figure, c.price_usd_per_gpu_hour,
                                    run.busy_j)
            figures = {**rate_point(self.rate, run, lat), "slo_s": {k: check["value_s"] for k, check in checks.items()},
                       "tokens_per_s_per_user": 1 / tpot_p50 if tpot_p50 else None,
                       "tokens_per_joule": energy["tokens_per_joule"], "tokens_per_usd": energy["tokens_per_usd"]}
            self.tried[key] = (met, figures)
            if self.progress is not None:
                self.progress(Probe("poisson", self.rate, met, checks, fleet=layout.describe()))
        return self.tried[key][0]

    def demand_tokens_per_s(self) -> float:
        """The output tokens/s the rate asks for: the rate times the workload's mean output."""
        requests = self.target.requests
        return self.rate * sum(r.output_tokens for r in requests) / len(requests)

    def too_short_to_show(self, fastest_e2e_s: float) -> str | None:
        """Why no fleet can be seen to keep up with the rate on this workload (None: one might).  Whatever the
        fleet, its last request ends at least the fastest end-to-end latency any request has (``fastest_e2e_s``,
        served alone) after it arrives, so its output tokens/s is at most the workload's tokens over the arrivals'
        span plus that latency: below ``COVERED`` of the demand, the claim cannot be made, and nothing is
        simulated."""
        times = [r.arrival_s for r in self.workload]
        span = max(times) - min(times)
        tokens = sum(r.output_tokens for r in self.workload)
        most = tokens / (span + fastest_e2e_s)
        demand = self.demand_tokens_per_s()
        if most >= COVERED * demand:
            return None
        needed = math.ceil(self.rate * STEADY_SPANS * fastest_e2e_s) + 1
        more = (f"give at least {needed:,} --requests" if needed <= MAX_REQUESTS else
                f"no workload of at most {MAX_REQUESTS:,} requests can show it (it would take {needed:,})")
        return (f"at {significant(self.rate)} requests/s the {len(self.workload):,} requests arrive within "
                f"{seconds(span)}, and even served alone a request takes {seconds(fastest_e2e_s)}: no fleet can be "
                f"seen to produce the {significant(demand)} output tokens/s asked (at most {significant(most)} on "
                f"this workload); {more}")

    def point(self, replicas: int | None, decode: int | None = None, split: bool = False,
              why_none: str = "") -> dict[str, Any]:
        """The plan at this rate: the fleet found (``replicas``, or that many prefill and ``decode`` decode
        replicas with ``split``; None: none up to the bound, or none at all for ``why_none``) with its throughput
        and cost."""
        c, t = self.candidate, self.target
        # A replica runs on the profile's GPUs: its expert-parallel group for a mixture with EP, else its TP ranks.
        size = None if replicas is None else replicas + (decode or 0)
        gpus = None if size is None else size * c.profile.gpus
        out: dict[str, Any] = {"rate_requests_per_s": self.rate, "met": size is not None,
                               "replicas": size, "prefill_replicas": replicas if split else None,
                               "decode_replicas": decode if split else None, "gpus": gpus, "tokens_per_s": None,
                               "tokens_per_s_per_gpu": None, "usd_per_million_output_tokens": None,
                               "tokens_per_s_per_user": None, "tokens_per_joule": None, "tokens_per_usd": None,
                               "ttft_p90_s": None, "tpot_p99_s": None, "itl_p99_s": None, "e2e_p99_s": None,
                               "slo_s": None, "sentence": why_none or f"the SLO is not met up to {t.max_gpus} GPUs at "
                                                                 f"{significant(self.rate)} requests/s", "warnings": []}
        if replicas is not None and size is not None and gpus is not None:
            figures = self.tried[(replicas, decode)][1]
            out.update({k: figures[k] for k in ("tokens_per_s", "tokens_per_s_per_user", "tokens_per_joule",
                                                "tokens_per_usd", "ttft_p90_s", "tpot_p99_s", "itl_p99_s", "e2e_p99_s",
                                                "slo_s")})
            out["tokens_per_s_per_gpu"] = figures["tokens_per_s"] / gpus
            if c.price_usd_per_gpu_hour is not None:
                out["usd_per_million_output_tokens"] = usd_per_million_output_tokens(
                    c.price_usd_per_gpu_hour, gpus, figures["tokens_per_s"])
            out["sentence"] = _sentence(out, parallel_words(c.profile.tp, c.profile.ep))
            demand = self.demand_tokens_per_s()
            if figures["tokens_per_s"] < COVERED * demand:
                out["warnings"].append(f"the fleet produced {significant(figures['tokens_per_s'])} output tokens/s, "
                                       f"{figures['tokens_per_s'] / demand:.0%} of the {significant(demand)} the rate "
                                       "asks for: it may not keep up with the rate past this workload")
            span, e2e = len(t.requests) / self.rate, figures["e2e_p99_s"]
            if span < STEADY_SPANS * e2e:
                out["warnings"].append(f"the {len(t.requests)} requests arrive over {seconds(span)}, less than "
                                       f"{STEADY_SPANS}x the P99 end-to-end latency ({seconds(e2e)}): queues may not "
                                       "reach a steady state, so the count may be low; give more --requests")
        out["tried"] = [{"replicas": r + (d or 0), "prefill_replicas": r if split else None, "decode_replicas": d,
                         "met": met} for (r, d), (met, _) in sorted(self.tried.items(), key=lambda kv: kv[0])]
        return out


def parallel_words(tp: int, ep: int = 1) -> str:
    """"TP 2", or "TP 1, EP 8" for a mixture whose experts spread over 8 GPUs."""
    return f"TP {tp}" + (f", EP {ep}" if ep > 1 else "")


def _sentence(point: dict[str, Any], parallel: str) -> str:
    fleet = (f"{point['prefill_replicas']} prefill + {point['decode_replicas']} decode replicas"
             if point["prefill_replicas"] is not None else
             f"{point['replicas']} replica{'s' if point['replicas'] > 1 else ''}")
    gpus = f"{point['gpus']} GPU{'s' if point['gpus'] > 1 else ''}"
    cost = "" if point["usd_per_million_output_tokens"] is None else \
        f", ${significant(point['usd_per_million_output_tokens'])} per million output tokens"
    verb = "meets" if point["prefill_replicas"] is None and point["replicas"] == 1 else "meet"
    return (f"{fleet} of {parallel} ({gpus}) {verb} the SLO at {significant(point['rate_requests_per_s'])} "
            f"requests/s: {significant(point['tokens_per_s_per_gpu'])} output tokens/s per GPU{cost}")


def plan_policy(candidate: Candidate, policy: Policy, target: Target,
                progress: Progress | None = None) -> dict[str, Any]:
    """One candidate and policy: the one-replica capacity, and per rate the aggregated fleet (and the
    disaggregated one) that meets the SLO; each simulation of the search handed to ``progress``."""
    capacity = one_replica_capacity(candidate, policy, target, progress)
    if capacity.missed_alone:
        return _unmeetable(candidate, policy, target, capacity)
    per_replica = capacity.capacity_requests_per_s
    bound = target.max_gpus // candidate.profile.gpus
    aggregated, disaggregated = [], []
    floor, floor_split = 1, (1, 1)
    fastest = fastest_e2e_s(candidate, policy, target)
    for rate in target.rates:
        trial = RateTrial(candidate, policy, target, rate, progress)
        short = trial.too_short_to_show(fastest)
        if short is not None:  # the throughput asked for cannot be shown: no fleet is claimed, none simulated
            aggregated.append(trial.point(None, why_none=short))
            if target.disaggregate:
                disaggregated.append(trial.point(None, split=True, why_none=short))
            continue
        guess = math.ceil(rate / per_replica) if per_replica else bound
        replicas = smallest_meeting(trial.met, guess, floor, bound) if bound >= floor else None
        aggregated.append(trial.point(replicas))
        floor = replicas or floor
        if target.disaggregate:
            split_trial = RateTrial(candidate, policy, target, rate, progress)
            split = _search_split(split_trial, replicas, floor_split, bound)
            disaggregated.append(split_trial.point(*split, split=True) if split else
                                 split_trial.point(None, split=True))
            floor_split = split or floor_split
    return {"policy": policy.to_dict(), "one_replica_capacity": capacity.to_dict(), "aggregated": aggregated,
            "disaggregated": disaggregated if target.disaggregate else None}


def fastest_e2e_s(candidate: Candidate, policy: Policy, target: Target) -> float:
    """A lower bound on any request's end-to-end latency: one of the workload's smallest prompt and smallest
    output, served alone on an idle replica (every request is at least as long, and no fleet serves a request
    faster than an idle replica of its own; a disaggregated one adds the KV transfer)."""
    requests = target.requests
    # A prompt whose prefix another request left cached prefills only its own tokens (at least one), and a
    # speculative decode can take its whole output in fewer steps than tokens: the bound then takes the least
    # either can be (a one-token prompt, a one-token output), which no request of the workload beats.
    prompt = 1 if any(r.segments for r in requests) else min(r.prompt_tokens for r in requests)
    output = 1 if target.spec is not None else min(r.output_tokens for r in requests)
    smallest = Request(0, 0.0, prompt, output)
    run = simulate(candidate.profile, [smallest], policy, candidate.profile.engine_overhead, target.mem_fraction,
                   log_steps=False, spec=target.spec, seed=target.seed)
    return run.requests[0].e2e_s


def _unmeetable(candidate: Candidate, policy: Policy, target: Target, capacity: CapacityResult) -> dict[str, Any]:
    """The plan when every request served alone on one replica already misses the SLO: alone on a fleet, a
    request meets an idle replica just the same (and, prefilled apart, waits for its KV transfer too), so no
    fleet of any size meets it, and none is simulated."""
    def none_at(rate: float, split: bool) -> dict[str, Any]:
        why = f"no fleet meets the SLO at {significant(rate)} requests/s: {capacity.reason.partition(': ')[2]}"
        return RateTrial(candidate, policy, target, rate).point(None, split=split, why_none=why)

    return {"policy": policy.to_dict(), "one_replica_capacity": capacity.to_dict(),
            "aggregated": [none_at(rate, False) for rate in target.rates],
            "disaggregated": [none_at(rate, True) for rate in target.rates] if target.disaggregate else None}


def _search_split(trial: RateTrial, aggregated: int | None, floor: tuple[int, int], bound: int
                  ) -> tuple[int, int] | None:
    """Fewest prefill replicas with the decode pool held, then fewest decode replicas (None: no split up to
    ``bound`` replicas in all meets the SLO)."""
    if bound < 2 or sum(floor) > bound:
        return None
    start = aggregated or bound // 2
    prefill, decode = max(start, floor[0]), max(start, floor[1])
    if prefill + decode > bound:  # the same split, scaled down to the bound
        prefill = min(max(floor[0], round(bound * prefill / (prefill + decode))), bound - floor[1])
        decode = bound - prefill
    while not trial.met(prefill, decode):
        if prefill + decode >= bound:
            return None
        if 2 * (prefill + decode) <= bound:
            prefill, decode = 2 * prefill, 2 * decode
        else:  # the same split at the bound: each pool grows, neither shrinks
            prefill = round(bound * prefill / (prefill + decode))
            decode = bound - prefill
    held = decode
    prefill = smallest_meeting(lambda n: trial.met(n, held), prefill, floor[0], prefill)
    assert prefill is not None  # met at the start of the search
    fewest = prefill
    decode = smallest_meeting(lambda n: trial.met(fewest, n), decode, floor[1], decode)
    assert decode is not None
    return prefill, decode
