"""FLOP and byte counts for every op and format, written down once: the one place.

GEMM ``Y[B,N] = X[B,K] · W[K,N]``: ``flop = 2·B·N·K``; ``bytes`` is the minimum traffic: each input
read once, the output written once.  GEMV is B = 1.  ``bmm`` is G = B independent GEMVs (one matrix
per sequence, as decode attention reads each sequence's own KV cache), so its intensity does not grow
with the batch.  ``grouped`` is a mixture of experts' grouped GEMM: T tokens, each routed to ``topk`` of
``experts`` matrices; it reads the weights of the experts the routing touched, each token's activations once per
expert it goes to, and writes one output row per (token, expert).  Attention (GQA and DeepSeek's latent MLA),
the step's elementwise kernels and the collectives between GPUs are counted here too.

Three kinds of dtype.  A *plain* dtype (fp32, tf32, fp16, bf16, fp8) stores weights, activations and output
in one element type (fp8 writes bf16; its one per-tensor scale is no traffic).  A *weight-only* format (w8a16,
w4a16, mxfp4) stores the weights as integers or 4-bit floats with scales (and zeros), as AWQ/GPTQ checkpoints and
gpt-oss's MXFP4 experts do, and reads bf16 activations and writes bf16 output: its weight bytes are N·K·bits/8 plus
the scale and zero bytes of its layout, and its arithmetic runs on the bf16 units (``compute_dtype``).  A
*block-scaled* format (fp8-block: DeepSeek-V3's fp8 with a scale per 128×128 weight block and per 1×128 activation
group; nvfp4: Blackwell's 4-bit floats with an fp8 scale per 16 values) quantizes weights and activations and
multiplies at its own precision's peak; bytes include every scale.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np

# A sweep's ops unless asked: the matmuls.  state_update and sparse_attention, the decode kernels of the recurrent
# and sparse mixers, are counted at the end of this module.
MATMUL_OPS = ("gemv", "gemm", "bmm", "grouped")
OPS = MATMUL_OPS + ("state_update", "sparse_attention")

# Element sizes in bytes: (inputs, output).  fp8 matmuls write bf16, as torch._scaled_mm does here.
DTYPE_SIZES: dict[str, tuple[int, int]] = {
    "fp32": (4, 4),
    "tf32": (4, 4),
    "fp16": (2, 2),
    "bf16": (2, 2),
    "fp8": (1, 2),
}
PLAIN_DTYPES = tuple(DTYPE_SIZES)


@dataclass(frozen=True)
class WeightOnlyFormat:
    """Integer (or 4-bit float) weights with scales (and zeros), bf16 activations and output.

    ``group_size`` None: one scale per output channel (per row of the N×K weight); else one scale (and zero)
    per ``group_size`` consecutive weights along K of each row."""

    name: str
    bits: int
    group_size: int | None
    scale_bytes: int
    zero_bytes: int
    activation_bytes: int = 2
    output_bytes: int = 2
    compute_dtype: str = "bf16"
    element: str = "int"  # what a stored weight is: an integer, or a 4-bit float (MXFP4's e2m1)

    def groups_per_row(self, k: int) -> int:
        return 1 if self.group_size is None else math.ceil(k / self.group_size)

    def weight_bytes(self, n: int, k: int) -> int:
        """The weights, packed, plus every scale and zero: what the kernel reads for one N×K weight."""
        packed = math.ceil(n * k * self.bits / 8)
        return packed + n * self.groups_per_row(k) * (self.scale_bytes + self.zero_bytes)

    def describe(self) -> str:
        stored = f"int{self.bits} weights" if self.element == "int" else f"{self.bits}-bit float weights (e2m1)"
        if self.group_size is None:
            grouping = "one scale per output channel"
        elif self.zero_bytes:
            grouping = f"a bf16 scale and zero per {self.group_size} weights along K"
        else:
            grouping = f"a {self.scale_bytes}-byte scale per {self.group_size} weights along K"
        return f"{stored} with {grouping}; bf16 activations and output"


# w8a16: int8 weights, one bf16 scale per output channel (torch._weight_int8pack_mm).
# w4a16-g32: symmetric int4 in groups of 32 along K with one bf16 scale each and no zero: compressed-tensors'
# pack-quantized int4 as Kimi-K2.5's routed experts ship (its quantization_config: num_bits 4, group_size 32,
# symmetric); no kernel of gpubench times it (counted analytically only).
# w4a16: int4 weights in groups of 128 along K, a bf16 scale and zero per group (torch's tinygemm layout,
# torch._weight_int4pack_mm; AWQ/GPTQ use the same group size).
# mxfp4: the OCP microscaling format gpt-oss ships its experts in: e2m1 values with one power-of-two (E8M0, one
# byte) scale per 32 along K; on Hopper its kernels dequantize to bf16 and multiply there.
WEIGHT_ONLY_FORMATS: dict[str, WeightOnlyFormat] = {
    "w8a16": WeightOnlyFormat("w8a16", bits=8, group_size=None, scale_bytes=2, zero_bytes=0),
    "w4a16": WeightOnlyFormat("w4a16", bits=4, group_size=128, scale_bytes=2, zero_bytes=2),
    "w4a16-g32": WeightOnlyFormat("w4a16-g32", bits=4, group_size=32, scale_bytes=2, zero_bytes=0),
    "mxfp4": WeightOnlyFormat("mxfp4", bits=4, group_size=32, scale_bytes=1, zero_bytes=0, element="float"),
}


@dataclass(frozen=True)
class BlockScaledFormat:
    """Weights and activations both quantized, each with scales: ``weight_block`` (n, k) weights share one scale of
    ``weight_scale_bytes``; each row's activations carry one ``activation_scale_bytes`` scale per
    ``activation_group`` values along K.  The output is bf16; the arithmetic runs at ``compute_dtype``'s peak."""

    name: str
    bits: int
    weight_block: tuple[int, int]
    weight_scale_bytes: int
    activation_group: int
    activation_scale_bytes: int
    compute_dtype: str
    output_bytes: int = 2

    def weight_bytes(self, n: int, k: int) -> int:
        blocks = math.ceil(n / self.weight_block[0]) * math.ceil(k / self.weight_block[1])
        return math.ceil(n * k * self.bits / 8) + blocks * self.weight_scale_bytes

    def activation_bytes(self, rows: int, k: int) -> int:
        per_row = math.ceil(k * self.bits / 8) + math.ceil(k / self.activation_group) * self.activation_scale_bytes
        return rows * per_row

    def describe(self) -> str:
        n, k = self.weight_block
        return (f"{self.bits}-bit weights with a {self.weight_scale_bytes}-byte scale per {n}×{k} block, activations "
                f"quantized per {self.activation_group} values; bf16 output; {self.compute_dtype} arithmetic")


