"""The model the transformers engine runs, built from a ``ModelSpec`` with RANDOM weights (seeded, nothing
downloaded): a dense model as ``LlamaForCausalLM``, a mixture of experts as ``Qwen3MoeForCausalLM``.

Kernels of the same shapes cost the same time whatever the weights hold, with one exception: a mixture's router
decides which experts a step's tokens run through, and the grouped GEMM's time grows with the experts touched.  A
random router on random weights routes like the profile's ``uniform`` routing (each token's top-k independent and
uniform: ``ENGINE_ROUTING``; ``tests/test_validate_moe.py`` counts the experts the engine touches), so that is the
routing validate profiles a mixture under.

The experts run transformers' ``grouped_mm`` implementation (its default from 5.17 on, pinned here so a later
default cannot change what is timed): ``torch.nn.functional.grouped_mm`` (``torch._grouped_mm`` before torch 2.10)
over the tokens sorted by expert where transformers finds it usable, else its own loop of ``torch.mm`` per expert
over the same sorted rows.  The measured profile's grouped GEMM (``microbench.timing.grouped``) runs the same
kernels on the same layout; ``experts_kernel`` names the one the engine runs as the profile names its own.

What the engine cannot build is refused in one line (``EngineError``) rather than built as something else: MLA
attention, shared experts (Qwen3-MoE has none), sliding-window layers (the built model would attend over every
token while the simulator costs the window), a plain (ungated) MLP.

A hybrid model (a config whose layer kinds it names: linear attention, Mamba-2, ...) is built as its own config.json
says, by transformers' class for its ``model_type`` (Qwen3.5's, Nemotron-H's), with random weights: nothing of it is
re-expressed.  transformers' continuous-batching manager holds no linear-attention or Mamba-2 state (it refuses
those layer types), so such a model runs the static path alone (``engine_paths``).
"""

from __future__ import annotations

from microbench.serving.engine.settings import EngineError, transformers_module

# How a random router on random weights spreads tokens over experts (roofline.step.routing).
ENGINE_ROUTING = "uniform"
EXPERTS_IMPLEMENTATION = "grouped_mm"


PATHS = ("static", "continuous")


def engine_paths(model) -> tuple[str, ...]:
    """The engine paths ``model`` runs: both, or static alone where a layer keeps a recurrent state (transformers'
    ContinuousBatchingManager refuses linear-attention and Mamba-2 layers: 'Invalid layer type')."""
    from roofline.specs.layers import LinearAttention, Mamba2

    recurrent = any(isinstance(kind, (LinearAttention, Mamba2)) for kind, _ in model.mixer_layers)
    return ("static",) if recurrent else PATHS


CONTINUOUS_REFUSED = ("transformers' continuous-batching manager holds no linear-attention or Mamba-2 state (it "
                      "refuses those layer types): the static path is validated alone")


def refusal(model) -> str | None:
    """Why the engine cannot build ``model`` (a ``ModelSpec``) as it is modelled, or None."""
    if model.hybrid:
        return _hybrid_refusal(model)
    built = "the transformers engine here builds Llama and Qwen3-MoE models"
    if not model.gated_mlp:
        return f"{model.name} has a plain MLP: {built} (gated MLPs)"
    if model.attention != "gqa":
        return f"{model.name} has {model.attention.upper()} attention: {built} (grouped-query attention)"
    if model.sliding_layers:
        return (f"{model.name} has {model.sliding_layers} sliding-window layers: {built}, which attend over every "
                "token")
    if model.shared_experts:
        return f"{model.name} has {model.shared_experts} shared experts: {built}, and Qwen3-MoE has none"
    return None


def _hybrid_config(model) -> dict:
    """A hybrid model's own config.json, as transformers reads it (its language model's, a multimodal one's)."""
    import json
    from pathlib import Path

    config = json.loads(Path(model.source).read_text(encoding="utf-8-sig"))
    config = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config
    return {k: v for k, v in config.items() if k not in ("_name_or_path", "quantization_config", "auto_map")}


def _hybrid_refusal(model) -> str | None:
    from pathlib import Path

    if not model.source or not Path(model.source).is_file():
        return f"{model.name} is a hybrid model and its config.json ({model.source or 'none'}) is not at hand: the " \
               "engine builds a hybrid model from its own config"
    if not _hybrid_config(model).get("model_type"):
        return f"{model.name}: its config.json names no model_type, so transformers has no class to build it with"
    return None


