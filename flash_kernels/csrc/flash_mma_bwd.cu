// flash_mma backward: FlashAttention-2 backward on tensor cores.
// One thread block owns BC keys (one warp per 16 keys) and keeps dK_j, dV_j in registers while it
// sweeps the query blocks (BR rows each; Q_i, dO_i double-buffered with cp.async). Per query block,
// all on mma.sync m16n8k16 with fp32 accumulators:
//   S^T = K_j Q_i^T,  P^T = exp(scale S^T - LSE_i)         (recomputed, never stored)
//   dV_j += P^T dO_i,  dP^T = V_j dO_i^T,  dS^T = P^T (dP^T - Dd_i)
//   dK_j += dS^T Q_i,  dQ_i += dS K_j  (dS^T staged in shared memory; fp32 atomics into dQacc)
// Dd_i = rowsum(dO_i * O_i) comes from a small preprocessing kernel; dQacc is cast at the end.
// Grouped-query attention: a block owns the keys of one key/value head and sweeps the query blocks
// of every query head that shares it, so dK_j, dV_j come out already summed over the group.
#include "mma.cuh"

namespace fk {

template <typename T, int D, int BR, int BC>
__global__ void __launch_bounds__(BC / 16 * 32)
flash_mma_backward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                          const float* __restrict__ LSE, const float* __restrict__ Dd, const T* __restrict__ dO,
                          float* __restrict__ dQacc, T* __restrict__ dK, T* __restrict__ dV, Dims dm, float scale,
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
  const int Nq = dm.Nq, Nk = dm.Nk, G = dm.H / dm.Hkv;
  const int kvh = blockIdx.y;                         // b * Hkv + key/value head
  const long kv_off = long(kvh) * Nk * D;
  const int qh0 = (kvh / dm.Hkv) * dm.H + (kvh % dm.Hkv) * G;  // first query head of the group
  const int k0 = blockIdx.x * BC;
  const int q_start = causal ? (k0 / BR) * BR : 0;  // no earlier query sees these keys
  const int n_qb = q_start < Nq ? (Nq - q_start + BR - 1) / BR : 0;
  const int n_it = G * n_qb;                         // (query head, query block) steps
  const float scale_log2 = scale * kLog2e;
  // start loading the Q, dO, LSE, Dd rows qb.. of query head qh ([B*H] index) into stage st
  auto stage = [&](int qh, int qb, int st) {
    load_tile_async<BR, D, NT>(sQ + st * (BR * D * 2), Q + long(qh) * Nq * D, qb, Nq, tid);
    load_tile_async<BR, D, NT>(sdO + st * (BR * D * 2), dO + long(qh) * Nq * D, qb, Nq, tid);
    for (int r = tid; r < BR; r += NT) {
      const int q = qb + r;
      lse_s[st * BR + r] = q < Nq ? LSE[long(qh) * Nq + q] * kLog2e : 0.f;
      dd_s[st * BR + r] = q < Nq ? Dd[long(qh) * Nq + q] : 0.f;
    }
  };

  load_tile_async<BC, D, NT>(sK, K + kv_off, k0, Nk, tid);
  load_tile_async<BC, D, NT>(sV, V + kv_off, k0, Nk, tid);
  if (n_it > 0) stage(qh0, q_start, 0);
  cp_async_commit();

