// flash_wgmma forward: FlashAttention-2's loop on Hopper's warpgroup tensor-core instructions (sm_90a). The
// `pipeline` option picks the rung of the Hopper ladder: how K/V reach shared memory and how warpgroups share work.
//
// Relative to flash_mma: each product is one asynchronous wgmma per k16 step for a warpgroup's 64 query rows, its
// operands read by the tensor cores from shared memory (no ldmatrix). S = Q K^T is wgmma SS (Q and K K-major,
// 128-byte swizzle); O += P V is wgmma RS with P repacked from the S accumulators into 16-bit registers and V read
// MN-major (the transpose bit: V stays [keys][D]). Per K/V tile a consumer warpgroup runs S = Q_i K_j^T, the mask,
// the online softmax on the accumulator fragment (running max in raw units, exp2 with the scale folded in), O
// rescaled when a row max grew, O += P V_j. O is normalised and staged through the warpgroup's rows of the Q tile;
// LSE is fp32 (natural log). GQA: query head h reads K/V head h / (H / Hkv); causal alignment top-left.
//
// The pipelines (wgmma.cuh holds the TMA, mbarrier and descriptor helpers, wgmma_softmax.cuh the softmax step):
//  cp.async                    every thread copies K/V (double-buffered), two block barriers per tile.
//  tma                         one thread issues TMA copies into a 2-stage ring of mbarriers; one barrier per tile.
//  tma-ws                      a producer warpgroup (setmaxnreg 24 or 32) fills a 2-3 stage ring with full/empty
//                              mbarriers; consumer warpgroups (240 or 160 registers) release a stage when done.
//  tma-ws-overlap              + each consumer issues S_t and O += P_{t-1} V_{t-1} together and runs the softmax of
//                              S_t while the P V product runs (FlashAttention-3's intra-warpgroup overlap).
//  tma-ws-pingpong             + consumers take turns to issue their products (named barriers), so one's softmax
//                              runs under the other's GEMMs.
//  tma-ws-persistent[-pingpong]  one block per SM loops over tiles taken from a global counter (zeroed by the
//                              caller), two Q buffers, the K/V ring running on across tiles.
// In every warp-specialised pipeline a block visits its K/V tiles last to first: the one tile that can cross Nk or
// the diagonal is computed first (masked if needed) and the overlapped loop runs unmasked; a consumer whose rows
// all lie past Nq only releases stages and passes its turns. Option `tail` ("auto", persistent pipelines): not
// causal, the last round's query blocks are split into 128-row tiles by a list-scheduling plan
// (_ops._wg_tail_plan); causal, heads are dealt in groups whose K/V fit in 16 MiB of L2, heaviest tiles first.
// Limits: sm_90a only; D = 64 or 128; one block per SM for the warp-specialised tiles; 192x128 runs without the
// overlap at D = 128 (registers). Defaults, measurements and design notes: docs/kernels.md, docs/results.md.
#include "wgmma.cuh"
#include "wgmma_softmax.cuh"

