// The epilogue of flash_wgmma's forward kernels: each consumer warpgroup normalises its 64 rows of O by the row
// sums, writes their LSE (fp32, natural log) and stores the rows (fp16 / bf16) to global memory.
//
// How: the rows are staged in shared memory in the SW128 layout (conflict-free 4-byte writes by the accumulator
// fragment's owners), the warpgroup meets at a named barrier of its own, then each thread writes 16-byte chunks of
// whole rows (coalesced). The 16-bit kernels stage in the warpgroup's own rows of the Q tile, which it no longer
// reads; FP8 stages in a buffer of its own. The warp-specialised kernel then hands the Q buffer back to the
// producer (ws_epilogue).
// Limits: no row at or past Nq or the work tile's end is written; named barriers 1 .. (consumer warpgroups).
#pragma once
#include <climits>

#include "wgmma.cuh"

namespace fk {

// Normalise one warpgroup's O, write its LSE, stage its rows in its own (no longer read) rows
// r0 .. r0 + 63 of the [BM][D] SW128 Q tile at `tile` (conflict-free 4-byte writes), meet the other
// threads of the warpgroup at named barrier `bar_id`, and write the rows out 16 bytes per thread, none at or
// past min(Nq, row_end) (row_end: where the work tile's rows end, when that is before Nq). ADD: `add` (fp32 [D], or
// null) is added to every normalised row (FP8's centred V: V's mean row, taken out before quantization).
template <typename T, int D, int BM, bool ADD = false>
__device__ __forceinline__ void store_rows(float (&o)[D / 2], const float (&m)[2], float (&l)[2], uint8_t* tile,
                                           int r0, int bar_id, int wg_row0, int Nq, long bh, T* __restrict__ O,
                                           float* __restrict__ LSE, float scale_log2, int row_end = INT_MAX,
                                           const float* __restrict__ add = nullptr) {
  const int t128 = threadIdx.x & 127, warp = t128 >> 5, lane = t128 & 31;
  const int row0 = wg_row0 + warp * 16 + (lane >> 2);
  const int end = min(Nq, row_end);  // rows from here on are not this call's to write
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    inv[h] = 1.f / l[h];
  }
  const int srow = r0 + warp * 16 + (lane >> 2);  // staging row of h = 0
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    float2 a = make_float2(0.f, 0.f);  // columns 8 j + 2 (lane & 3) and the next
    if constexpr (ADD)
      if (add != nullptr) a = __ldg(reinterpret_cast<const float2*>(add + 8 * j + 2 * (lane & 3)));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float x = o[4 * j + 2 * h] * inv[h], y = o[4 * j + 2 * h + 1] * inv[h];
      if constexpr (ADD) {
        x += a.x;
        y += a.y;
      }
      *reinterpret_cast<uint32_t*>(tile + sw128<BM>(srow + 8 * h, j) + (lane & 3) * 4) = pack2<T>(x, y);
    }
  }
  if ((lane & 3) == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      if (row < end) LSE[bh * Nq + row] = (m[h] * scale_log2 + __log2f(l[h])) * kLn2;
    }
  }
  bar_sync(bar_id, 128);
  T* Ob = O + bh * Nq * D;
  constexpr int U = D / 8;
#pragma unroll
  for (int c = t128; c < 64 * U; c += 128) {
    const int r = c / U, chunk = c % U;
    if (wg_row0 + r < end)
      *reinterpret_cast<uint4*>(Ob + long(wg_row0 + r) * D + chunk * 8) =
          *reinterpret_cast<const uint4*>(tile + sw128<BM>(r0 + r, chunk));
  }
}

// The warp-specialised kernel's epilogue of one work tile: store_rows staged in Q buffer `tile` (rows of warpgroup
// c), then the buffer goes back to the producer: this thread's generic reads and writes of it are ordered before
// the copy engine's next writes (proxy fence), then one arrival per thread on empty_q.
template <typename T, int D, int BM>
__device__ __forceinline__ void ws_epilogue(float (&o)[D / 2], const float (&m)[2], float (&l)[2], uint8_t* tile,
                                            uint32_t empty_q, int c, int wg_row0, int Nq, long bh, int q_end,
                                            T* __restrict__ O, float* __restrict__ LSE, float scale_log2) {
  // writes no row past Nq or the tile's rows
  store_rows<T, D, BM>(o, m, l, tile, c * 64, 1 + c, wg_row0, Nq, bh, O, LSE, scale_log2, q_end);
  fence_proxy_async();
  mbar_arrive(empty_q);
}

}  // namespace fk
