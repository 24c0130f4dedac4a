// flash_wgmma FP8 forward (sm_90a): attention over e4m3 Q, K, V with per-tensor or per-block scales, on wgmma's
// 8-bit path (m64nNk32 e4m3 x e4m3 -> fp32: twice the 16-bit dense rate on Hopper), output fp16 or bf16.
//
// The arrangement is flash_wgmma's warp-specialised forward (flash_wgmma_fwd.cu): a producer warpgroup issues
// every TMA copy into a ring of full/empty mbarriers; two consumer warpgroups of 64 rows (BM = BN = 128) issue
// S_t = Q K_t^T and O += P_{t-1} V_{t-1} together and run the softmax of S_t under O += P V; at D = 128 they also
// take turns (ping-pong). K/V tiles go last to first; the consumers run the shared OverlapMainloop
// (wgmma_fwd_consumer.cuh) with the e4m3 operands below. What differs from the 16-bit kernels:
// - 8-bit operands must be K-major: V arrives transposed, Vt [B * Hkv][D][Nk rounded up to 32] (fp8.py).
// - P goes to registers as the A operand of O += P V (P in [0, 1]: e4m3, no scale). The keys of every 32-key group
//   are permuted so that S's accumulators are P's A fragments (A slot 16 hh + 4 t + i of k-step kk holds key
//   32 kk + 16 hh + 8 (i >> 1) + 2 t + (i & 1)); Vt's columns are in the same order. Masks use the true key.
// - Scales (option scales), fp32 on the device (a caller never syncs). Per tensor: dq * dk joins the softmax's
//   exp2 scale, dv multiplies O at the end. Per block (FlashAttention-3's block quantization, one descale per 128
//   rows of each plane = the tile): Q's block descale joins the exp2 scale; K tile t's is the factor of S_t, so the
//   running max is kept in exp2 units (softmax_scores' SCALED_M); V tile t's multiplies P_t V_t as it is added.
//   The producer writes each tile's {dk, dv} beside its ring stage in shared memory (BlockScaledRows); every
//   consumer thread releases the K stage it read them from. v_mean: V's mean row added to O in the epilogue (V
//   centred before quantization, flash_kernels/fp8.py center_v).
// - O's sum over the tiles (option o_sum). fp32 (default at D = 64, 128): each P_t V_t lands in a fresh accumulator and the CUDA
//   cores add it, because the FP8 tensor cores' sums keep fewer bits than fp32; the fresh accumulator's 64
//   registers (D = 128) leave ptxas no room to run the softmax under O += P V. tensor: O += P V in the accumulator
//   (FlashAttention-3's way), O kept in the units of the V tile being added (rescaled by alpha * sv_done / sv_next
//   with the softmax's rescale); faster by little, less accurate on long rows unless V is centred (docs/kernels.md;
//   center_v, the default with this sum); the only sum at D = 256, where a fresh accumulator beside O would take
//   256 registers per thread.
// - Q and K rows are D bytes (128-byte swizzle at D = 128, 64-byte at D = 64; at D = 256 two 128-byte column
//   blocks, two TMA boxes each); Vt rows 128 bytes; O staged apart.
// - Option exp_on_fma: part of the exponentials by a polynomial on the FMA units (wgmma_softmax.cuh), not default.
// Limits: forward only; sm_90a; D = 64, 128 or 256; the softmax, not the tensor cores, sets the pace (docs/kernels.md).
#include "wgmma_fwd_consumer.cuh"
#include "wgmma_fwd_epilogue.cuh"
#include "option_codes.h"

