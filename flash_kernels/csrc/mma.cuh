// Warp-level tensor-core helpers for sm_80+ (used on sm_90 through mma.sync):
// mma.sync m16n8k16 with fp32 accumulators, ldmatrix (plain and transposed), cp.async with
// zero-fill, and the XOR swizzle of 16-byte chunks that keeps ldmatrix free of bank conflicts.
//
// Fragment layouts of mma.m16n8k16 (lane = threadIdx.x % 32, g = lane / 4, t = lane % 4):
//   A 16x16 (row): a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B 16x8  (col): b0 (k = 2t..2t+1, n = g)  b1 (k = 2t+8.., n = g)
//   C 16x8       : c0,c1 (g, 2t..2t+1)  c2,c3 (g+8, 2t..2t+1)
// so the C fragments of two adjacent n-tiles are exactly the A fragment of a k16 step:
// P never leaves registers between S = Q K^T and O += P V.
#pragma once
#include "common.cuh"

namespace fk {

template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two fp32 values -> one register of two 16-bit values (low half = first).
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// stmatrix (sm_90): the inverse of ldmatrix_x4; lane l gives the row address of matrix l / 8.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");  // a store the compiler cannot see: no shared-memory access moves across it
}

// Two adjacent fp32 atomic adds in global memory (one red.global.add.v2.f32 on sm_90; p 8-byte aligned).
__device__ __forceinline__ void red_add_f32x2(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

// 16-byte global->shared copy; src_bytes = 0 fills the destination with zeros (rows past N).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// 4-byte global->shared copy (per-row scalars); src_bytes = 0 writes a zero.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Byte offset of 16-byte chunk `chunk` of row `row` in a [rows][D] tile of 16-bit elements, chunks
// XOR-swizzled so that the 8 consecutive rows one ldmatrix matrix reads hit 8 distinct 16-byte bank
// groups (a 128-byte span). Rows of >= 8 chunks XOR with row % 8; 4-chunk rows (two rows per span)
// XOR with (row / 2) % 4.
template <int D>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  static_assert(D >= 32, "rows of at least 64 bytes");
  constexpr int U = D / 8;  // chunks per row
  const int x = U >= 8 ? (row & 7) : ((row >> 1) & 3);
  return uint32_t(row * (D * 2) + ((chunk ^ x) << 4));
}

// ldmatrix.x4 fragment loads from a swizzled tile of rows of W 16-bit elements: the lane address
// arithmetic of the four ways the kernels read a 16 x 16 block of a tile, named once.
//   ldsm_a : the A fragment (m16 x k16) of a row-major [m][k] tile        rows m0.., k columns 16 k16..
//   ldsm_b : two B fragments (k16 x n8, n0.. and n0+8..) of an [n][k] tile  rows n0.., k columns 16 k16..
//   ldsm_bt: two B fragments (n8 at columns 16 n16 and 16 n16 + 8) of a [k][n] tile (transposing load)
//   ldsm_at: the A fragment of the transpose of a [k][m] tile (m columns 16 m16..; transposing load)
template <int W>
__device__ __forceinline__ void ldsm_a(uint32_t (&r)[4], uint32_t tile, int m0, int k16) {
  const int lane = threadIdx.x & 31;
  ldmatrix_x4(r, tile + swz<W>(m0 + (lane & 15), 2 * k16 + (lane >> 4)));
}
template <int W>
__device__ __forceinline__ void ldsm_b(uint32_t (&r)[4], uint32_t tile, int n0, int k16) {
  const int lane = threadIdx.x & 31;
  ldmatrix_x4(r, tile + swz<W>(n0 + (lane & 7) + ((lane >> 4) << 3), 2 * k16 + ((lane >> 3) & 1)));
}
template <int W>
__device__ __forceinline__ void ldsm_bt(uint32_t (&r)[4], uint32_t tile, int k0, int n16) {
  const int lane = threadIdx.x & 31;
  ldmatrix_x4_trans(r, tile + swz<W>(k0 + (lane & 7) + (((lane >> 3) & 1) << 3), 2 * n16 + (lane >> 4)));
}
template <int W>
__device__ __forceinline__ void ldsm_at(uint32_t (&r)[4], uint32_t tile, int k0, int m16) {
  const int lane = threadIdx.x & 31;
  ldmatrix_x4_trans(r, tile + swz<W>(k0 + (lane & 7) + ((lane >> 4) << 3), 2 * m16 + ((lane >> 3) & 1)));
}

