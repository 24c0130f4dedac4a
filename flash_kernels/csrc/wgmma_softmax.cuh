// The per-warpgroup tile arithmetic that flash_wgmma's forward kernels share, whatever their operand
// type (fp16 / bf16 in flash_wgmma_fwd.cu, e4m3 in flash_wgmma_fp8.cu): the online softmax of one score
// tile held in wgmma accumulator fragments (wgmma.cuh: d[4 j + 2 h + e] = row 16 w + g + 8 h, column
// 8 j + 2 t + e) and the rescale of O (wgmma_fwd_epilogue.cuh normalises O and stores the rows).
#pragma once
#include "wgmma.cuh"

namespace fk {

// The online softmax of one score tile in place: mask keys past Nk and (causal) keys after the
// query, on the raw scores (scale > 0: the launcher asks for it, so the largest raw score is the
// largest scaled one); update the running max m and sum l (a per-thread partial; the quad is
// reduced at the end); s becomes P (fp32); alpha = the factor O must be scaled by, the result whether
// any row max of this warp grew (each warp owns its rows' registers, so the test is warp-uniform).
// row0: this thread's first row (the second is row0 + 8); wg_row0: the warpgroup's first row.
// MASK: kMaskIfNeeded tests whether the tile reaches past Nk or the diagonal (a branch); kMaskAlways
// masks every tile with compares and selects (no branch); kMaskNever masks nothing: the warp-specialised
// kernels visit a block's K/V tiles last to first, so only the first tile they compute can reach past Nk
// or the diagonal and their overlapped loop (which must not branch) needs no mask at all.
// EMU > 0: the exponentials of every EMU-th 8-column block of the tile (blocks EMU - 1, 2 EMU - 1, ...) by
// exp2_poly, the others on the SFU (flash_wgmma_fp8.cu); 0: all on the SFU.
// SCALED_M: m is kept in exp2 units (the largest raw score times scale_log2), so that scale_log2 may change from
// one tile to the next (FP8 with a scale per K block: flash_wgmma_fp8.cu); the LSE is then m + log2(l) (scale 1).
// Otherwise m is the largest raw score and scale_log2 must be the same for every tile of a row.
enum MaskMode { kMaskIfNeeded, kMaskAlways, kMaskNever };
template <int BN, MaskMode MASK = kMaskIfNeeded, int EMU = 0, bool SCALED_M = false>
__device__ __forceinline__ bool softmax_scores(float (&s)[BN / 2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                               int j0, int Nk, int causal, int wg_row0, int row0, int lane,
                                               float scale_log2) {
  constexpr int NS = BN / 2;
  if (MASK == kMaskAlways || (MASK == kMaskIfNeeded && (j0 + BN > Nk || (causal && j0 + BN - 1 > wg_row0)))) {
    // s[i] holds key j0 + 2 t + c_i (c_i = 8 (i >> 2) + (i & 1), a constant once unrolled) of row h = (i >> 1) & 1,
    // which sees keys below min(Nk, row + 1) (causal) or Nk: one compare against that bound, moved by j0 + 2 t,
    // and a select per score (a per-score key, two compares and an or had cost a kernel that masked every tile
    // a fifth of its warp samples)
    const int base = j0 + (lane & 3) * 2;
    int lim[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) lim[h] = (causal ? min(Nk, row0 + 8 * h + 1) : Nk) - base;
#pragma unroll
    for (int i = 0; i < NS; ++i)
      if ((i >> 2) * 8 + (i & 1) >= lim[(i >> 1) & 1]) s[i] = -INFINITY;
  }
  // row h of this thread is s[4 j + 2 h + e]; its other 12 values sit in the 3 other lanes of the quad
  bool grew = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    float m_new, ms;
    if constexpr (SCALED_M) {
      m_new = fmaxf(m[h], mx * scale_log2);  // scale_log2 > 0: -inf stays -inf
      ms = (m_new == -INFINITY) ? 0.f : m_new;
      alpha[h] = fast_exp2(m[h] - ms);
    } else {
      m_new = fmaxf(m[h], mx);
      ms = (m_new == -INFINITY) ? 0.f : m_new * scale_log2;
      alpha[h] = fast_exp2(m[h] * scale_log2 - ms);
    }
    grew |= m_new != m[h];
    m[h] = m_new;
    float rs = 0.f;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      if (EMU > 0 && j % (EMU > 0 ? EMU : 1) == EMU - 1) {
        s[4 * j + 2 * h] = exp2_poly(fmaf(s[4 * j + 2 * h], scale_log2, -ms));
        s[4 * j + 2 * h + 1] = exp2_poly(fmaf(s[4 * j + 2 * h + 1], scale_log2, -ms));
      } else {
        s[4 * j + 2 * h] = fast_exp2(fmaf(s[4 * j + 2 * h], scale_log2, -ms));
        s[4 * j + 2 * h + 1] = fast_exp2(fmaf(s[4 * j + 2 * h + 1], scale_log2, -ms));
      }
      rs += s[4 * j + 2 * h] + s[4 * j + 2 * h + 1];
    }
    l[h] = l[h] * alpha[h] + rs;
  }
  return __any_sync(0xffffffffu, grew);
}

template <int NO>
__device__ __forceinline__ void rescale_o(float (&o)[NO], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < NO; ++i) o[i] *= alpha[(i >> 1) & 1];
}

}  // namespace fk