namespace fk {

constexpr int kFp8BM = 128, kFp8BN = 128, kFp8Stages = 4;
static_assert(kFp8BM == codes::flash_wgmma_fp8::kScaleBlock && kFp8BN == codes::flash_wgmma_fp8::kScaleBlock,
              "a descale block is one Q block and one K/V tile");

// Two fp32 -> two e4m3 (round to nearest, saturating to +-448): lo in the low byte.
__device__ __forceinline__ uint32_t cvt_e4m3x2(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// P (fp32 in s, S's accumulator layout) as the e4m3 A fragments of O += P V, in the permuted key order
// above: register r = 2 hh + h of k-step kk holds row h's keys from 8-column blocks 4 kk + 2 hh and
// 4 kk + 2 hh + 1 (two each).
template <int BN>
__device__ __forceinline__ void pack_p_e4m3(const float (&s)[BN / 2], uint32_t (&pf)[BN / 32][4]) {
#pragma unroll
  for (int kk = 0; kk < BN / 32; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int j = 4 * kk + 2 * (r >> 1), h = r & 1;
      pf[kk][r] = cvt_e4m3x2(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]) |
                  (cvt_e4m3x2(s[4 * j + 4 + 2 * h], s[4 * j + 4 + 2 * h + 1]) << 16);
    }
}

// The K-major descriptor of a tile whose rows are ROW_BYTES (128: SW128, 64: SW64) long; rows of 256 bytes are
// two SW128 column blocks of 128 bytes (each a [rows][128] tile, one after the other).
template <int ROW_BYTES>
__device__ __forceinline__ uint64_t desc_rows(uint32_t addr) {
  static_assert(ROW_BYTES == 256 || ROW_BYTES == 128 || ROW_BYTES == 64, "e4m3 rows of 64, 128 or 256 bytes");
  if constexpr (ROW_BYTES >= 128) return desc_kmajor(addr);
  else return desc_kmajor_sw64(addr);
}

// Issue S = Q K_t^T (no wait): D / 32 k-steps of 32 bytes inside the rows; k-step kd reads column block kd / 4
// (D = 256: Q's blocks are QROWS * 128 bytes apart, K's BN * 128).
template <int D, int BN, int QROWS>
__device__ __forceinline__ void issue_scores_e4m3(float (&s)[BN / 2], uint64_t dQ, uint64_t dK) {
  fence_regs(s);
  wgmma_fence();
#pragma unroll
  for (int kd = 0; kd < D / 32; ++kd) {
    const uint32_t off = (kd & 3) * 32, cb = kd >> 2;
    wgmma_ss_e4m3<BN>(s, desc_add(dQ, cb * (QROWS * 128) + off), desc_add(dK, cb * (BN * 128) + off), kd > 0);
  }
  wgmma_commit();
}

// Issue O_t = P V_t (no wait): BN / 32 k-steps of 32 keys, 32 bytes inside Vt's 128-byte rows. ACC false: into
// a fresh accumulator, which the caller adds to O in fp32 (o_sum = fp32: the tensor cores' FP8 sums are not full
// fp32, so they are kept short); ACC true: added to the accumulator in place (o_sum = tensor).
template <int D, int BN, bool ACC = false>
__device__ __forceinline__ void issue_pv_e4m3(float (&ot)[D / 2], uint32_t (&pf)[BN / 32][4], uint64_t dV) {
#pragma unroll
  for (int kk = 0; kk < BN / 32; ++kk) fence_regs(pf[kk]);
  fence_regs(ot);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < BN / 32; ++kk) wgmma_rs_e4m3<D>(ot, pf[kk], desc_add(dV, kk * 32), ACC || kk > 0);
  wgmma_commit();
}

// O += O_t * sv in fp32 registers (sv: V tile t's descale per block, 1 per tensor).
template <int NO>
__device__ __forceinline__ void add_o(float (&o)[NO], const float (&ot)[NO], float sv) {
#pragma unroll
  for (int i = 0; i < NO; ++i) o[i] = fmaf(ot[i], sv, o[i]);
}

