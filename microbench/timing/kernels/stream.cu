// STREAM kernels (copy, scale, add, triad) and a read-only reduction, over 16-byte float4 vectors with
// grid-stride loops. Bytes moved per element: copy and scale 2 × 4, add and triad 3 × 4, read 4.
#include "common.cuh"

extern "C" __global__ void stream_copy(const float4* __restrict__ a, float4* __restrict__ c, long long n4) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x)
    c[i] = a[i];
}

extern "C" __global__ void stream_scale(float4* __restrict__ b, const float4* __restrict__ c, float s, long long n4) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
    const float4 v = c[i];
    b[i] = make_float4(s * v.x, s * v.y, s * v.z, s * v.w);
  }
}

extern "C" __global__ void stream_add(const float4* __restrict__ a, const float4* __restrict__ b,
                                      float4* __restrict__ c, long long n4) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
    const float4 x = a[i], y = b[i];
    c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
}

extern "C" __global__ void stream_triad(float4* __restrict__ a, const float4* __restrict__ b,
                                        const float4* __restrict__ c, float s, long long n4) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
    const float4 x = b[i], y = c[i];
    a[i] = make_float4(x.x + s * y.x, x.y + s * y.y, x.z + s * y.z, x.w + s * y.w);
  }
}

// Each block writes one partial sum; 4 independent 16-byte loads in flight per thread.
extern "C" __global__ void read_sum(const uint4* __restrict__ a, float* __restrict__ partial, long long n16) {
  __shared__ float warps[32];
  float acc = 0.f;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = load_stream(a + i + u * stride);
#pragma unroll
    for (int u = 0; u < 4; ++u)
      acc += __uint_as_float(v[u].x) + __uint_as_float(v[u].y) + __uint_as_float(v[u].z) + __uint_as_float(v[u].w);
  }
  for (; i < n16; i += stride) {
    const uint4 v = load_stream(a + i);
    acc += __uint_as_float(v.x) + __uint_as_float(v.y) + __uint_as_float(v.z) + __uint_as_float(v.w);
  }
  acc = warp_sum(acc);
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < (blockDim.x >> 5) ? warps[threadIdx.x] : 0.f;
    v = warp_sum(v);
    if (threadIdx.x == 0) partial[blockIdx.x] = v;
  }
}
