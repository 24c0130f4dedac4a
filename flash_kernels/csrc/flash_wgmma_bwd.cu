// flash_wgmma backward: FlashAttention-2's backward loop on Hopper's warpgroup tensor-core instructions (sm_90a),
// arranged as FlashAttention-3's: every product of a query block is a wgmma of a whole warpgroup.
//
// Relative to flash_mma's backward (mma.sync, 8 warps, 128 keys a block): the same loop and block shape, but each
// product is one asynchronous wgmma chain per warpgroup with operands read from shared memory; P^T and dS^T stay
// in registers as A fragments for dV and dK, only dS^T goes to shared memory (for dQ); dK and dV accumulate over a
// warpgroup's 64 keys x the full head dim. A block owns BN = 128 keys (warpgroup w: keys 64 w ..) and sweeps the
// query blocks (BM = 64 or 128 rows); D = 256 differs (64 keys, the head dim split; see its kernel below). Per query
// block, each consumer warpgroup runs:
//   S^T  = K_w Q_i^T    wgmma SS, both K-major          dP^T = V_w dO_i^T   wgmma SS, issued right behind S^T
//   P^T  = exp2(S^T scale log2e - LSE_i log2e), masked; dS^T = P^T (dP^T - Dd_i); both repacked to 16 bits
//   dV_w += P^T dO_i    wgmma RS, dO read MN-major     dK_w += dS^T Q_i    wgmma RS, Q read MN-major
//   dQ_i += scale dS K  wgmma SS from dS^T stored to shared memory (read back with the transpose bit)
// Dd_i = rowsum(dO_i * O_i) comes from common.cuh's preprocessing kernel; grouped-query attention and the group
// split over gridDim.z (partial dK, dV added in fp32 workspaces) as flash_mma's backward; causal top-left.
//
// bwd_pipeline "cp.async": every thread copies Q_i, dO_i, LSE_i, Dd_i (double-buffered, two block barriers per
//   query block); dQ by fp32 red.global.add.
// bwd_pipeline "tma-ws" (the default): a producer warpgroup (setmaxnreg 24) loads Q_i, dO_i by TMA and LSE_i, Dd_i
//   by cp.async completing on the stage's mbarrier; two consumer warpgroups (240 registers); dS^T double-buffered
//   and written by stmatrix; each warp's share of dQ is written to shared memory in accumulator order and added to
//   a padded fp32 accumulator by one cp.reduce.async.bulk, which wg_dq_postprocess_kernel un-permutes and casts.
// The mask is a warp-uniform branch around an unmasked copy of the softmax loop: blocks away from the edges and
// the diagonal pay no per-element test (D = 64: two copies of the loop; D = 128: a masking pass of its own).
// Limits: sm_90a only; D = 64 or 128, and D = 256 on the 64x64 tile of the cp.async pipeline (below: two
// warpgroups over 64 keys, each with half the head dim); the D = 64 128x128 tile spills a little
// (sources.ACCEPTED_SPILLS). Design notes and measurements: docs/kernels.md, docs/results.md.
// Next step, as `nsightlab why nvidia-h200/backward-n8192-deep --a flash_wgmma --b sdpa_cudnn` reads it (1.02x cuDNN's
// kernel time at N = 8192, D = 128): the largest term is Stall Barrier (2.47 cycles per instruction vs 1.52), all of
// it waiting on the tensor cores or the other consumer: 74% at the warpgroup's own wgmma waits (S^T, dP^T, dK/dV,
// dQ) and 26% at the named barrier before dQ. Each step's products run while both consumers wait, and their
// exponentials while the tensor pipe waits (busy 63% of active cycles vs 67%). Neither overlap across steps (no room
// in 240 registers: ptxas serializes every wgmma, C7512), dQ over each consumer's own keys without the barrier
// (1.08-1.12x the time), nor a quarter of the exponentials on the FMA pipe paid (docs/kernels.md has the numbers):
// what is left is an explicit schedule for the two consumers, one's exponentials under the other's products.
#include <climits>

#include "wgmma.cuh"
#include "option_codes.h"

namespace fk {

constexpr int kWgBwdKeys = codes::flash_wgmma_bwd::kKeys;  // 128 = BN: keys per block, 64 per consumer warpgroup
constexpr int kWgBwdThreads = 256;    // cp.async: 2 warpgroups
constexpr int kWgBwdWsThreads = 384;  // tma-ws: a producer warpgroup + 2 consumer warpgroups

__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void st_shared_v4(uint32_t addr, float a, float b, float c, float d) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}

// How the two warpgroups share dQ_i = dS K_j, [BM x D] (see the header).
enum WgDqSplit : int { kDqRows = 0, kDqCols = 1, kDqKeys = 2 };
template <int BM, int D>
struct WgBwdShape {
  static constexpr int split = BM == 128 ? kDqRows : (D == 64 ? kDqKeys : kDqCols);
  static constexpr int NQ = split == kDqCols ? D / 2 : D;      // dQ columns per warpgroup (wgmma N)
  static constexpr int KQ = split == kDqKeys ? 64 : kWgBwdKeys;  // keys its dQ product sums over
  static constexpr int parts = split == kDqKeys ? 1 : 2;         // distinct [64 x NQ] pieces of a dQ tile
};

// LSE and Dd rows of a query block in shared memory: BM floats each, stored so that the 2 x BM / 8 values a
// thread needs (queries 8 j + 2 t4 + e, j < BM / 8, e < 2) are contiguous: 16-byte loads, BM / 16 per
// vector instead of BM / 8 8-byte ones. Group t4 starts at t4 (BM / 4 + 4) floats (the 4 floats of padding put
// the 4 groups' 16-byte loads on distinct banks).
template <int BM>
constexpr int kRowStage = BM + 16;  // floats of one stage of LSE (or Dd)
template <int BM>
__device__ __forceinline__ int row_slot(int r) {
  return ((r >> 1) & 3) * (BM / 4 + 4) + (r >> 3) * 2 + (r & 1);
}

// ------------------------------------------------------------------------------ one query block's products
// (both pipelines; each function is called by all 128 threads of a consumer warpgroup)

