// What the two materializing steps of the ladder (naive.cu, tiled.cu) share: the epilogues of their
// score products, the row softmax kernels (forward and backward) that run between the products on
// the N x N matrices in global memory, and FK_TRY. Both take k, v shaped like q (Hkv = H, Nk = Nq;
// flash_kernels/_ops.py refuses other shapes). Workspaces: ws[0] = S (forward) or P, ws[1] = dP
// (backward), each [B*H, N, N] fp32.
#pragma once
#include "common.cuh"

namespace fk {

// What a score product does with alpha * (A B^T)[i, j] before storing it: keep it as a masked
// score (-inf above the causal diagonal), turn it into a probability exp(s - LSE_i) (0 above the
// diagonal), or store it as it is.
enum Epilogue : int { kEpiScores = 0, kEpiProbs = 1, kEpiPlain = 2 };

// Row softmax in place (scores -> probabilities) and LSE; one warp per row, no shared memory.
__global__ void softmax_rows_kernel(float* __restrict__ S, float* __restrict__ lse, long rows, int N) {
  long row = (long(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float* s = S + row * N;
  float m = -INFINITY;
  for (int j = lane; j < N; j += 32) m = fmaxf(m, s[j]);
  m = warp_max(m);
  float l = 0.f;
  for (int j = lane; j < N; j += 32) l += __expf(s[j] - m);
  l = warp_sum(l);
  float inv = 1.f / l;
  for (int j = lane; j < N; j += 32) s[j] = __expf(s[j] - m) * inv;
  if (lane == 0) lse[row] = m + __logf(l);
}

// Textbook softmax backward, in place: dP <- P * (dP - sum_k P_ik dP_ik); one warp per row.
__global__ void softmax_bwd_rows_kernel(const float* __restrict__ P, float* __restrict__ dP, long rows, int N) {
  long row = (long(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* p = P + row * N;
  float* dp = dP + row * N;
  float dot = 0.f;
  for (int j = lane; j < N; j += 32) dot += p[j] * dp[j];
  dot = warp_sum(dot);
  for (int j = lane; j < N; j += 32) dp[j] = p[j] * (dp[j] - dot);
}

#define FK_TRY(expr)                         \
  do {                                       \
    cudaError_t err_ = (expr);               \
    if (err_ != cudaSuccess) return err_;    \
  } while (0)

}  // namespace fk
