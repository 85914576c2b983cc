"""GPU tests of the mixture-of-experts and block-scaled paths: run with ``pytest -m gpu`` on a CUDA host (an H100 or
H200 for fp8-block); skipped elsewhere, saying why.  Never faked."""

from __future__ import annotations

import pytest

from microbench.points.plan import PointSpec
from tests.conftest import requires_gpu
from tests.test_gpu import cuda_session

pytestmark = [pytest.mark.gpu, requires_gpu]


@pytest.mark.parametrize("routing", ["balanced", "zipf:1.2"])
def test_a_grouped_gemm_of_qwen3_experts_is_correct_and_reads_only_its_touched_experts(routing):
    from microbench.timing.measure import measure_point

    session = cuda_session()
    point = measure_point(session, PointSpec("grouped", "bf16", 64, 768, 2048, "torch", 128, 8, routing))
    assert point.ok and point.correct, point.reason
    assert point.kernel in ("torch.nn.functional.grouped_mm", "torch._grouped_mm", "torch.matmul per expert")
    assert point.touched <= min(128, 64 * 8)
    # it reads at most the touched experts' weights and its rows: its time is at least those bytes at 8 TB/s
    assert point.stats.median_s >= point.bytes / 8e12


def test_an_fp16_grouped_point_names_torchs_fallback_and_is_timed_eagerly():
    """torch 2.11 runs its fused grouped GEMM for bf16 only; fp16 takes the fallback, whose copy of the offsets to
    the host synchronises (microbench/timing/grouped.py): the point says so and is timed eagerly, not in a graph."""
    from microbench.timing.grouped import EAGER, FALLBACK
    from microbench.timing.measure import measure_point

    session = cuda_session()
    point = measure_point(session, PointSpec("grouped", "fp16", 64, 768, 2048, "torch", 128, 8, "balanced"))
    assert point.ok and point.correct, (point.reason, point.correctness)
    if point.kernel != "torch.matmul per expert":
        assert FALLBACK in point.kernel and EAGER in point.kernel, point.kernel
        assert point.timer == "cuda-eager" and not point.eager_samples_s


@pytest.mark.parametrize("k", [2048, 57 * 128])
def test_fp8_block_runs_where_torch_has_the_kernel_and_says_why_elsewhere(k):
    """K/128 = 16, and 57: the weight scales' rows padded to 60 (microbench/timing/block_scaled.py), which cuBLASLt
    must read as the blocks' scales, or the float64 check fails."""
    from microbench.timing.block_scaled import KERNEL
    from microbench.timing.measure import measure_point

    session = cuda_session()
    point = measure_point(session, PointSpec("gemm", "fp8-block", 16, 7168, k))
    if session.device["compute_capability"] == "9.0":
        assert point.ok and point.correct, (point.reason, point.correctness)
        assert point.kernel == KERNEL
    else:
        assert point.status == "unsupported" and "9.0" in point.reason