// S^T = K_w Q_i^T and dP^T = V_w dO_i^T (wgmma SS, two commit groups), then P^T = exp2(S^T scale log2e -
// LSE log2e) (masked) and dS^T = P^T (dP^T - Dd) as the 16-bit A fragments pf, dsf of the dV and dK
// products: k-step kk = queries 16 kk .. of the block. lse_c, dd_c: the block's BM rows of LSE and Dd.
template <typename T, int D, int BM>
__device__ __forceinline__ void bwd_p_ds(uint32_t (&pf)[BM / 16][4], uint32_t (&dsf)[BM / 16][4], uint64_t descK,
                                         uint64_t descV, uint32_t cQ, uint32_t cdO, const float* lse_c,
                                         const float* dd_c, int k0, int key0, int qb, int Nq, int Nk,
                                         int causal, float scale_log2, int t4) {
  constexpr int BN = kWgBwdKeys, NS = BM / 2, KB = BM / 16;
  float s[NS], dp[NS];
  const uint64_t descQ = desc_kmajor(cQ), descdO = desc_kmajor(cdO);
  fence_regs(s);
  fence_regs(dp);
  wgmma_fence();
  wgmma_kmajor_ss<T, BM, D, BN, BM>(s, descK, descQ);
  wgmma_commit();
  wgmma_kmajor_ss<T, BM, D, BN, BM>(dp, descV, descdO);
  wgmma_commit();
  // any key past Nk, query past Nq, or (causal) key after a query in this block
  const bool need_mask = (k0 + BN > Nk) || (qb + BM > Nq) || (causal && k0 + BN - 1 > qb);
  wgmma_wait<1>();  // S^T has landed; dP^T may still be in flight
  fence_regs(s);
  // accumulator s[4 j + 2 h + e] = S^T(key0 + 8 h, query qb + 8 j + 2 t4 + e); LSE, Dd of queries 8 j + 2 t4 + e
  // at index 2 j + e of the thread's row group (row_slot)
  lse_c += t4 * (BM / 4 + 4);
  dd_c += t4 * (BM / 4 + 4);
  // P^T = exp2(S^T scale log2e - LSE log2e), then mask(p, h, j, e) (zeroes a masked p; one loop for both head dims)
  auto exp_scores = [&](auto mask) {
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) {
      const float4 l4 = *reinterpret_cast<const float4*>(lse_c + 4 * (j >> 1));  // queries of j and j ^ 1
      const float l0 = (j & 1 ? l4.z : l4.x) * kLog2e, l1 = (j & 1 ? l4.w : l4.y) * kLog2e;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int i = 4 * j + 2 * h + e;
          float p = fast_exp2(fmaf(s[i], scale_log2, -(e ? l1 : l0)));
          mask(p, h, j, e);
          s[i] = p;
        }
      }
    }
  };
  if constexpr (D == 64) {
    // D = 64: the mask is a warp-uniform branch around two copies of the loop, and its test two compares
    // against immediates: element (h, j, e) is kept iff lo[h] <= 8 j + e < hi (query past Nq: hi; key past
    // Nk: lo = INT_MAX; causal: key <= query). Written as at D = 128 below (one loop, the test per element in
    // the key and query indices), ptxas predicated it and every step issued ~450 instructions for it, masked
    // or not (Nsight Compute, D = 64, 128x128: 23% of the kernel's warp samples on that line); the branch took
    // the 128x128 tile from 317-328 to 407-429 TFLOP/s on the H100 and the 64x128 tile from 305-321 to
    // 356-372. At D = 128 both changes cost: the branch 4-6% (64x128: 514/505 -> 485/485 at N = 4096/8192),
    // the cheap test inside the one loop 9-14% (-> 443/455); D = 128 masks in a pass of its own (below).
    const int qrel = qb + 2 * t4, hi = Nq - qrel;  // query = qrel + 8 j + e
    int lo[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int key = key0 + 8 * h;
      lo[h] = key >= Nk ? INT_MAX : (causal ? key - qrel : INT_MIN);
    }
    if (need_mask) {
      exp_scores([&](float& p, int h, int j, int e) {
        p = 8 * j + e >= lo[h] && 8 * j + e < hi ? p : 0.f;
      });
    } else {
      exp_scores([](float&, int, int, int) {});
    }
  } else {
    // D = 128: one copy of the loop, unmasked, then the cheap test in a pass of its own behind the warp-uniform
    // branch. With the test per element inside the loop, ptxas predicated it into every step (about 14 % of the
    // loop's SASS instructions, issued masked or not); as a pass of its own, ptxas branches around it and only
    // the masked steps pay (docs/kernels.md).
    exp_scores([](float&, int, int, int) {});
    if (need_mask) {
      const int qrel = qb + 2 * t4, hi = Nq - qrel;  // query = qrel + 8 j + e
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int key = key0 + 8 * h, lo = key >= Nk ? INT_MAX : (causal ? key - qrel : INT_MIN);
#pragma unroll
        for (int j = 0; j < BM / 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (!(8 * j + e >= lo && 8 * j + e < hi)) s[4 * j + 2 * h + e] = 0.f;
      }
    }
  }
#pragma unroll
  for (int kk = 0; kk < KB; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) pf[kk][i] = pack2<T>(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
  wgmma_wait<0>();  // dP^T has landed
  fence_regs(dp);
#pragma unroll
  for (int j = 0; j < BM / 8; ++j) {
    const float4 d4 = *reinterpret_cast<const float4*>(dd_c + 4 * (j >> 1));
    const float2 d = j & 1 ? make_float2(d4.z, d4.w) : make_float2(d4.x, d4.y);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      dp[4 * j + 2 * h] = s[4 * j + 2 * h] * (dp[4 * j + 2 * h] - d.x);
      dp[4 * j + 2 * h + 1] = s[4 * j + 2 * h + 1] * (dp[4 * j + 2 * h + 1] - d.y);
    }
  }
#pragma unroll
  for (int kk = 0; kk < KB; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) dsf[kk][i] = pack2<T>(dp[8 * kk + 2 * i], dp[8 * kk + 2 * i + 1]);
}

// dS^T to shared memory ([BN][BM] SW128) for dQ, one stmatrix per k-step: dsf[kk][i] is the 8 x 8 matrix of
// keys row0 + 8 (i & 1) .. (row0: the warp's first key - k0) and queries 16 kk + 8 (i >> 1) .. (16-byte chunk
// 2 kk + (i >> 1) of each row), in stmatrix's register layout; lane l gives the address of row l % 8 of
// matrix l / 8 (8 consecutive rows of one chunk: 8 distinct bank groups under the swizzle). The fence orders
// the stores (generic proxy) before the dQ wgmma's reads (async proxy).
template <int BM>
__device__ __forceinline__ void store_dsT(uint32_t sdS, int row0, int lane, const uint32_t (&dsf)[BM / 16][4]) {
  const int m = lane >> 3, row = row0 + 8 * (m & 1) + (lane & 7);
#pragma unroll
  for (int kk = 0; kk < BM / 16; ++kk) stmatrix_x4(sdS + sw128<kWgBwdKeys>(row, 2 * kk + (m >> 1)), dsf[kk]);
  fence_proxy_async();
}

// dV += P^T dO_i, dK += dS^T Q_i (wgmma RS, one commit group): B read MN-major ([queries][D], D
// contiguous), k-step = 16 rows = 2048 B.
template <typename T, int D, int BM>
__device__ __forceinline__ void issue_dkdv(float (&dv)[D / 2], float (&dk)[D / 2], uint32_t (&pf)[BM / 16][4],
                                           uint32_t (&dsf)[BM / 16][4], uint32_t cQ, uint32_t cdO) {
  const uint64_t descdOmn = desc_mnmajor(cdO, BM * 128), descQmn = desc_mnmajor(cQ, BM * 128);
#pragma unroll
  for (int kk = 0; kk < BM / 16; ++kk) {
    fence_regs(pf[kk]);
    fence_regs(dsf[kk]);
  }
  fence_regs(dv);
  fence_regs(dk);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < BM / 16; ++kk) wgmma_rs<T, D, /*TB=*/1>(dv, pf[kk], desc_add(descdOmn, kk * 2048), 1);
#pragma unroll
  for (int kk = 0; kk < BM / 16; ++kk) wgmma_rs<T, D, /*TB=*/1>(dk, dsf[kk], desc_add(descQmn, kk * 2048), 1);
  wgmma_commit();
}

// This warpgroup's share of dQ_i = dS K_j (wgmma SS, both operands MN-major, one commit group):
// k-step kk = keys 16 kk .. of its KQ.
template <typename T, int NQ, int KQ>
__device__ __forceinline__ void issue_dq(float (&dq)[NQ / 2], uint64_t descdSa, uint64_t descKb) {
  fence_regs(dq);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < KQ / 16; ++kk)
    wgmma_ss<T, NQ, /*TA=*/1, /*TB=*/1>(dq, desc_add(descdSa, kk * 2048), desc_add(descKb, kk * 2048), kk > 0);
  wgmma_commit();
}

// The descriptors of a consumer warpgroup w: K_w, V_w as the A operands of S^T, dP^T (K-major; k-step kd
// at column block kd / 4, 32 bytes per k-step inside a 128-byte row), and the two operands of dQ = dS K:
// A = dS [queries][keys] read from dS^T [keys][queries] (MN-major), B = K [keys][D] (MN-major), offset
// by the warpgroup's share.
template <int BM, int D>
struct WgBwdDescs {
  uint64_t K, V, dSa, Kb;
  __device__ __forceinline__ WgBwdDescs(uint32_t sK, uint32_t sV, uint32_t sdS, int w) {
    using Shape = WgBwdShape<BM, D>;
    constexpr int BN = kWgBwdKeys;
    constexpr uint32_t a_off = Shape::split == kDqRows ? BN * 128 : Shape::split == kDqKeys ? 64 * 128 : 0;
    constexpr uint32_t b_off = Shape::split == kDqCols ? BN * 128 : Shape::split == kDqKeys ? 64 * 128 : 0;
    K = desc_kmajor(sK + w * 64 * 128);
    V = desc_kmajor(sV + w * 64 * 128);
    dSa = desc_mnmajor(sdS + w * a_off, BN * 128);
    Kb = desc_mnmajor(sK + w * b_off, BN * 128);
  }
};

