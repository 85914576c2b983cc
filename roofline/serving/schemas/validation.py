"""The validation document (``validate.json``, ``gpubench validate``) declared key by key, as
``microbench.serving.validate_run.validation_document`` writes it; its JSON Schema and the key tables of
docs/reference/validation.md are generated from these records (roofline.serving.schemas.registry).  Declared here,
on the analysis side, because a validation document is read without torch (``gpubench simulate`` takes its fitted
overhead).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from roofline.core.counting import DTYPES
from roofline.result.json_schema import shaped_key as key
from roofline.result.keys import Record
from roofline.result.sections import SECTIONS
from roofline.serving.schemas.simulation import PolicyRecord
from roofline.serving.schemas.step_profile import ModelShape, Overhead
from roofline.serving.workload import arrival_syntax, length_syntax

VALIDATION_VERSION = 1
VALIDATION_KIND = "gpubench-validation"
PATHS = ("static", "continuous")


@dataclass(frozen=True, kw_only=True)
class EngineExperts(Record):
    SECTION: ClassVar[str] = "engine.experts"
    implementation: Any = key("string", required=True, doc="transformers' experts implementation (grouped_mm)")
    kernel: Any = key("string", required=True,
                      doc="the kernel it runs, named as the profile's grouped tables name theirs")
    routing: Any = key("string", required=True,
                       doc="the routing the profile describes its random router with (uniform)")


@dataclass(frozen=True, kw_only=True)
class EngineIdentity(Record):
    SECTION: ClassVar[str] = "engine"
    name: Any = key("string", required=True, choices=("transformers",), doc="the engine driven")
    weights: Any = key("string", required=True, doc="what its weights are (random, from the config)")
    model: Any = key("object", record=ModelShape, required=True, doc="the model's shapes (the profile's)")
    dtype: Any = key("string", required=True, choices=DTYPES, doc="the dtype it ran in")
    torch_threads: Any = key("integer", required=True, doc="torch intra-op threads while it ran")
    experts: Any = key("object", record=EngineExperts, nullable=False,
                       doc="a mixture of experts: how its experts ran (absent: dense)")


@dataclass(frozen=True, kw_only=True)
class ValidateSettings(Record):
    """``ValidateSetup`` field by field (``dataclasses.asdict``; paths as text)."""

    SECTION: ClassVar[str] = "setup"
    engine: Any = key("string", required=True, doc="--engine")
    engine_mode: Any = key("string", nullable=False, choices=("eager", "graphs"),
                           doc="--engine-mode, or the device's default (absent: older documents, eager)")
    profile: Any = key("string", required=True, nullable=True, doc="--profile (null: measured here)")
    model: Any = key("string", required=True, nullable=True, doc="--model")
    hf_config: Any = key("string", required=True, nullable=True, doc="--hf-config")
    requests: Any = key("integer", required=True, doc="--requests: the workload predicted")
    arrivals: Any = key("string", required=True, doc=f"--arrivals: {arrival_syntax()}")
    prompt: Any = key("string", required=True, doc=f"--prompt: {length_syntax()}")
    output: Any = key("string", required=True, doc="--output")
    seed: Any = key("integer", required=True, doc="--seed (the calibration's: seed + 1)")
    calibration_requests: Any = key("integer", required=True, doc="--calibration-requests")
    static_batch: Any = key("integer", required=True, doc="--static-batch")
    max_batch: Any = key("integer", required=True, doc="--max-batch (continuous)")
    budget_tokens: Any = key("integer", required=True, doc="--budget-tokens (continuous)")
    device: Any = key("string", required=True, doc="--device")
    dtype: Any = key("string", required=True, nullable=True, doc="--dtype")
    threads: Any = key("integer", required=True, nullable=True, doc="--threads (null: the default)")
    profile_budget_s: Any = key("number", unit="s", required=True, nullable=True, doc="--profile-budget")
    repeats: Any = key("integer", required=True, doc="--repeats")
    clock: Any = key("string", required=True, nullable=True, choices=("wall", "thread-cpu"), doc="--clock")
    fail_above: Any = key("number", required=True, nullable=True, doc="--fail-above, a fraction")


@dataclass(frozen=True, kw_only=True)
class ProfileReference(Record):
    SECTION: ClassVar[str] = "profile"
    path: Any = key("string", required=True, doc="the step profile predicted from")
    basis: Any = key("string", required=True, doc="its basis")
    created_at: Any = key("string", required=True, doc="when it was made")


@dataclass(frozen=True, kw_only=True)
class CalibrationRun(Record):
    SECTION: ClassVar[str] = "calibration.<path>.runs[]"
    policy: Any = key("string", required=True, doc="the simulator policy of the run")
    measured_total_s: Any = key("number", unit="s", required=True, doc="the engine's total time")
    kernel_only_total_s: Any = key("number", unit="s", required=True, doc="the simulation's, without overhead")
    steps: Any = key("integer", required=True, doc="steps simulated")
    steps_aligned: Any = key("boolean", required=True, doc="the engine took the simulator's steps")
    measured_step_s: Any = key("array", items="number", unit="s", required=True, doc="each engine step")
    kernel_step_s: Any = key("array", items="number", unit="s", required=True, doc="each simulated step's kernels")


@dataclass(frozen=True, kw_only=True)
class PathCalibration(Record):
    SECTION: ClassVar[str] = "calibration.<path>"
    overhead: Any = key("object", record=Overhead, required=True, doc="the overhead fitted on these runs")
    runs: Any = key("array", items="object", item_record=CalibrationRun, required=True, doc="at two batch sizes")


@dataclass(frozen=True, kw_only=True)
class Calibration(Record):
    SECTION: ClassVar[str] = "calibration"
    static: Any = key("object", record=PathCalibration, required=True, doc="the static path")
    continuous: Any = key("object", record=PathCalibration, nullable=False,
                          doc="the continuous path (absent: the engine cannot run it: ratio.why_none)")


@dataclass(frozen=True, kw_only=True)
class RequestTiming(Record):
    SECTION: ClassVar[str] = "runs.<path>.measured.requests[]"
    id: Any = key("integer", required=True, doc="the request")
    arrival_s: Any = key("number", unit="s", required=True, doc="arrival, from the run's start")
    first_token_s: Any = key("number", unit="s", required=True, doc="its first token")
    finish_s: Any = key("number", unit="s", required=True, doc="its last token")
    prompt_tokens: Any = key("integer", required=True, doc="prompt length")
    output_tokens: Any = key("integer", required=True, doc="tokens generated")
    first_step: Any = key("integer", required=True, doc="step of the first token (-1: not known)")
    finish_step: Any = key("integer", required=True, doc="step of the last token (-1: not known)")
    token_steps: Any = key("array", items="integer", required=True,
                           doc="the step of each token, in order (its gaps: the stamps of these steps apart)")


@dataclass(frozen=True, kw_only=True)
class EngineRun(Record):
    SECTION: ClassVar[str] = "runs.<path>.measured"
    engine: Any = key("string", required=True, doc="the engine")
    path: Any = key("string", required=True, choices=PATHS, doc="static or continuous")
    policy: Any = key("string", required=True, doc="the simulator policy that describes it")
    total_s: Any = key("number", unit="s", required=True, doc="first arrival to last finish")
    settings: Any = key("object", required=True,
                        doc="the engine's own settings: api, clock, batch and cache options, its version, repeats")
    steps: Any = key("integer", required=True, doc="steps stamped")
    requests: Any = key("array", items="object", item_record=RequestTiming, required=True, doc="each request")


@dataclass(frozen=True, kw_only=True)
class PredictedRequest(Record):
    SECTION: ClassVar[str] = "runs.<path>.predicted.requests[]"
    id: Any = key("integer", required=True, doc="the request")
    arrival_s: Any = key("number", unit="s", required=True, doc="arrival")
    first_token_s: Any = key("number", unit="s", required=True, doc="its first token, simulated")
    finish_s: Any = key("number", unit="s", required=True, doc="its last token, simulated")
    prompt_tokens: Any = key("integer", required=True, doc="prompt length")
    output_tokens: Any = key("integer", required=True, doc="tokens generated")


@dataclass(frozen=True, kw_only=True)
class PredictedRun(Record):
    SECTION: ClassVar[str] = "runs.<path>.predicted"
    policy: Any = key("object", record=PolicyRecord, required=True, doc="the policy simulated")
    makespan_s: Any = key("number", unit="s", required=True, doc="simulated total time")
    steps: Any = key("integer", required=True, doc="steps simulated")
    step_s: Any = key("array", items="number", unit="s", required=True, doc="each step, overhead included")
    kernel_step_s: Any = key("array", items="number", unit="s", required=True, doc="each step's kernels")
    requests: Any = key("array", items="object", item_record=PredictedRequest, required=True, doc="each request")


@dataclass(frozen=True, kw_only=True)
class PathRun(Record):
    SECTION: ClassVar[str] = "runs.<path>"
    measured: Any = key("object", record=EngineRun, required=True, doc="the engine's run (repeats combined)")
    policy: Any = key("string", required=True, doc="its simulator policy")
    measured_step_s: Any = key("array", items="number", unit="s", required=True, doc="each measured step")
    kernel_share: Any = key("number", doc="the profile's kernel time (no overhead) over the measured step time, "
                                          "summed over the workload's steps (null: none measured; absent: older)")
    predicted: Any = key("object", record=PredictedRun, required=True, doc="the simulator's prediction")


@dataclass(frozen=True, kw_only=True)
class Runs(Record):
    SECTION: ClassVar[str] = "runs"
    static: Any = key("object", record=PathRun, required=True, doc="the static path")
    continuous: Any = key("object", record=PathRun, nullable=False,
                          doc="the continuous path (absent: the engine cannot run it: ratio.why_none)")


@dataclass(frozen=True, kw_only=True)
class Compared(Record):
    SECTION: ClassVar[str] = "comparison.<path>.<metric>"
    predicted: Any = key("number", required=True, nullable=True, doc="the simulator's value (unit: the metric's)")
    measured: Any = key("number", required=True, nullable=True, doc="the engine's")
    rel_err: Any = key("number", required=True, nullable=True, doc="(predicted - measured) / measured")


@dataclass(frozen=True, kw_only=True)
class Ratio(Record):
    SECTION: ClassVar[str] = "ratio"
    what: Any = key("string", required=True, doc="static total time / continuous total time")
    predicted: Any = key("number", required=True, nullable=True,
                         doc="the simulator's ratio (null: one path ran, why_none says why)")
    measured: Any = key("number", required=True, nullable=True, doc="the engine's")
    rel_err: Any = key("number", required=True, nullable=True, doc="(predicted - measured) / measured")
    why_none: Any = key("string", nullable=False,
                        doc="why the engine ran the static path alone (a hybrid model; absent: both ran)")


@dataclass(frozen=True, kw_only=True)
class PathComparison(Record):
    """Every metric of ``run_summary`` but output_tokens, predicted against measured."""

    SECTION: ClassVar[str] = "comparison.<path>"
    total_s: Any = key("object", record=Compared, unit="s", required=True, doc="first arrival to last finish")
    tokens_per_s: Any = key("object", record=Compared, unit="1/s", required=True, doc="output tokens per second")
    requests_per_s: Any = key("object", record=Compared, unit="1/s", required=True, doc="requests per second")
    ttft_p50_s: Any = key("object", record=Compared, unit="s", required=True, doc="TTFT P50")
    ttft_p90_s: Any = key("object", record=Compared, unit="s", required=True, doc="TTFT P90")
    ttft_p99_s: Any = key("object", record=Compared, unit="s", required=True, doc="TTFT P99")
    tpot_p50_s: Any = key("object", record=Compared, unit="s", required=True, doc="TPOT P50")
    tpot_p90_s: Any = key("object", record=Compared, unit="s", required=True, doc="TPOT P90")
    tpot_p99_s: Any = key("object", record=Compared, unit="s", required=True, doc="TPOT P99")
    e2e_p50_s: Any = key("object", record=Compared, unit="s", required=True, doc="end-to-end P50")
    e2e_p90_s: Any = key("object", record=Compared, unit="s", required=True, doc="end-to-end P90")
    e2e_p99_s: Any = key("object", record=Compared, unit="s", required=True, doc="end-to-end P99")
    itl_p50_s: Any = key("object", record=Compared, unit="s", required=True,
                         doc="inter-token latency P50 (every gap of every request, pooled)")
    itl_p90_s: Any = key("object", record=Compared, unit="s", required=True, doc="inter-token latency P90")
    itl_p99_s: Any = key("object", record=Compared, unit="s", required=True, doc="inter-token latency P99")


@dataclass(frozen=True, kw_only=True)
class Comparison(Record):
    SECTION: ClassVar[str] = "comparison"
    static: Any = key("object", record=PathComparison, required=True, doc="the static path")
    continuous: Any = key("object", record=PathComparison, nullable=False,
                          doc="the continuous path (absent: the engine cannot run it: ratio.why_none)")


@dataclass(frozen=True, kw_only=True)
class ValidationDocument(Record):
    SECTION: ClassVar[str] = ""
    schema_version: Any = key("integer", required=True, doc="format version (1)")
    kind: Any = key("string", required=True, choices=(VALIDATION_KIND,), doc="what this document is")
    tool: Any = key("object", record=SECTIONS["tool"], required=True, doc="what wrote it (as in a result)")
    created_at: Any = key("string", required=True, doc="UTC ISO-8601 time it was made")
    argv: Any = key("array", items="string", required=True, doc="the command line")
    host: Any = key("object", record=SECTIONS["host"], required=True, doc="the machine (as in a result)")
    device: Any = key("object", record=SECTIONS["device"], required=True, doc="the profile's device")
    engine: Any = key("object", record=EngineIdentity, required=True, doc="the engine and model run")
    setup: Any = key("object", record=ValidateSettings, required=True, doc="every option")
    profile: Any = key("object", record=ProfileReference, required=True, doc="the step profile used")
    calibration: Any = key("object", record=Calibration, required=True, doc="per path, the overhead fit")
    runs: Any = key("object", record=Runs, required=True, doc="per path, measured and predicted")
    comparison: Any = key("object", record=Comparison, required=True, doc="per path, each metric side by side")
    ratio: Any = key("object", record=Ratio, required=True, doc="static over continuous total time")
