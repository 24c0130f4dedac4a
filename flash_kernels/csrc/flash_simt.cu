// flash_simt: FlashAttention-2's loop order (Dao 2023) on CUDA cores, fp32 accumulation; forward and backward.
// What changes relative to the previous step (flash_fa1.cu): the two loops swap, and nothing else. The OUTER
// loop runs over Q blocks (one per thread block: the grid) and the inner loop over K/V tiles, so O_i, m_i, l_i
// stay in registers for the whole sweep over K/V, Q_i is read once, and O_i is normalised and written once,
// with the LSE the backward pass needs. The tile, the thread mapping and the per-tile arithmetic are
// flash_fa1's, through the same helpers (simt.cuh; block_size BS = Br = Bc: BS query rows per thread block, one
// warp per row, BS keys per K/V tile).
// Expected: FA1's traffic for O_i disappears (per Q block and K/V tile: O_i, m_i, l_i read and written back in
// fp32, Q_i re-read), and so do its two block-wide barriers per Q block and K/V tile; in exchange K/V tiles
// are read once per Q block instead of once per FA1_Q_BLOCKS Q blocks (re-reads that L2 can absorb: a head's K
// and V are Nk * D * 2 elements). The grid has FA1_Q_BLOCKS times more thread blocks, which helps at small B * H.
// Limits: both this step and flash_fa1 stay near 7 TFLOP/s: one warp per query row computes each score as a
// 32-lane dot product with a shuffle reduction, the CUDA-core ceiling the tensor-core step removes.
// Backward: one block per K/V block (one warp per key), looping over the Q blocks of every query head that
// shares the K/V head, P recomputed from LSE, Dd_i = rowsum(dO_i * O_i), dQ accumulated with fp32 atomics
// (fa2_backward in common.cuh wraps the kernel).
#include "simt.cuh"

namespace fk {

// ------------------------------------------------------------------ FA2 forward, CUDA cores
// Grid: one thread block per Q block of BS rows (blockIdx.x) of one query head (blockIdx.y).
template <typename T, int BS, int D>
__global__ void __launch_bounds__(BS * 32)
flash_simt_forward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                          T* __restrict__ O, float* __restrict__ LSE, Dims dm, float scale_log2, int causal) {
  constexpr int DPL = SimtTile<BS, D>::DPL;
  extern __shared__ float smem[];
  float *Qs, *Ks, *Vs;
  SimtTile<BS, D>::carve(smem, Qs, Ks, Vs);
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int Nq = dm.Nq, Nk = dm.Nk;
  const long base = long(blockIdx.y) * Nq * D;            // this query head's Q and O
  const long kv_base = dm.kv_head(blockIdx.y) * Nk * D;  // its key/value head's K and V
  const int q0 = blockIdx.x * BS;                         // outer loop (over Q blocks): the grid
  const int i = q0 + w;                                   // this warp's query row

  load_q_block<BS, D>(Qs, Q, base, q0, Nq);  // Q_i: read once
  float o[DPL] = {};                         // O_i, m_i, l_i: in registers for the whole sweep
  float m_i = -INFINITY, l_i = 0.f;
  const int kv_end = causal ? min(Nk, q0 + BS) : Nk;
  for (int j0 = 0; j0 < kv_end; j0 += BS) {  // inner loop: K/V tiles
    __syncthreads();  // previous tile fully consumed (and Q_i visible on the first pass)
    load_kv_tile<BS, D>(Ks, Vs, K, V, kv_base, j0, Nk);
    __syncthreads();
    const float s = tile_score<BS, D>(Qs + w * D, Ks, lane, i, j0, Nq, Nk, causal, scale_log2);
    float p;
    const float alpha = online_softmax_step(s, m_i, l_i, p);
#pragma unroll
    for (int c = 0; c < DPL; ++c) o[c] *= alpha;  // rescale O_i in registers
    accumulate_pv<BS, D>(o, p, Vs, lane);
  }
  if (i < Nq) write_row<D>(O, LSE, base + long(i) * D, long(blockIdx.y) * Nq + i, o, m_i, l_i, lane);
}

