"""What ``gpubench simulate`` is asked to do: one ``SimulateConfig``, built from the command's options and
checked once, before a profile, a trace or a workload is read.  ``MODEL_FLAGS`` declares the options that build
an analytic step profile (shared with ``gpubench profile``); ``FLAGS`` declares all of simulate's.

What needs a file (the profile, the model, the trace) or the workload drawn (its lengths, the context window)
is checked when it is read; every option on its own, and against the others, is checked here.
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from roofline.core.counting import DTYPES, KV_DTYPES
from roofline.core.errors import BadInputError
from roofline.core.options import Option, check_dtypes, check_seed, given_among, number_refusal, spelled
from roofline.decode.ceilings import EFFICIENCIES, check_typed_efficiency
from roofline.serving.metrics import Slo
from roofline.serving.policies import (
    DEFAULT_POLICIES,
    DEFAULT_ROUTER,
    ROUTER_NAMES,
    Policy,
    parse_policy,
    policy_syntax,
    router_help,
)
from roofline.serving.profile_doc import MAX_KERNEL_S, EngineOverhead
from roofline.serving.workload import (
    MAX_REQUESTS,
    arrivals_help,
    check_request_count,
    lengths_help,
    parse_arrivals,
    parse_lengths,
    parse_prefix,
    parse_sessions,
)
from roofline.specs.engines import DEFAULT_ENGINE, check_engine_name, engine_names
from roofline.specs.gpus import MAX_LINK_GBPS, MIN_LINK_GBPS
from roofline.specs.hf_config import load_hf_config
from roofline.specs.models import load_model, past_context_window
from roofline.step.speculative import SpecDecode, parse_spec_decode

# A GPU-hour dearer than this is a typo (the dearest cloud GPU-hours cost tens of dollars), and past it the tokens
# per dollar print as a string of zeros.
MAX_GPU_HOUR_USD = 1e6

# The options that build an analytic profile (beside a PROFILE.json they would be silently ignored).
MODEL_FLAGS: dict[str, Option] = {
    "model": Option(("--model",), help="model id from profiles/models (llama-3-8b, opt-13b, ...)"),
    "hf_config": Option(("--hf-config",), "path", help="a config.json on disk"),
    "tp": Option(("--tp",), "int", 1, show_default=True, help="tensor-parallel GPUs"),
    "ep": Option(("--ep",), "int", 1, show_default=True,
                 help="expert-parallel GPUs (a mixture of experts: experts split, attention data-parallel)"),
    "routing": Option(("--routing",), default="balanced", show_default=True,
                      help="tokens over experts: balanced | uniform | zipf:S | power-law:ALPHA (aiconfigurator's)"),
    "dtype": Option(("--dtype",),
                    help=f"weights and activations: {' | '.join(DTYPES)} (quantized formats: the layers' linears) "
                         "[default: the checkpoint's quantization_config where --hf-config has one, else bf16]"),
    "kv_dtype": Option(("--kv-dtype",), help=f"KV cache dtype: {' | '.join(KV_DTYPES)} [what the linears write: "
                       "bf16 for fp8 and the quantized formats]"),
    "sku": Option(("--gpu",), help="SKU whose spec sheet the analytic profile uses (its achievable ceilings)"),
    "gpu_spec": Option(("--gpu-spec",), "path", metavar="FILE.toml",
                       help="a spec sheet of your own instead of --gpu, in profiles/gpus/*.toml's format (its SKU: "
                            "the file's name)"),
    "interconnect_gbps": Option(("--interconnect-gbps",), "float", metavar="G",
                                help="the GPU-to-GPU link tensor- and expert-parallel collectives cross, Gb/s each "
                                     "way, replacing the spec sheet's (its latencies kept)"),
    "ideal": Option(("--ideal",), "flag", help="the datasheet's peak bandwidth and FLOP/s instead of the SKU's "
                    "achievable ceilings (measured by others)"),
    "from_result": Option(("--from",), "path",
                          help="a sweep result: its fitted roofline per series instead of the spec sheet"),
    "efficiency": Option(("--efficiency",), "choice", "auto", choices=EFFICIENCIES, show_default=True,
                         help="per-matrix efficiencies from the reference database's GEMM curves (reference), the "
                              "SKU's flat achievable ceilings (flat), or reference where installed and covering the "
                              "SKU (auto)"),
    "max_tokens": Option(("--max-tokens",), "int", 8192, show_default=True, help="largest tokens in a step"),
    "max_context": Option(("--max-context",), "int", 8192, show_default=True, help="largest context"),
}

# The engine you serve with (profiles/engines): not one of MODEL_FLAGS, since beside a PROFILE.json it still says
# whose engine time the steps carry.  simulate's, profile's and plan's row.
ENGINE_OPTION = Option(("--engine",), "choice", DEFAULT_ENGINE, choices=engine_names(), show_default=True,
                       help="the engine you serve with: its overhead preset (profiles/engines, each figure sourced) "
                            "is the engine time of every step, unless the profile's calibrated terms are; its "
                            "kernel tables where the reference database is read (--efficiency auto, --reference); "
                            "none: kernels only")

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
    "arrivals": Option(("--arrivals",), default="burst", show_default=True, help=arrivals_help()),
    "concurrency": Option(("--concurrency",), "int", metavar="C",
                          help="a closed loop instead of --arrivals: C clients, each sending its next request when "
                               "its last one ends"),
    "prompt": Option(("--prompt",), default="fixed:512", show_default=True,
                     help=f"prompt lengths: {lengths_help()}"),
    "output_lengths": Option(("--output",), default="exp:128:512", show_default=True,
                             help="output lengths, as --prompt"),
    "lengths": Option(("--lengths",), "path", metavar="FILE.csv",
                      help="draw each request's prompt and output lengths as a pair from a CSV of prompt_tokens,"
                           "output_tokens instead of --prompt and --output"),
    "seed": Option(("--seed",), "int", 0, show_default=True),
    "prefix": Option(("--prefix",), metavar="shared:L:N", help="prompts open with one of N system prompts of L tokens"),
    "sessions": Option(("--sessions",), metavar="T:G", help="conversations of T turns, each G s after an answer"),
    "trace": Option(("--trace",), "path", help="CSV arrival_s,prompt_tokens,output_tokens, or a Mooncake .jsonl"),
    "policies": Option(("--policy",), default=(), multiple=True,
                       help=f"{policy_syntax()} (repeatable: compared side by side) [{', '.join(DEFAULT_POLICIES)}]"),
    "engine": ENGINE_OPTION,
    **{term: Option((flag,), "float", help=OVERHEAD_HELP[term]) for term, flag in zip(
        EngineOverhead.TERMS, ("--overhead-s", "--overhead-per-seq-s", "--overhead-per-cached-token-s",
                               "--overhead-per-prefill-s"), strict=True)},
    "spec_decode": Option(("--spec-decode",), metavar="draft=K,accept=DIST[,drafter=D]",
                          help="speculative decoding: K draft tokens a step from the drafter (mtp, an MTP head, or "
                               "a profiles/models id), accepted as DIST (geometric:P or hist:p0/.../pK), each "
                               "decode verifying K + 1 tokens and gaining 1 + the accepted drafts (seeded by --seed)"),
    "mem_fraction": Option(("--mem-fraction",), "float", 0.9, show_default=True,
                           help="share of memory for weights + KV"),
    "slo": Option(("--slo",), help="latency objectives METRIC_pNN=SECONDS, METRIC ttft, tpot, itl, e2e, queue or "
                   "prefill (TTFT's parts), e.g. ttft_p90=2,itl_p99=0.05: goodput and capacity"),
    "rates": Option(("--rates",), help="also simulate these Poisson rates (requests/s) for the latency curve"),
    "sweep_load": Option(("--sweep-load",), metavar="R1,R2,...|LOW:HIGH:N",
                         help="also simulate every policy at these Poisson rates (requests/s; LOW:HIGH:N: N rates "
                              "spaced evenly in log from LOW to HIGH): tokens/s per GPU against tokens/s per user "
                              "(1 / TPOT p50), the Pareto front marked (throughput-interactivity.png, load_sweep); "
                              "its own runs, beside --rates' latency curve"),
    "gpu_hour_usd": Option(("--gpu-hour-usd",), "number", low=0, high=MAX_GPU_HOUR_USD, metavar="PRICE",
                           help="what one GPU-hour costs you, USD: output tokens per dollar; none is built in"),
    "replicas": Option(("--replicas",), "int", 1, show_default=True,
                       help="replicas of the profile behind one router (each the profile's --tp GPUs)"),
    "router": Option(("--router",), "choice", DEFAULT_ROUTER, show_default=True, choices=ROUTER_NAMES,
                     help=router_help()),
    "disaggregate": Option(("--disaggregate",), metavar="P:D",
                           help="P prefill replicas hand each prompt's KV cache to D decode replicas"),
    "kv_link_gbps": Option(("--kv-link-gbps",), "float",
                           help="with --disaggregate: the link the KV cache crosses, Gb/s [the spec sheet's "
                                "interconnect]"),
    "out_dir": Option(("-o", "--out-dir"), "path",
                      help="folder for simulation.json, requests.csv and the report [results/sim-<model>-<UTC time>]"),
    "no_report": Option(("--no-report",), "flag", help="write simulation.json and requests.csv only"),
    "as_json": Option(("--json",), "flag", help="print the per-policy summaries as JSON"),
}
# The options that draw a workload: a --trace is the workload, so beside it they would be silently ignored.
DRAWN_WORKLOAD = ("requests", "arrivals", "prompt", "output_lengths", "lengths", "prefix", "sessions")
# The largest fleet simulated or planned: 4096 replicas is past any one deployment, and each replica is an engine
# held in memory and stepped in Python.
MAX_REPLICAS = 4096
# A latency curve reads well with a dozen rates; each is a whole simulation of every policy, so a hundred is
# already long, and a thousand a typo.
MAX_RATES = 100
# The fastest arrivals simulated or planned for: a request every nanosecond.  No network delivers requests faster
# (a 400 Gb/s Ethernet port, IEEE 802.3bs, carries 50 bytes a nanosecond, less than one request's headers), and
# every serving step takes microseconds; past it a rate is a typo, and 1e308 overflowed the figures' axes.
MAX_RATE_PER_S = 1e9
# The links taken (--interconnect-gbps, --kv-link-gbps, a spec sheet's link: roofline.specs.gpus): from 1 Gb/s,
# gigabit Ethernet (below it, 1e-300 Gb/s, a collective's time printed with 300 digits), to 1,000,000 Gb/s (125
# TB/s), over a hundred times the fastest GPU link on a spec sheet here (fifth-generation NVLink, 900 GB/s one way:
# profiles/gpus/b200.toml); past it no link exists, and 1e306 Gb/s overflowed to inf, which JSON cannot hold.
MAX_KV_LINK_GBPS = MAX_LINK_GBPS


@dataclass(frozen=True, kw_only=True)
class ModelOptions:
    """The options that build an analytic profile (``MODEL_FLAGS``), declared once: ``SimulateConfig`` and the
    profile command's ``ProfileConfig`` both hold them (their base), and
    ``roofline.serving.profiles.analytic.analytic_profile_of`` reads them."""

    model: str | None = MODEL_FLAGS["model"].default
    hf_config: Path | None = MODEL_FLAGS["hf_config"].default
    tp: int = MODEL_FLAGS["tp"].default
    ep: int = MODEL_FLAGS["ep"].default
    routing: str = MODEL_FLAGS["routing"].default
    dtype: str | None = MODEL_FLAGS["dtype"].default  # None: the checkpoint's (roofline.specs.models.in_dtype)
    kv_dtype: str | None = MODEL_FLAGS["kv_dtype"].default
    sku: str | None = MODEL_FLAGS["sku"].default
    gpu_spec: Path | None = MODEL_FLAGS["gpu_spec"].default
    interconnect_gbps: float | None = MODEL_FLAGS["interconnect_gbps"].default
    ideal: bool = MODEL_FLAGS["ideal"].default
    from_result: Path | None = MODEL_FLAGS["from_result"].default
    efficiency: str = MODEL_FLAGS["efficiency"].default
    max_tokens: int = MODEL_FLAGS["max_tokens"].default
    max_context: int = MODEL_FLAGS["max_context"].default
    engine: str = ENGINE_OPTION.default  # --engine: whose overhead preset, and whose kernel tables
    engine_typed: bool = False  # --engine typed (not its default): it replaces a preset a profile carries


@dataclass(frozen=True, kw_only=True)
class SimulateConfig(ModelOptions):
    profile_file: Path | None = None
    analytic: bool = FLAGS["analytic"].default
    requests: int = FLAGS["requests"].default
    arrivals: str = FLAGS["arrivals"].default
    concurrency: int | None = FLAGS["concurrency"].default  # --concurrency C: a closed loop of C clients
    prompt: str = FLAGS["prompt"].default
    output_lengths: str = FLAGS["output_lengths"].default
    lengths: Path | None = FLAGS["lengths"].default  # --lengths FILE.csv: (prompt, output) pairs drawn
    seed: int = FLAGS["seed"].default
    prefix: str | None = FLAGS["prefix"].default  # --prefix shared:L:N
    sessions: str | None = FLAGS["sessions"].default  # --sessions T:G
    trace: Path | None = FLAGS["trace"].default
    policies: tuple[Policy, ...] = FLAGS["policies"].default  # () : DEFAULT_POLICIES
    # each --overhead-* given replaces that term of the profile's overhead
    per_step_s: float | None = FLAGS["per_step_s"].default
    per_sequence_s: float | None = FLAGS["per_sequence_s"].default
    per_cached_token_s: float | None = FLAGS["per_cached_token_s"].default
    per_prefill_step_s: float | None = FLAGS["per_prefill_step_s"].default
    spec_decode: str | None = FLAGS["spec_decode"].default  # --spec-decode draft=K,accept=DIST[,drafter=D]
    mem_fraction: float = FLAGS["mem_fraction"].default
    slo: Slo | None = FLAGS["slo"].default
    rates: tuple[float, ...] = ()
    sweep_load: tuple[float, ...] = ()  # --sweep-load, each rate spelled out
    gpu_hour_usd: float | None = FLAGS["gpu_hour_usd"].default
    replicas: int = FLAGS["replicas"].default
    router: str = FLAGS["router"].default
    disaggregate: tuple[int, int] | None = FLAGS["disaggregate"].default  # (prefill replicas, decode replicas)
    kv_link_gbps: float | None = FLAGS["kv_link_gbps"].default
    out_dir: Path | None = FLAGS["out_dir"].default
    no_report: bool = FLAGS["no_report"].default
    as_json: bool = FLAGS["as_json"].default

    def __post_init__(self) -> None:
        if self.profile_file and self.analytic:
            raise BadInputError("give a PROFILE.json or --analytic (with --gpu SKU --model NAME), not both")
        if not self.profile_file and not self.analytic:
            raise BadInputError("give a PROFILE.json, or --analytic with --gpu SKU --model NAME")
        check_seed(self.seed)
        check_dtypes(self.dtype, self.kv_dtype)
        check_typed_efficiency(self.efficiency, self.ideal, self.from_result is not None)
        check_spec_sheet(self.sku, self.gpu_spec, self.interconnect_gbps)
        check_engine_name(self.engine)
        if not 0 < self.mem_fraction <= 1:
            raise BadInputError("--mem-fraction must be in (0, 1]")
        for term, value in self.overhead_given.items():  # EngineOverhead's own bound, worded with the flag
            if not math.isfinite(value) or not 0 <= value <= MAX_KERNEL_S:
                raise BadInputError(f"{FLAGS[term].spelled} {value:g}: give seconds from 0 to {MAX_KERNEL_S:g}")
        check_rates(self.rates, "--rates")
        check_sweep_load(self.sweep_load)
        why = None if self.gpu_hour_usd is None else number_refusal(self.gpu_hour_usd, low=0,
                                                                    high=MAX_GPU_HOUR_USD)
        if why:
            raise BadInputError(f"--gpu-hour-usd {self.gpu_hour_usd:g}: {why} (USD per GPU-hour)")
        parse_spec_decode(self.spec_decode)
        if not self.trace:  # a trace's own length is counted as it is read, its arrivals and lengths its own
            check_request_count(self.requests)
            parse_arrivals(self.arrivals)
            if self.lengths is None:
                parse_lengths(self.prompt)
                parse_lengths(self.output_lengths)
        if self.prefix:
            parse_prefix(self.prefix)
        if self.sessions:
            parse_sessions(self.sessions)
        if self.sessions and self.fleet:
            raise BadInputError("--sessions: each turn is sent when the one before it ends, and fleets do not route "
                                "conversations yet; simulate one replica")
        check_fleet(self.replicas, self.router, self.disaggregate, self.kv_link_gbps, self.policy_list)
        if self.concurrency is not None:
            check_closed_loop(self)

    @property
    def fleet(self) -> bool:
        """More than one replica, or prefill and decode apart: simulated by roofline.fleet."""
        return self.replicas > 1 or self.disaggregate is not None

    @property
    def overhead_given(self) -> dict[str, float]:
        """The overhead terms typed on the command line, by EngineOverhead term."""
        return {term: getattr(self, term) for term in EngineOverhead.TERMS if getattr(self, term) is not None}

    @property
    def speculation(self) -> SpecDecode | None:
        """``--spec-decode`` parsed (None: not asked for)."""
        return parse_spec_decode(self.spec_decode)

    @property
    def policy_list(self) -> list[Policy]:
        return list(self.policies or [parse_policy(p) for p in DEFAULT_POLICIES])

    @classmethod
    def from_options(cls, options: Mapping[str, Any], given: Collection[str] = ()) -> SimulateConfig:
        """The config of one command line (``options``: the values by field name as click parsed them, and
        ``profile_file``); ``given``: the fields typed on the command line."""
        values = dict(options)
        split = parse_split(values.get("disaggregate"))
        values["engine_typed"] = "engine" in given
        config = cls(**{**values, "policies": (), "slo": None, "rates": (), "sweep_load": (),  # plain ones first
                        "disaggregate": split})
        building = given_among(given, MODEL_FLAGS)
        if config.profile_file and building:
            raise BadInputError(f"{spelled(MODEL_FLAGS, building)}: these build an --analytic profile, and "
                                f"{config.profile_file} already fixes the model and its shapes; drop them")
        out_dir = config.out_dir
        if out_dir is not None and os.path.exists(out_dir) and not os.path.isdir(out_dir):  # never raises
            raise BadInputError(f"-o {out_dir}: is a file; give a folder for simulation.json and the report")
        refuse_drawn_beside_trace(config.trace, given, FLAGS)
        refuse_specs_beside_lengths(config.lengths, given, FLAGS)
        if "max_context" in given:
            refuse_max_context_past_window(config.max_context, config.model, config.hf_config)
        if "concurrency" in given and "arrivals" in given:
            raise BadInputError("--arrivals and --concurrency: the clients of a closed loop send each request when "
                                "their last one ends; give one or the other")
        if "replicas" in given and "disaggregate" in given:
            raise BadInputError("give --replicas N or --disaggregate P:D (P + D replicas), not both")
        policies = tuple(parse_policy(p) for p in values.get("policies") or ())
        slo = Slo.parse(values["slo"]) if values.get("slo") else None
        return cls(**{**values, "policies": policies, "slo": slo, "rates": _parse_rates(values.get("rates")),
                      "sweep_load": parse_sweep_load(values.get("sweep_load")), "disaggregate": split})


def refuse_max_context_past_window(max_context: int, model: str | None, hf_config: Path | None) -> None:
    """A typed ``--max-context`` longer than the model's context window, refused as decode refuses a ``--context``
    past it (``past_context_window``: the one rule): a profile's contexts past the window describe no step the model
    runs.  Only typed: the default (8192) is the profile's reach whatever the model, as it always was."""
    if bool(model) == bool(hf_config):  # none or both: the profile's own check says which to give
        return
    spec = load_model(model) if model else load_hf_config(cast(Path, hf_config))
    past = past_context_window(spec.name, spec.max_positions, max_context)
    if past:
        raise BadInputError(f"--max-context {max_context}: {past}")


