"""What every key of a step profile holds: records of the result's key registry (roofline.result.keys), in the
order ``StepProfile.to_dict`` writes them.  The simulation and validation declarations reuse the model, memory,
roof and overhead records; roofline.serving.schemas.registry turns all three into JSON Schemas.
"""


from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from roofline.core.counting import DTYPES, KV_DTYPES, PLAIN_DTYPES
from roofline.result.json_schema import shaped_key as key
from roofline.result.keys import Record
from roofline.result.sections import SECTIONS
from roofline.serving import profile_doc


@dataclass(frozen=True, kw_only=True)
class IndexerShape(Record):
    SECTION: ClassVar[str] = "model.mixers[].indexer"
    heads: Any = key("integer", required=True, doc="DSA: the indexer's query heads")
    head_dim: Any = key("integer", required=True, doc="DSA: the size of its one fp8 key per cached token")
    topk: Any = key("integer", required=True, doc="DSA: the cached tokens the latent attention keeps per query")


@dataclass(frozen=True, kw_only=True)
class LayerKindShape(Record):
    SECTION: ClassVar[str] = "model.mixers[]|mlps[]"
    kind: Any = key("string", required=True,
                    choices=("attention", "mla", "linear_attention", "mamba2", "dense", "moe"),
                    doc="the layer kind (roofline.specs.layers)")
    layers: Any = key("integer", required=True, doc="the blocks that hold it")
    heads: Any = key("integer", nullable=False, doc="attention, mla, mamba2: heads")
    kv_heads: Any = key("integer", nullable=False, doc="attention: key/value heads")
    head_dim: Any = key("integer", nullable=False, doc="attention, mamba2: one head's size (attention: q and k)")
    v_head_dim: Any = key("integer", nullable=False, doc="attention, mla: one head's value size")
    window: Any = key("integer", nullable=False, doc="attention: the sliding window (absent: every token)")
    output_gate: Any = key("boolean", nullable=False, doc="attention: the queries' projection yields a gate too")
    shared_kv: Any = key("boolean", nullable=False, doc="attention: keys and values from one projection")
    kv_lora_rank: Any = key("integer", nullable=False, doc="mla: the latent cached per token")
    qk_nope_head_dim: Any = key("integer", nullable=False, doc="mla: a head's query/key part without rope")
    qk_rope_head_dim: Any = key("integer", nullable=False, doc="mla: the rope key cached beside the latent")
    q_lora_rank: Any = key("integer", nullable=False, doc="mla: the queries' low rank (absent: none)")
    indexer: Any = key("object", record=IndexerShape, nullable=False, doc="mla: DSA's indexer (absent: dense MLA)")
    key_heads: Any = key("integer", nullable=False, doc="linear_attention: key heads")
    value_heads: Any = key("integer", nullable=False, doc="linear_attention: value heads")
    key_head_dim: Any = key("integer", nullable=False, doc="linear_attention: a key head's size")
    value_head_dim: Any = key("integer", nullable=False, doc="linear_attention: a value head's size")
    conv_kernel: Any = key("integer", nullable=False, doc="linear_attention, mamba2: the short convolution's width")
    state_dtype: Any = key("string", nullable=False, doc="linear_attention, mamba2: the recurrent state's dtype")
    state_size: Any = key("integer", nullable=False, doc="mamba2: the state per head element")
    groups: Any = key("integer", nullable=False, doc="mamba2: B and C groups")
    chunk: Any = key("integer", nullable=False, doc="mamba2: the chunked scan's tokens per chunk")
    intermediate: Any = key("integer", nullable=False, doc="dense: the MLP width")
    gated: Any = key("boolean", nullable=False, doc="dense, moe: gated (SwiGLU) rather than plain")
    experts: Any = key("integer", nullable=False, doc="moe: routed experts")
    topk: Any = key("integer", nullable=False, doc="moe: experts per token")
    expert_intermediate: Any = key("integer", nullable=False, doc="moe: one expert's width")
    shared_width: Any = key("integer", nullable=False, doc="moe: the shared experts' width in all")
    latent: Any = key("integer", nullable=False, doc="moe: a latent MoE's experts' width (absent: the hidden size)")


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
    experts: Any = key("integer", nullable=False, doc="routed experts per MoE layer (1: dense)")
    experts_per_token: Any = key("integer", nullable=False, doc="experts each token is routed to (top-k)")
    tied_embeddings: Any = key("boolean", nullable=False, doc="the LM head shares the embedding's weights")
    max_positions: Any = key("integer", doc="longest sequence the model takes (null: not limited)")
    source: Any = key("string", doc="where the shapes come from")
    attention: Any = key("string", nullable=False, choices=("gqa", "mla"),
                         doc="grouped-query attention, or DeepSeek's multi-head latent attention (absent: gqa)")
    moe_intermediate: Any = key("integer", nullable=False, doc="one routed expert's MLP width (absent: intermediate)")
    shared_experts: Any = key("integer", nullable=False, doc="experts every token also runs (absent: none)")
    shared_intermediate: Any = key("integer", nullable=False, doc="one shared expert's width (absent: an expert's)")
    moe_layers: Any = key("integer", nullable=False,
                          doc="layers that route (absent: every layer of a mixture; the rest are dense)")
    q_lora_rank: Any = key("integer", nullable=False, doc="MLA: the queries' low rank (absent: none)")
    kv_lora_rank: Any = key("integer", nullable=False, doc="MLA: the latent cached per token and layer")
    qk_rope_head_dim: Any = key("integer", nullable=False, doc="MLA: the rope key cached beside the latent")
    v_head_dim: Any = key("integer", nullable=False, doc="MLA: one head's value size")
    sliding_window: Any = key("integer", nullable=False, doc="tokens a sliding-window layer attends over")
    sliding_layers: Any = key("integer", nullable=False, doc="layers with sliding-window attention (absent: none)")
    dtype_measured: Any = key("string", nullable=False, doc="measured profile: the dtype its kernels ran in")
    mixers: Any = key("array", items="object", item_record=LayerKindShape, nullable=False,
                      doc="a hybrid model's mixer kinds, each with the blocks holding it (absent: the fields above "
                          "say them)")
    mlps: Any = key("array", items="object", item_record=LayerKindShape, nullable=False,
                    doc="a hybrid model's MLP kinds, each with the blocks holding it (absent: the fields above)")
    formats: Any = key("object", values="string", nullable=False,
                       doc="the checkpoint's quantization: the dtype of each part not in bf16 (attention, "
                           "linear_attention, mamba2, mlp, experts, shared); absent: dtype's rule")
    kv_format: Any = key("string", nullable=False, doc="the checkpoint's KV cache dtype (absent: none given)")


