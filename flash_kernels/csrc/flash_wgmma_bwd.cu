// flash_wgmma backward: FlashAttention-2's backward loop on Hopper's warpgroup tensor-core instructions
// (sm_90a), arranged as FlashAttention-3's: every product of a query block is a wgmma of a whole warpgroup.
//
// A block (2 consumer warpgroups, 256 threads) owns BN = 128 keys; warpgroup w owns keys 64 w .. 64 w + 63
// and keeps their dK_j, dV_j ([64 x D] each, fp32) in registers while the block sweeps the query blocks
// (BM = 64 or 128 rows; Q_i, dO_i, LSE_i, Dd_i double-buffered with cp.async into 128-byte-swizzled
// shared memory). Per query block, each warpgroup runs:
//   S^T  = K_w Q_i^T    wgmma SS m64nBMk16, K (A) and Q (B) both K-major: no transpose anywhere
//   dP^T = V_w dO_i^T   wgmma SS, likewise; issued right behind S^T, so exp2 of P^T overlaps it
//   P^T  = exp2(S^T scale log2e - LSE_i log2e) on the accumulators (masked: keys past Nk, queries past Nq,
//          causal keys after the query), dS^T = P^T (dP^T - Dd_i); both repacked to 16-bit A fragments
//   dV_w += P^T dO_i    wgmma RS m64nDk16: P^T from registers, dO read MN-major (the transpose bit, as the
//   dK_w += dS^T Q_i    forward reads V); likewise dS^T from registers, Q MN-major
//   dQ_i += scale dS K  wgmma SS with both operands MN-major: dS^T is stored to shared memory (4-byte
//          stores into the swizzled layout, conflict-free), read back as the A operand dS [queries][keys]
//          with the transpose bit; K (B) likewise. The two warpgroups split this product: by query rows
//          (BM = 128), by head-dim columns (BM = 64, D = 128), or by keys (BM = 64, D = 64: each adds its
//          own 64 keys' share, twice the atomics); fp32 red.global.add.v2 into dq_acc, then a cast.
// Dd_i = rowsum(dO_i * O_i) comes from common.cuh's preprocessing kernel. Grouped-query attention and
// the group split over gridDim.z (option code >> 8; partial dK, dV added into fp32 workspaces) exactly as
// flash_mma's backward; causal alignment top-left (query i sees keys j <= i).
//
// What it changes relative to flash_mma's backward (mma.sync, 8 warps, 128 keys a block): the same loop
// and the same block shape, but each product is one asynchronous wgmma chain per warpgroup with the
// operands read by the tensor cores from shared memory (no ldmatrix, no fragment address arithmetic in
// the inner loops); P^T and dS^T stay in registers as wgmma A fragments for dV and dK (flash_mma stages
// both through shared memory), only dS^T goes to shared memory, for dQ; dK and dV accumulate over a
// warpgroup's 64 keys x the full head dim (flash_mma splits D over warps).
//
// pipeline "cp.async" (step 1, option bits 4..7 = 0): no producer warp: every thread copies the next
// query block with cp.async while the current one is computed; two block barriers per query block
// (stage landed; dS^T of both warpgroups stored), each warpgroup waits for its wgmma chains at once.
//   Measured (H200, torch 2.11.0+cu130, scripts/wgmma_bwd_smoke.py at d5d16a0, now scripts/wgmma_smoke.py
//   --passes backward, log in profiles/_logs/nvidia-h200/wgmma_bwd_d5d16a0/; fp16, B*N = 16k, H = 16, median of
//   20 CUDA-event timings, no L2 flush; backward TFLOP/s = 2.5 x 4 B H N^2 D, halved causal), against SDPA flash
//   (FlashAttention-2) and flash_mma in the same run: D = 128 (64x128): 344-356 full, 302-331 causal at
//   N = 4096-8192, 1.21-1.28x SDPA flash (flash_mma 0.85-0.93x); D = 64 (128x128): 300-312 full, 245-288
//   causal, 1.19-1.25x (the 64x128 tile 0.88-0.97x). Every correctness check passes (the one that failed in
//   that log was the check's own: rows that see a single key have dQ = dK = 0, now judged by absolute error).
// Next bottleneck (ncu deep capture profiles/nvidia-h200/bottleneck-deep, H200 at 7a78894, B=4 H=16 N=4096
// D=128 fp16; `nsightlab why nvidia-h200/bottleneck-deep --a flash_wgmma --b sdpa_cudnn --case
// "causal=0,pass=backward"`): 1.61x cuDNN's time (1.56x causal). Half of the gap is instructions (1.29x
// cuDNN's; the consumers also issue the cp.async copies and their index math), half is latency hiding: one
// 256-thread block at 255 registers per SM = 2.0 warps per scheduler vs cuDNN's 2.5 (384 threads: a producer
// warpgroup + 2 consumers, 168 registers on average). Then LG throttle on the dQ red.global.add (0.37 cycles
// per instruction, cuDNN 0) and MIO throttle (0.41 vs 0.07). Tensor pipe busy 38% vs 66%. FlashAttention-3's
// arrangement (TMA producer with setmaxnreg, dQ accumulated apart) targets all three.
#include "wgmma.cuh"

