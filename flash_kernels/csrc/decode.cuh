// Shared by flash_decode.cu (mma.sync, any GPU of sm_80 or later) and flash_decode_wgmma.cu (wgmma, sm_90a): the
// decode problem's shape (rows packed per k/v head, 64-key tiles split over blocks), the online-softmax step and
// masks on a 16-row score fragment (the mma.sync m16n8k16 C layout, which is also each warp's part of a wgmma
// m64nN accumulator), the end of a block (rows normalized, O and LSE written, or a split's partials), and the
// merge kernel that adds the splits' partial O by their LSE. See flash_decode.cu for the design and what each
// step bought.
#pragma once
#include <algorithm>
#include <type_traits>

#include "mma.cuh"
#include "option_codes.h"

namespace fk {
constexpr int kDecodeKeys = codes::flash_decode::kKeys;  // 64: keys per K/V tile: one stage of the ring
constexpr int kDecodeThreads = 128;   // 4 warps
constexpr int kDecodeRowsPerWarp = 16;
constexpr int kDecodeFactorBytes = 1024;  // the end of a block: row max and sums of up to 8 warps (decode_row_factors)

// Stages of the K/V ring of flash_decode.cu's kernel (flash_decode_wgmma.cu has its own: decode_wg_stages).
// flash_kernels/_ops.py mirrors them (_decode_stages) to count the blocks an SM holds when it picks the number of
// splits: 3 at D = 128 (32 KB each, two blocks per SM), 4 at D = 64 (16 KB each, three per SM). Where a k/v head
// has more than 64 rows, its 64-row blocks at D = 128 keep 2 (decode_rows), so that three blocks fit on an SM
// (64 KB each; the 168 registers a thread of that kernel uses allow three too): there the tensor work, not the
// bytes in flight, is what an SM's warps wait on. A k/v head of at most 64 rows has one block per SM streaming
// K/V, which wants the third stage (two stages: 3 % slower at 8 KV heads, Nq = 16).
template <int D>
__host__ __device__ constexpr int decode_stages() {
  return D == 128 ? codes::flash_decode::kStagesD128 : codes::flash_decode::kStagesD64;
}

// Dynamic shared memory: the ring [S stages][K tile, V tile] of [64][D] each. In flash_decode.cu's kernel the Q
// tile [16 WR][D] is loaded into the last stage's K tile and read into registers before the first tile's barrier,
// after which that stage is overwritten.
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
// p = 2^(s scale log2(e) - m scale log2(e)), one FFMA and one MUFU.EX2 per score, left in s; l is the thread's
// part of the row sum (its quad is reduced at the end), and alpha[h] the factor that rescales row h's O.
// Returns whether a row max grew (else alpha is 1 and O needs no rescale).
template <int NB>
__device__ __forceinline__ bool decode_softmax_scores(float (&s)[NB][4], float (&m)[2], float (&l)[2],
                                                      float (&alpha)[2], float scale_log2) {
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
  return grew;
}

// P (in s) packed as the A fragments of P V: the C fragments of two adjacent n8 tiles are the A fragment of one
// k16 step.
template <typename T, int NB>
__device__ __forceinline__ void decode_pack_p(const float (&s)[NB][4], uint32_t (&pf)[NB / 2][4]) {
#pragma unroll
  for (int kk = 0; kk < NB / 2; ++kk) {
    pf[kk][0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
    pf[kk][1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
    pf[kk][2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pf[kk][3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// decode_softmax_scores, then P packed into pf.
template <typename T, int NB>
__device__ __forceinline__ bool decode_softmax(float (&s)[NB][4], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                               uint32_t (&pf)[NB / 2][4], float scale_log2) {
  const bool grew = decode_softmax_scores<NB>(s, m, l, alpha, scale_log2);
  decode_pack_p<T, NB>(s, pf);
  return grew;
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

// The end of a block meets on a named barrier of its NW warps (id 1), not __syncthreads: flash_decode_wgmma.cu's
// two-warpgroup blocks have a producer warp besides them, which issues the block's loads and leaves.
template <int NW>
__device__ __forceinline__ void decode_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(NW * 32) : "memory");
}

// The end of a block, first half: the warps that shared rows (WK = NW / WR of them, each over its own keys) pool
// their row max and sum through shared memory; each thread gets the factor f[h] = 2^(m_w - m) / l that scales its
// warp's O of row g + 8 h into the row's normalized O, and the row's LSE is written. A row that saw no key
// in this split (causal) gets f = 0 and LSE = -inf, which the combine kernel weighs 0. NW: the block's warps
// (4, or 8 for flash_decode_wgmma.cu's two warpgroups), WR: how many 16-row groups they cover.
template <typename T, int D, int WR, int NW = 4>
__device__ __forceinline__ void decode_row_factors(uint8_t* smem, const float (&m)[2], float (&l)[2],
                                                   float scale_log2, const DecodeOut<T>& out, float (&f)[2],
                                                   int warp) {
  constexpr int WK = NW / WR;
  static_assert(NW % WR == 0 && 2 * NW * kDecodeRowsPerWarp * 4 <= kDecodeFactorBytes, "warps and rows");
  float* sM = reinterpret_cast<float*>(smem);   // [NW warps][16] row max in log2 units, over the spent ring
  float* sL = sM + NW * kDecodeRowsPerWarp;     // [NW warps][16] row sums
  const int lane = threadIdx.x & 31, wr = warp / WK, g = lane >> 2;
  decode_sync<NW>();  // every warp is done with the Q tile and the ring
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    if ((lane & 3) == 0) {
      sM[warp * 16 + g + 8 * h] = m[h] == -INFINITY ? -INFINITY : m[h] * scale_log2;
      sL[warp * 16 + g + 8 * h] = l[h];
    }
  }
  decode_sync<NW>();
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

// decode_store_rows' reads and stores: E values a chunk (16 bytes of the output). Unrolled, all of a thread's
// shared-memory reads before its stores: as a loop, each pass's loads waited for the stores of the pass before to
// release their registers (at 128 rows x D = 128 a block's end was 8 such passes, about 18 % of its warps' stall
// samples under Nsight Compute at one KV head, Nq = 4).
template <typename T, int D, int M, int WK, int NW, int E>
__device__ __forceinline__ void decode_store_chunks(const float* sO, const DecodeOut<T>& out) {
  constexpr int PITCH = D + 8, CH = M * D / E, STEP = NW * 32, IT = (CH + STEP - 1) / STEP;
  float acc[IT][E];
#pragma unroll
  for (int i = 0; i < IT; ++i) {
    const int c = threadIdx.x + i * STEP, row = c / (D / E), col = (c % (D / E)) * E;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[i][e] = 0.f;
    if (c >= CH) continue;
#pragma unroll
    for (int w = 0; w < WK; ++w) {  // the warps of row block row / 16
      const float4* p = reinterpret_cast<const float4*>(sO + ((row / 16 * WK + w) * 16 + row % 16) * PITCH + col);
#pragma unroll
      for (int v = 0; v < E / 4; ++v) {
        const float4 x = p[v];
        acc[i][4 * v] += x.x, acc[i][4 * v + 1] += x.y, acc[i][4 * v + 2] += x.z, acc[i][4 * v + 3] += x.w;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < IT; ++i) {
    const int c = threadIdx.x + i * STEP, row = c / (D / E), col = (c % (D / E)) * E;
    if (c >= CH || row >= out.valid) continue;
    const float (&a)[E] = acc[i];
    if constexpr (E == 8) {
      const uint4 v = {pack2<T>(a[0], a[1]), pack2<T>(a[2], a[3]), pack2<T>(a[4], a[5]), pack2<T>(a[6], a[7])};
      *reinterpret_cast<uint4*>(out.o + long(row) * D + col) = v;
    } else {
      *reinterpret_cast<float4*>(out.of + long(row) * D + col) = make_float4(a[0], a[1], a[2], a[3]);
    }
  }
}

// The end of a block, second half: each warp's O, scaled by f, goes to shared memory (over the ring, past the
// first half's row max and sums); the warps' parts of each row are added and the rows written 16 bytes per thread
// (T, or fp32 for a split).
template <typename T, int D, int WR, int NW = 4>
__device__ __forceinline__ void decode_store_rows(uint8_t* smem, const float (&o)[D / 8][4], const float (&f)[2],
                                                  const DecodeOut<T>& out, int warp) {
  constexpr int WK = NW / WR, M = kDecodeRowsPerWarp * WR, PITCH = D + 8;  // +8 floats: conflict-free float2 stores
  float* sO = reinterpret_cast<float*>(smem + kDecodeFactorBytes);  // [NW warps][16][PITCH]
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int nd = 0; nd < D / 8; ++nd) {
    float* p = sO + (warp * 16 + (lane >> 2)) * PITCH + nd * 8 + (lane & 3) * 2;
    *reinterpret_cast<float2*>(p) = make_float2(o[nd][0] * f[0], o[nd][1] * f[0]);
    *reinterpret_cast<float2*>(p + 8 * PITCH) = make_float2(o[nd][2] * f[1], o[nd][3] * f[1]);
  }
  decode_sync<NW>();
  // Each thread's chunks of a row are 16 bytes of the output: 8 values of T (one split) or 4 fp32 (a split's
  // partials), so that a warp's store instruction writes 512 contiguous bytes, whole 32-byte sectors. Before, a
  // split's chunk was 8 floats stored as two float4, each instruction writing half of every sector it touched.
  if (out.o != nullptr) decode_store_chunks<T, D, M, WK, NW, 8>(sO, out);
  else decode_store_chunks<T, D, M, WK, NW, 4>(sO, out);
}

// Shared memory the end of a block uses (over the spent ring, and the Q tile where it follows the ring): the
// row max and sums, then [NW warps][16][D + 8] floats of O.
template <int D, int NW>
__host__ __device__ constexpr int decode_finish_smem() {
  return kDecodeFactorBytes + NW * kDecodeRowsPerWarp * (D + 8) * 4;
}

// The end of a split kernel's block, both kernels: where its rows go (the final O and LSE with one split, else
// its split's slot of the workspaces O_part [splits][B H Nq][D], LSE_part [splits][B H Nq]), then
// decode_row_factors and decode_store_rows. first: the block's first row in [B H Nq]; valid: its rows that exist.
// warp: the warp's slot at the end of the block, where slots WK r .. WK r + WK - 1 hold the warps that share the
// 16-row group r (each over its own keys): the warp's index where those warps are adjacent (flash_decode.cu's
// blocks, the two-warpgroup blocks that split the rows); the two-warpgroup blocks that split the keys
// (flash_decode_wgmma.cu, KS = 2), whose warps w and w + 4 share rows, give (w % 4) * 2 + w / 4.
template <typename T, int D, int WR, int NW = 4>
__device__ __forceinline__ void decode_finish(uint8_t* smem, const float (&o)[D / 8][4], const float (&m)[2],
                                              float (&l)[2], float scale_log2, T* O, float* LSE, float* O_part,
                                              float* LSE_part, const DecodeShape& sh, long first, int valid,
                                              int warp = int(threadIdx.x >> 5)) {
  const bool one_split = gridDim.z == 1;
  const long slot = long(blockIdx.z) * gridDim.y * sh.R;  // this split's rows in the workspaces
  const DecodeOut<T> out{one_split ? O + first * D : nullptr, one_split ? nullptr : O_part + (slot + first) * D,
                         one_split ? LSE + first : LSE_part + slot + first, valid};
  float f[2];
  decode_row_factors<T, D, WR, NW>(smem, m, l, scale_log2, out, f, warp);
  decode_store_rows<T, D, WR, NW>(smem, o, f, out, warp);
}

// O = sum_s w_s O_s / sum_s w_s with w_s = exp(LSE_s - max LSE), LSE = max LSE + log sum_s w_s: WPR warps per
// row of [B H Nq] (4 / WPR rows a block), D / 32 columns per lane. Lane s reads split s's LSE (32 splits at a
// time), so a row's weights take one round trip to memory; warp p of a row adds splits p, p + WPR, ... of
// them, kCombineLoads O rows at a time, each load independent of the weights (the first ones go out beside the
// LSE loads), and with WPR > 1 the row's warps add their parts through shared memory. A split whose LSE is -inf (no key of it visible to the row)
// weighs 0; split 0 holds key 0, which every row sees. Launched dependent on the split kernel
// (grid_dependency_wait). Several warps a row keep the SMs busy where rows are few (one KV head: 256 rows of 16
// splits), which one warp a row left at one warp per scheduler.
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
template <typename T, int D, int WPR>
cudaError_t combine_launch_wpr(const AttnArgs& a, long rows, int splits, cudaStream_t stream) {
  constexpr long per_block = kDecodeThreads / 32 / WPR;
  const dim3 grid(static_cast<unsigned>((rows + per_block - 1) / per_block)), block(kDecodeThreads);
  return launch_dependent<flash_decode_combine_kernel<T, D, WPR>>(grid, block, 0, stream, a.ws[0], a.ws[1],
                                                                  static_cast<T*>(a.o), a.lse, rows, splits);
}
template <typename T, int D>
cudaError_t combine_launch(const AttnArgs& a, int splits, cudaStream_t stream) {
  const long rows = long(a.B) * a.H * a.Nq;
  if (splits >= 16) return combine_launch_wpr<T, D, 4>(a, rows, splits, stream);
  if (splits >= 8) return combine_launch_wpr<T, D, 2>(a, rows, splits, stream);
  return combine_launch_wpr<T, D, 1>(a, rows, splits, stream);
}

// The split kernel's shape and grid z for `splits`, the number of key splits flash_kernels/_ops.py chose (it
// allocated the workspaces a.ws[0], a.ws[1] for that many when more than one): the tiles a row can see are
// dealt out as evenly as that allows, so that no split is empty. z = 0: bad arguments.
inline DecodeShape decode_shape(const AttnArgs& a, int splits, int& z) {
  const int tiles = cdiv(a.causal ? std::min(a.Nk, a.Nq) : a.Nk, kDecodeKeys);
  const DecodeShape sh{(a.H / a.Hkv) * a.Nq, a.Nq, a.Nk, cdiv(tiles, std::max(1, std::min(splits, tiles)))};
  z = splits < 1 ? 0 : cdiv(tiles, sh.tiles_per_split);
  if (z > 1 && (a.ws[0] == nullptr || a.ws[1] == nullptr)) z = 0;
  return sh;
}

// A split kernel's run: `splits` key splits (decode_shape) in a grid of blocks of M rows, launched by
// launch(grid, shape), then the merge where there are several.
template <typename T, int D, int M, typename Launch>
cudaError_t decode_split_run(const AttnArgs& a, int splits, cudaStream_t stream, Launch&& launch) {
  int z;
  const DecodeShape sh = decode_shape(a, splits, z);
  if (z == 0) return cudaErrorInvalidValue;
  cudaError_t err = launch(dim3(cdiv(sh.R, M), a.B * a.Hkv, z), sh);
  if (err != cudaSuccess || z == 1) return err;
  return combine_launch<T, D>(a, z, stream);
}

// The split kernel's launch where it takes Q, K and V as pointers: `threads` threads a block with `smem` bytes of
// dynamic shared memory.
template <typename T, int D, int M, typename Kernel>
cudaError_t decode_split_launch(Kernel kernel, int threads, int smem, const AttnArgs& a, int splits,
                                cudaStream_t stream) {
  const cudaError_t err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  return decode_split_run<T, D, M>(a, splits, stream, [&](dim3 grid, const DecodeShape& sh) {
    kernel<<<grid, threads, smem, stream>>>(static_cast<const T*>(a.q), static_cast<const T*>(a.k),
                                            static_cast<const T*>(a.v), static_cast<T*>(a.o), a.lse, a.ws[0], a.ws[1],
                                            sh, a.scale * kLog2e, a.causal);
    return cudaGetLastError();
  });
}

}  // namespace fk
