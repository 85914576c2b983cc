"""``gpubench validate --engine transformers``: run a real engine on a workload, simulate the same workload on a
profile measured on the same device, and compare.

Order, on one device and in one process: (1) the step profile (measured here unless ``--profile`` names one
measured on this device), (2) a warm-up of both engine paths, (3) the calibration of each path's overhead on
a SEPARATE workload (another seed, burst arrivals) at two batch sizes, (4) the workload itself on both paths,
(5) the simulations with the calibrated overheads held fixed.  Calibrating right before the runs keeps the
fit and the runs under the same load when the machine is shared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from microbench.devices import describe_device, host_info, resolve_device, tool_info
from microbench.measure import utc_now
from microbench.observer import SweepObserver
from microbench.plan import PlanError
from microbench.validate_compare import compare_runs, fit_overhead, relative_error
from roofline.models import ModelProfile
from roofline.serving.profile_doc import EngineOverhead, StepProfile, load_profile
from roofline.serving.simulate import simulate
from roofline.serving.workload import make_workload

ENGINES = ("transformers",)
WEIGHTS_NOTE = ("random weights built from the config (nothing downloaded): kernels of the same shapes cost the "
                "same time whatever the weights hold, and EOS is disabled so every output has its workload length")
# The calibration's second batch size, half the first: per-step and per-sequence costs separate, and the run
# stays as short as the workload's.
CALIBRATION_SMALL_DIVISOR = 2


@dataclass(frozen=True)
class ValidateSetup:
    engine: str = "transformers"
    profile: Path | None = None
    model: str | None = None
    hf_config: Path | None = None
    requests: int = 32
    arrivals: str = "burst"
    prompt: str = "fixed:16"
    output: str = "uniform:4:40"
    seed: int = 0
    calibration_requests: int = 16
    static_batch: int = 8
    max_batch: int = 8
    budget_tokens: int = 128
    device: str = "auto"
    dtype: str | None = None
    threads: int | None = None
    profile_budget_s: float | None = None
    repeats: int = 3
    clock: str | None = None  # None: thread-cpu on a CPU with burst arrivals, else wall

    def check(self) -> None:
        if self.engine not in ENGINES:
            raise PlanError(f"unknown engine {self.engine!r}; choose from {', '.join(ENGINES)}")
        if self.profile is None and bool(self.model) == bool(self.hf_config):
            raise PlanError("give --profile PROFILE.json, or one of --model NAME / --hf-config PATH to measure one")
        for name in ("requests", "calibration_requests", "static_batch", "max_batch", "budget_tokens", "repeats"):
            if getattr(self, name) <= 0:
                raise PlanError(f"--{name.replace('_', '-')} must be positive")
        if self.threads is not None and self.threads <= 0:
            raise PlanError("--threads must be positive")
        if self.clock not in (None, "wall", "thread-cpu"):
            raise PlanError(f"unknown clock {self.clock!r}; choose wall or thread-cpu")
        if self.clock == "thread-cpu" and self.arrivals != "burst":
            raise PlanError("--clock thread-cpu counts the engine's CPU time, which stands still while it waits for "
                            "arrivals: use it with --arrivals burst")

    def clock_for(self, kind: str) -> str:
        """Wall time on a GPU (its work is asynchronous); on a CPU the engine thread's CPU time when nothing
        waits for arrivals, so other processes on a shared machine do not count as engine time."""
        if self.clock:
            return self.clock
        return "thread-cpu" if kind == "cpu" and self.arrivals == "burst" else "wall"


def calibration_sizes(batch: int, requests: int) -> list[int]:
    """The two batch sizes the overhead is fitted at: the path's batch (at most the calibration's requests, or
    both runs would be the same run) and half of it."""
    top = max(1, min(batch, requests))
    return sorted({top, max(1, top // CALIBRATION_SMALL_DIVISOR)})


def model_from_profile(profile: StepProfile) -> ModelProfile:
    m = profile.model
    return ModelProfile(id=str(m.get("id", m["name"])), name=str(m["name"]), layers=m["layers"], hidden=m["hidden"],
                        heads=m["heads"], kv_heads=m["kv_heads"], head_dim=m["head_dim"],
                        intermediate=m["intermediate"], vocab=m["vocab"], gated_mlp=m["mlp"] == "gated",
                        tied_embeddings=bool(m.get("tied_embeddings", False)))


def obtain_profile(setup: ValidateSetup, requests, folder: Path, observer: SweepObserver, on_item: Callable,
                   clock: str) -> tuple[StepProfile, Path]:
    """The given profile (checked to be of this device), or one measured now, sized to the workload."""
    if setup.profile is not None:
        profile = load_profile(setup.profile)
        here = describe_device(resolve_device(setup.device))
        if profile.source != "measured" or profile.device.get("name") != here.get("name"):
            raise PlanError(f"{setup.profile} was not measured on this device ({profile.device.get('name')!r}, "
                            f"here {here.get('name')!r}): validate compares against a profile of the same device")
        return profile, setup.profile
    from microbench.profile_plan import ProfilePlan
    from microbench.profile_run import partial_path, prepare_profile, run_profile

    longest_prompt = max(r.prompt_tokens for r in requests)
    longest = max(r.prompt_tokens + r.output_tokens for r in requests)
    plan = ProfilePlan(model=setup.model, hf_config=str(setup.hf_config) if setup.hf_config else None,
                       dtype=setup.dtype, max_tokens=max(setup.budget_tokens, setup.static_batch * longest_prompt),
                       max_context=longest, max_batch=max(setup.static_batch, setup.max_batch),
                       device=setup.device, budget_s=setup.profile_budget_s, clock=clock)
    path = folder / "profile.json"
    partial_path(path).unlink(missing_ok=True)
    run = prepare_profile(plan, path, observer, argv=("gpubench", "validate", "(profile)"))
    return run_profile(run, observer.on_start, on_item), path


def best_runs(engine: Callable, jobs: list[tuple[str, str, int]], workloads: dict[str, list], repeats: int,
              on_phase: Callable[[str], None]) -> dict[tuple[str, str, int], Any]:
    """Each job (path, workload name, batch) ``repeats`` times, round-robin, combined step by step
    (``engine.timing.fastest_steps``).  On a shared machine other processes only ever add time; interleaving
    spreads a burst of load over different jobs, and calibration and workload are treated alike."""
    from microbench.engine.timing import fastest_steps

    runs: dict[tuple[str, str, int], list] = {job: [] for job in jobs}
    for repeat in range(repeats):
        # Each round starts one job later, so no job always runs first (or last) in its round.
        for job in jobs[repeat % len(jobs):] + jobs[: repeat % len(jobs)]:
            path, name, size = job
            on_phase(f"round {repeat + 1}/{repeats}: {path} at batch {size} on the {name}")
            runs[job].append(engine(path, workloads[name], size))
    return {job: fastest_steps(done) for job, done in runs.items()}


def calibrate(profile: StepProfile, requests, policies: dict[str, Callable[[int], str]],
              sizes: dict[str, list[int]], best: dict) -> dict[str, dict[str, Any]]:
    """Per path: the overhead fitted on the calibration workload's runs (at two batch sizes) only."""
    out = {}
    for path, policy_for in policies.items():
        runs, records = [], []
        for size in sizes[path]:
            measured = best[(path, "calibration", size)]
            kernel_only = simulate(profile, requests, policy_for(size), None)
            runs.append((measured.total_s, kernel_only))
            records.append({"policy": policy_for(size), "measured_total_s": measured.total_s,
                            "kernel_only_total_s": kernel_only.makespan_s, "steps": len(kernel_only.steps),
                            "sequence_steps": sum(s.sequences for s in kernel_only.steps)})
        overhead = fit_overhead(runs, f"{len(requests)} calibration requests (not the workload), {path} path, "
                                      f"batches {sizes[path]}")
        out[path] = {"overhead": overhead, "runs": records}
    return out


