// flash_wgmma forward: FlashAttention-2's loop on Hopper's warpgroup tensor-core instructions (sm_90a).
// Relative to flash_mma: each matrix product is one asynchronous wgmma per k16 step for a whole
// warpgroup (64 query rows) instead of many warp-level mma.sync, with its operands read by the
// tensor cores straight from shared memory (no ldmatrix): S = Q K^T is wgmma m64nBNk16 with Q and
// K both from shared memory (K-major, 128-byte swizzle), O += P V is wgmma m64nDk16 with P from
// registers (the S accumulators repacked to 16 bits, as in FA3) and V from shared memory read
// MN-major (the transpose bit: V stays [keys][D] as it is in memory, no transposing copy).
//
// Block: BM = 64 * NWG query rows, one consumer warpgroup per 64 rows (NWG = 2 or 3), no producer:
// every thread copies tiles with cp.async (Q once; K and V double-buffered, the next tile in flight
// while this one is used), fences them into the async proxy and meets at __syncthreads. Each
// warpgroup then runs: S = Q_i K_j^T (wgmma SS, D / 16 k-steps), mask, online softmax on the
// accumulator fragment (running max in raw score units, exp2 with the scale folded in, the row's
// 4 lanes reduce with two shuffles), O rescaled when a row max grew, O += P V_j (wgmma RS, BN / 16
// k-steps), each product waited for at once (no overlap of softmax and wgmma inside a warpgroup:
// that and TMA are the next steps). Causal launches visit the heaviest query blocks first and a
// warpgroup skips key tiles wholly after its rows. Grouped-query attention: query head h reads
// key/value head h / (H / Hkv) (Dims::kv_head); causal alignment top-left (query i sees keys j <= i).
// Outputs as flash_mma's: O normalised, LSE = natural log of sum_j exp(scale q_i . k_j), fp32.
#include "wgmma.cuh"

namespace fk {

template <typename T, int D, int BM, int BN>
__global__ void __launch_bounds__(BM / 64 * 128, 1)
flash_wgmma_forward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                           T* __restrict__ O, float* __restrict__ LSE, Dims dm, float scale_log2, int causal) {
  static_assert(BM % 64 == 0 && (BN == 64 || BN == 128) && (D == 64 || D == 128), "tile shape");
  constexpr int NWG = BM / 64, NT = NWG * 128;
  constexpr int KD = D / 16;           // k16 steps of S = Q K^T (over the head dim)
  constexpr int KB = BN / 16;          // k16 steps of O += P V (over the keys of a tile)
  constexpr int NS = BN / 2, NO = D / 2;  // accumulator registers per thread: S, O
  constexpr uint32_t TQ = BM * D * 2, TKV = BN * D * 2;  // tile bytes
  extern __shared__ uint8_t smem_raw[];
  // SW128 tiles start on 1024-byte boundaries (the launcher allocates 1 KB of slack)
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sQ = (raw + 1023u) & ~1023u;  // [BM][D]
  const uint32_t sK = sQ + TQ;                 // [2][BN][D]
  const uint32_t sV = sK + 2 * TKV;            // [2][BN][D]
  uint8_t* const smem = smem_raw + (sQ - raw);

  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int Nq = dm.Nq, Nk = dm.Nk;
  const long bh = blockIdx.y;  // b * H + h
  const int q0 = (causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x)) * BM;
  const T* Qb = Q + bh * Nq * D;
  const T* Kb = K + dm.kv_head(bh) * Nk * D;
  const T* Vb = V + dm.kv_head(bh) * Nk * D;
  const int kv_len = causal ? min(Nk, q0 + BM) : Nk;
  const int n_kv = (kv_len + BN - 1) / BN;
  const int wg_row0 = q0 + wg * 64;               // first query row of this warpgroup
  const int row0 = wg_row0 + warp * 16 + (lane >> 2);  // this thread's rows: row0, row0 + 8

  load_tile_sw128<BM, D, NT>(sQ, Qb, q0, Nq, tid);
  load_tile_sw128<BN, D, NT>(sK, Kb, 0, Nk, tid);
  cp_async_commit();
  load_tile_sw128<BN, D, NT>(sV, Vb, 0, Nk, tid);
  cp_async_commit();

  // descriptors of this warpgroup's 64 rows of Q and of K/V stage 0; stage 1 is TKV further
  const uint64_t dQ = desc_kmajor(sQ + wg * 64 * 128);
  const uint64_t dK = desc_kmajor(sK);
  const uint64_t dV = desc_mnmajor(sV, BN * 128);

  float o[NO];
