// flash_mma backward: FlashAttention-2 backward on tensor cores (mma.sync m16n8k16, fp32 accumulators).
//
// One thread block (8 warps) owns BC = 128 keys and keeps dK_j, dV_j in registers while it sweeps
// the query blocks (BR rows each; Q_i, dO_i, LSE_i, Dd_i double-buffered with cp.async). Per query
// block, three phases, each with its own 2-D split of the 8 warps:
//   1. S^T = K_j Q_i^T and dP^T = V_j dO_i^T, [BC x BR]: warps 4 (keys, 32 each) x 2 (queries);
//      P^T = exp(scale S^T - LSE_i) (recomputed, never written to global memory),
//      dS^T = P^T (dP^T - Dd_i); both stored to shared memory with stmatrix.
//   2. dV_j += P^T dO_i and dK_j += dS^T Q_i, [BC x D]: warps 4 (keys) x 2 (head dim).
//   3. dQ_i += scale dS K_j, [BR x D]: warps WQ (queries) x 8/WQ (head dim); fp32 atomics into
//      dQacc, two adjacent columns per red.global.add.v2.f32.
// Dd_i = rowsum(dO_i * O_i) comes from a small preprocessing kernel; dQacc is cast at the end.
// Grouped-query attention: a block owns the keys of one key/value head and sweeps the query blocks
// of the query heads that share it, so dK_j, dV_j come out summed over them; when that leaves too
// few blocks for the GPU (multi-query, causal), the group is split over gridDim.z blocks whose
// partial dK, dV are added into fp32 workspaces (option group_split; _ops.py picks it by default).
//
// Design: 8 warps per block and 32-key x 32/64-query warp tiles in phase 1 (each Q / dO fragment read from
// shared memory feeds 4 MMAs); P^T and dS^T both staged in shared memory, so phases 2 and 3 split the head dim
// across warps and BC = 128 fits at D = 128; LSE_i, Dd_i arrive by cp.async with the tiles; dQ atomics are
// 2-wide; the head-dim loops of phases 1 and 3 stay rolled (unrolled, their addresses took the registers).
// Limits: one 8-warp block per SM (about 250 registers a thread) with two block barriers per query block and
// nothing to overlap them; D = 64 or 128 (option bwd_tile: 64x128, or 128x128 at D = 64).
// Next step, as `nsightlab why nvidia-h200/backward-n8192-deep --a flash_mma --b sdpa_flash` reads it (1.13x
// FlashAttention-2's kernel time at N = 8192, D = 128): 1.25x its warp instructions, 0.24x of them integer
// arithmetic (IMAD, LOP3: the swizzled shared-memory addresses, mma.cuh's swz, recomputed in the rolled head-dim
// loops): hoist them. 65% of its Long Scoreboard samples are at the next stage's loads, an instruction there about
// to overwrite an operand of phase 3's dQ reductions (red.global.add), which the memory system has not yet taken.
#include "mma.cuh"
#include "option_codes.h"

