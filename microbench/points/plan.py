"""What a sweep measures: ops × dtypes × shapes × batches, with defaults and the parsing of CLI lists.

Default shapes are real LLM decode layers (Llama-3 projections, weight stored as ``nn.Linear`` does,
N×K); on the CPU they are scaled down so a default sweep ends in minutes on two cores.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from roofline.core.counting import DTYPES, MIXER_DTYPES, OPS, MixerShape, count_work, is_weight_only
from roofline.core.errors import BadInputError
from roofline.core.units import si_bytes
from roofline.result.document import backend_tag

DEFAULT_BATCHES = tuple(sorted({2**i for i in range(11)} | {24, 48, 96, 192, 384, 640}))
QUICK_BATCHES = (1, 4, 16, 64, 256)
MAX_BATCH = 1 << 20
BACKENDS = ("torch", "cupy")


@dataclass(frozen=True)
class ExpertSet:
    """A grouped GEMM's experts: ``experts`` matrices of N×K, each token routed to ``topk`` of them."""

    experts: int
    topk: int
    n: int
    k: int

    def __post_init__(self) -> None:
        if not 0 < self.topk <= self.experts:
            raise PlanError(f"--topk {self.topk} must be between 1 and --experts {self.experts}")


@dataclass(frozen=True)
class MixerSeries:
    """A state_update or sparse_attention series' shape: the point's n and k and the mixer beyond them
    (``counting.MixerShape``: state_update's n is the value head size and k the key head size, Mamba-2's the head and
    state sizes; sparse_attention's n is the context and k the latent)."""

    n: int
    k: int
    mixer: MixerShape


def _gdn(heads: int, groups: int) -> MixerShape:
    return MixerShape("gdn", heads, groups=groups, conv_kernel=4, state_dtype="fp32")


def _mamba2(heads: int, groups: int) -> MixerShape:
    return MixerShape("mamba2", heads, groups=groups, conv_kernel=4, state_dtype="fp32")


def _dsa(heads: int, rope: int, index_heads: int, index_dim: int, topk: int) -> MixerShape:
    return MixerShape("dsa", heads, rope=rope, index_heads=index_heads, index_dim=index_dim, topk=topk)


@dataclass(frozen=True)
class Defaults:
    dtypes: tuple[str, ...]
    shapes: tuple[tuple[int, int], ...]  # gemv and gemm weights, N×K
    bmm_shapes: tuple[tuple[int, int], ...]  # one sequence's matrix for bmm, N×K
    batches: tuple[int, ...]
    budget_s: float
    # grouped: one coarse and one fine-grained mixture of experts (each token's share of the batch differs 16×)
    expert_sets: tuple[ExpertSet, ...] = ()
    # state_update and sparse_attention (asked for with --op): one Gated DeltaNet and one Mamba-2 layer, one DSA layer
    mixer_series: tuple[MixerSeries, ...] = ()
    # The stopping rule's 95% CI target.  A GPU's samples spread well under 1%; a shared CPU's do not (the
    # committed 2-core default sweep: median half-width 2.4%, 90th percentile 6.7%), so ±1% on a CPU was a
    # promise three points in four broke at their budget.  ±5% is what a CPU point can meet in its budget.
    target_rel_ci: float = 0.01


