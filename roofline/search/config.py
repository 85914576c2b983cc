"""What ``gpubench search`` is asked to do: one ``SearchConfig``, built from the command's options (``FLAGS``) and
checked once, before a model, a spec sheet or a workload is read.  The model, workload, SLO, router, prices and
bound are plan's and simulate's own rows and rules; the rows of the space are the search's.
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofline.core.counting import KV_DTYPES
from roofline.core.errors import BadInputError
from roofline.core.options import Option, check_dtypes, check_seed
from roofline.fleet.plan_config import FLAGS as PLAN_FLAGS
from roofline.fleet.plan_config import MAX_GPUS, parse_prices, parse_rates
from roofline.serving.metrics import Slo
from roofline.serving.simulate_config import (
    ENGINE_OPTION,
    MAX_GPU_HOUR_USD,
    MODEL_FLAGS,
    check_rates,
    check_router,
    refuse_drawn_beside_trace,
    refuse_specs_beside_lengths,
)
from roofline.serving.workload import check_request_count, parse_lengths
from roofline.step.speculative import SpecDecode, parse_spec_decode

# The space searched unless the options say otherwise: modest, so that one model on two SKUs is searched in minutes
# on two cores (scripts/bench_search.py measures it).
DEFAULT_TP = "1,2,4,8"
DEFAULT_ATTENTION_DP = "1,2,4,8"
DEFAULT_KV_DTYPES = "bf16,fp8"
DEFAULT_MAX_BATCHES = "64,256"
DEFAULT_BUDGETS = "2048,8192"
DEFAULT_GPUS_PER_NODE = 8
SPECULATION = ("auto", "on", "off")
# The most values one axis of the space takes: the space is their product, each a whole capacity search.
MAX_AXIS_VALUES = 16
MAX_WORKERS = 256

FLAGS: dict[str, Option] = {
    "model": MODEL_FLAGS["model"],
    "hf_config": MODEL_FLAGS["hf_config"],
    "skus": Option(("--gpu",), multiple=True, default=(), metavar="SKU",
                   help="a SKU to search on (repeatable: each searched), its spec sheet's achievable ceilings"),
    "dtype": MODEL_FLAGS["dtype"],
    "routing": MODEL_FLAGS["routing"],
    "efficiency": MODEL_FLAGS["efficiency"],
    "engine": ENGINE_OPTION,
    "rates": PLAN_FLAGS["rates"],
    "slo": PLAN_FLAGS["slo"],
    **{name: PLAN_FLAGS[name] for name in ("requests", "prompt", "output_lengths", "lengths", "seed", "trace",
                                           "router", "prices", "max_gpus", "mem_fraction")},
    "tps": Option(("--tp",), default=DEFAULT_TP, show_default=True, metavar="N[,N...]",
                  help="tensor-parallel widths tried (attention's; each at most --gpus-per-node)"),
    "attention_dps": Option(("--attention-dp",), default=DEFAULT_ATTENTION_DP, show_default=True,
                            metavar="N[,N...]",
                            help="a mixture of experts: data-parallel attention groups tried, each of TP GPUs, the "
                                 "experts split over all of them (EP = TP x DP); 1 also tries the experts split by TP "
                                 "and by EP = TP (a dense model's data parallelism is its replicas)"),
    "gpus_per_node": Option(("--gpus-per-node",), "int", DEFAULT_GPUS_PER_NODE, show_default=True,
                            help="GPUs one replica may span: its collectives cross the spec sheet's NVLink, one node"),
    "kv_dtypes": Option(("--kv-dtype",), default=DEFAULT_KV_DTYPES, show_default=True, metavar="D[,D...]",
                        help=f"KV cache dtypes tried: {' | '.join(KV_DTYPES)}"),
    "max_batches": Option(("--max-batch",), default=DEFAULT_MAX_BATCHES, show_default=True, metavar="B[,B...]",
                          help="the engine's most running sequences tried (vLLM --max-num-seqs)"),
    "budgets": Option(("--chunk-budget",), default=DEFAULT_BUDGETS, show_default=True, metavar="T[,T...]",
                      help="tokens a step holds tried (chunked prefill: vLLM --max-num-batched-tokens)"),
    "speculation": Option(("--speculation",), "choice", "auto", choices=SPECULATION, show_default=True,
                          help="speculative decoding: auto tries off and on where the model has an MTP head with a "
                               "published acceptance (or --spec-decode is given), on only with it, off never"),
    "spec_decode": Option(("--spec-decode",), metavar="draft=K,accept=DIST[,drafter=D]",
                          help="the speculative decoding tried when speculation is on [DeepSeek-V3's MTP head: "
                               "draft=1,accept=geometric:0.85, the acceptance its report gives]"),
    "aggregated_only": Option(("--aggregated-only",), "flag",
                              help="leave prefill and decode on separate replicas (P:D) out of the space"),
    "served_model": Option(("--served-model",), metavar="REPO|PATH",
                           help="the checkpoint the launch scripts start (a Hugging Face repository or a folder) "
                                "[--model: its spec's source repository; --hf-config: $MODEL, set by you]"),
    "workers": Option(("--workers",), "int", metavar="N",
                      help="worker processes simulating candidates in parallel [the cores]"),
    "resume": Option(("--resume",), "flag",
                     help="continue an interrupted search of the same options from the journal beside -o"),
    "out_dir": Option(("-o", "--out-dir"), "path",
                      help="folder for search.json, the report and deploy/ [results/search-<UTC time>]"),
    "no_report": Option(("--no-report",), "flag", help="write search.json and deploy/ only"),
    "as_json": Option(("--json",), "flag", help="print the front and the choices as JSON"),
}


def parse_ints(text: str, flag: str, low: int = 1, high: int = 1 << 20) -> tuple[int, ...]:
    """``N[,N...]``: whole numbers from ``low`` to ``high``, each once, sorted."""
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise BadInputError(f"{flag} {text!r}: give whole numbers, comma-separated (e.g. 1,2,4)") from None
    if not values or any(not low <= v <= high for v in values):
        raise BadInputError(f"{flag} {text!r}: give whole numbers from {low} to {high}")
    if len(values) > MAX_AXIS_VALUES:
        raise BadInputError(f"{flag} {text!r}: at most {MAX_AXIS_VALUES} values (each is a whole capacity search)")
    return tuple(values)


def parse_kv_dtypes(text: str) -> tuple[str, ...]:
    values = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not values:
        raise BadInputError(f"--kv-dtype {text!r}: give one or more of {', '.join(KV_DTYPES)}")
    for value in values:
        check_dtypes(None, value)
    return values


@dataclass(frozen=True)
class SearchConfig:
    model: str | None = FLAGS["model"].default
    hf_config: Path | None = FLAGS["hf_config"].default
    skus: tuple[str, ...] = FLAGS["skus"].default
    dtype: str | None = FLAGS["dtype"].default
    routing: str = FLAGS["routing"].default
    efficiency: str = FLAGS["efficiency"].default
    engine: str = FLAGS["engine"].default  # whose engine time every candidate's steps carry
    rates: tuple[float, ...] = ()
    slo: Slo | None = FLAGS["slo"].default
    requests: int = FLAGS["requests"].default
    prompt: str = FLAGS["prompt"].default
    output_lengths: str = FLAGS["output_lengths"].default
    lengths: Path | None = FLAGS["lengths"].default
    seed: int = FLAGS["seed"].default
    trace: Path | None = FLAGS["trace"].default
    router: str = FLAGS["router"].default
    prices: tuple[tuple[str, float], ...] = ()
    max_gpus: int = FLAGS["max_gpus"].default
    mem_fraction: float = FLAGS["mem_fraction"].default
    tps: str = FLAGS["tps"].default
    attention_dps: str = FLAGS["attention_dps"].default
    gpus_per_node: int = FLAGS["gpus_per_node"].default
    kv_dtypes: str = FLAGS["kv_dtypes"].default
    max_batches: str = FLAGS["max_batches"].default
    budgets: str = FLAGS["budgets"].default
    speculation: str = FLAGS["speculation"].default
    spec_decode: str | None = FLAGS["spec_decode"].default
    aggregated_only: bool = FLAGS["aggregated_only"].default
    served_model: str | None = FLAGS["served_model"].default
    workers: int | None = FLAGS["workers"].default  # None: the cores
    resume: bool = FLAGS["resume"].default
    out_dir: Path | None = FLAGS["out_dir"].default
    no_report: bool = FLAGS["no_report"].default
    as_json: bool = FLAGS["as_json"].default

    def __post_init__(self) -> None:
        if bool(self.model) == bool(self.hf_config):
            raise BadInputError("give one of --model NAME or --hf-config PATH")
        if not self.skus:
            raise BadInputError("--gpu: give a SKU to search on (repeatable: --gpu h100-sxm --gpu h200-sxm)")
        if len(set(self.skus)) != len(self.skus):
            raise BadInputError(f"--gpu {' '.join(self.skus)}: a SKU is given twice")
        if not self.rates:
            raise BadInputError("--rate: give the requests/s to search for")
        check_rates(self.rates, "--rate")
        if self.slo is None:
            raise BadInputError("--slo: a search meets latency objectives; give them (e.g. ttft_p90=1,tpot_p99=0.05)")
        check_seed(self.seed)
        check_dtypes(self.dtype, None)
        if not self.trace:
            check_request_count(self.requests)
            if self.lengths is None:
                parse_lengths(self.prompt)
                parse_lengths(self.output_lengths)
        if not 0 < self.mem_fraction <= 1:
            raise BadInputError("--mem-fraction must be in (0, 1]")
        check_router(self.router)
        if isinstance(self.max_gpus, bool) or not 1 <= self.max_gpus <= MAX_GPUS:
            raise BadInputError(f"--max-gpus {self.max_gpus}: give 1 to {MAX_GPUS}")
        for sku, price in self.prices:
            if not math.isfinite(price) or not 0 < price <= MAX_GPU_HOUR_USD:
                raise BadInputError(f"--gpu-hour-usd {sku}={price:g}: a price must be positive and at most "
                                    f"{MAX_GPU_HOUR_USD:g} USD per GPU-hour")
            if sku not in self.skus:
                raise BadInputError(f"--gpu-hour-usd prices {sku}, which is not searched (--gpu "
                                    f"{' --gpu '.join(self.skus)})")
        if isinstance(self.gpus_per_node, bool) or not 1 <= self.gpus_per_node <= 72:
            raise BadInputError(f"--gpus-per-node {self.gpus_per_node}: give 1 to 72 (an NVLink domain)")
        axes = (self.tp_values, self.dp_values, self.kv_values, self.max_batch_values, self.budget_values)
        assert all(axes)  # each parsed once here, so a bad value is refused in one line before anything runs
        parse_spec_decode(self.spec_decode)
        if self.speculation == "off" and self.spec_decode is not None:
            raise BadInputError("--spec-decode with --speculation off: it would never be tried")
        if self.workers is not None and not 1 <= self.workers <= MAX_WORKERS:
            raise BadInputError(f"--workers {self.workers}: give 1 to {MAX_WORKERS}")
        if self.resume and self.out_dir is None:
            raise BadInputError("--resume continues the search journalled beside -o DIR: give the same -o")

    @property
    def tp_values(self) -> tuple[int, ...]:
        return parse_ints(self.tps, "--tp", high=self.gpus_per_node)

    @property
    def dp_values(self) -> tuple[int, ...]:
        return parse_ints(self.attention_dps, "--attention-dp", high=self.gpus_per_node)

    @property
    def kv_values(self) -> tuple[str, ...]:
        return parse_kv_dtypes(self.kv_dtypes)

    @property
    def max_batch_values(self) -> tuple[int, ...]:
        return parse_ints(self.max_batches, "--max-batch", high=1 << 16)

    @property
    def budget_values(self) -> tuple[int, ...]:
        return parse_ints(self.budgets, "--chunk-budget", low=16, high=1 << 20)

    @property
    def speculation_given(self) -> SpecDecode | None:
        return parse_spec_decode(self.spec_decode)

    @property
    def worker_count(self) -> int:
        return self.workers or os.cpu_count() or 1

    @property
    def price_of(self) -> dict[str, float]:
        return dict(self.prices)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], given: Collection[str] = ()) -> SearchConfig:
        """The config of one command line (``options``: the values by field name as click parsed them);
        ``given``: the fields typed on the command line."""
        values = dict(options)
        refuse_drawn_beside_trace(values.get("trace"), given, FLAGS)
        refuse_specs_beside_lengths(values.get("lengths"), given, FLAGS)
        out_dir = values.get("out_dir")
        if out_dir is not None and os.path.exists(out_dir) and not os.path.isdir(out_dir):  # never raises
            raise BadInputError(f"-o {out_dir}: is a file; give a folder for search.json, the report and deploy/")
        return cls(**{**values, "skus": tuple(values.get("skus") or ()),
                      "rates": parse_rates(values.get("rates")),
                      "slo": Slo.parse(values["slo"]) if values.get("slo") else None,
                      "prices": parse_prices(values.get("prices"))})
