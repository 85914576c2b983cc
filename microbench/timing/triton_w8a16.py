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

The kernels read each weight byte along K (its contiguous axis), dequantize it in registers (|q| ≤ 127 is exact
in bf16 and fp32), accumulate in fp32 and apply the per-channel scale once at the end (y = (x·qᵀ)·s, the same
product as x·(q·s)ᵀ).  ``launch_plan(m, n, k, sms)`` says which kernel runs, its tiles and its grid; the launch is
exactly that plan:

- M = 1 (GEMV): each program owns ``BLOCK_N`` output channels and multiplies their ``[BLOCK_N, BLOCK_K]`` int8
  tile elementwise by x, summing along K; no tensor cores (a GEMV has nothing for them), wide tiles so that each
  thread has several 16-byte loads in flight, and ``BLOCK_N`` small enough that the grid covers the
  multiprocessors at least twice over.  Every program reads all of x, K·2 bytes against its ``BLOCK_N``·K of
  weights: 2 / ``BLOCK_N`` more traffic (a quarter at ``BLOCK_N`` = 8), from L2, where x stays.
- M > 1: a GEMM of ``tl.dot`` tiles (bf16 tensor cores), each program dequantizing its weight tile once for all
  ``BLOCK_M`` rows of its x tile.  Each program reads its x tile's rows along its share of K, so the activations are
  read once per column of tiles (N / ``BLOCK_N`` times) and the weights once per row of tiles: ``BLOCK_N`` stays at
  128 whatever the batch (shrinking it to fill the GPU, as this kernel once did, made every program re-read all
  of x: 940 MB from L2 per launch at M = 128 on 4096×14336, against 59 MB of weights), and ``BLOCK_M`` is 16
  (tl.dot's smallest, one tile for a batch up to 16), 64, or 128 from M = 65.  Where those tiles are fewer than the
  multiprocessors, K is split among programs (``SPLIT_K``) instead: each writes an fp32 partial product and a second
  launch sums them, scales and rounds to bf16.  The M tiles vary fastest in launch order, so the programs that
  share a weight tile run together and it comes from DRAM once.

Graph capture: a launch goes on torch's current stream and allocates only its output and a split K's partial
products (torch's allocator, so a CUDA graph's pool); Triton compiles a kernel at its first launch, which the
correctness check and the timer's eager warm-up make before any capture.  ``TRITON_INTERPRET=1`` (set before
triton is imported) runs the same kernels on CPU tensors, which is how the tests check them without a GPU.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
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
# tl.dot's smallest tile side; up to this batch one such tile holds every row.
DOT_MIN = 16
# The GEMM's output tile: 128 channels wide at every batch (each column of tiles reads all of x once more).
GEMM_BLOCK_N = 128
# BLOCK_M beyond DOT_MIN: 64 up to this batch, 128 above (per byte it reads from L2, a 64×128 tile does 64 FLOP,
# a 128×128 one 85: the compute-bound batches need the larger).
GEMM_MID_BLOCK_M = 64
GEMM_MAX_BLOCK_M = 128
# Splits of K: at most this many partial products per output, and each split at least this many BLOCK_K steps,
# about the software pipeline's depth (num_stages tiles in flight), so that a split program is not all ramp.
MAX_SPLIT_K = 8
MIN_K_STEPS_PER_SPLIT = 4
# The reduction's elements per program.
REDUCE_BLOCK = 1024


