"""Fit a roofline to one series (op, dtype, N×K over batch): ``t(B) = max(bytes(B)/BW, flop(B)/P)``.

The roofline bounds performance from above, so it is fitted as a robust upper envelope, not a mean
through the points: the bandwidth is a high quantile (``ENVELOPE_QUANTILE``) of bytes/s over the points
on the memory side of the ridge, the peak the same quantile of FLOP/s over the points on the compute
side, iterated until the ridge stops moving.  Points that bend under the roof near the ridge, or fall
into a tile-quantisation step, sit under the envelope without dragging it down; a lone fast outlier
sits above the quantile (with few points: more than 10% above all others) without lifting it.
No fixed latency term: at decode shapes (weights ≥ L2) it did not earn its place, and the graph timer
already removes launch overhead.

The critical batch B* is where the exact intensity of the GEMM reaches the fitted ridge; its 95% interval
comes from a bootstrap that resamples each point's samples and the series' points.  When no measured
point is clearly compute-bound, the peak is only a lower bound and so is B*: it is reported as
"> largest batch", never as a made-up number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from roofline.counting import critical_intensity_batch

ENVELOPE_QUANTILE = 0.9
# A lone point more than this far above every other point on its side is an outlier, not the roof.
LONE_OUTLIER_RATIO = 1.10
# A point is clearly compute-bound when it moves bytes this much slower than the fitted bandwidth.
COMPUTE_EVIDENCE = 0.85
# Intensities within this ratio of each other: the batch does not change intensity (bmm).
FLAT_INTENSITY_RATIO = 1.25
BOOTSTRAP_REPLICATES = 200
CLIFF_DROP = 0.15
KNEES = (1.10, 1.25)
MIN_POINTS = 3


@dataclass(frozen=True)
class SeriesData:
    """The ok points of one series, sorted by batch: the numbers a fit needs and nothing else."""

    dtype: str
    n: int
    k: int
    batches: np.ndarray
    flop: np.ndarray
    bytes: np.ndarray
    samples_s: tuple[np.ndarray, ...]

    @property
    def times_s(self) -> np.ndarray:
        return np.array([np.median(s) for s in self.samples_s])


@dataclass(frozen=True)
class Envelope:
    bandwidth_bytes_per_s: float
    peak_flop_per_s: float | None  # None: no point is clearly compute-bound
    best_flop_per_s: float  # the highest quantile of FLOP/s seen: a lower bound on the peak

    @property
    def ridge_flop_per_byte(self) -> float | None:
        return self.peak_flop_per_s / self.bandwidth_bytes_per_s if self.peak_flop_per_s else None


def _upper(values: np.ndarray) -> float:
    """The envelope's height over one side: a high quantile, after setting aside lone spikes.

    With few points on a side a quantile cannot reject an outlier by itself, so a top value more than
    ``LONE_OUTLIER_RATIO`` above the next one (with at least three points) is set aside first.
    """
    ordered = np.sort(values)
    while len(ordered) >= 3 and ordered[-1] > LONE_OUTLIER_RATIO * ordered[-2]:
        ordered = ordered[:-1]
    return float(np.quantile(ordered, ENVELOPE_QUANTILE))


def fit_envelope(flop: np.ndarray, nbytes: np.ndarray, times_s: np.ndarray) -> Envelope:
    """The upper envelope of (intensity, FLOP/s) as a roofline: bandwidth, and peak when identified."""
    perf, bandwidth, intensity = flop / times_s, nbytes / times_s, flop / nbytes
    bw, peak = float(bandwidth.max()), float(perf.max())
    for _ in range(20):
        ridge = peak / bw
        memory_side, compute_side = intensity < ridge, intensity >= ridge
        new_bw = _upper(bandwidth[memory_side]) if memory_side.any() else float(bandwidth.max())
        new_peak = _upper(perf[compute_side]) if compute_side.any() else float(perf.max())
        if abs(new_bw - bw) <= 1e-9 * bw and abs(new_peak - peak) <= 1e-9 * peak:
            break
        bw, peak = new_bw, new_peak
    compute_side = intensity >= peak / bw
    evidence = compute_side & (bandwidth < COMPUTE_EVIDENCE * bw)
    return Envelope(bandwidth_bytes_per_s=bw, peak_flop_per_s=peak if evidence.any() else None,
                    best_flop_per_s=_upper(perf))


def critical_batch(data: SeriesData, envelope: Envelope) -> float | None:
    ridge = envelope.ridge_flop_per_byte
    if ridge is None:
        return None
    value = critical_intensity_batch(data.dtype, data.n, data.k, ridge)
    return value if np.isfinite(value) else None


def bootstrap_critical_batch(data: SeriesData, seed: int = 0, replicates: int = BOOTSTRAP_REPLICATES
                             ) -> tuple[float | None, float | None, float]:
    """95% interval of B* over resampled samples and points; also the share of unidentified replicates.

    ``hi`` is None when more than 2.5% of the replicates could not identify the peak (B* unbounded).
    """
    rng = np.random.default_rng(seed)
    count = len(data.batches)
    values = []
    for _ in range(replicates):
        times = np.array([np.median(rng.choice(s, size=len(s))) for s in data.samples_s])
        chosen = rng.integers(0, count, size=count)
        envelope = fit_envelope(data.flop[chosen], data.bytes[chosen], times[chosen])
        value = critical_batch(data, envelope)
        values.append(np.inf if value is None else value)
    values = np.sort(np.array(values))
    # Order statistics, not interpolation: replicates without a crossover are +inf.
    lo, hi = np.quantile(values, 0.025, method="lower"), np.quantile(values, 0.975, method="higher")
    unidentified = float(np.mean(~np.isfinite(values)))
    return (float(lo) if np.isfinite(lo) else None, float(hi) if np.isfinite(hi) else None, unidentified)


def latency_knees(batches: np.ndarray, times_s: np.ndarray) -> dict[float, int | None]:
    """Smallest batch whose time is at least each factor × the time at the smallest batch."""
    knees: dict[float, int | None] = {}
    for factor in KNEES:
        above = np.nonzero(times_s >= factor * times_s[0])[0]
        knees[factor] = int(batches[above[0]]) if above.size else None
    return knees


def find_cliffs(batches: np.ndarray, flop_per_s: np.ndarray) -> list[int]:
    """Batches where throughput falls by more than ``CLIFF_DROP`` from the previous, smaller batch."""
    return [int(batches[i]) for i in range(1, len(batches))
            if flop_per_s[i] < (1 - CLIFF_DROP) * flop_per_s[i - 1]]


def has_flat_intensity(data: SeriesData) -> bool:
    intensity = data.flop / data.bytes
    return bool(intensity.max() <= FLAT_INTENSITY_RATIO * intensity.min())
