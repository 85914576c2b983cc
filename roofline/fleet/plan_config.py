"""What ``gpubench plan`` is asked to do: one ``PlanConfig``, built from the command's options (declared in
``FLAGS``) and checked once, before a profile or a workload is read.  The workload options, the SLO, the
policies, the router and the KV link are simulate's own rows and rules (``roofline.serving.simulate_config``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofline.core.errors import BadInputError
from roofline.core.options import Option, check_seed
from roofline.serving.metrics import Slo
from roofline.serving.policies import DEFAULT_POLICIES, Policy, parse_policy, policy_syntax
from roofline.serving.simulate_config import FLAGS as SIMULATE_FLAGS
from roofline.serving.simulate_config import (
    MAX_GPU_HOUR_USD,
    MAX_REPLICAS,
    check_kv_link,
    check_rates,
    check_router,
    refuse_drawn_beside_trace,
    refuse_specs_beside_lengths,
    refuse_static_split,
)
from roofline.serving.workload import check_request_count, parse_lengths
from roofline.specs.engines import check_engine_name
from roofline.step.speculative import SpecDecode, parse_spec_decode

# The largest fleet a plan searches: past it a target is reported as not met (exit 0), not searched for ever.
MAX_GPUS = MAX_REPLICAS

# Why a plan takes no closed loop: the fleet size it answers is the one that meets the SLO at a given arrival rate,
# and C clients that each wait for their answer set no rate (a bigger fleet answers sooner, so they send more).
CLOSED_LOOP_REFUSAL = ("--concurrency: a plan sizes a fleet for an open-loop arrival rate (--rate), and C clients "
                       "that each wait for their answer send as fast as the fleet answers; simulate one replica with "
                       "simulate --concurrency C --slo ... and read its requests/s as the --rate to plan for")

FLAGS: dict[str, Option] = {
    "rates": Option(("--rate",), required=True, metavar="R[,R...]",
                    help="the traffic to plan for, requests/s (Poisson arrivals); a comma list plans each rate"),
    "slo": Option(("--slo",), required=True, help=SIMULATE_FLAGS["slo"].help),
    **{name: SIMULATE_FLAGS[name] for name in ("requests", "prompt", "output_lengths", "lengths", "seed", "trace")},
    "policies": Option(("--policy",), default=(), multiple=True,
                       help=f"{policy_syntax()} (repeatable: each planned) [{', '.join(DEFAULT_POLICIES)}]"),
    "router": SIMULATE_FLAGS["router"],
    "concurrency": Option(("--concurrency",), "int", metavar="C",
                          help="refused, with the reason: a plan sizes fleets for an open-loop --rate, and a closed "
                               "loop's rate is what the fleet gives back (simulate --concurrency C --slo ... instead)"),
    "prices": Option(("--gpu-hour-usd",), metavar="SKU=PRICE,...",
                     help="what one GPU-hour of each SKU costs you, USD (e.g. h100-sxm=2.5,h200-sxm=3.5): the cost "
                          "per million output tokens; none is built in"),
    "max_gpus": Option(("--max-gpus",), "int", MAX_GPUS, show_default=True,
                       help="the largest fleet searched: a target no fleet up to it meets is reported as not met"),
    "disaggregate": Option(("--disaggregate",), "flag",
                           help="also plan prefill and decode on separate replicas, searching the P:D split"),
    "kv_link_gbps": Option(("--kv-link-gbps",), "float",
                           help="with --disaggregate: the link the KV cache crosses, Gb/s [each profile's spec "
                                "sheet interconnect]"),
    "spec_decode": SIMULATE_FLAGS["spec_decode"],
    "engine": SIMULATE_FLAGS["engine"],
    "mem_fraction": SIMULATE_FLAGS["mem_fraction"],
    "out_dir": Option(("-o", "--out-dir"), "path",
                      help="folder for plan.json and the report [results/plan-<UTC time>]"),
    "no_report": Option(("--no-report",), "flag", help="write plan.json only"),
    "as_json": Option(("--json",), "flag", help="print the plans as JSON"),
}


@dataclass(frozen=True)
class PlanConfig:
    profile_files: tuple[Path, ...] = ()
    rates: tuple[float, ...] = ()
    slo: Slo | None = FLAGS["slo"].default
    requests: int = FLAGS["requests"].default
    prompt: str = FLAGS["prompt"].default
    output_lengths: str = FLAGS["output_lengths"].default
    lengths: Path | None = FLAGS["lengths"].default
    seed: int = FLAGS["seed"].default
    trace: Path | None = FLAGS["trace"].default
    policies: tuple[Policy, ...] = FLAGS["policies"].default  # () : DEFAULT_POLICIES
    router: str = FLAGS["router"].default
    concurrency: int | None = FLAGS["concurrency"].default  # always refused (CLOSED_LOOP_REFUSAL)
    prices: tuple[tuple[str, float], ...] = ()  # (SKU, USD per GPU-hour)
    max_gpus: int = FLAGS["max_gpus"].default
    disaggregate: bool = FLAGS["disaggregate"].default
    kv_link_gbps: float | None = FLAGS["kv_link_gbps"].default
    spec_decode: str | None = FLAGS["spec_decode"].default  # --spec-decode draft=K,accept=DIST[,drafter=D]
    engine: str = FLAGS["engine"].default  # --engine: whose overhead preset each profile's steps carry
    engine_typed: bool = False  # --engine typed: it replaces a preset a profile carries
    mem_fraction: float = FLAGS["mem_fraction"].default
    out_dir: Path | None = FLAGS["out_dir"].default
    no_report: bool = FLAGS["no_report"].default
    as_json: bool = FLAGS["as_json"].default

    def __post_init__(self) -> None:
        if not self.profile_files:
            raise BadInputError("give one step profile per candidate: gpubench plan PROFILE.json [PROFILE.json ...]")
        named: dict[Path, int] = {}
        for index, path in enumerate(self.profile_files):  # one candidate planned twice: two rows of one plan
            first = named.setdefault(Path(path).resolve(), index)
            if first != index:
                again = "" if str(self.profile_files[first]) == str(path) else f" (as {self.profile_files[first]})"
                raise BadInputError(f"{path}: given twice{again}; give each candidate profile once")
        if self.concurrency is not None:
            raise BadInputError(CLOSED_LOOP_REFUSAL)
        if not self.rates:
            raise BadInputError("--rate: give the requests/s to plan for")
        check_rates(self.rates, "--rate")
        if self.slo is None:
            raise BadInputError("--slo: a plan meets latency objectives; give them (e.g. ttft_p90=2,itl_p99=0.05)")
        check_seed(self.seed)
        if not self.trace:
            check_request_count(self.requests)
            if self.lengths is None:
                parse_lengths(self.prompt)
                parse_lengths(self.output_lengths)
        if not 0 < self.mem_fraction <= 1:
            raise BadInputError("--mem-fraction must be in (0, 1]")
        check_router(self.router)
        check_engine_name(self.engine)
        parse_spec_decode(self.spec_decode)
        if isinstance(self.max_gpus, bool) or not 1 <= self.max_gpus <= MAX_GPUS:
            raise BadInputError(f"--max-gpus {self.max_gpus}: give 1 to {MAX_GPUS}")
        for sku, price in self.prices:
            if not math.isfinite(price) or not 0 < price <= MAX_GPU_HOUR_USD:
                raise BadInputError(f"--gpu-hour-usd {sku}={price:g}: a price must be positive and at most "
                                    f"{MAX_GPU_HOUR_USD:g} USD per GPU-hour")
        if self.kv_link_gbps is not None:
            if not self.disaggregate:
                raise BadInputError("--kv-link-gbps is the link between prefill and decode replicas: give it with "
                                    "--disaggregate")
            check_kv_link(self.kv_link_gbps)
        if self.disaggregate:
            refuse_static_split(self.policy_list)

    @property
    def policy_list(self) -> list[Policy]:
        return list(self.policies or [parse_policy(p) for p in DEFAULT_POLICIES])

    @property
    def speculation(self) -> SpecDecode | None:
        """``--spec-decode`` parsed (None: not asked for)."""
        return parse_spec_decode(self.spec_decode)

    @property
    def price_of(self) -> dict[str, float]:
        return dict(self.prices)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], given: Collection[str] = ()) -> PlanConfig:
        """The config of one command line (``options``: the values by field name as click parsed them, and
        ``profile_files``); ``given``: the fields typed on the command line."""
        values = dict(options)
        refuse_drawn_beside_trace(values.get("trace"), given, FLAGS)
        refuse_specs_beside_lengths(values.get("lengths"), given, FLAGS)
        out_dir = values.get("out_dir")
        if out_dir is not None and os.path.exists(out_dir) and not os.path.isdir(out_dir):  # never raises
            raise BadInputError(f"-o {out_dir}: is a file; give a folder for plan.json and the report")
        return cls(**{**values, "profile_files": tuple(values.get("profile_files") or ()),
                      "engine_typed": "engine" in given,
                      "rates": parse_rates(values.get("rates")),
                      "slo": Slo.parse(values["slo"]) if values.get("slo") else None,
                      "policies": tuple(parse_policy(p) for p in values.get("policies") or ()),
                      "prices": parse_prices(values.get("prices"))})


def parse_rates(text: str | None) -> tuple[float, ...]:
    if not text:
        return ()
    try:
        return tuple(sorted(float(x) for x in text.split(",") if x.strip()))
    except ValueError:
        raise BadInputError(f"--rate {text!r}: give requests/s, or a comma list of them (10,20,40)") from None


def parse_prices(text: str | None) -> tuple[tuple[str, float], ...]:
    """``SKU=PRICE,...``: USD per GPU-hour, each SKU once."""
    if not text:
        return ()
    prices: dict[str, float] = {}
    for part in text.split(","):
        sku, sep, value = (piece.strip() for piece in part.partition("="))
        try:
            price = float(value)
        except ValueError:
            price = math.nan
        if not sep or not sku or not math.isfinite(price) or price <= 0:
            raise BadInputError(f"--gpu-hour-usd {text!r}: give SKU=PRICE,... with each price a finite, positive "
                                "number of USD per GPU-hour")
        if sku in prices:
            raise BadInputError(f"--gpu-hour-usd {text!r}: {sku} is priced twice")
        prices[sku] = price
    return tuple(prices.items())