# fp8-block: DeepSeek-V3's checkpoints (quantization_config weight_block_size [128, 128]): e4m3 weights with an fp32
# scale per 128×128 block, activations quantized on the fly per 1×128 group with an fp32 scale (DeepGEMM's layout).
# nvfp4: NVIDIA's 4-bit float (e2m1) with an e4m3 scale per 16 values (and one fp32 per tensor, no traffic),
# weights and activations alike, multiplied by Blackwell's FP4 tensor cores.
BLOCK_SCALED_FORMATS: dict[str, BlockScaledFormat] = {
    "fp8-block": BlockScaledFormat("fp8-block", bits=8, weight_block=(128, 128), weight_scale_bytes=4,
                                   activation_group=128, activation_scale_bytes=4, compute_dtype="fp8"),
    "nvfp4": BlockScaledFormat("nvfp4", bits=4, weight_block=(1, 16), weight_scale_bytes=1,
                               activation_group=16, activation_scale_bytes=1, compute_dtype="fp4"),
}
DTYPES = PLAIN_DTYPES + tuple(WEIGHT_ONLY_FORMATS) + tuple(BLOCK_SCALED_FORMATS)
# A KV cache holds activations: it is stored in a plain dtype whatever the weights are.
KV_DTYPES = PLAIN_DTYPES
# The precisions a spec sheet may give a peak for: the plain dtypes and the 4-bit tensor cores' fp4.
PEAK_DTYPES = PLAIN_DTYPES + ("fp4",)


def is_weight_only(dtype: str) -> bool:
    return dtype in WEIGHT_ONLY_FORMATS


def is_block_scaled(dtype: str) -> bool:
    return dtype in BLOCK_SCALED_FORMATS


def compute_dtype(dtype: str) -> str:
    """The dtype whose arithmetic units do the work: a weight-only format multiplies in bf16, a block-scaled one at
    its own precision (fp8, fp4)."""
    fmt = WEIGHT_ONLY_FORMATS.get(dtype) or BLOCK_SCALED_FORMATS.get(dtype)
    return fmt.compute_dtype if fmt else dtype


def output_size(dtype: str) -> int:
    """Bytes of one value a linear in ``dtype`` writes: its own size in a plain dtype, bf16's beside fp8 and in
    every weight-only and block-scaled format."""
    fmt = WEIGHT_ONLY_FORMATS.get(dtype) or BLOCK_SCALED_FORMATS.get(dtype)
    return fmt.output_bytes if fmt else DTYPE_SIZES[dtype][1]


def activation_dtype(dtype: str) -> str:
    """The plain dtype a step's activations (and so its K, V and queries) are written in when its linears are
    ``dtype``: what the linears output (bf16 beside fp8, a weight-only or a block-scaled format)."""
    if dtype in ("fp32", "tf32", "fp16"):
        return "fp32" if dtype == "tf32" else dtype
    return "bf16"


