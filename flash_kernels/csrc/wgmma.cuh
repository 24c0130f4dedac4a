// Warpgroup-level tensor-core helpers for sm_90a (Hopper; built with
// -gencode=arch=compute_90a,code=sm_90a, they run on compute capability 9.0 only):
// wgmma.mma_async m64nNk16 with fp32 accumulators (A from shared memory or from registers, B from
// shared memory), its fence / commit_group / wait_group, the shared-memory matrix descriptor of the
// 128-byte-swizzled layout, fence.proxy.async, and a cp.async tile load that writes that layout;
// the copy engine (TMA: cp.async.bulk.tensor with a CUtensorMap built on the host, writing the same
// layout) with the mbarriers it completes on; setmaxnreg and named barriers for warp specialization.
//
// A warpgroup is 4 consecutive warps starting at a warp index divisible by 4; every wgmma here is
// issued by all 128 of its threads (the .aligned qualifier), under warpgroup-uniform conditions.
//
// Register fragments of m64nNk16 (warp w = 0..3 of the warpgroup, lane = threadIdx.x % 32,
// g = lane / 4, t = lane % 4): each warp owns rows 16 w .. 16 w + 15 of the 64.
//   accumulator D (float d[N / 2]): d[4 j + 2 h + e] = D(16 w + g + 8 h, 8 j + 2 t + e), j < N / 8
//   A from registers (uint32_t a[4], two 16-bit values each, low half first):
//     a0 (16 w + g, 2t..2t+1)  a1 (16 w + g + 8, 2t..)  a2 (16 w + g, 2t+8..)  a3 (16 w + g + 8, 2t+8..)
// i.e. per warp exactly the mma.sync m16n8k16 C and A layouts (mma.cuh), so the accumulators of
// two adjacent 8-column blocks of S = Q K^T are the A fragment of one k16 step of O += P V.
//
// Shared-memory layout ("SW128", the canonical 128-byte swizzle): a [ROWS][W] tile of 16-bit
// elements is stored as W / 64 column blocks, each [ROWS][64] with 128-byte rows; 16-byte chunk c
// (0..7) of row r sits at r * 128 + ((c ^ (r % 8)) * 16) of its block (the hardware XORs address
// bits 4-6 with bits 7-9, so blocks must start on 1024-byte boundaries). One 8-row x 128-byte
// "swizzle atom" is 1024 bytes. Two ways the wgmma reads such a block:
//   K-major   (A or B with the reduction dim contiguous: Q and K rows): rows are M/N, the 64
//             columns are K. SBO = 1024 (next 8 rows), LBO unused (1). A k16 step inside the block
//             advances the start address by 32 bytes; the next 64 columns are the next block.
//   MN-major  (B = V [keys][D], the N dim = D contiguous; transpose bit set): rows are K (keys),
//             the 64 columns are N. SBO = 1024 (next 8 keys), LBO = the stride between 64-wide
//             N blocks (the column-block stride, ROWS * 128). A k16 step = 16 rows = 2048 bytes.
#pragma once
#include <cuda.h>  // CUtensorMap and its enums (types only: the driver is reached through cudart)
#include <type_traits>
#include "mma.cuh"

