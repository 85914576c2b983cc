"""w8a16 on CUDA: gpubench's own Triton kernel for y[M, N] = x[M, K] · (q[N, K] · s[N])ᵀ, bf16 in and out.

Why not ``torch._weight_int8pack_mm`` on CUDA: in torch 2.11.0 (source read: ``aten/src/ATen/native/cuda/
int8mm.cu`` of that release, the kernel the H200 image's wheel runs) it is a reference kernel: one thread per
output element, a serial loop over K, each thread of a warp reading its own weight row (so no load is
coalesced), and x and the scales cast to fp32 by separate kernels first.  Timed on a GPU it reads several times
slower than bf16, and a verdict "w8a16 never pays off" would describe that kernel, not the format.  A serving
stack runs w8a16 as a fused dequantize-and-matmul (torchao's int8 weight-only path compiles the dequantize
into inductor's Triton matmul; Marlin-style CUDA kernels elsewhere): this is such a kernel, named
``weight_only.TRITON_W8A16_KERNEL`` in every point and report.  On the CPU ``torch._weight_int8pack_mm`` is an
optimised kernel and stays (``weight_only``).

Two kernels, one per regime, both reading each weight byte once along K (its contiguous axis), dequantizing in
registers (|q| ≤ 127 is exact in bf16 and fp32), accumulating in fp32 and applying the per-channel scale once
at the end (y = (x·qᵀ)·s, the same product as x·(q·s)ᵀ):

- M = 1 (GEMV): each program owns ``BLOCK_N`` output channels and multiplies their ``[BLOCK_N, BLOCK_K]``
  int8 tile elementwise by x, summing along K; no tensor cores (a GEMV has nothing for them), wide tiles so
  that each thread has several 16-byte loads in flight, and ``BLOCK_N`` small enough that the grid covers
  the multiprocessors at least twice over (``gemv_config``).
- M > 1: tiles of ``tl.dot`` (bf16 tensor cores) with the int8 tile converted to bf16 after its load, the
  smallest ``BLOCK_M`` that holds the batch, and programs that share a weight tile adjacent in launch order.

Graph capture: a launch goes on torch's current stream and allocates only its output (torch's allocator, so a
CUDA graph's pool); Triton compiles a kernel at its first launch, which the correctness check and the timer's
eager warm-up make before any capture.  ``TRITON_INTERPRET=1`` (set before triton is imported) runs the same
kernels on CPU tensors, which is how the tests check them without a GPU.
"""

from __future__ import annotations

import functools
from typing import Any

import triton
import triton.language as tl

# Int8 elements of one GEMV tile: with 4 warps, 64 a thread (four 16-byte loads in flight), few registers.
GEMV_TILE_ELEMENTS = 8192
GEMV_WARPS = 4
# The GEMV grid should cover the multiprocessors this many times, so that every one has loads in flight.
GEMV_WAVES = 2
GEMV_MAX_BLOCK_N = 32
GEMV_MIN_BLOCK_N = 2
GEMV_MAX_BLOCK_K = 2048
# tl.dot's smallest tile side.
DOT_MIN = 16


def _pow2_at_least(value: int) -> int:
    return 1 << max(0, (value - 1).bit_length())


