// flash_fa1: FlashAttention-1's loop order (Dao et al. 2022, Algorithm 1) on CUDA cores, fp32 accumulation.
// What changes relative to the previous step (tiled.cu): S and P are never written to global memory.
// Scores, softmax and P V are fused into one kernel that walks K/V in tiles and keeps a running
// (online) softmax per query row: m_i (row max), l_i (row sum) and the unnormalised O_i, each
// rescaled by 2^(m_old - m_new) whenever a tile raises the row max. Expected: the B*H*N*N*4-byte
// score matrices and their DRAM round trips disappear (memory O(N D) instead of O(N^2)), at the price
// of the rescaling work; K/V tiles are staged in shared memory and reused by every Q block of the
// thread block.
//
// The tile and the thread mapping are flash_simt.cu's, through the same helpers (simt.cuh): BS query
// rows per Q block, one warp per row, BS keys per K/V tile, lane j scoring key j, the same loads,
// scores, masking and exp. The two forward kernels differ only in
//   - the loops: here the OUTER loop runs over K/V tiles and the inner loop over the Q blocks a thread
//     block owns (FA1_Q_BLOCKS of them); flash_simt's outer loop is over Q blocks (one per thread
//     block, the grid) and its inner loop over K/V tiles;
//   - where O_i, m_i, l_i live between K/V tiles: here in global memory (fp32 workspaces), read,
//     rescaled and written back at every K/V step, with Q_i re-read too; flash_simt keeps them in
//     registers and reads Q_i once.
// Algorithm 1 also divides O_i by l_i at every step; here O_i stays unnormalised and is divided once,
// in the final pass that writes O and LSE, as flash_simt does, so that the loop order and the place of
// O_i are the only differences. Per Q block and K/V tile this costs 2 * BS * D * 4 bytes of O_i traffic
// plus Q_i's BS * D elements, against one K/V tile load shared by FA1_Q_BLOCKS Q blocks; the next step
// (flash_simt.cu) removes that traffic.
// Limits: forward only (no backward of its own); block_size 4, 8, 16 or 32; the O_i round trips cost it 5-10 %
// against flash_simt at the same block size (docs/results.md, the d128 and convention tables).
#include "simt.cuh"

