// The consumer side of flash_wgmma's forward: what one warpgroup does with its 64 query rows per K/V tile,
// S = Q K_j^T (wgmma SS), the online softmax on the accumulators, O += P V_j (wgmma RS, P from registers), and
// the loops of the warp-specialised kernels over the K/V ring that a producer fills (wgmma_fwd_producer.cuh).
//
// Parts a kernel picks by template parameter:
//  operands   Wgmma16 (fp16 / bf16, this file) or flash_wgmma_fp8.cu's e4m3 operands: how S and P V are issued,
//             how P is packed, where P V lands (straight into O, or into a fresh accumulator added to O).
//  turns      NoTurns, or PingPongTurns (tma-ws-pingpong): consumer warpgroups take turns to issue their
//             products at named barriers, so one's softmax runs under the other's GEMMs.
//  mainloop   PlainMainloop (tma-ws): per tile S, softmax, P V, each waited for. OverlapMainloop (tma-ws-overlap
//             and up, FP8): S_t and O += P_{t+1} V_{t+1} issued together and the softmax of S_t run while the
//             P V product is in flight (FlashAttention-3's intra-warpgroup overlap).
// K/V tiles come last to first: causal tiles after a warpgroup's rows are released unread (ConsumerRing::skip),
// then tile n_wg - 1, the only one that can reach past Nk or the diagonal, masked if it needs it; the overlapped
// loop runs unmasked and must not branch between its two wgmma waits (ptxas would then wait for both before the
// branch and the softmax would no longer overlap O += P V: hence predicated arrivals and register fences).
// Limits: a warpgroup releases each ring stage once per phase (one arrival, or one per thread where each thread
// reads the K stage itself: K_PER_THREAD); every consumer takes one turn per K/V tile.
#pragma once
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

