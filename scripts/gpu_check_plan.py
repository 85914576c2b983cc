#!/usr/bin/env python3
"""The time plan of scripts/gpu_check.sh, worked out before anything runs: each step's points, its expected
seconds on an H200 and the timeout it is given, with steps trimmed (fewer batches, shapes, back ends or tests,
each trim named) until the check fits its budget with the serving check (profile + eager validate) always in it.

Where the figures come from.  Per-point costs are the first H200 run's own measurements (tests/data/h200/, its
README says what each file is: first-run-sweep.json keeps every point's timestamps and timed window,
first-run-ceilings.json the ceilings' span, first-run-summary.txt each step's seconds, first-run-bench.json the
quick sweep's wall time), multiplied by the number of points each step runs now: a sweep's points come from
``SweepConfig.points`` (microbench/points/plan.py, no torch) for the step's own command line, parsed by the CLI
itself; the profile's kernels and decode's launches are counted by their own planners.  What changed in the code
since that run is added from the code that changed it: a sweep point's timed phase now lasts at least
``telemetry.sampler.min_point_window_s`` (0.4 s with GPM, 0.25 s then), and the ceilings run a burst/sustained
regime per dtype (``sweep.peaks.GPU_REGIMES_S``).  What that run never measured (grouped GEMMs' host check,
Triton's compiles, transformers' engine, inductor) is an assumption, named ``ASSUMED_*`` below with why, and
printed as one in the plan.

The fit: the steps before the serving check must be expected to end, with a tenth to spare, by the budget less the
serving check's own timeouts and the summary's slack; gpu_check.sh then cuts each earlier step's timeout to what is
left before that reservation (and skips, as a failure, a step left with under half its expected time), so the
serving check always starts with its timeouts whole, however the earlier steps run.

    python3 scripts/gpu_check_plan.py [--quick] [--device cuda|cpu] [--shell FILE]

prints the plan (always the H200's: a CPU dry run runs the same steps with the CPU arguments and its own scaled
timeouts) and, with --shell, writes the steps as bash arrays for gpu_check.sh to source.  Exit 2: nothing fits.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import functools
import importlib.util
import json
import math
import shlex
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FIXTURES = ROOT / "tests" / "data" / "h200"
# The limits: the default check in 8 minutes of an H200, --quick in 5 (15 minutes of device time in all).
BUDGET_S = {"default": 480, "quick": 300}
# After the last step: the summary (imports roofline, reads the results) and the archives.
SLACK_S = 20
# A timeout is the estimate with half again on top and a fixed margin for a process's start, never under 30 s.
HEADROOM = 1.5
MARGIN_S = 15
MIN_TIMEOUT_S = 30
# Between the serving check's own steps and gpu_check.sh's step around them: bash, and a cut step's kill.
SERVING_MARGIN_S = 10
# Working out this plan, before the first step (python's start, the fixtures, the planners).
PLAN_S = 5
# Estimates are means: the steps before the serving check are planned into this share of the time before it, the
# rest kept for their overruns (past it, gpu_check.sh cuts or skips the last of them, which fails the check).
BEFORE_SHARE = 0.9

# --- what the first H200 run did not record in its committed files ---------------------------------------
# Its gpu_check.log (../shared/h200/first-run/, not committed) says the tests step collected 15 items ("6 failed, 9
# passed": 7999de4's tests/test_gpu.py and the -m gpu tests of tests/test_cupy_backend.py) and decode timed 54
# launches ("54/54"); its quick sweep (bench's, 7999de4's GPU_QUICK) planned 11 points: bf16 on 4096x14336, gemv
# and gemm at batches 1, 4, 16, 64, 256 and bmm at the same five.
FIRST_RUN_TEST_ITEMS = 15
FIRST_RUN_DECODE_LAUNCHES = 54

# --- assumptions: nothing on an H200 has timed these yet -------------------------------------------------
# A grouped point's correctness check (microbench/timing/grouped.py, GroupedWorkload.check, as of this commit)
# copies every expert's weights to the host in float64 and gathers the sampled rows' experts there: bytes at a
# pageable device-to-host copy and a single CPU pass, 5 GB/s together.  Issue 37 item 2 moves the indexing onto
# the GPU; then only the sampled rows cross, and grouped_host_bytes below should say so.
ASSUMED_HOST_BYTES_PER_S = 5e9
# The w8a16 Triton kernel compiles once per launch configuration on a cold cache (microbench/timing/
# triton_w8a16.py: M = 1 has its own kernel, M > 1 a BLOCK_M of 16-128; Triton also specialises M on % 16).
ASSUMED_TRITON_COMPILE_S = 3.0
# Eager transformers on Llama-3-8B is Python-bound at ~30 ms a step, and validate runs ~2,000 engine steps with its
# calibration, plus building the model from random weights (scripts/serving_check.sh's header: ~1.5 minutes).
ASSUMED_VALIDATE_S = 90.0
# The graphs validate compiles the static decode for each batch and cache length first: 2-4 minutes (the same
# header; serving_check.sh will not start it with under 150 s left).
ASSUMED_GRAPHS_S = 180.0
# tests/test_gpu.py's graphs-mode test: inductor's cold compiles of a tiny model's static decode, a few batch sizes.
ASSUMED_COMPILE_TEST_S = 60.0

TEST_FILES = {"cupy-tests": "tests/test_cupy_backend.py", "gpu-tests": "tests/test_gpu.py"}
# gpu-tests' tests that each run a whole command or a compiler: timed apart, and left out one by one (TRIMS).
COMPILE_TEST = "test_graphs_mode_compiles_nothing_inside_a_timed_static_batch"
QUICK_SWEEP_TEST = "test_quick_cuda_sweep_end_to_end"
ENERGY_TEST = "test_a_profile_measured_with_energy_carries_a_draw_per_token_count"
CEILINGS_TEST = "test_ceilings_name_the_reference_and_both_compute_regimes"

# The dense shape the formats, the fp8-block point and a one-shape sweep use: Llama-3-8B's down_proj.
FORMAT_SHAPE = "4096x14336"
# A skewed routing, so that the 256-token point of the 128-expert set leaves some experts without a token too
# (balanced routing touches all 128 at 256 tokens; at 1 token most experts get none under any routing).
MOE_ROUTING = "zipf:1.2"


class PlanError(Exception):
    """The check cannot fit its budget: said in one line, exit 2."""


def _ts(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class FirstRun:
    """What the first H200 run measured, read from the committed fixtures."""

    step_s: dict[str, float]  # each step's seconds (first-run-summary.txt)
    startup_s: float  # a measuring process's start and end: the sweep step's seconds less its points' span
    point_s: dict[tuple[str, str], float]  # (op, back end): mean seconds an ok point took, start to next start
    window_s: float  # the median timed phase of a point
    floor_s: float  # the shortest timed phase then (telemetry.gpm_min_point_window_s)
    ceilings_measurement_s: float  # the ceilings' span over their measurements (stream kernels, peak shapes)
    quick_sweep_s: float  # bench's `gpubench sweep --quick` wall time

    @property
    def per_test_s(self) -> float:
        """A GPU test: the tests step less pytest's start, less the test that ran a whole quick sweep, per item."""
        quick_test_s = self.quick_sweep_s - self.startup_s
        return (self.step_s["tests"] - self.startup_s - quick_test_s) / (FIRST_RUN_TEST_ITEMS - 1)

    @property
    def per_launch_s(self) -> float:
        """A kernel timed without telemetry (decode's launches, the profile's kernels), its roof included."""
        return (self.step_s["decode"] - self.startup_s) / FIRST_RUN_DECODE_LAUNCHES


