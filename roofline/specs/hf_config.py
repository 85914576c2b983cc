"""A model spec from a Hugging Face ``config.json`` on disk (never the network): dense models, mixtures of experts
and DeepSeek's latent attention, read from the keys each family spells its own way.

What a config says that gpubench cannot model is refused in one line naming the key, never modelled silently as
something else (a hybrid state-space layer, an attention kind it does not know).  What it models approximately it
says in the spec's ``notes``:

- mixtures of experts: ``num_local_experts`` (Mixtral, gpt-oss, Llama 4), ``num_experts`` (Qwen3-MoE) or
  ``n_routed_experts`` (DeepSeek-V3, Kimi K2); top-k from ``num_experts_per_tok`` (or gpt-oss's
  ``experts_per_token``); an expert's width from ``moe_intermediate_size`` (else ``intermediate_size``); shared
  experts from ``n_shared_experts`` (DeepSeek), ``shared_expert_intermediate_size`` (Qwen2-MoE) or Llama 4's one
  shared expert; which layers route from ``first_k_dense_replace`` (the first k dense), ``moe_layer_freq``,
  ``interleave_moe_layer_step`` (every n-th layer routes; Llama 4's dense layers are ``intermediate_size_mlp``
  wide), ``decoder_sparse_step`` and ``mlp_only_layers`` (Qwen);
- MLA: ``kv_lora_rank``, ``q_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``;
- local attention: ``layer_types`` of ``sliding_attention`` over ``sliding_window`` tokens (gpt-oss), Mistral's
  ``sliding_window`` on every layer, Llama 4's ``attention_chunk_size`` on three layers of four (costed as a
  window of that size: an upper bound on the keys a chunk attends).

A multimodal config (Llama 4's) nests its language model under ``text_config``: that is what is read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from roofline.specs.gpus import SpecError
from roofline.specs.models import ModelSpec

# No real model has a dimension near this; a bigger one is a typo (1e308 layers) that would overflow the sums.
MAX_DIMENSION = 1 << 31
HF_INTEGERS = {"layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
               "intermediate": "intermediate_size", "vocab": "vocab_size"}
HF_OPTIONAL = {"kv_heads": ("num_key_value_heads",), "head_dim": ("head_dim",),
               "experts": ("num_local_experts", "num_experts", "n_routed_experts"),
               "experts_per_token": ("num_experts_per_tok", "experts_per_token"),
               "moe_intermediate": ("moe_intermediate_size",), "q_lora_rank": ("q_lora_rank",),
               "kv_lora_rank": ("kv_lora_rank",), "qk_rope_head_dim": ("qk_rope_head_dim",),
               "v_head_dim": ("v_head_dim",)}
# Where a config.json says how many positions the model takes: Llama, Mistral, OPT (max_position_embeddings), GPT-2
# (n_positions), MPT (max_seq_len).  Absent: not limited (None), as a model file without max_positions.
HF_MAX_POSITIONS = ("max_position_embeddings", "n_positions", "max_seq_len")
# Keys of layer kinds gpubench does not model: a config that has them is refused rather than modelled as attention.
UNMODELLED_KEYS = {"layers_block_type": "hybrid layers (state-space or linear attention)",
                   "ssm_cfg": "state-space layers", "mamba_d_state": "state-space layers",
                   "linear_attn_config": "linear attention", "full_attn_idxs": "hybrid attention layers",
                   "num_nextn_predict_layers_only": "multi-token prediction only"}
LAYER_TYPES = ("full_attention", "sliding_attention")
# Llama 4: three layers of four use chunked local attention, every fourth global (its no_rope_layers default).
LLAMA4_CHUNKED_SHARE = (3, 4)


def _integer(config: dict, key: str, model: str) -> int:
    """A JSON integer, positive and plausible: 2.5 layers or "256" are refused, never truncated."""
    value = config[key]
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < MAX_DIMENSION:
        raise SpecError(f"model {model}: {key} must be a positive integer below {MAX_DIMENSION}, got {value!r}")
    return value


def _first(config: dict, keys: tuple[str, ...]) -> str | None:
    return next((k for k in keys if config.get(k) is not None), None)


def _fields(config: dict, model: str) -> dict[str, Any]:
    fields: dict[str, Any] = {name: _integer(config, key, model) for name, key in HF_INTEGERS.items()}
    for name, keys in HF_OPTIONAL.items():
        key = _first(config, keys)
        if key is not None:
            fields[name] = _integer(config, key, model)
    fields.setdefault("kv_heads", fields["heads"])
    if config.get("kv_lora_rank") is not None:
        fields.update(_mla(config, model, fields))
    if "head_dim" not in fields:
        if fields["hidden"] % fields["heads"]:
            raise SpecError(f"model {model}: hidden_size {fields['hidden']} is not a multiple of "
                            f"num_attention_heads {fields['heads']} (and no head_dim is given)")
        fields["head_dim"] = fields["hidden"] // fields["heads"]
    if fields.get("experts", 1) > 1:
        fields.update(_moe(config, model, fields))
    else:
        fields.pop("moe_intermediate", None)
    fields.update(_local_attention(config, model, fields["layers"]))
    key = _first(config, HF_MAX_POSITIONS)
    fields["max_positions"] = None if key is None else _integer(config, key, model)
    return fields


def _mla(config: dict, model: str, fields: dict[str, Any]) -> dict[str, Any]:
    """DeepSeek's latent attention: every head's query and key are ``qk_nope_head_dim + qk_rope_head_dim`` wide."""
    for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        if config.get(key) is None:
            raise SpecError(f"model {model}: MLA (kv_lora_rank) without {key}")
    return {"attention": "mla", "head_dim": _integer(config, "qk_nope_head_dim", model) + fields["qk_rope_head_dim"],
            "kv_heads": fields["heads"]}


def _moe(config: dict, model: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Which layers route, and the shared experts."""
    layers = fields["layers"]
    out: dict[str, Any] = {}
    routed = set(range(layers))
    if config.get("first_k_dense_replace"):
        routed -= set(range(_integer(config, "first_k_dense_replace", model)))
    for key in ("moe_layer_freq", "interleave_moe_layer_step", "decoder_sparse_step"):
        if config.get(key) not in (None, 1):
            step = _integer(config, key, model)
            # DeepSeek routes layers 0, step, 2·step, ... (past the dense ones); Llama 4 and Qwen step-1, 2·step-1, ...
            routed = {i for i in routed if (i % step == 0 if key == "moe_layer_freq" else (i + 1) % step == 0)}
    routed -= set(config.get("mlp_only_layers") or ())
    if len(routed) != layers:
        out["moe_layers"] = len(routed)
    if config.get("intermediate_size_mlp") is not None and "moe_intermediate" not in fields:  # Llama 4
        out["moe_intermediate"] = fields["intermediate"]
        out["intermediate"] = _integer(config, "intermediate_size_mlp", model)
    if config.get("n_shared_experts"):
        out["shared_experts"] = _integer(config, "n_shared_experts", model)
    elif config.get("shared_expert_intermediate_size"):
        out["shared_experts"] = 1
        out["shared_intermediate"] = _integer(config, "shared_expert_intermediate_size", model)
    elif config.get("model_type") in ("llama4_text", "llama4"):  # one shared expert per MoE layer, an expert wide
        out["shared_experts"] = 1
    return out