def check_spec_sheet(sku: str | None, gpu_spec: Path | None, interconnect_gbps: float | None) -> None:
    """``--gpu`` or ``--gpu-spec``, not both; ``--interconnect-gbps`` a link's Gb/s (``check_link_gbps``)."""
    if sku and gpu_spec:
        raise BadInputError(f"--gpu {sku} and --gpu-spec {gpu_spec}: give one spec sheet")
    if interconnect_gbps is not None:
        check_link_gbps("--interconnect-gbps", interconnect_gbps)


def check_link_gbps(flag: str, gbps: float) -> None:
    """A link's Gb/s each way: from ``MIN_LINK_GBPS`` (gigabit Ethernet) to ``MAX_LINK_GBPS`` (past any link)."""
    if not math.isfinite(gbps) or not MIN_LINK_GBPS <= gbps <= MAX_LINK_GBPS:
        raise BadInputError(f"{flag} {gbps:g}: give {MIN_LINK_GBPS:g} to {MAX_LINK_GBPS:,.0f} Gb/s each way (from "
                            "gigabit Ethernet to over a hundred times the fastest GPU link)")


def check_closed_loop(config: SimulateConfig) -> None:
    """``--concurrency C``: 1 to ``MAX_REQUESTS`` clients, one replica, requests that do not wait for another
    (conversations already do), and no open-loop rates to sweep or search."""
    concurrency = config.concurrency
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= MAX_REQUESTS:
        raise BadInputError(f"--concurrency {concurrency!r}: give the clients, an integer from 1 to {MAX_REQUESTS:,}")
    if config.fleet:
        raise BadInputError("--concurrency: a fleet routes requests as they arrive, and a closed loop's requests "
                            "arrive as others end; simulate one replica")
    if config.sessions:
        raise BadInputError("--concurrency and --sessions: conversations already send each turn when the one "
                            "before it ends; give one or the other")
    if config.rates or config.sweep_load:
        flag = "--rates" if config.rates else "--sweep-load"
        raise BadInputError(f"{flag} sweeps open-loop Poisson rates; under --concurrency the clients set the rate: "
                            "simulate each concurrency instead")


