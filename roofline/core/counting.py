"""FLOP and byte counts for every op, written down once.

GEMM ``Y[B,N] = X[B,K] · W[K,N]``: ``flop = 2·B·N·K``; ``bytes`` is the minimum traffic: each input
read once, the output written once.  GEMV is B = 1.  ``bmm`` is G = B independent GEMVs (one matrix
per sequence, as decode attention reads each sequence's own KV cache), so its intensity does not grow
with the batch.
"""

from __future__ import annotations

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
DTYPES = tuple(DTYPE_SIZES)


@dataclass(frozen=True)
class Work:
    """Exact work of one launch: FLOP, minimum bytes moved, and the operand sizes in elements."""

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
    if dtype not in DTYPE_SIZES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    if batch <= 0 or n <= 0 or k <= 0:
        raise ValueError(f"batch, n and k must be positive, got batch={batch} n={n} k={k}")
    if op == "gemv" and batch != 1:
        raise ValueError("gemv is batch 1 by definition")
    s_in, s_out = DTYPE_SIZES[dtype]
    if op == "bmm":
        # G = batch matrices of N×K, each multiplied by its own vector.
        weights, acts, outs = batch * n * k, batch * k, batch * n
    else:
        weights, acts, outs = n * k, batch * k, batch * n
    return Work(
        flop=2 * batch * n * k,
        bytes=s_in * (weights + acts) + s_out * outs,
        weight_bytes=s_in * weights,
        activation_bytes=s_in * acts,
        output_bytes=s_out * outs,
    )


def critical_intensity_batch(dtype: str, n: int, k: int, ridge_flop_per_byte):
    """The (real-valued) GEMM batch B whose exact intensity equals ``ridge_flop_per_byte``.

    Solves ``2BNK = R·(s_in·(NK + BK) + s_out·BN)`` for B.  Returns ``inf`` when the intensity
    can never reach the ridge (its limit as B grows is ``2NK / (s_in·K + s_out·N)``).  A float for a
    float ridge; an array for an array of them (the fit's bootstrap replicates).
    """
    s_in, s_out = DTYPE_SIZES[dtype]
    ridge = np.asarray(ridge_flop_per_byte, dtype=float)
    denominator = 2 * n * k - ridge * (s_in * k + s_out * n)
    with np.errstate(divide="ignore", invalid="ignore"):
        batch = np.where(denominator > 0, ridge * s_in * n * k / denominator, np.inf)
    return float(batch) if batch.ndim == 0 else batch
