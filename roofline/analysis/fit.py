"""Fit a roofline to one series (op, dtype, N×K over batch): ``t(B) = max(bytes(B)/BW, flop(B)/P)``.

The roofline bounds performance from above, so it is fitted as an upper envelope, not a mean through
the points: on each side of the ridge the height is a high quantile (``ENVELOPE_QUANTILE``) of the
points' bytes/s (memory side) or FLOP/s (compute side), raised where needed so that no point lies above
it by more than its own spread (``ROOF_TOLERANCE`` at least), iterated until the ridge stops moving.
Points that bend under the roof near the ridge, or fall into a tile-quantisation step, sit under it
without dragging it down.  A lone spike (a point faster by ``LONE_OUTLIER_RATIO`` than both of its
neighbours on its side) is set aside once, by name: the roof bounds every other point.

A curve where a third of the points run under half the roof that bounds the rest is not a roofline
(the library changes kernels, or the machine was busy): it is said so, with the pair whose time grew
faster than its work, and no crossover is claimed.

The critical batch B* is where the exact intensity of the GEMM reaches the fitted ridge.  Its 95%
interval comes from a bootstrap that keeps the series' structure: every replicate keeps every batch,
resamples each point's own samples, and resamples points only within their side of the ridge, so no
replicate loses the compute-bound points (which made the interval unbounded on clean data).  When no
measured point is clearly compute-bound, the peak is only a lower bound and so is B*: "> largest batch".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from roofline.core.counting import critical_intensity_batch

ENVELOPE_QUANTILE = 0.9
QUANTILE_MIN_POINTS = 10
# Nothing lies above the roof by more than its own CI half-width, or this much when that is smaller.
ROOF_TOLERANCE = 0.03
# A point this much faster than both its neighbours on its side is a spike, not the roof.
LONE_OUTLIER_RATIO = 1.10
# A point under this share of the roof is far under it; when this share of the points is, the roof
# describes only the rest and the curve is not a roofline.
FAR_UNDER = 0.5
FAR_UNDER_SHARE = 1 / 3
# Time growing this much faster than the work between two batches is named as the reason.
GROWTH_BEYOND_WORK = 1.5
# A point is clearly compute-bound when it moves bytes this much slower than the fitted bandwidth.
COMPUTE_EVIDENCE = 0.85
# Intensities within this ratio of each other: the batch does not change intensity (bmm).
FLAT_INTENSITY_RATIO = 1.25
BOOTSTRAP_REPLICATES = 400
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

    @property
    def rel_spread(self) -> np.ndarray:
        """Each point's relative half-width of the 95% CI of its median (0 for one sample)."""
        from roofline.core.stats import rel_median_ci95_half_width

        return np.array([rel_median_ci95_half_width(s) for s in self.samples_s])


def series_data(points) -> SeriesData:
    """The fit's numbers of one series' ok points (``roofline.result.document.Point``), in the order given."""
    first = points[0]
    return SeriesData(
        dtype=first.dtype, n=first.n, k=first.k,
        batches=np.array([p.batch for p in points]),
        flop=np.array([p.flop for p in points], dtype=float),
        bytes=np.array([p.bytes for p in points], dtype=float),
        samples_s=tuple(np.array(p.samples_s) for p in points),
    )


@dataclass(frozen=True)
class Envelope:
    bandwidth_bytes_per_s: float
    peak_flop_per_s: float | None  # None: no point is clearly compute-bound
    best_flop_per_s: float  # the highest FLOP/s seen: a lower bound on the peak
    memory_side: np.ndarray  # bool per point: left of the fitted ridge
    set_aside: dict[int, str]  # point index -> why it is not under the roof
    excluded: tuple[int, ...] = ()  # the spike left out of the quantiles (a subset of set_aside)

    @property
    def ridge_flop_per_byte(self) -> float | None:
        from roofline.core.roof import ridge_flop_per_byte

        return ridge_flop_per_byte(self.peak_flop_per_s, self.bandwidth_bytes_per_s)


