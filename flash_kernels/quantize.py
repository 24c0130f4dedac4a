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
per block of 128 rows of a plane takes the block's max, writes its descale and its e4m3 rows: one pass. At D = 256
the rows are two 128-wide halves and the rotation a butterfly over them (the Sylvester matrix H_256 is
[[H, H], [H, -H]] with H = H_128): with z = x diag(s) in halves z1, z2, z M = [z1 H + z2 H, z1 H - z2 H] / 16, two
products with the 128 x 128 matrix instead of one with the 256 x 256. ``mean`` (V centred, fp32 [..., 1, D]): each
plane's mean row is subtracted in fp32 before the max and the cast, in the same pass. Inputs must be fp16 or bf16
on a CUDA device with a last dimension of 64, 128 or 256; anything else takes the torch path.
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
    def _halves(x_ptr, h_ptr, s_ptr, mu_ptr, r, N, mask, ROTATE: tl.constexpr, HAS_MU: tl.constexpr, INV_SQRT_D):
        """Rows r of x [rows, 256] as two fp32 [len(r), 128] halves of x M (ROTATE: M = diag(s) H_256 / 16, by the
        butterfly over H = H_128 at h_ptr, s the 256 signs at s_ptr) or of x less its plane's mean row (HAS_MU:
        fp32 [rows / N, 256] at mu_ptr; not with ROTATE)."""
        d = tl.arange(0, 128)
        base = r[:, None].to(tl.int64) * 256 + d[None, :]
        x1 = tl.load(x_ptr + base, mask=mask, other=0.0)
        x2 = tl.load(x_ptr + base + 128, mask=mask, other=0.0)
        if ROTATE:
            h = tl.load(h_ptr + d[:, None] * 128 + d[None, :])
            a = tl.dot(x1 * tl.load(s_ptr + d)[None, :], h)  # +-1 factors: exact products, fp32 sums
            b = tl.dot(x2 * tl.load(s_ptr + 128 + d)[None, :], h)
            y1 = (a + b) * INV_SQRT_D
            y2 = (a - b) * INV_SQRT_D
        else:
            y1 = x1.to(tl.float32)
            y2 = x2.to(tl.float32)
            if HAS_MU:
                mu = mu_ptr + (r[:, None] // N).to(tl.int64) * 256 + d[None, :]
                y1 = y1 - tl.load(mu, mask=mask, other=0.0)
                y2 = y2 - tl.load(mu + 128, mask=mask, other=0.0)
        return y1, y2, base

    @triton.jit
    def _amax256_kernel(x_ptr, h_ptr, s_ptr, mu_ptr, amax_ptr, rows, N, BLOCK: tl.constexpr, ROTATE: tl.constexpr,
                        HAS_MU: tl.constexpr, INV_SQRT_D):
        r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        y1, y2, _ = _halves(x_ptr, h_ptr, s_ptr, mu_ptr, r, N, r[:, None] < rows, ROTATE, HAS_MU, INV_SQRT_D)
        m = tl.maximum(tl.max(tl.max(tl.abs(y1), axis=1), axis=0), tl.max(tl.max(tl.abs(y2), axis=1), axis=0))
        tl.atomic_max(amax_ptr, m)

    @triton.jit
    def _cast256_kernel(x_ptr, h_ptr, s_ptr, mu_ptr, amax_ptr, out_ptr, rows, N, BLOCK: tl.constexpr,
                        ROTATE: tl.constexpr, HAS_MU: tl.constexpr, INV_SQRT_D):
        r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = r[:, None] < rows
        y1, y2, base = _halves(x_ptr, h_ptr, s_ptr, mu_ptr, r, N, mask, ROTATE, HAS_MU, INV_SQRT_D)
        amax = tl.load(amax_ptr)
        scale = tl.where(amax > 0, 448.0 / amax, 1.0)
        tl.store(out_ptr + base, tl.minimum(tl.maximum(y1 * scale, -448.0), 448.0).to(tl.float8e4nv), mask=mask)
        tl.store(out_ptr + base + 128, tl.minimum(tl.maximum(y2 * scale, -448.0), 448.0).to(tl.float8e4nv),
                 mask=mask)

    @triton.jit
    def _block256_kernel(x_ptr, h_ptr, s_ptr, mu_ptr, out_ptr, descale_ptr, N, nb, BLOCK: tl.constexpr,
                         ROTATE: tl.constexpr, HAS_MU: tl.constexpr, INV_SQRT_D):
        pid = tl.program_id(0)  # block pid % nb of plane pid // nb
        plane, blk = pid // nb, pid % nb
        rr = blk * BLOCK + tl.arange(0, BLOCK)
        mask = rr[:, None] < N
        y1, y2, base = _halves(x_ptr, h_ptr, s_ptr, mu_ptr, plane * N + rr, N, mask, ROTATE, HAS_MU, INV_SQRT_D)
        amax = tl.maximum(tl.max(tl.max(tl.abs(y1), axis=1), axis=0), tl.max(tl.max(tl.abs(y2), axis=1), axis=0))
        scale = tl.where(amax > 0, 448.0 / amax, 1.0)
        tl.store(out_ptr + base, tl.minimum(tl.maximum(y1 * scale, -448.0), 448.0).to(tl.float8e4nv), mask=mask)
        tl.store(out_ptr + base + 128, tl.minimum(tl.maximum(y2 * scale, -448.0), 448.0).to(tl.float8e4nv),
                 mask=mask)
        tl.store(descale_ptr + pid, tl.where(amax > 0, amax / 448.0, 1.0))


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


_SIGNED: dict[tuple[Any, ...], torch.Tensor] = {}
#: the head dim whose rows the kernels take as two halves (the rotation a butterfly over H_128)
SPLIT_DIM = 256


def _signed_hadamard(D: int, seed: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """diag(s) H with entries +-1 (exact in fp16 and bf16): hadamard_rotation(D, seed) times sqrt(D)."""
    key = (D, seed, device, dtype)
    if key not in _SIGNED:
        _SIGNED[key] = (signs(D, seed)[:, None] * sylvester(D)).to(device=device, dtype=dtype).contiguous()
    return _SIGNED[key]


def _butterfly_factors(seed: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(H_128, the 256 signs s) with entries +-1 in ``dtype``: diag(s) H_256 is [[H, H], [H, -H]] scaled row by row
    by s, so x diag(s) H_256 is the butterfly over H (the module's docstring)."""
    key = ("butterfly H", SPLIT_DIM // 2, device, dtype)
    if key not in _SIGNED:
        _SIGNED[key] = sylvester(SPLIT_DIM // 2).to(device=device, dtype=dtype).contiguous()
    s_key = ("butterfly signs", SPLIT_DIM, seed, device, dtype)
    if s_key not in _SIGNED:
        _SIGNED[s_key] = signs(SPLIT_DIM, seed).to(device=device, dtype=dtype).contiguous()
    return _SIGNED[key], _SIGNED[s_key]


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


def quantize_e4m3_fused(x: torch.Tensor, rotate_seed: int | None = None, scales: str = "tensor",
                        mean: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(x8, descale) with x8 * descale ~= x (or x @ M, M = hadamard_rotation(D, rotate_seed), with a seed), max|.|
    -> 448, as :func:`flash_kernels.fp8.quantize_e4m3` makes them (``scales``: "tensor", in two passes over x,
    descale a 0-d fp32 tensor; "block", in one pass, descale [..., ceil(N / 128)] for x [..., N, D]), with no host
    synchronisation. x8 has x's shape (contiguous); an all-zero x (block) gets descale 1. ``mean`` (x [..., N, D],
    no rotation): fp32 [..., 1, D], each plane's row subtracted first (:func:`flash_kernels.fp8.centered_v`'s
    mean), in fp32 inside the pass at D = 256, as torch operations before it at 64 and 128. ValueError where
    :func:`fused_reason` says the kernels cannot take x, or for a mean of another shape or with a rotation."""
    why = fused_reason(x)
    if why is not None:
        raise ValueError(f"quantize_e4m3_fused: {why}")
    if scales not in ("tensor", "block"):
        raise ValueError(f"quantize_e4m3_fused: scales must be 'tensor' or 'block'; got {scales!r}")
    D = x.shape[-1]
    rotate = rotate_seed is not None
    if mean is not None:
        if rotate or x.dim() < 2 or tuple(mean.shape) != (*x.shape[:-2], 1, D):
            raise ValueError(f"quantize_e4m3_fused: mean must be fp32 [..., 1, D] = {[*x.shape[:-2], 1, D]} for an "
                             f"unrotated x; got {list(mean.shape)}{' with a rotation' if rotate else ''}")
        if D != SPLIT_DIM:  # the 64- and 128-wide kernels take x as it is: centred first
            x, mean = (x.float() - mean).to(x.dtype), None
    xc = x.contiguous()
    rows = xc.numel() // D
    if D == SPLIT_DIM:
        return _quantize_split(xc, rotate_seed, scales, mean)
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


def _quantize_split(xc: torch.Tensor, rotate_seed: int | None, scales: str,
                    mean: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """quantize_e4m3_fused at D = 256: the rows as two 128-wide halves, the rotation a butterfly over H_128."""
    rotate = rotate_seed is not None
    h, s = _butterfly_factors(int(rotate_seed), xc.device, xc.dtype) if rotate else (xc, xc)  # unused unrotated
    mu = mean.to(torch.float32).contiguous() if mean is not None else xc  # unused without a mean
    rows = xc.numel() // SPLIT_DIM
    N = xc.shape[-2] if xc.dim() >= 2 else max(rows, 1)
    inv = 1.0 / math.sqrt(SPLIT_DIM)
    out = torch.empty(xc.shape, device=xc.device, dtype=torch.float8_e4m3fn)
    if scales == "block":
        if xc.dim() < 2:
            raise ValueError(f"quantize_e4m3_fused(scales='block') takes x [..., N, D]; got shape {tuple(xc.shape)}")
        nb = -(-N // SCALE_BLOCK)
        planes = rows // N if N else 0
        descale = torch.empty((*xc.shape[:-2], nb), device=xc.device, dtype=torch.float32)
        if planes * nb:
            _block256_kernel[(planes * nb,)](xc, h, s, mu, out, descale, N, nb, BLOCK=SCALE_BLOCK, ROTATE=rotate,
                                             HAS_MU=mean is not None, INV_SQRT_D=inv, num_warps=8)
        return out, descale
    amax = torch.zeros((), device=xc.device, dtype=torch.float32)
    grid = (triton.cdiv(rows, BLOCK_ROWS),)
    if rows:
        _amax256_kernel[grid](xc, h, s, mu, amax, rows, max(N, 1), BLOCK=BLOCK_ROWS, ROTATE=rotate,
                              HAS_MU=mean is not None, INV_SQRT_D=inv, num_warps=8)
        _cast256_kernel[grid](xc, h, s, mu, amax, out, rows, max(N, 1), BLOCK=BLOCK_ROWS, ROTATE=rotate,
                              HAS_MU=mean is not None, INV_SQRT_D=inv, num_warps=8)
    descale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    return out, descale