// The rows a warpgroup's softmax sees: keys below Nk (and, causal, up to the row), exp2 scale. The mainloops ask
// for a K/V tile's scales once its K stage is full and before it is released: tile_scales(st, sk, sv) gives sk, the
// exp2 scale of its raw scores, and sv, the factor of its P V as it is added to O (Ops::after_pv, last_pv), from
// ring stage st (a Rows type with scales per tile reads them where the producer wrote them beside the stage);
// lse_scale() is the factor of m in the LSE (store_rows). SoftmaxRows: one scale for every tile, P V as it comes.
struct SoftmaxRows {
  static constexpr bool kScalesPerTile = false;  // tile_scales reads nothing: no wait for the K stage ahead of S
  int Nk, causal, wg_row0, row0, lane;
  float scale_log2;
  __device__ __forceinline__ void tile_scales(int, float& sk, float& sv) const {
    sk = scale_log2;
    sv = 1.f;
  }
  __device__ __forceinline__ float lse_scale() const { return scale_log2; }
  template <int BN, MaskMode MASK, int EMU>
  __device__ __forceinline__ bool apply(float (&s)[BN / 2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                        int j0, float sl2) const {
    return softmax_scores<BN, MASK, EMU>(s, m, l, alpha, j0, Nk, causal, wg_row0, row0, lane, sl2);
  }
};

// ------------------------------------------------------------------------------ operands

// fp16 / bf16: K [BN][D] read K-major and V [BN][D] MN-major from stage st of the ring, O += P V in O itself.
template <typename T, int D, int BM, int BN_>
struct Wgmma16 {
  static constexpr int BN = BN_, NS = BN / 2, NO = D / 2, KB = BN / 16, EMU = 0;
  static constexpr uint32_t TK = BN * D * 2, TV = BN * D * 2;  // stage bytes
  using Frag = uint32_t[KB][4];
  uint64_t dK, dV;  // stage 0
  __device__ __forceinline__ Wgmma16(uint32_t sK, uint32_t sV)
      : dK(desc_kmajor(sK)), dV(desc_mnmajor(sV, BN * 128)) {}
  __device__ __forceinline__ void scores(float (&s)[NS], uint64_t dQ, int st) const {
    issue_scores<T, D, BM, BN>(s, dQ, desc_add(dK, st * TK));
  }
  __device__ __forceinline__ void pv(float (&o)[NO], Frag& pf, int st) { issue_pv<T, D, BN>(o, pf, desc_add(dV, st * TV)); }
  __device__ __forceinline__ void pv_landed(float (&o)[NO]) { fence_regs(o); }  // after its wgmma_wait
  __device__ __forceinline__ void pv_add(float (&)[NO], float) {}                // after the stage's release
  // OverlapMainloop, after P V_{t+1} landed and its stage was released: O rescaled for S_t's new row max; last
  // after the final tile (Ops with per-tile V scales use sv_done / sv_next)
  __device__ __forceinline__ void after_pv(float (&o)[NO], const float (&alpha)[2], bool grew, float, float) {
    if (grew) rescale_o(o, alpha);
  }
  __device__ __forceinline__ void last_pv(float (&)[NO], float) {}
  __device__ __forceinline__ static void pack(const float (&s)[NS], Frag& pf) { pack_p<T, BN>(s, pf); }
};

// ------------------------------------------------------------------------------ turns

struct NoTurns {
  __device__ __forceinline__ explicit NoTurns(int) {}
  __device__ __forceinline__ void start() const {}
  __device__ __forceinline__ void wait() const {}
  __device__ __forceinline__ void pass() const {}
};
// Warpgroup c waits at named barrier BAR0 + c for its turn and passes it to the next; each barrier meets 128
// waiting and 128 arriving threads. The first turn is consumer 0's.
template <int BAR0, int NWG>
struct PingPongTurns {
  int c;
  __device__ __forceinline__ void start() const {
    if (c == 0) bar_arrive(BAR0, 256);
  }
  __device__ __forceinline__ void wait() const { bar_sync(BAR0 + c, 256); }
  __device__ __forceinline__ void pass() const { bar_arrive(BAR0 + (c + 1 == NWG ? 0 : c + 1), 256); }
};

// ------------------------------------------------------------------------------ the ring, as a consumer reads it

// K_PER_THREAD: every thread of the warpgroup reads the K stage's slot itself (Rows::tile_scales, per-block scales),
// so every thread arrives on the stage's empty barrier (initialised with 128 arrivals per warpgroup): each thread's
// read is ordered before the producer's next write there by its own arrival, as the Q buffers' empty_q are. (One
// arrival per warp after __syncwarp, or per warpgroup after a named barrier, leaves the other threads' reads
// unordered before that write: compute-sanitizer's racecheck reports both on the H200.)
template <int STAGES, class Turns, bool K_PER_THREAD = false>
struct ConsumerRing {
  static constexpr bool kKPerThread = K_PER_THREAD;
  KvRingBars bar;
  Turns turns;
  int t128;
  RingPos<STAGES>& pos;  // the ring, as the producer runs it: stage and phase parity of the next K/V tile
  // one arrival per warpgroup: its wgmma reading the stage have completed (wgmma_wait)
  __device__ __forceinline__ void release(uint32_t b) const { mbar_arrive_if(b, t128 == 0); }
  __device__ __forceinline__ void wait_k() const { mbar_wait(bar.full_k + 8 * pos.st, pos.ph); }
  __device__ __forceinline__ void release_k() const {
    if constexpr (K_PER_THREAD) mbar_arrive(bar.empty_k + 8 * pos.st);
    else release(bar.empty_k + 8 * pos.st);
  }
  __device__ __forceinline__ void wait_v(const RingPos<STAGES>& p) const { mbar_wait(bar.full_v + 8 * p.st, p.ph); }
  __device__ __forceinline__ void release_v(const RingPos<STAGES>& p) const { release(bar.empty_v + 8 * p.st); }

  __device__ __forceinline__ void advance() { pos.advance(); }

  // n tiles not computed (causal tiles after the warpgroup's rows; all, when its rows lie past the last query):
  // each stage waited for until filled, so that no warpgroup arrives twice on one phase, then released, the turn
  // taken and passed on so that the rotation never waits for this warpgroup.
  __device__ __forceinline__ void skip(int n) {
    for (int t = 0; t < n; ++t) {
      wait_k();
      turns.wait();
      turns.pass();
      release_k();
      wait_v(pos);
      release_v(pos);
      advance();
    }
  }
  // S = Q K^T of the K tile at pos, waited for (its stage released).
  template <class Ops>
  __device__ __forceinline__ void scores_waited(const Ops& ops, float (&s)[Ops::NS], uint64_t dQ) {
    wait_k();
    turns.wait();
    ops.scores(s, dQ, pos.st);
    turns.pass();
    wgmma_wait<0>();
    fence_regs(s);
    release_k();
  }
};

// ------------------------------------------------------------------------------ mainloops

// tma-ws: tiles n_wg - 1 .. 0, each S, softmax (masked if the tile needs it), O += P V, waited for.
struct PlainMainloop {
  template <class Ops, class Ring, class Rows>
  __device__ __forceinline__ static void run(Ops& ops, Ring& ring, float (&o)[Ops::NO], float (&m)[2], float (&l)[2],
                                             uint64_t dQ, int n_wg, const Rows& rows) {
    static_assert(!Rows::kScalesPerTile || Ring::kKPerThread, "scales read from the K stage: every thread releases it");
    for (int t = n_wg - 1; t >= 0; --t) {
      typename Ops::Frag pf;
      float sk, sv;
      if constexpr (Rows::kScalesPerTile) ring.wait_k();  // the scales sit beside the stage; else no second wait
      rows.tile_scales(ring.pos.st, sk, sv);
      {
        float s[Ops::NS];
        ring.scores_waited(ops, s, dQ);
        float alpha[2];
        const bool grew = rows.template apply<Ops::BN, kMaskIfNeeded, Ops::EMU>(s, m, l, alpha, t * Ops::BN, sk);
        Ops::pack(s, pf);
        if (grew) rescale_o(o, alpha);
      }
      ring.wait_v(ring.pos);
      ops.pv(o, pf, ring.pos.st);
      wgmma_wait<0>();
      ops.pv_landed(o);
      ring.release_v(ring.pos);
      ops.pv_add(o, sv);
      ring.advance();
    }
  }
};

// tma-ws-overlap and up: the first tile (n_wg - 1) as above but its P V left for the next step; then per tile
// t < n_wg - 1, S_t under O += P_{t+1} V_{t+1}, unmasked; then the last P V.
struct OverlapMainloop {
  template <class Ops, class Ring, class Rows>
  __device__ __forceinline__ static void run(Ops& ops, Ring& ring, float (&o)[Ops::NO], float (&m)[2], float (&l)[2],
                                             uint64_t dQ, int n_wg, const Rows& rows) {
    if (n_wg > 0) tiles(ops, ring, o, m, l, dQ, n_wg, rows);
  }

