"""What the analytic side times a launch on, the one place ``decode --analytic`` and ``profile --analytic`` (and
``simulate --analytic``) read, so the two give the same kernel time for the same launch.

Three bases, said in every output that uses one:

- ``reference`` (per-matrix efficiencies): each GEMM's datasheet roofline time over its matrix's efficiency,
  derived from a reference database's measured GEMM curves on this SKU (``roofline.reference.efficiency``); given
  the step, its routed experts from the database's fused MoE layer and its attention from its attention tables,
  with a measured floor under the attention it has no table of (``roofline.reference.kernels``); other launches
  read their bytes at the bandwidth fraction a one-row GEMM reaches for as many bytes, and their FLOP at the SKU's
  achievable peak;
- ``flat``: the SKU's achievable ceilings (its spec sheet's ``[achievable]`` table, measured by others: one
  bandwidth, one peak per dtype) for every launch;
- ``ideal`` (``--ideal``): the datasheet's peaks, never reached.

``--efficiency auto`` takes ``reference`` where the reference extra is installed and covers the SKU, else
``flat``, and says why.  MBU, MFU and compute-bound are judged against the achievable ceilings in the first two
(the datasheet's with ``--ideal``): ``AnalyticBasis.roof``.

No launch is timed faster than the SKU's achievable peak of its format allows (``capped``): an efficiency measured
on one format's table and applied to another's datasheet peak (fp8 on bf16's curves) could otherwise land above
what any kernel of that format reached.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from roofline.core.counting import PEAK_DTYPES, compute_dtype
from roofline.core.errors import BadInputError
from roofline.core.roof import Roof, roof_time_s
from roofline.decode.step import TimeFn, analytic_time
from roofline.specs.gpus import GpuSpec, SpecError
from roofline.step.launches import Launch, StepModel

EFFICIENCIES = ("auto", "reference", "flat")


@dataclass(frozen=True)
class AnalyticBasis:
    """A SKU's launch timer, the ceilings judged against, and the words that say what both are."""

    roof: Roof
    time_s: TimeFn
    basis: str
    efficiency: str  # reference | flat | ideal
    # The database's tables beyond its GEMMs (``roofline.reference.kernels.StepKernels``) where the basis read them
    # for a step: the profiles take the elementwise floor from it.
    kernels: Any = None


def spec_roof(gpu: GpuSpec, dtype: str) -> Roof:
    peak = gpu.peak_for(dtype)
    if not peak:
        raise SpecError(f"{gpu.sku} has no {dtype} peak in its spec sheet")
    return Roof(gpu.bandwidth_bytes_per_s, peak)


def sku_roof(gpu: GpuSpec, dtype: str, ideal: bool, require_peak: bool = True) -> tuple[Roof, str]:
    """The SKU's ceilings and what they are: its achievable ones by default, the datasheet's with ``ideal``.  A dtype
    the SKU has no peak for is refused the same way either way, unless ``require_peak`` is off (decode times such a
    step by its bytes alone, and says so)."""
    spec = spec_roof(gpu, dtype) if require_peak or gpu.peak_for(dtype) else Roof(gpu.bandwidth_bytes_per_s, None)
    if ideal:
        return spec, f"spec sheet {gpu.sku} (--ideal)"
    achievable = gpu.achievable
    return Roof(achievable.bandwidth_bytes_per_s, achievable.peak_for(dtype)), \
        f"achievable ceilings of {gpu.sku}: {achievable.describe(dtype)}"


def check_efficiency(efficiency: str, ideal: bool = False, from_result: bool = False) -> None:
    """``--efficiency``: one of ``EFFICIENCIES``; ``reference`` is neither the datasheet (``--ideal``) nor a sweep's
    fits (``--from``)."""
    if efficiency not in EFFICIENCIES:
        raise BadInputError(f"--efficiency {efficiency}: choose from {', '.join(EFFICIENCIES)}")
    if efficiency == "reference" and ideal:
        raise BadInputError("--ideal takes the datasheet's peaks; --efficiency reference the reference's measured "
                            "curves: give one")
    if efficiency == "reference" and from_result:
        raise BadInputError("--from takes a sweep's fitted curves; --efficiency reference the reference's: give one")


def check_typed_efficiency(efficiency: str, ideal: bool = False, from_result: bool = False) -> None:
    """``--efficiency`` as a command line typed it: ``check_efficiency``, and ``flat`` (the achievable ceilings)
    is not the datasheet either (``--ideal``)."""
    check_efficiency(efficiency, ideal, from_result)
    if efficiency == "flat" and ideal:
        raise BadInputError("--ideal takes the datasheet's peaks; --efficiency flat the SKU's achievable ceilings: "
                            "give one")


def _peaks(gpu: GpuSpec, ideal: bool) -> dict[str, float]:
    """Every precision's peak of one kind: the datasheet's, or the achievable (each launch's own dtype's)."""
    table = gpu.peak_flop_per_s if ideal else gpu.achievable.peak_flop_per_s
    return {d: table[d] for d in PEAK_DTYPES if table.get(d)}


def step_dtypes(step: StepModel) -> set[str]:
    """The dtypes a step's matrices are stored in (the LM head's bf16 beside a quantized format)."""
    return {lin.dtype for lin in step.linears} | {g.dtype for g in step.grouped}


