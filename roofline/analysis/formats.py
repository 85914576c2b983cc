"""Weight-only formats against bf16 on the same layer: the speed-up per batch and the break-even batch.

A weight-only format (``w8a16``, ``w4a16``) reads fewer weight bytes, so it wins while the launch is
memory-bound, and loses once the dequantisation and a slower kernel cost more than the bytes it saves.  For
each layer shape (and back end) measured in bf16 and in a weight-only format, at every batch measured in
both: speed-up = bf16 median time / the format's median time.  The points are those the fit uses
(``Point.usable``: ok, correct, not superseded by a retry), gemm's, with the gemv point standing in at batch 1
when gemm did not measure it (the same product, B = 1).

The break-even batch is where the speed-up first falls below 1 as the batch grows, interpolated between the
last batch at or above 1 and the first below it, linearly in log batch.  It is *beyond the largest batch
measured* when the speed-up never falls below 1 (no value), and *no batch pays off* when it is below 1 at the
smallest batch already.  Intervals are 95% percentile bootstrap intervals: each replicate resamples every
point's own samples (seeded), and recomputes the speed-ups and the crossing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from roofline.core.counting import is_weight_only
from roofline.core.units import interval_digits
from roofline.result.document import Point, Result, backend_tag

BASELINE = "bf16"
BOOTSTRAP_REPLICATES = 400
CROSSES = "crosses"
BEYOND = "beyond-largest-batch"
NEVER = "no-batch-pays-off"


@dataclass(frozen=True)
class FormatComparison:
    """One weight-only format against bf16 on one N×K layer: plain data for JSON."""

    format: str
    baseline: str
    backend: str
    n: int
    k: int
    batches: list[int]
    speedup: list[float]  # bf16 median time / the format's, per batch
    speedup_ci95: list[list[float]]
    speedup_batch1: float | None
    speedup_batch1_ci95: list[float | None]
    # crosses | beyond-largest-batch | no-batch-pays-off
    status: str
    break_even_batch: float | None
    # A bound is None where over 2.5% of replicates do not cross on that side: the low one when they pay off
    # at no batch, the high one when they pay off at every batch measured.
    break_even_ci95: list[float | None]
    # What ran each side (the points' ``kernel``; None in results that did not record it): a format's figures
    # describe its kernel as much as the format, so every sentence and table names both.
    kernel: str | None = None
    baseline_kernel: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def crossing_batch(batches: np.ndarray, speedup: np.ndarray) -> float:
    """The batch where ``speedup`` first falls below 1, linear in log batch between its neighbours; ``inf``
    when it never does, ``-inf`` when it is below 1 at the smallest batch."""
    below = np.nonzero(speedup < 1.0)[0]
    if below.size == 0:
        return math.inf
    first = int(below[0])
    if first == 0:
        return -math.inf
    s0, s1 = float(speedup[first - 1]), float(speedup[first])
    x0, x1 = math.log(batches[first - 1]), math.log(batches[first])
    return math.exp(x0 + (s0 - 1.0) / (s0 - s1) * (x1 - x0))


def _status(value: float) -> str:
    if value == math.inf:
        return BEYOND
    return NEVER if value == -math.inf else CROSSES


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _interval(values: np.ndarray) -> list[float | None]:
    # Order statistics, as the fit's intervals: replicates that never cross are ±inf, not numbers to average.
    lo, hi = np.quantile(values, 0.025, method="lower"), np.quantile(values, 0.975, method="higher")
    return [_finite(float(lo)), _finite(float(hi))]


def _holding(interval: list[float | None], value: float) -> list[float | None]:
    """``interval`` widened to hold its own estimate (a known bound only: an open side stays open)."""
    if not math.isfinite(value):
        return interval
    low, high = interval
    return [None if low is None else min(low, value), None if high is None else max(high, value)]


def _samples_by_batch(points: list[Point]) -> dict[int, np.ndarray]:
    """Batch -> samples of one dtype's usable gemm points, the gemv point filling in batch 1."""
    gemm = {p.batch: np.asarray(p.samples_s, dtype=float) for p in points if p.op == "gemm"}
    gemv = [p for p in points if p.op == "gemv" and p.batch == 1]
    if 1 not in gemm and gemv:
        gemm[1] = np.asarray(gemv[-1].samples_s, dtype=float)
    return gemm


