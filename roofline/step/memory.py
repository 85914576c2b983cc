"""What a model holds on each GPU under a step model's split: its weights (embeddings aside), its KV cache per
token, and the largest decode batch whose cache fits beside the weights.

The KV cache of a GQA model is K and V of every KV head the GPU holds; MLA's is one latent (``kv_lora_rank``) and
one rope key (``qk_rope_head_dim``) per token and layer, whole on every tensor-parallel rank (it is not split by
heads).  With expert parallelism each data-parallel attention rank holds its own sequences' caches.  Sliding-window
layers are counted as if they cached every token (an upper bound: engines that page them apart hold less).
"""

from __future__ import annotations

from typing import Any

from roofline.core.counting import DTYPE_SIZES, matrix_weight_bytes
from roofline.step.launches import StepModel


def weight_bytes(step: StepModel) -> int:
    """Bytes of weights on one GPU: every layer's matrices (this GPU's experts) and the LM head, each in the dtype it
    is stored in, with a quantized format's scales; embeddings aside."""
    total = sum(matrix_weight_bytes(lin.dtype, lin.n, lin.k) * lin.layers for lin in step.linears)
    total += sum(matrix_weight_bytes(g.dtype, g.n, g.k) * g.experts * g.layers for g in step.grouped)
    return total


def kv_bytes_per_token(step: StepModel) -> int:
    """KV cache per token of one sequence on one GPU, all layers (Llama-2-70B fp16 at TP 1: 320 KiB)."""
    m = step.model
    values = m.kv_values_per_token if m.attention == "mla" else m.kv_values_per_token // step.parallelism.tp
    return m.layers * values * DTYPE_SIZES[step.cache_dtype][0]


def kv_capacity(step: StepModel, context: int, memory_bytes: float | None, mem_fraction: float) -> dict[str, Any]:
    """The largest decode batch (of the whole group) whose KV cache at ``context`` fits beside the weights in
    ``mem_fraction`` of each GPU's memory."""
    weights = weight_bytes(step)
    per_token = kv_bytes_per_token(step)
    per_sequence = per_token * context
    out = {"weight_bytes": weights, "kv_bytes_per_token": per_token, "kv_bytes_per_sequence": per_sequence,
           "memory_bytes": memory_bytes, "mem_fraction": mem_fraction}
    if not memory_bytes:
        return {**out, "fits": None, "max_batch": None}
    free = mem_fraction * memory_bytes - weights
    per_gpu = int(free // per_sequence) if free > 0 else 0
    return {**out, "fits": free > 0, "max_batch": per_gpu * step.parallelism.attention_dp}


def parameters(step: StepModel) -> dict[str, float]:
    """The model's parameters in all and those one token runs through (active), embeddings aside: what MoE changes
    in words (Mixtral 8x7B: about 46B in all, 13B active)."""
    whole = StepModel(step.model, dtype="bf16")  # every matrix whole: no split, no quantization
    dense = sum(lin.n * lin.k * lin.layers for lin in whole.linears)
    experts = sum(g.n * g.k * g.layers for g in whole.grouped)
    return {"total": dense + experts * step.model.experts, "active": dense + experts * step.model.experts_per_token}