def sku_basis(gpu: GpuSpec, dtype: str, dtypes: set[str], *, ideal: bool = False, efficiency: str = "flat",
              engine: str = "vllm", require_peak: bool = True, step: StepModel | None = None) -> AnalyticBasis:
    """The basis of an analytic step on ``gpu`` whose launches are in ``dtypes`` (``dtype``: the step's); with
    ``step``, the reference basis also reads the database's MoE and attention tables for that step."""
    check_efficiency(efficiency, ideal)
    roof, words = sku_roof(gpu, dtype, ideal, require_peak)
    if ideal:
        return AnalyticBasis(roof, analytic_time(gpu.bandwidth_bytes_per_s, _peaks(gpu, True)), words, "ideal")
    flat = analytic_time(gpu.achievable.bandwidth_bytes_per_s, _peaks(gpu, False))
    if efficiency == "flat":
        return AnalyticBasis(roof, flat, words, "flat")
    from roofline.reference.database import ReferenceDataError, open_database
    from roofline.reference.efficiency import GemmEfficiency
    from roofline.reference.kernels import StepKernels
    from roofline.reference.transfer import carried_words, covered, nearest_covered

    try:
        db = open_database()
        source, carried = gpu, ""
        if not covered(db, gpu):  # the nearest covered SKU of its generation, carried (roofline.reference.transfer)
            near = nearest_covered(db, gpu)
            if near is not None:
                source, carried = near, carried_words(near, gpu) + "; "
        curves = GemmEfficiency.read(db, source, engine, dtypes)
        kernels = StepKernels.read(db, source, engine, step, curves.gemm_floor()) if step is not None else None
    except ReferenceDataError as exc:
        if efficiency == "reference":
            raise
        return AnalyticBasis(roof, flat, f"{words}; one flat fraction per SKU, not per matrix ({exc})", "flat")
    if kernels is not None and source is not gpu:
        kernels.rescale = roofline_ratio(source, gpu)
    timer = capped(gpu, curve_time(gpu, curves, _peaks(gpu, False), kernels))
    said = f"{curves.describe(dtype)}; {kernels.describe_moe()}" if kernels is not None and step is not None \
        and step.grouped else curves.describe(dtype)
    return AnalyticBasis(roof, timer, f"{carried}{said}; MBU and MFU against the {words}", "reference", kernels)


def roofline_ratio(source: GpuSpec, target: GpuSpec) -> Callable[[Launch], float]:
    """A launch's datasheet roofline time on ``target`` over its time on ``source``: what a time measured on
    ``source`` is scaled by when its efficiency is carried to ``target``."""
    def ratio(launch: Launch) -> float:
        work = launch.work
        there = roof_time_s(work.flop, work.bytes, source.bandwidth_bytes_per_s, source.peak_for(launch.dtype))
        here = roof_time_s(work.flop, work.bytes, target.bandwidth_bytes_per_s, target.peak_for(launch.dtype))
        return float(here / there) if there else 1.0
    return ratio


def capped(gpu: GpuSpec, time_fn: TimeFn) -> TimeFn:
    """``time_fn`` never faster than the launch's FLOP at the SKU's achievable peak of its format (its compute
    dtype's where the sheet has none of the format's own): an efficiency times a datasheet peak stays at or under
    what was reached on that format."""
    achievable = gpu.achievable

    def time_s(launch: Launch) -> float:
        peak = achievable.peak_for(launch.dtype) or achievable.peak_for(compute_dtype(launch.dtype))
        floor = launch.work.flop / peak if peak else 0.0
        return max(time_fn(launch), floor)
    return time_s

def curve_time(gpu: GpuSpec, curves, achievable_peaks: dict[str, float], kernels=None) -> TimeFn:
    """Per-launch time on the datasheet's roofline over the launch's matrix efficiency (a GEMM or grouped GEMM), or
    its bytes at a one-row GEMM's bandwidth fraction for as many bytes and its FLOP at the achievable peak; with
    ``kernels`` (``roofline.reference.kernels.StepKernels``), the step's experts and attention from the database's
    tables where it has them, and no attention launch under the fastest it measured."""
    bandwidth = gpu.bandwidth_bytes_per_s
    flat_compute = analytic_time(float("inf"), achievable_peaks)

    def time_s(launch: Launch) -> float:
        work = launch.work
        if launch.op == "gemm":
            roof = roof_time_s(work.flop, work.bytes, bandwidth, gpu.peak_for(launch.dtype))
            return roof / curves.factor(launch.dtype, max(launch.tokens, 1.0), launch.n, launch.k)
        if kernels is not None and launch.op == "grouped":
            fused = kernels.grouped_s(launch, curves_only)
            if fused is not None:
                return fused
            floor = kernels.gemm_floor.time_s if kernels.gemm_floor else 0.0
            return max(floor, curves_only(launch))
        if kernels is not None and launch.part == "attention":
            table = kernels.attention_s(launch, time_s)
            if table is not None:
                return table
            return max(kernels.attention_floor_s(launch), curves_only(launch))
        return curves_only(launch)

    def curves_only(launch: Launch) -> float:
        work = launch.work
        if launch.op == "gemm":
            return time_s(launch)
        memory = work.bytes / (bandwidth * curves.memory_fraction(work.bytes))
        if launch.op == "grouped":
            # One launch over every touched expert: its bytes stream as one launch of as many bytes does, not as
            # that many standalone launches of one expert's small matrix (each paying its own launch and tail,
            # which the reference's standalone GEMMs of that shape measure); its FLOP at the fraction of peak one
            # expert's GEMM of as many rows reaches.
            rows = launch.tokens * launch.topk / max(launch.touched, 1.0)
            peak = gpu.peak_for(launch.dtype)
            compute = work.flop / peak / curves.factor(launch.dtype, max(rows, 1.0), launch.n, launch.k) \
                if peak else 0.0
            return max(memory, compute)
        return max(memory, flat_compute(launch))
    return time_s
