"""A step profile from a reference database's kernel times (``gpubench profile --reference``): the GPUs this
machine does not hold, from measurements NVIDIA made on them with a serving engine (``roofline.reference``).

Same document as any profile, ``source: reference``, each table naming its source.  The step model
(``roofline.step``) says what one step launches; the database times it:

- each linear and the LM head: the engine's GEMM table of the dtype each is stored in, at every token count of the
  grid (measured, interpolated between measured shapes, or a matrix wider than any measured as measured widths side
  by side; the table says how many of each);
- decode attention (batch × context) and a whole prompt's attention: the engine's generation and context attention
  tables of one GPU's heads (a decode batch larger than any measured at a context: extrapolated linearly in the
  batch, and counted); chunks over a cached prefix have no table (the database times no prefix): the simulator takes
  the whole prompt's time less the prefix's (``chunk_attention`` null);
- a mixture of experts' routed experts: the engine's fused MoE layer for the model's shape, split, dtype and
  routing, shared between the two grouped tables in proportion to their roofline times;
- the all-reduces (TP > 1): the engine's own all-reduce over the profile's GPUs, else NCCL's;
- the all-to-alls (EP > 1): NCCL's over the profile's EP GPUs (a message past the largest measured: that row's time
  plus the spec sheet's link time for the rest, and counted).

What the database lacks (a shape below or past its tables, MLA attention, a dtype it does not time, a routing it
does not run, the elementwise kernels, an all-to-all over more GPUs than it timed) is timed on the SKU's analytic basis
(``roofline.decode.ceilings``: per-matrix efficiencies from the same database where they apply) or its spec sheet's
interconnect, and that table's source says so and why: never extrapolated without a word.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from roofline.core.counting import TP_ALL_REDUCES_PER_LAYER, all_reduce_bytes, all_to_all_bytes
from roofline.core.options import check_dtypes
from roofline.decode.ceilings import AnalyticBasis, sku_basis, sku_roof, step_dtypes
from roofline.reference.attention import AttentionTable
from roofline.reference.comm import AllReduceTable, AllToAllTable
from roofline.reference.database import Database, ReferenceDataError, open_database
from roofline.reference.efficiency import slower_than_bf16
from roofline.reference.gemm import GemmTable
from roofline.serving.profile_doc import CommTable, GroupedTable, LinearTable, StepProfile, Table1D, Table2D
from roofline.serving.profiles.analytic import (
    comm_tables,
    grouped_grid,
    mixer_tables,
    other_table,
    other_words,
    sku_power,
)
from roofline.specs.gpus import GpuSpec, SpecError
from roofline.specs.models import ModelSpec
from roofline.step.batch import Batch
from roofline.step.grids import DECODE_BATCHES, DECODE_CONTEXTS, token_grid
from roofline.step.launches import Launch, Linear, StepModel
from roofline.step.memory import kv_bytes_per_token, memory_extras, weight_bytes


class Tables:
    """The database's tables one profile reads, each read once, and the fallback for what they lack."""

    def __init__(self, db: Database, gpu: GpuSpec, engine: str, step: StepModel, fallback: AnalyticBasis):
        self.db, self.gpu, self.engine, self.step, self.fallback = db, gpu, engine, step, fallback
        self.gemms: dict[str, GemmTable | ReferenceDataError] = {}

    def gemm(self, dtype: str) -> GemmTable:
        if dtype not in self.gemms:
            try:
                table = GemmTable.read(self.db, self.gpu, self.engine, dtype)
                ratio = slower_than_bf16(table, self.gemm("bf16")) if dtype != "bf16" else 0.0
                if ratio > 1.0:  # fewer bytes, slower: that kernel, not the format (the basis sets it aside too)
                    raise ReferenceDataError(
                        f"its {dtype} GEMMs run a median {ratio:.1f}x slower than its bf16 ones on the same shapes, "
                        "which describes that kernel, not the format: set aside")
                self.gemms[dtype] = table
            except ReferenceDataError as exc:
                self.gemms[dtype] = exc
        found = self.gemms[dtype]
        if isinstance(found, ReferenceDataError):
            raise found
        return found

    def lacks(self, what: str, why: Exception) -> str:
        """The source of a table the database could not time."""
        return f"not in {self.db.label} ({why}): {what} on {self.fallback.basis}"