namespace fk {

// ------------------------------------------------------------------------------ one warpgroup's tile

// Issue S = Q_i K_j^T for one warpgroup's 64 rows (no wait): dQ the descriptor of its rows of the
// [BM][D] Q tile, dK of the [BN][D] K tile. k-step kd reads columns 16 kd .. of column block kd / 4
// (32 bytes per k-step inside a 128-byte row).
template <typename T, int D, int BM, int BN>
__device__ __forceinline__ void issue_scores(float (&s)[BN / 2], uint64_t dQ, uint64_t dK) {
  fence_regs(s);
  wgmma_fence();
  wgmma_kmajor_ss<T, BN, D, BM, BN>(s, dQ, dK);
  wgmma_commit();
}

// P (fp32 in s) as the A fragments of O += P V: the accumulators of 8-column blocks 2 kk and
// 2 kk + 1 are the A fragment of k-step kk.
template <typename T, int BN>
__device__ __forceinline__ void pack_p(const float (&s)[BN / 2], uint32_t (&pf)[BN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    pf[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
    pf[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
    pf[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
    pf[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

// softmax_scores, then P packed into pf.
template <typename T, int BN>
__device__ __forceinline__ bool softmax_tile(float (&s)[BN / 2], uint32_t (&pf)[BN / 16][4], float (&m)[2],
                                             float (&l)[2], float (&alpha)[2], int j0, int Nk, int causal,
                                             int wg_row0, int row0, int lane, float scale_log2) {
  const bool grew = softmax_scores<BN>(s, m, l, alpha, j0, Nk, causal, wg_row0, row0, lane, scale_log2);
  pack_p<T, BN>(s, pf);
  return grew;
}

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

  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
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

  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
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

// ------------------------------------------------------------------------------ step 3: warp specialization

// Shared memory of the warp-specialized kernel: QBUF Q tiles, the K/V ring, 1 KB of slack for the
// 1024-byte alignment of the SW128 tiles, the mbarriers.
template <int D, int BM, int BN, int QBUF, int STAGES>
constexpr int ws_smem() {
  return (QBUF * BM * D + 2 * STAGES * BN * D) * 2 + 1024 + 8 * (2 * QBUF + 4 * STAGES) + 4 * QBUF;
}
// K/V stages of the warp-specialized kernel: 3 where the shared memory of a block (227 KB) holds
// them, else 2.
template <int D, int BM, int BN, int QBUF = 1>
constexpr int ws_stages() {
  return ws_smem<D, BM, BN, QBUF, 3>() <= 227 * 1024 ? 3 : 2;
}
// Q buffers of the persistent kernel: two (the next tile's Q loads during this one's epilogue) where a
// 3-stage ring still fits beside them, else one where that buys the third stage (128x128 at D = 128), else two.
template <int D, int BM, int BN>
constexpr int ws_persistent_qbuf() {
  return ws_stages<D, BM, BN, 2>() == 3 || ws_stages<D, BM, BN, 1>() == 2 ? 2 : 1;
}

// Query tiles of one head: main_qb whole BM-row blocks, then (main_qb < ceil(Nq / BM)) the rows after them in
// tiles of BM - 64 rows (tail tiles, below). The launcher sizes the grid with it, the kernel deals tiles by it.
template <int BM>
__host__ __device__ __forceinline__ int tail_tiles_per_head(int Nq, int main_qb) {
  return main_qb * BM < Nq ? (Nq - main_qb * BM + BM - 65) / (BM - 64) : 0;
}

// Causal, tail "auto" (step 8): the heads are dealt in groups of this many, as many as have their K and V within
// 16 MiB (a third of an H100's L2), at least one; each group's tiles heaviest first across its heads.
__host__ __device__ __forceinline__ int causal_head_group(int Nk, int D, int elem_bytes, int batch_heads) {
  const long per_head = 2L * Nk * D * elem_bytes;
  const long g = (16L << 20) / (per_head > 0 ? per_head : 1);
  return int(g < 1 ? 1 : g > batch_heads ? batch_heads : g);
}

// Warpgroup 0 is the producer (one thread issues every copy), warpgroups 1 .. NWG the consumers
// (64 query rows each). Barriers per stage: full_k / full_v (the copy engine's bytes landed; one
// arrival, the producer's expect_tx) and empty_k / empty_v (NWG arrivals, one per consumer
// warpgroup once its wgmma reading the stage has completed). OVERLAP: a consumer issues S_t =
// Q K_t^T and O += P_{t-1} V_{t-1} back to back and runs the softmax of S_t while the second is in
// flight (FlashAttention-3's intra-warpgroup pipelining). PINGPONG: the consumer warpgroups take turns
// to issue their wgmma (FlashAttention-3's inter-warpgroup "ping-pong"): warpgroup c waits at named
// barrier kSchedBar + c for its turn, issues the tile's products and arrives at the next warpgroup's
// barrier, so the tensor cores run one warpgroup's GEMMs while the other does its softmax.
constexpr int kSchedBar = 4;  // named barriers 4 .. 4 + NWG - 1 (1 .. NWG: store_rows; 0: __syncthreads)
template <typename T, int D, int BM, int BN, int STAGES, bool OVERLAP, bool PINGPONG = false, int QBUF = 1,
          bool PERSIST = false>
__global__ void __launch_bounds__((BM / 64 + 1) * 128, 1)
flash_wgmma_ws_forward_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                              const __grid_constant__ CUtensorMap tmV, T* __restrict__ O, float* __restrict__ LSE,
                              Dims dm, int batch_heads, float scale_log2, int causal,
                              int* __restrict__ next_tile, int main_qb) {
  static_assert(BM % 64 == 0 && (BN == 64 || BN == 128) && (D == 64 || D == 128), "tile shape");
  static_assert(STAGES >= 2 && (QBUF == 1 || (QBUF == 2 && PERSIST)), "K/V ring, Q buffers");
  constexpr int NWG = BM / 64;  // consumer warpgroups
  constexpr int KB = BN / 16, NS = BN / 2, NO = D / 2;
  constexpr uint32_t TQ = BM * D * 2, TKV = BN * D * 2;
  // the register file (64 K) split: 128 producer threads x PRODUCER_REGS + NWG x 128 x CONSUMER_REGS
  constexpr int PRODUCER_REGS = NWG == 2 ? 24 : 32, CONSUMER_REGS = NWG == 2 ? 240 : 160;
  static_assert(128 * PRODUCER_REGS + NWG * 128 * CONSUMER_REGS <= 65536, "register split");
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sQ = (raw + 1023u) & ~1023u;    // [QBUF][BM][D]
  const uint32_t sK = sQ + QBUF * TQ;            // [STAGES][BN][D]
  const uint32_t sV = sK + STAGES * TKV;         // [STAGES][BN][D]
  // mbarriers: full_q, empty_q [QBUF]; full_k, full_v, empty_k, empty_v [STAGES]
  const uint32_t full_q = sV + STAGES * TKV, empty_q = full_q + 8 * QBUF;
  const uint32_t full_k = empty_q + 8 * QBUF, full_v = full_k + 8 * STAGES;
  const uint32_t empty_k = full_v + 8 * STAGES, empty_v = empty_k + 8 * STAGES;
  uint8_t* const smem = smem_raw + (sQ - raw);
  // persistent: the work tile of each Q buffer, written by the producer before the buffer's full_q arrival
  // (release), read by the consumers after their wait on it (acquire); -1: no more work
  volatile int* const sTile = reinterpret_cast<volatile int*>(smem + (empty_v + 8 * STAGES - sQ));

  const int tid = threadIdx.x, wg = tid >> 7;
  const int Nq = dm.Nq, Nk = dm.Nk;
  // Work tiles (head bh, query block j) in the order a 2-D grid (query blocks x heads) would launch them,
  // heaviest query block of a head first when causal; consecutive tiles share a head's K/V (L2 reuse). One
  // block per tile, or (PERSIST) one block per SM taking tile blockIdx.x first and then the
  // next one not yet taken, from the global counter *next_tile (zero at launch), as the hardware's block
  // scheduler would: whichever SM is free takes the next tile. A fixed deal of tiles b, b + gridDim.x, ...
  // left 14 % of the SMs' cycles idle at the end (H100, D = 128, N = 4096), and dealing causal tiles
  // heaviest-first over all heads balanced them at 5.6x the DRAM traffic.
  // Tail tiles (PERSIST, not causal; main_qb < n_qb, chosen by the host): each head's first main_qb query
  // blocks are BM-row tiles as above; the rows after them are cut into tiles of BM - 64 rows (one consumer
  // warpgroup idle), all heads' handed out after every BM-row tile, so that the last work the SMs take is
  // short and they finish closer together (flash_kernels/_ops.py: _wg_tail_plan). The tail visits the heads
  // last to first: the last heads' K/V are the likeliest still in L2.
  constexpr int TB = BM - 64;
  const int n_qb = (Nq + BM - 1) / BM;
  const int n_tail = tail_tiles_per_head<BM>(Nq, main_qb);
  const int n_main = main_qb * batch_heads, n_tiles = n_main + n_tail * batch_heads;
  // causal (truthy): 2 = step 8's head groups (tail "auto"; cg heads per group, below), 1 = one head after another
  auto tile_of = [&](int i, int& bh, int& q0, int& n_kv, int& q_end) {
    if (i < n_main) {
      if (causal) {  // group g of gh heads: its j-th heaviest query block of each head, then the (j+1)-th
        const int cg = causal > 1 ? causal_head_group(Nk, D, int(sizeof(T)), batch_heads) : 1;
        const int g = i / (cg * main_qb), gh = min(cg, batch_heads - g * cg);
        const int r = i - g * cg * main_qb, j = r / gh;
        bh = g * cg + (r - j * gh);
        q0 = (n_qb - 1 - j) * BM;
      } else {
        bh = i / main_qb;
        q0 = (i - bh * main_qb) * BM;
      }
      q_end = q0 + BM;
    } else {
      const int k = i - n_main, r = k / n_tail;
      bh = batch_heads - 1 - r;
      q0 = main_qb * BM + (k - r * n_tail) * TB;
      q_end = q0 + TB;
    }
    const int kv_len = causal ? min(Nk, q0 + BM) : Nk;
    n_kv = (kv_len + BN - 1) / BN;
  };

  if (tid == 0) {
#pragma unroll
    for (int b = 0; b < QBUF; ++b) {
      mbar_init(full_q + 8 * b, 1);
      mbar_init(empty_q + 8 * b, NWG * 128);  // every consumer thread, after its last read of the tile
    }
    mbar_init_kv_ring<STAGES>(full_k, full_v, empty_k, empty_v, NWG);
    mbar_init_fence();
  }
  __syncthreads();  // the last block-wide barrier: from here on the roles meet only on mbarriers

  if (wg == 0) {
    // ---------------------------------------------------------------- producer
    setmaxnreg_dec<PRODUCER_REGS>();
    if (tid == 0) {
      tma_prefetch_map(&tmQ);
      tma_prefetch_map(&tmK);
      tma_prefetch_map(&tmV);
      int st = 0, loaded = 0;  // the ring runs on across work tiles: stage, K/V tiles issued so far
      uint32_t ph = 0;         // parity of the current phase of stage st's barriers: (loaded / STAGES) & 1
      int it = 0;
      // PERSIST with one Q buffer: a work tile's first K/V tiles (up to STAGES) are issued before its Q, whose
      // buffer frees only after the previous tile's epilogue; the ring's stages free while the consumers finish
      // that tile, so the next tile's K/V is in flight when they start it. Otherwise Q first.
      constexpr bool Q_LATE = PERSIST && QBUF == 1;
      for (int i = blockIdx.x;; ++it) {
        const int qb = it % QBUF;
        if (!PERSIST && i >= n_tiles) break;  // one tile per block
        // Q buffer qb is free once every consumer has stored the rows it staged there (work tile it - QBUF)
        auto wait_q_free = [&] {
          if (it >= QBUF) mbar_wait(empty_q + 8 * qb, ((it / QBUF) & 1) ^ 1);
        };
        if (i >= n_tiles) {
          wait_q_free();
          if constexpr (PERSIST) {  // tell the consumers there is no more work
            sTile[qb] = -1;
            mbar_arrive(full_q + 8 * qb);
          }
          break;
        }
        int bh, q0, n_kv, q_end;
        tile_of(i, bh, q0, n_kv, q_end);
        const int kvh = int(dm.kv_head(bh));
        auto load_q = [&] {
          wait_q_free();
          if constexpr (PERSIST) sTile[qb] = i;
          mbar_arrive_expect_tx(full_q + 8 * qb, TQ);
          tma_load_tile<D, BM>(sQ + qb * TQ, &tmQ, full_q + 8 * qb, q0, bh);
        };
        if constexpr (!Q_LATE) load_q();
        const int q_at = Q_LATE ? min(STAGES, n_kv) : -1;  // K/V tiles issued before Q
        for (int t = n_kv - 1, n = 0; t >= 0; --t, ++n, ++loaded) {  // last K/V tile first (the consumers' order)
          if (Q_LATE && n == q_at) load_q();
          // refilling stage st waits for its release of the tile STAGES loads ago (the previous phase)
          if (loaded >= STAGES) mbar_wait(empty_k + 8 * st, ph ^ 1);
          mbar_arrive_expect_tx(full_k + 8 * st, TKV);
          tma_load_tile<D, BN>(sK + st * TKV, &tmK, full_k + 8 * st, t * BN, kvh);
          if (loaded >= STAGES) mbar_wait(empty_v + 8 * st, ph ^ 1);
          mbar_arrive_expect_tx(full_v + 8 * st, TKV);
          tma_load_tile<D, BN>(sV + st * TKV, &tmV, full_v + 8 * st, t * BN, kvh);
          if (++st == STAGES) {
            st = 0;
            ph ^= 1;
          }
        }
        if (Q_LATE && q_at == n_kv) load_q();  // n_kv <= STAGES
        i = PERSIST ? int(gridDim.x) + atomicAdd(next_tile, 1) : n_tiles;
      }
    }
  } else {
    // ---------------------------------------------------------------- consumers
    setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1, t128 = tid & 127, warp = t128 >> 5, lane = tid & 31;
    const uint64_t dK = desc_kmajor(sK);
    const uint64_t dV = desc_mnmajor(sV, BN * 128);
    // one arrival per warpgroup: its wgmma reading the stage have completed (wgmma_wait)
    auto release = [&](uint32_t bar) { mbar_arrive_if(bar, t128 == 0); };
    // ping-pong turns: every consumer warpgroup takes exactly n_kv turns per work tile (one per K/V tile,
    // the causal tiles after its rows included, with nothing issued), so the rotation never waits for a
    // warpgroup that has finished; each barrier meets 128 waiting and 128 arriving threads
    auto turn_wait = [&] {
      if constexpr (PINGPONG) bar_sync(kSchedBar + c, 256);
    };
    auto turn_pass = [&] {
      if constexpr (PINGPONG) bar_arrive(kSchedBar + (c + 1 == NWG ? 0 : c + 1), 256);
    };
    if constexpr (PINGPONG) {
      if (c == 0) bar_arrive(kSchedBar, 256);  // the first turn is warpgroup 1's
    }
    int st = 0;  // the ring, as the producer runs it: stage and phase parity of the next K/V tile
    uint32_t ph = 0;
    // S = Q K^T of the K tile in stage st, waited for (its stage released): the first tile of the
    // overlapped loop and every tile of the plain one
    auto scores_waited = [&](float (&s)[NS], uint64_t dQ) {
      mbar_wait(full_k + 8 * st, ph);
      turn_wait();
      issue_scores<T, D, BM, BN>(s, dQ, desc_add(dK, st * TKV));
      turn_pass();
      wgmma_wait<0>();
      fence_regs(s);
      release(empty_k + 8 * st);
    };
    auto advance = [&] {
      if (++st == STAGES) {
        st = 0;
        ph ^= 1;
      }
    };
    for (int it = 0;; ++it) {
      const int qb = it % QBUF;
      int i = int(blockIdx.x);
      if constexpr (PERSIST) {
        mbar_wait(full_q + 8 * qb, (it / QBUF) & 1);
        i = sTile[qb];
        if (i < 0) break;
      } else if (it > 0) {
        break;
      }
      int bh, q0, n_kv, q_end;
      tile_of(i, bh, q0, n_kv, q_end);
      const int wg_row0 = q0 + c * 64;
      const int row0 = wg_row0 + warp * 16 + (lane >> 2);
      // causal: tiles from n_wg on start after this warpgroup's last row and contribute nothing; a warpgroup
      // whose rows all lie past Nq (the last query block of a ragged Nq: at N = 4096 the 22nd 192-row block holds
      // 64 rows) or past its tile's (a tail tile's last 64) computes none (n_wg = 0) and only keeps the ring's
      // phases and the turns in step
      const int n_wg = wg_row0 >= Nq || wg_row0 >= q_end ? 0 : causal ? min(n_kv, (wg_row0 + 64 + BN - 1) / BN) : n_kv;
      const uint64_t dQ = desc_kmajor(sQ + qb * TQ + c * 64 * 128);

      float o[NO];
#pragma unroll
      for (int k = 0; k < NO; ++k) o[k] = 0.f;
      float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

      if constexpr (!PERSIST) mbar_wait(full_q, 0);
      // K/V tiles last to first, as the producer loads them. Causal: the tiles after this warpgroup's rows
      // (t >= n_wg) come first; nothing to compute, but each stage is released in its turn, after it has been
      // filled (so no warpgroup arrives twice on one phase). Then tile n_wg - 1, the only one that can reach
      // past Nk or the diagonal (n_wg - 1 = floor((last row) / BN) and rows start at multiples of 64, so every
      // key of an earlier tile is at most the warpgroup's first row), masked if it needs it; then the rest
      // without a mask.
      release_kv_unread(n_kv - n_wg, full_k, full_v, empty_k, empty_v, st, ph, turn_wait, turn_pass, release, advance);
      if constexpr (!OVERLAP) {
        for (int t = n_wg - 1; t >= 0; --t) {
          uint32_t pf[KB][4];
          {
            float s[NS];
            scores_waited(s, dQ);
            float alpha[2];
            if (softmax_tile<T, BN>(s, pf, m, l, alpha, t * BN, Nk, causal, wg_row0, row0, lane, scale_log2))
              rescale_o(o, alpha);
          }
          mbar_wait(full_v + 8 * st, ph);
          issue_pv<T, D, BN>(o, pf, desc_add(dV, st * TKV));
          wgmma_wait<0>();
          fence_regs(o);
          release(empty_v + 8 * st);
          advance();
        }
      } else if (n_wg > 0) {
        // P_{t+1} (in pf) waits for V_{t+1} in stage vst while S_t is computed
        uint32_t pf[KB][4];
        {
          float s[NS];
          scores_waited(s, dQ);
          float alpha[2];
          softmax_scores<BN>(s, m, l, alpha, (n_wg - 1) * BN, Nk, causal, wg_row0, row0, lane,
                             scale_log2);  // O = 0: no rescale
          pack_p<T, BN>(s, pf);
        }
        int vst = st;
        uint32_t vph = ph;
        advance();
        // One tile t < n_wg - 1: no mask (see above). Between wgmma_wait<1> and wgmma_wait<0> the code must not
        // branch: ptxas then waits for every wgmma before the branch (seen in the SASS: WARPGROUP.DEPBAR.LE gsb0,
        // 0x0 right after 0x1), and the softmax no longer overlaps O += P V. Hence the predicated arrival. S is a
        // fresh array per tile (not loop-carried).
        for (int t = n_wg - 2; t >= 0; --t) {
          float s[NS];
          mbar_wait(full_k + 8 * st, ph);
          turn_wait();
          issue_scores<T, D, BM, BN>(s, dQ, desc_add(dK, st * TKV));  // S_t
          mbar_wait(full_v + 8 * vst, vph);
          issue_pv<T, D, BN>(o, pf, desc_add(dV, vst * TKV));         // O += P_{t+1} V_{t+1}
          turn_pass();
          wgmma_wait<1>();                                            // S_t done, O += P V in flight
          fence_regs(s);
          release(empty_k + 8 * st);
          float alpha[2];
          const bool grew =
              softmax_scores<BN, kMaskNever>(s, m, l, alpha, t * BN, Nk, causal, wg_row0, row0, lane, scale_log2);
          fence_regs(s);  // the softmax is computed here, while O += P V runs, not sunk past the wait
          fence_regs(l);
          fence_regs(alpha);
          wgmma_wait<0>();
          fence_regs(o);
#pragma unroll
          for (int kk = 0; kk < KB; ++kk) fence_regs(pf[kk]);  // P_{t+1} is read until here
          release(empty_v + 8 * vst);
          if (grew) rescale_o(o, alpha);
          pack_p<T, BN>(s, pf);
          vst = st;
          vph = ph;
          advance();
        }
        mbar_wait(full_v + 8 * vst, vph);
        issue_pv<T, D, BN>(o, pf, desc_add(dV, vst * TKV));
        wgmma_wait<0>();
        fence_regs(o);
        release(empty_v + 8 * vst);
      }
      // writes no row past Nq or the tile's rows
      store_rows<T, D, BM>(o, m, l, smem + qb * TQ, c * 64, 1 + c, wg_row0, Nq, bh, O, LSE, scale_log2, q_end);
      // the Q buffer goes back to the producer: this thread's generic reads and writes of it are
      // ordered before the copy engine's next writes (proxy fence), then one arrival per thread
      fence_proxy_async();
      mbar_arrive(empty_q + 8 * qb);
    }
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
  const int main_qb = PERSISTENT && !a.causal && (a.option >> 8) > 0 ? std::min((a.option >> 8) - 1, n_qb) : n_qb;
  // causal: option bits 8.. non-zero = step 8's head groups (the kernel's causal argument 2)
  const int causal = a.causal ? ((a.option >> 8) > 0 ? 2 : 1) : 0;
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

// Pipeline codes (option bits 4..7) as flash_kernels/_ops.py names them: 0 = cp.async, 1 = tma,
// 2 = tma-ws, 3 = tma-ws-overlap, 4 = tma-ws-pingpong, 5 = tma-ws-persistent,
// 6 = tma-ws-persistent-pingpong. Bits 8..: the persistent pipelines' main query blocks per head + 1 (0: all);
// causal, the tma-ws pipelines: non-zero = step 8's head groups.
template <typename T, int D, int BM, int BN>
cudaError_t wgmma_forward_pipeline(const AttnArgs& a, cudaStream_t stream) {
  switch ((a.option >> 4) & 15) {
    case 0: return wgmma_forward_launch<T, D, BM, BN>(a, stream);
    case 1: return wgmma_tma_forward_launch<T, D, BM, BN>(a, stream);
    case 2: return wgmma_ws_forward_launch<T, D, BM, BN, false>(a, stream);
    case 3: return wgmma_ws_forward_launch<T, D, BM, BN, true>(a, stream);
    case 4: return wgmma_ws_forward_launch<T, D, BM, BN, true, true>(a, stream);
    case 5: return wgmma_ws_forward_launch<T, D, BM, BN, true, false, true>(a, stream);
    case 6: return wgmma_ws_forward_launch<T, D, BM, BN, true, true, true>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

// The tile table: tile code (option & 15) -> (query rows BM = 64 per warpgroup, keys per K/V tile BN).
// Codes as flash_kernels/_ops.py names them: 0 = 128x128, 1 = 128x64, 2 = 192x128, 3 = 192x64.
template <typename T, int D>
cudaError_t wgmma_forward_tiles(const AttnArgs& a, cudaStream_t stream) {
  switch (a.option & 15) {
    case 0: return wgmma_forward_pipeline<T, D, 128, 128>(a, stream);
    case 1: return wgmma_forward_pipeline<T, D, 128, 64>(a, stream);
    case 2: return wgmma_forward_pipeline<T, D, 192, 128>(a, stream);
    case 3: return wgmma_forward_pipeline<T, D, 192, 64>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fk

int flash_wgmma_forward(const fk::AttnArgs& a, cudaStream_t stream) {
  return fk::dispatch_dtype_hdim</*fp32=*/false>(a, [&](auto t, auto d) {
    return fk::wgmma_forward_tiles<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