namespace fk {

constexpr int kBwdWarps = 8;
constexpr int kBwdKeys = codes::flash_mma_bwd::kKeys;  // 128 = BC: keys per block, 32 per warp in phases 1 and 2

template <typename T, int D, int BR, int WQ3>
__global__ void __launch_bounds__(kBwdWarps * 32, 1)
flash_mma_backward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                          const float* __restrict__ LSE, const float* __restrict__ Dd, const T* __restrict__ dO,
                          float* __restrict__ dQacc, T* __restrict__ dK, T* __restrict__ dV, float* __restrict__ dKacc,
                          float* __restrict__ dVacc, Dims dm, float scale, int causal) {
  constexpr int BC = kBwdKeys, NT = kBwdWarps * 32;
  constexpr int MK = 32, MI = MK / 16;      // keys per warp (phases 1, 2), m16 tiles of them
  constexpr int WQ1 = kBwdWarps / (BC / MK);  // phase 1: warps along queries
  constexpr int NQ1 = BR / WQ1;               // ... queries per warp
  constexpr int ND2 = D / (kBwdWarps / (BC / MK));  // phase 2: head-dim columns per warp
  constexpr int MQ3 = BR / WQ3, ND3 = D / (kBwdWarps / WQ3);  // phase 3: rows, columns per warp
  static_assert(NQ1 % 16 == 0 && ND2 % 16 == 0 && MQ3 % 16 == 0 && ND3 % 16 == 0, "warp tiles of whole k16/n16 steps");
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sK = smem_u32(smem);        // [BC][D]
  const uint32_t sV = sK + BC * D * 2;       // [BC][D]
  const uint32_t sQ = sV + BC * D * 2;       // [2][BR][D]
  const uint32_t sdO = sQ + 2 * BR * D * 2;  // [2][BR][D]
  const uint32_t sP = sdO + 2 * BR * D * 2;  // [BC][BR]  P^T
  const uint32_t sdS = sP + BC * BR * 2;     // [BC][BR]  dS^T
  float* const lse_s = reinterpret_cast<float*>(smem + (2 * BC * D + 4 * BR * D + 2 * BC * BR) * 2);  // [2][BR]
  float* const dd_s = lse_s + 2 * BR;                                                                  // [2][BR]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int Nq = dm.Nq, Nk = dm.Nk;
  const int G = dm.H / dm.Hkv / gridDim.z;  // query heads this block sweeps (a group split over gridDim.z blocks)
  const int kvh = blockIdx.y;                                   // b * Hkv + key/value head
  const long kv_off = long(kvh) * Nk * D;
  const int qh0 = (kvh / dm.Hkv) * dm.H + (kvh % dm.Hkv) * (G * gridDim.z) + blockIdx.z * G;  // its first one
  const int k0 = blockIdx.x * BC;
  const int q_start = causal ? (k0 / BR) * BR : 0;  // no earlier query sees these keys
  const int n_qb = q_start < Nq ? (Nq - q_start + BR - 1) / BR : 0;
  const int n_it = G * n_qb;  // (query head, query block) steps
  const float scale_log2 = scale * kLog2e;
  // start loading the Q, dO, LSE, Dd rows qb.. of query head qh ([B*H] index) into stage st
  auto stage = [&](int qh, int qb, int st) {
    load_tile_async<BR, D, NT>(sQ + st * (BR * D * 2), Q + long(qh) * Nq * D, qb, Nq, tid);
    load_tile_async<BR, D, NT>(sdO + st * (BR * D * 2), dO + long(qh) * Nq * D, qb, Nq, tid);
    for (int r = tid; r < 2 * BR; r += NT) {
      const int q = qb + (r % BR);
      const float* src = (r < BR ? LSE : Dd) + long(qh) * Nq + (q < Nq ? q : 0);
      cp_async_4(smem_u32(r < BR ? lse_s + st * BR + r : dd_s + st * BR + r - BR), src, q < Nq ? 4 : 0);
    }
  };

  load_tile_async<BC, D, NT>(sK, K + kv_off, k0, Nk, tid);
  load_tile_async<BC, D, NT>(sV, V + kv_off, k0, Nk, tid);
  if (n_it > 0) stage(qh0, q_start, 0);
  cp_async_commit();

  // phase 1: warp (w1k, w1q) = keys w1k*32.., queries w1q*NQ1..;  phase 2: keys w1k*32.., columns w2d*ND2..
  const int wk = warp % (BC / MK), wq1 = warp / (BC / MK);
  const int wd2 = wq1;
  const int wq3 = warp % WQ3, wd3 = warp / WQ3;  // phase 3: rows wq3*MQ3.., columns wd3*ND3..
  float dk[MI][ND2 / 8][4], dv[MI][ND2 / 8][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int i = 0; i < ND2 / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[mi][i][e] = dv[mi][i][e] = 0.f;

  int qh = qh0, qb = q_start;  // this step's query head and first row; steps run head by head
  for (int it = 0; it < n_it; ++it) {
    const int st = it & 1;
    const uint32_t cQ = sQ + st * (BR * D * 2), cdO = sdO + st * (BR * D * 2);
    cp_async_wait<0>();
    __syncthreads();  // this stage has landed; everyone is done with the other stage, P^T and dS^T
    if (it + 1 < n_it) stage(qb + BR < Nq ? qh : qh + 1, qb + BR < Nq ? qb + BR : q_start, st ^ 1);
    cp_async_commit();

    // ---- phase 1: S^T and dP^T, [32 keys x NQ1 queries] per warp
    {
      float s[MI][NQ1 / 8][4], dp[MI][NQ1 / 8][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int i = 0; i < NQ1 / 8; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mi][i][e] = dp[mi][i][e] = 0.f;
#pragma unroll 1  // rolled: the unrolled swizzled addresses cost registers (D = 128 spilled)
      for (int kd = 0; kd < D / 16; ++kd) {
#pragma unroll
        for (int w = 0; w < 2; ++w) {  // S^T = K Q^T, then dP^T = V dO^T: one A fragment set live at a time
          uint32_t a[MI][4];
#pragma unroll
          for (int mi = 0; mi < MI; ++mi) ldsm_a<D>(a[mi], w ? sV : sK, wk * MK + mi * 16, kd);
#pragma unroll
          for (int n2 = 0; n2 < NQ1 / 16; ++n2) {
            uint32_t b[4];
            ldsm_b<D>(b, w ? cdO : cQ, wq1 * NQ1 + n2 * 16, kd);
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
              mma16816<T>(w ? dp[mi][2 * n2] : s[mi][2 * n2], a[mi], b[0], b[1]);
              mma16816<T>(w ? dp[mi][2 * n2 + 1] : s[mi][2 * n2 + 1], a[mi], b[2], b[3]);
            }
          }
        }
      }
      // P^T = exp2(S^T scale log2e - LSE log2e), masked (keys past Nk, queries past Nq, causal
      // keys after the query); dS^T = P^T (dP^T - Dd)
      const float* lse_c = lse_s + st * BR;
      const float* dd_c = dd_s + st * BR;
      const bool need_mask = (k0 + BC > Nk) || (qb + BR > Nq) || (causal && qb < k0 + BC);
#pragma unroll
      for (int ni = 0; ni < NQ1 / 8; ++ni) {
        const int qi = wq1 * NQ1 + ni * 8 + 2 * t4;  // this thread's two query columns: qi, qi + 1
        const float l0 = lse_c[qi] * kLog2e, l1 = lse_c[qi + 1] * kLog2e;
        const float d0 = dd_c[qi], d1 = dd_c[qi + 1];
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float p = fast_exp2(s[mi][ni][e] * scale_log2 - ((e & 1) ? l1 : l0));
            if (need_mask) {
              const int key = k0 + wk * MK + mi * 16 + g + (e >> 1) * 8, q = qb + qi + (e & 1);
              if (key >= Nk || q >= Nq || (causal && key > q)) p = 0.f;
            }
            s[mi][ni][e] = p;
            dp[mi][ni][e] = p * (dp[mi][ni][e] - ((e & 1) ? d1 : d0));
          }
        }
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int n2 = 0; n2 < NQ1 / 16; ++n2) {
          const uint32_t pf[4] = {pack2<T>(s[mi][2 * n2][0], s[mi][2 * n2][1]),
                                  pack2<T>(s[mi][2 * n2][2], s[mi][2 * n2][3]),
                                  pack2<T>(s[mi][2 * n2 + 1][0], s[mi][2 * n2 + 1][1]),
                                  pack2<T>(s[mi][2 * n2 + 1][2], s[mi][2 * n2 + 1][3])};
          const uint32_t df[4] = {pack2<T>(dp[mi][2 * n2][0], dp[mi][2 * n2][1]),
                                  pack2<T>(dp[mi][2 * n2][2], dp[mi][2 * n2][3]),
                                  pack2<T>(dp[mi][2 * n2 + 1][0], dp[mi][2 * n2 + 1][1]),
                                  pack2<T>(dp[mi][2 * n2 + 1][2], dp[mi][2 * n2 + 1][3])};
          stsm_a<BR>(sP, wk * MK + mi * 16, wq1 * (NQ1 / 16) + n2, pf);
          stsm_a<BR>(sdS, wk * MK + mi * 16, wq1 * (NQ1 / 16) + n2, df);
        }
      }
    }
    __syncthreads();  // P^T and dS^T complete

    // ---- phase 2: dV += P^T dO_i, dK += dS^T Q_i, [32 keys x ND2 columns] per warp