def gemv_config(n: int, k: int, sms: int) -> dict[str, int]:
    """Tile of the M = 1 kernel: the widest ``BLOCK_N`` (≤ 32) whose grid still covers ``GEMV_WAVES`` × ``sms``
    programs, and as much K per iteration as ``GEMV_TILE_ELEMENTS`` allows (at most K, rounded up)."""
    block_n = GEMV_MAX_BLOCK_N
    while block_n > GEMV_MIN_BLOCK_N and -(-n // block_n) < GEMV_WAVES * sms:
        block_n //= 2
    block_k = max(DOT_MIN, min(GEMV_MAX_BLOCK_K, GEMV_TILE_ELEMENTS // block_n, _pow2_at_least(k)))
    return {"BLOCK_N": block_n, "BLOCK_K": block_k, "num_warps": GEMV_WARPS}


def gemm_config(m: int, n: int, k: int, sms: int) -> dict[str, int]:
    """Tile of the M > 1 kernel: ``BLOCK_M`` the smallest of 16..128 that holds M (larger M: 128), ``BLOCK_N``
    the widest of 128..16 whose grid still fills the multiprocessors once (a small batch is memory-bound: the
    grid must keep every multiprocessor reading)."""
    block_m = min(128, max(DOT_MIN, _pow2_at_least(m)))
    tiles_m = -(-m // block_m)
    block_n = 128
    while block_n > DOT_MIN and tiles_m * -(-n // block_n) < sms:
        block_n //= 2
    block_k = 128 if block_m <= 32 else 64
    big = block_m * block_n >= 128 * 128
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": min(block_k, max(DOT_MIN, _pow2_at_least(k))),
            "num_warps": 8 if big else 4, "num_stages": 3 if big else 4}


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, s_ptr, y_ptr, N, K, stride_wn,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_K)
    row_ok = rows < N
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        k = start + cols
        k_ok = k < K
        q = tl.load(w_ptr + rows[:, None] * stride_wn + k[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0)
        x = tl.load(x_ptr + k, mask=k_ok, other=0.0)
        acc += tl.sum(q.to(tl.float32) * x.to(tl.float32)[None, :], axis=1)
    scale = tl.load(s_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + rows, (acc * scale).to(tl.bfloat16), mask=row_ok)


@triton.jit
def _gemm_kernel(x_ptr, w_ptr, s_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, OPERAND: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    # M tiles vary fastest: the programs that read one weight tile run together, so it comes from DRAM once.
    pid_m = pid % tiles_m
    pid_n = pid // tiles_m
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        k = start + ks
        k_ok = k < K
        a = tl.load(x_ptr + rows[:, None] * stride_xm + k[None, :], mask=(rows[:, None] < M) & k_ok[None, :],
                    other=0.0)
        # The weight tile as [BLOCK_K, BLOCK_N]: K is contiguous in memory, so the loads are along K.
        q = tl.load(w_ptr + cols[None, :] * stride_wn + k[:, None], mask=k_ok[:, None] & (cols[None, :] < N),
                    other=0)
        acc = tl.dot(a.to(OPERAND), q.to(OPERAND), acc)
    scale = tl.load(s_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    out = (acc * scale[None, :]).to(tl.bfloat16)
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], out, mask=(rows[:, None] < M) & (cols[None, :] < N))


@functools.cache
def _multiprocessors(torch, index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


# Without a GPU (the interpreter): a grid of a few programs is enough to exercise every mask and tile edge.
INTERPRETED_SMS = 2


def _dot_operand(device_type: str):
    """What ``tl.dot`` multiplies: bf16 on the GPU (exact for x and for |q| ≤ 127).  On CPU tensors (the
    interpreter) fp32 holding the same values, since the interpreter's ``tl.dot`` multiplies bf16 as its raw
    16-bit integers (triton 3.9's ``runtime/interpreter.py``, ``create_dot``): the same products, computed."""
    return tl.bfloat16 if device_type == "cuda" else tl.float32


def _launch(kernel: Any, grid: tuple[int], *args, **meta) -> None:
    """``kernel[grid](*args, **meta)``: the constexpr parameters take plain ints and dtypes (typed ``Any`` because
    triton annotates them ``tl.constexpr``)."""
    kernel[grid](*args, **meta)


def matmul(torch, x, q, scales):
    """y[M, N] bf16 = x[M, K] bf16 · (q[N, K] int8 · scales[N] bf16)ᵀ, in one launch (output allocated here)."""
    m, k = x.shape
    n = q.shape[0]
    if q.shape[1] != k or scales.shape != (n,):
        raise ValueError(f"w8a16: x {tuple(x.shape)}, q {tuple(q.shape)}, scales {tuple(scales.shape)} do not match")
    x, q = x.contiguous(), q.contiguous()
    y = torch.empty((m, n), device=x.device, dtype=torch.bfloat16)
    sms = _multiprocessors(torch, x.device.index or 0) if x.device.type == "cuda" else INTERPRETED_SMS
    if m == 1:
        config = gemv_config(n, k, sms)
        grid = (-(-n // config["BLOCK_N"]),)
        _launch(_gemv_kernel, grid, x, q, scales, y, n, k, q.stride(0), **config)
        return y
    config = gemm_config(m, n, k, sms)
    grid = (-(-m // config["BLOCK_M"]) * -(-n // config["BLOCK_N"]),)
    _launch(_gemm_kernel, grid, x, q, scales, y, m, n, k, x.stride(0), q.stride(0), y.stride(0),
            OPERAND=_dot_operand(x.device.type), **config)
    return y
