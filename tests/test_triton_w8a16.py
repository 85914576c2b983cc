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

# M = 1 takes the GEMV kernel, M > 1 the tl.dot one; N and K off every tile edge, and a batch over one M tile.
SHAPES = [(1, 37, 200), (1, 64, 1024), (1, 5, 16), (3, 48, 200), (20, 70, 130), (130, 40, 48)]

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


def test_the_gemv_grid_covers_the_multiprocessors_with_bounded_tiles():
    from microbench.timing.triton_w8a16 import GEMV_TILE_ELEMENTS, GEMV_WAVES, gemv_config

    for n, k in [(4096, 14336), (14336, 4096), (1024, 4096), (28672, 8192), (8192, 28672), (37, 200)]:
        config = gemv_config(n, k, sms=132)
        block_n, block_k = config["BLOCK_N"], config["BLOCK_K"]
        assert block_n * block_k <= GEMV_TILE_ELEMENTS, config
        assert block_n & (block_n - 1) == 0 and block_k & (block_k - 1) == 0, config
        if n >= 64 * GEMV_WAVES * 132:  # room for the widest tile: it covers the GPU twice over
            assert -(-n // block_n) >= GEMV_WAVES * 132, config
    # A 4096-wide layer (Llama-3-8B's down_proj) on 132 multiprocessors: 8 rows a program, 512 programs.
    assert gemv_config(4096, 14336, 132)["BLOCK_N"] == 8


def test_the_gemm_tile_holds_a_small_batch_and_fills_the_gpu():
    from microbench.timing.triton_w8a16 import gemm_config

    assert gemm_config(2, 4096, 14336, 132)["BLOCK_M"] == 16  # tl.dot's smallest tile: one tile holds batch 2..16
    assert gemm_config(48, 4096, 14336, 132)["BLOCK_M"] == 64
    assert gemm_config(4096, 4096, 14336, 132)["BLOCK_M"] == 128
    small = gemm_config(16, 4096, 14336, 132)
    assert -(-4096 // small["BLOCK_N"]) >= 132, small  # a memory-bound batch keeps every multiprocessor reading


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
