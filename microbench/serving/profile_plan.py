"""What ``gpubench profile`` measures for one model: the grids, and one item per kernel and grid point.

Grids are dense where kernel time bends (the step-cost model interpolates linearly in tokens between
points, docs/serving.md): token counts 1, 2, 3, 4, 6, 8, 12, ... (powers of two and the 1.5× points between
them) up to ``max_tokens``; contexts and prompts in powers of two from 16 up to ``max_context``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from microbench.points.plan import PlanError
from microbench.serving.profile_kernels import ATTENTION_KERNELS, AttentionShape
from roofline.core.options import check_dtypes
from roofline.specs.hf_config import load_hf_config
from roofline.specs.models import ModelSpec, load_model
from roofline.step.grids import power_grid, token_grid
from roofline.step.kinds import MixerRules
from roofline.step.launches import StepModel

# Decode batches stop here unless --max-batch says otherwise: vLLM's default max_num_seqs.
DEFAULT_MAX_BATCH = 256
SMALLEST_CONTEXT = 16
# Chunk sizes over a cached prefix: a coarser grid, the chunk table is 2-D.
CHUNK_STEP = 4


# The dtype a measured profile runs in when --dtype is not given: what transformers runs on each kind of device.
MEASURED_DTYPE = {"cuda": "bf16", "cpu": "fp32"}


@dataclass(frozen=True)
class ProfilePlan:
    """The arguments that define a profile; stored in the partial file so ``--resume`` rebuilds it."""

    model: str | None
    hf_config: str | None
    tp: int = 1
    ep: int = 1  # one GPU of an expert-parallel group: this device times its experts' share
    routing: str = "balanced"
    dtype: str | None = None  # None: MEASURED_DTYPE of the device's kind
    kv_dtype: str | None = None
    max_tokens: int = 8192
    max_context: int = 8192
    max_batch: int = DEFAULT_MAX_BATCH
    attention: str = "sdpa"
    device: str = "auto"
    budget_s: float | None = None
    seed: int = 0
    clock: str = "wall"  # wall | thread-cpu (CPU, one torch thread: this thread's CPU time, as validate times)
    energy: bool = False  # read NVML's power over each linear's timed phase (profile_power)

    def check(self) -> ModelSpec:
        """The model, after every argument is checked (PlanError / SpecError, one line)."""
        if bool(self.model) == bool(self.hf_config):
            raise PlanError("give one of --model NAME or --hf-config PATH")
        # one of model / hf_config is given (checked above)
        profile = load_model(self.model) if self.model else load_hf_config(Path(self.hf_config))  # pyright: ignore[reportArgumentType]
        StepModel.of(profile, self.tp, self.ep, self.dtype or "bf16", self.kv_dtype, self.routing)
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
        return self.dtype or MEASURED_DTYPE[kind]

    def step_model(self, model: ModelSpec, kind: str) -> StepModel:
        """What one GPU of the split runs, in the dtype measured on a device of ``kind``."""
        dtype = self.resolved_dtype(kind)
        return StepModel.of(model, self.tp, self.ep, dtype, self.kv_dtype, self.routing)

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
    """One measurement: ``kind`` linear | grouped | decode | prefill | chunk | other (the main attention's and the
    rest of the step), or mixer_decode | mixer_prefill (another mixer kind's), and its grid point."""

    kind: str
    name: str  # the linear's name; the kernel for attention; the mixer's (StepModel.mixer_name) for a mixer
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
        if self.kind == "mixer_decode":
            return f"decode {self.name} B={self.a}" + (f" ctx={self.b}" if self.b > 1 else "")
        if self.kind == "mixer_prefill":
            return f"prefill {self.name} T={self.a}"
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
        tokens=token_grid(plan.max_tokens),
        # Logits are computed for the last position of each sequence in a step only.
        lm_head_tokens=token_grid(max_batch),
        batches=power_grid(1, max_batch),
        contexts=power_grid(SMALLEST_CONTEXT, plan.max_context),
        prompts=power_grid(SMALLEST_CONTEXT, min(plan.max_context, plan.max_tokens)),
        chunks=power_grid(SMALLEST_CONTEXT, plan.max_tokens, CHUNK_STEP),
        prefixes=power_grid(SMALLEST_CONTEXT, plan.max_context, CHUNK_STEP),
    )


def plan_items(plan: ProfilePlan, model: ModelSpec) -> list[Item]:
    """Every measurement, in the order they are taken (cheap, small ones first within a kind): the step model's
    linears (the LM head on its logits' grid) and grouped GEMMs, then attention and the other kernels."""
    grids = grids_for(plan)
    step = plan.step_model(model, "cpu")  # names and shapes only: the same on every device
    items = []
    for linear in step.linears:
        grid = grids.lm_head_tokens if linear.part == "head" else grids.tokens
        items += [Item("linear", linear.name, t) for t in grid]
    for grouped in step.grouped:
        items += [Item("grouped", grouped.name, t) for t in grids.tokens]
    items += [Item("decode", plan.attention, b, c) for b in grids.batches for c in grids.contexts]
    items += [Item("prefill", plan.attention, p) for p in grids.prompts]
    items += [Item("chunk", plan.attention, c, p) for c in grids.chunks for p in grids.prefixes]
    items += mixer_items(step, grids)
    items += [Item("other", "step", t) for t in grids.tokens]
    return items


def own_mixers(step: StepModel, grids: Grids) -> list[tuple[MixerRules, int, str, tuple[int, ...]]]:
    """Each mixer kind the main attention's tables do not time (a hybrid's linear attention, Mamba-2, attention of
    its own shape), with its layer count, its name and the contexts its decode is timed at (a recurrent kind at one:
    its state is the same at any length)."""
    return [(rules, count, step.mixer_name(rules), (1,) if rules.recurrent else tuple(grids.contexts))
            for rules, count in step.mixers if not step.reads_main_tables(rules)]


def mixer_items(step: StepModel, grids: Grids) -> list[Item]:
    """Each of ``own_mixers``: decode over batches × its contexts and prefill per prompt."""
    items = []
    for _, _, name, contexts in own_mixers(step, grids):
        items += [Item("mixer_decode", name, b, c) for b in grids.batches for c in contexts]
        items += [Item("mixer_prefill", name, p) for p in grids.prompts]
    return items


def attention_shape(model: ModelSpec, tp: int) -> AttentionShape:
    """One GPU's main attention (``StepModel.main_mixer``) as the profile's attention workload runs it."""
    return AttentionShape.of(StepModel.of(model, tp).main_mixer, tp)