// dK = scale dS^T Q and dV summed over the query blocks; accumulator dk[4 j + 2 h + e] = (key0 + 8 h,
// column 8 j + 2 t4 + e). A split group: the blocks of one key block add their partial dK, dV (fp32).
template <int D>
__device__ __forceinline__ void add_dkdv_partial(float* dKacc, float* dVacc, const float (&dk)[D / 2],
                                                 const float (&dv)[D / 2], long kv_off, int key0, int Nk, int t4,
                                                 float scale) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = key0 + 8 * h;
    if (key < Nk) {
      const long row = kv_off + long(key) * D + 2 * t4;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        red_add_f32x2(dKacc + row + 8 * j, dk[4 * j + 2 * h] * scale, dk[4 * j + 2 * h + 1] * scale);
        red_add_f32x2(dVacc + row + 8 * j, dv[4 * j + 2 * h], dv[4 * j + 2 * h + 1]);
      }
    }
  }
}
// Otherwise dK, dV are staged in the (no longer read) K and V tiles, row = key - k0, for 16-byte stores
// (stage_dkdv by every consumer thread, a barrier, then store_dkdv by the NT of them).
template <typename T, int D>
__device__ __forceinline__ void stage_dkdv(uint32_t sK, uint32_t sV, const float (&dk)[D / 2],
                                           const float (&dv)[D / 2], int row, int t4, float scale) {
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t off = sw128<kWgBwdKeys>(row + 8 * h, j) + 4 * t4;
      st_shared_u32(sK + off, pack2<T>(dk[4 * j + 2 * h] * scale, dk[4 * j + 2 * h + 1] * scale));
      st_shared_u32(sV + off, pack2<T>(dv[4 * j + 2 * h], dv[4 * j + 2 * h + 1]));
    }
  }
}
template <typename T, int D, int NT, int ROWS = kWgBwdKeys>
__device__ __forceinline__ void store_dkdv(const uint8_t* sKp, const uint8_t* sVp, T* dK, T* dV, long kv_off, int k0,
                                           int Nk, int t) {
  constexpr int U = D / 8;
#pragma unroll
  for (int c = t; c < ROWS * U; c += NT) {
    const int r = c / U, chunk = c % U;
    if (k0 + r < Nk) {
      const long dst = kv_off + long(k0 + r) * D + chunk * 8;
      *reinterpret_cast<uint4*>(dK + dst) = *reinterpret_cast<const uint4*>(sKp + sw128<ROWS>(r, chunk));
      *reinterpret_cast<uint4*>(dV + dst) = *reinterpret_cast<const uint4*>(sVp + sw128<ROWS>(r, chunk));
    }
  }
}

// The block's work, shared by both kernels: key block k0 of key/value head kvh; the query heads qh0 ..
// qh0 + G - 1 (a group, or its share of a split group) swept block by block from q_start (causal: no earlier
// query sees these keys), n_it (query head, query block) steps in all.
struct WgBwdWork {
  int kvh, k0, qh0, q_start, n_it;
  template <int BM, int BN = kWgBwdKeys>
  __device__ __forceinline__ static WgBwdWork of_block(const Dims& dm, int causal) {
    WgBwdWork w;
    const int G = dm.H / dm.Hkv / gridDim.z;  // query heads this block sweeps (a group split over gridDim.z blocks)
    w.kvh = blockIdx.y;                       // b * Hkv + key/value head
    w.qh0 = (w.kvh / dm.Hkv) * dm.H + (w.kvh % dm.Hkv) * (G * gridDim.z) + blockIdx.z * G;
    w.k0 = blockIdx.x * BN;
    w.q_start = causal ? (w.k0 / BM) * BM : 0;
    const int n_qb = w.q_start < dm.Nq ? (dm.Nq - w.q_start + BM - 1) / BM : 0;
    w.n_it = G * n_qb;
    return w;
  }
  // the offset of the key/value head's rows in K, V, dK, dV
  template <int D>
  __device__ __forceinline__ long kv_off(int Nk) const { return long(kvh) * Nk * D; }
  // the step after (qh, qb): the next query block, or the next head's first
  template <int BM>
  __device__ __forceinline__ void next(int& qh, int& qb, int Nq) const {
    if (qb + BM < Nq) {
      qb += BM;
    } else {
      qb = q_start;
      ++qh;
    }
  }
};

// Start loading (cp.async, by the NT threads tid) the rows qb .. qb + BM - 1 of query head qh ([B*H] index): Q and dO
// into the SW128 tiles at sQ, sdO, LSE and Dd into lse + off, dd + off (row_slot order); rows past Nq arrive as
// zeros.
template <int BM, int D, int NT, typename T>
__device__ __forceinline__ void load_query_stage(uint32_t sQ, uint32_t sdO, float* lse, float* dd, int off, const T* Q,
                                                 const T* dO, const float* LSE, const float* Dd, int qh, int qb,
                                                 int Nq, int tid) {
  load_tile_sw128<BM, D, NT>(sQ, Q + long(qh) * Nq * D, qb, Nq, tid);
  load_tile_sw128<BM, D, NT>(sdO, dO + long(qh) * Nq * D, qb, Nq, tid);
  for (int r = tid; r < 2 * BM; r += NT) {
    const int q = qb + (r % BM);
    const float* src = (r < BM ? LSE : Dd) + long(qh) * Nq + (q < Nq ? q : 0);
    cp_async_4(smem_u32((r < BM ? lse : dd) + off + row_slot<BM>(r % BM)), src, q < Nq ? 4 : 0);
  }
}

// ------------------------------------------------------------------------------ pipeline cp.async (step 1)