def _spike(values: np.ndarray, positions: np.ndarray) -> tuple[int, str] | None:
    """The one lone spike among a side's points (in batch order), or None.

    Only a point with a slower neighbour on both sides can be a spike: the last point of a compute side
    that is still climbing is the roof, not an outlier.
    """
    if len(values) < 3:
        return None
    top = int(np.argmax(values))
    if top in (0, len(values) - 1):
        return None
    neighbours = max(values[top - 1], values[top + 1])
    if values[top] <= LONE_OUTLIER_RATIO * neighbours:
        return None
    return int(positions[top]), f"lone spike, {values[top] / neighbours:.2f}× its neighbours"


def _height(values: np.ndarray):
    """The envelope over one side's points (the last axis: one row per bootstrap replicate, or one side): a
    high quantile, so a few fast points do not lift it.  With fewer than ``QUANTILE_MIN_POINTS`` a quantile
    would fall between the top two points and set the fastest real point aside: the top is the roof (a lone
    spike among them is caught by ``_spike``)."""
    if values.shape[-1] < QUANTILE_MIN_POINTS:
        return np.max(values, axis=-1)
    return np.quantile(values, ENVELOPE_QUANTILE, axis=-1)


def fit_envelope(flop: np.ndarray, nbytes: np.ndarray, times_s: np.ndarray,
                 rel_spread: np.ndarray | None = None) -> Envelope:
    """The upper envelope of (intensity, FLOP/s) as a roofline: bandwidth, and peak when identified.

    Every point above it by more than its tolerance is set aside by name, with how far above it is.
    """
    perf, bandwidth, intensity = flop / times_s, nbytes / times_s, flop / nbytes
    keep = np.ones(len(times_s), dtype=bool)
    set_aside: dict[int, str] = {}
    bw, peak = float(bandwidth.max()), float(perf.max())
    for _ in range(20):
        ridge = peak / bw
        memory_side, compute_side = (intensity < ridge) & keep, (intensity >= ridge) & keep
        for side, values in ((memory_side, bandwidth), (compute_side, perf)):
            spike = None if set_aside else _spike(values[side], np.nonzero(side)[0])
            if spike:
                set_aside[spike[0]] = spike[1]
                keep[spike[0]] = side[spike[0]] = False
        new_bw = float(_height(bandwidth[memory_side])) if memory_side.any() else float(bandwidth[keep].max())
        new_peak = float(_height(perf[compute_side])) if compute_side.any() else float(perf[keep].max())
        if abs(new_bw - bw) <= 1e-9 * bw and abs(new_peak - peak) <= 1e-9 * peak:
            break
        bw, peak = new_bw, new_peak
    memory_side = intensity < peak / bw
    evidence = ~memory_side & keep & (bandwidth < COMPUTE_EVIDENCE * bw)
    envelope = Envelope(bandwidth_bytes_per_s=bw, peak_flop_per_s=peak if evidence.any() else None,
                        best_flop_per_s=float(perf[keep].max()), memory_side=memory_side, set_aside=set_aside,
                        excluded=tuple(int(i) for i in np.nonzero(~keep)[0]))
    spread = rel_spread if rel_spread is not None else np.zeros(len(times_s))
    for index, excess in above_roof(flop, nbytes, times_s, spread, envelope).items():
        set_aside[index] = f"+{100 * excess:.0f}% above the roof, beyond its spread"
    return envelope


def above_roof(flop, nbytes, times_s, rel_spread, envelope: Envelope) -> dict[int, float]:
    """Points not set aside that lie above the roof by more than their tolerance: index -> excess."""
    from roofline.core.roof import attainable_flop_per_s

    attainable = attainable_flop_per_s(flop / nbytes, envelope.bandwidth_bytes_per_s, envelope.peak_flop_per_s)
    excess = (flop / times_s) / attainable - 1
    over = excess > np.maximum(ROOF_TOLERANCE, rel_spread) + 1e-9
    return {int(i): float(excess[i]) for i in np.nonzero(over)[0] if int(i) not in envelope.set_aside}