def refuse_specs_beside_lengths(lengths: Path | None, given: Collection[str], table: Mapping[str, Option]) -> None:
    """``--lengths`` gives each request's prompt and output length: ``--prompt`` and ``--output`` beside it are
    refused, naming them (simulate's and plan's rule)."""
    specs = given_among(given, ["prompt", "output_lengths"])
    if lengths is not None and specs:
        raise BadInputError(f"{spelled(table, specs)}: --lengths {lengths} gives every prompt and output length; "
                            "drop them")


def refuse_drawn_beside_trace(trace: Path | None, given: Collection[str], table: Mapping[str, Option]) -> None:
    """A trace gives every request's arrival and lengths: the options that draw a workload, typed beside it, are
    refused, naming them (simulate's and plan's rule)."""
    drawn = given_among(given, [name for name in DRAWN_WORKLOAD if name in table])
    if trace is not None and drawn:
        raise BadInputError(f"{spelled(table, drawn)}: these draw a workload, and --trace {trace} is the "
                            "workload; drop them")


def _parse_rates(text: str | None) -> tuple[float, ...]:
    if not text:
        return ()
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise BadInputError(f"--rates {text!r}: give requests/s as a comma list (0.5,1,2)") from None


SWEEP_LOAD_SYNTAX = "give requests/s as a comma list (0.5,1,2,4) or LOW:HIGH:N (0.5:16:6)"