namespace fk {

// Q blocks per thread block: each K/V tile loaded into shared memory serves this many Q blocks.
constexpr int FA1_Q_BLOCKS = 4;

// ------------------------------------------------------------------ FA1 forward, CUDA cores
// Grid: one thread block per FA1_Q_BLOCKS Q blocks of BS rows (blockIdx.x) of one query head
// (blockIdx.y). Oacc [B, H, Nq, D], Mg and Lg [B, H, Nq]: fp32 workspaces holding O_i, m_i, l_i
// between K/V tiles.
template <typename T, int BS, int D>
__global__ void __launch_bounds__(BS * 32)
flash_fa1_forward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                         T* __restrict__ O, float* __restrict__ LSE, float* __restrict__ Oacc, float* __restrict__ Mg,
                         float* __restrict__ Lg, Dims dm, float scale_log2, int causal) {
  constexpr int DPL = SimtTile<BS, D>::DPL;
  extern __shared__ float smem[];
  float *Qs, *Ks, *Vs;
  SimtTile<BS, D>::carve(smem, Qs, Ks, Vs);
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int Nq = dm.Nq, Nk = dm.Nk;
  const long base = long(blockIdx.y) * Nq * D;            // this query head's Q, O and O_i workspace
  const long kv_base = dm.kv_head(blockIdx.y) * Nk * D;  // its key/value head's K and V
  const long row_base = long(blockIdx.y) * Nq;            // its m_i, l_i and LSE
  const int q_begin = blockIdx.x * BS * FA1_Q_BLOCKS;
  const int q_end = min(Nq, q_begin + BS * FA1_Q_BLOCKS);

  // O_i = 0, m_i = -inf, l_i = 0 in global memory (Algorithm 1, line 2); row q0 + w is always warp w's
  for (int q0 = q_begin; q0 < q_end; q0 += BS) {
    const int i = q0 + w;
    if (i >= Nq) break;
#pragma unroll
    for (int c = 0; c < DPL; ++c) Oacc[base + long(i) * D + lane + 32 * c] = 0.f;
    if (lane == 0) { Mg[row_base + i] = -INFINITY; Lg[row_base + i] = 0.f; }
  }
  const int kv_end = causal ? min(Nk, q_end) : Nk;
  for (int j0 = 0; j0 < kv_end; j0 += BS) {  // outer loop: K/V tiles
    __syncthreads();  // previous tile fully consumed
    load_kv_tile<BS, D>(Ks, Vs, K, V, kv_base, j0, Nk);
    for (int q0 = q_begin; q0 < q_end; q0 += BS) {  // inner loop: Q blocks
      if (causal && j0 >= q0 + BS) continue;  // (block-uniform) the tile is in the future of every row
      const int i = q0 + w;                   // this warp's query row
      __syncthreads();  // previous Q block consumed (and the K/V tile visible)
      load_q_block<BS, D>(Qs, Q, base, q0, Nq);  // Q_i: re-read at every K/V tile
      __syncthreads();
      if (i >= Nq) continue;  // (warp-uniform) no row: nothing to score, read or write
      const float s = tile_score<BS, D>(Qs + w * D, Ks, lane, i, j0, Nq, Nk, causal, scale_log2);
      float o[DPL];  // O_i, m_i, l_i: read from global memory ...
#pragma unroll
      for (int c = 0; c < DPL; ++c) o[c] = Oacc[base + long(i) * D + lane + 32 * c];
      float m_i = Mg[row_base + i], l_i = Lg[row_base + i];
      float p;
      const float alpha = online_softmax_step(s, m_i, l_i, p);
#pragma unroll
      for (int c = 0; c < DPL; ++c) o[c] *= alpha;  // ... rescaled ...
      accumulate_pv<BS, D>(o, p, Vs, lane);
#pragma unroll
      for (int c = 0; c < DPL; ++c) Oacc[base + long(i) * D + lane + 32 * c] = o[c];  // ... and written back
      __syncwarp();  // every lane has read m_i, l_i before lane 0 overwrites them
      if (lane == 0) { Mg[row_base + i] = m_i; Lg[row_base + i] = l_i; }
    }
  }
  // final pass: O = O_i / l_i in the output dtype, LSE = m_i + log l_i (row q0 + w is warp w's, as above)
  __syncwarp();
  for (int q0 = q_begin; q0 < q_end; q0 += BS) {
    const int i = q0 + w;
    if (i >= Nq) break;
    float o[DPL];
#pragma unroll
    for (int c = 0; c < DPL; ++c) o[c] = Oacc[base + long(i) * D + lane + 32 * c];
    write_row<D>(O, LSE, base + long(i) * D, row_base + i, o, Mg[row_base + i], Lg[row_base + i], lane);
  }
}

template <typename T, int BS, int D>
cudaError_t fa1_forward_launch(const AttnArgs& a, cudaStream_t stream) {
  auto kernel = flash_fa1_forward_kernel<T, BS, D>;
  constexpr int smem = SimtTile<BS, D>::kSmemBytes;
  cudaError_t err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(cdiv(a.Nq, BS * FA1_Q_BLOCKS), a.B * a.H), BS * 32, smem, stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o),
      a.lse, a.ws[0], a.ws[1], a.ws[2], dims_of(a), a.scale * kLog2e, a.causal);
  return cudaGetLastError();
}

// FA1 keeps O_i (fp32), m_i and l_i in global memory: workspaces ws[0], ws[1], ws[2].
template <typename T, int D>
cudaError_t fa1_forward(const AttnArgs& a, cudaStream_t stream) {
  return by_block_size(a, [&](auto bs) { return fa1_forward_launch<T, decltype(bs)::value, D>(a, stream); });
}

}  // namespace fk

int flash_fa1_forward(const fk::AttnArgs& a, cudaStream_t stream) {
  return fk::dispatch_dtype_hdim</*fp32=*/true>(a, [&](auto t, auto d) {
    return fk::fa1_forward<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
