// Shared by the pybind11 bindings: tensor -> launcher plumbing. Input validation with messages
// for users lives in Python (flash_kernels/_ops.py); these checks only guard against misuse.
#pragma once
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

inline int fk_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return 0;
    case at::kHalf: return 1;
    case at::kBFloat16: return 2;
    default: TORCH_CHECK(false, "flash_kernels: unsupported dtype ", t.scalar_type());
  }
  return -1;
}

inline void fk_check(int err, const char* what) {
  TORCH_CHECK(err == 0, "flash_kernels: ", what, " failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
}

inline float* fk_f32(const at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous(), "flash_kernels: expected a contiguous fp32 buffer");
  return t.data_ptr<float>();
}

// [B, H, N, D] -> (B*H, N, D)
struct FkDims {
  int BH, N, D;
  explicit FkDims(const at::Tensor& q) {
    TORCH_CHECK(q.dim() == 4 && q.is_cuda() && q.is_contiguous(), "flash_kernels: expected contiguous [B, H, N, D] CUDA");
    BH = static_cast<int>(q.size(0) * q.size(1));
    N = static_cast<int>(q.size(2));
    D = static_cast<int>(q.size(3));
  }
};

#define FK_STREAM at::cuda::getCurrentCUDAStream().stream()