def gemm_activation_bytes(dtype: str, rows: int, k: int) -> int:
    """Bytes a GEMM in ``dtype`` reads for ``rows`` activation rows of length K: a block-scaled format quantizes
    them inside the GEMM (its values and per-group scales), a weight-only format reads bf16, a plain dtype its own."""
    block_scaled, weight_only = BLOCK_SCALED_FORMATS.get(dtype), WEIGHT_ONLY_FORMATS.get(dtype)
    if block_scaled:
        return block_scaled.activation_bytes(rows, k)
    size = weight_only.activation_bytes if weight_only else DTYPE_SIZES[dtype][0]
    return size * rows * k


def gemm_output_bytes(dtype: str, rows: int, n: int) -> int:
    return output_size(dtype) * rows * n


# A tensor-parallel layer sums its partial outputs twice: after the attention's output projection and after the
# MLP's down projection (Megatron-LM's row-parallel linears), each an all-reduce of every token's hidden vector.
TP_ALL_REDUCES_PER_LAYER = 2


def all_reduce_bytes(dtype: str, tokens: int, hidden: int) -> int:
    """Bytes one tensor-parallel all-reduce sums on each rank: ``tokens × hidden`` activations as the row-parallel
    linear writes them (``output_size``: bf16 beside fp8 and the quantized formats)."""
    return output_size(dtype) * tokens * hidden


def all_to_all_bytes(dtype: str, tokens: int, width: int, topk: int, experts: int, ranks: int) -> float:
    """Bytes one expert-parallel all-to-all (dispatch or combine) sends from one rank, spread evenly over the
    ``ranks``: each of its ``tokens`` vectors of ``width`` (the hidden size, or a latent MoE's latent) once per rank
    that holds at least one of its ``topk`` experts, in the activations' dtype (bf16 beside the quantized formats).

    Once per rank, not once per expert: DeepEP's dispatch sends a token to a rank once however many of that rank's
    experts it chose, and its combine returns one sum per rank; vLLM's default exchange (all-gather, then
    reduce-scatter) sends every token to every rank, which this reaches once the top-k touches every rank.  With
    ``experts`` spread evenly and a token's top-k chosen uniformly, a rank holds one of them with probability
    ``1 - C(E - E/N, k) / C(E, k)``."""
    if ranks <= 1:
        return 0.0
    local = experts / ranks
    missed = 1.0
    for i in range(topk):  # the chance that none of the token's k distinct experts is one of this rank's
        missed *= max(0.0, (experts - local - i) / (experts - i))
    return output_size(dtype) * tokens * width * ranks * (1.0 - missed)


# A step's kernels besides its GEMMs, mixers and collectives, per token: around each mixer and each MLP (a
# transformer layer has one of each; a Nemotron-H block one of either) a norm (RMSNorm or LayerNorm: the hidden vector
# read, the normalised one written) and a residual add (two hidden vectors read, their sum written); rotary embeddings
# on the rank's queries and keys (read, written); each MLP's activation (gated: SiLU(gate) x up reads both halves and
# writes one; plain: reads and writes one).  Once per token, the final norm.  Elementwise kernels have no reuse, so
# these are their bytes; FLOP are negligible beside the GEMMs'.


def elementwise_bytes_per_token(dtype: str, hidden: int, sublayers: int, rope_values: int, activation_values: int,
                                gated: bool) -> int:
    """Bytes one token moves through the step's norms, residual adds, rotary embeddings and MLP activations on one
    tensor-parallel rank: ``sublayers`` mixers and MLPs in all, ``rope_values`` the rank's query and key values
    rotated in all its layers, ``activation_values`` the width its MLP activations run over in all its layers (one
    half of a gated MLP's gate_up).  Activations in ``output_size`` (bf16 beside fp8 and the quantized
    formats).  Greedy sampling reads each sequence's logits, not each token's: not here."""
    size = output_size(dtype)
    norm = 2 * hidden * size
    residual_add = 3 * hidden * size
    rope = 2 * rope_values * size
    activation = (3 if gated else 2) * activation_values * size
    return sublayers * (norm + residual_add) + rope + activation + norm


def matrix_weight_bytes(dtype: str, n: int, k: int) -> int:
    """Bytes one N×K weight matrix occupies (and a launch reads) in ``dtype``."""
    fmt = WEIGHT_ONLY_FORMATS.get(dtype) or BLOCK_SCALED_FORMATS.get(dtype)
    if fmt:
        return fmt.weight_bytes(n, k)
    return DTYPE_SIZES[dtype][0] * n * k


def _check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")