// The rows of a warpgroup with a descale per K and V block (option scales = block): sl2 = the softmax's exp2
// scale times Q's block descale; the producer writes each K/V tile's two descales {dk, dv} (8 bytes per ring
// stage, at scl) before it arrives on the stage's K barrier, so a consumer reads them from shared memory once the
// K stage is full (no pointers or global loads held in the consumers' registers). m is kept in exp2 units
// (SCALED_M). Every consumer thread arrives on the K stage's empty barrier (ConsumerRing's K_PER_THREAD), so that
// each thread's read here is ordered before the producer's next write to the slot.
struct BlockScaledRows {
  static constexpr bool kScalesPerTile = true;  // read from the stage: the mainloop waits for it first
  int Nk, causal, wg_row0, row0, lane;
  float sl2;
  uint32_t scl;
  __device__ __forceinline__ void tile_scales(int st, float& sk, float& sv) const {
    float k;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(k), "=f"(sv) : "r"(scl + 8 * st));
    sk = sl2 * k;
  }
  __device__ __forceinline__ float lse_scale() const { return 1.f; }
  template <int BN, MaskMode MASK, int EMU>
  __device__ __forceinline__ bool apply(float (&s)[BN / 2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                        int j0, float sk) const {
    return softmax_scores<BN, MASK, EMU, true>(s, m, l, alpha, j0, Nk, causal, wg_row0, row0, lane, sk);
  }
};

// The e4m3 operands of the shared consumer loop (wgmma_fwd_consumer.cuh: OverlapMainloop): K [BN][D] and Vt
// [D][BN] both K-major, the softmax's exponentials split as EMU says. What the two ways of summing O share:
template <int D, int BN_, int EMU_, int QROWS>
struct E4m3Operands {
  static constexpr int BN = BN_, NS = BN / 2, NO = D / 2, KB = BN / 32, EMU = EMU_;
  static constexpr uint32_t TK = BN * D, TV = D * BN;  // stage bytes
  using Frag = uint32_t[KB][4];
  uint64_t dK, dV;  // stage 0
  __device__ __forceinline__ E4m3Operands(uint32_t sK, uint32_t sV) : dK(desc_rows<D>(sK)), dV(desc_kmajor(sV)) {}
  __device__ __forceinline__ void scores(float (&s)[NS], uint64_t dQ, int st) const {
    issue_scores_e4m3<D, BN, QROWS>(s, dQ, desc_add(dK, st * TK));
  }
  __device__ __forceinline__ static void pack(const float (&s)[NS], Frag& pf) { pack_p_e4m3<BN>(s, pf); }
};

// o_sum = fp32: P V_t into the fresh accumulator ot, added to O in fp32 once its stage is released (sv: the V
// tile's descale, 1 per tensor).
template <int D, int BN_, int EMU_, int QROWS>
struct WgmmaE4m3 : E4m3Operands<D, BN_, EMU_, QROWS> {
  using Base = E4m3Operands<D, BN_, EMU_, QROWS>;
  using typename Base::Frag;
  using Base::Base;
  static constexpr int NO = Base::NO;
  float ot[NO];  // O_t = P_t V_t of one tile from the tensor cores
  __device__ __forceinline__ void pv(float (&)[NO], Frag& pf, int st) {
    issue_pv_e4m3<D, Base::BN>(ot, pf, desc_add(this->dV, st * Base::TV));
  }
  __device__ __forceinline__ void pv_landed(float (&)[NO]) { fence_regs(ot); }
  __device__ __forceinline__ void after_pv(float (&o)[NO], const float (&alpha)[2], bool grew, float sv, float) {
    add_o(o, ot, sv);
    if (grew) rescale_o(o, alpha);
  }
  __device__ __forceinline__ void last_pv(float (&o)[NO], float sv) { add_o(o, ot, sv); }
};

// o_sum = tensor: O += P V_t in the accumulator itself, O kept in the units of the V tile being added (sv: that
// tile's descale, 1 per tensor).
template <int D, int BN_, int EMU_, int QROWS>
struct WgmmaE4m3InPlace : E4m3Operands<D, BN_, EMU_, QROWS> {
  using Base = E4m3Operands<D, BN_, EMU_, QROWS>;
  using typename Base::Frag;
  using Base::Base;
  static constexpr int NO = Base::NO;
  __device__ __forceinline__ void pv(float (&o)[NO], Frag& pf, int st) {
    issue_pv_e4m3<D, Base::BN, true>(o, pf, desc_add(this->dV, st * Base::TV));
  }
  __device__ __forceinline__ void pv_landed(float (&o)[NO]) { fence_regs(o); }
  // O in sv_done's units -> sv_next's, with the rescale for the new row max (alpha = 1 where it did not grow)
  __device__ __forceinline__ void after_pv(float (&o)[NO], const float (&alpha)[2], bool grew, float sv_done,
                                           float sv_next) {
    const float r = __fdividef(sv_done, sv_next);  // no IEEE division: its slow path is a branch in the loop
    if (grew || r != 1.f) {
      const float a[2] = {alpha[0] * r, alpha[1] * r};
      rescale_o(o, a);
    }
  }
  __device__ __forceinline__ void last_pv(float (&o)[NO], float sv) {
#pragma unroll
    for (int i = 0; i < NO; ++i) o[i] *= sv;
  }
};

