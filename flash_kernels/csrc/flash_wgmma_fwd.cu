// flash_wgmma forward: FlashAttention-2's loop on Hopper's warpgroup tensor-core instructions (sm_90a). The
// `pipeline` option picks the rung of the Hopper ladder: how K/V reach shared memory and how warpgroups share work.
//
// Relative to flash_mma: each product is one asynchronous wgmma per k16 step for a warpgroup's 64 query rows, its
// operands read by the tensor cores from shared memory (no ldmatrix). S = Q K^T is wgmma SS (Q and K K-major,
// 128-byte swizzle); O += P V is wgmma RS with P repacked from the S accumulators into 16-bit registers and V read
// MN-major (the transpose bit: V stays [keys][D]). Per K/V tile a consumer warpgroup runs S = Q_i K_j^T, the mask,
// the online softmax on the accumulator fragment, O rescaled when a row max grew, O += P V_j; the epilogue
// normalises O and stages it through the warpgroup's rows of the Q tile; LSE fp32 (natural log). GQA: query head h
// reads K/V head h / (H / Hkv); causal alignment top-left.
//
// The rungs (this file holds the first two and composes the others from their parts, as FlashAttention-3's hopper/):
//  cp.async                    every thread copies K/V (double-buffered), two block barriers per tile.
//  tma                         one thread issues TMA copies into a 2-stage ring of mbarriers; one barrier per tile.
//  tma-ws                      a producer warpgroup (wgmma_fwd_producer.cuh; setmaxnreg 24 or 32) fills a 2-3 stage
//                              ring; consumer warpgroups (240 or 160 registers) run PlainMainloop
//                              (wgmma_fwd_consumer.cuh) and the epilogue (wgmma_fwd_epilogue.cuh).
//  tma-ws-overlap              OverlapMainloop: S_t and O += P_{t+1} V_{t+1} issued together, the softmax of S_t
//                              run while the P V product is in flight.
//  tma-ws-pingpong             + PingPongTurns: consumers take turns to issue their products (named barriers).
//  tma-ws-persistent[-pingpong]  PersistentSchedule (wgmma_tile_scheduler.cuh): one block per SM loops over tiles
//                              from a global counter (zeroed by the caller), two Q buffers where they fit.
// Option `tail` ("auto", persistent pipelines): not causal, the last round's query blocks are split into 128-row
// tiles by a list-scheduling plan (_ops._wg_tail_plan); causal, heads are dealt in groups whose K/V fit in 16 MiB
// of L2, heaviest tiles first.
// Limits: sm_90a only; D = 64 or 128, and D = 256 on the 128x64 tile of tma-ws, -overlap and -pingpong
// (wgmma_forward_d256); one block per SM for the warp-specialised tiles; 192x128 runs without the overlap at
// D = 128 (registers). Defaults, measurements and design notes: docs/kernels.md, docs/results.md.
#include "wgmma_fwd_consumer.cuh"
#include "wgmma_fwd_epilogue.cuh"
#include "wgmma_fwd_producer.cuh"
#include "option_codes.h"

namespace fk {

// ------------------------------------------------------------------------------ step 1: cp.async

template <typename T, int D, int BM, int BN>
__global__ void __launch_bounds__(BM / 64 * 128, 1)
flash_wgmma_forward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                           T* __restrict__ O, float* __restrict__ LSE, Dims dm, float scale_log2, int causal) {
  static_assert(BM % 64 == 0 && (BN == 64 || BN == 128) && (D == 64 || D == 128), "tile shape");
  constexpr int NWG = BM / 64, NT = NWG * 128;
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

  const int tid = threadIdx.x, wg = warpgroup_index(), warp = (tid >> 5) & 3, lane = tid & 31;
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
      float s[NS];
      issue_scores<T, D, BM, BN>(s, dQ, desc_add(dK, st * TKV));
      wgmma_wait<0>();
      fence_regs(s);
      float alpha[2];
      if (softmax_tile<T, BN>(s, pf, m, l, alpha, j0, Nk, causal, wg_row0, row0, lane, scale_log2))
        rescale_o(o, alpha);
    }
    cp_async_wait<1>();  // V_t has landed (K_{t+1} may still be in flight)
    fence_proxy_async();
    __syncthreads();
    if (active) {
      issue_pv<T, D, BN>(o, pf, desc_add(dV, st * TKV));
      wgmma_wait<0>();
      fence_regs(o);
    }
    if (t + 1 < n_kv) load_tile_sw128<BN, D, NT>(sV + (st ^ 1) * TKV, Vb, (t + 1) * BN, Nk, tid);
    cp_async_commit();
  }
  cp_async_wait<0>();
  store_rows<T, D, BM>(o, m, l, smem, wg * 64, 1 + wg, wg_row0, Nq, bh, O, LSE, scale_log2);
}

