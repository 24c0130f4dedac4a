// The producer side of flash_wgmma's warp-specialised forward: the shared memory of the kernel, its Q buffers and
// the K/V ring that one thread of the producer warpgroup fills with TMA copies.
//
// Per work tile the producer loads Q into a Q buffer (full_q: one arrival with the byte count, the copy engine's
// bytes; empty_q: every consumer thread once it has stored the rows it staged there) and the tile's K/V tiles last
// to first (the consumers' order) into a ring of STAGES stages: full_k / full_v complete when a stage's bytes land,
// empty_k / empty_v when each consumer warpgroup has released it. The ring runs on across work tiles; refilling a
// stage waits for its release of the tile STAGES loads ago.
// With one Q buffer and a persistent schedule (Q late), a work tile's first K/V tiles (up to STAGES) are issued
// before its Q, whose buffer frees only after the previous tile's epilogue: the ring's stages free while the
// consumers finish that tile, so the next tile's K/V is in flight when they start it. Otherwise Q first.
// Limits: QBUF = 2 only with a persistent schedule; shared memory of a block at most 227 KB (ws_smem).
#pragma once
#include "wgmma_tile_scheduler.cuh"

namespace fk {

// Shared memory of the warp-specialized kernel: QBUF Q tiles, the K/V ring, 1 KB of slack for the
// 1024-byte alignment of the SW128 tiles, the mbarriers, the tile index of each Q buffer.
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

// The addresses of ws_smem's parts (shared-space addresses; smem: the generic pointer of sQ).
template <int D, int BM, int BN, int QBUF, int STAGES>
struct WsSmem {
  static constexpr uint32_t TQ = BM * D * 2, TKV = BN * D * 2;  // tile bytes
  uint32_t sQ, sK, sV;     // [QBUF][BM][D], [STAGES][BN][D] x 2
  uint32_t full_q, empty_q;  // [QBUF] each
  KvRingBars ring;         // [STAGES] each
  uint8_t* smem;
  volatile int* sTile;     // [QBUF] (persistent schedule)
  __device__ __forceinline__ explicit WsSmem(uint8_t* smem_raw) {
    const uint32_t raw = smem_u32(smem_raw);
    sQ = (raw + 1023u) & ~1023u;
    sK = sQ + QBUF * TQ;
    sV = sK + STAGES * TKV;
    full_q = sV + STAGES * TKV, empty_q = full_q + 8 * QBUF;
    ring.full_k = empty_q + 8 * QBUF, ring.full_v = ring.full_k + 8 * STAGES;
    ring.empty_k = ring.full_v + 8 * STAGES, ring.empty_v = ring.empty_k + 8 * STAGES;
    smem = smem_raw + (sQ - raw);
    sTile = reinterpret_cast<volatile int*>(smem + (ring.empty_v + 8 * STAGES - sQ));
  }
};

// The producer thread: Q buffers and the K/V ring of one block, the copies of one work tile at a time.
template <int D, int BM, int BN, int QBUF, int STAGES, class Sched>
struct WsProducer {
  using Smem = WsSmem<D, BM, BN, QBUF, STAGES>;
  static constexpr uint32_t TQ = Smem::TQ, TKV = Smem::TKV;
  static constexpr bool Q_LATE = Sched::kPersistent && QBUF == 1;
  const Smem& L;
  const CUtensorMap *tmQ, *tmK, *tmV;
  volatile int* sTile;
  RingPos<STAGES> pos;  // the ring: stage and phase parity of the next K/V tile
  int loaded = 0;       // K/V tiles issued so far

  __device__ __forceinline__ uint32_t full(int qb) const { return L.full_q + 8 * qb; }
  // Q buffer qb is free once every consumer has stored the rows it staged there (work tile it - QBUF)
  __device__ __forceinline__ void wait_free(int it, int qb) const {
    if (it >= QBUF) mbar_wait(L.empty_q + 8 * qb, ((it / QBUF) & 1) ^ 1);
  }
  __device__ __forceinline__ void load_q(int it, int qb, int i, int bh, int q0) const {
    wait_free(it, qb);
    Sched::publish(sTile, qb, i);
    mbar_arrive_expect_tx(full(qb), TQ);
    tma_load_tile<D, BM>(L.sQ + qb * TQ, tmQ, full(qb), q0, bh);
  }
  // K/V tile t (its first key t * BN) of head kvh into the next stage
  __device__ __forceinline__ void load_kv(int t, int kvh) {
    const int st = pos.st;
    if (loaded >= STAGES) mbar_wait(L.ring.empty_k + 8 * st, pos.ph ^ 1);
    mbar_arrive_expect_tx(L.ring.full_k + 8 * st, TKV);
    tma_load_tile<D, BN>(L.sK + st * TKV, tmK, L.ring.full_k + 8 * st, t * BN, kvh);
    if (loaded >= STAGES) mbar_wait(L.ring.empty_v + 8 * st, pos.ph ^ 1);
    mbar_arrive_expect_tx(L.ring.full_v + 8 * st, TKV);
    tma_load_tile<D, BN>(L.sV + st * TKV, tmV, L.ring.full_v + 8 * st, t * BN, kvh);
    pos.advance();
  }
  // Work tile i (the it-th of this block, Q buffer qb; head bh, rows from q0, n_kv K/V tiles of K/V head kvh): Q
  // and the K/V tiles, last first.
  __device__ __forceinline__ void load_tile(int it, int qb, int i, int bh, int q0, int n_kv, int kvh) {
    if constexpr (!Q_LATE) load_q(it, qb, i, bh, q0);
    const int q_at = Q_LATE ? min(STAGES, n_kv) : -1;  // K/V tiles issued before Q
    for (int t = n_kv - 1, n = 0; t >= 0; --t, ++n, ++loaded) {
      if (Q_LATE && n == q_at) load_q(it, qb, i, bh, q0);
      load_kv(t, kvh);
    }
    if (Q_LATE && q_at == n_kv) load_q(it, qb, i, bh, q0);  // n_kv <= STAGES
  }
};

}  // namespace fk
