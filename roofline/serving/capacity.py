"""Capacity: the highest Poisson arrival rate whose latencies still meet the SLO, found by bisection.

The same requests (same lengths, same seed) are replayed at each rate, so the search compares rates and not
samples.  Latency grows with the rate (queueing), so feasibility is taken as monotone: the search brackets the
rate between one that meets the SLO and one that does not, then halves the bracket.  Before any rate, each
request's lengths are served alone (``unloaded_checks``): an SLO those already miss, no rate meets, and the
search answers so at once instead of replaying the whole workload at ever lower rates (not for prompts that share
prefixes under a prefix cache: beside each other they are served faster than alone).  Each simulation is
handed to ``progress`` as it finishes (the command prints a line for it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from roofline.analysis.frontier import pareto_front
from roofline.core.units import seconds, significant
from roofline.serving.latency import latencies, percentile_s
from roofline.serving.metrics import Slo, energy_figures
from roofline.serving.simulate import SimulationError, SimulationRun
from roofline.serving.workload import MAX_ARRIVAL_S, Request, with_arrivals

RELATIVE_TOLERANCE = 0.02  # stop when the bracket is within 2% of the rate
# Past the burst's own throughput a queue builds, so a rate this many times it that still meets the SLO only
# says the SLO is loose: the search stops there and reports a lower bound instead of doubling to 10^8 req/s.
RATE_LIMIT_OVER_BURST = 4.0
# Below this many requests/s per request the workload's arrivals would span past MAX_ARRIVAL_S (a workload's
# limit): an SLO still missed there is missed by requests that hardly meet, and the search stops saying so.
LOWEST_RATE_PER_REQUEST = 100 / MAX_ARRIVAL_S
# The most prompt lengths the unloaded bound simulates alone; a workload of more distinct lengths is rounded
# down to this many of them (its quantiles), which only lowers the bound.  Each is one request's simulation.
ALONE_PROMPT_LENGTHS = 64


@dataclass(frozen=True)
class Probe:
    """One simulation of a capacity search, handed to ``progress`` as it finishes (the library never prints)."""

    arrivals: str  # "alone": each request's lengths served by themselves; "burst"; "poisson" at the rate; "closed"
    rate_requests_per_s: float | None  # None for "alone"; "closed": the requests/s the clients reached
    met: bool
    checks: dict[str, dict[str, Any]]  # Slo.check's: per limit, value_s, limit_s and met
    fleet: str = ""  # the fleet simulated, when the caller probes fleets of several sizes (plan)
    concurrency: int | None = None  # "closed": the clients


Progress = Callable[[Probe], None]


@dataclass(frozen=True)
class CapacityResult:
    capacity_requests_per_s: float | None  # None: not even the lowest rate tried meets the SLO
    tried: tuple[dict[str, Any], ...] = field(default_factory=tuple)  # rate, met, tokens/s, percentiles
    reason: str = ""
    lower_bound: bool = False  # the SLO held at every rate tried: capacity is at least this, not bracketed
    # Every request served alone already misses the SLO: no rate, and no fleet of any size, meets it (the reason
    # says so in the document).
    missed_alone: bool = False
    concurrency: int | None = None  # a closed loop's search: the most clients meeting the SLO (None: none, or open)

    def to_dict(self) -> dict[str, Any]:
        closed = {"capacity_concurrency": self.concurrency} if self.concurrency is not None else {}
        return {"capacity_requests_per_s": self.capacity_requests_per_s, "capacity_is_lower_bound": self.lower_bound,
                **closed, "tried": list(self.tried), "reason": self.reason}


def _point(rate: float, run: SimulationRun, slo: Slo) -> dict[str, Any]:
    lat = latencies(run.requests)
    return {**rate_point(rate, run, lat), "met": slo.met(lat), "checks": slo.check(lat)}


def rate_point(rate: float, run: SimulationRun, lat: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Throughput and tail latencies of one run at one arrival rate (a point of the throughput-latency curve);
    ``lat``: the run's ``latencies``, when the caller has them already."""
    lat = latencies(run.requests) if lat is None else lat
    tokens = sum(r.output_tokens for r in run.requests)
    return {"rate_requests_per_s": rate, "tokens_per_s": tokens / run.makespan_s,
            "ttft_p90_s": percentile_s(lat["ttft"], 90), "tpot_p99_s": percentile_s(lat["tpot"], 99),
            "itl_p99_s": percentile_s(lat["itl"], 99), "e2e_p99_s": percentile_s(lat["e2e"], 99)}


