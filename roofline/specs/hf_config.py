"""A model spec from a Hugging Face ``config.json`` on disk (never the network), read whole or refused.

Every key of the config is either read here, known not to change the step, or refused in one line naming it and
what it would change (``roofline.specs.hf_keys``); the refusal names the first real reason, before any key the
reader would need after it.  What a config models approximately is said in the spec's ``notes``.

The blocks' kinds (``roofline.specs.layers``), from whichever form the config gives them:

- mixers: ``layer_types`` (``full_attention``, ``sliding_attention``, ``linear_attention``: Qwen3-Next, Qwen3.5,
  gpt-oss, gemma), Nemotron-H's ``hybrid_override_pattern`` (``M`` Mamba-2, ``*`` attention, ``E`` an MoE block,
  ``-`` an MLP block), MiMo's ``hybrid_layer_pattern`` (1: sliding window), Llama 4's ``attention_chunk_size`` on
  three layers of four (costed as a window of that size: an upper bound on the keys a chunk attends), Mistral's
  ``sliding_window`` on every layer, Qwen2's past ``max_window_layers``;
- attention shapes: GQA (``head_dim`` and MiMo's ``v_head_dim``; a local layer's own ``swa_*`` heads; gemma 4's
  global layers' ``global_head_dim``, ``num_global_key_value_heads`` and ``attention_k_eq_v``; Qwen3.5's
  ``attn_output_gate``), MLA (``kv_lora_rank``, ``q_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``,
  ``v_head_dim``) and with ``index_topk`` DSA's indexer (``index_n_heads``, ``index_head_dim``); Gated DeltaNet
  (``linear_*``) and Mamba-2 (``mamba_*``, ``ssm_state_size``, ``n_groups``, ``conv_kernel``);
- MLPs: experts from ``num_local_experts``, ``num_experts`` or ``n_routed_experts``, top-k from
  ``num_experts_per_tok``, ``experts_per_token`` or gemma's ``top_k_experts``; which blocks route from
  ``first_k_dense_replace``, ``moe_layer_freq`` (an interval, or a list of 0/1 per layer),
  ``interleave_moe_layer_step``, ``decoder_sparse_step``, ``mlp_only_layers`` and Nemotron's pattern; shared
  experts from ``n_shared_experts``,
  ``shared_expert_intermediate_size``, ``moe_shared_expert_intermediate_size`` or Llama 4's one; gemma 4's dense
  MLP beside its experts (``enable_moe_block``) as an always-on shared expert of ``intermediate_size``; Nemotron's
  latent MoE (``moe_latent_size``); a plain (ungated) MLP for ReLU² (``relu2``) and GELU activations.

A multimodal config (Llama 4's, gemma 4's, Qwen3.5's, Kimi-K2.5's) nests its language model under ``text_config``:
that is what is read; its own keys beside it must be known not to change the step.  The checkpoint's quantization
(``quantization_config``, or ModelOpt's ``hf_quant_config.json`` beside the file) is read by
``roofline.specs.quantization``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from roofline.core.jsonfile import read_json_file
from roofline.specs.gpus import SpecError
from roofline.specs.hf_keys import top_level_reason, unread_reason
from roofline.specs.layers import Attention, DenseMlp, Indexer, LatentAttention, LinearAttention, Mamba2, MoeMlp
from roofline.specs.models import ModelSpec

# No real model has a dimension near this; a bigger one is a typo (1e308) that would overflow the sums.
MAX_DIMENSION = 1 << 31
# No real model has this many blocks (the deepest served in 2026 have under 100); more is a typo that would build
# per-block lists of gigabytes.
MAX_LAYERS = 4096
# A config.json is a few kilobytes (Qwen3.5's, with its layer list, 4 KB): a file larger than this is not one.
MAX_CONFIG_BYTES = 4 << 20
MAX_NAME = 200
HF_MAX_POSITIONS = ("max_position_embeddings", "n_positions", "max_seq_len")
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
TOPK_KEYS = ("num_experts_per_tok", "experts_per_token", "top_k_experts")
GATED_ACTIVATIONS = ("silu", "swiglu", "gelu_pytorch_tanh")
PLAIN_ACTIVATIONS = ("relu2", "gelu", "gelu_new", "relu")
# Llama 4: three layers of four use chunked local attention, every fourth global (its no_rope_layers default).
LLAMA4_CHUNKED_SHARE = (3, 4)
NEMOTRON_BLOCKS = {"M": "mamba", "*": "attention", "E": "moe", "-": "mlp"}
STATE_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


class _Config:
    """The language model's config, read key by key with one-line refusals naming the model."""

    def __init__(self, data: dict[str, Any], model: str):
        self.data, self.model = data, model

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def refuse(self, words: str) -> SpecError:
        return SpecError(f"model {self.model}: {words}")

    def integer(self, key: str, default: int | None = None) -> int:
        """A JSON integer, positive and plausible: 2.5 layers or "256" are refused, never truncated."""
        value = self.data.get(key)
        if value is None:
            if default is None:
                raise self.refuse(f"config.json lacks {key!r}")
            return default
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < MAX_DIMENSION:
            raise self.refuse(f"{key} must be a positive integer below {MAX_DIMENSION}, got {value!r}")
        return value

    def first(self, keys: tuple[str, ...]) -> str | None:
        return next((k for k in keys if self.data.get(k) is not None), None)

    def flag(self, key: str) -> bool:
        value = self.data.get(key, False)
        if value is not None and not isinstance(value, bool):
            raise self.refuse(f"{key} must be true or false, got {value!r}")
        return bool(value)

    def sequence(self, key: str, length: int, allowed: tuple | None = None) -> list:
        """A per-layer list (or string) of ``length`` items, each one of ``allowed``."""
        value = self.data.get(key)
        if not isinstance(value, (list, str)) or len(value) != length:
            raise self.refuse(f"{key} must be a list of one entry per layer ({length}), got {_short(value)}")
        if allowed is not None:
            wrong = sorted({repr(v) for v in value if isinstance(v, (list, dict)) or v not in allowed})
            if wrong:
                raise self.refuse(f"{key} holds {', '.join(wrong[:3])}: gpubench reads "
                                  f"{', '.join(map(repr, allowed))} (another kind cannot be modelled yet)")
        return list(value)

    def indices(self, key: str, layers: int) -> set[int]:
        value = self.data.get(key) or []
        if not isinstance(value, list) or any(not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < layers
                                              for i in value):
            raise self.refuse(f"{key} must be a list of layer indices below {layers}, got {_short(value)}")
        return set(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _read(path: Path) -> dict[str, Any]:
    """The config.json object at ``path``: a file of at most ``MAX_CONFIG_BYTES``, nested no deeper than any config
    is (``roofline.core.jsonfile``), else one line."""
    config = read_json_file(path, max_bytes=MAX_CONFIG_BYTES)
    if not isinstance(config, dict):
        raise SpecError(f"{path}: not a config.json object")
    return config


def _name(config: dict[str, Any], path: Path) -> str:
    stem = Path(path).stem
    name = config.get("_name_or_path") or (stem if stem != "config" else None) or config.get("model_type") or path
    name = str(name)
    return name if len(name) <= MAX_NAME else name[:MAX_NAME - 3] + "..."


def load_hf_config(path: Path) -> ModelSpec:
    """A model from a Hugging Face ``config.json`` on disk (never the network).

    The model is named by the config itself (``_name_or_path``), else by its file when that is not the plain
    ``config.json`` of a snapshot (whose parent folder is a hash or ``snapshots``, not a name), else by its
    ``model_type``.
    """
    from roofline.specs.quantization import checkpoint_formats

    outer = _read(path)
    inner = outer.get("text_config")
    config = dict(inner) if isinstance(inner, dict) else outer
    if isinstance(inner, dict) and outer.get("_name_or_path"):
        config.setdefault("_name_or_path", outer["_name_or_path"])
    name = _name(config, path)
    model = name if name == str(path) else f"{name} ({path})"
    c = _Config(config, model)
    if isinstance(inner, dict):
        for key in sorted(outer):
            why = top_level_reason(key)
            if why is not None:
                raise c.refuse(f"config.json's {why}")
    for key in sorted(config):
        why = unread_reason(key, config[key])
        if why is not None:
            raise c.refuse(f"config.json's {why}")
    tied = outer.get("tie_word_embeddings", config.get("tie_word_embeddings", False))
    if not isinstance(tied, bool):
        raise c.refuse(f"tie_word_embeddings must be true or false, got {_short(tied)}")
    spec, blocks = _spec(c, name, path, tied)
    formats = checkpoint_formats(c, outer, Path(path), blocks, bool(spec.shared_width))
    return replace(spec, formats=formats.parts, kv_format=formats.kv, notes=spec.notes + formats.notes) \
        if formats is not None else spec


def _spec(c: _Config, name: str, path: Path, tied: bool) -> tuple[ModelSpec, list[tuple[str, str]]]:
    layers = c.integer("num_hidden_layers")
    if layers > MAX_LAYERS:
        raise c.refuse(f"num_hidden_layers {layers} is not a model's (at most {MAX_LAYERS} blocks)")
    hidden, heads = c.integer("hidden_size"), c.integer("num_attention_heads")
    blocks = _blocks(c, layers)  # each block's (mixer kind, MLP kind) names, refused first if unknown
    notes: list[str] = []
    mixers = [_mixer(c, kind, hidden, heads, notes) for kind, _ in blocks]
    moe = _moe(c, notes) if any(mlp == "moe" for _, mlp in blocks) else None
    dense = None
    if any(mlp == "dense" for _, mlp in blocks):  # Llama 4's dense layers: intermediate_size_mlp wide
        width_key = "intermediate_size_mlp" if c.has("intermediate_size_mlp") else "intermediate_size"
        dense = DenseMlp(c.integer(width_key), _gated(c, "dense"))
    mlps = [moe if mlp == "moe" else dense if mlp == "dense" else None for _, mlp in blocks]
    if moe is not None and c.flag("enable_moe_block"):  # gemma 4: a dense MLP beside the experts in each block
        moe = replace(moe, shared_width=moe.shared_width + c.integer("intermediate_size"))
        mlps = [moe if m is not None else None for m in mlps]
        notes.append("gemma 4's dense MLP beside its experts is costed as an always-on shared expert")
    counted_mixers = _counted(mixers)
    counted_mlps = _counted(mlps)
    main = next((m for m, _ in counted_mixers if isinstance(m, (Attention, LatentAttention)) and
                 getattr(m, "window", None) is None), None) or next(
        (m for m, _ in counted_mixers if isinstance(m, (Attention, LatentAttention))), None)
    if main is None:
        raise c.refuse("no attention layer: a model of recurrent layers alone cannot be modelled yet")
    flat = _flat_fields(c, main, moe, dense, hidden, heads, layers, counted_mixers, counted_mlps)
    key = c.first(HF_MAX_POSITIONS)
    spec = ModelSpec(id=name, name=name, layers=layers, hidden=hidden, vocab=c.integer("vocab_size"),
                     tied_embeddings=tied, source=str(path), max_positions=None if key is None else c.integer(key),
                     gated_mlp=(dense or moe).gated if (dense or moe) else True, notes=tuple(notes), **flat)
    explicit = replace(spec, mixers=counted_mixers, mlps=counted_mlps)
    # A model the flat fields describe exactly keeps the record it always had; a hybrid names its kinds.
    same = (dict(spec.mixer_layers), dict(spec.mlp_layers)) == (dict(explicit.mixer_layers), dict(explicit.mlp_layers))
    return (spec if same else explicit), blocks


def _counted(kinds: list) -> tuple:
    out: dict[Any, int] = {}
    for kind in kinds:
        if kind is not None:
            out[kind] = out.get(kind, 0) + 1
    return tuple(out.items())


def _blocks(c: _Config, layers: int) -> list[tuple[str, str]]:
    """Each block's mixer ("attention", "sliding", "chunked", "linear", "mamba" or "") and MLP ("dense", "moe" or
    "")."""
    if c.has("hybrid_override_pattern"):
        pattern = c.sequence("hybrid_override_pattern", layers, tuple(NEMOTRON_BLOCKS))
        kinds = [NEMOTRON_BLOCKS[ch] for ch in pattern]
        return [("mamba" if k == "mamba" else "attention" if k == "attention" else "",
                 "moe" if k == "moe" else "dense" if k == "mlp" else "") for k in kinds]
    mixers = _mixer_kinds(c, layers)
    routed = _routed_blocks(c, layers)
    return [(mixer, "moe" if i in routed else "dense") for i, mixer in enumerate(mixers)]


def _mixer_kinds(c: _Config, layers: int) -> list[str]:
    if c.has("layer_types"):
        names = {"full_attention": "attention", "sliding_attention": "sliding", "linear_attention": "linear"}
        return [names[t] for t in c.sequence("layer_types", layers, tuple(names))]
    if c.has("hybrid_layer_pattern"):
        return ["sliding" if v else "attention" for v in c.sequence("hybrid_layer_pattern", layers, (0, 1))]
    if c.has("attention_chunk_size"):
        share, of = LLAMA4_CHUNKED_SHARE
        chunked = layers * share // of
        return ["chunked"] * chunked + ["attention"] * (layers - chunked)
    if c.has("sliding_window") and c.data.get("use_sliding_window", True):
        limit = c.data.get("max_window_layers")
        if limit is not None and "use_sliding_window" in c.data:  # Qwen2's: the layers from max_window_layers on
            first = c.integer("max_window_layers")
            return ["attention" if i < first else "sliding" for i in range(layers)]
        return ["sliding"] * layers
    return ["attention"] * layers


def _routed_blocks(c: _Config, layers: int) -> set[int]:
    """The blocks whose MLP is routed experts."""
    if c.first(EXPERT_KEYS) is None or c.integer(c.first(EXPERT_KEYS) or "") <= 1:
        return set()
    routed = set(range(layers))
    if c.has("first_k_dense_replace"):
        first = c.integer("first_k_dense_replace")
        if first >= layers:
            raise c.refuse(f"first_k_dense_replace {first} leaves none of its {layers} layers routed: not a mixture "
                           "of experts")
        routed -= set(range(first))
    frequency = c.data.get("moe_layer_freq")
    if isinstance(frequency, list):  # MiMo: 1 where the layer routes
        routed &= {i for i, v in enumerate(c.sequence("moe_layer_freq", layers, (0, 1))) if v}
    elif frequency not in (None, 1):
        step = c.integer("moe_layer_freq")
        routed = {i for i in routed if i % step == 0}  # DeepSeek: layers 0, step, 2·step, ... past the dense ones
    for key in ("interleave_moe_layer_step", "decoder_sparse_step"):
        if c.data.get(key) not in (None, 1):
            step = c.integer(key)
            routed = {i for i in routed if (i + 1) % step == 0}  # Llama 4 and Qwen: step-1, 2·step-1, ...
    routed -= c.indices("mlp_only_layers", layers)
    if not routed:
        raise c.refuse("no layer routes to its experts (moe_layer_freq, first_k_dense_replace, mlp_only_layers): "
                       "not a mixture of experts")
    return routed


def _gated(c: _Config, part: str) -> bool:
    """Whether an MLP is gated (SwiGLU: gate, up, down) or plain (up, down)."""
    key = c.first(("mlp_hidden_act", "hidden_act", "hidden_activation"))
    act = c.data.get(key, "silu") if key else "silu"
    if act in GATED_ACTIVATIONS:
        return True
    if act in PLAIN_ACTIVATIONS:
        return False
    raise c.refuse(f"{key} {act!r}: an MLP activation gpubench does not know (gated: "
                   f"{', '.join(GATED_ACTIVATIONS)}; plain: {', '.join(PLAIN_ACTIVATIONS)})")


def _head_dim(c: _Config, hidden: int, heads: int) -> int:
    if c.has("head_dim"):
        return c.integer("head_dim")
    if hidden % heads:
        raise c.refuse(f"hidden_size {hidden} is not a multiple of num_attention_heads {heads} (and no head_dim is "
                       "given)")
    return hidden // heads


def _mixer(c: _Config, kind: str, hidden: int, heads: int, notes: list[str]) -> Any:
    if kind == "":
        return None
    if kind == "linear":
        return LinearAttention(c.integer("linear_num_key_heads"), c.integer("linear_num_value_heads"),
                               c.integer("linear_key_head_dim"), c.integer("linear_value_head_dim"),
                               c.integer("linear_conv_kernel_dim"), _state_dtype(c, "mamba_ssm_dtype"))
    if kind == "mamba":
        mamba = Mamba2(c.integer("mamba_num_heads"), c.integer("mamba_head_dim"), c.integer("ssm_state_size"),
                       c.integer("n_groups", 1), c.integer("conv_kernel"), _state_dtype(c, "mamba_ssm_cache_dtype"),
                       c.integer("chunk_size", 128))
        if c.has("expand") and c.integer("expand") * hidden != mamba.heads * mamba.head_dim:
            raise c.refuse(f"mamba_num_heads × mamba_head_dim ({mamba.heads * mamba.head_dim}) is not expand × "
                           f"hidden_size ({c.integer('expand') * hidden})")
        return mamba
    if c.has("kv_lora_rank"):
        if kind != "attention":
            raise c.refuse("sliding-window latent attention (MLA) cannot be modelled yet")
        return _latent(c, heads)
    window = None
    if kind == "sliding":
        window = c.integer("sliding_window_size") + 1 if c.has("sliding_window_size") else c.integer("sliding_window")
    elif kind == "chunked":
        window = c.integer("attention_chunk_size")
    local = kind in ("sliding", "chunked")
    head_dim = _head_dim(c, hidden, heads)
    kv_heads = c.integer("num_key_value_heads", heads)
    attention = Attention(heads, kv_heads, head_dim, c.integer("v_head_dim") if c.has("v_head_dim") else None,
                          window, output_gate=c.flag("attn_output_gate"))
    if local and c.has("swa_num_attention_heads"):  # MiMo: its local layers' own heads
        attention = replace(attention, heads=c.integer("swa_num_attention_heads"),
                            kv_heads=c.integer("swa_num_key_value_heads"), head_dim=c.integer("swa_head_dim"),
                            v_head_dim=c.integer("swa_v_head_dim") if c.has("swa_v_head_dim") else None)
    if not local and (c.has("global_head_dim") or c.has("num_global_key_value_heads")):  # gemma 4's global layers
        attention = replace(attention, head_dim=c.integer("global_head_dim"),
                            kv_heads=c.integer("num_global_key_value_heads", kv_heads),
                            shared_kv=c.flag("attention_k_eq_v"))
    if kind == "chunked" and "chunked attention" not in " ".join(notes):
        notes.append(f"Llama 4's chunked attention is costed as a window of {window} tokens: an upper bound on the "
                     "keys a chunk attends")
    return attention


def _latent(c: _Config, heads: int) -> LatentAttention:
    nope, rope = c.integer("qk_nope_head_dim"), c.integer("qk_rope_head_dim")
    if c.has("qk_head_dim") and c.integer("qk_head_dim") != nope + rope:
        raise c.refuse(f"qk_head_dim {c.integer('qk_head_dim')} is not qk_nope_head_dim + qk_rope_head_dim "
                       f"({nope + rope})")
    indexer = None
    if c.has("index_topk"):
        indexer = Indexer(c.integer("index_n_heads"), c.integer("index_head_dim"), c.integer("index_topk"))
    return LatentAttention(heads, c.integer("kv_lora_rank"), nope, rope, c.integer("v_head_dim"),
                           c.integer("q_lora_rank") if c.has("q_lora_rank") else None, indexer)


def _state_dtype(c: _Config, key: str) -> str:
    value = c.data.get(key, "float32")
    if value not in STATE_DTYPES:
        raise c.refuse(f"{key} {value!r}: a recurrent state dtype gpubench does not know ({', '.join(STATE_DTYPES)})")
    return STATE_DTYPES[value]


def _moe(c: _Config, notes: list[str]) -> MoeMlp:
    experts = c.integer(c.first(EXPERT_KEYS) or EXPERT_KEYS[0])
    topk_key = c.first(TOPK_KEYS)
    if topk_key is None:
        raise c.refuse(f"a mixture of {experts} experts without num_experts_per_tok")
    topk = c.integer(topk_key)
    if topk > experts:
        raise c.refuse(f"{topk_key} {topk} is more than its {experts} experts")
    width = c.integer("moe_intermediate_size") if c.has("moe_intermediate_size") else c.integer("intermediate_size")
    if c.has("intermediate_size_mlp") and not c.has("moe_intermediate_size"):  # Llama 4: experts of intermediate_size
        width = c.integer("intermediate_size")
    shared = 0  # the shared experts' width in all; a width of 0 in a config is none
    if c.data.get("n_shared_experts"):
        shared = c.integer("n_shared_experts") * width
    if c.data.get("moe_shared_expert_intermediate_size"):
        shared = c.integer("moe_shared_expert_intermediate_size") * c.integer("n_shared_experts", 1)
    elif c.data.get("shared_expert_intermediate_size"):
        shared = c.integer("shared_expert_intermediate_size")
    elif c.data.get("shared_intermediate_size"):
        shared = c.integer("shared_intermediate_size")
    elif c.data.get("model_type") in ("llama4_text", "llama4") and not shared:  # one shared expert, an expert wide
        shared = width
    latent = c.integer("moe_latent_size") if c.has("moe_latent_size") else None
    if c.data.get("shared_expert_intermediate_size"):
        notes.append("the shared expert's gate (one value per token) is left out: a GEMV of one column")
    return MoeMlp(experts, topk, width, shared, _gated(c, "experts"), latent)


def _flat_fields(c: _Config, main: Any, moe: MoeMlp | None, dense: DenseMlp | None, hidden: int, heads: int,
                 layers: int, mixers: tuple, mlps: tuple) -> dict[str, Any]:
    """The spec's flat fields from its main attention and MLPs: what a record keeps and an engine built from the
    spec runs.  For a model they describe whole (every mixer the main attention, or it over one window; every MLP
    dense or the routed experts) they are the model; for a hybrid, its main parts."""
    out: dict[str, Any] = {"heads": main.heads}
    if isinstance(main, LatentAttention):
        out.update(attention="mla", kv_heads=main.heads, head_dim=main.head_dim, q_lora_rank=main.q_lora_rank,
                   kv_lora_rank=main.kv_lora_rank, qk_rope_head_dim=main.qk_rope_head_dim,
                   v_head_dim=main.v_head_dim)
    else:
        out.update(kv_heads=main.kv_heads, head_dim=main.head_dim)
        full = replace(main, window=None)
        windows = {m.window for m, _ in mixers if isinstance(m, Attention) and m.window is not None
                   and replace(m, window=None) == full}
        if len(windows) == 1:
            out.update(sliding_window=windows.pop(), sliding_layers=sum(n for m, n in mixers if m != full
                                                                         and isinstance(m, Attention)))
        if main.window is not None and len(windows) == 0:
            out.update(sliding_window=main.window, sliding_layers=layers)
    if dense is not None:
        out["intermediate"] = dense.intermediate
    else:  # no dense MLP: the config's own width where it gives one (no step reads it)
        out["intermediate"] = c.integer("intermediate_size") if c.has("intermediate_size") else \
            (moe.expert_intermediate if moe else hidden)
    if moe is not None:
        out.update(experts=moe.experts, experts_per_token=moe.topk)
        if moe.expert_intermediate != out["intermediate"] or c.has("moe_intermediate_size"):
            out["moe_intermediate"] = moe.expert_intermediate
        routed = sum(n for m, n in mlps if isinstance(m, MoeMlp))
        if routed != layers:
            out["moe_layers"] = routed
        if moe.shared_width:  # as many experts' widths as it is, else one shared expert of its width
            count, rest = divmod(moe.shared_width, moe.expert_intermediate)
            out.update(shared_experts=count) if not rest else out.update(shared_experts=1,
                                                                          shared_intermediate=moe.shared_width)
    return out
