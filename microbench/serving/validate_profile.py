"""The step profile ``validate`` simulates on: a given one measured on this device, or one measured here in
PASSES between the engine's rounds.

Why passes: on a shared CPU the thread's CPU time of the same kernel swings by up to 2x with what the other
processes do to the caches, and the cores themselves switch between speeds 1.7x apart, over seconds.  A profile
measured in one go catches one such moment per kernel — neighbouring grid points a second apart were measured
15-30% apart, so the table's slope (which the overhead fit reads as a per-sequence cost) was noise.  Measured a
pass per engine round instead, each kernel's time is the mean of its pass medians, taken over the same mix of
machine states as the engine's steps (which are combined by their mean as well).  A pass's kernels are not
measured in one block: each is a piece of its round's shuffle (``validate_run.interleaved_runs``), so a step's
kernels were timed at as many moments as it has kernels, not at the one moment of a block (with a block after
each of 5 rounds, one run in ten of the tiny MoE check read its kernels 50% slower than the others did;
docs/serving.md).  The total sampling budget is that of one profile, split over the passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from microbench.device.discovery import resolve_device
from microbench.device.provenance import describe_device
from microbench.points.plan import PlanError
from microbench.serving.validate_sizes import profile_sizes
from microbench.timing.observer import Interrupted, SweepObserver
from roofline.serving.profile_doc import StepProfile, load_profile, save_profile
from roofline.specs.models import ModelSpec

# After the first pass every kernel is warm in this process: a short warm-up is enough for the later ones.
LATER_PASS_WARMUP_S = 0.002


def given_profile(path: Path, device: str) -> StepProfile:
    """A profile from a file, checked to be measured on this device."""
    profile = load_profile(path)
    here = describe_device(resolve_device(device))
    if profile.source != "measured" or profile.device.get("name") != here.get("name"):
        raise PlanError(f"{path} was not measured on this device ({profile.device.get('name')!r}, "
                        f"here {here.get('name')!r}): validate compares against a profile of the same device")
    return profile


def profile_clock(profile: StepProfile) -> str:
    """The clock a measured profile's CPU kernels were timed on (``profile_run.assemble_profile`` says
    "thread CPU time" in its basis for ``--clock thread-cpu``)."""
    return "thread-cpu" if "thread CPU time" in profile.basis else "wall"


def check_profile_timing(profile: StepProfile, path: Path | None, clock: str, threads: int, kind: str) -> None:
    """On a CPU, a given profile must be timed as the engine is: the same clock and torch threads.  Kernels timed
    on the wall clock with two threads on a busy machine wait for their threads' turns (ms each) where a
    thread-CPU time does not: such a profile's kernels came out longer than the engine steps that ran them."""
    if kind != "cpu":
        return
    theirs = (profile_clock(profile), profile.device.get("threads"))
    if theirs != (clock, threads):
        raise PlanError(f"{path} was timed on the {theirs[0]} clock with {theirs[1]} torch thread(s), the engine "
                        f"here runs on the {clock} clock with {threads}: kernels timed one way are no part of "
                        f"steps timed the other; measure it with gpubench profile --clock {clock} --threads "
                        f"{threads}, or drop --profile (validate then measures one itself)")


def profile_plan_for(setup, requests, clock: str, kind: str, passes: int):
    """The plan of a profile sized to what the workload can fill in one step (``requests``: the workload's and
    the calibration's; ``validate_sizes.profile_sizes``), its sampling budget split over the passes, a mixture's
    experts under the routing of the engine's random router (``engine.models.ENGINE_ROUTING``).
    ``plan.check()`` reads the model: cheap, before anything runs."""
    from microbench.serving.engine.models import ENGINE_ROUTING
    from microbench.serving.profile_plan import ProfilePlan
    from microbench.serving.profile_run import DEFAULT_BUDGET_S

    longest = max(r.prompt_tokens + r.output_tokens for r in requests)
    budget = (setup.profile_budget_s or DEFAULT_BUDGET_S[kind]) / passes
    max_tokens, max_batch = profile_sizes(setup, requests)
    return ProfilePlan(model=setup.model, hf_config=str(setup.hf_config) if setup.hf_config else None,
                       routing=ENGINE_ROUTING, dtype=setup.dtype, max_tokens=max_tokens, max_context=longest,
                       max_batch=max_batch, device=setup.device, budget_s=budget, clock=clock)


class ProfilePasses:
    """A profile of ``plan`` (``profile_plan_for``), measured a kernel at a time (``measure``: each pass measures
    every one of its ``items`` once), then assembled (``finish``) from each kernel's mean over the passes."""

    def __init__(self, plan, folder: Path, observer: SweepObserver, on_item: Callable, passes: int):
        from microbench.serving.profile_run import partial_path, prepare_profile

        self.plan = plan
        self.path, self.passes, self.on_item = folder / "profile.json", passes, on_item
        partial_path(self.path).unlink(missing_ok=True)
        self.run = prepare_profile(self.plan, self.path, observer, argv=("gpubench", "validate", "(profile)"))
        self.model: ModelSpec = self.plan.check()
        self.dtype = self.plan.resolved_dtype(self.run.session.choice.kind)
        self.times: dict[str, list[float]] = {}
        self.last: dict[str, dict[str, Any]] = {}
        observer.on_start(len(self.run.items) * passes)

    @property
    def items(self) -> int:
        """How many kernels a pass measures (``measure`` takes their index)."""
        return len(self.run.items)

    def measure(self, index: int) -> None:
        """One kernel of the profile at the pass budget; after its first pass, with a short warm-up."""
        from microbench.serving.profile_run import measure_item, partial_path

        session, item = self.run.session, self.run.items[index]
        rule = session.rule
        if item.key in self.times:
            session.rule = replace(rule, warmup_s=min(rule.warmup_s, LATER_PASS_WARMUP_S))
        try:
            measured = measure_item(session, self.plan, self.model, item, self.dtype)
        finally:
            session.rule = rule
        self.times.setdefault(item.key, []).append(measured["time_s"])
        self.last[item.key] = measured
        self.on_item(item, measured)
        if session.stop.is_set():
            raise Interrupted(getattr(session.stop, "signum", 2), partial_path(self.path))

    def measure_pass(self) -> None:
        """Every kernel of the profile once, in order."""
        for index in range(self.items):
            self.measure(index)

    def finish(self) -> StepProfile:
        """The profile from each kernel's mean over the passes, saved next to validate.json."""
        from microbench.serving.profile_run import assemble_profile, partial_path

        if not self.times:
            self.measure_pass()
        passes = len(next(iter(self.times.values())))
        self.run.session.weights.clear()
        self.run.measured = {key: {**self.last[key], "time_s": math.fsum(times) / len(times),
                                   "pass_times_s": times, "combined": f"mean of {len(times)} pass medians"}
                             for key, times in self.times.items()}
        profile = assemble_profile(self.run, self.model, self.dtype)
        profile = replace(profile, basis=f"{profile.basis}, mean of {passes} passes between the engine's rounds")
        save_profile(profile, self.path)
        partial_path(self.path).unlink(missing_ok=True)
        if self.run.journal is not None:
            self.run.journal.remove()
        return profile
