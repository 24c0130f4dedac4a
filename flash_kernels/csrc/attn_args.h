// The one argument list of every launcher, shared by the kernels (.cu) and the bindings (.cpp):
// plain C++, no CUDA types.
#pragma once

namespace fk {

enum DType : int { kF32 = 0, kF16 = 1, kBF16 = 2, kE4M3 = 3 };  // kE4M3: flash_wgmma_fp8 only

// The one argument list of every launcher (see the bind_*.cpp files): raw pointers, the shape and
// the variant's option code. Pointers a pass does not use are null.
struct AttnArgs {
  int dtype;                  // DType
  int option;                 // the variant's option code (tile / block size); see _ops.py
  const void *q, *k, *v;      // q [B, H, Nq, D]; k, v [B, Hkv, Nk, D]
  void* o;                    // like q (forward output; backward input)
  float* lse;                 // [B, H, Nq]
  const void* dO;             // backward: like q
  void *dq, *dk, *dv;         // like q, k, v
  float *Dd, *dq_acc;         // backward workspaces: [B, H, Nq], [B, H, Nq, D] fp32
  float* ws[4];               // further fp32 arrays of a variant (score matrices, FA1's O/m/l; FP8: descales, V's mean row)
  int B, H, Hkv, Nq, Nk, D;
  float scale;
  int causal;
};

}  // namespace fk
