"""Block-scaled and 4-bit formats on torch: which device has a kernel for them, and the one that is timed.

- ``fp8-block`` (DeepSeek-V3's recipe: e4m3 weights with an fp32 scale per 128×128 block, activations with one per
  1×128 group): ``torch.nn.functional.scaled_mm`` with those scales and their recipes named (BlockWise1x128,
  BlockWise128x128), which torch routes to cuBLASLt's block-scaled GEMM on compute capability 9.0 only.  The
  scales are laid out as cuBLASLt reads them (torch 2.11's check, read in its ``torch/_meta_registrations.py``,
  ``_check_scaled_mm_sizes_v2``, which mirrors ``_scaled_block1x128_block128x128`` in ``aten/src/ATen/native/cuda/
  ScaledBlas.cpp``, and PR 166752 that brought it: a layout torch accepted before was read wrong by cuBLASLt
  whenever K/128 is not a multiple of 4): the activations' scale_a [M, K/128] with strides (1, M), M padded to a
  multiple of 4 (16-byte aligned), and the weights' scale_b [L4, N/128] with strides (1, L4), L4 = K/128 rounded
  up to a multiple of 4: each 128-row block of the weight keeps its K/128 scales in a row of L4 floats, the rest
  padding (``weight_scale_layout``).  ``support_problem`` checks that layout against that rule for the point's
  shape.  The activations are quantized once per copy, before timing: the GEMM is what is timed, as a serving
  engine fuses the quantization into the kernel before it.
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

KERNEL = "torch.nn.functional.scaled_mm blockwise 1x128/128x128 (cuBLASLt)"
BLOCK = 128
ROW_MULTIPLE = 4  # cuBLASLt's block-scaled GEMM wants M a multiple of 4: scale_a's stride of M fp32 16-byte aligned
SCALE_ALIGN = 4  # fp32 scales a 16-byte aligned stride holds
FP8_MAX = 448.0  # e4m3's largest finite value


@dataclass(frozen=True)
class ScaleLayout:
    """A 2-D scale tensor as a view of its storage: the view's shape and strides (elements), the storage's shape."""

    shape: tuple[int, int]
    strides: tuple[int, int]
    storage: tuple[int, int]


def weight_scale_layout(n: int, k: int) -> ScaleLayout:
    """scale_b of an N×K weight as this module passes it: [L4, N/128] with strides (1, L4), the transposed view of a
    contiguous [N/128, L4] whose first K/128 columns hold the scales (L4: K/128 rounded up to a multiple of 4)."""
    k_blocks = -(-k // BLOCK)
    padded = SCALE_ALIGN * -(-k_blocks // SCALE_ALIGN)
    return ScaleLayout(shape=(padded, -(-n // BLOCK)), strides=(1, padded), storage=(-(-n // BLOCK), padded))


def weight_scale_problem(n: int, k: int, layout: ScaleLayout) -> str | None:
    """Why torch 2.11 would refuse (or cuBLASLt misread) ``layout`` as scale_b of an N×K weight under the
    BlockWise128x128 recipe, or None: shape [round_up(K/128, 4), N/128], strides (1, round_up(K/128, 4)), the
    second stride free where N/128 is 1 (module docstring)."""
    k_blocks, n_blocks = -(-k // BLOCK), -(-n // BLOCK)
    padded = SCALE_ALIGN * -(-k_blocks // SCALE_ALIGN)
    wanted = f"[{padded}, {n_blocks}] with strides (1, {padded}): K/128 = {k_blocks} scales padded to a multiple " \
             f"of {SCALE_ALIGN} (16-byte aligned fp32), near-inner-dim-major"
    if layout.shape != (padded, n_blocks):
        return f"fp8-block's 128x128 weight scales must be {wanted}; this layout's shape is {list(layout.shape)}"
    if layout.strides[0] != 1 or (n_blocks > 1 and layout.strides[1] != padded):
        return f"fp8-block's 128x128 weight scales must be {wanted}; this layout's strides are {layout.strides}"
    return None


def support_problem(dtype: str, op: str, n: int, k: int, device: dict[str, Any]) -> str | None:
    """Why this device cannot run a point of a block-scaled or MXFP4 format, or None."""
    if op == "bmm":
        return f"{dtype} is a weight format: bmm stands for decode attention, which reads the KV cache, not weights"
    if dtype == "mxfp4":
        return ("mxfp4: its kernels (Triton matmul_ogs, as vLLM runs gpt-oss) are not torch's: counted "
                "analytically only")
    if dtype in ANALYTIC_ONLY:
        return f"{dtype}: {ANALYTIC_ONLY[dtype]}"
    if device["kind"] != "cuda":
        return f"{dtype} needs a GPU's block-scaled tensor cores; the CPU has no kernel for it"
    major, minor = (int(x) for x in device["compute_capability"].split("."))
    if dtype == "nvfp4":
        return f"nvfp4 needs Blackwell (compute capability 10.0); this GPU is {major}.{minor}"
    if (major, minor) != (9, 0):
        return (f"torch's 1x128/128x128 block scaling runs on compute capability 9.0 only; this GPU is "
                f"{major}.{minor}")
    if n % BLOCK or k % BLOCK:
        return f"fp8-block scales 128x128 weight blocks: N = {n} and K = {k} must be multiples of 128"
    import torch

    if getattr(torch.nn.functional, "scaled_mm", None) is None:
        return f"fp8-block is timed with torch.nn.functional.scaled_mm, which torch {torch.__version__} does not have"
    return weight_scale_problem(n, k, weight_scale_layout(n, k))


def padded_rows(rows: int) -> int:
    return ROW_MULTIPLE * math.ceil(rows / ROW_MULTIPLE)


@dataclass
class BlockScaledWeight:
    """One copy of an N×K fp8-block weight: e4m3 values and their fp32 scale per 128×128 block, the scales stored
    as cuBLASLt reads them (``weight_scale_layout``)."""

    values: Any  # float8_e4m3fn [N, K]
    scale_storage: Any  # fp32 [N/128, L4]: row i holds the K/128 scales of the weight's rows 128·i .. 128·i + 127

    @property
    def device(self):
        return self.values.device

    @property
    def scales(self):
        """fp32 [N/128, K/128]: the scale of each 128×128 block."""
        return self.scale_storage[:, : -(-self.values.shape[1] // BLOCK)]

    def matmul(self, torch, x):
        """y[M, N] in bf16 from ``x`` = (e4m3 [M', K], fp32 scales [M', K/128] outer-dim-major), M' ≥ M padded."""
        values, scales = x
        recipe = torch.nn.functional.ScalingType
        return torch.nn.functional.scaled_mm(values, self.values.t(), scales, recipe.BlockWise1x128,
                                             self.scale_storage.t(), recipe.BlockWise128x128,
                                             output_dtype=torch.bfloat16)

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
    layout = weight_scale_layout(n, k)
    storage = torch.zeros(layout.storage, device=device, dtype=torch.float32)  # the padding is never read
    storage[:, : scales.shape[1]] = scales
    return BlockScaledWeight(values, storage)


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
    """Whether a format's points go through this module (block-scaled ones, and the formats no kernel of gpubench
    times, which it records as unsupported, saying why)."""
    return dtype in BLOCK_SCALED_FORMATS or dtype == "mxfp4" or dtype in ANALYTIC_ONLY


# Weight-only formats read from checkpoints that no kernel here times: counted analytically only.
ANALYTIC_ONLY = {"w4a16-g32": "compressed-tensors' symmetric int4 in groups of 32 (Kimi-K2.5's experts) has no "
                              "kernel in torch or in gpubench: counted analytically only"}