@functools.lru_cache(maxsize=4)
def read_first_run(folder: Path = FIXTURES) -> FirstRun:
    steps = {}
    lines = (folder / "first-run-summary.txt").read_text().splitlines()
    for line in lines[1:lines.index("--- summary ---")]:
        name, _, seconds = line.split()
        steps[name] = float(seconds.rstrip("s"))
    sweep = json.loads((folder / "first-run-sweep.json").read_text())
    points = sweep["points"]
    spans = [(_ts(p["started_at"]), _ts(p["finished_at"])) for p in points]
    # The gaps between points are saving the journal, plus a pause before each second attempt (all 13 of that run
    # were sw_power_cap, which is no longer a reason to measure again: the pauses are left out).
    retries = sum(1 for p in points if p.get("attempt", 1) > 1)
    gaps = sum(max(0.0, spans[i + 1][0] - spans[i][1]) for i in range(len(points) - 1))
    gap = (gaps - retries * sweep["settings"]["retry_pause_s"]) / (len(points) - 1)
    by_kind: dict[tuple[str, str], list[float]] = {}
    windows = []
    for point, (start, end) in zip(points, spans, strict=True):
        if point["status"] == "ok":
            by_kind.setdefault((point["op"], point["backend"]), []).append(end - start + gap)
            window = point["telemetry"]["window_s"]
            windows.append(window[1] - window[0])
    ceilings = json.loads((folder / "first-run-ceilings.json").read_text())["ceilings"]["measured"]
    measurements = len(ceilings["stream_kernels"]) + sum(
        1 for peak in ceilings["peak"].values() for tried in peak["tried"] if tried["status"] == "ok")
    bench = json.loads((folder / "first-run-bench.json").read_text())
    return FirstRun(
        step_s=steps,
        startup_s=steps["sweep"] - (spans[-1][1] - spans[0][0]),
        point_s={kind: statistics.fmean(values) for kind, values in by_kind.items()},
        window_s=statistics.median(windows),
        floor_s=sweep["telemetry"]["gpm_min_point_window_s"],
        ceilings_measurement_s=(_ts(ceilings["finished_at"]) - _ts(ceilings["started_at"])) / measurements,
        quick_sweep_s=bench["quick_sweep_wall_s"],
    )


# --- counting: what each step runs now, by the code's own planners (no torch) --------------------------------

def sweep_config(argv: Sequence[str]):
    """The SweepConfig `gpubench sweep ARGV` builds, parsed by the CLI's own options (so the plan and the
    command cannot disagree)."""
    from microbench.cli.app import main
    from microbench.cli.edges import given
    from microbench.points.config import SweepConfig

    command = main.commands["sweep"]
    ctx = command.make_context("sweep", list(argv))
    return SweepConfig.from_options(ctx.params, given(ctx), save=False)