def _local_attention(config: dict, model: str, layers: int) -> dict[str, Any]:
    types = config.get("layer_types")
    if types is not None:
        unknown = sorted({t for t in types if t not in LAYER_TYPES})
        if unknown:
            raise SpecError(f"model {model}: layer_types {', '.join(map(str, unknown))} cannot be modelled yet "
                            f"(gpubench models {' and '.join(LAYER_TYPES)})")
        sliding = sum(t == "sliding_attention" for t in types)
        if sliding:
            return {"sliding_window": _integer(config, "sliding_window", model), "sliding_layers": sliding}
        return {}
    if config.get("attention_chunk_size") is not None:
        share, of = LLAMA4_CHUNKED_SHARE
        return {"sliding_window": _integer(config, "attention_chunk_size", model),
                "sliding_layers": layers * share // of}
    if config.get("sliding_window") is not None and config.get("use_sliding_window", True):
        window = _integer(config, "sliding_window", model)
        limit = config.get("max_window_layers")
        return {"sliding_window": window, "sliding_layers": min(layers, limit) if isinstance(limit, int) else layers}
    return {}


def load_hf_config(path: Path) -> ModelSpec:
    """A model from a Hugging Face ``config.json`` on disk (never the network).

    The model is named by the config itself (``_name_or_path``), else by its file when that is not the plain
    ``config.json`` of a snapshot (whose parent folder is a hash or ``snapshots``, not a name), else by its
    ``model_type``.
    """
    try:
        # utf-8-sig: a byte-order mark some editors write is not JSON, and json.loads refuses it
        config = json.loads(Path(path).read_text(encoding="utf-8-sig"))
    except (OSError, ValueError) as exc:
        raise SpecError(f"{path}: cannot read a config.json ({exc})") from None
    if not isinstance(config, dict):
        raise SpecError(f"{path}: not a config.json object")
    if isinstance(config.get("text_config"), dict):  # a multimodal config: its language model
        config = {**config["text_config"], "_name_or_path": config.get("_name_or_path") or config.get("model_type")}
    stem = Path(path).stem
    name = str(config.get("_name_or_path") or (stem if stem != "config" else None) or config.get("model_type")
               or path)
    model = name if name == str(path) else f"{name} ({path})"
    for key, what in UNMODELLED_KEYS.items():
        if config.get(key):
            raise SpecError(f"model {model}: config.json's {key} ({what}) cannot be modelled yet")
    try:
        fields = _fields(config, model)
    except KeyError as exc:
        raise SpecError(f"model {model}: config.json lacks {exc}") from None
    return ModelSpec(
        id=name, name=name, **fields,
        gated_mlp=config.get("hidden_act", "silu") in ("silu", "swiglu", "gelu_pytorch_tanh") or
        "gate_proj" in json.dumps(config),
        tied_embeddings=bool(config.get("tie_word_embeddings", False)), source=str(path),
    )
