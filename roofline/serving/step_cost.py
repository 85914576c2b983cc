"""The step-cost model: the time, FLOP and bytes of one engine step of an exact batch composition.

``CostModel.cost`` is the one step cost ``simulate`` (and through it ``validate``) uses; ``decode`` answers a
different question, a whole model's step from a sweep's per-launch times, in ``roofline.decode.step``.  Kernel
times come from the profile's tables, interpolated piecewise-linearly in the token count (why:
``docs/serving.md``); FLOP and bytes are counted from the shapes, as ``roofline.core.counting`` counts a GEMM, so
MBU/MFU and the bound never depend on the times.  A tensor-parallel profile's all-reduces (its ``comm`` table) are
their own part of the step, ``comm_s``: they move no HBM bytes the roofline counts.  ``CostModel`` holds what is
fixed per profile, so a simulation of 10,000 requests stays fast.  What a step launches, and its FLOP and bytes,
is the profile's step model's (``roofline.step``): a mixture of experts' weight bytes grow with the experts a
step's tokens touch, not affinely in its tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from roofline.core.counting import NO_WORK, attention_extent
from roofline.core.errors import BadInputError
from roofline.core.interpolate import interp1
from roofline.serving.policies import Packing
from roofline.serving.profile_doc import EngineOverhead, StepProfile, Table1D, Table2D
from roofline.specs.gpus import SpecError
from roofline.step.batch import Batch
from roofline.step.comm import all_reduces_per_step
from roofline.step.kinds import MixerRules
from roofline.step.speculative import SpecDecode, drafter_roof_s, drafter_step, drafter_work


@dataclass(frozen=True)
class StepCost:
    time_s: float
    linear_s: float
    attention_s: float
    other_s: float
    overhead_s: float
    comm_s: float  # the tensor-parallel all-reduces (0 without a comm table)
    draft_s: float  # speculative decoding: the drafter's steps (0 without --spec-decode)
    flop: float
    bytes: float
    compute_bound: bool


def drafter_cost_basis(spec: SpecDecode) -> str:
    """What ``CostModel`` costs the drafter's steps on, in words (the simulation document's ``drafter_cost``)."""
    if spec.drafter == "mtp":
        return (f"{spec.draft} steps of an MTP head, each one layer of the profile's decode step (its layers' time "
                "over the layer count) and the profile's LM head")
    return (f"{spec.draft} decode steps of {spec.drafter}, each launch on the profile's roofline (its bandwidth and "
            "peak FLOP/s): the profile has no table of the draft model")


class CostModel:
    """What one profile makes constant: its step model (``roofline.step``), whose launches give every step's FLOP
    and bytes, and the summed linear table.  A step's work is counted by the step model once per distinct token
    count (cached: a simulation meets few), attention's from its per-layer coefficients (linear in queries, keys and
    query-key pairs), so a simulation of 10,000 requests stays fast."""

    def __init__(self, profile: StepProfile, overhead: EngineOverhead | None = None,
                 spec: SpecDecode | None = None) -> None:
        self.profile, self.layers = profile, profile.layers
        self.overhead, self.spec = overhead, spec
        self.step = profile.step_model()
        try:
            self.drafter = drafter_step(self.step, spec) if spec is not None else None
        except (BadInputError, SpecError) as exc:  # an unknown draft model, said with the option that named it
            words = str(exc).replace("--hf-config PATH", "drafter=CONFIG.json")  # how a drafter names a file
            raise BadInputError(f"--spec-decode drafter={spec.drafter if spec else ''}: {words}") from None
        if spec is not None and spec.drafter != "mtp" and not profile.roof:
            raise BadInputError(f"--spec-decode drafter={spec.drafter}: the draft model is costed on the profile's "
                                "roofline, and this profile has none")
        # Each mixer kind with the tables that time it: the profile's attention tables for the main one (and for
        # it over a sliding window, read at the window), a mixer table of its own for every other kind.
        own = {t.name: t for t in profile.mixers}
        main = _KindTables(profile.decode_attention, profile.prefill_attention, profile.chunk_attention, False)
        self.kinds: list[tuple[MixerRules, int, _KindTables]] = []
        for rules, count in self.step.mixers:
            if self.step.reads_main_tables(rules):
                self.kinds.append((rules, count, main))
            else:
                t = own[self.step.mixer_name(rules)]
                self.kinds.append((rules, count, _KindTables(t.decode, t.prefill, t.chunk, rules.recurrent)))
        self.all_reduces = all_reduces_per_step(self.step.model)
        # Linears on one token grid sum exactly into one table (a sum of piecewise-linear functions on a shared
        # grid is piecewise-linear on it): one interpolation per step instead of one per layer kind.
        grids = {t.tokens for t in profile.linears}
        self.linear_table = None
        if len(grids) == 1:
            grid = grids.pop()
            self.linear_table = (grid, tuple(sum(t.per_layer * (t.layers or self.layers) * t.time_s[i]
                                                 for t in profile.linears) for i in range(len(grid))))
        roof = profile.roof
        self.ridge = roof["peak_flop_per_s"] / roof["bandwidth_bytes_per_s"] if roof else None

    @lru_cache(maxsize=65536)  # noqa: B019 - one CostModel per simulation; its token counts are few
    def _linear_work(self, tokens: int, logits: int) -> tuple[float, float]:
        work = sum((launch.total for launch in self.step.linear_launches(tokens, logits)), NO_WORK)
        return work.flop, work.bytes

    def _attention_work(self, batch: Batch) -> tuple[float, float]:
        flop = nbytes = 0.0
        for rules, count, _ in self.kinds:
            work = self.step.mixer_layer_work(rules, batch)
            flop, nbytes = flop + count * work.flop, nbytes + count * work.bytes
        return flop, nbytes

    def cost(self, decodes: int, context_sum: int, chunks: Sequence[tuple[int, int]],
             packed: Packing | None = None) -> StepCost:
        """A step of ``decodes`` sequences (their contexts summing to ``context_sum``) and prefill ``chunks``: the
        group's step, timed on its busiest GPU (its data-parallel share; its experts' share of the tokens).
        ``packed``: the step runs as one padded batch (``policies.Packing``): the linears and the other kernels on
        the padded token count, attention as one masked SDPA of the padded queries against the padded keys (the
        profile's chunk table: masked, K and V repeated, as transformers' ``paged|sdpa`` runs it); the FLOP and
        bytes stay the useful work's."""
        p, step = self.profile, self.step
        spec = self.spec if decodes else None
        group = Batch(decodes, context_sum, tuple(chunks), spec.queries if spec else 1)
        batch = step.rank_batch(group)
        tokens, logits = step.rank_tokens(group.tokens), step.rank_tokens(group.logits)
        _, keys_read, _ = attention_extent(batch.context_sum, batch.decodes, batch.chunks)
        run = packed.queries(tokens) if packed is not None and tokens else tokens
        linear_s = self._linear_s(run, logits) + self._grouped_s(step.grouped_tokens(group.tokens))
        if packed is not None and tokens:
            prefix = max(packed.keys(keys_read), run) - run
            attention_s = sum(count * tables.chunk_s(run, prefix) for _, count, tables in self.kinds)
        else:
            attention_s = self._attention_s(batch)
        other_s = p.other.at(run) if p.other and run else 0.0
        comm_s = 0.0
        if p.comm is not None and run:  # every token's hidden vector, summed after each mixer and each MLP
            comm_s = self.all_reduces * p.comm.at(run)
        if p.all_to_all is not None and group.tokens:
            comm_s += step.model.routed_layers * p.all_to_all.per_layer * p.all_to_all.at(tokens)
        overhead_s = 0.0
        if self.overhead is not None:
            overhead_s = self.overhead.step_s(decodes + len(chunks), keys_read, bool(chunks))
        linear_flop, linear_bytes = self._linear_work(group.tokens, group.logits) if group.tokens else (0.0, 0.0)
        attention_flop, attention_bytes = self._attention_work(batch)
        flop, nbytes = linear_flop + attention_flop, linear_bytes + attention_bytes
        draft_s = 0.0
        if spec is not None and self.drafter is not None:
            # The drafter reads each sequence's context without the drafts: K steps of one token per sequence.
            plain = context_sum - decodes * (spec.queries - 1)
            draft_s = self._draft_s(decodes, plain)
            draft_flop, draft_bytes = drafter_work(self.drafter, decodes, plain, spec.draft)
            flop, nbytes = flop + draft_flop, nbytes + draft_bytes
        return StepCost(time_s=linear_s + attention_s + other_s + overhead_s + comm_s + draft_s, linear_s=linear_s,
                        attention_s=attention_s, other_s=other_s, overhead_s=overhead_s, comm_s=comm_s,
                        draft_s=draft_s, flop=flop, bytes=nbytes,
                        compute_bound=self.ridge is not None and flop >= self.ridge * nbytes)

    def _draft_s(self, decodes: int, context_sum: float) -> float:
        """The drafter's K steps of one token per sequence (``context_sum``: the contexts without the drafts).
        An MTP head is one more layer of the target with its LM head: each step the profile's plain decode step
        of ``decodes`` sequences, its layers' part (linears, attention, other kernels, all-reduces) over the
        layer count, plus the LM head whole.  A draft model is another model the profile has no table of: its
        launches on the profile's roofline (``roofline.step.speculative.drafter_roof_s``)."""
        spec, drafter = self.spec, self.drafter
        assert spec is not None and drafter is not None
        if spec.drafter != "mtp":
            roof = self.profile.roof or {}
            return drafter_roof_s(drafter, decodes, context_sum, spec.draft, roof["bandwidth_bytes_per_s"],
                                  roof.get("peak_flop_per_s"))
        p, step = self.profile, self.step
        group = Batch(decodes, context_sum)
        tokens = step.rank_tokens(decodes)
        head_s = p.lm_head.at(tokens)
        layers_s = self._linear_s(tokens, 0) + self._grouped_s(step.grouped_tokens(decodes)) + \
            self._attention_s(step.rank_batch(group))
        if p.other is not None:
            layers_s += p.other.at(tokens)
        if p.comm is not None:
            layers_s += self.all_reduces * p.comm.at(tokens)
        return spec.draft * (layers_s / self.layers + head_s)

    def _linear_s(self, tokens: int, logits: int) -> float:
        p, out = self.profile, 0.0
        if tokens and self.linear_table is not None:
            out = interp1(*self.linear_table, tokens)
        elif tokens:
            out = sum(t.per_layer * (t.layers or self.layers) * t.at(tokens)
                      for t in p.linears)
        if logits:
            out += p.lm_head.at(logits)
        return out

    def _grouped_s(self, tokens: int) -> float:
        if not tokens:
            return 0.0
        return sum(t.layers * t.at(tokens) for t in self.profile.grouped)

    def _attention_s(self, batch: Batch) -> float:
        """Each mixer kind from its tables: the main attention's as measured, over a sliding window at
        ``min(context, window)`` (a prefill chunk scaled by the share of its query-key pairs the window keeps); a
        recurrent kind's whatever the context."""
        out = 0.0
        for rules, count, tables in self.kinds:
            window = rules.window
            if batch.decodes and batch.queries > 1:
                # A verification's K + 1 queries per sequence attend over its cache and causally among themselves:
                # a prefill chunk of K + 1 tokens over a cached prefix, the chunk table's case (the decode table
                # times one query per sequence; read at B × (K + 1) rows it would read each cache K + 1 times).  At
                # the sequences' mean context, as the decode table is read.
                prefix = batch.context_sum / batch.decodes - batch.queries
                out += batch.decodes * count * tables.chunk_s(batch.queries, min(prefix, window or prefix))
            elif batch.decodes:
                mean = batch.context_sum / batch.decodes
                out += count * tables.decode_s(batch.decodes, min(mean, window or mean))
            for chunk, prefix in batch.chunks:
                whole = tables.chunk_s(chunk, prefix)
                if window is not None and not tables.recurrent:
                    _, _, pairs = attention_extent(0, 0, ((chunk, prefix),))
                    _, _, kept = attention_extent(0, 0, ((chunk, prefix),), window)
                    whole *= kept / pairs if pairs else 0.0
                out += count * whole
        return out


@dataclass(frozen=True)
class _KindTables:
    """One mixer kind's tables, read as the simulator needs them: a decode step's and a prefill chunk's time per
    layer.  A recurrent kind keeps a fixed state: its decode table has one context column and a chunk costs its
    tokens whatever its prefix."""

    decode: Table2D
    prefill: Table1D
    chunk: Table2D | None
    recurrent: bool

    def decode_s(self, decodes: float, context: float) -> float:
        return self.decode.at(decodes, self.decode.cols[0] if self.recurrent else context)

    def chunk_s(self, chunk: int, prefix: float) -> float:
        if prefix == 0 or self.recurrent:
            return self.prefill.at(chunk)
        if self.chunk is not None:
            return self.chunk.at(chunk, prefix)
        # No chunk table: the causal cost of the chunk's rows is the whole prompt's less the prefix's.
        return max(0.0, self.prefill.at(prefix + chunk) - self.prefill.at(prefix))
