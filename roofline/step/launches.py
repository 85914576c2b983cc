"""One engine step's kernel launches on one GPU, for a batch composition: the step model.

``StepModel(model, parallelism, dtype, kv_dtype, routing)`` knows which matrices each block multiplies (``linears``,
``grouped``), and ``launches(batch)`` lists what one step of ``batch`` runs on the busiest GPU: each launch's op,
shapes, dtype, count per step, and one launch's FLOP and bytes from ``roofline.core.counting``.

- Dense GEMMs (``gemm``): each mixer kind's projections (``roofline.step.kinds``: GQA's qkv and o; MLA's low-rank
  projections, the absorbed ``kv_b`` and o, and DSA's indexer; Gated DeltaNet's and Mamba-2's input and output
  projections), the dense MLPs, the MoE layers' router, shared experts and a latent MoE's projections, the LM head
  (on one row per sequence: logits are only computed for a sequence's last position).  Weights N×K as ``nn.Linear``
  stores them; equal matrices of two kinds counted once in all their blocks.
- Grouped GEMMs (``grouped``): each MoE layer's routed experts, gate_up and down, over the tokens the routing sends
  this GPU's experts (``roofline.step.routing``).
- Mixers (``attention``, ``mla_attention``, ``dsa_attention``, ``linear_attention``, ``mamba2``): one launch per
  kind, counted in the blocks that hold it, over the step's batch as the kind's rules count it (softmax attention
  over its queries, keys and query-key pairs; a sliding window over the window only; a recurrent kind over its
  states).

Quantized formats: a checkpoint's own formats per part where the model carries them (``ModelSpec.formats``); else
the LM head and the router stay bf16 in every quantized format, and an MXFP4 mixture of experts (gpt-oss) quantizes
its experts only, as its checkpoints do.  MLA's absorbed ``kv_b`` counts like a linear on the queries; prefill's
unabsorbed form (``kv_b`` on every cached key) is not modelled apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property

from roofline.core.counting import (
    BLOCK_SCALED_FORMATS,
    DTYPES,
    NO_WORK,
    WEIGHT_ONLY_FORMATS,
    Work,
    activation_dtype,
    count_work,
    elementwise_bytes_per_token,
    grouped_work,
)
from roofline.specs.gpus import SpecError
from roofline.specs.layers import DenseMlp, LatentAttention
from roofline.specs.models import ModelSpec
from roofline.step.batch import Batch
from roofline.step.kinds import MixerRules, rules_of
from roofline.step.parallel import Parallelism, check_parallelism
from roofline.step.routing import BALANCED, Routing

# A mixer kind's matrices in a checkpoint's quantization (``roofline.specs.quantization.PARTS``).
FORMAT_PART = {"attention": "attention", "mla": "attention", "linear_attention": "linear_attention",
               "mamba2": "mamba2"}


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
    # A mixer's launch: the batch composition it runs over (this GPU's share), so a timer that reads measured
    # attention tables by batch and context can find its cell; None for GEMMs.
    batch: Batch | None = field(default=None, compare=False)

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
        """The dtype a matrix of ``part`` (a format part: ``roofline.specs.quantization.PARTS``) is stored in: the
        checkpoint's own format for it where the model carries its quantization (``ModelSpec.formats``), else
        ``dtype``'s rule: the LM head and the router stay in the activations' dtype in any quantized format; an MXFP4
        mixture of experts quantizes only its experts (gpt-oss's checkpoints)."""
        if part in ("head", "router"):
            quantized = self.dtype in WEIGHT_ONLY_FORMATS or self.dtype in BLOCK_SCALED_FORMATS
            return self.act_dtype if quantized or self.model.formats else self.dtype
        if self.model.formats:
            return dict(self.model.formats).get(part, self.act_dtype)
        if self.dtype == "mxfp4" and self.model.is_moe and part != "experts":
            return self.act_dtype
        return self.dtype

    @cached_property
    def mixers(self) -> tuple[tuple[MixerRules, int], ...]:
        """Each mixer kind's rules (``roofline.step.kinds``) and the blocks that hold it."""
        return tuple((rules_of(kind), count) for kind, count in self.model.mixer_layers)

    @cached_property
    def main_mixer(self) -> MixerRules:
        """The mixer the profile's attention tables time: the first softmax attention over every cached token, else
        the first softmax attention of any window (a model with none cannot be profiled)."""
        attention = [rules for rules, _ in self.mixers if not rules.recurrent]
        if not attention:
            raise SpecError(f"{self.model.name} has no attention layer: a model of recurrent layers alone cannot be "
                            "modelled yet")
        return next((rules for rules in attention if rules.window is None), attention[0])

    def reads_main_tables(self, rules: MixerRules) -> bool:
        """Whether a mixer is the main one, or the main one over a window (its time: the main tables' read at the
        window)."""
        main = self.main_mixer.spec
        if rules.spec == main:
            return True
        return rules.window is not None and hasattr(rules.spec, "window") and replace(rules.spec, window=None) == main

    def mixer_named(self, name: str) -> MixerRules:
        """The mixer kind whose launches go by ``name`` (``mixer_name``)."""
        return next(rules for rules, _ in self.mixers if self.mixer_name(rules) == name)

    def mixer_name(self, rules: MixerRules) -> str:
        """A mixer's launch name: ``attention`` for the main one, ``sliding_attention`` for the main one over a window
        (the names decode and the profiles have always used), else its op, numbered where two kinds share it."""
        if rules.spec == self.main_mixer.spec:
            return "attention"
        if self.reads_main_tables(rules):
            return "sliding_attention"
        same_op = [r for r, _ in self.mixers if r.op == rules.op and not self.reads_main_tables(r)]
        if len(same_op) == 1:
            return rules.op
        return f"{rules.op}_{same_op.index(rules) + 1}"

    @cached_property
    def linears(self) -> tuple[Linear, ...]:
        """Every dense matrix of the step on one GPU, the LM head last: each mixer kind's and each MLP kind's, in
        the blocks that hold it; equal matrices of two kinds counted as one in all their blocks."""
        m, tp = self.model, self.parallelism.tp
        out: list[Linear] = []
        for rules, count in self.mixers:
            dtype = self.stored_dtype(FORMAT_PART[rules.spec.kind])
            out += [Linear(name, n, k, dtype, count, "attention") for name, n, k in rules.linears(m.hidden, tp)]
        for mlp, count in m.mlp_layers:
            out += self._mlp_linears(mlp, count)
        out.append(Linear("lm_head", math.ceil(m.vocab / tp), m.hidden, self.stored_dtype("head"), 1, "head"))
        return _merged_linears(out)

    def _mlp_linears(self, mlp, count: int) -> list[Linear]:
        m, tp = self.model, self.parallelism.tp
        gated = 2 if mlp.gated else 1
        if isinstance(mlp, DenseMlp):
            dtype = self.stored_dtype("mlp")
            return [Linear("gate_up_proj" if mlp.gated else "up_proj", gated * mlp.intermediate // tp, m.hidden,
                           dtype, count, "mlp"),
                    Linear("down_proj", m.hidden, mlp.intermediate // tp, dtype, count, "mlp")]
        out = [Linear("router", mlp.experts, m.hidden, self.stored_dtype("router"), count, "router")]
        if mlp.shared_width:
            dtype = self.stored_dtype("shared")
            out += [Linear("shared_gate_up_proj", gated * mlp.shared_width // tp, m.hidden, dtype, count, "shared"),
                    Linear("shared_down_proj", m.hidden, mlp.shared_width // tp, dtype, count, "shared")]
        if mlp.latent:  # Nemotron's latent MoE: into and out of the experts' width, on every GPU whole
            dtype = self.stored_dtype("shared")
            out += [Linear("moe_latent_in_proj", mlp.latent, m.hidden, dtype, count, "shared"),
                    Linear("moe_latent_out_proj", m.hidden, mlp.latent, dtype, count, "shared")]
        return out

    @cached_property
    def grouped(self) -> tuple[Grouped, ...]:
        """Each MoE layer's routed experts on one GPU: gate_up and down.  Without expert parallelism every expert
        (its width split over TP), each token routed to top-k of them; with it, this GPU's ``experts / ep`` whole
        experts, each of the rows dispatched to it routed to one of them (top-1).  A latent MoE's experts take and
        give its latent width, not the hidden size."""
        m, par, moe = self.model, self.parallelism, self.model.moe
        if moe is None:
            return ()
        width, local = moe.expert_intermediate // par.expert_tp, moe.experts // par.ep
        topk = moe.topk if par.ep == 1 else 1
        dtype, gated, hidden = self.stored_dtype("experts"), 2 if moe.gated else 1, moe.latent or m.hidden
        return (Grouped("experts_gate_up_proj", gated * width, hidden, dtype, m.routed_layers, local, topk),
                Grouped("experts_down_proj", hidden, width, dtype, m.routed_layers, local, topk))

    def rank_tokens(self, tokens: int) -> int:
        """Tokens one GPU's attention and dense GEMMs run in a step of ``tokens`` (its data-parallel share)."""
        return self.parallelism.rank_share(tokens)

    def grouped_tokens(self, tokens: int) -> int:
        """Rows one GPU's grouped GEMM is given in a step of the group's ``tokens``: every token (routed top-k
        there) without expert parallelism; with it, the GPU's even share of the ``tokens × topk`` assignments the
        dispatch sends (each to one of its experts: the routing spreads assignments over experts, so over GPUs)."""
        if self.parallelism.ep == 1 or self.model.moe is None:
            return tokens
        return math.ceil(tokens * self.model.moe.topk / self.parallelism.ep)

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
        """One launch per mixer kind, in the blocks that hold it, over this GPU's share of the batch."""
        if not batch.tokens:
            return []
        rank = self.rank_batch(batch)
        return [self.mixer_launch(rules, count, rank) for rules, count in self.mixers]

    def mixer_launch(self, rules: MixerRules, layers: int, batch: Batch) -> Launch:
        """One layer of ``rules``' kind over ``batch`` (this GPU's share), ``layers`` times a step."""
        dtype = self.act_dtype if rules.recurrent else self.cache_dtype
        return Launch(self.mixer_name(rules), rules.op, dtype, batch.tokens, 0, 0, layers,
                      self.mixer_layer_work(rules, batch), part="attention", batch=batch)

    def mixer_layer_work(self, rules: MixerRules, batch: Batch) -> Work:
        """One layer of ``rules``' kind over ``batch`` (already this GPU's share) on one GPU."""
        return rules.work(self.parallelism.tp, self.act_dtype, self.cache_dtype, batch)

    def elementwise(self) -> Elementwise:
        """The step's elementwise work on one GPU as an average block: the MLP activation over the width a block
        runs a token through on average (a dense MLP's, or top-k experts' and the shared experts'), rope on the main
        attention's queries and keys (MLA: every head's rope part and the one shared rope key)."""
        m, tp = self.model, self.parallelism.tp
        main = self.main_mixer
        if isinstance(main.spec, LatentAttention):
            heads, kv_heads, rope = main.spec.heads // tp, 1, main.spec.qk_rope_head_dim
        else:
            heads, kv_heads, rope = main.spec.heads // tp, main.kv_heads_per_gpu(tp), main.spec.head_dim
        width = math.ceil(self._activation_values() / m.layers)
        return Elementwise(m.hidden, heads, kv_heads, rope, width, m.gated_mlp, m.layers, math.ceil(m.vocab / tp))

    def _activation_values(self, routed: bool = True) -> int:
        """Values one token's MLP activations run over in all blocks on one GPU (one half of a gated gate_up);
        without ``routed`` the routed experts' are left out (a fused MoE kernel runs them inside itself)."""
        tp, total = self.parallelism.tp, 0
        for mlp, count in self.model.mlp_layers:
            if isinstance(mlp, DenseMlp):
                width = mlp.intermediate
            else:
                width = (mlp.topk * mlp.expert_intermediate if routed else 0) + mlp.shared_width
            total += count * width
        return math.ceil(total / tp)

    def other_bytes_per_token(self, routed_activation: bool = True) -> int:
        """Bytes one of this GPU's tokens moves through the step's elementwise kernels (``counting``): a norm and a
        residual add per mixer and per MLP, each mixer's rotary embedding, each MLP's activation (the routed
        experts' left out with ``routed_activation`` off: timed inside a measured fused MoE layer)."""
        m, tp = self.model, self.parallelism.tp
        sublayers = sum(c for _, c in m.mixer_layers) + sum(c for _, c in m.mlp_layers)
        rope = sum(count * rules.rope_values_per_token(tp) for rules, count in self.mixers)
        return elementwise_bytes_per_token(self.dtype, m.hidden, sublayers, rope,
                                           self._activation_values(routed_activation), m.gated_mlp)

    def elementwise_launches(self) -> int:
        """Elementwise kernel launches one step runs on a GPU, as vLLM's layers launch them: a norm per mixer and per
        MLP with the residual add fused into it (``fused_add_rms_norm``), a rotary embedding per layer that has one,
        an activation per dense MLP and per shared expert (a fused MoE kernel runs the routed experts' inside itself),
        and the final norm."""
        m, tp = self.model, self.parallelism.tp
        norms = sum(c for _, c in m.mixer_layers) + sum(c for _, c in m.mlp_layers) + 1
        rope = sum(count for rules, count in self.mixers if rules.rope_values_per_token(tp))
        activations = sum(count for mlp, count in m.mlp_layers if isinstance(mlp, DenseMlp) or mlp.shared_width)
        return norms + rope + activations

    def launches(self, batch: Batch) -> list[Launch]:
        return self.linear_launches(batch.tokens, batch.logits) + self.attention_launches(batch)

    def work(self, batch: Batch) -> StepWork:
        linear = sum((launch.total for launch in self.linear_launches(batch.tokens, batch.logits)), NO_WORK)
        attention = sum((launch.total for launch in self.attention_launches(batch)), NO_WORK)
        return StepWork(linear, attention)


def _merged_linears(linears: list[Linear]) -> tuple[Linear, ...]:
    """Equal matrices (name, shape, dtype, part) counted once in all their blocks; a name two different matrices
    share is told apart by a number (``qkv_proj``, ``qkv_proj_2``), in first-seen order."""
    merged: dict[tuple, Linear] = {}
    for linear in linears:
        key = (linear.name, linear.n, linear.k, linear.dtype, linear.part)
        if key in merged:
            merged[key] = replace(merged[key], layers=merged[key].layers + linear.layers)
        else:
            merged[key] = linear
    seen: dict[str, int] = {}
    out = []
    for linear in merged.values():
        seen[linear.name] = seen.get(linear.name, 0) + 1
        out.append(linear if seen[linear.name] == 1 else replace(linear, name=f"{linear.name}_{seen[linear.name]}"))
    return tuple(out)
