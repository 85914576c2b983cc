"""gpubench's w8a16 Triton kernel (what w8a16 runs on CUDA), checked without a GPU: the very kernels run under
Triton's interpreter (``TRITON_INTERPRET=1``, in a child process, since it must be set before triton is imported)
on CPU tensors, against float64 from the dequantized weights; the tiling rules; and what a CUDA device is told."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from microbench.timing import weight_only
from tests.conftest import ROOT

triton = pytest.importorskip("triton", reason="triton is in the test extra: pip install -e '.[test]'")

# M = 1 takes the GEMV kernel, M > 1 the tl.dot one; N and K off every tile edge, and a batch over one M tile; the
# last two split K in two (on the interpreter's two "multiprocessors"), the second split shorter than the first.
SHAPES = [(1, 37, 200), (1, 64, 1024), (1, 5, 16), (3, 48, 200), (20, 70, 130), (130, 40, 48), (3, 48, 1000),
          (40, 70, 1000)]

CHILD = """
import json, sys, torch
from microbench.timing import triton_w8a16, weight_only
out = []
for m, n, k in json.loads(sys.argv[1]):
    g = torch.Generator().manual_seed(m * 1000 + n)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    w = weight_only.make_weight(torch, "w8a16", n, k, "cpu", seed=n + k, keep_integers=True)
    y = triton_w8a16.matmul(torch, x, w.packed, w.scales)
    ref = x.double() @ w.dequantized_rows_f64(torch, torch.arange(n)).T
    wrong = x.double() @ (-w.dequantized_rows_f64(torch, torch.arange(n))).T
    err = lambda a: float((y.double() - a).norm() / a.norm())
    out.append({"shape": [m, n, k], "dtype": str(y.dtype), "out_shape": list(y.shape),
                "finite": bool(torch.isfinite(y).all()), "rel_err": err(ref), "rel_err_wrong": err(wrong)})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def interpreted():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(SHAPES)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_kernels_compute_x_times_the_dequantized_weight(interpreted):
    """Every output written, bf16 [M, N], within bf16 rounding of float64 from the dequantized weights; the
    negated weights (a kernel that got the sign, a row or the scale wrong) are far off."""
    assert [case["shape"] for case in interpreted] == [list(s) for s in SHAPES]
    for case in interpreted:
        m, n, _ = case["shape"]
        assert case["dtype"] == "torch.bfloat16" and case["out_shape"] == [m, n], case
        assert case["finite"] and case["rel_err"] < 5e-3, case
        assert case["rel_err_wrong"] > 1.5, case


def test_the_interpreted_shapes_cover_both_kernels_and_a_split_k():
    from microbench.timing.triton_w8a16 import INTERPRETED_SMS, launch_plan

    plans = [launch_plan(m, n, k, INTERPRETED_SMS) for m, n, k in SHAPES]
    assert {p.kernel for p in plans} == {"gemv", "gemm"}
    assert {p.block_m for p in plans if p.kernel == "gemm"} == {16, 64, 128}
    split = [p for p in plans if p.split_k > 1]
    assert split and all(p.k_per_split * (p.split_k - 1) < p.k < p.k_per_split * p.split_k for p in split)


def test_the_gemv_grid_covers_the_multiprocessors_with_bounded_tiles():
    from microbench.timing.triton_w8a16 import GEMV_TILE_ELEMENTS, GEMV_WAVES, launch_plan

    for n, k in [(4096, 14336), (14336, 4096), (1024, 4096), (28672, 8192), (8192, 28672), (37, 200)]:
        plan = launch_plan(1, n, k, sms=132)
        assert plan.kernel == "gemv" and plan.split_k == 1
        assert plan.block_n * plan.block_k <= GEMV_TILE_ELEMENTS, plan
        assert plan.block_n & (plan.block_n - 1) == 0 and plan.block_k & (plan.block_k - 1) == 0, plan
        if n >= 64 * GEMV_WAVES * 132:  # room for the widest tile: it covers the GPU twice over
            assert plan.grid[0] >= GEMV_WAVES * 132, plan
    # A 4096-wide layer (Llama-3-8B's down_proj) on 132 multiprocessors: 8 rows a program, 512 programs.
    assert launch_plan(1, 4096, 14336, 132).block_n == 8


def test_the_gemm_keeps_wide_tiles_and_fills_the_gpu_by_splitting_k():
    """M > 1: BLOCK_N 128 at every batch, BLOCK_M 16 (a batch up to 16 in one tile), 64, then 128; where the tiles
    are too few for 132 multiprocessors, K is split so that the grid fills at least 90% of them."""
    from microbench.timing.triton_w8a16 import MAX_SPLIT_K, MIN_K_STEPS_PER_SPLIT, launch_plan

    for m, block_m in [(2, 16), (16, 16), (17, 64), (64, 64), (65, 128), (128, 128), (512, 128), (4096, 128)]:
        plan = launch_plan(m, 4096, 14336, 132)
        assert (plan.kernel, plan.block_m, plan.block_n) == ("gemm", block_m, 128), plan
        assert plan.grid[0] >= 0.9 * 132 and 1 <= plan.split_k <= MAX_SPLIT_K, plan
        assert plan.k_per_split >= MIN_K_STEPS_PER_SPLIT * plan.block_k, plan
    assert launch_plan(512, 4096, 14336, 132).split_k == 1  # 4 × 32 tiles fill the GPU alone
    assert launch_plan(128, 4096, 14336, 132).split_k == 4  # 32 tiles: K in four
    # A wide layer fills the GPU with tiles alone, at any batch.
    assert launch_plan(16, 28672, 8192, 132).split_k == 1


def test_a_cuda_device_runs_the_triton_kernel_and_says_so():
    hopper = {"kind": "cuda", "compute_capability": "9.0"}
    assert weight_only.support_problem("w8a16", "gemm", 4096, 14336, hopper) is None
    assert weight_only.kernel_name("w8a16", "cuda") == weight_only.TRITON_W8A16_KERNEL
    assert weight_only.kernel_name("w8a16", "cpu") == "torch._weight_int8pack_mm"  # optimised on the CPU: kept
    turing = {"kind": "cuda", "compute_capability": "7.5"}
    assert "8.0" in weight_only.support_problem("w8a16", "gemm", 4096, 14336, turing)


def test_a_cuda_device_without_triton_is_told_what_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    reason = weight_only.support_problem("w8a16", "gemm", 4096, 14336, {"kind": "cuda", "compute_capability": "9.0"})
    assert "triton is not installed" in reason and "[triton]" in reason
