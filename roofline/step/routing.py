"""How a mixture of experts' router spreads tokens over experts: the expected experts a batch touches (what the
step model counts) and, seeded, the assignments a grouped-GEMM measurement multiplies.

- ``balanced``: the T·k assignments spread as evenly as possible (every expert's count within one of the others'):
  ``min(E, T·k)`` experts touched, the most a batch can touch; what a well-balanced router approaches.
- ``uniform``: each token picks k distinct experts uniformly at random: ``E·(1 − (1 − k/E)^T)`` touched on
  average (fewer than balanced at small batches: some experts are picked twice, others never).
- ``zipf:S``: each token picks k distinct experts, expert e (by rank) with probability ∝ 1/(e+1)^S: a skewed router
  whose hot experts see many tokens while the tail is never touched.

Tokens per touched expert = T·k / touched.  Sampling k distinct experts in proportion to p is done with the
Gumbel top-k trick (the k largest of log p + Gumbel noise), which draws exactly that without-replacement law.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from roofline.core.errors import BadInputError

KINDS = ("balanced", "uniform", "zipf")
# A Zipf exponent past this routes every token to the same k experts: nothing left to model.
MAX_SKEW = 8.0


@dataclass(frozen=True)
class Routing:
    kind: str = "balanced"
    skew: float = 0.0  # zipf's exponent S

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise BadInputError(f"unknown routing {self.kind!r}; choose balanced, uniform or zipf:S")
        if self.kind == "zipf" and not 0 < self.skew <= MAX_SKEW:
            raise BadInputError(f"zipf:S needs 0 < S <= {MAX_SKEW:g}, got {self.skew!r}")

    @classmethod
    def parse(cls, text: str) -> Routing:
        match = re.fullmatch(r"zipf:([0-9.eE+-]+)", text.strip())
        if match:
            try:
                return cls("zipf", float(match.group(1)))
            except ValueError:
                raise BadInputError(f"routing {text!r}: zipf:S needs a number S") from None
        return cls(text.strip())

    @property
    def spelled(self) -> str:
        return f"zipf:{self.skew:g}" if self.kind == "zipf" else self.kind

    def probabilities(self, experts: int) -> np.ndarray:
        ranks = np.arange(1, experts + 1, dtype=float)
        weights = ranks ** -self.skew if self.kind == "zipf" else np.ones(experts)
        return weights / weights.sum()

    def expected_touched(self, experts: int, topk: int, tokens: float) -> float:
        """Distinct experts ``tokens`` tokens route to, on average (at least ``topk``, at most ``experts``)."""
        if experts <= 1:
            return 1.0
        if self.kind == "balanced":
            return float(min(experts, tokens * topk))
        # Each token picks expert e with probability about min(1, k·p_e) (k distinct picks of law p).
        picked = np.minimum(1.0, topk * self.probabilities(experts))
        return float(max(topk, np.sum(1.0 - (1.0 - picked) ** tokens)))

    def tokens_per_expert(self, experts: int, topk: int, tokens: float) -> float:
        """Tokens one touched expert's GEMM sees on average."""
        return tokens * topk / self.expected_touched(experts, topk, tokens) if experts > 1 else tokens

    def global_tokens(self, experts: int, topk: int, per_expert: float) -> float:
        """The global token count at which a touched expert sees ``per_expert`` tokens on average (the inverse of
        ``tokens_per_expert``, which grows with the batch): where a per-expert crossover lands as a batch.  At
        most one token per expert below ``topk`` tokens' worth of assignments: ``per_expert`` ≤ 1 is reached by
        any batch, so 1.  ``inf`` where the routing never gives an expert that many (it cannot: T·k/E bounds it
        from below and grows without end)."""
        if not np.isfinite(per_expert):
            return float("inf")
        if per_expert <= 1 or experts <= 1:
            return max(1.0, float(per_expert)) if experts <= 1 else 1.0
        if self.kind == "balanced":
            return per_expert * experts / topk
        lo, hi = 1.0, 2.0
        while self.tokens_per_expert(experts, topk, hi) < per_expert:
            lo, hi = hi, hi * 2
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self.tokens_per_expert(experts, topk, mid) < per_expert else (lo, mid)
        return hi

    def assign(self, experts: int, topk: int, tokens: int, seed: int) -> np.ndarray:
        """``[tokens, topk]`` expert indices, distinct within each row, drawn from this routing with ``seed``."""
        if not 0 < topk <= experts:
            raise BadInputError(f"top-k {topk} must be between 1 and the {experts} experts")
        rng = np.random.default_rng(seed)
        if self.kind == "balanced":
            order = rng.permutation(experts)  # consecutive slots of one token are distinct: topk <= experts
            return order[(np.arange(tokens * topk) % experts)].reshape(tokens, topk)
        gumbel = rng.gumbel(size=(tokens, experts))
        keys = np.log(self.probabilities(experts))[None, :] + gumbel
        return np.argsort(-keys, axis=1)[:, :topk]


BALANCED = Routing()
