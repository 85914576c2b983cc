"""What the reference database measured of a step beyond its dense GEMMs, for the analytic basis (``--efficiency
auto|reference``) and the reference profile: the fused MoE layer, the GQA attention and MLA module tables, and a
floor under every launch the database has no table of (attention of another shape, the elementwise kernels).

- **Experts.**  A grouped launch of the step's routed experts is the fused MoE layer's measured time
  (``roofline.reference.moe``) for as many tokens, shared between gate_up and down by their roofline times.  Where
  the database has no table of the model's own shape (same dtype and routing), the nearest measured shape's
  efficiency (the datasheet roofline of its two grouped GEMMs over its measured time) is carried at the same rows
  per touched expert, and the basis says from which shape.  Where it has no MoE table of the dtype and routing at
  all, each grouped launch is at least one GEMM launch (the bf16 table's fastest one-row time on the SKU).
- **Attention.**  The main attention of a decode batch or of one whole prompt is the engine's generation or context
  attention table (``roofline.reference.attention``); sliding-window layers read it at the window.  Any other
  attention (another shape, a prefill chunk over a cached prefix) is its roofline time; a decode batch's never under
  the fastest attention launch the database measured on the SKU (its generation table's smallest row): a measured
  floor (not under a prefill chunk: the simulator sums those chunk by chunk, one launch running them all).
- **MLA.**  The database times vLLM's whole ``DeepseekV2MLAAttention`` forward (``collector/vllm/
  collect_mla_module.py``: its projections, the latent attention kernel, the latent norms, rotary embedding and the
  cache write; ``mla_generation_module`` and ``mla_context_module`` rows, one GPU's heads) on DeepSeek-V3's
  ``config.json``.  For a model whose latent attention has DeepSeek-V3's shape (heads aside), the MLA attention
  launch of a decode batch or one whole prompt is that module's time less the module's projections as the basis
  times them (gpubench's step model times the projections as GEMMs of their own), never under the attention floor.
- **Elementwise kernels.**  Each norm, rotary embedding and activation launch costs at least the launch floor the
  database measured for one elementwise kernel on the SKU: vLLM's ``static_scaled_fp8_quant`` (the ``scale_matrix``
  rows of its quantize table, one kernel reading bf16 and writing fp8), the median of its rows moving under 64 KiB.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from roofline.core.counting import grouped_work
from roofline.core.roof import roof_time_s
from roofline.reference.attention import AttentionTable
from roofline.reference.database import KV_DTYPES, MS, Database, ReferenceDataError, TableSource, median
from roofline.reference.moe import MoeShape, MoeTable, distribution, nearest_table
from roofline.specs.gpus import GpuSpec
from roofline.specs.layers import Attention, LatentAttention
from roofline.step.launches import Launch, StepModel
from roofline.step.routing import Routing

# Rows of the elementwise table small enough that the launch, not the bytes, sets their time.
LAUNCH_BOUND_BYTES = 64 * 1024
# The MLA module tables: the model whose config the collector read (the rows' ``model`` column), its file in the
# package's model_configs, and each kind's file and length column.
MLA_MODEL = "deepseek-ai/DeepSeek-V3"
MLA_TABLES = {"generation": ("mla_generation_module_perf.parquet", "step"),
              "context": ("mla_context_module_perf.parquet", "isl")}
MLA_GEMMS = {"bf16": "bfloat16", "fp8-block": "fp8_block"}


@dataclass(frozen=True)
class Floor:
    """A per-launch floor in seconds and what measured it."""

    time_s: float
    source: str


@lru_cache(maxsize=32)
def elementwise_floor(db: Database, system: str, engine: str) -> Floor:
    """The database's one-kernel elementwise launch floor on ``system`` (module docstring)."""
    path, version = db.table(system, "quantize", engine, "scale_matrix_perf.parquet")
    rows = db.read(path, ["m", "k", "latency", "kernel_source", "device"], {"op_name": "scale_matrix"})
    # bf16 read, fp8 written: 3 bytes an element.
    small = [float(t) * MS for m, k, t in zip(rows["m"], rows["k"], rows["latency"], strict=True)
             if t and 3 * m * k < LAUNCH_BOUND_BYTES]
    if not small:
        raise ReferenceDataError(f"{db.label} has no elementwise kernel under {LAUNCH_BOUND_BYTES} bytes on {system}")
    kernel = rows["kernel_source"][0]
    return Floor(median(small), f"{db.label}: {engine} {version}'s {kernel} kernel on {rows['device'][0]}, the median "
                                f"of its {len(small)} rows moving under 64 KiB (quantize/scale_matrix), measured by "
                                "NVIDIA (aiconfigurator's collector)")