def run_validate(setup: ValidateSetup, folder: Path, observer: SweepObserver, on_item: Callable,
                 argv: tuple[str, ...] = ()) -> dict[str, Any]:
    """Everything, in the order of the module docstring; returns the validation document."""
    setup.check()
    import torch

    if setup.threads is not None:
        torch.set_num_threads(setup.threads)
    from microbench.engine import transformers_engine as te

    te.transformers_module()  # fail before measuring anything when the package is missing
    workloads = {"workload": make_workload(setup.requests, setup.arrivals, setup.prompt, setup.output, setup.seed),
                 "calibration": make_workload(setup.calibration_requests, "burst", setup.prompt, setup.output,
                                              setup.seed + 1)}
    everything = workloads["workload"] + workloads["calibration"]
    choice = resolve_device(setup.device)
    device, clock = choice.torch_name, setup.clock_for(choice.kind)
    if clock == "thread-cpu" and torch.get_num_threads() != 1:
        raise PlanError("--clock thread-cpu times one thread: run with --threads 1")
    profile, profile_path = obtain_profile(setup, everything, folder, observer, on_item, clock)
    longest = max(r.prompt_tokens + r.output_tokens for r in everything)
    lm = te.build_model(torch, model_from_profile(profile), profile.dtype, device, longest + 16, setup.seed)
    policies = {"static": lambda b: f"static:batch={b}",
                "continuous": lambda b: f"chunked:budget={setup.budget_tokens}:max-batch={b}"}
    batch = {"static": setup.static_batch, "continuous": setup.max_batch}
    sizes = {path: calibration_sizes(b, setup.calibration_requests) for path, b in batch.items()}

    def engine(path: str, requests, size: int):
        if path == "static":
            return te.run_static(torch, lm, requests, size, device, clock)
        return te.run_continuous(torch, lm, requests, size, setup.budget_tokens, clock, longest)

    observer.on_phase("warming up both engine paths")
    for path in policies:
        engine(path, workloads["calibration"][:2], 2)
    jobs = [(path, "calibration", size) for path in policies for size in sizes[path]]
    jobs += [(path, "workload", batch[path]) for path in policies]
    best = best_runs(engine, jobs, workloads, setup.repeats, observer.on_phase)
    fits = calibrate(profile, workloads["calibration"], policies, sizes, best)
    runs = {path: (best[(path, "workload", batch[path])],
                   simulate(profile, workloads["workload"], policies[path](batch[path]), fits[path]["overhead"]))
            for path in policies}
    return validation_document(setup, profile, profile_path, fits, runs, argv)


