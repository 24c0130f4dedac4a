#include "bind_common.h"

int flash_mma_backward(int dtype, int tile, const void* q, const void* k, const void* v, const void* o,
                       const float* lse, const void* dO, float* Dd, float* dq_acc, void* dq, void* dk, void* dv,
                       int BH, int N, int D, float scale, int causal, cudaStream_t stream);

void mma_bwd(int64_t tile, at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor o, at::Tensor lse, at::Tensor dO,
             at::Tensor Dd, at::Tensor dq_acc, at::Tensor dq, at::Tensor dk, at::Tensor dv, double scale,
             bool causal) {
  const c10::cuda::CUDAGuard guard(q.device());
  FkDims s(q);
  fk_check(flash_mma_backward(fk_dtype(q), int(tile), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                              fk_f32(lse), dO.data_ptr(), fk_f32(Dd), fk_f32(dq_acc), dq.data_ptr(), dk.data_ptr(),
                              dv.data_ptr(), s.BH, s.N, s.D, float(scale), causal, FK_STREAM),
           "flash_mma backward");
}