// ------------------------------------------------------------------------------ step 2: TMA

template <typename T, int D, int BM, int BN, int STAGES>
__global__ void __launch_bounds__(BM / 64 * 128, 1)
flash_wgmma_tma_forward_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                               const __grid_constant__ CUtensorMap tmV, T* __restrict__ O, float* __restrict__ LSE,
                               Dims dm, float scale_log2, int causal) {
  static_assert(BM % 64 == 0 && (BN == 64 || BN == 128) && (D == 64 || D == 128), "tile shape");
  constexpr int KB = BN / 16, NS = BN / 2, NO = D / 2;
  constexpr uint32_t TQ = BM * D * 2, TKV = BN * D * 2;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sQ = (raw + 1023u) & ~1023u;  // [BM][D]
  const uint32_t sK = sQ + TQ;                 // [STAGES][BN][D]
  const uint32_t sV = sK + STAGES * TKV;       // [STAGES][BN][D]
  const uint32_t bar_q = sV + STAGES * TKV;    // mbarriers: Q, K[STAGES], V[STAGES]
  const uint32_t bar_k = bar_q + 8, bar_v = bar_k + 8 * STAGES;
  uint8_t* const smem = smem_raw + (sQ - raw);

  const int tid = threadIdx.x, wg = warpgroup_index(), warp = (tid >> 5) & 3, lane = tid & 31;
  const int Nq = dm.Nq, Nk = dm.Nk;
  const int bh = blockIdx.y;
  const int kvh = int(dm.kv_head(bh));
  const int q0 = (causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x)) * BM;
  const int kv_len = causal ? min(Nk, q0 + BM) : Nk;
  const int n_kv = (kv_len + BN - 1) / BN;
  const int wg_row0 = q0 + wg * 64;
  const int row0 = wg_row0 + warp * 16 + (lane >> 2);

  if (tid == 0) {
    tma_prefetch_map(&tmQ);
    tma_prefetch_map(&tmK);
    tma_prefetch_map(&tmV);
    mbar_init(bar_q, 1);
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bar_k + 8 * s, 1);
      mbar_init(bar_v + 8 * s, 1);
    }
    mbar_init_fence();
  }
  __syncthreads();
  if (tid == 0) {
    mbar_arrive_expect_tx(bar_q, TQ);
    tma_load_tile<D, BM>(sQ, &tmQ, bar_q, q0, bh);
    for (int s = 0; s < STAGES && s < n_kv; ++s) {
      mbar_arrive_expect_tx(bar_k + 8 * s, TKV);
      tma_load_tile<D, BN>(sK + s * TKV, &tmK, bar_k + 8 * s, s * BN, kvh);
      mbar_arrive_expect_tx(bar_v + 8 * s, TKV);
      tma_load_tile<D, BN>(sV + s * TKV, &tmV, bar_v + 8 * s, s * BN, kvh);
    }
  }

  const uint64_t dQ = desc_kmajor(sQ + wg * 64 * 128);
  const uint64_t dK = desc_kmajor(sK);
  const uint64_t dV = desc_mnmajor(sV, BN * 128);

  float o[NO];
