"""One served request's record and its latencies and their percentiles, written once.

``ServedRequest`` is the one record of a request that was served: the ``Request`` it was (its id, arrival and
lengths, declared once, in ``roofline.serving.workload``) and when its tokens came back.  A benchmark's measured
requests are ServedRequests as they are (``roofline.calibrate.bench``); the simulator's ``RequestOutcome`` and the
engine's ``RequestTiming`` are ServedRequests with what each also knows (preemptions and admission; the steps each
token came at), so ``simulate``, ``validate``, ``calibrate`` and the capacity search read the same numbers.

The definitions are vLLM's serving benchmark's (docs/serving.md): TTFT from arrival to the first token; TPOT the
request's mean gap after its first token; ITL every gap between two consecutive tokens of a request, pooled over
all requests before any percentile is taken, so one long stall is a tail gap and is not averaged away as TPOT
averages it; end-to-end from arrival to the last token.  Tokens that arrive together (a speculative step's accepted
drafts and its own token) are one chunk, as vLLM streams them: ITL is the gap between chunks, one per chunk after
the first, while TPOT stays per output token."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from roofline.serving.workload import Request

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, slots=True)
class ServedRequest:
    """A request and when its tokens came back, seconds on its run's clock: the first token, the last, and every
    output token's time in order (``token_times_s``; empty where they were not kept, and the request has no ITL
    samples).  Its id, arrival and lengths are its request's, read through."""

    request: Request
    first_token_s: float
    finish_s: float
    token_times_s: Sequence[float] = ()

    @property
    def id(self) -> int:
        return self.request.id

    @property
    def arrival_s(self) -> float:
        return self.request.arrival_s

    @property
    def prompt_tokens(self) -> int:
        return self.request.prompt_tokens

    @property
    def output_tokens(self) -> int:
        return self.request.output_tokens

    @property
    def ttft_s(self) -> float:
        return time_to_first_token_s(self)

    @property
    def e2e_s(self) -> float:
        return end_to_end_s(self)

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first (None for a one-token output)."""
        return time_per_output_token_s(self)


def time_to_first_token_s(request: ServedRequest) -> float:
    return request.first_token_s - request.arrival_s


def time_per_output_token_s(request: ServedRequest) -> float | None:
    """Mean time per output token after the first (None for a one-token output)."""
    if request.output_tokens <= 1:
        return None
    return (request.finish_s - request.first_token_s) / (request.output_tokens - 1)


def end_to_end_s(request: ServedRequest) -> float:
    return request.finish_s - request.arrival_s


def span_s(requests: Sequence[ServedRequest]) -> float:
    """First arrival to last finish."""
    return max(r.finish_s for r in requests) - min(r.arrival_s for r in requests)


def inter_token_latencies_s(request: ServedRequest) -> np.ndarray:
    """The request's gaps between consecutive chunks of output tokens, in order (one fewer than its tokens when
    each token is its own chunk; tokens that share their time are one chunk)."""
    gaps = np.diff(np.asarray(request.token_times_s, dtype=float))
    return gaps[gaps > 0]


def _gaps_and_owners(requests: Sequence[ServedRequest]) -> tuple[np.ndarray, np.ndarray]:
    """Every request's inter-token gaps in one array, and the index of the request each belongs to.  One
    concatenation and one difference for all requests: 10,000 requests' np.diff calls one by one cost more than
    the rest of a summary."""
    counts = np.fromiter((len(r.token_times_s) for r in requests), dtype=np.int64, count=len(requests))
    if counts.sum() < 2:
        return np.empty(0), np.empty(0, dtype=np.int64)
    times = np.concatenate([np.asarray(r.token_times_s, dtype=float) for r in requests])
    gaps = np.diff(times)
    # The gap from one request's last token to the next request's first is no gap of either: drop it.
    keep = np.ones(len(gaps), dtype=bool)
    seams = np.cumsum(counts)[:-1] - 1
    keep[seams[(seams >= 0) & (seams < len(gaps))]] = False
    owners = np.repeat(np.arange(len(requests)), np.maximum(counts - 1, 0))
    gaps = gaps[keep]
    # Tokens of one chunk share their time: no gap between them (vLLM's ITL is one gap per streamed chunk).
    chunk = gaps > 0
    return gaps[chunk], owners[chunk]


def pooled_inter_token_latencies_s(requests: Sequence[ServedRequest]) -> np.ndarray:
    """Every gap between consecutive output tokens of every request, pooled (vLLM's ITL), seconds."""
    return _gaps_and_owners(requests)[0]


def own_inter_token_percentile_s(requests: Sequence[ServedRequest], percentile: float) -> np.ndarray:
    """Per request, the ``percentile`` of its own gaps (numpy's linear method, as ``percentile_s``); NaN for a
    request with fewer than two tokens.  Vectorised: the gaps sorted within each request, then interpolated."""
    gaps, owners = _gaps_and_owners(requests)
    out = np.full(len(requests), np.nan)
    if not len(gaps):
        return out
    ordered = gaps[np.lexsort((gaps, owners))]
    counts = np.bincount(owners, minlength=len(requests))
    starts = np.cumsum(counts) - counts
    has = counts > 0
    position = percentile / 100 * (counts[has] - 1)
    below = np.floor(position).astype(np.int64)
    above = np.minimum(below + 1, counts[has] - 1)
    low, high = ordered[starts[has] + below], ordered[starts[has] + above]
    out[has] = low + (position - below) * (high - low)
    return out


def request_latencies(requests: Sequence[ServedRequest]) -> dict[str, np.ndarray]:
    """Each request's own TTFT, TPOT (NaN for a one-token output) and end-to-end latency, and TTFT's two parts:
    queueing, arrival to first admission into a step (the scheduling delay), and prefill, that admission to the
    first token (NaN both where the record keeps no admission time: a measured engine's), in request order."""
    tpot = (time_per_output_token_s(r) for r in requests)
    ttft = np.array([time_to_first_token_s(r) for r in requests], dtype=float)
    scheduled = np.array([getattr(r, "scheduled_s", np.nan) for r in requests], dtype=float)
    arrival = np.array([r.arrival_s for r in requests], dtype=float)
    return {"ttft": ttft, "tpot": np.array([np.nan if t is None else t for t in tpot], dtype=float),
            "e2e": np.array([end_to_end_s(r) for r in requests], dtype=float),
            "queue": scheduled - arrival, "prefill": ttft - (scheduled - arrival)}


def latencies(requests: Sequence[ServedRequest]) -> dict[str, np.ndarray]:
    """The samples each percentile is taken over, seconds: per request TTFT, TPOT (requests with more than one
    output token), end-to-end latency, queueing and prefill (requests whose admission was recorded); ITL, every
    inter-token gap of every request."""
    own = request_latencies(requests)
    for name in ("tpot", "queue", "prefill"):
        own[name] = own[name][~np.isnan(own[name])]
    own["itl"] = pooled_inter_token_latencies_s(requests)
    return own


def mean_s(values: np.ndarray) -> float | None:
    """The arithmetic mean of the latencies (every engine benchmark reports it beside the percentiles); None when
    there are none."""
    return float(values.mean()) if len(values) else None


def percentile_s(values: np.ndarray, percentile: float) -> float | None:
    """numpy's (linear) percentile of the latencies; None when there are none (no output of two tokens)."""
    return float(np.percentile(values, percentile)) if len(values) else None
