"""How a mixture of experts' router spreads tokens over experts: the expected experts a batch touches (what the
step model counts) and, seeded, the assignments a grouped-GEMM measurement multiplies.

- ``balanced``: the T·k assignments spread as evenly as possible (every expert's count within one of the others'):
  ``min(E, T·k)`` experts touched, the most a batch can touch; what a well-balanced router approaches.
- ``uniform``: each token picks k distinct experts uniformly at random: ``E·(1 − (1 − k/E)^T)`` touched on
  average (fewer than balanced at small batches: some experts are picked twice, others never).
- ``zipf:S``: each token picks k distinct experts, expert e (by rank) with probability ∝ 1/(e+1)^S: a skewed router
  whose hot experts see many tokens while the tail is never touched.  gpubench's own law: no reference database
  measured under it.
- ``power-law:ALPHA``: NVIDIA aiconfigurator's collector's law (``collector/helper.py``,
  ``_generate_power_law_distribution``), under which its database's ``power_law_ALPHA`` MoE rows were measured and
  which its estimator assumes by default (alpha 1.2 for Qwen3/Mixtral/gpt-oss-style MoE, 1.01 for DeepSeek): each
  expert's share of the T·k assignments is a draw x from a power law of exponent ALPHA bounded to [1, 0.8·T] (to
  [0.01, 2] when T·k ≤ E), the shares rounded to whole assignments.  An expert is touched when its rounded count is
  at least one, x ≥ x½ = ½·Σx / (T·k), so on average ``E · P(x ≥ x½)`` with Σx ≈ E·E[x] (``expected_touched``).

Tokens per touched expert = T·k / touched.  Sampling k distinct experts in proportion to p is done with the
Gumbel top-k trick (the k largest of log p + Gumbel noise), which draws exactly that without-replacement law.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from roofline.core.errors import BadInputError

KINDS = ("balanced", "uniform", "zipf", "power-law")
# A Zipf exponent past this routes every token to the same k experts: nothing left to model.
MAX_SKEW = 8.0


@dataclass(frozen=True)
class Routing:
    kind: str = "balanced"
    skew: float = 0.0  # zipf's exponent S, or the power law's ALPHA

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise BadInputError(f"unknown routing {self.kind!r}; choose balanced, uniform, zipf:S or power-law:ALPHA")
        if self.kind == "zipf" and not 0 < self.skew <= MAX_SKEW:
            raise BadInputError(f"zipf:S needs 0 < S <= {MAX_SKEW:g}, got {self.skew!r}")
        # The collector's inverse CDF divides by 1 - ALPHA: a law of exponent 1 is not the one it draws.
        if self.kind == "power-law" and not (0 < self.skew <= MAX_SKEW and self.skew != 1):
            raise BadInputError(f"power-law:ALPHA needs 0 < ALPHA <= {MAX_SKEW:g} and ALPHA != 1 (aiconfigurator's "
                                f"sampler divides by 1 - ALPHA), got {self.skew!r}")

    @classmethod
    def parse(cls, text: str) -> Routing:
        match = re.fullmatch(r"(zipf|power-law):(.*)", text.strip())
        if match:
            kind, value = match.groups()
            try:
                number = float(value)
            except ValueError:
                name = "S" if kind == "zipf" else "ALPHA"
                raise BadInputError(f"routing {text!r}: {kind}:{name} needs a number {name}") from None
            return cls(kind, number)
        return cls(text.strip())

    @property
    def spelled(self) -> str:
        return f"{self.kind}:{self.skew:g}" if self.kind in ("zipf", "power-law") else self.kind

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
        if self.kind == "power-law":
            return _power_law_touched(self.skew, experts, topk, tokens)
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
        if self.kind == "power-law":
            return _power_law_assign(rng, self.skew, experts, topk, tokens)
        if self.kind == "balanced":
            order = rng.permutation(experts)  # consecutive slots of one token are distinct: topk <= experts
            return order[(np.arange(tokens * topk) % experts)].reshape(tokens, topk)
        gumbel = rng.gumbel(size=(tokens, experts))
        keys = np.log(self.probabilities(experts))[None, :] + gumbel
        return np.argsort(-keys, axis=1)[:, :topk]


BALANCED = Routing()


def _power_law_bounds(experts: int, topk: int, tokens: float) -> tuple[float, float]:
    """The collector's bounds on an expert's draw: [1, 0.8·T] when there are more assignments than experts, else
    [0.01, 2] (``_generate_power_law_distribution``)."""
    if tokens * topk > experts:
        return 1.0, max(0.8 * tokens, 1.0 + 1e-9)
    return 0.01, 2.0


def _power_law_touched(alpha: float, experts: int, topk: int, tokens: float) -> float:
    """Expected experts with at least one of the T·k assignments under the collector's power law (module
    docstring): ``E · P(x ≥ ½·E·E[x] / (T·k))`` for x bounded-Pareto of exponent ``alpha`` on [a, b]."""
    a, b = _power_law_bounds(experts, topk, tokens)
    one, two = 1.0 - alpha, 2.0 - alpha
    norm = b ** one - a ** one
    mean = (one / two) * (b ** two - a ** two) / norm if abs(two) > 1e-12 else one * np.log(b / a) / norm
    threshold = 0.5 * experts * mean / (tokens * topk)
    if threshold <= a:
        share = 1.0
    elif threshold >= b:
        share = 0.0
    else:
        share = (b ** one - threshold ** one) / (b ** one - a ** one)
    return float(min(experts, tokens * topk, max(min(topk, experts), experts * share)))


def _power_law_assign(rng: np.random.Generator, alpha: float, experts: int, topk: int, tokens: int) -> np.ndarray:
    """``[tokens, topk]`` assignments as the collector lays them out: each expert's count drawn from the law and
    rounded to T·k in all, the experts sorted by count and their assignments dealt column by column (so a row's k
    experts are distinct while no count exceeds T: a larger one is cut to T and its excess given to the next)."""
    a, b = _power_law_bounds(experts, topk, tokens)
    one = 1.0 - alpha
    draws = ((b ** one - a ** one) * rng.random(experts) + a ** one) ** (1.0 / one)
    target = tokens * topk
    counts = np.round(draws / draws.sum() * target).astype(int)
    order = np.argsort(-counts, kind="stable")
    delta = target - int(counts.sum())
    for i in range(abs(delta)):  # the collector's fix-up: the largest take the surplus, the smallest give back
        expert = order[i % experts] if delta > 0 else order[-(i % experts) - 1]
        counts[expert] += 1 if delta > 0 else (-1 if counts[expert] > 0 else 0)
    counts = np.minimum(counts, tokens)
    for expert in order:  # what rounding or the cut left over goes to the next experts with room
        room = min(tokens - counts[expert], target - int(counts.sum()))
        if room <= 0 and int(counts.sum()) >= target:
            break
        counts[expert] += max(room, 0)
    flat = np.repeat(np.argsort(-counts, kind="stable"), np.sort(counts)[::-1])
    return flat[:target].reshape(topk, tokens).T
