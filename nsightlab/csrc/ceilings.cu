// Instruction-class ceilings of a GPU, written from the instructions up (inline PTX, no CUTLASS).
//
//   mma_sync_kernel<kBf16>  mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.f32, A and B fragments in
//                           registers, kMmaChains independent accumulators per warp: the ceiling set by
//                           how fast the SM takes the warp-level tensor instruction (what an mma.sync
//                           attention kernel uses).
//   wgmma_kernel<kKind>     wgmma.mma_async.sync.aligned.m64n256k16.f32.{f16,bf16} (A [64, 64] and B [256, 64])
//                           or m64n256k32.f32.e4m3.e4m3 (A [64, 128] and B [256, 128]), K-major in shared memory
//                           with the 128-byte swizzle, one or more warpgroups per CTA: the warpgroup
//                           instruction's ceiling (sm_90a only) for 16-bit and FP8 operands.
//   mufu_ex2_kernel         ex2.approx.ftz.f32 after one FFMA, as a softmax computes exp2(s * scale - m),
//                           kExpChains independent chains per thread: the MUFU rate that bounds softmax.
//
// Every kernel takes its operands from memory (known data, so one iteration can be checked against a
// reference) and stores every accumulator at the end (nothing is dead code). The host entry points take
// raw device pointers and a stream and return a cudaError_t, so the file needs no torch header:
// nsightlab.ceilings binds them with load_inline, and CI compiles the file with nvcc alone.

#include <cuda_runtime.h>

#include <cstdint>

namespace nsl {

constexpr int kMmaChains = 8;  // independent m16n8k16 accumulators per warp
constexpr int kExpChains = 8;  // independent exp2 chains per thread
// the wgmma tile: A [kWgM, kWgK] and B [kWgN, kWgK], both K-major; kWgK 16-bit elements = one 128-byte row
constexpr int kWgM = 64, kWgN = 256, kWgK = 64;
constexpr int kWgSmemBytes = (kWgM + kWgN) * kWgK * 2;
constexpr int kWgAlign = 1024;  // a 128B-swizzle atom (8 rows x 128 B) must start on 1024 bytes

// ------------------------------------------------------------------------------------------- mma.sync

template <int kBf16>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

__device__ __forceinline__ uint32_t pack16(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }

// A: [16, 16] row-major, B: [16, 8] row-major ([k, n]), 16-bit elements (fp16 or bf16 bits).
// out: [grid * blockDim, kMmaChains, 4] floats, each thread's accumulators in the PTX fragment order.
// Every chain computes D += A @ B per iteration, so after one iteration each chain holds A @ B.
template <int kBf16>
__global__ void __launch_bounds__(256) mma_sync_kernel(const uint16_t* __restrict__ A, const uint16_t* __restrict__ B,
                                                       float* __restrict__ out, int iters) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;  // groupID, threadID_in_group
  // the fragments as the PTX ISA lays out m16n8k16: A row-major (rows g and g + 8), B column-major
  uint32_t a[4], b[2];
  a[0] = pack16(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]);
  a[1] = pack16(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]);
  a[2] = pack16(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]);
  a[3] = pack16(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9]);
  b[0] = pack16(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]);
  b[1] = pack16(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g]);
  float d[kMmaChains][4];
#pragma unroll
  for (int c = 0; c < kMmaChains; ++c) d[c][0] = d[c][1] = d[c][2] = d[c][3] = 0.f;
#pragma unroll 4
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < kMmaChains; ++c) mma_m16n8k16<kBf16>(d[c], a, b);
  }
  float* o = out + (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * kMmaChains * 4;
#pragma unroll
  for (int c = 0; c < kMmaChains; ++c)
#pragma unroll
    for (int j = 0; j < 4; ++j) o[c * 4 + j] = d[c][j];
}

// ------------------------------------------------------------------------------------------- wgmma

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define NSL_HAS_WGMMA 1
#endif

// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format" for wgmma): start address >> 4 in
// bits 0-13, leading-dimension byte offset >> 4 in 16-29 (unused by swizzled K-major layouts: 1), stride
// byte offset >> 4 in 32-45 (1024: from one 8-row group to the next), base offset 0 in 49-51 (atoms are
// 1024-byte aligned), layout type in 62-63 (1 = 128-byte swizzle).
__device__ __forceinline__ uint64_t smem_desc_sw128(uint32_t smem_addr) {
  return uint64_t((smem_addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}

// Byte offset of element (row, k) of a K-major tile whose rows are 128 bytes (64 16-bit elements) under the
// 128-byte swizzle: the 16-byte chunk index (k / 8) is XORed with the row's index within its 8-row atom.
__device__ __forceinline__ uint32_t sw128_offset(int row, int chunk) {
  return uint32_t(row) * 128u + (uint32_t(chunk ^ (row & 7)) << 4);
}

#define NSL_WGMMA_REGS \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define NSL_WGMMA_ACC \
      "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
      "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
      "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
      "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
      "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
      "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
      "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
      "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
      "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
      "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
      "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
      "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// the wgmma operand kinds of wgmma_kernel: 16-bit (k16 per instruction) or e4m3 (k32); a 128-byte row of the
// operand tiles is 4 instructions' K either way
constexpr int kWgF16 = 0, kWgBf16 = 1, kWgE4m3 = 2;

// D[64, 256] += A[64, K] @ B[256, K]^T (K = 16 16-bit or 32 e4m3 elements: 32 bytes of each row), A and B from
// shared memory (K-major, no transpose)
template <int kKind>
__device__ __forceinline__ void wgmma_m64n256_step(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
#ifdef NSL_HAS_WGMMA
  if constexpr (kKind == kWgE4m3) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {" NSL_WGMMA_REGS "}, %128, %129, p, 1, 1;\n}\n"
        : NSL_WGMMA_ACC
        : "l"(desc_a), "l"(desc_b), "r"(1));
  } else if constexpr (kKind == kWgBf16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" NSL_WGMMA_REGS "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : NSL_WGMMA_ACC
        : "l"(desc_a), "l"(desc_b), "r"(1));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {" NSL_WGMMA_REGS "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : NSL_WGMMA_ACC
        : "l"(desc_a), "l"(desc_b), "r"(1));
  }
#endif
}

__device__ __forceinline__ void wgmma_fence() {
#ifdef NSL_HAS_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifdef NSL_HAS_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
#ifdef NSL_HAS_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}

// A: [64, 64] row-major ([m, k]), B: [256, 64] row-major ([n, k]), 16-bit elements (e4m3: [64, 128] and [256, 128],
// the same bytes); every CTA copies them into shared memory once and then runs `iters` x 4 wgmma on them, each
// warpgroup into its own accumulators. out: [grid * blockDim, 128] floats, each thread's accumulators in the wgmma D
// fragment order; after one iteration every warpgroup holds A @ B^T (K = 64, e4m3: 128).
template <int kKind>
__global__ void __launch_bounds__(256, 1) wgmma_kernel(const uint16_t* __restrict__ A, const uint16_t* __restrict__ B,
                                                        float* __restrict__ out, int iters) {
#ifdef NSL_HAS_WGMMA
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + kWgAlign - 1) &
                                             ~uintptr_t(kWgAlign - 1));
  uint8_t* A_s = smem;                  // [64 rows x 128 B]
  uint8_t* B_s = smem + kWgM * kWgK * 2;  // [256 rows x 128 B], 8192 B in: still 1024-aligned
  constexpr int kChunks = kWgK / 8;     // 16-byte chunks per row
  for (int q = threadIdx.x; q < (kWgM + kWgN) * kChunks; q += blockDim.x) {
    const bool is_a = q < kWgM * kChunks;
    const int r = (is_a ? q : q - kWgM * kChunks) / kChunks, c = q % kChunks;
    const uint16_t* src = (is_a ? A : B) + r * kWgK + c * 8;
    *reinterpret_cast<uint4*>((is_a ? A_s : B_s) + sw128_offset(r, c)) = *reinterpret_cast<const uint4*>(src);
  }
  // generic-proxy stores must be visible to the async proxy that wgmma reads shared memory through
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();

  const uint64_t desc_a = smem_desc_sw128(uint32_t(__cvta_generic_to_shared(A_s)));
  const uint64_t desc_b = smem_desc_sw128(uint32_t(__cvta_generic_to_shared(B_s)));
  constexpr int kSteps = kWgK / 16;  // wgmma steps per 128-byte row (k16 of 16-bit or k32 of e4m3 elements)
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.f;
  for (int it = 0; it < iters; ++it) {
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < kSteps; ++s)  // the next 16 columns of K: 32 bytes further along each swizzled row
      wgmma_m64n256_step<kKind>(d, desc_a + uint64_t(2 * s), desc_b + uint64_t(2 * s));
    wgmma_commit();
    wgmma_wait<1>();  // one group in flight while the next is issued, as a GEMM main loop keeps it
  }
  wgmma_wait<0>();
  float* o = out + (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 128;
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = d[i];
#else
  __trap();  // built without sm_90a: the host never launches it
#endif
}

// ------------------------------------------------------------------------------------------- MUFU

// x <- ex2(x * a + b) in kExpChains independent chains per thread (a = -1, b = 0 keeps x in (0, 1)).
// out: [grid * blockDim] floats, each thread's sum of its chains; x starts at x0[c] = (c + 1) / 16.
__global__ void __launch_bounds__(256) mufu_ex2_kernel(float* __restrict__ out, float a, float b, int iters) {
  float x[kExpChains];
#pragma unroll
  for (int c = 0; c < kExpChains; ++c) x[c] = float(c + 1) * 0.0625f;
#pragma unroll 4
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < kExpChains; ++c) {
      float y;
      asm volatile("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(fmaf(x[c], a, b)));
      x[c] = y;
    }
  }
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < kExpChains; ++c) s += x[c];
  out[size_t(blockIdx.x) * blockDim.x + threadIdx.x] = s;
}


// ------------------------------------------------------------------------------------------- DRAM read stream

