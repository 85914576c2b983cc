"""FLOP and byte counts for every op and format, written down once.

GEMM ``Y[B,N] = X[B,K] · W[K,N]``: ``flop = 2·B·N·K``; ``bytes`` is the minimum traffic: each input
read once, the output written once.  GEMV is B = 1.  ``bmm`` is G = B independent GEMVs (one matrix
per sequence, as decode attention reads each sequence's own KV cache), so its intensity does not grow
with the batch.

Two kinds of dtype.  A *plain* dtype (fp32, tf32, fp16, bf16, fp8) stores weights, activations and output
in one element type (fp8 writes bf16).  A *weight-only* format (w8a16, w4a16) stores the weights as
integers with bf16 scales (and zeros), as AWQ/GPTQ checkpoints and their decode kernels do, and reads bf16
activations and writes bf16 output: its weight bytes are N·K·bits/8 plus the scale and zero bytes of the
layout the kernel reads, and its arithmetic runs on the bf16 units (``compute_dtype``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

OPS = ("gemv", "gemm", "bmm")

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
    """Integer weights with bf16 scales (and zeros), bf16 activations and output.

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

    def groups_per_row(self, k: int) -> int:
        return 1 if self.group_size is None else math.ceil(k / self.group_size)

    def weight_bytes(self, n: int, k: int) -> int:
        """The integers, packed, plus every scale and zero: what the kernel reads for one N×K weight."""
        packed = math.ceil(n * k * self.bits / 8)
        return packed + n * self.groups_per_row(k) * (self.scale_bytes + self.zero_bytes)

    def describe(self) -> str:
        grouping = "one scale per output channel" if self.group_size is None else \
            f"a bf16 scale and zero per {self.group_size} weights along K"
        return f"int{self.bits} weights with {grouping}; bf16 activations and output"


# w8a16: int8 weights, one bf16 scale per output channel (torch._weight_int8pack_mm).
# w4a16: int4 weights in groups of 128 along K, a bf16 scale and zero per group (torch's tinygemm layout,
# torch._weight_int4pack_mm; AWQ/GPTQ use the same group size).
WEIGHT_ONLY_FORMATS: dict[str, WeightOnlyFormat] = {
    "w8a16": WeightOnlyFormat("w8a16", bits=8, group_size=None, scale_bytes=2, zero_bytes=0),
    "w4a16": WeightOnlyFormat("w4a16", bits=4, group_size=128, scale_bytes=2, zero_bytes=2),
}
DTYPES = PLAIN_DTYPES + tuple(WEIGHT_ONLY_FORMATS)
# A KV cache holds activations: it is stored in a plain dtype whatever the weights are.
KV_DTYPES = PLAIN_DTYPES


def is_weight_only(dtype: str) -> bool:
    return dtype in WEIGHT_ONLY_FORMATS


def compute_dtype(dtype: str) -> str:
    """The dtype whose arithmetic units do the work: a weight-only format multiplies in bf16."""
    fmt = WEIGHT_ONLY_FORMATS.get(dtype)
    return fmt.compute_dtype if fmt else dtype


def io_sizes(dtype: str) -> tuple[int, int]:
    """(activation, output) element sizes in bytes."""
    fmt = WEIGHT_ONLY_FORMATS.get(dtype)
    if fmt:
        return fmt.activation_bytes, fmt.output_bytes
    return DTYPE_SIZES[dtype]


# A tensor-parallel layer sums its partial outputs twice: after the attention's output projection and after the
# MLP's down projection (Megatron-LM's row-parallel linears), each an all-reduce of every token's hidden vector.
TP_ALL_REDUCES_PER_LAYER = 2


def all_reduce_bytes(dtype: str, tokens: int, hidden: int) -> int:
    """Bytes one tensor-parallel all-reduce sums on each rank: ``tokens × hidden`` activations as the row-parallel
    linear writes them (``io_sizes``' output: bf16 beside fp8 and the weight-only formats)."""
    return io_sizes(dtype)[1] * tokens * hidden


