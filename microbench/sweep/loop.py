"""Run a sweep: measure each planned point (``microbench.timing.measure``) and save it.

The result document is written once when the sweep starts, then each point is appended to its journal
(fsync'd, one line a point) and folded into the document at the end, on interrupt or on failure, so an
interruption loses at most the point in flight.
A signal finishes the point in flight (a second one abandons it), saves, and raises ``Interrupted``;
``--resume`` continues the same plan.  A point that telemetry flags (thermal or hardware slowdown, an SM
clock that moved without a power cap to explain it) is measured once more after a pause, and both attempts
are kept; a power-capped point is recorded as such and not measured again.

Only the CLI imports this module: what a sweep is asked to do is ``microbench.points.config``, preparing one
(a new plan, or the rest of a recorded one) is ``microbench.sweep.prepare`` and ``microbench.sweep.resume``,
opening the device is ``microbench.timing.session.open_session``, progress and ``Interrupted`` are
``microbench.timing.observer``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from microbench.points import plan
from microbench.points.config import SweepConfig
from microbench.sweep.prepare import RETRY_PAUSE_S, PreparedSweep, prepare_sweep
from microbench.sweep.resume import prepare_resume
from microbench.timing.adaptive import Stopped
from microbench.timing.measure import measure_point
from microbench.timing.observer import Interrupted, SweepObserver
from microbench.timing.session import Session
from roofline.core.counting import compute_dtype
from roofline.result.document import Point, Result
from roofline.result.io import check_output
from roofline.result.journal import ResultWriter

# A card that throttles at every compute-bound point (power capping under GEMM is common) must not double
# the sweep: at most this share of the plan (and at least 3 points) is measured again.
RETRY_SHARE = 0.1


def needs_retry(point: Point) -> str | None:
    """Why a point must be measured again (thermal/hardware slowdown, or an unexplained SM clock move),
    decided from the readings attributed to its own timed phase; power capping is recorded, not retried."""
    from microbench.telemetry.sampler import remeasure_reason

    return remeasure_reason(point.telemetry)


def pause(session: Session, seconds: float) -> None:
    """Let clocks and temperature recover before a second attempt; a signal cuts it short.  A seam:
    tests replace it to change what the telemetry reader reports between attempts."""
    session.stop.wait(seconds)


def run_sweep(prepared: PreparedSweep, observer: SweepObserver,
              ceilings: Callable[[Session], dict[str, Any]] | None = None) -> Result:
    """Measure the ceilings (if asked and not already there), then every remaining point, saving after each."""
    session = prepared.session
    session.apply_memory_cap()
    session.start_telemetry(prepared.config.telemetry, prepared.config.telemetry_interval_s)
    if session.telemetry.get("source") == "none" or session.telemetry.get("reason"):
        observer.on_notice(f"telemetry: {session.telemetry['source']} ({session.telemetry.get('reason')})")
    try:
        return _run_points(prepared, observer, ceilings)
    finally:
        session.stop_telemetry()
        session.weights.clear()


def _run_points(prepared: PreparedSweep, observer: SweepObserver, ceilings) -> Result:
    session = prepared.session
    result = prepared.result
    # The document is written once, then each save journals only what is new (roofline.result.journal): O(point)
    # bytes per save, not O(sweep).  The finally folds the journal into one self-contained document.
    writer = ResultWriter(prepared.output) if prepared.output is not None else None

    def save(current: Result, point: Point | None = None, measured_ceilings: Any = None) -> Result:
        if writer is not None and not writer.started:
            writer.start(current.with_telemetry(session.telemetry_record()))
        elif writer is not None:
            writer.append(point=point, ceilings=measured_ceilings, telemetry=session.telemetry_record())
        return current

    def check_stop() -> None:
        if session.stop.is_set():
            raise Interrupted(getattr(session.stop, "signum", 2), prepared.output)

    result = save(result)
    try:
        if ceilings is not None and not result.ceilings.measured:
            observer.on_phase("ceilings")
            try:
                measured = ceilings(session)
                result = save(result.with_ceilings(measured), measured_ceilings=measured)
            except Stopped:  # a signal during the ceilings: they are abandoned, the sweep stops and saves
                session.synchronize()
        check_stop()
        if prepared.points:
            observer.on_phase("points")
            observer.on_start(len(prepared.points))
        retries_left = max(3, int(RETRY_SHARE * len(prepared.points)))
        for spec in prepared.points:
            point = measure_point(session, spec)
            why = needs_retry(point)
            if why and retries_left == 0:
                observer.on_notice(f"{spec.label}: {why}; not measured again (retry allowance spent)")
            elif why and not session.stop.is_set():
                retries_left -= 1
                observer.on_notice(f"{spec.label}: {why}; measuring it again after {RETRY_PAUSE_S:.0f} s")
                first = replace(point, superseded=True)
                result = save(result.with_point(first), point=first)
                pause(session, RETRY_PAUSE_S)
                point = measure_point(session, spec, attempt=2)
            result = save(result.with_point(point), point=point)
            observer.on_point(point)
            check_stop()
    finally:
        result = result.with_telemetry(session.telemetry_record())
        if writer is not None and writer.started:
            writer.finish(result)
    return result


# --- the commands' work: gpubench sweep and gpubench ceilings ------------------------------------------------

@dataclass(frozen=True)
class SweepDone:
    result: Result
    output: Path | None


def sweep_job(config: SweepConfig, observer: SweepObserver) -> SweepDone:
    """``gpubench sweep`` on one device: a new plan, or the rest of a recorded one (``config.resume``); the
    ceilings first (unless turned off or already there), each point saved as it comes (the report ``--report``
    asks for is the CLI's, written beside the result once it is saved).  A signal ends it with ``Interrupted``
    naming where the points are."""
    if config.resume is not None:
        prepared = prepare_resume(config, observer)
        observer.on_notice(f"resuming {config.resume}: {len(prepared.points)} point(s) left")
    else:
        if config.output is not None:
            check_output(config.output, overwrite=config.force)
        prepared = prepare_sweep(config, observer)
    ceilings = None
    if prepared.config.with_ceilings:
        dtypes = sorted({p.dtype for p in prepared.points} or set(prepared.config.dtypes or ()))
        ceilings = ceilings_step(prepared.config, dtypes)
    result = _run_stoppable(prepared, observer, ceilings)
    return SweepDone(result, prepared.output)


def ceilings_job(config: SweepConfig, observer: SweepObserver) -> Result:
    """``gpubench ceilings``: copy/read bandwidth and the matmul peak per dtype (every dtype the device runs
    unless ``config.dtypes``), in memory, saved only when ``config.output`` names a file."""
    if config.output is not None:
        check_output(config.output, overwrite=config.force, resumable=False)
    prepared = prepare_sweep(replace(config, ops=(), save=False), observer)
    dtypes = list(config.dtypes or plan.CEILING_DTYPES[prepared.session.choice.kind])
    return _run_stoppable(prepared, observer, ceilings_step(config, dtypes))


def ceilings_step(config: SweepConfig, dtypes: list[str]) -> Callable[[Session], dict[str, Any]]:
    """What ``run_sweep`` calls to measure the ceilings in these dtypes, on the session it opened.  A
    weight-only format's compute ceiling is its compute dtype's peak (bf16): the peak is measured once, there."""
    from microbench.sweep.ceilings import measure_ceilings

    dtypes = list(dict.fromkeys(compute_dtype(dtype) for dtype in dtypes))

    def step(session: Session) -> dict[str, Any]:
        return measure_ceilings(session, dtypes, quick=config.quick, backends=config.backends)

    return step


def _run_stoppable(prepared: PreparedSweep, observer: SweepObserver, ceilings) -> Result:
    """``run_sweep`` under the signal handlers: a first signal finishes the point in flight, a second abandons
    it; either way the run ends in ``Interrupted`` naming the output that holds what was measured."""
    from microbench.timing.interrupt import Abandon, stop_on_signals

    try:
        with stop_on_signals(prepared.session.stop, observer.on_notice):
            return run_sweep(prepared, observer, ceilings)
    except Abandon as exc:
        raise Interrupted(exc.signum, prepared.output) from None
