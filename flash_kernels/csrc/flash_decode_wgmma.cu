// flash_decode on Hopper's warpgroup tensor cores (sm_90a): the mma option "wgmma" of flash_decode ("auto" takes it
// on a compute capability 9.0 GPU where a k/v head has more than 64 rows: H / Hkv x Nq > 64).
// Relative to flash_decode.cu's 64-row block (4 warps of 16 rows, each running mma.sync over every key of a tile),
// whose plan, softmax, end of block and merge it keeps (decode.cuh):
//  - each product of a tile is one warpgroup instruction per k16 step for the block's 64 rows: S = Q K^T is
//    wgmma m64n64k16 with Q and K from shared memory (K-major), O += P V is wgmma m64nDk16 with P from registers
//    and V read MN-major (the transpose bit), as flash_wgmma's forward;
//  - so the tensor cores read each K and V tile from shared memory once for the 64 rows, where the four mma.sync
//    warps each read the whole tile through ldmatrix (4x the shared-memory reads, and 2 ldmatrix per 2 mma.sync
//    of issue slots): what held the mma.sync kernel where a k/v head has many rows (one KV head at Nq = 4: the
//    tensor pipe 34 % busy, 0.39 eligible warps a scheduler under Nsight Compute);
//  - K/V travel in a cp.async ring of 3 stages (D = 128; 113 KB with Q: two blocks an SM) or 4 (D = 64; 73 KB:
//    three), stored in the 128-byte swizzle the wgmma descriptors read (wgmma.cuh: load_tile_sw128) and fenced into
//    the async proxy before the tile's barrier; each product is waited for at once (the overlap comes from the
//    other blocks of the SM).
// Q has a tile of its own in shared memory (the A operand of S = Q K^T), not registers: with Q as register
// fragments loaded once before the loop (an RS wgmma, Q in the ring's last stage as flash_decode does, which kept
// three blocks an SM at D = 128: 64 KB of ring + 1 KB of slack each), ptxas 13.0 (V13.0.88) gave the D = 64 kernel's
// P fragments the registers
// of Q inside the loop (SASS: HGMMA.64x64x16 R56, R100, gdesc.tnspB after F2FP.F16.F32.PACK_AB R100, then the next
// tile's HGMMA R24, R100 reads P as Q), so every tile after a block's first was scored against the wrong Q
// (rel. L2 error 0.14-0.26; the LSE wrong; D = 128 compiled correctly; the debug runs and the SASS are in
// profiles/_logs/nvidia-h100-80gb-hbm3/decode_wgmma_register_q_miscompile.log). The Q tile in shared memory is what
// FlashAttention-3 and flash_wgmma do, and needs no such luck. That first version, at D = 128 only, is in the A/B
// log too (another node): it was as fast at Nq = 4 and faster at one KV head, Nq = 16, 64k keys (398.1 against
// mma.sync's 422.5 us), where the version here loses 0.9 %.
// Bought (H100 80GB HBM3, torch 2.11.0+cu130, fp16, B=8 H=32 D=128, L2 flushed (read), two interleaved rounds,
// same node; `python3 scripts/flush_check.py --modes read --rounds 2 --impls
// flash_decode:mma=mma.sync,flash_decode:mma=wgmma --configs ...`; log profiles/_logs/nvidia-h100-80gb-hbm3/
// decode_wgmma_ab.log.xz), mma.sync -> wgmma, one KV head: Nq = 4: Nk = 4096 22.9 -> 21.0 us, 16384 42.8 -> 39.2
// (1.71 TB/s), 65536 126.3 -> 120.4 (2.23 TB/s); Nq = 16: Nk = 1024 21.7 -> 19.2, 16384 120.1 -> 115.7, 65536
// 423.6 -> 427.4 (the one loss, 0.9 %); forced where auto keeps mma.sync: 8 KV heads, Nq = 16 (64 rows), Nk = 16384
// 190.9 -> 186.6; one KV head, Nq = 1 (32 rows), 32.0 -> 31.3. The one-KV-head rows stay far from HBM's 3.35 TB/s:
// a k/v head's 128 (Nq = 4) or 512 (Nq = 16) rows are 2 or 8 blocks that each stream the head's K/V through L2.
// Under Nsight Compute (the decode capture at 43d1638 against f295b00's, one KV head, Nq = 4, Nk = 16384): at D = 128
// the split kernel's shared-memory wavefronts 4.81 M -> 2.15 M, its time 36.9 -> 34.1 us (16 splits, not 24: two
// 113 KB blocks an SM), the merge 7.9 -> 6.8 us; at D = 64, which no timed A/B covered, 22.4 -> 22.0 us (fp16) and
// 22.9 -> 21.9 (bf16).
// Two warpgroups a block (option rows 128, "auto" where a k/v head has more than 64 rows; 43d1638 -> this step):
//  - a block holds 128 rows, warpgroup wg rows 64 wg.. of a [128][D] Q tile, and both read each K/V tile of the
//    ring, so that a k/v head of 128 rows (one KV head at Nq = 4) streams its K/V once, not in two 64-row blocks;
//  - 4 stages: 161 KB at D = 128 (one block an SM, 8 warps), 81 KB at D = 64 (two; one since the producer warp);
//  - FlashAttention-3's intra-warpgroup overlap: S_t = Q K_t^T and O += P_{t-1} V_{t-1} are
//    issued back to back, then the softmax of S_t; the ring keeps S - 2 tiles ahead, since tile t - 1's V is read
//    beside tile t. ptxas 13.0 moves the wait for P V up to the fourth MUFU.EX2 of the softmax (SASS: WARPGROUP.
//    DEPBAR.LE gsb0, 0x0 after 4 of 32), so what it buys is two products in flight, not the softmax hidden
//    behind them (flash_wgmma_fwd.cu's overlap kernels: 0 to 49 of their MUFU.EX2 between the waits, by instantiation;
//    scripts/sass_overlap.py, log profiles/_logs/nvidia-h100-80gb-hbm3/sass_overlap_92bb987.log.xz).
//    Tried in compiles only (no GPU run): without the fences after the softmax, the same 4 MUFU; with P packed
//    before the wait into fresh registers (copied into pf after it), ptxas serializes every wgmma of the loop
//    (WARPGROUP.DEPBAR.LE gsb0, 0x0 after each HGMMA), which is worse.
// Bought (H100 80GB HBM3, torch 2.11.0+cu130, fp16, B=8 H=32 D=128, L2 flushed (read), two interleaved rounds, same
// node; log profiles/_logs/nvidia-h100-80gb-hbm3/decode_wgmma_two_warpgroups_ab.log.xz), 64-row blocks -> 128 rows
// with the overlap (-> 128 rows without it), one KV head: Nq = 4: Nk = 4096 22.2-22.4 -> 22.1 (22.1), 16384
// 40.8-41.0 -> 39.5-39.7 (40.9-41.0), 65536 122.8-123.5 -> 111.3-111.7 us (118.1-118.4; 2.41 TB/s, 72 % of
// HBM); Nq = 16: Nk = 16384 117.7-118.8 -> 108.5-108.9 (114.1-114.3), 65536 426.3-429.3 -> 373.6-376.0 (404.9-405.6;
// 367 TFLOP/s). Where a k/v head has 64 rows (8 KV heads, Nq = 16), 128-row blocks are half padding: 183 -> 194-211
// us, so auto keeps 64 there. Without the overlap the two warpgroups alone bought little at Nq = 4, Nk = 16384
// (the first run, another node: 40.4 -> 41.3 us): there the time is not the L2 traffic of two blocks a head.
// A producer warp for the two-warpgroup blocks (513a072 -> this step; flash_decode_ws_kernel):
//  - Why: under Nsight Compute (one KV head, Nq = 4, 16k keys; log profiles/_logs/nvidia-h100-80gb-hbm3/
//    ncu_decode_hkv1_nq4_before_producer.log.xz) the split kernel took 34.6 us with DRAM 60 % busy and 0.34 warps
//    issuing a scheduler; a tile cost each warp 254 instructions of its own work, 231 more to issue the next tile's
//    cp.async (addresses, swizzle, bounds), and both warpgroups met at a block-wide barrier every tile, so their
//    softmax and products ran in step. More stages (5, 6) were no faster: the bytes in flight were not the limit.
//  - What: warp 8 loads Q and each K/V tile by TMA (one thread, the tensor maps of flash_wgmma's forward) into the
//    4-stage ring; a stage's full mbarrier completes on the copy engine's bytes, its empty one on the 8 consumer
//    warps' arrivals. The warpgroups no longer meet until the end of the block. 288 threads, 156 registers at
//    D = 128 (174 before), 118 at D = 64: one block an SM at either (two at D = 64 before).
//  - Bought (H100 80GB HBM3, same-node A/B against 513a072, two rounds, fp16, B=8 H=32 D=128, L2 flushed by reading;
//    log profiles/_logs/nvidia-h100-80gb-hbm3/decode_wgmma_ws_ab.log.xz), one KV head: Nq = 4, Nk = 16384 39.6-39.7 ->
//    37.5-37.7 us, 65536 110.9-111.4 -> 101.0-101.5 (2.65 TB/s, 79 % of HBM); Nq = 16, Nk = 16384 108.0-108.6 ->
//    71.0-71.1, 65536 374.9-375.0 -> 238.2-238.8 (578 TFLOP/s); Nq = 4, Nk = 4096 unchanged (22.2-22.4). The rows
//    on flash_decode.cu's kernel moved by at most 1.6 % either way (8 KV heads, Nq = 1: 177.9-180.6 against
//    180.9-181.1 us), though its end of block is now unrolled as well (decode.cuh: decode_store_rows).
//  - In the SASS 1 of the kernel's 106 MUFU.EX2 sits between its two waits at D = 128 (0 at D = 64;
//    scripts/sass_overlap.py): what it gained came from the instructions and the barrier it dropped, not from the
//    softmax hidden behind O += P V.
// Two warpgroups over the keys of a 64-row block (option warpgroups = 2 at rows 64; flash_decode_ws_kernel KS = 2;
// b338ecb -> this step):
//  - Why: where a k/v head has 33-64 rows (8 KV heads at Nq = 16) auto ran flash_decode.cu's 64-row mma.sync
//    blocks, whose four warps each read the whole K/V tile through ldmatrix: 3.2-3.5 TB/s on the H200 (67-74 % of
//    HBM; the bench at c840561), where 8 KV heads at Nq <= 4 move 4.3-4.6. The one-warpgroup wgmma block was no
//    faster there (168.4 against 166.6 us at 16k keys). Where it has 128 (one KV head, Nq = 4) a 128-row block
//    of two warpgroups does twice the scores of one 64-row block per K/V tile, for 8 blocks of 132 SMs.
//  - What: the producer warp and TMA ring of the 128-row block; both consumer warpgroups take the block's 64 rows
//    (one 64-row Q tile), warpgroup wg the tiles t0 + wg, t0 + wg + 2, ..., each with the intra-warpgroup overlap,
//    and the end of the block adds their (m, l, O) as the mma.sync warps that share rows do (decode_finish's warp
//    slots). A stage is released by the 4 warps that read it; each warpgroup holds two stages (S_t and V_prev),
//    so the ring has 6 (209 KB at D = 128, one block an SM; 141 registers a thread, 110 at D = 64).
//  - Bought (H200, torch 2.11.0+cu130, fp16, B=8 H=32 D=128, L2 flushed by reading, 4 interleaved rounds of 5;
//    `python3 scripts/flush_check.py --modes read --rounds 4 --configs ... --impls flash_decode,
//    flash_decode:mma=wgmma+rows=64+warpgroups=2,...`; logs profiles/_logs/nvidia-h200/
//    decode_two_warpgroups_over_keys_ab.log.xz; D = 64: _d64.log), us, the plan before -> this block: 8 KV heads,
//    Nq = 16: Nk = 1024 21.5 -> 18.7, 4096 50.0 -> 43.0, 16384 166.6-167.0 -> 141.1-141.2 (3.80 TB/s, 79 % of HBM), 65536 606.6-609.6
//    -> 524.2-526.1 (4.08 TB/s, 85 %); one KV head, Nq = 4: Nk = 1024 14.3 -> 11.0, 4096 18.9 -> 15.5, 16384
//    29.6 -> 27.6-28.7, 65536 80.5 -> 79.6. Lost: one KV head, Nq = 16 (512 rows, compute-bound: eight 64-row
//    blocks a head, each streaming its K/V) 70.0 -> 75.1 at 16k, 239.2 -> 267.4 at 64k, where auto keeps 128 rows;
//    at 32 rows or fewer mma.sync's 16-row blocks stay ahead (one KV head, Nq = 1, 16k: 24.1 against 26.0; 8 KV
//    heads, Nq = 4: 123.1 against 139.3). At 8 KV heads, Nq = 16 and 4096 keys or more, the 128-row block (half of
//    it padding) measured level or ahead (16384: 138.6 us, 3.88 TB/s; 65536: 522.1; 4096: 42.7), so auto takes it
//    there (flash_kernels/_ops.py: _decode_block). The two warpgroups without the overlap (each tile's products
//    waited for at once, one stage held each: 4 tiles in flight) were no faster: 140.1 us at 16k, 523.9 at 64k,
//    and slower at one KV head (29.3 at Nq = 4, 16k; 80.0 at Nq = 16, 16k). In the same run PyTorch's torch.sum
//    over a copy of K and V took 132.0 us at 8 KV heads, 16k keys (4.07 TB/s), 495.6 at 64k, 23.5 at one KV head,
//    16k (2.86 TB/s, 60 % of HBM: the 80 % target there, 17.5 us, is below that read).
#include "decode.cuh"
#include "wgmma.cuh"
#include "wgmma_softmax.cuh"

