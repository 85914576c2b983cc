"""Weight-only quantized matmuls on torch: w8a16 and w4a16, as production decode reads its weights.

The weights are random integers (never zeros) with random bf16 scales (and zeros), seeded like every other
operand; the activations are bf16.  The kernels are torch's own:

- ``w8a16``: y = x[M,K] bf16 · (w[N,K] int8 · scales[N] bf16)ᵀ.  On the CPU ``torch._weight_int8pack_mm``, an
  optimised kernel there; on CUDA gpubench's Triton kernel (``triton_w8a16``: fused dequantize and matmul),
  because torch's CUDA kernel of that name is a reference kernel that would stand for the format (that module
  says why, from torch 2.11's source).
- ``w4a16``: torch's tinygemm layout, groups of 128 along K, ``qScaleAndZeros[K/128, N, 2]`` bf16 and
  w = (q − 8)·scale + zero for q in 0..15.  On CUDA ``torch._weight_int4pack_mm`` on the weight packed by
  ``torch._convert_weight_to_int4pack(uint8[N, K/2], innerKTiles)`` (two values a byte, the even K index
  in the high nibble, as torch's own tests pack it); on the CPU ``torch._weight_int4pack_mm_for_cpu`` on
  ``torch._convert_weight_to_int4pack_for_cpu(int32[N, K], innerKTiles)``.

These ops are 2-D and have no ``out=`` form: a GEMV is their M = 1 case and each launch allocates its
output (as a quantized linear layer does).  The correctness check compares sampled outputs with float64
computed from the dequantized weights of copy 0, whose integers are kept for that purpose.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from roofline.core.counting import WEIGHT_ONLY_FORMATS

# What w8a16 runs on CUDA (microbench.timing.triton_w8a16), as every point and report names it.
TRITON_W8A16_KERNEL = "triton int8 weight-only (gpubench)"
# tinygemm packs this many 16-wide K tiles together; 8 gives 16-byte loads (gpt-fast's choice).
INNER_K_TILES = 8
# Scales keep dequantized weights near unit size, like the bf16 weights they stand for.
W8_SCALE_RANGE = (0.5 / 127, 1.5 / 127)
W4_SCALE_RANGE = (0.5 / 8, 1.5 / 8)
W4_ZERO_STD = 0.1


def support_problem(dtype: str, op: str, n: int, k: int, device: dict[str, Any]) -> str | None:
    """Why this device cannot run a weight-only point, or None."""
    if op == "bmm":
        return f"{dtype} is a weight format: bmm stands for decode attention, which reads the KV cache, not weights"
    if dtype == "w8a16":
        return _triton_problem(device) if device["kind"] == "cuda" else None
    group = WEIGHT_ONLY_FORMATS["w4a16"].group_size or 1
    if k % group:
        return f"w4a16 quantizes K in groups of {group}; K = {k} is not a multiple"
    if device["kind"] == "cuda":
        major, minor = (int(x) for x in device["compute_capability"].split("."))
        if major < 8:
            return f"torch's int4 kernel (tinygemm) needs compute capability 8.0 or newer; this GPU is {major}.{minor}"
        if n % 8:
            return "torch._weight_int4pack_mm needs N divisible by 8"
    elif n % 16:
        return "torch._weight_int4pack_mm_for_cpu needs N divisible by 16"
    return None


def _triton_problem(device: dict[str, Any]) -> str | None:
    """Why gpubench's Triton w8a16 kernel cannot run on this CUDA device, or None."""
    major, minor = (int(x) for x in device["compute_capability"].split("."))
    if major < 8:
        return f"the w8a16 Triton kernel multiplies on bf16 tensor cores (compute capability 8.0+); this GPU is " \
               f"{major}.{minor}"
    if importlib.util.find_spec("triton") is None:
        return "w8a16 on CUDA is timed with gpubench's Triton kernel and triton is not installed: " \
               "pip install 'gpubench-roofline[triton]'"
    return None


