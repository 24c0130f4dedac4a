// FlashAttention on CUDA cores (no tensor cores), fp32 accumulation.
//
// flash_fa1:  FlashAttention-1 loop order (Dao et al. 2022, Algorithm 1): the OUTER loop runs over
//             K/V blocks, the inner loop over Q blocks, so the running output O_i and the softmax
//             statistics (m_i, l_i) are read, rescaled and written back to global memory once per
//             K/V block. Compared with FA2 this adds O(N^2 D / Bc) global traffic.
// flash_simt: FlashAttention-2 loop order (Dao 2023): one thread block owns a Q block for the whole
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
                          T* __restrict__ O, float* __restrict__ LSE, int N, float scale_log2, int causal) {
  constexpr int DPL = D / 32;   // output columns per lane
  constexpr int KST = D + 1;    // padded K row: lane j reads K_j[d] conflict-free
  extern __shared__ float smem[];
  float* Qs = smem;             // [BS][D]   Q_i, one row per warp
  float* Ks = Qs + BS * D;      // [BS][D+1]
  float* Vs = Ks + BS * KST;    // [BS][D]
  const int tid = threadIdx.x, lane = tid % 32, w = tid / 32;
  const long base = long(blockIdx.y) * N * D;
  const int q0 = blockIdx.x * BS;
  const int i = q0 + w;  // this warp's query row

  for (int idx = tid; idx < BS * D; idx += BS * 32) {
    int r = idx / D, c = idx % D;
    Qs[idx] = (q0 + r < N) ? to_f(Q[base + long(q0 + r) * D + c]) : 0.f;
  }
  float o[DPL] = {};
  float m_i = -INFINITY, l_i = 0.f;
  const int kv_end = causal ? min(N, q0 + BS) : N;
  for (int j0 = 0; j0 < kv_end; j0 += BS) {
    __syncthreads();  // previous tile fully consumed (and Q_i visible on the first pass)
    for (int idx = tid; idx < BS * D; idx += BS * 32) {
      int r = idx / D, c = idx % D;
      bool ok = j0 + r < N;
      Ks[r * KST + c] = ok ? to_f(K[base + long(j0 + r) * D + c]) : 0.f;
      Vs[r * D + c] = ok ? to_f(V[base + long(j0 + r) * D + c]) : 0.f;
    }
    __syncthreads();
    // lane j < BS scores key j0 + j against this warp's row
    float s = -INFINITY;
    const int j = j0 + lane;
    if (lane < BS && i < N && j < N && !(causal && j > i)) {
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
  if (i < N) {
    const float inv = 1.f / l_i;
#pragma unroll
    for (int c = 0; c < DPL; ++c) O[base + long(i) * D + lane + 32 * c] = from_f<T>(o[c] * inv);
    if (lane == 0) LSE[long(blockIdx.y) * N + i] = (m_i + __log2f(l_i)) * kLn2;
  }
}

// ------------------------------------------------------------------ FA2 backward, CUDA cores
template <typename T, int BS, int D>
__global__ void __launch_bounds__(BS * 32)
flash_simt_backward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                           const float* __restrict__ LSE, const float* __restrict__ Dd, const T* __restrict__ dO,
                           float* __restrict__ dQacc, T* __restrict__ dK, T* __restrict__ dV, int N, float scale,
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
  const long bh = blockIdx.y;
  const long base = bh * N * D;
  const int k0 = blockIdx.x * BS;
  const int j = k0 + w;  // this warp's key
  const float scale_log2 = scale * kLog2e;

  for (int idx = tid; idx < BS * D; idx += BS * 32) {
    int r = idx / D, c = idx % D;
    bool ok = k0 + r < N;
    Ks[idx] = ok ? to_f(K[base + long(k0 + r) * D + c]) : 0.f;
    Vs[idx] = ok ? to_f(V[base + long(k0 + r) * D + c]) : 0.f;
  }
  float dk[DPL] = {}, dv[DPL] = {};
  const int q_begin = causal ? (k0 / BS) * BS : 0;
  for (int q0 = q_begin; q0 < N; q0 += BS) {
    __syncthreads();
    for (int idx = tid; idx < BS * D; idx += BS * 32) {
      int r = idx / D, c = idx % D;
      bool ok = q0 + r < N;
      Qs[r * QST + c] = ok ? to_f(Q[base + long(q0 + r) * D + c]) : 0.f;
      dOs[r * QST + c] = ok ? to_f(dO[base + long(q0 + r) * D + c]) : 0.f;
    }
    for (int r = tid; r < BS; r += BS * 32) {
      bool ok = q0 + r < N;
      lse2[r] = ok ? LSE[bh * N + q0 + r] * kLog2e : 0.f;
      Dds[r] = ok ? Dd[bh * N + q0 + r] : 0.f;
    }
    __syncthreads();
    // lane r < BS: query row q0 + r against this warp's key j
    float p = 0.f, ds = 0.f;
    const int i = q0 + lane;
    if (lane < BS && i < N && j < N && !(causal && j > i)) {
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
      if (q0 + r >= N) continue;
      float acc = 0.f;
#pragma unroll 8
      for (int kk = 0; kk < BS; ++kk) acc += dSs[r * (BS + 1) + kk] * Ks[kk * D + c];
      atomicAdd(&dQacc[base + long(q0 + r) * D + c], acc * scale);
    }
  }
  if (j < N) {
#pragma unroll
    for (int c = 0; c < DPL; ++c) {
      dK[base + long(j) * D + lane + 32 * c] = from_f<T>(dk[c] * scale);
      dV[base + long(j) * D + lane + 32 * c] = from_f<T>(dv[c]);
    }
  }
}

// ------------------------------------------------------------------ FA1 forward, CUDA cores
// One warp per query row, FA1_BR rows per Q block, FA1_BC keys per K/V block. A thread block
// owns FA1_GROUP consecutive Q blocks and sweeps K/V in the outer loop; O (fp32), m, l are
// kept in global memory between K/V blocks, as in FA1's Algorithm 1.
constexpr int FA1_BR = 16, FA1_BC = 32, FA1_GROUP = 4;

template <typename T, int D>
__global__ void __launch_bounds__(FA1_BR * 32)
fa1_forward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V, T* __restrict__ O,
                   float* __restrict__ LSE, float* __restrict__ Oacc, float* __restrict__ Mg,
                   float* __restrict__ Lg, int N, float scale_log2, int causal) {
  constexpr int DPL = D / 32, KST = D + 1;
  __shared__ float Ks[FA1_BC * KST];
  __shared__ float Vs[FA1_BC * D];
  __shared__ float Qs[FA1_BR * D];
  const int tid = threadIdx.x, lane = tid % 32, w = tid / 32;
  const long bh = blockIdx.y;
  const long base = bh * N * D;
  const int row_begin = blockIdx.x * FA1_BR * FA1_GROUP;
  const int row_end = min(N, row_begin + FA1_BR * FA1_GROUP);
  // initialise O = 0, m = -inf, l = 0 in global memory (Algorithm 1, line 2)
  for (int i = row_begin + w; i < row_end; i += FA1_BR) {
    for (int c = lane; c < D; c += 32) Oacc[base + long(i) * D + c] = 0.f;
    if (lane == 0) { Mg[bh * N + i] = -INFINITY; Lg[bh * N + i] = 0.f; }
  }
  const int kv_end = causal ? row_end : N;
  for (int j0 = 0; j0 < kv_end; j0 += FA1_BC) {  // outer loop: K/V blocks
    __syncthreads();
    for (int idx = tid; idx < FA1_BC * D; idx += FA1_BR * 32) {
      int r = idx / D, c = idx % D;
      bool ok = j0 + r < N;
      Ks[r * KST + c] = ok ? to_f(K[base + long(j0 + r) * D + c]) : 0.f;
      Vs[r * D + c] = ok ? to_f(V[base + long(j0 + r) * D + c]) : 0.f;
    }
    __syncthreads();
    for (int qb = row_begin; qb < row_end; qb += FA1_BR) {  // inner loop: Q blocks
      const int i = qb + w;
      if (i >= N) continue;            // warp-uniform
      if (causal && j0 > i) continue;  // the whole K/V block is in this row's future
      for (int c = lane; c < D; c += 32) Qs[w * D + c] = to_f(Q[base + long(i) * D + c]);
      __syncwarp();
      float s = -INFINITY;
      const int j = j0 + lane;
      if (lane < FA1_BC && j < N && !(causal && j > i)) {
        float acc = 0.f;
#pragma unroll 16
        for (int d = 0; d < D; ++d) acc += Qs[w * D + d] * Ks[lane * KST + d];
        s = acc * scale_log2;
      }
      const float m_t = warp_max(s);  // finite: key j0 <= i is unmasked
      const float p = (s == -INFINITY) ? 0.f : fast_exp2(s - m_t);
      const float l_t = warp_sum(p);
      const float m_old = Mg[bh * N + i], l_old = Lg[bh * N + i];
      const float m_new = fmaxf(m_old, m_t);
      const float a_old = (m_old == -INFINITY) ? 0.f : fast_exp2(m_old - m_new);
      const float a_t = fast_exp2(m_t - m_new);
      const float l_new = a_old * l_old + a_t * l_t;
      float pv[DPL] = {};
      for (int jj = 0; jj < FA1_BC; ++jj) {
        float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
        for (int c = 0; c < DPL; ++c) pv[c] += pj * Vs[jj * D + lane + 32 * c];
      }
      // O_i <- (l_i e^{m_i - m_new} O_i + e^{m~ - m_new} P~ V_j) / l_new, through global memory
#pragma unroll
      for (int c = 0; c < DPL; ++c) {
        float* op = &Oacc[base + long(i) * D + lane + 32 * c];
        *op = (l_old * a_old * (*op) + a_t * pv[c]) / l_new;
      }
      __syncwarp();
      if (lane == 0) { Mg[bh * N + i] = m_new; Lg[bh * N + i] = l_new; }
    }
  }
  __syncthreads();
  for (int i = row_begin + w; i < row_end; i += FA1_BR) {
    for (int c = lane; c < D; c += 32) O[base + long(i) * D + c] = from_f<T>(Oacc[base + long(i) * D + c]);
    if (lane == 0) LSE[bh * N + i] = (Mg[bh * N + i] + __log2f(Lg[bh * N + i])) * kLn2;
  }
}