namespace fk {

// ------------------------------------------------------------------------------ SW128 layout

// Byte offset of 16-byte chunk `chunk` (8 16-bit elements, 0 .. W/8 - 1) of row `row` in a
// [ROWS][W] SW128 tile (W / 64 column blocks of [ROWS][64]).
template <int ROWS>
__device__ __forceinline__ uint32_t sw128(int row, int chunk) {
  return uint32_t((chunk >> 3) * (ROWS * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

// Copy rows [r0, r0 + ROWS) of a [N][W] matrix into an SW128 [ROWS][W] tile with cp.async,
// zero-filling rows >= N. NT threads cooperate; consecutive threads copy consecutive 16 bytes of
// a row (coalesced). The tile must start on a 1024-byte boundary.
template <int ROWS, int W, int NT, typename T>
__device__ __forceinline__ void load_tile_sw128(uint32_t tile, const T* __restrict__ src, int r0, int N, int tid) {
  constexpr int U = W / 8, CHUNKS = ROWS * U;
  static_assert(W % 64 == 0, "SW128 tiles are made of 64-element column blocks");
#pragma unroll
  for (int c = tid; c < CHUNKS; c += NT) {
    const int row = c / U, chunk = c % U;
    const int g = r0 + row;
    const bool ok = g < N;
    cp_async_16(tile + sw128<ROWS>(row, chunk), src + long(ok ? g : 0) * W + chunk * 8, ok ? 16 : 0);
  }
}

// This thread's warpgroup (threadIdx.x / 128) as a value the compiler knows is the same in every lane of a warp (as
// CUTLASS's canonical_warp_group_idx): what is computed from it (shared-memory addresses, wgmma descriptors) can live
// in uniform registers, where wgmma reads its descriptors, instead of being moved there (R2UR) before each wgmma.
__device__ __forceinline__ int warpgroup_index() { return __shfl_sync(0xffffffffu, int(threadIdx.x) >> 7, 0); }

// ------------------------------------------------------------------------------ descriptors

// The 64-bit shared-memory matrix descriptor of wgmma (PTX ISA "Matrix Descriptor Format"):
//   bits  0-13 start address >> 4     bits 16-29 leading-dimension byte offset >> 4
//   bits 32-45 stride-dimension byte offset >> 4     bits 49-51 base offset (0: atoms 1024-aligned)
//   bits 62-63 swizzle mode (1 = 128-byte swizzle)
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo & 0x3FFFF) >> 4) << 16) |
         (uint64_t((sbo & 0x3FFFF) >> 4) << 32) | (uint64_t(1) << 62);
}
// The same descriptor for the 64-byte swizzle (swizzle mode 2; atoms of 8 rows x 64 bytes = 512 bytes, which
// start on 512-byte boundaries): a K-major operand whose rows are 64 bytes (e4m3 rows of 64 elements).
__device__ __forceinline__ uint64_t desc_kmajor_sw64(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(512 >> 4) << 32) | (uint64_t(2) << 62);
}
// K-major operand (Q as A, K as B of S = Q K^T): 8-row groups 1024 bytes apart, LBO unused.
__device__ __forceinline__ uint64_t desc_kmajor(uint32_t addr) { return sw128_desc(addr, 16, 1024); }
// MN-major B operand (V of O += P V, with trans-b = 1): 8-key groups 1024 bytes apart, 64-wide N
// blocks `nblock_stride` bytes apart.
__device__ __forceinline__ uint64_t desc_mnmajor(uint32_t addr, uint32_t nblock_stride) {
  return sw128_desc(addr, nblock_stride, 1024);
}
// A descriptor moved by `bytes` (a multiple of 16; stays within the 14-bit address field).
// Only the low word moves (as CUTLASS's descriptor iterator does): a 32-bit add, the high word (SBO, swizzle mode)
// left as it is, so no carry chain and the high half can stay in its uniform register.
__device__ __forceinline__ uint64_t desc_add(uint64_t desc, uint32_t bytes) {
  return (desc & 0xFFFFFFFF00000000ull) | uint32_t(uint32_t(desc) + (bytes >> 4));
}

// ------------------------------------------------------------------------------ ordering

// Before a batch of wgmma: orders this warpgroup's earlier register writes (accumulators, A
// fragments) before the asynchronous reads.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Wait until at most N committed groups of this warpgroup are still in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared memory written through the generic proxy (ordinary stores, cp.async) and read next by the
// async proxy (wgmma operands, TMA stores): each writing thread fences before the barrier.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Pin registers at a point of the program: the compiler may not move their reads or writes across
// it (accumulators of an asynchronous wgmma are not final until wgmma_wait).
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// ------------------------------------------------------------------------------ wgmma.mma_async

