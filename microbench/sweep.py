"""Run a sweep: for each planned point make inputs, check correctness, time, save.

The result is saved atomically after every point, so an interruption loses at most the point in flight.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from microbench import ops, plan
from microbench.adaptive import Clock, PerfClock, StoppingRule, measure
from microbench.devices import DeviceChoice, describe_device, host_info, resolve_device, tool_info
from microbench.timers import CpuTimer, CudaEagerTimer, CudaGraphTimer
from roofline.results import check_writable, save_result
from roofline.schema import Point, Result

# Fraction of free memory a point may take: leaves room for the allocator, cuBLAS workspaces, the OS.
GPU_MEMORY_FRACTION = 0.85
CPU_MEMORY_FRACTION = 0.5
# The eager comparison gets this share of the point's budget: it only needs a median.
EAGER_BUDGET_SHARE = 0.25


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class SweepConfig:
    device: str = "auto"
    ops: tuple[str, ...] = ("gemv", "gemm", "bmm")
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
    save: bool = True  # False: keep the result in memory unless an output is named (gpubench ceilings)
    argv: tuple[str, ...] = ()


@dataclass
class SweepObserver:
    """Callbacks the CLI uses for progress; all optional."""

    on_notice: Callable[[str], None] = lambda message: None
    on_start: Callable[[int], None] = lambda total: None
    on_point: Callable[[Point], None] = lambda point: None
    on_phase: Callable[[str], None] = lambda name: None


@dataclass
class Session:
    """What every point of a sweep shares: the device, the timing rule, the weight cache."""

    torch: Any
    choice: DeviceChoice
    device: dict[str, Any]
    rule: StoppingRule
    timer: str
    l2_policy: str
    seed: int
    clock: Clock = field(default_factory=PerfClock)
    weights: ops.WeightCache = field(default_factory=ops.WeightCache)
    sampler: Any = None  # a started telemetry.Sampler, or None
    telemetry: dict[str, Any] = field(default_factory=dict)

    def start_telemetry(self, enabled: bool, interval_s: float) -> None:
        """Start the NVML sampler (or record why there is none); GPM windows lengthen the timed phase."""
        if not enabled:
            self.telemetry = {"source": "none", "reason": "turned off (--no-telemetry)"}
            return
        from microbench.nvml_reader import start_telemetry

        self.sampler, self.telemetry = start_telemetry(self.device, interval_s)
        if self.telemetry.get("gpm_min_point_window_s"):
            self.rule = replace(self.rule, min_time_s=self.telemetry["gpm_min_point_window_s"])

    def stop_telemetry(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()

    def telemetry_record(self) -> dict[str, Any]:
        record = dict(self.telemetry)
        if self.sampler is not None:
            record["power"] = self.sampler.reader.power_note
            record["read_errors"] = self.sampler.errors
            record["timeline"] = self.sampler.rows()
        return record

    def window_summary(self, measurement, launches: int, timer_bytes_per_s: float) -> dict[str, Any] | None:
        if self.sampler is None:
            return None
        from microbench.telemetry import summarize_window

        self.sampler.wait_past(measurement.finished_s)
        return summarize_window(self.sampler.rows(), measurement.started_s, measurement.finished_s, launches,
                                self.device.get("theoretical_bandwidth_bytes_per_s"), timer_bytes_per_s)

    @property
    def cache_bytes(self) -> int | None:
        if self.choice.kind == "cuda":
            return self.device.get("l2_cache_bytes")
        return self.device.get("last_level_cache_bytes")

    def memory_cap_bytes(self) -> float:
        """What a new point may allocate now, beyond what the weight cache already holds."""
        torch = self.torch
        if self.choice.kind == "cuda":
            free, _ = torch.cuda.mem_get_info(self.choice.index)
            return free * GPU_MEMORY_FRACTION
        from microbench.devices import _meminfo_bytes

        available = _meminfo_bytes("MemAvailable") or self.device.get("memory_bytes") or 0
        return available * CPU_MEMORY_FRACTION

    def synchronize(self) -> None:
        if self.choice.kind == "cuda":
            self.torch.cuda.synchronize(self.choice.index)


@contextlib.contextmanager
def matmul_precision(torch, tf32: bool):
    """fp32 points run true fp32; tf32 points allow TF32 tensor cores.  Restored afterwards."""
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def make_timer(session: Session, workload: ops.Workload, eager: bool = False):
    if session.choice.kind == "cpu":
        return CpuTimer(workload.launch, workload.copies)
    if eager or session.timer == "eager":
        return CudaEagerTimer(workload.launch, workload.copies, session.torch)
    return CudaGraphTimer(workload.launch, workload.copies, session.torch)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {text[0] if text else ''}"[:300]


def measure_point(session: Session, spec: plan.PointSpec, backend: str = "torch") -> Point:
    """Measure one point; never raises for a problem of the point itself (it is recorded instead)."""
    torch = session.torch
    started = utc_now()
    base = {"op": spec.op, "dtype": spec.dtype, "batch": spec.batch, "n": spec.n, "k": spec.k,
            "backend": backend, "started_at": started}
    problem = ops.support_problem(torch, spec, session.device)
    if problem:
        return Point(status="unsupported", reason=problem, finished_at=utc_now(), **base)
    per_copy = ops.bytes_per_copy(spec)
    cap = session.memory_cap_bytes()
    if per_copy > cap:
        session.weights.clear()
        cap = session.memory_cap_bytes()
        if per_copy > cap:
            return Point(status="skipped", finished_at=utc_now(), **base,
                         reason=f"needs {per_copy / 1e9:.2f} GB, {cap / 1e9:.2f} GB may be allocated")
    if session.l2_policy == "warm":
        copies = 1
    else:
        weight_bytes = ops.count_work(spec.op, spec.dtype, spec.batch, spec.n, spec.k).weight_bytes
        copies = ops.rotation_copies(weight_bytes, session.cache_bytes, per_copy, cap)
    timers = []
    try:
        with matmul_precision(torch, spec.dtype == "tf32"):
            workload = ops.build_workload(torch, spec, session.choice.torch_name, copies, session.seed,
                                          session.weights)
            correctness = workload.check(ops.seed_for(session.seed, "check", spec.label))
            timer = make_timer(session, workload)
            timers.append(timer)
            timer.prepare()
            result = measure(timer.sample, session.rule, session.clock)
            eager_samples: tuple[float, ...] = ()
            if timer.name == "cuda-graph":
                eager = make_timer(session, workload, eager=True)
                eager_rule = StoppingRule(
                    target_rel_ci=session.rule.target_rel_ci,
                    budget_s=session.rule.budget_s * EAGER_BUDGET_SHARE,
                    min_samples=session.rule.min_samples,
                    max_samples=session.rule.max_samples,
                    warmup_s=0.0,
                    min_warmup_samples=1,
                )
                eager_samples = measure(eager.sample, eager_rule, session.clock).samples_s
            session.synchronize()
            median = sorted(result.samples_s)[len(result.samples_s) // 2]
            counted = ops.count_work(spec.op, spec.dtype, spec.batch, spec.n, spec.k).bytes
            telemetry = session.window_summary(result, len(result.samples_s) * timer.launches, counted / median)
    except Exception as exc:  # noqa: BLE001 - every failure of a point is recorded, the sweep goes on
        oom = isinstance(exc, getattr(torch, "OutOfMemoryError", MemoryError)) or isinstance(exc, MemoryError)
        session.weights.clear()
        release_timers(session, timers)
        return Point(status="oom" if oom else "error", reason=_first_line(exc), finished_at=utc_now(), **base)
    release_timers(session, timers)
    return Point(
        status="ok",
        timer=timer.name,
        samples_s=result.samples_s,
        warmup_samples_s=result.warmup_samples_s,
        eager_samples_s=eager_samples,
        launches_per_sample=timer.launches,
        stop_reason=result.stop_reason,
        rotation_copies=copies,
        correctness=correctness,
        telemetry=telemetry,
        finished_at=utc_now(),
        **base,
    )


def release_timers(session: Session, timers: list) -> None:
    for timer in timers:
        release = getattr(timer, "release", None)
        if release:
            release()
    if session.choice.kind == "cuda":
        session.torch.cuda.empty_cache()


def settings_record(config: SweepConfig, session: Session, defaults: plan.Defaults) -> dict[str, Any]:
    rule = session.rule
    torch = session.torch
    return {
        "backend": "torch",
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
        "torch_threads": torch.get_num_threads(),
        "fp16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "bf16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "tolerances": dict(ops.TOLERANCES),
        "defaults": "quick" if config.quick else "full",
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


def prepare_sweep(config: SweepConfig, observer: SweepObserver) -> PreparedSweep:
    """Everything that can fail on bad input, before anything is measured or written.

    Raises ``DeviceError``, ``PlanError`` or ``ResultError`` with one-line messages.
    """
    choice = resolve_device(config.device)
    if choice.notice:
        observer.on_notice(choice.notice)
    import torch

    defaults = plan.defaults_for(choice.kind, config.quick)
    shapes = list(config.shapes or defaults.shapes)
    bmm_shapes = list(config.shapes or defaults.bmm_shapes)
    points = plan.build_plan(
        list(config.ops), list(config.dtypes or defaults.dtypes), shapes, bmm_shapes,
        list(config.batches or defaults.batches),
    )
    if config.timer not in ("graph", "eager"):
        raise plan.PlanError(f"unknown timer {config.timer!r}; use graph or eager")
    if config.l2_policy not in ("rotate", "warm"):
        raise plan.PlanError(f"unknown L2 policy {config.l2_policy!r}; use rotate or warm")
    budget = config.budget_s if config.budget_s is not None else defaults.budget_s
    if budget <= 0:
        raise plan.PlanError("--budget must be positive")
    if not 0 < config.target_rel_ci < 1:
        raise plan.PlanError("--target-ci must be between 0 and 1 (0.01 is 1%)")
    rule = StoppingRule(target_rel_ci=config.target_rel_ci, budget_s=budget,
                        warmup_s=0.05 if choice.kind == "cuda" else 0.02)
    device = describe_device(choice)
    _check_shapes_fit(points, device)
    output = Path(config.output) if config.output else (default_output(device) if config.save else None)
    if output is not None:
        check_writable(output)
    session = Session(torch=torch, choice=choice, device=device, rule=rule, timer=config.timer,
                      l2_policy=config.l2_policy, seed=config.seed)
    result = Result(
        tool=tool_info(), created_at=utc_now(), argv=tuple(config.argv), host=host_info(), device=device,
        settings=settings_record(config, session, defaults),
        telemetry={"source": "none", "reason": "not started"},
    )
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
            raise plan.PlanError(
                f"shape {n}x{k} ({op}) needs {need / 1e9:.1f} GB at its smallest batch; "
                f"the device has {memory / 1e9:.1f} GB"
            )


def run_sweep(prepared: PreparedSweep, observer: SweepObserver,
              ceilings: Callable[[Session], dict[str, Any]] | None = None) -> Result:
    """Measure the ceilings (if asked), then every point, saving after each."""
    session = prepared.session
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

    def save(current: Result) -> Result:
        current = current.with_telemetry(session.telemetry_record())
        if prepared.output is not None:
            save_result(current, prepared.output)
        return current

    result = save(result)
    if ceilings is not None:
        observer.on_phase("ceilings")
        result = save(result.with_ceilings(ceilings(session)))
    if prepared.points:
        observer.on_phase("points")
        observer.on_start(len(prepared.points))
    for spec in prepared.points:
        point = measure_point(session, spec)
        result = save(result.with_point(point))
        observer.on_point(point)
    return result
