// flash_decode forward: flash-decoding against a KV cache (few queries, many cached keys, grouped-query heads).
// Relative to flash_mma's forward, whose tile arithmetic it keeps (mma.sync m16n8k16 with fp32 accumulators,
// ldmatrix from XOR-swizzled tiles, the online softmax in raw score units, P in registers):
//  - rows packed per key/value head: the G = H / Hkv query heads that share a k/v head and their Nq queries are
//    the R = G * Nq rows of one problem (row g * Nq + i is query i of head g; already consecutive in q, o, lse),
//    so a block reads each K/V tile once for up to 64 such rows;
//  - the keys split over blocks (grid z, option `splits`): each split writes its rows' O (fp32, normalised by its
//    own sum) and LSE, and decode.cuh's merge kernel adds the splits' O weighted by exp(LSE_s - LSE); it is
//    launched as a programmatic dependent launch, so its launch overlaps the split kernel's tail (sm_90);
//  - the 4 warps of a block split each tile's rows and keys as the rows need (option `rows`: 16 rows = 1 x 4 warps
//    of 16 keys, 32 rows = 2 x 2, 64 rows = 4 warps of 16 rows x all 64 keys); warps that shared rows merge their
//    (m, l, O) through shared memory at the end;
//  - K and V of a 64-key tile travel together in a cp.async ring with one barrier per tile: 3 stages at D = 128
//    (two blocks an SM), 2 stages (three blocks an SM, Q carried in the ring's last stage) where a k/v head has
//    more than 64 rows, 4 at D = 64;
//  - a split's partials are stored in 16-byte chunks, so a warp's store writes whole 32-byte sectors.
// The plan (rows per block, splits, instruction set) is chosen on the host: flash_kernels/_ops.py, _decode_plan.
// On Hopper, heads of more than 32 rows run on warpgroup instructions instead (option mma "wgmma",
// flash_decode_wgmma.cu); this file's kernels and decode.cuh's shared parts serve both.
// Causal masking is top-left (query i sees keys j <= i): a causal row sees the first i + 1 keys only, so only
// those min(Nk, Nq) keys are split and read. Limits: forward only; D = 64 or 128; fp16 and bf16.
#include "decode.cuh"

namespace fk {

// C += A B for one warp, the loop of both of its products: A is K16 k16 steps of 16 rows (a(k): the A
// fragment of step k), B comes from a shared tile through load_b(b, n, k) as the two n8 tiles of columns
// 16 n.. of step k; C holds 2 N16 n8 tiles.
template <typename T, int K16, int N16, typename AFrag, typename LoadB>
__device__ __forceinline__ void warp_mma(float (&c)[2 * N16][4], AFrag&& a, LoadB&& load_b) {
#pragma unroll
  for (int k = 0; k < K16; ++k) {
#pragma unroll
    for (int n = 0; n < N16; ++n) {
      uint32_t b[4];
      load_b(b, n, k);
      mma16816<T>(c[2 * n], a(k), b[0], b[1]);
      mma16816<T>(c[2 * n + 1], a(k), b[2], b[3]);
    }
  }
}

// S = Q K^T for one warp: its 16 rows (Q fragments qf) against keys k0.. k0 + 8 NB of the K tile.
template <typename T, int D, int NB>
__device__ __forceinline__ void decode_scores(float (&s)[NB][4], const uint32_t (&qf)[D / 16][4], uint32_t cK,
                                              int k0) {
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
  warp_mma<T, D / 16, NB / 2>(
      s, [&](int kd) -> const uint32_t(&)[4] { return qf[kd]; },
      [&](uint32_t(&b)[4], int n, int kd) { ldsm_b<D>(b, cK, k0 + n * 16, kd); });
}

// O = alpha O + P V for one warp: P (16 rows x 16 KK keys, A fragments) against keys k0.. of the V tile.
template <typename T, int D, int KK>
__device__ __forceinline__ void decode_pv(float (&o)[D / 8][4], const uint32_t (&pf)[KK][4], const float (&alpha)[2],
                                          bool rescale, uint32_t cV, int k0) {
  // rescale only when some row's max grew: after the first tiles it rarely does, and it costs D / 2 FMULs
  // per thread against 16 KK / 4 exponentials
  if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
      o[nd][0] *= alpha[0];
      o[nd][1] *= alpha[0];
      o[nd][2] *= alpha[1];
      o[nd][3] *= alpha[1];
    }
  }
  warp_mma<T, KK, D / 16>(
      o, [&](int kk) -> const uint32_t(&)[4] { return pf[kk]; },
      [&](uint32_t(&b)[4], int dp, int kk) { ldsm_bt<D>(b, cV, k0 + kk * 16, dp); });
}

