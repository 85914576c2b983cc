"""What an engine run records, and how repeats of one run combine.

An engine run is a sequence of steps; every step that emits tokens is stamped (``step_s``, seconds from the
run's start), and each request names the step of its first token and of its last, and of every token between
(``token_steps``: its inter-token gaps are the differences of those steps' stamps).  Repeats of the same run on
the same workload take the same steps (burst arrivals, a deterministic scheduler), so they can be combined
step by step: each step's MEAN duration over the repeats.  Why the mean and not the fastest: on a shared
machine the thread's CPU time of one step swings by up to 2x with what the other processes do to the caches
(docs/serving.md, "How validate's prediction is made"), and quiet moments are rare; the fastest of a few
repeats is then an extreme value that one job catches and the next does not, whereas the calibration and
workload runs are interleaved in a shuffled order, so their means are taken over the same mix of machine
states and the overhead fitted on one carries over to the other.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from roofline.serving.latency import ServedRequest
from roofline.serving.workload import Request


@dataclass(frozen=True, slots=True)
class RequestTiming(ServedRequest):
    """One request as the engine served it (``ServedRequest``: its request and its tokens' times, seconds from the
    run's start) and the steps its tokens came at: the first's and the last's (-1: not known), and each output
    token's in order (``token_steps``, empty: not known; the document keeps the steps, not the times)."""

    first_step: int = -1
    finish_step: int = -1
    token_steps: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "arrival_s": self.arrival_s, "first_token_s": self.first_token_s,
                "finish_s": self.finish_s, "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
                "first_step": self.first_step, "finish_step": self.finish_step, "token_steps": list(self.token_steps)}


def stamped_timing(request: Request, step_s: Sequence[float], token_steps: Sequence[int]) -> RequestTiming:
    """A request's timing read off its run's step stamps: its tokens came at ``token_steps`` (in order)."""
    first, last = token_steps[0], token_steps[-1]
    return RequestTiming(request, step_s[first], step_s[last], tuple(step_s[i] for i in token_steps), first, last,
                         tuple(token_steps))


@dataclass(frozen=True)
class EngineRun:
    engine: str
    path: str  # static | continuous
    policy: str  # the simulator policy that describes what this path does
    requests: tuple[RequestTiming, ...]
    settings: dict[str, Any] = field(default_factory=dict)
    step_s: tuple[float, ...] = ()

    @property
    def total_s(self) -> float:
        return max(r.finish_s for r in self.requests)

    def schedule(self) -> tuple:
        """What must agree for repeats to be combined step by step."""
        return len(self.step_s), tuple((r.id, r.first_step, r.finish_step, r.token_steps) for r in self.requests)

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "path": self.path, "policy": self.policy, "total_s": self.total_s,
                "settings": self.settings, "steps": len(self.step_s),
                "requests": [r.to_dict() for r in self.requests]}


def mean_steps(runs: Sequence[EngineRun]) -> EngineRun:
    """Repeats combined: each step's mean duration; the run of median total time when the schedules differ."""
    ordered = sorted(runs, key=lambda run: run.total_s)
    median = ordered[(len(ordered) - 1) // 2]
    known = all(r.first_step >= 0 and r.finish_step >= 0 for run in runs for r in run.requests)
    if len(runs) == 1 or not known or len({run.schedule() for run in runs}) != 1:
        return replace(median, settings={**median.settings, "repeats": len(runs), "combined": "median run"})
    columns = zip(*(step_durations(run) for run in runs), strict=True)  # one schedule: as many steps each
    stamps = list(itertools.accumulate(sum(column) / len(runs) for column in columns))
    requests = tuple(replace(r, first_token_s=stamps[r.first_step], finish_s=stamps[r.finish_step],
                             token_times_s=tuple(stamps[i] for i in r.token_steps))
                     for r in median.requests)
    return replace(median, requests=requests, step_s=tuple(stamps),
                   settings={**median.settings, "repeats": len(runs), "combined": "mean of each step"})


def step_durations(run: EngineRun) -> tuple[float, ...]:
    """Each step's duration (the stamps are cumulative)."""
    return tuple(b - a for a, b in zip((0.0,) + run.step_s[:-1], run.step_s, strict=True))