template <int D, int STAGES>
constexpr int fp8_smem() {
  // Q, the K and Vt rings, O's staging (2 x 64 rows of 16-bit), 1 KB of alignment slack, the mbarriers, the
  // per-stage block descales {dk, dv}
  return kFp8BM * D + 2 * STAGES * kFp8BN * D + kFp8BM * D * 2 + 1024 + 8 * (1 + 4 * STAGES) + 8 * STAGES;
}

// One block per (query block of 128 rows, head); heaviest query block first when causal.
constexpr int kFp8TurnBar = 4;  // named barriers 4, 5: the ping-pong turns (1, 2: store_rows; 0: __syncthreads)
// Descales: BLOCK: dq [B * H][cdiv(Nq, 128)], dk and dv [B * Hkv][cdiv(Nk, 128)]; else one float each. v_mean: null,
// or fp32 [B * Hkv][D], V's mean row of each K/V plane, added to O's rows (V was centred before quantization).
template <typename TO, int D, int STAGES, int EMU, bool PINGPONG, bool BLOCK, bool TSUM>
__global__ void __launch_bounds__(3 * 128, 1)
flash_wgmma_fp8_forward_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                               const __grid_constant__ CUtensorMap tmV, TO* __restrict__ O, float* __restrict__ LSE,
                               Dims dm, const float* __restrict__ dq_s, const float* __restrict__ dk_s,
                               const float* __restrict__ dv_s, const float* __restrict__ v_mean, float scale_log2,
                               int causal) {
  constexpr int BM = kFp8BM, BN = kFp8BN, NWG = 2;
  constexpr int NO = D / 2;
  constexpr uint32_t TQ = BM * D, TK = BN * D, TV = D * BN, TSTAGE_O = 64 * D * 2;
  static_assert(D == 64 || D == 128 || D == 256, "head dim");
  static_assert(D != 256 || TSUM, "at D = 256 O is summed in the tensor cores (a fresh fp32 accumulator beside O would "
                                  "be 256 registers per thread)");
  constexpr int CB = D > 128 ? D / 128 : 1, CB_BYTES = D > 128 ? 128 : D;  // TMA column blocks of Q and K rows
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sQ = (raw + 1023u) & ~1023u;  // [BM][D] bytes
  const uint32_t sK = sQ + TQ;                 // [STAGES][BN][D]
  const uint32_t sV = sK + STAGES * TK;        // [STAGES][D][BN] (Vt)
  const uint32_t sO = sV + STAGES * TV;        // [2][64][D] 16-bit, SW128 (store_rows)
  const uint32_t full_q = sO + NWG * TSTAGE_O;
  const uint32_t full_k = full_q + 8, full_v = full_k + 8 * STAGES;
  const uint32_t empty_k = full_v + 8 * STAGES, empty_v = empty_k + 8 * STAGES;
  const uint32_t scl = empty_v + 8 * STAGES;  // [STAGES][2] fp32: the stage's K and V block descales (BLOCK)
  uint8_t* const smem = smem_raw + (sQ - raw);

  const int tid = threadIdx.x, wg = warpgroup_index();
  const int Nq = dm.Nq, Nk = dm.Nk;
  const int bh = blockIdx.y;
  const int kvh = int(dm.kv_head(bh));
  const int q0 = (causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x)) * BM;
  const int kv_len = causal ? min(Nk, q0 + BM) : Nk;
  const int n_kv = (kv_len + BN - 1) / BN;

  if (tid == 0) {
    mbar_init(full_q, 1);
    mbar_init_kv_ring<STAGES>(full_k, full_v, empty_k, empty_v, NWG, BLOCK ? NWG * 128 : NWG);
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {
    // ---------------------------------------------------------------- producer
    setmaxnreg_dec<24>();
    if (tid == 0) {
      tma_prefetch_map(&tmQ);
      tma_prefetch_map(&tmK);
      tma_prefetch_map(&tmV);
      mbar_arrive_expect_tx(full_q, TQ);
#pragma unroll
      for (int cb = 0; cb < CB; ++cb) tma_load_3d(sQ + cb * BM * CB_BYTES, &tmQ, full_q, cb * CB_BYTES, q0, bh);
      int st = 0;
      uint32_t ph = 0;
      const long kb = BLOCK ? long(kvh) * ((Nk + BN - 1) / BN) : 0;  // the K/V plane's first block descale
      for (int i = 0; i < n_kv; ++i) {
        const int t = n_kv - 1 - i;  // last K/V tile first (the consumers' order)
        float sk = 0.f, sv = 0.f;
        if constexpr (BLOCK) {  // loaded before the wait: in flight while the stage drains
          sk = __ldg(dk_s + kb + t);
          sv = __ldg(dv_s + kb + t);
        }
        if (i >= STAGES) mbar_wait(empty_k + 8 * st, ph ^ 1);
        if constexpr (BLOCK)  // read by the consumers after full_k (the arrival below releases this store)
          asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(scl + 8 * st), "f"(sk), "f"(sv) : "memory");
        mbar_arrive_expect_tx(full_k + 8 * st, TK);
#pragma unroll
        for (int cb = 0; cb < CB; ++cb)
          tma_load_3d(sK + st * TK + cb * BN * CB_BYTES, &tmK, full_k + 8 * st, cb * CB_BYTES, t * BN, kvh);
        if (i >= STAGES) mbar_wait(empty_v + 8 * st, ph ^ 1);
        mbar_arrive_expect_tx(full_v + 8 * st, TV);
        tma_load_3d(sV + st * TV, &tmV, full_v + 8 * st, t * BN, 0, kvh);
        if (++st == STAGES) {
          st = 0;
          ph ^= 1;
        }
      }
    }
  } else {
    // ---------------------------------------------------------------- consumers
    setmaxnreg_inc<240>();
    const int c = wg - 1, t128 = tid & 127, warp = t128 >> 5, lane = tid & 31;
    const int wg_row0 = q0 + c * 64;
    const int row0 = wg_row0 + warp * 16 + (lane >> 2);
    // rows all past Nq (the last block of a ragged Nq): no tile to compute (flash_wgmma_fwd.cu)
    const int n_wg = wg_row0 >= Nq ? 0 : causal ? min(n_kv, (wg_row0 + 64 + BN - 1) / BN) : n_kv;
    const uint64_t dQ = desc_rows<D>(sQ + c * 64 * CB_BYTES);  // the warpgroup's rows of column block 0
    std::conditional_t<TSUM, WgmmaE4m3InPlace<D, BN, EMU, BM>, WgmmaE4m3<D, BN, EMU, BM>> ops(sK, sV);
    // PINGPONG: the two consumers take turns to issue their products (as flash_wgmma_fwd.cu's tma-ws-pingpong)
    using Turns = std::conditional_t<PINGPONG, PingPongTurns<kFp8TurnBar, NWG>, NoTurns>;
    RingPos<STAGES> pos;
    // per-block scales read from the K stage by every thread: every thread releases the K stage
    ConsumerRing<STAGES, Turns, BLOCK> ring{KvRingBars{full_k, full_v, empty_k, empty_v}, Turns{c}, t128, pos};
    ring.turns.start();

    float o[NO];  // O in fp32
#pragma unroll
    for (int k = 0; k < NO; ++k) o[k] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    mbar_wait(full_q, 0);
    ring.skip(n_kv - n_wg);
    if (n_wg == 0) return;  // warpgroup-uniform; no block-wide barrier follows
    uint8_t* const stage = smem + (sO - sQ) + c * TSTAGE_O;
    const float* const mean = v_mean != nullptr ? v_mean + long(kvh) * D : nullptr;  // centred V: its mean row
    if constexpr (BLOCK) {
      const float dq = __ldg(dq_s + long(bh) * ((Nq + BM - 1) / BM) + q0 / BM);
      const BlockScaledRows rows{Nk, causal, wg_row0, row0, lane, scale_log2 * dq, scl};
      OverlapMainloop::tiles(ops, ring, o, m, l, dQ, n_wg, rows);
      store_rows<TO, D, 64, true>(o, m, l, stage, 0, 1 + c, wg_row0, Nq, bh, O, LSE, rows.lse_scale(), INT_MAX, mean);
    } else {
      const float sl2 = scale_log2 * __ldg(dq_s) * __ldg(dk_s);  // exp2 scale of the raw e4m3 dot products
      OverlapMainloop::tiles(ops, ring, o, m, l, dQ, n_wg, SoftmaxRows{Nk, causal, wg_row0, row0, lane, sl2});
      const float dv = __ldg(dv_s);
#pragma unroll
      for (int k = 0; k < NO; ++k) o[k] *= dv;
      store_rows<TO, D, 64, true>(o, m, l, stage, 0, 1 + c, wg_row0, Nq, bh, O, LSE, sl2, INT_MAX, mean);
    }
  }
}