// Operand lists (generated; the accumulators come first, %0 .. %(N/2 - 1)).
#define FK_WG_ACC32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define FK_WG_OUT32(d)                                                                                        \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),             \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define FK_WG_ACC64                                                                      \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "               \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FK_WG_OUT64(d)                                                                                        \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),             \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),       \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),     \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FK_WG_ACC128                                                                     \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "               \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "      \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "       \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define FK_WG_OUT128(d)                                                                                       \
  FK_WG_OUT64(d),                                                                                             \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),     \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),     \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),     \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

#define FK_WG_ACC256                                                                     \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "  \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "  \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "  \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "  \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "  \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "  \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define FK_WG_OUT256(d) \
  FK_WG_OUT128(d), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// SS: d (+)= A(desc) * B(desc); scale_d = 0 overwrites d. Operands after the accumulators:
// a-desc, b-desc, scale-d, trans-a, trans-b (numbered from R = N / 2).
#define FK_WGMMA_SS(N, AB, R0, R1, R2, R3, R4)                                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" R2 ", 0;\n"                                      \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." AB "." AB " " FK_WG_ACC##N          \
               ", %" R0 ", %" R1 ", p, 1, 1, %" R3 ", %" R4 ";\n}\n"                                  \
               : FK_WG_OUT##N(d)                                                                     \
               : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB))
// RS: d (+)= A(registers a[4]) * B(desc). Operands after the accumulators: a0..a3, b-desc,
// scale-d, trans-b.
#define FK_WGMMA_RS(N, AB, R0, R1, R2, R3, R4, R5, R6)                                               \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" R5 ", 0;\n"                                      \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." AB "." AB " " FK_WG_ACC##N          \
               ", {%" R0 ", %" R1 ", %" R2 ", %" R3 "}, %" R4 ", p, 1, 1, %" R6 ";\n}\n"              \
               : FK_WG_OUT##N(d)                                                                     \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB))

// D[64 x N] (+)= A[64 x 16] B[16 x N], A and B in shared memory. TA / TB = 1: the operand is
// MN-major (transposed; 16-bit types only).
template <typename T, int N, int TA = 0, int TB = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d);
// D[64 x N] (+)= A[64 x 16] B[16 x N], A in registers (the fragment above), B in shared memory.
template <typename T, int N, int TB = 0>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int scale_d);

#define FK_DEFINE_WGMMA(CT, AB)                                                                                   \
  template <int N, int TA, int TB>                                                                                \
  __device__ __forceinline__ void wgmma_ss_impl(CT*, float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {  \
    static_assert(N == 32 || N == 64 || N == 128, "wgmma_ss: N = 32, 64 or 128");                                 \
    if constexpr (N == 32) FK_WGMMA_SS(32, AB, "16", "17", "18", "19", "20");                                     \
    else if constexpr (N == 64) FK_WGMMA_SS(64, AB, "32", "33", "34", "35", "36");                                \
    else FK_WGMMA_SS(128, AB, "64", "65", "66", "67", "68");                                                      \
  }                                                                                                               \
  template <int N, int TB>                                                                                        \
  __device__ __forceinline__ void wgmma_rs_impl(CT*, float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db,      \
                                                int scale_d) {                                                    \
    static_assert(N == 64 || N == 128 || N == 256, "wgmma_rs: N = 64, 128 or 256");                              \
    if constexpr (N == 64) FK_WGMMA_RS(64, AB, "32", "33", "34", "35", "36", "37", "38");                         \
    else if constexpr (N == 128) FK_WGMMA_RS(128, AB, "64", "65", "66", "67", "68", "69", "70");                  \
    else FK_WGMMA_RS(256, AB, "128", "129", "130", "131", "132", "133", "134");                                   \
  }

FK_DEFINE_WGMMA(__half, "f16")
FK_DEFINE_WGMMA(__nv_bfloat16, "bf16")

template <typename T, int N, int TA, int TB>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {
  wgmma_ss_impl<N, TA, TB>(static_cast<T*>(nullptr), d, da, db, scale_d);
}
template <typename T, int N, int TB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  wgmma_rs_impl<N, TB>(static_cast<T*>(nullptr), d, a, db, scale_d);
}