def grouped_host_bytes(spec) -> int:
    """What a grouped point's correctness check moves through the host (see ASSUMED_HOST_BYTES_PER_S): every
    expert's weights in float64, then the sampled rows' experts gathered there."""
    from microbench.timing.ops import CHECK_ROWS

    rows = min(CHECK_ROWS, spec.batch * spec.topk)
    return 8 * spec.n * spec.k * (spec.experts + rows)


def _w8a16_config(m: int) -> tuple:
    """The launch configuration the w8a16 kernel compiles for M (triton_w8a16.gemv_config / gemm_config)."""
    if m == 1:
        return ("gemv",)
    return (min(128, max(16, 1 << (m - 1).bit_length())), m % 16 == 0)


@dataclass(frozen=True)
class Costs:
    """Per-point seconds on an H200 now: the first run's, with what has changed since."""

    first: FirstRun
    floor_s: float  # the shortest timed phase of a sweep point now

    @classmethod
    def now(cls, folder: Path = FIXTURES) -> Costs:
        from microbench.points.config import FLAGS
        from microbench.telemetry.sampler import min_point_window_s

        first = read_first_run(folder)
        # The first run's telemetry had GPM ("nvml+gpm"): an H200's points wait for whole GPM pairs.
        return cls(first, min_point_window_s(True, FLAGS["telemetry_interval_s"].default))

    def point_s(self, spec) -> float:
        """One sweep point.  The first run's points all stopped at their floor (timed phases: median 0.255 s
        against 0.25 s; an H200 converges well inside it), so a point now lasts what it did then with the floor's
        difference added.  Kinds that run never timed take the nearest it did: CuPy's cuBLAS points its own GEMV
        kernel's figure, grouped GEMMs and the weight and block formats torch's bf16 GEMM (plus the host check)."""
        measured = self.first.point_s
        if (spec.op, spec.backend) in measured:
            base = measured[(spec.op, spec.backend)]
        elif spec.backend == "cupy":
            base = measured[("gemv", "cupy")]
        else:
            base = measured[("gemm", "torch")]
        seconds = base + self.floor_s - self.first.floor_s
        if spec.op == "grouped":
            seconds += grouped_host_bytes(spec) / ASSUMED_HOST_BYTES_PER_S
        return seconds

    def sweep_s(self, points) -> float:
        """A sweep process: its start, its points, and a Triton compile per new w8a16 launch configuration."""
        compiles = {(p.n, p.k, _w8a16_config(p.batch)) for p in points if p.dtype == "w8a16"}
        return self.first.startup_s + sum(self.point_s(p) for p in points) + len(compiles) * ASSUMED_TRITON_COMPILE_S

    def ceilings_s(self, dtypes: Sequence[str], quick: bool, backends: Sequence[str]) -> float:
        """`gpubench ceilings`: its stream kernels and peak-shape measurements at the first run's cost each (with
        the floor's difference), and the burst/sustained run per dtype added since (idle, then the run)."""
        from microbench.points.plan import PointSpec
        from microbench.sweep.peaks import GPU_PEAK_SHAPES, GPU_QUICK_PEAK_SHAPES, GPU_REGIMES_S
        from microbench.timing.cupy_backend import support_problem

        shapes = GPU_QUICK_PEAK_SHAPES if quick else GPU_PEAK_SHAPES
        # torch's copy and read; CuPy adds its five STREAM kernels.
        measurements = 2 + (5 if "cupy" in backends else 0)
        for dtype in dtypes:
            for m, n, k in shapes:
                measurements += 1
                if "cupy" in backends and support_problem(PointSpec("gemm", dtype, m, n, k, "cupy")) is None:
                    measurements += 1
        idle_s, _, run_s = GPU_REGIMES_S
        per = self.first.ceilings_measurement_s + self.floor_s - self.first.floor_s
        return self.first.startup_s + measurements * per + len(dtypes) * (idle_s + run_s)

    @functools.cached_property
    def quick_sweep_s(self) -> float:
        """`gpubench sweep --device cuda --quick` (bench runs it; so does a GPU test): its ceilings and its points."""
        from microbench.points.plan import CEILING_DTYPES

        config = sweep_config(["--device", "cuda", "--quick"])
        ceilings = self.ceilings_s(CEILING_DTYPES["cuda"], True, ("torch",)) - self.first.startup_s
        return self.sweep_s(config.points("cuda")) + ceilings

    def launches_s(self, count: int) -> float:
        """A process timing ``count`` kernels without telemetry (decode, the profile)."""
        return self.first.startup_s + count * self.first.per_launch_s


@functools.lru_cache(maxsize=8)
def decode_launches(model: str, batches: tuple[int, ...]) -> int:
    from microbench.decode.launches import needed_launches
    from roofline.decode.step import DecodeSetup
    from roofline.specs.models import load_model
    from roofline.step.launches import StepModel

    step = StepModel.of(load_model(model), 1, 1, "bf16", "bf16", "balanced")
    return len(needed_launches(DecodeSetup(step, 4096), list(batches)))


@functools.lru_cache(maxsize=8)
def profile_items(**plan) -> int:
    from microbench.serving.profile_plan import ProfilePlan, plan_items

    profile = ProfilePlan(**plan)
    return len(plan_items(profile, profile.check()))


