"""A benchmark's requests replayed through the simulator, and the engine's overhead fitted on them.

The replay runs the same requests (their prompt and output tokens, and the shared prefix their prompts opened
with, which the policy's prefix cache finds again) arriving as they did (``BenchRun.arrivals``: the measured send
times, the generator's arrival process drawn again, or a closed loop of C in flight, which sends each request
when the simulated one before it ends; a synchronous run is a closed loop of one) under the engine's policy (the
configuration each benchmark's engine ran) on the step profile.

The fit, like validate's, is one row per stretch of measured engine time: for a request whose every token's
time was kept (vLLM's ``itls``), each gap between two tokens; otherwise (GuideLLM) its decode span, first token
to last.  Each row is the measured time less the simulated kernel time of the steps between the two tokens,
against what each overhead term multiplies over those steps, read from the simulator's own calls of
``EngineOverhead.step_s`` (a recording overhead), so the fit and the prediction count the terms the same way.
Time to the first token is not fitted: it holds the server's request handling (HTTP, tokenizing, queueing in
the server), which no step term describes; it is predicted and reported.

With arrivals over time the schedule depends on the step times, and so on the overhead: replay with no
overhead, fit, replay with the fit, fit again, each new fit taken halfway from the last (undamped, a schedule
and its fit were seen to cycle through six fits), until the fit of the schedule made with the last fit is that
fit (the fitted time moves by less than ``SETTLED`` of itself; ``MAX_ROUNDS`` at most, then the mean of the
last half of the rounds; the rounds are recorded).  Such a fixed point need not be the only one: the terms can
trade off against the schedule they make, and the prediction, not each term, is what the replay checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from roofline.calibrate.bench import BenchError, BenchRun
from roofline.calibrate.fit import nnls
from roofline.serving.profile_doc import EngineOverhead, StepProfile
from roofline.serving.simulate import SimulationError, SimulationRun, simulate

MAX_ROUNDS = 20
# The fit has settled when no term moves by more than this share of the step time it adds up to.
SETTLED = 1e-3


@dataclass(frozen=True)
class _RecordedOverhead(EngineOverhead):
    """An ``EngineOverhead`` that keeps what each step's ``step_s`` was called with (sequences, cached tokens,
    prefill): the amounts each term multiplies, in step order."""

    calls: list = field(default_factory=list, compare=False, repr=False)

    def step_s(self, sequences: int, cached_tokens: float, prefill: bool) -> float:
        self.calls.append((sequences, cached_tokens, prefill))
        return super().step_s(sequences, cached_tokens, prefill)


def _recording(overhead: EngineOverhead | None) -> _RecordedOverhead:
    terms = {name: getattr(overhead, name) if overhead else 0.0 for name in EngineOverhead.TERMS}
    return _RecordedOverhead(**terms, fitted_on=overhead.fitted_on if overhead else "none")


@dataclass(frozen=True)
class Replay:
    """One simulated run of a benchmark's requests, with per step its kernel time (s), its end (s) and, per
    overhead term, what the term multiplies in it."""

    run: SimulationRun
    kernel_s: np.ndarray
    end_s: np.ndarray
    terms: np.ndarray  # steps x terms, in EngineOverhead.TERMS order


def replay(profile: StepProfile, bench: BenchRun, policy: str, overhead: EngineOverhead | None,
           mem_fraction: float = 0.9) -> Replay:
    """``bench``'s requests through one replica of ``profile`` under ``policy`` with ``overhead``."""
    recorder = _recording(overhead)
    # A closed loop (concurrency:C) is the simulator's own: the first C sent at once, each later one (in sending
    # order) when a simulated one ends, its measured send time unused.
    run = simulate(profile, bench.workload(), policy, recorder, mem_fraction, concurrency=bench.concurrency)
    if len(recorder.calls) != len(run.steps):
        raise SimulationError(f"{len(recorder.calls)} overhead calls for {len(run.steps)} steps")  # a bug, loudly
    units = [EngineOverhead(**{n: 1.0 if n == term else 0.0 for n in EngineOverhead.TERMS}, fitted_on="unit")
             for term in EngineOverhead.TERMS]
    terms = np.array([[unit.step_s(*call) for unit in units] for call in recorder.calls], dtype=float)
    time_s, overhead_s = run.steps.column("time_s"), run.steps.column("overhead_s")
    return Replay(run, time_s - overhead_s, run.steps.column("start_s") + time_s, terms.reshape(-1, len(units)))