#pragma unroll
  for (int i = 0; i < NO; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  mbar_wait(bar_q, 0);
  int st = 0;        // stage of tile t
  uint32_t ph = 0;   // parity of the stage's barriers' phase for tile t: (t / STAGES) & 1
  for (int t = 0; t < n_kv; ++t) {
    const int j0 = t * BN;
    const bool active = !causal || j0 <= wg_row0 + 63;
    if (active) {
      uint32_t pf[KB][4];
      {
        float s[NS];
        mbar_wait(bar_k + 8 * st, ph);
        issue_scores<T, D, BM, BN>(s, dQ, desc_add(dK, st * TKV));
        wgmma_wait<0>();
        fence_regs(s);
        float alpha[2];
        if (softmax_tile<T, BN>(s, pf, m, l, alpha, j0, Nk, causal, wg_row0, row0, lane, scale_log2))
          rescale_o(o, alpha);
      }
      mbar_wait(bar_v + 8 * st, ph);
      issue_pv<T, D, BN>(o, pf, desc_add(dV, st * TKV));
      wgmma_wait<0>();
      fence_regs(o);
    }
    if (t + STAGES < n_kv) {  // block-uniform
      __syncthreads();        // every warpgroup is done with stage st
      if (tid == 0) {
        const int jn = (t + STAGES) * BN;
        mbar_arrive_expect_tx(bar_k + 8 * st, TKV);
        tma_load_tile<D, BN>(sK + st * TKV, &tmK, bar_k + 8 * st, jn, kvh);
        mbar_arrive_expect_tx(bar_v + 8 * st, TKV);
        tma_load_tile<D, BN>(sV + st * TKV, &tmV, bar_v + 8 * st, jn, kvh);
      }
    }
    if (++st == STAGES) {
      st = 0;
      ph ^= 1;
    }
  }
  store_rows<T, D, BM>(o, m, l, smem, wg * 64, 1 + wg, wg_row0, Nq, bh, O, LSE, scale_log2);
}

// ------------------------------------------------------------------------------ steps 3-6: warp specialization

// Warpgroup 0 is the producer (one thread issues every copy: wgmma_fwd_producer.cuh), warpgroups 1 .. NWG the
// consumers (64 query rows each: wgmma_fwd_consumer.cuh). The flags pick the parts: OVERLAP the consumers'
// mainloop, PINGPONG their turns, PERSIST the tile schedule (wgmma_tile_scheduler.cuh), QBUF the Q buffers.
constexpr int kSchedBar = 4;  // named barriers 4 .. 4 + NWG - 1 (1 .. NWG: store_rows; 0: __syncthreads)

template <typename T, int D, int BM, int BN, int QBUF, int STAGES, class Sched>
__device__ __forceinline__ void ws_producer_thread(const WsSmem<D, BM, BN, QBUF, STAGES>& L, const CUtensorMap* tmQ,
                                                   const CUtensorMap* tmK, const CUtensorMap* tmV,
                                                   const WsTiles<T, D, BM, BN>& tiles, const Dims& dm,
                                                   int* next_tile) {
  tma_prefetch_map(tmQ);
  tma_prefetch_map(tmK);
  tma_prefetch_map(tmV);
  WsProducer<D, BM, BN, QBUF, STAGES, Sched> p{L, tmQ, tmK, tmV, L.sTile};
  int it = 0;
  for (int i = blockIdx.x;; ++it) {
    const int qb = it % QBUF;
    if (i >= tiles.n_tiles) {  // no more work: tell the consumers (persistent)
      Sched::finish(p, it, qb);
      break;
    }
    int bh, q0, n_kv, q_end;
    tiles.at(i, bh, q0, n_kv, q_end);
    p.load_tile(it, qb, i, bh, q0, n_kv, int(dm.kv_head(bh)));
    i = Sched::next(tiles.n_tiles, next_tile);
  }
}

// One consumer warpgroup (c = 0 .. NWG - 1) over its block's work tiles.
template <typename T, int D, int BM, int BN, int QBUF, int STAGES, class Sched, class Mainloop, class Turns>
__device__ __forceinline__ void ws_consumer_warpgroup(const WsSmem<D, BM, BN, QBUF, STAGES>& L,
                                                      const WsTiles<T, D, BM, BN>& tiles, int c, int Nq, int Nk,
                                                      int causal, float scale_log2, T* __restrict__ O,
                                                      float* __restrict__ LSE) {
  constexpr int NO = D / 2;
  constexpr uint32_t TQ = WsSmem<D, BM, BN, QBUF, STAGES>::TQ;
  const int tid = threadIdx.x, t128 = tid & 127, warp = t128 >> 5, lane = tid & 31;
  Wgmma16<T, D, BM, BN> ops(L.sK, L.sV);
  RingPos<STAGES> pos;
  ConsumerRing<STAGES, Turns> ring{L.ring, Turns{c}, t128, pos};
  ring.turns.start();
  for (int it = 0;; ++it) {
    const int qb = it % QBUF;
    int i;
    if (!Sched::template take<QBUF>(it, i, L.full_q, L.sTile)) break;
    int bh, q0, n_kv, q_end;
    tiles.at(i, bh, q0, n_kv, q_end);
    const int wg_row0 = q0 + c * 64;
    const int row0 = wg_row0 + warp * 16 + (lane >> 2);
    // causal: tiles from n_wg on start after this warpgroup's last row; none when its rows all lie past Nq (the last
    // query block of a ragged Nq) or past the tile's (a tail tile's last 64): it only keeps the ring and turns in step
    const int n_wg = wg_row0 >= Nq || wg_row0 >= q_end ? 0 : causal ? min(n_kv, (wg_row0 + 64 + BN - 1) / BN) : n_kv;
    const uint64_t dQ = desc_kmajor(L.sQ + qb * TQ + c * 64 * 128);

    float o[NO];
#pragma unroll
    for (int k = 0; k < NO; ++k) o[k] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

    Sched::wait_q(L.full_q);
    ring.skip(n_kv - n_wg);
    Mainloop::run(ops, ring, o, m, l, dQ, n_wg, SoftmaxRows{Nk, causal, wg_row0, row0, lane, scale_log2});
    ws_epilogue<T, D, BM>(o, m, l, L.smem + qb * TQ, L.empty_q + 8 * qb, c, wg_row0, Nq, bh, q_end, O, LSE,
                          scale_log2);
  }
}

