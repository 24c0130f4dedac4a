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
// run with SDPA's backends; CSV profiles/_logs/nvidia-h200/bench_decode_7a78894.csv): with 32 KV heads 4.0-4.6 TB/s
// of compulsory K + V bytes at Nk >= 4k (92-95 % of HBM at Nk >= 16k), 0.94-1.32x the best SDPA backend; with 8 KV
// heads and Nq <= 4 3.9-4.4 TB/s at Nk >= 16k (80-91 %), 0.99-3.1x, where flash_mma moved 0.6 TB/s (bench at
// 1ebba72). Missed: 64 rows per k/v head (Hkv = 8 with Nq = 16: 3.1 TB/s, 64 %), and Hkv = 1, where a head's
// 32 Nq rows take several 64-row blocks that each read K/V.
// On an H100 80GB HBM3 (7cebd20; `python -m flash_kernels.bench --suite decode --passes forward --dtypes float16
// --variants flash_decode --refs sdpa_flash,sdpa_cudnn`; profiles/_logs/nvidia-h100-80gb-hbm3/decode_8_warps_tried/):
// with 8 KV heads 2.67-3.03 TB/s at Nk >= 16k (80-90 % of 3.35 TB/s; Nq = 16 included), 1.00-2.18x the best
// SDPA backend there; with 1 KV head 2.29 TB/s at Nq = 1, Nk = 64k (68 %; 0.92-0.99x the best SDPA backend at
// Nq = 1, Nk >= 16k); Nq = 16 with 1 KV head is compute-bound (512 FLOP per byte: 294 TFLOP/s). Tried and
// reverted: 8-warp blocks (32, 64 or 128 rows): no faster (204-212 registers a thread at D = 128 leave one such
// block per SM, the 8 warps two 4-warp blocks already give); 128 rows 9 % slower at Hkv = 1, Nq = 16.
// The plan (rows per block, splits; flash_kernels/_ops.py: _decode_plan) was re-tuned on the H100 at 1687b8b with
// scripts/decode_plan_sweep.py, every option interleaved on the same inputs (log profiles/_logs/nvidia-h100-80gb-hbm3/
// decode_plan_sweep_interleaved.log): one block per SM rather than as many as shared memory holds while a k/v head
// has at most 64 rows, at least 4 tiles a split, two 16-row blocks for 17-32 rows. In the bench capture at 1687b8b
// (the bench's timer now keeps the host's launch path out of short calls): 3.04-3.11 TB/s with 32 KV heads and
// 2.72-3.07 TB/s (81-92 % of HBM) with 8 at Nk >= 16k; >= 1.0x the best SDPA backend in 35 of 36 fp16 rows (the
// miss: Nq1-Nk1024-Hkv1, 13.6 us against cuDNN's 12.8) and 31 of 36 bf16 rows (all at Nk = 1024, 0.91-0.99x).
// The combine step (5867a63 -> next): the merge kernel read a split's LSE, then its O, split after split (two
// dependent round trips a split, 16 splits a row at Hkv = 1), and started only after the split kernel's launch
// gap. It now reads a row's LSEs in one round trip (lane s: split s) and 8 O rows at a time, and is launched as a
// programmatic dependent launch of the split kernel (sm_90: its launch overlaps the split kernel's tail). Bought
// (H100 80GB HBM3, same-node A/B, two rounds each, fp16, B=8 H=32 D=128, scripts/flush_check.py --modes read; log
// profiles/_logs/nvidia-h100-80gb-hbm3/decode_combine_pdl_ab.log), one KV head, Nq = 1: Nk = 1024 12.7 -> 10.1 us
// (cuDNN 12.1-12.2), 4096 17.1 -> 14.0, 16384 35.6 -> 31.1-31.4 (2.15 TB/s, 64 % of HBM), 65536 99.8-101.3 ->
// 95.5-95.7 (2.81 TB/s, 84 %); Nq = 4, Nk = 16384: 47.5 -> 43.7-44.2; 8 KV heads, Nk = 1024: 20.0-20.2 -> 17.9-18.1.
// Lost: 1.2 % at one KV head, Nq = 16, Nk = 16384 (compute-bound: 129.3-129.5 -> 130.9-131.3 us).
// The merge, second step (fd40890 -> abb1c58): 2 or 4 warps a row where a row has 8 or more splits (its splits
// shared among its warps, their sums added in shared memory: at one KV head 64 blocks of four one-row warps had
// left one warp per scheduler). Bought (H100 80GB HBM3, same-node A/B, two rounds, fp16, B=8 H=32 D=128; log
// profiles/_logs/nvidia-h100-80gb-hbm3/decode_merge_warps_ab.log): one KV head, Nq = 1, Nk = 16384 30.9-31.0 ->
// 30.3-30.5 us, 65536 96.5-97.9 -> 95.7-96.4; Nq = 4, Nk = 16384 44.2 -> 43.5-43.6. Lost 1.1-1.2 % at one KV head,
// Nq = 16, Nk = 16384 (129.5 -> 130.9-131.1 us; 4 splits: one warp a row, the same merge code), as the step
// before did there; an A/A run of one tree against itself differed by 0.4 % at that shape, and the next A/B
// (abb1c58 -> 5775417) read it 0.5 % the other way. Then (abb1c58 -> 5775417) a row's first O loads go out beside
// its LSE loads: no gain that the A/B resolves (Nq = 1, Nk = 16384 30.8-30.9 against 30.9-31.0 us; Nq = 4 44.1-44.4
// against 43.8; log decode_merge_loads_ab_and_aa.log, with the A/A run).
// Tried and reverted (da92539): the splits of a row block launched as one thread block cluster that merges
// through distributed shared memory, with no partials in global memory and no second kernel. About 1 us slower
// where it ran (one KV head, Nq = 1: Nk = 1024 10.8 against 9.8-9.9 us, 4096 15.9 against 15.0; log
// decode_cluster_merge_ab.log): the merge kernel, launched dependent, already overlaps the split kernel's tail. At
// Nk = 16384 (16 splits) the 16-block cluster may not have fitted, in which case that launch fell back to the
// merge kernel and the A/B compared the same code there.
// Three blocks an SM where the tensor work holds the call (5c1badc -> f295b00): a k/v head of more than 64 rows
// (one KV head at Nq = 4 and 16) ran two 64-row blocks an SM, held there by shared memory (a 16 KB Q tile beside a
// 3-stage ring of 96 KB); under Nsight Compute (one KV head, Nq = 4, Nk = 16384; log profiles/_logs/
// nvidia-h100-80gb-hbm3/ncu_decode_hkv1_nq4_nq16.log) its warps were 1.94 a scheduler, 0.39 of them eligible, the
// tensor pipe 34 % busy and DRAM 54 %. Q now travels in the ring's last stage, and those blocks keep 2 stages
// (decode_stages): 64 KB, three an SM. Bought (H100 80GB HBM3, same-node A/B against 5c1badc, two rounds, fp16,
// B=8 H=32 D=128; log decode_ring_two_stages_ab.log): one KV head, Nq = 4, Nk = 4096 23.6 -> 22.6 us, 16384
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
// Causal masking is top-left, as everywhere here (query i sees keys j <= i): a causal decode row sees the
// first i + 1 keys only, so only those min(Nk, Nq) keys are split and read.
#include <algorithm>
#include <type_traits>

