"""Timers: how one sample of per-launch time is taken.  Each timer turns ``launch(i)`` — run the op on
rotation copy ``i`` — into a ``sample()`` callable for ``adaptive.measure``.

- ``CpuTimer``: ``perf_counter_ns`` around ``launches`` consecutive rotated launches.
- ``CudaGraphTimer``: a CUDA graph of ``launches`` rotated launches, replays timed with CUDA events and
  divided by ``launches``.  Host launch overhead (the same size as a 5-50 µs GEMV) is out of the number.
- ``CudaEagerTimer``: one launch per event pair, as an eager PyTorch program would run it.

The rotation index always advances, so consecutive launches read different weight copies and each
launch reads its weights from DRAM, not from a cache that the previous launch warmed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

Launch = Callable[[int], None]

# A CPU sample should be long against perf_counter's resolution and the Python loop around it.
CPU_MIN_SAMPLE_S = 2e-3
# A CPU sample reads every rotation copy once, so that differences between copies (where each sits in memory)
# average out and samples stay exchangeable, as the median's interval assumes; unless a whole cycle would take
# longer than this, which only a compute-bound launch does (a copy's placement does not change its time).
CPU_MAX_CYCLE_S = 0.05
# A graph replay should be long against event resolution (~0.5 µs) and replay launch cost.
GRAPH_MIN_REPLAY_S = 1e-3
MAX_LAUNCHES_PER_SAMPLE = 4096
# Event pairs recorded before one synchronisation: fewer host round trips, no idle gaps between samples.
EVENTS_PER_SYNC = 8


def launches_for(single_launch_s: float, min_sample_s: float, copies: int, whole_cycles: bool = True) -> int:
    """Launches per sample: enough to fill ``min_sample_s``; a whole number of rotation cycles for a CUDA graph,
    which replays the launches it captured, so a replay must read every copy alike.  The CPU timer's rotation
    index runs on across samples, so every launch reads a copy untouched for ``copies - 1`` launches whatever
    the sample's length (``whole_cycles=False``, for a cycle longer than ``CPU_MAX_CYCLE_S``): a compute-bound
    point of 0.2 s a launch and 32 copies then takes one launch a sample, not 32 (6 s)."""
    wanted = math.ceil(min_sample_s / max(single_launch_s, 1e-9))
    if not whole_cycles:
        return min(max(1, wanted), MAX_LAUNCHES_PER_SAMPLE)
    cycles = min(max(1, math.ceil(wanted / copies)), max(1, MAX_LAUNCHES_PER_SAMPLE // copies))
    return cycles * copies


class CpuTimer:
    name = "perf_counter"

    def __init__(self, launch: Launch, copies: int, clock_ns: Callable[[], int] = time.perf_counter_ns):
        self.launch = launch
        self.copies = copies
        self.clock_ns = clock_ns
        self.launches = 1
        self._next = 0

    def prepare(self) -> None:
        """Estimate one launch, then size a sample to last at least ``CPU_MIN_SAMPLE_S``."""
        self.launches = 1
        estimate = self.sample()[0]
        self.launches = launches_for(estimate, CPU_MIN_SAMPLE_S, self.copies,
                                     whole_cycles=estimate * self.copies <= CPU_MAX_CYCLE_S)

    def sample(self) -> list[float]:
        start = self.clock_ns()
        for _ in range(self.launches):
            self.launch(self._next % self.copies)
            self._next += 1
        return [(self.clock_ns() - start) * 1e-9 / self.launches]


def event_times_s(torch, action) -> list[float]:
    """``EVENTS_PER_SYNC`` back-to-back (start event, action, end event) triples, one synchronisation,
    and the seconds between each pair: no host round trip and no idle GPU between samples."""
    cuda = torch.cuda
    pairs = [(cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)) for _ in range(EVENTS_PER_SYNC)]
    for start, end in pairs:
        start.record()
        action()
        end.record()
    pairs[-1][1].synchronize()
    return [start.elapsed_time(end) * 1e-3 for start, end in pairs]


class _CudaTimer:
    """What both CUDA timers hold: the launch, its copies, torch, and launches per sample (1 until prepared)."""

    def __init__(self, launch: Launch, copies: int, torch_module):
        self.launch, self.copies, self.torch = launch, copies, torch_module
        self.launches = 1


class CudaEagerTimer(_CudaTimer):
    """One launch between each pair of events, rotating through the copies."""

    name = "cuda-eager"

    def __init__(self, launch: Launch, copies: int, torch_module):
        super().__init__(launch, copies, torch_module)
        self._next = 0

    def prepare(self) -> None:
        self.sample()

    def sample(self) -> list[float]:
        return event_times_s(self.torch, self._launch_next)

    def _launch_next(self) -> None:
        self.launch(self._next % self.copies)
        self._next += 1


class CudaGraphTimer(_CudaTimer):
    """Replays of a captured graph of ``launches`` rotated launches, timed with events."""

    name = "cuda-graph"

    def __init__(self, launch: Launch, copies: int, torch_module):
        super().__init__(launch, copies, torch_module)
        self.launches = copies
        self.graph = None

    def prepare(self) -> None:
        torch = self.torch
        # Estimate a single launch eagerly, then capture enough launches to fill GRAPH_MIN_REPLAY_S.
        eager = CudaEagerTimer(self.launch, self.copies, torch)
        estimates = sorted(eager.sample())
        self.launches = launches_for(estimates[len(estimates) // 2], GRAPH_MIN_REPLAY_S, self.copies)
        # Capture on a side stream after an eager warm-up, as torch.cuda.graphs recommends.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(self.copies):
                self.launch(i)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(self.launches):
                self.launch(i % self.copies)
        torch.cuda.synchronize()
        self.graph = graph

    def sample(self) -> list[float]:
        if self.graph is None:
            raise RuntimeError("CudaGraphTimer.sample() before prepare()")
        return [t / self.launches for t in event_times_s(self.torch, self.graph.replay)]

    def release(self) -> None:
        if self.graph is not None:
            self.graph.reset()
            self.graph = None
