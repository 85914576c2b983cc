"""The serving documents as data: what every key of a step profile, a simulation document and (in
roofline.serving.validation_schema) a validation document holds, declared once as records of the result's key
registry (roofline.result.keys), and the JSON Schema of each generated from those declarations.

The declarations follow the writers key for key, in the order they write them: ``StepProfile.to_dict``,
``roofline.serving.document.simulation_document`` and ``microbench.serving.validate_run.validation_document``.
Tests check that the schemas under docs/ are what ``schema_texts()`` generates, that the key tables of
docs/serving.md are what ``key_tables()`` prints, that a fresh document of each kind and every checked-in one
validates with the ``jsonschema`` package, and that a writer writes no key its declaration lacks (every
record says ``additionalProperties: false``).  Regenerate after changing a declaration:
``python -c "from roofline.serving.schemas import write_schemas; write_schemas()"``.

``tool``, ``host`` and ``device`` are the result's own sections (the same functions write them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from roofline.core.counting import DTYPES
from roofline.result.json_schema import document_schema, key_table, records
from roofline.result.json_schema import shaped_key as key
from roofline.result.keys import Record
from roofline.result.sections import SECTIONS
from roofline.serving import document as simulation_doc
from roofline.serving import profile_doc

DOCS = Path(__file__).resolve().parents[2] / "docs"
POLICY_KINDS = ("static", "continuous", "paged", "chunked")


# --- the step profile -------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ModelShape(Record):
    SECTION: ClassVar[str] = "model"
    name: Any = key("string", required=True, doc="the model's name")
    id: Any = key("string", doc="its profiles/models/*.toml id")
    layers: Any = key("integer", required=True, doc="transformer layers")
    hidden: Any = key("integer", required=True, doc="hidden size")
    heads: Any = key("integer", required=True, doc="attention heads")
    kv_heads: Any = key("integer", required=True, doc="key/value heads (GQA)")
    head_dim: Any = key("integer", required=True, doc="size of one head")
    intermediate: Any = key("integer", required=True, doc="MLP intermediate size")
    vocab: Any = key("integer", required=True, doc="vocabulary size")
    mlp: Any = key("string", required=True, choices=("gated", "plain"), doc="gated (SwiGLU) or plain MLP")
    experts: Any = key("integer", nullable=False, doc="experts (1: dense)")
    tied_embeddings: Any = key("boolean", nullable=False, doc="the LM head shares the embedding's weights")
    max_positions: Any = key("integer", doc="longest sequence the model takes (null: not limited)")
    source: Any = key("string", doc="where the shapes come from")
    dtype_measured: Any = key("string", nullable=False, doc="measured profile: the dtype its kernels ran in")


@dataclass(frozen=True, kw_only=True)
class ProfileMemory(Record):
    SECTION: ClassVar[str] = "memory"
    device_bytes: Any = key("integer", unit="B", required=True, nullable=True,
                            doc="device memory (null: unknown, and paged/chunked refuse to run)")
    weight_bytes: Any = key("integer", unit="B", required=True, doc="the weights of one tensor-parallel rank")
    kv_bytes_per_token: Any = key("integer", unit="B", required=True, doc="KV cache per token, all layers")


@dataclass(frozen=True, kw_only=True)
class ProfileRoof(Record):
    SECTION: ClassVar[str] = "roof"
    bandwidth_bytes_per_s: Any = key("number", unit="B/s", required=True, doc="the memory roof")
    peak_flop_per_s: Any = key("number", unit="FLOP/s", required=True, doc="the compute roof")
    basis: Any = key("string", nullable=False, doc="where both come from")


@dataclass(frozen=True, kw_only=True)
class LinearKernel(Record):
    SECTION: ClassVar[str] = "linears[]"
    name: Any = key("string", required=True, doc="the layer: qkv_proj, o_proj, ...")
    n: Any = key("integer", required=True, doc="output features N of the weight")
    k: Any = key("integer", required=True, doc="input features K of the weight")
    per_layer: Any = key("integer", required=True, doc="instances per transformer layer")
    tokens: Any = key("array", items="integer", required=True, doc="token counts of the grid, increasing")
    time_s: Any = key("array", items="number", unit="s", required=True, doc="one instance's time per token count")


@dataclass(frozen=True, kw_only=True)
class LmHead(Record):
    SECTION: ClassVar[str] = "lm_head"
    n: Any = key("integer", required=True, doc="vocabulary (per rank)")
    k: Any = key("integer", required=True, doc="hidden size")
    tokens: Any = key("array", items="integer", required=True, doc="sequences that take logits in a step")
    time_s: Any = key("array", items="number", unit="s", required=True, doc="time per token count")


@dataclass(frozen=True, kw_only=True)
class DecodeAttention(Record):
    SECTION: ClassVar[str] = "decode_attention"
    kernel: Any = key("string", required=True, doc="sdpa | bmm | roofline")
    batches: Any = key("array", items="integer", required=True, doc="sequences decoding, increasing")
    contexts: Any = key("array", items="integer", required=True, doc="tokens each attends to, increasing")
    time_s: Any = key("array", items="array", cells="number", unit="s", required=True,
                      doc="one layer's time, per context per batch")


@dataclass(frozen=True, kw_only=True)
class PrefillAttention(Record):
    SECTION: ClassVar[str] = "prefill_attention"
    kernel: Any = key("string", nullable=False, doc="the attention kernel (absent: not named)")
    prompt_tokens: Any = key("array", items="integer", required=True, doc="prompt lengths, increasing")
    time_s: Any = key("array", items="number", unit="s", required=True, doc="one layer, one causal prompt")


@dataclass(frozen=True, kw_only=True)
class ChunkAttention(Record):
    SECTION: ClassVar[str] = "chunk_attention"
    kernel: Any = key("string", required=True, doc="the attention kernel")
    chunk_tokens: Any = key("array", items="integer", required=True, doc="chunk lengths, increasing")
    prefix_tokens: Any = key("array", items="integer", required=True, doc="cached prefix lengths, increasing")
    time_s: Any = key("array", items="array", cells="number", unit="s", required=True,
                      doc="one layer's time, per prefix per chunk")


@dataclass(frozen=True, kw_only=True)
class OtherKernels(Record):
    SECTION: ClassVar[str] = "other"
    kernel: Any = key("string", nullable=False, doc="what was timed (absent: not named)")
    tokens: Any = key("array", items="integer", required=True, doc="tokens in the step, increasing")
    time_s: Any = key("array", items="number", unit="s", required=True,
                      doc="norms, rope, activations, sampling: per step, all layers")


@dataclass(frozen=True, kw_only=True)
class Overhead(Record):
    SECTION: ClassVar[str] = "engine_overhead"
    per_step_s: Any = key("number", unit="s", required=True, doc="engine time per step")
    per_sequence_s: Any = key("number", unit="s", nullable=False, doc="per sequence in the step")
    per_cached_token_s: Any = key("number", unit="s", nullable=False,
                                  doc="per cached token the step attends to (older documents: absent, 0)")
    per_prefill_step_s: Any = key("number", unit="s", nullable=False,
                                  doc="once more for a step that runs prefill (older documents: absent, 0)")
    fitted_on: Any = key("string", nullable=False, doc="what it was fitted on, or given")


@dataclass(frozen=True, kw_only=True)
class StepProfileDocument(Record):
    SECTION: ClassVar[str] = ""
    schema_version: Any = key("integer", required=True, doc="format version (1)")
    kind: Any = key("string", required=True, choices=(profile_doc.KIND,), doc="what this document is")
    tool: Any = key("object", record=SECTIONS["tool"], required=True, doc="what wrote it (as in a result)")
    created_at: Any = key("string", required=True, doc="UTC ISO-8601 time it was made (empty: not recorded)")
    argv: Any = key("array", items="string", required=True, doc="the command line")
    host: Any = key("object", record=SECTIONS["host"], required=True, doc="the machine (as in a result)")
    device: Any = key("object", record=SECTIONS["device"], required=True,
                      doc="the device (as in a result; analytic: the spec sheet's name, SKU and memory)")
    source: Any = key("string", required=True, choices=profile_doc.SOURCES, doc="measured or analytic")
    basis: Any = key("string", required=True, doc="how the times were made")
    model: Any = key("object", record=ModelShape, required=True, doc="the model's shapes")
    tp: Any = key("integer", required=True, doc="tensor-parallel ranks")
    dtype: Any = key("string", required=True, choices=DTYPES, doc="weights' and activations' dtype")
    kv_dtype: Any = key("string", required=True, choices=DTYPES, doc="the KV cache's dtype")
    memory: Any = key("object", record=ProfileMemory, required=True, doc="what the KV capacity is made of")
    roof: Any = key("object", record=ProfileRoof, required=True, nullable=True,
                    doc="what compute-bound, MBU and MFU are judged against (null: none)")
    linears: Any = key("array", items="object", item_record=LinearKernel, required=True,
                       doc="every linear layer of a transformer layer")
    lm_head: Any = key("object", record=LmHead, required=True, doc="the logits layer")
    decode_attention: Any = key("object", record=DecodeAttention, required=True, doc="batch x context table")
    prefill_attention: Any = key("object", record=PrefillAttention, required=True, doc="per prompt length")
    chunk_attention: Any = key("object", record=ChunkAttention, required=True, nullable=True,
                               doc="chunk x prefix table (null: from prefill_attention)")
    other: Any = key("object", record=OtherKernels, required=True, nullable=True, doc="the step's other kernels")
    engine_overhead: Any = key("object", record=Overhead, required=True, nullable=True,
                               doc="engine time outside the kernels (null: none)")


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
    kv_dtype: Any = key("string", required=True, choices=DTYPES, doc="its KV cache's dtype")
    memory: Any = key("object", record=ProfileMemory, required=True, doc="the profile's memory")
    roof: Any = key("object", record=ProfileRoof, required=True, nullable=True, doc="the profile's roof")
    device: Any = key("object", record=SECTIONS["device"], required=True, doc="the profile's device")


@dataclass(frozen=True, kw_only=True)
class Workload(Record):
    SECTION: ClassVar[str] = "workload"
    requests: Any = key("integer", nullable=False, doc="generated: how many requests")
    arrivals: Any = key("string", nullable=False, doc="generated: poisson:RATE | burst")
    prompt: Any = key("string", nullable=False, doc="generated: prompt length distribution")
    output: Any = key("string", nullable=False, doc="generated: output length distribution")
    seed: Any = key("integer", nullable=False, doc="generated: the seed")
    trace: Any = key("string", nullable=False, doc="replayed: the trace CSV (then no other key)")


@dataclass(frozen=True, kw_only=True)
class PolicyRecord(Record):
    SECTION: ClassVar[str] = "runs[].policy"
    policy: Any = key("string", required=True, doc="as given: chunked:budget=512, ...")
    kind: Any = key("string", required=True, choices=POLICY_KINDS, doc="the policy")
    max_batch: Any = key("integer", required=True, doc="most sequences in a step")
    block_tokens: Any = key("integer", required=True, nullable=True, doc="KV block size (null: no block cache)")
    budget_tokens: Any = key("integer", nullable=False, doc="chunked: tokens a step holds")


@dataclass(frozen=True, kw_only=True)
class Percentiles(Record):
    SECTION: ClassVar[str] = "runs[].summary.ttft|tpot|e2e"
    p50_s: Any = key("number", unit="s", required=True, nullable=True, doc="median (null: no request has one)")
    p90_s: Any = key("number", unit="s", required=True, nullable=True, doc="90th percentile")
    p99_s: Any = key("number", unit="s", required=True, nullable=True, doc="99th percentile")


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
    e2e: Any = key("object", record=Percentiles, required=True, doc="end-to-end latency")
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
    kv_blocked_step_share: Any = key("number", required=True, doc="steps that refused admission for blocks")
    preemptions: Any = key("integer", required=True, doc="sequences preempted")
    mbu_mean: Any = key("number", required=True, nullable=True, doc="bytes over busy time / roof (null: no roof)")
    mfu_mean: Any = key("number", required=True, nullable=True, doc="FLOP over busy time / roof (null: no roof)")
    padding_waste: Any = key("object", record=PaddingWaste, required=True, doc="static batching's waste")
    slo: Any = key("object", record=SloSummary, nullable=False, doc="with --slo: the checks and goodput")
    binding_limit: Any = key("string", required=True, choices=("kv-cache", "engine-overhead", "compute", "bandwidth"),
                             doc="the limit that binds")
    binding_sentence: Any = key("string", required=True, doc="the sentence naming it")
    warnings: Any = key("array", items="string", required=True, doc="what the run could not model")


@dataclass(frozen=True, kw_only=True)
class Composition(Record):
    SECTION: ClassVar[str] = "runs[].composition_s"
    linear_s: Any = key("number", unit="s", required=True, doc="busy time in linears")
    attention_s: Any = key("number", unit="s", required=True, doc="in attention")
    other_s: Any = key("number", unit="s", required=True, doc="in other kernels")
    overhead_s: Any = key("number", unit="s", required=True, doc="engine overhead")


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
    e2e_p99_s: Any = key("number", unit="s", required=True, doc="end-to-end P99")
    met: Any = key("boolean", nullable=False, doc="a capacity probe: the SLO held")


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
    tried: Any = key("array", items="object", item_record=CapacityProbe, required=True, doc="every rate probed")
    reason: Any = key("string", required=True, doc="why the search stopped where it did (empty: bracketed)")


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
    workload: Any = key("object", record=Workload, required=True, doc="the requests: generated, or a trace")
    mem_fraction: Any = key("number", required=True, doc="share of device memory for weights and KV")
    runs: Any = key("array", items="object", item_record=SimulatedPolicy, required=True, doc="one per policy")


# --- the schemas, their files and the key tables -----------------------------------------------------------
def documents() -> dict[str, tuple[type[Record], str, str]]:
    """name -> (top-level record, schema file under docs/, title), for every serving document."""
    from roofline.serving.validation_schema import VALIDATION_VERSION, ValidationDocument

    return {"step-profile": (StepProfileDocument, "step-profile.schema.json",
                             f"gpubench step profile, schema_version {profile_doc.SCHEMA_VERSION}"),
            "simulation": (SimulationDocument, "simulation.schema.json",
                           f"gpubench simulation document, schema_version {simulation_doc.SCHEMA_VERSION}"),
            "validation": (ValidationDocument, "validation.schema.json",
                           f"gpubench validation document, schema_version {VALIDATION_VERSION}")}


def schema(name: str) -> dict[str, Any]:
    root, file_name, title = documents()[name]
    return document_schema(root, file_name, title, f"the {name} document")


def schema_path(name: str) -> Path:
    return DOCS / documents()[name][1]


def schema_texts() -> dict[str, str]:
    return {name: json.dumps(schema(name), indent=1, ensure_ascii=False) + "\n" for name in documents()}


def write_schemas() -> None:
    """Regenerate docs/step-profile.schema.json, docs/simulation.schema.json and docs/validation.schema.json."""
    for name, text in schema_texts().items():
        schema_path(name).write_text(text, encoding="utf-8")


WRITERS = {"step-profile": "roofline.serving.profile_doc.StepProfile.to_dict (analytic: roofline.serving.analytic; "
                           "measured: microbench.serving.profile_run)",
           "simulation": "roofline.serving.document.simulation_document",
           "validation": "microbench.serving.validate_run.validation_document"}


def document_records(name: str) -> list[type[Record]]:
    """The records docs/serving.md tabulates for document ``name``: its own, each once over all three documents
    (a record two documents share is listed under the first), the result's sections left to result-format.md."""
    seen = set(SECTIONS.values())
    for before in documents():
        if before == name:
            break
        seen |= set(records(documents()[before][0]))
    result_records = set(records())
    return [r for r in records(documents()[name][0]) if r not in seen and r not in result_records]


def key_tables(name: str) -> str:
    """The key tables of docs/serving.md for document ``name`` (paste them under its "Keys")."""
    return "\n".join(key_table(r, {"": WRITERS[name]}) for r in document_records(name))
