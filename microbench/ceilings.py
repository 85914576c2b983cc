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


def measure_peak(session: Session, dtype: str, shapes) -> dict[str, Any]:
    """Best matmul FLOP/s over a few large shapes, each point timed like any sweep point."""
    tried = []
    best = None
    for m, n, k in shapes:
        point = measure_point(session, plan.PointSpec("gemm", dtype, m, n, k))
        session.weights.clear()
        entry = {"m": m, "n": n, "k": k, "status": point.status, "reason": point.reason}
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
            "kernel": "torch.matmul" if dtype != "fp8" else "torch._scaled_mm", "tried": tried}


def spec_ceilings(device: dict[str, Any]) -> dict[str, Any]:
    sku = device.get("sku")
    if not sku:
        why = "the CPU has no spec profile" if device["kind"] == "cpu" else "no profile matches this GPU"
        return {"sku": None, "reason": why}
    try:
        return load_gpu_profile(sku).to_dict()
    except ProfileError as exc:
        return {"sku": sku, "reason": str(exc)}


def measure_ceilings(session: Session, dtypes: list[str], quick: bool = False) -> dict[str, Any]:
    """Copy and read bandwidth, then the peak per dtype; the record stored in ``Result.ceilings``."""
    started = utc_now()
    copy = measure_stream(session, "copy")
    read = measure_stream(session, "read")
    if session.choice.kind == "cuda":
        shapes = GPU_QUICK_PEAK_SHAPES if quick else GPU_PEAK_SHAPES
    else:
        shapes = CPU_QUICK_PEAK_SHAPES if quick else CPU_PEAK_SHAPES
    peaks = {dtype: measure_peak(session, dtype, shapes) for dtype in dtypes}
    return {
        "measured": {
            "copy": copy,
            "read": read,
            # The slope of the measured roofline: the best bandwidth any of our kernels reached.
            "bandwidth_bytes_per_s": max(copy["bytes_per_s"], read["bytes_per_s"]),
            "bandwidth_kernel": "copy" if copy["bytes_per_s"] >= read["bytes_per_s"] else "read",
            "peak": peaks,
            "peak_flop_per_s": {d: p["flop_per_s"] for d, p in peaks.items() if p["flop_per_s"]},
            "started_at": started,
            "finished_at": utc_now(),
        },
        "spec": spec_ceilings(session.device),
    }
