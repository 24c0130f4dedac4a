#include "bind_common.h"

int materialized_forward(int dtype, int kind, const void* q, const void* k, const void* v, void* o, float* lse,
                         float* S, int BH, int N, int D, float scale, int causal, cudaStream_t stream);
int materialized_backward(int dtype, int kind, const void* q, const void* k, const void* v, const float* lse,
                          const void* dO, void* dq, void* dk, void* dv, float* P, float* dP, int BH, int N, int D,
                          float scale, int causal, cudaStream_t stream);

void materialized_fwd(int64_t kind, at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor o, at::Tensor lse,
                      at::Tensor S, double scale, bool causal) {
  const c10::cuda::CUDAGuard guard(q.device());
  FkDims s(q);
  fk_check(materialized_forward(fk_dtype(q), int(kind), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                                fk_f32(lse), fk_f32(S), s.BH, s.N, s.D, float(scale), causal, FK_STREAM),
           "materialized forward");
}

void materialized_bwd(int64_t kind, at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor lse, at::Tensor dO,
                      at::Tensor dq, at::Tensor dk, at::Tensor dv, at::Tensor P, at::Tensor dP, double scale,
                      bool causal) {
  const c10::cuda::CUDAGuard guard(q.device());
  FkDims s(q);
  fk_check(materialized_backward(fk_dtype(q), int(kind), q.data_ptr(), k.data_ptr(), v.data_ptr(), fk_f32(lse),
                                 dO.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), fk_f32(P), fk_f32(dP),
                                 s.BH, s.N, s.D, float(scale), causal, FK_STREAM),
           "materialized backward");
}
