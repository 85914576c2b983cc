// GEMV y[N] = W[N,K] · x[K], W row-major as nn.Linear stores it. K is counted in 16-byte vectors (K16).
// Memory-bound by design: coalesced 16-byte streaming loads of W, UNROLL loads in flight per thread,
// fp32 accumulation, one warp per row. Split-K spreads a row over SPLITS warps when N alone cannot fill
// the GPU; a second kernel sums the partials and converts.
#include "common.cuh"

#define UNROLL 4

template <int KIND>
__device__ __forceinline__ float row_dot(const uint4* __restrict__ row, const uint4* __restrict__ x, long long begin,
                                         long long end, int lane) {
  float acc = 0.f;
  long long i = begin + lane;
  for (; i + 32 * (UNROLL - 1) < end; i += 32 * UNROLL) {
    uint4 w[UNROLL], v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      w[u] = load_stream(row + i + 32 * u);
      v[u] = __ldg(x + i + 32 * u);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc += dot16<KIND>(w[u], v[u]);
  }
  for (; i < end; i += 32) acc += dot16<KIND>(load_stream(row + i), __ldg(x + i));
  return warp_sum(acc);
}

template <int KIND>
__device__ __forceinline__ void gemv_warp(const uint4* __restrict__ w, const uint4* __restrict__ x, void* y, int n,
                                          long long k16) {
  const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (row >= n) return;
  const float acc = row_dot<KIND>(w + row * k16, x, 0, k16, lane);
  if (lane == 0) store<KIND>(y, row, acc);
}

template <int KIND>
__device__ __forceinline__ void gemv_splitk(const uint4* __restrict__ w, const uint4* __restrict__ x,
                                            float* __restrict__ partial, int n, long long k16) {
  const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (row >= n) return;
  const long long chunk = (k16 + gridDim.y - 1) / gridDim.y;
  const long long begin = blockIdx.y * chunk;
  const long long end = begin + chunk < k16 ? begin + chunk : k16;
  const float acc = row_dot<KIND>(w + row * k16, x, begin, end, lane);
  if (lane == 0) partial[(long long)blockIdx.y * n + row] = acc;
}

template <int KIND>
__device__ __forceinline__ void splitk_finish(const float* __restrict__ partial, void* y, int n, int splits) {
  const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= n) return;
  float acc = 0.f;
  for (int s = 0; s < splits; ++s) acc += partial[(long long)s * n + row];
  store<KIND>(y, row, acc);
}

#define GEMV_ENTRIES(SUFFIX, KIND)                                                                              \
  extern "C" __global__ void gemv_warp_##SUFFIX(const uint4* w, const uint4* x, void* y, int n, long long k16) { \
    gemv_warp<KIND>(w, x, y, n, k16);                                                                           \
  }                                                                                                             \
  extern "C" __global__ void gemv_splitk_##SUFFIX(const uint4* w, const uint4* x, float* partial, int n,         \
                                                  long long k16) {                                              \
    gemv_splitk<KIND>(w, x, partial, n, k16);                                                                   \
  }                                                                                                             \
  extern "C" __global__ void splitk_finish_##SUFFIX(const float* partial, void* y, int n, int splits) {         \
    splitk_finish<KIND>(partial, y, n, splits);                                                                 \
  }

GEMV_ENTRIES(f32, 0)
GEMV_ENTRIES(f16, 1)
GEMV_ENTRIES(bf16, 2)