namespace fk {

constexpr int kWgBwdKeys = 128;     // BN: keys per block, 64 per consumer warpgroup
constexpr int kWgBwdThreads = 256;  // 2 warpgroups

__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// How the two warpgroups share dQ_i = dS K_j, [BM x D] (see the header).
enum WgDqSplit : int { kDqRows = 0, kDqCols = 1, kDqKeys = 2 };
template <int BM, int D>
struct WgBwdShape {
  static constexpr int split = BM == 128 ? kDqRows : (D == 128 ? kDqCols : kDqKeys);
  static constexpr int NQ = split == kDqCols ? D / 2 : D;      // dQ columns per warpgroup (wgmma N)
  static constexpr int KQ = split == kDqKeys ? 64 : kWgBwdKeys;  // keys its dQ product sums over
};

template <typename T, int D, int BM>
__global__ void __launch_bounds__(kWgBwdThreads, 1)
flash_wgmma_backward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                            const float* __restrict__ LSE, const float* __restrict__ Dd, const T* __restrict__ dO,
                            float* __restrict__ dQacc, T* __restrict__ dK, T* __restrict__ dV,
                            float* __restrict__ dKacc, float* __restrict__ dVacc, Dims dm, float scale, int causal) {
  static_assert((BM == 64 || BM == 128) && (D == 64 || D == 128), "tile shape");
  constexpr int BN = kWgBwdKeys, NT = kWgBwdThreads;
  constexpr int NS = BM / 2;   // S^T, dP^T accumulators per thread: [64 keys x BM queries]
  constexpr int NKV = D / 2;   // dK, dV accumulators per thread: [64 keys x D]
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
  float* const lse_s = reinterpret_cast<float*>(smem + 2 * TKV + 4 * TQ + TS);  // [2][BM]
  float* const dd_s = lse_s + 2 * BM;                                           // [2][BM]

  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, t4 = lane & 3;
  const int Nq = dm.Nq, Nk = dm.Nk;
  const int G = dm.H / dm.Hkv / gridDim.z;  // query heads this block sweeps (a group split over gridDim.z blocks)
  const int kvh = blockIdx.y;               // b * Hkv + key/value head
  const long kv_off = long(kvh) * Nk * D;
  const int qh0 = (kvh / dm.Hkv) * dm.H + (kvh % dm.Hkv) * (G * gridDim.z) + blockIdx.z * G;  // its first one
  const int k0 = blockIdx.x * BN;
  const int q_start = causal ? (k0 / BM) * BM : 0;  // no earlier query sees these keys
  const int n_qb = q_start < Nq ? (Nq - q_start + BM - 1) / BM : 0;
  const int n_it = G * n_qb;  // (query head, query block) steps
  const float scale_log2 = scale * kLog2e;
  const int key0 = k0 + wg * 64 + warp * 16 + (lane >> 2);  // this thread's accumulator rows: key0, key0 + 8

  // start loading the Q, dO, LSE, Dd rows qb.. of query head qh ([B*H] index) into stage st
  auto stage = [&](int qh, int qb, int st) {
    load_tile_sw128<BM, D, NT>(sQ + st * TQ, Q + long(qh) * Nq * D, qb, Nq, tid);
    load_tile_sw128<BM, D, NT>(sdO + st * TQ, dO + long(qh) * Nq * D, qb, Nq, tid);
    for (int r = tid; r < 2 * BM; r += NT) {
      const int q = qb + (r % BM);
      const float* src = (r < BM ? LSE : Dd) + long(qh) * Nq + (q < Nq ? q : 0);
      cp_async_4(smem_u32(r < BM ? lse_s + st * BM + r : dd_s + st * BM + r - BM), src, q < Nq ? 4 : 0);
    }
  };

  load_tile_sw128<BN, D, NT>(sK, K + kv_off, k0, Nk, tid);
  load_tile_sw128<BN, D, NT>(sV, V + kv_off, k0, Nk, tid);
  if (n_it > 0) stage(qh0, q_start, 0);
  cp_async_commit();

  // A operands of S^T, dP^T: this warpgroup's 64 rows of K and V (K-major; k-step kd at column block
  // kd / 4, 32 bytes per k-step inside a 128-byte row)
  const uint64_t descK = desc_kmajor(sK + wg * 64 * 128);
  const uint64_t descV = desc_kmajor(sV + wg * 64 * 128);
  // dQ = dS K: A = dS [queries][keys] read from dS^T [keys][queries] (MN-major), B = K [keys][D] (MN-major)
  constexpr uint32_t dq_a_off = Shape::split == kDqRows ? BN * 128 : Shape::split == kDqKeys ? 64 * 128 : 0;
  constexpr uint32_t dq_b_off = Shape::split == kDqCols ? BN * 128 : Shape::split == kDqKeys ? 64 * 128 : 0;
  const uint64_t descdSa = desc_mnmajor(sdS + wg * dq_a_off, BN * 128);
  const uint64_t descKb = desc_mnmajor(sK + wg * dq_b_off, BN * 128);

  float dk[NKV], dv[NKV];
#pragma unroll
  for (int i = 0; i < NKV; ++i) dk[i] = dv[i] = 0.f;

  int qh = qh0, qb = q_start;  // this step's query head and first row; steps run head by head
  for (int it = 0; it < n_it; ++it) {
    const int st = it & 1;
    const uint32_t cQ = sQ + st * TQ, cdO = sdO + st * TQ;
    cp_async_wait<0>();
    fence_proxy_async();  // cp.async writes (generic proxy) -> wgmma reads (async proxy)
    __syncthreads();      // this stage has landed; everyone is done with the other stage and dS^T
    if (it + 1 < n_it) stage(qb + BM < Nq ? qh : qh + 1, qb + BM < Nq ? qb + BM : q_start, st ^ 1);
    cp_async_commit();

    uint32_t pf[KB][4], dsf[KB][4];  // P^T, dS^T as A fragments: k-step kk = queries 16 kk ..
    {
      float s[NS], dp[NS];
      const uint64_t descQ = desc_kmajor(cQ), descdO = desc_kmajor(cdO);
      fence_regs(s);
      fence_regs(dp);
      wgmma_fence();
#pragma unroll
      for (int kd = 0; kd < D / 16; ++kd) {
        const uint32_t off = (kd & 3) * 32;
        wgmma_ss<T, BM>(s, desc_add(descK, (kd >> 2) * (BN * 128) + off), desc_add(descQ, (kd >> 2) * (BM * 128) + off),
                        kd > 0);
      }
      wgmma_commit();
#pragma unroll
      for (int kd = 0; kd < D / 16; ++kd) {
        const uint32_t off = (kd & 3) * 32;
        wgmma_ss<T, BM>(dp, desc_add(descV, (kd >> 2) * (BN * 128) + off),
                        desc_add(descdO, (kd >> 2) * (BM * 128) + off), kd > 0);
      }
      wgmma_commit();

      const float* lse_c = lse_s + st * BM;
      const float* dd_c = dd_s + st * BM;
      // any key past Nk, query past Nq, or (causal) key after a query in this block
      const bool need_mask = (k0 + BN > Nk) || (qb + BM > Nq) || (causal && k0 + BN - 1 > qb);
      wgmma_wait<1>();  // S^T has landed; dP^T may still be in flight
      fence_regs(s);
      // accumulator s[4 j + 2 h + e] = S^T(key0 + 8 h, query qb + 8 j + 2 t4 + e)
#pragma unroll
      for (int j = 0; j < BM / 8; ++j) {
        const float2 l = *reinterpret_cast<const float2*>(lse_c + 8 * j + 2 * t4);
        const float l0 = l.x * kLog2e, l1 = l.y * kLog2e;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int i = 4 * j + 2 * h + e;
            float p = fast_exp2(fmaf(s[i], scale_log2, -(e ? l1 : l0)));
            if (need_mask) {
              const int key = key0 + 8 * h, q = qb + 8 * j + 2 * t4 + e;
              if (key >= Nk || q >= Nq || (causal && key > q)) p = 0.f;
            }
            s[i] = p;
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
        const float2 d = *reinterpret_cast<const float2*>(dd_c + 8 * j + 2 * t4);
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
    // dS^T to shared memory for dQ: dsf[kk][i] holds (key0 + 8 (i & 1), queries 16 kk + 8 (i >> 1) + 2 t4 ..)
    // = 16-byte chunk 2 kk + (i >> 1) of row key0 - k0 + 8 (i & 1), bytes 4 t4 ..
#pragma unroll
    for (int kk = 0; kk < KB; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        st_shared_u32(sdS + sw128<BN>(key0 - k0 + 8 * (i & 1), 2 * kk + (i >> 1)) + 4 * t4, dsf[kk][i]);
    fence_proxy_async();  // the stores (generic proxy) -> the dQ wgmma's reads (async proxy)

    // dV += P^T dO_i, dK += dS^T Q_i: B read MN-major ([queries][D], D contiguous), k-step = 16 rows = 2048 B
    {
      const uint64_t descdOmn = desc_mnmajor(cdO, BM * 128), descQmn = desc_mnmajor(cQ, BM * 128);
#pragma unroll
      for (int kk = 0; kk < KB; ++kk) {
        fence_regs(pf[kk]);
        fence_regs(dsf[kk]);
      }
      fence_regs(dv);
      fence_regs(dk);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < KB; ++kk) wgmma_rs<T, D, /*TB=*/1>(dv, pf[kk], desc_add(descdOmn, kk * 2048), 1);
#pragma unroll
      for (int kk = 0; kk < KB; ++kk) wgmma_rs<T, D, /*TB=*/1>(dk, dsf[kk], desc_add(descQmn, kk * 2048), 1);
      wgmma_commit();
    }
    bar_sync(1, NT);  // dS^T of both warpgroups is in shared memory

    // dQ_i (this warpgroup's share) = dS K_j: k-step kk = keys 16 kk .. of its KQ
    float dq[NQ / 2];
    fence_regs(dq);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KQ / 16; ++kk)
      wgmma_ss<T, NQ, /*TA=*/1, /*TB=*/1>(dq, desc_add(descdSa, kk * 2048), desc_add(descKb, kk * 2048), kk > 0);
    wgmma_commit();
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
    if (qb + BM < Nq) {  // the next step
      qb += BM;
    } else {
      qb = q_start;
      ++qh;
    }
  }

  // dK = scale dS^T Q summed; accumulator dk[4 j + 2 h + e] = (key0 + 8 h, column 8 j + 2 t4 + e)
  if (gridDim.z > 1) {  // a split group: the blocks of one key block add their partial dK, dV (fp32)
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
    return;
  }
  cp_async_wait<0>();
  __syncthreads();  // every wgmma read of the K/V tiles is done: stage dK, dV there for 16-byte stores
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t off = sw128<BN>(key0 - k0 + 8 * h, j) + 4 * t4;
      st_shared_u32(sK + off, pack2<T>(dk[4 * j + 2 * h] * scale, dk[4 * j + 2 * h + 1] * scale));
      st_shared_u32(sV + off, pack2<T>(dv[4 * j + 2 * h], dv[4 * j + 2 * h + 1]));
    }
  }
  __syncthreads();
  constexpr int U = D / 8;
