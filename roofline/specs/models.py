"""Model specs: ``profiles/models/<id>.toml`` or a Hugging Face ``config.json`` on disk
(``roofline.specs.hf_config``), dense or a mixture of experts, with GQA or DeepSeek's latent attention (MLA), or a
hybrid of layer kinds (``roofline.specs.layers``: sliding-window, sparse, linear and state-space mixers).

A model is its blocks' mixers and MLPs, each kind with how many blocks hold it (``mixer_layers``, ``mlp_layers``).
A model file or a plain config gives them through the flat fields (heads, KV heads, ``intermediate``, experts, ...,
``sliding_layers``), from which the kinds are derived; a hybrid config gives them explicitly (``mixers``, ``mlps``),
and its flat fields then describe its main attention and MLP (what an engine built from the spec runs).

What one step of such a model launches (its GEMMs, grouped GEMMs, attention, collectives) is the step model's
(``roofline.step``); this module holds the model's facts and the one record a document keeps of them
(``ModelSpec.to_record``/``from_record``).

In a weight-only format (w8a16, w4a16, mxfp4) or a block-scaled one (fp8-block, nvfp4) the embeddings and the LM
head stay in bf16, as quantized checkpoints keep them (``stored_dtype``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from roofline.core.counting import BLOCK_SCALED_FORMATS, WEIGHT_ONLY_FORMATS, activation_dtype
from roofline.specs.gpus import SpecError, profiles_dir
from roofline.specs.layers import (
    MIXER_KINDS,
    MLP_KINDS,
    Attention,
    DenseMlp,
    LatentAttention,
    MoeMlp,
    counted_from_record,
    counted_record,
    merged,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class ModelSpec:
    id: str
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    gated_mlp: bool = True
    experts: int = 1  # routed experts per MoE layer (1: dense)
    experts_per_token: int = 1  # top-k
    tied_embeddings: bool = False  # the engine side builds the same model (lm_head shares the embedding)
    max_positions: int | None = None  # the context window (OPT: 2048 learned positions); None: not recorded
    source: str = ""
    # Mixture of experts: one routed expert's MLP width (None: ``intermediate``, as Mixtral's), the shared experts
    # every token also runs (DeepSeek's n_shared_experts, Llama 4's one) and their width (None: an expert's), and how
    # many layers route (None: all of them when experts > 1; the rest keep a dense MLP of ``intermediate``).
    moe_intermediate: int | None = None
    shared_experts: int = 0
    shared_intermediate: int | None = None
    moe_layers: int | None = None
    # Attention: "gqa" (grouped-query, MHA and MQA its cases) or "mla" (DeepSeek's multi-head latent attention: a
    # latent of kv_lora_rank values plus a shared rope key of qk_rope_head_dim per token; queries through a
    # q_lora_rank bottleneck when given; head_dim is then qk_nope_head_dim + qk_rope_head_dim).
    attention: str = "gqa"
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    # Local attention: ``sliding_layers`` of the layers attend over the last ``sliding_window`` tokens only.
    sliding_window: int | None = None
    sliding_layers: int = 0
    # The layer kinds, explicit (a hybrid config's): (kind, blocks holding it).  Empty: derived from the fields
    # above (``mixer_layers``, ``mlp_layers``).
    mixers: tuple = ()
    mlps: tuple = ()
    # The checkpoint's own quantization (``roofline.specs.quantization``): (part, dtype) for the parts not in bf16,
    # and its KV cache's dtype; a step in a ``--dtype`` of the user's drops them (``with_dtype``).
    formats: tuple[tuple[str, str], ...] = ()
    kv_format: str | None = None
    # What the spec says beside its kinds, in words (approximations, what a config left unread and why).
    notes: tuple[str, ...] = ()

    POSITIVE = ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "experts",
                "experts_per_token")
    OPTIONAL_POSITIVE = ("max_positions", "moe_intermediate", "shared_intermediate", "q_lora_rank", "kv_lora_rank",
                         "qk_rope_head_dim", "v_head_dim", "sliding_window")

    def __post_init__(self) -> None:
        for name in self.POSITIVE:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise SpecError(f"model {self.id}: {name} must be a positive integer, got {value!r}")
        for name in self.OPTIONAL_POSITIVE:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise SpecError(f"model {self.id}: {name} must be a positive integer, got {value!r}")
        for name in ("shared_experts", "sliding_layers") + (("moe_layers",) if self.moe_layers is not None else ()):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SpecError(f"model {self.id}: {name} must be a non-negative integer, got {value!r}")
        if self.heads % self.kv_heads:
            raise SpecError(f"model {self.id}: {self.heads} heads are not a multiple of {self.kv_heads} KV heads")
        if self.experts_per_token > self.experts:
            raise SpecError(f"model {self.id}: more experts per token than experts")
        if self._legacy_routed_layers > self.layers or self.sliding_layers > self.layers:
            raise SpecError(f"model {self.id}: more MoE or sliding-window layers than layers")
        if self.sliding_layers and self.sliding_window is None:
            raise SpecError(f"model {self.id}: sliding-window layers without a sliding_window")
        if self.attention not in ("gqa", "mla"):
            raise SpecError(f"model {self.id}: attention must be gqa or mla, got {self.attention!r}")
        if self.attention == "mla" and (self.kv_lora_rank is None or self.qk_rope_head_dim is None
                                        or self.v_head_dim is None):
            raise SpecError(f"model {self.id}: MLA needs kv_lora_rank, qk_rope_head_dim and v_head_dim")
        if self.attention == "mla" and self.sliding_layers and not self.mixers:
            raise SpecError(f"model {self.id}: sliding-window MLA layers cannot be modelled")
        for what, counted, kinds in (("mixers", self.mixers, MIXER_KINDS), ("mlps", self.mlps, MLP_KINDS)):
            if not isinstance(counted, tuple) or any(
                    not isinstance(pair, tuple) or len(pair) != 2 or type(pair[0]) not in kinds.values()
                    or not isinstance(pair[1], int) or pair[1] <= 0 for pair in counted):
                raise SpecError(f"model {self.id}: {what} must be (layer kind, blocks) pairs")
        if sum(c for _, c in self.mixer_layers) > self.layers or sum(c for _, c in self.mlp_layers) > self.layers:
            raise SpecError(f"model {self.id}: more mixers or MLPs than its {self.layers} blocks")
        if len({m for m, _ in self.mlp_layers if isinstance(m, MoeMlp)}) > 1:
            raise SpecError(f"model {self.id}: MoE layers of more than one shape cannot be modelled")
        moe = self.moe
        if self.mlps and (moe is not None) != (self.experts > 1) or moe is not None and (
                (self.experts, self.experts_per_token) != (moe.experts, moe.topk)):
            raise SpecError(f"model {self.id}: experts and experts_per_token must be its MoE layers'")

    @property
    def _legacy_routed_layers(self) -> int:
        if self.experts <= 1:
            return 0
        return self.layers if self.moe_layers is None else self.moe_layers

    @cached_property
    def mixer_layers(self) -> tuple[tuple[Any, int], ...]:
        """Each mixer kind and the blocks that hold it: the explicit ``mixers``, else the flat fields' attention
        (its full and its sliding-window layers)."""
        if self.mixers:
            return merged(list(self.mixers))
        if self.attention == "mla":
            rope = self.qk_rope_head_dim or 0
            main: Any = LatentAttention(self.heads, self.kv_lora_rank or 0, self.head_dim - rope, rope,
                                        self.v_head_dim or 0, self.q_lora_rank)
        else:
            main = Attention(self.heads, self.kv_heads, self.head_dim)
        local = [(replace(main, window=self.sliding_window), self.sliding_layers)] if self.sliding_layers else []
        return merged([(main, self.layers - self.sliding_layers), *local])

    @cached_property
    def mlp_layers(self) -> tuple[tuple[Any, int], ...]:
        """Each MLP kind and the blocks that hold it: the explicit ``mlps``, else the flat fields' dense MLP and
        routed experts."""
        if self.mlps:
            return merged(list(self.mlps))
        routed = self._legacy_routed_layers
        out: list[tuple[Any, int]] = [(DenseMlp(self.intermediate, self.gated_mlp), self.layers - routed)]
        if routed:
            width = self.moe_intermediate or self.intermediate
            shared = self.shared_experts * (self.shared_intermediate or width)
            out.append((MoeMlp(self.experts, self.experts_per_token, width, shared, self.gated_mlp), routed))
        return merged(out)

    @property
    def moe(self) -> MoeMlp | None:
        """The routed-experts MLP (None: dense)."""
        return next((m for m, _ in self.mlp_layers if isinstance(m, MoeMlp)), None)

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def routed_layers(self) -> int:
        """Blocks whose MLP is routed experts."""
        return sum(c for m, c in self.mlp_layers if isinstance(m, MoeMlp))

    @property
    def dense_layers(self) -> int:
        """Blocks whose MLP is dense."""
        return sum(c for m, c in self.mlp_layers if isinstance(m, DenseMlp))

    @property
    def expert_intermediate(self) -> int:
        moe = self.moe
        return moe.expert_intermediate if moe else (self.moe_intermediate or self.intermediate)

    @property
    def shared_width(self) -> int:
        """The shared experts' MLP width in all (0: none)."""
        moe = self.moe
        return moe.shared_width if moe else 0

    @property
    def hybrid(self) -> bool:
        """Whether the spec names its layer kinds itself (a hybrid config) rather than through the flat fields."""
        return bool(self.mixers or self.mlps)

    def describe_layers(self) -> str:
        """The blocks' kinds in words: ``60 blocks: 45 linear attention (...), 15 attention (...); 60 MoE (...)``."""
        mixers = ", ".join(f"{c} {k.label}" for k, c in self.mixer_layers)
        mlps = ", ".join(f"{c} {k.label}" for k, c in self.mlp_layers)
        return f"{self.layers} blocks: {mixers}; {mlps}"

    def to_record(self) -> dict[str, Any]:
        """What a document keeps of the model (a step profile's ``model``): every field that shapes a step, so the
        simulator rebuilds the same step model from it (``from_record``)."""
        record = {"name": self.name, "id": self.id, "layers": self.layers, "hidden": self.hidden,
                  "heads": self.heads, "kv_heads": self.kv_heads, "head_dim": self.head_dim,
                  "intermediate": self.intermediate, "vocab": self.vocab, "mlp": self.mlp, "experts": self.experts,
                  "experts_per_token": self.experts_per_token, "tied_embeddings": self.tied_embeddings,
                  "max_positions": self.max_positions, "source": self.source, "attention": self.attention}
        for name in RECORD_OPTIONAL:
            value = getattr(self, name)
            if value not in (None, 0):
                record[name] = value
        if self.mixers:
            record["mixers"] = counted_record(self.mixers)
        if self.mlps:
            record["mlps"] = counted_record(self.mlps)
        if self.formats:
            record["formats"] = dict(self.formats)
        if self.kv_format:
            record["kv_format"] = self.kv_format
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> ModelSpec:
        """The model a document's record describes (a record of an older document has no MoE or MLA keys: dense)."""
        fields = {k: record[k] for k in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate",
                                          "vocab")}
        extra = {k: record[k] for k in ("experts", "experts_per_token", "tied_embeddings", "max_positions",
                                        "attention") + RECORD_OPTIONAL if record.get(k) is not None}
        kinds = {}
        if record.get("mixers") is not None:
            kinds["mixers"] = counted_from_record(record["mixers"], MIXER_KINDS, "model.mixers")
        if record.get("mlps") is not None:
            kinds["mlps"] = counted_from_record(record["mlps"], MLP_KINDS, "model.mlps")
        if record.get("formats") is not None:
            formats = record["formats"]
            if not isinstance(formats, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                        for k, v in formats.items()):
                raise SpecError("model.formats must map parts to dtypes")
            kinds["formats"] = tuple(sorted(formats.items()))
        if record.get("kv_format") is not None:
            kinds["kv_format"] = str(record["kv_format"])
        return cls(id=str(record.get("id") or record.get("name")), name=str(record.get("name")),
                   gated_mlp=record.get("mlp", "gated") == "gated", source=str(record.get("source", "")),
                   **fields, **extra, **kinds)

    @property
    def mlp(self) -> str:
        """"gated" (SwiGLU: gate, up, down) or "plain" (two matrices, fc1 and fc2, as OPT and GPT-2)."""
        return "gated" if self.gated_mlp else "plain"

    @property
    def group(self) -> int:
        """Query heads per KV head (GQA group size)."""
        return self.heads // self.kv_heads