// ------------------------------------------------------------------ FA2 backward, CUDA cores
template <typename T, int BS, int D>
__global__ void __launch_bounds__(BS * 32)
flash_simt_backward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                           const float* __restrict__ LSE, const float* __restrict__ Dd, const T* __restrict__ dO,
                           float* __restrict__ dQacc, T* __restrict__ dK, T* __restrict__ dV, Dims dm, float scale,
                           int causal) {
  constexpr int DPL = D / 32;
  constexpr int QST = D + 1;  // padded Q/dO rows: lane r reads row r conflict-free
  extern __shared__ float smem[];
  float* Ks = smem;                 // [BS][D]   K_j block, one key per warp
  float* Vs = Ks + BS * D;          // [BS][D]
  float* Qs = Vs + BS * D;          // [BS][D+1]
  float* dOs = Qs + BS * QST;       // [BS][D+1]
  float* dSs = dOs + BS * QST;      // [BS q][BS+1 k]
  float* lse2 = dSs + BS * (BS + 1);  // [BS] LSE * log2(e)
  float* Dds = lse2 + BS;           // [BS]
  const int tid = threadIdx.x, lane = tid % 32, w = tid / 32;
  const int Nq = dm.Nq, Nk = dm.Nk, G = dm.H / dm.Hkv;
  const int kvh = blockIdx.y;  // b * Hkv + key/value head: the block sweeps its G query heads
  const long kv_base = long(kvh) * Nk * D;
  const long qh0 = (kvh / dm.Hkv) * dm.H + (kvh % dm.Hkv) * G;
  const int k0 = blockIdx.x * BS;
  const int j = k0 + w;  // this warp's key
  const float scale_log2 = scale * kLog2e;

  for (int idx = tid; idx < BS * D; idx += BS * 32) {
    int r = idx / D, c = idx % D;
    bool ok = k0 + r < Nk;
    Ks[idx] = ok ? to_f(K[kv_base + long(k0 + r) * D + c]) : 0.f;
    Vs[idx] = ok ? to_f(V[kv_base + long(k0 + r) * D + c]) : 0.f;
  }
  float dk[DPL] = {}, dv[DPL] = {};
  const int q_begin = causal ? (k0 / BS) * BS : 0;
  for (long qh = qh0; qh < qh0 + G; ++qh)
  for (int q0 = q_begin; q0 < Nq; q0 += BS) {
    const long base = qh * Nq * D;
    __syncthreads();
    for (int idx = tid; idx < BS * D; idx += BS * 32) {
      int r = idx / D, c = idx % D;
      bool ok = q0 + r < Nq;
      Qs[r * QST + c] = ok ? to_f(Q[base + long(q0 + r) * D + c]) : 0.f;
      dOs[r * QST + c] = ok ? to_f(dO[base + long(q0 + r) * D + c]) : 0.f;
    }
    for (int r = tid; r < BS; r += BS * 32) {
      bool ok = q0 + r < Nq;
      lse2[r] = ok ? LSE[qh * Nq + q0 + r] * kLog2e : 0.f;
      Dds[r] = ok ? Dd[qh * Nq + q0 + r] : 0.f;
    }
    __syncthreads();
    // lane r < BS: query row q0 + r against this warp's key j
    float p = 0.f, ds = 0.f;
    const int i = q0 + lane;
    if (lane < BS && i < Nq && j < Nk && !(causal && j > i)) {
      float s = 0.f, dp = 0.f;
#pragma unroll 16
      for (int d = 0; d < D; ++d) {
        s += Qs[lane * QST + d] * Ks[w * D + d];
        dp += dOs[lane * QST + d] * Vs[w * D + d];
      }
      p = fast_exp2(s * scale_log2 - lse2[lane]);
      ds = p * (dp - Dds[lane]);
    }
#pragma unroll 4
    for (int r = 0; r < BS; ++r) {
      float pr = __shfl_sync(0xffffffffu, p, r), dsr = __shfl_sync(0xffffffffu, ds, r);
#pragma unroll
      for (int c = 0; c < DPL; ++c) {
        dv[c] += pr * dOs[r * QST + lane + 32 * c];
        dk[c] += dsr * Qs[r * QST + lane + 32 * c];
      }
    }
    if (lane < BS) dSs[lane * (BS + 1) + w] = ds;
    __syncthreads();
    // dQ_i += scale * dS_ij K_j   over this block's BS keys
    for (int idx = tid; idx < BS * D; idx += BS * 32) {
      int r = idx / D, c = idx % D;
      if (q0 + r >= Nq) continue;
      float acc = 0.f;
#pragma unroll 8
      for (int kk = 0; kk < BS; ++kk) acc += dSs[r * (BS + 1) + kk] * Ks[kk * D + c];
      atomicAdd(&dQacc[base + long(q0 + r) * D + c], acc * scale);
    }
  }
  if (j < Nk) {
#pragma unroll
    for (int c = 0; c < DPL; ++c) {
      dK[kv_base + long(j) * D + lane + 32 * c] = from_f<T>(dk[c] * scale);
      dV[kv_base + long(j) * D + lane + 32 * c] = from_f<T>(dv[c]);
    }
  }
}

template <typename T, int BS, int D>
cudaError_t simt_forward_launch(const AttnArgs& a, cudaStream_t stream) {
  auto kernel = flash_simt_forward_kernel<T, BS, D>;
  constexpr int smem = SimtTile<BS, D>::kSmemBytes;
  cudaError_t err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(cdiv(a.Nq, BS), a.B * a.H), BS * 32, smem, stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o),
      a.lse, dims_of(a), a.scale * kLog2e, a.causal);
  return cudaGetLastError();
}

template <typename T, int BS, int D>
cudaError_t simt_backward_launch(const AttnArgs& a, cudaStream_t stream) {
  auto kernel = flash_simt_backward_kernel<T, BS, D>;
  const int smem = (2 * BS * D + 2 * BS * (D + 1) + BS * (BS + 1) + 2 * BS) * sizeof(float);
  cudaError_t err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(cdiv(a.Nk, BS), a.B * a.Hkv), BS * 32, smem, stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), a.lse, a.Dd,
      static_cast<const T*>(a.dO), a.dq_acc, static_cast<T*>(a.dk), static_cast<T*>(a.dv), dims_of(a), a.scale,
      a.causal);
  return cudaGetLastError();
}

template <typename T, int D>
cudaError_t simt_forward(const AttnArgs& a, cudaStream_t stream) {
  return by_block_size(a, [&](auto bs) { return simt_forward_launch<T, decltype(bs)::value, D>(a, stream); });
}

template <typename T, int D>
cudaError_t simt_backward(const AttnArgs& a, cudaStream_t stream) {
  return fa2_backward<T, D>(a, stream, [&] {
    return by_block_size(a, [&](auto bs) { return simt_backward_launch<T, decltype(bs)::value, D>(a, stream); });
  });
}

}  // namespace fk

int flash_simt_forward(const fk::AttnArgs& a, cudaStream_t stream) {
  return fk::dispatch_dtype_hdim</*fp32=*/true>(a, [&](auto t, auto d) {
    return fk::simt_forward<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}

int flash_simt_backward(const fk::AttnArgs& a, cudaStream_t stream) {
  return fk::dispatch_dtype_hdim</*fp32=*/true>(a, [&](auto t, auto d) {
    return fk::simt_backward<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
