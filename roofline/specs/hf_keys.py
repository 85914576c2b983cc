"""What each key of a Hugging Face ``config.json`` means to a step: read (``roofline.specs.hf_config`` models it),
known not to change the step (listed here with why), changing it only at some values (checked here), or changing
it in a way gpubench does not model (refused, naming what it would change).  A key in none of these is refused too:
an unknown key may change the step, and a config is read whole or not at all.
"""

from __future__ import annotations

from typing import Any

# Keys the reader uses (roofline.specs.hf_config): shapes, layer kinds, experts, attention, quantization.
READ = frozenset({
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "v_head_dim",
    "intermediate_size", "vocab_size", "hidden_act", "hidden_activation", "mlp_hidden_act", "tie_word_embeddings",
    "max_position_embeddings", "n_positions", "max_seq_len", "_name_or_path", "model_type", "text_config",
    "quantization_config",
    # experts
    "num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok", "experts_per_token",
    "top_k_experts", "moe_intermediate_size", "n_shared_experts", "shared_expert_intermediate_size",
    "shared_intermediate_size", "moe_shared_expert_intermediate_size", "moe_latent_size", "first_k_dense_replace",
    "moe_layer_freq", "interleave_moe_layer_step", "decoder_sparse_step", "mlp_only_layers", "intermediate_size_mlp",
    "enable_moe_block",
    # latent and sparse attention
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "qk_head_dim", "index_topk",
    "index_n_heads", "index_head_dim",
    # local and hybrid layers
    "layer_types", "sliding_window", "sliding_window_size", "use_sliding_window", "max_window_layers",
    "attention_chunk_size", "full_attention_interval", "hybrid_override_pattern", "hybrid_layer_pattern",
    "swa_num_attention_heads", "swa_num_key_value_heads", "swa_head_dim", "swa_v_head_dim", "global_head_dim",
    "num_global_key_value_heads", "attention_k_eq_v", "attn_output_gate",
    # linear attention (Gated DeltaNet) and Mamba-2
    "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
    "linear_conv_kernel_dim", "mamba_ssm_dtype", "mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups",
    "conv_kernel", "chunk_size", "mamba_ssm_cache_dtype", "expand",
})

# Keys that change nothing a step computes or moves, grouped by why.
IRRELEVANT_WHY = {
    "naming and provenance": (
        "architectures", "auto_map", "transformers_version", "torch_dtype", "dtype", "use_bfloat16", "prefix",
        "finetuning_task", "tokenizer_class", "task_specific_params", "problem_type", "id2label", "label2id",
        "return_dict", "output_attentions", "output_hidden_states", "torchscript", "pruned_heads",
        "chunk_size_feed_forward", "tf_legacy_loss", "is_decoder", "use_cache", "ep_size"),
    "token ids": (
        "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "image_token_id",
        "video_token_id", "audio_token_id", "boa_token_id", "boi_token_id", "eoa_token_id", "eoa_token_index",
        "eoi_token_id", "vision_start_token_id", "vision_end_token_id", "media_placeholder_token_id",
        "video_placeholder", "ignore_index", "vision_soft_tokens_per_image", "use_unified_vision_chunk"),
    "a multimodal model's other towers (the language model is what decodes)": (
        "vision_config", "audio_config"),
    "generation settings (the engine's sampling, not the model's step)": (
        "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
        "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty",
        "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences",
        "output_scores", "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id",
        "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
        "num_logits_to_keep"),
    "training only": (
        "initializer_range", "attention_dropout", "hidden_dropout", "dropout", "router_aux_loss_coef",
        "aux_loss_alpha", "seq_aux", "output_router_logits", "pretraining_tp", "rescale_prenorm_residual",
        "time_step_floor", "time_step_limit", "time_step_max", "time_step_min", "router_jitter_noise"),
    "rotary position settings (rope's elementwise work does not depend on them)": (
        "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor", "rotary_dim", "rope_interleave",
        "indexer_rope_interleave", "swa_rope_theta", "initial_context_length", "original_max_position_embeddings",
        "no_rope_layers"),
    "norms' epsilon and placement": (
        "rms_norm_eps", "layer_norm_epsilon", "layernorm_epsilon", "norm_eps", "residual_in_fp32", "use_qk_norm",
        "qk_norm_type"),
    "biases (one add per output, beside a GEMM's)": (
        "attention_bias", "mlp_bias", "qkv_bias", "use_bias", "use_conv_bias", "mamba_proj_bias"),
    "the router's scoring (the experts a token goes to, not how many)": (
        "scoring_func", "topk_method", "n_group", "topk_group", "norm_topk_prob", "routed_scaling_factor",
        "use_routing_bias"),
    "per-element details of a kernel (a scale, a clamp, a softcap, a sink logit)": (
        "attention_value_scale", "add_swa_attention_sink_bias", "add_full_attention_sink_bias", "swiglu_limit",
        "final_logit_softcapping", "mamba_hidden_act", "use_mamba_kernels"),
    "a multi-token-prediction head (used only as a speculative drafter: --spec-decode drafter=mtp)": (
        "num_nextn_predict_layers", "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings",
        "mtp_hybrid_override_pattern", "mtp_transformer_layers", "num_mtp_modules", "use_mtp"),
}
IRRELEVANT = frozenset(key for keys in IRRELEVANT_WHY.values() for key in keys)


