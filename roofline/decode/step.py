"""A whole model's decode step from per-launch times: tokens/s against batch, MBU and MFU, where the step
turns compute-bound (or why it never does), and the largest batch whose KV cache fits.

Times come from a function of (op, dtype, batch, n, k): measured medians, or the spec roofline
(``analytic_time``).  FLOP and bytes are counted exactly as everywhere else (``roofline.core.counting``);
attention adds its GQA-aware FLOP (every query head of a group reads the same K and V).  In a weight-only format
the layers' linears are launched in it and the LM head in bf16 (``LayerShape.weight_dtype``), so the bytes, MBU
and the crossover count what the step really reads.  With tensor parallelism each layer adds two all-reduces of
the batch's hidden vectors (``tp_comm_time``), costed on the spec sheet's interconnect and reported apart
(``comm_time_s``, ``comm_share``); they move no HBM bytes the roofline counts, so MBU and MFU stay the kernels'
work over the whole step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from roofline.core.counting import TP_ALL_REDUCES_PER_LAYER, all_reduce_bytes, compute_dtype, count_work
from roofline.core.roof import ridge_flop_per_byte, roof_time_s
from roofline.specs.gpus import Interconnect
from roofline.specs.models import ModelSpec, experts_touched, kv_bytes_per_token, layer_shapes, tokens_per_expert
from roofline.specs.models import weight_bytes as model_weight_bytes

TimeFn = Callable[[str, str, int, int, int], float]
CommFn = Callable[[int], float]  # seconds of one step's all-reduces at a batch
# Where to look for "never": intensity at an enormous batch is the step's limit as B grows.
HUGE_BATCH = 10**7


@dataclass(frozen=True)
class Launch:
    """One kind of kernel launch in a step, ``count`` times, each of (op, dtype, batch, n, k)."""

    name: str
    op: str
    dtype: str
    batch: int
    n: int
    k: int
    count: float

    @property
    def key(self) -> tuple[str, str, int, int, int]:
        return (self.op, self.dtype, self.batch, self.n, self.k)


@dataclass(frozen=True)
class DecodeSetup:
    model: ModelSpec
    tp: int
    context: int
    dtype: str
    kv_dtype: str

    def launches(self, batch: int) -> list[Launch]:
        m = self.model
        out = []
        for shape in layer_shapes(m, self.tp):
            if shape.expert:
                b, count = tokens_per_expert(m, batch), shape.count * experts_touched(m, batch)
            else:
                b, count = batch, shape.count
            out.append(Launch(shape.name, "gemm", shape.weight_dtype(self.dtype), b, shape.n, shape.k, count))
        # Attention: per sequence and KV head, a context × head_dim matrix for K and another for V.
        groups = batch * m.kv_heads // self.tp
        out.append(Launch("attention", "bmm", self.kv_dtype, groups, self.context, m.head_dim, 2 * m.layers))
        return out

    def work(self, batch: int) -> tuple[float, float, float]:
        """(bytes, linear FLOP, attention FLOP) of one step at ``batch``."""
        total_bytes = linear = attention = 0.0
        for launch in self.launches(batch):
            work = count_work(launch.op, launch.dtype, launch.batch, launch.n, launch.k)
            total_bytes += work.bytes * launch.count
            if launch.op == "bmm":
                attention += work.flop * launch.count * self.model.group  # each query head of the group
            else:
                linear += work.flop * launch.count
        return total_bytes, linear, attention

    def intensity(self, batch: int) -> float:
        total_bytes, linear, attention = self.work(batch)
        return (linear + attention) / total_bytes


def analytic_time(bandwidth: float, peaks: dict[str, float]) -> TimeFn:
    """Per-launch time on the spec roofline (``roofline.core.roof``): max(bytes / bandwidth, FLOP / peak of the
    dtype).  A dtype with no peak on this device (fp8 on an A100) is timed by its bytes alone, never by
    another dtype's peak: ``no_peak_note`` says so wherever the answer is printed.  A weight-only format without a
    peak of its own in ``peaks`` multiplies at its compute dtype's (bf16)."""
    def time_s(op, dtype, batch, n, k):
        work = count_work(op, dtype, batch, n, k)
        peak = peaks[dtype] if dtype in peaks else peaks.get(compute_dtype(dtype))
        return roof_time_s(work.flop, work.bytes, bandwidth, peak)
    return time_s


def tp_comm_time(setup: DecodeSetup, interconnect: Interconnect) -> CommFn:
    """Seconds of one decode step's tensor-parallel all-reduces at a batch: per layer two ring all-reduces of
    ``batch × hidden`` activations over ``setup.tp`` GPUs on ``interconnect``; none at TP 1."""
    per_step = setup.model.layers * TP_ALL_REDUCES_PER_LAYER

    def comm_s(batch: int) -> float:
        message = all_reduce_bytes(setup.dtype, batch, setup.model.hidden)
        return per_step * interconnect.all_reduce_time_s(message, setup.tp)
    return comm_s


