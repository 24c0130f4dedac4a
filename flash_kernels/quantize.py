"""e4m3 quantization with the Hadamard rotation fused in: per tensor in two passes over the tensor, per block in one.

    x8, descale = quantize_e4m3_fused(x)                       # x ~= x8 * descale, as fp8.quantize_e4m3
    q8, dq = quantize_e4m3_fused(q, rotate_seed=0)             # (q @ M) ~= q8 * dq, M = hadamard_rotation(D, 0)
    x8, d = quantize_e4m3_fused(x, scales="block")             # one descale per 128 rows of each plane

:func:`flash_kernels.fp8.quantize_e4m3` is written in torch operations: max|x|, then x in fp32 divided by the
descale, clamped and cast, each a pass over memory (the fp32 copy twice the input's bytes); with the rotation
(:func:`flash_kernels.hadamard.rotate_qk`) the product is one more fp32 tensor written and read. Here two Triton
kernels read the 16-bit input once each: the first takes max|x M| per block of rows into one float (an atomic
max), the second writes (x M) * 448 / max as e4m3. The rotation is a tensor-core product of each [rows, D] block
with the +-1 matrix diag(s) H (exact in fp16 and bf16), accumulated in fp32 and scaled by 1/sqrt(D) in fp32: the
same M as :func:`flash_kernels.hadamard.hadamard_rotation` with no rounding of its entries. Per block, one program
per block of 128 rows of a plane takes the block's max, writes its descale and its e4m3 rows: one pass. Inputs must be fp16 or
bf16 on a CUDA device with a last dimension of 64 or 128; anything else takes the torch path.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .hadamard import signs, sylvester
from .model import FP8_FUSED_QUANT_DIMS
from .variants import kernel

#: the largest finite e4m3 (float8_e4m3fn) value
E4M3_MAX = 448.0
#: rows of x per program (per tensor)
BLOCK_ROWS = 64
#: rows of a plane that share one descale per block (flash_wgmma_fp8's scale_block: its query block and K/V tile)
SCALE_BLOCK = kernel("flash_wgmma_fp8").constants["scale_block"]
#: the head dims the kernels take (a block of rows and the D x D sign matrix stay on chip)
FUSED_DIMS = FP8_FUSED_QUANT_DIMS

try:
    import triton
    import triton.language as tl
except ImportError:  # a machine without triton keeps the torch path
    triton = None

if triton is not None:

    @triton.jit
    def _block(x_ptr, h_ptr, rows, pid, D: tl.constexpr, BLOCK: tl.constexpr, ROTATE: tl.constexpr, INV_SQRT_D):
        r = pid * BLOCK + tl.arange(0, BLOCK)
        d = tl.arange(0, D)
        mask = r[:, None] < rows
        x = tl.load(x_ptr + r[:, None].to(tl.int64) * D + d[None, :], mask=mask, other=0.0)
        if ROTATE:
            h = tl.load(h_ptr + d[:, None] * D + d[None, :])
            y = tl.dot(x, h) * INV_SQRT_D  # +-1 entries: exact products, fp32 sums
        else:
            y = x.to(tl.float32)
        return y, r, d, mask

    @triton.jit
    def _amax_kernel(x_ptr, h_ptr, amax_ptr, rows, D: tl.constexpr, BLOCK: tl.constexpr, ROTATE: tl.constexpr,
                     INV_SQRT_D):
        y, r, d, mask = _block(x_ptr, h_ptr, rows, tl.program_id(0), D, BLOCK, ROTATE, INV_SQRT_D)
        tl.atomic_max(amax_ptr, tl.max(tl.max(tl.abs(y), axis=1), axis=0))  # non-negative: float order = int order

    @triton.jit
    def _cast_kernel(x_ptr, h_ptr, amax_ptr, out_ptr, rows, D: tl.constexpr, BLOCK: tl.constexpr,
                     ROTATE: tl.constexpr, INV_SQRT_D):
        y, r, d, mask = _block(x_ptr, h_ptr, rows, tl.program_id(0), D, BLOCK, ROTATE, INV_SQRT_D)
        amax = tl.load(amax_ptr)
        scale = tl.where(amax > 0, 448.0 / amax, 1.0)
        q = tl.minimum(tl.maximum(y * scale, -448.0), 448.0)
        tl.store(out_ptr + r[:, None].to(tl.int64) * D + d[None, :], q.to(tl.float8e4nv), mask=mask)


    @triton.jit
    def _block_kernel(x_ptr, h_ptr, out_ptr, descale_ptr, N, nb, D: tl.constexpr, BLOCK: tl.constexpr,
                      ROTATE: tl.constexpr, INV_SQRT_D):
        pid = tl.program_id(0)  # block pid % nb of plane pid // nb
        plane, blk = pid // nb, pid % nb
        r = blk * BLOCK + tl.arange(0, BLOCK)
        d = tl.arange(0, D)
        mask = r[:, None] < N
        offs = (plane.to(tl.int64) * N + r[:, None]) * D + d[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        if ROTATE:
            h = tl.load(h_ptr + d[:, None] * D + d[None, :])
            y = tl.dot(x, h) * INV_SQRT_D
        else:
            y = x.to(tl.float32)
        amax = tl.max(tl.max(tl.abs(y), axis=1), axis=0)
        scale = tl.where(amax > 0, 448.0 / amax, 1.0)
        q = tl.minimum(tl.maximum(y * scale, -448.0), 448.0)
        tl.store(out_ptr + offs, q.to(tl.float8e4nv), mask=mask)
        tl.store(descale_ptr + pid, tl.where(amax > 0, amax / 448.0, 1.0))


_SIGNED: dict[tuple[int, int, torch.device, torch.dtype], torch.Tensor] = {}


def _signed_hadamard(D: int, seed: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """diag(s) H with entries +-1 (exact in fp16 and bf16): hadamard_rotation(D, seed) times sqrt(D)."""
    key = (D, seed, device, dtype)
    if key not in _SIGNED:
        _SIGNED[key] = (signs(D, seed)[:, None] * sylvester(D)).to(device=device, dtype=dtype).contiguous()
    return _SIGNED[key]


def fused_reason(x: Any) -> str | None:
    """None when ``x`` can take the fused kernels, else why not (the torch path is taken then)."""
    if triton is None:
        return "triton is not installed"
    if not isinstance(x, torch.Tensor) or not x.is_cuda:
        return "not a CUDA tensor"
    if x.dtype not in (torch.float16, torch.bfloat16):
        return f"{x.dtype}: the fused kernels take fp16 and bf16"
    if x.dim() < 1 or x.shape[-1] not in FUSED_DIMS:
        return f"last dimension {x.shape[-1] if x.dim() else None}: the fused kernels take {FUSED_DIMS}"
    return None


def quantize_e4m3_fused(x: torch.Tensor, rotate_seed: int | None = None,
                        scales: str = "tensor") -> tuple[torch.Tensor, torch.Tensor]:
    """(x8, descale) with x8 * descale ~= x (or x @ M, M = hadamard_rotation(D, rotate_seed), with a seed), max|.|
    -> 448, as :func:`flash_kernels.fp8.quantize_e4m3` makes them (``scales``: "tensor", in two passes over x,
    descale a 0-d fp32 tensor; "block", in one pass, descale [..., ceil(N / 128)] for x [..., N, D]), with no host
    synchronisation. x8 has x's shape (contiguous); an all-zero x (block) gets descale 1. ValueError where
    :func:`fused_reason` says the kernels cannot take x."""
    why = fused_reason(x)
    if why is not None:
        raise ValueError(f"quantize_e4m3_fused: {why}")
    if scales not in ("tensor", "block"):
        raise ValueError(f"quantize_e4m3_fused: scales must be 'tensor' or 'block'; got {scales!r}")
    D = x.shape[-1]
    xc = x.contiguous()
    rows = xc.numel() // D
    rotate = rotate_seed is not None
    h = _signed_hadamard(D, int(rotate_seed), x.device, x.dtype) if rotate else xc  # unused without rotation
    if scales == "block":
        if x.dim() < 2:
            raise ValueError(f"quantize_e4m3_fused(scales='block') takes x [..., N, D]; got shape {tuple(x.shape)}")
        N = x.shape[-2]
        nb = -(-N // SCALE_BLOCK)
        planes = rows // N if N else 0
        out = torch.empty(xc.shape, device=x.device, dtype=torch.float8_e4m3fn)
        descale = torch.empty((*x.shape[:-2], nb), device=x.device, dtype=torch.float32)
        if planes * nb:
            _block_kernel[(planes * nb,)](xc, h, out, descale, N, nb, D=D, BLOCK=SCALE_BLOCK, ROTATE=rotate,
                                          INV_SQRT_D=1.0 / math.sqrt(D), num_warps=8)
        return out, descale
    amax = torch.zeros((), device=x.device, dtype=torch.float32)
    out = torch.empty(xc.shape, device=x.device, dtype=torch.float8_e4m3fn)
    grid = (triton.cdiv(rows, BLOCK_ROWS),)
    inv = 1.0 / math.sqrt(D)
    _amax_kernel[grid](xc, h, amax, rows, D=D, BLOCK=BLOCK_ROWS, ROTATE=rotate, INV_SQRT_D=inv)
    _cast_kernel[grid](xc, h, amax, out, rows, D=D, BLOCK=BLOCK_ROWS, ROTATE=rotate, INV_SQRT_D=inv)
    descale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    return out, descale