@dataclass(frozen=True)
class Work:
    """Exact work of one launch: FLOP, minimum bytes moved, and each operand's share of those bytes."""

    flop: int
    bytes: int
    weight_bytes: int
    activation_bytes: int
    output_bytes: int

    @property
    def intensity_flop_per_byte(self) -> float:
        return self.flop / self.bytes

    def __add__(self, other: Work) -> Work:
        return Work(self.flop + other.flop, self.bytes + other.bytes, self.weight_bytes + other.weight_bytes,
                    self.activation_bytes + other.activation_bytes, self.output_bytes + other.output_bytes)

    def times(self, count: float) -> Work:
        """``count`` launches of this work (a fractional count: an expectation, e.g. experts touched)."""
        return Work(self.flop * count, self.bytes * count, self.weight_bytes * count,  # pyright: ignore[reportArgumentType]
                    self.activation_bytes * count, self.output_bytes * count)  # pyright: ignore[reportArgumentType]


NO_WORK = Work(0, 0, 0, 0, 0)


def count_work(op: str, dtype: str, batch: int, n: int, k: int, experts: int = 1, topk: int = 1,
               touched: float | None = None, mixer: MixerShape | None = None) -> Work:
    """FLOP and minimum bytes of one launch of ``op`` at ``batch`` on an N×K weight.  ``grouped``: ``batch`` tokens
    each routed to ``topk`` of ``experts`` N×K matrices, of which ``touched`` (the routing's distinct experts; at
    most ``experts``, at most ``batch · topk``) are read.  ``state_update`` and ``sparse_attention``: one layer of
    the ``mixer`` over ``batch`` decoding sequences (``mixer_work``)."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; expected one of {', '.join(OPS)}")
    _check_dtype(dtype)
    if op in MIXER_OPS:
        return mixer_work(op, dtype, batch, n, k, mixer)
    if batch <= 0 or n <= 0 or k <= 0:
        raise ValueError(f"batch, n and k must be positive, got batch={batch} n={n} k={k}")
    if op == "gemv" and batch != 1:
        raise ValueError("gemv is batch 1 by definition")
    if op == "grouped":
        return grouped_work(dtype, batch, n, k, experts, topk, touched)
    # bmm: G = batch matrices of N×K, each multiplied by its own vector.
    weights = matrix_weight_bytes(dtype, n, k) * (batch if op == "bmm" else 1)
    acts, outs = gemm_activation_bytes(dtype, batch, k), gemm_output_bytes(dtype, batch, n)
    return Work(flop=2 * batch * n * k, bytes=weights + acts + outs, weight_bytes=weights, activation_bytes=acts,
                output_bytes=outs)


def grouped_work(dtype: str, tokens: int, n: int, k: int, experts: int, topk: int, touched: float | None) -> Work:
    """A grouped GEMM of ``tokens`` tokens over ``experts`` N×K experts, ``topk`` each: FLOP ``2·T·topk·N·K``; the
    touched experts' weights, each token's activations once per assignment, one output row per assignment."""
    if experts <= 0 or not 0 < topk <= experts:
        raise ValueError(f"grouped needs 0 < topk <= experts, got experts={experts} topk={topk}")
    assignments = tokens * topk
    touched = min(experts, assignments) if touched is None else touched
    if not 0 < touched <= min(experts, assignments):
        raise ValueError(f"touched experts {touched} must be in (0, min(experts, tokens × topk)]")
    weights = matrix_weight_bytes(dtype, n, k) * touched
    acts, outs = gemm_activation_bytes(dtype, assignments, k), gemm_output_bytes(dtype, assignments, n)
    return Work(flop=2 * assignments * n * k, bytes=weights + acts + outs,  # pyright: ignore[reportArgumentType]
                weight_bytes=weights, activation_bytes=acts, output_bytes=outs)  # pyright: ignore[reportArgumentType]


def attention_work(act_dtype: str, kv_dtype: str, heads: int, kv_heads: int, qk_dim: int, v_dim: int,
                   queries: float, keys: float, query_keys: float) -> Work:
    """One layer's attention on one GPU, flash-style: Q read and the output written once per query and head, K and
    V read once per cached key and KV head (every query head of a GQA group reads the same K and V).  FLOP: QKᵀ and
    PV, ``2·(qk_dim + v_dim)`` per (query head, key) pair attended (``query_keys``, the pairs a causal mask keeps).
    The KV cache is the "weights" of this op: it is what grows with the context."""
    s_act, s_kv = DTYPE_SIZES[act_dtype][0], DTYPE_SIZES[kv_dtype][0]
    q_out = queries * heads * (qk_dim + v_dim) * s_act
    kv = keys * kv_heads * (qk_dim + v_dim) * s_kv
    flop = 2 * heads * (qk_dim + v_dim) * query_keys
    return Work(flop=flop, bytes=q_out + kv, weight_bytes=kv, activation_bytes=q_out * qk_dim / (qk_dim + v_dim),  # pyright: ignore[reportArgumentType]
                output_bytes=q_out * v_dim / (qk_dim + v_dim))  # pyright: ignore[reportArgumentType]


def mla_attention_work(act_dtype: str, kv_dtype: str, heads: int, latent: int, rope: int, queries: float,
                       keys: float, query_keys: float) -> Work:
    """One layer of DeepSeek's multi-head latent attention in its absorbed decode form (FlashMLA): every query head
    attends over the one latent cache (``latent + rope`` values per key, shared by all heads as one KV head is in
    MQA), so its intensity is about 2 · heads · query tokens FLOP per byte.  QKᵀ over ``latent + rope`` dims, PV
    over ``latent``; queries read as ``latent + rope`` values per head, outputs written as ``latent``."""
    s_act, s_kv = DTYPE_SIZES[act_dtype][0], DTYPE_SIZES[kv_dtype][0]
    q = queries * heads * (latent + rope) * s_act
    out = queries * heads * latent * s_act
    cache = keys * (latent + rope) * s_kv  # one latent per key: K and V are both read from it
    flop = 2 * heads * ((latent + rope) + latent) * query_keys
    return Work(flop=flop, bytes=q + out + cache, weight_bytes=cache, activation_bytes=q,  # pyright: ignore[reportArgumentType]
                output_bytes=out)  # pyright: ignore[reportArgumentType]


def attention_extent(decode_contexts: float, decodes: int, chunks, window: int | None = None, queries: int = 1
                     ) -> tuple[float, float, float]:
    """(queries, keys read, query-key pairs) of one step's attention: ``decodes`` sequences each decoding ``queries``
    tokens (1; a speculative verification's K + 1) over its cache (their contexts summing to ``decode_contexts``, the
    new tokens included: the q new tokens attend causally among themselves), and prefill ``chunks`` of (tokens,
    cached prefix): each chunk reads its prefix and itself, causally within itself.  ``window``: a sliding-window
    layer, where a query attends over the last ``window`` positions only (the decodes' keys are reckoned from their
    contexts' sum: ``min(sum, decodes × window)``, exact when every context is past the window or every one within
    it)."""
    causal = decodes * queries * (queries - 1) / 2  # the later of a sequence's new tokens see more of them
    total = decodes * queries + sum(c for c, _ in chunks)
    if window is None:
        keys = decode_contexts + sum(c + prefix for c, prefix in chunks)
        pairs = queries * decode_contexts - causal + sum(c * (prefix + (c + 1) / 2) for c, prefix in chunks)
        return total, keys, pairs
    decode_keys = min(decode_contexts, decodes * window)
    keys, pairs = decode_keys, queries * decode_keys - causal
    for c, prefix in chunks:
        within = max(0, min(c, window - prefix))  # queries whose whole history still fits in the window
        pairs += within * prefix + within * (within + 1) / 2 + (c - within) * window
        keys += c + min(prefix, window)
    return total, keys, pairs


def critical_intensity_batch(dtype: str, n: int, k: int, ridge_flop_per_byte):
    """The (real-valued) GEMM batch B whose exact intensity equals ``ridge_flop_per_byte``.

    Solves ``2BNK = R·(W + B·(a·K + s_out·N))`` for B, with W the weight's bytes in ``dtype``
    (``matrix_weight_bytes``) and ``a`` the bytes a GEMM reads per activation (a block-scaled format's scales
    included).  Returns ``inf`` when the intensity can never reach the ridge (its limit as B grows is
    ``2NK / (a·K + s_out·N)``).  A float for a float ridge; an array for an array of them (the fit's bootstrap
    replicates).
    """
    per_row = gemm_activation_bytes(dtype, 1, k) + gemm_output_bytes(dtype, 1, n)
    weights = matrix_weight_bytes(dtype, n, k)
    ridge = np.asarray(ridge_flop_per_byte, dtype=float)
    denominator = 2 * n * k - ridge * per_row
    with np.errstate(divide="ignore", invalid="ignore"):
        batch = np.where(denominator > 0, ridge * weights / denominator, np.inf)
    return float(batch) if batch.ndim == 0 else batch


# --- Mixers without a growing KV cache: a recurrent state per sequence (linear attention, state-space layers) ---
#
# Decode reads and writes each sequence's state once per token (fused recurrent kernels: fla's
# fused_recurrent_gated_delta_rule, mamba-ssm's selective_state_update), so its bytes are the states' and do not grow
# with the context.  Prefill runs a chunked scan (fla's chunk_gated_delta_rule, Mamba-2's SSD), reading a sequence's
# state before its chunk and writing it after, with a per-token FLOP count of its own.  The short causal convolution
# before the mixer keeps its last ``conv_kernel - 1`` inputs per sequence: read and written like the state.


@dataclass(frozen=True)
class RecurrentShape:
    """One layer's recurrent mixer on one GPU, per token and per sequence, as ``recurrent_work`` counts it:
    ``state_bytes`` (the recurrent state and the convolution's kept inputs, one sequence), the FLOP of one token's
    recurrent update and of one token of a chunked scan, and the activation values one token reads and writes."""

    state_bytes: int
    recurrent_flop_per_token: int
    chunked_flop_per_token: int
    input_values_per_token: int
    output_values_per_token: int


def _conv_state_bytes(channels: int, conv_kernel: int, act_dtype: str) -> int:
    return channels * (conv_kernel - 1) * DTYPE_SIZES[act_dtype][0]


def gated_deltanet_shape(act_dtype: str, state_dtype: str, key_heads: int, value_heads: int, key_dim: int,
                         value_dim: int, conv_kernel: int, chunk: int = 64) -> RecurrentShape:
    """Gated DeltaNet (Qwen3-Next, Qwen3.5) on one GPU (its share of the heads).  Per value head and token, the
    recurrent update (fla's fused_recurrent_gated_delta_rule) decays the state S (dk·dv), reads S·k (2·dk·dv), adds
    k ⊗ β(v − S·k) (2·dk·dv) and reads S·q (2·dk·dv): 7·dk·dv FLOP.  A chunked scan of ``chunk`` tokens (fla's
    chunk_gated_delta_rule, chunk 64) does per token and value head the state's three products (6·dk·dv) and the
    chunk's own attention-like products, 2·C·(2·dk + dv).  The convolution runs over q, k and v (conv_dim channels,
    2·conv_kernel FLOP each).  Activations: the convolution's input and output, the recurrence's q, k, v, its gate
    and β per value head, and its output."""
    conv_dim = 2 * key_heads * key_dim + value_heads * value_dim
    state = value_heads * key_dim * value_dim * DTYPE_SIZES[state_dtype][0]
    conv_flop = 2 * conv_dim * conv_kernel
    return RecurrentShape(
        state_bytes=state + _conv_state_bytes(conv_dim, conv_kernel, act_dtype),
        recurrent_flop_per_token=7 * value_heads * key_dim * value_dim + conv_flop,
        chunked_flop_per_token=value_heads * (6 * key_dim * value_dim + 2 * chunk * (2 * key_dim + value_dim))
        + conv_flop,
        input_values_per_token=conv_dim + conv_dim + 2 * value_heads,
        output_values_per_token=conv_dim + value_heads * value_dim)


def mamba2_shape(act_dtype: str, state_dtype: str, heads: int, head_dim: int, state_size: int, groups: int,
                 conv_kernel: int, chunk: int = 128) -> RecurrentShape:
    """Mamba-2 (Nemotron-H) on one GPU (its share of the heads and groups).  Per head and token, the recurrent update
    (mamba-ssm's selective_state_update) decays the state (p·n), adds dt·x ⊗ B (2·p·n) and reads C·state (2·p·n):
    5·p·n FLOP for a head of size p over a state of n.  A chunked scan (SSD, ``chunk`` tokens: the config's
    chunk_size) does per token the chunk's C·Bᵀ per group (2·C·n) and its product with x per head (2·C·p), and the
    state's two products per head (4·p·n).  The convolution runs over x, B and C (conv_dim channels).  Activations:
    the convolution's input and output, the scan's x, B, C, dt and gate z, and its output."""
    inner = heads * head_dim
    conv_dim = inner + 2 * groups * state_size
    state = heads * head_dim * state_size * DTYPE_SIZES[state_dtype][0]
    conv_flop = 2 * conv_dim * conv_kernel
    return RecurrentShape(
        state_bytes=state + _conv_state_bytes(conv_dim, conv_kernel, act_dtype),
        recurrent_flop_per_token=5 * heads * head_dim * state_size + conv_flop,
        chunked_flop_per_token=2 * chunk * (groups * state_size + inner) + 4 * heads * head_dim * state_size
        + conv_flop,
        input_values_per_token=conv_dim + conv_dim + heads + inner,
        output_values_per_token=conv_dim + inner)


def recurrent_work(shape: RecurrentShape, act_dtype: str, decodes: int, chunks) -> Work:
    """One layer's recurrent mixer over a step: ``decodes`` sequences decoding one token each (a state read and
    written per sequence) and prefill ``chunks`` of (tokens, cached prefix) (a state read and written per chunk; the
    prefix is in the state, so it costs nothing more).  The states are this op's "weights": what one sequence
    keeps."""
    prefill = sum(c for c, _ in chunks)
    tokens = decodes + prefill
    states = 2 * shape.state_bytes * (decodes + len(chunks))
    size = DTYPE_SIZES[act_dtype][0]
    inputs, outputs = tokens * shape.input_values_per_token * size, tokens * shape.output_values_per_token * size
    flop = decodes * shape.recurrent_flop_per_token + prefill * shape.chunked_flop_per_token
    return Work(flop=flop, bytes=states + inputs + outputs, weight_bytes=states, activation_bytes=inputs,
                output_bytes=outputs)


# --- DeepSeek sparse attention's lightning indexer (DeepSeek-V3.2, GLM-5) ---
#
# Its keys are fp8 (one of ``head_dim`` values per cached token and layer) with one fp32 scale per token: vLLM's
# indexer cache; each query scores every key it may see with ``heads`` small heads, writes the scores, and a top-k
# keeps ``topk`` of them for the latent attention.
INDEXER_KEY_SCALE_BYTES = 4


def indexer_key_bytes(head_dim: int) -> int:
    """Bytes one cached token's indexer key takes (fp8 values and their fp32 scale)."""
    return head_dim + INDEXER_KEY_SCALE_BYTES


def indexer_work(act_dtype: str, heads: int, head_dim: int, queries: float, keys: float, pairs: float) -> Work:
    """The indexer of one layer over a step: ``queries`` queries read (``heads`` × ``head_dim`` each, with a weight
    per head), ``keys`` cached keys read, ``pairs`` (query, key) scores computed (2·heads·head_dim FLOP each),
    written and read back by the top-k (fp32)."""
    s_act = DTYPE_SIZES[act_dtype][0]
    q = queries * heads * (head_dim + 1) * s_act
    cache = keys * indexer_key_bytes(head_dim)
    scores = 2 * pairs * 4
    return Work(flop=2 * heads * head_dim * pairs, bytes=q + cache + scores,  # pyright: ignore[reportArgumentType]
                weight_bytes=cache, activation_bytes=q, output_bytes=scores)  # pyright: ignore[reportArgumentType]


# --- The recurrent and sparse mixers' decode kernels as sweep ops ---
#
# ``state_update``: one layer of a recurrent mixer (Gated DeltaNet or Mamba-2) decoding one token for each of
# ``batch`` sequences on one GPU: the short convolution's update and the recurrent state's (fla's
# fused_recurrent_gated_delta_rule, mamba-ssm's selective_state_update).  Each sequence's state is read and written
# once, so the op is memory-bound on the states whatever the batch: its work is ``recurrent_work``'s for ``batch``
# decodes, exactly what the step model counts for the layer.  ``sparse_attention``: one layer of DeepSeek sparse
# attention (DSA) decoding one token for each of ``batch`` sequences over ``n`` cached tokens each: the indexer
# scores every cached key, a top-k keeps ``topk``, the absorbed latent attention reads those (``indexer_work`` and
# ``mla_attention_work``, as ``roofline.step.kinds.latent`` counts a decode step).
MIXER_OPS = ("state_update", "sparse_attention")
STATE_KINDS = ("gdn", "mamba2")
SPARSE_KINDS = ("dsa",)
# The activations' dtypes these ops run in (DSA's latent cache too): the plain ones a step's activations take.
MIXER_DTYPES = ("fp32", "fp16", "bf16")
# What each kind of mixer shape must give beside ``heads`` (the rest stay None).
_MIXER_FIELDS = {"gdn": ("groups", "conv_kernel", "state_dtype"), "mamba2": ("groups", "conv_kernel", "state_dtype"),
                 "dsa": ("rope", "index_heads", "index_dim", "topk")}


@dataclass(frozen=True)
class MixerShape:
    """What a ``state_update`` or ``sparse_attention`` point is beyond its op, dtype, batch, n and k: one layer's
    mixer on one GPU.

    ``state_update`` (``kind`` gdn: Gated DeltaNet; mamba2): the point's n is the value head size (Mamba-2: the head
    size P) and k the key head size (Mamba-2: the state size N), so one head's state is k × n; ``heads`` are the value
    heads (Mamba-2: its heads), ``groups`` the key heads (Mamba-2: the groups that share B and C), ``conv_kernel`` the
    short convolution's width, ``state_dtype`` what the state is kept in.  ``sparse_attention`` (``kind`` dsa): n is
    the context (keys cached per sequence) and k the latent (kv_lora_rank); ``heads`` the latent attention's query
    heads, ``rope`` its rope width, ``index_heads`` × ``index_dim`` the indexer, ``topk`` the keys each query
    attends."""

    kind: str
    heads: int
    groups: int | None = None
    conv_kernel: int | None = None
    state_dtype: str | None = None
    rope: int | None = None
    index_heads: int | None = None
    index_dim: int | None = None
    topk: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in _MIXER_FIELDS:
            raise ValueError(f"unknown mixer {self.kind!r}; expected one of {', '.join(_MIXER_FIELDS)}")
        wanted = ("heads",) + _MIXER_FIELDS[self.kind]
        for name in ("heads", "groups", "conv_kernel", "rope", "index_heads", "index_dim", "topk"):
            value = getattr(self, name)
            if name not in wanted:
                if value is not None:
                    raise ValueError(f"a {self.kind} mixer has no {name}")
            elif not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"a {self.kind} mixer's {name} must be a positive integer, got {value!r}")
        if self.kind in STATE_KINDS:
            if self.state_dtype not in MIXER_DTYPES:
                raise ValueError(f"a recurrent state is kept in {', '.join(MIXER_DTYPES)}, not {self.state_dtype!r}")
            if self.heads % (self.groups or 1):
                raise ValueError(f"{self.heads} heads are not a multiple of {self.groups} groups")
        elif self.state_dtype is not None:
            raise ValueError(f"a {self.kind} mixer has no state_dtype")

    @property
    def op(self) -> str:
        return "state_update" if self.kind in STATE_KINDS else "sparse_attention"

    def to_dict(self) -> dict[str, int | str]:
        """The keyed form a document keeps: the kind and every field it has."""
        return {name: value for name, value in asdict(self).items() if value is not None}

    @classmethod
    def from_dict(cls, d: dict) -> MixerShape:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"a mixer shape has no {', '.join(unknown)}")
        return cls(**d)

    @property
    def tag(self) -> str:
        """The shape beyond n×k, short, as labels name a series: ``gdn 32h/16g conv4``, ``dsa 16h rope64 idx32x128
        top-2048``."""
        if self.kind == "dsa":
            return f"dsa {self.heads}h rope{self.rope} idx{self.index_heads}x{self.index_dim} top-{self.topk}"
        state = "" if self.state_dtype == "fp32" else f" {self.state_dtype} state"
        return f"{self.kind} {self.heads}h/{self.groups}g conv{self.conv_kernel}{state}"

    def describe(self, n: int, k: int) -> str:
        """The shape in words, with the point's n and k."""
        if self.kind == "gdn":
            return (f"Gated DeltaNet {self.heads} value heads / {self.groups} key heads, {k}×{n} {self.state_dtype} "
                    "state")
        if self.kind == "mamba2":
            return f"Mamba-2 {self.heads} heads / {self.groups} groups, {n}×{k} {self.state_dtype} state"
        return (f"DSA {self.heads} heads over {n} keys, latent {k}+{self.rope}, indexer {self.index_heads}×"
                f"{self.index_dim}, top-{self.topk}")


