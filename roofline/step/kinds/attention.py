"""Softmax attention over a KV cache (GQA; MHA and MQA its cases), over every cached token or a sliding window.

Matrices on one GPU (tensor parallelism splits the heads; with more GPUs than KV heads each GPU holds one KV head,
each head on ``tp / kv_heads`` of them, as vLLM replicates them): the fused query, key and value projection (the
query's half again as wide with an output gate, no value projection where keys and values share one) and the output
projection.  The cache keeps K and V of every KV head per token (both, even where they share a projection: they
differ after the keys' rotary embedding), a sliding-window layer the last ``window`` tokens only.  One layer's work
is flash attention's (``counting.attention_work``) over the step's queries, keys and query-key pairs
(``counting.attention_extent``; a window's keys are reckoned from the contexts' sum, exact when every context is
past the window or every one within it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from roofline.core.counting import DTYPE_SIZES, Work, attention_extent, attention_work
from roofline.step.batch import Batch
from roofline.step.kinds.base import MixerRules


@dataclass(frozen=True)
class AttentionRules(MixerRules):
    OP: ClassVar[str] = "attention"

    def kv_heads_per_gpu(self, tp: int) -> int:
        """KV heads one GPU holds: its share, or one replicated head when there are more GPUs than heads."""
        return max(1, self.spec.kv_heads // tp)

    def linears(self, hidden: int, tp: int) -> list[tuple[str, int, int]]:
        a, kv = self.spec, self.kv_heads_per_gpu(tp)
        queries = a.heads // tp * a.head_dim * (2 if a.output_gate else 1)
        keys_values = kv * a.head_dim + (0 if a.shared_kv else kv * a.value_dim)
        return [("qkv_proj", queries + keys_values, hidden), ("o_proj", hidden, a.heads * a.value_dim // tp)]

    def divides(self) -> list[tuple[str, int]]:
        return [("attention heads", self.spec.heads)]

    def tp_problem(self, tp: int) -> str | None:
        kv = self.spec.kv_heads
        if kv % tp and tp % kv:
            return f"--tp {tp} neither divides nor is a multiple of the {kv} KV heads"
        return None

    def cache_bytes_per_token(self, tp: int, cache_dtype: str) -> int:
        a = self.spec
        return self.kv_heads_per_gpu(tp) * (a.head_dim + a.value_dim) * DTYPE_SIZES[cache_dtype][0]

    @property
    def window(self) -> int | None:
        return self.spec.window

    def work(self, tp: int, act_dtype: str, cache_dtype: str, batch: Batch) -> Work:
        a = self.spec
        queries, keys, pairs = attention_extent(batch.context_sum, batch.decodes, batch.chunks, a.window,
                                                batch.queries)
        return attention_work(act_dtype, cache_dtype, a.heads // tp, self.kv_heads_per_gpu(tp), a.head_dim,
                              a.value_dim, queries, keys, pairs)

    def rope_values_per_token(self, tp: int) -> int:
        return (self.spec.heads // tp + self.kv_heads_per_gpu(tp)) * self.spec.head_dim
