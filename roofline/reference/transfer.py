"""A SKU the reference database lacks: the efficiencies of the nearest covered SKU of the same generation, carried.

An efficiency is a fraction of a datasheet's roofline (``roofline.reference.efficiency``): a GEMM's roofline time
over its measured time.  Carried to another SKU of the same architecture it keeps its fraction and takes the other
SKU's datasheet bandwidth and peak, so the carried time of a launch is the target's roofline time over the source's
efficiency; a measured table in seconds (a fused MoE layer, an attention table) is scaled by the launch's roofline
on the target over its roofline on the source.  Launch floors (the fastest GEMM, attention and elementwise launches
measured) are kept as measured: a launch's fixed cost is the architecture's and the driver's, not the memory's.

The nearest covered SKU is the shipped spec sheet with reference data of the same generation whose datasheet
bandwidth and bf16 peak are closest (the sum of the absolute log ratios).  A generation is read from the sheet's
name (NVIDIA's architecture pages: A100/A30 Ampere, L4/L40S Ada Lovelace, H100/H200 Hopper, B200/B300/GB200/GB300
Blackwell).  How well this transfers, measured by holding out each covered system in turn:
``scripts/reference_transfer_holdout.py`` and docs/serving.md.
"""

from __future__ import annotations

import math
import re

from roofline.reference.database import NAME, Database
from roofline.specs.gpus import GpuSpec, load_gpu_specs

# Architecture by the spec sheet's (or the database system's) name: NVIDIA's data-center architecture pages.
GENERATIONS = (("Blackwell", r"\bG?B[23]00|b[23]00|gb[23]00"), ("Hopper", r"\bG?H[12]00|h[12]00"),
               ("Ada Lovelace", r"\bL40|\bL4\b|l40|\bl4\b"), ("Ampere", r"\bA100|\bA30\b|a100|a30"))


def generation(name: str) -> str | None:
    """The architecture a GPU of ``name`` belongs to (None: not one gpubench carries efficiencies within)."""
    return next((gen for gen, pattern in GENERATIONS if re.search(pattern, name)), None)


def covered(db: Database, gpu: GpuSpec) -> bool:
    try:
        db.system(gpu)
    except Exception:  # noqa: BLE001 - any reason the database has no data for it: not covered
        return False
    return True


def nearest_covered(db: Database, gpu: GpuSpec, candidates: list[GpuSpec] | None = None) -> GpuSpec | None:
    """The covered spec sheet of ``gpu``'s generation nearest it in datasheet bandwidth and bf16 peak (None: its
    generation has none, or it is covered itself)."""
    own = generation(gpu.name)
    if own is None:
        return None
    sheets = candidates if candidates is not None else list(load_gpu_specs().values())
    peers = [s for s in sheets if s.sku != gpu.sku and NAME in s.reference_systems and generation(s.name) == own
             and covered(db, s)]
    if not peers:
        return None

    def distance(other: GpuSpec) -> float:
        peak, theirs = gpu.peak_for("bf16") or 1.0, other.peak_for("bf16") or 1.0
        return abs(math.log(other.bandwidth_bytes_per_s / gpu.bandwidth_bytes_per_s)) + abs(math.log(theirs / peak))
    return min(peers, key=lambda other: (distance(other), other.sku))


def carried_words(source: GpuSpec, target: GpuSpec) -> str:
    """What a basis says of a carried efficiency."""
    peak_s, peak_t = source.peak_for("bf16") or 0.0, target.peak_for("bf16") or 0.0
    return (f"{source.sku} efficiencies carried to {target.sku} (the database has no {target.sku}; nearest covered "
            f"{generation(target.name)} SKU): each a fraction of the datasheet roofline, on {target.sku}'s "
            f"{target.bandwidth_bytes_per_s / 1e12:.3g} TB/s and {peak_t / 1e12:.0f} TFLOP/s bf16 instead of "
            f"{source.sku}'s {source.bandwidth_bytes_per_s / 1e12:.3g} and {peak_s / 1e12:.0f}; measured tables "
            "scaled by the roofline ratio, launch floors as measured")