# The optional fields a record keeps only when set (a dense GQA model's record is the one it always was).
RECORD_OPTIONAL = ("moe_intermediate", "shared_experts", "shared_intermediate", "moe_layers", "q_lora_rank",
                   "kv_lora_rank", "qk_rope_head_dim", "v_head_dim", "sliding_window", "sliding_layers")


# The matrices a quantized format leaves unquantized: AWQ/GPTQ and fp8 checkpoints quantize the layers' linears only
# and keep the LM head (and the embedding, which is no GEMM of the step) and a mixture's router in bf16.
UNQUANTIZED = ("lm_head", "router")


def stored_dtype(matrix: str, dtype: str) -> str:
    """The dtype the matrix named ``matrix`` (qkv_proj, ..., lm_head) is stored in when the model is in ``dtype``: a
    quantized format (weight-only or block-scaled) leaves the LM head in the activations' dtype (bf16)."""
    quantized = dtype in WEIGHT_ONLY_FORMATS or dtype in BLOCK_SCALED_FORMATS
    return activation_dtype(dtype) if matrix in UNQUANTIZED and quantized else dtype


def weights_note(dtype: str, formats: tuple[tuple[str, str], ...] = ()) -> str | None:
    """What a quantized format (or a checkpoint's formats) stores where, in words (None: everything in a plain
    dtype)."""
    if formats:
        held = "; ".join(f"{part}: {fmt}" for part, fmt in formats)
        return f"the checkpoint's quantization_config: {held}; the rest, the LM head and the router bf16"
    fmt = WEIGHT_ONLY_FORMATS.get(dtype) or BLOCK_SCALED_FORMATS.get(dtype)
    if fmt is None:
        return None
    return (f"{dtype}: the layers' linears hold {fmt.describe()}; the embeddings, the LM head and a router stay "
            f"bf16, as quantized checkpoints keep them")


