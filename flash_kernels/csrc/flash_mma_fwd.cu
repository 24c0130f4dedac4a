// flash_mma forward: FlashAttention-2 on tensor cores.
// Relative to flash_simt: both matrix products run on mma.sync m16n8k16 (fp16/bf16 in, fp32
// accumulate); tiles travel global->shared with cp.async (Q once, K and V double-buffered so the
// next tile loads while this one is used); shared tiles are XOR-swizzled so ldmatrix is
// conflict-free; P = exp(S - m) stays in registers as the A operand of P V.
// Block: BR query rows, one warp per 16 rows; BC keys per K/V tile. Causal launches visit the
// heaviest query blocks first.
#include "mma.cuh"

namespace fk {

template <typename T, int D, int BR, int BC>
__global__ void __launch_bounds__(BR / 16 * 32)
flash_mma_forward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                         T* __restrict__ O, float* __restrict__ LSE, int N, float scale_log2, int causal) {
  constexpr int NW = BR / 16, NT = NW * 32;
  constexpr int KD = D / 16;  // k16 steps over the head dim
  constexpr int NB = BC / 8;  // n8 tiles over the keys of a tile
  constexpr int ND = D / 8;   // n8 tiles over the head dim
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sQ = smem_u32(smem);          // [BR][D]
  const uint32_t sK = sQ + BR * D * 2;         // [2][BC][D]
  const uint32_t sV = sK + 2 * BC * D * 2;     // [2][BC][D]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const long bh = blockIdx.y;
  const int q0 = (causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x)) * BR;
  const T* Qb = Q + bh * N * D;
  const T* Kb = K + bh * N * D;
  const T* Vb = V + bh * N * D;
  const int kv_len = causal ? min(N, q0 + BR) : N;
  const int n_kv = (kv_len + BC - 1) / BC;

  load_tile_async<BR, D, NT>(sQ, Qb, q0, N, tid);
  load_tile_async<BC, D, NT>(sK, Kb, 0, N, tid);
  cp_async_commit();
  load_tile_async<BC, D, NT>(sV, Vb, 0, N, tid);
  cp_async_commit();

  uint32_t qf[KD][4];
  float o[ND][4];
#pragma unroll
  for (int i = 0; i < ND; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int row0 = q0 + warp * 16 + (lane >> 2);  // this thread's rows: row0 and row0 + 8

  for (int t = 0; t < n_kv; ++t) {
    const int st = t & 1;
    const uint32_t cK = sK + st * (BC * D * 2), cV = sV + st * (BC * D * 2);
    cp_async_wait<1>();  // Q and K_t have landed (V_t may still be in flight)
    __syncthreads();
    if (t == 0) {
#pragma unroll
      for (int kd = 0; kd < KD; ++kd)
        ldmatrix_x4(qf[kd], sQ + swz<D>(warp * 16 + (lane & 15), kd * 2 + (lane >> 4)));
    }
    if (t + 1 < n_kv) load_tile_async<BC, D, NT>(sK + (st ^ 1) * (BC * D * 2), Kb, (t + 1) * BC, N, tid);
    cp_async_commit();

    // S = Q_i K_j^T   [16 rows x BC keys] per warp
    float s[NB][4];
#pragma unroll
    for (int i = 0; i < NB; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
#pragma unroll
      for (int nb2 = 0; nb2 < NB / 2; ++nb2) {
        uint32_t b[4];
        ldmatrix_x4(b, cK + swz<D>(nb2 * 16 + (lane & 7) + ((lane >> 4) << 3), kd * 2 + ((lane >> 3) & 1)));
        mma16816<T>(s[2 * nb2], qf[kd], b[0], b[1]);
        mma16816<T>(s[2 * nb2 + 1], qf[kd], b[2], b[3]);
      }
    }
    // scale into the log2 domain, mask keys past N and (causal) keys after the query
    const int j0 = t * BC;
    const bool need_mask = (j0 + BC > N) || (causal && j0 + BC - 1 > q0 + warp * 16);
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nb][e] * scale_log2;
        if (need_mask) {
          const int key = j0 + nb * 8 + (lane & 3) * 2 + (e & 1);
          const int row = row0 + (e >> 1) * 8;
          if (key >= N || (causal && key > row)) x = -INFINITY;
        }
        s[nb][e] = x;
      }
    }
    // online softmax: rows are spread over the 4 lanes of a quad
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) mx = fmaxf(mx, fmaxf(s[nb][2 * h], s[nb][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[h], mx);
      const float m_use = (m_new == -INFINITY) ? 0.f : m_new;
      const float alpha = fast_exp2(m[h] - m_use);
      m[h] = m_new;
      float rs = 0.f;
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        s[nb][2 * h] = fast_exp2(s[nb][2 * h] - m_use);
        s[nb][2 * h + 1] = fast_exp2(s[nb][2 * h + 1] - m_use);
        rs += s[nb][2 * h] + s[nb][2 * h + 1];
      }
      l[h] = l[h] * alpha + rs;  // per-thread partial; the quad is reduced once at the end
#pragma unroll
      for (int nd = 0; nd < ND; ++nd) {
        o[nd][2 * h] *= alpha;
        o[nd][2 * h + 1] *= alpha;
      }
    }
    // P as A fragments (C layout of two n-tiles == A layout of one k16 step)
    uint32_t pf[BC / 16][4];
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      pf[kk][0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      pf[kk][1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      pf[kk][2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pf[kk][3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
    cp_async_wait<1>();  // V_t has landed (K_{t+1} may still be in flight)
    __syncthreads();
    // O += P V_j
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, cV + swz<D>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), dp * 2 + (lane >> 4)));
        mma16816<T>(o[2 * dp], pf[kk], b[0], b[1]);
        mma16816<T>(o[2 * dp + 1], pf[kk], b[2], b[3]);
      }
    }
    if (t + 1 < n_kv) load_tile_async<BC, D, NT>(sV + (st ^ 1) * (BC * D * 2), Vb, (t + 1) * BC, N, tid);
    cp_async_commit();
  }
  cp_async_wait<0>();

  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    inv[h] = 1.f / l[h];
  }
  // stage this warp's 16 output rows in its own (no longer needed) rows of the Q tile, then
  // write them out 16 bytes per lane
  const int r = warp * 16 + (lane >> 2);