#pragma unroll
  for (int c = tid; c < BN * U; c += NT) {
    const int r = c / U, chunk = c % U;
    if (k0 + r < Nk) {
      const long dst = kv_off + long(k0 + r) * D + chunk * 8;
      *reinterpret_cast<uint4*>(dK + dst) = *reinterpret_cast<const uint4*>(smem + sw128<BN>(r, chunk));
      *reinterpret_cast<uint4*>(dV + dst) = *reinterpret_cast<const uint4*>(smem + TKV + sw128<BN>(r, chunk));
    }
  }
}

// split: the blocks each group of H / Hkv query heads is split over (common.cuh: split_group_backward).
template <typename T, int D, int BM>
cudaError_t wgmma_backward_launch(const AttnArgs& a, int split, cudaStream_t stream) {
  auto kernel = flash_wgmma_backward_kernel<T, D, BM>;
  constexpr int BN = kWgBwdKeys;
  // tiles + LSE/Dd stages + slack for 1024-byte alignment
  constexpr int smem = (2 * BN * D + 4 * BM * D + BN * BM) * 2 + 4 * BM * 4 + 1024;
  return split_group_backward<T, D>(a, split, stream, [&] {
    cudaError_t err = allow_smem(kernel, smem);
    if (err != cudaSuccess) return err;
    kernel<<<dim3(cdiv(a.Nk, BN), a.B * a.Hkv, split), kWgBwdThreads, smem, stream>>>(
        static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), a.lse, a.Dd,
        static_cast<const T*>(a.dO), a.dq_acc, static_cast<T*>(a.dk), static_cast<T*>(a.dv), a.ws[0], a.ws[1],
        dims_of(a), a.scale, a.causal);
    return cudaGetLastError();
  });
}

