"""One engine step's composition: which sequences decode and which prompts (or parts of them) are prefilled."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Batch:
    """One step's composition: ``decodes`` sequences decoding ``queries`` tokens each (1; a speculative
    verification's K + 1) over caches whose lengths sum to ``context_sum`` (the new tokens included), and prefill
    ``chunks`` of (tokens, cached prefix)."""

    decodes: int = 0
    context_sum: float = 0
    chunks: tuple[tuple[int, int], ...] = ()
    queries: int = 1

    @property
    def tokens(self) -> int:
        return self.decodes * self.queries + sum(c for c, _ in self.chunks)

    @property
    def logits(self) -> int:
        """Rows of the LM head: one per decoded token (a verification checks each draft) and per chunk (its last
        position)."""
        return self.decodes * self.queries + len(self.chunks)

    @classmethod
    def decode(cls, batch: int, context: int, queries: int = 1) -> Batch:
        return cls(batch, batch * context, (), queries)