template <typename T, int D, int BM, int BN, int STAGES, bool OVERLAP, bool PINGPONG = false, int QBUF = 1,
          bool PERSIST = false>
__global__ void __launch_bounds__((BM / 64 + 1) * 128, 1)
flash_wgmma_ws_forward_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                              const __grid_constant__ CUtensorMap tmV, T* __restrict__ O, float* __restrict__ LSE,
                              Dims dm, int batch_heads, float scale_log2, int causal,
                              int* __restrict__ next_tile, int main_qb) {
  static_assert(BM % 64 == 0 && (BN == 64 || BN == 128) &&
                    (D == 64 || D == 128 || (D == 256 && BM == 128 && BN == 64 && !PERSIST)), "tile shape");
  static_assert(STAGES >= 2 && (QBUF == 1 || (QBUF == 2 && PERSIST)), "K/V ring, Q buffers");
  constexpr int NWG = BM / 64;  // consumer warpgroups
  // the register file (64 K) split: 128 producer threads x PRODUCER_REGS + NWG x 128 x CONSUMER_REGS
  constexpr int PRODUCER_REGS = NWG == 2 ? 24 : 32, CONSUMER_REGS = NWG == 2 ? 240 : 160;
  static_assert(128 * PRODUCER_REGS + NWG * 128 * CONSUMER_REGS <= 65536, "register split");
  using Sched = std::conditional_t<PERSIST, PersistentSchedule, OneTileSchedule>;
  using Mainloop = std::conditional_t<OVERLAP, OverlapMainloop, PlainMainloop>;
  using Turns = std::conditional_t<PINGPONG, PingPongTurns<kSchedBar, NWG>, NoTurns>;
  extern __shared__ uint8_t smem_raw[];
  const WsSmem<D, BM, BN, QBUF, STAGES> L(smem_raw);
  const int tid = threadIdx.x, wg = warpgroup_index();
  const WsTiles<T, D, BM, BN> tiles(dm.Nq, dm.Nk, batch_heads, causal, main_qb);

  if (tid == 0) {
#pragma unroll
    for (int b = 0; b < QBUF; ++b) {
      mbar_init(L.full_q + 8 * b, 1);
      mbar_init(L.empty_q + 8 * b, NWG * 128);  // every consumer thread, after its last read of the tile
    }
    mbar_init_kv_ring<STAGES>(L.ring.full_k, L.ring.full_v, L.ring.empty_k, L.ring.empty_v, NWG);
    mbar_init_fence();
  }
  __syncthreads();  // the last block-wide barrier: from here on the roles meet only on mbarriers

  if (wg == 0) {
    setmaxnreg_dec<PRODUCER_REGS>();
    if (tid == 0) ws_producer_thread<T, D, BM, BN, QBUF, STAGES, Sched>(L, &tmQ, &tmK, &tmV, tiles, dm, next_tile);
  } else {
    setmaxnreg_inc<CONSUMER_REGS>();
    ws_consumer_warpgroup<T, D, BM, BN, QBUF, STAGES, Sched, Mainloop, Turns>(L, tiles, wg - 1, dm.Nq, dm.Nk, causal,
                                                                             scale_log2, O, LSE);
  }
}