def _off(value: Any) -> bool:
    return value in (None, 0, False, [], "", "none")


# Keys that change nothing at the values given (the condition) and change the step otherwise (what).
CONDITIONAL: dict[str, tuple[Any, str]] = {
    "num_kv_shared_layers": (_off, "layers that reuse another layer's KV cache (a smaller cache, fewer projections)"),
    "hidden_size_per_layer_input": (_off, "per-layer input embeddings (another projection per layer)"),
    "vocab_size_per_layer_input": (lambda v: True, "per-layer input embeddings' vocabulary"),
    "use_double_wide_mlp": (_off, "MLPs twice as wide in some layers"),
    "use_bidirectional_attention": (lambda v: v in (None, False, "vision"),
                                    "attention that is not causal over the text"),
    "moe_shared_expert_overlap": (lambda v: True, "whether the shared expert runs beside the routed ones"),
    "is_encoder_decoder": (_off, "an encoder-decoder model (a cross-attention per layer)"),
    "add_cross_attention": (_off, "a cross-attention per layer"),
    "tie_encoder_decoder": (_off, "an encoder-decoder model"),
    "cross_attention_hidden_size": (_off, "a cross-attention per layer"),
}

# Keys known to change the step in ways gpubench does not model: refused, saying what each would change.
UNMODELLED = {
    "layers_block_type": "layers of kinds named in a form gpubench does not read (state-space or linear attention)",
    "ssm_cfg": "Mamba-1 state-space layers", "mamba_d_state": "Mamba-1 state-space layers",
    "linear_attn_config": "Kimi's linear attention (KDA) layers", "full_attn_idxs": "hybrid attention layers",
    "num_nextn_predict_layers_only": "a model of multi-token-prediction layers only",
    "parallel_attn": "attention and MLP run in parallel on one norm (fewer elementwise passes)",
    "alibi": "ALiBi attention biases", "use_alibi": "ALiBi attention biases",
    "cross_attention_layers": "cross-attention layers",
}


def unread_reason(key: str, value: Any) -> str | None:
    """Why ``key`` (with ``value``) stops a config from being read, in words, or None: the key is read, does not
    change the step, or does not at this value."""
    if key in READ or key in IRRELEVANT:
        return None
    if key in CONDITIONAL:
        allowed, what = CONDITIONAL[key]
        return None if allowed(value) else f"{key}={value!r} ({what}) cannot be modelled yet"
    if key in UNMODELLED:
        return f"{key} ({UNMODELLED[key]}) cannot be modelled yet"
    return (f"{key} is not a key gpubench knows: it may change the step, and a config is read whole or refused "
            "(docs/serving.md lists the keys it reads and those known not to matter)")


def top_level_reason(key: str) -> str | None:
    """A multimodal config's own keys beside its ``text_config``: only those known not to change the language
    model's step (and its quantization config) are taken."""
    if key in ("text_config", "quantization_config", "model_type", "_name_or_path", "tie_word_embeddings"):
        return None
    return unread_reason(key, None) if key not in IRRELEVANT else None
