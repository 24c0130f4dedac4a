// flash_simt: FlashAttention on CUDA cores (no tensor cores), fp32 accumulation, in
//             FlashAttention-2's loop order (Dao 2023): one thread block owns a Q block for the whole
//             sweep over K/V, so O_i, m_i, l_i live in registers and are written once; LSE is saved
//             for the backward pass. BS (the study's "block size", Br = Bc = BS) sets both the rows
//             per block (one warp per query row) and the keys per K/V tile.
//             Backward: one block per K/V block (one warp per key), looping over Q blocks,
//             P recomputed from LSE, Dd_i = rowsum(dO_i * O_i), dQ accumulated with fp32 atomics.
#include "common.cuh"

namespace fk {

// ------------------------------------------------------------------ FA2 forward, CUDA cores
template <typename T, int BS, int D>
__global__ void __launch_bounds__(BS * 32)
flash_simt_forward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                          T* __restrict__ O, float* __restrict__ LSE, Dims dm, float scale_log2, int causal) {
  constexpr int DPL = D / 32;   // output columns per lane
  constexpr int KST = D + 1;    // padded K row: lane j reads K_j[d] conflict-free
  extern __shared__ float smem[];
  float* Qs = smem;             // [BS][D]   Q_i, one row per warp
  float* Ks = Qs + BS * D;      // [BS][D+1]
  float* Vs = Ks + BS * KST;    // [BS][D]
  const int tid = threadIdx.x, lane = tid % 32, w = tid / 32;
  const int Nq = dm.Nq, Nk = dm.Nk;
  const long base = long(blockIdx.y) * Nq * D;            // this query head's Q and O
  const long kv_base = dm.kv_head(blockIdx.y) * Nk * D;  // its key/value head's K and V
  const int q0 = blockIdx.x * BS;
  const int i = q0 + w;  // this warp's query row

  for (int idx = tid; idx < BS * D; idx += BS * 32) {
    int r = idx / D, c = idx % D;
    Qs[idx] = (q0 + r < Nq) ? to_f(Q[base + long(q0 + r) * D + c]) : 0.f;
  }
  float o[DPL] = {};
  float m_i = -INFINITY, l_i = 0.f;
  const int kv_end = causal ? min(Nk, q0 + BS) : Nk;
  for (int j0 = 0; j0 < kv_end; j0 += BS) {
    __syncthreads();  // previous tile fully consumed (and Q_i visible on the first pass)
    for (int idx = tid; idx < BS * D; idx += BS * 32) {
      int r = idx / D, c = idx % D;
      bool ok = j0 + r < Nk;
      Ks[r * KST + c] = ok ? to_f(K[kv_base + long(j0 + r) * D + c]) : 0.f;
      Vs[r * D + c] = ok ? to_f(V[kv_base + long(j0 + r) * D + c]) : 0.f;
    }
    __syncthreads();
    // lane j < BS scores key j0 + j against this warp's row
    float s = -INFINITY;
    const int j = j0 + lane;
    if (lane < BS && i < Nq && j < Nk && !(causal && j > i)) {
      float acc = 0.f;
#pragma unroll 16
      for (int d = 0; d < D; ++d) acc += Qs[w * D + d] * Ks[lane * KST + d];
      s = acc * scale_log2;
    }
    const float m_new = fmaxf(m_i, warp_max(s));
    const float p = (s == -INFINITY) ? 0.f : fast_exp2(s - m_new);
    const float alpha = (m_i == -INFINITY) ? 0.f : fast_exp2(m_i - m_new);
    l_i = l_i * alpha + warp_sum(p);
#pragma unroll
    for (int c = 0; c < DPL; ++c) o[c] *= alpha;
#pragma unroll 4
    for (int jj = 0; jj < BS; ++jj) {
      float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
      for (int c = 0; c < DPL; ++c) o[c] += pj * Vs[jj * D + lane + 32 * c];
    }
    m_i = m_new;
  }
  if (i < Nq) {
    const float inv = 1.f / l_i;
#pragma unroll
    for (int c = 0; c < DPL; ++c) O[base + long(i) * D + lane + 32 * c] = from_f<T>(o[c] * inv);
    if (lane == 0) LSE[long(blockIdx.y) * Nq + i] = (m_i + __log2f(l_i)) * kLn2;
  }
}

