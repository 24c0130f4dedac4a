// The CUDA-core FlashAttention tile, shared by flash_fa1.cu (FlashAttention-1's loop order) and
// flash_simt.cu (FlashAttention-2's), so that the two forward kernels differ only in their loops and
// in where O_i, m_i, l_i live between K/V tiles.
//
// Mapping (BS, the variants' block_size option: Br = Bc = BS):
//   thread block  BS warps (BS * 32 threads)
//   Q block       BS query rows, one warp per row (warp w owns row q0 + w)
//   K/V tile      BS keys; lane j < BS scores key j0 + j against its warp's row (lanes >= BS idle there)
//   O_i           lane owns output columns lane + 32 c, c < D / 32 (DPL registers per lane)
//   shared mem    Qs [BS][D], Ks [BS][D+1] (padded: lane j reads K_j[d] conflict-free), Vs [BS][D], fp32
// Scores are kept in the log2 domain: s = scale * log2(e) * q_i . k_j, so exp is one ex2 instruction.
#pragma once
#include "common.cuh"

namespace fk {

template <int BS, int D>
struct SimtTile {
  static constexpr int kThreads = BS * 32;
  static constexpr int DPL = D / 32;  // output columns per lane
  static constexpr int KST = D + 1;   // padded K row
  static constexpr int kSmemBytes = (BS * D * 2 + BS * KST) * int(sizeof(float));
  // carve the dynamic shared memory into Qs, Ks, Vs
  __device__ __forceinline__ static void carve(float* smem, float*& Qs, float*& Ks, float*& Vs) {
    Qs = smem;
    Ks = Qs + BS * D;
    Vs = Ks + BS * KST;
  }
};

// Qs <- rows q0 .. q0 + BS - 1 of Q (from base, [Nq, D]) in fp32, zero past Nq; the whole block loads.
// Thread t loads column t % D of rows t / D + k * BS * 32 / D, k < D / 32 (coalesced along D).
template <int BS, int D, typename T>
__device__ __forceinline__ void load_q_block(float* Qs, const T* __restrict__ Q, long base, int q0, int Nq) {
  static_assert((BS * 32) % D == 0, "a pass of the block covers whole rows");
  const int c = threadIdx.x % D, r0 = threadIdx.x / D;
#pragma unroll
  for (int k = 0; k < D / 32; ++k) {
    const int r = r0 + k * (BS * 32 / D);
    Qs[r * D + c] = (q0 + r < Nq) ? to_f(Q[base + long(q0 + r) * D + c]) : 0.f;
  }
}

// Ks, Vs <- keys j0 .. j0 + BS - 1 of K and V (from kv_base, [Nk, D]) in fp32, zero past Nk; the whole
// block loads, with load_q_block's thread mapping.
template <int BS, int D, typename T>
__device__ __forceinline__ void load_kv_tile(float* Ks, float* Vs, const T* __restrict__ K, const T* __restrict__ V,
                                             long kv_base, int j0, int Nk) {
  static_assert((BS * 32) % D == 0, "a pass of the block covers whole rows");
  constexpr int KST = SimtTile<BS, D>::KST;
  const int c = threadIdx.x % D, r0 = threadIdx.x / D;
#pragma unroll
  for (int k = 0; k < D / 32; ++k) {
    const int r = r0 + k * (BS * 32 / D);
    const bool ok = j0 + r < Nk;
    Ks[r * KST + c] = ok ? to_f(K[kv_base + long(j0 + r) * D + c]) : 0.f;
    Vs[r * D + c] = ok ? to_f(V[kv_base + long(j0 + r) * D + c]) : 0.f;
  }
}

// Does query i see key j? Keys past the end never; with causal masking (aligned top-left, as SDPA's
// is_causal) only keys j <= i.
__device__ __forceinline__ bool key_visible(int i, int j, int Nq, int Nk, int causal) {
  return i < Nq && j < Nk && !(causal && j > i);
}

// This lane's score of the tile: s_ij = scale_log2 * Q_i . K_j for key j = j0 + lane against its
// warp's row i (Q_i = Qrow in shared memory), -inf where the key is masked or the lane has no key.
template <int BS, int D>
__device__ __forceinline__ float tile_score(const float* Qrow, const float* Ks, int lane, int i, int j0, int Nq,
                                            int Nk, int causal, float scale_log2) {
  constexpr int KST = SimtTile<BS, D>::KST;
  float s = -INFINITY;
  if (lane < BS && key_visible(i, j0 + lane, Nq, Nk, causal)) {
    float acc = 0.f;
#pragma unroll 16
    for (int d = 0; d < D; ++d) acc += Qrow[d] * Ks[lane * KST + d];
    s = acc * scale_log2;
  }
  return s;
}

// 2^(x - m), and 0 for x = -inf (a masked score, or a row max before its first visible key).
__device__ __forceinline__ float exp2_from(float x, float m) {
  return (x == -INFINITY) ? 0.f : fast_exp2(x - m);
}

// One tile of the online softmax for this warp's row: s is this lane's score (log2 domain). Updates the
// running max m_i and sum l_i, sets p = 2^(s - m_new) (this lane's unnormalised probability) and
// returns alpha = 2^(m_old - m_new), the factor by which the running O_i must be rescaled before the
// tile's P V is added.
__device__ __forceinline__ float online_softmax_step(float s, float& m_i, float& l_i, float& p) {
  const float m_new = fmaxf(m_i, warp_max(s));
  p = exp2_from(s, m_new);
  const float alpha = exp2_from(m_i, m_new);
  l_i = l_i * alpha + warp_sum(p);
  m_i = m_new;
  return alpha;
}

// o += P V over the tile's BS keys: lane jj's p is broadcast to the warp, each lane adds its columns.
template <int BS, int D>
__device__ __forceinline__ void accumulate_pv(float (&o)[D / 32], float p, const float* Vs, int lane) {
#pragma unroll 4
  for (int jj = 0; jj < BS; ++jj) {
    float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
    for (int c = 0; c < D / 32; ++c) o[c] += pj * Vs[jj * D + lane + 32 * c];
  }
}

// Row i's results: O_i = o / l_i in the output dtype (from offset o_off) and its
// LSE_i = ln(sum_j e^{scale q_i . k_j}) = (m_i + log2 l_i) ln 2 (at lse_off).
template <int D, typename T>
__device__ __forceinline__ void write_row(T* __restrict__ O, float* __restrict__ LSE, long o_off, long lse_off,
                                          const float (&o)[D / 32], float m_i, float l_i, int lane) {
  const float inv = 1.f / l_i;
#pragma unroll
  for (int c = 0; c < D / 32; ++c) O[o_off + lane + 32 * c] = from_f<T>(o[c] * inv);
  if (lane == 0) LSE[lse_off] = (m_i + __log2f(l_i)) * kLn2;
}

// The block-size table: option = BS = Br = Bc (one warp per row), as flash_kernels/_ops.py passes it.
template <typename F>
cudaError_t by_block_size(const AttnArgs& a, F&& f) {
  switch (a.option) {
    case 4: return f(IntTag<4>{});
    case 8: return f(IntTag<8>{});
    case 16: return f(IntTag<16>{});
    case 32: return f(IntTag<32>{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fk
