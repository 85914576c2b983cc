"""Block-scaled and 4-bit formats on torch: which device has a kernel for them, and the one that is timed.

- ``fp8-block`` (DeepSeek-V3's recipe: e4m3 weights with an fp32 scale per 128×128 block, activations with one per
  1×128 group): ``torch._scaled_mm`` with those scales, which torch routes to cuBLASLt's block-scaled GEMM on
  compute capability 9.0 only (read in torch 2.11.0's ``torch/_meta_registrations.py``: scale_a (M, K/128) and
  scale_b (K/128, N/128), fp32, is the (BlockWise1x128, BlockWise128x128) recipe; torch's own tests pass the 1×128
  scales outer-dim-major, and cuBLASLt wants M a multiple of 4, so the activation rows are padded to it).  The
  activations are quantized once per copy, before timing: the GEMM is what is timed, as a serving engine fuses the
  quantization into the kernel before it.
- ``nvfp4``: torch's NVFP4 path needs Blackwell (compute capability 10.0) and a packed layout: not timed here.
- ``mxfp4``: gpt-oss's experts on Hopper run through Triton kernels outside torch (``matmul_ogs``): not timed here.

A format without a kernel on the device is recorded unsupported, saying so; decode, profile and simulate still
count it analytically (``roofline.core.counting``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from roofline.core.counting import BLOCK_SCALED_FORMATS

KERNEL = "torch._scaled_mm blockwise 1x128/128x128 (cuBLASLt)"
BLOCK = 128
ROW_MULTIPLE = 4  # cuBLASLt's block-scaled GEMM wants M a multiple of 4
FP8_MAX = 448.0  # e4m3's largest finite value


def support_problem(dtype: str, op: str, n: int, k: int, device: dict[str, Any]) -> str | None:
    """Why this device cannot run a point of a block-scaled or MXFP4 format, or None."""
    if op == "bmm":
        return f"{dtype} is a weight format: bmm stands for decode attention, which reads the KV cache, not weights"
    if dtype == "mxfp4":
        return ("mxfp4: its kernels (Triton matmul_ogs, as vLLM runs gpt-oss) are not torch's: counted "
                "analytically only")
    if device["kind"] != "cuda":
        return f"{dtype} needs a GPU's block-scaled tensor cores; the CPU has no kernel for it"
    major, minor = (int(x) for x in device["compute_capability"].split("."))
    if dtype == "nvfp4":
        return f"nvfp4 needs Blackwell (compute capability 10.0); this GPU is {major}.{minor}"
    if (major, minor) != (9, 0):
        return (f"torch._scaled_mm's 1x128/128x128 block scaling runs on compute capability 9.0 only; this GPU is "
                f"{major}.{minor}")
    if n % BLOCK or k % BLOCK:
        return f"fp8-block scales 128x128 weight blocks: N = {n} and K = {k} must be multiples of 128"
    return None


def padded_rows(rows: int) -> int:
    return ROW_MULTIPLE * math.ceil(rows / ROW_MULTIPLE)


@dataclass
class BlockScaledWeight:
    """One copy of an N×K fp8-block weight: e4m3 values and their fp32 scale per 128×128 block."""

    values: Any  # float8_e4m3fn [N, K]
    scales: Any  # fp32 [N/128, K/128]

    @property
    def device(self):
        return self.values.device

    def matmul(self, torch, x):
        """y[M, N] in bf16 from ``x`` = (e4m3 [M', K], fp32 scales [M', K/128] outer-dim-major), M' ≥ M padded."""
        values, scales = x
        return torch._scaled_mm(values, self.values.t(), scale_a=scales, scale_b=self.scales.t(),
                                out_dtype=torch.bfloat16)

    def dequantized_rows_f64(self, torch, rows):
        """float64 [len(rows), K]: the weight rows the kernel multiplies by, exactly."""
        values = self.values[rows].double().cpu()
        scales = self.scales[rows // BLOCK].double().cpu().repeat_interleave(BLOCK, dim=1)
        return values * scales[:, : values.shape[1]]


def quantize(torch, x, group_rows: int, group_cols: int):
    """e4m3 values and one fp32 scale per ``group_rows × group_cols`` block of a 2-D float tensor (amax / 448)."""
    rows, cols = x.shape
    blocks = x.float().reshape(rows // group_rows, group_rows, cols // group_cols, group_cols)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / FP8_MAX
    values = (blocks / scale[:, None, :, None]).reshape(rows, cols).to(torch.float8_e4m3fn)
    return values, scale


def make_weight(torch, n: int, k: int, device: str, seed: int) -> BlockScaledWeight:
    generator = torch.Generator(device=device).manual_seed(seed)
    dense = torch.randn((n, k), generator=generator, device=device, dtype=torch.float32)
    values, scales = quantize(torch, dense, BLOCK, BLOCK)
    return BlockScaledWeight(values, scales)


def make_input(torch, rows: int, k: int, device: str, seed: int):
    """Activations as the GEMM reads them: e4m3 rows (padded to a multiple of 4) and their 1×128 scales, stored
    outer-dim-major as torch's tests pass them."""
    generator = torch.Generator(device=device).manual_seed(seed)
    dense = torch.randn((padded_rows(rows), k), generator=generator, device=device, dtype=torch.float32)
    values, scales = quantize(torch, dense, 1, BLOCK)
    return values, scales.t().contiguous().t()


def dequantized_input_f64(x, rows: int):
    values, scales = x
    return values[:rows].double().cpu() * scales[:rows].double().cpu().repeat_interleave(BLOCK, dim=1)


def is_block_scaled(dtype: str) -> bool:
    return dtype in BLOCK_SCALED_FORMATS or dtype == "mxfp4"