@dataclass(frozen=True, kw_only=True)
class ProfileMemory(Record):
    SECTION: ClassVar[str] = "memory"
    device_bytes: Any = key("integer", unit="B", required=True, nullable=True,
                            doc="device memory as its driver reports it (analytic: the SKU's nvidia-smi total; "
                                "measured: CUDA's total); null: unknown, and paged/chunked refuse to run")
    weight_bytes: Any = key("integer", unit="B", required=True,
                            doc="the weights of one tensor-parallel rank, each matrix in the dtype it is stored in "
                                "(with a weight-only format's scales and zeros); embeddings aside")
    kv_bytes_per_token: Any = key("integer", unit="B", required=True,
                                  doc="KV cache per token, all layers that keep every token")
    fixed_bytes_per_sequence: Any = key("integer", unit="B", nullable=False,
                                        doc="what one sequence keeps whatever its length: recurrent states and full "
                                            "sliding windows (absent: none)")


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
    layers: Any = key("integer", nullable=False,
                      doc="the layers that have it (absent: every layer; a mixture's dense MLP, router and shared "
                          "experts are in some)")
    source: Any = key("string", nullable=False,
                      doc="where this table's times come from (a reference profile names it per table; absent: the "
                          "profile's basis)")


@dataclass(frozen=True, kw_only=True)
class GroupedKernel(Record):
    SECTION: ClassVar[str] = "grouped[]"
    name: Any = key("string", required=True, doc="experts_gate_up_proj or experts_down_proj")
    n: Any = key("integer", required=True, doc="output features N of one expert's weight")
    k: Any = key("integer", required=True, doc="input features K of one expert's weight")
    experts: Any = key("integer", required=True, doc="the experts one GPU holds")
    topk: Any = key("integer", required=True,
                    doc="experts each row is routed to among them (with expert parallelism 1: one dispatched row)")
    layers: Any = key("integer", required=True, doc="the MoE layers")
    kernel: Any = key("string", required=True, doc="what timed it (roofline: the analytic profile)")
    tokens: Any = key("array", items="integer", required=True, doc="rows given to the GPU's experts, increasing")
    time_s: Any = key("array", items="number", unit="s", required=True, doc="one grouped launch's time per row count")
    source: Any = key("string", nullable=False,
                      doc="where this table's times come from (a reference profile names it per table; absent: the "
                          "profile's basis)")


@dataclass(frozen=True, kw_only=True)
class LmHead(Record):
    SECTION: ClassVar[str] = "lm_head"
    n: Any = key("integer", required=True, doc="vocabulary (per rank)")
    k: Any = key("integer", required=True, doc="hidden size")
    tokens: Any = key("array", items="integer", required=True, doc="sequences that take logits in a step")
    time_s: Any = key("array", items="number", unit="s", required=True, doc="time per token count")
    dtype: Any = key("string", nullable=False, choices=PLAIN_DTYPES,
                     doc="the dtype its weight is stored and timed in: bf16 when dtype is a weight-only format, "
                         "as AWQ/GPTQ checkpoints keep the LM head and embeddings (absent: so)")
    source: Any = key("string", nullable=False,
                      doc="where this table's times come from (a reference profile names it per table; absent: the "
                          "profile's basis)")


