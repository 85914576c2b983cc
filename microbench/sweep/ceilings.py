"""Measured ceilings: DRAM bandwidth (copy, read, our STREAM kernels) and the compute peaks per dtype.

The roofline's slope must be what the SMs get from memory.  A ``copy_`` captured in a CUDA graph becomes a
memcpy node that runs on a copy engine (H200: 2.7 TB/s at every size, against 4.2 TB/s eager), so the
torch copy is timed eagerly, never as a graph node; the read (a reduction) and our STREAM kernels are
kernels and are graph-timed.  Every entry records its timer.  One ``reference_bandwidth`` is named: the
best DRAM read or copy kernel measured here; every percentage of measured bandwidth uses it.  The compute
peaks (shape search, burst and sustained) are in ``microbench.sweep.peaks``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from microbench.sweep.peaks import check_stop, measure_peak, peak_shapes
from microbench.timing import ops
from microbench.timing.adaptive import measure
from microbench.timing.measure import make_timer, release_timers, utc_now
from microbench.timing.session import Session
from roofline.analysis.reference import best_bandwidth_kernel
from roofline.core.stats import summarize
from roofline.specs.gpus import SpecError, load_gpu_spec

# Streams at least this many times the cache, and never less than these sizes.
STREAM_CACHE_FACTOR = 8
GPU_STREAM_MIN_BYTES = 1 << 30
CPU_STREAM_MIN_BYTES = 256 << 20


@dataclass
class StreamWorkload:
    """A copy (dst ← src) or a read-only reduction over one large buffer; no rotation needed."""

    torch: Any
    kind: str  # copy | read
    src: Any
    dst: Any
    copies: int = 1

    @property
    def eager_only(self) -> bool:
        # A captured copy_ is a memcpy node, run by a copy engine instead of the SMs: time it eagerly.
        return self.kind == "copy"

    def launch(self, i: int) -> None:
        if self.kind == "copy":
            self.dst.copy_(self.src)
        else:
            self.torch.sum(self.src, dim=0, out=self.dst)  # a full reduction: every byte read once

    @property
    def bytes(self) -> int:
        moved = self.src.numel() * self.src.element_size()
        return 2 * moved if self.kind == "copy" else moved


def stream_bytes(session: Session) -> int:
    floor = GPU_STREAM_MIN_BYTES if session.choice.kind == "cuda" else CPU_STREAM_MIN_BYTES
    size = max(floor, STREAM_CACHE_FACTOR * (session.cache_bytes or 0))
    return int(min(size, session.memory_cap_bytes() / 3))


def _timed(session: Session, workload) -> tuple[Any, str]:
    """(samples, timer name) of one stream workload, abandoned on a stop signal."""
    timer = make_timer(session, workload)
    try:
        timer.prepare()
        result = measure(timer.sample, session.rule, session.clock, session.stop.is_set)
        session.synchronize()
    finally:
        release_timers(session, [timer])
    return result, timer.name


def stream_source(session: Session):
    """The stream buffer (random fp32, seeded): made once and shared by the copy and the read."""
    elements = stream_bytes(session) // 4
    return ops.random_tensor(session.torch, (elements,), "fp32", session.choice.torch_name,
                             ops.seed_for(session.seed, "stream"))


def measure_stream(session: Session, kind: str, src=None) -> dict[str, Any]:
    torch = session.torch
    src = stream_source(session) if src is None else src
    dst = torch.empty_like(src) if kind == "copy" else torch.empty((), device=src.device)
    workload = StreamWorkload(torch, kind, src, dst)
    result, timer = _timed(session, workload)
    stats = summarize(result.samples_s)
    return {
        "kernel": "torch.Tensor.copy_" if kind == "copy" else "torch.sum of a fp32 vector",
        "kind": kind,
        "bytes": workload.bytes,
        "bytes_per_s": workload.bytes / stats.median_s,
        "time_s": stats.median_s,
        "timer": timer,
        "samples_s": list(result.samples_s),
        "counts": "bytes read + bytes written" if kind == "copy" else "bytes read",
    }


@dataclass
class CupyStreamWorkload:
    launch: Any
    copies: int = 1


def measure_cupy_streams(session: Session) -> dict[str, Any]:
    """Our STREAM kernels (copy, scale, add, triad, read) through CuPy, on three fp32 arrays."""
    from microbench.timing.cupy_backend import STREAM_KERNELS, stream_launcher

    torch = session.torch
    elements = stream_bytes(session) // 4 // 4 * 4  # whole float4 vectors
    device = session.choice.torch_name
    arrays = [ops.random_tensor(torch, (elements,), "fp32", device, ops.seed_for(session.seed, "stream", i))
              for i in range(3)]
    arrays.append(torch.empty(4096 * 4, device=device))  # read_sum's per-block partial sums
    out = {}
    for kind, moved in STREAM_KERNELS.items():
        check_stop(session)
        # ceilings run on a cuda choice, which has its index
        workload = CupyStreamWorkload(stream_launcher(torch, kind, arrays, session.choice.index))  # pyright: ignore[reportArgumentType]
        result, timer = _timed(session, workload)
        nbytes = moved * elements * 4
        median = summarize(result.samples_s).median_s
        out[kind] = {"kernel": f"gpubench stream_{kind}" if kind != "read" else "gpubench read_sum", "kind": kind,
                     "bytes": nbytes, "bytes_per_s": nbytes / median, "time_s": median, "timer": timer,
                     "counts": "bytes read" if kind == "read" else "bytes read + bytes written",
                     "samples_s": list(result.samples_s)}
    return out


def reference_bandwidth(kernels: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The one bandwidth every percentage of measured bandwidth uses: the best read or copy kernel, by the
    rule readers use too (``roofline.analysis.reference``); a ``copy_`` timed as a CUDA graph never is."""
    chosen = best_bandwidth_kernel(kernels)
    if chosen is None:
        raise ValueError("no read or copy kernel was measured")
    return chosen.to_dict()


