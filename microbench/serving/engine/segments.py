"""A continuous-batching run in segments, so that its parts can be shuffled in among other runs.

Why: on a shared machine the engine's speed drifts with the other processes, decorrelating within about a
second.  A static run of a burst is split into its batches and shuffled among the other runs, so the
calibration and the workload meet the same mix of load; a continuous run was one manager run of 0.3-0.6 s,
one sample of the drift per repeat, and its calibration and workload means disagreed by up to 16% per
full-batch step (docs/serving.md).  The manager itself cannot be split, but its generation thread can be
parked between two steps: ``StepGate`` blocks it inside the stamped output delivery (the end of a step) once
it has run the segment's steps, and the time it spends parked is taken off every later stamp (on the thread
CPU clock a parked thread uses none anyway; on the wall clock it would count).  The manager keeps its cache
and its requests while parked, so the steps are the same as in one go.

``SegmentedContinuous`` runs ``run_continuous`` in a driver thread; piece ``i`` lets the engine run up to
step ``(i + 1) * SEGMENT_STEPS`` (the last piece, to the end) and returns once it has parked there.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

# Steps per segment: a segment of about 0.1 s on the CPU check (a static batch's length), so that pieces of
# all the runs are of one size.
SEGMENT_STEPS = 12


class StepGate:
    """Parks the generation thread after step ``boundary`` until the caller raises the boundary."""

    def __init__(self, boundary: int):
        self._condition = threading.Condition()
        self.boundary, self.steps, self.done, self.offset_s = boundary, 0, False, 0.0

    def clock(self, clock: Callable[[], float]) -> Callable[[], float]:
        """The engine's clock without the time spent parked."""
        return lambda: clock() - self.offset_s

    def wrap(self, deliver: Callable, steps: Callable[[], int], done: Callable[[], bool],
             clock: Callable[[], float], resumed: Callable[[], None] = lambda: None) -> Callable:
        """``deliver`` (already stamped) followed by the park, in the generation thread; ``resumed`` runs there
        when the park ends, before the engine's next step (what other runs changed meanwhile is put back)."""

        def gated(outputs):
            result = deliver(outputs)
            with self._condition:
                self.steps, self.done = steps(), done()
                self._condition.notify_all()
                if self.done or self.steps < self.boundary:
                    return result
                parked = clock()
                self._condition.wait_for(lambda: self.boundary > self.steps)
                resumed()
                self.offset_s += clock() - parked
            return result

        return gated

    def advance(self, boundary: float, alive: Callable[[], bool], timeout_s: float) -> None:
        """Let the engine run to ``boundary`` steps (or to its end); return once it is there, parked."""
        deadline = time.perf_counter() + timeout_s
        with self._condition:
            self.boundary = boundary
            self._condition.notify_all()
            while not (self.done or self.steps >= boundary) and alive() and time.perf_counter() < deadline:
                self._condition.wait(0.01)

    def release(self) -> None:
        with self._condition:
            self.boundary = math.inf
            self._condition.notify_all()


def segment_count(requests, max_batch: int, budget_tokens: int) -> int:
    """About how many segments a burst's continuous run takes: full-batch decode steps, the last batch's tail
    and the prefill steps.  Only the granularity depends on it: the last piece always runs to the end."""
    decode = sum(r.output_tokens for r in requests) / max_batch + max(r.output_tokens for r in requests) / 2
    prefill = sum(r.prompt_tokens for r in requests) / budget_tokens
    return max(1, round((decode + prefill) / SEGMENT_STEPS))


class SegmentedContinuous:
    """One repeat of a continuous run, in ``pieces`` segments run in order (``piece(0)`` starts it)."""

    def __init__(self, run: Callable[[StepGate], Any], pieces: int, timeout_s: float = 600.0):
        self.pieces, self.timeout_s, self.gate = pieces, timeout_s, StepGate(SEGMENT_STEPS)
        self._run, self._result, self._error = run, None, None
        self._thread = threading.Thread(target=self._drive, name="continuous-segments", daemon=True)

    def _drive(self) -> None:
        try:
            self._result = self._run(self.gate)
        except BaseException as error:  # re-raised in the caller's thread by the last piece
            self._error = error
            self.gate.release()

    def piece(self, index: int) -> Any:
        """Run segment ``index``; the last returns the EngineRun, the others None."""
        if index == 0:
            self._thread.start()
        if index < self.pieces - 1:
            self.gate.advance((index + 1) * SEGMENT_STEPS, self._thread.is_alive, self.timeout_s)
            return None
        self.gate.release()
        self._thread.join(self.timeout_s)
        if self._error is not None:
            raise self._error
        if self._thread.is_alive():
            raise TimeoutError(f"the continuous run did not finish in {self.timeout_s:.0f} s")
        return self._result
