"""What every point of a sweep shares: the device, the timing rule, the weight cache, memory limits,
telemetry, and the stop flag that signals set; and ``open_session``, the one way to get one (the sweep, the
ceilings, decode, profile and the timer benchmark all open theirs here).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from microbench.device.busy import busy_state
from microbench.device.discovery import DeviceChoice, resolve_device
from microbench.device.provenance import describe_device, meminfo_bytes
from microbench.points import plan
from microbench.points.config import SweepConfig
from microbench.timing import ops
from microbench.timing.adaptive import Clock, PerfClock, StoppingRule
from microbench.timing.observer import SweepObserver

# When the device does not report its L2 (older torch), assume more than any datacenter GPU has
# (H100 50 MB, B200 126 MB): more rotation copies cost memory, too few would time a warm cache.
L2_FALLBACK_BYTES = 128 * 1024 * 1024
# Fraction of free memory a point may take: leaves room for the allocator, cuBLAS workspaces, the OS.
GPU_MEMORY_FRACTION = 0.85
CPU_MEMORY_FRACTION = 0.5


@dataclass
class Session:
    torch: Any
    choice: DeviceChoice
    device: dict[str, Any]
    rule: StoppingRule
    timer: str
    l2_policy: str
    seed: int
    max_memory_bytes: int | None = None
    clock: Clock = field(default_factory=PerfClock)
    weights: ops.WeightCache = field(default_factory=ops.WeightCache)
    sampler: Any = None  # a started telemetry.Sampler, or None
    telemetry: dict[str, Any] = field(default_factory=dict)
    previous_timeline: list[dict[str, Any]] = field(default_factory=list)  # from a resumed file
    stop: threading.Event = field(default_factory=threading.Event)
    busy_at_start: dict[str, Any] = field(default_factory=dict)  # busy_state() when the session opened

    # --- memory ---------------------------------------------------------------------------------
    @property
    def cache_bytes(self) -> int | None:
        if self.choice.kind == "cuda":
            return self.device.get("l2_cache_bytes") or L2_FALLBACK_BYTES
        return self.device.get("last_level_cache_bytes")

    def free_memory_bytes(self) -> float:
        """What the device can give a new point now (a fraction of its free memory)."""
        if self.choice.kind == "cuda":
            free, _ = self.torch.cuda.mem_get_info(self.choice.index)
            return free * GPU_MEMORY_FRACTION
        available = meminfo_bytes("MemAvailable") or self.device.get("memory_bytes") or 0
        return available * CPU_MEMORY_FRACTION

    def total_memory_bytes(self) -> int | None:
        """The device's whole memory as its driver reports it: on a GPU, CUDA's total (``mem_get_info``, what an
        engine sizes its KV cache from); on the CPU, the host's MemTotal.  None: not known."""
        if self.choice.kind == "cuda":
            import torch  # the session's own module, imported by name so the type checker reads this GPU-only call

            _, total = torch.cuda.mem_get_info(self.choice.index)
            return int(total)
        memory = self.device.get("memory_bytes")
        return int(memory) if memory else None

    def apply_memory_cap(self) -> None:
        """On a GPU, ``--max-memory`` becomes the caching allocator's limit: going over is a real OOM."""
        if self.max_memory_bytes and self.choice.kind == "cuda":
            cuda = self.torch.cuda
            total = self.device.get("memory_bytes") or cuda.get_device_properties(self.choice.index).total_memory
            cuda.set_per_process_memory_fraction(min(1.0, self.max_memory_bytes / total), self.choice.index)

    def memory_cap_bytes(self) -> float:
        cap = self.free_memory_bytes()
        return min(cap, self.max_memory_bytes) if self.max_memory_bytes else cap

    def synchronize(self) -> None:
        if self.choice.kind == "cuda":
            self.torch.cuda.synchronize(self.choice.index)

    # --- telemetry ------------------------------------------------------------------------------
    def start_telemetry(self, enabled: bool, interval_s: float) -> None:
        """Start the NVML sampler (or record why there is none); GPM windows lengthen the timed phase."""
        if not enabled:
            self.telemetry = {"source": "none", "reason": "turned off (--no-telemetry)"}
            return
        from microbench.telemetry.nvml_reader import start_telemetry

        self.sampler, self.telemetry = start_telemetry(self.device, interval_s)
        # Readings describe the GPU ~0.1 s late and GPM needs whole pairs: a timed phase must last long
        # enough for its own readings (telemetry.min_point_window_s), even past max_samples.
        window = self.telemetry.get("min_point_window_s")
        if window:
            self.rule = replace(self.rule, min_time_s=max(self.rule.min_time_s, window))

    def stop_telemetry(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()

    def telemetry_record(self) -> dict[str, Any]:
        record = dict(self.telemetry)
        if self.sampler is not None:
            record["power"] = getattr(self.sampler.reader, "power_note", None)
            record["read_errors"] = self.sampler.errors
            record["timeline"] = self.previous_timeline + self.sampler.rows()
        elif self.previous_timeline:
            record["timeline"] = list(self.previous_timeline)
        return record

    def window_summary(self, start_s: float, end_s: float, launches: int = 0,
                       timer_bytes_per_s: float | None = None) -> dict[str, Any] | None:
        """The readings that describe [start, end] summarised (None without a sampler); ``launches`` and
        ``timer_bytes_per_s`` for a point's counter cross-check, 0 and None for a window without one."""
        if self.sampler is None:
            return None
        from microbench.telemetry.sampler import NVML_LAG_S, summarize_window

        # The readings that describe the phase's last moments are taken up to the lag after it.
        self.sampler.wait_past(end_s + NVML_LAG_S)
        return summarize_window(self.sampler.rows(), start_s, end_s, launches,
                                self.device.get("theoretical_bandwidth_bytes_per_s"), timer_bytes_per_s)


def open_session(config: SweepConfig, observer: SweepObserver,
                 check: Callable[[Session], None] | None = None) -> Session:
    """Resolve the device, import torch, describe the device, and check what needs it: ``check`` (the
    caller's own refusals on this device: does the plan fit it), the CuPy back end's availability and, last,
    whether somebody else is using it (refused with ``require_idle``, else a warning).  Bad input is refused
    before anything is said about the device's load.

    Raises ``DeviceError`` or ``PlanError`` with one-line messages; ``config`` itself is already valid.
    """
    choice = resolve_device(config.device)
    if choice.notice:
        observer.on_notice(choice.notice)
    import torch

    if choice.kind == "cuda":
        torch.cuda.set_device(choice.index)  # events, streams and graphs then belong to the measured GPU
    defaults = plan.defaults_for(choice.kind, config.quick)
    budget = config.budget_s if config.budget_s is not None else defaults.budget_s
    target = config.target_rel_ci if config.target_rel_ci is not None else defaults.target_rel_ci
    rule = StoppingRule(target_rel_ci=target, budget_s=budget,
                        warmup_s=0.05 if choice.kind == "cuda" else 0.02)
    session = Session(torch=torch, choice=choice, device=describe_device(choice), rule=rule, timer=config.timer,
                      l2_policy=config.l2_policy, seed=config.seed, max_memory_bytes=config.max_memory_bytes)
    if check is not None:
        check(session)
    if "cupy" in config.backends:
        from microbench.timing.cupy_backend import unavailable_reason

        why = unavailable_reason(session.device)
        if why:
            raise plan.PlanError(f"--backend cupy: {why}")
    session.busy_at_start = busy = busy_state(session.device)
    if busy["busy"]:
        if config.require_idle:
            raise plan.PlanError(f"the device is busy ({busy['why']}) and --require-idle was given")
        observer.on_notice(f"WARNING: the device is busy ({busy['why']}): measurements may be slower and noisier")
    if choice.kind == "cpu" and config.target_rel_ci is None:
        # Said before anything is measured: the CPU's target is looser than a GPU's, and why.
        target, budget_s = 100 * rule.target_rel_ci, rule.budget_s
        observer.on_notice(f"Each point stops when its 95% CI is within ±{target:.0f}% or after {budget_s:g} s "
                           "(a shared CPU rarely holds the GPU's ±1%; --target-ci sets it).")
    return session
