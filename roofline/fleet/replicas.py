"""A fleet: one arrival stream, replicas of one step profile under one policy, a router deciding at each
arrival; or prefill replicas handing each prompt's KV cache to decode replicas (``roofline.fleet.handover``).

Each replica is the serving room's own engine loop (``roofline.serving.simulate.Replica``), advanced in time
order: before a request is routed at time t, every replica runs the steps that start before t (a request
arriving at t could not join them), so the router reads each replica's state at t and the replica then sees
the request exactly as a lone replica would.  One replica is therefore today's ``simulate``, step for step.
Memory is each request's state and token times plus each step's 176-byte log entry: nothing is kept per
request per step.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from roofline.fleet.handover import DecodeOnly, KvLink
from roofline.fleet.router import Router
from roofline.serving.policies import DEFAULT_ROUTER, Policy, parse_policy
from roofline.serving.profile_doc import EngineOverhead, StepProfile
from roofline.serving.simulate import (
    Finished,
    Replica,
    RequestOutcome,
    SimulationError,
    SimulationRun,
    check_requests,
)
from roofline.serving.simulate_config import refuse_static_split
from roofline.serving.step_log import StepLog
from roofline.serving.workload import Request
from roofline.step.speculative import SpecDecode


@dataclass(frozen=True)
class FleetLayout:
    """``replicas`` serving replicas behind ``router``; with ``split`` (prefill, decode) the replicas are that
    many of each instead, and ``link`` is what the KV cache crosses between them."""

    replicas: int = 1
    router: str = DEFAULT_ROUTER
    split: tuple[int, int] | None = None
    link: KvLink | None = None

    @property
    def size(self) -> int:
        return sum(self.split) if self.split else self.replicas

    def describe(self) -> str:
        if self.split:
            return f"{self.split[0]} prefill and {self.split[1]} decode replicas behind {self.router}"
        return f"{self.replicas} replica{'s' if self.replicas > 1 else ''} behind {self.router}"


@dataclass(frozen=True)
class FleetRun(SimulationRun):
    """The pooled run (every request, every replica's steps: what ``summarize`` and the capacity search read)
    and each replica's own."""

    replica_runs: tuple[SimulationRun, ...] = ()  # prefill replicas first when disaggregated
    roles: tuple[str, ...] = ()  # per replica: serving, prefill or decode
    placement: tuple[tuple[int, int | None], ...] = ()  # per request (id order): its replica, its decode replica
    transfer_s: tuple[float, ...] = ()  # each KV handover's time, in the order they arrived


class Member:
    """A replica in the fleet and what a router reads of it at a time it has been advanced to."""

    __slots__ = ("replica", "engine", "settled")

    def __init__(self, replica: Replica) -> None:
        self.replica, self.engine = replica, replica.engine
        self.settled = 0  # requests finished before the last step began

    def run_until(self, time_s: float) -> None:
        engine, step = self.engine, self.replica.step
        while engine.clock_s < time_s and len(engine.pending) > engine.finished_count:
            self.settled = engine.finished_count
            if not step():
                return

    def outstanding(self, time_s: float) -> int:
        """Routed and not finished at ``time_s``: a step still running then has not finished its requests."""
        engine = self.engine
        done = engine.finished_count if engine.clock_s <= time_s else self.settled
        return len(engine.pending) - done

    def waiting(self, time_s: float) -> int:
        """Routed and not admitted: the engine's queue and what arrived since its last step began."""
        engine = self.engine
        return len(engine.waiting) + len(engine.pending) - engine.next_arrival


def simulate_fleet(profile: StepProfile, requests: Sequence[Request], policy: Policy | str, layout: FleetLayout,
                   overhead: EngineOverhead | None = None, mem_fraction: float = 0.9, log_steps: bool = True,
                   spec: SpecDecode | None = None, seed: int = 0, progress: Finished | None = None) -> FleetRun:
    """Run ``requests`` through the fleet of ``layout``; the pooled run with each replica's (with ``log_steps``
    False, no replica logs its steps: the run is read for its requests only).  ``spec``: speculative decoding on
    every replica, each drawing its acceptances from its own stream under ``seed``.  ``progress``: told the
    requests finished (by the replicas that finish them) as the run goes."""
    policy = parse_policy(policy) if isinstance(policy, str) else policy
    kv_blocks = check_requests(profile, requests, policy, mem_fraction, spec.draft if spec is not None else 0)

    def replica(role_policy: Policy, index: int) -> Member:
        return Member(Replica(profile, role_policy, overhead, kv_blocks, log_steps=log_steps, spec=spec, seed=seed,
                              index=index))

    if any(r.after is not None for r in requests):
        raise SimulationError("a conversation's later turn is sent when the turn before it ends, on whichever "
                              "replica that was: fleets do not route conversations yet; simulate one replica")
    ordered = sorted(requests, key=lambda r: (r.arrival_s, r.id))  # the order a lone replica takes them in
    if layout.split is None:
        front = [replica(policy, i) for i in range(layout.replicas)]
        run = _aggregated(front, Router(layout.router), ordered, policy, overhead, _reporter(front, progress))
    else:
        run = _split(profile, policy, layout, ordered, overhead, replica, progress)
    if progress is not None:  # every request done (a split fleet's one-token requests end at a prefill replica)
        progress(len(requests))
    return run


def _split(profile: StepProfile, policy: Policy, layout: FleetLayout, ordered: list[Request],
           overhead: EngineOverhead | None, replica: Callable[[Policy, int], Member],
           progress: Finished | None) -> FleetRun:
    """The prefill and decode pools of ``layout``, their requests handed over after each prefill."""
    if layout.link is None or layout.split is None:
        raise ValueError("a disaggregated layout needs its split and its KV link")
    refuse_static_split([policy])
    prefill, decode = layout.split
    front = [replica(policy, i) for i in range(prefill)]
    back = [replica(DecodeOnly.of(policy), prefill + i) for i in range(decode)]
    return _disaggregated(profile, front, back, layout, ordered, policy, overhead, _reporter(back, progress))


# Routed requests between two progress reports: a report sums every replica's finished requests.
PROGRESS_REQUESTS = 4096


def _reporter(finishing: list[Member], progress: Finished | None) -> Callable[[], None] | None:
    """A report of the requests the ``finishing`` replicas (a split fleet's decode replicas) have finished."""
    if progress is None:
        return None
    report = progress
    return lambda: report(sum(member.engine.finished_count for member in finishing))


def _aggregated(members: list[Member], router: Router, ordered: list[Request], policy: Policy,
                overhead: EngineOverhead | None, report: Callable[[], None] | None = None) -> FleetRun:
    where: dict[int, int] = {}
    for index, request in enumerate(ordered):
        if report is not None and index % PROGRESS_REQUESTS == 0:
            report()
        # A router that reads the replicas' state needs each advanced to the arrival; round robin reads none, and a
        # replica's steps depend only on its own requests, so only the chosen one is advanced (the rest catch up
        # at their next request or at the end): the same steps, without touching every replica per arrival.
        if router.reads_state:
            for member in members:
                member.run_until(request.arrival_s)
        chosen = router.choose(members, request.arrival_s)
        members[chosen].run_until(request.arrival_s)
        members[chosen].replica.add(request)
        where[request.id] = chosen
    runs = _finish(members, overhead, report)
    outcomes = sorted((o for run in runs for o in run.requests), key=lambda o: o.id)
    return _pooled(runs, ("serving",) * len(runs), outcomes, policy, overhead,
                   tuple((where[o.id], None) for o in outcomes), ())


def _disaggregated(profile: StepProfile, front: list[Member], back: list[Member], layout: FleetLayout,
                   ordered: list[Request], policy: Policy, overhead: EngineOverhead | None,
                   report: Callable[[], None] | None = None) -> FleetRun:
    """Arrivals go to the prefill replicas; each finished prefill is handed, after its KV transfer, to a decode
    replica.  Handovers are routed in time order: before one at time h, every decode replica runs the steps that
    start before h, and every prefill step that could hand over earlier than h has already run (a handover
    comes after its prefill step, which starts after the routing time the prefill replicas were advanced to)."""
    link = layout.link
    assert link is not None
    front_router, back_router = Router(layout.router), Router(layout.router)
    for member in front:
        member.replica.log_finished()
    by_id = {r.id: r for r in ordered}
    handovers: list[tuple[float, int, float]] = []  # (arrival at the decode replica, id, first token)
    first: dict[int, RequestOutcome] = {}
    where: dict[int, list] = {}
    transfers: list[float] = []
    for index, request in enumerate([*ordered, None]):
        if report is not None and index % PROGRESS_REQUESTS == 0:
            report()
        time_s = float("inf") if request is None else request.arrival_s
        for member in front:
            member.run_until(time_s)
            for done in member.replica.take_finished():
                first[done.id] = done
                whole = by_id[done.id]
                if whole.output_tokens > 1:
                    transfer = link.transfer_s(profile, whole.prompt_tokens)
                    transfers.append(transfer)
                    heapq.heappush(handovers, (done.first_token_s + transfer, done.id, done.first_token_s))
        while handovers and handovers[0][0] <= time_s:
            arrival, request_id, first_token_s = heapq.heappop(handovers)
            for member in back:
                member.run_until(arrival)
            chosen = back_router.choose(back, arrival)
            back[chosen].replica.add(replace(by_id[request_id], arrival_s=arrival), first_token_s)
            where[request_id][1] = len(front) + chosen
        if request is None:
            break
        chosen = front_router.choose(front, time_s)
        front[chosen].replica.add(replace(request, output_tokens=1))
        where[request.id] = [chosen, None]
    runs = _finish(front + back, overhead, report)
    decoded = {o.id: o for run in runs[len(front):] for o in run.requests}
    outcomes = []
    for request in sorted(ordered, key=lambda r: r.id):
        prefilled, rest = first[request.id], decoded.get(request.id)
        if rest is None:  # one output token: done at the prefill replica
            outcomes.append(prefilled)
            continue
        outcomes.append(RequestOutcome(request, prefilled.first_token_s, rest.finish_s, rest.token_times_s,
                                       prefilled.preemptions + rest.preemptions, prefilled.cached_tokens,
                                       prefilled.scheduled_s))
    roles = ("prefill",) * len(front) + ("decode",) * len(back)
    return _pooled(runs, roles, outcomes, policy, overhead, tuple(tuple(where[o.id]) for o in outcomes),
                   tuple(transfers))


def _finish(members: list[Member], overhead: EngineOverhead | None,
            report: Callable[[], None] | None = None) -> list[SimulationRun]:
    for member in members:
        member.replica.finish(None if report is None else lambda _: report())
    return [member.replica.run(overhead) for member in members]


def _pooled(runs: list[SimulationRun], roles: tuple[str, ...], outcomes: list[RequestOutcome], policy: Policy,
            overhead: EngineOverhead | None, placement, transfers: tuple[float, ...]) -> FleetRun:
    if not outcomes:
        raise SimulationError("no requests to simulate")
    first = runs[0]
    return FleetRun(policy=policy.to_dict(), requests=tuple(outcomes), steps=StepLog.joined([r.steps for r in runs]),
                    kv_blocks_total=first.kv_blocks_total, kv_tokens_capacity=first.kv_tokens_capacity,
                    overhead=overhead, shared_prefixes=any(r.shared_prefixes for r in runs),
                    speculation=first.speculation,
                    replica_runs=tuple(runs), roles=roles, placement=placement, transfer_s=transfers,
                    busy_s=sum(r.busy_s for r in runs),
                    busy_j=None if any(r.busy_j is None for r in runs) else sum(r.busy_j or 0.0 for r in runs))
