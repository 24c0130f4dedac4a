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
// decode_wgmma_ab.log), mma.sync -> wgmma, one KV head: Nq = 4: Nk = 4096 22.9 -> 21.0 us, 16384 42.8 -> 39.2
// (1.71 TB/s), 65536 126.3 -> 120.4 (2.23 TB/s); Nq = 16: Nk = 1024 21.7 -> 19.2, 16384 120.1 -> 115.7, 65536
// 423.6 -> 427.4 (the one loss, 0.9 %); forced where auto keeps mma.sync: 8 KV heads, Nq = 16 (64 rows), Nk = 16384
// 190.9 -> 186.6; one KV head, Nq = 1 (32 rows), 32.0 -> 31.3. The one-KV-head rows stay far from HBM's 3.35 TB/s:
// a k/v head's 128 (Nq = 4) or 512 (Nq = 16) rows are 2 or 8 blocks that each stream the head's K/V through L2.
// Under Nsight Compute (the decode capture at 43d1638 against f295b00's, one KV head, Nq = 4, Nk = 16384): at D = 128
// the split kernel's shared-memory wavefronts 4.81 M -> 2.15 M, its time 36.9 -> 34.1 us (16 splits, not 24: two
// 113 KB blocks an SM), the merge 7.9 -> 6.8 us; at D = 64, which no timed A/B covered, 22.4 -> 22.0 us (fp16) and
// 22.9 -> 21.9 (bf16).
#include "decode.cuh"
#include "wgmma.cuh"

namespace fk {

// Stages of the ring: 3 at D = 128 (two blocks an SM), 4 at D = 64 (three).
template <int D>
__host__ __device__ constexpr int decode_wg_stages() { return D == 128 ? 3 : 4; }

// Dynamic shared memory: decode_smem's ring, the Q tile [64][D] (SW128) after it, and 1 KB of slack so that the
// SW128 tiles start on 1024-byte boundaries (flash_kernels/_ops.py counts all three when it plans the splits).
template <int D, int S>
__host__ __device__ constexpr int decode_wg_smem() {
  return decode_smem<D, S>() + 4 * kDecodeRowsPerWarp * D * 2 + 1024;
}

// One block: rows [r0, r0 + 64) of key/value head blockIdx.y against the 64-key tiles of split blockIdx.z, as
// flash_decode_kernel<T, D, 4, S> (warp w owns rows 16 w.., every key of a tile), with the products on wgmma.
template <typename T, int D, int S>
__global__ void __launch_bounds__(kDecodeThreads, D == 64 ? 3 : 2)
flash_decode_wgmma_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                          T* __restrict__ O, float* __restrict__ LSE, float* __restrict__ O_part,
                          float* __restrict__ LSE_part, DecodeShape sh, float scale_log2, int causal) {
  constexpr int M = 4 * kDecodeRowsPerWarp, NB = kDecodeKeys / 8;
  constexpr int TILE = kDecodeKeys * D * 2;  // bytes of a K (or V) tile
  static_assert(M * D * 2 + 4 * kDecodeRowsPerWarp * (D + 8) * 4 <= decode_smem<D, S>(),
                "the end of the block (decode_row_factors, decode_store_rows) fits in the ring");
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
    load_tile_sw128<kDecodeKeys, D, kDecodeThreads>(st, Kb, t * kDecodeKeys, sh.Nk, tid);
    load_tile_sw128<kDecodeKeys, D, kDecodeThreads>(st + TILE, Vb, t * kDecodeKeys, sh.Nk, tid);
  };
  load_tile_sw128<M, D, kDecodeThreads>(sQ, Q + bkv * sh.R * D, r0, sh.R, tid);  // rows past R: zeros
  cp_async_commit();
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {  // one commit group per stage, even when empty: the waits count groups
    if (t0 + s < t1) load_kv(s, t0 + s);
    cp_async_commit();
  }
  // the m64nD accumulator: of[4 j + 2 h + e] is flash_decode's o[j][2 h + e] (the C fragments of the warp's 16 rows).
  // Kept in its own array (copied into o[j][..] at the end, a renaming of registers): reading it through a
  // reinterpret_cast view let the compiler drop the rescale at D = 64 (wrong results from the second tile on)
  float of[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) of[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  int qi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) qi[h] = (r0 + warp * 16 + (lane >> 2) + 8 * h) % sh.Nq;
  for (int t = t0; t < t1; ++t) {
    const int u = t - t0;
    cp_async_wait<S - 2>();  // tile t (and Q) have landed (this thread's part)
    fence_proxy_async();     // ... and are visible to the wgmma's reads (the async proxy)
    __syncthreads();         // every thread's part; every warp is done with tile t - 1's stage
    if (t + S - 1 < t1) load_kv((u + S - 1) % S, t + S - 1);
    cp_async_commit();
    const uint32_t cK = sRing + (u % S) * 2 * TILE;
    float sf[NB * 4];  // the m64n64 accumulator, then as decode_softmax's fragments s[j][2 h + e]
    {
      fence_regs(sf);
      wgmma_fence();
      wgmma_kmajor_ss<T, kDecodeKeys, D, M, kDecodeKeys>(sf, desc_kmajor(sQ), desc_kmajor(cK));
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(sf);
    }
    float s[NB][4];
#pragma unroll
    for (int i = 0; i < NB * 4; ++i) s[i / 4][i % 4] = sf[i];
    const int j0 = t * kDecodeKeys;
    if (j0 + kDecodeKeys > sh.Nk || (causal && j0 + kDecodeKeys - 1 > qr.lo)) decode_mask<NB>(s, j0, sh.Nk, causal, qi);
    uint32_t pf[NB / 2][4];
    float alpha[2];
    if (decode_softmax<T, NB>(s, m, l, alpha, pf, scale_log2)) {
#pragma unroll
      for (int i = 0; i < D / 2; ++i) of[i] *= alpha[(i >> 1) & 1];
    }
    {
      const uint64_t dV = desc_mnmajor(cK + TILE, kDecodeKeys * 128);
#pragma unroll
      for (int kk = 0; kk < NB / 2; ++kk) fence_regs(pf[kk]);
      fence_regs(of);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < NB / 2; ++kk) wgmma_rs<T, D, /*TB=*/1>(of, pf[kk], desc_add(dV, kk * 2048), 1);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(of);
    }
  }
  cp_async_wait<0>();
  grid_dependents_launch();
  const bool one_split = gridDim.z == 1;
  const long slot = long(blockIdx.z) * gridDim.y * sh.R;
  const DecodeOut<T> out{one_split ? O + first * D : nullptr, one_split ? nullptr : O_part + (slot + first) * D,
                         one_split ? LSE + first : LSE_part + slot + first, valid};
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i / 4][i % 4] = of[i];
  float f[2];
  decode_row_factors<T, D, 4>(smem, m, l, scale_log2, out, f);
  decode_store_rows<T, D, 4>(smem, o, f, out);
}