@functools.lru_cache(maxsize=8)
def gpu_test_items(path: Path) -> dict[str, int]:
    """Each `-m gpu` test function of a file and how many items it collects (its parametrize lists multiplied),
    read with ast: no import, no collection."""
    tree = ast.parse(path.read_text())
    module_gpu = any(isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)
                     and "gpu" in ast.unparse(node.value) for node in tree.body)
    items = {}
    for node in tree.body:
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
            continue
        marks = [ast.unparse(d) for d in node.decorator_list]
        if not (module_gpu or any(mark.endswith("mark.gpu") for mark in marks)):
            continue
        count = 1
        for decorator in node.decorator_list:
            if isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith("parametrize"):
                values = decorator.args[1] if len(decorator.args) > 1 else None
                if isinstance(values, ast.List | ast.Tuple):
                    count *= len(values.elts)
        items[node.name] = count
    return items


# --- the steps ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    name: str  # at most 10 characters: the step table's column
    what: str
    argv: tuple[str, ...]  # on the GPU; "OUT/..." is the output folder
    cpu_argv: tuple[str, ...] | None  # a CPU dry run's; None: not run on a CPU (cpu_note says why)
    points: int | None
    estimate_s: float
    basis: str
    cpu_timeout_s: int
    part: str = "before"  # before (the serving check) | serving | graphs
    cpu_note: str = ""
    parts: tuple[Step, ...] = ()  # the serving check's own steps

    @property
    def timeout_s(self) -> int:
        if self.parts:
            return sum(p.timeout_s for p in self.parts) + SERVING_MARGIN_S
        return max(MIN_TIMEOUT_S, math.ceil(HEADROOM * self.estimate_s + MARGIN_S))


@dataclass(frozen=True)
class Choices:
    """How much of each trimmable step the default check runs (the first of each is the whole step)."""

    gpu_tests: bool = True
    gpu_tests_left_out: tuple[str, ...] = ()  # test functions deselected
    sweep_backends: str = "torch,cupy"
    sweep_batches: str = "1:512:x2"
    sweep_shapes: str | None = None  # None: the three default shapes
    sweep: bool = True
    moe_batches: str = "1,4,16,64,256"
    formats_batches: str = "1:512:x2"
    ceilings: str = "full"  # full | quick | bf16
    decode: bool = True
    bench: bool = True


# The default check's trims, in the order they are made until the check fits: first what another step measures
# too, then more of the same code paths on other shapes and batches, and the GPU-only code paths that nothing else
# runs (the GPU tests, one shape of each kind) last.
TRIMS: tuple[tuple[str, dict], ...] = (
    ("bench: left out (its quick sweep is gpu-tests' too; the steps above time every kernel it times)",
     {"bench": False}),
    ("gpu-tests: without the quick-sweep test (the sweep steps run that command, on more points)",
     {"gpu_tests_left_out": (QUICK_SWEEP_TEST,)}),
    ("gpu-tests: without the graphs-mode compile test (inductor's cold compiles, a minute by assumption)",
     {"gpu_tests_left_out": (COMPILE_TEST,)}),
    ("sweep: torch only (the CuPy tests check CuPy's kernels and its eager cuBLAS timing)",
     {"sweep_backends": "torch"}),
    (f"sweep: one shape ({FORMAT_SHAPE}; the formats step measures the same)", {"sweep_shapes": FORMAT_SHAPE}),
    ("sweep: batches 1,4,16,64,256", {"sweep_batches": "1,4,16,64,256"}),
    ("moe: 1 and 256 tokens only", {"moe_batches": "1,256"}),
    ("ceilings: --quick (two peak shapes instead of four)", {"ceilings": "quick"}),
    ("formats: batches 1,16,128,512", {"formats_batches": "1,16,128,512"}),
    ("gpu-tests: without the energy-profile test", {"gpu_tests_left_out": (ENERGY_TEST,)}),
    ("ceilings: bf16 only, --quick", {"ceilings": "bf16"}),
    ("gpu-tests: left out", {"gpu_tests": False}),
    ("sweep: left out (the formats step keeps bf16 on one shape)", {"sweep": False}),
    ("decode: left out", {"decode": False}),
)

def trimmed(choices: Choices, change: dict) -> Choices:
    """``choices`` with one trim made: the tests it leaves out join those already left out."""
    if "gpu_tests_left_out" in change:
        change = {**change, "gpu_tests_left_out": tuple(dict.fromkeys(
            choices.gpu_tests_left_out + change["gpu_tests_left_out"]))}
    return replace(choices, **change)


# CPU timeouts: the H200 check's fixed limits three times over, as before the plan (a shared 2-core machine runs
# these minutes slower); the serving check's CPU run (tiny model, 5 repeats) gets 20 minutes.
CPU_TIMEOUT_S = {"env": 60, "devices": 60, "cupy-tests": 540, "gpu-tests": 540, "ceilings": 450, "sweep": 720,
                 "moe": 360, "formats": 360, "fp8-block": 180, "report": 180, "fmt-report": 180, "decode": 270,
                 "bench": 270, "serving": 1200}
DRY = ("--budget", "0.05")
CPU_BATCHES = "1:64:x4"


