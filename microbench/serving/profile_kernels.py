"""The non-GEMM kernels of one engine step, as launchable workloads for the existing timers.

Each workload holds ``copies`` rotated sets of operands (so a launch reads its KV cache from memory, not
from a cache the previous launch warmed, exactly as the sweep's weights rotate) and ``launch(i)`` runs the
kernel on copy ``i``.  Shapes follow the engine: queries ``[batch, heads, q_len, head_dim]``, keys and values
``[batch, kv_heads, kv_len, head_dim]``.  SDPA is called as transformers calls it: without a mask, GQA is passed
to SDPA (``enable_gqa``); with one (a chunk over a cached prefix), K and V are first repeated to every query head,
as transformers' ``repeat_kv`` does, since on CUDA a mask rules out the flash kernel and GQA the memory-efficient
one, and SDPA given both falls back to its math path, which the engine never runs.  The ``bmm`` path groups the
query heads of one KV head into one batched GEMV, as the sweep's ``bmm`` op does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from microbench.timing.ops import random_tensor, seed_for, torch_dtype
from roofline.core.counting import DTYPE_SIZES
from roofline.core.errors import BadInputError
from roofline.step.launches import Elementwise

ATTENTION_KERNELS = ("sdpa", "bmm")
ROPE_THETA = 10000.0
# The most bytes of scores the MLA path holds at once.  Absorbed MLA multiplies every head's queries by the whole
# latent cache, so its scores are [batch, heads × queries, keys]: a prefill of 8,192 tokens over 128 heads is 17 GB
# in bf16, with the masked copy and softmax's output of the same size beside it, in the eager pool and again in a
# CUDA graph's.  Its queries are taken in chunks whose scores fit this; 1 GiB still gives each chunk's two GEMMs
# tens of thousands of rows (512 query positions of 128 heads at 8,192 keys), as large as the whole's run at.
MLA_SCORES_BUDGET_BYTES = 1 << 30


def query_chunk(batch: int, heads: int, q_len: int, kv_len: int, element_bytes: int, budget_bytes: int) -> int:
    """Query positions the MLA path takes at once: all of them if their scores fit ``budget_bytes``, else as many as
    do (at least one)."""
    per_position = batch * heads * kv_len * element_bytes
    return max(1, min(q_len, budget_bytes // per_position))


@dataclass(frozen=True)
class AttentionShape:
    """One layer's attention on one GPU: query heads, KV heads and head size after tensor parallelism; for MLA
    (``latent`` set) the latent and rope widths of its one cached vector per token."""

    heads: int
    kv_heads: int
    head_dim: int
    latent: int | None = None
    rope: int | None = None

    @classmethod
    def of(cls, rules, tp: int) -> AttentionShape:
        """An attention-like mixer kind's shape on one GPU (``roofline.step.kinds``: its heads per GPU; MLA: its
        latent and rope widths)."""
        from roofline.specs.layers import LatentAttention

        spec = rules.spec
        if isinstance(spec, LatentAttention):
            return cls(spec.heads // tp, 1, spec.head_dim, latent=spec.kv_lora_rank, rope=spec.qk_rope_head_dim)
        return cls(spec.heads // tp, rules.kv_heads_per_gpu(tp), spec.head_dim)

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    @property
    def mla(self) -> bool:
        return self.latent is not None

    @property
    def cached_values(self) -> int:
        """Values one token keeps in the cache of one layer on this GPU."""
        return self.latent + (self.rope or 0) if self.latent is not None else 2 * self.kv_heads * self.head_dim


def kv_bytes(shape: AttentionShape, batch: int, kv_len: int, dtype: str) -> int:
    """Bytes of the cache (K and V, or MLA's latents) that one launch reads."""
    return batch * kv_len * shape.cached_values * DTYPE_SIZES[dtype][0]


class AttentionWorkload:
    """``batch`` sequences, each with ``q_len`` new query tokens over ``kv_len`` cached keys (the last
    ``q_len`` of which are the new tokens themselves: causal within the chunk, full over the prefix)."""

    def __init__(self, torch, shape: AttentionShape, batch: int, q_len: int, kv_len: int, dtype: str,
                 kernel: str, device: str, copies: int, seed: int, scores_budget_bytes: int = MLA_SCORES_BUDGET_BYTES):
        if kernel not in ATTENTION_KERNELS:
            raise BadInputError(f"unknown attention kernel {kernel!r}; choose from {', '.join(ATTENTION_KERNELS)}")
        self.torch, self.shape, self.kernel, self.copies = torch, shape, kernel, copies
        self.batch, self.q_len, self.kv_len = batch, q_len, kv_len
        self.scale = 1.0 / math.sqrt(shape.head_dim)
        h, kvh, d = shape.heads, shape.kv_heads, shape.head_dim
        label = f"attn/{batch}/{q_len}/{kv_len}"
        if shape.mla:  # absorbed MLA: queries of latent + rope values per head over one shared latent cache
            width = (shape.latent or 0) + (shape.rope or 0)
            self.scale = 1.0 / math.sqrt(shape.head_dim)
            self.q = [random_tensor(torch, (batch, h * q_len, width), dtype, device, seed_for(seed, "q", label, i))
                      for i in range(copies)]
            self.k = [random_tensor(torch, (batch, kv_len, width), dtype, device, seed_for(seed, "k", label, i))
                      for i in range(copies)]
            self.v = self.k  # V is the latent part of the same cache
            self.query_chunk = query_chunk(batch, h, q_len, kv_len, DTYPE_SIZES[dtype][0], scores_budget_bytes)
        else:
            self.q = [random_tensor(torch, (batch, h, q_len, d), dtype, device, seed_for(seed, "q", label, i))
                      for i in range(copies)]
            self.k = [random_tensor(torch, (batch, kvh, kv_len, d), dtype, device, seed_for(seed, "k", label, i))
                      for i in range(copies)]
            self.v = [random_tensor(torch, (batch, kvh, kv_len, d), dtype, device, seed_for(seed, "v", label, i))
                      for i in range(copies)]
        # A decode query sees every cached key; a whole prompt is plain causal; a chunk over a prefix sees
        # the prefix and the causal part of itself, which SDPA's is_causal (top-left aligned) cannot say.
        self.is_causal = q_len > 1 and q_len == kv_len
        self.mask = None
        if q_len > 1 and q_len != kv_len:
            rows = torch.arange(q_len, device=device).unsqueeze(1) + (kv_len - q_len)
            self.mask = torch.arange(kv_len, device=device).unsqueeze(0) <= rows
        self.out = [None] * copies

    def launch(self, i: int) -> None:
        if self.shape.mla:
            self.out[i] = self._mla(i)
        elif self.kernel == "sdpa" and self.mask is not None and self.shape.group > 1:
            self.out[i] = self.torch.nn.functional.scaled_dot_product_attention(
                self.q[i], self._repeated(self.k[i]), self._repeated(self.v[i]), attn_mask=self.mask)
        elif self.kernel == "sdpa":
            self.out[i] = self.torch.nn.functional.scaled_dot_product_attention(
                self.q[i], self.k[i], self.v[i], attn_mask=self.mask, is_causal=self.is_causal,
                enable_gqa=self.shape.group > 1)
        else:
            self.out[i] = self._bmm(i)

    def _repeated(self, kv):
        """``[batch, kv_heads, len, dim]`` → ``[batch, heads, len, dim]``, each KV head once per query head of its
        group (a copy, which the engine makes every step too)."""
        b, kvh, c, d = kv.shape
        return kv[:, :, None].expand(b, kvh, self.shape.group, c, d).reshape(b, kvh * self.shape.group, c, d)

    def _bmm(self, i: int):
        """Per (sequence, KV head): the group's queries times that head's K, softmax, times V."""
        torch, s = self.torch, self.shape
        b, g, q, c, d = self.batch, s.group, self.q_len, self.kv_len, s.head_dim
        query = self.q[i].reshape(b * s.kv_heads, g * q, d)
        keys = self.k[i].reshape(b * s.kv_heads, c, d)
        scores = torch.bmm(query, keys.transpose(1, 2)) * self.scale
        if self.mask is not None or self.is_causal:
            mask = self.mask if self.mask is not None else torch.ones(q, c, dtype=torch.bool,
                                                                       device=scores.device).tril()
            scores = scores.view(b * s.kv_heads, g, q, c).masked_fill(~mask, float("-inf")).view_as(scores)
        return torch.bmm(torch.softmax(scores, dim=-1), self.v[i].reshape(b * s.kv_heads, c, d))

    def _mla(self, i: int):
        """DeepSeek's absorbed decode (FlashMLA's work): every head's query against the shared latent cache over
        latent + rope values, softmax, then the weights times the cache's latent part; causal within a chunk.
        Queries whose scores would pass the budget are taken ``query_chunk`` positions at a time."""
        torch, s = self.torch, self.shape
        b, h, q = self.batch, s.heads, self.q_len
        cache = self.k[i]
        if self.query_chunk >= q:
            return self._mla_queries(self.q[i], cache, 0, q)
        queries = self.q[i].view(b, h, q, -1)
        out = torch.empty((b, h, q, s.latent or 0), device=cache.device, dtype=cache.dtype)
        for start in range(0, q, self.query_chunk):
            end = min(q, start + self.query_chunk)
            part = queries[:, :, start:end].reshape(b, h * (end - start), -1)
            out[:, :, start:end] = self._mla_queries(part, cache, start, end).view(b, h, end - start, -1)
        return out.view(b, h * q, -1)

    def _mla_queries(self, queries, cache, start: int, end: int):
        """Attention of the query positions ``start``..``end`` (``queries``: [batch, heads × positions, width], head
        major) over the whole cache, masked by those positions' rows of the launch's mask."""
        torch, s = self.torch, self.shape
        b, h, c, rows = self.batch, s.heads, self.kv_len, end - start
        scores = torch.bmm(queries, cache.transpose(1, 2)) * self.scale  # [b, h·rows, c]
        if self.mask is not None or self.is_causal:
            mask = self.mask[start:end] if self.mask is not None else \
                torch.ones(rows, c, dtype=torch.bool, device=scores.device).tril(start)  # row r sees keys ≤ start + r
            scores = scores.view(b, h, rows, c).masked_fill(~mask, float("-inf")).view_as(scores)
        return torch.bmm(torch.softmax(scores, dim=-1), cache[:, :, : s.latent])


class OtherWorkload:
    """The elementwise and reduction work of a whole step for ``tokens`` tokens (one launch = one step): per
    layer two RMSNorms, RoPE on q and k, the MLP activation, two residual adds; once, the final norm and greedy
    sampling over the vocabulary.  ``shape``: what one GPU runs it over (``roofline.step.launches.Elementwise``)."""

    def __init__(self, torch, shape: Elementwise, tokens: int, dtype: str, device: str, copies: int, seed: int,
                 sample_rows: int | None = None):
        self.torch, self.shape, self.tokens, self.copies = torch, shape, tokens, copies
        # Greedy sampling reads the logits of the last position of each sequence only.
        self.rows = min(tokens, sample_rows or tokens)
        t, s = tokens, shape
        mlp = (2 if s.gated else 1) * s.width

        def rand(name, dims, i):
            return random_tensor(torch, dims, dtype, device, seed_for(seed, name, f"other/{t}", i))

        self.x = [rand("x", (t, s.hidden), i) for i in range(copies)]
        self.q = [rand("q", (t, s.heads, s.rope_dim), i) for i in range(copies)]
        self.k = [rand("k", (t, s.kv_heads, s.rope_dim), i) for i in range(copies)]
        self.mlp = [rand("mlp", (t, mlp), i) for i in range(copies)]
        self.logits = [rand("logits", (self.rows, s.vocab), i) for i in range(copies)]
        self.norm_weight = torch.ones(s.hidden, device=device, dtype=torch_dtype(torch, dtype))
        positions = torch.arange(t, device=device, dtype=torch.float32).unsqueeze(1)
        inv = ROPE_THETA ** (-torch.arange(0, s.rope_dim, 2, device=device, dtype=torch.float32) / s.rope_dim)
        angles = torch.cat([positions * inv, positions * inv], dim=-1).unsqueeze(1)
        self.cos, self.sin = angles.cos().to(self.q[0].dtype), angles.sin().to(self.q[0].dtype)
        self.tokens_out = [None] * copies

    def launch(self, i: int) -> None:
        torch, s = self.torch, self.shape
        f = torch.nn.functional
        x = self.x[i]
        for _ in range(s.layers):
            h = f.rms_norm(x, (s.hidden,), self.norm_weight)
            self._rope(self.q[i])
            self._rope(self.k[i])
            x = x + h
            h = f.rms_norm(x, (s.hidden,), self.norm_weight)
            a = self.mlp[i]
            act = f.silu(a[:, : s.width]) * a[:, s.width:] if s.gated else f.gelu(a)
            x = x + h + act[:, :1]  # the residual; the activation's cost is paid whole above
        h = f.rms_norm(x, (s.hidden,), self.norm_weight)
        self.tokens_out[i] = torch.argmax(self.logits[i] + h[: self.rows, :1], dim=-1)

    def _rope(self, t):
        half = t.shape[-1] // 2
        rotated = self.torch.cat([-t[..., half:], t[..., :half]], dim=-1)
        return t * self.cos + rotated * self.sin
