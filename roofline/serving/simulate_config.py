"""What ``gpubench simulate`` is asked to do: one ``SimulateConfig``, built from the command's options and
checked once, before a profile, a trace or a workload is read.  ``MODEL_FLAGS`` declares the options that build
an analytic step profile (shared with ``gpubench profile``); ``FLAGS`` declares all of simulate's.

What needs a file (the profile, the model, the trace) or the workload drawn (its lengths, the context window)
is checked when it is read; every option on its own, and against the others, is checked here.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofline.core.counting import DTYPES, KV_DTYPES
from roofline.core.errors import BadInputError
from roofline.core.options import Option, check_dtypes, check_seed, given_among, number_refusal, spelled
from roofline.serving.metrics import Slo
from roofline.serving.policies import Policy, parse_policy
from roofline.serving.profile_doc import MAX_KERNEL_S, EngineOverhead
from roofline.serving.workload import check_request_count

# The options that build an analytic profile (beside a PROFILE.json they would be silently ignored).
MODEL_FLAGS: dict[str, Option] = {
    "model": Option(("--model",), help="model id from profiles/models (llama-3-8b, opt-13b, ...)"),
    "hf_config": Option(("--hf-config",), "path", help="a config.json on disk"),
    "tp": Option(("--tp",), "int", 1, show_default=True, help="tensor-parallel GPUs"),
    "dtype": Option(("--dtype",), default="bf16", show_default=True,
                    help=f"weights and activations: {' | '.join(DTYPES)} (w8a16/w4a16: the linears only)"),
    "kv_dtype": Option(("--kv-dtype",), help=f"KV cache dtype: {' | '.join(KV_DTYPES)} [--dtype; bf16 for "
                       "w8a16/w4a16]"),
    "sku": Option(("--gpu",), help="SKU whose spec sheet the analytic profile uses (its achievable ceilings)"),
    "ideal": Option(("--ideal",), "flag", help="the datasheet's peak bandwidth and FLOP/s instead of the SKU's "
                    "achievable ceilings (measured by others)"),
    "from_result": Option(("--from",), "path",
                          help="a sweep result: its fitted roofline per series instead of the spec sheet"),
    "max_tokens": Option(("--max-tokens",), "int", 8192, show_default=True, help="largest tokens in a step"),
    "max_context": Option(("--max-context",), "int", 8192, show_default=True, help="largest context"),
}

OVERHEAD_HELP = {
    "per_step_s": "engine overhead per step (each --overhead-* replaces that term of the profile's calibrated one)",
    "per_sequence_s": "engine overhead per sequence in a step",
    "per_cached_token_s": "engine overhead per cached token the step's sequences attend to",
    "per_prefill_step_s": "engine overhead once more for a step that runs prefill",
}

FLAGS: dict[str, Option] = {
    "analytic": Option(("--analytic",), "flag", help="build the profile from a SKU's ceilings (--gpu, --model)"),
    **MODEL_FLAGS,
    "requests": Option(("--requests",), "int", 1000, show_default=True, help="requests to generate"),
    "arrivals": Option(("--arrivals",), default="burst", show_default=True, help="burst | poisson:RATE (requests/s)"),
    "prompt": Option(("--prompt",), default="fixed:512", show_default=True,
                     help="prompt lengths: fixed:N | uniform:A:B | exp:MEAN[:CAP] | lognormal:MEDIAN:SIGMA[:CAP]"),
    "output_lengths": Option(("--output",), default="exp:128:512", show_default=True,
                             help="output lengths, as --prompt"),
    "seed": Option(("--seed",), "int", 0, show_default=True),
    "trace": Option(("--trace",), "path", help="CSV arrival_s,prompt_tokens,output_tokens"),
    "policies": Option(("--policy",), multiple=True, help="static:batch=B | continuous[:max-batch=B] | "
                       "paged[:block=16] | chunked:budget=T (repeatable: compared side by side) [continuous]"),
    **{term: Option((flag,), "float", help=OVERHEAD_HELP[term]) for term, flag in zip(
        EngineOverhead.TERMS, ("--overhead-s", "--overhead-per-seq-s", "--overhead-per-cached-token-s",
                               "--overhead-per-prefill-s"), strict=True)},
    "mem_fraction": Option(("--mem-fraction",), "float", 0.9, show_default=True,
                           help="share of memory for weights + KV"),
    "slo": Option(("--slo",), help="latency objectives METRIC_pNN=SECONDS, METRIC ttft, tpot, itl or e2e, "
                   "e.g. ttft_p90=2,itl_p99=0.05: goodput and capacity"),
    "rates": Option(("--rates",), help="also simulate these Poisson rates (requests/s) for the latency curve"),
    "out_dir": Option(("-o", "--out-dir"), "path",
                      help="folder for simulation.json, requests.csv and the report [results/sim-<model>-<UTC time>]"),
    "no_report": Option(("--no-report",), "flag", help="write simulation.json and requests.csv only"),
    "as_json": Option(("--json",), "flag", help="print the per-policy summaries as JSON"),
}
DEFAULT_POLICIES = ("continuous",)
# A latency curve reads well with a dozen rates; each is a whole simulation of every policy, so a hundred is
# already long, and a thousand a typo.
MAX_RATES = 100


@dataclass(frozen=True)
class SimulateConfig:
    profile_file: Path | None = None
    analytic: bool = False
    model: str | None = None
    hf_config: Path | None = None
    tp: int = 1
    dtype: str = "bf16"
    kv_dtype: str | None = None
    sku: str | None = None
    ideal: bool = False
    from_result: Path | None = None
    max_tokens: int = 8192
    max_context: int = 8192
    requests: int = 1000
    arrivals: str = "burst"
    prompt: str = "fixed:512"
    output_lengths: str = "exp:128:512"
    seed: int = 0
    trace: Path | None = None
    policies: tuple[Policy, ...] = ()  # () : DEFAULT_POLICIES
    per_step_s: float | None = None  # each --overhead-* given replaces that term of the profile's overhead
    per_sequence_s: float | None = None
    per_cached_token_s: float | None = None
    per_prefill_step_s: float | None = None
    mem_fraction: float = 0.9
    slo: Slo | None = None
    rates: tuple[float, ...] = ()
    out_dir: Path | None = None
    no_report: bool = False
    as_json: bool = False

    def __post_init__(self) -> None:
        if self.profile_file and self.analytic:
            raise BadInputError("give a PROFILE.json or --analytic (with --gpu SKU --model NAME), not both")
        if not self.profile_file and not self.analytic:
            raise BadInputError("give a PROFILE.json, or --analytic with --gpu SKU --model NAME")
        check_seed(self.seed)
        check_dtypes(self.dtype, self.kv_dtype)
        if not 0 < self.mem_fraction <= 1:
            raise BadInputError("--mem-fraction must be in (0, 1]")
        for term, value in self.overhead_given.items():  # EngineOverhead's own bound, worded with the flag
            if not math.isfinite(value) or not 0 <= value <= MAX_KERNEL_S:
                raise BadInputError(f"{FLAGS[term].spelled} {value:g}: give seconds from 0 to {MAX_KERNEL_S:g}")
        if any(number_refusal(rate, low=0) for rate in self.rates):
            raise BadInputError("--rates must be positive")
        if len(self.rates) > MAX_RATES:
            raise BadInputError(f"--rates: {len(self.rates)} rates, more than {MAX_RATES} (each is one more "
                                "simulation of every policy)")
        if not self.trace:  # a trace's own length is counted as it is read
            check_request_count(self.requests)

    @property
    def overhead_given(self) -> dict[str, float]:
        """The overhead terms typed on the command line, by EngineOverhead term."""
        return {term: getattr(self, term) for term in EngineOverhead.TERMS if getattr(self, term) is not None}

    @property
    def policy_list(self) -> list[Policy]:
        return list(self.policies or [parse_policy(p) for p in DEFAULT_POLICIES])

    @classmethod
    def from_options(cls, options: Mapping[str, Any], given: Collection[str] = ()) -> SimulateConfig:
        """The config of one command line (``options``: the values by field name as click parsed them, and
        ``profile_file``); ``given``: the fields typed on the command line."""
        values = dict(options)
        config = cls(**{**values, "policies": (), "slo": None, "rates": ()})  # every plain option first
        building = given_among(given, MODEL_FLAGS)
        if config.profile_file and building:
            raise BadInputError(f"{spelled(MODEL_FLAGS, building)}: these build an --analytic profile, and "
                                f"{config.profile_file} already fixes the model and its shapes; drop them")
        out_dir = config.out_dir
        if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
            raise BadInputError(f"-o {out_dir}: is a file; give a folder for simulation.json and the report")
        policies = tuple(parse_policy(p) for p in values.get("policies") or ())
        slo = Slo.parse(values["slo"]) if values.get("slo") else None
        return cls(**{**values, "policies": policies, "slo": slo, "rates": _parse_rates(values.get("rates"))})


def _parse_rates(text: str | None) -> tuple[float, ...]:
    if not text:
        return ()
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise BadInputError(f"--rates {text!r}: give requests/s as a comma list (0.5,1,2)") from None
