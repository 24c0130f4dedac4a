#include "bind_common.h"

int flash_simt_forward(int dtype, int block_size, const void* q, const void* k, const void* v, void* o, float* lse,
                       int BH, int N, int D, float scale, int causal, cudaStream_t stream);
int flash_simt_backward(int dtype, int block_size, const void* q, const void* k, const void* v, const void* o,
                        const float* lse, const void* dO, float* Dd, float* dq_acc, void* dq, void* dk, void* dv,
                        int BH, int N, int D, float scale, int causal, cudaStream_t stream);
int flash_fa1_forward(int dtype, const void* q, const void* k, const void* v, void* o, float* lse, float* o_acc,
                      float* m, float* l, int BH, int N, int D, float scale, int causal, cudaStream_t stream);

void simt_fwd(int64_t block_size, at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor o, at::Tensor lse,
              double scale, bool causal) {
  const c10::cuda::CUDAGuard guard(q.device());
  FkDims s(q);
  fk_check(flash_simt_forward(fk_dtype(q), int(block_size), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                              fk_f32(lse), s.BH, s.N, s.D, float(scale), causal, FK_STREAM),
           "flash_simt forward");
}

void simt_bwd(int64_t block_size, at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor o, at::Tensor lse,
              at::Tensor dO, at::Tensor Dd, at::Tensor dq_acc, at::Tensor dq, at::Tensor dk, at::Tensor dv,
              double scale, bool causal) {
  const c10::cuda::CUDAGuard guard(q.device());
  FkDims s(q);
  fk_check(flash_simt_backward(fk_dtype(q), int(block_size), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                               fk_f32(lse), dO.data_ptr(), fk_f32(Dd), fk_f32(dq_acc), dq.data_ptr(), dk.data_ptr(),
                               dv.data_ptr(), s.BH, s.N, s.D, float(scale), causal, FK_STREAM),
           "flash_simt backward");
}

void fa1_fwd(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor o, at::Tensor lse, at::Tensor o_acc,
             at::Tensor m, at::Tensor l, double scale, bool causal) {
  const c10::cuda::CUDAGuard guard(q.device());
  FkDims s(q);
  fk_check(flash_fa1_forward(fk_dtype(q), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), fk_f32(lse),
                             fk_f32(o_acc), fk_f32(m), fk_f32(l), s.BH, s.N, s.D, float(scale), causal, FK_STREAM),
           "flash_fa1 forward");
}
