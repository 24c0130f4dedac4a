// The bindings' one shape: every module exposes
//   fwd(option, q, k, v, o, lse, ws, scale, causal)
//   bwd(option, q, k, v, o, lse, dO, Dd, dq_acc, dq, dk, dv, ws, scale, causal)
// (ws: the variant's fp32 workspaces, possibly none) and calls its launcher with one fk::AttnArgs.
// Input validation with messages for users lives in Python (flash_kernels/_ops.py); these checks
// only guard against misuse.
#pragma once
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <vector>

#include "attn_args.h"

using fk_launcher = int (*)(const fk::AttnArgs&, cudaStream_t);

inline int fk_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return fk::kF32;
    case at::kHalf: return fk::kF16;
    case at::kBFloat16: return fk::kBF16;
    case at::kFloat8_e4m3fn: return fk::kE4M3;
    default: TORCH_CHECK(false, "flash_kernels: unsupported dtype ", t.scalar_type());
  }
  return -1;
}

inline float* fk_f32(const at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous(), "flash_kernels: expected a contiguous fp32 buffer");
  return t.data_ptr<float>();
}

inline void fk_check4(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() == 4 && t.is_cuda() && t.is_contiguous(), "flash_kernels: ", name,
              " must be a contiguous [B, H, N, D] CUDA tensor");
}

// q [B, H, Nq, D], k and v [B, Hkv, Nk, D] -> the shape, pointers and options of one call
inline fk::AttnArgs fk_args(int64_t option, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& o, const at::Tensor& lse, const std::vector<at::Tensor>& ws,
                            double scale, bool causal) {
  fk_check4(q, "q");
  fk_check4(k, "k");
  fk_check4(v, "v");
  fk::AttnArgs a{};
  a.dtype = fk_dtype(q);
  a.option = static_cast<int>(option);
  a.q = q.data_ptr();
  a.k = k.data_ptr();
  a.v = v.data_ptr();
  a.o = o.data_ptr();
  a.lse = fk_f32(lse);
  TORCH_CHECK(ws.size() <= 4, "flash_kernels: at most 4 workspaces");
  for (size_t i = 0; i < ws.size(); ++i) a.ws[i] = fk_f32(ws[i]);
  a.B = static_cast<int>(q.size(0));
  a.H = static_cast<int>(q.size(1));
  a.Nq = static_cast<int>(q.size(2));
  a.D = static_cast<int>(q.size(3));
  a.Hkv = static_cast<int>(k.size(1));
  a.Nk = static_cast<int>(k.size(2));
  TORCH_CHECK(a.Hkv > 0 && a.H % a.Hkv == 0, "flash_kernels: H must be a multiple of Hkv");
  a.scale = static_cast<float>(scale);
  a.causal = causal ? 1 : 0;
  return a;
}

inline void fk_run(fk_launcher launch, const fk::AttnArgs& a, const at::Tensor& q, const char* what) {
  const c10::cuda::CUDAGuard guard(q.device());
  const int err = launch(a, at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "flash_kernels: ", what, " failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
}

inline void fk_forward(fk_launcher launch, const char* what, int64_t option, const at::Tensor& q,
                       const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& lse,
                       const std::vector<at::Tensor>& ws, double scale, bool causal) {
  fk_run(launch, fk_args(option, q, k, v, o, lse, ws, scale, causal), q, what);
}

inline void fk_backward(fk_launcher launch, const char* what, int64_t option, const at::Tensor& q,
                        const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& lse,
                        const at::Tensor& dO, const at::Tensor& Dd, const at::Tensor& dq_acc, const at::Tensor& dq,
                        const at::Tensor& dk, const at::Tensor& dv, const std::vector<at::Tensor>& ws, double scale,
                        bool causal) {
  fk::AttnArgs a = fk_args(option, q, k, v, o, lse, ws, scale, causal);
  a.dO = dO.data_ptr();
  a.dq = dq.data_ptr();
  a.dk = dk.data_ptr();
  a.dv = dv.data_ptr();
  if (Dd.defined() && Dd.numel()) a.Dd = fk_f32(Dd);
  if (dq_acc.defined() && dq_acc.numel()) a.dq_acc = fk_f32(dq_acc);
  fk_run(launch, a, q, what);
}

// The functions a module binds around its launchers: fwd and (where it has one) bwd.
#define FK_BIND_FWD(LAUNCH, NAME)                                                                                \
  void fwd(int64_t option, at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor o, at::Tensor lse,             \
           std::vector<at::Tensor> ws, double scale, bool causal) {                                             \
    fk_forward(LAUNCH, NAME " forward", option, q, k, v, o, lse, ws, scale, causal);                            \
  }
#define FK_BIND_BWD(LAUNCH, NAME)                                                                                \
  void bwd(int64_t option, at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor o, at::Tensor lse,             \
           at::Tensor dO, at::Tensor Dd, at::Tensor dq_acc, at::Tensor dq, at::Tensor dk, at::Tensor dv,         \
           std::vector<at::Tensor> ws, double scale, bool causal) {                                             \
    fk_backward(LAUNCH, NAME " backward", option, q, k, v, o, lse, dO, Dd, dq_acc, dq, dk, dv, ws, scale, causal); \
  }
