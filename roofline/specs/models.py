"""Model specs: ``profiles/models/<id>.toml`` or a Hugging Face ``config.json`` on disk
(``roofline.specs.hf_config``), dense or a mixture of experts, with GQA or DeepSeek's latent attention (MLA).

What one step of such a model launches (its GEMMs, grouped GEMMs, attention, collectives) is the step model's
(``roofline.step``); this module holds the model's facts and the one record a document keeps of them
(``ModelSpec.to_record``/``from_record``).

In a weight-only format (w8a16, w4a16, mxfp4) or a block-scaled one (fp8-block, nvfp4) the embeddings and the LM
head stay in bf16, as quantized checkpoints keep them (``stored_dtype``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from roofline.core.counting import BLOCK_SCALED_FORMATS, WEIGHT_ONLY_FORMATS, activation_dtype
from roofline.specs.gpus import SpecError, profiles_dir

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
        if self.routed_layers > self.layers or self.sliding_layers > self.layers:
            raise SpecError(f"model {self.id}: more MoE or sliding-window layers than layers")
        if self.sliding_layers and self.sliding_window is None:
            raise SpecError(f"model {self.id}: sliding-window layers without a sliding_window")
        if self.attention not in ("gqa", "mla"):
            raise SpecError(f"model {self.id}: attention must be gqa or mla, got {self.attention!r}")
        if self.attention == "mla" and (self.kv_lora_rank is None or self.qk_rope_head_dim is None
                                        or self.v_head_dim is None):
            raise SpecError(f"model {self.id}: MLA needs kv_lora_rank, qk_rope_head_dim and v_head_dim")

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    @property
    def routed_layers(self) -> int:
        """Layers whose MLP is routed experts."""
        if not self.is_moe:
            return 0
        return self.layers if self.moe_layers is None else self.moe_layers

    @property
    def dense_layers(self) -> int:
        """Layers whose MLP is dense (of ``intermediate``)."""
        return self.layers - self.routed_layers

    @property
    def expert_intermediate(self) -> int:
        return self.moe_intermediate or self.intermediate

    @property
    def shared_width(self) -> int:
        """The shared experts' MLP width in all (0: none)."""
        return self.shared_experts * (self.shared_intermediate or self.expert_intermediate)

    @property
    def kv_values_per_token(self) -> int:
        """Values one token keeps in one layer's cache: K and V of every KV head, or MLA's latent and rope key."""
        if self.attention == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim  # pyright: ignore[reportOperatorIssue]
        return 2 * self.kv_heads * self.head_dim

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
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> ModelSpec:
        """The model a document's record describes (a record of an older document has no MoE or MLA keys: dense)."""
        fields = {k: record[k] for k in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate",
                                          "vocab")}
        extra = {k: record[k] for k in ("experts", "experts_per_token", "tied_embeddings", "max_positions",
                                        "attention") + RECORD_OPTIONAL if record.get(k) is not None}
        return cls(id=str(record.get("id") or record.get("name")), name=str(record.get("name")),
                   gated_mlp=record.get("mlp", "gated") == "gated", source=str(record.get("source", "")),
                   **fields, **extra)

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


def weights_note(dtype: str) -> str | None:
    """What a quantized format stores where, in words (None for a plain dtype: everything in it)."""
    fmt = WEIGHT_ONLY_FORMATS.get(dtype) or BLOCK_SCALED_FORMATS.get(dtype)
    if fmt is None:
        return None
    return (f"{dtype}: the layers' linears hold {fmt.describe()}; the embeddings, the LM head and a router stay "
            f"bf16, as quantized checkpoints keep them")


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
