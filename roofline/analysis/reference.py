"""The one bandwidth reference and the one compute reference every printed percentage is taken against.

Bandwidth: ``ceilings.measured.reference_bandwidth`` (written by microbench.sweep.ceilings: the best DRAM read
or copy kernel measured here).  Documents written before it existed derive it the same way: the best
read or copy entry, excluding a ``torch.Tensor.copy_`` timed as ``cuda-graph`` (a graph turns it into a
memcpy node that runs on a copy engine, not on the SMs: 2.7 TB/s on an H200 against 4.2 eager), else
``bandwidth_bytes_per_s``.

Compute: ``peak_flop_per_s`` is the sustained figure (what a long sweep can hold under the power cap);
``peak_flop_per_s_burst`` the short-burst one.  An old document has only ``peak_flop_per_s``: its regime
is "not recorded (treated as sustained)".  A sweep's own GEMM points can run faster than that figure (the
shape search missed the fastest kernel for the sweep's shape; on a CPU, whose one regime is noisy, the short
peak run was slowed; on a GPU, the points ran at a higher clock): a ceiling its own points exceed is no
ceiling, so the compute reference is the best of both, the ceilings' figure and the sweep's fastest GEMM point
of that dtype among those its fit keeps (a lone spike the fit sets aside is no ceiling: it is flagged above the
reference instead), and it says which (``basis``, and the point in ``regime``).

Any other figure above its ceiling (a GEMV above the reference bandwidth, a point of another result) is never
hidden or clipped: it is printed with ``over_ceiling_note``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from roofline.analysis import fit
from roofline.core.counting import compute_dtype
from roofline.core.units import si
from roofline.result.document import Point, Result
from roofline.result.sections import Ceilings, MeasuredCeilings, Peak, StreamKernel

SUSTAINED = "sustained"
NOT_RECORDED = "regime not recorded (treated as sustained)"
CEILINGS = "ceilings"  # the compute reference is the ceilings' peak run
OWN_POINT = "own point"  # ... is the sweep's own fastest GEMM point, faster than the ceilings' peak
# A graph-captured copy_ is a memcpy node on a copy engine: not the SMs' bandwidth.
COPY_ENGINE = ("torch.Tensor.copy_", "cuda-graph")
CHOSEN_WHY = "best DRAM read or copy kernel measured here (graph memcpy nodes excluded: copy engine)"
DERIVED_WHY = CHOSEN_WHY + "; derived by the reader, the document names none"


@dataclass(frozen=True)
class BandwidthReference:
    bytes_per_s: float
    name: str  # "cupy read", "torch copy (eager)", ...
    kind: str  # read | copy | unknown
    kernel: str | None
    timer: str | None
    why: str

    @property
    def label(self) -> str:
        """How every output names it: "cupy read 4.6 TB/s"."""
        return f"{self.name} {si(self.bytes_per_s, 'B/s')}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PeakReference:
    flop_per_s: float
    regime: str  # sustained | burst | regime not recorded (treated as sustained)
    burst_flop_per_s: float | None
    details: dict[str, Any] | None  # shape, clock, power of the regime's measurement when recorded
    basis: str = CEILINGS  # CEILINGS | OWN_POINT
    ceilings_flop_per_s: float | None = None  # the ceilings' own figure, whichever is the reference

    @property
    def label(self) -> str:
        return f"{si(self.flop_per_s, 'FLOP/s')} ({self.regime})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _kind(name: str, entry: StreamKernel) -> str | None:
    if entry.kind in ("read", "copy"):
        return entry.kind
    last = name.split()[-1] if name else ""
    return last if last in ("read", "copy") else None


def _candidates(measured: MeasuredCeilings) -> list[tuple[str, str, StreamKernel]]:
    found = []
    for name, entry in (("copy", measured.copy), ("read", measured.read)):
        if entry is not None and entry.bytes_per_s:
            found.append((f"torch {name}" if (entry.kernel or "").startswith("torch") else name, name, entry))
    for name, entry in (measured.stream_kernels or {}).items():
        kind = _kind(name, entry)
        if kind and entry.bytes_per_s:
            found.append((name, kind, entry))
    return [c for c in found if (c[2].kernel, c[2].timer) != COPY_ENGINE]


def best_bandwidth_kernel(kernels: Mapping[str, StreamKernel | dict[str, Any]],
                          why: str = CHOSEN_WHY) -> BandwidthReference | None:
    """The best read or copy entry of ``{name: entry}``, a graph-timed ``copy_`` excluded; the one rule
    both the measuring side (choosing the reference) and readers of older documents (deriving it) use."""
    return _best(_candidates(MeasuredCeilings(stream_kernels=dict(kernels))), why)


def _best(candidates: list[tuple[str, str, StreamKernel]], why: str) -> BandwidthReference | None:
    if not candidates:
        return None
    name, kind, entry = max(candidates, key=lambda c: c[2].bytes_per_s)
    timer = entry.timer
    if name.startswith("torch") and "(" not in name and timer and timer != "cuda-graph":
        name += f" ({timer.removeprefix('cuda-')})"
    return BandwidthReference(float(entry.bytes_per_s), name, kind, entry.kernel, timer, why)


def reference_bandwidth_from_measured(measured: MeasuredCeilings | dict[str, Any] | None
                                      ) -> BandwidthReference | None:
    """The reference from a ``ceilings.measured`` object (or any dict of copy/read entries, as
    ``scripts/bench_timer.py`` has): the recorded one, else derived as the module docstring says."""
    if not measured:
        return None
    measured = MeasuredCeilings.from_dict(measured)
    recorded = measured.reference_bandwidth
    if recorded is not None and recorded.bytes_per_s:
        return BandwidthReference(float(recorded.bytes_per_s), str(recorded.name or "reference"),
                                  str(recorded.kind or "unknown"), recorded.kernel, recorded.timer,
                                  str(recorded.why or "recorded by the run"))
    derived = _best(_candidates(measured), DERIVED_WHY)
    if derived:
        return derived
    if measured.bandwidth_bytes_per_s:
        return BandwidthReference(float(measured.bandwidth_bytes_per_s),
                                  str(measured.bandwidth_kernel or "measured bandwidth"), "unknown",
                                  measured.bandwidth_kernel, None,
                                  "the run's bandwidth_bytes_per_s (no read or copy entry to choose from)")
    return None


def reference_bandwidth(ceilings: Ceilings | dict[str, Any] | None) -> BandwidthReference | None:
    """The one measured bandwidth reference of a result's ``ceilings``."""
    return reference_bandwidth_from_measured(Ceilings.from_dict(ceilings or {}).measured)