  // n_wg >= 1
  template <class Ops, class Ring, class Rows>
  __device__ __forceinline__ static void tiles(Ops& ops, Ring& ring, float (&o)[Ops::NO], float (&m)[2],
                                               float (&l)[2], uint64_t dQ, int n_wg, const Rows& rows) {
    static_assert(!Rows::kScalesPerTile || Ring::kKPerThread, "scales read from the K stage: every thread releases it");
    constexpr int BN = Ops::BN;
    // P_{t+1} (in pf) waits for V_{t+1} at v while S_t is computed; sv: V_{t+1}'s scale
    typename Ops::Frag pf;
    float sk, sv;
    if constexpr (Rows::kScalesPerTile) ring.wait_k();
    rows.tile_scales(ring.pos.st, sk, sv);
    {
      float s[Ops::NS];
      ring.scores_waited(ops, s, dQ);
      float alpha[2];
      rows.template apply<BN, kMaskIfNeeded, Ops::EMU>(s, m, l, alpha, (n_wg - 1) * BN, sk);  // O = 0: no rescale
      Ops::pack(s, pf);
    }
    auto v = ring.pos;
    ring.advance();
    for (int t = n_wg - 2; t >= 0; --t) step(ops, ring, v, pf, sv, o, m, l, dQ, t, rows);
    ring.wait_v(v);
    ops.pv(o, pf, v.st);
    wgmma_wait<0>();
    ops.pv_landed(o);
    ring.release_v(v);
    ops.last_pv(o, sv);
  }

  // One tile t < n_wg - 1 (no mask). Between wgmma_wait<1> and wgmma_wait<0> the code must not branch (see the
  // header). S is a fresh array per tile (not loop-carried).
  template <class Ops, class Ring, class Pos, class Rows>
  __device__ __forceinline__ static void step(Ops& ops, Ring& ring, Pos& v, typename Ops::Frag& pf, float& sv,
                                              float (&o)[Ops::NO], float (&m)[2], float (&l)[2], uint64_t dQ, int t,
                                              const Rows& rows) {
    float s[Ops::NS];
    ring.wait_k();
    float sk, sv_t;
    rows.tile_scales(ring.pos.st, sk, sv_t);
    ring.turns.wait();
    ops.scores(s, dQ, ring.pos.st);  // S_t
    ring.wait_v(v);
    ops.pv(o, pf, v.st);             // O += P_{t+1} V_{t+1}
    ring.turns.pass();
    wgmma_wait<1>();                 // S_t done, O += P V in flight
    fence_regs(s);
    ring.release_k();
    float alpha[2];
    const bool grew = rows.template apply<Ops::BN, kMaskNever, Ops::EMU>(s, m, l, alpha, t * Ops::BN, sk);
    fence_regs(s);  // the softmax is computed here, while O += P V runs, not sunk past the wait
    fence_regs(l);
    fence_regs(alpha);
    wgmma_wait<0>();
    ops.pv_landed(o);
#pragma unroll
    for (int kk = 0; kk < Ops::KB; ++kk) fence_regs(pf[kk]);  // P_{t+1} is read until here
    ring.release_v(v);
    ops.after_pv(o, alpha, grew, sv, sv_t);
    Ops::pack(s, pf);
    sv = sv_t;
    v = ring.pos;
    ring.advance();
  }
};

}  // namespace fk
