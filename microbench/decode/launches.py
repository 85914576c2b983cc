"""``gpubench decode`` measured: time every distinct launch of the step on this device (or take them from
a sweep's result), then hand the times to ``roofline.decode.step``.  In a weight-only format the layers' linears
are points of that format and the LM head and attention bf16 ones, as the step launches them
(``DecodeSetup.launches``); a format this device's ops cannot run is a point that is not ok: one line, exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from microbench.points.config import SweepConfig
from microbench.points.plan import PlanError, PointSpec
from microbench.timing import ops
from microbench.timing.measure import measure_point
from microbench.timing.observer import SweepObserver
from microbench.timing.session import open_session
from roofline.core.counting import MIXER_OPS, compute_dtype
from roofline.decode.step import DecodeSetup
from roofline.result.document import Result
from roofline.result.sections import Device


def point_spec(key: tuple, routing: str = "balanced") -> PointSpec:
    """The sweep point a launch key names (a grouped one's experts and top-k, under the step's routing)."""
    op, dtype, batch, n, k, *grouped = key
    if op in MIXER_OPS:  # a state update or sparse attention: the mixer's shape
        return PointSpec(op, dtype, batch, n, k, mixer=grouped[0])
    if grouped:
        experts, topk = grouped
        return PointSpec(op, dtype, batch, n, k, "torch", experts, topk, routing)
    return PointSpec(op, dtype, batch, n, k)


def needed_launches(setup: DecodeSetup, batches: list[int]) -> list[tuple]:
    """The sweep points that time every launch of the step at ``batches``, each once, in order."""
    keys: list[tuple] = []
    for batch in batches:
        for launch in setup.launches(batch):
            keys += [key for key in setup.point_keys(launch) if key not in keys]
    return keys


def times_from_result(result: Result, path: Path, keys) -> tuple[dict, Device]:
    """Each launch's median from a loaded sweep result (read from ``path``, named in the error)."""
    usable = [p for p in result.points if p.usable and p.backend == "torch"]
    # usable: has samples
    medians = {p.launch_key: p.stats.median_s for p in usable}  # pyright: ignore[reportOptionalMemberAccess]
    missing = [k for k in keys if k not in medians]
    if missing:
        shown = ", ".join(f"{op} {dtype} B={b} {n}x{k}" for op, dtype, b, n, k, *_ in missing[:4])
        raise PlanError(f"{path} lacks {len(missing)} of the step's launches ({shown}...); measure them "
                        "without --from")
    return {k: medians[k] for k in keys}, result.device


def measure_launches(keys, device: str, budget_s: float | None, observer: SweepObserver, dtype: str,
                     routing: str = "balanced") -> tuple[dict, dict[str, Any], list, dict[str, float | None]]:
    """Median time of each launch measured here (the same protocol as a sweep), and the measured roof:
    copy/read bandwidth and the quick matmul-peak search for ``dtype``."""
    from microbench.sweep.ceilings import measure_stream, reference_bandwidth, stream_source
    from microbench.sweep.peaks import peak_shapes, shape_search

    config = SweepConfig(device=device, ops=(), budget_s=budget_s, save=False, with_ceilings=False)
    session = open_session(config, observer)
    refuse_unsupported(keys, session.device, routing)
    # The same reference bandwidth as the ceilings (the copy timed eagerly); the peak from the quick shape
    # search only, as before: the step's own GEMMs compete with it (measured_roof), no regime run needed.
    src = stream_source(session)  # one stream buffer for the copy and the read, as the ceilings do
    reference = reference_bandwidth({f"torch {kind}": measure_stream(session, kind, src) for kind in ("copy", "read")})
    # A weight-only format multiplies on the bf16 units: MFU is against the bf16 peak.
    best, _ = shape_search(session, compute_dtype(dtype), peak_shapes(session, quick=True), ("torch",))
    roof = {"bandwidth_bytes_per_s": reference["bytes_per_s"], "peak_flop_per_s": best["flop_per_s"] if best else None,
            "target_rel_ci": session.rule.target_rel_ci}  # the device's stopping target, for the noise warning
    observer.on_start(len(keys))
    times, points = {}, []
    try:
        for key in keys:
            spec = point_spec(key, routing)
            point = measure_point(session, spec)
            observer.on_point(point)
            if not point.ok:
                raise PlanError(f"could not measure {spec.label}: {point.status}: {point.reason}")
            # an ok point has samples, so stats
            times[key] = point.stats.median_s  # pyright: ignore[reportOptionalMemberAccess]
            points.append(point)
    finally:
        session.weights.clear()
    return times, session.device, points, roof


def refuse_unsupported(keys, device: dict[str, Any], routing: str = "balanced") -> None:
    """Before the roof is measured: a launch this device cannot run (a weight-only format's kernel missing here)
    is one line, not minutes of ceilings and then a failed point."""
    from microbench.timing.grouped import support_problem as grouped_problem
    from microbench.timing.mixers.recurrent import support_problem as mixer_problem

    for key in keys:
        spec = point_spec(key, routing)
        problem = grouped_problem(spec.dtype, spec.topk, spec.experts) if spec.op == "grouped" else \
            mixer_problem(spec.dtype, spec.backend) if spec.op in MIXER_OPS else ops.support_problem(spec, device)
        if problem:
            raise PlanError(f"cannot measure {spec.label} here: {problem}")


def measured_roof(points: list, roof: dict[str, float | None], dtype: str) -> tuple[float | None, float | None]:
    """What MBU and MFU are measured against: the best of the roof kernels and of the step's own launches (the
    peak by the one rule of ``roofline.analysis.reference``: plain GEMMs of the compute dtype, no weight-only
    format)."""
    from roofline.analysis.reference import fastest_gemm

    bandwidths = [p.bytes / p.stats.median_s for p in points] + [roof.get("bandwidth_bytes_per_s") or 0]
    fastest = fastest_gemm(points, compute_dtype(dtype))
    peaks = [fastest[0] if fastest else 0, roof.get("peak_flop_per_s") or 0]
    return (max(bandwidths) or None), (max(peaks) or None)
