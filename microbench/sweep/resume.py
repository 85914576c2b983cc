"""``gpubench sweep --resume FILE``: continue the plan recorded in FILE, skipping the points it has.

Refuses (exit 2, saying what differs) when the device or the timing settings are not the ones the file
was measured with, unless ``--force``; a forced resume is recorded in the result.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from microbench.points.config import SweepConfig
from microbench.sweep.prepare import PreparedSweep, prepare_sweep
from microbench.timing.measure import utc_now
from microbench.timing.observer import SweepObserver
from roofline.core.errors import BadInputError
from roofline.result.io import load_result

DEVICE_KEYS = ("kind", "name", "uuid", "memory_bytes")
SETTING_KEYS = ("timer", "l2_policy", "budget_s", "target_rel_ci", "seed", "torch_threads", "max_memory_bytes",
                "rotation_cache_bytes")


class ResumeError(BadInputError):
    """The file cannot be resumed here: one line, exit 2."""


def prepare_resume(asked: SweepConfig, observer: SweepObserver) -> PreparedSweep:
    """The sweep recorded in ``asked.resume``, its points already measured left out; ``asked`` gives only how
    to run it (``force``, ``require_idle``, ``argv``): the plan is the file's own."""
    # called only for a config with resume set
    path, force = Path(asked.resume), asked.force  # pyright: ignore[reportArgumentType]
    existing = load_result(path)
    record = existing.settings.get("config")
    if existing.origin != "measured" or not isinstance(record, dict):
        raise ResumeError(f"{path}: no sweep plan recorded (an imported result, or from an older gpubench)")
    config = SweepConfig.from_record(record, output=path, argv=asked.argv, require_idle=asked.require_idle)
    prepared = prepare_sweep(config, observer)
    differences = [f"device {key}: {existing.device.get(key)!r} now {prepared.result.device.get(key)!r}"
                   for key in DEVICE_KEYS if existing.device.get(key) != prepared.result.device.get(key)]
    differences += [f"{key}: {existing.settings.get(key)!r} now {prepared.result.settings.get(key)!r}"
                    for key in SETTING_KEYS if existing.settings.get(key) != prepared.result.settings.get(key)]
    if differences and not force:
        raise ResumeError(f"{path}: not the same sweep here ({'; '.join(differences)}); --force resumes anyway")
    done = {p.plan_key for p in existing.points}
    remaining = [s for s in prepared.points if s.key not in done]
    prepared.session.previous_timeline = list(existing.telemetry.get("timeline") or [])
    history = list(existing.settings.get("resumed") or [])
    history.append({"at": utc_now(), "remaining_points": len(remaining), "forced_over": differences or None})
    result = replace(existing, settings={**existing.settings, "resumed": history})
    return PreparedSweep(prepared.session, remaining, result, path, config)
