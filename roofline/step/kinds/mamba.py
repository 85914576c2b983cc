"""Mamba-2's state-space layer (Nemotron-H's ``M`` blocks): no KV cache, a recurrent state per sequence.

Matrices on one GPU (tensor parallelism splits the heads and the groups): the input projection (x, the gate z, B
and C per group, dt per head) and the output projection.  One sequence keeps per layer a state of heads × head size ×
state size (fp32: Nemotron's ``mamba_ssm_cache_dtype``) and its convolution's last inputs; decode reads and writes
it once per token, a prefill chunk once per chunk (``counting.mamba2_shape``, ``counting.recurrent_work``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from roofline.core.counting import RecurrentShape, Work, mamba2_shape
from roofline.step.batch import Batch
from roofline.step.kinds.base import MixerRules
from roofline.step.kinds.linear import recurrent_batch_work


@dataclass(frozen=True)
class Mamba2Rules(MixerRules):
    OP: ClassVar[str] = "mamba2"
    recurrent: ClassVar[bool] = True

    def shape(self, tp: int, act_dtype: str) -> RecurrentShape:
        m = self.spec
        return mamba2_shape(act_dtype, m.state_dtype, m.heads // tp, m.head_dim, m.state_size, m.groups // tp,
                            m.conv_kernel, m.chunk)

    def linears(self, hidden: int, tp: int) -> list[tuple[str, int, int]]:
        m = self.spec
        inner = m.heads * m.head_dim
        in_proj = 2 * inner + 2 * m.groups * m.state_size + m.heads
        return [("mamba_in_proj", in_proj // tp, hidden), ("mamba_out_proj", hidden, inner // tp)]

    def divides(self) -> list[tuple[str, int]]:
        return [("Mamba-2 heads", self.spec.heads), ("Mamba-2 groups", self.spec.groups)]

    def state_bytes(self, tp: int, act_dtype: str) -> int:
        return self.shape(tp, act_dtype).state_bytes

    def work(self, tp: int, act_dtype: str, cache_dtype: str, batch: Batch) -> Work:
        return recurrent_batch_work(self.shape(tp, act_dtype), act_dtype, batch)