def _linear_table(tables: Tables, linear: Linear, tokens: tuple[int, ...]) -> LinearTable:
    """One linear per token count: the GEMM table's time where it holds the shape (measured, interpolated, split),
    the analytic basis's (the same table's efficiency, carried) for a token count outside it, each counted."""
    step, layers = tables.step, tables.step.model.layers
    per = None if linear.layers == layers or linear.part == "head" else linear.layers
    try:
        table = tables.gemm(linear.dtype)
    except ReferenceDataError as exc:
        times = tuple(tables.fallback.time_s(step.linear_launch(linear, t)) for t in tokens)
        return LinearTable(linear.name, linear.n, linear.k, 1, tokens, times, per,
                           tables.lacks(f"{linear.dtype} {linear.n}x{linear.k}", exc))
    times, hows = [], []
    for t in tokens:
        try:
            look = table.lookup(t, linear.n, linear.k)
            times.append(look.time_s)
            hows.append(look.how)
        except ReferenceDataError:  # outside the table (past its largest m): the basis's efficiency there
            times.append(tables.fallback.time_s(step.linear_launch(linear, t)))
            hows.append("on the analytic basis (outside the table)")
    if all(how.startswith("on the") for how in hows):
        return LinearTable(linear.name, linear.n, linear.k, 1, tokens, tuple(times), per, tables.lacks(
            f"{linear.dtype} {linear.n}x{linear.k}", ReferenceDataError("every token count is outside its table")))
    counts = {how: hows.count(how) for how in dict.fromkeys(hows)}
    said = ", ".join(f"{count} {how}" for how, count in counts.items())
    return LinearTable(linear.name, linear.n, linear.k, 1, tokens, tuple(times), per,
                       f"{table.source.describe()}; {said} of {len(tokens)} token counts")


def _grouped_tables(tables: Tables, tokens: tuple[int, ...]) -> tuple[GroupedTable, ...]:
    """The routed experts on the grid of rows this GPU's experts are given: the fused MoE layer's time shared between
    its two grouped GEMMs by their roofline times (``roofline.reference.kernels``: the model's own table, kept under
    expert parallelism and past its largest row; else the nearest measured shape's efficiency; else the analytic
    basis), its source said."""
    step, kernels = tables.step, tables.fallback.kernels
    if not step.grouped:
        return ()
    rows = grouped_grid(step, tokens)
    table = kernels.moe if kernels is not None and kernels.moe_exact else None
    kernel = table.source.kernel if table is not None else "roofline"
    source = kernels.describe_moe() if kernels is not None else tables.lacks("the routed experts", ReferenceDataError(
        "no reference tables read"))
    if table is not None:
        source += ": the fused layer's time shared between gate_up and down in proportion to their roofline times"
        below = sum(1 for r in rows if _entering(step, r) < table.tokens[0])
        above = sum(1 for r in rows if _entering(step, r) > table.tokens[-1])
        if below or above:
            source += (f"; {below} row counts below its smallest measured ({table.tokens[0]} tokens) at that one's "
                       f"time, {above} past its largest ({table.tokens[-1]}) at that one's time per token")
    return tuple(GroupedTable(g.name, g.n, g.k, g.experts, g.topk, g.layers, kernel, rows,
                              tuple(tables.fallback.time_s(step.grouped_launch(g, r)) for r in rows), source)
                 for g in step.grouped)


def _entering(step: StepModel, rows: int) -> float:
    """Tokens entering the MoE layer when this GPU's grouped GEMMs are given ``rows`` rows."""
    par, m = step.parallelism, step.model
    return rows * par.ep / m.experts_per_token if par.ep > 1 else rows


def _attention_launch(step: StepModel, batch: Batch) -> Launch:
    """One layer of the main attention over ``batch``, to time where the database has no table of it."""
    return step.mixer_launch(step.main_mixer, 1, batch)


