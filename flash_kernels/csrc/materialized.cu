// Attention that materializes the N x N score matrix in global memory (fp32), forward and backward.
//
// naive:             one thread per output element, operands read straight from global memory,
//                    no shared memory. Reads of the N x N matrices dominate; once B*H*N*N*4 bytes
//                    outgrow L2 every pass over them goes to DRAM (the memory-wall argument).
// tiled:             the same passes, but every matrix product is a 32x32 shared-memory tiled GEMM
//                    whose global loads are coalesced whatever the operand's transpose.
// tiled_uncoalesced: tiled backward with the thread->element mapping of a first-attempt
//                    naive tiled kernel: consecutive threads walk the strided dimension (uncoalesced).
//
// Forward:  S = scale * Q K^T (masked -inf), P = softmax(S) in place, LSE, O = P V.
// Backward: P = exp(scale * Q K^T - LSE), dP = dO V^T, dS = P * (dP - rowsum(P * dP)),
//           dV = P^T dO, dQ = scale * dS K, dK = scale * dS^T Q.
#include "common.cuh"

namespace fk {

enum Epilogue : int { kEpiScores = 0, kEpiProbs = 1, kEpiPlain = 2 };

// ---------------------------------------------------------------- naive (global memory only)

// C[i, j] = epilogue(alpha * A_i . B_j)   A, B: [BH, N, D] (T)   C: [BH, N, N] fp32
template <typename T, int EPI>
__global__ void naive_abt_kernel(const T* __restrict__ A, const T* __restrict__ Bm, float* __restrict__ C,
                                 const float* __restrict__ lse, int N, int D, float alpha, int causal) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  long bh = blockIdx.z;
  if (i >= N || j >= N) return;
  const T* a = A + (bh * N + i) * D;
  const T* b = Bm + (bh * N + j) * D;
  float acc = 0.f;
  for (int d = 0; d < D; ++d) acc += to_f(a[d]) * to_f(b[d]);
  float out = alpha * acc;
  bool masked = causal && j > i;
  if (EPI == kEpiScores) out = masked ? -INFINITY : out;
  if (EPI == kEpiProbs) out = masked ? 0.f : __expf(out - lse[bh * N + i]);
  C[(bh * N + i) * long(N) + j] = out;
}

// Y[i, d] = alpha * sum_j M[i, j] X[j, d]        M: [BH, N, N] fp32   X, Y: [BH, N, D]
template <typename T>
__global__ void naive_mx_kernel(const float* __restrict__ M, const T* __restrict__ X, T* __restrict__ Y,
                                int N, int D, float alpha) {
  int d = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  long bh = blockIdx.z;
  if (i >= N || d >= D) return;
  const float* m = M + (bh * N + i) * long(N);
  const T* x = X + bh * N * long(D) + d;
  float acc = 0.f;
  for (int j = 0; j < N; ++j) acc += m[j] * to_f(x[long(j) * D]);
  Y[(bh * N + i) * D + d] = from_f<T>(alpha * acc);
}

// Y[j, d] = alpha * sum_i M[i, j] X[i, d]   (reads M by column: strided)
template <typename T>
__global__ void naive_mtx_kernel(const float* __restrict__ M, const T* __restrict__ X, T* __restrict__ Y,
                                 int N, int D, float alpha) {
  int d = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  long bh = blockIdx.z;
  if (j >= N || d >= D) return;
  const float* m = M + bh * N * long(N) + j;
  const T* x = X + bh * N * long(D) + d;
  float acc = 0.f;
  for (int i = 0; i < N; ++i) acc += m[long(i) * N] * to_f(x[long(i) * D]);
  Y[(bh * N + j) * D + d] = from_f<T>(alpha * acc);
}

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

// ---------------------------------------------------------------- tiled GEMM (shared memory)

constexpr int TT = 32;  // tile edge
constexpr int TY = 8;   // block is TT x TY threads; each thread computes TT / TY outputs