template <typename T, int BS, int D>
cudaError_t simt_forward_launch(const void* q, const void* k, const void* v, void* o, float* lse, int BH, int N,
                                float scale, int causal, cudaStream_t stream) {
  auto kernel = flash_simt_forward_kernel<T, BS, D>;
  const int smem = (BS * D * 2 + BS * (D + 1)) * sizeof(float);
  static cudaError_t attr = allow_smem(kernel, smem);
  if (attr != cudaSuccess) return attr;
  kernel<<<dim3(cdiv(N, BS), BH), BS * 32, smem, stream>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(o), lse, N,
      scale * kLog2e, causal);
  return cudaGetLastError();
}

template <typename T, int BS, int D>
cudaError_t simt_backward_launch(const void* q, const void* k, const void* v, const float* lse, const float* Dd,
                                 const void* dO, float* dq_acc, void* dk, void* dv, int BH, int N, float scale,
                                 int causal, cudaStream_t stream) {
  auto kernel = flash_simt_backward_kernel<T, BS, D>;
  const int smem = (2 * BS * D + 2 * BS * (D + 1) + BS * (BS + 1) + 2 * BS) * sizeof(float);
  static cudaError_t attr = allow_smem(kernel, smem);
  if (attr != cudaSuccess) return attr;
  kernel<<<dim3(cdiv(N, BS), BH), BS * 32, smem, stream>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), lse, Dd,
      static_cast<const T*>(dO), dq_acc, static_cast<T*>(dk), static_cast<T*>(dv), N, scale, causal);
  return cudaGetLastError();
}

