"""A user's own GEMM kernel in Triton, beside cuBLAS, for the GEMM problem of :mod:`examples.gemm.gemm`.

A plain tiled matmul in the shape of Triton's matmul tutorial (``python/tutorials/03-matrix-multiplication.py``):
one program per ``BLOCK_M x BLOCK_N`` tile of C, grouped along M so that neighbouring programs share B's
columns in L2, a K loop of ``BLOCK_K`` steps accumulating in fp32, every load masked so that any M, N, K
works. Block sizes are fixed (no autotuning: a profile must launch one configuration). The backward
is the same kernel on transposed views: dA = dC @ B^T and dB = A^T @ dC.

It reaches nsightlab only through the public path, as any user's kernel does:

    python -m nsightlab.capture --sweep examples/gemm/deep.toml
    nsightlab why nvidia-h200/gemm-example-deep --a triton_gemm --b torch_gemm

Importing this module needs neither triton nor a GPU; calling :func:`gemm` without them raises a RuntimeError.
"""

from __future__ import annotations

from typing import Any

from examples.gemm.gemm import PROBLEM
from nsightlab.problems.impls import Implementation

BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M = 128, 128, 32, 8
NUM_WARPS, NUM_STAGES = 4, 3
#: tests set this: C is NaN-filled before the kernel runs, so an element it does not write shows up
_POISON = False

try:
    import triton
    import triton.language as tl
except ImportError:  # a machine without triton can still import the module (and list the sweep)
    triton = None

if triton is not None:

    @triton.jit
    def _matmul(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr):
        pid = tl.program_id(0)
        tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
        per_group = GM * tiles_n
        first_m = (pid // per_group) * GM
        group_m = min(tiles_m - first_m, GM)
        pm = first_m + (pid % per_group) % group_m
        pn = (pid % per_group) // group_m
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            ka = k0 + rk
            x = tl.load(a + rm[:, None] * sam + ka[None, :] * sak, mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
            y = tl.load(b + ka[:, None] * sbk + rn[None, :] * sbn, mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(x, y, acc)
        tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(c.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a: Any, b: Any) -> Any:
    """C = A @ B with the Triton kernel (A [M, K], B [K, N], any strides, fp16/bf16/fp32)."""
    if triton is None:
        raise RuntimeError("triton_gemm needs triton (pip install triton) and a CUDA GPU")
    import torch

    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul takes A [M, K] and B [K, N]; got {tuple(a.shape)} and {tuple(b.shape)}")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    if _POISON:
        c.fill_(float("nan"))
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    _matmul[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                  BM=BLOCK_M, BN=BLOCK_N, BK=BLOCK_K, GM=GROUP_M, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return c


def _function() -> Any:
    import torch

    class _Gemm(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, a: Any, b: Any) -> Any:
            ctx.save_for_backward(a, b)
            return matmul(a, b)

        @staticmethod
        def backward(ctx: Any, dc: Any) -> tuple[Any, Any]:
            a, b = ctx.saved_tensors
            return matmul(dc, b.t()), matmul(a.t(), dc)

    return _Gemm


_GEMM: Any = None


def gemm(a: Any, b: Any) -> Any:
    """C = A @ B on the Triton kernel, with autograd (the backward runs the same kernel twice)."""
    global _GEMM
    if _GEMM is None:
        _GEMM = _function()
    return _GEMM.apply(a, b)


IMPL = Implementation("triton_gemm", gemm, problem=PROBLEM.name, traits={"library": "Triton"},
                      description=f"C = A @ B in Triton: {BLOCK_M}x{BLOCK_N} tiles, K steps of {BLOCK_K}, "
                                  f"{NUM_STAGES} stages, {NUM_WARPS} warps, no autotuning")
