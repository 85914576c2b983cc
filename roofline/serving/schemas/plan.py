"""The plan document (``plan.json``, ``gpubench plan``) declared key by key, as
``roofline.fleet.plan_document.plan_document`` writes it (each policy's plan: ``roofline.fleet.planner``); its
JSON Schema and docs/reference/plan.md's key tables are generated from these records
(roofline.serving.schemas.registry).  The profile, policy and capacity records are the simulation document's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from roofline.result.json_schema import shaped_key as key
from roofline.result.keys import Record
from roofline.result.sections import SECTIONS
from roofline.serving.policies import ROUTER_NAMES
from roofline.serving.schemas.simulation import (
    Capacity,
    EngineTimeRecord,
    KvLinkRecord,
    PolicyRecord,
    ProfileIdentity,
    SpecDecodeSetting,
    Workload,
)
from roofline.serving.schemas.step_profile import StepPower

PLAN_VERSION = 1
PLAN_KIND = "gpubench-plan"


@dataclass(frozen=True, kw_only=True)
class FleetTried(Record):
    SECTION: ClassVar[str] = "candidates[].plans[].aggregated|disaggregated[].tried[]"
    replicas: Any = key("integer", required=True, doc="replicas in all")
    prefill_replicas: Any = key("integer", required=True, nullable=True, doc="of them prefill (null: not split)")
    decode_replicas: Any = key("integer", required=True, nullable=True, doc="of them decode (null: not split)")
    met: Any = key("boolean", required=True, doc="the fleet met the SLO at the rate")


@dataclass(frozen=True, kw_only=True)
class PlanPoint(Record):
    SECTION: ClassVar[str] = "candidates[].plans[].aggregated|disaggregated[]"
    rate_requests_per_s: Any = key("number", unit="1/s", required=True, doc="the rate planned for (Poisson)")
    met: Any = key("boolean", required=True, doc="a fleet up to --max-gpus meets the SLO")
    replicas: Any = key("integer", required=True, nullable=True,
                        doc="the fewest replicas that meet it, prefill and decode together (null: none)")
    prefill_replicas: Any = key("integer", required=True, nullable=True, doc="of them prefill (null: not split)")
    decode_replicas: Any = key("integer", required=True, nullable=True, doc="of them decode (null: not split)")
    gpus: Any = key("integer", required=True, nullable=True, doc="replicas x the profile's tp (null: none)")
    tokens_per_s: Any = key("number", unit="1/s", required=True, nullable=True,
                            doc="the fleet's output tokens per second at the rate")
    tokens_per_s_per_gpu: Any = key("number", unit="1/s", required=True, nullable=True,
                                    doc="output tokens per second per GPU")
    usd_per_million_output_tokens: Any = key("number", unit="USD", required=True, nullable=True,
                                             doc="GPUs x --gpu-hour-usd over the output (null: no price given)")
    tokens_per_s_per_user: Any = key("number", unit="1/s", nullable=True,
                                     doc="1 / TPOT p50 of that fleet (null: none; absent: not recorded)")
    tokens_per_joule: Any = key("number", unit="1/J", nullable=True,
                                doc="output tokens over the busy GPU-seconds x the profile's power (null: no power "
                                    "figure, or not met)")
    tokens_per_usd: Any = key("number", nullable=True, doc="output tokens over GPU-hours x --gpu-hour-usd (null: no "
                                                           "price, or not met)")
    ttft_p90_s: Any = key("number", unit="s", required=True, nullable=True, doc="TTFT P90 of that fleet")
    tpot_p99_s: Any = key("number", unit="s", required=True, nullable=True, doc="TPOT P99")
    itl_p99_s: Any = key("number", unit="s", required=True, nullable=True, doc="ITL P99")
    e2e_p99_s: Any = key("number", unit="s", required=True, nullable=True, doc="end-to-end P99")
    slo_s: Any = key("object", values="number", unit="s", nullable=True,
                     doc="each --slo limit's metric at its percentile, as checked (null: not met)")
    sentence: Any = key("string", required=True, doc="the answer in words (not met: up to how many GPUs)")
    warnings: Any = key("array", items="string", required=True, doc="what makes the answer less sure")
    tried: Any = key("array", items="object", item_record=FleetTried, required=True,
                     doc="every fleet simulated at this rate")
    on_front: Any = key("boolean", nullable=True,
                        doc="on the rate's front over every plan meeting the SLO (answers[].front says its axes; "
                            "null: not met, or no tokens/s per user)")


@dataclass(frozen=True, kw_only=True)
class PolicyPlan(Record):
    SECTION: ClassVar[str] = "candidates[].plans[]"
    policy: Any = key("object", record=PolicyRecord, required=True, doc="the policy planned")
    one_replica_capacity: Any = key("object", record=Capacity, required=True,
                                    doc="one replica's capacity under the SLO: the first guess")
    aggregated: Any = key("array", items="object", item_record=PlanPoint, required=True,
                          doc="per rate, replicas that each prefill and decode")
    disaggregated: Any = key("array", items="object", item_record=PlanPoint, required=True, nullable=True,
                             doc="per rate, prefill and decode replicas apart (null: not asked)")


@dataclass(frozen=True, kw_only=True)
class PlanCandidate(Record):
    SECTION: ClassVar[str] = "candidates[]"
    profile: Any = key("object", record=ProfileIdentity, required=True, doc="the candidate's step profile")
    sku: Any = key("string", required=True, nullable=True, doc="the GPU SKU it runs on (null: not known)")
    gpu_hour_usd: Any = key("number", unit="USD", required=True, nullable=True,
                            doc="its price per GPU-hour, as given (null: not given)")
    power: Any = key("object", record=StepPower, nullable=False,
                     doc="the profile's power figure, or why none (absent: not recorded)")
    kv_link: Any = key("object", record=KvLinkRecord, required=True, nullable=True,
                       doc="with --disaggregate: what a prompt's KV cache crosses")
    engine_time: Any = key("object", record=EngineTimeRecord, nullable=False,
                           doc="whose engine time its steps carry (absent: written before engine presets)")
    plans: Any = key("array", items="object", item_record=PolicyPlan, required=True, doc="one per policy")


@dataclass(frozen=True, kw_only=True)
class PlanAnswer(Record):
    SECTION: ClassVar[str] = "answers[]"
    rate_requests_per_s: Any = key("number", unit="1/s", required=True, doc="the rate")
    met: Any = key("boolean", required=True, doc="some plan meets the SLO at it")
    front: Any = key("string", required=True, doc="the front's axes: tokens/s per user against tokens per dollar "
                                                  "(every plan priced) or tokens/s per GPU")
    candidate: Any = key("string", required=True, nullable=True, doc="the cheapest plan on the front: its candidate")
    policy: Any = key("string", required=True, nullable=True, doc="its policy")
    layout: Any = key("string", required=True, nullable=True, choices=("aggregated", "disaggregated"),
                      doc="its layout")
    gpus: Any = key("integer", required=True, nullable=True, doc="its GPUs")
    tokens_per_s_per_gpu: Any = key("number", unit="1/s", required=True, nullable=True, doc="its tokens/s per GPU")
    tokens_per_s_per_user: Any = key("number", unit="1/s", required=True, nullable=True, doc="its 1 / TPOT p50")
    usd_per_million_output_tokens: Any = key("number", unit="USD", required=True, nullable=True,
                                             doc="its cost (null: no price)")
    tokens_per_joule: Any = key("number", unit="1/J", required=True, nullable=True,
                                doc="its tokens per joule (null: no power figure)")
    sentence: Any = key("string", required=True, doc="the answer in words")


@dataclass(frozen=True, kw_only=True)
class PlanDocument(Record):
    SECTION: ClassVar[str] = ""
    schema_version: Any = key("integer", required=True, doc="format version (1)")
    kind: Any = key("string", required=True, choices=(PLAN_KIND,), doc="what this document is")
    tool: Any = key("object", record=SECTIONS["tool"], required=True, doc="what wrote it (as in a result)")
    created_at: Any = key("string", required=True, doc="UTC ISO-8601 time it was made")
    argv: Any = key("array", items="string", required=True, doc="the command line")
    host: Any = key("object", record=SECTIONS["host"], required=True, doc="the machine (as in a result)")
    workload: Any = key("object", record=Workload, required=True,
                        doc="the requests' lengths (their arrivals: Poisson at each rate)")
    slo: Any = key("object", values="number", unit="s", required=True, doc="--slo: limit per metric_pNN")
    rates_requests_per_s: Any = key("array", items="number", unit="1/s", required=True, doc="--rate, ascending")
    router: Any = key("string", required=True, choices=ROUTER_NAMES, doc="--router")
    max_gpus: Any = key("integer", required=True, doc="--max-gpus: the largest fleet searched")
    mem_fraction: Any = key("number", required=True, doc="share of device memory for weights and KV")
    gpu_hour_usd: Any = key("object", values="number", unit="USD", required=True,
                            doc="--gpu-hour-usd: price per GPU-hour by SKU")
    spec_decode: Any = key("object", record=SpecDecodeSetting, nullable=False,
                           doc="--spec-decode: every replica decodes speculatively (absent: none)")
    candidates: Any = key("array", items="object", item_record=PlanCandidate, required=True,
                          doc="one per profile given")
    answers: Any = key("array", items="object", item_record=PlanAnswer, nullable=False,
                       doc="per rate, the cheapest plan on the front of every plan meeting the SLO (absent: not "
                           "recorded)")