@lru_cache(maxsize=32)
def attention_floor(db: Database, system: str, engine: str) -> Floor:
    """The fastest attention launch the database measured on ``system``: its generation table's smallest row."""
    path, version = db.table(system, "attention", engine, "generation_attention_perf.parquet")
    rows = db.read(path, ["latency", "kernel_source", "device"])
    times = [float(t) * MS for t in rows["latency"] if t and t > 0]
    if not times:
        raise ReferenceDataError(f"{db.label} has no generation attention rows on {system}")
    return Floor(min(times), f"{db.label}: the fastest of {len(times)} generation-attention launches {engine} "
                             f"{version} ran on {rows['device'][0]}, measured by NVIDIA (aiconfigurator's collector)")


def _moe_roof_s(gpu: GpuSpec, shape: MoeShape, dtype: str, tokens: float, routing: Routing) -> float:
    """The datasheet roofline of one fused layer's two grouped GEMMs for ``tokens`` tokens entering it (one GPU)."""
    local, width = shape.experts // shape.ep, shape.intermediate // shape.tp
    rows = max(tokens * shape.topk / shape.ep, 1.0) if shape.ep > 1 else max(tokens, 1.0)
    topk = 1 if shape.ep > 1 else min(shape.topk, local)
    touched = routing.expected_touched(local, topk, rows)
    peak, whole = gpu.peak_for(dtype), min(touched, local, rows * topk)
    # A fractional token count (tokens × top-k / EP rows): the counts are affine in it.
    return sum(float(roof_time_s(w.flop, w.bytes, gpu.bandwidth_bytes_per_s, peak)) for w in (
        grouped_work(dtype, rows, 2 * width, shape.hidden, local, topk, whole),  # pyright: ignore[reportArgumentType]
        grouped_work(dtype, rows, shape.hidden, width, local, topk, whole)))  # pyright: ignore[reportArgumentType]


@lru_cache(maxsize=4)
def _mla_reference_shape(db: Database) -> LatentAttention | None:
    """DeepSeek-V3's latent attention as the config the collector read describes it (None: not shipped)."""
    from roofline.specs.hf_config import load_hf_config

    path = db.root.parent / "model_configs" / f"{MLA_MODEL.replace('/', '--')}_config.json"
    if not path.is_file():
        return None
    spec = load_hf_config(path).mixer_layers[0][0]
    return spec if isinstance(spec, LatentAttention) else None


def mla_module_table(db: Database, gpu: GpuSpec, engine: str, kind: str, spec: LatentAttention, heads: int,
                     gemm_dtype: str, kv_dtype: str) -> AttentionTable:
    """The database's MLA module table of ``kind`` (generation, context) for one GPU's ``heads``: seconds by
    (batch, cached tokens or prompt length); refused when the model's latent attention is not DeepSeek-V3's."""
    reference = _mla_reference_shape(db)
    if reference is None or replace_heads(reference, spec.heads) != spec:
        raise ReferenceDataError(f"{db.label} times the MLA module of {MLA_MODEL} only, not {spec.label}")
    gemm, kv = MLA_GEMMS.get(gemm_dtype), KV_DTYPES.get(kv_dtype)
    if gemm is None or kv is None:
        raise ReferenceDataError(f"{db.label} times the MLA module with {', '.join(MLA_GEMMS)} projections and "
                                 f"{', '.join(KV_DTYPES)} KV, not {gemm_dtype} with {kv_dtype} KV")
    system = db.system(gpu)
    filename, length = MLA_TABLES[kind]
    path, version = db.table(system, "mla", engine, filename)
    rows = db.read(path, ["batch_size", length, "latency", "kernel_source", "device"],
                   {"num_heads": heads, "gemm_type": gemm, "kv_cache_dtype": kv, "tp_size": 1, "model": MLA_MODEL})
    if not rows["batch_size"]:
        raise ReferenceDataError(f"{db.label} has no {kind} MLA module of {heads} heads ({gemm_dtype} projections, "
                                 f"{kv_dtype} KV) for {engine} {version} on {system}")
    # Every kernel the engine ran: vLLM picks the MLA backend by the batch (a short "prompt" it classes as a decode
    # runs the decode backend), so the engine's own choice per row is the module's time, not one kernel's.
    kernels = " / ".join(sorted(set(rows["kernel_source"]), key=rows["kernel_source"].count, reverse=True))
    times: dict[tuple[int, int], list[float]] = {}
    for batch, size, latency in zip(rows["batch_size"], rows[length], rows["latency"], strict=True):
        if latency and latency > 0:
            times.setdefault((int(batch), int(size)), []).append(float(latency) * MS)
    source = TableSource(db.version, system, f"mla (the {kind} module: projections, attention, norms, cache write)",
                         engine, version, db.relative(path), rows["device"][0], kernels)
    return AttentionTable(kind, source, {key: median(v) for key, v in times.items()})