#pragma unroll
    for (int kq = 0; kq < BR / 16; ++kq) {
      uint32_t ap[MI][4], ads[MI][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        ldsm_a<BR>(ap[mi], sP, wk * MK + mi * 16, kq);
        ldsm_a<BR>(ads[mi], sdS, wk * MK + mi * 16, kq);
      }
#pragma unroll
      for (int d2 = 0; d2 < ND2 / 16; ++d2) {
        uint32_t b[4], c[4];
        ldsm_bt<D>(b, cdO, kq * 16, wd2 * (ND2 / 16) + d2);
        ldsm_bt<D>(c, cQ, kq * 16, wd2 * (ND2 / 16) + d2);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          mma16816<T>(dv[mi][2 * d2], ap[mi], b[0], b[1]);
          mma16816<T>(dv[mi][2 * d2 + 1], ap[mi], b[2], b[3]);
          mma16816<T>(dk[mi][2 * d2], ads[mi], c[0], c[1]);
          mma16816<T>(dk[mi][2 * d2 + 1], ads[mi], c[2], c[3]);
        }
      }
    }

    // ---- phase 3: dQ_i += scale dS K_j, [MQ3 rows x ND3 columns] per warp
    {
      float acc[MQ3 / 16][ND3 / 8][4];
#pragma unroll
      for (int mi = 0; mi < MQ3 / 16; ++mi)
#pragma unroll
        for (int i = 0; i < ND3 / 8; ++i) acc[mi][i][0] = acc[mi][i][1] = acc[mi][i][2] = acc[mi][i][3] = 0.f;
#pragma unroll 1  // rolled, as phase 1
      for (int kk = 0; kk < BC / 16; ++kk) {
        uint32_t a[MQ3 / 16][4];
#pragma unroll
        for (int mi = 0; mi < MQ3 / 16; ++mi) ldsm_at<BR>(a[mi], sdS, kk * 16, wq3 * (MQ3 / 16) + mi);
#pragma unroll
        for (int d2 = 0; d2 < ND3 / 16; ++d2) {
          uint32_t b[4];
          ldsm_bt<D>(b, sK, kk * 16, wd3 * (ND3 / 16) + d2);
#pragma unroll
          for (int mi = 0; mi < MQ3 / 16; ++mi) {
            mma16816<T>(acc[mi][2 * d2], a[mi], b[0], b[1]);
            mma16816<T>(acc[mi][2 * d2 + 1], a[mi], b[2], b[3]);
          }
        }
      }
      float* const dq = dQacc + long(qh) * Nq * D;
#pragma unroll
      for (int mi = 0; mi < MQ3 / 16; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int q = qb + wq3 * MQ3 + mi * 16 + g + h * 8;
          if (q < Nq) {
#pragma unroll
            for (int dn = 0; dn < ND3 / 8; ++dn)
              red_add_f32x2(dq + long(q) * D + wd3 * ND3 + dn * 8 + 2 * t4, acc[mi][dn][2 * h] * scale,
                            acc[mi][dn][2 * h + 1] * scale);
          }
        }
      }
    }
    if (qb + BR < Nq) {  // the next step (recomputed here rather than held in registers through the step)
      qb += BR;
    } else {
      qb = q_start;
      ++qh;
    }
  }
  if (gridDim.z > 1) {  // a split group: the blocks of one key block add their partial dK, dV (fp32)
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int key = k0 + wk * MK + mi * 16 + g + h * 8;
        if (key < Nk) {
          const long row = (kv_off + long(key) * D) + wd2 * ND2 + 2 * t4;
#pragma unroll
          for (int nd = 0; nd < ND2 / 8; ++nd) {
            red_add_f32x2(dKacc + row + nd * 8, dk[mi][nd][2 * h] * scale, dk[mi][nd][2 * h + 1] * scale);
            red_add_f32x2(dVacc + row + nd * 8, dv[mi][nd][2 * h], dv[mi][nd][2 * h + 1]);
          }
        }
      }
    }
    return;
  }
  cp_async_wait<0>();
  __syncthreads();  // K/V tiles are free: stage dK, dV there for 16-byte stores
  uint8_t* const sdK = smem;
  uint8_t* const sdV = smem + BC * D * 2;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int nd = 0; nd < ND2 / 8; ++nd) {
      stsm_c<D, T>(sdK, dk[mi][nd], wk * MK + mi * 16, wd2 * (ND2 / 8) + nd, scale, scale);
      stsm_c<D, T>(sdV, dv[mi][nd], wk * MK + mi * 16, wd2 * (ND2 / 8) + nd);
    }
  }
  __syncthreads();
  store_tile<BC, D, NT>(reinterpret_cast<const T*>(sdK), dK + kv_off, k0, Nk, tid);
  store_tile<BC, D, NT>(reinterpret_cast<const T*>(sdV), dV + kv_off, k0, Nk, tid);
}