// q, k: [B * H][Nq][D], [B * Hkv][Nk][D] e4m3; v: Vt [B * Hkv][D][Nk rounded up to 32] e4m3 in the permuted
// key order; descales fp32 on the device: per tensor a.ws[0] = {q, k, v}, per block a.ws[0..2] = q, k, v blocks;
// a.ws[3]: null, or V's mean rows [B * Hkv][D] to add to O (centred V)
// (the kernel's header); the option's fields (option_codes.h): the output's dtype, the exponentials' split
// (fp8_forward_emu), ping-pong, the scales.
template <typename TO, int D, int EMU, bool PINGPONG, bool BLOCK, bool TSUM>
cudaError_t fp8_forward_launch(const AttnArgs& a, cudaStream_t stream) {
  constexpr int STAGES = D == 256 ? 2 : kFp8Stages;  // D = 256: two 64 KB K/V stages beside Q's 32 KB and O's 64 KB
  constexpr int smem = fp8_smem<D, STAGES>();
  static_assert(smem <= 227 * 1024, "shared memory of a block");
  auto kernel = flash_wgmma_fp8_forward_kernel<TO, D, STAGES, EMU, PINGPONG, BLOCK, TSUM>;
  const int npad = (a.Nk + 31) / 32 * 32;
  const CUtensorMapSwizzle qk_swizzle = D >= 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  constexpr int box = D > 128 ? 128 : D;  // Q and K rows in boxes of at most 128 bytes (SW128's width)
  const CUtensorMapDataType u8 = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  CUtensorMap maps[3];
  cudaError_t err = make_map(&maps[0], u8, 1, a.q, a.B * a.H, a.Nq, D, kFp8BM, box, qk_swizzle);
  if (err == cudaSuccess) err = make_map(&maps[1], u8, 1, a.k, a.B * a.Hkv, a.Nk, D, kFp8BN, box, qk_swizzle);
  if (err == cudaSuccess)
    err = make_map(&maps[2], u8, 1, a.v, a.B * a.Hkv, D, npad, D, kFp8BN, CU_TENSOR_MAP_SWIZZLE_128B);
  if (err == cudaSuccess) err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  if (a.ws[0] == nullptr || (BLOCK && (a.ws[1] == nullptr || a.ws[2] == nullptr))) return cudaErrorInvalidValue;
  const float* dq = a.ws[0];
  const float* dk = BLOCK ? a.ws[1] : a.ws[0] + 1;
  const float* dv = BLOCK ? a.ws[2] : a.ws[0] + 2;
  kernel<<<dim3(cdiv(a.Nq, kFp8BM), a.B * a.H), 3 * 128, smem, stream>>>(
      maps[0], maps[1], maps[2], static_cast<TO*>(a.o), a.lse, dims_of(a), dq, dk, dv, a.ws[3], a.scale * kLog2e,
      a.causal);
  return cudaGetLastError();
}