def no_peak_note(dtype: str, device: str) -> str:
    return (f"no peak for {dtype} on {device}: its launches are timed by their bytes alone and MFU, the ridge "
            "and the crossover are not given")


@dataclass(frozen=True)
class StepRow:
    batch: int
    step_time_s: float
    attention_time_s: float
    comm_time_s: float  # the tensor-parallel all-reduces, inside step_time_s (0 at TP 1 or when not counted)
    comm_share: float
    tokens_per_s: float
    tokens_per_s_per_sequence: float
    bytes: float
    flop: float
    linear_flop: float
    intensity_flop_per_byte: float
    mbu: float | None
    mfu: float | None
    mfu_linear: float | None
    bound: str
    kv_fits: bool | None


def kv_capacity(setup: DecodeSetup, memory_bytes: float | None, mem_fraction: float) -> dict[str, Any]:
    """Largest batch whose KV cache fits beside the weights in ``mem_fraction`` of the memory."""
    weights = model_weight_bytes(setup.model, setup.dtype, setup.tp)
    per_sequence = kv_bytes_per_token(setup.model, setup.kv_dtype, setup.tp) * setup.context
    out = {"weight_bytes": weights, "kv_bytes_per_token": kv_bytes_per_token(setup.model, setup.kv_dtype, setup.tp),
           "kv_bytes_per_sequence": per_sequence, "memory_bytes": memory_bytes, "mem_fraction": mem_fraction}
    if not memory_bytes:
        return {**out, "fits": None, "max_batch": None}
    free = mem_fraction * memory_bytes - weights
    return {**out, "fits": free > 0, "max_batch": int(free // per_sequence) if free > 0 else 0}


def ridge_crossing(setup: DecodeSetup, ridge: float, batches: list[int]) -> dict[str, Any]:
    """Smallest measured batch whose step intensity reaches the ridge, or why none ever does."""
    limit = setup.intensity(HUGE_BATCH)
    crossing = next((b for b in batches if setup.intensity(b) >= ridge), None)
    out: dict[str, Any] = {"ridge_flop_per_byte": ridge, "limit_intensity_flop_per_byte": limit,
                           "crossover_batch": crossing, "never": limit < ridge, "context_limit": None}
    if crossing is None and limit >= ridge:
        lo, hi = max(batches), HUGE_BATCH
        while hi - lo > 1:  # the batch where it crosses, beyond the batches asked for
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if setup.intensity(mid) >= ridge else (mid, hi)
        out["crossover_batch_beyond_list"] = hi
    # The context past which attention keeps the step memory-bound at every batch.
    lo, hi = 1, 1 << 26
    if DecodeSetup(setup.model, setup.tp, lo, setup.dtype, setup.kv_dtype).intensity(HUGE_BATCH) >= ridge:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            probe = DecodeSetup(setup.model, setup.tp, mid, setup.dtype, setup.kv_dtype)
            lo, hi = (mid, hi) if probe.intensity(HUGE_BATCH) >= ridge else (lo, mid)
        out["context_limit"] = hi
    return out


def step_rows(setup: DecodeSetup, batches: list[int], time_fn: TimeFn, bandwidth: float | None,
              peak: float | None, kv_max_batch: int | None, comm_fn: CommFn | None = None) -> list[StepRow]:
    """One row per batch; ``comm_fn`` None: the step's all-reduces are not counted (TP 1 has none)."""
    rows = []
    ridge = ridge_flop_per_byte(peak, bandwidth)
    for batch in batches:
        launches = setup.launches(batch)
        comm = comm_fn(batch) if comm_fn is not None else 0.0
        step = sum(time_fn(*launch.key) * launch.count for launch in launches) + comm
        attention = sum(time_fn(*launch.key) * launch.count for launch in launches if launch.op == "bmm")
        total_bytes, linear, attention_flop = setup.work(batch)
        flop = linear + attention_flop
        intensity = flop / total_bytes
        rows.append(StepRow(
            batch=batch, step_time_s=step, attention_time_s=attention, comm_time_s=comm, comm_share=comm / step,
            tokens_per_s=batch / step,
            tokens_per_s_per_sequence=1 / step, bytes=total_bytes, flop=flop, linear_flop=linear,
            intensity_flop_per_byte=intensity,
            mbu=total_bytes / step / bandwidth if bandwidth else None,
            mfu=flop / step / peak if peak else None,
            mfu_linear=linear / step / peak if peak else None,
            bound="compute" if ridge and intensity >= ridge else "memory",
            kv_fits=None if kv_max_batch is None else batch <= kv_max_batch,
        ))
    return rows


def latency_knee(rows: list[StepRow], factor: float) -> int | None:
    base = rows[0].step_time_s
    return next((r.batch for r in rows if r.step_time_s >= factor * base), None)


def rows_to_dicts(rows: list[StepRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]
