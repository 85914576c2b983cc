"""What ``gpubench profile`` measures for one model: the grids, and one item per kernel and grid point.

Grids are dense where kernel time bends (the step-cost model interpolates linearly in tokens between
points, docs/serving.md): token counts 1, 2, 3, 4, 6, 8, 12, ... (powers of two and the 1.5× points between
them) up to ``max_tokens``; contexts and prompts in powers of two from 16 up to ``max_context``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from microbench.serving.profile_kernels import ATTENTION_KERNELS, AttentionShape
from microbench.sweep.plan import PlanError
from roofline.core.options import check_dtypes
from roofline.specs.models import ModelSpec, check_tp, layer_shapes, load_hf_config, load_model

# Decode batches stop here unless --max-batch says otherwise: vLLM's default max_num_seqs.
DEFAULT_MAX_BATCH = 256
SMALLEST_CONTEXT = 16
# Chunk sizes over a cached prefix: a coarser grid, the chunk table is 2-D.
CHUNK_STEP = 4


def token_grid(limit: int) -> list[int]:
    """1, 2, 3, 4, 6, 8, 12, 16, ... up to ``limit`` (always included)."""
    values, power = {1}, 1
    while power <= limit:
        values.update(v for v in (power, power * 3 // 2) if v <= limit)
        power *= 2
    values.add(limit)
    return sorted(values)


def power_grid(start: int, limit: int, step: int = 2) -> list[int]:
    """start, start·step, ... up to ``limit`` (always included); just ``limit`` when it is below ``start``."""
    values, value = set(), start
    while value < limit:
        values.add(value)
        value *= step
    values.add(limit)
    return sorted(values)


@dataclass(frozen=True)
class ProfilePlan:
    """The arguments that define a profile; stored in the partial file so ``--resume`` rebuilds it."""

    model: str | None
    hf_config: str | None
    tp: int = 1
    dtype: str | None = None  # None: bf16 on a GPU, fp32 on the CPU (what transformers runs there)
    kv_dtype: str | None = None
    max_tokens: int = 8192
    max_context: int = 8192
    max_batch: int = DEFAULT_MAX_BATCH
    attention: str = "sdpa"
    device: str = "auto"
    budget_s: float | None = None
    seed: int = 0
    clock: str = "wall"  # wall | thread-cpu (CPU, one torch thread: this thread's CPU time, as validate times)

    def check(self) -> ModelSpec:
        """The model, after every argument is checked (PlanError / SpecError, one line)."""
        if bool(self.model) == bool(self.hf_config):
            raise PlanError("give one of --model NAME or --hf-config PATH")
        # one of model / hf_config is given (checked above)
        profile = load_model(self.model) if self.model else load_hf_config(Path(self.hf_config))  # pyright: ignore[reportArgumentType]
        check_tp(profile, self.tp)
        if profile.experts > 1:
            raise PlanError(f"{profile.name} is a mixture of experts: the step profile has no routing yet")
        check_dtypes(self.dtype, self.kv_dtype)
        if "fp8" in (self.dtype, self.kv_dtype) or "tf32" in (self.dtype, self.kv_dtype):
            raise PlanError("a step profile runs in fp32, fp16 or bf16 (fp8/tf32 attention is not an engine path)")
        for name in ("max_tokens", "max_context", "max_batch"):
            if getattr(self, name) <= 0:
                raise PlanError(f"--{name.replace('_', '-')} must be positive")
        if self.attention not in ATTENTION_KERNELS:
            raise PlanError(f"unknown attention kernel {self.attention!r}; choose from {', '.join(ATTENTION_KERNELS)}")
        if self.clock not in ("wall", "thread-cpu"):
            raise PlanError(f"unknown clock {self.clock!r}; choose wall or thread-cpu")
        if self.budget_s is not None and self.budget_s <= 0:
            raise PlanError("--budget must be positive")
        return profile

    def resolved_dtype(self, kind: str) -> str:
        return self.dtype or ("bf16" if kind == "cuda" else "fp32")

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> ProfilePlan:
        try:
            return cls(**{key: record[key] for key in cls.__dataclass_fields__ if key in record})
        except TypeError as exc:
            raise PlanError(f"the partial profile's plan is unreadable ({exc})") from None


@dataclass(frozen=True)
class Item:
    """One measurement: ``kind`` linear | decode | prefill | chunk | other, and its grid point."""

    kind: str
    name: str  # the linear's name; the kernel for attention
    a: int  # tokens (linear, other, prefill), batch (decode), chunk tokens (chunk)
    b: int = 0  # context (decode), prefix tokens (chunk)

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.name}/{self.a}/{self.b}"

    @property
    def label(self) -> str:
        """What the item measures, as a progress line names it: "linear o_proj T=12", "decode attention B=4
        ctx=512" (T: tokens in the step)."""
        if self.kind == "linear":
            return f"linear {self.name} T={self.a}"
        if self.kind == "decode":
            return f"decode attention B={self.a} ctx={self.b}"
        if self.kind == "prefill":
            return f"prefill attention T={self.a}"
        if self.kind == "chunk":
            return f"chunk attention T={self.a} prefix={self.b}"
        return f"{self.kind} kernels T={self.a}"  # other: the norms, activations, sampling of a step


