// tiled: the same passes as naive.cu (S, P and dP still materialized in global memory, fp32), but every
// matrix product is a 32x32 shared-memory tiled GEMM: a block of 32x8 threads stages a 32x32 tile of
// each operand in shared memory, with global loads coalesced whatever the operand's transpose, and
// each thread computes 4 outputs. Each operand element fetched from global memory now serves 32
// multiply-adds instead of one, so the products stop being bound by load issue; the row softmax
// kernels and the N x N round trips through global memory are unchanged (the next step, flash_fa1.cu,
// removes those).
// tiled_uncoalesced: tiled's backward with the thread->element mapping of a first-attempt tiled kernel:
// consecutive threads walk each operand's strided dimension, so the same tiles load uncoalesced. Its
// forward is tiled's.
// Measured (H200, fp16, D=64, N=512, B=32, H=32, not causal):
// profiles/nvidia-h200/bench-mma-bwd-4warp/convention.csv.xz, rows D64-N512-full: forward naive 76.854 ms ->
// tiled 6.618 ms; backward naive 190.544 ms -> tiled 16.409 ms, tiled_uncoalesced 36.887 ms.
#include "materialized.cuh"
#include "option_codes.h"

namespace fk {

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

// option: tiled or tiled_uncoalesced (backward only: its forward is tiled's); flash_kernels/variants.py's codes.
static bool tiled_form_ok(int option) {
  namespace oc = fk::codes::tiled;
  return option == oc::kFormTiled || option == oc::kFormTiledUncoalesced;
}

int tiled_forward(const fk::AttnArgs& a, cudaStream_t stream) {
  if (a.Hkv != a.H || a.Nk != a.Nq || !tiled_form_ok(a.option)) return cudaErrorInvalidValue;
  return fk::dispatch_dtype_hdim</*fp32=*/true>(a, [&](auto t, auto d) {
    using T = typename decltype(t)::type;
    return fk::tiled_forward_t<T>(static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v),
                                  static_cast<T*>(a.o), a.lse, a.ws[0], a.B * a.H, a.Nq, decltype(d)::value, a.scale,
                                  a.causal, stream);
  });
}

int tiled_backward(const fk::AttnArgs& a, cudaStream_t stream) {
  if (a.Hkv != a.H || a.Nk != a.Nq || !tiled_form_ok(a.option)) return cudaErrorInvalidValue;
  return fk::dispatch_dtype_hdim</*fp32=*/true>(a, [&](auto t, auto d) {
    using T = typename decltype(t)::type;
    auto f = a.option == fk::codes::tiled::kFormTiled ? fk::tiled_backward_t<T, true> : fk::tiled_backward_t<T, false>;
    return f(static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), a.lse,
             static_cast<const T*>(a.dO), static_cast<T*>(a.dq), static_cast<T*>(a.dk), static_cast<T*>(a.dv), a.ws[0],
             a.ws[1], a.B * a.H, a.Nq, decltype(d)::value, a.scale, a.causal, stream);
  });
}