// ------------------------------------------------------------------ FA2 backward, CUDA cores
template <typename T, int BS, int D>
__global__ void __launch_bounds__(BS * 32)
flash_simt_backward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                           const float* __restrict__ LSE, const float* __restrict__ Dd, const T* __restrict__ dO,
                           float* __restrict__ dQacc, T* __restrict__ dK, T* __restrict__ dV, Dims dm, float scale,
                           int causal) {
  constexpr int DPL = D / 32;
  constexpr int QST = D + 1;  // padded Q/dO rows: lane r reads row r conflict-free
  extern __shared__ float smem[];
  float* Ks = smem;                 // [BS][D]   K_j block, one key per warp
  float* Vs = Ks + BS * D;          // [BS][D]
  float* Qs = Vs + BS * D;          // [BS][D+1]
  float* dOs = Qs + BS * QST;       // [BS][D+1]
  float* dSs = dOs + BS * QST;      // [BS q][BS+1 k]
  float* lse2 = dSs + BS * (BS + 1);  // [BS] LSE * log2(e)
  float* Dds = lse2 + BS;           // [BS]
  const int tid = threadIdx.x, lane = tid % 32, w = tid / 32;
  const int Nq = dm.Nq, Nk = dm.Nk, G = dm.H / dm.Hkv;
  const int kvh = blockIdx.y;  // b * Hkv + key/value head: the block sweeps its G query heads
  const long kv_base = long(kvh) * Nk * D;
  const long qh0 = (kvh / dm.Hkv) * dm.H + (kvh % dm.Hkv) * G;
  const int k0 = blockIdx.x * BS;
  const int j = k0 + w;  // this warp's key
  const float scale_log2 = scale * kLog2e;

  for (int idx = tid; idx < BS * D; idx += BS * 32) {
    int r = idx / D, c = idx % D;
    bool ok = k0 + r < Nk;
    Ks[idx] = ok ? to_f(K[kv_base + long(k0 + r) * D + c]) : 0.f;
    Vs[idx] = ok ? to_f(V[kv_base + long(k0 + r) * D + c]) : 0.f;
  }
  float dk[DPL] = {}, dv[DPL] = {};
  const int q_begin = causal ? (k0 / BS) * BS : 0;
  for (long qh = qh0; qh < qh0 + G; ++qh)
  for (int q0 = q_begin; q0 < Nq; q0 += BS) {
    const long base = qh * Nq * D;
    __syncthreads();
    for (int idx = tid; idx < BS * D; idx += BS * 32) {
      int r = idx / D, c = idx % D;
      bool ok = q0 + r < Nq;
      Qs[r * QST + c] = ok ? to_f(Q[base + long(q0 + r) * D + c]) : 0.f;
      dOs[r * QST + c] = ok ? to_f(dO[base + long(q0 + r) * D + c]) : 0.f;
    }
    for (int r = tid; r < BS; r += BS * 32) {
      bool ok = q0 + r < Nq;
      lse2[r] = ok ? LSE[qh * Nq + q0 + r] * kLog2e : 0.f;
      Dds[r] = ok ? Dd[qh * Nq + q0 + r] : 0.f;
    }
    __syncthreads();
    // lane r < BS: query row q0 + r against this warp's key j
    float p = 0.f, ds = 0.f;
    const int i = q0 + lane;
    if (lane < BS && i < Nq && j < Nk && !(causal && j > i)) {
      float s = 0.f, dp = 0.f;
#pragma unroll 16
      for (int d = 0; d < D; ++d) {
        s += Qs[lane * QST + d] * Ks[w * D + d];
        dp += dOs[lane * QST + d] * Vs[w * D + d];
      }
      p = fast_exp2(s * scale_log2 - lse2[lane]);
      ds = p * (dp - Dds[lane]);
    }
#pragma unroll 4
    for (int r = 0; r < BS; ++r) {
      float pr = __shfl_sync(0xffffffffu, p, r), dsr = __shfl_sync(0xffffffffu, ds, r);
#pragma unroll
      for (int c = 0; c < DPL; ++c) {
        dv[c] += pr * dOs[r * QST + lane + 32 * c];
        dk[c] += dsr * Qs[r * QST + lane + 32 * c];
      }
    }
    if (lane < BS) dSs[lane * (BS + 1) + w] = ds;
    __syncthreads();
    // dQ_i += scale * dS_ij K_j   over this block's BS keys
    for (int idx = tid; idx < BS * D; idx += BS * 32) {
      int r = idx / D, c = idx % D;
      if (q0 + r >= Nq) continue;
      float acc = 0.f;
#pragma unroll 8
      for (int kk = 0; kk < BS; ++kk) acc += dSs[r * (BS + 1) + kk] * Ks[kk * D + c];
      atomicAdd(&dQacc[base + long(q0 + r) * D + c], acc * scale);
    }
  }
  if (j < Nk) {
#pragma unroll
    for (int c = 0; c < DPL; ++c) {
      dK[kv_base + long(j) * D + lane + 32 * c] = from_f<T>(dk[c] * scale);
      dV[kv_base + long(j) * D + lane + 32 * c] = from_f<T>(dv[c]);
    }
  }
}