// ------------------------------------------------------------------------------ launchers

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

// The tensor maps of one call: Q [B*H][Nq][D] in boxes of BM rows, K and V [B*Hkv][Nk][D] in boxes
// of BN rows.
template <typename T, int D, int BM, int BN>
cudaError_t make_qkv_maps(const AttnArgs& a, CUtensorMap (&maps)[3]) {
  cudaError_t err = make_tile_map<T>(&maps[0], a.q, a.B * a.H, a.Nq, D, BM);
  if (err == cudaSuccess) err = make_tile_map<T>(&maps[1], a.k, a.B * a.Hkv, a.Nk, D, BN);
  if (err == cudaSuccess) err = make_tile_map<T>(&maps[2], a.v, a.B * a.Hkv, a.Nk, D, BN);
  return err;
}

template <typename T, int D, int BM, int BN>
cudaError_t wgmma_tma_forward_launch(const AttnArgs& a, cudaStream_t stream) {
  constexpr int STAGES = 2;
  auto kernel = flash_wgmma_tma_forward_kernel<T, D, BM, BN, STAGES>;
  // tiles + slack for 1024-byte alignment + the mbarriers
  constexpr int smem = (BM * D + 2 * STAGES * BN * D) * 2 + 1024 + 8 * (1 + 2 * STAGES);
  CUtensorMap maps[3];
  cudaError_t err = make_qkv_maps<T, D, BM, BN>(a, maps);
  if (err == cudaSuccess) err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(cdiv(a.Nq, BM), a.B * a.H), BM / 64 * 128, smem, stream>>>(
      maps[0], maps[1], maps[2], static_cast<T*>(a.o), a.lse, dims_of(a), a.scale * kLog2e, a.causal);
  return cudaGetLastError();
}

// OVERLAP_REQUESTED: tma-ws-overlap. The 192x128 tile at D = 128 runs without the overlap: its 3
// consumer warpgroups get 160 registers each, and S, P and O of two tiles in flight need 160 alone
// (ptxas: 272 bytes of spills, wgmma serialized).
// PERSISTENT: one block per SM, each looping over work tiles (see the kernel), with two Q buffers so
// that the next tile's Q and first K/V tiles load while this one computes and stores; else one block
// per work tile.
template <typename T, int D, int BM, int BN, bool OVERLAP_REQUESTED, bool PINGPONG = false, bool PERSISTENT = false>
cudaError_t wgmma_ws_forward_launch(const AttnArgs& a, cudaStream_t stream) {
  constexpr int QBUF = PERSISTENT ? ws_persistent_qbuf<D, BM, BN>() : 1;
  constexpr int STAGES = ws_stages<D, BM, BN, QBUF>();
  constexpr bool OVERLAP = OVERLAP_REQUESTED && !(D == 128 && BM == 192 && BN == 128);
  auto kernel = flash_wgmma_ws_forward_kernel<T, D, BM, BN, STAGES, OVERLAP, PINGPONG, QBUF, PERSISTENT>;
  constexpr int smem = ws_smem<D, BM, BN, QBUF, STAGES>();
  static_assert(smem <= 227 * 1024, "shared memory of a block");
  CUtensorMap maps[3];
  cudaError_t err = make_qkv_maps<T, D, BM, BN>(a, maps);
  if (err == cudaSuccess) err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  // main_qb: option bits 8.. less one where the host planned tail tiles (persistent, not causal), else every
  // query block is a BM-row tile
  const int n_qb = cdiv(a.Nq, BM);
  const int tail = codes::flash_wgmma_fwd::tail(a.option);
  const int main_qb = PERSISTENT && !a.causal && tail > 0 ? std::min(tail - 1, n_qb) : n_qb;
  // causal: option bits 8.. non-zero = step 8's head groups (the kernel's causal argument 2)
  const int causal = a.causal ? (tail > 0 ? 2 : 1) : 0;
  const long tiles = (main_qb + tail_tiles_per_head<BM>(a.Nq, main_qb)) * long(a.B) * a.H;
  long blocks = tiles;
  if constexpr (PERSISTENT) {
    int device = 0, sms = 0;
    err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    blocks = std::min<long>(tiles, sms);
    if (a.ws[0] == nullptr) return cudaErrorInvalidValue;  // the tile counter, zeroed by the caller
  }
  if (tiles > INT32_MAX) return cudaErrorInvalidValue;
  kernel<<<unsigned(blocks), (BM / 64 + 1) * 128, smem, stream>>>(
      maps[0], maps[1], maps[2], static_cast<T*>(a.o), a.lse, dims_of(a), a.B * a.H, a.scale * kLog2e, causal,
      reinterpret_cast<int*>(a.ws[0]), main_qb);
  return cudaGetLastError();
}