// C(m, n) = epilogue(alpha * sum_k A(m, k) B(k, n)), batched over blockIdx.z.
// A(m, k) = A_T ? A[k * lda + m] : A[m * lda + k];  B(k, n) = B_T ? B[n * ldb + k] : B[k * ldb + n].
// COALESCED: consecutive threadIdx.x read consecutive addresses of each operand;
// otherwise they walk the operand's strided dimension.
template <typename TA, typename TB, typename TC, bool A_T, bool B_T, bool COALESCED, int EPI>
__global__ void __launch_bounds__(TT * TY)
tiled_gemm_kernel(const TA* __restrict__ A, const TB* __restrict__ Bm, TC* __restrict__ C, int M, int Nn,
                  int K, int lda, int ldb, long sA, long sB, long sC, float alpha,
                  const float* __restrict__ lse, int causal) {
  __shared__ float As[TT][TT + 1];  // [m][k]
  __shared__ float Bs[TT][TT + 1];  // [k][n]
  const long z = blockIdx.z;
  A += z * sA;
  Bm += z * sB;
  C += z * sC;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int m0 = blockIdx.y * TT, n0 = blockIdx.x * TT;
  float acc[TT / TY] = {};
  for (int k0 = 0; k0 < K; k0 += TT) {
#pragma unroll
    for (int r = 0; r < TT / TY; ++r) {
      // (u, w): u follows threadIdx.x. For a coalesced load u must index the operand's contiguous dim.
      int u = tx, w = ty + r * TY;
      {
        bool u_is_k = (!A_T) == COALESCED;  // row-major A is contiguous in k
        int mm = u_is_k ? w : u, kk = u_is_k ? u : w;
        int gm = m0 + mm, gk = k0 + kk;
        float val = 0.f;
        if (gm < M && gk < K) val = to_f(A_T ? A[long(gk) * lda + gm] : A[long(gm) * lda + gk]);
        As[mm][kk] = val;
      }
      {
        bool u_is_n = (!B_T) == COALESCED;  // row-major B is contiguous in n
        int nn = u_is_n ? u : w, kk = u_is_n ? w : u;
        int gn = n0 + nn, gk = k0 + kk;
        float val = 0.f;
        if (gn < Nn && gk < K) val = to_f(B_T ? Bm[long(gn) * ldb + gk] : Bm[long(gk) * ldb + gn]);
        Bs[kk][nn] = val;
      }
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < TT; ++kk) {
      float b = Bs[kk][tx];
#pragma unroll
      for (int r = 0; r < TT / TY; ++r) acc[r] += As[ty + r * TY][kk] * b;
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < TT / TY; ++r) {
    int gm = m0 + ty + r * TY, gn = n0 + tx;
    if (gm >= M || gn >= Nn) continue;
    float out = alpha * acc[r];
    bool masked = causal && gn > gm;
    if (EPI == kEpiScores) out = masked ? -INFINITY : out;
    if (EPI == kEpiProbs) out = masked ? 0.f : __expf(out - lse[z * M + gm]);
    C[long(gm) * Nn + gn] = from_f<TC>(out);
  }
}

template <typename TA, typename TB, typename TC, bool A_T, bool B_T, bool COALESCED, int EPI>
cudaError_t tiled_gemm(const TA* A, const TB* Bm, TC* C, int M, int Nn, int K, int lda, int ldb, long sA,
                       long sB, long sC, int batch, float alpha, const float* lse, int causal,
                       cudaStream_t stream) {
  dim3 grid(cdiv(Nn, TT), cdiv(M, TT), batch), block(TT, TY);
  tiled_gemm_kernel<TA, TB, TC, A_T, B_T, COALESCED, EPI>
      <<<grid, block, 0, stream>>>(A, Bm, C, M, Nn, K, lda, ldb, sA, sB, sC, alpha, lse, causal);
  return cudaGetLastError();
}

#define FK_TRY(expr)                         \
  do {                                       \
    cudaError_t err_ = (expr);               \
    if (err_ != cudaSuccess) return err_;    \
  } while (0)

template <typename T>
cudaError_t naive_forward_t(const T* q, const T* k, const T* v, T* o, float* lse, float* S, int BH, int N,
                            int D, float scale, int causal, cudaStream_t stream) {
  dim3 blk(32, 8);
  naive_abt_kernel<T, kEpiScores><<<dim3(cdiv(N, 32), cdiv(N, 8), BH), blk, 0, stream>>>(q, k, S, nullptr, N, D,
                                                                                           scale, causal);
  FK_TRY(cudaGetLastError());
  long rows = long(BH) * N;
  softmax_rows_kernel<<<(unsigned)((rows * 32 + 255) / 256), 256, 0, stream>>>(S, lse, rows, N);
  FK_TRY(cudaGetLastError());
  naive_mx_kernel<T><<<dim3(cdiv(D, 32), cdiv(N, 8), BH), blk, 0, stream>>>(S, v, o, N, D, 1.f);
  return cudaGetLastError();
}

template <typename T>
cudaError_t tiled_forward_t(const T* q, const T* k, const T* v, T* o, float* lse, float* S, int BH, int N, int D,
                            float scale, int causal, cudaStream_t stream) {
  long nd = long(N) * D, nn = long(N) * N;
  FK_TRY((tiled_gemm<T, T, float, false, true, true, kEpiScores>(q, k, S, N, N, D, D, D, nd, nd, nn, BH, scale,
                                                                  nullptr, causal, stream)));
  long rows = long(BH) * N;
  softmax_rows_kernel<<<(unsigned)((rows * 32 + 255) / 256), 256, 0, stream>>>(S, lse, rows, N);
  FK_TRY(cudaGetLastError());
  return tiled_gemm<float, T, T, false, false, true, kEpiPlain>(S, v, o, N, D, N, N, D, nn, nd, nd, BH, 1.f,
                                                                nullptr, 0, stream);
}

template <typename T>
cudaError_t naive_backward_t(const T* q, const T* k, const T* v, const float* lse, const T* dO, T* dq, T* dk,
                             T* dv, float* P, float* dP, int BH, int N, int D, float scale, int causal,
                             cudaStream_t stream) {
  dim3 blk(32, 8);
  dim3 g_nn(cdiv(N, 32), cdiv(N, 8), BH), g_nd(cdiv(D, 32), cdiv(N, 8), BH);
  naive_abt_kernel<T, kEpiProbs><<<g_nn, blk, 0, stream>>>(q, k, P, lse, N, D, scale, causal);
  FK_TRY(cudaGetLastError());
  naive_abt_kernel<T, kEpiPlain><<<g_nn, blk, 0, stream>>>(dO, v, dP, nullptr, N, D, 1.f, 0);
  FK_TRY(cudaGetLastError());
  long rows = long(BH) * N;
  softmax_bwd_rows_kernel<<<(unsigned)((rows * 32 + 255) / 256), 256, 0, stream>>>(P, dP, rows, N);
  FK_TRY(cudaGetLastError());
  naive_mtx_kernel<T><<<g_nd, blk, 0, stream>>>(P, dO, dv, N, D, 1.f);
  FK_TRY(cudaGetLastError());
  naive_mx_kernel<T><<<g_nd, blk, 0, stream>>>(dP, k, dq, N, D, scale);
  FK_TRY(cudaGetLastError());
  naive_mtx_kernel<T><<<g_nd, blk, 0, stream>>>(dP, q, dk, N, D, scale);
  return cudaGetLastError();
}

template <typename T, bool COAL>
cudaError_t tiled_backward_t(const T* q, const T* k, const T* v, const float* lse, const T* dO, T* dq, T* dk,
                             T* dv, float* P, float* dP, int BH, int N, int D, float scale, int causal,
                             cudaStream_t stream) {
  long nd = long(N) * D, nn = long(N) * N;
  // P = exp(scale Q K^T - LSE);  dP = dO V^T
  FK_TRY((tiled_gemm<T, T, float, false, true, COAL, kEpiProbs>(q, k, P, N, N, D, D, D, nd, nd, nn, BH, scale, lse,
                                                                 causal, stream)));
  FK_TRY((tiled_gemm<T, T, float, false, true, COAL, kEpiPlain>(dO, v, dP, N, N, D, D, D, nd, nd, nn, BH, 1.f,
                                                                 nullptr, 0, stream)));
  long rows = long(BH) * N;
  softmax_bwd_rows_kernel<<<(unsigned)((rows * 32 + 255) / 256), 256, 0, stream>>>(P, dP, rows, N);
  FK_TRY(cudaGetLastError());
  // dV = P^T dO;  dQ = scale dS K;  dK = scale dS^T Q
  FK_TRY((tiled_gemm<float, T, T, true, false, COAL, kEpiPlain>(P, dO, dv, N, D, N, N, D, nn, nd, nd, BH, 1.f,
                                                                 nullptr, 0, stream)));
  FK_TRY((tiled_gemm<float, T, T, false, false, COAL, kEpiPlain>(dP, k, dq, N, D, N, N, D, nn, nd, nd, BH, scale,
                                                                  nullptr, 0, stream)));
  return tiled_gemm<float, T, T, true, false, COAL, kEpiPlain>(dP, q, dk, N, D, N, N, D, nn, nd, nd, BH, scale,
                                                               nullptr, 0, stream);
}

}  // namespace fk

