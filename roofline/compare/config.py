"""What ``gpubench compare`` is asked to do: one ``CompareConfig``, built from the command's options and checked
once, before any result is read.  ``FLAGS`` declares each option (the CLI declares its flags from it)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofline.core.options import Option, OptionError, number_refusal

FORMATS = ("table", "md", "json")

FLAGS: dict[str, Option] = {
    "baseline": Option(("--baseline",), help="the result others are compared to [the first]"),
    "specs": Option(("--spec",), help="add spec-only rows for these SKUs: h200-sxm,b200"),
    "fmt": Option(("--format",), "choice", "table", choices=FORMATS, show_default=True),
    "output": Option(("-o", "--output"), "path", help="folder for compare.md, compare.json and overlaid figures"),
    "mad_k": Option(("--mad-k",), "number", 3.0, show_default=True, low=0,
                    help="fleet: flag units more than k robust sd (1.4826 MAD) from their SKU's median"),
    "fail_on_outlier": Option(("--fail-on-outlier",), "flag", help="exit 1 when any unit is flagged"),
    "reference": Option(("--reference",), metavar="aiconfigurator",
                        help="beside a reference database's GEMM times for each result's SKU, the baseline (the "
                             "[reference] extra)"),
    "engine": Option(("--engine",), help="--reference: vllm | sglang | trtllm, whose kernels it timed [vllm]"),
}


@dataclass(frozen=True)
class CompareConfig:
    inputs: tuple[Path, ...]
    baseline: str | None = FLAGS["baseline"].default
    specs: tuple[str, ...] = ()  # SKUs given spec-only rows
    fmt: str = FLAGS["fmt"].default
    output: Path | None = FLAGS["output"].default
    mad_k: float = FLAGS["mad_k"].default
    fail_on_outlier: bool = FLAGS["fail_on_outlier"].default
    reference: str | None = FLAGS["reference"].default
    engine: str | None = FLAGS["engine"].default

    def __post_init__(self) -> None:
        if not self.inputs:
            raise OptionError("give at least one result file or folder to compare")
        if self.fmt not in FORMATS:
            raise OptionError(f"unknown --format {self.fmt!r}; choose from {', '.join(FORMATS)}")
        if self.engine is not None and self.reference is None:
            raise OptionError("--engine names the reference's engine: give it with --reference aiconfigurator")
        why = number_refusal(self.mad_k, low=0)
        if why is not None:
            raise OptionError(f"--mad-k {self.mad_k:g}: {why}")

    @classmethod
    def from_options(cls, options: Mapping[str, Any], given: Collection[str] = ()) -> CompareConfig:
        """The config of one command line (``options``: the values by field name as click parsed them, plus
        ``inputs``); ``--spec`` is a comma list."""
        values = dict(options)
        values["inputs"] = tuple(values.get("inputs") or ())
        values["specs"] = tuple(s.strip() for s in (values.get("specs") or "").split(",") if s.strip())
        return cls(**values)
