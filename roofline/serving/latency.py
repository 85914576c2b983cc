"""A request's latencies and their percentiles, written once for every per-request record: the simulator's
``RequestOutcome`` and the engine's ``RequestTiming`` both carry ``arrival_s``, ``first_token_s``, ``finish_s``
and ``output_tokens``, so ``simulate``, ``validate`` and the capacity search read the same numbers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

PERCENTILES = (50, 90, 99)


class Timed(Protocol):
    arrival_s: float
    first_token_s: float
    finish_s: float
    output_tokens: int


def time_to_first_token_s(request: Timed) -> float:
    return request.first_token_s - request.arrival_s


def time_per_output_token_s(request: Timed) -> float | None:
    """Mean time per output token after the first (None for a one-token output)."""
    if request.output_tokens <= 1:
        return None
    return (request.finish_s - request.first_token_s) / (request.output_tokens - 1)


def end_to_end_s(request: Timed) -> float:
    return request.finish_s - request.arrival_s


def span_s(requests: Sequence[Timed]) -> float:
    """First arrival to last finish."""
    return max(r.finish_s for r in requests) - min(r.arrival_s for r in requests)


def latencies(requests: Sequence[Timed]) -> dict[str, np.ndarray]:
    """Per-request TTFT, TPOT (requests with more than one output token) and end-to-end latency, seconds."""
    tpot = (time_per_output_token_s(r) for r in requests)
    return {"ttft": np.array([time_to_first_token_s(r) for r in requests]),
            "tpot": np.array([t for t in tpot if t is not None]),
            "e2e": np.array([end_to_end_s(r) for r in requests])}


def percentile_s(values: np.ndarray, percentile: float) -> float | None:
    """numpy's (linear) percentile of the latencies; None when there are none (no output of two tokens)."""
    return float(np.percentile(values, percentile)) if len(values) else None
