"""A whole model's decode step from per-launch times: tokens/s against batch, MBU and MFU, where the step
turns compute-bound (or why it never does), and the largest batch whose KV cache fits.

What a step launches, and each launch's FLOP and bytes, is the step model's (``roofline.step``): a decode batch
of B sequences at context C is ``Batch.decode(B, C)``.  Times come from a function of a launch: measured medians
(``measured_time``: a GEMM or grouped GEMM is the sweep point of its shape; decode attention is timed by the sweep's
``bmm`` points of its shape, ``attention_proxy_keys``), or the roofline (``analytic_time``).  In a quantized format
the layers' linears are launched in it and the LM head in bf16, so the bytes, MBU and the crossover count what the
step really reads.  The step's collectives (tensor parallelism's all-reduces, expert parallelism's all-to-alls) are
costed on the spec sheet's interconnect and reported apart (``comm_time_s``, ``comm_share``); they move no HBM bytes
the roofline counts, so MBU and MFU stay the kernels' work over the whole step.  Tokens/s is the group's (every GPU
of the split); MBU and MFU are one GPU's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from typing import Any

from roofline.core.counting import MIXER_DTYPES, MixerShape, compute_dtype
from roofline.core.roof import ridge_flop_per_byte, roof_time_s
from roofline.specs.gpus import Interconnect, SpecError
from roofline.step.comm import comm_time_s
from roofline.step.launches import Batch, Launch, StepModel
from roofline.step.memory import kv_capacity as step_kv_capacity
from roofline.step.speculative import SpecDecode, drafter_step

TimeFn = Callable[[Launch], float]  # seconds of ONE launch
CommFn = Callable[[int], float]  # seconds of one step's collectives at a batch
EnergyFn = Callable[[list[Launch], float], float | None]  # joules of one step (its launches, its seconds)
# Where to look for "never": intensity at an enormous batch is the step's limit as B grows.
HUGE_BATCH = 10**7
# Decode attention's two batched GEMVs per layer and KV head: QKᵀ, then PV.
ATTENTION_PROXIES_PER_LAYER = 2


@dataclass(frozen=True)
class DecodeSetup:
    """A decode step at ``context``; with ``spec`` a speculative one: the verification of K + 1 tokens per sequence
    by the target and the drafter's K steps (``roofline.step.speculative``)."""

    step: StepModel
    context: int
    spec: SpecDecode | None = None

    @property
    def model(self):
        return self.step.model

    @property
    def dtype(self) -> str:
        return self.step.dtype

    @property
    def tp(self) -> int:
        return self.step.parallelism.tp

    @property
    def tokens_per_step(self) -> float:
        """Tokens one sequence gains per step: 1, or the accepted drafts plus one."""
        return self.spec.tokens_per_step if self.spec else 1.0

    def batch(self, batch: int) -> Batch:
        return Batch.decode(batch, self.context, self.spec.queries if self.spec else 1)

    @cached_property
    def drafter(self) -> StepModel | None:
        return drafter_step(self.step, self.spec) if self.spec else None

    def draft_launches(self, batch: int) -> list[Launch]:
        """The drafter's K decode steps of ``batch`` sequences (its launches, each ``K`` times as many)."""
        if self.drafter is None or self.spec is None:
            return []
        return [replace(launch, name=f"draft {launch.name}", count=launch.count * self.spec.draft)
                for launch in self.drafter.launches(Batch.decode(batch, self.context))]

    def launches(self, batch: int) -> list[Launch]:
        return self.step.launches(self.batch(batch)) + self.draft_launches(batch)

    def work(self, batch: int) -> tuple[float, float, float]:
        """(bytes, linear FLOP, attention FLOP) of one step at ``batch`` on one GPU (a speculative one's drafts
        included)."""
        work = self.step.work(self.batch(batch))
        total, linear, attention = work.total.bytes, work.linear.flop, work.attention.flop
        if self.drafter is not None and self.spec is not None:
            draft = self.drafter.work(Batch.decode(batch, self.context))
            total += self.spec.draft * draft.total.bytes
            linear += self.spec.draft * draft.linear.flop
            attention += self.spec.draft * draft.attention.flop
        return total, linear, attention

    def without_speculation(self) -> DecodeSetup:
        return replace(self, spec=None)

    def intensity(self, batch: int) -> float:
        total_bytes, linear, attention = self.work(batch)
        return (linear + attention) / total_bytes

    def gemm_intensity(self, batch: int) -> float:
        """The step's GEMMs alone (the weights' reuse, attention aside): what speculation multiplies."""
        work = self.step.work(self.batch(batch)).linear
        flop, nbytes = work.flop, work.bytes
        if self.drafter is not None and self.spec is not None:
            draft = self.drafter.work(Batch.decode(batch, self.context)).linear
            flop, nbytes = flop + self.spec.draft * draft.flop, nbytes + self.spec.draft * draft.bytes
        return flop / nbytes

    def with_context(self, context: int) -> DecodeSetup:
        return replace(self, context=context)

    def attention_proxy_keys(self, launch: Launch) -> list[tuple]:
        """The sweep points that time one decode attention launch: per layer, a batched GEMV of the rank's
        ``sequences × KV heads`` matrices of ``context × head_dim`` for QKᵀ and another for PV (the sweep's ``bmm``,
        one vector per matrix: a GQA group's queries share each matrix, which this proxy reads once)."""
        m = self.model
        if launch.name.startswith("draft "):
            raise SpecError("a measured decode times the target's launches only: give --analytic with --spec-decode")
        if launch.op != "attention":
            raise SpecError(f"{m.name}'s {launch.op.replace('_', ' ')} has no sweep point to time it: measure it with "
                            "gpubench profile, or give --analytic")
        rules = self.step.mixer_named(launch.name)
        window = rules.window
        context = min(self.context, window) if window else self.context
        groups = launch.tokens * rules.kv_heads_per_gpu(self.tp)
        return [("bmm", launch.dtype, groups, context, rules.spec.head_dim)] * ATTENTION_PROXIES_PER_LAYER

    def point_keys(self, launch: Launch) -> list[tuple]:
        """The sweep points that time one launch: a GEMM's or grouped GEMM's own; decode attention's ``bmm`` proxies
        (``attention_proxy_keys``); a recurrent mixer's layer, the ``state_update`` point of its shape on one GPU (its
        value and key head sizes as n × k; Mamba-2's head and state sizes); a DSA layer, the ``sparse_attention`` point
        of its shape at the context (n) over its latent (k)."""
        if launch.op in ("attention", "mla_attention"):
            return self.attention_proxy_keys(launch)
        if launch.op not in ("linear_attention", "mamba2", "dsa_attention"):
            return [launch.key]
        what = launch.op.replace("_", " ")
        if launch.name.startswith("draft ") or (self.spec is not None and self.spec.queries > 1):
            raise SpecError(f"a measured decode times one token per sequence through {self.model.name}'s {what}: "
                            "give --analytic with --spec-decode")
        if launch.dtype not in MIXER_DTYPES:
            raise SpecError(f"{self.model.name}'s {what} in {launch.dtype} has no sweep point (they run in "
                            f"{', '.join(MIXER_DTYPES)}): give --analytic")
        spec, tp = self.step.mixer_named(launch.name).spec, self.tp
        if launch.op == "linear_attention":
            shape = MixerShape("gdn", spec.value_heads // tp, groups=spec.key_heads // tp,
                               conv_kernel=spec.conv_kernel, state_dtype=spec.state_dtype)
            return [("state_update", launch.dtype, launch.tokens, spec.value_head_dim, spec.key_head_dim, shape)]
        if launch.op == "mamba2":
            shape = MixerShape("mamba2", spec.heads // tp, groups=spec.groups // tp, conv_kernel=spec.conv_kernel,
                               state_dtype=spec.state_dtype)
            return [("state_update", launch.dtype, launch.tokens, spec.head_dim, spec.state_size, shape)]
        index = spec.indexer
        shape = MixerShape("dsa", spec.heads // tp, rope=spec.qk_rope_head_dim, index_heads=index.heads,
                           index_dim=index.head_dim, topk=index.topk)
        return [("sparse_attention", launch.dtype, launch.tokens, self.context, spec.kv_lora_rank, shape)]