# What a sweep's tokens/s per user is: one request's decode speed, from the median request's TPOT (the mean is
# pulled by a few preempted requests' long TPOTs; the median is the user a front is read for).
PER_USER_BASIS = "1 / TPOT p50: output tokens/s a median request sees after its first token"


@dataclass(frozen=True)
class Fleet:
    """What a sweep's run is charged on: GPUs per replica, replicas, the profile's power figure
    (``StepProfile.power_figure``) and the price of a GPU-hour in USD (None: not given)."""

    gpus_per_replica: int
    replicas: int
    power: dict[str, Any]
    usd_per_gpu_hour: float | None = None

    @property
    def gpus(self) -> int:
        return self.gpus_per_replica * self.replicas


def load_point(rate: float, run: SimulationRun, fleet: Fleet) -> dict[str, Any]:
    """One point of a load sweep (``simulate --sweep-load``): the run at ``rate`` requests/s as throughput per GPU
    (output tokens/s over every GPU of the fleet) against tokens/s per user (``PER_USER_BASIS``; None: no request
    had a second token), with its TTFT and TPOT percentiles and its tokens per joule and per dollar."""
    lat = latencies(run.requests)
    tokens = sum(r.output_tokens for r in run.requests)
    tpot_p50 = percentile_s(lat["tpot"], 50)
    energy = energy_figures(tokens, run.busy_s, run.makespan_s, fleet.gpus_per_replica, fleet.replicas, fleet.power,
                            fleet.usd_per_gpu_hour, run.busy_j)
    return {"rate_requests_per_s": rate, "tokens_per_s": tokens / run.makespan_s,
            "tokens_per_s_per_gpu": tokens / run.makespan_s / fleet.gpus,
            "tokens_per_s_per_user": 1 / tpot_p50 if tpot_p50 else None,
            **{f"{metric}_p{p}_s": percentile_s(lat[metric], p) for metric in ("ttft", "tpot") for p in (50, 90, 99)},
            "tokens_per_joule": energy["tokens_per_joule"], "tokens_per_usd": energy["tokens_per_usd"]}


def load_sweep(points: list[tuple[str, list[dict[str, Any]]]], fleet: Fleet) -> dict[str, Any]:
    """The document's ``load_sweep``: each policy's ``load_point`` per rate, each marked ``on_front`` when no
    point of any policy is at least as good on both tokens/s per user and tokens/s per GPU and better on one
    (None: the point has no tokens/s per user)."""
    flat = [{"policy": policy, **point} for policy, policy_points in points for point in policy_points]
    front = pareto_front([None if p["tokens_per_s_per_user"] is None else
                          (p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]) for p in flat])
    return {"tokens_per_s_per_user_basis": PER_USER_BASIS, "gpus": fleet.gpus,
            "points": [{**point, "on_front": on} for point, on in zip(flat, front, strict=True)]}


def unloaded_latencies(requests: Sequence[Request], run_at: Callable[[list[Request]], SimulationRun]
                       ) -> dict[str, np.ndarray]:
    """Latency samples (as ``latencies`` gives them, seconds) that no arrival rate can beat: each request's
    own lengths served alone, on an idle replica (or fleet: ``run_at`` is the search's).

    Sharing a step or waiting for one only adds to a request's time (a step that does more work does not take
    less: the assumption behind the bisection too), so at any rate every request's TTFT, TPOT, end-to-end
    latency and each inter-token gap is at least its value here, and so is each percentile.  Served alone, a
    request's token times do not depend on its output length until it ends, so one simulation per prompt length,
    as long as that length's longest output, gives every request of the length its own: its first ``o`` token
    times.  Past ``ALONE_PROMPT_LENGTHS`` lengths, each request takes the nearest simulated length below its own
    (a shorter prompt is no slower), which keeps the samples below the truth."""
    prompts = np.fromiter((r.prompt_tokens for r in requests), dtype=np.int64, count=len(requests))
    outputs = np.fromiter((r.output_tokens for r in requests), dtype=np.int64, count=len(requests))
    lengths = np.unique(prompts)
    if len(lengths) > ALONE_PROMPT_LENGTHS:  # the quantiles of the lengths, the shortest among them
        lengths = np.unique(lengths[np.linspace(0, len(lengths) - 1, ALONE_PROMPT_LENGTHS).round().astype(np.int64)])
    group = np.searchsorted(lengths, prompts, side="right") - 1
    parts: dict[str, list[np.ndarray]] = {"ttft": [], "tpot": [], "e2e": [], "itl": [], "queue": [], "prefill": []}
    for index, prompt in enumerate(lengths):
        own = np.sort(outputs[group == index])
        alone = run_at([Request(0, 0.0, int(prompt), int(own[-1]))]).requests[0]
        times = np.asarray(alone.token_times_s, dtype=float) - alone.arrival_s
        several = own[own > 1]
        parts["ttft"].append(np.full(len(own), times[0]))
        parts["queue"].append(np.zeros(len(own)))  # an idle replica admits a request as it arrives
        parts["prefill"].append(np.full(len(own), times[0]))
        parts["e2e"].append(times[own - 1])
        parts["tpot"].append((times[several - 1] - times[0]) / (several - 1))
        # Gap k (after token k + 1) is every request's of more than k + 1 tokens.
        gaps = np.diff(times)
        parts["itl"].append(np.repeat(gaps, len(own) - np.searchsorted(own - 1, np.arange(len(gaps)), side="right")))
    return {kind: np.concatenate(arrays) for kind, arrays in parts.items()}


