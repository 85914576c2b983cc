"""``gpubench validate --engine transformers``: run a real engine on a workload, simulate the same workload on a
profile measured on the same device, and compare.

Order, on one device and in one process: (1) a warm-up of both engine paths; (2) in rounds, each in a new shuffled
order, the calibration runs of each path on a SEPARATE workload (another seed, burst arrivals) at two batch sizes
and the workload itself on both paths, with a pass of the step profile in every round, its kernels shuffled among
the engine's runs (``validate_profile``; unless ``--profile`` names one measured on this device); repeats combined
step by step (each step's mean); (3) the overhead of each path fitted on its calibration steps only; (4) the
simulations with it held fixed. Interleaving keeps the fit, the profile and the runs under the same mix of load
when the machine is shared (docs/serving.md, "How validate's prediction is made, and what it misses").
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from microbench.device.discovery import resolve_device
from microbench.device.provenance import host_info, tool_info
from microbench.serving.engine.segments import SegmentedContinuous, segment_count
from microbench.serving.validate_compare import CalibrationRun, compare_runs, fit_overhead, relative_error
from microbench.serving.validate_options import EngineTiming, ValidateConfig, engine_mode_for, engine_timing
from microbench.serving.validate_profile import (
    ProfilePasses,
    check_profile_timing,
    given_profile,
    profile_plan_for,
)
from microbench.serving.validate_sizes import check_engine_fits
from microbench.timing.measure import utc_now
from microbench.timing.observer import SweepObserver
from roofline.serving.profile_doc import EngineOverhead, StepProfile
from roofline.serving.simulate import simulate
from roofline.serving.workload import make_workload
from roofline.specs.models import ModelSpec

WEIGHTS_NOTE = ("random weights built from the config (nothing downloaded): kernels of the same shapes cost the "
                "same time whatever the weights hold, and EOS is disabled so every output has its workload length")
# What the weights do decide in a mixture of experts (engine.models): which experts each token runs through.
ROUTER_NOTE = ("; a mixture's random router sends each token to top-k experts as if drawn uniformly, the routing "
               "its profile is measured under")
# The calibration's second batch size, half the first: per-step and per-sequence costs separate, and the run
# stays as short as the workload's.
CALIBRATION_SMALL_DIVISOR = 2



def calibration_sizes(batch: int, requests: int) -> list[int]:
    """The two batch sizes the overhead is fitted at: the path's batch (at most the calibration's requests, or
    both runs would be the same run) and half of it."""
    top = max(1, min(batch, requests))
    return sorted({top, max(1, top // CALIBRATION_SMALL_DIVISOR)})


def model_from_profile(profile: StepProfile) -> ModelSpec:
    """The model a given profile was measured for, every field that shapes a step (a mixture's experts too)."""
    return ModelSpec.from_record(profile.model)


@dataclass(frozen=True)
class Job:
    """One engine run to repeat, in ``pieces`` parts that can run apart (a burst's static batches, or the
    segments of a continuous run: ``ordered``, they run in piece order wherever the shuffle puts them), put
    back together by ``assemble`` (the parts' results in piece order) into an ``EngineRun``."""

    key: tuple[str, str, int]  # path, workload name, batch
    pieces: int
    run_piece: Callable[[int], Any]
    assemble: Callable[[list], Any]
    ordered: bool = False


def interleaved_runs(jobs: list[Job], repeats: int, on_phase: Callable[[str], None], seed: int = 0,
                     profile: tuple[int, Callable[[int], None]] | None = None) -> dict[tuple[str, str, int], Any]:
    """Every job ``repeats`` times, in rounds of all the jobs' pieces in a new shuffled order, combined step by
    step (``engine.timing.mean_steps``).  On a shared machine the engine's speed drifts with the other
    processes, decorrelating within about a second; pieces of different jobs shuffled together see nearly the
    same drift, so the calibration's runs and the workload's are measured under the same load, and no job
    always follows the same one (a job run right after a continuous-batching run was measured slower).
    ``profile`` (how many kernels, and what measures kernel i): a pass of the step profile in every round, each
    kernel a piece of the same shuffle, so the kernels see the same drift as the steps that run them."""
    from microbench.serving.engine.timing import mean_steps

    runs: dict[tuple[str, str, int], list] = {job.key: [] for job in jobs}
    order = random.Random(seed)
    kernels, measure_kernel = profile or (0, None)
    for repeat in range(repeats):
        engine = sum(job.pieces for job in jobs)
        on_phase(f"round {repeat + 1}/{repeats}: {engine} engine runs"
                 + (f" and a pass of the step profile's {kernels} kernels" if kernels else "") + ", shuffled")
        parts: dict[tuple[str, str, int], dict[int, Any]] = {job.key: {} for job in jobs}
        pieces: list[tuple[Job | None, int]] = [(job, i) for job in jobs for i in range(job.pieces)]
        pieces += [(None, i) for i in range(kernels)]
        for job, i in order.sample(pieces, len(pieces)):
            if job is None:
                measure_kernel(i)  # pyright: ignore[reportOptionalCall]  # kernels > 0 only with profile
                continue
            if job.ordered:  # the job's n-th slot in the shuffle runs its n-th piece
                i = len(parts[job.key])
            parts[job.key][i] = job.run_piece(i)
        for job in jobs:
            runs[job.key].append(job.assemble([parts[job.key][i] for i in range(job.pieces)]))
    return {key: mean_steps(done) for key, done in runs.items()}


def engine_jobs(torch, te, lm, setup: ValidateConfig, workloads: dict[str, list], sizes: dict[str, list[int]],
                device: str, clock: str, longest: int, cache_tokens: int | None = None) -> list[Job]:
    """The calibration runs of each path at its sizes and the workload's at its batch.  A static run of a
    burst is split into its batches (each a ``generate`` of its own), shuffled among the other jobs' pieces;
    a continuous run (one manager run) is run in segments of steps, parked in between (``engine.segments``),
    its segments shuffled among the other pieces in order."""
    batch, mode = setup.batch, setup.engine_mode or "eager"  # run_validate sets it to the device's default
    keys = [(path, "calibration", size) for path in sizes for size in sizes[path]]
    keys += [(path, "workload", batch[path]) for path in sizes]
    jobs = []
    for path, name, size in keys:
        requests = workloads[name]
        if path == "static" and all(r.arrival_s == 0 for r in requests):
            groups = te.static_groups(requests, size)
            jobs.append(Job((path, name, size), len(groups),
                            lambda i, g=groups: te.run_static_batch(torch, lm, g[i], device, clock, mode, cache_tokens),
                            lambda parts, g=groups, b=size: te.static_run(g, _cumulative(parts), b, clock, mode,
                                                                          cache_tokens)))
        elif path == "static":
            jobs.append(Job((path, name, size), 1, lambda i, r=requests, b=size: te.run_static(
                torch, lm, r, b, device, clock, mode, cache_tokens), lambda parts: parts[0]))
        elif not all(r.arrival_s == 0 for r in requests):
            # Arrivals over time are submitted on the wall clock, which does not stop while a segment is
            # parked: such a run goes in one piece.
            jobs.append(Job((path, name, size), 1, lambda i, r=requests, b=size: te.run_continuous(
                torch, lm, r, b, setup.budget_tokens, clock, longest, mode=mode), lambda parts: parts[0]))
        else:
            pieces = segment_count(requests, size, setup.budget_tokens)
            jobs.append(Job((path, name, size), pieces, _ContinuousPieces(
                lambda gate, r=requests, b=size: te.run_continuous(torch, lm, r, b, setup.budget_tokens, clock,
                                                                    longest, gate=gate, mode=mode), pieces),
                lambda parts: parts[-1], ordered=True))
    return jobs


class _ContinuousPieces:
    """A continuous job's ``run_piece``: piece 0 starts a new repeat in segments, the others continue it."""

    def __init__(self, run: Callable, pieces: int):
        self._run, self._pieces, self._current = run, pieces, None

    def __call__(self, index: int):
        if index == 0:
            self._current = SegmentedContinuous(self._run, self._pieces)
        # piece 0 comes first and sets _current
        return self._current.piece(index)  # pyright: ignore[reportOptionalMemberAccess]


def _cumulative(parts: list[tuple[float, ...]]) -> list[float]:
    stamps, now = [], 0.0
    for durations in parts:
        for duration in durations:
            now += duration
            stamps.append(now)
    return stamps


def static_batch_sizes(workloads: dict[str, list], sizes: dict[str, list[int]], batch: dict[str, int]) -> list[int]:
    """Every static batch size the timed runs meet: each run's batches, the last one of each often smaller."""
    from microbench.serving.engine.transformers_engine import static_groups

    runs = [(workloads["calibration"], size) for size in sizes["static"]] + [(workloads["workload"], batch["static"])]
    return sorted({len(group) for requests, size in runs for group in static_groups(requests, size)})


def warm_engine(torch, te, lm, setup: ValidateConfig, workloads: dict[str, list], sizes: dict[str, list[int]],
                device: str, clock: str, longest: int, mode: str, cache_tokens: int | None) -> None:
    """Before anything is timed.  Eager: a short run of each path (first-call costs, allocator).  Graphs: every
    static batch size the timed runs meet is compiled and recorded on the one cache length (dynamo's recompile
    limit raised to hold them all, so none falls back to eager), and a continuous run, which captures its graphs
    in ``manager.warmup()`` before its clock starts (``engine.settings``)."""
    calibration = workloads["calibration"]
    if mode == "graphs":
        from microbench.serving.engine.settings import allow_compiles

        shapes = static_batch_sizes(workloads, sizes, setup.batch)
        allow_compiles(torch, len(shapes))
        te.warm_static_shapes(torch, lm, calibration, shapes, device, mode, cache_tokens)
    else:
        te.run_static(torch, lm, calibration[:2], 2, device, clock, mode)
    if "continuous" in sizes:
        te.run_continuous(torch, lm, calibration[:2], 2, setup.budget_tokens, clock, longest, mode=mode)


def term_multipliers(profile: StepProfile, requests, policy: str) -> dict[str, tuple[float, ...]]:
    """Per overhead term, what it multiplies in each simulated step (sequences, cached tokens, ...): the
    simulator's own overhead with that term at 1 and the others at 0, so the fit and the prediction read the
    terms the same way.  Calibration arrivals are a burst, so the schedule does not depend on step times."""
    out = {}
    for term in EngineOverhead.TERMS:
        terms: dict[str, Any] = {name: 1.0 if name == term else 0.0 for name in EngineOverhead.TERMS}
        unit = EngineOverhead(**terms, fitted_on="unit")
        out[term] = tuple(step.overhead_s for step in simulate(profile, requests, policy, unit).steps)
    return out


def calibrate(profile: StepProfile, requests, policies: dict[str, Callable[[int], str]],
              sizes: dict[str, list[int]], best: dict) -> dict[str, dict[str, Any]]:
    """Per path: the overhead fitted on the calibration workload's steps (at two batch sizes) only."""
    from microbench.serving.engine.timing import step_durations

    out = {}
    for path, policy_for in policies.items():
        runs, records = [], []
        for size in sizes[path]:
            measured = best[(path, "calibration", size)]
            kernel_only = simulate(profile, requests, policy_for(size), None)
            run = CalibrationRun(step_durations(measured), tuple(s.time_s for s in kernel_only.steps),
                                 term_multipliers(profile, requests, policy_for(size)))
            runs.append(run)
            records.append({"policy": policy_for(size), "measured_total_s": measured.total_s,
                            "kernel_only_total_s": kernel_only.makespan_s, "steps": len(kernel_only.steps),
                            "steps_aligned": run.aligned, "measured_step_s": list(run.measured_s),
                            "kernel_step_s": list(run.kernel_s)})
        overhead = fit_overhead(runs, f"{len(requests)} calibration requests (not the workload), {path} path, "
                                      f"batches {sizes[path]}, step by step")
        out[path] = {"overhead": overhead, "runs": records}
    return out


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` checked and resolved: nothing in it was measured, and nothing was written."""

    workloads: dict[str, list]
    choice: Any  # devices.DeviceChoice
    timing: EngineTiming
    profile: StepProfile | None  # given with --profile
    plan: Any  # profile_plan.ProfilePlan of the profile to measure here, without --profile
    engine_mode: str  # --engine-mode, or the device's default


def prepare(setup: ValidateConfig) -> Prepared:
    """Every check that reads the user's input (options, workloads, device, model or profile, transformers), in
    that order, before torch runs anything (the output folder was checked before: ``VALIDATE_FOLDER``)."""
    from microbench.serving.engine import models as engine_models
    from microbench.serving.engine import transformers_engine as te
    from microbench.serving.engine.settings import EngineError

    setup.check()
    workloads = {"workload": make_workload(setup.requests, setup.arrivals, setup.prompt, setup.output, setup.seed),
                 "calibration": make_workload(setup.calibration_requests, "burst", setup.prompt, setup.output,
                                              setup.seed + 1)}
    choice = resolve_device(setup.device)
    timing = engine_timing(setup, choice.kind)
    mode = engine_mode_for(setup, choice.kind)
    profile = plan = None
    everything = workloads["workload"] + workloads["calibration"]
    if setup.profile is not None:
        profile = given_profile(setup.profile, setup.device)
        model, dtype = model_from_profile(profile), profile.dtype
    else:
        plan = profile_plan_for(setup, everything, timing.clock, choice.kind, setup.repeats)
        model, dtype = plan.check(), plan.resolved_dtype(choice.kind)
    problem = engine_models.refusal(model)
    if problem:  # before the profile is measured
        raise EngineError(problem)
    check_engine_fits(setup, model, dtype, everything, choice.kind, choice.index)
    te.transformers_module()  # fail before measuring anything when the package is missing
    return Prepared(workloads, choice, timing, profile, plan, mode)


def run_validate(setup: ValidateConfig, folder: Path, observer: SweepObserver, on_item: Callable,
                 argv: tuple[str, ...] = (), written_in: Path | None = None) -> dict[str, Any]:
    """Everything, in the order of the module docstring; returns the validation document.  ``folder``: the output
    folder the document names; ``written_in``: where its files are written until it is put in place (the
    staging folder of ``roofline.result.folders``; ``folder`` itself by default)."""
    ready = prepare(setup)
    setup = replace(setup, engine_mode=ready.engine_mode)  # recorded in setup as it ran
    import torch

    from microbench.serving.engine import transformers_engine as te

    workloads, timing = ready.workloads, ready.timing
    if timing.threads is not None:
        torch.set_num_threads(timing.threads)
    if timing.note:
        observer.on_phase(timing.note)
    device, clock = ready.choice.torch_name, timing.clock
    if ready.profile is not None:
        check_profile_timing(ready.profile, setup.profile, clock, torch.get_num_threads(), ready.choice.kind)
        profile, passes, profile_path = ready.profile, None, setup.profile
        model, dtype = model_from_profile(profile), profile.dtype
    else:
        passes = ProfilePasses(ready.plan, written_in or folder, observer, on_item, setup.repeats)
        model, dtype, profile_path = passes.model, passes.dtype, folder / passes.path.name
    everything = workloads["workload"] + workloads["calibration"]
    longest = max(r.prompt_tokens + r.output_tokens for r in everything)
    lm = te.build_model(torch, model, dtype, device, longest + 16, setup.seed)
    from microbench.serving.engine.models import CONTINUOUS_REFUSED, engine_paths
    from microbench.serving.engine.settings import graphs_policy_options

    paths = engine_paths(model)
    if "continuous" not in paths:
        observer.on_phase(CONTINUOUS_REFUSED)

    experts = engine_experts(torch, lm)

    # Graphs mode: every static batch on one static cache (one compiled shape per batch size), attended whole;
    # each continuous step packed and padded as the manager's graphs run it.
    cache_tokens = longest if ready.engine_mode == "graphs" else None
    cache_option = f":cache={cache_tokens}" if cache_tokens else ""
    every_policy = {"static": lambda b: f"static:batch={b}{cache_option}",
                    "continuous": lambda b: f"chunked:budget={setup.budget_tokens}:max-batch={b}"
                                            + (graphs_policy_options(te.transformers_module(), b, longest)
                                               if ready.engine_mode == "graphs" else "")}
    policies = {path: every_policy[path] for path in paths}
    batch = {path: setup.batch[path] for path in paths}
    sizes = {path: calibration_sizes(b, setup.calibration_requests) for path, b in batch.items()}
    observer.on_phase(f"warming up the engine's {' and '.join(paths)} path{'s' if len(paths) > 1 else ''}")
    warm_engine(torch, te, lm, setup, workloads, sizes, device, clock, longest, ready.engine_mode, cache_tokens)
    jobs = engine_jobs(torch, te, lm, setup, workloads, sizes, device, clock, longest, cache_tokens)
    best = interleaved_runs(jobs, setup.repeats, observer.on_phase, setup.seed,
                            (passes.items, passes.measure) if passes else None)
    if passes is not None:
        profile = passes.finish()
    if experts is not None and any(table.kernel != experts["kernel"] for table in profile.grouped):
        observer.on_phase(f"the profile timed the experts with {profile.grouped[0].kernel}, the engine runs "
                          f"{experts['kernel']}")
    fits = calibrate(profile, workloads["calibration"], policies, sizes, best)
    runs = {path: (best[(path, "workload", batch[path])],
                   simulate(profile, workloads["workload"], policies[path](batch[path]), fits[path]["overhead"]))
            for path in policies}
    # a given profile (ready.profile) comes from --profile, so profile_path is set on both branches
    return validation_document(setup, profile, profile_path, fits, runs, argv,  # pyright: ignore[reportArgumentType]
                               experts)


def validation_document(setup: ValidateConfig, profile: StepProfile, profile_path: Path, fits, runs,
                        argv: tuple[str, ...], experts: dict[str, str] | None = None) -> dict[str, Any]:
    """validate.json: every key as roofline.serving.schemas.validation declares it (docs/validation.schema.json);
    ``experts``: a mixture's (``engine_experts``)."""
    from microbench.serving.engine.models import CONTINUOUS_REFUSED
    from microbench.serving.engine.timing import step_durations
    from roofline.serving.schemas.validation import VALIDATION_KIND, VALIDATION_VERSION

    comparisons = {path: compare_runs(predicted.requests, measured.requests)
                   for path, (measured, predicted) in runs.items()}
    ratio: dict[str, Any] = {"what": "static total time / continuous total time", "predicted": None,
                             "measured": None, "rel_err": None, "why_none": CONTINUOUS_REFUSED}
    if "continuous" in comparisons:
        predicted_ratio = comparisons["static"]["total_s"]["predicted"] / \
            comparisons["continuous"]["total_s"]["predicted"]
        measured_ratio = comparisons["static"]["total_s"]["measured"] / comparisons["continuous"]["total_s"]["measured"]
        ratio = {"what": ratio["what"], "predicted": predicted_ratio, "measured": measured_ratio,
                 "rel_err": relative_error(predicted_ratio, measured_ratio)}
    return {
        "schema_version": VALIDATION_VERSION, "kind": VALIDATION_KIND, "tool": tool_info(), "created_at": utc_now(),
        "argv": list(argv), "host": host_info(), "device": profile.device,
        "engine": {"name": setup.engine, "weights": WEIGHTS_NOTE + (ROUTER_NOTE if experts else ""),
                   "model": profile.model, "dtype": profile.dtype,
                   "torch_threads": __import__("torch").get_num_threads(),
                   **({"experts": experts} if experts is not None else {})},
        "setup": setup.to_record(),
        "profile": {"path": str(profile_path), "basis": profile.basis, "created_at": profile.created_at},
        "calibration": {path: {"overhead": fit["overhead"].to_dict(), "runs": fit["runs"]}
                        for path, fit in fits.items()},
        "runs": {path: {"measured": measured.to_dict(), "policy": measured.policy,
                        "measured_step_s": list(step_durations(measured)),
                        "kernel_share": kernel_share(predicted, step_durations(measured)),
                        "predicted": {"policy": predicted.policy, "makespan_s": predicted.makespan_s,
                                      "steps": len(predicted.steps), "step_s": [s.time_s for s in predicted.steps],
                                      "kernel_step_s": [s.time_s - s.overhead_s for s in predicted.steps],
                                      "requests": [_outcome(r) for r in predicted.requests]}}
                 for path, (measured, predicted) in runs.items()},
        "comparison": comparisons,
        "ratio": ratio,
    }


def engine_experts(torch, lm) -> dict[str, str] | None:
    """A mixture's experts as the engine runs them: transformers' implementation, the kernel it picks, and the
    routing the profile is measured under to describe its router (``engine.models``).  None: a dense model."""
    from microbench.serving.engine import models as engine_models

    kernel = engine_models.experts_kernel(torch, lm)
    if kernel is None:
        return None
    return {"implementation": lm.config._experts_implementation, "kernel": kernel,
            "routing": engine_models.ENGINE_ROUTING}


def kernel_share(predicted, measured_step_s) -> float | None:
    """What share of the engine's measured step time the profile's kernels account for (no overhead): how much
    of the engine is kernels, and so how far a kernel-only simulation of it is off.  None: nothing measured."""
    measured = math.fsum(measured_step_s)
    kernels = math.fsum(s.time_s - s.overhead_s for s in predicted.steps)
    return kernels / measured if measured > 0 else None


def _outcome(r) -> dict[str, Any]:
    return {"id": r.id, "arrival_s": r.arrival_s, "first_token_s": r.first_token_s, "finish_s": r.finish_s,
            "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens}
