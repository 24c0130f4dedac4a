#include "bind_common.h"

int flash_mma_forward(int dtype, int tile, const void* q, const void* k, const void* v, void* o, float* lse, int BH,
                      int N, int D, float scale, int causal, cudaStream_t stream);

void mma_fwd(int64_t tile, at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor o, at::Tensor lse, double scale,
             bool causal) {
  const c10::cuda::CUDAGuard guard(q.device());
  FkDims s(q);
  fk_check(flash_mma_forward(fk_dtype(q), int(tile), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                             fk_f32(lse), s.BH, s.N, s.D, float(scale), causal, FK_STREAM),
           "flash_mma forward");
}