def _replicate_medians(samples: np.ndarray, rng: np.random.Generator, replicates: int) -> np.ndarray:
    index = rng.integers(0, len(samples), size=(replicates, len(samples)))
    return np.median(samples[index], axis=1)


def compare_format(baseline: dict[int, np.ndarray], quantized: dict[int, np.ndarray], fmt: str, backend: str,
                   n: int, k: int, seed: int = 0, replicates: int = BOOTSTRAP_REPLICATES,
                   kernels: tuple[str | None, str | None] = (None, None)) -> FormatComparison | None:
    """``fmt`` against bf16 at every batch both measured (batch -> samples each); None with no common batch."""
    batches = np.array(sorted(set(baseline) & set(quantized)))
    if batches.size == 0:
        return None
    rng = np.random.default_rng(seed)
    speedup = np.array([np.median(baseline[b]) / np.median(quantized[b]) for b in batches])
    replicated = np.column_stack([
        _replicate_medians(baseline[b], rng, replicates) / _replicate_medians(quantized[b], rng, replicates)
        for b in batches])
    # A percentile interval from a few noisy samples can miss its own estimate (a ratio of medians of 3 samples
    # is biased): it is widened to hold it, so no figure is printed outside its interval.
    speedup_ci = [_holding([float(np.quantile(column, 0.025)), float(np.quantile(column, 0.975))], float(s))
                  for column, s in zip(replicated.T, speedup, strict=True)]
    crossings = np.array([crossing_batch(batches, row) for row in replicated])
    value = crossing_batch(batches, speedup)
    at_one = batches[0] == 1
    return FormatComparison(
        format=fmt, baseline=BASELINE, backend=backend, n=n, k=k, batches=[int(b) for b in batches],
        speedup=[float(s) for s in speedup], speedup_ci95=speedup_ci,
        speedup_batch1=float(speedup[0]) if at_one else None,
        speedup_batch1_ci95=list(speedup_ci[0]) if at_one else [None, None],
        status=_status(value), break_even_batch=_finite(value), break_even_ci95=_holding(_interval(crossings), value),
        kernel=kernels[0], baseline_kernel=kernels[1])


def kernels_of(points: list[Point]) -> str | None:
    """The kernel(s) the points ran, in order of first use ("a / b" when a series switched), or None."""
    names = list(dict.fromkeys(p.kernel for p in points if p.kernel))
    return " / ".join(names) or None


def format_comparisons(result: Result, seed: int = 0) -> list[FormatComparison]:
    """Every weight-only format against bf16, per layer shape and back end, in the result's order."""
    by_layer: dict[tuple[str, int, int], dict[str, list[Point]]] = defaultdict(lambda: defaultdict(list))
    for point in result.points:
        if point.usable and point.op in ("gemm", "gemv"):
            by_layer[(point.backend, point.n, point.k)][point.dtype].append(point)
    out = []
    for (backend, n, k), dtypes in by_layer.items():
        if BASELINE not in dtypes:
            continue
        baseline = _samples_by_batch(dtypes[BASELINE])
        for fmt in (d for d in dtypes if is_weight_only(d)):
            found = compare_format(baseline, _samples_by_batch(dtypes[fmt]), fmt, backend, n, k, seed,
                                   kernels=(kernels_of(dtypes[fmt]), kernels_of(dtypes[BASELINE])))
            if found is not None:
                out.append(found)
    return out


# --- the words: one formatter for the verdict, the report's table and compare ---