// D[64 x N] (+)= A B^T over the W columns (the reduction dim) of two K-major SW128 tiles, one wgmma per
// k16 step, issued without fence or commit: A the descriptor of the warpgroup's 64 rows of an [A_ROWS][W]
// tile, B of an [N][W] tile whose column blocks are B_ROWS * 128 bytes apart. k-step kd reads columns 16 kd ..
// of column block kd / 4 (32 bytes per k-step inside a 128-byte row). The first step overwrites d.
template <typename T, int N, int W, int A_ROWS, int B_ROWS>
__device__ __forceinline__ void wgmma_kmajor_ss(float (&d)[N / 2], uint64_t da, uint64_t db) {
#pragma unroll
  for (int kd = 0; kd < W / 16; ++kd) {
    const uint32_t off = (kd & 3) * 32;
    wgmma_ss<T, N>(d, desc_add(da, (kd >> 2) * (A_ROWS * 128) + off), desc_add(db, (kd >> 2) * (B_ROWS * 128) + off),
                   kd > 0);
  }
}

// Issue O += P V (no wait; flash_wgmma's forward, flash_decode_wgmma): P from registers (pf[kk]: the A fragment of
// keys 16 kk .. 16 kk + 15), V a [BN][D] SW128 tile read MN-major (the transpose bit) at dV; k-step kk reads
// keys 16 kk .. = two 1024-byte swizzle atoms.
template <typename T, int D, int BN>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], uint32_t (&pf)[BN / 16][4], uint64_t dV) {
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) fence_regs(pf[kk]);
  fence_regs(o);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) wgmma_rs<T, D, /*TB=*/1>(o, pf[kk], desc_add(dV, kk * 2048), 1);
  wgmma_commit();
}

// e4m3 x e4m3 (FP8) with fp32 accumulators, m64nNk32: one k-step is 32 elements = 32 bytes of a row,
// both operands K-major (8-bit types have no transpose). The A fragment from registers (uint32_t a[4],
// four bytes each, lowest byte first) is mma.sync m16n8k32's:
//   a0 (16 w + g, 4t..4t+3)  a1 (16 w + g + 8, 4t..)  a2 (16 w + g, 4t+16..)  a3 (16 w + g + 8, 4t+16..)
// which is not the accumulator layout of S (columns 2t, 2t+1 of each 8-column block): flash_wgmma_fp8.cu
// permutes the keys inside each 32-key group instead of moving values between threads.
#define FK_WGMMA_SS8(N, R0, R1, R2)                                                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" R2 ", 0;\n"                                     \
               "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 " FK_WG_ACC##N              \
               ", %" R0 ", %" R1 ", p, 1, 1;\n}\n"                                                   \
               : FK_WG_OUT##N(d)                                                                     \
               : "l"(da), "l"(db), "r"(scale_d))
#define FK_WGMMA_RS8(N, R0, R1, R2, R3, R4, R5)                                                      \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" R5 ", 0;\n"                                     \
               "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 " FK_WG_ACC##N              \
               ", {%" R0 ", %" R1 ", %" R2 ", %" R3 "}, %" R4 ", p, 1, 1;\n}\n"                       \
               : FK_WG_OUT##N(d)                                                                     \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d))