def reference_peak(ceilings: Ceilings | dict[str, Any] | None, dtype: str,
                   points: Iterable[Point] = ()) -> PeakReference | None:
    """The compute ceiling a sweep is compared with: sustained when recorded (a sweep is long), raised to
    the fastest of ``points`` (the sweep's own plain GEMMs of that dtype) where one beats it."""
    measured = Ceilings.from_dict(ceilings or {}).measured or MeasuredCeilings()
    dtype = compute_dtype(dtype)  # a weight-only format multiplies on its compute dtype's units
    value = (measured.peak_flop_per_s or {}).get(dtype)
    if not value:
        return None
    entry = (measured.peak or {}).get(dtype) or Peak()
    burst = (measured.peak_flop_per_s_burst or {}).get(dtype)
    if burst is None and entry.burst is not None:
        burst = entry.burst.flop_per_s
    recorded = entry.sustained is not None or burst is not None
    details = entry.sustained.to_dict() if entry.sustained is not None else None
    regime = SUSTAINED if recorded else NOT_RECORDED
    ceiling = PeakReference(float(value), regime, float(burst) if burst else None, details,
                            CEILINGS, float(value))
    fastest = fastest_gemm(points, dtype)
    if fastest is None or fastest[0] <= value:
        return ceiling
    flop_per_s, point = fastest
    # Weight-only formats are left out: they multiply in this dtype but move other bytes, and a format
    # faster than its compute dtype's own GEMM is a finding to flag, not a ceiling.
    said = (f"the sweep's own fastest point, gemm {dtype} {point.n}x{point.k} B={point.batch}, above the "
            f"ceilings' {si(float(value), 'FLOP/s')} {regime}")
    return PeakReference(flop_per_s, said, ceiling.burst_flop_per_s,
                         {"op": "gemm", "dtype": dtype, "n": point.n, "k": point.k, "batch": point.batch},
                         OWN_POINT, float(value))