def replace_heads(spec: LatentAttention, heads: int) -> LatentAttention:
    from dataclasses import replace

    return replace(spec, heads=heads)


@dataclass
class StepKernels:
    """The database's tables for one step's experts, attention and elementwise kernels on one SKU (what it lacks:
    ``None`` with the reason in ``lacks``)."""

    db: Database
    gpu: GpuSpec
    engine: str
    step: StepModel
    moe: MoeTable | None = None
    moe_shape: MoeShape | None = None  # the step's own shape (the table's differs when carried from the nearest)
    generation: AttentionTable | None = None
    context: AttentionTable | None = None
    mla: bool = False  # the two attention tables are MLA modules (projections inside)
    gemm_floor: Floor | None = None
    attention_floor: Floor | None = None
    elementwise: Floor | None = None
    lacks: dict[str, str] = field(default_factory=dict)
    # Read on another SKU of the generation and carried (``roofline.reference.transfer``): a measured time of a
    # launch times this (its roofline on the target over its roofline on the SKU measured).
    rescale: Callable[[Launch], float] | None = None

    @classmethod
    def read(cls, db: Database, gpu: GpuSpec, engine: str, step: StepModel, gemm_floor: Floor | None
             ) -> StepKernels:
        system = db.system(gpu)
        out = cls(db, gpu, engine, step, gemm_floor=gemm_floor)
        m, par = step.model, step.parallelism
        if m.moe is not None and step.grouped:
            try:
                if m.moe.latent:
                    raise ReferenceDataError(f"{db.label} times MoE layers over the hidden size, not a latent "
                                             f"MoE's {m.moe.latent}")
                out.moe_shape = MoeShape(step.grouped[0].dtype, m.hidden, m.expert_intermediate, m.experts_per_token,
                                         m.experts, par.expert_tp, par.ep, distribution(step.routing))
                out.moe = nearest_table(db, gpu, engine, out.moe_shape)
            except ReferenceDataError as exc:
                out.lacks["experts"] = str(exc)
        main = step.main_mixer.spec
        if isinstance(main, Attention) and main.value_dim == main.head_dim and not main.output_gate:
            for kind in ("generation", "context"):
                try:
                    table = AttentionTable.read(db, gpu, engine, kind, main.heads // par.tp,
                                                step.main_mixer.kv_heads_per_gpu(par.tp), main.head_dim,
                                                step.cache_dtype)
                except ReferenceDataError as exc:
                    out.lacks[kind] = str(exc)
                    continue
                setattr(out, kind, table)
        elif isinstance(main, LatentAttention) and main.indexer is None:
            out.mla = True
            for kind in ("generation", "context"):
                try:
                    table = mla_module_table(db, gpu, engine, kind, main, main.heads // par.tp,
                                             step.stored_dtype("attention"), step.cache_dtype)
                except ReferenceDataError as exc:
                    out.lacks[kind] = str(exc)
                    continue
                setattr(out, kind, table)
        else:
            out.lacks["generation"] = out.lacks["context"] = f"gpubench reads the database's GQA attention and MLA " \
                                                             f"module tables, not {step.main_mixer.label}"
        for name, reader in (("attention_floor", attention_floor), ("elementwise", elementwise_floor)):
            try:
                setattr(out, name, reader(db, system, engine))
            except ReferenceDataError as exc:
                out.lacks[name] = str(exc)
        return out

    # ------------------------------------------------------------------ experts
    @property
    def moe_exact(self) -> bool:
        return self.moe is not None and self.moe.shape == self.moe_shape

    def fused_s(self, rows: float) -> float | None:
        """One fused MoE layer on this GPU when its grouped GEMMs are given ``rows`` rows (None: no table)."""
        if self.moe is None or self.moe_shape is None:
            return None
        shape, k = self.moe_shape, self.step.model.experts_per_token
        tokens = rows * shape.ep / k if shape.ep > 1 else rows
        if self.moe_exact:
            return self.moe.time_for(tokens)
        # Another shape's efficiency at the same rows per touched expert (module docstring).
        routing, near = self.step.routing, self.moe.shape
        per_expert = _rows_per_touched(shape, tokens, routing)
        carried = _tokens_at(near, per_expert, routing)
        efficiency = min(1.0, _moe_roof_s(self.gpu, near, near.dtype, carried, routing) / self.moe.time_for(carried))
        return _moe_roof_s(self.gpu, shape, shape.dtype, tokens, routing) / efficiency

    def grouped_s(self, launch: Launch, roofline: Callable[[Launch], float]) -> float | None:
        """A grouped launch of this step's experts: its roofline share of the fused layer's time."""
        fused = self.fused_s(launch.tokens)
        if fused is None:
            return None
        own = [roofline(self.step.grouped_launch(g, launch.tokens)) for g in self.step.grouped]
        mine = roofline(launch)
        share = fused * mine / sum(own) if sum(own) > 0 else fused / len(own)
        return share * self.rescale(launch) if self.rescale is not None else share

    def describe_moe(self) -> str:
        if self.moe is None:
            return f"experts: not in {self.db.label} ({self.lacks.get('experts', '')})"
        if self.moe_exact:
            return f"experts: the fused layer from {self.moe.describe()}"
        assert self.moe_shape is not None
        return (f"experts: the efficiency of the nearest measured MoE layer, {self.moe.shape.describe()}, carried to "
                f"{self.moe_shape.describe()} at the same rows per touched expert ({self.moe.describe()})")

    # ------------------------------------------------------------------ attention
    def attention_floor_s(self, launch: Launch) -> float:
        """The floor under an attention launch the tables do not time: a decode batch's (one launch a layer for the
        whole batch); none under a prefill chunk's, whose table the simulator sums chunk by chunk although one
        launch runs them all (a floor there would be charged once per chunk)."""
        batch = launch.batch
        if self.attention_floor is None or batch is None or batch.chunks or batch.queries != 1:
            return 0.0
        return self.attention_floor.time_s

    def attention_s(self, launch: Launch, gemm_s: Callable[[Launch], float] | None = None) -> float | None:
        """The main attention (or it over a window) from the database's tables: a decode batch, or one whole prompt;
        None for anything else.  An MLA module's time less its projections as ``gemm_s`` times them."""
        batch, step = launch.batch, self.step
        if batch is None or launch.name not in ("attention", "sliding_attention"):
            return None
        window = next((rules.window for rules, _ in step.mixers if step.mixer_name(rules) == launch.name), None)
        try:  # past the measured lengths: None, the roofline over the floor
            if batch.decodes and not batch.chunks and batch.queries == 1 and self.generation is not None:
                context = batch.context_sum / batch.decodes
                whole = self.generation.time_s(batch.decodes, min(context, window or context))
            elif not batch.decodes and len(batch.chunks) == 1 and batch.chunks[0][1] == 0 \
                    and self.context is not None and window is None:
                whole = self.context.time_s(1, batch.chunks[0][0])
            else:
                return None
        except ReferenceDataError:
            return None
        if self.rescale is not None:
            whole *= self.rescale(launch)
        if not self.mla:
            return whole
        projections = sum(gemm_s(step.linear_launch(linear, batch.tokens)) for linear in step.linears
                          if linear.part == "attention") if gemm_s is not None else 0.0
        floor = self.attention_floor.time_s if self.attention_floor is not None else 0.0
        return max(floor, whole - projections)


def _rows_per_touched(shape: MoeShape, tokens: float, routing: Routing) -> float:
    local = shape.experts // shape.ep
    rows = max(tokens * shape.topk / shape.ep, 1.0) if shape.ep > 1 else max(tokens, 1.0)
    topk = 1 if shape.ep > 1 else min(shape.topk, local)
    return rows * topk / routing.expected_touched(local, topk, rows)


def _tokens_at(shape: MoeShape, per_expert: float, routing: Routing) -> float:
    """The tokens entering ``shape``'s layer at which a touched expert is given ``per_expert`` rows (bisected in
    log tokens: the rows per touched expert grow with the tokens)."""
    lo, hi = 1.0, 2.0
    while _rows_per_touched(shape, hi, routing) < per_expert and hi < 1e9:
        lo, hi = hi, hi * 2
    for _ in range(50):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if _rows_per_touched(shape, mid, routing) < per_expert else (lo, mid)
    return hi
