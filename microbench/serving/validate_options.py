"""``gpubench validate``'s option checks and the engine's timing (clock and torch threads) chosen from them:
plain Python, so each is checked before torch is imported and anything is measured."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from microbench.sweep.plan import PlanError

# torch.manual_seed takes up to 2^64 - 1, and the calibration workload is seeded with seed + 1.
SEED_LIMIT = 2**63


def check_seed(seed: int) -> None:
    if not 0 <= seed < SEED_LIMIT:
        raise PlanError(f"--seed {seed}: give an integer from 0 to 2^63 - 1")


def check_threads(threads: int) -> None:
    """Positive and at most this machine's CPUs: torch takes any int32 (and fails past it with a ValueError),
    but more threads than CPUs only time the threads' contention."""
    cpus = os.cpu_count() or 1
    if not 1 <= threads <= cpus:
        raise PlanError(f"--threads {threads}: give 1 to {cpus}, the CPUs of this machine")


def check_positive_number(flag: str, value: float | None, what: str) -> None:
    """None (not given) or finite and above 0, as the sweep's budgets: nan would turn a gate off without a
    word, and 0 or less would make it fail whatever was measured."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise PlanError(f"{flag} {value:g}: give a finite number above 0 ({what})")


@dataclass(frozen=True)
class EngineTiming:
    """The clock the engine and the profile are timed on, the torch threads to run with (None: leave torch's
    default), and what was chosen for the user, to say so."""

    clock: str
    threads: int | None
    note: str | None = None


def engine_timing(setup, kind: str) -> EngineTiming:
    """Wall time on a GPU (its work is asynchronous).  On a CPU with burst arrivals the engine thread's CPU
    time, so other processes on a shared machine do not count as engine time (docs/serving.md): it times one
    thread, so that default runs one torch thread; ``--threads N`` above 1 alone is timed on the wall clock
    (``check`` refuses it with a typed ``--clock thread-cpu``).  Arrivals over time are waited for on the
    wall clock."""
    if kind != "cpu":
        if setup.clock == "thread-cpu":
            raise PlanError("--clock thread-cpu times a CPU thread, not a GPU's asynchronous work: drop it")
        return EngineTiming("wall", setup.threads)
    if setup.clock == "wall" or setup.arrivals != "burst":
        return EngineTiming("wall", setup.threads)
    if setup.threads not in (None, 1):
        return EngineTiming("wall", setup.threads, f"timing {setup.threads} torch threads on the wall clock "
                            "(the thread CPU clock times one thread; other processes' load counts)")
    note = None if setup.threads == 1 else (
        "timing the engine on one torch thread's CPU clock, so other processes do not count "
        "(--threads N times N threads on the wall clock)")
    return EngineTiming("thread-cpu", 1, note)