def parse_sweep_load(text: str | None) -> tuple[float, ...]:
    """``--sweep-load``: a comma list of rates, or ``LOW:HIGH:N``, N rates from LOW to HIGH spaced evenly in log
    (each a constant factor above the one before: load is read on a log scale).  Ranges are checked here, the
    rates themselves by ``check_sweep_load``."""
    if not text:
        return ()
    try:
        if ":" not in text:
            parts = text.split(",")
            if any(not x.strip() for x in parts):  # "1,,2": a rate left out is a typo, not a request
                raise ValueError
            return tuple(float(x) for x in parts)
        low_text, high_text, count_text = text.split(":")
        low, high, count = float(low_text), float(high_text), int(count_text)
    except ValueError:
        raise BadInputError(f"--sweep-load {text!r}: {SWEEP_LOAD_SYNTAX}") from None
    if not (math.isfinite(low) and math.isfinite(high)) or not 0 < low < high or not 2 <= count <= MAX_RATES:
        raise BadInputError(f"--sweep-load {text!r}: LOW:HIGH:N needs 0 < LOW < HIGH and N from 2 to {MAX_RATES}")
    return tuple(low * (high / low) ** (i / (count - 1)) for i in range(count))


def check_sweep_load(rates: tuple[float, ...]) -> None:
    """The loads of a sweep: ``check_rates``' rule, at least two of them (one point is no trade-off), each once."""
    if not rates:
        return
    check_rates(rates, "--sweep-load")
    if len(rates) < 2:
        given = ",".join(f"{r:g}" for r in rates)
        raise BadInputError(f"--sweep-load {given}: give at least two rates (one load shows no trade-off)")
    if len(set(rates)) < len(rates):
        raise BadInputError("--sweep-load: a rate is given twice; give each load once")


