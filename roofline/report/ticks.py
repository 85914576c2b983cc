"""Log axes that stay readable: a bounded number of labelled ticks, never overlapping, over any span.

Matplotlib's own log locator gives no major tick at all once a range spans more powers than it labels and the
multipliers are more than one (a speed-up from 2^-10 to 2^10 with ticks at 1 and 1.5 per octave), and over less
than a decade it labels the minor ticks (2×10^-2, 3×10^-2, 4×10^-2) until they run into each other.  Here the
labelled ticks are picked from nice multipliers of each power, the densest set whose neighbours keep
``min_gap_pt`` apart on the drawn axis; over many powers, every second, third... power; over a span too narrow
for two nice values, plain evenly spaced ones.  Minor ticks stay, unlabelled.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from matplotlib.ticker import FuncFormatter, Locator, MaxNLocator, NullFormatter

from roofline.core.units import seconds, significant

# Multipliers of each power, sparsest first: the locator takes the densest that fits.
LADDERS = {10: ((1.0,), (1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 5.0), (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0)),
           2: ((1.0,), (1.0, 1.5))}
# Axis length assumed before the figure has a size (points: a typical panel).
DEFAULT_AXIS_PT = 200.0
# Room between labelled ticks: a 10-point "200 ms" is about 32 points wide and 10 high.
X_LABEL_GAP_PT, Y_LABEL_GAP_PT = 40.0, 20.0


class ReadableLogLocator(Locator):
    """Major ticks of a log axis (``base`` 10 or 2): at least two where the range allows, at most
    ``max_ticks``, and neighbours at least ``min_gap_pt`` points (1/72 inch, the unit of font sizes) apart: a
    label's width on an x axis, its height on a y axis."""

    def __init__(self, base: int = 10, min_gap_pt: float = 40.0, max_ticks: int = 8) -> None:
        if base not in LADDERS:
            raise ValueError(f"base {base}: 10 or 2")
        self.base, self.min_gap_pt, self.max_ticks = base, min_gap_pt, max_ticks

    def __call__(self) -> list[float]:
        vmin, vmax = self.axis.get_view_interval() if self.axis is not None else (1.0, 10.0)
        return self.tick_values(vmin, vmax)

    def _axis_pt(self) -> float:
        """The axis' drawn length in points (display pixels at the figure's dpi, as the labels are)."""
        axis = self.axis
        if axis is None or axis.axes is None:
            return DEFAULT_AXIS_PT
        box, dpi = axis.axes.bbox, axis.axes.figure.dpi
        return float(box.width if axis.axis_name == "x" else box.height) * 72 / dpi or DEFAULT_AXIS_PT

    def tick_values(self, vmin: float, vmax: float) -> list[float]:
        if not (vmin > 0 and vmax > 0 and math.isfinite(vmin) and math.isfinite(vmax)) or vmin == vmax:
            return []
        lo, hi = sorted((vmin, vmax))
        log_lo, log_hi = math.log(lo, self.base), math.log(hi, self.base)
        pt_per_power = self._axis_pt() / (log_hi - log_lo)
        for ladder in reversed(LADDERS[self.base]):
            ticks = _ladder_ticks(ladder, self.base, lo, hi)
            if 2 <= len(ticks) <= self.max_ticks and _min_gap(ticks, self.base) * pt_per_power >= self.min_gap_pt:
                return ticks
        powers = _ladder_ticks((1.0,), self.base, lo, hi)
        if len(powers) >= 2:  # too many powers to label each: every stride-th, the stride the smallest that fits
            stride = max(math.ceil(len(powers) / self.max_ticks), math.ceil(self.min_gap_pt / pt_per_power))
            start = next((i for i, t in enumerate(powers) if round(math.log(t, self.base)) % stride == 0), 0)
            kept = powers[start::stride]
            return kept if len(kept) >= 2 else powers[::max(1, len(powers) - 1)]
        # Narrower than two nice values: evenly spaced ones (e.g. 21, 21.5, 22 ms).
        return [t for t in MaxNLocator(nbins=3, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi) if lo <= t <= hi]


def _ladder_ticks(ladder: tuple[float, ...], base: int, lo: float, hi: float) -> list[float]:
    first, last = math.floor(math.log(lo, base)) - 1, math.ceil(math.log(hi, base)) + 1
    ticks = {m * float(base) ** e for e in range(first, last + 1) for m in ladder}
    # A hair of tolerance: a range drawn from 2^-10 to 2^10 keeps its end ticks despite rounding.
    return sorted(t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9))


def _min_gap(ticks: list[float], base: int) -> float:
    """The smallest distance between neighbours, in powers of ``base``."""
    return min(math.log(b / a, base) for a, b in zip(ticks, ticks[1:], strict=False))


def speedup_text(value: float, _position: object = None) -> str:
    """A ratio as a reader says it: 1.5×, 0.75×, and 1/1024× rather than 0.000976562×."""
    if value >= 1 or value <= 0:
        return f"{value:.3g}×"
    inverse = 1 / value
    return f"1/{inverse:.0f}×" if abs(inverse - round(inverse)) < 1e-6 * inverse and inverse >= 4 else f"{value:.3g}×"


def number_text(value: float, _position: object = None) -> str:
    """A plain number to three significant digits: 300, 2000, 0.5 (no 3×10^2)."""
    return significant(value)


def seconds_text(value: float, _position: object = None) -> str:
    """A time with its unit chosen per tick: 20 ms, 1 s, 500 µs."""
    return seconds(value)


def readable_log_axis(axis, text: Callable[[float, object], str], base: int = 10, min_gap_pt: float | None = None
                      ) -> None:
    """Major ticks from ``ReadableLogLocator`` labelled by ``text``; minor ticks kept but never labelled.
    ``min_gap_pt``: by default room for a label like "200 ms" side by side on an x axis, stacked on a y axis."""
    gap = min_gap_pt if min_gap_pt is not None else (X_LABEL_GAP_PT if axis.axis_name == "x" else Y_LABEL_GAP_PT)
    axis.set_major_locator(ReadableLogLocator(base=base, min_gap_pt=gap))
    axis.set_major_formatter(FuncFormatter(text))
    axis.set_minor_formatter(NullFormatter())