template <typename T, int D, int BM>
__global__ void __launch_bounds__(kWgBwdThreads, 1)
flash_wgmma_backward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                            const float* __restrict__ LSE, const float* __restrict__ Dd, const T* __restrict__ dO,
                            float* __restrict__ dQacc, T* __restrict__ dK, T* __restrict__ dV,
                            float* __restrict__ dKacc, float* __restrict__ dVacc, Dims dm, float scale, int causal) {
  static_assert((BM == 64 || BM == 128) && (D == 64 || D == 128), "tile shape");
  constexpr int BN = kWgBwdKeys, NT = kWgBwdThreads;
  constexpr int NKV = D / 2;  // dK, dV accumulators per thread: [64 keys x D]
  constexpr int KB = BM / 16;  // k16 steps over the queries (dV, dK products)
  using Shape = WgBwdShape<BM, D>;
  constexpr int NQ = Shape::NQ, KQ = Shape::KQ;
  constexpr uint32_t TKV = BN * D * 2, TQ = BM * D * 2, TS = BN * BM * 2;  // tile bytes
  extern __shared__ uint8_t smem_raw[];
  // SW128 tiles start on 1024-byte boundaries (the launcher allocates 1 KB of slack)
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sK = (raw + 1023u) & ~1023u;  // [BN][D]
  const uint32_t sV = sK + TKV;                // [BN][D]
  const uint32_t sQ = sV + TKV;                // [2][BM][D]
  const uint32_t sdO = sQ + 2 * TQ;            // [2][BM][D]
  const uint32_t sdS = sdO + 2 * TQ;           // [BN][BM]  dS^T (BM / 64 column blocks of [BN][64])
  uint8_t* const smem = smem_raw + (sK - raw);
  constexpr int RS = kRowStage<BM>;
  float* const lse_s = reinterpret_cast<float*>(smem + 2 * TKV + 4 * TQ + TS);  // [2][RS] (row_slot order)
  float* const dd_s = lse_s + 2 * RS;                                           // [2][RS]

  const int tid = threadIdx.x, wg = warpgroup_index(), warp = (tid >> 5) & 3, lane = tid & 31, t4 = lane & 3;
  const int Nq = dm.Nq, Nk = dm.Nk;
  const WgBwdWork work = WgBwdWork::of_block<BM>(dm, causal);
  const int k0 = work.k0, n_it = work.n_it;
  const float scale_log2 = scale * kLog2e;
  const int key0 = k0 + wg * 64 + warp * 16 + (lane >> 2);  // this thread's accumulator rows: key0, key0 + 8

  auto stage = [&](int qh, int qb, int st) {
    load_query_stage<BM, D, NT>(sQ + st * TQ, sdO + st * TQ, lse_s, dd_s, st * RS, Q, dO, LSE, Dd, qh, qb, Nq, tid);
  };

  load_tile_sw128<BN, D, NT>(sK, K + work.kv_off<D>(Nk), k0, Nk, tid);
  load_tile_sw128<BN, D, NT>(sV, V + work.kv_off<D>(Nk), k0, Nk, tid);
  if (n_it > 0) stage(work.qh0, work.q_start, 0);
  cp_async_commit();

  const WgBwdDescs<BM, D> desc(sK, sV, sdS, wg);
  float dk[NKV], dv[NKV];
#pragma unroll
  for (int i = 0; i < NKV; ++i) dk[i] = dv[i] = 0.f;

  int qh = work.qh0, qb = work.q_start;  // this step's query head and first row; steps run head by head
  for (int it = 0; it < n_it; ++it) {
    const int st = it & 1;
    const uint32_t cQ = sQ + st * TQ, cdO = sdO + st * TQ;
    cp_async_wait<0>();
    fence_proxy_async();  // cp.async writes (generic proxy) -> wgmma reads (async proxy)
    __syncthreads();      // this stage has landed; everyone is done with the other stage and dS^T
    if (it + 1 < n_it) stage(qb + BM < Nq ? qh : qh + 1, qb + BM < Nq ? qb + BM : work.q_start, st ^ 1);
    cp_async_commit();

    uint32_t pf[KB][4], dsf[KB][4];  // P^T, dS^T as A fragments: k-step kk = queries 16 kk ..
    bwd_p_ds<T, D, BM>(pf, dsf, desc.K, desc.V, cQ, cdO, lse_s + st * RS, dd_s + st * RS, k0, key0, qb, Nq, Nk, causal,
                       scale_log2, t4);
    store_dsT<BM>(sdS, wg * 64 + warp * 16, lane, dsf);
    issue_dkdv<T, D, BM>(dv, dk, pf, dsf, cQ, cdO);
    bar_sync(1, NT);  // dS^T of both warpgroups is in shared memory

    float dq[NQ / 2];
    issue_dq<T, NQ, KQ>(dq, desc.dSa, desc.Kb);
    wgmma_wait<0>();
    fence_regs(dv);
    fence_regs(dk);
    fence_regs(dq);
    {
      float* const dqp = dQacc + long(qh) * Nq * D;
      const int row = qb + (Shape::split == kDqRows ? wg * 64 : 0) + warp * 16 + (lane >> 2);
      const int col = (Shape::split == kDqCols ? wg * (D / 2) : 0) + 2 * t4;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int q = row + 8 * h;
        if (q < Nq) {
#pragma unroll
          for (int j = 0; j < NQ / 8; ++j)
            red_add_f32x2(dqp + long(q) * D + col + 8 * j, dq[4 * j + 2 * h] * scale, dq[4 * j + 2 * h + 1] * scale);
        }
      }
    }
    work.next<BM>(qh, qb, Nq);
  }

  if (gridDim.z > 1) {
    add_dkdv_partial<D>(dKacc, dVacc, dk, dv, work.kv_off<D>(Nk), key0, Nk, t4, scale);
    return;
  }
  cp_async_wait<0>();
  __syncthreads();  // every wgmma read of the K/V tiles is done: stage dK, dV there for 16-byte stores
  stage_dkdv<T, D>(sK, sV, dk, dv, key0 - k0, t4, scale);
  __syncthreads();
  store_dkdv<T, D, NT>(smem, smem + TKV, dK, dV, work.kv_off<D>(Nk), k0, Nk, tid);
}

// ------------------------------------------------------------------------------ pipeline tma-ws (step 2)

// Shared memory of the warp-specialised kernel: K, V; Q, dO stages; two dS^T buffers; a [64 x NQ] fp32 dQ
// piece per consumer warpgroup; LSE, Dd stages; mbarriers (full_kv, full[ST], empty[ST]); 1 KB of slack.
template <int D, int BM>
constexpr int ws_bwd_smem() {
  constexpr int ST = 2;
  return (2 * kWgBwdKeys * D + 2 * ST * BM * D + 2 * kWgBwdKeys * BM) * 2 + 2 * 64 * WgBwdShape<BM, D>::NQ * 4 +
         2 * ST * kRowStage<BM> * 4 + 8 * (1 + 2 * ST) + 1024;
}

// dQ accumulated apart: the fp32 accumulator dQacc of this pipeline is padded to whole tiles, [B*H][tiles]
// [BM * D], and each tile holds the pieces of the two warpgroups in the order of their accumulator fragments,
// piece p = [4 warps][NQ / 8][32 lanes][4 floats] (accumulator dq[4 j + r] of lane l of warp w at
// ((w * NQ / 8 + j) * 32 + l) * 4 + r), so that each warp writes its share to shared memory with conflict-free
// 16-byte stores and the copy engine adds it to global memory in one contiguous cp.reduce.async.bulk (4 KB at
// NQ = 64), with no barrier but the warp's own. wg_dq_postprocess_kernel reads it back in [B, H, Nq, D] order,
// scaled.
template <int BM, int D>
__host__ __device__ __forceinline__ long dq_piece_offset(int q_in_tile, int col, int& which) {
  using Shape = WgBwdShape<BM, D>;
  int p = 0, r = q_in_tile, c = col;
  if constexpr (Shape::split == kDqRows) {
    p = r >> 6;
    r &= 63;
  } else if constexpr (Shape::split == kDqCols) {
    p = c / (D / 2);
    c %= D / 2;
  }
  // accumulator of (row r, column c) of a [64 x NQ] wgmma: warp r / 16, lane 4 (r % 8) + (c % 8) / 2,
  // register 4 (c / 8) + 2 ((r / 8) % 2) + c % 2
  const int warp = r >> 4, lane = (r & 7) * 4 + ((c >> 1) & 3);
  const int reg = 4 * (c >> 3) + 2 * ((r >> 3) & 1) + (c & 1);
  which = p;
  return long(p) * 64 * Shape::NQ + warp * 16 * Shape::NQ + (reg >> 2) * 128 + lane * 4 + (reg & 3);
}