// split: the blocks each group of H / Hkv query heads is split over (common.cuh: split_group_backward).
template <typename T, int D, int BR, int WQ3>
cudaError_t mma_backward_launch(const AttnArgs& a, int split, cudaStream_t stream) {
  auto kernel = flash_mma_backward_kernel<T, D, BR, WQ3>;
  constexpr int smem = (2 * kBwdKeys * D + 4 * BR * D + 2 * kBwdKeys * BR) * 2 + 4 * BR * 4;
  return split_group_backward<T, D>(a, split, stream, [&] {
    cudaError_t err = allow_smem(kernel, smem);
    if (err != cudaSuccess) return err;
    kernel<<<dim3(cdiv(a.Nk, kBwdKeys), a.B * a.Hkv, split), kBwdWarps * 32, smem, stream>>>(
        static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), a.lse, a.Dd,
        static_cast<const T*>(a.dO), a.dq_acc, static_cast<T*>(a.dk), static_cast<T*>(a.dv), a.ws[0], a.ws[1],
        dims_of(a), a.scale, a.causal);
    return cudaGetLastError();
  });
}

// The tile table: option code & 0xff -> query rows per step BR (keys per block: 128, 8 warps);
// option code >> 8 = the group split (see mma_backward_launch). Codes from flash_kernels/variants.py
// (option_codes.h): 64x128, 128x128 (D = 64 only: at D = 128 the 32 x 64 score tiles of phase 1
// and the dK, dV accumulators do not fit in 255 registers together).
template <typename T, int D>
cudaError_t mma_backward_tiles(const AttnArgs& a, cudaStream_t stream) {
  namespace oc = codes::flash_mma_bwd;
  const int split = oc::group_split(a.option) > 0 ? oc::group_split(a.option) : 1;
  switch (oc::tile(a.option)) {
    case oc::kTile64x128: return mma_backward_launch<T, D, 64, 2>(a, split, stream);
    case oc::kTile128x128:
      if constexpr (D == 64) return mma_backward_launch<T, D, 128, 4>(a, split, stream);
      return cudaErrorInvalidValue;
    default: return cudaErrorInvalidValue;
  }
}

// Dd = rowsum(dO * O), dQ accumulated in fp32 then cast: common.cuh's fa2_backward around the kernel.
template <typename T, int D>
cudaError_t mma_backward(const AttnArgs& a, cudaStream_t stream) {
  return fa2_backward<T, D>(a, stream, [&] { return mma_backward_tiles<T, D>(a, stream); });
}

}  // namespace fk

int flash_mma_backward(const fk::AttnArgs& a, cudaStream_t stream) {
  return fk::dispatch_dtype_hdim</*fp32=*/false>(a, [&](auto t, auto d) {
    return fk::mma_backward<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
