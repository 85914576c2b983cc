"""Reading between a table's points (roofline.core.interpolate), by hand: inside, on the points, and past each end
as the caller names it."""

from __future__ import annotations

import math

import pytest

from roofline.core.interpolate import OutsideGrid, interp1, interp2, linear, nearest, weights

GRID, VALUES = (2, 4, 8), (1.0, 3.0, 4.0)


def test_inside_and_on_the_points():
    assert linear(GRID, VALUES, 3) == 2.0
    assert linear(GRID, VALUES, 5) == pytest.approx(3.25)
    assert [linear(GRID, VALUES, g) for g in GRID] == list(VALUES)


def test_each_end_does_what_its_caller_names():
    assert linear(GRID, VALUES, 1) == 0.0 and linear(GRID, VALUES, 12) == 5.0  # the end segments continued
    assert linear(GRID, VALUES, 1, below="hold") == 1.0 and linear(GRID, VALUES, 12, above="hold") == 4.0
    with pytest.raises(OutsideGrid, match="tokens=12 is outside the measured 2..8"):
        linear(GRID, VALUES, 12, above="refuse", what="tokens")
    assert linear(GRID, VALUES, 1, below="hold", above="refuse") == 1.0  # each end its own rule


def test_log_spacing_interpolates_in_the_logarithm():
    # Halfway between 2 and 8 in log(x) is 4: the value halfway between 1 and 4 on a grid of (2, 8).
    assert linear((2, 8), (1.0, 4.0), 4, log=True) == pytest.approx(2.5)
    assert linear((2, 8), (1.0, 4.0), math.sqrt(2 * 8), log=True) == pytest.approx(2.5)


def test_weights_bracket_inside_and_refuse_outside():
    assert weights(GRID, 4) == ((1, 1.0),)
    assert weights(GRID, 5) == ((1, 0.75), (2, 0.25))
    with pytest.raises(OutsideGrid):
        weights(GRID, 9)


def test_time_tables_never_read_below_zero_and_bilinear_is_exact_on_a_plane():
    assert interp1((2, 4), (1.0, 3.0), 0) == 0.0  # the line reads -1 there: a time is never negative
    rows, cols = (1, 3), (10, 20)
    plane = [[r + 0.1 * c for c in cols] for r in rows]
    assert interp2(rows, cols, plane, 2.5, 12) == pytest.approx(2.5 + 1.2)
    assert interp2(rows, cols, plane, 5, 30) == pytest.approx(5 + 3.0)  # extrapolated in both


def test_nearest_is_by_ratio():
    # The ratio midpoint of 1 and 8 is sqrt(8) = 2.83: 2.8 is nearer 1, 3 nearer 8 (though 3 - 1 < 8 - 3).
    assert nearest((1, 8, 64), 2.8) == 1
    assert nearest((1, 8, 64), 3) == 8
    assert nearest((1, 8, 64), 100) == 64 and nearest((1, 8, 64), 0.5) == 1