@dataclass(frozen=True)
class Grids:
    tokens: tuple[int, ...]
    lm_head_tokens: tuple[int, ...]
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    prompts: tuple[int, ...]
    chunks: tuple[int, ...]
    prefixes: tuple[int, ...]


def grids_for(plan: ProfilePlan) -> Grids:
    max_batch = min(plan.max_batch, plan.max_tokens)
    return Grids(
        tokens=tuple(token_grid(plan.max_tokens)),
        # Logits are computed for the last position of each sequence in a step only.
        lm_head_tokens=tuple(token_grid(max_batch)),
        batches=tuple(power_grid(1, max_batch)),
        contexts=tuple(power_grid(SMALLEST_CONTEXT, plan.max_context)),
        prompts=tuple(power_grid(SMALLEST_CONTEXT, min(plan.max_context, plan.max_tokens))),
        chunks=tuple(power_grid(SMALLEST_CONTEXT, plan.max_tokens, CHUNK_STEP)),
        prefixes=tuple(power_grid(SMALLEST_CONTEXT, plan.max_context, CHUNK_STEP)),
    )


LINEAR_NAMES = {"qkv": "qkv_proj", "o": "o_proj", "gate_up": "gate_up_proj", "up": "up_proj",
                "down": "down_proj", "lm_head": "lm_head"}


def linear_shapes(model: ModelSpec, tp: int) -> list[tuple[str, int, int]]:
    """(name, N, K) of every distinct linear of the step, lm_head last."""
    return [(LINEAR_NAMES[s.name], s.n, s.k) for s in layer_shapes(model, tp)]


def plan_items(plan: ProfilePlan, model: ModelSpec) -> list[Item]:
    """Every measurement, in the order they are taken (cheap, small ones first within a kind)."""
    grids = grids_for(plan)
    items = []
    for name, _, _ in linear_shapes(model, plan.tp):
        grid = grids.lm_head_tokens if name == "lm_head" else grids.tokens
        items += [Item("linear", name, t) for t in grid]
    items += [Item("decode", plan.attention, b, c) for b in grids.batches for c in grids.contexts]
    items += [Item("prefill", plan.attention, p) for p in grids.prompts]
    items += [Item("chunk", plan.attention, c, p) for c in grids.chunks for p in grids.prefixes]
    items += [Item("other", "step", t) for t in grids.tokens]
    return items


def attention_shape(model: ModelSpec, tp: int) -> AttentionShape:
    return AttentionShape(model.heads // tp, model.kv_heads // tp, model.head_dim)


def model_record(model: ModelSpec) -> dict[str, Any]:
    return {"name": model.name, "id": model.id, "layers": model.layers, "hidden": model.hidden, "heads": model.heads,
            "kv_heads": model.kv_heads, "head_dim": model.head_dim, "intermediate": model.intermediate,
            "vocab": model.vocab, "mlp": "gated" if model.gated_mlp else "plain",
            "tied_embeddings": model.tied_embeddings, "max_positions": model.max_positions, "source": model.source}
