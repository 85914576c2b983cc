"""The one formatter for quantities a person reads: SI prefixes, significant digits, never ``1e+03``.

``quantity(16896, "B")`` is ``16.9 kB``; ``seconds(3.95)`` is ``3.95 s`` (not ``3.95e+03 ms``);
``quantity(1.6e10, "B")`` is ``16 GB``.  Bytes use powers of 1000, as spec sheets do.  Three significant
digits unless the figure has an interval of its own (a median time with its CI, a fitted bandwidth or peak with
its bootstrap interval): then ``interval_digits`` says how many it earns.
"""

from __future__ import annotations

import math

# The most digits any interval earns (torch.utils.benchmark's _MAX_SIGNIFICANT_FIGURES): past four, the digits
# say more about the arithmetic than about a kernel's time on a real machine.
MAX_INTERVAL_DIGITS = 4
PREFIXES = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
SUBSECOND = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
MISSING = "–"


def significant(value: float, digits: int = 3) -> str:
    """``value`` rounded to ``digits`` significant digits, in positional notation, trailing zeros dropped."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    places = digits - 1 - math.floor(math.log10(abs(value)))
    rounded = round(value, places)  # negative places round to tens, hundreds: 999600 -> 1000000
    if rounded != 0 and math.floor(math.log10(abs(rounded))) != math.floor(math.log10(abs(value))):
        places -= 1  # 9.996 rounds up to 10.0: one decimal fewer keeps the digits
    text = f"{rounded:.{max(0, places)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _rounded(value: float, digits: int) -> float:
    return float(significant(value, digits)) if math.isfinite(value) else value


def _scaled(value: float | None, scales: tuple[tuple[float, str], ...], digits: int) -> str:
    """``value`` over the first scale it reaches (the last scale below them all), with that scale's unit."""
    if value is None:
        return MISSING
    value = _rounded(value, digits)
    factor, unit = next(((f, u) for f, u in scales if abs(value) >= f), scales[-1])
    return f"{significant(value / factor, digits)} {unit}"


def quantity(value: float | None, unit: str, digits: int = 3) -> str:
    """A quantity with an SI prefix chosen so the number reads 1 to 999: ``16.9 kB``, ``4.8 TB/s``."""
    return _scaled(value, tuple((factor, prefix + unit) for factor, prefix in PREFIXES) + ((1.0, unit),), digits)


def si(value: float | None, unit: str, digits: int = 3) -> str:
    """The name the tables and reports use for ``quantity``."""
    return quantity(value, unit, digits)


def si_bytes(value: float | None, digits: int = 3) -> str:
    return quantity(value, "B", digits)


def seconds(value: float | None, digits: int = 3) -> str:
    """A duration in s, ms, µs or ns, whichever reads 1 to 999 (seconds stay seconds above 1000)."""
    return _scaled(value, SUBSECOND, digits)


def percent(value: float | None) -> str:
    return MISSING if value is None else f"{value:.0f}%"


def interval_digits(value: float | None, low: float | None, high: float | None, default: int = 3) -> int:
    """The significant digits ``value`` earns from its own interval [``low``, ``high``]: digits down to the
    first decimal place at least as coarse as the interval's half-width, so every printed digit is above the
    noise, at least 1 and at most ``MAX_INTERVAL_DIGITS``; ``default`` (the fixed three of a figure with no
    interval) when a bound is unknown or not finite.

    torch.utils.benchmark's ``Measurement.significant_figures`` takes floor(log10(value / half-width)); counted
    by decimal place instead, this gives that or one more: 4.243 in [4.187, 4.299] (±0.056) is ``4.2``, where
    the ratio (76) would print ``4`` although the interval already rules out 3.9 and 4.4.
    """
    bounds = (value, low, high)
    if any(b is None or not math.isfinite(b) for b in bounds) or value == 0 or high < low:
        return default
    half_width = (high - low) / 2
    if half_width == 0:
        return MAX_INTERVAL_DIGITS
    digits = math.floor(math.log10(abs(value))) - math.ceil(math.log10(half_width)) + 1
    return min(max(digits, 1), MAX_INTERVAL_DIGITS)
