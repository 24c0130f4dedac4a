// naive: attention as the textbook writes it, the first step of the ladder (nothing before it).
// Three passes, each a kernel of its own, with the N x N matrices in global memory (fp32):
//   forward:  S = scale * Q K^T (masked -inf)  ->  P = softmax(S) in place, LSE  ->  O = P V
//   backward: P = exp(scale * Q K^T - LSE), dP = dO V^T, dS = P * (dP - rowsum(P * dP)),
//             dV = P^T dO, dQ = scale * dS K, dK = scale * dS^T Q.
// One thread per output element, operands read straight from global memory, no shared memory: every
// multiply-add loads both of its operands (through L1/L2), so load issue, not arithmetic, bounds the
// products, and once B*H*N*N*4 bytes outgrow L2 every pass over S and P goes to DRAM. The next step
// (tiled.cu) attacks the first problem; the flash steps attack the second.
// Measured (H200, fp16, D=64, N=512, B=32, H=32, not causal):
// profiles/nvidia-h200/bench-mma-bwd-4warp/convention.csv.xz, rows D64-N512-full / naive: forward 76.854 ms
// (0.89 TFLOP/s), backward 190.544 ms.
#include "materialized.cuh"

namespace fk {

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

}  // namespace fk

// option: unused (naive has one form).
int naive_forward(const fk::AttnArgs& a, cudaStream_t stream) {
  if (a.Hkv != a.H || a.Nk != a.Nq) return cudaErrorInvalidValue;
  return fk::dispatch_dtype_hdim</*fp32=*/true>(a, [&](auto t, auto d) {
    using T = typename decltype(t)::type;
    return fk::naive_forward_t<T>(static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v),
                                  static_cast<T*>(a.o), a.lse, a.ws[0], a.B * a.H, a.Nq, decltype(d)::value, a.scale,
                                  a.causal, stream);
  });
}

int naive_backward(const fk::AttnArgs& a, cudaStream_t stream) {
  if (a.Hkv != a.H || a.Nk != a.Nq) return cudaErrorInvalidValue;
  return fk::dispatch_dtype_hdim</*fp32=*/true>(a, [&](auto t, auto d) {
    using T = typename decltype(t)::type;
    return fk::naive_backward_t<T>(static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v),
                                   a.lse, static_cast<const T*>(a.dO), static_cast<T*>(a.dq), static_cast<T*>(a.dk),
                                   static_cast<T*>(a.dv), a.ws[0], a.ws[1], a.B * a.H, a.Nq, decltype(d)::value,
                                   a.scale, a.causal, stream);
  });
}
