// flash_mma forward: FlashAttention-2 on tensor cores.
// Relative to flash_simt: both matrix products run on mma.sync m16n8k16 (fp16/bf16 in, fp32 accumulate); tiles
// travel global->shared with cp.async (Q once, K and V double-buffered so the next tile loads while this one is
// used); shared tiles are XOR-swizzled so ldmatrix is conflict-free; P = exp(S - m) stays in registers as the A
// operand of P V.
// Block: BR query rows in 4 warps, each warp MT m16 tiles (16 MT = 32 rows for BR = 128, 16 for BR = 64); BC keys
// per K/V tile (option `tile`: 128x64 the default, FlashAttention-2's, with Q re-read from shared memory at each
// k-step; 128x32 and 64x64 for comparison). Causal launches visit the heaviest query blocks first.
// Grouped-query attention: query head h reads key/value head h / (H / Hkv) (Dims::kv_head).
// The softmax keeps the running max in raw score units, so a score costs one FFMA and one MUFU.EX2, and rescales
// O only when a row max of the warp grew in this tile (a warp vote). The tile loads have a compile-time trip count
// (mma.cuh: load_tile_async), so a 16-byte copy is one LDGSTS with an immediate offset.
// Limits: D = 64 or 128; at D = 128 the 128x64 tile takes 255 registers and spills a little (the row sums; the one
// accepted spill, sources.ACCEPTED_SPILLS), which measured faster than the 128x32 tile that does not.
#include "mma.cuh"
#include "option_codes.h"

namespace fk {

template <typename T, int D, int BR, int BC, int MT>
__global__ void __launch_bounds__(BR / (16 * MT) * 32)
flash_mma_forward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                         T* __restrict__ O, float* __restrict__ LSE, Dims dm, float scale_log2, int causal) {
  // MT m16 tiles per warp: each K/V fragment read from shared memory feeds 2*MT mma instead of 2,
  // halving shared-memory traffic per FLOP when MT = 2 (the limit of the 16-rows-per-warp layout).
  constexpr int RW = 16 * MT;  // query rows per warp
  constexpr int NW = BR / RW, NT = NW * 32;
  constexpr int KD = D / 16;  // k16 steps over the head dim
  constexpr int NB = BC / 8;  // n8 tiles over the keys of a tile
  constexpr int ND = D / 8;   // n8 tiles over the head dim
  // Q fragments stay in registers unless that would spill (D = 128 with 32 rows per warp: then
  // they are re-read from the shared Q tile at each k-step).
  constexpr bool QR = MT == 1 || D <= 64;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sQ = smem_u32(smem);          // [BR][D]
  const uint32_t sK = sQ + BR * D * 2;         // [2][BC][D]
  const uint32_t sV = sK + 2 * BC * D * 2;     // [2][BC][D]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int Nq = dm.Nq, Nk = dm.Nk;
  const long bh = blockIdx.y;  // b * H + h
  const int q0 = (causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x)) * BR;
  const T* Qb = Q + bh * Nq * D;
  // K and V of this head start at the same offset: one 64-bit register for both instead of two
  // pointers (at 128x64, D = 128, that is one spilled value fewer)
  const long kv = dm.kv_head(bh) * Nk * D;
  const int kv_len = causal ? min(Nk, q0 + BR) : Nk;
  const int n_kv = (kv_len + BC - 1) / BC;

  load_tile_async<BR, D, NT>(sQ, Qb, q0, Nq, tid);
  load_tile_async<BC, D, NT>(sK, K + kv, 0, Nk, tid);
  cp_async_commit();
  load_tile_async<BC, D, NT>(sV, V + kv, 0, Nk, tid);
  cp_async_commit();

  uint32_t qf[QR ? MT : 1][QR ? KD : 1][4];
  float o[MT][ND][4];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int i = 0; i < ND; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.f;
  }
  const int wrow = q0 + warp * RW;                 // first row of this warp
  const int row0 = wrow + (lane >> 2);             // rows: row0 + 16 mt + 8 h

  for (int t = 0; t < n_kv; ++t) {
    const int st = t & 1;
    const uint32_t cK = sK + st * (BC * D * 2), cV = sV + st * (BC * D * 2);
    cp_async_wait<1>();  // Q and K_t have landed (V_t may still be in flight)
    __syncthreads();
    if (QR && t == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kd = 0; kd < KD; ++kd)
          ldsm_a<D>(qf[mt][kd], sQ, warp * RW + mt * 16, kd);
    }
    if (t + 1 < n_kv) load_tile_async<BC, D, NT>(sK + (st ^ 1) * (BC * D * 2), K + kv, (t + 1) * BC, Nk, tid);
    cp_async_commit();

    // S = Q_i K_j^T   [RW rows x BC keys] per warp
    float s[MT][NB][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < NB; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
      uint32_t qs[QR ? 1 : MT][4];
      if (!QR) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) ldsm_a<D>(qs[mt], sQ, warp * RW + mt * 16, kd);
      }
