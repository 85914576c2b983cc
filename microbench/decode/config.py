"""What ``gpubench decode`` is asked to do: one ``DecodeConfig``, built from the command's options and checked
once, before torch is imported or a model is read.  ``FLAGS`` declares each option (the CLI declares its flags
from it, so a refusal names the flag as the user typed it).

What needs a file (the model's config, does --tp divide its heads, the SKU's spec sheet) is checked when the
job reads it; everything else is checked here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from microbench.points.plan import PlanError, parse_batches
from roofline.core.counting import DTYPES, KV_DTYPES
from roofline.core.options import Option, check_dtypes, number_refusal
from roofline.decode.ceilings import EFFICIENCIES, check_typed_efficiency
from roofline.step.parallel import Parallelism
from roofline.step.routing import Routing
from roofline.step.speculative import parse_spec_decode

# A decode table with more rows than this is no longer read; 4096 rows took 8.3 s here, a million over half an hour.
MAX_DECODE_BATCHES = 4096

FLAGS: dict[str, Option] = {
    "model": Option(("--model",), help="model id from profiles/models (llama-3-70b, mixtral-8x7b, ...)"),
    "hf_config": Option(("--hf-config",), "path", help="a Hugging Face config.json on disk"),
    "tp": Option(("--tp",), "int", 1, show_default=True, help="tensor-parallel GPUs"),
    "ep": Option(("--ep",), "int", 1, show_default=True,
                 help="expert-parallel GPUs (a mixture of experts: experts split, attention data-parallel)"),
    "routing": Option(("--routing",), default="balanced", show_default=True,
                      help="tokens over experts: balanced | uniform | zipf:S | power-law:ALPHA (aiconfigurator's)"),
    "context": Option(("--context",), "int", 4096, show_default=True, help="tokens in each sequence's KV cache"),
    "spec_decode": Option(("--spec-decode",), metavar="draft=K,accept=DIST",
                          help="speculative decoding: K draft tokens, accept=geometric:P or hist:p0/../pK "
                               "[,drafter=mtp|MODEL]"),
    "dtype": Option(("--dtype",),
                    help=f"weights and activations: {' | '.join(DTYPES)} (quantized formats: the layers' linears) "
                         "[default: the checkpoint's quantization_config where --hf-config has one, else bf16]"),
    "kv_dtype": Option(("--kv-dtype",),
                       help=f"KV cache dtype: {' | '.join(KV_DTYPES)} [what the linears write: bf16 for fp8 and "
                            "the quantized formats]"),
    "batches": Option(("--batch",), default="1:1024:x2", show_default=True, help="batches: list and ranges"),
    "mem_fraction": Option(("--mem-fraction",), "number", 0.9, show_default=True, low=0, high=1,
                           help="share of device memory for weights + KV cache"),
    "analytic": Option(("--analytic",), "flag", help="from the SKU's analytic basis only (needs --gpu), no measuring"),
    "sku": Option(("--gpu",), help="SKU for the analytic side [the matched SKU]"),
    "ideal": Option(("--ideal",), "flag",
                    help="analytic side: the datasheet's peak bandwidth and FLOP/s, not the SKU's achievable ceilings"),
    "efficiency": Option(("--efficiency",), "choice", "auto", choices=EFFICIENCIES, show_default=True,
                         help="analytic side: per-matrix efficiencies from the reference database's GEMM curves "
                              "(reference), the SKU's flat achievable ceilings (flat), or reference where installed "
                              "and covering the SKU (auto)"),
    "from_result": Option(("--from",), "path", help="take launch times from this sweep result instead of measuring"),
    "device": Option(("--device",), default="auto", show_default=True),
    "budget_s": Option(("--budget",), "number", low=0, help="seconds of sampling per launch measured"),
    "as_json": Option(("--json",), "flag", help="print the whole document as JSON"),
    "output": Option(("-o", "--output"), "path", help="folder for decode.json and decode.png"),
}


@dataclass(frozen=True)
class DecodeConfig:
    model: str | None = FLAGS["model"].default
    hf_config: Path | None = FLAGS["hf_config"].default
    tp: int = FLAGS["tp"].default
    ep: int = FLAGS["ep"].default
    routing: str = FLAGS["routing"].default
    spec_decode: str | None = FLAGS["spec_decode"].default
    context: int = FLAGS["context"].default
    dtype: str | None = FLAGS["dtype"].default  # None: the checkpoint's (roofline.specs.models.in_dtype)
    kv_dtype: str | None = FLAGS["kv_dtype"].default  # None: the checkpoint's, else what the linears write
    batches: tuple[int, ...] = tuple(parse_batches(FLAGS["batches"].default))
    batch_text: str = FLAGS["batches"].default  # --batch as typed, for the message when it names too many batches
    mem_fraction: float = FLAGS["mem_fraction"].default
    analytic: bool = FLAGS["analytic"].default
    sku: str | None = FLAGS["sku"].default
    ideal: bool = FLAGS["ideal"].default
    efficiency: str = FLAGS["efficiency"].default
    from_result: Path | None = FLAGS["from_result"].default
    device: str = FLAGS["device"].default
    budget_s: float | None = FLAGS["budget_s"].default
    as_json: bool = FLAGS["as_json"].default
    output: Path | None = FLAGS["output"].default

    def __post_init__(self) -> None:
        if bool(self.model) == bool(self.hf_config):
            raise PlanError("give one of --model NAME or --hf-config PATH")
        if self.context <= 0:
            raise PlanError(f"--context must be positive, got {self.context}")
        Parallelism(self.tp, self.ep)  # positive, and EP a multiple of TP (one line each)
        Routing.parse(self.routing)
        parse_spec_decode(self.spec_decode)
        check_dtypes(self.dtype, self.kv_dtype)
        if not 0 < self.mem_fraction <= 1:
            raise PlanError("--mem-fraction must be in (0, 1]")
        if self.analytic and not self.sku:
            raise PlanError("--analytic needs --gpu SKU")
        check_typed_efficiency(self.efficiency, self.ideal)
        if self.analytic and self.from_result is not None:  # it would be ignored: --analytic reads nothing
            raise PlanError("--from gives measured launch times; --analytic is the spec sheet only: give one of them")
        if self.budget_s is not None and number_refusal(self.budget_s, low=0) is not None:
            raise PlanError(f"--budget {self.budget_s:g}: {number_refusal(self.budget_s, low=0)}")
        if not self.batches:
            raise PlanError("--batch: give at least one batch")
        if len(self.batches) > MAX_DECODE_BATCHES:  # each is a row of the table and a point of the figure
            raise PlanError(f"--batch {self.batch_text}: {len(self.batches)} batches, more than the "
                            f"{MAX_DECODE_BATCHES} a decode table shows; use a ratio step (1:1048576:x2) or a "
                            "shorter range")

    @classmethod
    def from_options(cls, options: Mapping[str, Any], given: Collection[str] = ()) -> DecodeConfig:
        """The config of one command line: ``options`` by field name as click parsed them (``batches``: the
        --batch text)."""
        values = dict(options)
        text = values.pop("batches", FLAGS["batches"].default)
        return cls(**values, batches=tuple(parse_batches(text)), batch_text=text)
