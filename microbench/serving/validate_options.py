"""What ``gpubench validate`` is asked to do: one ``ValidateConfig``, built from the command's options and
checked once, and the engine's timing (clock and torch threads) chosen from it.  Plain Python, so every option
is checked before torch is imported and anything is measured.  ``FLAGS`` declares each option (the CLI
declares its flags from it); what needs a file or the device (the workloads, the profile, the model) is
checked by ``validate_run.prepare``, still before anything runs.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from microbench.points.plan import PlanError
from microbench.serving.engine.settings import ENGINE_MODES
from microbench.serving.profile_plan import MEASURED_DTYPE
from microbench.serving.validate_sizes import check_request_counts
from roofline.core.options import Option, check_seed, number_refusal
from roofline.serving.workload import arrivals_help

ENGINES = ("transformers",)
CLOCKS = ("wall", "thread-cpu")

FLAGS: dict[str, Option] = {
    "engine": Option(("--engine",), default="transformers", show_default=True, help="the real engine to run"),
    "engine_mode": Option(("--engine-mode",), "choice", choices=ENGINE_MODES,
                          help="eager: every kernel launched from Python; graphs (CUDA): the continuous manager's "
                               "CUDA graphs and generate's static cache with a graph-captured decode step "
                               "[GPU graphs, CPU eager]"),
    "profile": Option(("--profile",), "path",
                      help="a step profile measured on this device [measure one now, sized to the workload]"),
    "model": Option(("--model",), help="without --profile: model id to profile and build"),
    "hf_config": Option(("--hf-config",), "path", help="without --profile: a config.json"),
    "requests": Option(("--requests",), "int", 32, show_default=True),
    "arrivals": Option(("--arrivals",), default="burst", show_default=True, help=arrivals_help()),
    "prompt": Option(("--prompt",), default="fixed:16", show_default=True, help="prompt lengths (as simulate)"),
    "output": Option(("--output",), default="uniform:4:40", show_default=True, help="output lengths"),
    "seed": Option(("--seed",), "int", 0, show_default=True, help="the workload's seed (calibration: seed + 1)"),
    "calibration_requests": Option(("--calibration-requests",), "int", 16, show_default=True,
                                   help="requests of the separate calibration workload the engine overhead is "
                                        "fitted on"),
    "static_batch": Option(("--static-batch",), "int", 8, show_default=True, help="static path: generate batch size"),
    "max_batch": Option(("--max-batch",), "int", 8, show_default=True, help="continuous path: sequences per step"),
    "budget_tokens": Option(("--budget-tokens",), "int", 128, show_default=True,
                            help="continuous path: tokens per step"),
    "repeats": Option(("--repeats",), "int", 3, show_default=True,
                      help="runs of each, interleaved; each step's mean is kept"),
    "device": Option(("--device",), default="auto", show_default=True),
    "dtype": Option(("--dtype",), help=f"without --profile [GPU {MEASURED_DTYPE['cuda']}, "
                                       f"CPU {MEASURED_DTYPE['cpu']}]"),
    "threads": Option(("--threads",), "int",
                      help="torch threads [1 where timed on the thread CPU clock, else torch's default]"),
    "clock": Option(("--clock",), "choice", choices=CLOCKS,
                    help="engine timestamps [CPU + burst without --threads N > 1: thread-cpu, the one engine "
                         "thread's CPU time; else wall]"),
    "profile_budget_s": Option(("--profile-budget",), "float", help="seconds of sampling per profiled kernel"),
    "fail_above": Option(("--fail-above",), "float",
                         help="exit 1 when a total time or the static/continuous ratio is off by more than this "
                              "fraction"),
    "out_dir": Option(("-o", "--out-dir"), "path", required=True,
                      help="folder for validate.json (and profile.json when measured here)"),
}
POSITIVE = ("requests", "calibration_requests", "static_batch", "max_batch", "budget_tokens", "repeats")


def check_threads(threads: int) -> None:
    """Positive and at most this machine's CPUs: torch takes any int32 (and fails past it with a ValueError),
    but more threads than CPUs only time the threads' contention."""
    cpus = os.cpu_count() or 1
    if not 1 <= threads <= cpus:
        raise PlanError(f"--threads {threads}: give 1 to {cpus}, the CPUs of this machine")


def check_positive_number(flag: str, value: float | None, what: str) -> None:
    """None (not given) or finite and above 0, as the sweep's budgets: nan would turn a gate off without a
    word, and 0 or less would make it fail whatever was measured."""
    if value is not None and number_refusal(value, low=0) is not None:
        raise PlanError(f"{flag} {value:g}: give a finite number above 0 ({what})")


