"""A sweep made ready to run: its plan, its open session and its first document (``PreparedSweep``).

A new sweep is prepared here; ``microbench.sweep.resume`` prepares the rest of a recorded one on top of it.
The settings record is what the document keeps of how the points are timed.
"""

from __future__ import annotations

import datetime as dt
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from microbench.device.provenance import host_info, tool_info
from microbench.points import plan
from microbench.points.config import SweepConfig
from microbench.timing import ops
from microbench.timing.measure import utc_now
from microbench.timing.observer import SweepObserver
from microbench.timing.session import Session, open_session
from roofline.core.units import si_bytes
from roofline.result.document import Result
from roofline.result.io import check_output

# Before measuring a flagged point again (``loop``), let clocks and temperature recover; the settings
# record keeps it.
RETRY_PAUSE_S = 1.0


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


def prepare_sweep(config: SweepConfig, observer: SweepObserver) -> PreparedSweep:
    """Everything that can fail on bad input, before anything is measured or written: the session, then
    what needs the device (the memory cap against the plan, every shape against the device's memory).

    Raises ``DeviceError``, ``PlanError`` or ``ResultError`` with one-line messages.
    """
    points: list[plan.PointSpec] = []

    def fits(session: Session) -> None:  # before the busy check: bad input is refused before any warning
        points.extend(config.points(session.choice.kind))
        _check_something_runs(points, session.device)
        plan.check_memory_cap(points, config.max_memory_bytes)
        _check_shapes_fit(points, session.device)

    session = open_session(config, observer, fits)
    output = Path(config.output) if config.output else (default_output(session.device) if config.save else None)
    if output is not None:
        check_output(output)
    settings = settings_record(config, session)
    settings["busy_at_start"] = session.busy_at_start
    # Result takes plain dicts and types them (document.py)
    result = Result(tool=tool_info(), created_at=utc_now(), argv=tuple(config.argv), host=host_info(),  # pyright: ignore[reportArgumentType]
                    device=session.device, settings=settings, telemetry={"source": "none", "reason": "not started"})  # pyright: ignore[reportArgumentType]
    return PreparedSweep(session, points, result, output, config)


def _check_something_runs(points: list[plan.PointSpec], device: dict[str, Any]) -> None:
    """A plan none of whose points this device can run (``--dtype tf32`` on the CPU) would record only unsupported
    points and exit 0 with nothing measured: bad input instead, saying why.  A plan with some such points runs
    (``--op bmm`` beside a weight-only format is recorded as unsupported by design)."""
    problems = [ops.support_problem(spec, device) for spec in points]
    if points and all(problems):
        reasons = "; ".join(dict.fromkeys(str(p) for p in problems))
        raise plan.PlanError(f"nothing in this sweep runs on {device.get('name') or device['kind']}: {reasons}")


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