def analytic_time(bandwidth: float, peaks: dict[str, float]) -> TimeFn:
    """Per-launch time on the roofline (``roofline.core.roof``): max(bytes / bandwidth, FLOP / peak of the
    launch's compute dtype).  A dtype with no peak on this device (fp8 on an A100, fp4 before Blackwell) is timed
    by its bytes alone, never by another dtype's peak: ``no_peak_note`` says so wherever the answer is printed."""
    def time_s(launch: Launch) -> float:
        peak = peaks.get(launch.dtype) or peaks.get(compute_dtype(launch.dtype))
        return roof_time_s(launch.work.flop, launch.work.bytes, bandwidth, peak)
    return time_s


def measured_time(setup: DecodeSetup, medians: dict[tuple, float]) -> TimeFn:
    """Per-launch time from measured medians keyed as ``setup.point_keys`` keys them."""
    def time_s(launch: Launch) -> float:
        return sum(medians[key] for key in setup.point_keys(launch))
    return time_s


def comm_time(setup: DecodeSetup, interconnect: Interconnect) -> CommFn:
    """Seconds of one decode step's collectives at a batch on ``interconnect`` (none on one GPU)."""
    def comm_s(batch: int) -> float:
        return comm_time_s(setup.step, batch, interconnect)
    return comm_s


def power_energy(watts: float) -> EnergyFn:
    """A step's energy at a constant power: the board's TDP, an upper bound (decode at small batch draws less)."""
    return lambda launches, step_s: watts * step_s


