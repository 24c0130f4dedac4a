// flash_decode forward: flash-decoding against a KV cache (few queries, many cached keys, grouped-query heads).
// Relative to flash_mma's forward, whose tile arithmetic it keeps (mma.sync m16n8k16 with fp32 accumulators,
// ldmatrix from XOR-swizzled tiles, the online softmax in raw score units, P in registers):
//  - rows packed per key/value head: the G = H / Hkv query heads that share a k/v head and their Nq queries
//    are the R = G * Nq rows of one problem (row g * Nq + i is query i of head g; in q, o and lse these rows
//    are already consecutive), so one block reads a K/V tile once for up to 64 such rows, where flash_mma
//    reads it once per query head into a 128-row block that is almost all padding when Nq is small;
//  - the keys split over blocks (grid z, option `splits`): each split writes its rows' O (fp32, normalized
//    by its own sum) and LSE, and flash_decode_combine_kernel adds the splits' O weighted by exp(LSE_s - LSE),
//    so that the B * Hkv problems of a decode step still give every SM blocks to run;
//  - the 4 warps of a block split each tile's rows and keys as the rows need (option `rows`: 16 rows = 1 x 4
//    warps of 16 keys, 32 rows = 2 x 2, 64 rows = 4 warps of 16 rows x all 64 keys); warps that shared rows
//    merge their (m, l, O) through shared memory at the end;
//  - K and V of a 64-key tile travel together in a cp.async ring of 3 stages (D = 128: 32 KB each, two
//    blocks per SM; 2 stages and three blocks for heads of more than 64 rows) or 4 (D = 64: 16 KB each, three
//    per SM): one to three tiles in flight per block while one is used, with one barrier per tile (flash_mma:
//    double buffering, two barriers per tile).
// Bought (H200, 7a78894, `python -m flash_kernels.bench --suite decode --passes forward`, B=8 H=32 D=128, in one
// run with SDPA's backends; CSV profiles/_logs/nvidia-h200/bench_decode_7a78894.csv.xz): with 32 KV heads 4.0-4.6 TB/s
// of compulsory K + V bytes at Nk >= 4k (92-95 % of HBM at Nk >= 16k), 0.94-1.32x the best SDPA backend; with 8 KV
// heads and Nq <= 4 3.9-4.4 TB/s at Nk >= 16k (80-91 %), 0.99-3.1x, where flash_mma moved 0.6 TB/s (bench at
// 1ebba72). Missed: 64 rows per k/v head (Hkv = 8 with Nq = 16: 3.1 TB/s, 64 %), and Hkv = 1, where a head's
// 32 Nq rows take several 64-row blocks that each read K/V. With the kernels and plan since (the H200 bench at
// c840561, README; every implementation of a configuration timed round-robin, fp16 and bf16): 32 KV heads 4.62-4.70
// TB/s at Nk >= 16k (96-98 %), 1.00-1.08x the best SDPA backend; 8 KV heads, Nq <= 4 4.34-4.61 TB/s (90-96 %),
// Nq = 16 3.2-3.5 (67-74 %); 1 KV head, Nq = 1 2.8 / 4.0 TB/s at 16k / 64k (59 / 83 %), 1.18-1.34x; 71 of 72
// shapes at >= 1.0x the best SDPA backend (fp16 Nq1-Nk65536-Hkv32 level at 0.9996x, both at 98 % of HBM).
// Since 24d2484 / f7a94a6 a k/v head of 33-128 rows runs flash_decode_wgmma.cu's blocks of two warpgroups on Hopper
// (8 KV heads, Nq = 16: 3.85-4.07 TB/s of K + V, 80-85 % of HBM, in the H200 bench at f7a94a6; its header).
// On an H100 80GB HBM3 (7cebd20; `python -m flash_kernels.bench --suite decode --passes forward --dtypes float16
// --variants flash_decode --refs sdpa_flash,sdpa_cudnn`; profiles/_logs/nvidia-h100-80gb-hbm3/decode_8_warps_tried/):
// with 8 KV heads 2.67-3.03 TB/s at Nk >= 16k (80-90 % of 3.35 TB/s; Nq = 16 included), 1.00-2.18x the best
// SDPA backend there; with 1 KV head 2.29 TB/s at Nq = 1, Nk = 64k (68 %; 0.92-0.99x the best SDPA backend at
// Nq = 1, Nk >= 16k); Nq = 16 with 1 KV head is compute-bound (512 FLOP per byte: 294 TFLOP/s). Tried and
// reverted: 8-warp blocks (32, 64 or 128 rows): no faster (204-212 registers a thread at D = 128 leave one such
// block per SM, the 8 warps two 4-warp blocks already give); 128 rows 9 % slower at Hkv = 1, Nq = 16.
// The plan (rows per block, splits; flash_kernels/_ops.py: _decode_plan) was re-tuned on the H100 at 1687b8b with
// scripts/decode_plan_sweep.py, every option interleaved on the same inputs (log profiles/_logs/nvidia-h100-80gb-hbm3/
// decode_plan_sweep_interleaved.log.xz): one block per SM rather than as many as shared memory holds while a k/v head
// has at most 64 rows, at least 4 tiles a split, two 16-row blocks for 17-32 rows. In the bench capture at 1687b8b
// (the bench's timer now keeps the host's launch path out of short calls): 3.04-3.11 TB/s with 32 KV heads and
// 2.72-3.07 TB/s (81-92 % of HBM) with 8 at Nk >= 16k; >= 1.0x the best SDPA backend in 35 of 36 fp16 rows (the
// miss: Nq1-Nk1024-Hkv1, 13.6 us against cuDNN's 12.8) and 31 of 36 bf16 rows (all at Nk = 1024, 0.91-0.99x).
// The combine step (5867a63 -> next): the merge kernel read a split's LSE, then its O, split after split (two
// dependent round trips a split, 16 splits a row at Hkv = 1), and started only after the split kernel's launch
// gap. It now reads a row's LSEs in one round trip (lane s: split s) and 8 O rows at a time, and is launched as a
// programmatic dependent launch of the split kernel (sm_90: its launch overlaps the split kernel's tail). Bought
// (H100 80GB HBM3, same-node A/B, two rounds each, fp16, B=8 H=32 D=128, scripts/flush_check.py --modes read; log
// profiles/_logs/nvidia-h100-80gb-hbm3/decode_combine_pdl_ab.log.xz), one KV head, Nq = 1: Nk = 1024 12.7 -> 10.1 us
// (cuDNN 12.1-12.2), 4096 17.1 -> 14.0, 16384 35.6 -> 31.1-31.4 (2.15 TB/s, 64 % of HBM), 65536 99.8-101.3 ->
// 95.5-95.7 (2.81 TB/s, 84 %); Nq = 4, Nk = 16384: 47.5 -> 43.7-44.2; 8 KV heads, Nk = 1024: 20.0-20.2 -> 17.9-18.1.
// Lost: 1.2 % at one KV head, Nq = 16, Nk = 16384 (compute-bound: 129.3-129.5 -> 130.9-131.3 us).
// The merge, second step (fd40890 -> abb1c58): 2 or 4 warps a row where a row has 8 or more splits (its splits
// shared among its warps, their sums added in shared memory: at one KV head 64 blocks of four one-row warps had
// left one warp per scheduler). Bought (H100 80GB HBM3, same-node A/B, two rounds, fp16, B=8 H=32 D=128; log
// profiles/_logs/nvidia-h100-80gb-hbm3/decode_merge_warps_ab.log.xz): one KV head, Nq = 1, Nk = 16384 30.9-31.0 ->
// 30.3-30.5 us, 65536 96.5-97.9 -> 95.7-96.4; Nq = 4, Nk = 16384 44.2 -> 43.5-43.6. Lost 1.1-1.2 % at one KV head,
// Nq = 16, Nk = 16384 (129.5 -> 130.9-131.1 us; 4 splits: one warp a row, the same merge code), as the step
// before did there; an A/A run of one tree against itself differed by 0.4 % at that shape, and the next A/B
// (abb1c58 -> 5775417) read it 0.5 % the other way. Then (abb1c58 -> 5775417) a row's first O loads go out beside
// its LSE loads: no gain that the A/B resolves (Nq = 1, Nk = 16384 30.8-30.9 against 30.9-31.0 us; Nq = 4 44.1-44.4
// against 43.8; log decode_merge_loads_ab_and_aa.log.xz, with the A/A run).
// Tried and reverted (da92539): the splits of a row block launched as one thread block cluster that merges
// through distributed shared memory, with no partials in global memory and no second kernel. About 1 us slower
// where it ran (one KV head, Nq = 1: Nk = 1024 10.8 against 9.8-9.9 us, 4096 15.9 against 15.0; log
// decode_cluster_merge_ab.log.xz): the merge kernel, launched dependent, already overlaps the split kernel's tail. At
// Nk = 16384 (16 splits) the 16-block cluster may not have fitted, in which case that launch fell back to the
// merge kernel and the A/B compared the same code there.
// Three blocks an SM where the tensor work holds the call (5c1badc -> f295b00): a k/v head of more than 64 rows
// (one KV head at Nq = 4 and 16) ran two 64-row blocks an SM, held there by shared memory (a 16 KB Q tile beside a
// 3-stage ring of 96 KB); under Nsight Compute (one KV head, Nq = 4, Nk = 16384; log profiles/_logs/
// nvidia-h100-80gb-hbm3/ncu_decode_hkv1_nq4_nq16.log.xz) its warps were 1.94 a scheduler, 0.39 of them eligible, the
// tensor pipe 34 % busy and DRAM 54 %. Q now travels in the ring's last stage, and those blocks keep 2 stages
// (decode_stages): 64 KB, three an SM. Bought (H100 80GB HBM3, same-node A/B against 5c1badc, two rounds, fp16,
// B=8 H=32 D=128; log decode_ring_two_stages_ab.log.xz): one KV head, Nq = 4, Nk = 4096 23.6 -> 22.6 us, 16384
// 44.4-44.6 -> 42.1-42.6, 65536 133.1-134.1 -> 123.9 (2.17 TB/s); Nq = 16, Nk = 16384 130.0-130.4 -> 118.7; 8 KV
// heads, Nq = 16, Nk = 16384 183.2-184.2 -> 181.2-181.8; the other rows moved by at most 0.6 us or 0.2 %. Two
// stages for every 64-row block lost 3 % at 8 KV heads, Nq = 16 (64 rows a head: one streaming block per SM),
// which keeps 3.
// Where one KV head at Nq = 1 stands (f295b00): in this session's A/B runs 30.2-31.0 us at Nk = 16384 (67 MB of
// K + V: 2.2 TB/s, 65 % of HBM) and 95.4-97.9 at 65536 (2.8 TB/s, 84 %). The difference of the two, 201 MB in
// about 65 us, streams at 3.1 TB/s (92 %); what keeps Nk = 16384 at 65 % is about 9 us a call that does not grow
// with the keys: under Nsight Compute (the f295b00 decode capture) the split kernel's SMs are active 84 % of its
// elapsed cycles (28.5 us; its blocks start and end over a few us), and Nsight Systems shows the merge ending
// 2.2-2.3 us after the split kernel.
// A split's partials in whole sectors (2b17324 -> this step; decode.cuh: decode_store_chunks). Nsight Systems (the
// 59ee3f7 decode capture) put the merge kernel's start, which follows the last split block's grid_dependents_launch
// at the end of its loop, 5.7 us before the end of the two-warpgroup split kernel at one KV head, Nq = 4, 16k keys
// (2.8-3.4 us at D = 64; 1.3-1.5 us for the 16-row mma.sync blocks at Nq = 1): the end of a 128-row block, which
// writes 64 KB of fp32 partials, took about as long as 16 tiles' worth of loads would make a few. Each thread wrote
// an 8-float chunk as two float4 stores, so each store instruction of a warp wrote half of every 32-byte sector it
// touched. A chunk is now 16 bytes of the output (4 fp32, or 8 values of T for the final O), so that a warp's store
// writes 512 contiguous bytes. Bought (H100 80GB HBM3, same-node A/B, two rounds, fp16, B=8 H=32 D=128, L2 flushed
// by reading; log profiles/_logs/nvidia-h100-80gb-hbm3/decode_full_sector_stores_ab.log), one KV head: Nq = 4,
// Nk = 4096 23.0-23.2 -> 20.0-20.3 us, 16384 38.1 -> 35.4-35.6, 65536 101.4-101.5 -> 100.1 (2.68 TB/s, 80.0 % of
// HBM); Nq = 16, Nk = 16384 70.7-72.2 -> 69.1-69.2; Nq = 1, Nk = 16384 30.8-31.1 -> 30.0-30.4. Nq = 1 at 64k keys and
// the 8-KV-head rows did not move (within 0.4 us). Registers: 156 (D = 128) and 116 (D = 64) for the two-warpgroup
// kernel (118 before at D = 64); the 16-row mma.sync kernel at D = 128 165 -> 170 (its shared memory keeps it at
// two blocks an SM either way).
// On Hopper the same blocks run on warpgroup instructions (option mma "wgmma", flash_decode_wgmma.cu; "auto" where a
// k/v head has more than 64 rows); this file's kernels and decode.cuh's shared parts serve both.
// Causal masking is top-left, as everywhere here (query i sees keys j <= i): a causal decode row sees the
// first i + 1 keys only, so only those min(Nk, Nq) keys are split and read.
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

// Option code, as flash_kernels/_ops.py writes it: bits 0..7 the rows per block (0 = 16, 1 = 32, 2 = 64),
// bits 8.. the number of key splits.
template <typename T, int D>
cudaError_t decode_rows(const AttnArgs& a, cudaStream_t stream) {
  const int splits = a.option >> 8;
  switch (a.option & 0xff) {
    case 0: return decode_launch<T, D, 1, decode_stages<D>()>(a, splits, stream);
    case 1: return decode_launch<T, D, 2, decode_stages<D>()>(a, splits, stream);
    case 2:
      if constexpr (D == 128) {
        if ((a.H / a.Hkv) * a.Nq > 64) return decode_launch<T, D, 4, 2>(a, splits, stream);
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