// D[64 x N] (+)= A[64 x 32] B[32 x N] in e4m3, A and B (both K-major) in shared memory.
template <int N>
__device__ __forceinline__ void wgmma_ss_e4m3(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {
  static_assert(N == 64 || N == 128, "wgmma_ss_e4m3: N = 64 or 128");
  if constexpr (N == 64) FK_WGMMA_SS8(64, "32", "33", "34");
  else FK_WGMMA_SS8(128, "64", "65", "66");
}
// D[64 x N] (+)= A[64 x 32] B[32 x N] in e4m3, A in registers (the fragment above), B K-major in shared memory.
template <int N>
__device__ __forceinline__ void wgmma_rs_e4m3(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma_rs_e4m3: N = 64, 128 or 256");
  if constexpr (N == 64) FK_WGMMA_RS8(64, "32", "33", "34", "35", "36", "37");
  else if constexpr (N == 128) FK_WGMMA_RS8(128, "64", "65", "66", "67", "68", "69");
  else FK_WGMMA_RS8(256, "128", "129", "130", "131", "132", "133");
}

#undef FK_DEFINE_WGMMA
#undef FK_WGMMA_SS
#undef FK_WGMMA_RS
#undef FK_WGMMA_SS8
#undef FK_WGMMA_RS8

// ------------------------------------------------------------------------------ mbarrier

// A shared-memory mbarrier (8 bytes, 8-byte aligned) completes a phase when its expected arrivals
// have arrived and the bytes announced by arrive.expect_tx have landed (the copy engine's
// complete_tx). Waiters name the phase by its parity: the k-th completion (k = 0, 1, ...) of a
// barrier is phase k, waited for with parity k & 1.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// After the initialising thread's mbar_init calls, before the barrier that publishes them: makes
// the initialised barriers visible to the async proxy (the copy engine completes on them).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// The mbarriers of a warp-specialised kernel's K/V ring (one initialising thread, before mbar_init_fence): per
// stage s, full_k / full_v + 8 s complete on one arrival (the producer's expect_tx) and the copy engine's bytes,
// empty_k / empty_v + 8 s on `consumers` arrivals (one per consumer warpgroup, once it is done with the stage;
// empty_k on `k_consumers` where given: one per consumer thread where each thread reads the K stage itself).
template <int STAGES>
__device__ __forceinline__ void mbar_init_kv_ring(uint32_t full_k, uint32_t full_v, uint32_t empty_k, uint32_t empty_v,
                                                  uint32_t consumers, uint32_t k_consumers = 0) {
#pragma unroll
  for (int s = 0; s < STAGES; ++s) {
    mbar_init(full_k + 8 * s, 1);
    mbar_init(full_v + 8 * s, 1);
    mbar_init(empty_k + 8 * s, k_consumers ? k_consumers : consumers);  // k_consumers: the K stages' own count
    mbar_init(empty_v + 8 * s, consumers);
  }
}
// The barriers of that ring (stage s at + 8 s), and a position in it: the stage of the next tile and the parity of
// that stage's current phase (the k-th pass over the ring waits for phase k).
struct KvRingBars {
  uint32_t full_k, full_v, empty_k, empty_v;
};
template <int STAGES>
struct RingPos {
  int st = 0;
  uint32_t ph = 0;
  __device__ __forceinline__ void advance() {
    if (++st == STAGES) {
      st = 0;
      ph ^= 1;
    }
  }
};
// One arrival that also announces `bytes` more bytes to come from the copy engine this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// One plain arrival (release: this thread's earlier shared-memory reads are done).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// mbar_arrive by the threads where `pred` holds, as a predicated instruction (no branch).
__device__ __forceinline__ void mbar_arrive_if(uint32_t bar, bool pred) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.u32 p, %1, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(bar),
               "r"(uint32_t(pred))
               : "memory");
}
// One arrival once every cp.async this thread has issued so far has landed (the count of arrivals the
// barrier was initialised with includes it: .noinc).
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Block until the phase of parity `parity` has completed (try_wait suspends the thread for a
// hardware-chosen time between polls; the loop covers its time-outs).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// ------------------------------------------------------------------------------ TMA (copy engine)

// Global -> shared copy of one box of a 3-D tensor map (coordinates innermost first), completing
// on `bar` (complete_tx of the box's bytes, out-of-bounds elements included: the engine writes
// zeros there). The destination of a 128-byte-swizzled box starts on a 1024-byte boundary; the
// engine swizzles by address bits as the wgmma descriptors expect (the SW128 layout above).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
// Fetch a tensor map (a __grid_constant__ kernel parameter) into the descriptor cache ahead of use.
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// A [rows][W] SW128 tile (W / 64 column blocks of [rows][64], block stride rows * 128 bytes) of a
// [planes][N][W] tensor whose map has the box {64, rows, 1}: rows r0 .. r0 + rows - 1 of plane
// `plane`, one copy per column block; rows >= N arrive as zeros.
template <int W, int ROWS>
__device__ __forceinline__ void tma_load_tile(uint32_t tile, const CUtensorMap* map, uint32_t bar, int r0, int plane) {
#pragma unroll
  for (int c = 0; c < W / 64; ++c) tma_load_3d(tile + c * (ROWS * 128), map, bar, c * 64, r0, plane);
}

// Shared -> global element-wise fp32 add of `bytes` contiguous bytes (a multiple of 16, both addresses
// 16-byte aligned) by the copy engine (cp.reduce.async.bulk), in this thread's bulk group. The source was
// written by generic stores: the writers fence_proxy_async before the barrier that precedes this call.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Wait until at most N of this thread's bulk groups still read their shared-memory source (READ) or
// are still in flight at all.
template <int N, bool READ>
__device__ __forceinline__ void bulk_wait() {
  if constexpr (READ) asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
  else asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// ------------------------------------------------------------------------------ warp specialization

// Resize this warpgroup's register file share (all 128 threads, warpgroup-uniform; the kernel must
// have a register cap at entry: __launch_bounds__(threads, 1)).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
// Named barriers (ids 1..15; 0 is __syncthreads): `threads` (a multiple of 32) meet at bar_sync;
// bar_arrive counts towards the barrier without waiting.
__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace fk

// ------------------------------------------------------------------------------ host: tensor maps

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

namespace fk {

// cuTensorMapEncodeTiled from the driver through the runtime (no -lcuda at link time), looked up
// once per process.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// The tensor map of a contiguous [planes][rows][row_bytes / elem_bytes] tensor, read in boxes of
// {box_bytes / elem_bytes columns, box_rows rows, 1 plane} with the given swizzle; rows past `rows` in a
// box are zero-filled (per plane: a box never reads the next plane's rows), as are columns past the row.
// cudaErrorInvalidValue when the driver refuses it (e.g. a base address not 16-byte aligned).
inline cudaError_t make_map(CUtensorMap* map, CUtensorMapDataType dt, int elem_bytes, const void* base, int planes,
                            int rows, int row_bytes, int box_rows, int box_bytes, CUtensorMapSwizzle swizzle) {
  const auto encode = tensor_map_encoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  // The driver call needs the device's context current in this thread, which a thread that has made no
  // runtime call yet lacks (autograd's backward thread, for one): cudaSetDevice makes the primary context
  // current.
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaSetDevice(device);
  if (err != cudaSuccess) return err;
  const cuuint64_t dims[3] = {cuuint64_t(row_bytes / elem_bytes), cuuint64_t(rows), cuuint64_t(planes)};
  const cuuint64_t strides[2] = {cuuint64_t(row_bytes), cuuint64_t(rows) * row_bytes};  // bytes, of dims 1 and 2
  const cuuint32_t box[3] = {cuuint32_t(box_bytes / elem_bytes), cuuint32_t(box_rows), 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = encode(map, dt, 3, const_cast<void*>(base), dims, strides, box, elem_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// The tensor map of a contiguous [planes][N][W] tensor of 16-bit elements (planes = B * heads),
// read in boxes {64 columns, `rows` rows, 1 plane} into the SW128 layout.
template <typename T>
inline cudaError_t make_tile_map(CUtensorMap* map, const void* base, int planes, int N, int W, int rows) {
  static_assert(sizeof(T) == 2, "16-bit elements");
  const CUtensorMapDataType dt =
      std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return make_map(map, dt, 2, base, planes, N, W * 2, rows, 128, CU_TENSOR_MAP_SWIZZLE_128B);
}

}  // namespace fk