def with_interval(value: float, low: float | None, high: float | None,
                  whole: bool = False) -> tuple[str, str, str]:
    """``value`` to the digits its interval earns (``interval_digits``), its bounds rounded outward one place
    finer: the printed interval holds the computed one, the value never prints outside it (47 in [45.1, 49.3]
    at one digit would read "50 (45–49)"), and a bound rounded at the value's own place does not widen the
    interval to the next whole digit (2.02 in [1.85, 2.36] reads "2 (1.8–2.4)", not "2 (1–3)").  ``whole``
    keeps every figure to whole units at the finest (a batch)."""
    digits = interval_digits(value, low, high)
    place = math.floor(math.log10(abs(value))) - digits + 1 if value else 0  # the power of ten of the last digit
    bound_place = place - 1
    if whole:
        place, bound_place = min(place, 0), max(min(bound_place, 0), 0)

    def text(number: float | None, rounding, at: int) -> str:
        step = 10.0 ** at
        return "?" if number is None else f"{rounding(round(number / step, 9)) * step:.{max(0, -at)}f}"

    lo, hi = text(low, math.floor, bound_place), text(high, math.ceil, bound_place)
    shown = text(value, round, place)
    if (low is not None and float(shown) < float(lo)) or (high is not None and float(shown) > float(hi)):
        shown = text(value, round, bound_place)  # 14.6 in [12.1, 15] reads "15 (12–15)", not "10 (12–15)"
    return shown, lo, hi


def speedup_text(c: dict[str, Any], index: int = 0, named: bool = True) -> str:
    """"3.1× (95% CI 3.0–3.2)" at the ``index``-th common batch; "3.1× (3.0–3.2)" when the sentence has
    already said what its intervals are."""
    low, high = c["speedup_ci95"][index]
    value, lo, hi = with_interval(c["speedup"][index], low, high)
    return f"{value}× ({'95% CI ' if named else ''}{lo}–{hi})"


def break_even_text(c: dict[str, Any], named: bool = True) -> str:
    """The break-even batch in words, with its interval: "batch 48 (95% CI 40–56)"."""
    smallest, largest = c["batches"][0], c["batches"][-1]
    if c["status"] == BEYOND:
        return f"beyond the largest batch measured ({largest})"
    if c["status"] == NEVER:
        return f"no batch pays off (slower already at batch {smallest})"
    low, high = c["break_even_ci95"]
    value, lo, hi = with_interval(c["break_even_batch"], low, high, whole=True)
    lo = lo if low is not None else f"≤{smallest}"
    hi = hi if high is not None else f"beyond {largest}"
    return f"batch {value} ({'95% CI ' if named else ''}{lo}–{hi})"


def named(dtype: str, kernel: str | None) -> str:
    """A dtype with the kernel that ran it: "w8a16 (triton int8 weight-only (gpubench))"."""
    return f"{dtype} ({kernel})" if kernel else dtype


def format_pair(c: dict[str, Any]) -> str:
    """"w8a16 (its kernel) / bf16 (its kernel)": what the speed-ups compare."""
    return f"{named(c['format'], c.get('kernel'))} / {named(c['baseline'], c.get('baseline_kernel'))}"


def format_sentence(c: dict[str, Any], where: str) -> str:
    """The answer first: how much faster at batch 1 (or the smallest common batch) and where it stops; each side
    named with the kernel that ran it."""
    fmt, base = named(c["format"], c.get("kernel")), named(c["baseline"], c.get("baseline_kernel"))
    shape = f"{c['n']}x{c['k']}{backend_tag(c['backend'])}"
    at = "batch 1" if c["batches"][0] == 1 else f"batch {c['batches'][0]}, the smallest measured in both,"
    if c["status"] == NEVER:
        # Faster again at a larger batch is a kernel switch, not a break-even: said, not hidden.
        again = [b for b, s in zip(c["batches"], c["speedup"], strict=True) if s >= 1.0]
        rest = "it stays slower at every larger batch measured" if not again else \
            f"it is as fast or faster again only at batch {', '.join(map(str, again))}"
        return (f"{fmt} does not pay off on {shape} {where}: at {at} it runs at {speedup_text(c)} the speed of "
                f"{base}, and {rest}.")
    low, high = c["speedup_ci95"][0]
    # An interval that holds 1× cannot say "faster": the two are not told apart there.
    head = f"{fmt} is not told apart from {base} on {shape} at {at} ({speedup_text(c)})" \
        if low is not None and high is not None and low <= 1 <= high else \
        f"{fmt} is {speedup_text(c)} faster than {base} on {shape} at {at}"
    if c["status"] == BEYOND:
        return (f"{head} and still pays off at batch {c['batches'][-1]}, the largest measured, at "
                f"{speedup_text(c, -1, named=False)} {where}: its break-even lies beyond it.")
    return f"{head} and stops paying off at {break_even_text(c, named=False)} {where}."
