"""What a sweep is asked to do: one ``SweepConfig``, built from the command's options and validated once,
before torch (or anything else heavy) is imported.

Everything that can be checked without a device is checked here, on construction, with the flag's real
name in the message: the choices (op, dtype, backend, timer, L2 policy, device syntax), shapes and batches,
gemv being batch 1, budget / target / telemetry interval finite and in range (what ``StoppingRule`` would
otherwise refuse later), ``--max-memory``, and the ``--resume`` / ``--force`` / ``-o`` combination.  What
needs the device (does a shape fit, is it busy, does the memory cap leave any point) is checked when the
session opens.  ``FLAGS`` declares each option once (its flag, default and help; ``CEILINGS_FLAGS`` the ones
``gpubench ceilings`` takes), and each field's default is its row's.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from microbench.points import plan
from roofline.core.counting import DTYPES, MATMUL_OPS, OPS, STATE_KINDS, MixerShape
from roofline.core.errors import BadInputError
from roofline.core.options import Option, check_seed

TIMERS = ("graph", "eager")
# No model routes over more experts per layer than this (Kimi K2: 384); a bigger number is a typo.
MAX_EXPERTS = 4096
L2_POLICIES = ("rotate", "warm")
DEVICE_SYNTAX = re.compile(r"auto|cpu|cuda(?::\d+)?|all")


def _listed(values) -> str:
    return ",".join(str(value) for value in values)


def _shapes_text(shapes) -> str:
    return _listed(f"{n}x{k}" for n, k in shapes)


def _expert_text(experts: plan.ExpertSet) -> str:
    return f"{experts.experts} of {experts.n}x{experts.k} top-{experts.topk}"


def _mixer_text(defaults: plan.Defaults, op: str) -> str:
    return " + ".join(f"{s.n}x{s.k} {s.mixer.tag}" for s in defaults.mixer_series if s.mixer.op == op)


def per_device(describe: Callable[[plan.Defaults], str]) -> str:
    """What a device's default is, read from ``plan.defaults_for`` (the one place they live): ``GPU: bf16,w8a16
    (--quick: bf16); CPU: fp32`` (said once where GPU and CPU agree, and --quick once where it agrees)."""
    said = {}
    for label, kind in (("GPU", "cuda"), ("CPU", "cpu")):
        full, quick = describe(plan.defaults_for(kind, False)), describe(plan.defaults_for(kind, True))
        said[label] = full if quick == full else f"{full} (--quick: {quick})"
    return said["GPU"] if said["GPU"] == said["CPU"] else "; ".join(f"{label}: {text}" for label, text in said.items())


# SweepConfig field -> its option: the flag(s) that set it, its default (the field's) and its help.  The CLI
# declares its options from here, under the field's name, so messages, the resume check, -h and the config's
# defaults cannot drift apart.  Text options are parsed by ``PARSERS`` below, with the flag in each message.
FLAGS: dict[str, Option] = {
    "device": Option(("--device",), default="auto", show_default=True,
                     help="auto | cpu | cuda | cuda:N | all (one process per GPU, one result each in the -o folder)"),
    "ops": Option(("--op",), default=MATMUL_OPS, multiple=True,
                  help=f"{', '.join(OPS)} (repeatable or comma list) [{','.join(MATMUL_OPS)}]"),
    "backends": Option(("--backend",), default=("torch",), multiple=True,
                       help="torch, cupy (our kernels + cuBLAS via CuPy), or both: torch,cupy [torch]"),
    "dtypes": Option(("--dtype",), multiple=True,
                     help=f"{', '.join(DTYPES)} (repeatable or comma list) "
                          f"[{per_device(lambda d: _listed(d.dtypes))}]"),
    "shapes": Option(("--shape",), multiple=True,
                     help="weight NxK, e.g. 8192x28672 (repeatable; grouped: one expert's) "
                          f"[{per_device(lambda d: _shapes_text(d.shapes))}]"),
    "experts": Option(("--experts",), metavar="E",
                      help="grouped: experts per --shape (with --topk) [the device's expert sets: "
                           f"{per_device(lambda d: ' + '.join(_expert_text(e) for e in d.expert_sets))}]"),
    "topk": Option(("--topk",), metavar="K", help="grouped: experts each token is routed to"),
    "routing": Option(("--routing",), default="balanced", show_default=True,
                      metavar="balanced|uniform|zipf:S|power-law:ALPHA",
                      help="grouped: how tokens spread over experts"),
    "mixer": Option(("--mixer",), metavar="|".join(STATE_KINDS),
                    help="state_update: the recurrent mixer, each --shape its value x key head size (mamba2: head "
                         "size x state size), with --heads and --groups [the device's: "
                         f"{per_device(lambda d: _mixer_text(d, 'state_update'))}]"),
    "heads": Option(("--heads",), metavar="H",
                    help="state_update: value heads (mamba2: heads); sparse_attention: the latent attention's heads"),
    "groups": Option(("--groups",), metavar="G", help="state_update: key heads (mamba2: groups sharing B and C)"),
    "conv_kernel": Option(("--conv-kernel",), "int", 4, show_default=True, metavar="K",
                          help="state_update: the short convolution's width"),
    "rope": Option(("--rope",), "int", 64, show_default=True, metavar="R",
                   help="sparse_attention: rope dims beside the latent"),
    "index_heads": Option(("--index-heads",), metavar="H",
                          help="sparse_attention: the indexer's heads, with --index-dim, --index-topk and --heads; "
                               "each --shape its context x latent [the device's: "
                               f"{per_device(lambda d: _mixer_text(d, 'sparse_attention'))}]"),
    "index_dim": Option(("--index-dim",), metavar="D", help="sparse_attention: the indexer's head size"),
    "index_topk": Option(("--index-topk",), metavar="K", help="sparse_attention: keys each query attends"),
    "batches": Option(("--batch",), help="list and ranges: 1,2,24 or 1:4096:x2 "
                                         f"[{per_device(lambda d: _listed(d.batches))}]"),
    "budget_s": Option(("--budget",), metavar="SECONDS",
                       help=f"seconds of sampling per point [{per_device(lambda d: f'{d.budget_s:g}')}]"),
    "target_rel_ci": Option(("--target-ci",), metavar="FRACTION",
                            help="stop when the 95% CI of the median is within this fraction "
                                 f"[{per_device(lambda d: f'{d.target_rel_ci:g}')}]"),
    "seed": Option(("--seed",), "int", 0, show_default=True),
    "output": Option(("-o", "--output"), "path", help="result file [results/<sku or cpu>-<UTC time>.json]"),
    "quick": Option(("--quick",), "flag", help="a small plan: under 30 s on a 2-core CPU"),
    "timer": Option(("--timer",), default="graph", show_default=True, metavar="[" + "|".join(TIMERS) + "]",
                    help="GPU timer: graph (a CUDA graph of rotated launches) or eager (one launch per event pair)"),
    "l2_policy": Option(("--l2",), default="rotate", show_default=True, metavar="[" + "|".join(L2_POLICIES) + "]",
                        help="rotate (weight copies so every launch reads DRAM) or warm (reuse one copy: cache-warm)"),
    "with_ceilings": Option(("--no-ceilings",), "off", True,
                            help="skip measuring copy/read bandwidth and matmul peak"),
    "report": Option(("--report",), "flag", help="write the report folder beside the result at the end"),
    "telemetry_interval_s": Option(("--telemetry-interval",), default=0.05, show_default=True, metavar="SECONDS",
                                   help="seconds between NVML readings"),
    "telemetry": Option(("--no-telemetry",), "off", True, help="do not sample NVML while measuring"),
    "max_memory_bytes": Option(("--max-memory",), metavar="SIZE",
                               help="cap on what the sweep allocates: 8G, 512Mi, bytes"),
    "require_idle": Option(("--require-idle",), "flag", help="refuse to start (exit 2) when the device is busy"),
    "resume": Option(("--resume",), "path", help="continue the plan recorded in this result file, skipping its points"),
    "force": Option(("--force",), "flag",
                    help="replace an existing -o result; with --resume: resume even if the device or settings differ"),
    "serial": Option(("--serial",), "flag", help="with --device all: one GPU at a time instead of in parallel"),
    "record": Option(("--record",), hidden=True, help="the plan as JSON (how --device all starts each child)"),
}
# gpubench ceilings: the sweep's options that say where and how long to measure, each meaning there what it says.
CEILINGS_FLAGS: dict[str, Option] = {
    "device": replace(FLAGS["device"], help="auto | cpu | cuda | cuda:N"),
    "dtypes": replace(FLAGS["dtypes"], help="dtypes for the matmul peak [GPU: {}; CPU: {}]".format(
        *(_listed(plan.CEILING_DTYPES[kind]) for kind in ("cuda", "cpu")))),
    "backends": replace(FLAGS["backends"], help="torch, cupy or torch,cupy [torch]"),
    "quick": replace(FLAGS["quick"], help="fewer matmul shapes"),
    "budget_s": replace(FLAGS["budget_s"], help="seconds of sampling per measurement "
                                                f"[{per_device(lambda d: f'{d.budget_s:g}')}]"),
    "output": replace(FLAGS["output"], help="also save as a result file"),
    "force": replace(FLAGS["force"], help="replace an existing -o file"),
}
# The plan-defining fields, stored in the result (settings.config) so --resume can rebuild the same sweep.
PLAN_FIELDS = ("device", "ops", "backends", "dtypes", "shapes", "batches", "budget_s", "target_rel_ci", "seed",
               "quick", "timer", "l2_policy", "with_ceilings", "telemetry", "telemetry_interval_s", "max_memory_bytes",
               "experts", "topk", "routing", "mixer", "heads", "groups", "conv_kernel", "rope", "index_heads",
               "index_dim", "index_topk")
# What a per-GPU child of --device all takes from its parent's record: the plan and how to run it.
CHILD_FIELDS = PLAN_FIELDS + ("require_idle", "report")


class ConfigError(plan.PlanError):
    """Options that do not make a sweep: one line naming the flag, exit 2."""


def flag(field: str) -> str:
    """The flag as a person types it (the long spelling)."""
    return FLAGS[field].spelled


@dataclass(frozen=True)
class SweepConfig:
    device: str = FLAGS["device"].default
    ops: tuple[str, ...] = FLAGS["ops"].default
    backends: tuple[str, ...] = FLAGS["backends"].default
    dtypes: tuple[str, ...] | None = FLAGS["dtypes"].default
    shapes: tuple[tuple[int, int], ...] | None = FLAGS["shapes"].default
    batches: tuple[int, ...] | None = FLAGS["batches"].default
    # None: the device's default (plan.defaults_for)
    budget_s: float | None = FLAGS["budget_s"].default
    target_rel_ci: float | None = FLAGS["target_rel_ci"].default
    seed: int = FLAGS["seed"].default
    quick: bool = FLAGS["quick"].default
    timer: str = FLAGS["timer"].default  # graph | eager (GPU); the CPU always uses perf_counter
    l2_policy: str = FLAGS["l2_policy"].default  # rotate | warm
    output: Path | None = FLAGS["output"].default
    with_ceilings: bool = FLAGS["with_ceilings"].default
    telemetry: bool = FLAGS["telemetry"].default
    telemetry_interval_s: float = FLAGS["telemetry_interval_s"].default
    max_memory_bytes: int | None = FLAGS["max_memory_bytes"].default
    require_idle: bool = FLAGS["require_idle"].default
    save: bool = True  # False: keep the result in memory unless an output is named (gpubench ceilings)
    argv: tuple[str, ...] = ()
    report: bool = FLAGS["report"].default  # write the report folder beside the result at the end
    # continue the plan recorded in this file (the plan fields are then its own)
    resume: Path | None = FLAGS["resume"].default
    force: bool = FLAGS["force"].default  # replace an existing output; with resume: resume over other settings
    serial: bool = FLAGS["serial"].default  # --device all: one GPU at a time
    experts: int | None = FLAGS["experts"].default  # grouped: experts per --shape (None: the device's expert sets)
    topk: int | None = FLAGS["topk"].default
    routing: str = FLAGS["routing"].default
    mixer: str | None = FLAGS["mixer"].default  # state_update: gdn | mamba2 on each --shape (None: the device's)
    heads: int | None = FLAGS["heads"].default
    groups: int | None = FLAGS["groups"].default
    conv_kernel: int = FLAGS["conv_kernel"].default
    rope: int = FLAGS["rope"].default
    index_heads: int | None = FLAGS["index_heads"].default  # sparse_attention on each --shape (None: the device's)
    index_dim: int | None = FLAGS["index_dim"].default
    index_topk: int | None = FLAGS["index_topk"].default

    def __post_init__(self) -> None:
        if not DEVICE_SYNTAX.fullmatch(self.device.strip().lower()):
            raise ConfigError(f"unknown device {self.device!r}; use auto, cpu, cuda, cuda:N or all")
        _check_choices(self.ops, OPS, "op")
        _check_choices(self.backends, plan.BACKENDS, "backend")
        if not self.backends:
            raise ConfigError("--backend: give at least one of " + ", ".join(plan.BACKENDS))
        _check_choices(self.dtypes or (), DTYPES, "dtype")
        _check_choices((self.timer,), TIMERS, "timer")
        _check_choices((self.l2_policy,), L2_POLICIES, "L2 policy")
        for n, k in self.shapes or ():
            if not (isinstance(n, int) and isinstance(k, int) and n > 0 and k > 0):
                raise ConfigError(f"shape {n}x{k} must have positive dimensions")
        for batch in self.batches or ():
            if not isinstance(batch, int) or not 0 < batch <= plan.MAX_BATCH:
                raise ConfigError(f"--batch {batch}: a batch is an integer from 1 to {plan.MAX_BATCH}")
        if self.batches and set(self.ops) == {"gemv"} and set(self.batches) != {1}:  # it would measure B=1 only
            others = ", ".join(str(b) for b in self.batches if b != 1)
            raise ConfigError(f"gemv is batch 1 by definition: batches {others} need --op gemm (or --op gemv,gemm)")
        try:
            check_seed(self.seed)  # the one seed rule every command shares
        except BadInputError as exc:
            raise ConfigError(str(exc)) from None
        if self.budget_s is not None:
            _check_number(self.budget_s, "budget_s", low=0)
        if self.target_rel_ci is not None:
            _check_number(self.target_rel_ci, "target_rel_ci", low=0, high=1, why="between 0 and 1 (0.01 is 1%)")
        _check_number(self.telemetry_interval_s, "telemetry_interval_s", low=0)
        if self.max_memory_bytes is not None and self.max_memory_bytes <= 0:
            raise ConfigError("--max-memory must be a positive number of bytes")
        if self.force and self.resume is None and self.output is None:
            raise ConfigError("--force only goes with --resume or with -o FILE (to replace it)")
        self._check_grouped()
        self._check_mixers()
        if self.serial and not self.all_devices:  # it would be silently ignored
            raise ConfigError("--serial only goes with --device all (it runs the GPUs one at a time)")
        if self.all_devices and self.output is not None and Path(self.output).suffix == ".json":
            raise ConfigError("--device all writes one result per GPU: give -o a folder, not a .json file")

    def _check_grouped(self) -> None:
        """--experts and --topk go together, with grouped among the ops; --shape then names one expert's matrix."""
        if (self.experts is None) != (self.topk is None):
            raise ConfigError("--experts and --topk go together (E experts, each token routed to K of them)")
        if self.experts is not None and "grouped" not in self.ops:
            raise ConfigError("--experts and --topk describe grouped points: add --op grouped")
        if self.experts is not None and not self.shapes:
            raise ConfigError("--experts needs --shape NxK (one expert's matrix)")
        if self.experts is not None:
            plan.ExpertSet(self.experts, self.topk, 1, 1)  # pyright: ignore[reportArgumentType]
            if self.experts > MAX_EXPERTS:
                raise ConfigError(f"--experts {self.experts}: more than {MAX_EXPERTS} experts per layer")
        from roofline.step.routing import Routing

        try:
            Routing.parse(self.routing)
        except BadInputError as exc:
            raise ConfigError(f"--routing {self.routing}: {exc}") from None
        if self.routing != "balanced" and "grouped" not in self.ops:
            raise ConfigError("--routing spreads a grouped GEMM's tokens: add --op grouped")

    def _check_mixers(self) -> None:
        """--mixer (with --heads, --groups) names state_update's mixer, --index-heads (with --index-dim, --index-topk,
        --heads) sparse_attention's; each needs its op and --shape, and makes a shape every --shape can take."""
        state = {"mixer": self.mixer, "groups": self.groups}
        sparse = {"index_heads": self.index_heads, "index_dim": self.index_dim, "index_topk": self.index_topk}
        for op, fields in (("state_update", state), ("sparse_attention", sparse)):
            given = [flag(name) for name, value in fields.items() if value is not None]
            if given and op not in self.ops:
                raise ConfigError(f"{', '.join(given)} describe {op} points: add --op {op}")
            if given and len(given) < len(fields):
                missing = [flag(name) for name, value in fields.items() if value is None]
                raise ConfigError(f"{', '.join(given)} need {', '.join(missing)} too")
            if given and (self.heads is None or not self.shapes):
                raise ConfigError(f"{given[0]} needs --heads and --shape ({op}'s n x k)")
        if self.heads is not None and self.mixer is None and self.index_heads is None:
            raise ConfigError("--heads goes with --mixer (state_update) or --index-heads (sparse_attention)")
        if self.mixer is not None and self.mixer not in STATE_KINDS:
            raise ConfigError(f"unknown mixer {self.mixer!r}; choose from {', '.join(STATE_KINDS)}")
        try:
            self.mixer_shapes()  # a shape checks itself (heads a multiple of groups, every size positive)
        except ValueError as exc:
            raise ConfigError(f"--heads {self.heads}: {exc}") from None

    def mixer_shapes(self) -> list[MixerShape]:
        """The mixers --mixer and --index-heads name (none: the device's default series, when their op is asked)."""
        shapes = []
        if self.mixer is not None and self.heads is not None:
            shapes.append(MixerShape(self.mixer, self.heads, groups=self.groups, conv_kernel=self.conv_kernel,
                                     state_dtype="fp32"))
        if self.index_heads is not None and self.heads is not None:
            shapes.append(MixerShape("dsa", self.heads, rope=self.rope, index_heads=self.index_heads,
                                     index_dim=self.index_dim, topk=self.index_topk))
        return shapes

    def mixer_series(self, defaults: plan.Defaults) -> tuple[plan.MixerSeries, ...]:
        """The state_update and sparse_attention series: each named mixer on each --shape, else the device's default
        series of each op asked for (beside --shape with no mixer named, none: the shapes are dense ones)."""
        named = self.mixer_shapes()
        series = [plan.MixerSeries(n, k, shape) for shape in named for n, k in self.shapes or ()]
        named_ops = {shape.op for shape in named}
        if not self.shapes:
            series += [s for s in defaults.mixer_series if s.mixer.op in self.ops and s.mixer.op not in named_ops]
        return tuple(series)

    def expert_sets(self, defaults: plan.Defaults) -> tuple[plan.ExpertSet, ...]:
        """The grouped series' experts: --experts/--topk on each --shape, else the device's default sets (beside
        --shape with no --experts, dense shapes only: no grouped series)."""
        if "grouped" not in self.ops:
            return ()
        if self.experts is not None and self.topk is not None:
            return tuple(plan.ExpertSet(self.experts, self.topk, n, k) for n, k in self.shapes or ())
        return () if self.shapes else defaults.expert_sets

    def points(self, kind: str) -> list[plan.PointSpec]:
        """The points this sweep measures on a device of ``kind`` (cuda | cpu): its lists, or the device's defaults
        where it gives none.  No torch: scripts/gpu_check_plan.py counts a check's points with it before it runs."""
        defaults = plan.defaults_for(kind, self.quick)
        return plan.build_plan(
            list(self.ops), list(self.dtypes or defaults.dtypes), list(self.shapes or defaults.shapes),
            list(self.shapes or defaults.bmm_shapes), list(self.batches or defaults.batches), list(self.backends),
            self.expert_sets(defaults), self.routing, self.mixer_series(defaults),
        )

    @property
    def all_devices(self) -> bool:
        return self.device.strip().lower() == "all"

    def to_record(self, fields: tuple[str, ...] = PLAN_FIELDS) -> dict[str, Any]:
        record = asdict(self)
        return {key: record[key] for key in fields}

    @classmethod
    def from_record(cls, record: Mapping[str, Any], **overrides) -> SweepConfig:
        """A config from ``to_record``'s dict (a result's settings.config, or a --device all child's record);
        ``overrides`` win.  Validated like any other: a hand-edited record is input too."""
        def tuples(value, depth):
            if value is None:
                return None
            return tuple(tuple(v) for v in value) if depth == 2 else tuple(value)

        try:
            fields = {key: record[key] for key in CHILD_FIELDS if key in record}
            fields["ops"] = tuples(fields.get("ops", ()), 1)
            fields["backends"] = tuples(fields.get("backends", FLAGS["backends"].default), 1)
            for key, depth in (("dtypes", 1), ("shapes", 2), ("batches", 1)):
                fields[key] = tuples(fields.get(key), depth)
            return cls(**{**fields, **overrides})
        except (TypeError, AttributeError) as exc:  # a value of the wrong kind in a file (a number for a list)
            raise ConfigError(f"the recorded sweep plan is malformed ({exc})") from None

    @classmethod
    def from_options(cls, options: Mapping[str, Any], given: Collection[str] = (), **fixed) -> SweepConfig:
        """The config of one command line.  ``options``: the command's values by field name as click parsed
        them (strings, repeatable options as tuples of comma lists, flags as bools); ``given``: the fields
        typed on the command line (the rest are defaults); ``fixed``: typed values the command sets itself.
        A ``record`` option (JSON of ``to_record(CHILD_FIELDS)``) is how --device all hands its plan to a child.
        """
        options = dict(options)
        record = options.pop("record", None)
        taken = [flag(key) for key in PLAN_FIELDS + ("output",) if key in given]
        if options.get("resume") is not None and taken:
            raise ConfigError(f"--resume takes the plan from {options['resume']}; do not also give "
                              + ", ".join(taken))
        beside_record = [name for name in taken if name not in ("--device", "--output")]
        if record is not None and beside_record:
            raise ConfigError("--record carries the whole plan; do not also give " + ", ".join(beside_record))
        if options.get("force") and options.get("output") is None and "resume" not in options:
            raise ConfigError("--force only goes with -o FILE (to replace it)")  # a command without --resume
        if record is not None:
            overrides = {key: options[key] for key in ("device", "output") if key in options}
            return cls.from_record(_record(record), **overrides, **fixed)
        if options.get("resume") is not None:  # the plan is the file's own (resume.prepare_resume)
            kept = ("resume", "force", "report", "require_idle")
            return cls(**{key: options[key] for key in kept if key in options}, **fixed)
        parsed = {key: PARSERS.get(key, _same)(value, key) for key, value in options.items()}
        return cls(**{key: value for key, value in parsed.items() if value is not _DEFAULT}, **fixed)


