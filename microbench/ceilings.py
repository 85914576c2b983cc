"""Measured ceilings: the copy and read bandwidth, and the best matmul throughput per dtype.

The roofline's slope must come from what the memory system really delivers (a copy counts bytes read
plus written; GEMV mostly reads, so a large reduction is measured too), and its roof from the best of a
few large matmuls, as mamf-finder searches shapes, because no single shape reaches the peak everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from microbench import ops, plan
from microbench.adaptive import measure
from microbench.sweep import Session, make_timer, measure_point, release_timers, utc_now
from roofline.profiles import ProfileError, load_gpu_profile
from roofline.stats import summarize

# Streams at least this many times the cache, and never less than these sizes.
STREAM_CACHE_FACTOR = 8
GPU_STREAM_MIN_BYTES = 1 << 30
CPU_STREAM_MIN_BYTES = 256 << 20
# Candidate matmul shapes (M, N, K): square and decode-like-wide, large enough to fill the machine.
GPU_PEAK_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 8192, 16384), (16384, 8192, 4096))
GPU_QUICK_PEAK_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192))
CPU_PEAK_SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048), (1024, 4096, 2048))
CPU_QUICK_PEAK_SHAPES = ((512, 512, 512), (1024, 1024, 1024))


@dataclass
class StreamWorkload:
    """A copy (dst ← src) or a read-only reduction over one large buffer; no rotation needed."""

    torch: Any
    kind: str  # copy | read
    src: Any
    dst: Any
    copies: int = 1

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


def measure_stream(session: Session, kind: str) -> dict[str, Any]:
    torch = session.torch
    elements = stream_bytes(session) // 4
    src = ops.random_tensor(torch, (elements,), "fp32", session.choice.torch_name,
                            ops.seed_for(session.seed, "stream"))
    dst = torch.empty_like(src) if kind == "copy" else torch.empty((), device=src.device)
    workload = StreamWorkload(torch, kind, src, dst)
    timer = make_timer(session, workload)
    try:
        timer.prepare()
        result = measure(timer.sample, session.rule, session.clock)
        session.synchronize()
    finally:
        release_timers(session, [timer])
    stats = summarize(result.samples_s)
    return {
        "kernel": "torch.Tensor.copy_" if kind == "copy" else "torch.sum of a fp32 vector",
        "bytes": workload.bytes,
        "bytes_per_s": workload.bytes / stats.median_s,
        "time_s": stats.median_s,
        "timer": timer.name,
        "samples_s": list(result.samples_s),
        "counts": "bytes read + bytes written" if kind == "copy" else "bytes read",
    }


@dataclass
class CupyStreamWorkload:
    launch: Any
    copies: int = 1


def measure_cupy_streams(session: Session) -> dict[str, Any]:
    """Our STREAM kernels (copy, scale, add, triad, read) through CuPy, on three fp32 arrays."""
    from microbench.cupy_backend import STREAM_KERNELS, stream_launcher

    torch = session.torch
    elements = stream_bytes(session) // 4 // 4 * 4  # whole float4 vectors
    device = session.choice.torch_name
    arrays = [ops.random_tensor(torch, (elements,), "fp32", device, ops.seed_for(session.seed, "stream", i))
              for i in range(3)]
    arrays.append(torch.empty(4096 * 4, device=device))  # read_sum's per-block partial sums
    out = {}
    for kind, moved in STREAM_KERNELS.items():
        workload = CupyStreamWorkload(stream_launcher(torch, kind, arrays, session.choice.index))
        timer = make_timer(session, workload)
        try:
            timer.prepare()
            result = measure(timer.sample, session.rule, session.clock)
        finally:
            release_timers(session, [timer])
        nbytes = moved * elements * 4
        median = summarize(result.samples_s).median_s
        out[kind] = {"kernel": f"gpubench stream_{kind}" if kind != "read" else "gpubench read_sum",
                     "bytes": nbytes, "bytes_per_s": nbytes / median, "time_s": median, "timer": timer.name,
                     "samples_s": list(result.samples_s)}
    return out


def measure_peak(session: Session, dtype: str, shapes, backends=("torch",)) -> dict[str, Any]:
    """Best matmul FLOP/s over a few large shapes (and back ends), each timed like any sweep point."""
    tried = []
    best = None
    for (m, n, k), backend in ((shape, backend) for shape in shapes for backend in backends):
        point = measure_point(session, plan.PointSpec("gemm", dtype, m, n, k, backend))
        session.weights.clear()
        entry = {"m": m, "n": n, "k": k, "backend": backend, "kernel": point.kernel, "status": point.status,
                 "reason": point.reason}
        if point.ok:
            entry["flop_per_s"] = point.flop / point.stats.median_s
            entry["rel_err"] = (point.correctness or {}).get("rel_err")
            if best is None or entry["flop_per_s"] > best["flop_per_s"]:
                best = entry
        tried.append(entry)
    if best is None:
        reasons = {e["reason"] for e in tried if e["reason"]}
        return {"flop_per_s": None, "reason": "; ".join(sorted(reasons)) or "no shape ran", "tried": tried}
    return {"flop_per_s": best["flop_per_s"], "best_shape": {"m": best["m"], "n": best["n"], "k": best["k"]},
            "kernel": best["kernel"], "backend": best["backend"], "tried": tried}


def spec_ceilings(device: dict[str, Any]) -> dict[str, Any]:
    sku = device.get("sku")
    if not sku:
        why = "the CPU has no spec profile" if device["kind"] == "cpu" else "no profile matches this GPU"
        return {"sku": None, "reason": why}
    try:
        return load_gpu_profile(sku).to_dict()
    except ProfileError as exc:
        return {"sku": sku, "reason": str(exc)}


def measure_ceilings(session: Session, dtypes: list[str], quick: bool = False,
                     backends: tuple[str, ...] = ("torch",)) -> dict[str, Any]:
    """Copy and read bandwidth, then the peak per dtype; the record stored in ``Result.ceilings``.

    With the CuPy back end, our STREAM kernels and cuBLAS through CuPy compete too: the roofline's
    slope and roof come from the best kernel of either back end, which is named.
    """
    started = utc_now()
    copy = measure_stream(session, "copy")
    read = measure_stream(session, "read")
    kernels = {"torch copy": copy, "torch read": read}
    if "cupy" in backends:
        kernels.update({f"cupy {kind}": entry for kind, entry in measure_cupy_streams(session).items()})
    best_bandwidth = max(kernels, key=lambda name: kernels[name]["bytes_per_s"])
    if session.choice.kind == "cuda":
        shapes = GPU_QUICK_PEAK_SHAPES if quick else GPU_PEAK_SHAPES
    else:
        shapes = CPU_QUICK_PEAK_SHAPES if quick else CPU_PEAK_SHAPES
    peaks = {dtype: measure_peak(session, dtype, shapes, backends) for dtype in dtypes}
    return {
        "measured": {
            "copy": copy,
            "read": read,
            "stream_kernels": {name: {k: v for k, v in entry.items() if k != "samples_s"}
                               for name, entry in kernels.items()},
            # The slope of the measured roofline: the best bandwidth any of our kernels reached.
            "bandwidth_bytes_per_s": kernels[best_bandwidth]["bytes_per_s"],
            "bandwidth_kernel": best_bandwidth,
            "peak": peaks,
            "peak_flop_per_s": {d: p["flop_per_s"] for d, p in peaks.items() if p["flop_per_s"]},
            "started_at": started,
            "finished_at": utc_now(),
        },
        "spec": spec_ceilings(session.device),
    }