template <typename TO, int D, int EMU, bool PINGPONG, bool TSUM>
cudaError_t fp8_forward_scales(const AttnArgs& a, cudaStream_t stream) {
  namespace oc = codes::flash_wgmma_fp8;
  return oc::scales(a.option) == oc::kScalesBlock ? fp8_forward_launch<TO, D, EMU, PINGPONG, true, TSUM>(a, stream)
                                                  : fp8_forward_launch<TO, D, EMU, PINGPONG, false, TSUM>(a, stream);
}

template <typename TO, int D, int EMU, bool PINGPONG>
cudaError_t fp8_forward_osum(const AttnArgs& a, cudaStream_t stream) {
  namespace oc = codes::flash_wgmma_fp8;
  if constexpr (D == 256) {  // O in the tensor cores only (the kernel's static_assert), every exponential on MUFU
    if (oc::o_sum(a.option) != oc::kOSumTensor || EMU != 0) return cudaErrorInvalidValue;
    return fp8_forward_scales<TO, D, EMU, PINGPONG, true>(a, stream);
  } else {
    return oc::o_sum(a.option) == oc::kOSumTensor ? fp8_forward_scales<TO, D, EMU, PINGPONG, true>(a, stream)
                                                  : fp8_forward_scales<TO, D, EMU, PINGPONG, false>(a, stream);
  }
}