template <typename T, int D, int S>
cudaError_t decode_wgmma_launch(const AttnArgs& a, int splits, cudaStream_t stream) {
  constexpr int smem = decode_wg_smem<D, S>(), M = 4 * kDecodeRowsPerWarp;
  auto kernel = flash_decode_wgmma_kernel<T, D, S>;
  cudaError_t err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  int z;
  const DecodeShape sh = decode_shape(a, splits, z);
  if (z == 0) return cudaErrorInvalidValue;
  kernel<<<dim3(cdiv(sh.R, M), a.B * a.Hkv, z), kDecodeThreads, smem, stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o),
      a.lse, a.ws[0], a.ws[1], sh, a.scale * kLog2e, a.causal);
  err = cudaGetLastError();
  if (err != cudaSuccess || z == 1) return err;
  return combine_launch<T, D>(a, z, stream);
}

// Option code as flash_decode's (flash_kernels/_ops.py): rows per block 64 only (code 2), bits 8.. the splits.
template <typename T, int D>
cudaError_t decode_wgmma_rows(const AttnArgs& a, cudaStream_t stream) {
  const int splits = a.option >> 8;
  if ((a.option & 0xff) != 2) return cudaErrorInvalidValue;
  return decode_wgmma_launch<T, D, decode_wg_stages<D>()>(a, splits, stream);
}

}  // namespace fk

int flash_decode_wgmma_forward(const fk::AttnArgs& a, cudaStream_t stream) {
  return fk::dispatch_dtype_hdim</*fp32=*/false>(a, [&](auto t, auto d) {
    return fk::decode_wgmma_rows<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
