"""Predicted against measured, and the engine-overhead fit: pure Python on recorded times (no torch).

The overhead of an engine path is ``EngineOverhead``: per step, per sequence, per cached token attended and per
prefill step, on top of the profile's kernel times (``docs/serving.md``).  It is fitted on calibration runs
only — never on the workload being predicted — by non-negative least squares, STEP BY STEP: each calibration
step's measured duration less its simulated kernel time, against what each term multiplies in that step.
Hundreds of steps of different batch sizes and cache lengths separate the terms; two run totals (the earlier
fit) could only split two terms, and a few percent of noise in either total swung them by tens of percent.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from roofline.core.units import seconds
from roofline.serving.latency import PERCENTILES, latencies, percentile_s, span_s
from roofline.serving.profile_doc import EngineOverhead


def run_summary(requests) -> dict[str, Any]:
    """Total time (first arrival to last finish), throughput and latency percentiles of the engine's or the
    simulator's per-request records (``roofline.serving.latency``)."""
    total = span_s(requests)
    tokens = sum(r.output_tokens for r in requests)
    out: dict[str, Any] = {"total_s": total, "output_tokens": tokens, "tokens_per_s": tokens / total,
                           "requests_per_s": len(requests) / total}
    for name, values in latencies(requests).items():
        for p in PERCENTILES:
            out[f"{name}_p{p}_s"] = percentile_s(values, p)
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


@dataclass(frozen=True)
class CalibrationRun:
    """One calibration run: the engine's step durations, and for the simulator's schedule of the same requests
    each step's kernel-only time and, per ``EngineOverhead`` term, the amount it multiplies in that step."""

    measured_s: tuple[float, ...]
    kernel_s: tuple[float, ...]
    terms: dict[str, tuple[float, ...]]

    @property
    def aligned(self) -> bool:
        """The engine stamped exactly the simulator's steps (else only the totals can be compared)."""
        return len(self.measured_s) == len(self.kernel_s)


def fit_overhead(calibrations: Sequence[CalibrationRun], fitted_on: str) -> EngineOverhead:
    """Non-negative least squares of the measured time beyond the kernels against the overhead terms: one row
    per step of every run whose steps align with the simulator's, one row of totals per run that does not."""
    names = EngineOverhead.TERMS
    rows, excess = [], []
    for run in calibrations:
        columns = [run.terms[name] for name in names]
        if run.aligned:
            rows += [list(values) for values in zip(*columns, strict=True)]
            excess += [m - k for m, k in zip(run.measured_s, run.kernel_s, strict=True)]
        else:
            rows.append([math.fsum(values) for values in columns])
            excess.append(math.fsum(run.measured_s) - math.fsum(run.kernel_s))
    coefficients = nnls(np.array(rows, dtype=float), np.array(excess, dtype=float))
    terms: dict[str, Any] = dict(zip(names, (float(c) for c in coefficients), strict=True))
    return EngineOverhead(**terms, fitted_on=fitted_on)


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


# Each overhead term and what it is paid for, in the order a step adds them up.
OVERHEAD_UNITS = tuple(EngineOverhead.UNITS.items())


def overhead_line(path: str, overhead: dict[str, Any]) -> str:
    """A path's fitted overhead, each term in its own scale (``2.61 ms/sequence`` beside ``0 ns/step``, not
    ``0.000 ms/step`` beside ``2614.2 µs/sequence``)."""
    terms = " + ".join(f"{seconds(overhead.get(name, 0.0))}/{unit}" for name, unit in OVERHEAD_UNITS)
    return f"{path} overhead: {terms}, fitted on {overhead['fitted_on']}"


# The profile's kernels run inside the engine's steps, so they cannot take longer than those steps; past this share
# (the 10% above 1 is noise between two measurements) the profile and the engine were not timed alike.
KERNEL_SHARE_LIMIT = 1.10


def kernel_share_line(path: str, mode: str, share: float | None) -> str:
    """One path's kernel share: how much of the engine's measured step time the profile's kernels are."""
    if share is None:
        return f"{path} ({mode}): kernel share of the measured step time unknown (no step time measured)"
    head = (f"{path} ({mode}): kernels are {100 * share:.0f}% of the measured step time (the profile's kernel time "
            f"without overhead over the engine's)")
    if share > KERNEL_SHARE_LIMIT:
        return f"{head}: longer than the steps that ran them, so not a share of anything (see the error below)"
    return f"{head}; the rest is engine overhead"


def impossible_share(document: dict[str, Any]) -> str | None:
    """Why validate.json's comparison is no evidence, or None: a path whose profile kernels take longer than the
    engine's steps that ran them (``KERNEL_SHARE_LIMIT``).  The message names what the two were timed with (the
    profile's basis, torch threads and date; the engine's clock and threads): kernels inside a step cannot
    outlast it, so the two measurements disagree about the machine, not about the engine."""
    over = {path: run["kernel_share"] for path, run in document["runs"].items()
            if run.get("kernel_share") is not None and run["kernel_share"] > KERNEL_SHARE_LIMIT}
    if not over:
        return None
    shares = ", ".join(f"{path} {100 * share:.0f}%" for path, share in over.items())
    profile, engine = document["profile"], document["engine"]
    clocks = sorted({run["measured"]["settings"].get("clock", "wall") for run in document["runs"].values()})
    return (f"the profile's kernels take longer than the engine steps that ran them ({shares} of the measured "
            f"step time, over the {100 * KERNEL_SHARE_LIMIT:.0f}% noise allows): the comparison is no evidence. "
            f"Profile: {profile['basis']}, {document['device'].get('threads', '?')} torch thread(s), measured "
            f"{profile['created_at']} ({profile['path']}); engine: {'/'.join(clocks)} clock, "
            f"{engine['torch_threads']} torch thread(s), now. On a shared CPU a wall-clock time counts other "
            "processes' turns, and with more than one torch thread each kernel waits for its threads to be "
            "scheduled, so a profile timed at another moment measures another load: measure it inside validate "
            "(drop --profile), or time both on --clock thread-cpu with one thread; validate.json keeps the runs")


def _fmt(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.4g}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:+.1f}%"