# The weight-only formats production decode reads (w8a16, w4a16) beside bf16, on the same shapes: where each
# stops paying off against bf16 is one of the answers a sweep gives.
GPU_DEFAULTS = Defaults(
    dtypes=("bf16", "w8a16", "w4a16"),
    # Llama-3-70B down_proj (the 8192x28672) and qkv_proj; Llama-3-8B down_proj.
    shapes=((8192, 28672), (10240, 8192), (4096, 14336)),
    # One sequence's K cache for one layer at 4096 tokens, 8 KV heads × 128 flattened: attention-like.
    bmm_shapes=((4096, 1024),),
    batches=DEFAULT_BATCHES,
    budget_s=0.5,
    # Mixtral 8x7B's experts (8 of 14336x4096, top-2) and Qwen3-30B-A3B's (128 of 768x2048, top-8).
    expert_sets=(ExpertSet(8, 2, 14336, 4096), ExpertSet(128, 8, 768, 2048)),
    # Qwen3.5-397B-A17B's Gated DeltaNet (64 value heads, 16 key heads of 128) and Nemotron-3-Super's Mamba-2 (128
    # heads of 64 over a state of 128, 8 groups), whole on one GPU; GLM-5's DSA layer at 8k tokens (64 heads over a
    # 512 + 64 latent, an indexer of 32 heads of 128, top 2,048).
    mixer_series=(MixerSeries(128, 128, _gdn(64, 16)), MixerSeries(64, 128, _mamba2(128, 8)),
                  MixerSeries(8192, 512, _dsa(64, 64, 32, 128, 2048))),
)
CPU_DEFAULTS = Defaults(
    dtypes=("fp32", "bf16", "w8a16", "w4a16"),
    # A Llama-style projection scaled down (hidden 2048, 2x MLP) so weights still exceed the L3.
    shapes=((2048, 4096),),
    bmm_shapes=((512, 128),),
    batches=DEFAULT_BATCHES,
    budget_s=0.5,
    target_rel_ci=0.05,
    # Mixtral's routing (8 experts, top-2) on experts scaled down as the dense shape is.
    expert_sets=(ExpertSet(8, 2, 1024, 512),),
    # The GPU's mixers scaled down (a state of 128 kB per sequence; DSA at 2k tokens, top 256).
    mixer_series=(MixerSeries(64, 64, _gdn(8, 4)), MixerSeries(32, 64, _mamba2(16, 2)),
                  MixerSeries(2048, 128, _dsa(8, 32, 8, 64, 256))),
)
CPU_QUICK = Defaults(
    dtypes=("fp32", "w4a16"), shapes=((1024, 2048),), bmm_shapes=((256, 128),), batches=QUICK_BATCHES, budget_s=0.15,
    target_rel_ci=0.05, expert_sets=(ExpertSet(8, 2, 512, 256),),
    mixer_series=(MixerSeries(64, 64, _gdn(4, 2)), MixerSeries(32, 64, _mamba2(8, 2)),
                  MixerSeries(1024, 64, _dsa(4, 32, 4, 64, 128))),
)
GPU_QUICK = Defaults(
    dtypes=("bf16", "w4a16"), shapes=((4096, 14336),), bmm_shapes=((4096, 1024),), batches=QUICK_BATCHES, budget_s=0.2,
    expert_sets=(ExpertSet(8, 2, 14336, 4096),), mixer_series=GPU_DEFAULTS.mixer_series,
)
# The dtypes gpubench ceilings measures the matmul peak in when --dtype is not given.
CEILING_DTYPES = {"cuda": ("fp32", "tf32", "fp16", "bf16", "fp8"), "cpu": ("fp32", "bf16")}


def defaults_for(kind: str, quick: bool) -> Defaults:
    if kind == "cuda":
        return GPU_QUICK if quick else GPU_DEFAULTS
    return CPU_QUICK if quick else CPU_DEFAULTS


class PlanError(BadInputError):
    """Bad sweep arguments: one line, exit code 2."""


@dataclass(frozen=True)
class PointSpec:
    op: str
    dtype: str
    batch: int
    n: int
    k: int
    backend: str = "torch"
    # grouped: ``experts`` N×K matrices, each of the ``batch`` tokens routed to ``topk`` of them by ``routing``.
    experts: int = 1
    topk: int = 1
    routing: str = "balanced"
    # state_update and sparse_attention: the mixer's shape beyond n and k (``counting.MixerShape``).
    mixer: MixerShape | None = None

    def __post_init__(self) -> None:
        count_work(self.op, self.dtype, self.batch, self.n, self.k, self.experts, self.topk, mixer=self.mixer)
        if self.backend not in BACKENDS:
            raise PlanError(f"unknown backend {self.backend!r}; choose from {', '.join(BACKENDS)}")

    @property
    def grouping(self) -> tuple:
        if self.op == "grouped":
            return (self.experts, self.topk, self.routing)
        return (self.mixer,) if self.mixer is not None else ()

    @property
    def key(self) -> tuple:
        """What ``Point.plan_key`` is for the point this spec plans."""
        return (self.op, self.dtype, self.batch, self.n, self.k, self.backend) + self.grouping

    @property
    def label(self) -> str:
        experts = f" {self.experts}e top-{self.topk} {self.routing}" if self.op == "grouped" else ""
        if self.mixer is not None:
            experts = f" {self.mixer.tag}"
        return f"{self.op} {self.dtype} {self.n}x{self.k}{experts} B={self.batch}{backend_tag(self.backend)}"




def parse_batches(text: str) -> list[int]:
    """Comma-separated batches and ranges: ``1,2,24``, ``1:4096:x2`` (geometric), ``8:64:+8`` or ``8:64:8``."""
    batches: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise PlanError(f"empty item in batch list {text!r}")
        if ":" not in part:
            batches.add(_positive_int(part, "batch"))
            continue
        pieces = part.split(":")
        if len(pieces) not in (2, 3):
            raise PlanError(f"batch range {part!r} must be START:STOP[:STEP]")
        start, stop = _positive_int(pieces[0], "batch"), _positive_int(pieces[1], "batch")
        step = pieces[2].strip() if len(pieces) == 3 else "x2"
        if stop < start:
            raise PlanError(f"batch range {part!r} ends before it starts")
        if step.startswith("x"):
            factor = _positive_int(step[1:], "range factor")
            if factor < 2:
                raise PlanError(f"range factor in {part!r} must be at least 2")
            value = start
            while value <= stop:
                batches.add(value)
                value *= factor
        else:
            increment = _positive_int(step.lstrip("+"), "range step")
            batches.update(range(start, stop + 1, increment))
    if max(batches) > MAX_BATCH:
        raise PlanError(f"batch {max(batches)} is larger than {MAX_BATCH}")
    return sorted(batches)