// The materializing variants take k, v shaped like q (Hkv = H, Nk = Nq; flash_kernels/_ops.py
// refuses other shapes). option: 0 = naive, 1 = tiled, 2 = tiled_uncoalesced (its forward is tiled's).
// Workspaces: ws[0] = S (forward) or P, ws[1] = dP (backward), each [B*H, N, N] fp32.
namespace fk {

template <typename T, int D>
cudaError_t materialized_fwd_t(const AttnArgs& a, cudaStream_t stream) {
  auto f = a.option == 0 ? naive_forward_t<T> : tiled_forward_t<T>;
  return f(static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o),
           a.lse, a.ws[0], a.B * a.H, a.Nq, D, a.scale, a.causal, stream);
}

template <typename T, int D>
cudaError_t materialized_bwd_t(const AttnArgs& a, cudaStream_t stream) {
  auto f = a.option == 0 ? naive_backward_t<T>
                         : (a.option == 1 ? tiled_backward_t<T, true> : tiled_backward_t<T, false>);
  return f(static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), a.lse,
           static_cast<const T*>(a.dO), static_cast<T*>(a.dq), static_cast<T*>(a.dk), static_cast<T*>(a.dv), a.ws[0],
           a.ws[1], a.B * a.H, a.Nq, D, a.scale, a.causal, stream);
}

}  // namespace fk

int materialized_forward(const fk::AttnArgs& a, cudaStream_t stream) {
  if (a.Hkv != a.H || a.Nk != a.Nq || a.option < 0 || a.option > 2) return cudaErrorInvalidValue;
  return fk::dispatch_dtype_hdim</*fp32=*/true>(a, [&](auto t, auto d) {
    return fk::materialized_fwd_t<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}

int materialized_backward(const fk::AttnArgs& a, cudaStream_t stream) {
  if (a.Hkv != a.H || a.Nk != a.Nq || a.option < 0 || a.option > 2) return cudaErrorInvalidValue;
  return fk::dispatch_dtype_hdim</*fp32=*/true>(a, [&](auto t, auto d) {
    return fk::materialized_bwd_t<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