  float dk[ND][4], dv[ND][4];
#pragma unroll
  for (int i = 0; i < ND; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.f;
  const int key0 = k0 + warp * 16 + (lane >> 2);  // this thread's keys: key0 and key0 + 8

  int qh = qh0, qb = q_start;  // this step's query head and first row; steps run head by head
  for (int it = 0; it < n_it; ++it) {
    const int st = it & 1;
    const int qh_next = qb + BR < Nq ? qh : qh + 1, qb_next = qb + BR < Nq ? qb + BR : q_start;
    const uint32_t cQ = sQ + st * (BR * D * 2), cdO = sdO + st * (BR * D * 2);
    const float* lse_c = lse_s + st * BR;
    const float* dd_c = dd_s + st * BR;
    cp_async_wait<0>();
    __syncthreads();  // this stage has landed; everyone is done with the other stage and with dS
    if (it + 1 < n_it) stage(qh_next, qb_next, st ^ 1);
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
      ldsm_a<D>(ak, sK, warp * 16, kd);
      ldsm_a<D>(av, sV, warp * 16, kd);
#pragma unroll
      for (int n2 = 0; n2 < NQ / 2; ++n2) {
        uint32_t b[4];
        ldsm_b<D>(b, cQ, n2 * 16, kd);
        mma16816<T>(s[2 * n2], ak, b[0], b[1]);
        mma16816<T>(s[2 * n2 + 1], ak, b[2], b[3]);
        ldsm_b<D>(b, cdO, n2 * 16, kd);
        mma16816<T>(dp[2 * n2], av, b[0], b[1]);
        mma16816<T>(dp[2 * n2 + 1], av, b[2], b[3]);
      }
    }
    // P^T and dS^T (masked: keys past Nk, queries past Nq, causal keys after the query)
    const bool need_mask = (k0 + BC > Nk) || (qb + BR > Nq) || (causal && qb < k0 + BC);
#pragma unroll
    for (int nq = 0; nq < NQ; ++nq) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = nq * 8 + (lane & 3) * 2 + (e & 1);
        float p = fast_exp2(s[nq][e] * scale_log2 - lse_c[qi]);
        if (need_mask) {
          const int key = key0 + (e >> 1) * 8, q = qb + qi;
          if (key >= Nk || q >= Nq || (causal && key > q)) p = 0.f;
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
      const int r = warp * 16 + (lane >> 2), b = (lane & 3) * 4;
#pragma unroll
      for (int kk = 0; kk < BR / 16; ++kk) {
        *reinterpret_cast<uint32_t*>(dS_ptr + swz<BR>(r, 2 * kk) + b) = dsf[kk][0];
        *reinterpret_cast<uint32_t*>(dS_ptr + swz<BR>(r + 8, 2 * kk) + b) = dsf[kk][1];
        *reinterpret_cast<uint32_t*>(dS_ptr + swz<BR>(r, 2 * kk + 1) + b) = dsf[kk][2];
        *reinterpret_cast<uint32_t*>(dS_ptr + swz<BR>(r + 8, 2 * kk + 1) + b) = dsf[kk][3];
      }
    }
    // dV += P^T dO_i,  dK += dS^T Q_i   (B operands: dO_i, Q_i transposed out of shared memory)
#pragma unroll
    for (int kk = 0; kk < BR / 16; ++kk) {
#pragma unroll
      for (int d2 = 0; d2 < D / 16; ++d2) {
        uint32_t b[4];
        ldsm_bt<D>(b, cdO, kk * 16, d2);
        mma16816<T>(dv[2 * d2], pf[kk], b[0], b[1]);
        mma16816<T>(dv[2 * d2 + 1], pf[kk], b[2], b[3]);
        ldsm_bt<D>(b, cQ, kk * 16, d2);
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
        ldsm_at<BR>(a, sdS, kk * 16, rg);
#pragma unroll
        for (int d2 = 0; d2 < DW / 16; ++d2) {
          uint32_t b[4];
          ldsm_bt<D>(b, sK, kk * 16, dsp * (DW / 16) + d2);
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
          if (q < Nq) atomicAdd(&dQacc[(long(qh) * Nq + q) * D + d], acc[dn][e] * scale);
        }
      }
    }
    qh = qh_next;
    qb = qb_next;
  }
  cp_async_wait<0>();
  __syncthreads();  // K/V tiles are free: stage dK, dV there for 16-byte stores
#pragma unroll
  for (int nd = 0; nd < ND; ++nd) {
    stsm_c<D, T>(smem, dk[nd], warp * 16, nd, scale, scale);
    stsm_c<D, T>(smem + BC * D * 2, dv[nd], warp * 16, nd);
  }
  __syncwarp();
  store_tile<16, D, 32>(reinterpret_cast<const T*>(smem + warp * 16 * D * 2), dK + kv_off, k0 + warp * 16, Nk, lane);
  store_tile<16, D, 32>(reinterpret_cast<const T*>(smem + BC * D * 2 + warp * 16 * D * 2), dV + kv_off,
                        k0 + warp * 16, Nk, lane);
}

template <typename T, int D, int BR, int BC>
cudaError_t mma_backward_launch(const AttnArgs& a, cudaStream_t stream) {
  auto kernel = flash_mma_backward_kernel<T, D, BR, BC>;
  constexpr int smem = (2 * BC * D + 4 * BR * D + BC * BR) * 2 + 4 * BR * 4;
  cudaError_t err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(cdiv(a.Nk, BC), a.B * a.Hkv), BC / 16 * 32, smem, stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), a.lse, a.Dd,
      static_cast<const T*>(a.dO), a.dq_acc, static_cast<T*>(a.dk), static_cast<T*>(a.dv), dims_of(a), a.scale,
      a.causal);
  return cudaGetLastError();
}

// The tile table: option code -> (query rows per step BR, keys per block BC; one warp per 16 keys).
// Codes as flash_kernels/_ops.py names them: 0 = 64x64, 1 = 32x64, 2 = 64x128.
template <typename T, int D>
cudaError_t mma_backward_tiles(const AttnArgs& a, cudaStream_t stream) {
  switch (a.option) {
    case 0: return mma_backward_launch<T, D, 64, 64>(a, stream);
    case 1: return mma_backward_launch<T, D, 32, 64>(a, stream);
    case 2:  // at D = 128 the dK, dV accumulators of 128 keys spill
      if constexpr (D == 64) return mma_backward_launch<T, D, 64, 128>(a, stream);
      return cudaErrorInvalidValue;
    default: return cudaErrorInvalidValue;
  }
}

// Dd = rowsum(dO * O); dQ accumulated in fp32, then cast.
template <typename T, int D>
cudaError_t mma_backward(const AttnArgs& a, cudaStream_t stream) {
  const long rows = long(a.B) * a.H * a.Nq;
  cudaError_t err = cudaMemsetAsync(a.dq_acc, 0, sizeof(float) * rows * D, stream);
  if (err == cudaSuccess) err = launch_rowdot<T>(a.dO, a.o, a.Dd, rows, D, stream);
  if (err == cudaSuccess) err = mma_backward_tiles<T, D>(a, stream);
  if (err == cudaSuccess) err = launch_cast<T>(a.dq_acc, a.dq, rows * D, stream);
  return err;
}

}  // namespace fk

int flash_mma_backward(const fk::AttnArgs& a, cudaStream_t stream) {
  return fk::dispatch_dtype_hdim</*fp32=*/false>(a, [&](auto t, auto d) {
    return fk::mma_backward<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
