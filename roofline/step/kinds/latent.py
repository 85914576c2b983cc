"""DeepSeek's multi-head latent attention (MLA), and with a lightning indexer DeepSeek sparse attention (DSA:
DeepSeek-V3.2, GLM-5).

Matrices on one GPU: the queries' and the latent's down projections (fused, replicated: vLLM's fused_qkv_a_proj),
the queries' up projection, the absorbed ``kv_b`` and the output projection (heads split by tensor parallelism).
The cache keeps one latent of ``kv_lora_rank`` and one rope key per token, whole on every GPU (it is not split by
heads).  One layer's work is FlashMLA's absorbed form (``counting.mla_attention_work``).

DSA adds the indexer: its query projection from the queries' latent, its key projection and its per-head weights
(replicated on every GPU: the indexer's heads are not split), one fp8 key per cached token beside the latent
(``counting.indexer_key_bytes``), and per query a score against every key it may see (``counting.indexer_work``);
the latent attention then runs over the top ``topk`` keys only: at most ``topk`` pairs per query, counted as a window
of ``topk`` keys would be (``counting.attention_extent``), which is exact for the pairs.  The keys a prefill chunk's
queries gather may be anywhere in its prefix: read as a window's, an approximation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from roofline.core.counting import (
    DTYPE_SIZES,
    Work,
    attention_extent,
    indexer_key_bytes,
    indexer_work,
    mla_attention_work,
)
from roofline.step.batch import Batch
from roofline.step.kinds.base import MixerRules


@dataclass(frozen=True)
class LatentRules(MixerRules):
    OP: ClassVar[str] = "mla_attention"

    @property
    def op(self) -> str:
        return "dsa_attention" if self.spec.indexer is not None else self.OP

    def linears(self, hidden: int, tp: int) -> list[tuple[str, int, int]]:
        a = self.spec
        heads = a.heads // tp
        latent, rope, nope, v = a.kv_lora_rank, a.qk_rope_head_dim, a.qk_nope_head_dim, a.v_head_dim
        if a.q_lora_rank:  # q_a and kv_a fused, as one replicated matrix
            out = [("qkv_a_proj", a.q_lora_rank + latent + rope, hidden),
                   ("q_b_proj", heads * a.head_dim, a.q_lora_rank)]
        else:
            out = [("q_proj", heads * a.head_dim, hidden), ("kv_a_proj", latent + rope, hidden)]
        out += [("kv_b_proj", heads * (nope + v), latent), ("o_proj", hidden, heads * v)]
        if a.indexer is not None:
            i = a.indexer
            out += [("indexer_wq_b", i.heads * i.head_dim, a.q_lora_rank or hidden),
                    ("indexer_wk", i.head_dim, hidden), ("indexer_weights_proj", i.heads, hidden)]
        return out

    def divides(self) -> list[tuple[str, int]]:
        return [("attention heads", self.spec.heads)]

    def cache_bytes_per_token(self, tp: int, cache_dtype: str) -> int:
        a = self.spec
        latent = (a.kv_lora_rank + a.qk_rope_head_dim) * DTYPE_SIZES[cache_dtype][0]
        return latent + (indexer_key_bytes(a.indexer.head_dim) if a.indexer is not None else 0)

    def work(self, tp: int, act_dtype: str, cache_dtype: str, batch: Batch) -> Work:
        a = self.spec
        chunks, queries_each = batch.chunks, batch.queries
        topk = a.indexer.topk if a.indexer is not None else None
        queries, keys, pairs = attention_extent(batch.context_sum, batch.decodes, chunks, topk, queries_each)
        work = mla_attention_work(act_dtype, cache_dtype, a.heads // tp, a.kv_lora_rank, a.qk_rope_head_dim,
                                  queries, keys, pairs)
        if a.indexer is None:
            return work
        # The indexer scores every key each query may see: the full causal extent.
        scored_queries, scored_keys, scored_pairs = attention_extent(batch.context_sum, batch.decodes, chunks, None,
                                                                     queries_each)
        return work + indexer_work(act_dtype, a.indexer.heads, a.indexer.head_dim, scored_queries, scored_keys,
                                   scored_pairs)

    def rope_values_per_token(self, tp: int) -> int:
        # every head's rope part and the one shared rope key
        return (self.spec.heads // tp + 1) * self.spec.qk_rope_head_dim