#include "mma.cuh"

namespace fk {

constexpr int kDecodeKeys = 64;       // keys per K/V tile: one stage of the ring
constexpr int kDecodeThreads = 128;   // 4 warps
constexpr int kDecodeRowsPerWarp = 16;

// Stages of the K/V ring. flash_kernels/_ops.py mirrors them (_decode_stages) to count the blocks an SM holds
// when it picks the number of splits: 3 at D = 128 (32 KB each, two blocks per SM), 4 at D = 64 (16 KB each,
// three per SM). Where a k/v head has more than 64 rows, its 64-row blocks at D = 128 keep 2 (decode_rows), so that
// three blocks fit on an SM (64 KB each; the 168 registers a thread of that kernel uses allow three too): there
// the tensor work, not the bytes in flight, is what an SM's warps wait on. A k/v head of at most 64 rows has one
// block per SM streaming K/V, which wants the third stage (two stages: 3 % slower at 8 KV heads, Nq = 16).
template <int D>
__host__ __device__ constexpr int decode_stages() { return D == 128 ? 3 : 4; }

// Dynamic shared memory: the ring [S stages][K tile, V tile] of [64][D] each. The Q tile [16 WR][D] is loaded into
// the last stage's K tile and read into registers before the first tile's barrier, after which that stage is
// overwritten.
template <int D, int S>
__host__ __device__ constexpr int decode_smem() {
  return S * 2 * kDecodeKeys * D * 2;
}

// What a block needs of the shape.
struct DecodeShape {
  int R;                // rows per key/value head: (H / Hkv) * Nq
  int Nq, Nk;
  int tiles_per_split;  // 64-key tiles per split (grid z)
};

// The lowest and the highest query index among the packed rows [r0, r1] (row g * Nq + i is query i): under
// the top-left causal mask the rows see keys 0..hi at most, and all of keys 0..lo.
struct QueryRange {
  int lo, hi;
  __device__ QueryRange(int r0, int r1, int Nq)
      : lo(r0 / Nq == r1 / Nq ? r0 % Nq : 0), hi(r0 / Nq == r1 / Nq ? r1 % Nq : Nq - 1) {}
};

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

// Keys past Nk, and (causal) keys after a row's query qi[h], get a score of -inf. j0: the warp's first key.
template <int NB>
__device__ __forceinline__ void decode_mask(float (&s)[NB][4], int j0, int Nk, bool causal, const int (&qi)[2]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = j0 + nb * 8 + (lane & 3) * 2 + (e & 1);
      if (key >= Nk || (causal && key > qi[e >> 1])) s[nb][e] = -INFINITY;
    }
}

