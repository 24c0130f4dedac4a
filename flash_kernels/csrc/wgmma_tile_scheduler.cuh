// The tile scheduler of flash_wgmma's warp-specialised forward: which work tile (head bh, query rows q0 ..
// q_end) a block computes, and in which order the tiles are taken.
//
// Work tiles are numbered in the order a 2-D grid (query blocks x heads) would launch them, the heaviest query
// block of a head first when causal, so that consecutive tiles share a head's K/V in L2 (WsTiles). Two schedules
// pick a block's tiles:
//  OneTileSchedule     one block per work tile (tma-ws, -overlap, -pingpong): tile blockIdx.x.
//  PersistentSchedule  one block per SM (tma-ws-persistent[-pingpong]): tile blockIdx.x first, then the next one
//                      not yet taken from a global counter (zero at launch), as the hardware's block scheduler
//                      would; the producer publishes each tile's index beside its Q buffer, -1 when none is left.
// Option tail "auto" of the persistent pipelines adds two orders:
//  - not causal: each head's first main_qb query blocks are BM-row tiles; the rows after them are cut into tail
//    tiles of BM - 64 rows (one consumer warpgroup idle), all heads' handed out after every BM-row tile and the
//    heads last to first (the likeliest still in L2), so that the last work the SMs take is short
//    (flash_kernels/_ops.py: _wg_tail_plan chooses main_qb).
//  - causal (the kernel's causal argument 2): heads are dealt in groups whose K and V fit in 16 MiB of L2, each
//    group's tiles heaviest first across its heads.
// Limits: a tile index fits in int (the launcher checks); heads per launch below 2^31.
#pragma once
#include "wgmma.cuh"

namespace fk {

// Query tiles of one head: main_qb whole BM-row blocks, then (main_qb < ceil(Nq / BM)) the rows after them in
// tiles of BM - 64 rows (tail tiles). The launcher sizes the grid with it, the kernel deals tiles by it.
template <int BM>
__host__ __device__ __forceinline__ int tail_tiles_per_head(int Nq, int main_qb) {
  return main_qb * BM < Nq ? (Nq - main_qb * BM + BM - 65) / (BM - 64) : 0;
}

// Causal, tail "auto": the heads are dealt in groups of this many, as many as have their K and V within
// 16 MiB (a third of an H100's L2), at least one.
__host__ __device__ __forceinline__ int causal_head_group(int Nk, int D, int elem_bytes, int batch_heads) {
  const long per_head = 2L * Nk * D * elem_bytes;
  const long g = (16L << 20) / (per_head > 0 ? per_head : 1);
  return int(g < 1 ? 1 : g > batch_heads ? batch_heads : g);
}

// The work tiles of a launch, numbered as above. causal: 0, 1 (one head after another) or 2 (head groups).
template <typename T, int D, int BM, int BN>
struct WsTiles {
  int Nk, batch_heads, causal, main_qb, n_qb, n_tail, n_main, n_tiles;

  __device__ __forceinline__ WsTiles(int Nq, int Nk_, int batch_heads_, int causal_, int main_qb_)
      : Nk(Nk_), batch_heads(batch_heads_), causal(causal_), main_qb(main_qb_) {
    n_qb = (Nq + BM - 1) / BM;
    n_tail = tail_tiles_per_head<BM>(Nq, main_qb);
    n_main = main_qb * batch_heads;
    n_tiles = n_main + n_tail * batch_heads;
  }

  // work tile i: head bh, query rows q0 .. q_end - 1 (q_end may pass Nq), its n_kv K/V tiles
  __device__ __forceinline__ void at(int i, int& bh, int& q0, int& n_kv, int& q_end) const {
    constexpr int TB = BM - 64;  // rows of a tail tile
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
  }
};

// One block per work tile. The producer stops after it; the consumers wait for the tile's Q (buffer 0) once their
// registers are set up.
struct OneTileSchedule {
  static constexpr bool kPersistent = false;
  // producer, after tile i: the next tile (none)
  __device__ __forceinline__ static int next(int n_tiles, int*) { return n_tiles; }
  // producer: tile i's Q is in buffer qb / no tile is left (nothing to tell: the consumers take one tile)
  __device__ __forceinline__ static void publish(volatile int*, int, int) {}
  template <class QBufs>
  __device__ __forceinline__ static void finish(QBufs&, int, int) {}
  // consumer, its it-th tile: false when done, else i = the tile
  template <int QBUF>
  __device__ __forceinline__ static bool take(int it, int& i, uint32_t, volatile int*) {
    i = int(blockIdx.x);
    return it == 0;
  }
  __device__ __forceinline__ static void wait_q(uint32_t full_q) { mbar_wait(full_q, 0); }
};

// One block per SM, taking tiles from the global counter *next_tile.
struct PersistentSchedule {
  static constexpr bool kPersistent = true;
  __device__ __forceinline__ static int next(int, int* next_tile) { return int(gridDim.x) + atomicAdd(next_tile, 1); }
  // the tile index beside Q buffer qb, written before the buffer's full_q arrival (release), read by the
  // consumers after their wait on it (acquire)
  __device__ __forceinline__ static void publish(volatile int* sTile, int qb, int i) { sTile[qb] = i; }
  template <class QBufs>
  __device__ __forceinline__ static void finish(QBufs& q, int it, int qb) {
    q.wait_free(it, qb);
    q.sTile[qb] = -1;
    mbar_arrive(q.full(qb));
  }
  template <int QBUF>
  __device__ __forceinline__ static bool take(int it, int& i, uint32_t full_q, volatile int* sTile) {
    const int qb = it % QBUF;
    mbar_wait(full_q + 8 * qb, (it / QBUF) & 1);
    i = sTile[qb];
    return i >= 0;
  }
  __device__ __forceinline__ static void wait_q(uint32_t) {}  // waited for in take
};

}  // namespace fk
