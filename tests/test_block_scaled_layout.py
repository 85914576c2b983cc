"""fp8-block's 128×128 weight scales laid out as torch 2.11 checks them and cuBLASLt reads them (scale_b
[round_up(K/128, 4), N/128], strides (1, that)): layout and stride arithmetic only, on the CPU, for DeepSeek-V3's
K = 7168 (K/128 = 56) and K/128 = 57, 64, 112."""

from __future__ import annotations

import pytest

from microbench.timing import block_scaled
from microbench.timing.block_scaled import ScaleLayout, weight_scale_layout, weight_scale_problem

N = 2048  # 16 blocks of output channels
K_BLOCKS = (56, 57, 64, 112)
HOPPER = {"kind": "cuda", "compute_capability": "9.0"}


def padded(k_blocks: int) -> int:
    return 4 * -(-k_blocks // 4)


@pytest.mark.parametrize("k_blocks", K_BLOCKS)
def test_the_weight_scales_are_near_inner_dim_major_with_16_byte_aligned_strides(k_blocks):
    layout = weight_scale_layout(N, 128 * k_blocks)
    assert layout.shape == (padded(k_blocks), N // 128) and layout.strides == (1, padded(k_blocks))
    assert layout.storage == (N // 128, padded(k_blocks))
    assert (4 * layout.strides[1]) % 16 == 0  # fp32: every row of 128-row blocks starts on 16 bytes
    assert weight_scale_problem(N, 128 * k_blocks, layout) is None


@pytest.mark.parametrize("k_blocks", K_BLOCKS)
def test_a_contiguous_block_scale_tensor_passes_only_where_k_over_128_is_a_multiple_of_4(k_blocks):
    """[N/128, K/128] contiguous, passed transposed (what this module did): right only when no padding is due."""
    contiguous = ScaleLayout(shape=(k_blocks, N // 128), strides=(1, k_blocks), storage=(N // 128, k_blocks))
    problem = weight_scale_problem(N, 128 * k_blocks, contiguous)
    if k_blocks % 4:
        assert problem and f"[{padded(k_blocks)}, {N // 128}]" in problem and "16-byte aligned" in problem
    else:
        assert problem is None


def test_a_single_block_row_leaves_the_second_stride_free():
    layout = ScaleLayout(shape=(padded(57), 1), strides=(1, 1), storage=(1, padded(57)))
    assert weight_scale_problem(128, 128 * 57, layout) is None
    assert weight_scale_problem(256, 128 * 57, ScaleLayout((padded(57), 2), (1, 57), (2, 57))) is not None


@pytest.mark.parametrize("k_blocks", K_BLOCKS)
def test_every_k_of_whole_blocks_is_supported_on_hopper(k_blocks):
    torch = pytest.importorskip("torch")
    if getattr(torch.nn.functional, "scaled_mm", None) is None:
        pytest.skip(f"torch {torch.__version__} has no torch.nn.functional.scaled_mm")
    assert block_scaled.support_problem("fp8-block", "gemm", N, 128 * k_blocks, HOPPER) is None


@pytest.mark.parametrize("k_blocks", (57, 64))
def test_the_weights_scales_are_stored_in_that_layout_and_read_back_exactly(k_blocks):
    """The tensors make_weight builds (on the CPU: e4m3 and fp32 exist there) have the layout's shape and strides,
    and the scales the check reads back are the blocks' own."""
    torch = pytest.importorskip("torch")
    n, k = 256, 128 * k_blocks
    weight = block_scaled.make_weight(torch, n, k, "cpu", seed=3)
    layout = weight_scale_layout(n, k)
    scale_b = weight.scale_storage.t()
    assert tuple(scale_b.shape) == layout.shape and scale_b.stride() == layout.strides
    assert weight.scale_storage.data_ptr() % 16 == 0
    dense = torch.randn((n, k), generator=torch.Generator().manual_seed(3), dtype=torch.float32)
    _, scales = block_scaled.quantize(torch, dense, 128, 128)
    assert torch.equal(weight.scales, scales)
    rows = torch.tensor([0, 127, 128, 255])
    exact = weight.dequantized_rows_f64(torch, rows)
    assert torch.allclose(exact, dense[rows].double(), rtol=0.07, atol=1e-3 * float(dense.abs().max()))


@pytest.mark.parametrize("k_blocks", K_BLOCKS)
def test_the_installed_torchs_own_check_accepts_the_call_on_meta_tensors(k_blocks):
    """The module's call, as made on the GPU, given meta tensors of the same shapes and strides: torch runs its
    shape and stride checks for scaled_mm (those of the CUDA kernel: torch/_meta_registrations.py) and nothing
    else.  The unpadded layout is refused where K/128 is not a multiple of 4, as the check says it must be."""
    torch = pytest.importorskip("torch")
    functional = torch.nn.functional
    if getattr(functional, "scaled_mm", None) is None:
        pytest.skip(f"torch {torch.__version__} has no torch.nn.functional.scaled_mm")
    m, k = block_scaled.padded_rows(13), 128 * k_blocks
    x = torch.empty((m, k), device="meta", dtype=torch.float8_e4m3fn)
    x_scales = torch.empty((k_blocks, m), device="meta").t()  # outer-dim-major, as make_input lays them out
    values = torch.empty((N, k), device="meta", dtype=torch.float8_e4m3fn)
    storage = torch.empty(weight_scale_layout(N, k).storage, device="meta")
    y = block_scaled.BlockScaledWeight(values, storage).matmul(torch, (x, x_scales))
    assert tuple(y.shape) == (m, N) and y.dtype == torch.bfloat16
    unpadded = torch.empty((N // 128, k_blocks), device="meta")
    if k_blocks % 4:
        with pytest.raises(RuntimeError, match="L4"):
            block_scaled.BlockScaledWeight(values, unpadded).matmul(torch, (x, x_scales))