def spec_ceilings(device: dict[str, Any]) -> dict[str, Any]:
    sku = device.get("sku")
    if not sku:
        why = "the CPU has no spec profile" if device["kind"] == "cpu" else "no profile matches this GPU"
        return {"sku": None, "reason": why}
    try:
        return load_gpu_spec(sku).to_dict()
    except SpecError as exc:
        return {"sku": sku, "reason": str(exc)}


def _torch_copy_name(entry: dict[str, Any]) -> str:
    return "torch copy (eager)" if entry["timer"] == "cuda-eager" else "torch copy"


def measure_ceilings(session: Session, dtypes: list[str], quick: bool = False,
                     backends: tuple[str, ...] = ("torch",)) -> dict[str, Any]:
    """Bandwidth kernels, then the peaks per dtype; the record stored in ``Result.ceilings``.

    With the CuPy back end, our STREAM kernels and cuBLAS through CuPy compete too; the reference
    bandwidth and each peak name the kernel that reached it.  A stop signal abandons the ceilings within
    one sample (``adaptive.Stopped``)."""
    started = utc_now()
    src = stream_source(session)
    check_stop(session)
    copy = measure_stream(session, "copy", src)
    check_stop(session)
    read = measure_stream(session, "read", src)
    del src
    kernels = {_torch_copy_name(copy): copy, "torch read": read}
    if "cupy" in backends:
        check_stop(session)
        kernels.update({f"cupy {kind}": entry for kind, entry in measure_cupy_streams(session).items()})
    reference = reference_bandwidth(kernels)
    shapes = peak_shapes(session, quick)
    peaks = {}
    for dtype in dtypes:
        check_stop(session)
        peaks[dtype] = measure_peak(session, dtype, shapes, backends)
    return {
        "measured": {
            "copy": copy,
            "read": read,
            "stream_kernels": {name: {k: v for k, v in entry.items() if k != "samples_s"}
                               for name, entry in kernels.items()},
            "reference_bandwidth": reference,
            # Kept for readers of older versions: the same figure as the reference.
            "bandwidth_bytes_per_s": reference["bytes_per_s"],
            "bandwidth_kernel": reference["name"],
            "peak": peaks,
            "peak_flop_per_s": {d: p["flop_per_s"] for d, p in peaks.items() if p["flop_per_s"]},
            "peak_flop_per_s_burst": {d: p["burst"]["flop_per_s"] for d, p in peaks.items() if p["burst"]},
            "started_at": started,
            "finished_at": utc_now(),
        },
        "spec": spec_ceilings(session.device),
    }