def measured_energy(setup: DecodeSetup, joules: dict[tuple, float]) -> EnergyFn:
    """A step's energy from each launch's measured energy (the NVML counter over its timed phase / launches);
    None when any launch has none."""
    def energy(launches: list[Launch], step_s: float) -> float | None:
        total = 0.0
        for launch in launches:
            keys = setup.point_keys(launch)
            if any(joules.get(key) is None for key in keys):
                return None
            total += launch.count * sum(joules[key] for key in keys)
        return total
    return energy


def no_peak_note(dtype: str, device: str) -> str:
    return (f"no peak for {compute_dtype(dtype)} on {device}: its launches are timed by their bytes alone and MFU, "
            "the ridge and the crossover are not given")


@dataclass(frozen=True)
class StepRow:
    batch: int
    step_time_s: float
    attention_time_s: float
    comm_time_s: float  # the collectives between GPUs, inside step_time_s (0 on one GPU or when not counted)
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
    joules_per_token: float | None = None  # None: no energy measured or charged


def kv_capacity(setup: DecodeSetup, memory_bytes: float | None, mem_fraction: float) -> dict[str, Any]:
    """Largest batch whose KV cache fits beside the weights in ``mem_fraction`` of the memory."""
    return step_kv_capacity(setup.step, setup.context, memory_bytes, mem_fraction)


def ridge_crossing(setup: DecodeSetup, ridge: float, batches: list[int]) -> dict[str, Any]:
    """Smallest measured batch whose step intensity reaches the ridge, or why none ever does."""
    limit = setup.intensity(HUGE_BATCH)
    crossing = next((b for b in batches if setup.intensity(b) >= ridge), None)
    out: dict[str, Any] = {"ridge_flop_per_byte": ridge, "limit_intensity_flop_per_byte": limit,
                           "crossover_batch": crossing, "never": limit < ridge, "context_limit": None,
                           "gemm_crossover_batch": _first_batch(setup.gemm_intensity, ridge)}
    if crossing is None and limit >= ridge:
        lo, hi = max(batches), HUGE_BATCH
        while hi - lo > 1:  # the batch where it crosses, beyond the batches asked for
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if setup.intensity(mid) >= ridge else (mid, hi)
        out["crossover_batch_beyond_list"] = hi
    # The context past which attention keeps the step memory-bound at every batch.
    lo, hi = 1, 1 << 26
    if setup.with_context(lo).intensity(HUGE_BATCH) >= ridge:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if setup.with_context(mid).intensity(HUGE_BATCH) >= ridge else (lo, mid)
        out["context_limit"] = hi
    return out


def _first_batch(intensity: Callable[[int], float], ridge: float) -> int | None:
    """The smallest batch whose ``intensity`` reaches ``ridge`` (it grows with the batch), or None below HUGE_BATCH."""
    if intensity(HUGE_BATCH) < ridge:
        return None
    lo, hi = 0, HUGE_BATCH
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if intensity(mid) >= ridge else (mid, hi)
    return hi


def step_rows(setup: DecodeSetup, batches: list[int], time_fn: TimeFn, bandwidth: float | None,
              peak: float | None, kv_max_batch: int | None, comm_fn: CommFn | None = None,
              energy_fn: EnergyFn | None = None) -> list[StepRow]:
    """One row per batch; ``comm_fn`` None: the step's collectives are not counted (one GPU has none);
    ``energy_fn`` None: no energy per token."""
    rows = []
    ridge = ridge_flop_per_byte(peak, bandwidth)
    for batch in batches:
        launches = setup.launches(batch)
        comm = comm_fn(batch) if comm_fn is not None else 0.0
        attention = sum(time_fn(launch) * launch.count for launch in launches if launch.part == "attention"
                        and launch.op != "gemm")
        step = sum(time_fn(launch) * launch.count for launch in launches) + comm
        total_bytes, linear, attention_flop = setup.work(batch)
        flop = linear + attention_flop
        intensity = flop / total_bytes
        gained = setup.tokens_per_step
        energy = energy_fn(launches, step) if energy_fn is not None else None
        rows.append(StepRow(
            batch=batch, step_time_s=step, attention_time_s=attention, comm_time_s=comm, comm_share=comm / step,
            tokens_per_s=batch * gained / step,
            tokens_per_s_per_sequence=gained / step, bytes=total_bytes, flop=flop, linear_flop=linear,
            intensity_flop_per_byte=intensity,
            mbu=total_bytes / step / bandwidth if bandwidth else None,
            mfu=flop / step / peak if peak else None,
            mfu_linear=linear / step / peak if peak else None,
            bound="compute" if ridge and intensity >= ridge else "memory",
            kv_fits=None if kv_max_batch is None else batch <= kv_max_batch,
            joules_per_token=energy / (batch * gained) if energy is not None else None,
        ))
    return rows


def latency_knee(rows: list[StepRow], factor: float) -> int | None:
    base = rows[0].step_time_s
    return next((r.batch for r in rows if r.step_time_s >= factor * base), None)


def rows_to_dicts(rows: list[StepRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]
