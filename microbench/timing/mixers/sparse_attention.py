"""DeepSeek sparse attention (DSA: DeepSeek-V3.2, GLM-5) as a workload: one layer on one GPU, ``batch`` sequences each
with ``q_len`` new tokens over ``kv_len`` cached ones (the last ``q_len`` of them the new tokens).  The sweep's
``sparse_attention`` op is its decode (``q_len`` 1); the measured profile times its prefill and chunks too.

A launch runs what a DSA layer runs after its projections:

1. the lightning indexer scores every cached key each query may see: ``Σ_h w_h · ReLU(q_h · k)`` over the indexer's
   heads, each cached key stored in fp8 (e4m3) with one fp32 scale per token, as vLLM's indexer cache keeps it
   (``roofline.core.counting.indexer_key_bytes``);
2. a top-k keeps the ``topk`` best keys per query;
3. the absorbed latent attention (FlashMLA's form) over those keys only: every head's query of latent + rope values
   against the kept latents, softmax, then the weights times their latent part.

The torch reference runs here on every device (the point's ``kernel`` says so): the indexer's keys dequantized to the
activations' dtype and multiplied, ``torch.topk``, and for a decode the kept latents gathered and attended.  A
prefill or chunk attends through a mask of the kept keys over the whole cache instead (a gather would copy
``topk`` latents per query), its queries taken in blocks whose scores fit ``SCORES_BUDGET_BYTES``.  FlashMLA's sparse
decode kernel, which reads an fp8 latent cache of its own layout, is not timed here.

Correctness, once per point: for the first sequences' (or the first queries') keys kept by the launch's own selection,
the outputs against float64 attention over the same keys, and the selection against float64 scores: every kept key
scores within the dtype's tolerance of the k-th best.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from roofline.core.counting import MixerShape

KERNEL = ("torch reference: fp8 indexer keys dequantized and scored, torch.topk, absorbed MLA over the kept latents "
          "(gathered in decode, masked in prefill)")
# The most bytes of scores a prefill or chunk holds at once (the MLA path's budget, microbench.serving.profile_kernels)
SCORES_BUDGET_BYTES = 1 << 30
CHECK_SEQUENCES = 2
CHECK_QUERIES = 4


@dataclass(frozen=True)
class SparseLayer:
    """One DSA layer on one GPU: ``heads`` query heads over a ``latent`` + ``rope`` cache, an indexer of
    ``index_heads`` × ``index_dim``, ``topk`` keys kept per query."""

    heads: int
    latent: int
    rope: int
    index_heads: int
    index_dim: int
    topk: int

    @classmethod
    def of(cls, latent: int, mixer: MixerShape) -> SparseLayer:
        return cls(mixer.heads, latent, mixer.rope or 0, mixer.index_heads or 1, mixer.index_dim or 1,
                   mixer.topk or 1)

    @property
    def width(self) -> int:
        return self.latent + self.rope


class SparseAttentionWorkload:
    """Rotation copies of one DSA layer's operands; ``launch(i)`` runs the indexer, the top-k and the attention."""

    def __init__(self, torch, layer: SparseLayer, dtype: str, batch: int, q_len: int, kv_len: int, device: str,
                 copies: int, seed: int, random_tensor, seed_for, scores_budget_bytes: int = SCORES_BUDGET_BYTES):
        self.torch, self.layer, self.dtype, self.copies = torch, layer, dtype, copies
        self.batch, self.q_len, self.kv_len = batch, q_len, kv_len
        self.kept_keys = min(layer.topk, kv_len)
        label = f"dsa/{batch}/{q_len}/{kv_len}"

        def rand(name, shape, i, kind=dtype):
            return random_tensor(torch, shape, kind, device, seed_for(seed, name, label, i))

        fp8 = torch.float8_e4m3fn
        self.index_q = [rand("index_q", (batch, q_len * layer.index_heads, layer.index_dim), i) for i in range(copies)]
        self.index_w = [rand("index_w", (batch, q_len, layer.index_heads), i) for i in range(copies)]
        self.index_k = [rand("index_k", (batch, kv_len, layer.index_dim), i, "fp32").to(fp8) for i in range(copies)]
        self.index_scale = [rand("index_scale", (batch, kv_len), i, "fp32").abs() + 0.5 for i in range(copies)]
        self.q = [rand("q", (batch, q_len * layer.heads, layer.width), i) for i in range(copies)]
        self.cache = [rand("cache", (batch, kv_len, layer.width), i) for i in range(copies)]
        self.scale = 1.0 / math.sqrt(layer.width)
        per_query = batch * layer.heads * kv_len * 4
        self.block = max(1, min(q_len, scores_budget_bytes // per_query))
        self.out: list = [None] * copies
        self.kernel = KERNEL

    def scores(self, i: int, start: int, end: int):
        """The indexer's scores of queries ``start``..``end`` over every cached key, -inf where causality hides a
        key: [batch, queries, kv_len] fp32."""
        torch, layer = self.torch, self.layer
        rows = end - start
        q = self.index_q[i][:, start * layer.index_heads: end * layer.index_heads]
        keys = self.index_k[i].to(q.dtype)
        dots = torch.relu(torch.bmm(q, keys.transpose(1, 2))).view(self.batch, rows, layer.index_heads, self.kv_len)
        weights = self.index_w[i][:, start:end].float()
        scores = torch.einsum("bqhk,bqh->bqk", dots.float(), weights) * self.index_scale[i][:, None, :]
        if self.q_len > 1:
            scores = scores.masked_fill(~self.visible(start, end, scores.device), -math.inf)
        return scores

    def visible(self, start: int, end: int, device):
        """[queries, kv_len]: which keys each of queries ``start``..``end`` may see (its position and before)."""
        torch = self.torch
        positions = torch.arange(start, end, device=device)[:, None] + (self.kv_len - self.q_len)
        return torch.arange(self.kv_len, device=device)[None, :] <= positions

    def selection(self, i: int, start: int, end: int):
        """The kept keys of queries ``start``..``end``: indices [batch, queries, kept] of the top-k scores."""
        return self.scores(i, start, end).topk(self.kept_keys, dim=-1).indices

    def launch(self, i: int) -> None:
        if self.q_len == 1:
            self.out[i] = self._decode(i)
            return
        torch, layer = self.torch, self.layer
        out = torch.empty((self.batch, self.q_len * layer.heads, layer.latent), dtype=self.cache[i].dtype,
                          device=self.cache[i].device)
        for start in range(0, self.q_len, self.block):
            end = min(self.q_len, start + self.block)
            out[:, start * layer.heads: end * layer.heads] = self._masked(i, start, end)
        self.out[i] = out

    def _decode(self, i: int):
        """One query per sequence: its kept latents gathered, then attended by every head."""
        torch, layer = self.torch, self.layer
        indices = self.selection(i, 0, 1)[:, 0]  # [batch, kept]
        kept = self.cache[i].gather(1, indices[..., None].expand(-1, -1, layer.width))
        scores = torch.bmm(self.q[i], kept.transpose(1, 2)) * self.scale
        return torch.bmm(torch.softmax(scores.float(), dim=-1).to(kept.dtype), kept[..., : layer.latent])

    def _masked(self, i: int, start: int, end: int):
        """Queries ``start``..``end`` over the whole cache, every key but their kept ones masked out."""
        torch, layer = self.torch, self.layer
        rows = end - start
        indices = self.selection(i, start, end)
        keep = torch.zeros((self.batch, rows, self.kv_len), dtype=torch.bool, device=indices.device)
        keep.scatter_(-1, indices, True)
        keep &= self.visible(start, end, indices.device)
        cache = self.cache[i]
        q = self.q[i][:, start * layer.heads: end * layer.heads]
        scores = (torch.bmm(q, cache.transpose(1, 2)) * self.scale).view(self.batch, rows, layer.heads, self.kv_len)
        scores = scores.float().masked_fill(~keep[:, :, None, :], -math.inf)
        weights = torch.softmax(scores, dim=-1).to(cache.dtype).view(self.batch, rows * layer.heads, self.kv_len)
        return torch.bmm(weights, cache[..., : layer.latent])

    def check(self, seed: int) -> dict[str, Any]:
        """One launch; its first sequences' first queries against float64 attention over the keys it kept, and the
        keys it kept against float64 scores."""
        from microbench.timing.ops import TOLERANCES

        torch, layer = self.torch, self.layer
        sequences, queries = min(CHECK_SEQUENCES, self.batch), min(CHECK_QUERIES, self.q_len)
        self.out[0] = None
        self.launch(0)
        out = self.out[0]
        written = out is not None and bool(torch.isfinite(out).all().item())
        indices = self.selection(0, 0, queries)[:sequences].cpu()
        q = self.q[0][:sequences, : queries * layer.heads].double().cpu().view(sequences, queries, layer.heads, -1)
        cache = self.cache[0][:sequences].double().cpu()
        ref = torch.empty(sequences, queries, layer.heads, layer.latent, dtype=torch.float64)
        for s in range(sequences):
            for r in range(queries):
                position = self.kv_len - self.q_len + r  # a query attends its kept keys at or before it
                kept = cache[s, indices[s, r][indices[s, r] <= position]]
                weights = torch.softmax(q[s, r] @ kept.T * self.scale, dim=-1)
                ref[s, r] = weights @ kept[:, : layer.latent]
        got = ref * math.nan if out is None else out[:sequences, : queries * layer.heads].double().cpu().view_as(ref)
        norm = float(torch.linalg.vector_norm(ref))
        rel_err = float(torch.linalg.vector_norm(got - ref)) / norm if norm > 0 else math.inf
        rel_err = rel_err if math.isfinite(rel_err) else None
        tolerance = TOLERANCES[self.dtype]
        selected_well = self._selection_holds(indices, sequences, queries, tolerance)
        return {"rel_err": rel_err, "tolerance": tolerance, "outputs_written": written,
                "passed": written and selected_well and rel_err is not None and rel_err <= tolerance,
                "reference": f"float64 attention of {sequences} sequences × {queries} queries over the keys kept, "
                             "which must be a top-k of float64 indexer scores"
                             + ("" if selected_well else " (they were not)")}

    def _selection_holds(self, indices, sequences: int, queries: int, tolerance: float) -> bool:
        """Whether the kept keys are a top-k of the float64 indexer scores, within ``tolerance`` of their spread
        (scores that close may swap in the dtype the indexer ran in)."""
        torch, layer = self.torch, self.layer
        q = self.index_q[0][:sequences, : queries * layer.index_heads].double().cpu()
        keys = self.index_k[0][:sequences].to(torch.float32).double().cpu()
        dots = torch.relu(q @ keys.transpose(1, 2)).view(sequences, queries, layer.index_heads, self.kv_len)
        scores = torch.einsum("bqhk,bqh->bqk", dots, self.index_w[0][:sequences, :queries].double().cpu())
        scores = scores * self.index_scale[0][:sequences].double().cpu()[:, None, :]
        if self.q_len > 1:
            scores = scores.masked_fill(~self.visible(0, queries, "cpu"), -math.inf)
        kth = scores.topk(self.kept_keys, dim=-1).values[..., -1:]
        finite = scores.masked_fill(~torch.isfinite(scores), 0)
        spread = (finite.amax(-1, keepdim=True) - finite.amin(-1, keepdim=True)).clamp_min(1e-30)
        chosen = scores.gather(-1, indices)
        distinct = all(len(set(row.tolist())) == len(row) for row in indices.view(-1, indices.shape[-1]))
        visible_kth = torch.where(torch.isfinite(kth), kth, torch.full_like(kth, -math.inf))
        return distinct and bool((chosen >= visible_kth - tolerance * spread).all())


def bytes_per_copy(batch: int, q_len: int, kv_len: int, layer: SparseLayer, element_bytes: int) -> int:
    """One copy's operands: the latent cache, the indexer's fp8 keys and scales, the queries, the weights and the
    outputs (the dequantized keys and a decode's gathered latents are a launch's temporaries on top)."""
    cache = batch * kv_len * (layer.width * element_bytes + layer.index_dim + 4)
    queries = batch * q_len * (layer.heads * (layer.width + layer.latent) + layer.index_heads * (layer.index_dim + 1))
    return cache + queries * element_bytes