// One online-softmax step on a warp's 16-row score tile: row max m kept in raw score units (scale > 0) and
// p = 2^(s scale log2(e) - m scale log2(e)), one FFMA and one MUFU.EX2 per score; l is the thread's part of
// the row sum (its quad is reduced at the end). P comes back packed as the A fragments of P V (the C
// fragments of two adjacent n8 tiles are the A fragment of one k16 step) and alpha[h] as the factor that
// rescales row h's O. Returns whether a row max grew (else alpha is 1 and O needs no rescale).
template <typename T, int NB>
__device__ __forceinline__ bool decode_softmax(float (&s)[NB][4], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                               uint32_t (&pf)[NB / 2][4], float scale_log2) {
  bool grew = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = m[h];
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) mx = fmaxf(mx, fmaxf(s[nb][2 * h], s[nb][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    // a row with no visible key yet keeps m = -inf; exponents then use 0 so that p = 0, not NaN
    const float base = mx == -INFINITY ? 0.f : mx * scale_log2;
    alpha[h] = fast_exp2(m[h] * scale_log2 - base);
    grew |= mx != m[h];
    m[h] = mx;
    float sum = 0.f;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      s[nb][2 * h] = fast_exp2(fmaf(s[nb][2 * h], scale_log2, -base));
      s[nb][2 * h + 1] = fast_exp2(fmaf(s[nb][2 * h + 1], scale_log2, -base));
      sum += s[nb][2 * h] + s[nb][2 * h + 1];
    }
    l[h] = l[h] * alpha[h] + sum;
  }
#pragma unroll
  for (int kk = 0; kk < NB / 2; ++kk) {
    pf[kk][0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
    pf[kk][1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
    pf[kk][2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pf[kk][3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
  return grew;
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

// Where a block's rows go: O in T and the final LSE (one split), or O in fp32 and the LSE of the split into
// its slot of the workspaces (several).
template <typename T>
struct DecodeOut {
  T* o;         // [rows][D] of this block's first row (one split), else null
  float* of;    // [rows][D] fp32 in this split's slot (several splits), else null
  float* lse;   // LSE of this block's first row (final or this split's)
  int valid;    // rows of the block that exist (R - r0)
};

// The end of a block, first half: the warps that shared rows (WK of them, each over its own keys) pool their
// row max and sum through shared memory; each thread gets the factor f[h] = 2^(m_w - m) / l that scales its
// warp's O of row g + 8 h into the row's normalized O, and the row's LSE is written. A row that saw no key
// in this split (causal) gets f = 0 and LSE = -inf, which the combine kernel weighs 0.
template <typename T, int D, int WR>
__device__ __forceinline__ void decode_row_factors(uint8_t* smem, const float (&m)[2], float (&l)[2],
                                                   float scale_log2, const DecodeOut<T>& out, float (&f)[2]) {
  constexpr int WK = 4 / WR;
  float* sM = reinterpret_cast<float*>(smem);   // [4 warps][16] row max in log2 units, over the spent ring
  float* sL = sM + 4 * kDecodeRowsPerWarp;      // [4 warps][16] row sums
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wr = warp / WK, g = lane >> 2;
  __syncthreads();  // every warp is done with the Q tile and the ring
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    if ((lane & 3) == 0) {
      sM[warp * 16 + g + 8 * h] = m[h] == -INFINITY ? -INFINITY : m[h] * scale_log2;
      sL[warp * 16 + g + 8 * h] = l[h];
    }
  }
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    float mx = -INFINITY, sum = 0.f;
#pragma unroll
    for (int w = 0; w < WK; ++w) mx = fmaxf(mx, sM[(wr * WK + w) * 16 + r]);
#pragma unroll
    for (int w = 0; w < WK; ++w) {
      const float mw = sM[(wr * WK + w) * 16 + r];
      if (mw != -INFINITY) sum += sL[(wr * WK + w) * 16 + r] * fast_exp2(mw - mx);
    }
    const float mine = sM[warp * 16 + r];
    f[h] = mine == -INFINITY ? 0.f : fast_exp2(mine - mx) / sum;
    const int row = wr * 16 + r;
    if (warp % WK == 0 && (lane & 3) == 0 && row < out.valid)
      out.lse[row] = mx == -INFINITY ? -INFINITY : (mx + __log2f(sum)) * kLn2;
  }
}

// The end of a block, second half: each warp's O, scaled by f, goes to shared memory (over the ring); the
// warps' parts of each row are added and the rows written 16 bytes per thread (T, or fp32 for a split).
template <typename T, int D, int WR>
__device__ __forceinline__ void decode_store_rows(uint8_t* smem, const float (&o)[D / 8][4], const float (&f)[2],
                                                  const DecodeOut<T>& out) {
  constexpr int WK = 4 / WR, M = kDecodeRowsPerWarp * WR, PITCH = D + 8;  // +8 floats: conflict-free float2 stores
  float* sO = reinterpret_cast<float*>(smem + M * D * 2);  // [4 warps][16][PITCH], past sM and sL
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int nd = 0; nd < D / 8; ++nd) {
    float* p = sO + (warp * 16 + (lane >> 2)) * PITCH + nd * 8 + (lane & 3) * 2;
    *reinterpret_cast<float2*>(p) = make_float2(o[nd][0] * f[0], o[nd][1] * f[0]);
    *reinterpret_cast<float2*>(p + 8 * PITCH) = make_float2(o[nd][2] * f[1], o[nd][3] * f[1]);
  }
  __syncthreads();
  for (int c = threadIdx.x; c < M * D / 8; c += kDecodeThreads) {
    const int row = c / (D / 8), col = (c % (D / 8)) * 8;
    if (row >= out.valid) continue;
    float acc[8] = {};
#pragma unroll
    for (int w = 0; w < WK; ++w) {  // the warps of row block row / 16
      const float4* p = reinterpret_cast<const float4*>(sO + ((row / 16 * WK + w) * 16 + row % 16) * PITCH + col);
      const float4 x = p[0], y = p[1];
      acc[0] += x.x, acc[1] += x.y, acc[2] += x.z, acc[3] += x.w;
      acc[4] += y.x, acc[5] += y.y, acc[6] += y.z, acc[7] += y.w;
    }
    if (out.o != nullptr) {
      const uint4 v = {pack2<T>(acc[0], acc[1]), pack2<T>(acc[2], acc[3]), pack2<T>(acc[4], acc[5]),
                       pack2<T>(acc[6], acc[7])};
      *reinterpret_cast<uint4*>(out.o + long(row) * D + col) = v;
    } else {
      float4* dst = reinterpret_cast<float4*>(out.of + long(row) * D + col);
      dst[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      dst[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    }
  }
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
  static_assert(M * D * 2 + 4 * kDecodeRowsPerWarp * (D + 8) * 4 <= decode_smem<D, S>(),
                "the end of the block (decode_row_factors, decode_store_rows) fits in the ring");
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
  const bool one_split = gridDim.z == 1;
  const long slot = long(blockIdx.z) * gridDim.y * sh.R;  // this split's rows in the workspaces
  const DecodeOut<T> out{one_split ? O + first * D : nullptr, one_split ? nullptr : O_part + (slot + first) * D,
                         one_split ? LSE + first : LSE_part + slot + first, valid};
  float f[2];
  decode_row_factors<T, D, WR>(smem, m, l, scale_log2, out, f);
  decode_store_rows<T, D, WR>(smem, o, f, out);
}

// O = sum_s w_s O_s / sum_s w_s with w_s = exp(LSE_s - max LSE), LSE = max LSE + log sum_s w_s: WPR warps per
// row of [B H Nq] (4 / WPR rows a block), D / 32 columns per lane. Lane s reads split s's LSE (32 splits at a
// time), so a row's weights take one round trip to memory; warp p of a row adds splits p, p + WPR, ... of
// them, kCombineLoads O rows at a time, each load independent of the weights (the first ones go out beside the
// LSE loads), and with WPR > 1 the row's warps add their parts through shared memory. A split whose LSE is -inf (no key of it visible to the row)
// weighs 0; split 0 holds key 0, which every row sees. Launched dependent on the split kernel
// (grid_dependency_wait). Before (65f586f): one warp a row, which left one warp per scheduler at one KV head
// (256 rows of 16 splits: 64 blocks on 132 SMs) where cuDNN's reduction keeps 3.9.
constexpr int kCombineLoads = 8;

template <typename T, int D, int WPR>
__global__ void __launch_bounds__(kDecodeThreads)
flash_decode_combine_kernel(const float* __restrict__ O_part, const float* __restrict__ LSE_part, T* __restrict__ O,
                            float* __restrict__ LSE, long rows, int splits) {
  constexpr int C = D / 32, WARPS = kDecodeThreads / 32;  // 2 or 4 columns per lane
  static_assert(WARPS % WPR == 0, "a block holds whole rows");
  using Vec = std::conditional_t<C == 4, float4, float2>;
  __shared__ __align__(16) float sAcc[WPR > 1 ? WARPS : 1][D];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % WPR;
  const long row = long(blockIdx.x) * (WARPS / WPR) + warp / WPR;
  grid_dependency_wait();
  const bool live = row < rows;  // no early return: the row's warps meet at a barrier
  float acc[C] = {}, sum = 0.f, mx = -INFINITY;
  if (live) {
    // the warp's splits j0, j0 + WPR, ... (kCombineLoads of them) of the chunk of splits s0.. (n of them)
    auto load = [&](Vec (&x)[kCombineLoads], int s0, int j0, int n) {
#pragma unroll
      for (int u = 0; u < kCombineLoads; ++u) {
        const int j = j0 + u * WPR;
        if (j < n) x[u] = *reinterpret_cast<const Vec*>(O_part + ((s0 + j) * rows + row) * D + lane * C);
      }
    };
    // the first O loads go out with the LSE loads: they do not depend on the weights, so that a row of at most
    // WPR x kCombineLoads splits takes one round trip to memory, not two
    Vec x[kCombineLoads];
    const int n0 = min(32, splits);
    load(x, 0, part, n0);
    const float first = lane < splits ? LSE_part[lane * rows + row] : -INFINITY;
    mx = first;
    for (int s = lane + 32; s < splits; s += 32) mx = fmaxf(mx, LSE_part[s * rows + row]);
    mx = warp_max(mx);
    for (int s0 = 0; s0 < splits; s0 += 32) {
      const int n = min(32, splits - s0);
      const float ls = s0 == 0 ? first : lane < n ? LSE_part[(s0 + lane) * rows + row] : -INFINITY;
      const float w = ls == -INFINITY ? 0.f : __expf(ls - mx);  // lane's split's weight
      sum += w;
      for (int j0 = part; j0 < n; j0 += WPR * kCombineLoads) {
        if (s0 != 0 || j0 != part) load(x, s0, j0, n);
#pragma unroll
        for (int u = 0; u < kCombineLoads; ++u) {
          const int j = j0 + u * WPR;
          const float wu = __shfl_sync(0xffffffffu, w, j & 31);  // 0 past the n splits
          if (j >= n || wu == 0.f) continue;
          const float* xs = reinterpret_cast<const float*>(&x[u]);
#pragma unroll
          for (int c = 0; c < C; ++c) acc[c] += wu * xs[c];
        }
      }
    }
    sum = warp_sum(sum);
  }
  if constexpr (WPR > 1) {
    *reinterpret_cast<Vec*>(&sAcc[warp][lane * C]) = *reinterpret_cast<const Vec*>(acc);
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int p = 1; p < WPR; ++p) {
      const Vec y = *reinterpret_cast<const Vec*>(&sAcc[warp + p][lane * C]);
      const float* ys = reinterpret_cast<const float*>(&y);
#pragma unroll
      for (int c = 0; c < C; ++c) acc[c] += ys[c];
    }
  }
  if (!live) return;
  const float inv = 1.f / sum;
  uint32_t packed[C / 2];
#pragma unroll
  for (int i = 0; i < C / 2; ++i) packed[i] = pack2<T>(acc[2 * i] * inv, acc[2 * i + 1] * inv);
  if constexpr (C == 4) *reinterpret_cast<uint2*>(O + row * D + lane * C) = make_uint2(packed[0], packed[1]);
  else *reinterpret_cast<uint32_t*>(O + row * D + lane * C) = packed[0];
  if (lane == 0) LSE[row] = mx + __logf(sum);
}

// The merge's launch: warps per row from the number of splits, so that a warp adds about 4 of them.
template <typename T, int D>
cudaError_t combine_launch(const AttnArgs& a, int splits, cudaStream_t stream) {
  const long rows = long(a.B) * a.H * a.Nq;
  const int wpr = splits >= 16 ? 4 : splits >= 8 ? 2 : 1;
  const long per_block = kDecodeThreads / 32 / wpr, blocks = (rows + per_block - 1) / per_block;
  const dim3 grid(static_cast<unsigned>(blocks)), block(kDecodeThreads);
  const float* o_part = a.ws[0];
  const float* lse_part = a.ws[1];
  T* o = static_cast<T*>(a.o);
  if (wpr == 4)
    return launch_dependent<flash_decode_combine_kernel<T, D, 4>>(grid, block, 0, stream, o_part, lse_part, o, a.lse,
                                                                  rows, splits);
  if (wpr == 2)
    return launch_dependent<flash_decode_combine_kernel<T, D, 2>>(grid, block, 0, stream, o_part, lse_part, o, a.lse,
                                                                  rows, splits);
  return launch_dependent<flash_decode_combine_kernel<T, D, 1>>(grid, block, 0, stream, o_part, lse_part, o, a.lse,
                                                                rows, splits);
}

// The launch: `splits` is the number of key splits flash_kernels/_ops.py chose (it allocated the workspaces
// a.ws[0], a.ws[1] for that many when more than one); the tiles are dealt out as evenly as that allows.
template <typename T, int D, int WR, int S>
cudaError_t decode_launch(const AttnArgs& a, int splits, cudaStream_t stream) {
  constexpr int smem = decode_smem<D, S>(), M = kDecodeRowsPerWarp * WR;
  auto kernel = flash_decode_kernel<T, D, WR, S>;
  cudaError_t err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  if (splits < 1) return cudaErrorInvalidValue;
  const int tiles = cdiv(a.causal ? std::min(a.Nk, a.Nq) : a.Nk, kDecodeKeys);
  const DecodeShape sh{(a.H / a.Hkv) * a.Nq, a.Nq, a.Nk, cdiv(tiles, std::min(splits, tiles))};
  const int z = cdiv(tiles, sh.tiles_per_split);
  if (z > 1 && (a.ws[0] == nullptr || a.ws[1] == nullptr)) return cudaErrorInvalidValue;
  const float scale_log2 = a.scale * kLog2e;
  kernel<<<dim3(cdiv(sh.R, M), a.B * a.Hkv, z), kDecodeThreads, smem, stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o),
      a.lse, a.ws[0], a.ws[1], sh, scale_log2, a.causal);
  err = cudaGetLastError();
  if (err != cudaSuccess || z == 1) return err;
  return combine_launch<T, D>(a, z, stream);
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