def _sweep_step(costs: Costs, name: str, what: str, argv: list[str], cpu_argv: tuple[str, ...] | None,
                **extra) -> Step:
    points = sweep_config(argv[argv.index("sweep") + 1:]).points("cuda")
    kinds: dict[str, int] = {}
    for p in points:
        key = f"{p.op} {p.dtype}{' cupy' if p.backend == 'cupy' else ''}"
        kinds[key] = kinds.get(key, 0) + 1
    shown = ", ".join(f"{n} {key}" for key, n in kinds.items())
    return Step(name, what, tuple(argv), cpu_argv, len(points), costs.sweep_s(points),
                f"first run's points ({shown}) + floor {costs.floor_s:g} s", CPU_TIMEOUT_S[name], **extra)


def _tests_step(costs: Costs, name: str, deselect: Sequence[str]) -> Step:
    items = {test: n for test, n in gpu_test_items(ROOT / TEST_FILES[name]).items() if test not in deselect}
    first = costs.first
    per = first.per_test_s
    seconds = first.startup_s
    heavy = []
    for test, n in items.items():
        if test == COMPILE_TEST:
            seconds += ASSUMED_COMPILE_TEST_S
            heavy.append(f"compile ASSUMED {ASSUMED_COMPILE_TEST_S:g} s")
        elif test == QUICK_SWEEP_TEST:
            quick = costs.quick_sweep_s - first.startup_s
            seconds += quick
            heavy.append(f"quick sweep {quick:.0f} s")
        elif test == CEILINGS_TEST:
            ceilings = costs.ceilings_s(["bf16"], True, ("torch",)) - first.startup_s
            seconds += ceilings
            heavy.append(f"ceilings {ceilings:.0f} s")
        elif test == ENERGY_TEST:
            kernels = profile_items(model=None, hf_config=str(ROOT / "tests/data/tiny-llama-config.json"),
                                    max_tokens=16, max_context=64, max_batch=4, budget_s=0.05, energy=True)
            energy = kernels * (first.per_launch_s + costs.floor_s)
            seconds += energy
            heavy.append(f"energy profile {kernels} kernels {energy:.0f} s")
        else:
            seconds += n * per
    argv = ["python3", "-m", "pytest", "-m", "gpu", "-q", "-rs", TEST_FILES[name]]
    if deselect:
        argv += ["-k", " and ".join(f"not {test}" for test in deselect)]
    count = sum(items.values())
    basis = f"first run's {per:.2f} s per test" + (f"; {', '.join(heavy)}" if heavy else "")
    return Step(name, f"pytest -m gpu {TEST_FILES[name]}", tuple(argv), tuple(argv), count, seconds, basis,
                CPU_TIMEOUT_S[name])


def _serving_step(costs: Costs, graphs: bool) -> Step:
    kernels = profile_items(model="llama-3-8b", hf_config=None, dtype="bf16", max_tokens=8192, max_context=768,
                            max_batch=64, budget_s=0.1, device="cuda")
    profile = Step("profile", "gpubench profile llama-3-8b (bf16, 8192 tokens, context 768)", (), None, kernels,
                   costs.launches_s(kernels), f"first run's decode: {costs.first.per_launch_s:.3f} s per launch",
                   0, part="serving")
    validate = Step("validate", "gpubench validate --engine transformers --engine-mode eager", (), None, None,
                    ASSUMED_VALIDATE_S, "ASSUMED (no H200 run yet): ~2,000 eager steps at ~30 ms + model build", 0,
                    part="serving")
    parts = [profile, validate]
    if graphs:
        parts.append(Step("graphs", "validate --engine-mode graphs", (), None, None, ASSUMED_GRAPHS_S,
                          "ASSUMED (no H200 run yet): 2-4 minutes with compiles", 0, part="graphs"))
    return Step("serving", "scripts/serving_check.sh: " + " + ".join(p.name for p in parts),
                ("scripts/serving_check.sh", "OUT/serving"), ("scripts/serving_check.sh", "OUT/serving"), None,
                sum(p.estimate_s for p in parts), "its steps below", CPU_TIMEOUT_S["serving"], part="serving",
                parts=tuple(parts))


def _env_step(costs: Costs) -> Step:
    command = ("bash", "-c", "nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,power.limit,"
               "driver_version --format=csv 2>&1; python3 -c \"import torch; print('torch', torch.__version__, "
               "'cuda', torch.version.cuda)\"")
    return Step("env", "nvidia-smi and torch's versions", command, command, None, costs.first.step_s["env"],
                "first run's step", CPU_TIMEOUT_S["env"])


