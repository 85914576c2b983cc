"""Warm-up and adaptive repetition: sample until the median is known to the target precision.

Everything here sees time only through a ``Clock`` and samples only through a callable, so the
stopping rules are tested with a seeded clock and by counting calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from roofline.core.stats import MIN_SAMPLES_FOR_CI, summarize

# A median from fewer samples than this is not worth reporting, whatever the budget says.
FLOOR_SAMPLES = 3
# min_time_s may take a phase past max_samples, but never past this many times it.
HARD_MAX_SAMPLES_FACTOR = 20
# Warm-up has settled when two consecutive samples agree within this fraction.
SETTLED_REL = 0.05


class Stopped(BaseException):  # noqa: N818 - a signal, like KeyboardInterrupt, not an error
    """A stop flag was set while measuring something that need not be finished (the ceilings).

    A BaseException, so the ``except Exception`` that records a failed point does not swallow it."""


class Clock(Protocol):
    def now_s(self) -> float: ...


class PerfClock:
    """The wall clock: ``time.perf_counter``."""

    def now_s(self) -> float:
        return time.perf_counter()


@dataclass(frozen=True)
class StoppingRule:
    """When to stop sampling a point.

    Stop as soon as the 95% CI of the median is within ``target_rel_ci`` of it (with at least
    ``min_samples``), or after ``budget_s`` of wall time (with at least ``FLOOR_SAMPLES``), or at
    ``max_samples``.  Warm-up runs for at least ``warmup_s`` and ``min_warmup_samples`` samples, until
    two consecutive samples agree within 5%, and gives up waiting at ``4 × warmup_s``.
    """

    target_rel_ci: float = 0.01
    budget_s: float = 1.0
    min_samples: int = 10
    max_samples: int = 500
    warmup_s: float = 0.05
    min_warmup_samples: int = 2
    # Sample at least this long, even past max_samples (telemetry needs its readings to describe the
    # phase); HARD_MAX_SAMPLES_FACTOR × max_samples still stops a phase of very short samples.
    min_time_s: float = 0.0

    def __post_init__(self) -> None:
        # Invariants, not input checks: the user's --target-ci and --budget are refused (one line, exit 2) by
        # microbench.points.config.SweepConfig before a rule is built, so a ValueError here is a bug in the caller.
        if not 0 < self.target_rel_ci < 1:
            raise ValueError("target CI must be a fraction between 0 and 1")
        if self.budget_s <= 0:
            raise ValueError("budget must be positive")
        if self.min_samples < MIN_SAMPLES_FOR_CI:
            raise ValueError(f"min_samples must be at least {MIN_SAMPLES_FOR_CI} to give a CI")
        if self.max_samples < self.min_samples:
            raise ValueError("max_samples must be at least min_samples")


@dataclass(frozen=True)
class Measurement:
    samples_s: tuple[float, ...]
    warmup_samples_s: tuple[float, ...]
    stop_reason: str  # converged | budget | max_samples
    started_s: float = 0.0  # the clock at the start and end of the timed phase (telemetry windows)
    finished_s: float = 0.0


def _stoppable(sample: Callable[[], Sequence[float]], should_stop: Callable[[], bool]):
    def checked() -> Sequence[float]:
        if should_stop():
            raise Stopped()
        return sample()

    return checked


def warm_up(sample: Callable[[], Sequence[float]], rule: StoppingRule, clock: Clock) -> list[float]:
    """Run samples until clocks and caches have settled; return what warm-up measured."""
    start = clock.now_s()
    seen: list[float] = []
    while True:
        seen.extend(sample())
        elapsed = clock.now_s() - start
        if elapsed >= 4 * rule.warmup_s and len(seen) >= rule.min_warmup_samples:
            return seen
        if elapsed < rule.warmup_s or len(seen) < max(2, rule.min_warmup_samples):
            continue
        previous, last = seen[-2], seen[-1]
        if abs(last - previous) <= SETTLED_REL * max(last, previous):
            return seen


def measure(sample: Callable[[], Sequence[float]], rule: StoppingRule, clock: Clock,
            should_stop: Callable[[], bool] | None = None) -> Measurement:
    """Warm up, then sample until the rule says stop.  ``sample`` returns one or more per-launch times.

    ``should_stop`` (checked before every sample) raises ``Stopped`` when it returns True: the ceilings
    give up a measurement in flight on Ctrl-C, a sweep point does not."""
    checked = sample if should_stop is None else _stoppable(sample, should_stop)
    warm = warm_up(checked, rule, clock)
    start = clock.now_s()
    samples: list[float] = []
    while True:
        samples.extend(checked())
        n = len(samples)
        elapsed = clock.now_s() - start
        if n >= HARD_MAX_SAMPLES_FACTOR * rule.max_samples:
            reason = "max_samples"
        elif elapsed < rule.min_time_s:
            continue
        elif n >= rule.max_samples:
            reason = "max_samples"
        elif n >= rule.min_samples and summarize(samples).rel_ci95_half_width <= rule.target_rel_ci:
            reason = "converged"
        elif elapsed >= rule.budget_s and n >= FLOOR_SAMPLES:
            reason = "budget"
        else:
            continue
        return Measurement(tuple(samples), tuple(warm), reason, start, clock.now_s())