#pragma unroll
  for (int i = 0; i < NO; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  for (int t = 0; t < n_kv; ++t) {
    const int st = t & 1;
    cp_async_wait<1>();  // Q and K_t have landed (V_t may still be in flight)
    fence_proxy_async();
    __syncthreads();
    if (t + 1 < n_kv) load_tile_sw128<BN, D, NT>(sK + (st ^ 1) * TKV, Kb, (t + 1) * BN, Nk, tid);
    cp_async_commit();

    const int j0 = t * BN;
    // causal: a tile whose first key is after this warpgroup's last row contributes nothing
    const bool active = !causal || j0 <= wg_row0 + 63;
    uint32_t pf[KB][4];
    if (active) {
      // S = Q_i K_j^T   [64 rows x BN keys] per warpgroup; k-step kd reads columns 16 kd.. of
      // column block kd / 4 (32 bytes per k-step inside a 128-byte row)
      float s[NS];
      fence_regs(s);
      wgmma_fence();
#pragma unroll
      for (int kd = 0; kd < KD; ++kd) {
        const uint32_t off = (kd & 3) * 32;
        wgmma_ss<T, BN>(s, desc_add(dQ, (kd >> 2) * (BM * 128) + off),
                        desc_add(dK, st * TKV + (kd >> 2) * (BN * 128) + off), kd > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(s);

      // mask keys past Nk and (causal) keys after the query, on the raw scores (scale > 0: the
      // launcher asks for it, so the largest raw score is the largest scaled one)
      if (j0 + BN > Nk || (causal && j0 + BN - 1 > wg_row0)) {
#pragma unroll
        for (int i = 0; i < NS; ++i) {
          const int key = j0 + (i >> 2) * 8 + (lane & 3) * 2 + (i & 1);
          const int row = row0 + ((i >> 1) & 1) * 8;
          if (key >= Nk || (causal && key > row)) s[i] = -INFINITY;
        }
      }
      // online softmax: row h of this thread is s[4 j + 2 h + e]; its other 12 values sit in the
      // 3 other lanes of the quad
      float alpha[2];
      bool grew = false;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[h], mx);
        const float ms = (m_new == -INFINITY) ? 0.f : m_new * scale_log2;
        alpha[h] = fast_exp2(m[h] * scale_log2 - ms);
        grew |= m_new != m[h];
        m[h] = m_new;
        float rs = 0.f;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          s[4 * j + 2 * h] = fast_exp2(fmaf(s[4 * j + 2 * h], scale_log2, -ms));
          s[4 * j + 2 * h + 1] = fast_exp2(fmaf(s[4 * j + 2 * h + 1], scale_log2, -ms));
          rs += s[4 * j + 2 * h] + s[4 * j + 2 * h + 1];
        }
        l[h] = l[h] * alpha[h] + rs;  // per-thread partial; the quad is reduced at the end
      }
      // P as A fragments: the accumulators of 8-column blocks 2 kk and 2 kk + 1 are the A
      // fragment of k-step kk
#pragma unroll
      for (int kk = 0; kk < KB; ++kk) {
        pf[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
        pf[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
        pf[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
        pf[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
      }
      // O *= alpha only when a row max of this warp grew (each warp owns its rows' registers)
      if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
        for (int i = 0; i < NO; ++i) o[i] *= alpha[(i >> 1) & 1];
      }
    }
    cp_async_wait<1>();  // V_t has landed (K_{t+1} may still be in flight)
    fence_proxy_async();
    __syncthreads();
    if (active) {
      // O += P V_j: k-step kk reads keys 16 kk .. 16 kk + 15 = two 1024-byte swizzle atoms
#pragma unroll
      for (int kk = 0; kk < KB; ++kk) fence_regs(pf[kk]);
      fence_regs(o);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < KB; ++kk)
        wgmma_rs<T, D, /*TB=*/1>(o, pf[kk], desc_add(dV, st * TKV + kk * 2048), 1);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(o);
    }
    if (t + 1 < n_kv) load_tile_sw128<BN, D, NT>(sV + (st ^ 1) * TKV, Vb, (t + 1) * BN, Nk, tid);
    cp_async_commit();
  }
  cp_async_wait<0>();

  // normalise, stage this warpgroup's rows in its own (no longer read) rows of the Q tile, in the
  // same SW128 layout (conflict-free 4-byte writes), then write them out 16 bytes per thread
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    inv[h] = 1.f / l[h];
  }
  const int srow = wg * 64 + warp * 16 + (lane >> 2);  // staging row of h = 0
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<uint32_t*>(smem + sw128<BM>(srow + 8 * h, j) + (lane & 3) * 4) =
          pack2<T>(o[4 * j + 2 * h] * inv[h], o[4 * j + 2 * h + 1] * inv[h]);
  if ((lane & 3) == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      if (row < Nq) LSE[bh * Nq + row] = (m[h] * scale_log2 + __log2f(l[h])) * kLn2;
    }
  }
  __syncthreads();
  T* Ob = O + bh * Nq * D;
  constexpr int U = D / 8;
#pragma unroll
  for (int c = tid & 127; c < 64 * U; c += 128) {
    const int r = c / U, chunk = c % U;
    if (wg_row0 + r < Nq)
      *reinterpret_cast<uint4*>(Ob + long(wg_row0 + r) * D + chunk * 8) =
          *reinterpret_cast<const uint4*>(smem + sw128<BM>(wg * 64 + r, chunk));
  }
}

template <typename T, int D, int BM, int BN>
cudaError_t wgmma_forward_launch(const AttnArgs& a, cudaStream_t stream) {
  auto kernel = flash_wgmma_forward_kernel<T, D, BM, BN>;
  constexpr int smem = (BM * D + 4 * BN * D) * 2 + 1024;  // + slack for 1024-byte alignment
  cudaError_t err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(cdiv(a.Nq, BM), a.B * a.H), BM / 64 * 128, smem, stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o),
      a.lse, dims_of(a), a.scale * kLog2e, a.causal);
  return cudaGetLastError();
}

// The tile table: option code -> (query rows BM = 64 per warpgroup, keys per K/V tile BN).
// Codes as flash_kernels/_ops.py names them: 0 = 128x128, 1 = 128x64, 2 = 192x128, 3 = 192x64.
template <typename T, int D>
cudaError_t wgmma_forward_tiles(const AttnArgs& a, cudaStream_t stream) {
  switch (a.option) {
    case 0: return wgmma_forward_launch<T, D, 128, 128>(a, stream);
    case 1: return wgmma_forward_launch<T, D, 128, 64>(a, stream);
    case 2: return wgmma_forward_launch<T, D, 192, 128>(a, stream);
    case 3: return wgmma_forward_launch<T, D, 192, 64>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fk

int flash_wgmma_forward(const fk::AttnArgs& a, cudaStream_t stream) {
  return fk::dispatch_dtype_hdim</*fp32=*/false>(a, [&](auto t, auto d) {
    return fk::wgmma_forward_tiles<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
