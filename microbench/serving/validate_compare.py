"""Predicted against measured, and the engine-overhead fit of validate's timed steps: pure Python on recorded
times (no torch); the solver and the summary are ``roofline.calibrate.fit``'s, shared with ``gpubench calibrate``.

The overhead of an engine path is ``EngineOverhead``: per step, per sequence, per cached token attended and per
prefill step, on top of the profile's kernel times (``docs/serving.md``).  It is fitted on calibration runs
only — never on the workload being predicted — by non-negative least squares, STEP BY STEP: each calibration
step's measured duration less its simulated kernel time, against what each term multiplies in that step.
Hundreds of steps of different batch sizes and cache lengths separate the terms; two run totals (the earlier
fit) could only split two terms, and a few percent of noise in either total swung them by tens of percent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from roofline.calibrate.fit import compare_runs, nnls, relative_error, run_summary
from roofline.core.units import seconds
from roofline.serving.profile_doc import EngineOverhead

__all__ = ["CalibrationRun", "compare_runs", "fit_overhead", "nnls", "relative_error", "run_summary"]


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
    if ratio.get("why_none"):
        lines.append(f"static/continuous total time: not measured ({ratio['why_none']})")
    else:
        lines.append(f"static/continuous total time: predicted {ratio['predicted']:.3f}, measured "
                     f"{ratio['measured']:.3f} ({_pct(ratio['rel_err'])})")
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