def parse_split(text: str | None) -> tuple[int, int] | None:
    """``--disaggregate P:D``: prefill and decode replicas."""
    if text is None:
        return None
    prefill, sep, decode = text.partition(":")
    try:
        split = (int(prefill), int(decode))
    except ValueError:
        split = None
    if not sep or split is None:
        raise BadInputError(f"--disaggregate {text!r}: give P:D, prefill and decode replicas (e.g. 1:3)")
    return split


def check_fleet(replicas: int, router: str, split: tuple[int, int] | None, kv_link_gbps: float | None,
                policies: list[Policy]) -> None:
    """A fleet's options: 1 to MAX_REPLICAS replicas, a router that exists, a P:D split of positive counts with
    policies that can hand a prefilled prompt over, and a KV link only beside a split."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= MAX_REPLICAS:
        raise BadInputError(f"--replicas {replicas!r}: give an integer from 1 to {MAX_REPLICAS}")
    check_router(router)
    if split is not None:
        if min(split) < 1 or sum(split) > MAX_REPLICAS:
            raise BadInputError(f"--disaggregate {split[0]}:{split[1]}: give at least one prefill and one decode "
                                f"replica, {MAX_REPLICAS} in all at most")
        refuse_static_split(policies)
    if kv_link_gbps is not None:
        if split is None:
            raise BadInputError("--kv-link-gbps is the link between prefill and decode replicas: give it with "
                                "--disaggregate P:D")
        check_kv_link(kv_link_gbps)


def check_router(router: str) -> None:
    if router not in ROUTER_NAMES:
        raise BadInputError(f"--router {router!r}: unknown router; choose from {', '.join(ROUTER_NAMES)}")


def refuse_static_split(policies: list[Policy]) -> None:
    """Prefill and decode apart need a policy that admits each request on its own (not padded batches)."""
    static = [p.text for p in policies if p.kind == "static"]
    if static:
        raise BadInputError(f"--disaggregate: {static[0]} pads prompts into batches that decode together; a "
                            "disaggregated fleet needs continuous, paged or chunked")


def check_kv_link(gbps: float) -> None:
    """``--kv-link-gbps``: a link's Gb/s (``check_link_gbps``)."""
    check_link_gbps("--kv-link-gbps", gbps)


def check_rates(rates: tuple[float, ...], flag: str) -> None:
    """Request rates (simulate's ``--rates``, plan's ``--rate``): positive requests/s, at most ``MAX_RATE_PER_S``
    (a request a nanosecond), and at most ``MAX_RATES`` of them (each is a simulation of every policy)."""
    for rate in rates:
        why = number_refusal(rate, low=0, high=MAX_RATE_PER_S)
        if why:
            unit = " requests/s (a request every nanosecond)" if why.startswith("must be at most") else ""
            raise BadInputError(f"{flag} {rate:g}: {why}{unit}")
    if len(rates) > MAX_RATES:
        raise BadInputError(f"{flag}: {len(rates)} rates, more than {MAX_RATES} (each is one more simulation of "
                            "every policy)")