def _decode_attention(tables: Tables, contexts: tuple[int, ...]) -> Table2D:
    """Decode attention per batch and context: each cell as the basis times it (the database's generation table,
    GQA or an MLA module less its projections; the roofline over the floor where it has none)."""
    step, kernels = tables.step, tables.fallback.kernels
    cells = tuple(tuple(tables.fallback.time_s(_attention_launch(step, Batch.decode(b, c))) for c in contexts)
                  for b in DECODE_BATCHES)
    table = kernels.generation if kernels is not None else None
    if table is None:
        return Table2D("roofline", "batches", "contexts", DECODE_BATCHES, contexts, cells,
                       tables.lacks("decode attention", _lack(kernels, "generation")))
    beyond = sum(1 for b in DECODE_BATCHES for c in contexts if not _measured_batch(table, b, c))
    said = f"; {beyond} of {len(cells) * len(contexts)} cells past the largest batch measured at their context, " \
           "extrapolated linearly in the batch" if beyond else ""
    return Table2D(table.source.kernel, "batches", "contexts", DECODE_BATCHES, contexts, cells,
                   _attention_source(kernels, table) + said)


def _lack(kernels, kind: str) -> ReferenceDataError:
    return ReferenceDataError(kernels.lacks.get(kind, "no table") if kernels is not None else "no tables read")


def _attention_source(kernels, table: AttentionTable) -> str:
    if not kernels.mla:
        return table.source.describe()
    return (f"{table.source.describe()}: the whole module less its projections as the analytic basis times them "
            "(the step times them as GEMMs of their own), never under the fastest attention launch measured")


def _measured_batch(table: AttentionTable, batch: int, context: int) -> bool:
    """Whether ``batch`` is within the batches measured at the lengths around ``context``."""
    lengths = sorted({s for _, s in table.latency_s})
    around = [s for s in lengths if s >= context][:1] + [s for s in lengths if s <= context][-1:]
    return all(batch <= max(b for b, s in table.latency_s if s == length) for length in around)


def _prefill_attention(tables: Tables, prompts: tuple[int, ...]) -> Table1D:
    """A whole prompt's attention per prompt length, as the basis times it (the context table where it measured
    the length)."""
    step, kernels = tables.step, tables.fallback.kernels
    chunks = "; a chunk over a cached prefix: the whole prompt's time less the prefix's (the database times no prefix)"
    times = tuple(tables.fallback.time_s(_attention_launch(step, Batch(chunks=((p, 0),)))) for p in prompts)
    table = kernels.context if kernels is not None else None
    if table is None:
        return Table1D("roofline", "prompt_tokens", prompts, times,
                       tables.lacks("prefill attention", _lack(kernels, "context")) + chunks)
    lengths = sorted({length for _, length in table.latency_s})
    past = sum(1 for p in prompts if p > lengths[-1])
    said = f"; {past} prompt lengths past its longest ({lengths[-1]}) on the roofline" if past else ""
    return Table1D(table.source.kernel, "prompt_tokens", prompts, times, _attention_source(kernels, table) + said
                   + chunks)


def _all_reduce(tables: Tables, tokens: tuple[int, ...]) -> CommTable | None:
    step = tables.step
    if step.parallelism.tp <= 1:
        return None
    try:
        table = AllReduceTable.read(tables.db, tables.gpu, tables.engine, step.parallelism.tp)
        times = tuple(table.time_for(all_reduce_bytes(step.dtype, t, step.model.hidden)) for t in tokens)
    except ReferenceDataError as exc:
        reduce, _ = comm_tables(step, tables.gpu, tokens)
        assert reduce is not None  # TP > 1
        return CommTable(reduce.ranks, reduce.per_layer, False, f"not in {tables.db.label} ({exc}): {reduce.source}",
                         tokens, reduce.time_s)
    return CommTable(step.parallelism.tp, TP_ALL_REDUCES_PER_LAYER, True, table.source.describe(), tokens, times)


