"""Model specs (``profiles/models/<id>.toml`` or a Hugging Face ``config.json`` on disk) and the
layer shapes one decode step reads, with tensor parallelism.

Per layer, weights stored N×K as ``nn.Linear`` does: qkv (column split), o (row split), gate+up (column
split), down (row split); once per step, lm_head (column split over the vocabulary).  Attention is a
batched GEMV over each sequence's KV cache: per KV head, a context × head_dim matrix for K and one for V.

In a weight-only format (w8a16, w4a16) only the layers' linears are quantized: the embeddings and the LM head
stay in the compute dtype (bf16), as AWQ/GPTQ checkpoints keep them (``LayerShape.weight_dtype``).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from roofline.core.counting import DTYPE_SIZES, WEIGHT_ONLY_FORMATS, compute_dtype, matrix_weight_bytes
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
    experts: int = 1
    experts_per_token: int = 1
    tied_embeddings: bool = False  # the engine side builds the same model (lm_head shares the embedding)
    max_positions: int | None = None  # the context window (OPT: 2048 learned positions); None: not recorded
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "experts",
                     "experts_per_token"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise SpecError(f"model {self.id}: {name} must be a positive integer, got {value!r}")
        if self.heads % self.kv_heads:
            raise SpecError(f"model {self.id}: {self.heads} heads are not a multiple of {self.kv_heads} KV heads")
        if self.experts_per_token > self.experts:
            raise SpecError(f"model {self.id}: more experts per token than experts")
        if self.max_positions is not None and (not isinstance(self.max_positions, int) or self.max_positions <= 0):
            raise SpecError(f"model {self.id}: max_positions must be a positive integer, got {self.max_positions!r}")

    @property
    def mlp(self) -> str:
        """"gated" (SwiGLU: gate, up, down) or "plain" (two matrices, fc1 and fc2, as OPT and GPT-2)."""
        return "gated" if self.gated_mlp else "plain"

    @property
    def group(self) -> int:
        """Query heads per KV head (GQA group size)."""
        return self.heads // self.kv_heads


# The matrices a weight-only format leaves unquantized: AWQ/GPTQ checkpoints quantize the layers' linears only and
# keep the LM head (and the embedding, which is no GEMM of the step) in bf16.
UNQUANTIZED = ("lm_head",)


@dataclass(frozen=True)
class LayerShape:
    """One GEMM of the decode step: ``count`` launches per step of an N×K weight."""

    name: str
    n: int
    k: int
    count: int  # per step: layers (× experts touched for MoE, filled in per batch)
    expert: bool = False  # an MoE expert's matrix: batch and count depend on routing

    def weight_dtype(self, dtype: str) -> str:
        return stored_dtype(self.name, dtype)


def stored_dtype(matrix: str, dtype: str) -> str:
    """The dtype the matrix named ``matrix`` (qkv, ..., lm_head) is stored in when the model is in ``dtype``: a
    weight-only format quantizes the layers' linears and leaves the LM head in its compute dtype (bf16)."""
    return compute_dtype(dtype) if matrix in UNQUANTIZED else dtype


def weights_note(dtype: str) -> str | None:
    """What a weight-only format stores where, in words (None for a plain dtype: everything in it)."""
    fmt = WEIGHT_ONLY_FORMATS.get(dtype)
    if fmt is None:
        return None
    return (f"{dtype}: the layers' linears hold {fmt.describe()}; the embeddings and the LM head stay "
            f"{fmt.compute_dtype}, as AWQ/GPTQ checkpoints keep them")


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


# No real model has a dimension near this; a bigger one is a typo (1e308 layers) that would overflow the sums.
MAX_DIMENSION = 1 << 31
HF_INTEGERS = {"layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
               "intermediate": "intermediate_size", "vocab": "vocab_size"}
HF_OPTIONAL = {"kv_heads": ("num_key_value_heads",), "head_dim": ("head_dim",),
               "experts": ("num_local_experts", "num_experts"), "experts_per_token": ("num_experts_per_tok",)}


def _hf_integer(config: dict, key: str, model: str) -> int:
    """A JSON integer, positive and plausible: 2.5 layers or "256" are refused, never truncated."""
    value = config[key]
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < MAX_DIMENSION:
        raise SpecError(f"model {model}: {key} must be a positive integer below {MAX_DIMENSION}, got {value!r}")
    return value


def _hf_fields(config: dict, model: str) -> dict:
    fields = {name: _hf_integer(config, key, model) for name, key in HF_INTEGERS.items()}
    for name, keys in HF_OPTIONAL.items():
        key = next((k for k in keys if config.get(k) is not None), None)
        if key is not None:
            fields[name] = _hf_integer(config, key, model)
    fields.setdefault("kv_heads", fields["heads"])
    if "head_dim" not in fields:
        if fields["hidden"] % fields["heads"]:
            raise SpecError(f"model {model}: hidden_size {fields['hidden']} is not a multiple of "
                               f"num_attention_heads {fields['heads']} (and no head_dim is given)")
        fields["head_dim"] = fields["hidden"] // fields["heads"]
    return fields


# Where a config.json says how many positions the model takes: Llama, Mistral, OPT (max_position_embeddings), GPT-2
# (n_positions), MPT (max_seq_len).  Absent: not limited (None), as a model file without max_positions.
HF_MAX_POSITIONS = ("max_position_embeddings", "n_positions", "max_seq_len")