@dataclass(frozen=True)
class LaunchPlan:
    """How one w8a16 product is launched: the kernel, its tile, how K is split, and its grid (one dimension, M tiles
    fastest, then N tiles, then splits of K)."""

    kernel: str  # "gemv" (M = 1) or "gemm"
    m: int
    n: int
    k: int
    block_m: int
    block_n: int
    block_k: int
    split_k: int
    num_warps: int
    num_stages: int

    @property
    def tiles_m(self) -> int:
        return -(-self.m // self.block_m)

    @property
    def tiles_n(self) -> int:
        return -(-self.n // self.block_n)

    @property
    def k_per_split(self) -> int:
        """K each split covers: a whole number of ``BLOCK_K`` steps (the last split may cover less)."""
        steps = -(-self.k // self.block_k)
        return -(-steps // self.split_k) * self.block_k

    @property
    def grid(self) -> tuple[int]:
        return (self.tiles_m * self.tiles_n * self.split_k,)

    @property
    def reduce_grid(self) -> tuple[int] | None:
        """The second launch's grid (summing the splits), or None without one."""
        return (-(-self.m * self.n // REDUCE_BLOCK),) if self.split_k > 1 else None


def _pow2_at_least(value: int) -> int:
    return 1 << max(0, (value - 1).bit_length())


def _gemv_plan(n: int, k: int, sms: int) -> LaunchPlan:
    """The widest ``BLOCK_N`` (≤ 32) whose grid still covers ``GEMV_WAVES`` × ``sms`` programs, and as much K per
    iteration as ``GEMV_TILE_ELEMENTS`` allows (at most K, rounded up)."""
    block_n = GEMV_MAX_BLOCK_N
    while block_n > GEMV_MIN_BLOCK_N and -(-n // block_n) < GEMV_WAVES * sms:
        block_n //= 2
    block_k = max(DOT_MIN, min(GEMV_MAX_BLOCK_K, GEMV_TILE_ELEMENTS // block_n, _pow2_at_least(k)))
    return LaunchPlan("gemv", 1, n, k, 1, block_n, block_k, 1, GEMV_WARPS, 1)


def _wave_use(programs: int, sms: int) -> float:
    """The share of the multiprocessors' program slots the grid's waves use (one program a multiprocessor)."""
    return programs / (-(-programs // sms) * sms)


def _split_k(tiles: int, k_steps: int, sms: int) -> int:
    """Where the tiles are fewer than the multiprocessors, the fewest splits of K whose grid uses the most of the
    GPU's waves, within ``MAX_SPLIT_K`` and with at least ``MIN_K_STEPS_PER_SPLIT`` steps of K each; else none (a
    split's partial products cost traffic, which a grid of a wave or more does not need to pay)."""
    if tiles >= sms:
        return 1
    best, best_use = 1, _wave_use(tiles, sms)
    for splits in range(2, MAX_SPLIT_K + 1):
        if k_steps < splits * MIN_K_STEPS_PER_SPLIT:
            break
        use = _wave_use(tiles * splits, sms)
        if use > best_use + 1e-9:
            best, best_use = splits, use
    return best


def launch_plan(m: int, n: int, k: int, sms: int) -> LaunchPlan:
    """The launch of y[M, N] = x[M, K] · (q[N, K] · s[N])ᵀ on a GPU of ``sms`` multiprocessors (module docstring)."""
    if m == 1:
        return _gemv_plan(n, k, sms)
    block_m = DOT_MIN if m <= DOT_MIN else GEMM_MID_BLOCK_M if m <= GEMM_MID_BLOCK_M else GEMM_MAX_BLOCK_M
    block_k = min(128 if block_m == DOT_MIN else 64, max(DOT_MIN, _pow2_at_least(k)))
    tiles = -(-m // block_m) * -(-n // GEMM_BLOCK_N)
    split = _split_k(tiles, -(-k // block_k), sms)
    big = block_m * GEMM_BLOCK_N >= 128 * 128
    return LaunchPlan("gemm", m, n, k, block_m, GEMM_BLOCK_N, block_k, split, 8 if big else 4, 3 if big else 4)


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
def _gemm_kernel(x_ptr, w_ptr, s_ptr, y_ptr, p_ptr, M, N, K, K_PER_SPLIT, stride_xm, stride_wn, stride_ym,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
                 OPERAND: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    # M tiles vary fastest: the programs that read one weight tile run together, so it comes from DRAM once.
    pid_m = pid % tiles_m
    pid_n = (pid // tiles_m) % tiles_n
    pid_k = pid // (tiles_m * tiles_n)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    k_first = pid_k * K_PER_SPLIT
    k_end = tl.minimum(K, k_first + K_PER_SPLIT)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(k_first, k_end, BLOCK_K):
        k = start + ks
        k_ok = k < k_end
        a = tl.load(x_ptr + rows[:, None] * stride_xm + k[None, :], mask=(rows[:, None] < M) & k_ok[None, :],
                    other=0.0)
        # The weight tile as [BLOCK_K, BLOCK_N]: K is contiguous in memory, so the loads are along K; it is
        # dequantized here once, for every row of the x tile.
        q = tl.load(w_ptr + cols[None, :] * stride_wn + k[:, None], mask=k_ok[:, None] & (cols[None, :] < N),
                    other=0)
        acc = tl.dot(a.to(OPERAND), q.to(OPERAND), acc)
    inside = (rows[:, None] < M) & (cols[None, :] < N)
    if SPLIT_K == 1:
        scale = tl.load(s_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        out = (acc * scale[None, :]).to(tl.bfloat16)
        tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], out, mask=inside)
    else:  # this split's partial product; _reduce_kernel sums the splits and scales
        tl.store(p_ptr + pid_k * M * N + rows[:, None] * N + cols[None, :], acc, mask=inside)


@triton.jit
def _reduce_kernel(p_ptr, s_ptr, y_ptr, M, N, stride_ym, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < M * N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for split in range(SPLIT_K):
        acc += tl.load(p_ptr + split * M * N + offsets, mask=inside, other=0.0)
    rows = offsets // N
    cols = offsets % N
    scale = tl.load(s_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    tl.store(y_ptr + rows * stride_ym + cols, (acc * scale).to(tl.bfloat16), mask=inside)


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
    """y[M, N] bf16 = x[M, K] bf16 · (q[N, K] int8 · scales[N] bf16)ᵀ, as ``launch_plan`` says (output, and a split
    K's partial products, allocated here: on torch's allocator, so a CUDA graph's pool)."""
    m, k = x.shape
    n = q.shape[0]
    if q.shape[1] != k or scales.shape != (n,):
        raise ValueError(f"w8a16: x {tuple(x.shape)}, q {tuple(q.shape)}, scales {tuple(scales.shape)} do not match")
    x, q = x.contiguous(), q.contiguous()
    y = torch.empty((m, n), device=x.device, dtype=torch.bfloat16)
    sms = _multiprocessors(torch, x.device.index or 0) if x.device.type == "cuda" else INTERPRETED_SMS
    plan = launch_plan(m, n, k, sms)
    if plan.kernel == "gemv":
        _launch(_gemv_kernel, plan.grid, x, q, scales, y, n, k, q.stride(0), BLOCK_N=plan.block_n,
                BLOCK_K=plan.block_k, num_warps=plan.num_warps)
        return y
    partials = torch.empty((plan.split_k, m, n), device=x.device, dtype=torch.float32) if plan.split_k > 1 else y
    _launch(_gemm_kernel, plan.grid, x, q, scales, y, partials, m, n, k, plan.k_per_split, x.stride(0), q.stride(0),
            y.stride(0), BLOCK_M=plan.block_m, BLOCK_N=plan.block_n, BLOCK_K=plan.block_k, SPLIT_K=plan.split_k,
            OPERAND=_dot_operand(x.device.type), num_warps=plan.num_warps, num_stages=plan.num_stages)
    if plan.reduce_grid is not None:
        _launch(_reduce_kernel, plan.reduce_grid, partials, scales, y, m, n, y.stride(0), SPLIT_K=plan.split_k,
                BLOCK=REDUCE_BLOCK)
    return y