def default_steps(costs: Costs, choices: Choices) -> list[Step]:
    first = costs.first
    steps = [
        _env_step(costs),
        Step("devices", "gpubench devices", ("python3", "-m", "microbench.cli", "devices"),
             ("python3", "-m", "microbench.cli", "devices"), None, first.step_s["devices"], "first run's step",
             CPU_TIMEOUT_S["devices"]),
        _tests_step(costs, "cupy-tests", ()),
    ]
    # What the issue asks of the first run first (the formats, the grouped GEMMs, fp8-block): if the steps before
    # run long, the last ones are cut.
    steps += [_formats_step(costs, "gemv,gemm", choices.formats_batches), _moe_step(costs, choices.moe_batches),
              _fp8_step(costs)]
    # The ceilings: every dtype's peak on both back ends; trimmed to the quick shapes, then to bf16 alone.
    backends = choices.sweep_backends
    ceil_args = ["python3", "-m", "microbench.cli", "ceilings", "--device", "cuda", "--backend", backends]
    dtypes: Sequence[str] = ("fp32", "tf32", "fp16", "bf16", "fp8")
    if choices.ceilings in ("quick", "bf16"):
        ceil_args.append("--quick")
    if choices.ceilings == "bf16":
        ceil_args += ["--dtype", "bf16"]
        dtypes = ("bf16",)
    ceil_args += ["-o", "OUT/ceilings.json"]
    cpu_ceilings = ("python3", "-m", "microbench.cli", "ceilings", "--device", "cpu", "--backend", "torch", *DRY,
                    "--quick", "-o", "OUT/ceilings.json")
    n_ceil = len(dtypes)
    steps.append(Step("ceilings", "gpubench ceilings", tuple(ceil_args), cpu_ceilings, None,
                      costs.ceilings_s(dtypes, choices.ceilings != "full", backends.split(",")),
                      f"first run's {first.ceilings_measurement_s:.2f} s per measurement + floor, "
                      f"{n_ceil} burst/sustained runs", CPU_TIMEOUT_S["ceilings"]))
    if choices.sweep:
        argv = ["python3", "-m", "microbench.cli", "sweep", "--device", "cuda", "--op", "gemv,gemm,bmm",
                "--backend", backends, "--dtype", "bf16", "--batch", choices.sweep_batches]
        if choices.sweep_shapes:
            argv += ["--shape", choices.sweep_shapes]
        argv += ["--no-ceilings", "-o", "OUT/sweep.json"]
        cpu = ("python3", "-m", "microbench.cli", "sweep", "--device", "cpu", "--op", "gemv,gemm,bmm", "--backend",
               "torch", "--dtype", "bf16", "--batch", CPU_BATCHES, *DRY, "--no-ceilings", "-o", "OUT/sweep.json")
        steps.append(_sweep_step(costs, "sweep", "bf16 GEMV/GEMM/BMM on the default shapes", argv, cpu))
    if choices.gpu_tests:
        steps.append(_tests_step(costs, "gpu-tests", choices.gpu_tests_left_out))
    report = first.step_s["report"]
    if choices.sweep:
        steps.append(Step("report", "gpubench report sweep.json",
                          ("python3", "-m", "microbench.cli", "report", "OUT/sweep.json", "-o", "OUT/report"),
                          ("python3", "-m", "microbench.cli", "report", "OUT/sweep.json", "-o", "OUT/report"),
                          None, report, "first run's report step", CPU_TIMEOUT_S["report"]))
    fmt_report = ("python3", "-m", "microbench.cli", "report", "OUT/formats.json", "-o", "OUT/report/formats")
    steps.append(Step("fmt-report", "gpubench report formats.json", fmt_report, fmt_report, None, report,
                      "first run's report step", CPU_TIMEOUT_S["fmt-report"]))
    if choices.decode:
        launches = decode_launches("llama-3-8b", tuple(2**i for i in range(9)))
        steps.append(Step("decode", "gpubench decode llama-3-8b, batches 1-256",
                          ("python3", "-m", "microbench.cli", "decode", "--model", "llama-3-8b", "--batch",
                           "1:256:x2", "--device", "cuda", "-o", "OUT/report/decode"),
                          ("python3", "-m", "microbench.cli", "decode", "--hf-config",
                           "tests/data/tiny-llama-config.json", "--dtype", "fp32", "--budget", "0.02", "--batch",
                           "1:256:x2", "--device", "cpu", "-o", "OUT/report/decode"),
                          launches, costs.launches_s(launches),
                          f"first run's decode: {first.per_launch_s:.3f} s per launch", CPU_TIMEOUT_S["decode"]))
    if choices.bench:
        rest = first.step_s["bench"] - first.quick_sweep_s
        steps.append(Step("bench", "scripts/bench_timer.py (with a quick sweep)",
                          ("python3", "scripts/bench_timer.py", "--device", "cuda", "-o", "OUT/bench.json"),
                          ("python3", "scripts/bench_timer.py", "--device", "cpu", "--budget", "0.5",
                           "-o", "OUT/bench.json"),
                          None, rest + costs.quick_sweep_s,
                          f"first run's bench less its quick sweep ({rest:.0f} s) + a quick sweep now",
                          CPU_TIMEOUT_S["bench"]))
    return steps


def _moe_step(costs: Costs, batches: str) -> Step:
    """Grouped GEMMs of the GPU's default expert sets (Mixtral: 8 of 14336x4096, top-2; Qwen3-30B-A3B: 128 of
    768x2048, top-8); at 1 token most experts get none."""
    argv = ["python3", "-m", "microbench.cli", "sweep", "--device", "cuda", "--op", "grouped", "--dtype", "bf16",
            "--batch", batches, "--routing", MOE_ROUTING, "--no-ceilings", "-o", "OUT/moe.json"]
    cpu = ("python3", "-m", "microbench.cli", "sweep", "--device", "cpu", "--op", "grouped", "--dtype", "bf16",
           "--batch", batches, "--routing", MOE_ROUTING, *DRY, "--no-ceilings", "-o", "OUT/moe.json")
    step = _sweep_step(costs, "moe", "grouped bf16: Mixtral and Qwen3-30B-A3B experts", argv, cpu)
    return replace(step, basis=step.basis + f", host check ASSUMED {ASSUMED_HOST_BYTES_PER_S / 1e9:g} GB/s")


