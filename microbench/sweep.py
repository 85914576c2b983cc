"""Run a sweep: for each planned point make inputs, check correctness, time, save.

The result is saved atomically after every point, so an interruption loses at most the point in flight.
A signal finishes the point in flight (a second one abandons it), saves, and raises ``Interrupted``;
``--resume`` continues the same plan.  A point that telemetry flags (thermal or hardware slowdown, an SM
clock that moved without a power cap to explain it) is measured once more after a pause, and both attempts
are kept; a power-capped point is recorded as such and not measured again.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from microbench import ops, plan
from microbench.adaptive import Stopped, StoppingRule
from microbench.devices import busy_state, describe_device, host_info, resolve_device, tool_info
from microbench.measure import measure_point, utc_now
from microbench.session import Session
from roofline.journal import ResultWriter
from roofline.results import check_writable
from roofline.schema import Point, Result
from roofline.units import si_bytes

# Before measuring a flagged point again, let clocks and temperature recover.
RETRY_PAUSE_S = 1.0
# A card that throttles at every compute-bound point (power capping under GEMM is common) must not double
# the sweep: at most this share of the plan (and at least 3 points) is measured again.
RETRY_SHARE = 0.1


@dataclass(frozen=True)
class SweepConfig:
    device: str = "auto"
    ops: tuple[str, ...] = ("gemv", "gemm", "bmm")
    backends: tuple[str, ...] = ("torch",)
    dtypes: tuple[str, ...] | None = None
    shapes: tuple[tuple[int, int], ...] | None = None
    batches: tuple[int, ...] | None = None
    budget_s: float | None = None
    target_rel_ci: float = 0.01
    seed: int = 0
    quick: bool = False
    timer: str = "graph"  # graph | eager (GPU); the CPU always uses perf_counter
    l2_policy: str = "rotate"  # rotate | warm
    output: Path | None = None
    with_ceilings: bool = True
    telemetry: bool = True
    telemetry_interval_s: float = 0.05
    max_memory_bytes: int | None = None
    require_idle: bool = False
    save: bool = True  # False: keep the result in memory unless an output is named (gpubench ceilings)
    argv: tuple[str, ...] = ()

    # The plan-defining fields, stored in the result so --resume can rebuild the same sweep.
    PLAN_FIELDS = ("device", "ops", "backends", "dtypes", "shapes", "batches", "budget_s", "target_rel_ci", "seed",
                   "quick",
                   "timer", "l2_policy", "with_ceilings", "telemetry", "telemetry_interval_s", "max_memory_bytes")

    def to_record(self) -> dict[str, Any]:
        record = asdict(self)
        return {key: record[key] for key in self.PLAN_FIELDS}

    @classmethod
    def from_record(cls, record: dict[str, Any], **overrides) -> SweepConfig:
        def tuples(value, depth):
            if value is None:
                return None
            return tuple(tuple(v) for v in value) if depth == 2 else tuple(value)

        fields = {key: record[key] for key in cls.PLAN_FIELDS if key in record}
        fields["ops"] = tuples(fields.get("ops", ()), 1)
        fields["backends"] = tuples(fields.get("backends", ("torch",)), 1)
        fields["dtypes"] = tuples(fields.get("dtypes"), 1)
        fields["shapes"] = tuples(fields.get("shapes"), 2)
        fields["batches"] = tuples(fields.get("batches"), 1)
        return cls(**fields, **overrides)


@dataclass
class SweepObserver:
    """Callbacks the CLI uses for progress; all optional."""

    on_notice: Callable[[str], None] = lambda message: None
    on_start: Callable[[int], None] = lambda total: None
    on_point: Callable[[Point], None] = lambda point: None
    on_phase: Callable[[str], None] = lambda name: None


class Interrupted(Exception):
    """A signal stopped the sweep; everything measured so far is saved in ``output``."""

    def __init__(self, signum: int, output: Path | None):
        super().__init__(f"interrupted by signal {signum}")
        self.signum, self.output = signum, output


def needs_retry(point: Point) -> str | None:
    """Why a point must be measured again (thermal/hardware slowdown, or an unexplained SM clock move),
    decided from the readings attributed to its own timed phase; power capping is recorded, not retried."""
    from microbench.telemetry import remeasure_reason

    return remeasure_reason(point.telemetry)


def pause(session: Session, seconds: float) -> None:
    """Let clocks and temperature recover before a second attempt; a signal cuts it short.  A seam:
    tests replace it to change what the telemetry reader reports between attempts."""
    session.stop.wait(seconds)


def settings_record(config: SweepConfig, session: Session) -> dict[str, Any]:
    rule, torch = session.rule, session.torch
    return {
        "backends": list(config.backends),
        "timer": "perf_counter" if session.choice.kind == "cpu" else f"cuda-{config.timer}",
        "l2_policy": session.l2_policy,
        "rotation_cache_factor": ops.ROTATION_CACHE_FACTOR,
        "rotation_cache_bytes": session.cache_bytes,
        "budget_s": rule.budget_s,
        "target_rel_ci": rule.target_rel_ci,
        "min_samples": rule.min_samples,
        "max_samples": rule.max_samples,
        "warmup_s": rule.warmup_s,
        "seed": session.seed,
        "quick": config.quick,
        "max_memory_bytes": config.max_memory_bytes,
        "torch_threads": torch.get_num_threads(),
        "fp16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "bf16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "tolerances": dict(ops.TOLERANCES),
        "retry_pause_s": RETRY_PAUSE_S,
        "config": config.to_record(),
    }


def default_output(device: dict[str, Any]) -> Path:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path("results") / f"{device.get('sku') or device['kind']}-{stamp}.json"


@dataclass
class PreparedSweep:
    session: Session
    points: list[plan.PointSpec]
    result: Result
    output: Path | None
    config: SweepConfig


def _plan_for(config: SweepConfig, kind: str) -> tuple[list[plan.PointSpec], plan.Defaults]:
    defaults = plan.defaults_for(kind, config.quick)
    points = plan.build_plan(
        list(config.ops), list(config.dtypes or defaults.dtypes), list(config.shapes or defaults.shapes),
        list(config.shapes or defaults.bmm_shapes), list(config.batches or defaults.batches), list(config.backends),
    )
    return points, defaults


def prepare_sweep(config: SweepConfig, observer: SweepObserver) -> PreparedSweep:
    """Everything that can fail on bad input, before anything is measured or written.

    Raises ``DeviceError``, ``PlanError`` or ``ResultError`` with one-line messages.
    """
    choice = resolve_device(config.device)
    if choice.notice:
        observer.on_notice(choice.notice)
    import torch

    if choice.kind == "cuda":
        torch.cuda.set_device(choice.index)  # events, streams and graphs then belong to the measured GPU
    points, defaults = _plan_for(config, choice.kind)
    plan.check_memory_cap(points, config.max_memory_bytes)
    if config.timer not in ("graph", "eager"):
        raise plan.PlanError(f"unknown timer {config.timer!r}; use graph or eager")
    if config.l2_policy not in ("rotate", "warm"):
        raise plan.PlanError(f"unknown L2 policy {config.l2_policy!r}; use rotate or warm")
    budget = config.budget_s if config.budget_s is not None else defaults.budget_s
    if budget <= 0:
        raise plan.PlanError("--budget must be positive")
    if not 0 < config.target_rel_ci < 1:
        raise plan.PlanError("--target-ci must be between 0 and 1 (0.01 is 1%)")
    if config.max_memory_bytes is not None and config.max_memory_bytes <= 0:
        raise plan.PlanError("--max-memory must be a positive number of bytes")
    rule = StoppingRule(target_rel_ci=config.target_rel_ci, budget_s=budget,
                        warmup_s=0.05 if choice.kind == "cuda" else 0.02)
    device = describe_device(choice)
    _check_shapes_fit(points, device)
    if "cupy" in config.backends:
        from microbench.cupy_backend import unavailable_reason

        why = unavailable_reason(device)
        if why:
            raise plan.PlanError(f"--backend cupy: {why}")
    busy = busy_state(device)
    if busy["busy"]:
        if config.require_idle:
            raise plan.PlanError(f"the device is busy ({busy['why']}) and --require-idle was given")
        observer.on_notice(f"WARNING: the device is busy ({busy['why']}): measurements may be slower and noisier")
    output = Path(config.output) if config.output else (default_output(device) if config.save else None)
    if output is not None:
        check_writable(output)
    session = Session(torch=torch, choice=choice, device=device, rule=rule, timer=config.timer,
                      l2_policy=config.l2_policy, seed=config.seed, max_memory_bytes=config.max_memory_bytes)
    settings = settings_record(config, session)
    settings["busy_at_start"] = busy
    result = Result(tool=tool_info(), created_at=utc_now(), argv=tuple(config.argv), host=host_info(),
                    device=device, settings=settings, telemetry={"source": "none", "reason": "not started"})
    return PreparedSweep(session, points, result, output, config)


def _check_shapes_fit(points: list[plan.PointSpec], device: dict[str, Any]) -> None:
    """A shape whose smallest point cannot fit the device at all is bad input, not a skipped point."""
    memory = device.get("memory_bytes")
    if not memory:
        return
    smallest: dict[tuple[str, int, int], int] = {}
    for spec in points:
        key = (spec.op, spec.n, spec.k)
        smallest[key] = min(smallest.get(key, sys.maxsize), ops.bytes_per_copy(spec))
    for (op, n, k), need in smallest.items():
        if need > memory:
            raise plan.PlanError(f"shape {n}x{k} ({op}) needs {si_bytes(need)} at its smallest batch; "
                                 f"the device has {si_bytes(memory)}")


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
    # The document is written once, then each save journals only what is new (roofline.journal): O(point)
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
