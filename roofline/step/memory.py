"""What a model holds on each GPU under a step model's split: its weights (embeddings aside), what one sequence keeps
between steps, and the largest decode batch that fits beside the weights.

What a sequence keeps is each mixer kind's (``roofline.step.kinds``): a KV cache that grows with its tokens (GQA:
K and V of every KV head the GPU holds; MLA: one latent and one rope key per token, whole on every tensor-parallel
rank; DSA: beside them the indexer's fp8 key), a sliding-window layer's cache of its window at most (the engine pages
it apart: vLLM's hybrid allocator), or a fixed recurrent state (linear attention, Mamba-2).  Engines hold the
recurrent states in a pool of their own beside the KV blocks (vLLM's hybrid allocator sizes a page to hold one); both
come out of the same memory, so one sequence's cost at a context is the sum, and that sum caps the batch.  With
expert parallelism each data-parallel attention rank holds its own sequences'.
"""

from __future__ import annotations

from typing import Any

from roofline.core.counting import matrix_weight_bytes
from roofline.step.launches import StepModel


def weight_bytes(step: StepModel) -> int:
    """Bytes of weights on one GPU: every layer's matrices (this GPU's experts) and the LM head, each in the dtype it
    is stored in, with a quantized format's scales; embeddings aside."""
    total = sum(matrix_weight_bytes(lin.dtype, lin.n, lin.k) * lin.layers for lin in step.linears)
    total += sum(matrix_weight_bytes(g.dtype, g.n, g.k) * g.experts * g.layers for g in step.grouped)
    return total


def kv_bytes_per_token(step: StepModel) -> int:
    """What one more token of one sequence adds on one GPU, all layers that keep every token (Llama-2-70B fp16 at
    TP 1: 320 KiB); a sliding window's and a recurrent state's are per sequence (``sequence_bytes``)."""
    tp = step.parallelism.tp
    return sum(count * rules.cache_bytes_per_token(tp, step.cache_dtype) for rules, count in step.mixers
               if rules.window is None)


def window_bytes_per_token(step: StepModel) -> list[tuple[int, int]]:
    """(window, bytes one token adds) of each kind of sliding-window layer, all its layers, on one GPU."""
    tp = step.parallelism.tp
    return [(rules.window, count * rules.cache_bytes_per_token(tp, step.cache_dtype)) for rules, count in
            step.mixers if rules.window is not None]


def state_bytes_per_sequence(step: StepModel) -> int:
    """The recurrent states one sequence keeps on one GPU, all layers, whatever its length."""
    tp = step.parallelism.tp
    return sum(count * rules.state_bytes(tp, step.act_dtype) for rules, count in step.mixers)


def fixed_bytes_per_sequence(step: StepModel) -> int:
    """What a sequence keeps however long it grows, at most: its recurrent states and its sliding windows full (the
    simulator reserves it for each sequence it runs, beside its KV blocks)."""
    return state_bytes_per_sequence(step) + sum(window * per_token for window, per_token in
                                                window_bytes_per_token(step))


def memory_extras(step: StepModel) -> dict[str, int]:
    """A step profile's ``memory`` keys beyond the weights and the KV per token: what a sequence keeps whatever its
    length, where it keeps any (a dense or MoE model's record is the one it always was)."""
    fixed = fixed_bytes_per_sequence(step)
    return {"fixed_bytes_per_sequence": fixed} if fixed else {}


def sequence_bytes(step: StepModel, context: int) -> dict[str, int]:
    """What one sequence at ``context`` tokens keeps on one GPU, by kind: ``kv`` (the caches of every token),
    ``window`` (the sliding windows', at most their windows) and ``state`` (the recurrent states)."""
    window = sum(min(context, w) * per_token for w, per_token in window_bytes_per_token(step))
    return {"kv": kv_bytes_per_token(step) * context, "window": window, "state": state_bytes_per_sequence(step)}


def kv_capacity(step: StepModel, context: int, memory_bytes: float | None, mem_fraction: float) -> dict[str, Any]:
    """The largest decode batch (of the whole group) whose sequences at ``context`` fit beside the weights in
    ``mem_fraction`` of each GPU's memory."""
    weights = weight_bytes(step)
    per_token = kv_bytes_per_token(step)
    parts = sequence_bytes(step, context)
    per_sequence = sum(parts.values())
    out = {"weight_bytes": weights, "kv_bytes_per_token": per_token, "kv_bytes_per_sequence": per_sequence,
           "sequence_bytes": parts, "memory_bytes": memory_bytes, "mem_fraction": mem_fraction}
    if not memory_bytes:
        return {**out, "fits": None, "max_batch": None}
    free = mem_fraction * memory_bytes - weights
    per_gpu = int(free // per_sequence) if free > 0 else 0
    return {**out, "fits": free > 0, "max_batch": per_gpu * step.parallelism.attention_dp}


def parameters(step: StepModel) -> dict[str, float]:
    """The model's parameters in all and those one token runs through (active), the input embedding aside (the LM
    head counted): what MoE changes in words (Mixtral 8x7B: about 46B in all, 13B active).  ``embedding``: the input
    embedding's (0 where the LM head shares it)."""
    whole = StepModel(step.model, dtype="bf16")  # every matrix whole: no split, no quantization
    dense = sum(lin.n * lin.k * lin.layers for lin in whole.linears)
    experts = sum(g.n * g.k * g.layers for g in whole.grouped)
    m = step.model
    embedding = 0 if m.tied_embeddings else m.vocab * m.hidden
    if m.moe is None:
        return {"total": dense, "active": dense, "embedding": embedding}
    return {"total": dense + experts * m.moe.experts, "active": dense + experts * m.moe.topk, "embedding": embedding}