@dataclass(frozen=True, kw_only=True)
class DecodeAttention(Record):
    SECTION: ClassVar[str] = "decode_attention"
    kernel: Any = key("string", required=True, doc="sdpa | bmm | roofline")
    batches: Any = key("array", items="integer", required=True, doc="sequences decoding, increasing")
    contexts: Any = key("array", items="integer", required=True, doc="tokens each attends to, increasing")
    time_s: Any = key("array", items="array", cells="number", unit="s", required=True,
                      doc="one layer's time, per context per batch")
    source: Any = key("string", nullable=False,
                      doc="where this table's times come from (a reference profile names it per table; absent: the "
                          "profile's basis)")


@dataclass(frozen=True, kw_only=True)
class PrefillAttention(Record):
    SECTION: ClassVar[str] = "prefill_attention"
    kernel: Any = key("string", nullable=False, doc="the attention kernel (absent: not named)")
    prompt_tokens: Any = key("array", items="integer", required=True, doc="prompt lengths, increasing")
    time_s: Any = key("array", items="number", unit="s", required=True, doc="one layer, one causal prompt")
    source: Any = key("string", nullable=False,
                      doc="where this table's times come from (a reference profile names it per table; absent: the "
                          "profile's basis)")


@dataclass(frozen=True, kw_only=True)
class ChunkAttention(Record):
    SECTION: ClassVar[str] = "chunk_attention"
    kernel: Any = key("string", required=True, doc="the attention kernel")
    chunk_tokens: Any = key("array", items="integer", required=True, doc="chunk lengths, increasing")
    prefix_tokens: Any = key("array", items="integer", required=True, doc="cached prefix lengths, increasing")
    time_s: Any = key("array", items="array", cells="number", unit="s", required=True,
                      doc="one layer's time, per prefix per chunk")
    source: Any = key("string", nullable=False,
                      doc="where this table's times come from (a reference profile names it per table; absent: the "
                          "profile's basis)")


@dataclass(frozen=True, kw_only=True)
class MixerKernels(Record):
    SECTION: ClassVar[str] = "mixers[]"
    name: Any = key("string", required=True,
                    doc="the mixer kind's launch name (linear_attention, mamba2, attention_2, ...)")
    op: Any = key("string", required=True, doc="its op: attention, mla_attention, dsa_attention, linear_attention, "
                                               "mamba2")
    layers: Any = key("integer", required=True, doc="the blocks that hold it")
    decode: Any = key("object", record=DecodeAttention, required=True,
                      doc="one layer's decode step, batch x context (a recurrent kind: one context column)")
    prefill: Any = key("object", record=PrefillAttention, required=True, doc="one layer, one prompt of one sequence")
    chunk: Any = key("object", record=ChunkAttention, required=True, nullable=True,
                     doc="chunk x prefix table (null: from prefill; a recurrent kind's chunk costs its tokens alone)")
    source: Any = key("string", nullable=False, doc="where its times come from (absent: the profile's basis)")


@dataclass(frozen=True, kw_only=True)
class OtherKernels(Record):
    SECTION: ClassVar[str] = "other"
    kernel: Any = key("string", nullable=False,
                      doc="what was timed; roofline: their bytes at the profile's bandwidth (absent: not named)")
    tokens: Any = key("array", items="integer", required=True, doc="tokens in the step, increasing")
    time_s: Any = key("array", items="number", unit="s", required=True,
                      doc="norms, residual adds, rope, activations (measured: and sampling): per step, all layers")
    source: Any = key("string", nullable=False,
                      doc="where this table's times come from (a reference profile names it per table; absent: the "
                          "profile's basis)")


@dataclass(frozen=True, kw_only=True)
class OverheadSource(Record):
    SECTION: ClassVar[str] = "engine_overhead.fitted_from"
    validation: Any = key("string", required=True, doc="the validate.json the overhead was fitted in")
    engine: Any = key("string", required=True, doc="the engine that ran (transformers)")
    engine_version: Any = key("string", required=True, nullable=True, doc="its version (null: unknown)")
    mode: Any = key("string", required=True, choices=("eager", "graphs"), doc="validate's --engine-mode")
    path: Any = key("string", required=True, choices=("static", "continuous"), doc="the engine path fitted")
    policy: Any = key("string", required=True, doc="the simulator policy the path is simulated as")
    calibration: Any = key("string", required=True, doc="the calibration workload the terms were fitted on")


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
    fitted_from: Any = key("object", record=OverheadSource, nullable=False,
                           doc="where validate fitted it (absent: not recorded, or given)")
    preset: Any = key("string", nullable=False,
                      doc="the engine preset the terms were taken from, profiles/engines/<preset>.toml (absent: "
                          "fitted or given); simulate's --engine replaces a preset, never fitted terms")


