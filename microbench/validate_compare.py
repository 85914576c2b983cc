"""Predicted against measured, and the engine-overhead fit: pure Python on recorded times (no torch).

The overhead of an engine path is ``per_step_s + per_sequence_s × sequences`` on top of the profile's kernel
times (``docs/serving.md``).  It is fitted on calibration runs only — never on the workload being predicted —
by non-negative least squares of (measured − simulated kernel-only) makespan against the simulated steps and
sequence-steps of each run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from roofline.serving.profile_doc import EngineOverhead

PERCENTILES = (50, 90, 99)


def run_latencies(requests) -> dict[str, np.ndarray]:
    """TTFT, TPOT (outputs of more than one token) and end-to-end latency of any per-request records with
    ``arrival_s``, ``first_token_s``, ``finish_s`` and ``output_tokens`` (engine or simulator)."""
    ttft = [r.first_token_s - r.arrival_s for r in requests]
    tpot = [(r.finish_s - r.first_token_s) / (r.output_tokens - 1) for r in requests if r.output_tokens > 1]
    e2e = [r.finish_s - r.arrival_s for r in requests]
    return {"ttft": np.array(ttft), "tpot": np.array(tpot), "e2e": np.array(e2e)}


def run_summary(requests) -> dict[str, Any]:
    """Total time (first arrival to last finish), throughput and latency percentiles."""
    total = max(r.finish_s for r in requests) - min(r.arrival_s for r in requests)
    tokens = sum(r.output_tokens for r in requests)
    out: dict[str, Any] = {"total_s": total, "output_tokens": tokens, "tokens_per_s": tokens / total,
                           "requests_per_s": len(requests) / total}
    for name, values in run_latencies(requests).items():
        for p in PERCENTILES:
            out[f"{name}_p{p}_s"] = float(np.percentile(values, p)) if len(values) else None
    return out


def relative_error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or not measured:
        return None
    return (predicted - measured) / measured


def compare_runs(predicted, measured) -> dict[str, Any]:
    """Every metric of ``run_summary`` side by side with its relative error (predicted − measured) / measured."""
    p, m = run_summary(predicted), run_summary(measured)
    return {key: {"predicted": p[key], "measured": m[key], "rel_err": relative_error(p[key], m[key])}
            for key in p if key != "output_tokens"}


def fit_overhead(calibrations: Sequence[tuple[float, Any]], fitted_on: str) -> EngineOverhead:
    """``calibrations``: (measured makespan, kernel-only SimulationRun of the same requests) per run.

    Solves ``measured − kernel = a·steps + b·sequence_steps`` for a, b >= 0 in the least-squares sense (with
    one run, or runs that cannot tell them apart, everything goes to the per-step term)."""
    rows, excess = [], []
    for measured_s, run in calibrations:
        rows.append((len(run.steps), float(sum(s.sequences for s in run.steps))))
        excess.append(measured_s - run.makespan_s)
    a_matrix, y = np.array(rows, dtype=float), np.array(excess, dtype=float)
    best = (math.inf, 0.0, 0.0)
    candidates = []
    if len(rows) >= 2 and np.linalg.matrix_rank(a_matrix) == 2:
        candidates.append(np.linalg.lstsq(a_matrix, y, rcond=None)[0])
    for column in (0, 1):  # one term at zero: the non-negative least squares solution lies on an edge
        x = a_matrix[:, column]
        coefficient = float(x @ y / (x @ x)) if x @ x else 0.0
        candidates.append(np.array([coefficient, 0.0] if column == 0 else [0.0, coefficient]))
    for per_step, per_sequence in candidates:
        per_step, per_sequence = max(0.0, float(per_step)), max(0.0, float(per_sequence))
        residual = float(np.sum((a_matrix @ np.array([per_step, per_sequence]) - y) ** 2))
        if residual < best[0] - 1e-18:
            best = (residual, per_step, per_sequence)
    return EngineOverhead(per_step_s=best[1], per_sequence_s=best[2], fitted_on=fitted_on)


def comparison_lines(comparisons: dict[str, dict[str, Any]], ratio: dict[str, Any]) -> list[str]:
    """The terminal table: one row per metric, predicted and measured per path, then the ratio."""
    paths = list(comparisons)
    header = f"{'metric':<16}" + "".join(f"{p + ' pred':>16}{p + ' meas':>16}{'err':>8}" for p in paths)
    lines = [header]
    for key in comparisons[paths[0]]:
        cells = f"{key:<16}"
        for path in paths:
            entry = comparisons[path][key]
            cells += f"{_fmt(entry['predicted']):>16}{_fmt(entry['measured']):>16}{_pct(entry['rel_err']):>8}"
        lines.append(cells)
    lines.append(f"static/continuous total time: predicted {ratio['predicted']:.3f}, measured {ratio['measured']:.3f}"
                 f" ({_pct(ratio['rel_err'])})")
    return lines


def _fmt(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.4g}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:+.1f}%"