def _formats_step(costs: Costs, ops: str, batches: str) -> Step:
    argv = ["python3", "-m", "microbench.cli", "sweep", "--device", "cuda", "--dtype", "bf16,w8a16,w4a16", "--op",
            ops, "--shape", FORMAT_SHAPE, "--batch", batches, "--no-ceilings", "-o", "OUT/formats.json"]
    # The CPU's default shape: 4096x14336's weights in three formats are minutes on two cores.
    cpu = ("python3", "-m", "microbench.cli", "sweep", "--device", "cpu", "--dtype", "bf16,w8a16,w4a16", "--op", ops,
           "--shape", "2048x4096", "--batch", CPU_BATCHES, *DRY, "--no-ceilings", "-o", "OUT/formats.json")
    step = _sweep_step(costs, "formats", f"w8a16 and w4a16 against bf16 on {FORMAT_SHAPE}", argv, cpu)
    return replace(step, basis=step.basis + f", Triton compiles ASSUMED {ASSUMED_TRITON_COMPILE_S:g} s each")


def _fp8_step(costs: Costs) -> Step:
    argv = ["python3", "-m", "microbench.cli", "sweep", "--device", "cuda", "--dtype", "fp8-block", "--op", "gemm",
            "--shape", FORMAT_SHAPE, "--batch", "16", "--no-ceilings", "-o", "OUT/fp8-block.json"]
    return _sweep_step(costs, "fp8-block", f"one fp8-block GEMM, {FORMAT_SHAPE} at batch 16", argv, None,
                       cpu_note="a CPU has no fp8-block kernel (a sweep of nothing it can run is refused)")


def quick_steps(costs: Costs) -> list[Step]:
    """--quick: the five checks that matter most, and the versions (env)."""
    return [_env_step(costs), _formats_step(costs, "gemm", "1,16,128,512"), _moe_step(costs, "1,256"),
            _tests_step(costs, "cupy-tests", ()), _fp8_step(costs)]


@dataclass(frozen=True)
class Plan:
    mode: str
    budget_s: int
    steps: tuple[Step, ...]  # the serving check last
    trims: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def before(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.part == "before")

    @property
    def serving(self) -> Step:
        return self.steps[-1]

    @property
    def before_s(self) -> float:
        return sum(s.estimate_s for s in self.before)

    @property
    def serving_deadline_s(self) -> int:
        """Seconds after the start by which every earlier step must have ended: the serving check's timeouts whole."""
        return self.budget_s - SLACK_S - self.serving.timeout_s

    @property
    def expected_s(self) -> float:
        return PLAN_S + self.before_s + self.serving.estimate_s + SLACK_S

    def table(self, device: str = "cuda") -> str:
        cpu = device == "cpu"
        head = f"{'step':<11}{'points':>7}{'expected':>10}{'timeout':>9}" + (f"{'cpu limit':>11}" if cpu else "")
        lines = [f"--- time plan on an H200 ({self.mode}, budget {self.budget_s} s; figures from the first H200 "
                 "run's fixtures, tests/data/h200/) ---", head + "  basis"]

        def row(step: Step, indent: str = "") -> str:
            points = "-" if step.points is None else str(step.points)
            limit = ""
            if cpu:
                limit = "" if indent else f"{step.cpu_timeout_s}s" if step.cpu_argv is not None else "not run"
                limit = f"{limit:>11}"
            return (f"{indent + step.name:<11}{points:>7}{step.estimate_s:>9.0f}s{step.timeout_s:>8}s{limit}"
                    f"  {step.basis}")

        for step in self.steps:
            lines.append(row(step))
            for part in step.parts:
                lines.append(row(part, "  "))
        for trim in self.trims:
            lines.append(f"trimmed: {trim}")
        lines += list(self.notes)
        lines.append(f"expected {self.expected_s:.0f} s of {self.budget_s} s: {self.before_s:.0f} s before the serving "
                     f"check, which starts by {self.serving_deadline_s} s at the latest (each earlier step's timeout "
                     f"is cut to what is left before then) with its {self.serving.timeout_s} s of timeouts whole")
        if cpu:
            lines.append("a CPU dry run: these steps with CPU arguments and the CPU limits above; not timed against "
                         "the budget")
        return "\n".join(lines)

    def shell(self, device: str = "cuda") -> str:
        """The plan as bash for gpu_check.sh to source: one command array per step, its timeout and estimate."""
        cpu = device == "cpu"

        def words(argv: Sequence[str]) -> str:
            """Shell words: OUT/... in the output folder, the device the script was given after --device."""
            said = []
            for before, token in zip(("", *argv), argv, strict=False):
                if token.startswith("OUT/"):
                    said.append('"$OUT"/' + shlex.quote(token[4:]))
                elif before == "--device":
                    said.append('"$DEVICE"')
                else:
                    said.append(shlex.quote(token))
            return " ".join(said)

        names, timeouts, estimates, notes = [], [], [], []
        lines = []
        for i, step in enumerate(self.steps):
            names.append(step.name)
            argv = step.cpu_argv if cpu else step.argv
            timeouts.append(str(step.cpu_timeout_s if cpu else step.timeout_s))
            estimates.append(str(math.ceil(step.estimate_s)))
            notes.append(shlex.quote("" if argv is not None else step.cpu_note))
            lines.append(f"PLAN_CMD_{i}=({words(argv or ())})")
        serving = self.serving
        parts = {p.name: p for p in serving.parts}
        lines += [
            f"PLAN_NAMES=({' '.join(names)})",
            f"PLAN_TIMEOUTS=({' '.join(timeouts)})",
            f"PLAN_ESTIMATES=({' '.join(estimates)})",
            f"PLAN_NOTES=({' '.join(notes)})",
            f"PLAN_BUDGET_S={self.budget_s}",
            f"PLAN_SLACK_S={SLACK_S}",
            f"PLAN_SERVING_DEADLINE_S={self.serving_deadline_s}",
            f"PLAN_PROFILE_TIMEOUT_S={parts['profile'].timeout_s}",
            f"PLAN_VALIDATE_TIMEOUT_S={parts['validate'].timeout_s}",
            f"PLAN_GRAPHS={1 if 'graphs' in parts else 0}",
            f"PLAN_GRAPHS_TIMEOUT_S={parts['graphs'].timeout_s if 'graphs' in parts else 0}",
        ]
        return "\n".join(lines) + "\n"