@dataclass(frozen=True, kw_only=True)
class CommKernels(Record):
    SECTION: ClassVar[str] = "comm"
    ranks: Any = key("integer", required=True, doc="GPUs each all-reduce spans (the profile's tp)")
    per_layer: Any = key("integer", required=True, doc="all-reduces per transformer layer (2: after the attention's "
                                                       "output projection and the MLP's down projection)")
    measured: Any = key("boolean", required=True, doc="timed (true), or a ring all-reduce on a spec sheet's "
                                                      "interconnect (false)")
    source: Any = key("string", required=True, doc="what timed it, or the spec sheet and link it was costed on")
    tokens: Any = key("array", items="integer", required=True, doc="tokens in the step, increasing")
    time_s: Any = key("array", items="number", unit="s", required=True,
                      doc="one all-reduce of tokens x hidden activations, per token count")


@dataclass(frozen=True, kw_only=True)
class PowerByTokens(Record):
    SECTION: ClassVar[str] = "power.by_tokens"
    tokens: Any = key("array", items="integer", required=True, doc="tokens in the step, increasing")
    watts: Any = key("array", items="number", unit="W", required=True,
                     doc="what one GPU drew while the step's linears ran at that many tokens (NVML's power)")


@dataclass(frozen=True, kw_only=True)
class StepPower(Record):
    SECTION: ClassVar[str] = "power"
    watts_per_gpu: Any = key("number", unit="W", required=True, nullable=True,
                             doc="what one GPU draws while a step runs (null: no figure; why_none says why)")
    upper_bound: Any = key("boolean", nullable=False,
                           doc="the step draws at most this (a board's TDP), not this (absent: no figure)")
    basis: Any = key("string", nullable=False, doc="how the figure was found (absent: no figure)")
    source: Any = key("string", nullable=False, doc="where it comes from: the datasheet line (absent: no figure)")
    by_tokens: Any = key("object", record=PowerByTokens, nullable=False,
                         doc="a measured draw by tokens in the step, which simulate charges each step at, "
                             "interpolated in log(tokens) (absent: one figure for every step)")
    why_none: Any = key("string", nullable=False,
                        doc="no figure: why (a CPU has no energy counter gpubench reads; a profile measured without "
                            "--energy reads none; a spec sheet without [power])")


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
                      doc="the device (as in a result; analytic: the spec sheet's name, SKU and reported memory)")
    source: Any = key("string", required=True, choices=profile_doc.SOURCES,
                      doc="measured (here), analytic (a roofline), or reference (a reference database's kernel "
                          "times, each table naming its source)")
    basis: Any = key("string", required=True,
                     doc="how the times were made: analytic, the ceilings of the linears and attention and what they "
                         "are (achievable, or the spec sheet with --ideal, or a sweep's fits) and the other kernels'")
    model: Any = key("object", record=ModelShape, required=True, doc="the model's shapes")
    tp: Any = key("integer", required=True, doc="tensor-parallel ranks")
    dtype: Any = key("string", required=True, choices=DTYPES,
                     doc="weights' and activations' dtype; a weight-only format (w8a16, w4a16) quantizes the layers' "
                         "linears only, with bf16 activations (lm_head.dtype: the LM head's)")
    kv_dtype: Any = key("string", required=True, choices=KV_DTYPES, doc="the KV cache's dtype (a plain dtype)")
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
    comm: Any = key("object", record=CommKernels, nullable=False,
                    doc="the tensor-parallel all-reduces (absent: none costed; TP 1 has none)")
    ep: Any = key("integer", nullable=False, doc="a mixture of experts: expert-parallel GPUs (absent: dense)")
    routing: Any = key("string", nullable=False,
                       doc="a mixture of experts: balanced | uniform | zipf:S | power-law:ALPHA")
    grouped: Any = key("array", items="object", item_record=GroupedKernel, nullable=False,
                       doc="a mixture of experts: each MoE layer's routed experts (absent: dense)")
    all_to_all: Any = key("object", record=CommKernels, nullable=False,
                          doc="expert parallelism's dispatch and combine all-to-alls, per MoE layer (absent: EP 1); "
                              "ranks is the profile's ep")
    power: Any = key("object", record=StepPower, nullable=False,
                     doc="the power simulate charges its busy time at (absent: written before profiles carried one)")
    mixers: Any = key("array", items="object", item_record=MixerKernels, nullable=False,
                      doc="a hybrid model's mixer kinds the attention tables above do not time, one each (absent: "
                          "none)")
