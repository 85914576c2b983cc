"""Measure one workload with the right timer: the step every measuring command shares.

A sweep point, a ceiling kernel, a decode launch and a step-profile kernel all go through here: build the
operands (torch or CuPy), check correctness once, choose the timer (CUDA graph of rotated launches, eager
events when a workload cannot be captured, perf_counter on the CPU), sample under the stopping rule and
summarise the telemetry of the timed phase.  ``measure_point`` never raises for a problem of the point
itself: it records it (unsupported, skipped, oom, error).  The sweep loop (``microbench.sweep.loop``) only
decides what to measure next and saves.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from microbench.points import plan
from microbench.timing import block_scaled, ops, weight_only
from microbench.timing.adaptive import Stopped, StoppingRule, measure
from microbench.timing.session import Session
from microbench.timing.timers import CpuTimer, CudaEagerTimer, CudaGraphTimer
from roofline.core.counting import DTYPE_SIZES, MIXER_OPS, is_weight_only
from roofline.core.stats import quantile
from roofline.core.units import si_bytes
from roofline.result.document import Point

# The eager comparison gets this share of the point's budget: it only needs a median.
EAGER_BUDGET_SHARE = 0.25


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def make_timer(session: Session, workload, eager: bool = False):
    """The workload's timer.  A workload that cannot be captured in a CUDA graph says so itself
    (``eager_only``, e.g. cuBLAS through CuPy, which refuses stream capture) and is timed eagerly on purpose."""
    if session.choice.kind == "cpu":
        return CpuTimer(workload.launch, workload.copies)
    if eager or session.timer == "eager" or getattr(workload, "eager_only", None):
        return CudaEagerTimer(workload.launch, workload.copies, session.torch)
    return CudaGraphTimer(workload.launch, workload.copies, session.torch)


def release_timers(session: Session, timers: list) -> None:
    for timer in timers:
        release = getattr(timer, "release", None)
        if release:
            release()
    if session.choice.kind == "cuda":
        session.torch.cuda.empty_cache()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {text[0] if text else ''}"[:300]


def _is_oom(torch, exc: BaseException) -> bool:
    return isinstance(exc, MemoryError) or isinstance(exc, getattr(torch, "OutOfMemoryError", MemoryError)) or \
        "out of memory" in str(exc).lower()


def _eager_rule(rule: StoppingRule) -> StoppingRule:
    return replace(rule, budget_s=rule.budget_s * EAGER_BUDGET_SHARE, warmup_s=0.0, min_warmup_samples=1,
                   min_time_s=0.0)


TORCH_KERNELS = {"gemv": "torch.mv", "gemm": "torch.matmul", "bmm": "torch.bmm"}


def build_workload(session: Session, spec: plan.PointSpec, copies: int):
    """The point's operands and launch: torch ops, a grouped GEMM, a recurrent mixer's state update, DSA's sparse
    attention, or (``--backend cupy``) our kernels and cupy.matmul."""
    if spec.op == "state_update":
        from microbench.timing.mixers.recurrent import StateUpdateWorkload

        session.weights.clear()  # a state update holds its states itself
        return StateUpdateWorkload(session.torch, spec, session.choice.torch_name, copies, session.seed,
                                   ops.random_tensor, ops.seed_for)
    if spec.op == "sparse_attention":
        from microbench.timing.mixers.sparse_attention import SparseAttentionWorkload, SparseLayer

        assert spec.mixer is not None  # PointSpec refuses a sparse_attention point without one
        session.weights.clear()
        return SparseAttentionWorkload(session.torch, SparseLayer.of(spec.k, spec.mixer), spec.dtype, spec.batch, 1,
                                       spec.n, session.choice.torch_name, copies, session.seed, ops.random_tensor,
                                       ops.seed_for)
    if spec.op == "grouped":
        from microbench.timing.grouped import GroupedWorkload

        session.weights.clear()  # a grouped point holds its experts itself
        return GroupedWorkload(session.torch, spec, session.choice.torch_name, copies, session.seed,
                               ops.random_tensor, ops.seed_for)
    if spec.backend == "cupy":
        from microbench.timing import cupy_backend

        return cupy_backend.build_workload(session.torch, spec, session.device, copies, session.seed,
                                           session.weights, session.max_memory_bytes)
    return ops.build_workload(session.torch, spec, session.choice.torch_name, copies, session.seed,
                              session.weights, session.max_memory_bytes)


def _backend_problem(session: Session, spec: plan.PointSpec) -> str | None:
    if spec.op in MIXER_OPS:
        from microbench.timing.mixers.recurrent import support_problem

        return support_problem(spec.dtype, spec.backend)
    if spec.op == "grouped":
        from microbench.timing.grouped import support_problem

        if spec.backend != "torch":
            return "grouped GEMMs are timed with torch's kernels only"
        return support_problem(spec.dtype, spec.topk, spec.experts)
    if spec.backend != "cupy":
        return None
    from microbench.timing import cupy_backend

    return cupy_backend.unavailable_reason(session.device) or cupy_backend.support_problem(spec)


def prepared_timer(session: Session, workload):
    """The main timer, prepared.  A graph capture that fails (a library call that allocates while
    capturing) falls back to eager events, and the point's timer says so (``cuda-eager``)."""
    timer = make_timer(session, workload)
    try:
        timer.prepare()
    except Exception:  # noqa: BLE001
        if timer.name != "cuda-graph":
            raise
        release_timers(session, [timer])
        timer = make_timer(session, workload, eager=True)
        timer.prepare()
    return timer