#define FK_DISPATCH_BS_D(bs, d, BS, DD, ...)                                        \
  if (d == 64) {                                                                    \
    constexpr int DD = 64;                                                          \
    switch (bs) {                                                                   \
      case 4: { constexpr int BS = 4; __VA_ARGS__; } break;                         \
      case 8: { constexpr int BS = 8; __VA_ARGS__; } break;                         \
      case 16: { constexpr int BS = 16; __VA_ARGS__; } break;                       \
      case 32: { constexpr int BS = 32; __VA_ARGS__; } break;                       \
      default: return cudaErrorInvalidValue;                                        \
    }                                                                               \
  } else if (d == 128) {                                                            \
    constexpr int DD = 128;                                                         \
    switch (bs) {                                                                   \
      case 4: { constexpr int BS = 4; __VA_ARGS__; } break;                         \
      case 8: { constexpr int BS = 8; __VA_ARGS__; } break;                         \
      case 16: { constexpr int BS = 16; __VA_ARGS__; } break;                       \
      case 32: { constexpr int BS = 32; __VA_ARGS__; } break;                       \
      default: return cudaErrorInvalidValue;                                        \
    }                                                                               \
  } else {                                                                          \
    return cudaErrorInvalidValue;                                                   \
  }

}  // namespace fk

