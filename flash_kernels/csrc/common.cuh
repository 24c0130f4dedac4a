// Shared helpers for every kernel family: dtype conversion and dispatch, warp reductions,
// and the two small FlashAttention-2 backward helper kernels (D_i = rowsum(dO * O), dQ cast).
// Layout convention everywhere: Q, K, V, O, dO, dQ, dK, dV are [B, H, N, D] contiguous,
// LSE and D_i are [B, H, N] fp32, and LSE is the natural log of sum_j exp(scale * q_i . k_j).
#pragma once
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

namespace fk {

enum DType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <typename T> __device__ __forceinline__ float to_f(T x);
template <> __device__ __forceinline__ float to_f<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_f<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// 2^x on the SFU; callers pass arguments <= 0 (scores minus a running max), or -inf.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

inline int cdiv(int a, int b) { return (a + b - 1) / b; }

// Dispatch a run-time dtype code to a type alias T inside the body.
#define FK_DISPATCH_DTYPE(code, T, ...)                      \
  switch (code) {                                             \
    case ::fk::kF32: { using T = float; __VA_ARGS__; } break; \
    case ::fk::kF16: { using T = __half; __VA_ARGS__; } break; \
    case ::fk::kBF16: { using T = __nv_bfloat16; __VA_ARGS__; } break; \
    default: return cudaErrorInvalidValue;                    \
  }

// Opt a kernel into more than 48 KB of dynamic shared memory (once per instantiation).
template <typename Kernel>
inline cudaError_t allow_smem(Kernel kernel, int bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

// FlashAttention-2 backward preprocessing: Dd[row] = sum_d dO[row, d] * O[row, d]   // [B*H*N]
// One warp per row.
template <typename T>
__global__ void fa2_bwd_rowdot_kernel(const T* __restrict__ dO, const T* __restrict__ O,
                                      float* __restrict__ Dd, long rows, int D) {
  long row = (long(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* a = dO + row * D;
  const T* b = O + row * D;
  float acc = 0.f;
  for (int d = lane; d < D; d += 32) acc += to_f(a[d]) * to_f(b[d]);
  acc = warp_sum(acc);
  if (lane == 0) Dd[row] = acc;
}

// dQ accumulated in fp32 (atomics across key blocks) -> the input dtype.
template <typename T>
__global__ void cast_from_f32_kernel(const float* __restrict__ src, T* __restrict__ dst, long n) {
  long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  long stride = long(gridDim.x) * blockDim.x;
  for (; i < n; i += stride) dst[i] = from_f<T>(src[i]);
}

template <typename T>
inline cudaError_t launch_rowdot(const void* dO, const void* O, float* Dd, long rows, int D,
                                 cudaStream_t stream) {
  const int threads = 256;
  long blocks = (rows * 32 + threads - 1) / threads;
  fa2_bwd_rowdot_kernel<T><<<(unsigned)blocks, threads, 0, stream>>>(
      static_cast<const T*>(dO), static_cast<const T*>(O), Dd, rows, D);
  return cudaGetLastError();
}

template <typename T>
inline cudaError_t launch_cast(const float* src, void* dst, long n, cudaStream_t stream) {
  long blocks = (n + 255) / 256;
  if (blocks > 65535L * 8) blocks = 65535L * 8;
  cast_from_f32_kernel<T><<<(unsigned)blocks, 256, 0, stream>>>(src, static_cast<T*>(dst), n);
  return cudaGetLastError();
}

}  // namespace fk
