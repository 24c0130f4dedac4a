// flash_decode on Hopper's warpgroup tensor cores (sm_90a): the mma option "wgmma" of flash_decode ("auto" takes it
// on a compute capability 9.0 GPU where a k/v head has more than 32 rows: H / Hkv x Nq > 32).
// Relative to flash_decode.cu's 64-row block (4 warps of 16 rows, each running mma.sync over every key of a tile),
// whose plan, softmax, end of block and merge it keeps (decode.cuh):
//  - each product of a tile is one warpgroup instruction per k16 step for 64 rows: S = Q K^T is wgmma m64n64k16
//    with Q and K from shared memory (K-major), O += P V is wgmma m64nDk16 with P from registers and V read
//    MN-major, as flash_wgmma's forward; the tensor cores read each K and V tile from shared memory once for the
//    64 rows, where four mma.sync warps each read it through ldmatrix;
//  - flash_decode_wgmma_kernel (one warpgroup, 64 rows): K/V in a cp.async ring of 3 stages (D = 128, two blocks an
//    SM) or 4 (D = 64), in the 128-byte swizzle the descriptors read; Q has a tile of its own in shared memory (the
//    A operand of S = Q K^T, as FlashAttention-3 and flash_wgmma keep it);
//  - flash_decode_ws_kernel (option rows 128, or warpgroups 2 at rows 64): a producer warp loads Q and each K/V
//    tile by TMA on full/empty mbarriers into a shared ring; two consumer warpgroups either split the rows (128
//    rows: each owns 64 rows of a [128][D] Q tile) or split the keys of one 64-row block (their partial (m, l, O)
//    merged in shared memory at the end). Each consumer issues S_t = Q K_t^T beside O += P_{t-1} V_{t-1}
//    (FlashAttention-3's intra-warpgroup overlap), so the ring keeps two tiles ahead.
// rows=auto takes 128 rows from 4096 keys on where a head has more than 64 rows (below that, twice the 64-row
// blocks fill the GPU better), and two warpgroups over the keys where a head has 33-64 rows (_ops._decode_plan).
// Limits: sm_90a only; forward only; D = 64 or 128; fp16 and bf16. Design notes: docs/kernels.md.
#include "decode.cuh"
#include "wgmma.cuh"
#include "wgmma_softmax.cuh"