def fit_rows(bench: BenchRun, replayed: Replay) -> tuple[np.ndarray, np.ndarray]:
    """(A, y): per measured stretch, the overhead terms summed over its simulated steps, and its measured time
    less their kernel time (module docstring)."""
    kernel = np.concatenate([[0.0], np.cumsum(replayed.kernel_s)])
    terms = np.vstack([np.zeros(replayed.terms.shape[1]), np.cumsum(replayed.terms, axis=0)])
    rows, excess = [], []
    for measured, simulated in zip(bench.requests, replayed.run.requests, strict=True):
        if measured.output_tokens < 2:
            continue
        steps = np.searchsorted(replayed.end_s, np.asarray(simulated.token_times_s, dtype=float)) + 1
        if len(measured.token_times_s) == measured.output_tokens:  # every gap measured: a row each
            spans, times = steps, np.asarray(measured.token_times_s, dtype=float)
        else:
            spans = steps[[0, -1]]
            times = np.array([measured.first_token_s, measured.finish_s])
        rows.append(terms[spans[1:]] - terms[spans[:-1]])
        excess.append(np.diff(times) - (kernel[spans[1:]] - kernel[spans[:-1]]))
    if not rows:
        raise BenchError(f"{bench.path}: no request produced two tokens; nothing to fit the overhead on")
    return np.vstack(rows), np.concatenate(excess)


@dataclass(frozen=True)
class Calibration:
    """The fitted overhead, each benchmark's replay made with it, and how the fit went: one record per round."""

    overhead: EngineOverhead
    replayed: tuple[Replay, ...]
    rounds: tuple[dict[str, Any], ...]
    rows: int
    settled: bool  # False: MAX_ROUNDS ran out, and the overhead is the mean of the last half of the rounds


def calibrate(profile: StepProfile, benches: Sequence[BenchRun], policy: str | Sequence[str],
              mem_fraction: float = 0.9) -> Calibration:
    """Fit the overhead on ``benches``, all together (module docstring): replay each, fit, replay with the fit,
    until it settles.  ``policy``: the engine's scheduling, one for all or one per benchmark (each the
    configuration its engine ran: ``roofline.calibrate.config.replay_policy``)."""
    policies = [policy] * len(benches) if isinstance(policy, str) else list(policy)
    if len(policies) != len(benches):
        raise ValueError(f"{len(policies)} policies for {len(benches)} benchmarks")  # a bug, loudly
    overhead: EngineOverhead | None = None
    rounds: list[dict[str, Any]] = []
    settled = False
    for _ in range(MAX_ROUNDS):
        pairs = zip(benches, policies, strict=True)
        parts = [fit_rows(b, replay(profile, b, p, overhead, mem_fraction)) for b, p in pairs]
        a_matrix, y = np.vstack([a for a, _ in parts]), np.concatenate([y for _, y in parts])
        raw = nnls(a_matrix, y)
        previous = None if overhead is None else _terms(overhead)
        settled = previous is not None and _moved(previous, raw, a_matrix) <= SETTLED
        coefficients = next_fit(raw, previous, settled)
        overhead = EngineOverhead(**dict(zip(EngineOverhead.TERMS, (float(c) for c in coefficients), strict=True)),
                                  fitted_on=_fitted_on(benches, len(y)))
        rounds.append({**{name: getattr(overhead, name) for name in EngineOverhead.TERMS},
                       "rms_residual_s": float(np.sqrt(np.mean((a_matrix @ raw - y) ** 2)))})
        if settled:
            break
    assert overhead is not None  # MAX_ROUNDS >= 1
    if not settled:  # still circling: the middle of the last half of the rounds
        last = rounds[len(rounds) // 2:]
        overhead = replace(overhead, **{n: float(np.mean([r[n] for r in last])) for n in EngineOverhead.TERMS})
    return Calibration(overhead, tuple(replay(profile, b, p, overhead, mem_fraction)
                                       for b, p in zip(benches, policies, strict=True)),
                       tuple(rounds), len(y), settled)


def next_fit(raw: np.ndarray, last: np.ndarray | None, settled: bool) -> np.ndarray:
    """The overhead the next replay runs with: the first fit and a settled one as fitted; otherwise halfway from
    the last fit to this one (undamped, a schedule and its fit were seen to cycle through six fits)."""
    if last is None or settled:
        return raw
    return 0.5 * (raw + last)


def _terms(overhead: EngineOverhead) -> np.ndarray:
    return np.array([getattr(overhead, n) for n in EngineOverhead.TERMS])


def _moved(x0: np.ndarray, x1: np.ndarray, a_matrix: np.ndarray) -> float:
    """How far the fitted time of the rows is from the last fit's, as a share of the time they fit: the fit of
    the schedule the last fit made is the last fit itself at a fixed point."""
    total = float(np.abs(a_matrix @ x1).sum())
    return float(np.abs(a_matrix @ (x1 - x0)).sum()) / total if total else 0.0


def _fitted_on(benches: Sequence[BenchRun], rows: int) -> str:
    runs = "; ".join(f"{len(b.requests)} requests of {b.path} ({b.format} {b.label}, arrivals {b.arrivals})"
                     for b in benches)
    return f"{runs}: {rows} measured stretches"

