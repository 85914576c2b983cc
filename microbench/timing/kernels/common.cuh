// Shared helpers for gpubench's kernels. No CUDA headers: the same source compiles with nvcc and NVRTC
// (CuPy's RawModule), and 16-bit types are handled as raw bits with PTX conversions.
#pragma once

typedef unsigned short u16;

// Element kinds: 0 fp32, 1 fp16, 2 bf16.
template <int KIND> __device__ __forceinline__ float to_float(unsigned bits);
template <> __device__ __forceinline__ float to_float<0>(unsigned bits) { return __uint_as_float(bits); }
template <> __device__ __forceinline__ float to_float<1>(unsigned bits) {
  float f;
  unsigned short h = (unsigned short)bits;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
template <> __device__ __forceinline__ float to_float<2>(unsigned bits) { return __uint_as_float(bits << 16); }

template <int KIND> __device__ __forceinline__ void store(void* out, long long i, float v);
template <> __device__ __forceinline__ void store<0>(void* out, long long i, float v) { ((float*)out)[i] = v; }
template <> __device__ __forceinline__ void store<1>(void* out, long long i, float v) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  ((u16*)out)[i] = h;
}
template <> __device__ __forceinline__ void store<2>(void* out, long long i, float v) {
  unsigned u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    ((u16*)out)[i] = 0x7fc0;  // NaN stays NaN
    return;
  }
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  ((u16*)out)[i] = (u16)(u >> 16);
}

// Streaming 16-byte load: read once, do not keep in L1 (weights are never reused within a launch).
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}

// Dot product of two 16-byte vectors: 4 fp32 or 8 fp16/bf16 elements, accumulated in fp32.
template <int KIND> __device__ __forceinline__ float dot16(uint4 w, uint4 x) {
  const unsigned wv[4] = {w.x, w.y, w.z, w.w};
  const unsigned xv[4] = {x.x, x.y, x.z, x.w};
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (KIND == 0) {
      s = fmaf(__uint_as_float(wv[i]), __uint_as_float(xv[i]), s);
    } else {
      s = fmaf(to_float<KIND>(wv[i] & 0xffffu), to_float<KIND>(xv[i] & 0xffffu), s);
      s = fmaf(to_float<KIND>(wv[i] >> 16), to_float<KIND>(xv[i] >> 16), s);
    }
  }
  return s;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