#pragma unroll
  for (int nd = 0; nd < ND; ++nd) {
    *reinterpret_cast<uint32_t*>(smem + swz<D>(r, nd) + (lane & 3) * 4) =
        pack2<T>(o[nd][0] * inv[0], o[nd][1] * inv[0]);
    *reinterpret_cast<uint32_t*>(smem + swz<D>(r + 8, nd) + (lane & 3) * 4) =
        pack2<T>(o[nd][2] * inv[1], o[nd][3] * inv[1]);
  }
  __syncwarp();
  store_tile<16, D, 32>(reinterpret_cast<const T*>(smem + warp * 16 * D * 2), O + bh * N * D, q0 + warp * 16, N,
                        lane);
  if ((lane & 3) == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + h * 8;
      if (row < N) LSE[bh * N + row] = (m[h] + __log2f(l[h])) * kLn2;
    }
  }
}

template <typename T, int D, int BR, int BC>
cudaError_t mma_forward_launch(const void* q, const void* k, const void* v, void* o, float* lse, int BH, int N,
                               float scale, int causal, cudaStream_t stream) {
  auto kernel = flash_mma_forward_kernel<T, D, BR, BC>;
  constexpr int smem = (BR * D + 4 * BC * D) * 2;
  static cudaError_t attr = allow_smem(kernel, smem);
  if (attr != cudaSuccess) return attr;
  kernel<<<dim3(cdiv(N, BR), BH), BR / 16 * 32, smem, stream>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(o), lse, N,
      scale * kLog2e, causal);
  return cudaGetLastError();
}

}  // namespace fk

// tile: 0 = 128x64, 1 = 64x64, 2 = 128x128 (D = 64 only); BR x BC = query rows x keys per tile
int flash_mma_forward(int dtype, int tile, const void* q, const void* k, const void* v, void* o, float* lse, int BH,
                      int N, int D, float scale, int causal, cudaStream_t stream) {
  using namespace fk;
#define FK_FWD(T, DD, BR, BC) return mma_forward_launch<T, DD, BR, BC>(q, k, v, o, lse, BH, N, scale, causal, stream)
#define FK_FWD_TILES(T, DD)                        \
  switch (tile) {                                  \
    case 0: FK_FWD(T, DD, 128, 64);                \
    case 1: FK_FWD(T, DD, 64, 64);                 \
    case 2: if (DD == 64) { FK_FWD(T, 64, 128, 128); } \
      return cudaErrorInvalidValue;                \
    default: return cudaErrorInvalidValue;         \
  }
  if (dtype == kF16) {
    if (D == 64) { FK_FWD_TILES(__half, 64) }
    if (D == 128) { FK_FWD_TILES(__half, 128) }
  } else if (dtype == kBF16) {
    if (D == 64) { FK_FWD_TILES(__nv_bfloat16, 64) }
    if (D == 128) { FK_FWD_TILES(__nv_bfloat16, 128) }
  }
#undef FK_FWD_TILES
#undef FK_FWD
  return cudaErrorInvalidValue;
}
