"""The grids a step profile's tables are sampled on, the same for the analytic and the measured profile.

Kernel time bends most at few tokens, and the step-cost model interpolates linearly between grid points
(``docs/serving.md``): token counts 1, 2, 3, 4, 6, 8, 12, ... (powers of two and the 1.5× points between them).
"""

from __future__ import annotations

DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
DECODE_CONTEXTS = (1, 128, 512, 2048, 8192, 32768)


def token_grid(maximum: int) -> tuple[int, ...]:
    """1, 2, 3, 4, 6, 8, 12, … up to and including ``maximum``: 1.5× steps keep interpolation close."""
    out, power = {1}, 1
    while power <= maximum:
        out.update(v for v in (power, power * 3 // 2) if v <= maximum)
        power *= 2
    out.add(maximum)
    return tuple(sorted(out))


def power_grid(start: int, limit: int, step: int = 2) -> tuple[int, ...]:
    """start, start·step, ... up to ``limit`` (always included); just ``limit`` when it is below ``start``."""
    values, value = set(), start
    while value < limit:
        values.add(value)
        value *= step
    values.add(limit)
    return tuple(sorted(values))