def _hf_max_positions(config: dict, model: str) -> int | None:
    key = next((k for k in HF_MAX_POSITIONS if config.get(k) is not None), None)
    return None if key is None else _hf_integer(config, key, model)


def load_hf_config(path: Path) -> ModelSpec:
    """A model from a Hugging Face ``config.json`` on disk (never the network).

    The model is named by the config itself (``_name_or_path``, else ``model_type``), else by the file:
    a snapshot's parent folder is a hash or ``snapshots``, not a name.
    """
    try:
        # utf-8-sig: a byte-order mark some editors write is not JSON, and json.loads refuses it
        config = json.loads(Path(path).read_text(encoding="utf-8-sig"))
    except (OSError, ValueError) as exc:
        raise SpecError(f"{path}: cannot read a config.json ({exc})") from None
    if not isinstance(config, dict):
        raise SpecError(f"{path}: not a config.json object")
    name = str(config.get("_name_or_path") or config.get("model_type") or path)
    model = name if name == str(path) else f"{name} ({path})"
    try:
        fields = _hf_fields(config, model)
    except KeyError as exc:
        raise SpecError(f"model {model}: config.json lacks {exc}") from None
    return ModelSpec(
        id=name, name=name, **fields, max_positions=_hf_max_positions(config, model),
        gated_mlp=config.get("hidden_act", "silu") in ("silu", "swiglu", "gelu_pytorch_tanh") or
        "gate_proj" in json.dumps(config),
        tied_embeddings=bool(config.get("tie_word_embeddings", False)), source=str(path),
    )


def check_tp(model: ModelSpec, tp: int) -> None:
    if tp <= 0:
        raise SpecError("--tp must be a positive integer")
    for what, value in (("attention heads", model.heads), ("KV heads", model.kv_heads),
                        ("intermediate size", model.intermediate)):
        if value % tp:
            raise SpecError(f"--tp {tp} does not divide the {value} {what} of {model.name}")


def past_context_window(name: str, max_positions: int | None, tokens: int) -> str | None:
    """Why one sequence of ``tokens`` cannot run on the model (``"longer than the 8192-token context window of
    X"``), or None: it fits, or the model names no window.  The one rule for simulate's requests and decode's
    --context."""
    if max_positions and tokens > max_positions:
        return f"longer than the {max_positions}-token context window of {name}"
    return None


def per_rank(model: ModelSpec, tp: int) -> ModelSpec:
    """The part of the model one of ``tp`` GPUs holds: heads, KV heads and the MLP split evenly, the
    vocabulary rounded up (the last rank's lm_head shard may be padded)."""
    check_tp(model, tp)
    return replace(model, heads=model.heads // tp, kv_heads=model.kv_heads // tp,
                   intermediate=model.intermediate // tp, vocab=math.ceil(model.vocab / tp))


def layer_shapes(model: ModelSpec, tp: int = 1) -> list[LayerShape]:
    """The GEMMs of one decode step on one of ``tp`` GPUs."""
    check_tp(model, tp)
    q_k_v = (model.heads + 2 * model.kv_heads) * model.head_dim // tp
    mlp_in = (2 if model.gated_mlp else 1) * model.intermediate // tp
    expert = model.experts > 1
    return [
        LayerShape("qkv", q_k_v, model.hidden, model.layers),
        LayerShape("o", model.hidden, model.heads * model.head_dim // tp, model.layers),
        LayerShape("gate_up" if model.gated_mlp else "up", mlp_in, model.hidden, model.layers, expert),
        LayerShape("down", model.hidden, model.intermediate // tp, model.layers, expert),
        LayerShape("lm_head", math.ceil(model.vocab / tp), model.hidden, 1),
    ]


def experts_touched(model: ModelSpec, batch: int) -> float:
    """Expected distinct experts a batch routes to (uniform routing): E·(1 − (1 − k/E)^B)."""
    if model.experts == 1:
        return 1.0
    return model.experts * (1 - (1 - model.experts_per_token / model.experts) ** batch)


def tokens_per_expert(model: ModelSpec, batch: int) -> int:
    """The batch one touched expert's GEMM sees, on average (at least one token)."""
    if model.experts == 1:
        return batch
    return max(1, round(batch * model.experts_per_token / experts_touched(model, batch)))


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str, tp: int = 1) -> int:
    """KV cache per token per sequence on one GPU: K and V, every layer, every KV head (Llama-2-70B fp16: 320 KiB)."""
    return 2 * model.layers * (model.kv_heads // tp) * model.head_dim * DTYPE_SIZES[kv_dtype][0]


def weight_bytes(model: ModelSpec, dtype: str, tp: int = 1) -> int:
    """Bytes of weights on one GPU: all layers' matrices (all experts) and lm_head, each in the dtype it is
    stored in (``LayerShape.weight_dtype``), with a weight-only format's scales and zeros; embeddings aside."""
    total = 0
    for shape in layer_shapes(model, tp):
        matrices = model.experts if shape.expert else 1
        total += matrix_weight_bytes(shape.weight_dtype(dtype), shape.n, shape.k) * shape.count * matrices
    return total
