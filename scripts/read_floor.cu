// The floor under a decode call: how fast this GPU reads a buffer of K and V's bytes when it does nothing else.
// scripts/flush_check.py --floor builds it (torch.utils.cpp_extension.load_inline) and times it beside the call,
// in the same rounds, as the rows kv_stream[blocks a SM x threads, loads in flight a thread].
//
// Each thread reads 16-byte vectors, grid-strided (a row of loads across the grid is one contiguous span), with
// `unroll` loads issued before any is used; ld.global.nc with L1::no_allocate, as a streaming read should be. The
// loads are folded into one word that is written only if it equals a constant, so that none can be dropped and
// nothing but the reads reaches memory. With `check` set, every thread XORs its word into sink[0] instead: the XOR
// of every 32-bit word of the buffer, which the caller compares with its own, so the timed kernel is known to read
// every byte once. Several shapes of grid are timed because the best one for a few tens of
// megabytes (ramp and tail are a large share) is not the best for gigabytes.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__device__ __forceinline__ int4 ld_stream(const int4* p) {
  int4 v;
  asm("ld.global.nc.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

template <int U>
__global__ void read_stream_kernel(const int4* __restrict__ p, long long n, unsigned* __restrict__ sink, bool check) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    int4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = ld_stream(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= static_cast<unsigned>(v[u].x ^ v[u].y ^ v[u].z ^ v[u].w);
  }
  for (; i < n; i += stride) {
    const int4 v = ld_stream(p + i);
    acc ^= static_cast<unsigned>(v.x ^ v.y ^ v.z ^ v.w);
  }
  if (check)
    atomicXor(sink, acc);
  else if (acc == 0x9E3779B9u)
    sink[0] = acc;  // data-dependent: keeps every load; (almost) never stores
}

}  // namespace

// bytes: a multiple of 16 at a 16-byte aligned address (checked by the caller). Returns the launch's error.
cudaError_t read_stream_launch(const void* p, long long bytes, int blocks, int threads, int unroll, unsigned* sink,
                               bool check, cudaStream_t stream) {
  const auto* v = static_cast<const int4*>(p);
  const long long n = bytes / 16;
  switch (unroll) {
    case 1: read_stream_kernel<1><<<blocks, threads, 0, stream>>>(v, n, sink, check); break;
    case 2: read_stream_kernel<2><<<blocks, threads, 0, stream>>>(v, n, sink, check); break;
    case 4: read_stream_kernel<4><<<blocks, threads, 0, stream>>>(v, n, sink, check); break;
    case 8: read_stream_kernel<8><<<blocks, threads, 0, stream>>>(v, n, sink, check); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
