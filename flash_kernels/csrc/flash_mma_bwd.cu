// flash_mma backward: FlashAttention-2 backward on tensor cores.
// One thread block owns BC keys (one warp per 16 keys) and keeps dK_j, dV_j in registers while it
// sweeps the query blocks (BR rows each; Q_i, dO_i double-buffered with cp.async). Per query block,
// all on mma.sync m16n8k16 with fp32 accumulators:
//   S^T = K_j Q_i^T,  P^T = exp(scale S^T - LSE_i)         (recomputed, never stored)
//   dV_j += P^T dO_i,  dP^T = V_j dO_i^T,  dS^T = P^T (dP^T - Dd_i)
//   dK_j += dS^T Q_i,  dQ_i += dS K_j  (dS^T staged in shared memory; fp32 atomics into dQacc)
// Dd_i = rowsum(dO_i * O_i) comes from a small preprocessing kernel; dQacc is cast at the end.
#include "mma.cuh"

namespace fk {

template <typename T, int D, int BR, int BC>
__global__ void __launch_bounds__(BC / 16 * 32)
flash_mma_backward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                          const float* __restrict__ LSE, const float* __restrict__ Dd, const T* __restrict__ dO,
                          float* __restrict__ dQacc, T* __restrict__ dK, T* __restrict__ dV, int N, float scale,
                          int causal) {
  constexpr int NW = BC / 16, NT = NW * 32;
  constexpr int KD = D / 16;   // k16 steps over the head dim
  constexpr int NQ = BR / 8;   // n8 tiles over the queries of a block
  constexpr int ND = D / 8;    // n8 tiles over the head dim
  constexpr int RG = BR / 16;  // dQ: 16-row groups ...
  static_assert(NW % RG == 0, "warps must tile the dQ block");
  constexpr int DS = NW / RG;  // ... times head-dim splits, one per warp
  constexpr int DW = D / DS;
  static_assert(DW % 16 == 0, "head-dim split must be a multiple of 16");
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sK = smem_u32(smem);           // [BC][D]
  const uint32_t sV = sK + BC * D * 2;          // [BC][D]
  const uint32_t sQ = sV + BC * D * 2;          // [2][BR][D]
  const uint32_t sdO = sQ + 2 * BR * D * 2;     // [2][BR][D]
  const uint32_t sdS = sdO + 2 * BR * D * 2;    // [BC][BR]  dS^T
  float* lse_s = reinterpret_cast<float*>(smem + (2 * BC * D + 4 * BR * D + BC * BR) * 2);  // [2][BR] LSE*log2e
  float* dd_s = lse_s + 2 * BR;                                                              // [2][BR]
  uint8_t* const dS_ptr = smem + (2 * BC * D + 4 * BR * D) * 2;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const long bh = blockIdx.y;
  const long off = bh * N * D;
  const int k0 = blockIdx.x * BC;
  const int q_start = causal ? (k0 / BR) * BR : 0;
  const int n_q = (N - q_start + BR - 1) / BR;
  const float scale_log2 = scale * kLog2e;

  load_tile_async<BC, D, NT>(sK, K + off, k0, N, tid);
  load_tile_async<BC, D, NT>(sV, V + off, k0, N, tid);
  load_tile_async<BR, D, NT>(sQ, Q + off, q_start, N, tid);
  load_tile_async<BR, D, NT>(sdO, dO + off, q_start, N, tid);
  cp_async_commit();
  for (int r = tid; r < BR; r += NT) {
    const int q = q_start + r;
    lse_s[r] = q < N ? LSE[bh * N + q] * kLog2e : 0.f;
    dd_s[r] = q < N ? Dd[bh * N + q] : 0.f;
  }

  float dk[ND][4], dv[ND][4];
#pragma unroll
  for (int i = 0; i < ND; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.f;
  const int key0 = k0 + warp * 16 + (lane >> 2);  // this thread's keys: key0 and key0 + 8

  for (int it = 0; it < n_q; ++it) {
    const int st = it & 1;
    const int qb = q_start + it * BR;
    const uint32_t cQ = sQ + st * (BR * D * 2), cdO = sdO + st * (BR * D * 2);
    const float* lse_c = lse_s + st * BR;
    const float* dd_c = dd_s + st * BR;
    cp_async_wait<0>();
    __syncthreads();  // this stage has landed; everyone is done with the other stage and with dS
    if (it + 1 < n_q) {
      load_tile_async<BR, D, NT>(sQ + (st ^ 1) * (BR * D * 2), Q + off, qb + BR, N, tid);
      load_tile_async<BR, D, NT>(sdO + (st ^ 1) * (BR * D * 2), dO + off, qb + BR, N, tid);
      for (int r = tid; r < BR; r += NT) {
        const int q = qb + BR + r;
        lse_s[(st ^ 1) * BR + r] = q < N ? LSE[bh * N + q] * kLog2e : 0.f;
        dd_s[(st ^ 1) * BR + r] = q < N ? Dd[bh * N + q] : 0.f;
      }
    }
    cp_async_commit();

    // S^T = K_w Q_i^T and dP^T = V_w dO_i^T   [16 keys x BR queries] per warp
    float s[NQ][4], dp[NQ][4];
#pragma unroll
    for (int i = 0; i < NQ; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.f;
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
      uint32_t ak[4], av[4];
      ldmatrix_x4(ak, sK + swz<D>(warp * 16 + (lane & 15), kd * 2 + (lane >> 4)));
      ldmatrix_x4(av, sV + swz<D>(warp * 16 + (lane & 15), kd * 2 + (lane >> 4)));
#pragma unroll
      for (int n2 = 0; n2 < NQ / 2; ++n2) {
        const int row = n2 * 16 + (lane & 7) + ((lane >> 4) << 3), chunk = kd * 2 + ((lane >> 3) & 1);
        uint32_t b[4];
        ldmatrix_x4(b, cQ + swz<D>(row, chunk));
        mma16816<T>(s[2 * n2], ak, b[0], b[1]);
        mma16816<T>(s[2 * n2 + 1], ak, b[2], b[3]);
        ldmatrix_x4(b, cdO + swz<D>(row, chunk));
        mma16816<T>(dp[2 * n2], av, b[0], b[1]);
        mma16816<T>(dp[2 * n2 + 1], av, b[2], b[3]);
      }
    }
    // P^T and dS^T (masked: keys or queries past N, causal keys after the query)
    const bool need_mask = (k0 + BC > N) || (qb + BR > N) || (causal && qb < k0 + BC);
#pragma unroll
    for (int nq = 0; nq < NQ; ++nq) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = nq * 8 + (lane & 3) * 2 + (e & 1);
        float p = fast_exp2(s[nq][e] * scale_log2 - lse_c[qi]);
        if (need_mask) {
          const int key = key0 + (e >> 1) * 8, q = qb + qi;
          if (key >= N || q >= N || (causal && key > q)) p = 0.f;
        }
        s[nq][e] = p;
        dp[nq][e] = p * (dp[nq][e] - dd_c[qi]);
      }
    }
    uint32_t pf[BR / 16][4], dsf[BR / 16][4];
#pragma unroll
    for (int kk = 0; kk < BR / 16; ++kk) {
      pf[kk][0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      pf[kk][1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      pf[kk][2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pf[kk][3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      dsf[kk][0] = pack2<T>(dp[2 * kk][0], dp[2 * kk][1]);
      dsf[kk][1] = pack2<T>(dp[2 * kk][2], dp[2 * kk][3]);
      dsf[kk][2] = pack2<T>(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
      dsf[kk][3] = pack2<T>(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
    }
    // dS^T -> shared memory for dQ (row = key, col = query)
    {
      const int r = warp * 16 + (lane >> 2);
#pragma unroll
      for (int kk = 0; kk < BR / 16; ++kk) {
        *reinterpret_cast<uint32_t*>(dS_ptr + swz<BR>(r, 2 * kk) + (lane & 3) * 4) = dsf[kk][0];
        *reinterpret_cast<uint32_t*>(dS_ptr + swz<BR>(r + 8, 2 * kk) + (lane & 3) * 4) = dsf[kk][1];
        *reinterpret_cast<uint32_t*>(dS_ptr + swz<BR>(r, 2 * kk + 1) + (lane & 3) * 4) = dsf[kk][2];
        *reinterpret_cast<uint32_t*>(dS_ptr + swz<BR>(r + 8, 2 * kk + 1) + (lane & 3) * 4) = dsf[kk][3];
      }
    }
    // dV += P^T dO_i,  dK += dS^T Q_i   (B operands: dO_i, Q_i transposed out of shared memory)
#pragma unroll
    for (int kk = 0; kk < BR / 16; ++kk) {
#pragma unroll
      for (int d2 = 0; d2 < D / 16; ++d2) {
        const int row = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), chunk = d2 * 2 + (lane >> 4);
        uint32_t b[4];
        ldmatrix_x4_trans(b, cdO + swz<D>(row, chunk));
        mma16816<T>(dv[2 * d2], pf[kk], b[0], b[1]);
        mma16816<T>(dv[2 * d2 + 1], pf[kk], b[2], b[3]);
        ldmatrix_x4_trans(b, cQ + swz<D>(row, chunk));
        mma16816<T>(dk[2 * d2], dsf[kk], b[0], b[1]);
        mma16816<T>(dk[2 * d2 + 1], dsf[kk], b[2], b[3]);
      }
    }
    __syncthreads();  // dS^T complete
    // dQ_i += scale * dS K_j : warp (rg, ds) computes rows rg*16.. and head-dim columns ds*DW..
    {
      const int rg = warp % RG, dsp = warp / RG;
      float acc[DW / 8][4];
#pragma unroll
      for (int i = 0; i < DW / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < BC / 16; ++kk) {
        uint32_t a[4];
        ldmatrix_x4_trans(a, sdS + swz<BR>(kk * 16 + (lane & 7) + ((lane >> 4) << 3), rg * 2 + ((lane >> 3) & 1)));
#pragma unroll
        for (int d2 = 0; d2 < DW / 16; ++d2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, sK + swz<D>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                           dsp * (DW / 8) + d2 * 2 + (lane >> 4)));
          mma16816<T>(acc[2 * d2], a, b[0], b[1]);
          mma16816<T>(acc[2 * d2 + 1], a, b[2], b[3]);
        }
      }
#pragma unroll
      for (int dn = 0; dn < DW / 8; ++dn) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int q = qb + rg * 16 + (lane >> 2) + (e >> 1) * 8;
          const int d = dsp * DW + dn * 8 + (lane & 3) * 2 + (e & 1);
          if (q < N) atomicAdd(&dQacc[off + long(q) * D + d], acc[dn][e] * scale);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // K/V tiles are free: stage dK, dV there for 16-byte stores
  {
    const int r = warp * 16 + (lane >> 2);
#pragma unroll
    for (int nd = 0; nd < ND; ++nd) {
      const int c = (lane & 3) * 4;
      *reinterpret_cast<uint32_t*>(smem + swz<D>(r, nd) + c) = pack2<T>(dk[nd][0] * scale, dk[nd][1] * scale);
      *reinterpret_cast<uint32_t*>(smem + swz<D>(r + 8, nd) + c) = pack2<T>(dk[nd][2] * scale, dk[nd][3] * scale);
      *reinterpret_cast<uint32_t*>(smem + BC * D * 2 + swz<D>(r, nd) + c) = pack2<T>(dv[nd][0], dv[nd][1]);
      *reinterpret_cast<uint32_t*>(smem + BC * D * 2 + swz<D>(r + 8, nd) + c) = pack2<T>(dv[nd][2], dv[nd][3]);
    }
  }
  __syncwarp();
  store_tile<16, D, 32>(reinterpret_cast<const T*>(smem + warp * 16 * D * 2), dK + off, k0 + warp * 16, N, lane);
  store_tile<16, D, 32>(reinterpret_cast<const T*>(smem + BC * D * 2 + warp * 16 * D * 2), dV + off,
                        k0 + warp * 16, N, lane);
}

template <typename T, int D, int BR, int BC>
cudaError_t mma_backward_launch(const void* q, const void* k, const void* v, const float* lse, const float* Dd,
                                const void* dO, float* dq_acc, void* dk, void* dv, int BH, int N, float scale,
                                int causal, cudaStream_t stream) {
  auto kernel = flash_mma_backward_kernel<T, D, BR, BC>;
  constexpr int smem = (2 * BC * D + 4 * BR * D + BC * BR) * 2 + 4 * BR * 4;
  static cudaError_t attr = allow_smem(kernel, smem);
  if (attr != cudaSuccess) return attr;
  kernel<<<dim3(cdiv(N, BC), BH), BC / 16 * 32, smem, stream>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), lse, Dd,
      static_cast<const T*>(dO), dq_acc, static_cast<T*>(dk), static_cast<T*>(dv), N, scale, causal);
  return cudaGetLastError();
}

}  // namespace fk

// tile: 0 = 64x64, 1 = 32x64, 2 = 64x128 (D = 64 only: at D = 128 it spills);  BR x BC = query rows per step x keys per block
int flash_mma_backward(int dtype, int tile, const void* q, const void* k, const void* v, const void* o,
                       const float* lse, const void* dO, float* Dd, float* dq_acc, void* dq, void* dk, void* dv,
                       int BH, int N, int D, float scale, int causal, cudaStream_t stream) {
  using namespace fk;
  const long rows = long(BH) * N;
  cudaError_t err = cudaMemsetAsync(dq_acc, 0, sizeof(float) * rows * D, stream);
  if (err != cudaSuccess) return err;
#define FK_BWD(T, DD, BR, BC)                                                                                   \
  {                                                                                                            \
    err = launch_rowdot<T>(dO, o, Dd, rows, DD, stream);                                                       \
    if (err == cudaSuccess)                                                                                    \
      err = mma_backward_launch<T, DD, BR, BC>(q, k, v, lse, Dd, dO, dq_acc, dk, dv, BH, N, scale, causal, stream); \
    if (err == cudaSuccess) err = launch_cast<T>(dq_acc, dq, rows * DD, stream);                               \
    return err;                                                                                                \
  }
#define FK_BWD_TILES(T, DD)             \
  switch (tile) {                       \
    case 0: FK_BWD(T, DD, 64, 64);      \
    case 1: FK_BWD(T, DD, 32, 64);      \
    case 2: if (DD == 64) FK_BWD(T, 64, 64, 128); \
      return cudaErrorInvalidValue;     \
    default: return cudaErrorInvalidValue; \
  }
  if (dtype == kF16) {
    if (D == 64) { FK_BWD_TILES(__half, 64) }
    if (D == 128) { FK_BWD_TILES(__half, 128) }
  } else if (dtype == kBF16) {
    if (D == 64) { FK_BWD_TILES(__nv_bfloat16, 64) }
    if (D == 128) { FK_BWD_TILES(__nv_bfloat16, 128) }
  }
#undef FK_BWD_TILES
#undef FK_BWD
  return cudaErrorInvalidValue;
}
