"""MLA prefill attention takes its queries in chunks when their scores would pass ``MLA_SCORES_BUDGET_BYTES``
(microbench/serving/profile_kernels.py): the chunked result is the unchunked one, and the chunks follow the
budget, down to DeepSeek-V3's 128 heads over an 8,192-token prompt."""

from __future__ import annotations

import pytest

from microbench.serving.profile_kernels import MLA_SCORES_BUDGET_BYTES, AttentionShape, AttentionWorkload, query_chunk

torch = pytest.importorskip("torch")

# DeepSeek-V3's absorbed attention on one GPU: 128 heads, a 512-wide latent and 64 rope values per token.
DEEPSEEK = AttentionShape(heads=128, kv_heads=1, head_dim=192, latent=512, rope=64)
TINY = AttentionShape(heads=4, kv_heads=1, head_dim=48, latent=64, rope=16)


def test_a_deepseek_prefill_of_8192_tokens_is_taken_in_chunks_of_a_budgets_scores():
    whole = 128 * 8192 * 8192 * 2  # bf16 scores of every head and query over every key: 17 GB
    assert whole == 16 * MLA_SCORES_BUDGET_BYTES  # 16 GiB
    chunk = query_chunk(1, DEEPSEEK.heads, 8192, 8192, 2, MLA_SCORES_BUDGET_BYTES)
    assert chunk == 512 and -(-8192 // chunk) == 16
    assert 128 * chunk * 8192 * 2 <= MLA_SCORES_BUDGET_BYTES
    # a chunk over a cached prefix sees more keys: fewer queries at once; decode and short prompts: one chunk
    assert query_chunk(1, DEEPSEEK.heads, 2048, 32768, 2, MLA_SCORES_BUDGET_BYTES) == 128
    assert query_chunk(1, DEEPSEEK.heads, 1024, 1024, 2, MLA_SCORES_BUDGET_BYTES) == 1024
    assert query_chunk(64, DEEPSEEK.heads, 1, 32768, 2, MLA_SCORES_BUDGET_BYTES) == 1
    # never less than one position, whatever the budget
    assert query_chunk(1, DEEPSEEK.heads, 8192, 8192, 2, budget_bytes=1) == 1


@pytest.mark.parametrize("batch, q_len, kv_len, budget_positions, chunks", [
    (1, 10, 10, 3, 4),   # a whole causal prompt: chunks of 3, 3, 3 and 1 positions
    (2, 6, 15, 2, 3),    # a chunk over a cached prefix (explicit mask)
    (3, 1, 20, 1, 1),    # decode: one query position, one chunk
])
def test_chunked_mla_attention_is_the_unchunked_attention(batch, q_len, kv_len, budget_positions, chunks):
    fp32 = 4
    budget = budget_positions * batch * TINY.heads * kv_len * fp32
    chunked = AttentionWorkload(torch, TINY, batch, q_len, kv_len, "fp32", "sdpa", "cpu", 1, seed=3,
                                scores_budget_bytes=budget)
    whole = AttentionWorkload(torch, TINY, batch, q_len, kv_len, "fp32", "sdpa", "cpu", 1, seed=3)
    assert whole.query_chunk == q_len
    assert chunked.query_chunk == min(q_len, budget_positions) and -(-q_len // chunked.query_chunk) == chunks
    assert torch.equal(chunked.q[0], whole.q[0]) and torch.equal(chunked.k[0], whole.k[0])
    chunked.launch(0)
    whole.launch(0)
    assert chunked.out[0].shape == whole.out[0].shape == (batch, TINY.heads * q_len, TINY.latent)
    assert torch.allclose(chunked.out[0], whole.out[0], rtol=1e-5, atol=1e-6)