// option >> 4: the share of the softmax's exponentials computed without the SFU (softmax_scores' EMU):
// 0 = none, 1 = every 4th 8-column block (a quarter), 2 = every 2nd (half)
// option bit 8: the consumers' ping-pong (PINGPONG); bit 9: descales per block (BLOCK); bit 10: O summed in the
// tensor cores (TSUM)
template <typename TO, int D, bool PINGPONG>
cudaError_t fp8_forward_emu(const AttnArgs& a, cudaStream_t stream) {
  namespace oc = codes::flash_wgmma_fp8;
  switch (oc::exp_on_fma(a.option)) {
    case oc::kExpOnFma0: return fp8_forward_osum<TO, D, 0, PINGPONG>(a, stream);
    case oc::kExpOnFma0p25: return fp8_forward_osum<TO, D, 4, PINGPONG>(a, stream);
    case oc::kExpOnFma0p5: return fp8_forward_osum<TO, D, 2, PINGPONG>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <typename TO>
cudaError_t fp8_forward_hdim(const AttnArgs& a, cudaStream_t stream) {
  const bool pingpong = codes::flash_wgmma_fp8::pingpong(a.option) == codes::flash_wgmma_fp8::kPingpongOn;
  switch (a.D) {
    case 64: return pingpong ? fp8_forward_emu<TO, 64, true>(a, stream) : fp8_forward_emu<TO, 64, false>(a, stream);
    case 128:
      return pingpong ? fp8_forward_emu<TO, 128, true>(a, stream) : fp8_forward_emu<TO, 128, false>(a, stream);
    case 256:
      if (codes::flash_wgmma_fp8::exp_on_fma(a.option) != codes::flash_wgmma_fp8::kExpOnFma0) return cudaErrorInvalidValue;
      return pingpong ? fp8_forward_osum<TO, 256, 0, true>(a, stream) : fp8_forward_osum<TO, 256, 0, false>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

// ------------------------------------------------------------------------------ Vt

// V [planes][Nk][D] -> Vt [planes][D][npad] (npad = Nk rounded up to 32; keys >= Nk are zeros), the keys of
// each 32-key group in the order of the kernel's A fragments: column 16 hh + 4 t + i holds key
// 16 hh + 8 (i >> 1) + 2 t + (i & 1) (flash_kernels/fp8.py: vt_e4m3 does the same with torch ops). One block
// of 256 threads per (128-key chunk, plane): 16-byte loads of the chunk's rows into shared memory (rows
// padded by 4 bytes, so the column reads below fall in distinct banks), then 4-byte stores, a warp writing
// 128 contiguous bytes of one Vt row.
template <int D>
__global__ void __launch_bounds__(256) vt_e4m3_kernel(const uint8_t* __restrict__ V, uint8_t* __restrict__ Vt, int Nk,
                                                      int npad) {
  constexpr int KEYS = 128, ROW = D + 4;
  __shared__ uint8_t tile[KEYS * ROW];
  const int plane = blockIdx.y, k0 = blockIdx.x * KEYS, tid = threadIdx.x;
  const uint8_t* src = V + long(plane) * Nk * D;
  for (int c = tid; c < KEYS * D / 16; c += 256) {
    const int key = c / (D / 16), chunk = c % (D / 16);
    uint4 x = make_uint4(0, 0, 0, 0);
    if (k0 + key < Nk) x = *reinterpret_cast<const uint4*>(src + long(k0 + key) * D + chunk * 16);
    uint32_t* d = reinterpret_cast<uint32_t*>(tile + key * ROW + chunk * 16);  // 4-byte aligned (ROW % 4 == 0)
    d[0] = x.x;
    d[1] = x.y;
    d[2] = x.z;
    d[3] = x.w;
  }
  __syncthreads();
  uint8_t* dst = Vt + long(plane) * D * npad;
  for (int c = tid; c < D * (KEYS / 4); c += 256) {
    const int d = c / (KEYS / 4), w = c % (KEYS / 4);  // Vt row d, columns 4 w .. 4 w + 3 of the chunk
    const int col = 4 * w;
    if (k0 + col >= npad) continue;
    const int g = col & ~31, hh = (col >> 4) & 1, tq = (col >> 2) & 3;  // the group, its half, t
    const int key = g + 16 * hh + 2 * tq;                               // i = 0; i = 1, 2, 3: + 1, + 8, + 9
    const uint32_t word = uint32_t(tile[key * ROW + d]) | (uint32_t(tile[(key + 1) * ROW + d]) << 8) |
                          (uint32_t(tile[(key + 8) * ROW + d]) << 16) | (uint32_t(tile[(key + 9) * ROW + d]) << 24);
    *reinterpret_cast<uint32_t*>(dst + long(d) * npad + k0 + col) = word;
  }
}

}  // namespace fk

// v: [planes][Nk][D] e4m3 (contiguous, 16-byte aligned), vt: [planes][D][npad] with npad = Nk rounded up to 32.
int flash_wgmma_fp8_vt(const void* v, void* vt, int planes, int Nk, int D, cudaStream_t stream) {
  const int npad = (Nk + 31) / 32 * 32;
  const dim3 grid(fk::cdiv(npad, 128), planes);
  if (planes > 65535 || (D != 64 && D != 128 && D != 256)) return cudaErrorInvalidValue;
  const auto* src = static_cast<const uint8_t*>(v);
  auto* dst = static_cast<uint8_t*>(vt);
  if (D == 64) fk::vt_e4m3_kernel<64><<<grid, 256, 0, stream>>>(src, dst, Nk, npad);
  else if (D == 128) fk::vt_e4m3_kernel<128><<<grid, 256, 0, stream>>>(src, dst, Nk, npad);
  else fk::vt_e4m3_kernel<256><<<grid, 256, 0, stream>>>(src, dst, Nk, npad);
  return cudaGetLastError();
}

int flash_wgmma_fp8_forward(const fk::AttnArgs& a, cudaStream_t stream) {
  if (a.dtype != fk::kE4M3) return cudaErrorInvalidValue;
  namespace oc = fk::codes::flash_wgmma_fp8;
  return oc::out_dtype(a.option) == oc::kOutDtypeFloat16 ? fk::fp8_forward_hdim<__half>(a, stream)
                                                          : fk::fp8_forward_hdim<__nv_bfloat16>(a, stream);
}