def lone_spikes(points: Iterable[Point]) -> set[int]:
    """The ``id`` of each point its series' fit leaves out as a lone spike (``fit.fit_envelope``'s ``excluded``:
    faster than both its neighbours by ``fit.LONE_OUTLIER_RATIO``), from the same points in the same order as
    ``roofline.analysis.series.fit_one`` gives it: its usable points by batch, three at least."""
    series: dict[tuple, list[Point]] = defaultdict(list)
    for point in points:
        if point.usable:
            series[point.series_key].append(point)
    spikes: set[int] = set()
    for members in series.values():
        if len(members) < fit.MIN_POINTS:
            continue
        members.sort(key=lambda p: p.batch)
        data = fit.series_data(members)
        envelope = fit.fit_envelope(data.flop, data.bytes, data.times_s, data.rel_spread)
        spikes.update(id(members[i]) for i in envelope.excluded)
    return spikes


def fastest_gemm(points: Iterable[Point], dtype: str) -> tuple[float, Point] | None:
    """The fastest usable plain GEMM of exactly ``dtype`` (FLOP/s by its median) and the point, or None.  A point
    its fit sets aside as a lone spike is no ceiling (one fast sample set would lift the reference every other
    point is read against): only the points the fit keeps are candidates.  A point above the fitted roof by more
    than its spread is still one: the fit keeps it in its envelope, and it is a kernel that ran that fast."""
    candidates = [p for p in points if p.op == "gemm" and p.dtype == dtype and p.usable and p.stats is not None
                  and p.stats.median_s]
    spikes = lone_spikes(candidates)
    best: tuple[float, Point] | None = None
    for point in candidates:
        stats = point.stats
        if id(point) in spikes or stats is None:
            continue
        flop_per_s = point.flop / stats.median_s
        if best is None or flop_per_s > best[0]:
            best = (flop_per_s, point)
    return best


def result_peak(result: Result, dtype: str) -> PeakReference | None:
    """``reference_peak`` of a result document: its ceilings and its own points."""
    return reference_peak(result.ceilings, dtype, result.points)


def percent_of(value: float | None, reference: float | None) -> float | None:
    return 100.0 * value / reference if value and reference else None


def peak_read_against(dtype: str) -> str:
    """Whose measured peak a series of ``dtype`` is read against, in words: its own (``measured bf16 peak``), or
    for a weight-only or block-scaled format its arithmetic's (``measured bf16 peak (w8a16's arithmetic runs in
    bf16)``)."""
    compute = compute_dtype(dtype)
    return f"measured {compute} peak" + (f" ({dtype}'s arithmetic runs in {compute})" if compute != dtype else "")


def why_above_peak(dtype: str) -> str:
    """Why a series can be above the peak it is read against.  A plain dtype's peak is the fastest GEMM the
    ceiling search found, which it can miss; a format is read against its arithmetic's peak and is left out of
    that search (``reference_peak``): above it, the format ran faster than that dtype's own fastest GEMM here, a
    finding about the kernels, not a ceiling the search missed."""
    compute = compute_dtype(dtype)
    if compute != dtype:
        return (f"{dtype} ran faster than {compute}'s own fastest GEMM on this device: a finding about the kernels, "
                "not a ceiling the search missed")
    return CEILING_MISSED


# Why a point can be above a measured ceiling it was compared with (a bandwidth, a plain dtype's peak).
CEILING_MISSED = "the ceiling search did not find the fastest kernel, or the clock was higher while it ran"


OVER_MARK = "⚠"  # printed right after any percentage above the ceiling it is of, so no wrap can part them


def marked_percent(pct: float | None, digits: int = 1) -> str:
    """``103.3%⚠`` above 100, ``93.0%`` under; "–" for none."""
    if pct is None:
        return "–"
    return f"{pct:.{digits}f}%" + (OVER_MARK if pct > 100 else "")


def over_ceiling_note(value: float | None, reference: float | None, what: str) -> str | None:
    """The warning that must accompany a figure above the ceiling it is compared with, else None."""
    pct = percent_of(value, reference)
    if pct is None or pct <= 100.0:
        return None
    return (f"{pct:.0f}% of {what}: above that ceiling (the ceiling kernel is not the fastest kernel here, "
            "or the clock was higher while this ran)")