// Reads n16 16-byte words once each, grid-strided, with non-allocating loads (ld.global.nc.L1::no_allocate, as
// a kernel that streams its inputs through), and XORs them: out[thread] is the thread's XOR, so that no load
// can be dropped and the host can check that every word was read exactly once (the XOR of every thread's
// result is the XOR of the buffer).
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// Every 16-byte word of in[0, n16) read once, grid-stride, kReadsInFlight independent loads issued before any is
// used (a loop of one load per step leaves too few bytes in flight to reach the DRAM's rate), then a tail.
constexpr int kReadsInFlight = 4;
__global__ void __launch_bounds__(1024) read_stream_kernel(const uint4* __restrict__ in, size_t n16, uint32_t* __restrict__ out) {
  uint32_t x = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kReadsInFlight - 1) * stride < n16; i += kReadsInFlight * stride) {
    uint4 v[kReadsInFlight];
#pragma unroll
    for (int u = 0; u < kReadsInFlight; ++u) v[u] = ld_stream(in + i + u * stride);
#pragma unroll
    for (int u = 0; u < kReadsInFlight; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = ld_stream(in + i);
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  out[size_t(blockIdx.x) * blockDim.x + threadIdx.x] = x;
}

}  // namespace nsl

// ------------------------------------------------------------------------------------------- host

// Each returns the cudaError_t of its launch (0: launched); pointers are device addresses.
int64_t nsl_mma_sync(int64_t A, int64_t B, int64_t out, int64_t iters, int64_t blocks, int64_t threads, int64_t bf16,
                     int64_t stream) {
  auto* a = reinterpret_cast<const uint16_t*>(A);
  auto* b = reinterpret_cast<const uint16_t*>(B);
  auto* o = reinterpret_cast<float*>(out);
  auto s = reinterpret_cast<cudaStream_t>(stream);
  if (threads % 32 || threads > 256) return int64_t(cudaErrorInvalidValue);
  if (bf16)
    nsl::mma_sync_kernel<1><<<int(blocks), int(threads), 0, s>>>(a, b, o, int(iters));
  else
    nsl::mma_sync_kernel<0><<<int(blocks), int(threads), 0, s>>>(a, b, o, int(iters));
  return int64_t(cudaGetLastError());
}

// kind: 0 fp16, 1 bf16, 2 e4m3 (nsl::kWgF16 ..)
int64_t nsl_wgmma(int64_t A, int64_t B, int64_t out, int64_t iters, int64_t blocks, int64_t warpgroups, int64_t kind,
                  int64_t stream) {
  auto* a = reinterpret_cast<const uint16_t*>(A);
  auto* b = reinterpret_cast<const uint16_t*>(B);
  auto* o = reinterpret_cast<float*>(out);
  auto s = reinterpret_cast<cudaStream_t>(stream);
  if (warpgroups < 1 || warpgroups > 2) return int64_t(cudaErrorInvalidValue);
  const int smem = nsl::kWgSmemBytes + nsl::kWgAlign;
  if (kind == nsl::kWgE4m3)
    nsl::wgmma_kernel<nsl::kWgE4m3><<<int(blocks), int(128 * warpgroups), smem, s>>>(a, b, o, int(iters));
  else if (kind == nsl::kWgBf16)
    nsl::wgmma_kernel<nsl::kWgBf16><<<int(blocks), int(128 * warpgroups), smem, s>>>(a, b, o, int(iters));
  else if (kind == nsl::kWgF16)
    nsl::wgmma_kernel<nsl::kWgF16><<<int(blocks), int(128 * warpgroups), smem, s>>>(a, b, o, int(iters));
  else
    return int64_t(cudaErrorInvalidValue);
  return int64_t(cudaGetLastError());
}

int64_t nsl_mufu_ex2(int64_t out, double a, double b, int64_t iters, int64_t blocks, int64_t threads, int64_t stream) {
  auto s = reinterpret_cast<cudaStream_t>(stream);
  if (threads % 32 || threads > 256) return int64_t(cudaErrorInvalidValue);
  nsl::mufu_ex2_kernel<<<int(blocks), int(threads), 0, s>>>(reinterpret_cast<float*>(out), float(a), float(b),
                                                            int(iters));
  return int64_t(cudaGetLastError());
}

int64_t nsl_read_stream(int64_t in, int64_t n16, int64_t out, int64_t blocks, int64_t threads, int64_t stream) {
  auto s = reinterpret_cast<cudaStream_t>(stream);
  if (threads % 32 || threads > 1024 || (in & 15)) return int64_t(cudaErrorInvalidValue);
  nsl::read_stream_kernel<<<int(blocks), int(threads), 0, s>>>(reinterpret_cast<const uint4*>(in), size_t(n16),
                                                               reinterpret_cast<uint32_t*>(out));
  return int64_t(cudaGetLastError());
}

const char* nsl_error_string(int64_t code) { return cudaGetErrorString(cudaError_t(code)); }
int64_t nsl_mma_chains() { return nsl::kMmaChains; }
int64_t nsl_exp_chains() { return nsl::kExpChains; }
