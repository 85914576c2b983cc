"""One group of configurations planned, in a worker process: the step profile of its SKU and split (built once a
process), the lone-request SLO check for the group, then plan's own search for each configuration
(``roofline.fleet.planner.plan_policy``: the one-replica capacity, and per rate the fewest replicas, one pool and
prefill:decode apart).  Each configuration comes back as one plain record (JSON), journalled as it arrives.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from roofline.core.errors import BadInputError
from roofline.fleet.handover import kv_link
from roofline.fleet.planner import Candidate, Target, plan_policy
from roofline.result.sections import Provenance
from roofline.search.space import Group, Setting
from roofline.serving.capacity import describe_checks, unloaded_checks
from roofline.serving.policies import parse_policy
from roofline.serving.profile_doc import StepProfile
from roofline.serving.profiles.analytic import analytic_profile_of
from roofline.serving.simulate import simulate
from roofline.serving.simulate_config import ModelOptions
from roofline.specs.gpus import SpecError
from roofline.step.speculative import parse_spec_decode


@dataclass(frozen=True)
class SearchContext:
    """What every worker needs, handed to each once (pickled) when it starts."""

    model: str | None
    hf_config: Path | None
    dtype: str | None
    routing: str
    efficiency: str
    engine: str  # --engine: whose overhead preset every step carries (none: kernels only)
    max_tokens: int
    max_context: int
    plan: Target  # what every configuration's plan meets (plan's own), without speculation: that is per setting
    prices: tuple[tuple[str, float], ...]

    def options(self, setting: Setting) -> ModelOptions:
        return ModelOptions(model=self.model, hf_config=self.hf_config, tp=setting.tp, ep=setting.ep,
                            routing=self.routing, dtype=self.dtype, kv_dtype=setting.kv_dtype, sku=setting.sku,
                            efficiency=self.efficiency, max_tokens=self.max_tokens, max_context=self.max_context,
                            engine=self.engine, engine_typed=True)

    def target(self, setting: Setting) -> Target:
        return replace(self.plan, spec=parse_spec_decode(setting.spec))


_CONTEXT: SearchContext | None = None
_PROFILES: dict[ModelOptions, StepProfile] = {}


def start_worker(context: SearchContext) -> None:
    """A worker's start: its context, and SIGINT left to the parent (a terminal's Ctrl-C reaches the whole process
    group; the parent stops the workers itself and keeps what they finished)."""
    global _CONTEXT
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _CONTEXT = context


def profile_of(context: SearchContext, setting: Setting) -> StepProfile:
    """The analytic step profile of a configuration's SKU, split and KV dtype (one build a process)."""
    key = context.options(setting)  # everything the profile is built from: no other search's profile is reused
    if key not in _PROFILES:
        try:
            _PROFILES[key] = analytic_profile_of(key, Provenance({}, {}, ()))
        except SpecError as exc:
            raise BadInputError(str(exc)) from None
    return _PROFILES[key]


def alone_missed(context: SearchContext, setting: Setting, profile: StepProfile) -> str | None:
    """Why no load meets the SLO for this profile, budget and speculation (each request's lengths served alone
    already miss it; None: they meet it).  Max-batch does not change a lone request."""
    policy = parse_policy(setting.policy)
    spec = parse_spec_decode(setting.spec)

    def run_at(workload):
        return simulate(profile, workload, policy, profile.engine_overhead, context.plan.mem_fraction, log_steps=False,
                        spec=spec, seed=context.plan.seed)

    if any(r.segments for r in context.plan.requests):  # shared prefixes run faster together than alone: no bound
        return None
    probe = unloaded_checks(context.plan.requests, context.plan.slo, run_at)
    return None if probe.met else describe_checks(probe.checks, missed_only=True)


def evaluate_group(group: Group, context: SearchContext | None = None) -> list[dict[str, Any]]:
    """Each configuration of ``group`` planned (or pruned: the SLO missed alone), as a record."""
    context = context or _CONTEXT
    if context is None:
        raise RuntimeError("evaluate_group in a worker that was not started")
    first = group.first
    began = time.perf_counter()
    profile = profile_of(context, first)
    missed = alone_missed(context, first, profile)
    records = []
    for setting in group.settings:
        record: dict[str, Any] = {"key": setting.key, "setting": setting.to_dict()}
        if missed is not None:
            record.update(status="pruned", reason="slo",
                          why=f"every request served alone on one replica already misses the SLO ({missed}): no "
                              "load, and no fleet, meets it")
        else:
            started = time.perf_counter()
            price = dict(context.prices).get(setting.sku)
            link = kv_link(profile, None) if context.plan.disaggregate else None
            candidate = Candidate(Path(setting.key), profile, setting.sku, price, link)
            plan = plan_policy(candidate, parse_policy(setting.policy), context.target(setting))
            record.update(status="planned", plan=plan, seconds=time.perf_counter() - started,
                          memory=profile.memory, roof=profile.roof, basis=profile.basis)
        records.append(record)
    records[0]["group_seconds"] = time.perf_counter() - began
    return records
