"""Is someone else using the device?  Checked before a sweep: a shared device measures slower and noisier.

The CPU rule reads ``/proc/stat`` twice; the GPU rule reads the device record's NVML fields.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

# Before a sweep: a GPU with other processes or more than this utilisation, or CPUs whose busy time adds
# up to half a core or more, is shared; its numbers would be slower and noisier than the machine can do.
# The CPU rule counts cores, not a share of the machine: torch spreads a matmul over every core, so one
# core taken by someone else slows it (on two cores, one fully busy core is only 50% of the machine).
BUSY_GPU_UTIL_PERCENT = 10
BUSY_CPU_CORES = 0.5


def _per_cpu_times(stat_text: str) -> list[tuple[int, int]]:
    """(idle + iowait, total) jiffies of each ``cpuN`` line of /proc/stat."""
    times = []
    for line in stat_text.splitlines():
        fields = line.split()
        if fields and fields[0].startswith("cpu") and fields[0] != "cpu":
            values = [int(v) for v in fields[1:]]
            times.append((values[3] + values[4], sum(values)))
    return times


def cpu_busy_cores(interval_s: float = 0.3, read_stat: Callable[[], str] | None = None,
                   sleep: Callable[[float], None] | None = None) -> list[float] | None:
    """Each CPU's busy share over ``interval_s`` (from /proc/stat), while this process sleeps; None unknown.

    ``read_stat`` and ``sleep`` are the seam tests use to feed recorded readings."""
    import time

    read_stat = read_stat or (lambda: Path("/proc/stat").read_text())
    try:
        before = _per_cpu_times(read_stat())
        (sleep or time.sleep)(interval_s)
        after = _per_cpu_times(read_stat())
    except (OSError, ValueError, IndexError):
        return None
    if not before or len(before) != len(after):
        return None
    shares = []
    for (idle0, total0), (idle1, total1) in zip(before, after, strict=True):
        total = total1 - total0
        shares.append(1 - (idle1 - idle0) / total if total > 0 else 0.0)
    return shares


def cpu_busy_reason(shares: list[float] | None) -> str | None:
    """The decision: busy when the other work adds up to ``BUSY_CPU_CORES`` cores or more."""
    if not shares:
        return None
    cores = sum(shares)
    if cores < BUSY_CPU_CORES:
        return None
    return (f"CPUs busy before the start: {cores:.1f} of {len(shares)} core(s) in use, "
            f"the busiest {100 * max(shares):.0f}%")


def busy_state(device: dict[str, Any], busy_cores: Callable[[], list[float] | None] | None = None) -> dict[str, Any]:
    """Is someone else using the device right now?  ``{"busy": bool, "why": str | None}``."""
    reasons = []
    if device["kind"] == "cuda":
        others = device.get("other_processes") or []
        if others:
            reasons.append(f"{len(others)} other process(es) on the GPU: "
                           + ", ".join(str(p["pid"]) for p in others[:5]))
        util = device.get("utilization_gpu_percent")
        if util is not None and util > BUSY_GPU_UTIL_PERCENT:
            reasons.append(f"GPU utilisation {util}% before the start")
    else:
        why = cpu_busy_reason((busy_cores or cpu_busy_cores)())
        if why:
            reasons.append(why)
    return {"busy": bool(reasons), "why": "; ".join(reasons) or None}