int flash_simt_forward(int dtype, int block_size, const void* q, const void* k, const void* v, void* o, float* lse,
                       int BH, int N, int D, float scale, int causal, cudaStream_t stream) {
  using namespace fk;
  FK_DISPATCH_DTYPE(dtype, T, {
    FK_DISPATCH_BS_D(block_size, D, BS, DD,
                     return simt_forward_launch<T, BS, DD>(q, k, v, o, lse, BH, N, scale, causal, stream));
  });
  return cudaSuccess;
}

int flash_simt_backward(int dtype, int block_size, const void* q, const void* k, const void* v, const void* o,
                        const float* lse, const void* dO, float* Dd, float* dq_acc, void* dq, void* dk, void* dv,
                        int BH, int N, int D, float scale, int causal, cudaStream_t stream) {
  using namespace fk;
  const long rows = long(BH) * N;
  FK_DISPATCH_DTYPE(dtype, T, {
    cudaError_t err = cudaMemsetAsync(dq_acc, 0, sizeof(float) * rows * D, stream);
    if (err != cudaSuccess) return err;
    err = launch_rowdot<T>(dO, o, Dd, rows, D, stream);
    if (err != cudaSuccess) return err;
    FK_DISPATCH_BS_D(block_size, D, BS, DD, {
      err = simt_backward_launch<T, BS, DD>(q, k, v, lse, Dd, dO, dq_acc, dk, dv, BH, N, scale, causal, stream);
      if (err != cudaSuccess) return err;
    });
    return launch_cast<T>(dq_acc, dq, rows * D, stream);
  });
  return cudaSuccess;
}

int flash_fa1_forward(int dtype, const void* q, const void* k, const void* v, void* o, float* lse, float* o_acc,
                      float* m, float* l, int BH, int N, int D, float scale, int causal, cudaStream_t stream) {
  using namespace fk;
  dim3 grid(cdiv(N, FA1_BR * FA1_GROUP), BH);
  FK_DISPATCH_DTYPE(dtype, T, {
    if (D == 64) {
      fa1_forward_kernel<T, 64><<<grid, FA1_BR * 32, 0, stream>>>(
          static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(o), lse,
          o_acc, m, l, N, scale * kLog2e, causal);
    } else if (D == 128) {
      fa1_forward_kernel<T, 128><<<grid, FA1_BR * 32, 0, stream>>>(
          static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(o), lse,
          o_acc, m, l, N, scale * kLog2e, causal);
    } else {
      return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
  });
  return cudaSuccess;
}
