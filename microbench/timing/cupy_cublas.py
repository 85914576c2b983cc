"""cuBLAS through CuPy on torch's tensors: ``gemmEx`` for gemm, ``gemmStridedBatchedEx`` for bmm.

Signatures as in CuPy 14 (``cupy_backends/cuda/libs/cublas.pyx``)::

    gemmEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
           computeType, algo)
    gemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb,
                         strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo)

``alpha``/``beta`` are host pointers (the handle's default pointer mode) to float32 values, since every
compute type used here is 32-bit.  The operands are the torch tensors themselves (their ``data_ptr``),
never a copy or a cast: a tensor that is not contiguous, or whose dtype does not match, is an error.

Layout: torch is row-major and cuBLAS column-major.  ``Y[B,N] = X[B,K] · W[N,K]ᵀ`` in row-major is
``Yᵀ(N×B) = W(N×K) · Xᵀ(K×B)`` in column-major, where W's row-major storage is column-major ``Wᵀ`` (K×N,
ld K): so ``transa = T, transb = N, m = N, n = B, k = K, lda = ldb = K, ldc = N``.  bmm is the same per
group (B = 1 row each) with strides N·K, K and N elements.

CuPy refuses cuBLAS calls while a stream is capturing (``setStream`` raises), so these are timed eagerly
on purpose (``eager_only``), and every point and ceiling entry records that timer.
"""

from __future__ import annotations

from dataclasses import dataclass

# cudaDataType_t and cublasComputeType_t values (library_types.h, cublas_api.h).
CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14
CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32 = 68, 77
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
CUBLAS_GEMM_DEFAULT = -1
# dtype -> (storage type of A, B and C, compute type, torch dtype name)
TYPES = {
    "fp32": (CUDA_R_32F, CUBLAS_COMPUTE_32F, "float32"),
    "tf32": (CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, "float32"),
    "fp16": (CUDA_R_16F, CUBLAS_COMPUTE_32F, "float16"),
    "bf16": (CUDA_R_16BF, CUBLAS_COMPUTE_32F, "bfloat16"),
}
UNSUPPORTED = {
    "fp8": "fp8 matmul needs cublasLt (scale pointers, TN-only layouts); CuPy's gemmEx does not offer it",
    "w8a16": "cuBLAS has no weight-only int8 matmul: w8a16 is measured with the torch back end",
    "w4a16": "cuBLAS has no weight-only int4 matmul: w4a16 is measured with the torch back end",
}
COMPUTE_NAMES = {CUBLAS_COMPUTE_32F: "compute 32F", CUBLAS_COMPUTE_32F_FAST_TF32: "compute 32F fast TF32"}


@dataclass(frozen=True)
class GemmCall:
    """The arguments of one cuBLAS call after the handle and the alpha/beta pointers."""

    function: str  # gemmEx | gemmStridedBatchedEx
    transa: int
    transb: int
    m: int
    n: int
    k: int
    a_ptr: int
    lda: int
    stride_a: int
    b_ptr: int
    ldb: int
    stride_b: int
    c_ptr: int
    ldc: int
    stride_c: int
    batch_count: int
    data_type: int
    compute_type: int


def _operand(tensor, dtype_name: str, what: str) -> int:
    """The tensor's own device pointer; anything that would need a copy or a cast is refused."""
    if str(tensor.dtype).removeprefix("torch.") != dtype_name:
        raise ValueError(f"{what} is {tensor.dtype}, expected {dtype_name}: no hidden casts")
    if not tensor.is_contiguous():
        raise ValueError(f"{what} is not contiguous: cuBLAS would need a copy")
    return tensor.data_ptr()


def gemm_call(op: str, dtype: str, w, x, y) -> GemmCall:
    """The cuBLAS call computing ``y = x · wᵀ`` (gemm: w[N,K], x[B,K], y[B,N]; bmm: w[G,N,K], x[G,1,K])."""
    if dtype in UNSUPPORTED:
        raise ValueError(UNSUPPORTED[dtype])
    data_type, compute_type, name = TYPES[dtype]
    a, b, c = _operand(w, name, "W"), _operand(x, name, "x"), _operand(y, name, "y")
    n, k = w.shape[-2], w.shape[-1]
    if op == "gemm":
        rows = x.shape[0]
        return GemmCall("gemmEx", CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, a, k, 0, b, k, 0, c, n, 0, 1,
                        data_type, compute_type)
    groups, rows = x.shape[0], x.shape[1]
    return GemmCall("gemmStridedBatchedEx", CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, a, k, n * k, b, k, rows * k,
                    c, n, rows * n, groups, data_type, compute_type)


def kernel_name(op: str, dtype: str) -> str:
    data_type, compute_type, _ = TYPES[dtype]
    function = "gemmEx" if op == "gemm" else "gemmStridedBatchedEx"
    return f"cuBLAS {function} via CuPy ({dtype}, {COMPUTE_NAMES[compute_type]})"


class Scalars:
    """float32 alpha = 1 and beta = 0 in host memory, alive as long as the workload."""

    def __init__(self):
        import numpy as np

        self.values = np.array([1.0, 0.0], dtype=np.float32)
        self.alpha = self.values.ctypes.data
        self.beta = self.alpha + self.values.itemsize


def launch(call: GemmCall, scalars: Scalars) -> None:
    """One cuBLAS call on CuPy's current stream (the caller makes it torch's)."""
    # CuPy (GPU hosts only) from the compiled modules themselves: ``cupy.cuda.cublas`` is a lazy attribute of the
    # package (its ``__getattr__``), which type checkers read as the package's placeholders (CuPy 14.2), and
    # ``cupy.cuda.device`` is rebound there; the extension modules have no stubs, so their names stay untyped.
    from cupy.cuda.device import get_cublas_handle  # pyright: ignore[reportMissingImports]
    from cupy_backends.cuda.libs import cublas  # pyright: ignore[reportMissingImports]

    handle = get_cublas_handle()
    if call.function == "gemmEx":
        cublas.gemmEx(handle, call.transa, call.transb, call.m, call.n, call.k, scalars.alpha,
                      call.a_ptr, call.data_type, call.lda, call.b_ptr, call.data_type, call.ldb, scalars.beta,
                      call.c_ptr, call.data_type, call.ldc, call.compute_type, CUBLAS_GEMM_DEFAULT)
    else:
        cublas.gemmStridedBatchedEx(handle, call.transa, call.transb, call.m, call.n, call.k, scalars.alpha,
                                    call.a_ptr, call.data_type, call.lda, call.stride_a,
                                    call.b_ptr, call.data_type, call.ldb, call.stride_b, scalars.beta,
                                    call.c_ptr, call.data_type, call.ldc, call.stride_c, call.batch_count,
                                    call.compute_type, CUBLAS_GEMM_DEFAULT)