def _all_to_all(tables: Tables, tokens: tuple[int, ...]) -> CommTable | None:
    """NCCL's measured all-to-all over the EP GPUs per token count (each rank's tokens' hidden vectors, once per rank
    holding one of their experts: ``all_to_all_bytes``); where the database timed no all-to-all over that many GPUs,
    the spec sheet's."""
    step = tables.step
    _, exchange = comm_tables(step, tables.gpu, tokens)
    moe = step.model.moe
    if exchange is None or moe is None:
        return None
    width, ranks = moe.latent or step.model.hidden, step.parallelism.ep
    sizes = [all_to_all_bytes(step.dtype, t, width, moe.topk, moe.experts, ranks) for t in tokens]
    try:
        table = AllToAllTable.read(tables.db, tables.gpu, exchange.ranks)
    except ReferenceDataError as exc:
        return CommTable(exchange.ranks, exchange.per_layer, False, f"not in {tables.db.label} ({exc}): "
                         f"{exchange.source}", tokens, exchange.time_s)
    link = tables.gpu.interconnect
    past = sum(not table.measures(b) for b in sizes)
    beyond = (f"; {past} of {len(tokens)} token counts past its largest message ({table.sizes_bytes[-1]:,} bytes): "
              f"that row's time plus {tables.gpu.sku}'s link time for the rest") if past else ""
    return CommTable(exchange.ranks, exchange.per_layer, True, table.source.describe() + beyond, tokens,
                     tuple(table.time_for(b, link) for b in sizes))


def reference_profile(model: ModelSpec, *, tp: int, dtype: str, kv_dtype: str, max_tokens: int, max_context: int,
                      gpu: GpuSpec, engine: str = "vllm", ep: int = 1, routing: str = "balanced",
                      db: Database | None = None, tool: dict[str, Any] | None = None,
                      host: dict[str, Any] | None = None, argv: tuple[str, ...] = ()) -> StepProfile:
    """The step profile of ``model`` on ``gpu`` from the reference database's kernel times for ``engine``."""
    step = StepModel.of(model, tp, ep, dtype, kv_dtype, routing)
    if max_tokens < 2 or max_context < 2:
        raise SpecError("--max-tokens and --max-context must be at least 2")
    check_dtypes(dtype, kv_dtype)
    db = db or open_database()
    system = db.system(gpu)  # refused in one line before anything is read
    fallback = sku_basis(gpu, dtype, step_dtypes(step), efficiency="auto", engine=engine, step=step)
    tables = Tables(db, gpu, engine, step, fallback)
    tokens = token_grid(max_tokens)
    contexts = tuple(sorted({c for c in DECODE_CONTEXTS if c < max_context} | {max_context}))
    every = [_linear_table(tables, linear, tokens) for linear in step.linears]
    bandwidth = fallback.roof.bandwidth_bytes_per_s or gpu.achievable.bandwidth_bytes_per_s
    floor_s, fused, other_basis = other_words(step, bandwidth, fallback.kernels)
    other = other_table(step, bandwidth, tokens, floor_s, fused)
    basis = (f"{db.label} on {system} ({gpu.sku}), {engine}'s kernels, measured by NVIDIA; each table "
             "names its source")
    return StepProfile(
        source="reference", basis=basis, model=model.to_record(), tp=tp, dtype=dtype, kv_dtype=step.cache_dtype,
        lm_head_dtype=step.stored_dtype("head"),
        memory={"device_bytes": int(gpu.reported_bytes), "weight_bytes": weight_bytes(step),
                "kv_bytes_per_token": kv_bytes_per_token(step),
                **memory_extras(step)},
        linears=tuple(every[:-1]), lm_head=every[-1], decode_attention=_decode_attention(tables, contexts),
        prefill_attention=_prefill_attention(tables, token_grid(max(contexts))), chunk_attention=None,
        other=Table1D(other.kernel, other.axis, other.grid, other.time_s,
                      f"not in {db.label} (it times no norm, rotary embedding or activation kernel; the "
                      f"achievable bandwidth of {gpu.sku}): {other_basis}"),
        engine_overhead=None, comm=_all_reduce(tables, tokens), grouped=_grouped_tables(tables, tokens), ep=ep,
        mixers=mixer_tables(step, fallback.time_s, tokens, contexts,
                            f"not in {db.label} (it times no such layer): {fallback.basis}"),
        routing=step.routing.spelled,
        all_to_all=_all_to_all(tables, tokens),
        roof={"bandwidth_bytes_per_s": fallback.roof.bandwidth_bytes_per_s,
              "peak_flop_per_s": fallback.roof.peak_flop_per_s,
              "basis": f"what compute-bound, MBU and MFU are judged against: the {sku_roof(gpu, dtype, False)[1]}"},
        tool=tool or {}, created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        argv=argv, host=host or {}, device={"kind": "cuda", "name": gpu.name, "sku": gpu.sku,
                                             "memory_bytes": int(gpu.reported_bytes)}, power=sku_power(gpu))