// Store an A-fragment-shaped 16 x 16 block (the packed C fragments of two adjacent n8 tiles, as
// ldsm_a would read them back) into a swizzled [rows][W] tile at rows m0.., columns 16 n16..
template <int W>
__device__ __forceinline__ void stsm_a(uint32_t tile, int m0, int n16, const uint32_t (&r)[4]) {
  const int lane = threadIdx.x & 31;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  stmatrix_x4(tile + swz<W>(m0 + (lane & 15), 2 * n16 + (lane >> 4)), r);
#else  // sm_80/86/89: the same bytes with four 4-byte stores (matrix i: rows +8(i&1), chunk +(i>>1))
#pragma unroll
  for (int i = 0; i < 4; ++i)
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(tile + swz<W>(m0 + (i & 1) * 8 + (lane >> 2), 2 * n16 + (i >> 1)) +
                                                  (lane & 3) * 4), "r"(r[i]));
#endif
}

// Write a warp's m16 x n8 accumulator tile (C layout), converted to T, into a swizzled [rows][W]
// 16-bit tile at rows m0.., columns 8 n8..; `mul` scales rows g (first two values) and g + 8.
template <int W, typename T>
__device__ __forceinline__ void stsm_c(uint8_t* tile, const float (&c)[4], int m0, int n8, float mul0 = 1.f,
                                       float mul1 = 1.f) {
  const int lane = threadIdx.x & 31, r = m0 + (lane >> 2), b = (lane & 3) * 4;
  *reinterpret_cast<uint32_t*>(tile + swz<W>(r, n8) + b) = pack2<T>(c[0] * mul0, c[1] * mul0);
  *reinterpret_cast<uint32_t*>(tile + swz<W>(r + 8, n8) + b) = pack2<T>(c[2] * mul1, c[3] * mul1);
}

// Copy rows [r0, r0 + ROWS) of a [N][D] matrix into a swizzled [ROWS][D] shared tile with cp.async,
// zero-filling rows >= N. NT threads cooperate: thread tid copies 16-byte chunk tid % (D / 8) of rows
// tid / (D / 8) + i * STEP. The trip count, the chunk and each step's offsets are then known at
// compile time, so a copy costs no index division and no 64-bit pointer math of its own (a loop
// over c = tid, tid + NT, ... has a runtime trip count: ptxas kept a loop with bounds checks).
template <int ROWS, int D, int NT, typename T>
__device__ __forceinline__ void load_tile_async(uint32_t tile, const T* __restrict__ src, int r0, int N, int tid) {
  constexpr int U = D / 8, STEP = NT / U;  // chunks per row; rows per step of all NT threads
  static_assert(NT % U == 0 && ROWS % STEP == 0, "NT threads cover whole rows, and the tile whole steps");
  const int row = tid / U, chunk = tid % U;
  const T* p = src + (long(r0) + row) * D + chunk * 8;
  if (r0 + ROWS <= N) {  // every row exists: the case of all but a ragged last tile
#pragma unroll
    for (int i = 0; i < ROWS / STEP; ++i) cp_async_16(tile + swz<D>(row + i * STEP, chunk), p + i * STEP * D, 16);
  } else {
#pragma unroll
    for (int i = 0; i < ROWS / STEP; ++i) {
      const bool ok = r0 + row + i * STEP < N;
      cp_async_16(tile + swz<D>(row + i * STEP, chunk), ok ? p + i * STEP * D : src, ok ? 16 : 0);
    }
  }
}

// Store a swizzled [ROWS][D] shared tile to rows [r0, r0 + ROWS) of a [N][D] matrix, 16 bytes per thread.
template <int ROWS, int D, int NT, typename T>
__device__ __forceinline__ void store_tile(const T* tile, T* __restrict__ dst, int r0, int N, int tid) {
  constexpr int CHUNKS = ROWS * D / 8;
  const char* base = reinterpret_cast<const char*>(tile);
#pragma unroll
  for (int c = tid; c < CHUNKS; c += NT) {
    const int row = c / (D / 8), chunk = c % (D / 8);
    if (r0 + row < N)
      *reinterpret_cast<uint4*>(dst + long(r0 + row) * D + chunk * 8) =
          *reinterpret_cast<const uint4*>(base + swz<D>(row, chunk));
  }
}

}  // namespace fk