# A step's kernels besides its GEMMs, attention and all-reduces, per token and per transformer layer: two norms
# (RMSNorm or LayerNorm: the hidden vector read, the normalised one written), two residual adds (two hidden vectors
# read, their sum written), rotary embeddings on the rank's queries and keys (read, written), the MLP's activation
# (gated: SiLU(gate) x up reads both halves and writes one; plain: reads and writes one).  Once per token, the final
# norm.  Elementwise kernels have no reuse, so these are their bytes; FLOP are negligible beside the GEMMs'.
NORMS_PER_LAYER = 2
RESIDUAL_ADDS_PER_LAYER = 2


def other_kernel_bytes_per_token(dtype: str, hidden: int, heads: int, kv_heads: int, head_dim: int,
                                 intermediate: int, gated: bool, layers: int) -> int:
    """Bytes one token moves through the step's norms, residual adds, rotary embeddings and MLP activation on one
    tensor-parallel rank (``heads``, ``kv_heads`` and ``intermediate`` as that rank holds them; the hidden vector is
    whole on every rank), all ``layers`` and the final norm.  Activations in ``io_sizes``' output dtype (bf16 beside
    fp8 and the weight-only formats).  Greedy sampling reads each sequence's logits, not each token's: not here."""
    size = io_sizes(dtype)[1]
    norm = 2 * hidden * size
    residual_add = 3 * hidden * size
    rope = 2 * (heads + kv_heads) * head_dim * size
    activation = (3 if gated else 2) * intermediate * size
    per_layer = NORMS_PER_LAYER * norm + RESIDUAL_ADDS_PER_LAYER * residual_add + rope + activation
    return layers * per_layer + norm


def matrix_weight_bytes(dtype: str, n: int, k: int) -> int:
    """Bytes one N×K weight matrix occupies (and a launch reads) in ``dtype``."""
    fmt = WEIGHT_ONLY_FORMATS.get(dtype)
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


def count_work(op: str, dtype: str, batch: int, n: int, k: int) -> Work:
    """FLOP and minimum bytes of one launch of ``op`` at ``batch`` on an N×K weight."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; expected one of {', '.join(OPS)}")
    _check_dtype(dtype)
    if batch <= 0 or n <= 0 or k <= 0:
        raise ValueError(f"batch, n and k must be positive, got batch={batch} n={n} k={k}")
    if op == "gemv" and batch != 1:
        raise ValueError("gemv is batch 1 by definition")
    s_act, s_out = io_sizes(dtype)
    # bmm: G = batch matrices of N×K, each multiplied by its own vector.
    weights = matrix_weight_bytes(dtype, n, k) * (batch if op == "bmm" else 1)
    acts, outs = s_act * batch * k, s_out * batch * n
    return Work(
        flop=2 * batch * n * k,
        bytes=weights + acts + outs,
        weight_bytes=weights,
        activation_bytes=acts,
        output_bytes=outs,
    )


def critical_intensity_batch(dtype: str, n: int, k: int, ridge_flop_per_byte):
    """The (real-valued) GEMM batch B whose exact intensity equals ``ridge_flop_per_byte``.

    Solves ``2BNK = R·(W + B·(s_act·K + s_out·N))`` for B, with W the weight's bytes in ``dtype``
    (``matrix_weight_bytes``).  Returns ``inf`` when the intensity can never reach the ridge (its limit as
    B grows is ``2NK / (s_act·K + s_out·N)``).  A float for a float ridge; an array for an array of them
    (the fit's bootstrap replicates).
    """
    s_act, s_out = io_sizes(dtype)
    weights = matrix_weight_bytes(dtype, n, k)
    ridge = np.asarray(ridge_flop_per_byte, dtype=float)
    denominator = 2 * n * k - ridge * (s_act * k + s_out * n)
    with np.errstate(divide="ignore", invalid="ignore"):
        batch = np.where(denominator > 0, ridge * weights / denominator, np.inf)
    return float(batch) if batch.ndim == 0 else batch