namespace fk {

// Stages of the ring for blocks of WG warpgroups (64 WG rows): one warpgroup, 3 at D = 128 (two blocks an SM), 4 at
// D = 64 (three); two warpgroups, 4 at D = 128 (161 KB) and D = 64 (81 KB), one block an SM (registers). Six stages for
// two warpgroups at D = 128 (225 KB) were no faster: the bytes in flight were not what the block waited on.
template <int D, int WG>
__host__ __device__ constexpr int decode_wg_stages() {
  return D == 128 && WG == 1 ? codes::flash_decode_wgmma::kStagesD128 : codes::flash_decode_wgmma::kStagesD64;
}

// Dynamic shared memory: decode_smem's ring, the Q tile [64 WG / KS][D] (SW128) after it, and 1 KB of slack so
// that the SW128 tiles start on 1024-byte boundaries; two warpgroups add their mbarriers (Q's, and a full and an
// empty one a stage) after the Q tile (flash_kernels/_ops.py counts all of it when it plans the splits).
template <int D, int S, int WG, int KS = 1>
__host__ __device__ constexpr int decode_wg_smem() {
  return decode_smem<D, S>() + 64 * WG / KS * D * 2 + codes::flash_decode_wgmma::kSmemSlack + (WG == 2 ? 8 * (1 + 2 * S) : 0);
}

// Stages of the ring of a two-warpgroup block: 4 where they split the rows (KS = 1: the two read each tile, and
// hold two stages together), 6 where they split the keys (KS = 2: each holds two stages of its own; 6 keep two
// tiles in flight): 209 KB at D = 128 with the 64-row Q tile, 105 KB at D = 64.
template <int D, int KS>
__host__ __device__ constexpr int decode_ws_stages() { return KS == 1 ? decode_wg_stages<D, 2>() : 6; }

// Threads of a two-warpgroup block: the two consumer warpgroups (warps 0-7) and the producer warp (warp 8).
constexpr int kDecodeWsThreads = 2 * 128 + 32;

// One block of one warpgroup: rows [r0, r0 + 64) of key/value head blockIdx.y against the 64-key tiles of split
// blockIdx.z, as flash_decode_kernel<T, D, 4, S> (warp w owns rows 16 w.., every key of a tile), with the products
// on wgmma. Each product is waited for at once: the overlap comes from the SM's other blocks.
template <typename T, int D, int S>
__global__ void __launch_bounds__(128, D == 64 ? 3 : 2)
flash_decode_wgmma_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                          T* __restrict__ O, float* __restrict__ LSE, float* __restrict__ O_part,
                          float* __restrict__ LSE_part, DecodeShape sh, float scale_log2, int causal) {
  constexpr int M = 64, NT = 128, NB = kDecodeKeys / 8;
  constexpr int TILE = kDecodeKeys * D * 2;  // bytes of a K (or V) tile
  constexpr int AHEAD = S - 1;               // tiles loaded ahead of the one in use
  static_assert(decode_finish_smem<D, 4>() <= decode_wg_smem<D, S, 1>() - 1024,
                "the end of the block fits in the ring and the Q tile");
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sRing = (raw + 1023u) & ~1023u;    // [S][K tile, V tile], SW128
  const uint32_t sQ = sRing + S * 2 * TILE;         // [64][D], SW128: the A operand of every S = Q K^T
  uint8_t* const smem = smem_raw + (sRing - raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const long bkv = blockIdx.y, first = bkv * sh.R + long(blockIdx.x) * M;
  const int r0 = blockIdx.x * M, valid = min(M, sh.R - r0);
  const T* Kb = K + bkv * sh.Nk * D;
  const T* Vb = V + bkv * sh.Nk * D;
  const QueryRange qr(r0, r0 + valid - 1, sh.Nq);
  const int kv_len = causal ? min(sh.Nk, qr.hi + 1) : sh.Nk;
  const int t0 = blockIdx.z * sh.tiles_per_split;
  const int t1 = min((kv_len + kDecodeKeys - 1) / kDecodeKeys, t0 + sh.tiles_per_split);
  auto load_kv = [&](int stage, int t) {
    const uint32_t st = sRing + stage * 2 * TILE;
    load_tile_sw128<kDecodeKeys, D, NT>(st, Kb, t * kDecodeKeys, sh.Nk, tid);
    load_tile_sw128<kDecodeKeys, D, NT>(st + TILE, Vb, t * kDecodeKeys, sh.Nk, tid);
  };
  load_tile_sw128<M, D, NT>(sQ, Q + bkv * sh.R * D, r0, sh.R, tid);  // rows past R: zeros
  cp_async_commit();
#pragma unroll
  for (int s = 0; s < AHEAD; ++s) {  // one commit group per stage, even when empty: the waits count groups
    if (t0 + s < t1) load_kv(s, t0 + s);
    cp_async_commit();
  }
  const uint64_t dQ = desc_kmajor(sQ);
  float of[D / 2];  // the m64nD accumulator: of[4 j + 2 h + e] is flash_decode's o[j][2 h + e]; its own array (a
                    // reinterpret_cast view of o let the compiler drop the rescale at D = 64)
#pragma unroll
  for (int i = 0; i < D / 2; ++i) of[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  int qi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) qi[h] = (r0 + warp * 16 + (lane >> 2) + 8 * h) % sh.Nq;
  // tiles from tm on may hold keys past Nk or (causal) after a row's query: those get the mask
  const int tm = min(sh.Nk / kDecodeKeys, causal ? (qr.lo + 1) / kDecodeKeys : sh.Nk);
  for (int t = t0; t < t1; ++t) {
    const int u = t - t0;
    cp_async_wait<AHEAD - 1>();  // tile t has landed ...
    fence_proxy_async();         // ... and is visible to the wgmma's reads (the async proxy)
    __syncthreads();             // for every thread; every warp is done with the stage the next load goes to
    if (t + AHEAD < t1) load_kv((u + AHEAD) % S, t + AHEAD);
    cp_async_commit();
    const uint32_t cK = sRing + (u % S) * 2 * TILE;
    float sf[NB * 4];  // the m64n64 accumulator, then as decode_softmax's fragments s[j][2 h + e]
    fence_regs(sf);
    wgmma_fence();
    wgmma_kmajor_ss<T, kDecodeKeys, D, M, kDecodeKeys>(sf, dQ, desc_kmajor(cK));
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(sf);
    float s[NB][4];
#pragma unroll
    for (int i = 0; i < NB * 4; ++i) s[i / 4][i % 4] = sf[i];
    if (t >= tm) decode_mask<NB>(s, t * kDecodeKeys, sh.Nk, causal, qi);
    uint32_t pf[NB / 2][4];
    float alpha[2];
    if (decode_softmax<T, NB>(s, m, l, alpha, pf, scale_log2)) rescale_o(of, alpha);
    issue_pv<T, D, kDecodeKeys>(of, pf, desc_mnmajor(cK + TILE, kDecodeKeys * 128));
    wgmma_wait<0>();
    fence_regs(of);
  }
  cp_async_wait<0>();
  grid_dependents_launch();  // the combine kernel's blocks may now take their places (they wait for this grid's end)
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i / 4][i % 4] = of[i];
  decode_finish<T, D, 4, 4>(smem, o, m, l, scale_log2, O, LSE, O_part, LSE_part, sh, first, valid);
}

