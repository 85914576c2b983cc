"""The Pareto front of points where more is better on both axes (a serving run's tokens/s per user against its
tokens/s per GPU): a point is on the front when no other point is at least as good on both axes and better on
one.  Plain data in, one flag per point out, so the simulator and the planner mark the same front.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# Coordinates are compared to this many significant digits: two runs that differ in the 13th digit (the same
# requests served the same way, summed in another order) are the same point, not one dominating the other.
SIGNIFICANT_DIGITS = 9


def _rounded(value: float) -> float:
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, SIGNIFICANT_DIGITS - 1 - math.floor(math.log10(abs(value))))


def pareto_front(points: Sequence[tuple[float, float] | None]) -> list[bool | None]:
    """Per point, whether it is on the front (None for a point that is None: it has no position, e.g. a run with
    no TPOT, and neither joins nor blocks the front).  Both coordinates are maximised.  Equal points (to
    ``SIGNIFICANT_DIGITS``) do not dominate each other: each is on the front when the position is.  O(n log n):
    sorted by x falling (y falling among equal x), a point is dominated exactly when an earlier point's y reaches
    its own and that point is not its equal."""
    flags: list[bool | None] = [None] * len(points)
    placed = sorted(((i, (_rounded(p[0]), _rounded(p[1]))) for i, p in enumerate(points) if p is not None),
                    key=lambda ip: (-ip[1][0], -ip[1][1]))
    best_y = float("-inf")  # the highest y among points of strictly larger x, or of equal x and larger y
    previous: tuple[float, float] | None = None
    best_before_previous = float("-inf")
    for i, point in placed:
        if point == previous:  # an equal of the point before: the same verdict
            flags[i] = point[1] > best_before_previous
            continue
        best_before_previous = best_y
        flags[i] = point[1] > best_y
        best_y = max(best_y, point[1])
        previous = point
    return flags