def unloaded_checks(requests: Sequence[Request], slo: Slo, run_at: Callable[[list[Request]], SimulationRun]
                    ) -> Probe:
    """The SLO against ``unloaded_latencies``: missed here, it is missed at every rate."""
    checks = slo.check(unloaded_latencies(requests, run_at))
    return Probe("alone", None, all(c["met"] for c in checks.values()), checks)


def _alone_bound(requests: Sequence[Request], slo: Slo, run_at: Callable[[list[Request]], SimulationRun]
                 ) -> Probe | None:
    """``unloaded_checks``, or None where it bounds nothing: prompts that share prefixes under a policy with a
    prefix cache are served faster beside each other (one finds another's prefix cached) than alone on a cold
    cache."""
    policies: list[dict[str, Any]] = []

    def recorded(workload: list[Request]) -> SimulationRun:
        run = run_at(workload)
        policies.append(run.policy)
        return run

    alone = unloaded_checks(requests, slo, recorded)
    caches = any(policy.get("prefix_cache") for policy in policies)
    return None if caches and any(r.segments for r in requests) else alone


def describe_checks(checks: dict[str, dict[str, Any]], missed_only: bool = False) -> str:
    """``TTFT p90 10.4 ms > 10 ms, TPOT p99 31 ms ≤ 50 ms`` for ``checks`` (Slo.check's), comma-separated; a
    value is given to as many digits as it takes to differ from its limit (up to 6)."""
    out = []
    for key, check in checks.items():
        if missed_only and check["met"]:
            continue
        value, limit = check["value_s"], check["limit_s"]
        digits = 3
        while digits < 6 and value != limit and seconds(value, digits) == seconds(limit, digits):
            digits += 1
        metric, _, percentile = key.partition("_p")
        out.append(f"{metric.upper()} p{percentile} {seconds(value, digits)} {'≤' if check['met'] else '>'} "
                   f"{seconds(limit)}")
    return ", ".join(out)


def capacity_under(requests: Sequence[Request], slo: Slo, run_at: Callable[[list[Request]], SimulationRun],
                   seed: int = 0, progress: Progress | None = None) -> CapacityResult:
    """The capacity search as ``simulate --slo`` and ``plan`` run it.  First each request's lengths alone
    (``unloaded_checks``): an SLO missed there is answered, not searched.  This answers rather than refuses:
    the SLO is a sound question, other policies or GPUs of the same command may meet it, and the simulation
    already run stays.  Then the same requests as a burst, whose saturated throughput is the first guess (and
    the answer when even the burst meets the SLO).  ``run_at`` simulates a workload; it need not log steps."""
    report = progress or (lambda probe: None)
    alone = _alone_bound(requests, slo, run_at)
    if alone is not None:
        report(alone)
    if alone is not None and not alone.met:
        missed = describe_checks(alone.checks, missed_only=True)
        return CapacityResult(None, (), "no rate meets the SLO: even served alone, with no other request queued or "
                              f"batched beside them, the requests miss it ({missed})", missed_alone=True)
    burst = run_at(with_arrivals(list(requests), "burst"))
    if burst.makespan_s <= 0:
        raise SimulationError("every step took no time: the profile's kernel times are all zero")
    rate, checks = len(burst.requests) / burst.makespan_s, slo.check(latencies(burst.requests))
    del burst  # only its rate and latencies are read: not held through the search
    met = all(c["met"] for c in checks.values())
    report(Probe("burst", rate, met, checks))
    if met:  # a burst is the worst queueing any rate can cause
        return CapacityResult(rate, (), f"SLO met even as a burst: capacity ≥ {significant(rate)} requests/s",
                              lower_bound=True)
    return search_capacity(requests, slo, run_at, rate, seed, progress=progress)