namespace fk {

// Stages of the ring for blocks of WG warpgroups (64 WG rows): one warpgroup, 3 at D = 128 (two blocks an SM), 4 at
// D = 64 (three); two warpgroups, 4 at D = 128 (161 KB) and D = 64 (81 KB), one block an SM (registers). Six stages for
// two warpgroups at D = 128 (225 KB) were no faster (one KV head, Nq = 4, 4k keys 23.7 against 22.4 us; 5 stages
// 22.6; log profiles/_logs/nvidia-h100-80gb-hbm3/decode_wgmma_ws_ab.log.xz): the bytes in flight were not what the
// block waited on.
template <int D, int WG>
__host__ __device__ constexpr int decode_wg_stages() { return D == 128 && WG == 1 ? 3 : 4; }

// Dynamic shared memory: decode_smem's ring, the Q tile [64 WG / KS][D] (SW128) after it, and 1 KB of slack so
// that the SW128 tiles start on 1024-byte boundaries; two warpgroups add their mbarriers (Q's, and a full and an
// empty one a stage) after the Q tile (flash_kernels/_ops.py counts all of it when it plans the splits).
template <int D, int S, int WG, int KS = 1>
__host__ __device__ constexpr int decode_wg_smem() {
  return decode_smem<D, S>() + 64 * WG / KS * D * 2 + 1024 + (WG == 2 ? 8 * (1 + 2 * S) : 0);
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

// Option code as flash_decode's (flash_kernels/_ops.py): rows per block 64 (code 2: one warpgroup), 128 (code 3:
// two that split the rows, and the producer warp) or 64 (code 4: two that split the keys, and the producer warp),
// bits 8.. the splits.
template <typename T, int D>
cudaError_t decode_wgmma_rows(const AttnArgs& a, cudaStream_t stream) {
  const int splits = a.option >> 8;
  switch (a.option & 0xff) {
    case 2: {
      constexpr int S = decode_wg_stages<D, 1>();
      return decode_split_launch<T, D, 64>(flash_decode_wgmma_kernel<T, D, S>, 128, decode_wg_smem<D, S, 1>(), a,
                                           splits, stream);
    }
    case 3: return decode_ws_launch<T, D, 1>(a, splits, stream);
    case 4: return decode_ws_launch<T, D, 2>(a, splits, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fk

int flash_decode_wgmma_forward(const fk::AttnArgs& a, cudaStream_t stream) {
  return fk::dispatch_dtype_hdim</*fp32=*/false>(a, [&](auto t, auto d) {
    return fk::decode_wgmma_rows<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
