"""The cuBLAS calls of the CuPy back end, checked on the CPU: the arguments, replayed by a column-major
emulator of gemmEx / gemmStridedBatchedEx over the tensors' own memory, must compute ``x · wᵀ``; the
pointers are the tensors' own (no copy); anything that would need a copy or a cast is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from microbench.timing import cupy_cublas
from microbench.timing.cupy_cublas import CUBLAS_OP_N, CUBLAS_OP_T, gemm_call


def column_major(memory: dict[int, np.ndarray], pointer: int, rows: int, cols: int, ld: int) -> np.ndarray:
    """A rows×cols column-major view with leading dimension ``ld`` of the buffer starting at ``pointer``."""
    base, buffer = next((p, b) for p, b in memory.items() if p <= pointer < p + b.nbytes)
    offset = (pointer - base) // buffer.itemsize
    assert ld >= rows, "cuBLAS requires ld >= rows of the stored matrix"
    assert offset + (cols - 1) * ld + rows <= buffer.size, "the call reads past the tensor"
    return np.lib.stride_tricks.as_strided(buffer[offset:], shape=(rows, cols),
                                           strides=(buffer.itemsize, ld * buffer.itemsize))


def emulate(call, memory: dict[int, np.ndarray]) -> None:
    """C = op(A) · op(B) for each batch, as cuBLAS defines it (alpha 1, beta 0)."""
    itemsize = next(iter(memory.values())).itemsize
    for g in range(call.batch_count):
        a_rows, a_cols = (call.m, call.k) if call.transa == CUBLAS_OP_N else (call.k, call.m)
        b_rows, b_cols = (call.k, call.n) if call.transb == CUBLAS_OP_N else (call.n, call.k)
        a = column_major(memory, call.a_ptr + g * call.stride_a * itemsize, a_rows, a_cols, call.lda)
        b = column_major(memory, call.b_ptr + g * call.stride_b * itemsize, b_rows, b_cols, call.ldb)
        c = column_major(memory, call.c_ptr + g * call.stride_c * itemsize, call.m, call.n, call.ldc)
        op_a = a if call.transa == CUBLAS_OP_N else a.T
        op_b = b if call.transb == CUBLAS_OP_N else b.T
        c[...] = op_a @ op_b


def tensors(*shapes):
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=generator) for shape in shapes]


def memory_of(*tensors_):
    return {t.data_ptr(): t.numpy().reshape(-1) for t in tensors_}


@pytest.mark.parametrize("batch, n, k", [(1, 8, 16), (5, 12, 7), (16, 64, 32)])
def test_gemm_arguments_compute_x_times_w_transposed(batch, n, k):
    w, x, y = tensors((n, k), (batch, k), (batch, n))
    call = gemm_call("gemm", "fp32", w, x, y)
    assert call.function == "gemmEx" and (call.transa, call.transb) == (CUBLAS_OP_T, CUBLAS_OP_N)
    assert (call.m, call.n, call.k, call.lda, call.ldb, call.ldc) == (n, batch, k, k, k, n)
    emulate(call, memory_of(w, x, y))
    torch.testing.assert_close(y, x @ w.T)


@pytest.mark.parametrize("groups, n, k", [(1, 8, 16), (3, 12, 7), (8, 32, 64)])
def test_bmm_arguments_compute_each_group_with_its_own_strides(groups, n, k):
    w, x, y = tensors((groups, n, k), (groups, 1, k), (groups, 1, n))
    call = gemm_call("bmm", "fp32", w, x, y)
    assert call.function == "gemmStridedBatchedEx" and call.batch_count == groups
    assert (call.stride_a, call.stride_b, call.stride_c) == (n * k, k, n)
    emulate(call, memory_of(w, x, y))
    torch.testing.assert_close(y, torch.bmm(x, w.transpose(1, 2)))


def test_the_pointers_are_the_tensors_own_and_copies_or_casts_are_refused():
    w, x, y = tensors((8, 16), (4, 16), (4, 8))
    call = gemm_call("gemm", "fp32", w, x, y)
    assert (call.a_ptr, call.b_ptr, call.c_ptr) == (w.data_ptr(), x.data_ptr(), y.data_ptr())
    with pytest.raises(ValueError, match="not contiguous"):
        gemm_call("gemm", "fp32", w.t().contiguous().t(), x, y)
    with pytest.raises(ValueError, match="no hidden casts"):
        gemm_call("gemm", "bf16", w, x, y)
    with pytest.raises(ValueError, match="cublasLt"):
        gemm_call("gemm", "fp8", w, x, y)


@pytest.mark.parametrize("dtype, torch_dtype, data_type, compute", [
    ("bf16", torch.bfloat16, cupy_cublas.CUDA_R_16BF, cupy_cublas.CUBLAS_COMPUTE_32F),
    ("fp16", torch.float16, cupy_cublas.CUDA_R_16F, cupy_cublas.CUBLAS_COMPUTE_32F),
    ("fp32", torch.float32, cupy_cublas.CUDA_R_32F, cupy_cublas.CUBLAS_COMPUTE_32F),
    ("tf32", torch.float32, cupy_cublas.CUDA_R_32F, cupy_cublas.CUBLAS_COMPUTE_32F_FAST_TF32),
])
def test_each_dtype_maps_to_its_cuda_type_without_conversion(dtype, torch_dtype, data_type, compute):
    w, x, y = (t.to(torch_dtype) for t in tensors((8, 16), (2, 16), (2, 8)))
    call = gemm_call("gemm", dtype, w, x, y)
    assert (call.data_type, call.compute_type) == (data_type, compute)
    assert dtype in cupy_cublas.kernel_name("gemm", dtype)


def test_alpha_and_beta_are_float32_one_and_zero_in_host_memory():
    import ctypes

    scalars = cupy_cublas.Scalars()
    assert ctypes.c_float.from_address(scalars.alpha).value == 1.0
    assert ctypes.c_float.from_address(scalars.beta).value == 0.0


def test_cupy_cublas_workloads_are_timed_eagerly_and_say_so():
    from types import SimpleNamespace

    from microbench.points.plan import PointSpec
    from microbench.timing import cupy_backend, ops
    from microbench.timing.measure import make_timer

    spec = PointSpec("gemm", "bf16", 4, 64, 64, "cupy")
    base = ops.build_workload(torch, spec, "cpu", 2, 0, ops.WeightCache())
    workload = cupy_backend.CupyWorkload(torch, spec, base.weights, base.inputs, base.outputs, 2)
    workload.prepare_cublas()
    assert [c.a_ptr for c in workload.calls] == [w.data_ptr() for w in base.weights]
    assert workload.eager_only and "gemmEx" in workload.kernel
    session = SimpleNamespace(choice=SimpleNamespace(kind="cuda"), timer="graph", torch=None)
    assert make_timer(session, workload).name == "cuda-eager"
    gemv = cupy_backend.CupyWorkload(torch, PointSpec("gemv", "bf16", 1, 64, 64, "cupy"), [], [], [], 1)
    assert not gemv.eager_only and make_timer(session, gemv).name == "cuda-graph"


def test_both_back_ends_get_the_same_inputs():
    """The cause of the sqrt(2) disagreement on the H200: x was seeded from a label naming the back end."""
    from microbench.points.plan import PointSpec
    from microbench.timing import ops

    ours = ops.build_workload(torch, PointSpec("gemm", "fp32", 4, 32, 64, "cupy"), "cpu", 2, 0, ops.WeightCache())
    theirs = ops.build_workload(torch, PointSpec("gemm", "fp32", 4, 32, 64), "cpu", 2, 0, ops.WeightCache())
    assert all(torch.equal(a, b) for a, b in zip(ours.inputs, theirs.inputs, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(ours.weights, theirs.weights, strict=True))
    assert not torch.equal(ours.inputs[0], ours.inputs[1])  # rotation copies still differ
