"""One engine step's kernel launches on one GPU, for a batch composition: the step model.

``StepModel(model, parallelism, dtype, kv_dtype, routing)`` knows which matrices each layer multiplies (``linears``,
``grouped``), and ``launches(batch)`` lists what one step of ``batch`` runs on the busiest GPU: each launch's op,
shapes, dtype, count per step, and one launch's FLOP and bytes from ``roofline.core.counting``.

- Dense GEMMs (``gemm``): attention's projections (GQA: qkv and o; MLA: the q and kv low-rank projections, the
  absorbed ``kv_b`` and o), the dense layers' MLP, the MoE layers' router and shared experts, the LM head (on one
  row per sequence: logits are only computed for a sequence's last position).  Weights N×K as ``nn.Linear``
  stores them.
- Grouped GEMMs (``grouped``): each MoE layer's routed experts, gate_up and down, over the tokens the routing sends
  this GPU's experts (``roofline.step.routing``).
- Attention (``attention``, ``mla_attention``): one launch per layer, over the step's queries, keys and query-key
  pairs (``counting.attention_extent``); sliding-window layers attend over the window only (a decode's keys
  ``min(context, window)``, reckoned from the contexts' sum: exact when all contexts are past the window or all
  within it).

Quantized formats: the LM head and the router stay bf16 in every quantized format; an MXFP4 mixture of experts
(gpt-oss) quantizes its experts only, as its checkpoints do.  MLA's absorbed ``kv_b`` counts like a linear on
the queries; prefill's unabsorbed form (``kv_b`` on every cached key) is not modelled apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from roofline.core.counting import (
    BLOCK_SCALED_FORMATS,
    DTYPES,
    NO_WORK,
    WEIGHT_ONLY_FORMATS,
    Work,
    activation_dtype,
    attention_extent,
    attention_work,
    count_work,
    grouped_work,
    mla_attention_work,
    other_kernel_bytes_per_token,
)
from roofline.specs.gpus import SpecError
from roofline.specs.models import ModelSpec
from roofline.step.parallel import Parallelism, check_parallelism
from roofline.step.routing import BALANCED, Routing


@dataclass(frozen=True)
class Batch:
    """One step's composition: ``decodes`` sequences decoding ``queries`` tokens each (1; a speculative
    verification's K + 1) over caches whose lengths sum to ``context_sum`` (the new tokens included), and prefill
    ``chunks`` of (tokens, cached prefix)."""

    decodes: int = 0
    context_sum: float = 0
    chunks: tuple[tuple[int, int], ...] = ()
    queries: int = 1

    @property
    def tokens(self) -> int:
        return self.decodes * self.queries + sum(c for c, _ in self.chunks)

    @property
    def logits(self) -> int:
        """Rows of the LM head: one per decoded token (a verification checks each draft) and per chunk (its last
        position)."""
        return self.decodes * self.queries + len(self.chunks)

    @classmethod
    def decode(cls, batch: int, context: int, queries: int = 1) -> Batch:
        return cls(batch, batch * context, (), queries)


@dataclass(frozen=True)
class Linear:
    """One matrix of the step on one GPU, in ``layers`` layers (1: once per step, the LM head)."""

    name: str
    n: int
    k: int
    dtype: str
    layers: int
    part: str  # attention | mlp | shared | router | head


@dataclass(frozen=True)
class Grouped:
    """A routed-experts GEMM of one MoE layer on one GPU: ``experts`` N×K matrices (this GPU's), top-``topk``."""

    name: str
    n: int
    k: int
    dtype: str
    layers: int
    experts: int
    topk: int


@dataclass(frozen=True)
class Launch:
    """One kind of kernel launch in a step, ``count`` times; ``work`` is ONE launch's.  ``tokens``: a GEMM's rows
    (the tokens a grouped GEMM is given, before routing); attention's queries.  ``n``, ``k``: the weight's (one
    expert's); zero for attention."""

    name: str
    op: str
    dtype: str
    tokens: int
    n: int
    k: int
    count: float
    work: Work
    experts: int = 1
    topk: int = 1
    touched: float = 1.0
    part: str = ""

    @property
    def total(self) -> Work:
        return self.work.times(self.count)

    @property
    def key(self) -> tuple:
        """What a sweep point of this launch is keyed by (op, dtype, batch, n, k[, experts, topk])."""
        base = ("gemm" if self.op == "gemm" else self.op, self.dtype, self.tokens, self.n, self.k)
        return base + ((self.experts, self.topk) if self.op == "grouped" else ())


@dataclass(frozen=True)
class Elementwise:
    """What a step's norms, residual adds, rotary embeddings and MLP activation run over on one GPU, per token."""

    hidden: int
    heads: int
    kv_heads: int
    rope_dim: int
    width: int  # the MLP activation's width (one half of a gated MLP's gate_up)
    gated: bool
    layers: int
    vocab: int  # this GPU's share of the LM head's logits (greedy sampling reads them)


@dataclass(frozen=True)
class StepWork:
    """One step's FLOP and bytes, by part (``linear``: dense and grouped GEMMs, the LM head included)."""

    linear: Work
    attention: Work

    @property
    def total(self) -> Work:
        return self.linear + self.attention


@dataclass(frozen=True)
class StepModel:
    model: ModelSpec
    parallelism: Parallelism = field(default_factory=Parallelism)
    dtype: str = "bf16"
    kv_dtype: str | None = None  # None: what the linears write (``counting.activation_dtype``)
    routing: Routing = BALANCED

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise SpecError(f"unknown dtype {self.dtype!r}; choose from {', '.join(DTYPES)}")
        check_parallelism(self.model, self.parallelism)

    @classmethod
    def of(cls, model: ModelSpec, tp: int = 1, ep: int = 1, dtype: str = "bf16", kv_dtype: str | None = None,
           routing: str | Routing = BALANCED) -> StepModel:
        """The step model of a command's options (``--tp``, ``--ep``, ``--dtype``, ``--kv-dtype``, ``--routing``)."""
        return cls(model, Parallelism(tp, ep), dtype, kv_dtype,
                   Routing.parse(routing) if isinstance(routing, str) else routing)

    def describe(self) -> str:
        """The split, formats and routing in words, for a document's setup line."""
        routing = f", {self.routing.spelled} routing" if self.model.is_moe else ""
        return f"{self.parallelism.describe()}, {self.dtype}, KV {self.cache_dtype}{routing}"

    @property
    def cache_dtype(self) -> str:
        return self.kv_dtype or activation_dtype(self.dtype)

    @property
    def act_dtype(self) -> str:
        return activation_dtype(self.dtype)

    def stored_dtype(self, part: str) -> str:
        """The dtype a matrix of ``part`` is stored in: the LM head and the router stay in the activations' dtype in
        any quantized format; an MXFP4 mixture of experts quantizes only its experts (gpt-oss's checkpoints)."""
        quantized = self.dtype in WEIGHT_ONLY_FORMATS or self.dtype in BLOCK_SCALED_FORMATS
        if quantized and part in ("head", "router"):
            return self.act_dtype
        if self.dtype == "mxfp4" and self.model.is_moe and part != "experts":
            return self.act_dtype
        return self.dtype

    @cached_property
    def linears(self) -> tuple[Linear, ...]:
        """Every dense matrix of the step on one GPU, the LM head last."""
        m, tp = self.model, self.parallelism.tp
        out = list(self._attention_linears())
        gated = 2 if m.gated_mlp else 1
        if m.dense_layers:
            out += [Linear("gate_up_proj" if m.gated_mlp else "up_proj", gated * m.intermediate // tp, m.hidden,
                           self.stored_dtype("mlp"), m.dense_layers, "mlp"),
                    Linear("down_proj", m.hidden, m.intermediate // tp, self.stored_dtype("mlp"), m.dense_layers,
                           "mlp")]
        if m.is_moe:
            out.append(Linear("router", m.experts, m.hidden, self.stored_dtype("router"), m.routed_layers, "router"))
            if m.shared_width:
                out += [Linear("shared_gate_up_proj", gated * m.shared_width // tp, m.hidden,
                               self.stored_dtype("shared"), m.routed_layers, "shared"),
                        Linear("shared_down_proj", m.hidden, m.shared_width // tp, self.stored_dtype("shared"),
                               m.routed_layers, "shared")]
        out.append(Linear("lm_head", math.ceil(m.vocab / tp), m.hidden, self.stored_dtype("head"), 1, "head"))
        return tuple(out)

    def _attention_linears(self) -> list[Linear]:
        m, tp, dtype = self.model, self.parallelism.tp, self.stored_dtype("attention")
        heads, layers = m.heads // tp, m.layers
        if m.attention == "gqa":
            return [Linear("qkv_proj", (m.heads + 2 * m.kv_heads) * m.head_dim // tp, m.hidden, dtype, layers,
                           "attention"),
                    Linear("o_proj", m.hidden, heads * m.head_dim, dtype, layers, "attention")]
        latent, rope, v = m.kv_lora_rank or 0, m.qk_rope_head_dim or 0, m.v_head_dim or 0
        nope = m.head_dim - rope
        if m.q_lora_rank:  # q_a and kv_a fused, as one replicated matrix (vLLM's fused_qkv_a_proj)
            out = [Linear("qkv_a_proj", m.q_lora_rank + latent + rope, m.hidden, dtype, layers, "attention"),
                   Linear("q_b_proj", heads * m.head_dim, m.q_lora_rank, dtype, layers, "attention")]
        else:
            out = [Linear("q_proj", heads * m.head_dim, m.hidden, dtype, layers, "attention"),
                   Linear("kv_a_proj", latent + rope, m.hidden, dtype, layers, "attention")]
        return out + [Linear("kv_b_proj", heads * (nope + v), latent, dtype, layers, "attention"),
                      Linear("o_proj", m.hidden, heads * v, dtype, layers, "attention")]

    @cached_property
    def grouped(self) -> tuple[Grouped, ...]:
        """Each MoE layer's routed experts on one GPU: gate_up and down.  Without expert parallelism every expert
        (its width split over TP), each token routed to top-k of them; with it, this GPU's ``experts / ep`` whole
        experts, each of the rows dispatched to it routed to one of them (top-1)."""
        m, par = self.model, self.parallelism
        if not m.is_moe:
            return ()
        width, local = m.expert_intermediate // par.expert_tp, m.experts // par.ep
        topk = m.experts_per_token if par.ep == 1 else 1
        dtype, gated = self.stored_dtype("experts"), 2 if m.gated_mlp else 1
        return (Grouped("experts_gate_up_proj", gated * width, m.hidden, dtype, m.routed_layers, local, topk),
                Grouped("experts_down_proj", m.hidden, width, dtype, m.routed_layers, local, topk))

    def rank_tokens(self, tokens: int) -> int:
        """Tokens one GPU's attention and dense GEMMs run in a step of ``tokens`` (its data-parallel share)."""
        return self.parallelism.rank_share(tokens)

    def grouped_tokens(self, tokens: int) -> int:
        """Rows one GPU's grouped GEMM is given in a step of the group's ``tokens``: every token (routed top-k
        there) without expert parallelism; with it, the GPU's even share of the ``tokens × topk`` assignments the
        dispatch sends (each to one of its experts: the routing spreads assignments over experts, so over GPUs)."""
        if self.parallelism.ep == 1:
            return tokens
        return math.ceil(tokens * self.model.experts_per_token / self.parallelism.ep)

    def grouped_launch(self, g: Grouped, tokens: int) -> Launch:
        """The grouped GEMM of ``tokens`` tokens (as this GPU's experts are given them) under the routing."""
        topk = min(g.topk, g.experts)
        touched = self.routing.expected_touched(g.experts, topk, tokens)
        work = grouped_work(g.dtype, tokens, g.n, g.k, g.experts, topk, touched)
        return Launch(g.name, "grouped", g.dtype, tokens, g.n, g.k, g.layers, work, g.experts, topk, touched,
                      "experts")

    def linear_launch(self, linear: Linear, rows: int) -> Launch:
        """One dense GEMM of ``linear`` on ``rows`` rows (tokens, or logits for the LM head), in its layers."""
        return Launch(linear.name, "gemm", linear.dtype, rows, linear.n, linear.k, linear.layers,
                      count_work("gemm", linear.dtype, rows, linear.n, linear.k), part=linear.part)

    def linear_launches(self, tokens: int, logits: int) -> list[Launch]:
        """The step's GEMMs: the dense ones on this GPU's share of ``tokens``, the LM head on its ``logits`` rows,
        the grouped ones on what the routing sends this GPU's experts."""
        out = []
        rank_tokens, rank_logits = self.rank_tokens(tokens), self.rank_tokens(logits)
        for linear in self.linears:
            rows = rank_logits if linear.part == "head" else rank_tokens
            if rows:
                out.append(self.linear_launch(linear, rows))
        if tokens:
            out += [self.grouped_launch(g, self.grouped_tokens(tokens)) for g in self.grouped]
        return out

    def rank_batch(self, batch: Batch) -> Batch:
        """What one data-parallel attention rank runs of the group's ``batch``: the busiest rank's even share."""
        share = self.parallelism.attention_dp
        if share == 1:
            return batch
        decodes = math.ceil(batch.decodes / share)
        return Batch(decodes, batch.context_sum * decodes / batch.decodes if batch.decodes else 0,
                     batch.chunks[: math.ceil(len(batch.chunks) / share)], batch.queries)

    def attention_launches(self, batch: Batch) -> list[Launch]:
        """One launch per layer over this GPU's share of the batch; sliding-window layers apart."""
        m = self.model
        if not batch.tokens:
            return []
        rank = self.rank_batch(batch)
        out = []
        full = m.layers - m.sliding_layers
        if full:
            out.append(self._attention_launch(rank, full, None))
        if m.sliding_layers:
            out.append(self._attention_launch(rank, m.sliding_layers, m.sliding_window))
        return out

    def _attention_launch(self, batch: Batch, layers: int, window: int | None) -> Launch:
        queries, keys, pairs = attention_extent(batch.context_sum, batch.decodes, batch.chunks, window, batch.queries)
        work = self.attention_layer_work(queries, keys, pairs)
        op = "mla_attention" if self.model.attention == "mla" else "attention"
        name = "attention" if window is None else "sliding_attention"
        return Launch(name, op, self.cache_dtype, batch.tokens, 0, 0, layers, work, part="attention")

    def attention_layer_work(self, queries: float, keys: float, pairs: float) -> Work:
        """One layer's attention on one GPU (its heads) over ``queries`` queries, ``keys`` keys read and ``pairs``
        query-key pairs."""
        m, tp = self.model, self.parallelism.tp
        if m.attention == "mla":
            return mla_attention_work(self.act_dtype, self.cache_dtype, m.heads // tp, m.kv_lora_rank or 0,
                                      m.qk_rope_head_dim or 0, queries, keys, pairs)
        return attention_work(self.act_dtype, self.cache_dtype, m.heads // tp, m.kv_heads // tp, m.head_dim,
                              m.head_dim, queries, keys, pairs)

    def elementwise(self) -> Elementwise:
        """The step's elementwise work on one GPU: the MLP activation over the width an average layer runs a token
        through (a dense layer's, or top-k experts' and the shared experts' in an MoE layer), rope on this GPU's
        queries and keys (MLA: every head's rope part and the one shared rope key)."""
        m, tp = self.model, self.parallelism.tp
        routed = m.experts_per_token * m.expert_intermediate + m.shared_width
        width = math.ceil((m.dense_layers * m.intermediate + m.routed_layers * routed) / m.layers / tp)
        if m.attention == "mla":
            heads, kv_heads, rope = m.heads // tp, 1, m.qk_rope_head_dim or 0
        else:
            heads, kv_heads, rope = m.heads // tp, m.kv_heads // tp, m.head_dim
        return Elementwise(m.hidden, heads, kv_heads, rope, width, m.gated_mlp, m.layers,
                           math.ceil(m.vocab / tp))

    def other_bytes_per_token(self) -> int:
        """Bytes one of this GPU's tokens moves through the step's elementwise kernels (``counting``)."""
        e = self.elementwise()
        return other_kernel_bytes_per_token(self.dtype, e.hidden, e.heads, e.kv_heads, e.rope_dim, e.width,
                                            e.gated, e.layers)

    def launches(self, batch: Batch) -> list[Launch]:
        return self.linear_launches(batch.tokens, batch.logits) + self.attention_launches(batch)

    def work(self, batch: Batch) -> StepWork:
        linear = sum((launch.total for launch in self.linear_launches(batch.tokens, batch.logits)), NO_WORK)
        attention = sum((launch.total for launch in self.attention_launches(batch)), NO_WORK)
        return StepWork(linear, attention)