def _check_choices(values, allowed: tuple[str, ...], what: str) -> None:
    for value in values:
        if value not in allowed:
            raise ConfigError(f"unknown {what} {value!r}; choose from {', '.join(allowed)}")


def _check_number(value: float, field: str, low: float, high: float | None = None, why: str = "") -> None:
    """Finite and in (low, high): nan and inf are refused here, before anything starts."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{flag(field)} {value!r} is not a number")
    if not math.isfinite(value):
        raise ConfigError(f"{flag(field)} {value:g}: give a finite number")
    if value <= low or (high is not None and value >= high):
        raise ConfigError(f"{flag(field)} {value:g}: must be {why or f'more than {low:g}'}")


# --- parsing one command line's values (the CLI hands them over as click parsed them) -----------------------

_DEFAULT = object()  # "not given": the dataclass default applies


def _same(value, field):
    return value


def _split(values, field) -> tuple[str, ...] | object:
    """Options given several times or as comma lists: ``--dtype bf16,fp16 --dtype fp32``."""
    items = tuple(dict.fromkeys(item.strip() for value in values or () for item in value.split(",") if item.strip()))
    if values and not items:  # typed but empty (--op ''): not the same as not given, which takes the default
        raise ConfigError(f"{flag(field)} {values[0]!r}: give at least one value")
    return items or _DEFAULT


def _shapes(values, field):
    items = _split(values, field)
    # not _DEFAULT, so the tuple _split built
    return _DEFAULT if items is _DEFAULT else tuple(plan.parse_shape(item) for item in items)  # pyright: ignore[reportGeneralTypeIssues]


def _batches(text, field):
    return _DEFAULT if text is None else tuple(plan.parse_batches(text))


def _number(text, field):
    if text is None:
        return _DEFAULT
    try:
        return float(text)
    except (TypeError, ValueError):
        raise ConfigError(f"{flag(field)} {text!r} is not a number") from None


def parse_bytes(text: str | None, field: str = "max_memory_bytes") -> int | None:
    """``--max-memory``: bytes, with an optional k/M/G/T suffix (powers of 1000) or Ki/Mi/Gi/Ti."""
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKMGT]i?)?[bB]?\s*", text)
    if not match:
        raise ConfigError(f"{flag(field)} {text!r} is not a size (for example 8G, 512Mi, 1000000)")
    value, unit = float(match.group(1)), match.group(2) or ""
    scale = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
             "ki": 1024, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4}[unit]
    return int(value * scale)


def _record(text: str) -> dict[str, Any]:
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"--record is not JSON ({exc})") from None
    if not isinstance(record, dict):
        raise ConfigError("--record must be a JSON object (SweepConfig.to_record)")
    return record


def _int_or_default(text, field):
    if text is None:
        return _DEFAULT
    if isinstance(text, int):
        return text
    if not re.fullmatch(r"\s*\d+\s*", str(text)):
        raise ConfigError(f"{flag(field)} {text!r} is not a positive integer")
    return int(text)


PARSERS = {"experts": _int_or_default, "topk": _int_or_default, "heads": _int_or_default, "groups": _int_or_default,
           "index_heads": _int_or_default, "index_dim": _int_or_default, "index_topk": _int_or_default,
           "ops": _split, "backends": _split,
           "dtypes": _split, "shapes": _shapes, "batches": _batches, "budget_s": _number,
           "target_rel_ci": _number, "telemetry_interval_s": _number, "max_memory_bytes": parse_bytes,
           "output": lambda value, field: None if value is None else Path(value)}