// Warpgroup 0 is the producer: its first warp loads K, V once (TMA, full_kv) and then every step's Q_i,
// dO_i (TMA, two boxes per 64 columns) and LSE_i, Dd_i (cp.async, one arrival per lane on completion,
// .noinc) into a 2-stage ring: full[s] completes when all have landed (1 + 32 arrivals and the TMA bytes),
// empty[s] when both consumer warpgroups' wgmma reading the stage have completed and every consumer thread
// has read its LSE, Dd values (256 arrivals: one per warpgroup left those generic reads unordered before the
// refill, a race compute-sanitizer's racecheck reported).
// Warpgroups 1, 2 are the consumers: the products of the cp.async kernel, with dS^T double-buffered (the
// barrier on both warpgroups' dS^T of step t + 1 is passed only after both have finished step t's dQ), and
// their dQ pieces added by the copy engine (see dq_piece_offset) instead of 2 x NQ / 2 red.global.add.v2
// per thread and step. setmaxnreg: producer 24 registers, consumers 240.
template <typename T, int D, int BM>
__global__ void __launch_bounds__(kWgBwdWsThreads, 1)
flash_wgmma_ws_backward_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                               const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO,
                               const float* __restrict__ LSE, const float* __restrict__ Dd, float* __restrict__ dQacc,
                               T* __restrict__ dK, T* __restrict__ dV, float* __restrict__ dKacc,
                               float* __restrict__ dVacc, Dims dm, float scale, int causal) {
  static_assert((BM == 64 || BM == 128) && (D == 64 || D == 128), "tile shape");
  constexpr int BN = kWgBwdKeys, ST = 2, NKV = D / 2, KB = BM / 16;
  using Shape = WgBwdShape<BM, D>;
  constexpr int NQ = Shape::NQ, KQ = Shape::KQ;
  constexpr uint32_t TKV = BN * D * 2, TQ = BM * D * 2, TS = BN * BM * 2, TDQ = 64 * NQ * 4;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sK = (raw + 1023u) & ~1023u;  // [BN][D]
  const uint32_t sV = sK + TKV;                // [BN][D]
  const uint32_t sQ = sV + TKV;                // [ST][BM][D]
  const uint32_t sdO = sQ + ST * TQ;           // [ST][BM][D]
  const uint32_t sdS = sdO + ST * TQ;          // [2][BN][BM]
  const uint32_t sdQ = sdS + 2 * TS;           // [2 warpgroups][64 x NQ] fp32, fragment order
  constexpr int RS = kRowStage<BM>;
  const uint32_t sLD = sdQ + 2 * TDQ;          // LSE [ST][RS], Dd [ST][RS] (row_slot order)
  const uint32_t full_kv = sLD + 2 * ST * RS * 4, full = full_kv + 8, empty = full + 8 * ST;
  uint8_t* const smem = smem_raw + (sK - raw);
  const float* const lse_s = reinterpret_cast<const float*>(smem + (sLD - sK));
  const float* const dd_s = lse_s + ST * RS;

  const int tid = threadIdx.x, wg = warpgroup_index();
  const int Nq = dm.Nq, Nk = dm.Nk;
  const WgBwdWork work = WgBwdWork::of_block<BM>(dm, causal);
  const int k0 = work.k0, n_it = work.n_it;

  if (tid == 0) {
    mbar_init(full_kv, 1);
#pragma unroll
    for (int s = 0; s < ST; ++s) {
      mbar_init(full + 8 * s, 1 + 32);  // the producer's expect_tx + one cp.async arrival per lane
      mbar_init(empty + 8 * s, 256);    // every consumer thread (each has read its LSE, Dd rows)
    }
    mbar_init_fence();
  }
  __syncthreads();  // the last block-wide barrier: from here on the roles meet on mbarriers and named barriers

  if (wg == 0) {
    // ---------------------------------------------------------------- producer
    setmaxnreg_dec<24>();
    if (tid < 32) {
      const int lane = tid;
      if (lane == 0) {
        tma_prefetch_map(&tmQ);
        tma_prefetch_map(&tmdO);
        mbar_arrive_expect_tx(full_kv, 2 * TKV);
        tma_load_tile<D, BN>(sK, &tmK, full_kv, k0, work.kvh);
        tma_load_tile<D, BN>(sV, &tmV, full_kv, k0, work.kvh);
      }
      int qh = work.qh0, qb = work.q_start;
      for (int it = 0; it < n_it; ++it) {
        const int st = it % ST;
        // stage st is free once both consumers have finished the step ST steps ago (the previous phase)
        if (it >= ST) mbar_wait(empty + 8 * st, ((it / ST) & 1) ^ 1);
        if (lane == 0) {
          mbar_arrive_expect_tx(full + 8 * st, 2 * TQ);
          tma_load_tile<D, BM>(sQ + st * TQ, &tmQ, full + 8 * st, qb, qh);
          tma_load_tile<D, BM>(sdO + st * TQ, &tmdO, full + 8 * st, qb, qh);
        }
        for (int r = lane; r < 2 * BM; r += 32) {  // LSE rows, then Dd rows (zeros past Nq)
          const int q = qb + (r % BM);
          const float* src = (r < BM ? LSE : Dd) + long(qh) * Nq + (q < Nq ? q : 0);
          cp_async_4(sLD + ((r < BM ? 0 : ST * RS) + st * RS + row_slot<BM>(r % BM)) * 4, src, q < Nq ? 4 : 0);
        }
        cp_async_mbar_arrive(full + 8 * st);
        work.next<BM>(qh, qb, Nq);
      }
      // not needed for the consumers (they wait on the stages' barriers), but no thread leaves with copies of its
      // own in flight
      asm volatile("cp.async.wait_all;\n" ::: "memory");
    }
  } else {
    // ---------------------------------------------------------------- consumers
    setmaxnreg_inc<240>();
    const int c = wg - 1, t128 = tid & 127, warp = t128 >> 5, lane = tid & 31, t4 = lane & 3;
    const float scale_log2 = scale * kLog2e;
    const int key0 = k0 + c * 64 + warp * 16 + (lane >> 2);  // this thread's accumulator rows: key0, key0 + 8
    const int n_tq = (Nq + BM - 1) / BM;                     // dQ tiles per query head
    constexpr uint32_t TW = TDQ / 4;                           // bytes of a warp's share of the piece
    const uint32_t my_dq = sdQ + c * TDQ + warp * TW + lane * 16;  // this thread's first 16 bytes
    const WgBwdDescs<BM, D> desc(sK, sV, sdS, c);
    float dk[NKV], dv[NKV];
#pragma unroll
    for (int i = 0; i < NKV; ++i) dk[i] = dv[i] = 0.f;
    mbar_wait(full_kv, 0);

    int qh = work.qh0, qb = work.q_start;
    for (int it = 0; it < n_it; ++it) {
      const int st = it % ST;
      const uint32_t cQ = sQ + st * TQ, cdO = sdO + st * TQ, cdS = sdS + (it & 1) * TS;
      mbar_wait(full + 8 * st, (it / ST) & 1);

      uint32_t pf[KB][4], dsf[KB][4];
      bwd_p_ds<T, D, BM>(pf, dsf, desc.K, desc.V, cQ, cdO, lse_s + st * RS, dd_s + st * RS, k0, key0, qb, Nq, Nk,
                         causal, scale_log2, t4);
      store_dsT<BM>(cdS, c * 64 + warp * 16, lane, dsf);
      issue_dkdv<T, D, BM>(dv, dk, pf, dsf, cQ, cdO);
      bar_sync(1, 256);  // dS^T of both consumer warpgroups is in shared memory

      float dq[NQ / 2];
      issue_dq<T, NQ, KQ>(dq, desc_add(desc.dSa, (it & 1) * TS), desc.Kb);
      wgmma_wait<1>();  // dV, dK of this step done: the stage's Q_i, dO_i are no longer read
      mbar_arrive(empty + 8 * st);  // every thread: its own reads of the stage's LSE, Dd are done too
      wgmma_wait<0>();
      fence_regs(dv);
      fence_regs(dk);
      fence_regs(dq);

      // the warp's share of the dQ piece: wait until the copy engine has read the previous one, write, add
      if (lane == 0) bulk_wait<0, true>();
      __syncwarp();
#pragma unroll
      for (int j = 0; j < NQ / 8; ++j) st_shared_v4(my_dq + j * 512, dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]);
      fence_proxy_async();
      __syncwarp();
      if (lane == 0) {
        const int p = Shape::parts == 1 ? 0 : c;
        bulk_reduce_add_f32(dQacc + (long(qh) * n_tq + qb / BM) * (BM * D) + p * (64 * NQ) + warp * (TW / 4),
                            sdQ + c * TDQ + warp * TW, TW);
        bulk_commit();
      }
      work.next<BM>(qh, qb, Nq);
    }
    if (lane == 0) bulk_wait<0, false>();  // every add has completed before the block's shared memory goes

    if (gridDim.z > 1) {
      add_dkdv_partial<D>(dKacc, dVacc, dk, dv, work.kv_off<D>(Nk), key0, Nk, t4, scale);
    } else {
      bar_sync(1, 256);  // both consumers' wgmma reads of the K/V tiles are done: stage dK, dV there
      fence_proxy_async();
      stage_dkdv<T, D>(sK, sV, dk, dv, key0 - k0, t4, scale);
      bar_sync(1, 256);
      store_dkdv<T, D, 256>(smem, smem + TKV, dK, dV, work.kv_off<D>(Nk), k0, Nk, tid - 128);
    }
  }
}

