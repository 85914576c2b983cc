"""Reading between measured (or counted) points: the one place a table is interpolated.

Every table gpubench reads is piecewise-linear between its grid points (a step profile's kernel times, a reference
database's GEMM, attention, MoE and all-reduce tables, the draw by tokens of a measured power table, the bandwidth a
small GEMM reaches).  What differs between them is what happens past their ends, which each caller names:

- ``"extrapolate"``: the end segment continued (a step profile's tables, which the simulator reads a little past
  their grids);
- ``"hold"``: the end value (an all-reduce smaller than the smallest measured is no faster: its latency floor;
  a draw or a bandwidth fraction past the measured sizes stays at the last one);
- ``"refuse"``: ``OutsideGrid`` (a reference table is never extrapolated without saying so).

``log=True`` interpolates in log(x) (a table over sizes spanning decades).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from roofline.core.errors import BadInputError

ENDS = ("extrapolate", "hold", "refuse")


class OutsideGrid(BadInputError):
    """A value past a grid whose caller refuses to extrapolate."""


def segment(grid: Sequence[float], x: float) -> tuple[int, float]:
    """Index i of the segment [grid[i], grid[i+1]] that holds ``x`` (the end segments extended outwards) and the
    fraction of the way along it (below 0 or above 1 outside the grid)."""
    i = min(max(bisect_right(grid, x) - 1, 0), len(grid) - 2)
    return i, (x - grid[i]) / (grid[i + 1] - grid[i])


def weights(grid: Sequence[float], x: float, what: str = "x") -> tuple[tuple[int, float], ...]:
    """The grid indices around ``x`` inside the grid and their linear weights (one index at weight 1 when ``x`` is
    a grid point); ``OutsideGrid`` outside it."""
    if not grid or x < grid[0] or x > grid[-1]:
        span = f"{grid[0]:g}..{grid[-1]:g}" if grid else "none"
        raise OutsideGrid(f"{what}={x:g} is outside the measured {span}")
    i = bisect_left(grid, x)
    if grid[i] == x:
        return ((i, 1.0),)
    f = (x - grid[i - 1]) / (grid[i] - grid[i - 1])
    return ((i - 1, 1.0 - f), (i, f))


def linear(grid: Sequence[float], values: Sequence[float], x: float, *, below: str = "extrapolate",
           above: str = "extrapolate", log: bool = False, what: str = "x") -> float:
    """The piecewise-linear function through (grid, values) at ``x``, with ``below``/``above`` saying what it is
    past each end (module docstring); ``log``: linear in log(x) (grid and x positive)."""
    if len(grid) != len(values) or not grid:
        raise ValueError(f"a grid of {len(grid)} points with {len(values)} values")
    if x < grid[0] or x > grid[-1]:
        end = below if x < grid[0] else above
        if end == "refuse":
            raise OutsideGrid(f"{what}={x:g} is outside the measured {grid[0]:g}..{grid[-1]:g}")
        if end == "hold" or len(grid) == 1:
            return float(values[0] if x < grid[0] else values[-1])
    elif len(grid) == 1:
        return float(values[0])
    if log:
        grid, x = [math.log(g) for g in grid], math.log(x)
    i, f = segment(grid, x)
    return float(values[i] + f * (values[i + 1] - values[i]))


def interp1(grid: Sequence[float], times: Sequence[float], x: float) -> float:
    """A time table read at ``x``: piecewise-linear, extrapolated past the ends, never below zero."""
    return max(0.0, linear(grid, times, x))


def interp2(rows: Sequence[float], cols: Sequence[float], times: Sequence[Sequence[float]], row: float, col: float
            ) -> float:
    """A time table over rows × columns read at (row, col): bilinear, extrapolated in each direction, never below
    zero."""
    if len(rows) == 1:
        return interp1(cols, times[0], col)
    i, f = segment(rows, row)
    lo, hi = interp1(cols, times[i], col), interp1(cols, times[i + 1], col)
    return max(0.0, lo + f * (hi - lo))


def nearest(grid: Sequence[float], x: float) -> float:
    """The grid value nearest ``x`` by ratio (grid and x positive)."""
    i = bisect_left(grid, x)
    near = grid[max(i - 1, 0): i + 1]
    return min(near, key=lambda g: abs(math.log(g / x)))