@dataclass(frozen=True)
class ValidateConfig:
    engine: str = FLAGS["engine"].default
    engine_mode: str | None = FLAGS["engine_mode"].default  # None: graphs on a GPU, eager on the CPU (engine_mode_for)
    profile: Path | None = FLAGS["profile"].default
    model: str | None = FLAGS["model"].default
    hf_config: Path | None = FLAGS["hf_config"].default
    requests: int = FLAGS["requests"].default
    arrivals: str = FLAGS["arrivals"].default
    prompt: str = FLAGS["prompt"].default
    output: str = FLAGS["output"].default
    seed: int = FLAGS["seed"].default
    calibration_requests: int = FLAGS["calibration_requests"].default
    static_batch: int = FLAGS["static_batch"].default
    max_batch: int = FLAGS["max_batch"].default
    budget_tokens: int = FLAGS["budget_tokens"].default
    device: str = FLAGS["device"].default
    dtype: str | None = FLAGS["dtype"].default
    threads: int | None = FLAGS["threads"].default  # None: one on a CPU timed on the thread clock, else torch's default
    profile_budget_s: float | None = FLAGS["profile_budget_s"].default
    repeats: int = FLAGS["repeats"].default
    # None: thread-cpu on a CPU with burst arrivals and no --threads N > 1, else wall
    clock: str | None = FLAGS["clock"].default
    fail_above: float | None = FLAGS["fail_above"].default  # the gate on the worst relative error, a fraction
    # the folder validate.json (and a profile measured here) is written to
    out_dir: Path | None = FLAGS["out_dir"].default

    def __post_init__(self) -> None:
        """Every option on its own and against the others (``check`` adds what makes the profile)."""
        if self.engine not in ENGINES:
            raise PlanError(f"unknown engine {self.engine!r}; choose from {', '.join(ENGINES)}")
        if self.engine_mode not in (None, *ENGINE_MODES):
            raise PlanError(f"unknown --engine-mode {self.engine_mode!r}; choose from {', '.join(ENGINE_MODES)}")
        for name in POSITIVE:
            if getattr(self, name) <= 0:
                raise PlanError(f"{FLAGS[name].spelled} must be positive")
        check_request_counts(self.requests, self.calibration_requests)
        check_seed(self.seed)
        if self.threads is not None:
            check_threads(self.threads)
        check_positive_number("--profile-budget", self.profile_budget_s, "seconds")
        check_positive_number("--fail-above", self.fail_above, "a fraction, 0.1 is 10%")
        if self.clock not in (None, *CLOCKS):
            raise PlanError(f"unknown clock {self.clock!r}; choose wall or thread-cpu")
        if self.clock == "thread-cpu" and self.arrivals != "burst":
            raise PlanError("--clock thread-cpu counts the engine's CPU time, which stands still while it waits for "
                            "arrivals: use it with --arrivals burst")
        if self.clock == "thread-cpu" and self.threads not in (None, 1):
            raise PlanError(f"--clock thread-cpu times one thread: drop --threads {self.threads}, or time "
                            f"{self.threads} threads with --clock wall")

    @property
    def batch(self) -> dict[str, int]:
        """Each engine path's batch: static's batch size, continuous's most sequences at once."""
        return {"static": self.static_batch, "continuous": self.max_batch}

    def check(self) -> None:
        """What the run needs beyond the options on their own: a profile, or a model to measure one of."""
        if self.profile is None and bool(self.model) == bool(self.hf_config):
            raise PlanError("give --profile PROFILE.json, or one of --model NAME / --hf-config PATH to measure one")

    def to_record(self) -> dict[str, Any]:
        """The options as the validation document's ``setup`` records them (paths as text; not the folder)."""
        record = {key: value for key, value in asdict(self).items() if key != "out_dir"}
        return {key: (str(value) if isinstance(value, Path) else value) for key, value in record.items()}

    @classmethod
    def from_options(cls, options: Mapping[str, Any], given: Collection[str] = ()) -> ValidateConfig:
        """The config of one command line (``options`` by field name as click parsed them), checked whole."""
        config = cls(**options)
        config.check()
        return config


def engine_mode_for(setup: ValidateConfig, kind: str) -> str:
    """The engine mode on this device kind: as given, else graphs on a GPU (how an engine is served there) and
    eager on the CPU.  CUDA graphs capture a GPU's launches: there are none to capture on the CPU, and
    transformers would turn them off with a warning, so ``--engine-mode graphs`` is refused there."""
    if setup.engine_mode == "graphs" and kind != "cuda":
        raise PlanError(f"--engine-mode graphs captures CUDA graphs: the {kind} device has none; use "
                        "--engine-mode eager")
    return setup.engine_mode or ("graphs" if kind == "cuda" else "eager")


@dataclass(frozen=True)
class EngineTiming:
    """The clock the engine and the profile are timed on, the torch threads to run with (None: leave torch's
    default), and what was chosen for the user, to say so."""

    clock: str
    threads: int | None
    note: str | None = None


def engine_timing(setup, kind: str) -> EngineTiming:
    """Wall time on a GPU (its work is asynchronous).  On a CPU with burst arrivals the engine thread's CPU
    time, so other processes on a shared machine do not count as engine time (docs/serving.md): it times one
    thread, so that default runs one torch thread; ``--threads N`` above 1 alone is timed on the wall clock
    (``check`` refuses it with a typed ``--clock thread-cpu``).  Arrivals over time are waited for on the
    wall clock."""
    if kind != "cpu":
        if setup.clock == "thread-cpu":
            raise PlanError("--clock thread-cpu times a CPU thread, not a GPU's asynchronous work: drop it")
        return EngineTiming("wall", setup.threads)
    if setup.clock == "wall" or setup.arrivals != "burst":
        return EngineTiming("wall", setup.threads)
    if setup.threads not in (None, 1):
        return EngineTiming("wall", setup.threads, f"timing {setup.threads} torch threads on the wall clock "
                            "(the thread CPU clock times one thread; other processes' load counts)")
    note = None if setup.threads == 1 else (
        "timing the engine on one torch thread's CPU clock, so other processes do not count "
        "(--threads N times N threads on the wall clock)")
    return EngineTiming("thread-cpu", 1, note)