def search_capacity(requests: Sequence[Request], slo: Slo, run_at: Callable[[list[Request]], SimulationRun],
                    start_rate: float, seed: int = 0, max_runs: int = 24,
                    progress: Progress | None = None) -> CapacityResult:
    """Bisect the rate: ``run_at`` simulates a workload; ``start_rate`` (requests/s) is a first guess, e.g.
    the saturated throughput of the same requests all arriving at once.  Only each run's rate point is kept,
    never the run."""
    tried: list[dict[str, Any]] = []

    def probe(rate: float) -> bool:
        point = _point(rate, run_at(with_arrivals(list(requests), f"poisson:{rate!r}", seed)), slo)
        tried.append(point)
        if progress is not None:
            progress(Probe("poisson", rate, point["met"], point["checks"]))
        return point["met"]

    lo, hi = None, None
    rate = start_rate
    lowest = LOWEST_RATE_PER_REQUEST * len(requests)
    while len(tried) < max_runs and (lo is None or hi is None) and rate <= RATE_LIMIT_OVER_BURST * start_rate \
            and (rate >= lowest or not tried):
        if probe(rate):
            lo, rate = rate, rate * 2
        else:
            hi, rate = rate, rate / 4
        if lo is not None and hi is not None and lo > hi:  # not monotone at these rates: keep the best met
            break
    if lo is None:
        return CapacityResult(None, tuple(tried), f"no rate down to {significant(rate * 4)} requests/s meets the SLO")
    if hi is None:
        return CapacityResult(lo, tuple(tried), f"the SLO is still met at {significant(lo)} requests/s: capacity "
                              f"≥ {significant(lo)} requests/s", lower_bound=True)
    while len(tried) < max_runs and hi - lo > RELATIVE_TOLERANCE * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if probe(mid) else (lo, mid)
    return CapacityResult(lo, tuple(sorted(tried, key=lambda p: p["rate_requests_per_s"])), "")


def concurrency_capacity(requests: Sequence[Request], slo: Slo, run_with: Callable[[int], SimulationRun],
                         progress: Progress | None = None) -> CapacityResult:
    """The most clients of a closed loop (``simulate --concurrency --slo``) whose latencies meet the SLO:
    ``run_with(C)`` simulates the workload with C clients.  Latency taken as rising with C, as the rate search
    takes it with the rate: from one client, doubling until the SLO is missed (or every request has a client of
    its own), then bisection over the integers.  Each probe's requests/s is what its clients reached."""
    tried: dict[int, dict[str, Any]] = {}

    def met(clients: int) -> bool:
        if clients not in tried:
            run = run_with(clients)
            lat = latencies(run.requests)
            rate = len(run.requests) / run.makespan_s
            point = {**rate_point(rate, run, lat), "concurrency": clients, "met": slo.met(lat),
                     "checks": slo.check(lat)}
            tried[clients] = point
            if progress is not None:
                progress(Probe("closed", rate, point["met"], point["checks"], concurrency=clients))
        return tried[clients]["met"]

    def result(best: int | None, reason: str, lower_bound: bool = False) -> CapacityResult:
        points = tuple(tried[c] for c in sorted(tried))
        rate = tried[best]["rate_requests_per_s"] if best is not None else None
        return CapacityResult(rate, points, reason, lower_bound=lower_bound, concurrency=best)

    most = len(requests)
    if not met(1):
        return result(None, "no concurrency meets the SLO: even one client at a time misses it "
                            f"({describe_checks(tried[1]['checks'], missed_only=True)})")
    good, bad = 1, None
    while bad is None:
        if good == most:
            return result(good, f"the SLO is still met with a client per request ({most}): capacity ≥ {most} "
                                "clients", lower_bound=True)
        probe = min(good * 2, most)
        good, bad = (probe, None) if met(probe) else (good, probe)
    while bad - good > 1:
        middle = (good + bad) // 2
        good, bad = (middle, bad) if met(middle) else (good, middle)
    return result(good, "")