def checkpoint_dtype(model: ModelSpec) -> str:
    """The dtype a model's own checkpoint is named by: its routed experts' format, else its attention's, else its
    MLPs', else bf16 (``formats`` says what each part holds)."""
    formats = dict(model.formats)
    return next((formats[p] for p in ("experts", "attention", "mlp", "linear_attention", "mamba2", "shared")
                 if p in formats), "bf16")


def in_dtype(model: ModelSpec, dtype: str | None) -> tuple[ModelSpec, str, str | None]:
    """The model as a step runs it at ``--dtype`` (None: not given): its checkpoint's own formats where none is
    given; every matrix in ``dtype`` where one is, said in a note when that replaces the checkpoint's.  Returns
    (model, dtype, note)."""
    if dtype is None:
        return model, checkpoint_dtype(model), None
    if not model.formats and not model.kv_format:
        return model, dtype, None
    own = ", ".join(f"{part} {fmt}" for part, fmt in model.formats) or "its KV cache " + str(model.kv_format)
    note = f"--dtype {dtype} replaces the checkpoint's quantization ({own})"
    return replace(model, formats=(), kv_format=None), dtype, note


def step_formats(model: ModelSpec, dtype: str | None, kv_dtype: str | None
                 ) -> tuple[ModelSpec, str, str, str | None]:
    """``in_dtype`` and the KV cache's dtype: ``--kv-dtype``, else the checkpoint's (a ModelOpt FP8 KV cache) where
    its formats are kept, else what the linears write.  Returns (model, dtype, kv_dtype, note)."""
    model, resolved, note = in_dtype(model, dtype)
    return model, resolved, kv_dtype or model.kv_format or activation_dtype(resolved), note


def load_model(model_id: str) -> ModelSpec:
    path = profiles_dir() / "models" / f"{model_id}.toml"
    if not path.exists():
        known = sorted(p.stem for p in (profiles_dir() / "models").glob("*.toml"))
        raise SpecError(f"unknown model {model_id!r}; known: {', '.join(known)} (or --hf-config PATH)")
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    fields = {k: data[k] for k in ModelSpec.__dataclass_fields__ if k in data and k != "id"}
    try:
        return ModelSpec(id=model_id, **fields)
    except TypeError as exc:
        raise SpecError(f"model {model_id}: {exc}") from None


def past_context_window(name: str, max_positions: int | None, tokens: int) -> str | None:
    """Why one sequence of ``tokens`` cannot run on the model (``"longer than the 8192-token context window of
    X"``), or None: it fits, or the model names no window.  The one rule for simulate's requests and decode's
    --context."""
    if max_positions and tokens > max_positions:
        return f"longer than the {max_positions}-token context window of {name}"
    return None
