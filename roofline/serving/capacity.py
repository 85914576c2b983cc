"""Capacity: the highest Poisson arrival rate whose latencies still meet the SLO, found by bisection.

The same requests (same lengths, same seed) are replayed at each rate, so the search compares rates and not
samples.  Latency grows with the rate (queueing), so feasibility is taken as monotone: the search brackets the
rate between one that meets the SLO and one that does not, then halves the bracket.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from roofline.core.units import significant
from roofline.serving.latency import latencies, percentile_s
from roofline.serving.metrics import Slo
from roofline.serving.simulate import SimulationError, SimulationRun
from roofline.serving.workload import MAX_ARRIVAL_S, Request, with_arrivals

RELATIVE_TOLERANCE = 0.02  # stop when the bracket is within 2% of the rate
# Past the burst's own throughput a queue builds, so a rate this many times it that still meets the SLO only
# says the SLO is loose: the search stops there and reports a lower bound instead of doubling to 10^8 req/s.
RATE_LIMIT_OVER_BURST = 4.0
# Below this many requests/s per request the workload's arrivals would span past MAX_ARRIVAL_S (a workload's
# limit): an SLO still missed there is missed by requests that hardly meet, and the search stops saying so.
LOWEST_RATE_PER_REQUEST = 100 / MAX_ARRIVAL_S


@dataclass(frozen=True)
class CapacityResult:
    capacity_requests_per_s: float | None  # None: not even the lowest rate tried meets the SLO
    tried: tuple[dict[str, Any], ...] = field(default_factory=tuple)  # rate, met, tokens/s, percentiles
    reason: str = ""
    lower_bound: bool = False  # the SLO held at every rate tried: capacity is at least this, not bracketed

    def to_dict(self) -> dict[str, Any]:
        return {"capacity_requests_per_s": self.capacity_requests_per_s, "capacity_is_lower_bound": self.lower_bound,
                "tried": list(self.tried), "reason": self.reason}


def _point(rate: float, run: SimulationRun, slo: Slo) -> dict[str, Any]:
    lat = latencies(run.requests)
    return {**rate_point(rate, run), "met": slo.met(lat), "checks": slo.check(lat)}


def rate_point(rate: float, run: SimulationRun) -> dict[str, Any]:
    """Throughput and tail latencies of one run at one arrival rate (a point of the throughput-latency curve)."""
    lat = latencies(run.requests)
    tokens = sum(r.output_tokens for r in run.requests)
    return {"rate_requests_per_s": rate, "tokens_per_s": tokens / run.makespan_s,
            "ttft_p90_s": percentile_s(lat["ttft"], 90), "tpot_p99_s": percentile_s(lat["tpot"], 99),
            "itl_p99_s": percentile_s(lat["itl"], 99), "e2e_p99_s": percentile_s(lat["e2e"], 99)}


def capacity_under(requests: Sequence[Request], slo: Slo, run_at: Callable[[list[Request]], SimulationRun],
                   seed: int = 0) -> CapacityResult:
    """The capacity search as ``simulate --slo`` and ``plan`` run it: the same requests as a burst first, whose
    saturated throughput is the first guess (and the answer when even the burst meets the SLO)."""
    burst = run_at(with_arrivals(list(requests), "burst"))
    if burst.makespan_s <= 0:
        raise SimulationError("every step took no time: the profile's kernel times are all zero")
    return search_capacity(requests, slo, run_at, len(burst.requests) / burst.makespan_s, seed, burst=burst)


def search_capacity(requests: Sequence[Request], slo: Slo, run_at: Callable[[list[Request]], SimulationRun],
                    start_rate: float, seed: int = 0, max_runs: int = 24,
                    burst: SimulationRun | None = None) -> CapacityResult:
    """Bisect the rate: ``run_at`` simulates a workload; ``start_rate`` (requests/s) is a first guess, e.g.
    the saturated throughput of ``burst``, the same requests all arriving at once.  A burst is the worst
    queueing any rate can cause, so a burst that meets the SLO already answers: capacity is at least its rate."""
    if burst is not None and slo.met(latencies(burst.requests)):
        return CapacityResult(start_rate, (), f"SLO met even as a burst: capacity ≥ {significant(start_rate)} "
                              "requests/s", lower_bound=True)
    tried: list[dict[str, Any]] = []

    def probe(rate: float) -> bool:
        point = _point(rate, run_at(with_arrivals(list(requests), f"poisson:{rate!r}", seed)), slo)
        tried.append(point)
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