// dQ = scale x the fp32 accumulator of the tma-ws pipeline (dq_piece_offset's order) in [B, H, Nq, D]. The
// accumulator's 16-byte chunks hold columns c, c + 1 of rows r and r + 8 (r % 16 < 8): a thread reads one chunk
// and writes two rows' column pair. (Reading 8 bytes a thread, the column pair of one row, used half of every
// 32-byte sector it read: Nsight Compute counted 2,097,152 sectors beyond the ideal at N = 4096, D = 128.)
template <typename T, int D, int BM>
__global__ void wg_dq_postprocess_kernel(const float* __restrict__ acc, T* __restrict__ dq, long bh_count, int Nq,
                                         float scale) {
  const int n_tq = (Nq + BM - 1) / BM;
  const long per_bh = long(n_tq) * (BM / 2) * (D / 2);  // (row pair, column pair)s of a head
  const long n = bh_count * per_bh;
  for (long i = long(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += long(gridDim.x) * blockDim.x) {
    const long bh = i / per_bh;
    const long k = i % per_bh;
    const int pair = int(k / (D / 2)), col = 2 * int(k % (D / 2));
    const int q = (pair >> 3) * 16 + (pair & 7);  // rows q and q + 8
    if (q >= Nq) continue;
    int p;
    const long off = (bh * n_tq + q / BM) * (BM * D) + dq_piece_offset<BM, D>(q % BM, col, p);
    const float4 v = *reinterpret_cast<const float4*>(acc + off);
    T* const row = dq + (bh * Nq + q) * D + col;
    *reinterpret_cast<uint32_t*>(row) = pack2<T>(v.x * scale, v.y * scale);
    if (q + 8 < Nq) *reinterpret_cast<uint32_t*>(row + 8 * D) = pack2<T>(v.z * scale, v.w * scale);
  }
}

// ------------------------------------------------------------------------------ head dim 256 (cp.async)
// At D = 256 a thread cannot hold [64 keys x D] of both dK and dV (256 registers), so the block owns BN = 64 keys
// and its two warpgroups split the head dim instead of the keys: warpgroup c accumulates dK, dV columns 128 c ..
// 128 c + 127 of all 64 keys (64 + 64 registers), as FlashAttention-3's head-dim-256 backward does. Per query
// block (BM = 64 rows):
//   S^T, dP^T [64 keys x 64 queries] split by queries: warpgroup c computes queries 32 c .. (wgmma SS, N = 32), then
//     P^T and dS^T as in bwd_p_ds, and stores both to shared memory ([64][64] SW128, stmatrix)
//   dV_c += P^T dO_c, dK_c += dS^T Q_c    wgmma SS, A = the whole P^T, dS^T (K-major), B = dO, Q columns 128 c ..
//   dQ_c  = dS K_c                         wgmma SS, A = dS^T read transposed, B = K columns 128 c ..
// Q, dO, LSE, Dd double-buffered by cp.async (every thread copies; the cp.async pipeline's two barriers per step).
// dQ leaves through the step's own Q, dO stage: once both warpgroups' dV, dK (its only readers) are done, warpgroup
// c writes its [64 x 128] fp32 piece there in accumulator order (c = 0 over Q's 32 KB, 1 over dO's) and each warp
// adds its share to the padded accumulator with one bulk reduce-add of the copy engine (dq_piece_offset's order,
// wg_dq_postprocess_kernel casts), instead of 32 red.global.add.v2 per thread; the stage is refilled at the next
// step only after the copy engine has read it. Shared memory: K, V 32 KB each, Q, dO 2 x 32 KB each, P^T, dS^T
// 8 KB each: 210 KB with the rows and slack.
constexpr int kWg256Keys = codes::flash_wgmma_bwd::kKeysD256, kWg256Rows = 64;

template <typename T>
__global__ void __launch_bounds__(kWgBwdThreads, 1)
flash_wgmma_backward_d256_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                                 const float* __restrict__ LSE, const float* __restrict__ Dd,
                                 const T* __restrict__ dO, float* __restrict__ dQacc, T* __restrict__ dK,
                                 T* __restrict__ dV, float* __restrict__ dKacc, float* __restrict__ dVacc, Dims dm,
                                 float scale, int causal) {
  constexpr int D = 256, BN = kWg256Keys, BM = kWg256Rows, NT = kWgBwdThreads;
  constexpr int NW = BM / 2;  // queries of S^T, dP^T per warpgroup (wgmma N)
  constexpr int DW = D / 2;   // dK, dV, dQ columns per warpgroup
  constexpr uint32_t TKV = BN * D * 2, TQ = BM * D * 2, TS = BN * BM * 2;  // tile bytes
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sK = (raw + 1023u) & ~1023u;  // [BN][D]
  const uint32_t sV = sK + TKV;                // [BN][D]
  const uint32_t sQ = sV + TKV;                // [2][BM][D]
  const uint32_t sdO = sQ + 2 * TQ;            // [2][BM][D]
  const uint32_t sPT = sdO + 2 * TQ;           // [BN][BM] P^T
  const uint32_t sdST = sPT + TS;              // [BN][BM] dS^T
  uint8_t* const smem = smem_raw + (sK - raw);
  constexpr int RS = kRowStage<BM>;
  float* const lse_s = reinterpret_cast<float*>(smem + 2 * TKV + 4 * TQ + 2 * TS);  // [2][RS] (row_slot order)
  float* const dd_s = lse_s + 2 * RS;                                               // [2][RS]

  const int tid = threadIdx.x, wg = warpgroup_index(), warp = (tid >> 5) & 3, lane = tid & 31, t4 = lane & 3;
  const int Nq = dm.Nq, Nk = dm.Nk;
  const WgBwdWork work = WgBwdWork::of_block<BM, BN>(dm, causal);
  const int k0 = work.k0, n_it = work.n_it;
  const float scale_log2 = scale * kLog2e;
  const int row0 = warp * 16 + (lane >> 2);  // this thread's accumulator rows (keys of S^T, dK, dV; queries of dQ)
  const int key0 = k0 + row0;                // and row0 + 8

  auto stage = [&](int qh, int qb, int st) {
    load_query_stage<BM, D, NT>(sQ + st * TQ, sdO + st * TQ, lse_s, dd_s, st * RS, Q, dO, LSE, Dd, qh, qb, Nq, tid);
  };
  load_tile_sw128<BN, D, NT>(sK, K + work.kv_off<D>(Nk), k0, Nk, tid);
  load_tile_sw128<BN, D, NT>(sV, V + work.kv_off<D>(Nk), k0, Nk, tid);
  if (n_it > 0) stage(work.qh0, work.q_start, 0);
  cp_async_commit();

  const uint64_t descK = desc_kmajor(sK), descV = desc_kmajor(sV);            // A of S^T, dP^T: all 64 keys
  const uint64_t descPT = desc_kmajor(sPT), descdST = desc_kmajor(sdST);      // A of dV, dK
  const uint64_t descdS = desc_mnmajor(sdST, BN * 128);                       // A of dQ: dS read from dS^T
  const uint64_t descKb = desc_mnmajor(sK + wg * 2 * (BN * 128), BN * 128);  // B of dQ: K columns 128 wg ..
  float dk[DW / 2], dv[DW / 2];
#pragma unroll
  for (int i = 0; i < DW / 2; ++i) dk[i] = dv[i] = 0.f;

  const int n_tq = (Nq + BM - 1) / BM;  // dQ tiles per query head
  constexpr uint32_t TW = 16 * DW * 4;  // bytes of a warp's share of a warpgroup's dQ piece
  int qh = work.qh0, qb = work.q_start;
  for (int it = 0; it < n_it; ++it) {
    const int st = it & 1;
    const uint32_t cQ = sQ + st * TQ, cdO = sdO + st * TQ;
    cp_async_wait<0>();
    if (lane == 0) bulk_wait<0, true>();  // the copy engine has read the last step's dQ out of the stage refilled below
    fence_proxy_async();  // cp.async writes (generic proxy) -> wgmma reads (async proxy)
    __syncthreads();      // this stage has landed; every wgmma of the last step (P^T, dS^T, the other stage) is done
    if (it + 1 < n_it) stage(qb + BM < Nq ? qh : qh + 1, qb + BM < Nq ? qb + BM : work.q_start, st ^ 1);
    cp_async_commit();

    // S^T, dP^T of queries 32 wg .. (rows 32 wg .. of the Q, dO tiles: 4096 bytes into each column block)
    float s[NW / 2], dp[NW / 2];
    fence_regs(s);
    fence_regs(dp);
    wgmma_fence();
    wgmma_kmajor_ss<T, NW, D, BN, BM>(s, descK, desc_kmajor(cQ + wg * NW * 128));
    wgmma_commit();
    wgmma_kmajor_ss<T, NW, D, BN, BM>(dp, descV, desc_kmajor(cdO + wg * NW * 128));
    wgmma_commit();
    const bool need_mask = (k0 + BN > Nk) || (qb + BM > Nq) || (causal && k0 + BN - 1 > qb);
    wgmma_wait<1>();
    fence_regs(s);
    // s[4 j + 2 h + e] = S^T(key0 + 8 h, query qb + 32 wg + 8 j + 2 t4 + e): LSE, Dd at row_slot(32 wg + 8 j + 2 t4
    // + e) = t4 (BM / 4 + 4) + 8 wg + 2 j + e
    const float* lse_c = lse_s + st * RS + t4 * (BM / 4 + 4) + 8 * wg;
    const float* dd_c = dd_s + st * RS + t4 * (BM / 4 + 4) + 8 * wg;
#pragma unroll
    for (int j = 0; j < NW / 8; ++j) {
      const float4 l4 = *reinterpret_cast<const float4*>(lse_c + 4 * (j >> 1));
      const float l0 = (j & 1 ? l4.z : l4.x) * kLog2e, l1 = (j & 1 ? l4.w : l4.y) * kLog2e;
#pragma unroll
      for (int i = 4 * j; i < 4 * j + 4; ++i) s[i] = fast_exp2(fmaf(s[i], scale_log2, -(i & 1 ? l1 : l0)));
    }
    if (need_mask) {  // a pass of its own behind a warp-uniform branch, as bwd_p_ds at D = 128
      const int qrel = qb + wg * NW + 2 * t4, hi = Nq - qrel;  // query = qrel + 8 j + e
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int key = key0 + 8 * h, lo = key >= Nk ? INT_MAX : (causal ? key - qrel : INT_MIN);
#pragma unroll
        for (int j = 0; j < NW / 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (!(8 * j + e >= lo && 8 * j + e < hi)) s[4 * j + 2 * h + e] = 0.f;
      }
    }
    uint32_t pf[NW / 16][4], dsf[NW / 16][4];
#pragma unroll
    for (int kk = 0; kk < NW / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) pf[kk][i] = pack2<T>(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
    wgmma_wait<0>();
    fence_regs(dp);
#pragma unroll
    for (int j = 0; j < NW / 8; ++j) {
      const float4 d4 = *reinterpret_cast<const float4*>(dd_c + 4 * (j >> 1));
      const float2 d = j & 1 ? make_float2(d4.z, d4.w) : make_float2(d4.x, d4.y);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        dp[4 * j + 2 * h] = s[4 * j + 2 * h] * (dp[4 * j + 2 * h] - d.x);
        dp[4 * j + 2 * h + 1] = s[4 * j + 2 * h + 1] * (dp[4 * j + 2 * h + 1] - d.y);
      }
    }
#pragma unroll
    for (int kk = 0; kk < NW / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) dsf[kk][i] = pack2<T>(dp[8 * kk + 2 * i], dp[8 * kk + 2 * i + 1]);
    // P^T, dS^T of these queries (16-byte chunks 4 wg .. 4 wg + 3 of each key's row; see store_dsT)
    {
      const int m = lane >> 3, row = warp * 16 + 8 * (m & 1) + (lane & 7);
#pragma unroll
      for (int kk = 0; kk < NW / 16; ++kk) {
        const uint32_t off = sw128<BN>(row, 4 * wg + 2 * kk + (m >> 1));
        stmatrix_x4(sPT + off, pf[kk]);
        stmatrix_x4(sdST + off, dsf[kk]);
      }
      fence_proxy_async();
    }
    bar_sync(1, NT);  // P^T, dS^T of both warpgroups are in shared memory

    // dV += P^T dO, dK += dS^T Q over the block's 64 queries (k-step kk: queries 16 kk .., 32 bytes into P^T's rows,
    // 16 rows = 2048 bytes of dO, Q), the warpgroup's 128 columns (two column blocks from 2 wg)
    {
      const uint64_t bdO = desc_mnmajor(cdO + wg * 2 * (BM * 128), BM * 128);
      const uint64_t bQ = desc_mnmajor(cQ + wg * 2 * (BM * 128), BM * 128);
      fence_regs(dv);
      fence_regs(dk);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk)
        wgmma_ss<T, DW, 0, 1>(dv, desc_add(descPT, kk * 32), desc_add(bdO, kk * 2048), 1);
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk)
        wgmma_ss<T, DW, 0, 1>(dk, desc_add(descdST, kk * 32), desc_add(bQ, kk * 2048), 1);
      wgmma_commit();
    }
    float dq[DW / 2];
    issue_dq<T, DW, BN>(dq, descdS, descKb);
    wgmma_wait<0>();
    fence_regs(dv);
    fence_regs(dk);
    fence_regs(dq);
    bar_sync(1, NT);  // both warpgroups' dV, dK are done: the stage's Q and dO are read no more
    {
      const uint32_t piece = (wg == 0 ? cQ : cdO) + warp * TW;
#pragma unroll
      for (int j = 0; j < DW / 8; ++j)
        st_shared_v4(piece + lane * 16 + j * 512, dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]);
      fence_proxy_async();
      __syncwarp();
      if (lane == 0) {
        bulk_reduce_add_f32(dQacc + (long(qh) * n_tq + qb / BM) * (BM * D) + wg * (64 * DW) + warp * (TW / 4), piece,
                            TW);
        bulk_commit();
      }
    }
    work.next<BM>(qh, qb, Nq);
  }
  if (lane == 0) bulk_wait<0, false>();  // every add has completed before the block's shared memory goes

  if (gridDim.z > 1) {  // a split group: add this block's partial dK, dV (fp32)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int key = key0 + 8 * h;
      if (key < Nk) {
        const long row = work.kv_off<D>(Nk) + long(key) * D + wg * DW + 2 * t4;
#pragma unroll
        for (int j = 0; j < DW / 8; ++j) {
          red_add_f32x2(dKacc + row + 8 * j, dk[4 * j + 2 * h] * scale, dk[4 * j + 2 * h + 1] * scale);
          red_add_f32x2(dVacc + row + 8 * j, dv[4 * j + 2 * h], dv[4 * j + 2 * h + 1]);
        }
      }
    }
    return;
  }
  cp_async_wait<0>();
  __syncthreads();  // every wgmma read of the K/V tiles is done: stage dK, dV there for 16-byte stores
