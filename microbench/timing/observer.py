"""What a measuring run tells whoever drives it: progress callbacks, and the interruption it ends with.

Neutral ground: the sweep, the ceilings, decode, profile and validate all report through a ``SweepObserver``
and stop with ``Interrupted``, so none of them (nor the terminal's progress display) imports the sweep loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from roofline.result.document import Point


@dataclass
class SweepObserver:
    """Callbacks the CLI uses for progress; all optional."""

    on_notice: Callable[[str], None] = lambda message: None
    on_start: Callable[[int], None] = lambda total: None
    on_point: Callable[[Point], None] = lambda point: None
    on_phase: Callable[[str], None] = lambda name: None
    # A measurement that is not a sweep point (a profile's kernel), in words: one tick of the bar.
    on_item: Callable[[str], None] = lambda description: None


class Interrupted(Exception):
    """A signal stopped the run; everything measured so far is saved in ``output`` (None: nothing kept)."""

    def __init__(self, signum: int, output: Path | None):
        super().__init__(f"interrupted by signal {signum}")
        self.signum, self.output = signum, output