// One block of two warpgroups: rows [r0, r0 + M) of key/value head blockIdx.y against the 64-key tiles of split
// blockIdx.z. Warp 8 is the producer: one thread loads Q and then each K/V tile by TMA into a ring of S stages
// (mbarriers: a stage's full barrier completes on the copy engine's bytes, its empty barrier on one arrival from
// each consumer warp that reads the stage once it is done with it). KS = 1 (M = 128, the rows split): consumer
// warpgroup wg runs rows 64 wg.. of the Q tile, and both read each K/V tile. KS = 2 (M = 64, the keys split):
// both warpgroups run the tile's 64 rows, warpgroup wg the tiles t0 + wg, t0 + wg + 2, ..., and the end of the
// block adds their (m, l, O) as flash_decode.cu's warps that share rows do. Each warpgroup runs at its own pace
// (no block-wide barrier a tile) and issues S_t = Q K_t^T and O += P_prev V_prev back to back (FlashAttention-3's
// intra-warpgroup overlap), so that it holds two stages of the ring: with the keys split the two warpgroups hold
// four, and the ring has 6 (decode_ws_stages) to keep two tiles in flight.
template <typename T, int D, int S, int KS>
__global__ void __launch_bounds__(kDecodeWsThreads, 1)
flash_decode_ws_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                       const __grid_constant__ CUtensorMap tmV, T* __restrict__ O, float* __restrict__ LSE,
                       float* __restrict__ O_part, float* __restrict__ LSE_part, DecodeShape sh, float scale_log2,
                       int causal) {
  static_assert(KS == 1 || KS == 2, "two warpgroups split the rows (1) or the keys (2)");
  constexpr int M = 128 / KS, NB = kDecodeKeys / 8;
  constexpr int TILE = kDecodeKeys * D * 2;  // bytes of a K (or V) tile
  static_assert(decode_finish_smem<D, 8>() <= S * 2 * TILE, "the end of the block fits in the ring");
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sRing = (raw + 1023u) & ~1023u;    // [S][K tile, V tile], SW128
  const uint32_t sQ = sRing + S * 2 * TILE;         // [M][D], SW128: the A operand of every S = Q K^T
  const uint32_t full_q = sQ + M * D * 2, full = full_q + 8, empty = full + 8 * S;  // mbarriers
  uint8_t* const smem = smem_raw + (sRing - raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp / 4;
  const int bkv = blockIdx.y;
  const long first = long(bkv) * sh.R + long(blockIdx.x) * M;
  const int r0 = blockIdx.x * M, valid = min(M, sh.R - r0);
  const QueryRange qr(r0, r0 + valid - 1, sh.Nq);
  const int kv_len = causal ? min(sh.Nk, qr.hi + 1) : sh.Nk;
  const int t0 = blockIdx.z * sh.tiles_per_split;
  const int t1 = min((kv_len + kDecodeKeys - 1) / kDecodeKeys, t0 + sh.tiles_per_split);
  if (tid == 0) {
    mbar_init(full_q, 1);
#pragma unroll
    for (int s = 0; s < S; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, 8 / KS);  // the warps that read a tile
    }
    mbar_init_fence();
  }
  __syncthreads();
  if (warp == 8) {  // the producer: Q, then tile t into stage (t - t0) % S once the consumers gave it back
    if (lane == 0) {
      tma_prefetch_map(&tmK);
      tma_prefetch_map(&tmV);
      mbar_arrive_expect_tx(full_q, M * D * 2);
      tma_load_tile<D, M>(sQ, &tmQ, full_q, r0, bkv);  // rows past R: zeros (the map's rows are a head's R)
      for (int t = t0; t < t1; ++t) {
        const int u = t - t0, s = u % S;
        if (u >= S) mbar_wait(empty + 8 * s, (u / S - 1) & 1);  // tile t - S is done with
        mbar_arrive_expect_tx(full + 8 * s, 2 * TILE);
        const uint32_t st = sRing + s * 2 * TILE;
        tma_load_tile<D, kDecodeKeys>(st, &tmK, full + 8 * s, t * kDecodeKeys, bkv);  // keys past Nk: zeros
        tma_load_tile<D, kDecodeKeys>(st + TILE, &tmV, full + 8 * s, t * kDecodeKeys, bkv);
      }
    }
    return;  // its loads complete on the barriers the consumers wait for
  }
  auto tile_ready = [&](int t) {  // tile t has landed: returns its K; its V is TILE bytes further
    const int u = t - t0;
    mbar_wait(full + 8 * (u % S), (u / S) & 1);
    return sRing + (u % S) * 2 * TILE;
  };
  auto release = [&](int t) {  // this warp is done with tile t's stage
    __syncwarp();
    mbar_arrive_if(empty + 8 * ((t - t0) % S), lane == 0);
  };
  mbar_wait(full_q, 0);
  const int rw = KS == 1 ? warp : warp % 4;  // the warp's 16 rows of the block: 16 rw..
  const uint64_t dQ = desc_kmajor(sQ + (KS == 1 ? wg : 0) * 64 * 128);  // the warpgroup's 64 rows of the [M][D] tile
  auto issue_scores = [&](float (&sf)[NB * 4], uint32_t cK) {  // S = Q K^T for the warpgroup's rows, no wait
    fence_regs(sf);
    wgmma_fence();
    wgmma_kmajor_ss<T, kDecodeKeys, D, M, kDecodeKeys>(sf, dQ, desc_kmajor(cK));
    wgmma_commit();
  };
  float of[D / 2];  // the m64nD accumulator, as in flash_decode_wgmma_kernel
#pragma unroll
  for (int i = 0; i < D / 2; ++i) of[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  int qi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) qi[h] = (r0 + rw * 16 + (lane >> 2) + 8 * h) % sh.Nq;
  const int tm = min(sh.Nk / kDecodeKeys, causal ? (qr.lo + 1) / kDecodeKeys : sh.Nk);
  const int tf = t0 + (KS == 1 ? 0 : wg);  // the warpgroup's first tile
  if (tf < t1) {
    // P_prev (pf) and V_prev (at cV) of tile tp, the warpgroup's tile before, wait a step.
    uint32_t pf[NB / 2][4];
    uint32_t cV;
    int tp = tf;
    {
      const uint32_t cK = tile_ready(tf);
      float sf[NB * 4];
      issue_scores(sf, cK);
      wgmma_wait<0>();
      fence_regs(sf);
      float s[NB][4];
#pragma unroll
      for (int i = 0; i < NB * 4; ++i) s[i / 4][i % 4] = sf[i];
      if (tf >= tm) decode_mask<NB>(s, tf * kDecodeKeys, sh.Nk, causal, qi);
      float alpha[2];
      decode_softmax_scores<NB>(s, m, l, alpha, scale_log2);  // O = 0: no rescale
      decode_pack_p<T, NB>(s, pf);
      cV = cK + TILE;
    }
    // Between wgmma_wait<1> and wgmma_wait<0> no branch (ptxas would wait for every wgmma before it, as in
    // flash_wgmma_fwd.cu): the masked tiles run in a loop of their own, whose mask is unconditional.
    auto step = [&](int t, auto masked) {
      const uint32_t cK = tile_ready(t);
      float sf[NB * 4];
      issue_scores(sf, cK);                                                          // S_t
      issue_pv<T, D, kDecodeKeys>(of, pf, desc_mnmajor(cV, kDecodeKeys * 128));    // O += P_prev V_prev
      wgmma_wait<1>();                                                               // S_t done, P V in flight
      fence_regs(sf);
      float s[NB][4];
#pragma unroll
      for (int i = 0; i < NB * 4; ++i) s[i / 4][i % 4] = sf[i];
      if constexpr (decltype(masked)::value) decode_mask<NB>(s, t * kDecodeKeys, sh.Nk, causal, qi);
      float alpha[2];
      const bool grew = decode_softmax_scores<NB>(s, m, l, alpha, scale_log2);
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) fence_regs(s[nb]);  // computed here, while O += P V runs
      fence_regs(l);
      fence_regs(alpha);
      wgmma_wait<0>();
      fence_regs(of);
#pragma unroll
      for (int kk = 0; kk < NB / 2; ++kk) fence_regs(pf[kk]);  // P_prev is read until here
      release(tp);                                             // V_prev too
      if (grew) rescale_o(of, alpha);
      decode_pack_p<T, NB>(s, pf);
      cV = cK + TILE;
      tp = t;
    };
    int t = tf + KS;
    for (; t < min(t1, tm); t += KS) step(t, std::false_type{});
    for (; t < t1; t += KS) step(t, std::true_type{});
    issue_pv<T, D, kDecodeKeys>(of, pf, desc_mnmajor(cV, kDecodeKeys * 128));
    wgmma_wait<0>();
    fence_regs(of);
  }
  grid_dependents_launch();  // the combine kernel's blocks may now take their places (they wait for this grid's end)
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i / 4][i % 4] = of[i];
  // KS = 2: warps w and w + 4 share rows 16 w..: slots 2 w and 2 w + 1 at the end of the block (decode_finish)
  decode_finish<T, D, M / 16, 8>(smem, o, m, l, scale_log2, O, LSE, O_part, LSE_part, sh, first, valid,
                                 KS == 1 ? warp : (warp % 4) * 2 + warp / 4);
}