#pragma unroll
  for (int j = 0; j < DW / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t off = sw128<BN>(row0 + 8 * h, wg * (DW / 8) + j) + 4 * t4;
      st_shared_u32(sK + off, pack2<T>(dk[4 * j + 2 * h] * scale, dk[4 * j + 2 * h + 1] * scale));
      st_shared_u32(sV + off, pack2<T>(dv[4 * j + 2 * h], dv[4 * j + 2 * h + 1]));
    }
  }
  __syncthreads();
  store_dkdv<T, D, NT, BN>(smem, smem + TKV, dK, dV, work.kv_off<D>(Nk), k0, Nk, tid);
}

// Around the kernel, as wgmma_ws_backward_launch: the padded dQ accumulator zeroed (the caller allocates B*H*ceil(Nq /
// 128) * 128 * D floats, more than the B*H*ceil(Nq / 64) * 64 * D of 64-row tiles), Dd, the kernel (within the group
// split), dQ cast from the accumulator.
template <typename T>
cudaError_t wgmma_backward_d256_launch(const AttnArgs& a, int split, cudaStream_t stream) {
  constexpr int D = 256, BN = kWg256Keys, BM = kWg256Rows;
  auto kernel = flash_wgmma_backward_d256_kernel<T>;
  constexpr int smem = (2 * BN * D + 4 * BM * D + 2 * BN * BM) * 2 + 4 * kRowStage<BM> * 4 + 1024;
  static_assert(smem <= 227 * 1024, "shared memory of a block");
  const long rows = long(a.B) * a.H * a.Nq;
  cudaError_t err = allow_smem(kernel, smem);
  if (err == cudaSuccess)
    err = cudaMemsetAsync(a.dq_acc, 0, sizeof(float) * long(a.B) * a.H * cdiv(a.Nq, BM) * BM * D, stream);
  if (err == cudaSuccess) err = launch_rowdot<T>(a.dO, a.o, a.Dd, rows, D, stream);
  if (err != cudaSuccess) return err;
  err = split_group_backward<T, D>(a, split, stream, [&] {
    kernel<<<dim3(cdiv(a.Nk, BN), a.B * a.Hkv, split), kWgBwdThreads, smem, stream>>>(
        static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), a.lse, a.Dd,
        static_cast<const T*>(a.dO), a.dq_acc, static_cast<T*>(a.dk), static_cast<T*>(a.dv), a.ws[0], a.ws[1],
        dims_of(a), a.scale, a.causal);
    return cudaGetLastError();
  });
  if (err != cudaSuccess || rows == 0) return err;
  const long pairs = long(a.B) * a.H * cdiv(a.Nq, BM) * (BM / 2) * (D / 2);
  long blocks = (pairs + 255) / 256;
  if (blocks > 65535L * 8) blocks = 65535L * 8;
  wg_dq_postprocess_kernel<T, D, BM><<<unsigned(blocks), 256, 0, stream>>>(a.dq_acc, static_cast<T*>(a.dq),
                                                                           long(a.B) * a.H, a.Nq, a.scale);
  return cudaGetLastError();
}

