"""Gated DeltaNet's linear attention (Qwen3-Next, Qwen3.5): no KV cache, a recurrent state per sequence.

Matrices on one GPU (tensor parallelism splits the heads): the fused q, k, v and output-gate projection, the fused
β and decay projection (one value each per value head), and the output projection.  One sequence keeps per layer a
state of value heads × key size × value size (fp32, as vLLM and fla keep it) and its short convolution's last inputs;
decode reads and writes it once per token, a prefill chunk once per chunk (``counting.gated_deltanet_shape``,
``counting.recurrent_work``).  A speculative verification's K + 1 tokens per sequence run as a chunk of K + 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from roofline.core.counting import RecurrentShape, Work, gated_deltanet_shape, recurrent_work
from roofline.step.batch import Batch
from roofline.step.kinds.base import MixerRules


def recurrent_batch_work(shape: RecurrentShape, act_dtype: str, batch: Batch) -> Work:
    """``counting.recurrent_work`` of a step's batch: a verification's K + 1 tokens per sequence as a chunk."""
    if batch.queries > 1:
        verification = ((batch.queries, 0),) * batch.decodes
        return recurrent_work(shape, act_dtype, 0, batch.chunks + verification)
    return recurrent_work(shape, act_dtype, batch.decodes, batch.chunks)


@dataclass(frozen=True)
class LinearAttentionRules(MixerRules):
    OP: ClassVar[str] = "linear_attention"
    recurrent: ClassVar[bool] = True

    def shape(self, tp: int, act_dtype: str) -> RecurrentShape:
        a = self.spec
        return gated_deltanet_shape(act_dtype, a.state_dtype, a.key_heads // tp, a.value_heads // tp,
                                    a.key_head_dim, a.value_head_dim, a.conv_kernel)

    def linears(self, hidden: int, tp: int) -> list[tuple[str, int, int]]:
        a = self.spec
        qkvz = 2 * a.key_heads * a.key_head_dim + 2 * a.value_heads * a.value_head_dim
        return [("in_proj_qkvz", qkvz // tp, hidden), ("in_proj_ba", 2 * a.value_heads // tp, hidden),
                ("out_proj", hidden, a.value_heads * a.value_head_dim // tp)]

    def divides(self) -> list[tuple[str, int]]:
        return [("linear attention's key heads", self.spec.key_heads),
                ("linear attention's value heads", self.spec.value_heads)]

    def state_bytes(self, tp: int, act_dtype: str) -> int:
        return self.shape(tp, act_dtype).state_bytes

    def work(self, tp: int, act_dtype: str, cache_dtype: str, batch: Batch) -> Work:
        return recurrent_batch_work(self.shape(tp, act_dtype), act_dtype, batch)