template <typename T, int BS, int D>
cudaError_t simt_forward_launch(const AttnArgs& a, cudaStream_t stream) {
  auto kernel = flash_simt_forward_kernel<T, BS, D>;
  const int smem = (BS * D * 2 + BS * (D + 1)) * sizeof(float);
  cudaError_t err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(cdiv(a.Nq, BS), a.B * a.H), BS * 32, smem, stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o),
      a.lse, dims_of(a), a.scale * kLog2e, a.causal);
  return cudaGetLastError();
}

template <typename T, int BS, int D>
cudaError_t simt_backward_launch(const AttnArgs& a, cudaStream_t stream) {
  auto kernel = flash_simt_backward_kernel<T, BS, D>;
  const int smem = (2 * BS * D + 2 * BS * (D + 1) + BS * (BS + 1) + 2 * BS) * sizeof(float);
  cudaError_t err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(cdiv(a.Nk, BS), a.B * a.Hkv), BS * 32, smem, stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), a.lse, a.Dd,
      static_cast<const T*>(a.dO), a.dq_acc, static_cast<T*>(a.dk), static_cast<T*>(a.dv), dims_of(a), a.scale,
      a.causal);
  return cudaGetLastError();
}

// The block-size table: option = Br = Bc (one warp per row), as flash_kernels/_ops.py passes it.
template <typename T, int D, typename F>
cudaError_t by_block_size(const AttnArgs& a, F&& f) {
  switch (a.option) {
    case 4: return f(IntTag<4>{});
    case 8: return f(IntTag<8>{});
    case 16: return f(IntTag<16>{});
    case 32: return f(IntTag<32>{});
    default: return cudaErrorInvalidValue;
  }
}

template <typename T, int D>
cudaError_t simt_forward(const AttnArgs& a, cudaStream_t stream) {
  return by_block_size<T, D>(a, [&](auto bs) { return simt_forward_launch<T, decltype(bs)::value, D>(a, stream); });
}

template <typename T, int D>
cudaError_t simt_backward(const AttnArgs& a, cudaStream_t stream) {
  const long rows = long(a.B) * a.H * a.Nq;
  cudaError_t err = cudaMemsetAsync(a.dq_acc, 0, sizeof(float) * rows * D, stream);
  if (err == cudaSuccess) err = launch_rowdot<T>(a.dO, a.o, a.Dd, rows, D, stream);
  if (err == cudaSuccess)
    err = by_block_size<T, D>(a, [&](auto bs) { return simt_backward_launch<T, decltype(bs)::value, D>(a, stream); });
  if (err == cudaSuccess) err = launch_cast<T>(a.dq_acc, a.dq, rows * D, stream);
  return err;
}

}  // namespace fk

int flash_simt_forward(const fk::AttnArgs& a, cudaStream_t stream) {
  return fk::dispatch_dtype_hdim</*fp32=*/true>(a, [&](auto t, auto d) {
    return fk::simt_forward<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}

int flash_simt_backward(const fk::AttnArgs& a, cudaStream_t stream) {
  return fk::dispatch_dtype_hdim</*fp32=*/true>(a, [&](auto t, auto d) {
    return fk::simt_backward<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
