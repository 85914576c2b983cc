"""The reference database's fused mixture-of-experts tables: one MoE layer's routed experts on one GPU, for a step
profile's grouped tables and for the analytic basis's grouped launches.

Convention, read in aiconfigurator's collector (``collector/vllm/collect_moe.py``): a row runs ``num_tokens`` tokens
into a MoE layer of ``num_experts`` experts of ``hidden_size`` × ``inter_size`` (the whole intermediate width:
each GPU holds ``inter_size / moe_tp_size`` of it, and ``num_experts / moe_ep_size`` of the experts, whose share of
the ``num_tokens × topk`` assignments it computes: under expert parallelism ``num_tokens`` is every token of the
expert-parallel group, and under power-law routing the collector swaps the busiest GPU's experts onto the one it
times), each token routed to ``topk`` of them by ``distribution`` (``balanced``: gpubench's balanced routing;
``power_law_ALPHA``: gpubench's ``power-law:ALPHA``, ``roofline.step.routing``), through the engine's fused kernel
(both grouped GEMMs, the activation between them and the routing's permutations: its fixed cost per layer, which
two grouped GEMMs timed by their bytes do not have); ``latency`` milliseconds.  The database times the fused layer,
gpubench's profile its two grouped GEMMs: the profile splits each measured time between them in proportion to
their own roofline times, and says so.

A table is one model shape, dtype, split and routing of one kernel (the busiest).  A token count is interpolated
linearly between the measured ones; below the smallest it takes the smallest's time (a fused layer of fewer tokens
is no faster: its fixed cost and the touched experts' weights); above the largest it keeps the largest's time per
token (the experts are compute-bound there: the last measured efficiency carried, never a straight line through
the last two rows).  An fp8 table the database timed slower than bf16 on the same shape describes its kernel, not
the format, and is set aside as the GEMM one is (``roofline.reference.efficiency``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from roofline.core.interpolate import linear
from roofline.reference.database import MS, Database, ReferenceDataError, TableSource, busiest_kernel, median
from roofline.specs.gpus import GpuSpec
from roofline.step.routing import Routing

# gpubench's dtype -> the database's name for a MoE layer's experts.
MOE_DTYPES = {"bf16": "bfloat16", "fp8": "fp8", "fp8-block": "fp8_block", "w4a16": "int4_wo",
              "mxfp4": "w4a16_mxfp4", "nvfp4": "nvfp4"}
# Formats that move fewer bytes than bf16 and so are set aside where the database timed them slower (per tensor:
# a kernel's choice, not the format's cost).
FEWER_BYTES = ("fp8", "fp8-block")


def distribution(routing: str | Routing) -> str:
    """The database's ``distribution`` for a gpubench routing: ``balanced``, ``power_law_ALPHA``; refused for the
    laws the collector never drew (uniform; zipf is gpubench's own)."""
    law = Routing.parse(routing) if isinstance(routing, str) else routing
    if law.kind == "balanced":
        return "balanced"
    if law.kind == "power-law":
        return f"power_law_{law.skew:g}"
    raise ReferenceDataError(f"--routing {law.spelled}: gpubench's own law, not one the database's collector drew "
                             "(it measured balanced and power-law:ALPHA)")


@dataclass(frozen=True, order=True)
class MoeShape:
    """What selects one fused-MoE table: the model's shape and split, the experts' dtype, the routing."""

    dtype: str
    hidden: int
    intermediate: int
    topk: int
    experts: int
    tp: int
    ep: int
    routing: str  # the database's distribution

    def describe(self) -> str:
        return (f"{self.dtype} MoE layer of {self.experts} experts of {self.hidden}x{self.intermediate}, "
                f"top-{self.topk}, TP {self.tp}, EP {self.ep}, {self.routing} routing")


@dataclass(frozen=True)
class MoeTable:
    source: TableSource
    shape: MoeShape
    tokens: tuple[int, ...]
    time_s: tuple[float, ...]
    # Set when this dtype's own table was set aside (slower than bf16's): the median ratio, said in the source.
    set_aside: float = 0.0

    @classmethod
    def read(cls, db: Database, gpu: GpuSpec, engine: str, dtype: str, hidden: int, intermediate: int, topk: int,
             experts: int, tp: int, ep: int, routing: str | Routing) -> MoeTable:
        shape = MoeShape(dtype, hidden, intermediate, topk, experts, tp, ep, distribution(routing))
        table = _read(db, db.system(gpu), engine, shape)
        if dtype in FEWER_BYTES:
            try:
                bf16 = _read(db, db.system(gpu), engine, MoeShape("bf16", *_rest(shape)))
            except ReferenceDataError:
                return table
            ratio = _slower(table, bf16)
            if ratio > 1.0:  # fewer bytes, slower: that kernel, not the format (the GEMM rule)
                return MoeTable(bf16.source, shape, bf16.tokens, bf16.time_s, ratio)
        return table

    def time_for(self, tokens: float) -> float:
        """One fused layer of ``tokens`` tokens entering it (module docstring: held below, carried above)."""
        if tokens >= self.tokens[-1]:
            return self.time_s[-1] * tokens / self.tokens[-1]
        return linear(self.tokens, self.time_s, tokens, below="hold", above="refuse",
                      what="tokens into the MoE layer")

    def describe(self) -> str:
        words = self.source.describe()
        if self.set_aside:
            words += (f" (bf16's rows: the database's {self.shape.dtype} MoE layer of this shape runs a median "
                      f"{self.set_aside:.1f}x slower than its bf16 one, which describes that kernel, not the format)")
        return words


def _rest(shape: MoeShape) -> tuple:
    return (shape.hidden, shape.intermediate, shape.topk, shape.experts, shape.tp, shape.ep, shape.routing)


def _slower(table: MoeTable, bf16: MoeTable) -> float:
    ratios = sorted(t / bf16.time_s[bf16.tokens.index(n)] for n, t in zip(table.tokens, table.time_s, strict=True)
                    if n in bf16.tokens)
    return ratios[len(ratios) // 2] if ratios else 0.0


def _rows(db: Database, system: str, engine: str, dtype: str) -> tuple[dict[str, list], str, str]:
    name = MOE_DTYPES.get(dtype)
    if name is None:
        raise ReferenceDataError(f"{db.label} times MoE layers in {', '.join(MOE_DTYPES)}, not {dtype}")
    path, version = db.table(system, "moe", engine, "moe_perf.parquet")
    rows = db.read(path, ["num_tokens", "latency", "kernel_source", "device", "hidden_size", "inter_size", "topk",
                          "num_experts", "moe_tp_size", "moe_ep_size", "distribution"], {"moe_dtype": name})
    return rows, db.relative(path), version


@lru_cache(maxsize=256)
def _read(db: Database, system: str, engine: str, shape: MoeShape) -> MoeTable:
    rows, relative, version = _rows(db, system, engine, shape.dtype)
    key = (shape.hidden, shape.intermediate, shape.topk, shape.experts, shape.tp, shape.ep, shape.routing)
    keep = [i for i in range(len(rows["num_tokens"])) if _key(rows, i) == key]
    if not keep:
        laws = sorted({rows["distribution"][i] for i in range(len(rows["num_tokens"])) if _key(rows, i)[:6] == key[:6]})
        also = f" (it has this shape under {', '.join(laws)})" if laws else ""
        raise ReferenceDataError(f"{db.label} has no {shape.describe()} for {engine} {version} on {system}{also}")
    kernel = busiest_kernel([rows["kernel_source"][i] for i in keep])
    by_tokens: dict[int, list[float]] = {}
    for i in keep:
        latency = rows["latency"][i]
        if rows["kernel_source"][i] == kernel and latency and math.isfinite(latency) and latency > 0:
            by_tokens.setdefault(int(rows["num_tokens"][i]), []).append(float(latency) * MS)
    grid = tuple(sorted(by_tokens))
    source = TableSource(db.version, system, "moe (the fused layer)", engine, version, relative,
                         rows["device"][keep[0]], kernel)
    return MoeTable(source, shape, grid, tuple(median(by_tokens[t]) for t in grid))


def _key(rows: dict[str, list], i: int) -> tuple:
    return (rows["hidden_size"][i], rows["inter_size"][i], rows["topk"][i], rows["num_experts"][i],
            rows["moe_tp_size"][i], rows["moe_ep_size"][i], rows["distribution"][i])


def measured_shapes(db: Database, gpu: GpuSpec, engine: str, dtype: str, routing: str) -> list[MoeShape]:
    """Every MoE shape the database timed in ``dtype`` under ``routing`` (the database's distribution) on ``gpu``."""
    rows, _, _ = _rows(db, db.system(gpu), engine, dtype)
    keys = {_key(rows, i) for i in range(len(rows["num_tokens"]))}
    return sorted(MoeShape(dtype, *key) for key in keys if key[6] == routing)


def nearest_table(db: Database, gpu: GpuSpec, engine: str, shape: MoeShape) -> MoeTable:
    """The measured MoE table nearest ``shape`` (its own where the database has it): same dtype and routing, the
    per-GPU expert shape closest by ratio (hidden, one GPU's intermediate width, experts on one GPU, top-k)."""
    try:
        return MoeTable.read(db, gpu, engine, shape.dtype, *_rest(shape)[:6], routing=_law(shape.routing))
    except ReferenceDataError:
        pass
    shapes = measured_shapes(db, gpu, engine, shape.dtype, shape.routing)
    if not shapes:
        raise ReferenceDataError(f"{db.label} has no {shape.dtype} MoE layer under {shape.routing} routing on "
                                 f"{db.system(gpu)}")

    def distance(other: MoeShape) -> float:
        return sum(abs(math.log(a / b)) for a, b in (
            (other.hidden, shape.hidden), (other.intermediate / other.tp, shape.intermediate / shape.tp),
            (other.experts / other.ep, shape.experts / shape.ep), (other.topk, shape.topk)))
    best = min(shapes, key=lambda other: (distance(other), _rest(other)))
    return MoeTable.read(db, gpu, engine, best.dtype, *_rest(best)[:6], routing=_law(best.routing))


def _law(name: str) -> str:
    """The database's distribution as gpubench spells the routing."""
    return "balanced" if name == "balanced" else "power-law:" + name.removeprefix("power_law_")