def state_update_shape(dtype: str, n: int, k: int, mixer: MixerShape) -> RecurrentShape:
    """The recurrent shape (``gated_deltanet_shape`` or ``mamba2_shape``) of a state_update point."""
    state_dtype = mixer.state_dtype or "fp32"
    if mixer.kind == "gdn":
        return gated_deltanet_shape(dtype, state_dtype, mixer.groups or 1, mixer.heads, k, n, mixer.conv_kernel or 1)
    return mamba2_shape(dtype, state_dtype, mixer.heads, n, k, mixer.groups or 1, mixer.conv_kernel or 1)


def sparse_attention_work(dtype: str, batch: int, context: int, latent: int, mixer: MixerShape) -> Work:
    """DSA's decode of ``batch`` sequences over ``context`` cached tokens each: the indexer over every cached key,
    the latent attention over the top ``min(context, topk)`` (the latent cache and the activations in ``dtype``)."""
    attended = min(context, mixer.topk or context)
    attention = mla_attention_work(dtype, dtype, mixer.heads, latent, mixer.rope or 0, batch, batch * attended,
                                   batch * attended)
    return attention + indexer_work(dtype, mixer.index_heads or 1, mixer.index_dim or 1, batch, batch * context,
                                    batch * context)


def mixer_work(op: str, dtype: str, batch: int, n: int, k: int, mixer: MixerShape | None) -> Work:
    """One launch of a mixer op (``state_update``, ``sparse_attention``): its shape must be of the op's kind."""
    if mixer is None or mixer.op != op:
        kinds = STATE_KINDS if op == "state_update" else SPARSE_KINDS
        raise ValueError(f"{op} needs a mixer shape of kind {' or '.join(kinds)}")
    if dtype not in MIXER_DTYPES:
        raise ValueError(f"{op} runs in {', '.join(MIXER_DTYPES)} (a step's activations), not {dtype}")
    if batch <= 0 or n <= 0 or k <= 0:
        raise ValueError(f"batch, n and k must be positive, got batch={batch} n={n} k={k}")
    if op == "state_update":
        return recurrent_work(state_update_shape(dtype, n, k, mixer), dtype, batch, ())
    return sparse_attention_work(dtype, batch, n, k, mixer)