def _config(transformers, model, max_positions: int):
    """The transformers config of ``model`` and what builds the model from it (its class's constructor)."""
    if model.hybrid:
        values = {**_hybrid_config(model), "max_position_embeddings": max_positions, "bos_token_id": None,
                  "eos_token_id": None, "pad_token_id": 0}
        try:
            config = transformers.AutoConfig.for_model(**values)
        except (ValueError, KeyError) as exc:
            raise EngineError(f"{model.name}: transformers {transformers.__version__} cannot build it ({exc})") \
                from None
        return config, transformers.AutoModelForCausalLM.from_config
    common = dict(hidden_size=model.hidden, num_hidden_layers=model.layers, num_attention_heads=model.heads,
                  num_key_value_heads=model.kv_heads, head_dim=model.head_dim, vocab_size=model.vocab,
                  max_position_embeddings=max_positions, tie_word_embeddings=model.tied_embeddings,
                  bos_token_id=None, eos_token_id=None, pad_token_id=0)
    if not model.is_moe:
        return transformers.LlamaConfig(intermediate_size=model.intermediate, **common), \
            transformers.LlamaForCausalLM._from_config
    # The dense layers of a partly routed mixture come first (DeepSeek's first_k_dense_replace): where they sit
    # does not change a step's cost.
    config = transformers.Qwen3MoeConfig(
        intermediate_size=model.intermediate, moe_intermediate_size=model.expert_intermediate,
        num_experts=model.experts, num_experts_per_tok=model.experts_per_token, decoder_sparse_step=1,
        mlp_only_layers=list(range(model.dense_layers)), norm_topk_prob=True, use_sliding_window=False, **common)
    config._experts_implementation = EXPERTS_IMPLEMENTATION
    return config, transformers.Qwen3MoeForCausalLM._from_config


def build_model(torch, model, dtype: str, device: str, max_positions: int, seed: int):
    """The engine's model of ``model``'s shapes with random weights (seeded), on ``device``, in eval mode."""
    problem = refusal(model)
    if problem:
        raise EngineError(problem)
    transformers = transformers_module()
    config, make = _config(transformers, model, max_positions)
    config._attn_implementation = "sdpa"
    from microbench.timing.ops import torch_dtype

    torch.manual_seed(seed)
    with torch.device(device):
        built = make(config, dtype=torch_dtype(torch, dtype))
    return built.eval()


def _experts_module(lm):
    """The first routed-experts module of the model (its weights ``[experts, N, K]``), or None (dense)."""
    for module in lm.modules():
        weight = getattr(module, "gate_up_proj", None)
        if getattr(weight, "dim", lambda: 0)() == 3 and hasattr(module, "down_proj"):
            return module
    return None


def experts_kernel(torch, lm) -> str | None:
    """The kernel the engine's experts run, named as a grouped profile table names its kernel (None: dense).
    transformers' ``grouped_mm`` picks torch's grouped GEMM where ``_can_use_grouped_mm`` allows it (5.17 and
    5.24: torch > 2.8 on the CPU, SM80+ on CUDA), else its loop of ``torch.mm`` per expert over the sorted rows."""
    from microbench.timing.grouped import LOOP_KERNEL, capability_major, grouped_kernel, kernel_label

    experts = _experts_module(lm)
    if experts is None:
        return None
    implementation = lm.config._experts_implementation
    if implementation != EXPERTS_IMPLEMENTATION:
        return f"transformers experts_implementation={implementation}"
    from transformers.integrations import moe

    usable = getattr(moe, "_can_use_grouped_mm", None)
    if usable is None:
        return "transformers grouped_mm (which kernel it picks: unknown to this transformers)"
    weight = experts.gate_up_proj.transpose(-2, -1)
    rows = torch.zeros((1, weight.shape[1]), dtype=weight.dtype, device=weight.device)
    offsets = torch.ones(weight.shape[0], dtype=torch.int32, device=weight.device)
    fn, name = grouped_kernel(torch)
    if fn is None or not usable(rows, weight, offsets):
        return LOOP_KERNEL
    dtype = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}.get(weight.dtype, str(weight.dtype))
    return kernel_label(name, dtype, capability_major(torch, weight.device))[0]