def roofline_contradiction(data: SeriesData, times_s: np.ndarray, envelope: Envelope) -> str | None:
    """Why no roofline describes these points, or None.

    A roofline is an upper bound that the points follow: a lone step or slow point may fall far under
    it, but when ``FAR_UNDER_SHARE`` of the points run below ``FAR_UNDER`` of the roof that bounds the
    others, the roof describes two or three points and a crossover read from it would be invented.  The
    worst pair whose time grows faster than its work (impossible on any roofline) is named as the why.
    """
    from roofline.core.roof import attainable_flop_per_s

    keep = np.array([i not in envelope.set_aside for i in range(len(times_s))])
    efficiency = (data.flop / times_s) / attainable_flop_per_s(
        data.flop / data.bytes, envelope.bandwidth_bytes_per_s, envelope.peak_flop_per_s)
    far = keep & (efficiency < FAR_UNDER)
    if far.sum() < max(2, FAR_UNDER_SHARE * keep.sum()):
        return None
    shown = ", ".join(f"B={data.batches[i]} at {100 * efficiency[i]:.0f}%" for i in np.nonzero(far)[0][:4])
    text = f"{int(far.sum())} of {int(keep.sum())} points run under half the roof that bounds the rest ({shown})"
    growth = times_s[None, :] / times_s[:, None]
    work = np.maximum(data.flop[None, :] / data.flop[:, None], data.bytes[None, :] / data.bytes[:, None])
    excess = np.triu(growth / work, k=1)
    i, j = np.unravel_index(int(np.argmax(excess)), excess.shape)
    if excess[i, j] > GROWTH_BEYOND_WORK:
        text += (f"; B={data.batches[j]} takes {growth[i, j]:.1f}× the time of B={data.batches[i]} for "
                 f"{work[i, j]:.1f}× the work, which no roofline does (the library changes kernels between "
                 "them, or the machine was busy)")
    return text


def critical_batch(data: SeriesData, envelope: Envelope) -> float | None:
    ridge = envelope.ridge_flop_per_byte
    if ridge is None:
        return None
    value = critical_intensity_batch(data.dtype, data.n, data.k, ridge)
    return value if np.isfinite(value) else None


def _replicate_times(data: SeriesData, rng: np.random.Generator, replicates: int) -> np.ndarray:
    """(replicates, points) medians, each point's own samples resampled with replacement."""
    out = np.empty((replicates, len(data.samples_s)))
    for j, samples in enumerate(data.samples_s):
        index = rng.integers(0, len(samples), size=(replicates, len(samples)))
        out[:, j] = np.median(samples[index], axis=1)
    return out


def _side_heights(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per replicate: the envelope height over the side's points resampled within the side."""
    replicates, count = values.shape
    chosen = rng.integers(0, count, size=(replicates, count))
    return _height(np.take_along_axis(values, chosen, axis=1))


def _interval(values: np.ndarray) -> tuple[float | None, float | None]:
    # Order statistics, not interpolation: a replicate whose ridge is out of reach is +inf.
    values = np.sort(values)
    lo, hi = np.quantile(values, 0.025, method="lower"), np.quantile(values, 0.975, method="higher")
    return (float(lo) if np.isfinite(lo) else None, float(hi) if np.isfinite(hi) else None)


def bootstrap_intervals(data: SeriesData, envelope: Envelope, seed: int = 0,
                        replicates: int = BOOTSTRAP_REPLICATES) -> dict[str, tuple[float | None, float | None]]:
    """95% percentile intervals of the bandwidth, the peak and B*, from replicates that keep the series'
    structure (module docstring).  The peak and B* only when the fit identified a peak; B*'s ``hi`` is
    None when more than 2.5% of replicates put the ridge past the intensity this shape can ever reach."""
    rng = np.random.default_rng(seed)
    keep = np.array([i not in envelope.excluded for i in range(len(data.batches))])
    memory, compute = envelope.memory_side & keep, ~envelope.memory_side & keep
    times = _replicate_times(data, rng, replicates)
    if not memory.any():
        return {}
    bw = _side_heights(data.bytes[memory] / times[:, memory], rng)
    out = {"bandwidth_bytes_per_s": _interval(bw)}
    if envelope.peak_flop_per_s is not None and compute.any():
        peak = _side_heights(data.flop[compute] / times[:, compute], rng)
        out["peak_flop_per_s"] = _interval(peak)
        out["critical_batch"] = _interval(critical_intensity_batch(data.dtype, data.n, data.k, peak / bw))
    return out


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