def _positive_int(text: str, what: str) -> int:
    text = text.strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise PlanError(f"{what} {text!r} is not an integer")
    value = int(text)
    if value <= 0:
        raise PlanError(f"{what} must be positive, got {value}")
    return value


def parse_shape(text: str) -> tuple[int, int]:
    """``NxK`` — the weight's output and input dimensions, as nn.Linear stores it."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", text)
    if not match:
        raise PlanError(f"shape {text!r} is not NxK (for example 8192x28672)")
    n, k = int(match.group(1)), int(match.group(2))
    if n <= 0 or k <= 0:
        raise PlanError(f"shape {text!r} must have positive dimensions")
    return n, k


def check_choices(values: list[str], allowed: tuple[str, ...], what: str) -> list[str]:
    for value in values:
        if value not in allowed:
            raise PlanError(f"unknown {what} {value!r}; choose from {', '.join(allowed)}")
    return list(dict.fromkeys(values))


def build_plan(
    ops: list[str],
    dtypes: list[str],
    shapes: list[tuple[int, int]],
    bmm_shapes: list[tuple[int, int]],
    batches: list[int],
    backends: Sequence[str] = ("torch",),
    expert_sets: Sequence[ExpertSet] = (),
    routing: str = "balanced",
    mixer_series: Sequence[MixerSeries] = (),
) -> list[PointSpec]:
    """Points grouped by (backend, shape, dtype, op) so one series' weights are allocated once, and every dtype
    of a shape is measured before the next shape: a sweep cut short still compares its formats on one shape.

    ``bmm`` stands for decode attention over each sequence's KV cache, which a weight format does not change:
    beside other ops a weight-only dtype's bmm is left out; asked for alone (``--op bmm``) it is planned and
    recorded as unsupported, saying why.  ``grouped`` runs each of ``expert_sets`` in the plain dtypes torch's grouped
    GEMM takes (a quantized format's grouped kernel is not timed here; asked for alone it is recorded unsupported),
    on the torch back end.  ``state_update`` and ``sparse_attention`` run each of ``mixer_series`` of their op in the
    dtypes a step's activations take (fp32, fp16, bf16), on the torch back end.  A sweep with nothing else to run is
    refused when it is prepared."""
    check_choices(ops, OPS, "op")
    check_choices(dtypes, DTYPES, "dtype")
    check_choices(list(backends), BACKENDS, "backend")
    plan: list[PointSpec] = []
    for backend in backends:
        for n, k in shapes:
            for dtype in dtypes:
                if "gemv" in ops:
                    plan.append(PointSpec("gemv", dtype, 1, n, k, backend))
                if "gemm" in ops:
                    plan.extend(PointSpec("gemm", dtype, b, n, k, backend) for b in batches)
        if "bmm" in ops:
            for n, k in bmm_shapes:
                for dtype in dtypes:
                    if set(ops) == {"bmm"} or not is_weight_only(dtype):
                        plan.extend(PointSpec("bmm", dtype, b, n, k, backend) for b in batches)
    if "grouped" in ops and "torch" in backends:
        for experts in expert_sets:
            for dtype in dtypes:
                if set(ops) == {"grouped"} or dtype in GROUPED_PLAIN:
                    plan.extend(PointSpec("grouped", dtype, b, experts.n, experts.k, "torch", experts.experts,
                                          experts.topk, routing) for b in batches)
    if "torch" in backends:
        for series in mixer_series:
            if series.mixer.op in ops:
                plan.extend(PointSpec(series.mixer.op, dtype, b, series.n, series.k, "torch", mixer=series.mixer)
                            for dtype in dtypes if dtype in MIXER_DTYPES for b in batches)
    return plan


# The dtypes a grouped series is planned in beside other ops (torch's grouped GEMM multiplies these directly).
GROUPED_PLAIN = ("fp32", "fp16", "bf16")


def smallest_need_bytes(spec: PointSpec) -> int:
    """What one point needs at the least: one copy of its weights, inputs and outputs."""
    work = count_work(spec.op, spec.dtype, spec.batch, spec.n, spec.k, mixer=spec.mixer)
    return work.weight_bytes + work.activation_bytes + work.output_bytes


def check_memory_cap(points: list[PointSpec], cap_bytes: int | None) -> None:
    """A ``--max-memory`` below what every point needs would only record oom points: bad input instead."""
    if cap_bytes is None or not points:
        return
    need, spec = min((smallest_need_bytes(s), s.label) for s in points)
    if need > cap_bytes:
        raise PlanError(f"--max-memory {si_bytes(cap_bytes)} is below what the smallest point needs "
                        f"({si_bytes(need)} for {spec}): nothing could be measured")