// Option code, as flash_kernels/_ops.py builds it: bits 0..3 the tile (query rows per step x keys per
// block): 0 = 64x128, 1 = 128x128 (D = 64 only: at D = 128 the [64 x 128] S^T and dP^T accumulators do not
// fit beside dK and dV); bits 4..7 the pipeline (0 = cp.async); bits 8.. the group split.
template <typename T, int D>
cudaError_t wgmma_backward_tiles(const AttnArgs& a, cudaStream_t stream) {
  const int split = a.option >> 8 > 0 ? a.option >> 8 : 1;
  if (((a.option >> 4) & 15) != 0) return cudaErrorInvalidValue;
  switch (a.option & 15) {
    case 0: return wgmma_backward_launch<T, D, 64>(a, split, stream);
    case 1:
      if constexpr (D == 64) return wgmma_backward_launch<T, D, 128>(a, split, stream);
      return cudaErrorInvalidValue;
    default: return cudaErrorInvalidValue;
  }
}

// Dd = rowsum(dO * O), dQ accumulated in fp32 then cast: common.cuh's fa2_backward around the kernel.
template <typename T, int D>
cudaError_t wgmma_backward(const AttnArgs& a, cudaStream_t stream) {
  return fa2_backward<T, D>(a, stream, [&] { return wgmma_backward_tiles<T, D>(a, stream); });
}

}  // namespace fk

int flash_wgmma_backward(const fk::AttnArgs& a, cudaStream_t stream) {
  return fk::dispatch_dtype_hdim</*fp32=*/false>(a, [&](auto t, auto d) {
    return fk::wgmma_backward<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
