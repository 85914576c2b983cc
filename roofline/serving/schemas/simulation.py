"""The simulation document (``simulation.json``, ``gpubench simulate``) declared key by key, as
``roofline.serving.document.simulation_document`` writes it (the summary: ``roofline.serving.metrics.summarize``;
the capacity search: ``roofline.serving.capacity``); its JSON Schema and docs/reference/simulation.md's key tables are
generated from these records (roofline.serving.schemas.registry).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from roofline.core.counting import DTYPES, KV_DTYPES, PLAIN_DTYPES
from roofline.result.json_schema import shaped_key as key
from roofline.result.keys import Record
from roofline.result.sections import SECTIONS
from roofline.serving import document as simulation_doc
from roofline.serving import profile_doc
from roofline.serving.policies import POLICY_KINDS, ROUTER_NAMES
from roofline.serving.profiles import engine_time
from roofline.serving.schemas.step_profile import ModelShape, Overhead, ProfileMemory, ProfileRoof
from roofline.serving.workload import arrival_syntax, length_syntax

REPLICA_ROLES = ("serving", "prefill", "decode")


# --- the simulation document ------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ProfileIdentity(Record):
    SECTION: ClassVar[str] = "profile"
    path: Any = key("string", required=True, nullable=True, doc="the profile file (null: made from a spec sheet)")
    source: Any = key("string", required=True, choices=profile_doc.SOURCES, doc="the profile's source")
    basis: Any = key("string", required=True, doc="the profile's basis")
    model: Any = key("object", record=ModelShape, required=True, doc="the profile's model")
    tp: Any = key("integer", required=True, doc="tensor-parallel ranks")
    dtype: Any = key("string", required=True, choices=DTYPES, doc="the profile's dtype")
    kv_dtype: Any = key("string", required=True, choices=KV_DTYPES, doc="its KV cache's dtype")
    lm_head_dtype: Any = key("string", nullable=False, choices=PLAIN_DTYPES,
                             doc="its LM head's (and embeddings') dtype: bf16 beside a weight-only format, "
                                 "else dtype (absent: so)")
    memory: Any = key("object", record=ProfileMemory, required=True, doc="the profile's memory")
    roof: Any = key("object", record=ProfileRoof, required=True, nullable=True, doc="the profile's roof")
    device: Any = key("object", record=SECTIONS["device"], required=True, doc="the profile's device")
    ep: Any = key("integer", nullable=False, doc="a mixture of experts: the profile's expert-parallel GPUs")
    routing: Any = key("string", nullable=False, doc="a mixture of experts: the profile's routing")


@dataclass(frozen=True, kw_only=True)
class Workload(Record):
    SECTION: ClassVar[str] = "workload"
    requests: Any = key("integer", nullable=False, doc="generated: how many requests")
    arrivals: Any = key("string", nullable=False, doc=f"generated: {arrival_syntax()}")
    concurrency: Any = key("integer", nullable=False,
                           doc="--concurrency C: a closed loop of C clients, each sending its next request when its "
                               "last one ends (then no arrivals; a trace's arrival times unused)")
    prompt: Any = key("string", nullable=False, doc=f"generated: prompt length distribution, {length_syntax()}")
    output: Any = key("string", nullable=False, doc="generated: output length distribution, as prompt")
    lengths: Any = key("string", nullable=False,
                       doc="generated, --lengths FILE.csv: (prompt, output) pairs drawn from it (no prompt, output)")
    seed: Any = key("integer", nullable=False, doc="generated: the seed")
    prefix: Any = key("string", nullable=False,
                      doc="generated, --prefix shared:L:N: each prompt opens with one of N system prompts of L tokens")
    sessions: Any = key("string", nullable=False,
                        doc="generated, --sessions T:G: conversations of T turns, each sent G s after the answer to "
                            "the one before")
    trace: Any = key("string", nullable=False,
                     doc="replayed: the trace, a CSV or a Mooncake .jsonl (then no other key but concurrency)")


@dataclass(frozen=True, kw_only=True)
class PolicyRecord(Record):
    SECTION: ClassVar[str] = "runs[].policy"
    policy: Any = key("string", required=True, doc="as given: chunked:budget=512, ...")
    kind: Any = key("string", required=True, choices=POLICY_KINDS, doc="the policy")
    max_batch: Any = key("integer", required=True, doc="most sequences in a step")
    block_tokens: Any = key("integer", required=True, nullable=True, doc="KV block size (null: no block cache)")
    budget_tokens: Any = key("integer", nullable=False, doc="chunked: tokens a step holds")
    cache_tokens: Any = key("integer", nullable=False, doc="static:cache=L: the cache each decode attends")
    pad_q_tokens: Any = key("integer", nullable=False, doc="chunked:pad-q=Q: a packed step's queries padded to")
    pad_kv_tokens: Any = key("integer", nullable=False, doc="chunked:pad-kv=V: its keys padded to (0: none)")
    kv_cap_tokens: Any = key("integer", nullable=False, doc="chunked:kv-cap=C: keys padded at most to (0: no cap)")
    prefix_cache: Any = key("boolean", nullable=True,
                            doc="paged, chunked: blocks kept by prefix hash and found again (null: no block cache; "
                                "absent: written before prefix caching was modelled)")
    prefix_cache_off: Any = key("string", nullable=False,
                                doc="why the policy's prefix cache was not applied (a model whose layers keep a "
                                    "recurrent state: no cached prefix can be reused; absent: it applied)")
    kv_reserve: Any = key("string", nullable=True, choices=("prompt", "full"),
                          doc="paged, chunked: what admission reserves, the prompt's blocks (preemption by recompute "
                              "as outputs grow) or prompt and whole output's (never preempts; null: no block cache; "
                              "absent: written before it was an option)")


@dataclass(frozen=True, kw_only=True)
class Percentiles(Record):
    SECTION: ClassVar[str] = "runs[].summary.ttft|tpot|e2e|queue|prefill"
    p50_s: Any = key("number", unit="s", required=True, nullable=True, doc="median (null: no request has one)")
    p90_s: Any = key("number", unit="s", required=True, nullable=True, doc="90th percentile")
    p99_s: Any = key("number", unit="s", required=True, nullable=True, doc="99th percentile")
    mean_s: Any = key("number", unit="s", nullable=True,
                      doc="arithmetic mean (null: no request has one; absent: written before means were recorded)")


@dataclass(frozen=True, kw_only=True)
class InterTokenPercentiles(Percentiles):
    SECTION: ClassVar[str] = "runs[].summary.itl"
    p50_s: Any = key("number", unit="s", required=True, nullable=True,
                     doc="median gap (null: no request has two tokens)")
    max_s: Any = key("number", unit="s", required=True, nullable=True, doc="the longest gap")


@dataclass(frozen=True, kw_only=True)
class PaddingWaste(Record):
    SECTION: ClassVar[str] = "runs[].summary.padding_waste"
    wasted_slot_steps: Any = key("integer", required=True, doc="slot-steps of finished sequences (static)")
    slot_steps: Any = key("integer", required=True, doc="all slot-steps")
    share: Any = key("number", required=True, doc="wasted over all")
    padding_prompt_tokens: Any = key("integer", required=True, doc="prompt tokens added by padding")


@dataclass(frozen=True, kw_only=True)
class SloCheck(Record):
    SECTION: ClassVar[str] = "runs[].summary.slo.checks.<limit>"
    value_s: Any = key("number", unit="s", required=True, doc="the run's percentile")
    limit_s: Any = key("number", unit="s", required=True, doc="the limit")
    met: Any = key("boolean", required=True, doc="value within the limit")


@dataclass(frozen=True, kw_only=True)
class SloSummary(Record):
    SECTION: ClassVar[str] = "runs[].summary.slo"
    limits_s: Any = key("object", values="number", unit="s", required=True, doc="--slo: limit per metric_pNN")
    checks: Any = key("object", record=SloCheck, keyed=True, required=True, doc="each limit checked")
    met: Any = key("boolean", required=True, doc="every limit met")
    goodput_requests_per_s: Any = key("number", unit="1/s", required=True, doc="requests meeting every limit")
    goodput_tokens_per_s: Any = key("number", unit="1/s", required=True, doc="their output tokens per second")


@dataclass(frozen=True, kw_only=True)
class SpecDecodeFigures(Record):
    SECTION: ClassVar[str] = "runs[].summary.spec_decode"
    tokens_per_sequence_step: Any = key("number", required=True, nullable=True,
                                        doc="tokens a decoding sequence gained per step, mean over the run (1 + the "
                                            "accepted drafts, cut at each output's end; null: no sequence decoded)")
    sequence_steps: Any = key("integer", required=True, doc="decoding sequence-steps it is the mean over")


@dataclass(frozen=True, kw_only=True)
class Summary(Record):
    SECTION: ClassVar[str] = "runs[].summary"
    requests: Any = key("integer", required=True, doc="requests served")
    output_tokens: Any = key("integer", required=True, doc="tokens generated")
    makespan_s: Any = key("number", unit="s", required=True, doc="first arrival to last finish")
    busy_s: Any = key("number", unit="s", required=True, doc="time the engine ran steps")
    tokens_per_s: Any = key("number", unit="1/s", required=True, doc="output tokens over the makespan")
    requests_per_s: Any = key("number", unit="1/s", required=True, doc="requests over the makespan")
    ttft: Any = key("object", record=Percentiles, required=True, doc="time to first token")
    tpot: Any = key("object", record=Percentiles, required=True, doc="time per output token after the first")
    itl: Any = key("object", record=InterTokenPercentiles, nullable=False,
                   doc="inter-token latency: every gap between consecutive tokens of every request, pooled "
                       "(absent: a document written before it was recorded)")
    e2e: Any = key("object", record=Percentiles, required=True, doc="end-to-end latency")
    queue: Any = key("object", record=Percentiles, nullable=False,
                     doc="TTFT's queueing: arrival to first admission into a step, the scheduling delay (absent: "
                         "written before it was recorded)")
    prefill: Any = key("object", record=Percentiles, nullable=False,
                       doc="TTFT's rest: first admission to the first token (absent: as queue)")
    steps: Any = key("integer", required=True, doc="engine steps")
    batch_mean: Any = key("number", required=True, doc="sequences per step, mean")
    batch_max: Any = key("integer", required=True, doc="sequences per step, most")
    decode_batch_mean: Any = key("number", required=True, doc="decoding sequences per decode step, mean")
    kv_tokens_capacity: Any = key("integer", required=True, nullable=True, doc="KV tokens that fit (null: unknown)")
    kv_occupancy_mean: Any = key("number", required=True, nullable=True, doc="time-weighted share of it in use")
    kv_occupancy_max: Any = key("number", required=True, nullable=True, doc="most of it in use")
    compute_bound_step_share: Any = key("number", required=True, doc="steps above the roof's ridge")
    compute_bound_time_share: Any = key("number", required=True, doc="busy time in those steps")
    overhead_time_share: Any = key("number", required=True, doc="busy time that is engine overhead")
    comm_time_share: Any = key("number", nullable=False,
                               doc="busy time in tensor-parallel all-reduces (absent: the profile costs none)")
    kv_blocked_step_share: Any = key("number", required=True, doc="steps that refused admission for blocks")
    prefix_hit_rate: Any = key("number", nullable=True,
                               doc="prompt tokens found in the prefix cache over all prompt tokens (null: the policy "
                                   "keeps no prefix cache; absent: written before it was modelled)")
    cached_prompt_tokens: Any = key("integer", nullable=False,
                                    doc="prompt tokens found in the prefix cache, not prefilled (absent: as above)")
    preemptions: Any = key("integer", required=True, doc="sequences preempted")
    mbu_mean: Any = key("number", required=True, nullable=True, doc="bytes over busy time / roof (null: no roof)")
    mfu_mean: Any = key("number", required=True, nullable=True, doc="FLOP over busy time / roof (null: no roof)")
    padding_waste: Any = key("object", record=PaddingWaste, required=True, doc="static batching's waste")
    slo: Any = key("object", record=SloSummary, nullable=False, doc="with --slo: the checks and goodput")
    binding_limit: Any = key("string", required=True,
                             choices=("kv-cache", "engine-overhead", "communication", "compute", "bandwidth"),
                             doc="the limit that binds")
    binding_sentence: Any = key("string", required=True, doc="the sentence naming it")
    spec_decode: Any = key("object", record=SpecDecodeFigures, nullable=False,
                           doc="--spec-decode: the accepted tokens measured (absent: no speculative decoding)")
    warnings: Any = key("array", items="string", required=True, doc="what the run could not model")


@dataclass(frozen=True, kw_only=True)
class Composition(Record):
    SECTION: ClassVar[str] = "runs[].composition_s"
    linear_s: Any = key("number", unit="s", required=True, doc="busy time in linears")
    attention_s: Any = key("number", unit="s", required=True, doc="in attention")
    other_s: Any = key("number", unit="s", required=True, doc="in other kernels")
    overhead_s: Any = key("number", unit="s", required=True, doc="engine overhead")
    comm_s: Any = key("number", unit="s", nullable=False,
                      doc="in tensor-parallel all-reduces (absent: the profile costs none)")
    draft_s: Any = key("number", unit="s", nullable=False,
                       doc="in the drafter's steps (absent: no speculative decoding)")


@dataclass(frozen=True, kw_only=True)
class Timeline(Record):
    SECTION: ClassVar[str] = "runs[].timeline"
    t_s: Any = key("array", items="number", unit="s", required=True, doc="middle of each time bin")
    batch: Any = key("array", items="number", required=True, doc="sequences per step, time-weighted")
    compute_bound_share: Any = key("array", items="number", required=True, doc="share of compute-bound time")
    kv_occupancy: Any = key("array", items="number", required=True, nullable=True, doc="KV share in use")
    mbu: Any = key("array", items="number", required=True, nullable=True, doc="bandwidth utilisation")
    mfu: Any = key("array", items="number", required=True, nullable=True, doc="FLOP utilisation")


@dataclass(frozen=True, kw_only=True)
class RatePoint(Record):
    SECTION: ClassVar[str] = "runs[].rates[]"
    rate_requests_per_s: Any = key("number", unit="1/s", required=True, doc="Poisson arrival rate")
    tokens_per_s: Any = key("number", unit="1/s", required=True, doc="output tokens per second")
    ttft_p90_s: Any = key("number", unit="s", required=True, doc="TTFT P90")
    tpot_p99_s: Any = key("number", unit="s", required=True, nullable=True, doc="TPOT P99 (null: no TPOT)")
    itl_p99_s: Any = key("number", unit="s", nullable=True, doc="ITL P99 (null: no gap; absent: not recorded)")
    e2e_p99_s: Any = key("number", unit="s", required=True, doc="end-to-end P99")
    met: Any = key("boolean", nullable=False, doc="a capacity probe: the SLO held")
    concurrency: Any = key("integer", nullable=False,
                           doc="--concurrency with --slo: the clients of this probe (its rate: the requests/s they "
                               "reached; absent: an open-loop point)")


@dataclass(frozen=True, kw_only=True)
class CapacityProbe(RatePoint):
    SECTION: ClassVar[str] = "runs[].capacity.tried[]"
    met: Any = key("boolean", required=True, doc="the SLO held at this rate")
    checks: Any = key("object", record=SloCheck, keyed=True, required=True, doc="each limit checked")


@dataclass(frozen=True, kw_only=True)
class Capacity(Record):
    SECTION: ClassVar[str] = "runs[].capacity"
    capacity_requests_per_s: Any = key("number", unit="1/s", required=True, nullable=True,
                                       doc="highest rate meeting the SLO (null: none tried does)")
    capacity_is_lower_bound: Any = key("boolean", required=True, doc="met at every rate tried: at least this")
    capacity_concurrency: Any = key("integer", nullable=True,
                                    doc="--concurrency: the most clients meeting the SLO, capacity_requests_per_s "
                                        "the requests/s they reached (null: not even one; absent: a rate search)")
    tried: Any = key("array", items="object", item_record=CapacityProbe, required=True, doc="every rate probed")
    reason: Any = key("string", required=True, doc="why the search stopped where it did (empty: bracketed)")


@dataclass(frozen=True, kw_only=True)
class ReplicaFigures(Record):
    SECTION: ClassVar[str] = "runs[].fleet.replicas[]"
    replica: Any = key("integer", required=True, doc="its index (prefill replicas first)")
    role: Any = key("string", required=True, choices=REPLICA_ROLES, doc="serving, prefill or decode")
    requests: Any = key("integer", required=True, doc="requests routed to it")
    output_tokens: Any = key("integer", required=True,
                             doc="tokens it generated (a decode replica: all but each request's first)")
    busy_s: Any = key("number", unit="s", required=True, doc="time it ran steps")
    busy_share: Any = key("number", required=True, doc="busy_s over the fleet's makespan")
    ttft_p90_s: Any = key("number", unit="s", required=True, nullable=True,
                          doc="TTFT P90 of its requests (null: none, or a decode replica)")
    tpot_p99_s: Any = key("number", unit="s", required=True, nullable=True, doc="TPOT P99 (null: no TPOT)")
    itl_p99_s: Any = key("number", unit="s", required=True, nullable=True, doc="ITL P99 (null: no gap)")
    e2e_p99_s: Any = key("number", unit="s", required=True, nullable=True,
                         doc="end-to-end P99 from each request's arrival there (null: no request)")
    batch_mean: Any = key("number", required=True, nullable=True, doc="sequences per step, mean (null: no step)")
    kv_occupancy_mean: Any = key("number", required=True, nullable=True,
                                 doc="time-weighted share of its KV cache in use (null: unknown)")
    preemptions: Any = key("integer", required=True, doc="sequences it preempted")


@dataclass(frozen=True, kw_only=True)
class KvTransfers(Record):
    SECTION: ClassVar[str] = "runs[].fleet.kv_transfer_s"
    count: Any = key("integer", required=True, doc="prompts whose KV cache was handed to a decode replica")
    mean_s: Any = key("number", unit="s", required=True, doc="mean transfer time")
    max_s: Any = key("number", unit="s", required=True, doc="longest transfer")


@dataclass(frozen=True, kw_only=True)
class FleetFigures(Record):
    SECTION: ClassVar[str] = "runs[].fleet"
    load_imbalance: Any = key("number", required=True,
                              doc="the busiest replica's requests over the mean's (the prefill pool's when split)")
    decode_load_imbalance: Any = key("number", required=True, nullable=True,
                                     doc="the same over the decode pool (null: not split)")
    kv_transfer_s: Any = key("object", record=KvTransfers, required=True, nullable=True,
                             doc="the KV handovers (null: not split, or no request past its first token)")
    replicas: Any = key("array", items="object", item_record=ReplicaFigures, required=True, doc="each replica")


@dataclass(frozen=True, kw_only=True)
class KvLinkRecord(Record):
    SECTION: ClassVar[str] = "fleet.kv_link"
    bytes_per_s: Any = key("number", unit="B/s", required=True, doc="the link's bandwidth, one way")
    latency_s: Any = key("number", unit="s", required=True, doc="added to each transfer (--kv-link-gbps: 0)")
    source: Any = key("string", required=True, doc="the spec sheet's interconnect, or --kv-link-gbps")


@dataclass(frozen=True, kw_only=True)
class FleetLayoutRecord(Record):
    SECTION: ClassVar[str] = "fleet"
    replicas: Any = key("integer", required=True, doc="replicas in all (prefill and decode when split)")
    router: Any = key("string", required=True, choices=ROUTER_NAMES, doc="--router")
    prefill_replicas: Any = key("integer", required=True, nullable=True, doc="--disaggregate P (null: not split)")
    decode_replicas: Any = key("integer", required=True, nullable=True, doc="--disaggregate D (null: not split)")
    kv_link: Any = key("object", record=KvLinkRecord, required=True, nullable=True,
                       doc="what a prompt's KV cache crosses (null: not split)")


@dataclass(frozen=True, kw_only=True)
class Energy(Record):
    SECTION: ClassVar[str] = "runs[].energy"
    watts_per_gpu: Any = key("number", unit="W", required=True, nullable=True,
                             doc="the profile's power figure per GPU (null: it has none; why_none says why)")
    upper_bound: Any = key("boolean", required=True, nullable=True,
                           doc="the figure is a TDP: joules at most, tokens per joule at least (null: no figure)")
    basis: Any = key("string", required=True, nullable=True, doc="how the profile's figure was found")
    source: Any = key("string", required=True, nullable=True, doc="where it comes from (the datasheet line)")
    why_none: Any = key("string", required=True, nullable=True, doc="no figure: why (null: there is one)")
    gpu_busy_s: Any = key("number", unit="s", required=True,
                          doc="GPU-seconds of steps: each replica's busy time times its GPUs (idle time not charged)")
    joules: Any = key("number", unit="J", required=True, nullable=True, doc="gpu_busy_s x watts_per_gpu")
    tokens_per_joule: Any = key("number", unit="1/J", required=True, nullable=True,
                                doc="output tokens over joules (null: no power figure)")
    gpu_hours: Any = key("number", unit="h", required=True, doc="every GPU of the fleet over the makespan")
    usd_per_gpu_hour: Any = key("number", required=True, nullable=True, doc="--gpu-hour-usd (null: not given)")
    tokens_per_usd: Any = key("number", required=True, nullable=True,
                              doc="output tokens over gpu_hours x usd_per_gpu_hour (null: no price)")


@dataclass(frozen=True, kw_only=True)
class LoadPoint(Record):
    SECTION: ClassVar[str] = "load_sweep.points[]"
    policy: Any = key("string", required=True, doc="the policy, as given")
    rate_requests_per_s: Any = key("number", unit="1/s", required=True, doc="Poisson arrival rate")
    tokens_per_s: Any = key("number", unit="1/s", required=True, doc="output tokens per second, the whole fleet")
    tokens_per_s_per_gpu: Any = key("number", unit="1/s", required=True,
                                    doc="tokens_per_s over every GPU (TP x replicas; EP for a mixture)")
    tokens_per_s_per_user: Any = key("number", unit="1/s", required=True, nullable=True,
                                     doc="1 / TPOT p50 (null: no request had a second token)")
    ttft_p50_s: Any = key("number", unit="s", required=True, nullable=True, doc="TTFT P50")
    ttft_p90_s: Any = key("number", unit="s", required=True, nullable=True, doc="TTFT P90")
    ttft_p99_s: Any = key("number", unit="s", required=True, nullable=True, doc="TTFT P99")
    tpot_p50_s: Any = key("number", unit="s", required=True, nullable=True, doc="TPOT P50 (null: no TPOT)")
    tpot_p90_s: Any = key("number", unit="s", required=True, nullable=True, doc="TPOT P90")
    tpot_p99_s: Any = key("number", unit="s", required=True, nullable=True, doc="TPOT P99")
    tokens_per_joule: Any = key("number", unit="1/J", required=True, nullable=True,
                                doc="as runs[].energy, for this run (null: no power figure)")
    tokens_per_usd: Any = key("number", required=True, nullable=True, doc="as runs[].energy (null: no price)")
    on_front: Any = key("boolean", required=True, nullable=True,
                        doc="no point of any policy has as many tokens/s per user and per GPU and more of one "
                            "(null: no tokens/s per user)")


@dataclass(frozen=True, kw_only=True)
class LoadSweep(Record):
    SECTION: ClassVar[str] = "load_sweep"
    tokens_per_s_per_user_basis: Any = key("string", required=True, doc="what tokens/s per user is")
    gpus: Any = key("integer", required=True, doc="GPUs throughput is divided by")
    points: Any = key("array", items="object", item_record=LoadPoint, required=True,
                      doc="every policy at every --sweep-load rate")


@dataclass(frozen=True, kw_only=True)
class SpecDecodeSetting(Record):
    SECTION: ClassVar[str] = "spec_decode"
    draft: Any = key("integer", required=True, doc="draft tokens each decode verifies a step (K)")
    accept: Any = key("array", items="number", required=True,
                      doc="P(0, 1, ..., K drafts accepted): geometric:P expanded, or hist: as given")
    drafter: Any = key("string", required=True, doc="mtp (a one-layer MTP head) or the draft model's id or file")
    tokens_per_step: Any = key("number", required=True, doc="1 + the accepted drafts, the distribution's mean")
    spelled: Any = key("string", required=True, doc="--spec-decode as given")
    drafter_cost: Any = key("string", nullable=False, doc="what the drafter's steps were costed on")


@dataclass(frozen=True, kw_only=True)
class EnginePresetRecord(Record):
    SECTION: ClassVar[str] = "engine_time.preset"
    name: Any = key("string", required=True, doc="the preset, profiles/engines/<name>.toml")
    engine: Any = key("string", required=True, doc="the engine it describes (vLLM, SGLang, TensorRT-LLM)")
    version: Any = key("string", required=True, doc="the engine's version its figures were measured on")
    gpu: Any = key("string", required=True, doc="the GPU its figures were measured on")
    source: Any = key("string", required=True, doc="whose figures, in a few words")
    source_detail: Any = key("string", required=True, doc="the repository, file and commit of its figures")


@dataclass(frozen=True, kw_only=True)
class EngineTimeRecord(Record):
    SECTION: ClassVar[str] = "engine_time"
    engine: Any = key("string", required=True, doc="the engine the answer is for (--engine, or the profile's own "
                                                   "preset when --engine was not typed); none: kernels only")
    whose: Any = key("string", required=True, choices=engine_time.WHOSE,
                     doc="where the engine time of every step comes from: an engine preset, the profile's "
                         "calibrated (fitted) terms, its own given terms, the --overhead-* typed, or none")
    words: Any = key("string", required=True, doc="the same in words, as the table says it")
    preset: Any = key("object", record=EnginePresetRecord, nullable=False,
                      doc="the preset whose terms are used (absent: none is)")


@dataclass(frozen=True, kw_only=True)
class SimulatedPolicy(Record):
    SECTION: ClassVar[str] = "runs[]"
    policy: Any = key("object", record=PolicyRecord, required=True, doc="the policy simulated")
    summary: Any = key("object", record=Summary, required=True, doc="what it gave")
    overhead: Any = key("object", record=Overhead, required=True, nullable=True, doc="engine overhead used")
    kv_blocks_total: Any = key("integer", required=True, nullable=True, doc="KV blocks (null: no block cache)")
    composition_s: Any = key("object", record=Composition, required=True, doc="where the busy time went")
    timeline: Any = key("object", record=Timeline, required=True, doc="binned to at most 200 points")
    capacity: Any = key("object", record=Capacity, required=True, nullable=True, doc="with --slo: the search")
    rates: Any = key("array", items="object", item_record=RatePoint, required=True,
                     doc="--rates and the capacity probes: the throughput-latency curve")
    energy: Any = key("object", record=Energy, nullable=False,
                      doc="tokens per joule and per dollar (absent: written before they were reported)")
    fleet: Any = key("object", record=FleetFigures, nullable=False,
                     doc="a fleet's replicas and how evenly they were loaded (absent: one replica)")


@dataclass(frozen=True, kw_only=True)
class SimulationDocument(Record):
    SECTION: ClassVar[str] = ""
    schema_version: Any = key("integer", required=True, doc="format version (1)")
    kind: Any = key("string", required=True, choices=(simulation_doc.KIND,), doc="what this document is")
    tool: Any = key("object", record=SECTIONS["tool"], required=True, doc="what wrote it (as in a result)")
    created_at: Any = key("string", required=True, doc="UTC ISO-8601 time it was made")
    argv: Any = key("array", items="string", required=True, doc="the command line")
    host: Any = key("object", record=SECTIONS["host"], required=True, doc="the machine (as in a result)")
    profile: Any = key("object", record=ProfileIdentity, required=True, doc="the step profile simulated")
    engine_time: Any = key("object", record=EngineTimeRecord, nullable=False,
                           doc="whose engine time every step carries (absent: written before engine presets)")
    workload: Any = key("object", record=Workload, required=True, doc="the requests: generated, or a trace")
    mem_fraction: Any = key("number", required=True, doc="share of device memory for weights and KV")
    fleet: Any = key("object", record=FleetLayoutRecord, nullable=False,
                     doc="--replicas or --disaggregate: the fleet simulated (absent: one replica)")
    spec_decode: Any = key("object", record=SpecDecodeSetting, nullable=False,
                           doc="--spec-decode: the speculative decoding simulated (absent: none)")
    runs: Any = key("array", items="object", item_record=SimulatedPolicy, required=True, doc="one per policy")
    load_sweep: Any = key("object", record=LoadSweep, nullable=False,
                          doc="--sweep-load: tokens/s per GPU against tokens/s per user, the front marked "
                              "(absent: no sweep)")
