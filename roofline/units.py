"""Human-readable SI formatting for terminals and reports."""

from __future__ import annotations


def si(value: float | None, unit: str, digits: int = 3) -> str:
    if value is None:
        return "–"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def seconds(value: float | None) -> str:
    if value is None:
        return "–"
    for factor, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}%"