def fits(steps: Sequence[Step], serving: Step, budget_s: int) -> bool:
    """The steps before the serving check expected to end, with a tenth to spare, before its reservation (its
    timeouts and the slack)."""
    return PLAN_S + sum(s.estimate_s for s in steps) / BEFORE_SHARE + serving.timeout_s + SLACK_S <= budget_s


def make_plan(mode: str = "default", cupy: bool = True, folder: Path = FIXTURES) -> Plan:
    """The check's steps, trimmed to fit ``BUDGET_S[mode]``.  ``cupy``: whether CuPy is installed where it runs
    (without it the sweep and the ceilings are torch alone, and the CuPy tests skip)."""
    costs = Costs.now(folder)
    budget = BUDGET_S[mode]
    notes: list[str] = []
    choices = Choices() if cupy else Choices(sweep_backends="torch")
    if not cupy:
        notes.append("CuPy is not installed here: the sweep and the ceilings run on torch alone")
    trims: list[str] = []
    serving = _serving_step(costs, graphs=False)
    if mode == "quick":
        steps = quick_steps(costs)
        trims.append("not in --quick: ceilings, the dense sweep, the GPU tests, reports, decode, bench, the graphs "
                     "validate")
    else:
        start = choices
        applied: list[tuple[str, dict]] = []
        steps = default_steps(costs, choices)
        for label, change in TRIMS:
            if fits(steps, serving, budget):
                break
            if trimmed(choices, change) == choices:
                continue  # already so (no CuPy: the sweep was torch alone from the start)
            choices = trimmed(choices, change)
            applied.append((label, change))
            steps = default_steps(costs, choices)
        # A later trim may have made an earlier one needless: give back, the most valuable first, each that still fits.
        for undo in reversed(applied[:-1]):
            kept = [trim for trim in applied if trim is not undo]
            trial = start
            for _, change in kept:
                trial = trimmed(trial, change)
            trial_steps = default_steps(costs, trial)
            if fits(trial_steps, serving, budget):
                applied, choices, steps = kept, trial, trial_steps
        trims += [label for label, _ in applied]
        with_graphs = _serving_step(costs, graphs=True)
        if fits(steps, with_graphs, budget):
            serving = with_graphs
        else:
            trims.append(f"graphs validate: not planned (its {with_graphs.parts[-1].timeout_s} s timeout does not fit "
                         f"after the rest)")
    if not fits(steps, serving, budget):
        need = PLAN_S + sum(s.estimate_s for s in steps) / BEFORE_SHARE + serving.timeout_s + SLACK_S
        raise PlanError(f"the {mode} check does not fit {budget} s even trimmed: it needs {need:.0f} s")
    return Plan(mode, budget, tuple(steps) + (serving,), tuple(trims), tuple(notes))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the five-minute check")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="where the steps run: cpu writes a dry run's commands and limits")
    parser.add_argument("--shell", type=Path, help="write the plan as bash arrays here")
    parser.add_argument("--cupy", choices=("auto", "yes", "no"), default="auto",
                        help="plan with the CuPy back end: auto (on cuda, if it is installed here; a CPU dry run plans "
                             "as the H200 has it: with)")
    args = parser.parse_args(argv)
    if args.cupy == "auto":
        cupy = args.device == "cpu" or importlib.util.find_spec("cupy") is not None
    else:
        cupy = args.cupy == "yes"
    try:
        plan = make_plan("quick" if args.quick else "default", cupy=cupy)
    except PlanError as exc:
        print(f"gpu_check_plan: {exc}", file=sys.stderr)
        return 2
    print(plan.table(args.device))
    if args.shell:
        args.shell.write_text(plan.shell(args.device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
