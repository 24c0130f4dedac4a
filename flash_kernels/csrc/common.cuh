// Shared helpers for every kernel family: dtype conversion and dispatch, warp reductions,
// and the FlashAttention-2 backward's wrapper (fa2_backward) with its two small helper kernels
// (D_i = rowsum(dO * O), dQ cast).
// Layout convention everywhere: Q, O, dO, dQ are [B, H, Nq, D] contiguous; K, V, dK, dV are
// [B, Hkv, Nk, D] (grouped-query attention when Hkv < H: query head h reads key/value head
// h / (H / Hkv)); LSE and D_i are [B, H, Nq] fp32, LSE the natural log of sum_j exp(scale q_i . k_j).
// Causal masking is aligned top-left, as torch's scaled_dot_product_attention aligns is_causal:
// query i sees keys j <= i.
#pragma once
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include <atomic>
#include <utility>
#include "attn_args.h"

namespace fk {


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

// 2^x for x <= 0 (or -inf) without the SFU, on the FMA and integer pipes (FlashAttention-4's way of sharing
// the exponentials when the SFU is the bottleneck): x (clamped to -125, where 2^x is ~2e-38) = j + f with j =
// round(x) (adding 1.5 * 2^23 rounds x and leaves j in the low bits of the sum), f in [-0.5, 0.5], 2^f by a
// degree-3 polynomial fitted to the relative error (at most 1.8e-4 over the interval), j added to the
// exponent bits. 3 FADD, 3 FFMA, a max, a shift and an integer add.
__device__ __forceinline__ float exp2_poly(float x) {
  x = fmaxf(x, -125.f);
  const float r = x + 12582912.f;
  const float f = x - (r - 12582912.f);
  const float p = fmaf(fmaf(fmaf(0.05460262f, f, 0.24192413f), f, 0.69331648f), f, 1.f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(r) << 23));
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

// Programmatic dependent launch (sm_90 and later). A kernel launched by launch_dependent may start while the
// kernel ahead of it in the stream still runs: its blocks are scheduled once every block of that kernel has
// called grid_dependents_launch() or exited, and grid_dependency_wait() returns once that kernel has finished
// and its writes are visible. So the second kernel's launch overlaps the first's tail. Elsewhere (older GPUs, or
// a kernel built for an older architecture) the launch is an ordinary one and both calls compile to nothing.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dependents_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether Kernel, as loaded on the current device, was compiled for a virtual architecture of sm_90 or later
// (its griddepcontrol instructions exist): the device's compute capability is not enough, since a build for an
// older architecture only runs on an H100 as PTX compiled without them. Asked once per kernel and device (the
// kernel is a template argument, so that kernels of one signature keep apart answers).
template <auto Kernel>
inline cudaError_t compiled_for_sm90(bool& yes) {
  constexpr int kDevices = 64;
  static std::atomic<int> known[kDevices] = {};  // 0: not asked yet, 1: no, 2: yes
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  int k = device < kDevices ? known[device].load(std::memory_order_relaxed) : 0;
  if (k == 0) {
    cudaFuncAttributes attr;
    err = cudaFuncGetAttributes(&attr, Kernel);
    if (err != cudaSuccess) return err;
    k = attr.ptxVersion >= 90 ? 2 : 1;
    if (device < kDevices) known[device].store(k, std::memory_order_relaxed);
  }
  yes = k == 2;
  return cudaSuccess;
}

template <auto Kernel, typename... Args>
inline cudaError_t launch_dependent(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  bool dependent = false;
  cudaError_t err = compiled_for_sm90<Kernel>(dependent);
  if (err != cudaSuccess) return err;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = dependent ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, Kernel, std::forward<Args>(args)...);
}

