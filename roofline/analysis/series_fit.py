"""What the fit of one series (op, backend, dtype, N×K over batch) says: a frozen record, plain data for JSON.

Its own module so that the fit (``series``) and the words about it (``verdict``) both read it and neither
imports the other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class SeriesFit:
    op: str
    backend: str
    dtype: str
    n: int
    k: int
    # ok | lower-bound | memory-bound-at-every-batch | bandwidth-only | insufficient | not-a-roofline
    status: str
    message: str
    points_ok: int
    batches: list[int]
    bandwidth_bytes_per_s: float | None = None
    peak_flop_per_s: float | None = None
    peak_flop_per_s_lower_bound: float | None = None
    ridge_flop_per_byte: float | None = None
    critical_batch: float | None = None
    critical_batch_ci95: list[float | None] = field(default_factory=lambda: [None, None])
    bandwidth_ci95: list[float | None] = field(default_factory=lambda: [None, None])
    peak_ci95: list[float | None] = field(default_factory=lambda: [None, None])
    critical_batch_lower_bound: int | None = None
    spec_ridge_flop_per_byte: float | None = None
    spec_critical_batch: float | None = None
    knee_batch_1p10: int | None = None
    knee_batch_1p25: int | None = None
    cliffs: list[int] = field(default_factory=list)
    # The fit's roof is this series' own envelope: the regime of the points it was fitted to.
    roof_regime: str = "fitted to this series' points"
    set_aside: list[dict[str, Any]] = field(default_factory=list)  # [{"batch", "why"}]
    above_measured_ceiling: list[dict[str, Any]] = field(default_factory=list)  # [{"batch", "ceiling", "pct"}]
    points: list[dict[str, Any]] = field(default_factory=list)
    # A grouped series (a mixture of experts' grouped GEMM): its experts, top-k and routing, and its crossover
    # per expert (tokens one expert's GEMM needs to reach the ridge) beside ``critical_batch``, the global token
    # count that gives each touched expert that many under the routing.
    experts: int | None = None
    topk: int | None = None
    routing: str | None = None
    critical_tokens_per_expert: float | None = None
    critical_tokens_per_expert_ci95: list[float | None] = field(default_factory=lambda: [None, None])
    # A state_update or sparse_attention series: its mixer's shape beyond n and k (``counting.MixerShape.to_dict``).
    # These ops read each sequence's own state or cache, so their intensity is flat: the fit gives their bandwidth.
    mixer: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