def validation_document(setup: ValidateSetup, profile: StepProfile, profile_path: Path, fits, runs,
                        argv: tuple[str, ...]) -> dict[str, Any]:
    comparisons = {path: compare_runs(predicted.requests, measured.requests)
                   for path, (measured, predicted) in runs.items()}
    predicted_ratio = comparisons["static"]["total_s"]["predicted"] / comparisons["continuous"]["total_s"]["predicted"]
    measured_ratio = comparisons["static"]["total_s"]["measured"] / comparisons["continuous"]["total_s"]["measured"]
    return {
        "schema_version": 1, "kind": "gpubench-validation", "tool": tool_info(), "created_at": utc_now(),
        "argv": list(argv), "host": host_info(), "device": profile.device,
        "engine": {"name": setup.engine, "weights": WEIGHTS_NOTE, "model": profile.model, "dtype": profile.dtype,
                   "torch_threads": __import__("torch").get_num_threads()},
        "setup": {key: (str(value) if isinstance(value, Path) else value) for key, value in asdict(setup).items()},
        "profile": {"path": str(profile_path), "basis": profile.basis, "created_at": profile.created_at},
        "calibration": {path: {"overhead": fit["overhead"].to_dict(), "runs": fit["runs"]}
                        for path, fit in fits.items()},
        "runs": {path: {"measured": measured.to_dict(), "policy": measured.policy,
                        "predicted": {"policy": predicted.policy, "makespan_s": predicted.makespan_s,
                                      "steps": len(predicted.steps),
                                      "requests": [_outcome(r) for r in predicted.requests]}}
                 for path, (measured, predicted) in runs.items()},
        "comparison": comparisons,
        "ratio": {"what": "static total time / continuous total time", "predicted": predicted_ratio,
                  "measured": measured_ratio, "rel_err": relative_error(predicted_ratio, measured_ratio)},
    }


def _outcome(r) -> dict[str, Any]:
    return {"id": r.id, "arrival_s": r.arrival_s, "first_token_s": r.first_token_s, "finish_s": r.finish_s,
            "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens}


def overhead_from(document: dict[str, Any], path: str) -> EngineOverhead:
    return EngineOverhead.from_dict(document["calibration"][path]["overhead"])