#pragma unroll
      for (int nb2 = 0; nb2 < NB / 2; ++nb2) {
        uint32_t b[4];
        ldsm_b<D>(b, cK, nb2 * 16, kd);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const uint32_t(&a)[4] = QR ? qf[QR ? mt : 0][QR ? kd : 0] : qs[QR ? 0 : mt];
          mma16816<T>(s[mt][2 * nb2], a, b[0], b[1]);
          mma16816<T>(s[mt][2 * nb2 + 1], a, b[2], b[3]);
        }
      }
    }
    // mask keys past Nk and (causal) keys after the query, on the raw scores (scale > 0: the
    // launcher asks for it, so the largest raw score is the largest scaled one)
    const int j0 = t * BC;
    const bool need_mask = (j0 + BC > Nk) || (causal && j0 + BC - 1 > wrow);
    if (need_mask) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = j0 + nb * 8 + (lane & 3) * 2 + (e & 1);
            const int row = row0 + mt * 16 + (e >> 1) * 8;
            if (key >= Nk || (causal && key > row)) s[mt][nb][e] = -INFINITY;
          }
    }
    uint32_t pf[MT][BC / 16][4];
    float alpha[MT][2];
    bool grew = false;  // did any row's running max change in this tile?
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      // online softmax: each row is spread over the 4 lanes of a quad; m is kept in raw units and
      // p = 2^(s * scale log2(e) - m * scale log2(e)) is one FFMA and one MUFU.EX2 per score
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) mx = fmaxf(mx, fmaxf(s[mt][nb][2 * h], s[mt][nb][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[mt][h], mx);
        const float ms = (m_new == -INFINITY) ? 0.f : m_new * scale_log2;
        alpha[mt][h] = fast_exp2(m[mt][h] * scale_log2 - ms);
        grew |= m_new != m[mt][h];
        m[mt][h] = m_new;
        float rs = 0.f;
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          s[mt][nb][2 * h] = fast_exp2(fmaf(s[mt][nb][2 * h], scale_log2, -ms));
          s[mt][nb][2 * h + 1] = fast_exp2(fmaf(s[mt][nb][2 * h + 1], scale_log2, -ms));
          rs += s[mt][nb][2 * h] + s[mt][nb][2 * h + 1];
        }
        l[mt][h] = l[mt][h] * alpha[mt][h] + rs;  // per-thread partial; the quad is reduced at the end
      }
      // P as A fragments (C layout of two n-tiles == A layout of one k16 step)
#pragma unroll
      for (int kk = 0; kk < BC / 16; ++kk) {
        pf[mt][kk][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pf[mt][kk][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pf[mt][kk][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pf[mt][kk][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
    }
    // O *= alpha only when some row's max grew: after the first tiles it rarely does, and at D=128
    // the rescale is 128 multiplies per thread against 32 or 64 exponentials
    if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nd = 0; nd < ND; ++nd) {
          o[mt][nd][0] *= alpha[mt][0];
          o[mt][nd][1] *= alpha[mt][0];
          o[mt][nd][2] *= alpha[mt][1];
          o[mt][nd][3] *= alpha[mt][1];
        }
    }
    cp_async_wait<1>();  // V_t has landed (K_{t+1} may still be in flight)
    __syncthreads();
    // O += P V_j
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        ldsm_bt<D>(b, cV, kk * 16, dp);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816<T>(o[mt][2 * dp], pf[mt][kk], b[0], b[1]);
          mma16816<T>(o[mt][2 * dp + 1], pf[mt][kk], b[2], b[3]);
        }
      }
    }
    if (t + 1 < n_kv) load_tile_async<BC, D, NT>(sV + (st ^ 1) * (BC * D * 2), V + kv, (t + 1) * BC, Nk, tid);
    cp_async_commit();
  }
  cp_async_wait<0>();

  // stage this warp's output rows in its own (no longer needed) rows of the Q tile, then write
  // them out 16 bytes per lane
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[mt][h] += __shfl_xor_sync(0xffffffffu, l[mt][h], 1);
      l[mt][h] += __shfl_xor_sync(0xffffffffu, l[mt][h], 2);
      inv[h] = 1.f / l[mt][h];
    }
#pragma unroll
    for (int nd = 0; nd < ND; ++nd) stsm_c<D, T>(smem, o[mt][nd], warp * RW + mt * 16, nd, inv[0], inv[1]);
    if ((lane & 3) == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + mt * 16 + h * 8;
        if (row < Nq) LSE[bh * Nq + row] = (m[mt][h] * scale_log2 + __log2f(l[mt][h])) * kLn2;
      }
    }
  }
  __syncwarp();
  store_tile<RW, D, 32>(reinterpret_cast<const T*>(smem + warp * RW * D * 2), O + bh * Nq * D, wrow, Nq, lane);
}

template <typename T, int D, int BR, int BC, int MT>
cudaError_t mma_forward_launch(const AttnArgs& a, cudaStream_t stream) {
  auto kernel = flash_mma_forward_kernel<T, D, BR, BC, MT>;
  constexpr int smem = (BR * D + 4 * BC * D) * 2;
  cudaError_t err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(cdiv(a.Nq, BR), a.B * a.H), BR / (16 * MT) * 32, smem, stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o),
      a.lse, dims_of(a), a.scale * kLog2e, a.causal);
  return cudaGetLastError();
}

// The tile table: option code -> (query rows BR, keys per K/V tile BC, m16 tiles per warp MT).
// Codes from flash_kernels/variants.py (option_codes.h): 128x64, 128x32, 64x64.
template <typename T, int D>
cudaError_t mma_forward_tiles(const AttnArgs& a, cudaStream_t stream) {
  namespace oc = codes::flash_mma_fwd;
  switch (oc::tile(a.option)) {
    case oc::kTile128x64:  // D = 128: 255 registers and a small spill (the row sums l; see the header)
      return mma_forward_launch<T, D, 128, 64, 2>(a, stream);
    case oc::kTile128x32: return mma_forward_launch<T, D, 128, 32, 2>(a, stream);
    case oc::kTile64x64: return mma_forward_launch<T, D, 64, 64, 1>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fk

int flash_mma_forward(const fk::AttnArgs& a, cudaStream_t stream) {
  return fk::dispatch_dtype_hdim</*fp32=*/false>(a, [&](auto t, auto d) {
    return fk::mma_forward_tiles<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
