// flash_fa1: FlashAttention-1 on CUDA cores (Dao et al. 2022, Algorithm 1), fp32 accumulation.
// The OUTER loop runs over K/V blocks, the inner loop over Q blocks, so the running output O_i and
// the softmax statistics (m_i, l_i) are read, rescaled and written back to global memory once per
// K/V block. Compared with FlashAttention-2's order (flash_simt.cu) this adds O(N^2 D / Bc) global
// traffic.
#include "common.cuh"

namespace fk {

// ------------------------------------------------------------------ FA1 forward, CUDA cores
// One warp per query row, FA1_BR rows per Q block, FA1_BC keys per K/V block. A thread block
// owns FA1_GROUP consecutive Q blocks and sweeps K/V in the outer loop; O (fp32), m, l are
// kept in global memory between K/V blocks, as in FA1's Algorithm 1.
constexpr int FA1_BR = 16, FA1_BC = 32, FA1_GROUP = 4;

template <typename T, int D>
__global__ void __launch_bounds__(FA1_BR * 32)
fa1_forward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V, T* __restrict__ O,
                   float* __restrict__ LSE, float* __restrict__ Oacc, float* __restrict__ Mg,
                   float* __restrict__ Lg, Dims dm, float scale_log2, int causal) {
  constexpr int DPL = D / 32, KST = D + 1;
  __shared__ float Ks[FA1_BC * KST];
  __shared__ float Vs[FA1_BC * D];
  __shared__ float Qs[FA1_BR * D];
  const int tid = threadIdx.x, lane = tid % 32, w = tid / 32;
  const int N = dm.Nq, Nk = dm.Nk;
  const long bh = blockIdx.y;
  const long base = bh * N * D;                         // Q, O and the fp32 O/m/l of this query head
  const long kv_base = dm.kv_head(bh) * Nk * D;
  const int row_begin = blockIdx.x * FA1_BR * FA1_GROUP;
  const int row_end = min(N, row_begin + FA1_BR * FA1_GROUP);
  // initialise O = 0, m = -inf, l = 0 in global memory (Algorithm 1, line 2)
  for (int i = row_begin + w; i < row_end; i += FA1_BR) {
    for (int c = lane; c < D; c += 32) Oacc[base + long(i) * D + c] = 0.f;
    if (lane == 0) { Mg[bh * N + i] = -INFINITY; Lg[bh * N + i] = 0.f; }
  }
  const int kv_end = causal ? min(Nk, row_end) : Nk;
  for (int j0 = 0; j0 < kv_end; j0 += FA1_BC) {  // outer loop: K/V blocks
    __syncthreads();
    for (int idx = tid; idx < FA1_BC * D; idx += FA1_BR * 32) {
      int r = idx / D, c = idx % D;
      bool ok = j0 + r < Nk;
      Ks[r * KST + c] = ok ? to_f(K[kv_base + long(j0 + r) * D + c]) : 0.f;
      Vs[r * D + c] = ok ? to_f(V[kv_base + long(j0 + r) * D + c]) : 0.f;
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
      if (lane < FA1_BC && j < Nk && !(causal && j > i)) {
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

// FA1 keeps O (fp32), m and l in global memory: workspaces ws[0], ws[1], ws[2].
template <typename T, int D>
cudaError_t fa1_forward(const AttnArgs& a, cudaStream_t stream) {
  fa1_forward_kernel<T, D><<<dim3(cdiv(a.Nq, FA1_BR * FA1_GROUP), a.B * a.H), FA1_BR * 32, 0, stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o),
      a.lse, a.ws[0], a.ws[1], a.ws[2], dims_of(a), a.scale * kLog2e, a.causal);
  return cudaGetLastError();
}

}  // namespace fk

int flash_fa1_forward(const fk::AttnArgs& a, cudaStream_t stream) {
  return fk::dispatch_dtype_hdim</*fp32=*/true>(a, [&](auto t, auto d) {
    return fk::fa1_forward<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