// Opt a kernel into more than 48 KB of dynamic shared memory. The attribute belongs to the
// current device's context, so it is set at every launch (a cheap host call) rather than once per
// process: a second GPU gets it too.
template <typename Kernel>
inline cudaError_t allow_smem(Kernel kernel, int bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

// What a kernel needs of the shape to find its rows: heads, kv heads, query and key lengths.
struct Dims {
  int H, Hkv, Nq, Nk;
  // [B*H] query-head index -> [B*Hkv] key/value-head index
  // (32-bit arithmetic: B*H is a grid dimension, < 2^16; 64-bit division would be a subroutine call)
  __host__ __device__ __forceinline__ long kv_head(int bh) const {
    return long((bh / H) * Hkv + (bh % H) / (H / Hkv));
  }
};
inline Dims dims_of(const AttnArgs& a) { return Dims{a.H, a.Hkv, a.Nq, a.Nk}; }

// Table dispatch of the run-time dtype and head dim to f(TypeTag<T>{}, IntTag<D>{}), which
// returns a cudaError_t; fp32 only for families that have it.
template <typename T> struct TypeTag { using type = T; };
template <int V> struct IntTag { static constexpr int value = V; };
template <bool F32, typename F>
inline cudaError_t dispatch_dtype_hdim(const AttnArgs& a, F&& f) {
  auto by_hdim = [&](auto t) -> cudaError_t {
    switch (a.D) {
      case 64: return f(t, IntTag<64>{});
      case 128: return f(t, IntTag<128>{});
      default: return cudaErrorInvalidValue;
    }
  };
  switch (a.dtype) {
    case kF16: return by_hdim(TypeTag<__half>{});
    case kBF16: return by_hdim(TypeTag<__nv_bfloat16>{});
    case kF32:
      if constexpr (F32) return by_hdim(TypeTag<float>{});
      else return cudaErrorInvalidValue;
    default: return cudaErrorInvalidValue;
  }
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
  if (rows == 0) return cudaSuccess;
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

// The FlashAttention-2 backward pass around a family's kernel, in order on `stream`: zero the fp32
// dQ accumulator a.dq_acc, Dd = rowsum(dO * O) into a.Dd (launch_rowdot), launch() (which runs the
// family's kernel: it adds dQ into a.dq_acc with atomics and writes dK, dV, and returns a
// cudaError_t), then cast a.dq_acc to dQ in the input dtype (launch_cast). Stops at the first error.
template <typename T, int D, typename Launch>
cudaError_t fa2_backward(const AttnArgs& a, cudaStream_t stream, Launch&& launch) {
  const long rows = long(a.B) * a.H * a.Nq;
  cudaError_t err = cudaMemsetAsync(a.dq_acc, 0, sizeof(float) * rows * D, stream);
  if (err == cudaSuccess) err = launch_rowdot<T>(a.dO, a.o, a.Dd, rows, D, stream);
  if (err == cudaSuccess) err = launch();
  if (err == cudaSuccess) err = launch_cast<T>(a.dq_acc, a.dq, rows * D, stream);
  return err;
}

// The grouped-query split of an FA2 backward launch (flash_mma, flash_wgmma): `split` thread blocks
// share each group of H / Hkv query heads (the grid's z). split > 1: the blocks add their partial dK,
// dV into the fp32 workspaces a.ws[0], a.ws[1], zeroed here and cast to a.dk, a.dv after launch();
// split = 1: the kernel writes dK, dV itself. launch() runs the kernel and returns a cudaError_t.
template <typename T, int D, typename Launch>
cudaError_t split_group_backward(const AttnArgs& a, int split, cudaStream_t stream, Launch&& launch) {
  if (split < 1 || (a.H / a.Hkv) % split != 0 || (split > 1 && (a.ws[0] == nullptr || a.ws[1] == nullptr)))
    return cudaErrorInvalidValue;
  const long kv_elems = long(a.B) * a.Hkv * a.Nk * D;
  cudaError_t err = cudaSuccess;
  if (split > 1) err = cudaMemsetAsync(a.ws[0], 0, sizeof(float) * kv_elems, stream);
  if (err == cudaSuccess && split > 1) err = cudaMemsetAsync(a.ws[1], 0, sizeof(float) * kv_elems, stream);
  if (err == cudaSuccess) err = launch();
  if (err == cudaSuccess && split > 1) err = launch_cast<T>(a.ws[0], a.dk, kv_elems, stream);
  if (err == cudaSuccess && split > 1) err = launch_cast<T>(a.ws[1], a.dv, kv_elems, stream);
  return err;
}

}  // namespace fk
