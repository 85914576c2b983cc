"""The step-cost model: the time, FLOP and bytes of one engine step of an exact batch composition.

``CostModel.cost`` is the one step cost ``simulate`` (and through it ``validate``) uses; ``decode`` answers a
different question, a whole model's step from a sweep's per-launch times, in ``roofline.decode.step``.  Kernel
times come from the profile's tables, interpolated piecewise-linearly in the token count (why:
``docs/serving.md``); FLOP and bytes are counted from the shapes, as ``roofline.core.counting`` counts a GEMM, so
MBU/MFU and the bound never depend on the times.  A tensor-parallel profile's all-reduces (its ``comm`` table) are
their own part of the step, ``comm_s``: they move no HBM bytes the roofline counts.  ``CostModel`` holds what is
fixed per profile, so a simulation of 10,000 requests stays fast.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from roofline.core.counting import DTYPE_SIZES, io_sizes, matrix_weight_bytes
from roofline.serving.policies import Packing
from roofline.serving.profile_doc import EngineOverhead, StepProfile, Table1D, Table2D


@dataclass(frozen=True)
class StepCost:
    time_s: float
    linear_s: float
    attention_s: float
    other_s: float
    overhead_s: float
    comm_s: float  # the tensor-parallel all-reduces (0 without a comm table)
    flop: float
    bytes: float
    compute_bound: bool


def _bracket(grid: Sequence[int], x: float) -> tuple[int, float]:
    """Index i of the segment [grid[i], grid[i+1]] used for x (the end segments extend outwards), and the
    fraction of the way along it (below 0 or above 1 when extrapolating)."""
    i = min(max(bisect_right(grid, x) - 1, 0), len(grid) - 2)
    return i, (x - grid[i]) / (grid[i + 1] - grid[i])


def interp1(grid: Sequence[int], times: Sequence[float], x: float) -> float:
    """Piecewise-linear in x, linear extrapolation past the ends, never below zero."""
    if len(grid) == 1:
        return times[0]
    i, f = _bracket(grid, x)
    return max(0.0, times[i] + f * (times[i + 1] - times[i]))


def interp2(table: Table2D, row: float, col: float) -> float:
    """Bilinear over the table (extrapolating linearly in each direction), never below zero."""
    rows, cols, t = table.rows, table.cols, table.time_s
    if len(rows) == 1:
        return interp1(cols, t[0], col)
    i, f = _bracket(rows, row)
    lo, hi = interp1(cols, t[i], col), interp1(cols, t[i + 1], col)
    return max(0.0, lo + f * (hi - lo))


class CostModel:
    """What one profile makes constant: the affine FLOP/byte counts of the linears and attention per token."""

    def __init__(self, profile: StepProfile, overhead: EngineOverhead | None = None) -> None:
        m, tp = profile.model, profile.tp
        self.profile, self.layers = profile, profile.layers
        self.overhead = overhead
        s_in, s_out = io_sizes(profile.dtype)
        kv_size = DTYPE_SIZES[profile.kv_dtype][0]
        weights = [(t.n, t.k, t.per_layer * self.layers) for t in profile.linears]
        head, head_dtype = profile.lm_head, profile.head_dtype
        # Per step of T tokens a GEMM moves W + T·(s_in·K + s_out·N) bytes, W its weight's bytes in the dtype it is
        # stored in (a weight-only format's linears, the LM head in bf16): affine in T.
        self.linear_bytes_fixed = sum(matrix_weight_bytes(profile.dtype, n, k) * c for n, k, c in weights)
        self.linear_bytes_per_token = sum((s_in * k + s_out * n) * c for n, k, c in weights)
        self.linear_flop_per_token = 2 * sum(n * k * c for n, k, c in weights)
        head_in, head_out = io_sizes(head_dtype)
        self.head_bytes_fixed = matrix_weight_bytes(head_dtype, head.n, head.k)
        self.head_bytes_per_token = head_in * head.k + head_out * head.n
        self.head_flop_per_token = 2 * head.n * head.k
        heads, kv_heads, hd = m["heads"] // tp, m["kv_heads"] // tp, m["head_dim"]
        # Attention per layer: QK^T and PV are 2 FLOP per (query head, key, dim) each; K and V read once per
        # sequence (every query head of a GQA group reads the same KV).
        self.attn_flop_per_query_key = 4 * heads * hd * self.layers
        self.kv_bytes_per_key = 2 * kv_heads * hd * kv_size * self.layers
        self.q_bytes_per_query = 2 * heads * hd * s_in * self.layers  # Q read and output written
        # Linears on one token grid sum exactly into one table (a sum of piecewise-linear functions on a shared
        # grid is piecewise-linear on it): one interpolation per step instead of one per layer kind.
        grids = {t.tokens for t in profile.linears}
        self.linear_table = None
        if len(grids) == 1:
            grid = grids.pop()
            self.linear_table = (grid, tuple(self.layers * sum(t.per_layer * t.time_s[i] for t in profile.linears)
                                             for i in range(len(grid))))
        roof = profile.roof
        self.ridge = roof["peak_flop_per_s"] / roof["bandwidth_bytes_per_s"] if roof else None

    def cost(self, decodes: int, context_sum: int, chunks: Sequence[tuple[int, int]],
             packed: Packing | None = None) -> StepCost:
        """A step of ``decodes`` sequences (their contexts summing to ``context_sum``) and prefill ``chunks``.
        ``packed``: the step runs as one padded batch (``policies.Packing``): the linears and the other kernels
        on the padded token count, attention as one masked SDPA of the padded queries against the padded keys
        (the profile's chunk table: masked, K and V repeated, as transformers' ``paged|sdpa`` runs it); the FLOP
        and bytes stay the useful work's."""
        p, layers = self.profile, self.layers
        tokens = decodes + sum(c for c, _ in chunks)
        logits = decodes + len(chunks)
        queries_keys = context_sum + sum(c * (prefix + (c + 1) / 2) for c, prefix in chunks)
        keys_read = context_sum + sum(c + prefix for c, prefix in chunks)
        run = packed.queries(tokens) if packed is not None and tokens else tokens
        linear_s = 0.0
        if run and self.linear_table is not None:
            linear_s = interp1(*self.linear_table, run)
        elif run:
            linear_s = layers * sum(t.per_layer * interp1(t.tokens, t.time_s, run) for t in p.linears)
        if logits:
            linear_s += interp1(p.lm_head.tokens, p.lm_head.time_s, logits)
        attention_s = 0.0
        if packed is not None and tokens:
            keys = max(packed.keys(keys_read), run)
            attention_s = layers * self._prefill_attention_s(run, keys - run)
        else:
            if decodes:
                attention_s = layers * interp2(p.decode_attention, decodes, context_sum / decodes)
            for chunk, prefix in chunks:
                attention_s += layers * self._prefill_attention_s(chunk, prefix)
        other_s = interp1(p.other.grid, p.other.time_s, run) if p.other and run else 0.0
        comm_s = 0.0
        if p.comm is not None and run:  # every token's hidden vector, summed per_layer times in each layer
            comm_s = layers * p.comm.per_layer * interp1(p.comm.tokens, p.comm.time_s, run)
        overhead_s = 0.0
        if self.overhead is not None:
            overhead_s = self.overhead.step_s(decodes + len(chunks), keys_read, bool(chunks))
        flop = (self.linear_flop_per_token * tokens + self.head_flop_per_token * logits
                + self.attn_flop_per_query_key * queries_keys)
        nbytes = (self.linear_bytes_fixed + self.linear_bytes_per_token * tokens
                  + (self.head_bytes_fixed + self.head_bytes_per_token * logits if logits else 0)
                  + self.kv_bytes_per_key * keys_read + self.q_bytes_per_query * tokens)
        return StepCost(time_s=linear_s + attention_s + other_s + overhead_s + comm_s, linear_s=linear_s,
                        attention_s=attention_s, other_s=other_s, overhead_s=overhead_s, comm_s=comm_s, flop=flop,
                        bytes=nbytes,
                        compute_bound=self.ridge is not None and flop >= self.ridge * nbytes)

    def _prefill_attention_s(self, chunk: int, prefix: int) -> float:
        p = self.profile
        whole: Table1D = p.prefill_attention
        if prefix == 0:
            return interp1(whole.grid, whole.time_s, chunk)
        if p.chunk_attention is not None:
            return interp2(p.chunk_attention, chunk, prefix)
        # No chunk table: the causal cost of the chunk's rows is the whole prompt's less the prefix's.
        return max(0.0, interp1(whole.grid, whole.time_s, prefix + chunk) - interp1(whole.grid, whole.time_s, prefix))

