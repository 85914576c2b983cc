"""``gpubench plan`` as the library runs it: everything between the command's parsed options and what it prints.

``prepare_plan`` reads and checks every input before anything is simulated: each candidate profile with its SKU, its
price, its engine time (``roofline.serving.profiles.engine_time``, simulate's rule) and (with ``--disaggregate``)
its KV link, and the workload. ``Planning.run`` plans every candidate under every policy
(``roofline.fleet.planner``) and assembles plan.json (``roofline.fleet.plan_document``); ``PlanOutcome.write``
writes it and its report into a folder. The CLI holds the output folder around them (``microbench.cli.guard``) and
prints.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from roofline.core.errors import BadInputError
from roofline.fleet.handover import kv_link
from roofline.fleet.plan_config import PlanConfig
from roofline.fleet.plan_document import plan_document
from roofline.fleet.planner import Candidate, Target, plan_policy
from roofline.fleet.simulate_run import ProbeReport, named_progress
from roofline.result.sections import Provenance
from roofline.serving.metrics import Slo
from roofline.serving.profile_doc import load_profile, save_json_atomic
from roofline.serving.profiles.engine_time import engine_time
from roofline.serving.workload import check_fits_in_memory, read_workload


def default_plan_folder(now: dt.datetime | None = None) -> Path:
    """Where a plan is written without ``-o``: ``results/plan-<UTC time>``."""
    return Path("results") / f"plan-{(now or dt.datetime.now(dt.timezone.utc)):%Y%m%dT%H%M%SZ}"


def load_candidates(config: PlanConfig) -> list[Candidate]:
    """Each profile with its SKU, its price and (with --disaggregate) its KV link; a price for a SKU no profile
    runs on is refused (a typo would otherwise leave every cost null)."""
    prices = config.price_of
    candidates = []
    for path in config.profile_files:
        profile = load_profile(path)
        # Whose engine time its steps carry (simulate's rule: its calibrated terms, else the --engine preset).
        chosen = engine_time(profile, config.engine, config.engine_typed)
        profile = replace(profile, engine_overhead=chosen.overhead)
        sku = profile.device.get("sku")
        candidates.append(Candidate(path, profile, sku, prices.get(sku) if sku else None,
                                    kv_link(profile, config.kv_link_gbps) if config.disaggregate else None,
                                    chosen.to_dict()))
    skus = sorted({c.sku for c in candidates if c.sku})
    for sku in prices:
        if sku not in skus:
            raise BadInputError(f"--gpu-hour-usd prices {sku}, which no profile runs on (they run on "
                                f"{', '.join(skus) or 'no known SKU'})")
    return candidates


def prepare_plan(config: PlanConfig, provenance: Provenance) -> Planning:
    """Every input of a checked config read and checked, nothing simulated yet (a refusal is one line)."""
    candidates = load_candidates(config)
    requests, workload = read_workload(config.trace, config.requests, "burst", config.prompt, config.output_lengths,
                                       config.seed, lengths=config.lengths)
    # One run at a time, its steps unlogged (a plan reads each fleet's latencies only): at most one token a request
    # a step is no bound that matters, so none is taken.
    check_fits_in_memory(requests, 1, tokens_per_step=len(requests))
    slo = cast(Slo, config.slo)  # a PlanConfig always has one (it refuses a plan without)
    target = Target(requests, slo, config.rates, config.router, config.max_gpus, config.mem_fraction,
                    config.seed, config.disaggregate, config.speculation)
    return Planning(config, candidates, target, workload, provenance)


@dataclass(frozen=True)
class PlanOutcome:
    """A plan command's answer: the plan document."""

    document: dict[str, Any]

    def write(self, folder: Path, report: bool = True) -> None:
        """plan.json and, with ``report``, its report, written into ``folder`` (the output's staging folder)."""
        save_json_atomic(self.document, folder / "plan.json")
        if report:
            from roofline.fleet.plan_report import write_report

            write_report(self.document, folder)


@dataclass(frozen=True)
class Planning:
    """One plan command, its inputs read and checked."""

    config: PlanConfig
    candidates: list[Candidate]
    target: Target
    workload: dict[str, Any]
    provenance: Provenance

    def run(self, progress: ProbeReport | None = None) -> PlanOutcome:
        """Plan each candidate under each policy (each simulation of the searches handed to ``progress``, named by
        the candidate's file and the policy) and assemble the document."""
        plans = [[plan_policy(candidate, policy, self.target,
                              named_progress(progress, f"{candidate.path.name}, {policy.text}"))
                  for policy in self.config.policy_list] for candidate in self.candidates]
        provenance = self.provenance
        return PlanOutcome(plan_document(self.candidates, plans, self.target, self.workload, self.config.price_of,
                                         provenance.tool, provenance.host, provenance.argv))