// One block: rows [r0, r0 + 16 WR) of key/value head blockIdx.y (b * Hkv + kv head) against the 64-key
// tiles of split blockIdx.z. Warp w owns rows 16 (w / WK).. and keys 64 / WK (w % WK).. of every tile.
// O_part, LSE_part: the splits' workspaces ([splits][B H Nq][D], [splits][B H Nq]; unused with one split).
template <typename T, int D, int WR, int S>
__global__ void __launch_bounds__(kDecodeThreads, (D == 128 && S == 2) || (D == 64 && WR == 4) ? 3 : 1)
flash_decode_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V, T* __restrict__ O,
                    float* __restrict__ LSE, float* __restrict__ O_part, float* __restrict__ LSE_part,
                    DecodeShape sh, float scale_log2, int causal) {
  constexpr int WK = 4 / WR, M = kDecodeRowsPerWarp * WR, KW = kDecodeKeys / WK;
  constexpr int TILE = kDecodeKeys * D * 2;  // bytes of a K (or V) tile
  static_assert(M * D * 2 <= TILE, "the Q tile fits in a K tile");
  static_assert(decode_finish_smem<D, 4>() <= decode_smem<D, S>(), "the end of the block fits in the ring");
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sRing = smem_u32(smem), sQ = sRing + (S - 1) * 2 * TILE;  // Q: the last stage, until tile 0
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wr = warp / WK, wk = warp % WK;
  const long bkv = blockIdx.y, first = bkv * sh.R + long(blockIdx.x) * M;  // first row of the block in [B H Nq]
  const int r0 = blockIdx.x * M, valid = min(M, sh.R - r0);
  const T* Kb = K + bkv * sh.Nk * D;
  const T* Vb = V + bkv * sh.Nk * D;
  const QueryRange qr(r0, r0 + valid - 1, sh.Nq);
  const int kv_len = causal ? min(sh.Nk, qr.hi + 1) : sh.Nk;  // keys any row of the block sees
  const int t0 = blockIdx.z * sh.tiles_per_split;
  const int t1 = min((kv_len + kDecodeKeys - 1) / kDecodeKeys, t0 + sh.tiles_per_split);
  auto load_kv = [&](int stage, int t) {
    const uint32_t st = sRing + stage * 2 * TILE;
    load_tile_async<kDecodeKeys, D, kDecodeThreads>(st, Kb, t * kDecodeKeys, sh.Nk, tid);
    load_tile_async<kDecodeKeys, D, kDecodeThreads>(st + TILE, Vb, t * kDecodeKeys, sh.Nk, tid);
  };
  load_tile_async<M, D, kDecodeThreads>(sQ, Q + bkv * sh.R * D, r0, sh.R, tid);
  cp_async_commit();
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {  // one commit group per stage, even when empty: the waits count groups
    if (t0 + s < t1) load_kv(s, t0 + s);
    cp_async_commit();
  }
  uint32_t qf[D / 16][4];
  cp_async_wait<S - 1>();  // Q has landed (the K/V stages may not have)
  __syncthreads();
#pragma unroll
  for (int kd = 0; kd < D / 16; ++kd) ldsm_a<D>(qf[kd], sQ, wr * 16, kd);  // before tile 0's barrier: stage S - 1
                                                                            // is written after it
  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  int qi[2];  // query index of this thread's two rows (g, g + 8)
#pragma unroll
  for (int h = 0; h < 2; ++h) qi[h] = (r0 + wr * 16 + (lane >> 2) + 8 * h) % sh.Nq;
  for (int t = t0; t < t1; ++t) {
    const int u = t - t0;
    cp_async_wait<S - 2>();  // tile t has landed
    __syncthreads();         // ... for every thread, and every warp is done with tile t - 1's stage (and with Q)
    if (t + S - 1 < t1) load_kv((u + S - 1) % S, t + S - 1);
    cp_async_commit();
    const uint32_t cK = sRing + (u % S) * 2 * TILE;
    float s[KW / 8][4];
    decode_scores<T, D, KW / 8>(s, qf, cK, wk * KW);
    const int j0 = t * kDecodeKeys + wk * KW;
    if (j0 + KW > sh.Nk || (causal && j0 + KW - 1 > qr.lo)) decode_mask<KW / 8>(s, j0, sh.Nk, causal, qi);
    uint32_t pf[KW / 16][4];
    float alpha[2];
    const bool grew = decode_softmax<T, KW / 8>(s, m, l, alpha, pf, scale_log2);
    decode_pv<T, D, KW / 16>(o, pf, alpha, grew, cK + TILE, wk * KW);
  }
  cp_async_wait<0>();
  grid_dependents_launch();  // the combine kernel's blocks may now take their places (they wait for this grid's end)
  decode_finish<T, D, WR>(smem, o, m, l, scale_log2, O, LSE, O_part, LSE_part, sh, first, valid);
}

// The launch: `splits` key splits (decode_shape), then the merge where there are several.
template <typename T, int D, int WR, int S>
cudaError_t decode_launch(const AttnArgs& a, int splits, cudaStream_t stream) {
  return decode_split_launch<T, D, kDecodeRowsPerWarp * WR>(flash_decode_kernel<T, D, WR, S>, kDecodeThreads,
                                                            decode_smem<D, S>(), a, splits, stream);
}

// Option code, as flash_kernels/variants.py lays it out (option_codes.h): bits 0..7 the rows per block (16, 32,
// 64), bits 8.. the number of key splits.
template <typename T, int D>
cudaError_t decode_rows(const AttnArgs& a, cudaStream_t stream) {
  namespace oc = codes::flash_decode;
  const int splits = oc::splits(a.option);
  switch (oc::block(a.option)) {
    case oc::kBlockRows16: return decode_launch<T, D, 1, decode_stages<D>()>(a, splits, stream);
    case oc::kBlockRows32: return decode_launch<T, D, 2, decode_stages<D>()>(a, splits, stream);
    case oc::kBlockRows64:
      if constexpr (D == 128) {
        if ((a.H / a.Hkv) * a.Nq > 64) return decode_launch<T, D, 4, oc::kStagesD128ManyRows>(a, splits, stream);
      }
      return decode_launch<T, D, 4, decode_stages<D>()>(a, splits, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fk

int flash_decode_forward(const fk::AttnArgs& a, cudaStream_t stream) {
  return fk::dispatch_dtype_hdim</*fp32=*/false>(a, [&](auto t, auto d) {
    return fk::decode_rows<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