def measure_point(session: Session, spec: plan.PointSpec, attempt: int = 1, interruptible: bool = False) -> Point:
    """Measure one point; never raises for a problem of the point itself (it is recorded instead).

    ``interruptible``: the stop flag abandons the measurement (``adaptive.Stopped``), for the ceilings;
    a sweep point in flight is finished instead."""
    should_stop = session.stop.is_set if interruptible else None
    torch = session.torch
    base = {"op": spec.op, "dtype": spec.dtype, "batch": spec.batch, "n": spec.n, "k": spec.k,
            "backend": spec.backend, "started_at": utc_now(), "attempt": attempt, **_grouping(session, spec)}
    problem = _backend_problem(session, spec) if spec.op in ("grouped",) + MIXER_OPS else \
        ops.support_problem(spec, session.device) or _backend_problem(session, spec)
    if problem:
        return Point(status="unsupported", reason=problem, finished_at=utc_now(), **base)
    per_copy = _bytes_per_copy(spec)
    if per_copy > session.free_memory_bytes():
        session.weights.clear()
        if per_copy > session.free_memory_bytes():  # predicted at plan time: do not even try
            return Point(status="skipped", finished_at=utc_now(), **base,
                         reason=f"needs {si_bytes(per_copy)}, the device can give "
                                f"{si_bytes(session.free_memory_bytes())}")
    work = ops.count_work(spec.op, spec.dtype, spec.batch, spec.n, spec.k, spec.experts, spec.topk,
                          base.get("touched"), mixer=spec.mixer)
    if session.l2_policy == "warm":
        copies = 1
    else:
        copies = ops.rotation_copies(work.weight_bytes, session.cache_bytes, per_copy, session.memory_cap_bytes())
    timers: list = []
    try:
        with ops.matmul_precision(torch, spec.dtype == "tf32"):
            workload = build_workload(session, spec, copies)
            correctness = workload.check(ops.seed_for(session.seed, "check", spec.label))
            timer = prepared_timer(session, workload)
            timers.append(timer)
            result = measure(timer.sample, session.rule, session.clock, should_stop)
            eager_samples: tuple[float, ...] = ()
            if timer.name == "cuda-graph":
                eager = make_timer(session, workload, eager=True)
                eager_samples = measure(eager.sample, _eager_rule(session.rule), session.clock,
                                        should_stop).samples_s
            session.synchronize()
            median = quantile(sorted(result.samples_s), 0.5)
            launches = len(result.samples_s) * timer.launches
            telemetry = session.window_summary(result.started_s, result.finished_s, launches, work.bytes / median)
    except Stopped:
        session.weights.clear()
        release_timers(session, timers)
        raise
    except Exception as exc:  # noqa: BLE001 - every failure of a point is recorded, the sweep goes on
        session.weights.clear()
        release_timers(session, timers)
        # NotImplementedError: the installed torch has no kernel for this op on this device (torch's dispatcher
        # raises it, e.g. a weight-only op built for the CPU only): the point is unsupported, not broken.
        status = "oom" if _is_oom(torch, exc) else "unsupported" if isinstance(exc, NotImplementedError) else "error"
        return Point(status=status, reason=_first_line(exc), finished_at=utc_now(), **base)
    release_timers(session, timers)
    return Point(status="ok", timer=timer.name, samples_s=result.samples_s, warmup_samples_s=result.warmup_samples_s,
                 eager_samples_s=eager_samples, launches_per_sample=timer.launches, stop_reason=result.stop_reason,
                 # Point takes the sampler dict and types it (document.py)
                 rotation_copies=copies, correctness=correctness, telemetry=telemetry, finished_at=utc_now(),  # pyright: ignore[reportArgumentType]
                 kernel=getattr(workload, "kernel", None) or _torch_kernel(spec, session.choice.kind), **base)


def _grouping(session: Session, spec: plan.PointSpec) -> dict:
    """A grouped point's routing and the experts it touched (drawn as its workload draws them), for its record; a
    mixer point's shape."""
    if spec.mixer is not None:
        return {"mixer": spec.mixer}
    if spec.op != "grouped":
        return {}
    from microbench.timing.grouped import Assignment
    from roofline.step.routing import Routing

    assignment = Assignment.draw(Routing.parse(spec.routing), spec.experts, spec.topk, spec.batch,
                                 ops.seed_for(session.seed, "routing", spec.label))
    return {"experts": spec.experts, "topk": spec.topk, "routing": spec.routing, "touched": assignment.touched}


def _bytes_per_copy(spec: plan.PointSpec) -> int:
    if spec.op == "state_update":
        from microbench.timing.mixers.recurrent import bytes_per_copy as state_bytes

        return state_bytes(spec)
    if spec.op == "sparse_attention":
        from microbench.timing.mixers.sparse_attention import SparseLayer
        from microbench.timing.mixers.sparse_attention import bytes_per_copy as sparse_bytes

        assert spec.mixer is not None
        return sparse_bytes(spec.batch, 1, spec.n, SparseLayer.of(spec.k, spec.mixer), DTYPE_SIZES[spec.dtype][0])
    if spec.op == "grouped":
        from microbench.timing.grouped import bytes_per_copy

        return bytes_per_copy(spec)
    return ops.bytes_per_copy(spec)


def _torch_kernel(spec: plan.PointSpec, device_kind: str) -> str:
    if spec.dtype == "fp8-block":
        return block_scaled.KERNEL
    if is_weight_only(spec.dtype):
        return weight_only.kernel_name(spec.dtype, device_kind)
    return "torch._scaled_mm" if spec.dtype == "fp8" else TORCH_KERNELS[spec.op]