def kernel_name(dtype: str, device_kind: str) -> str:
    """The kernel a point of ``dtype`` runs on this kind of device: every result and report names it."""
    if dtype == "w8a16":
        return TRITON_W8A16_KERNEL if device_kind == "cuda" else "torch._weight_int8pack_mm"
    return "torch._weight_int4pack_mm" if device_kind == "cuda" else "torch._weight_int4pack_mm_for_cpu"


@dataclass
class QuantizedWeight:
    """One copy of an N×K weight as the kernel reads it, and (copy 0 only) its integers for the check."""

    dtype: str
    packed: Any  # w8a16: int8 [N, K]; w4a16: the kernel's packed int4 tensor
    scales: Any  # w8a16: bf16 [N]; w4a16: bf16 [K/128, N, 2] (scale, zero)
    integers: Any = None  # copy 0: int8 [N, K] (w8a16) or uint8 [N, K] in 0..15 (w4a16)

    @property
    def device(self):
        return self.packed.device

    def matmul(self, torch, x):
        """y[M, N] = x[M, K] · dequantized(W)ᵀ, in bf16."""
        if self.dtype == "w8a16" and x.device.type == "cuda":
            from microbench.timing import triton_w8a16

            return triton_w8a16.matmul(torch, x, self.packed, self.scales)
        if self.dtype == "w8a16":
            return torch._weight_int8pack_mm(x, self.packed, self.scales)
        group = WEIGHT_ONLY_FORMATS["w4a16"].group_size
        if x.device.type == "cuda":
            return torch._weight_int4pack_mm(x, self.packed, group, self.scales)
        return torch._weight_int4pack_mm_for_cpu(x, self.packed, group, self.scales)

    def dequantized_rows_f64(self, torch, rows):
        """float64 [len(rows), K]: the weight rows (output channels) the kernel multiplies by, exactly."""
        if self.integers is None:
            raise ValueError("only copy 0 keeps its integers for the correctness check")
        q = self.integers[rows].double().cpu()
        if self.dtype == "w8a16":
            return q * self.scales[rows].double().cpu()[:, None]
        group = WEIGHT_ONLY_FORMATS["w4a16"].group_size
        per_group = self.scales[:, rows, :].double().cpu()  # [groups, rows, 2]
        scale = per_group[..., 0].T.repeat_interleave(group, dim=1)  # [rows, K]
        zero = per_group[..., 1].T.repeat_interleave(group, dim=1)
        return (q - 8) * scale + zero


def make_weight(torch, dtype: str, n: int, k: int, device: str, seed: int, keep_integers: bool) -> QuantizedWeight:
    """Random integers and scales from ``seed`` (on ``device``'s generator), packed as the kernel wants."""
    generator = torch.Generator(device=device).manual_seed(seed)

    def uniform(shape, low, high):
        return torch.empty(shape, device=device, dtype=torch.float32).uniform_(low, high, generator=generator)

    if dtype == "w8a16":
        q = torch.randint(-127, 128, (n, k), generator=generator, device=device, dtype=torch.int8)
        scales = uniform((n,), *W8_SCALE_RANGE).to(torch.bfloat16)
        return QuantizedWeight(dtype, q, scales, q if keep_integers else None)
    group = WEIGHT_ONLY_FORMATS["w4a16"].group_size or k
    q = torch.randint(0, 16, (n, k), generator=generator, device=device, dtype=torch.uint8)
    scale = uniform((k // group, n), *W4_SCALE_RANGE)
    zero = torch.empty((k // group, n), device=device, dtype=torch.float32).normal_(0.0, W4_ZERO_STD,
                                                                                 generator=generator)
    scales_and_zeros = torch.stack([scale, zero], dim=2).to(torch.bfloat16).contiguous()
    if device.startswith("cuda"):
        two_per_byte = (q[:, ::2] << 4 | q[:, 1::2]).contiguous()
        packed = torch._convert_weight_to_int4pack(two_per_byte, INNER_K_TILES)
    else:
        packed = torch._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), INNER_K_TILES)
    return QuantizedWeight(dtype, packed, scales_and_zeros, q if keep_integers else None)
