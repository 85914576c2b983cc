"""What every mixer kind's rules answer (``MixerRules``); each kind's module fills them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from roofline.core.counting import Work
from roofline.step.batch import Batch


@dataclass(frozen=True)
class MixerRules:
    """What one kind of mixer does, for a spec (``roofline.specs.layers``).  Subclasses fill each method.

    ``op``: the launch's op (what a sweep point of it is keyed by); ``recurrent``: it keeps a fixed state per
    sequence rather than a cache that grows with the context (its tables have no context axis)."""

    spec: Any
    OP: ClassVar[str] = ""
    recurrent: ClassVar[bool] = False

    @property
    def op(self) -> str:
        return self.OP

    def linears(self, hidden: int, tp: int) -> list[tuple[str, int, int]]:
        """The layer's matrices on one GPU as (name, N, K), N×K as ``nn.Linear`` stores them."""
        raise NotImplementedError

    def divides(self) -> list[tuple[str, int]]:
        """(what, count) that tensor parallelism splits, so must divide."""
        raise NotImplementedError

    def kv_heads_per_gpu(self, tp: int) -> int:
        """KV heads (or latent caches) one GPU reads per token (1 for a cache every head shares)."""
        return 1

    def tp_problem(self, tp: int) -> str | None:
        """Why ``tp`` GPUs cannot split the layer beyond ``divides``, in words (None: they can)."""
        return None

    def cache_bytes_per_token(self, tp: int, cache_dtype: str) -> int:
        """Bytes one cached token keeps in one layer on one GPU (0: no cache that grows with the context)."""
        return 0

    @property
    def window(self) -> int | None:
        """The most tokens the layer's cache keeps of a sequence (None: all of them)."""
        return None

    def state_bytes(self, tp: int, act_dtype: str) -> int:
        """Bytes one sequence keeps in one layer on one GPU whatever its length (0: none)."""
        return 0

    def work(self, tp: int, act_dtype: str, cache_dtype: str, batch: Batch) -> Work:
        """One layer's mixing over ``batch`` (the GPU's share of the step's sequences) on one GPU."""
        raise NotImplementedError

    def rope_values_per_token(self, tp: int) -> int:
        """Values one token's rotary embedding reads and writes on one GPU (0: no rotary embedding)."""
        return 0

    @property
    def label(self) -> str:
        return self.spec.label
