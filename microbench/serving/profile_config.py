"""What ``gpubench profile`` is asked to do: one ``ProfileConfig``, built from the command's options and checked
once, before torch is imported.  ``FLAGS`` declares each option: the analytic profile's (shared with simulate),
then what measuring needs.  ``--analytic`` measures nothing, so the measuring options are refused beside it; a
measured profile times this device, so ``--gpu`` and ``--from`` are refused without it.

What needs a file or the device (the model, does --tp divide it, the partial file of ``--resume``) is checked
when the profile is planned (``ProfilePlan.check``, ``prepare_profile``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from microbench.points.plan import PlanError
from microbench.serving.profile_plan import DEFAULT_MAX_BATCH, MEASURED_DTYPE, ProfilePlan
from microbench.serving.validate_options import check_positive_number, check_threads
from roofline.core.counting import DTYPES
from roofline.core.options import Option, check_dtypes, check_seed, given_among, spelled
from roofline.decode.ceilings import check_typed_efficiency
from roofline.reference.database import check_engine, check_reference
from roofline.serving.simulate_config import (
    ENGINE_OPTION,
    MODEL_FLAGS,
    ModelOptions,
    check_spec_sheet,
    refuse_max_context_past_window,
)
from roofline.specs.engines import check_engine_name, kernel_engine

CLOCKS = ("wall", "thread-cpu")

MEASURED_FLAGS: dict[str, Option] = {
    "device": Option(("--device",), default="auto", show_default=True, help="measured: auto | cpu | cuda | cuda:N"),
    "max_batch": Option(("--max-batch",), "int", DEFAULT_MAX_BATCH, show_default=True,
                        help="measured: largest decode batch"),
    "attention": Option(("--attention",), "choice", "sdpa", choices=("sdpa", "bmm"), show_default=True,
                        help="measured: torch SDPA (fused where torch has it, GQA-aware) or grouped bmm + softmax"),
    "budget_s": Option(("--budget",), "float", help="measured: seconds of sampling per kernel"),
    "seed": Option(("--seed",), "int", 0, show_default=True),
    "clock": Option(("--clock",), "choice", "wall", choices=CLOCKS, show_default=True,
                    help="measured, CPU: wall time, or this thread's CPU time (a shared CPU; needs --threads 1)"),
    "threads": Option(("--threads",), "int", help="measured, CPU: torch threads [torch's default]"),
    "resume": Option(("--resume",), "flag", help="measured: continue the profile in progress in OUTPUT.partial"),
    "energy": Option(("--energy",), "flag",
                     help="measured, GPU: read NVML's power over each linear's timed phase: the profile's "
                          "power by token count, which simulate and plan charge (tokens per joule)"),
}

# --dtype not typed: a measured profile runs what transformers runs on the device, an analytic one simulate's
# default.
MEASURED_OR_ANALYTIC_DTYPE = replace(
    MODEL_FLAGS["dtype"], default=None, show_default=False,
    help=f"weights and activations: {' | '.join(DTYPES)} (quantized formats: the layers' linears) [measured: GPU "
         f"{MEASURED_DTYPE['cuda']}, CPU {MEASURED_DTYPE['cpu']}; --analytic and --reference: the checkpoint's "
         "quantization_config where --hf-config has one, else bf16]")

FLAGS: dict[str, Option] = {
    **MODEL_FLAGS,
    "dtype": MEASURED_OR_ANALYTIC_DTYPE,
    "analytic": Option(("--analytic",), "flag",
                       help="from a SKU's ceilings (--gpu) or a sweep's fits (--from), no timers"),
    "reference": Option(("--reference",), metavar="aiconfigurator",
                        help="from a reference database's kernel times on --gpu (the [reference] extra), no timers"),
    "engine": replace(ENGINE_OPTION, help="--analytic and --reference: the engine you serve with: its overhead "
                      "preset (profiles/engines, each figure sourced) recorded as the profile's engine time, and its "
                      "kernel tables where the reference database is read; none: kernels only, no engine time"),
    "output": Option(("-o", "--output"), "path", required=True, help="the step profile (JSON)"),
    **MEASURED_FLAGS,
}


@dataclass(frozen=True, kw_only=True)
class ProfileConfig(ModelOptions):
    """The model options (``ModelOptions``: ``dtype`` None when not typed, measured: bf16 on a GPU, fp32 on the
    CPU; analytic and reference: the checkpoint's) and the profile command's own."""

    output: Path
    analytic: bool = FLAGS["analytic"].default
    reference: str | None = FLAGS["reference"].default
    device: str = FLAGS["device"].default
    max_batch: int = FLAGS["max_batch"].default
    attention: str = FLAGS["attention"].default
    budget_s: float | None = FLAGS["budget_s"].default
    seed: int = FLAGS["seed"].default
    clock: str = FLAGS["clock"].default
    threads: int | None = FLAGS["threads"].default
    resume: bool = FLAGS["resume"].default
    energy: bool = FLAGS["energy"].default

    def __post_init__(self) -> None:
        check_dtypes(self.dtype, self.kv_dtype)
        check_engine_name(self.engine)
        if self.reference is not None:
            check_reference(self.reference)
            check_engine(kernel_engine(self.engine))
            if self.analytic or self.from_result or self.ideal or not self.sku or self.gpu_spec \
                    or self.interconnect_gbps is not None:
                raise PlanError("--reference reads the database's kernel times on --gpu SKU: give --gpu, and none of "
                                "--analytic, --from, --ideal, --gpu-spec, --interconnect-gbps")
            return
        if self.analytic:
            check_typed_efficiency(self.efficiency, self.ideal, self.from_result is not None)
            check_spec_sheet(self.sku, self.gpu_spec, self.interconnect_gbps)
            return  # the measuring fields are the defaults (from_options refuses them typed)
        if self.sku or self.from_result or self.ideal or self.gpu_spec or self.interconnect_gbps is not None:
            raise PlanError("--gpu, --ideal and --from belong to --analytic (--gpu-spec and --interconnect-gbps too); "
                            "a measured profile times this device")
        if self.resume and (self.model or self.hf_config):
            raise PlanError("--resume takes the plan from OUTPUT.partial; do not also give --model/--hf-config")
        check_seed(self.seed)
        check_positive_number("--budget", self.budget_s, "seconds")  # the plan's own check lets nan through
        if self.threads is not None:
            check_threads(self.threads)  # torch fails past int32 with a ValueError, and more than the CPUs

    def plan(self) -> ProfilePlan:
        """The measured profile's plan (checked against the model when it is prepared)."""
        return ProfilePlan(model=self.model, hf_config=str(self.hf_config) if self.hf_config else None, tp=self.tp,
                           ep=self.ep, routing=self.routing,
                           dtype=self.dtype, kv_dtype=self.kv_dtype, max_tokens=self.max_tokens,
                           max_context=self.max_context, max_batch=self.max_batch, attention=self.attention,
                           device=self.device, budget_s=self.budget_s, seed=self.seed, clock=self.clock,
                           energy=self.energy)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], given: Collection[str] = ()) -> ProfileConfig:
        """The config of one command line (``options`` by field name as click parsed them; ``given``: the
        fields typed on the command line)."""
        values = {key: value for key, value in options.items() if key in {f.name for f in fields(cls)}}
        values["engine_typed"] = "engine" in given
        if "engine" in given and not values.get("analytic") and values.get("reference") is None:
            raise PlanError("--engine belongs to --analytic and --reference: a measured profile times this device's "
                            "kernels (simulate --engine names the engine time its steps carry)")
        planned = given_among(given, [f.name for f in fields(ProfilePlan)])
        if values.get("resume") and planned:  # each would be ignored: the plan is the partial file's own
            raise PlanError("--resume takes the plan from OUTPUT.partial; do not also give "
                            + spelled(FLAGS, planned))
        if values.get("analytic") or values.get("reference") is not None:
            measuring = given_among(given, MEASURED_FLAGS)
            if measuring:
                mode = "--analytic" if values.get("analytic") else "--reference"
                raise PlanError(f"{mode} measures nothing: drop " + spelled(MEASURED_FLAGS, measuring))
            values.update((name, option.default) for name, option in MEASURED_FLAGS.items())
        if "efficiency" in given and not values.get("analytic"):
            raise PlanError("--efficiency belongs to --analytic; " + (
                "--reference reads the database's kernel times" if values.get("reference") is not None else
                "a measured profile times this device"))
        if "dtype" not in given and not values.get("analytic") and values.get("reference") is None:
            values["dtype"] = None  # a measured profile runs what the engine runs on the device
        config = cls(**values)
        if "max_context" in given:  # decode's rule for --context, whether measured or analytic
            refuse_max_context_past_window(config.max_context, config.model, config.hf_config)
        return config