// Pipeline codes (option bits 4..7; flash_kernels/variants.py, option_codes.h): 0 = cp.async, 1 = tma,
// 2 = tma-ws, 3 = tma-ws-overlap, 4 = tma-ws-pingpong, 5 = tma-ws-persistent,
// 6 = tma-ws-persistent-pingpong. Bits 8..: the persistent pipelines' main query blocks per head + 1 (0: all);
// causal, the tma-ws pipelines: non-zero = step 8's head groups.
template <typename T, int D, int BM, int BN>
cudaError_t wgmma_forward_pipeline(const AttnArgs& a, cudaStream_t stream) {
  namespace oc = codes::flash_wgmma_fwd;
  switch (oc::pipeline(a.option)) {
    case oc::kPipelineCpAsync: return wgmma_forward_launch<T, D, BM, BN>(a, stream);
    case oc::kPipelineTma: return wgmma_tma_forward_launch<T, D, BM, BN>(a, stream);
    case oc::kPipelineTmaWs: return wgmma_ws_forward_launch<T, D, BM, BN, false>(a, stream);
    case oc::kPipelineTmaWsOverlap: return wgmma_ws_forward_launch<T, D, BM, BN, true>(a, stream);
    case oc::kPipelineTmaWsPingpong: return wgmma_ws_forward_launch<T, D, BM, BN, true, true>(a, stream);
    case oc::kPipelineTmaWsPersistent: return wgmma_ws_forward_launch<T, D, BM, BN, true, false, true>(a, stream);
    case oc::kPipelineTmaWsPersistentPingpong: return wgmma_ws_forward_launch<T, D, BM, BN, true, true, true>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

// The tile table: tile code (option & 15) -> (query rows BM = 64 per warpgroup, keys per K/V tile BN).
// Codes from flash_kernels/variants.py (option_codes.h): 128x128, 128x64, 192x128, 192x64.
template <typename T, int D>
cudaError_t wgmma_forward_tiles(const AttnArgs& a, cudaStream_t stream) {
  namespace oc = codes::flash_wgmma_fwd;
  switch (oc::tile(a.option)) {
    case oc::kTile128x128: return wgmma_forward_pipeline<T, D, 128, 128>(a, stream);
    case oc::kTile128x64: return wgmma_forward_pipeline<T, D, 128, 64>(a, stream);
    case oc::kTile192x128: return wgmma_forward_pipeline<T, D, 192, 128>(a, stream);
    case oc::kTile192x64: return wgmma_forward_pipeline<T, D, 192, 64>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

// D = 256: the 128x64 tile of the one-tile-per-block warp-specialised pipelines. O is 128 registers of a consumer
// thread; a K/V stage is 64 keys x 256 columns (32 KB each), two stages beside Q's 64 KB.
template <typename T>
cudaError_t wgmma_forward_d256(const AttnArgs& a, cudaStream_t stream) {
  namespace oc = codes::flash_wgmma_fwd;
  if (oc::tile(a.option) != oc::kTile128x64) return cudaErrorInvalidValue;
  switch (oc::pipeline(a.option)) {
    case oc::kPipelineTmaWs: return wgmma_ws_forward_launch<T, 256, 128, 64, false>(a, stream);
    case oc::kPipelineTmaWsOverlap: return wgmma_ws_forward_launch<T, 256, 128, 64, true>(a, stream);
    case oc::kPipelineTmaWsPingpong: return wgmma_ws_forward_launch<T, 256, 128, 64, true, true>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fk

int flash_wgmma_forward(const fk::AttnArgs& a, cudaStream_t stream) {
  if (a.D == 256) {
    if (a.dtype == fk::kF16) return fk::wgmma_forward_d256<__half>(a, stream);
    if (a.dtype == fk::kBF16) return fk::wgmma_forward_d256<__nv_bfloat16>(a, stream);
    return cudaErrorInvalidValue;
  }
  return fk::dispatch_dtype_hdim</*fp32=*/false>(a, [&](auto t, auto d) {
    return fk::wgmma_forward_tiles<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
