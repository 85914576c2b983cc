"""The engine-overhead fit and the predicted-against-measured summary, shared by ``gpubench validate`` (which
times the engine's steps itself) and ``gpubench calibrate`` (which reads a load generator's per-request times).

The overhead is ``EngineOverhead``: per step, per sequence, per cached token attended and per prefill step, on
top of the profile's kernel times (``docs/serving.md``).  Each row of the fit is a stretch of engine time that
was measured (a step, an inter-token gap, a request's decode span) less the simulated kernel time of the steps
it spans, against what each term multiplies over those steps; non-negative least squares solves it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from roofline.serving.latency import PERCENTILES, ServedRequest, latencies, percentile_s, span_s


def nnls(a_matrix: np.ndarray, y: np.ndarray) -> np.ndarray:
    """argmin |A x − y| over x >= 0, for the few columns of an overhead model: the optimum is the least-squares
    solution on some subset of the columns that comes out non-negative, so try every subset (4 terms: 15)."""
    columns = a_matrix.shape[1]
    best, best_residual = np.zeros(columns), float(y @ y)
    for size in range(1, columns + 1):
        for subset in itertools.combinations(range(columns), size):
            part = a_matrix[:, subset]
            if not part.any():
                continue
            solution = np.linalg.lstsq(part, y, rcond=None)[0]
            if (solution < 0).any():
                continue
            x = np.zeros(columns)
            x[list(subset)] = solution
            residual = float(np.sum((a_matrix @ x - y) ** 2))
            if residual < best_residual - 1e-18:
                best, best_residual = x, residual
    return best


def run_summary(requests) -> dict[str, Any]:
    """Total time (first arrival to last finish, s), throughput (output tokens/s, requests/s) and latency
    percentiles (s) of an engine's, a load generator's or the simulator's per-request records
    (``roofline.serving.latency``); a percentile with no sample (no ITL recorded) is None."""
    total = span_s(requests)
    tokens = sum(r.output_tokens for r in requests)
    out: dict[str, Any] = {"total_s": total, "output_tokens": tokens, "tokens_per_s": tokens / total if total else None,
                           "requests_per_s": len(requests) / total if total else None}
    samples = latencies(requests)
    # The metrics an engine's records carry too (TTFT's queueing and prefill need an admission time they lack).
    for name in ("ttft", "tpot", "e2e", "itl"):
        values = samples[name]
        for p in PERCENTILES:
            out[f"{name}_p{p}_s"] = percentile_s(values, p)
    return out


def pooled_summary(runs: Sequence[Sequence[ServedRequest]]) -> dict[str, Any]:
    """``run_summary`` of several runs of one workload taken together: latency percentiles over every run's
    requests, throughput as all their output tokens (requests) over the sum of the runs' spans (each run's
    times count from its own start, so their spans add)."""
    out = run_summary([r for run in runs for r in run])
    total = sum(span_s(run) for run in runs)
    out.update(total_s=total, tokens_per_s=out["output_tokens"] / total if total else None,
               requests_per_s=sum(len(run) for run in runs) / total if total else None)
    return out


def relative_error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or not measured:
        return None
    return (predicted - measured) / measured


def compare_runs(predicted, measured) -> dict[str, Any]:
    """Every metric of ``run_summary`` side by side with its relative error (predicted − measured) / measured."""
    return _side_by_side(run_summary(predicted), run_summary(measured))


def compare_pooled(pairs: Sequence[tuple[Sequence[ServedRequest], Sequence[ServedRequest]]]) -> dict[str, Any]:
    """``compare_runs`` of several (predicted, measured) runs of one workload taken together (``pooled_summary``)."""
    return _side_by_side(pooled_summary([p for p, _ in pairs]), pooled_summary([m for _, m in pairs]))


def _side_by_side(p: dict[str, Any], m: dict[str, Any]) -> dict[str, Any]:
    return {key: {"predicted": p[key], "measured": m[key], "rel_err": relative_error(p[key], m[key])}
            for key in p if key != "output_tokens"}