// A two-warpgroup block's launch (option codes 3 and 4): Q as [B Hkv][R][D] (a k/v head's rows are consecutive),
// K and V as [B Hkv][Nk][D], each as a TMA tensor map.
template <typename T, int D, int KS>
cudaError_t decode_ws_launch(const AttnArgs& a, int splits, cudaStream_t stream) {
  constexpr int S = decode_ws_stages<D, KS>(), smem = decode_wg_smem<D, S, 2, KS>(), M = 128 / KS;
  auto kernel = flash_decode_ws_kernel<T, D, S, KS>;
  CUtensorMap maps[3];
  cudaError_t err = make_tile_map<T>(&maps[0], a.q, a.B * a.Hkv, (a.H / a.Hkv) * a.Nq, D, M);
  if (err == cudaSuccess) err = make_tile_map<T>(&maps[1], a.k, a.B * a.Hkv, a.Nk, D, kDecodeKeys);
  if (err == cudaSuccess) err = make_tile_map<T>(&maps[2], a.v, a.B * a.Hkv, a.Nk, D, kDecodeKeys);
  if (err == cudaSuccess) err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  return decode_split_run<T, D, M>(a, splits, stream, [&](dim3 grid, const DecodeShape& sh) {
    kernel<<<grid, kDecodeWsThreads, smem, stream>>>(maps[0], maps[1], maps[2], static_cast<T*>(a.o), a.lse,
                                                     a.ws[0], a.ws[1], sh, a.scale * kLog2e, a.causal);
    return cudaGetLastError();
  });
}

// Option code as flash_decode's (flash_kernels/variants.py, option_codes.h): rows per block 64 (one warpgroup), 128
// (two that split the rows, and the producer warp) or 64 (two that split the keys, and the producer warp), bits 8..
// the splits.
template <typename T, int D>
cudaError_t decode_wgmma_rows(const AttnArgs& a, cudaStream_t stream) {
  namespace oc = codes::flash_decode_wgmma;
  const int splits = oc::splits(a.option);
  switch (oc::block(a.option)) {
    case oc::kBlockRows64: {
      constexpr int S = decode_wg_stages<D, 1>();
      return decode_split_launch<T, D, 64>(flash_decode_wgmma_kernel<T, D, S>, 128, decode_wg_smem<D, S, 1>(), a,
                                           splits, stream);
    }
    case oc::kBlockRows128: return decode_ws_launch<T, D, 1>(a, splits, stream);
    case oc::kBlockRows64SplitKeys: return decode_ws_launch<T, D, 2>(a, splits, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fk

int flash_decode_wgmma_forward(const fk::AttnArgs& a, cudaStream_t stream) {
  return fk::dispatch_dtype_hdim</*fp32=*/false>(a, [&](auto t, auto d) {
    return fk::decode_wgmma_rows<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