// ------------------------------------------------------------------------------ launchers

// split: the blocks each group of H / Hkv query heads is split over (common.cuh: split_group_backward).
template <typename T, int D, int BM>
cudaError_t wgmma_backward_launch(const AttnArgs& a, int split, cudaStream_t stream) {
  auto kernel = flash_wgmma_backward_kernel<T, D, BM>;
  constexpr int BN = kWgBwdKeys;
  // tiles + LSE/Dd stages + slack for 1024-byte alignment
  constexpr int smem = (2 * BN * D + 4 * BM * D + BN * BM) * 2 + 4 * kRowStage<BM> * 4 + 1024;
  return fa2_backward<T, D>(a, stream, [&] {
    return split_group_backward<T, D>(a, split, stream, [&] {
      cudaError_t err = allow_smem(kernel, smem);
      if (err != cudaSuccess) return err;
      kernel<<<dim3(cdiv(a.Nk, BN), a.B * a.Hkv, split), kWgBwdThreads, smem, stream>>>(
          static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), a.lse, a.Dd,
          static_cast<const T*>(a.dO), a.dq_acc, static_cast<T*>(a.dk), static_cast<T*>(a.dv), a.ws[0], a.ws[1],
          dims_of(a), a.scale, a.causal);
      return cudaGetLastError();
    });
  });
}

// The tma-ws pipeline around its kernel: zero the padded dQ accumulator (the caller allocates B*H*ceil(Nq /
// 128) * 128 * D floats), Dd = rowsum(dO * O), the kernel (within the group split), dQ from the accumulator.
template <typename T, int D, int BM>
cudaError_t wgmma_ws_backward_launch(const AttnArgs& a, int split, cudaStream_t stream) {
  auto kernel = flash_wgmma_ws_backward_kernel<T, D, BM>;
  constexpr int BN = kWgBwdKeys, smem = ws_bwd_smem<D, BM>();
  static_assert(smem <= 227 * 1024, "shared memory of a block");
  const long rows = long(a.B) * a.H * a.Nq;
  const long acc = long(a.B) * a.H * cdiv(a.Nq, BM) * BM * D;
  CUtensorMap maps[4];
  cudaError_t err = make_tile_map<T>(&maps[0], a.q, a.B * a.H, a.Nq, D, BM);
  if (err == cudaSuccess) err = make_tile_map<T>(&maps[1], a.k, a.B * a.Hkv, a.Nk, D, BN);
  if (err == cudaSuccess) err = make_tile_map<T>(&maps[2], a.v, a.B * a.Hkv, a.Nk, D, BN);
  if (err == cudaSuccess) err = make_tile_map<T>(&maps[3], a.dO, a.B * a.H, a.Nq, D, BM);
  if (err == cudaSuccess) err = allow_smem(kernel, smem);
  if (err == cudaSuccess) err = cudaMemsetAsync(a.dq_acc, 0, sizeof(float) * acc, stream);
  if (err == cudaSuccess) err = launch_rowdot<T>(a.dO, a.o, a.Dd, rows, D, stream);
  if (err != cudaSuccess) return err;
  err = split_group_backward<T, D>(a, split, stream, [&] {
    kernel<<<dim3(cdiv(a.Nk, BN), a.B * a.Hkv, split), kWgBwdWsThreads, smem, stream>>>(
        maps[0], maps[1], maps[2], maps[3], a.lse, a.Dd, a.dq_acc, static_cast<T*>(a.dk), static_cast<T*>(a.dv),
        a.ws[0], a.ws[1], dims_of(a), a.scale, a.causal);
    return cudaGetLastError();
  });
  if (err != cudaSuccess || rows == 0) return err;
  const long pairs = long(a.B) * a.H * cdiv(a.Nq, BM) * (BM / 2) * (D / 2);  // the kernel's (row pair, column pair)s
  long blocks = (pairs + 255) / 256;
  if (blocks > 65535L * 8) blocks = 65535L * 8;
  wg_dq_postprocess_kernel<T, D, BM><<<unsigned(blocks), 256, 0, stream>>>(a.dq_acc, static_cast<T*>(a.dq),
                                                                           long(a.B) * a.H, a.Nq, a.scale);
  return cudaGetLastError();
}

// Option code, as flash_kernels/variants.py lays it out (option_codes.h): bits 0..3 the tile (query rows per step x keys per
// block): 0 = 64x128, 1 = 128x128 (D = 64 only: at D = 128 the [64 x 128] S^T and dP^T accumulators do not
// fit beside dK and dV), 2 = 64x64 (D = 256 only, with cp.async); bits 4..7 the pipeline (0 = cp.async, 1 = tma-ws);
// bits 8.. the group split.
template <typename T, int D, int BM>
cudaError_t wgmma_backward_pipeline(const AttnArgs& a, int split, cudaStream_t stream) {
  namespace oc = codes::flash_wgmma_bwd;
  switch (oc::pipeline(a.option)) {
    case oc::kPipelineCpAsync: return wgmma_backward_launch<T, D, BM>(a, split, stream);
    case oc::kPipelineTmaWs: return wgmma_ws_backward_launch<T, D, BM>(a, split, stream);
    default: return cudaErrorInvalidValue;
  }
}
template <typename T, int D>
cudaError_t wgmma_backward(const AttnArgs& a, cudaStream_t stream) {
  namespace oc = codes::flash_wgmma_bwd;
  const int split = oc::group_split(a.option) > 0 ? oc::group_split(a.option) : 1;
  if constexpr (D == 256) {  // one kernel: the 64x64 tile, cp.async
    if (oc::tile(a.option) != oc::kTile64x64 || oc::pipeline(a.option) != oc::kPipelineCpAsync)
      return cudaErrorInvalidValue;
    return wgmma_backward_d256_launch<T>(a, split, stream);
  } else {
    switch (oc::tile(a.option)) {
      case oc::kTile64x128: return wgmma_backward_pipeline<T, D, 64>(a, split, stream);
      case oc::kTile128x128:
        if constexpr (D == 64) return wgmma_backward_pipeline<T, D, 128>(a, split, stream);
        return cudaErrorInvalidValue;
      default: return cudaErrorInvalidValue;
    }
  }
}

}  // namespace fk

int flash_wgmma_backward(const fk::AttnArgs& a, cudaStream_t stream) {
  if (a.D == 256) {
    switch (a.dtype) {
      case fk::kF16: return fk::wgmma_backward<__half, 256>(a, stream);
      case fk::kBF16: return fk::wgmma_backward<__nv_bfloat16, 256>(a, stream);
      default: return cudaErrorInvalidValue;
    }
  }
  return fk::dispatch_dtype_hdim</*fp32=*/false>(a, [&](auto t, auto d) {
    return fk::wgmma_backward<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
