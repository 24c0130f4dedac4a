#include "bind_common.h"

int flash_wgmma_fp8_forward(const fk::AttnArgs& a, cudaStream_t stream);
int flash_wgmma_fp8_vt(const void* v, void* vt, int planes, int Nk, int D, cudaStream_t stream);

FK_BIND_FWD(flash_wgmma_fp8_forward, "flash_wgmma_fp8")

// v [B, Hkv, Nk, D] e4m3 -> vt [B, Hkv, D, Nk rounded up to 32] (flash_kernels/fp8.py: vt_e4m3)
void vt(at::Tensor v, at::Tensor vt) {
  fk_check4(v, "v");
  fk_check4(vt, "vt");
  TORCH_CHECK(v.scalar_type() == at::kFloat8_e4m3fn && vt.scalar_type() == at::kFloat8_e4m3fn,
              "flash_kernels: vt takes float8_e4m3fn tensors");
  const int64_t planes = v.size(0) * v.size(1), Nk = v.size(2), D = v.size(3);
  TORCH_CHECK(vt.size(0) * vt.size(1) == planes && vt.size(2) == D && vt.size(3) == (Nk + 31) / 32 * 32,
              "flash_kernels: vt must be [B, Hkv, D, Nk rounded up to 32]");
  const c10::cuda::CUDAGuard guard(v.device());
  const int err = flash_wgmma_fp8_vt(v.data_ptr(), vt.data_ptr(), static_cast<int>(planes), static_cast<int>(Nk),
                                     static_cast<int>(D), at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "flash_kernels: vt_e4m3 failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
}
