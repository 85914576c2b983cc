"""What the analytic side times a launch on, the one place ``decode --analytic`` and ``profile --analytic`` (and
``simulate --analytic``) read, so the two give the same kernel time for the same launch.

Three bases, said in every output that uses one:

- ``reference`` (per-matrix efficiencies): each GEMM's datasheet roofline time over its matrix's efficiency,
  derived from a reference database's measured GEMM curves on this SKU (``roofline.reference.efficiency``); other
  launches read their bytes at the bandwidth fraction a one-row GEMM reaches for as many bytes, and their FLOP at
  the SKU's achievable peak;
- ``flat``: the SKU's achievable ceilings (its spec sheet's ``[achievable]`` table, measured by others: one
  bandwidth, one peak per dtype) for every launch;
- ``ideal`` (``--ideal``): the datasheet's peaks, never reached.

``--efficiency auto`` takes ``reference`` where the reference extra is installed and covers the SKU, else
``flat``, and says why.  MBU, MFU and compute-bound are judged against the achievable ceilings in the first two
(the datasheet's with ``--ideal``): ``AnalyticBasis.roof``.
"""

from __future__ import annotations

from dataclasses import dataclass

from roofline.core.counting import PEAK_DTYPES
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
              engine: str = "vllm", require_peak: bool = True) -> AnalyticBasis:
    """The basis of an analytic step on ``gpu`` whose launches are in ``dtypes`` (``dtype``: the step's)."""
    check_efficiency(efficiency, ideal)
    roof, words = sku_roof(gpu, dtype, ideal, require_peak)
    if ideal:
        return AnalyticBasis(roof, analytic_time(gpu.bandwidth_bytes_per_s, _peaks(gpu, True)), words, "ideal")
    flat = analytic_time(gpu.achievable.bandwidth_bytes_per_s, _peaks(gpu, False))
    if efficiency == "flat":
        return AnalyticBasis(roof, flat, words, "flat")
    from roofline.reference.database import ReferenceDataError, open_database
    from roofline.reference.efficiency import GemmEfficiency

    try:
        curves = GemmEfficiency.read(open_database(), gpu, engine, dtypes)
    except ReferenceDataError as exc:
        if efficiency == "reference":
            raise
        return AnalyticBasis(roof, flat, f"{words}; one flat fraction per SKU, not per matrix ({exc})", "flat")
    timer = curve_time(gpu, curves, _peaks(gpu, False))
    return AnalyticBasis(roof, timer, f"{curves.describe(dtype)}; MBU and MFU against the {words}", "reference")


def curve_time(gpu: GpuSpec, curves, achievable_peaks: dict[str, float]) -> TimeFn:
    """Per-launch time on the datasheet's roofline over the launch's matrix efficiency (a GEMM or grouped GEMM), or
    its bytes at a one-row GEMM's bandwidth fraction for as many bytes and its FLOP at the achievable peak."""
    bandwidth = gpu.bandwidth_bytes_per_s
    flat_compute = analytic_time(float("inf"), achievable_peaks)

    def time_s(launch: Launch) -> float:
        work = launch.work
        if launch.op == "gemm":
            roof = roof_time_s(work.flop, work.bytes, bandwidth, gpu.peak_for(launch.dtype))
            return roof / curves.factor(launch.dtype, max(launch.tokens, 1.0), launch.n, launch.k)
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

