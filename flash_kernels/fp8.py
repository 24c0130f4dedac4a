"""FP8 (e4m3) attention forward on Hopper: flash_wgmma's 8-bit path (csrc/flash_wgmma_fp8.cu).

    q8, dq = fk.quantize_e4m3(q)            # per-tensor: q ~= q8 * dq
    k8, dk = fk.quantize_e4m3(k)
    v8, dv = fk.quantize_e4m3(v)
    out = fk.attention_fp8(q8, k8, v8, dq, dk, dv, causal=True)   # bf16 [B, H, Nq, D]

Forward only (float8 tensors carry no gradient). Shapes as :func:`flash_kernels.attention`: q [B, H, Nq, D],
k and v [B, Hkv, Nk, D] (grouped-query and cross attention), D = 64, 128 or 256 (at 256 O is summed in the tensor
cores: ``o_sum="tensor"``, the default there), sm_90a GPUs (H100 / H200).
The kernel needs V transposed (8-bit wgmma operands are K-major), so each call first writes
Vt = :func:`vt_e4m3` (v8): [B, Hkv, D, Nk rounded up to 32], with the keys of every 32-key group in the
order the kernel's register fragments want them (see the .cu header); :func:`attention_fp8` times it with
the kernel. Real values are ``x8 * descale``; a descale is per tensor (a Python float, checked here, or a
one-element CUDA tensor) or per block (below). A tensor descale is never read on the host (no synchronisation):
its values must be positive and finite, as :func:`quantize_e4m3` makes them.

    out = fk.fp8.attention_fp8_from(q, k, v, causal=True, rotate=True)   # quantize (+ rotate) and run, one call

Per-block scales (FlashAttention-3's block quantization): ``quantize_e4m3(x, scales="block")`` gives one descale per
:data:`SCALE_BLOCK` rows of every [N, D] plane, [B, H, ceil(N / 128)]; :func:`attention_fp8` takes such tensors for
any of the three descales (a per-tensor descale beside them stands for all its blocks), and
``attention_fp8_from(..., scales="block")`` quantizes that way. A block's rows share one scale, so an outlier costs
only its own block's resolution.

``rotate=True`` (:func:`attention_fp8_from`, :func:`profiled_forward`): FlashAttention-3's incoherent processing,
Q and K multiplied by one random orthogonal Hadamard matrix along D before they are quantized
(flash_kernels.hadamard); the scores are unchanged in exact arithmetic, outliers are spread over D coordinates.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from . import _build, _ops, quantize
from .hadamard import _check_seed, rotate_qk
from .model import FP8_FLOP_PER_SM_CYCLE, FP8_O_SUM_ONLY, fp8_default_o_sum, fp8_dense_peak_tflops  # noqa: F401 - this module's names too
from .registry import unavailable_reason
from .variants import kernel

#: the largest finite e4m3 (float8_e4m3fn) value
E4M3_MAX = 448.0
#: the FP8 module's contract (flash_kernels/variants.py): its option code's fields out_dtype, exp_on_fma, pingpong
_KERNEL = kernel("flash_wgmma_fp8")
#: output dtypes of the kernel and their choice of its option field out_dtype
_OUT_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}
#: the FP8 kernel's head dims
HEAD_DIMS = _HEAD_DIMS = (64, 128, 256)
#: head dims whose O is summed one way only: at D = 256 the tensor cores' accumulator (a fresh fp32 accumulator beside
#: O would be 256 registers per thread), with every exponential on the SFU (exp_on_fma 0)
O_SUM_ONLY = FP8_O_SUM_ONLY
#: head dims whose default schedule is the consumers' ping-pong (measured at D = 128 only: +7-11 %, H200)
PINGPONG_HEAD_DIMS = (128,)
#: keys per group of Vt's permuted order (flash_wgmma_fp8.cu: one k32 step of O += P V)
VT_GROUP = _KERNEL.constants["vt_group"]
#: rows of a Q, K or V plane that share one descale with scales="block" (the kernel's query block and K/V tile)
SCALE_BLOCK = _KERNEL.constants["scale_block"]
#: the choices of scales: one descale per tensor, or one per SCALE_BLOCK rows of each plane
SCALES = tuple(_KERNEL.field("scales").values)
#: where O's sum over the K/V tiles is kept: fp32 registers (each tile's P V added by the CUDA cores) or the tensor
#: cores' accumulator (FlashAttention-3's way; frees 64 registers for the softmax's overlap with P V)
O_SUMS = tuple(_KERNEL.field("o_sum").values)
#: attention_fp8_from's and profiled_forward's quantization by default, by the defaults' rule: the most accurate setting
#: whose whole call costs under 5 % more than per-tensor's, applied to scripts/fp8_accuracy.py's measurement on an
#: H200 (profiles/_bench/nvidia-h200/fp8_accuracy.log.xz): per block + rotation, mean error 0.052 against per-tensor's
#: 0.073 (FlashAttention-3's outlier inputs and standard normal ones), 0.80-0.96x per-tensor's time (per-block
#: quantization takes one pass over each input, per-tensor two)
DEFAULT_ROTATE, DEFAULT_SCALES = True, "block"
_MODULE = _KERNEL.module
#: the share of the softmax's exponentials computed by a polynomial on the FMA units instead of the SFU, and its
#: option code (the field exp_on_fma; wgmma_softmax.cuh: exp2_poly)
EXP_ON_FMA = dict(_KERNEL.field("exp_on_fma").values)


def check_o_sum(o_sum: Any) -> str | None:
    """``o_sum`` checked: one of :data:`O_SUMS`, or None (the head dim's default, :func:`o_sum_for`)."""
    if o_sum is not None and (not isinstance(o_sum, str) or o_sum not in O_SUMS):
        raise ValueError(f"o_sum must be one of {list(O_SUMS)} (O summed in fp32 registers, or in the tensor cores' "
                         f"accumulator) or None (the head dim's default); got {o_sum!r}")
    return o_sum


def o_sum_for(o_sum: str | None, D: int) -> str:
    """Where O is summed at head dim ``D``: ``o_sum``, or by default fp32 registers (the tensor cores' accumulator
    where :data:`O_SUM_ONLY` fixes it); ValueError where ``D`` takes only the other."""
    if o_sum is None:
        return fp8_default_o_sum(D)
    only = O_SUM_ONLY.get(D)
    if only is not None and check_o_sum(o_sum) != only:
        raise ValueError(f"at head dim {D} the FP8 kernel sums O in the tensor cores only (o_sum={only!r}: an fp32 "
                         f"accumulator beside O would take 256 registers per thread); got o_sum={o_sum!r}")
    return o_sum


def check_scales(scales: Any) -> str:
    if not isinstance(scales, str) or scales not in SCALES:
        raise ValueError(f"scales must be one of {list(SCALES)} (one descale per tensor, or per {SCALE_BLOCK} rows "
                         f"of each plane); got {scales!r}")
    return scales


def block_descales(x: torch.Tensor, descale: torch.Tensor) -> torch.Tensor:
    """The per-block descale [..., ceil(N / SCALE_BLOCK)] of x [..., N, D] spread over x's rows: [..., N, 1] (so
    that x8 * block_descales(x8, d) is the dequantized tensor)."""
    return descale.repeat_interleave(SCALE_BLOCK, dim=-1)[..., : x.shape[-2], None]


def quantize_e4m3(x: torch.Tensor, amax: float | torch.Tensor | None = None,
                  scales: str = "tensor") -> tuple[torch.Tensor, torch.Tensor]:
    """(x8, descale): x scaled into e4m3's range (amax -> 448) and rounded.

    ``scales="tensor"``: one descale, x ~= x8 * descale; ``amax`` defaults to max|x| (computed on x's device; no
    host synchronisation); descale is a 0-d fp32 tensor on x's device; an all-zero x gets descale 1.
    ``scales="block"``: x [..., N, D] (two dimensions at least) gets one descale per :data:`SCALE_BLOCK` rows of
    each [N, D] plane, from that block's max|x|: descale [..., ceil(N / 128)] fp32, x ~= x8 *
    :func:`block_descales` (x, descale); ``amax`` is not taken."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dtype == torch.float8_e4m3fn:
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"quantize_e4m3 takes a floating-point tensor (fp32, fp16, bf16) to quantize; got {got}")
    if check_scales(scales) == "block":
        if amax is not None:
            raise ValueError("quantize_e4m3(scales='block') takes each block's own max|x|; amax is for "
                             "scales='tensor'")
        if x.dim() < 2:
            raise ValueError(f"quantize_e4m3(scales='block') takes x [..., N, D] (blocks of {SCALE_BLOCK} rows); "
                             f"got shape {tuple(x.shape)}")
        return _quantize_blocks(x)
    if amax is None:
        amax_t = x.detach().abs().amax().float()
    elif isinstance(amax, torch.Tensor):
        amax_t = amax.detach().float().reshape(())
    else:
        if isinstance(amax, bool) or not isinstance(amax, (int, float)) or not math.isfinite(amax) or amax <= 0:
            raise ValueError(f"amax must be a positive finite number, a tensor, or None (= max|x|); got {amax!r}")
        amax_t = torch.tensor(float(amax), device=x.device)
    descale = torch.where(amax_t > 0, amax_t / E4M3_MAX, torch.ones_like(amax_t))
    x8 = (x.float() / descale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return x8, descale


def _quantize_blocks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """quantize_e4m3(x, scales="block") in torch operations: zero rows pad N to whole blocks, then each block's
    max|x| sets its descale."""
    N, D = x.shape[-2:]
    nb = -(-N // SCALE_BLOCK)
    xf = torch.nn.functional.pad(x.detach().float(), (0, 0, 0, nb * SCALE_BLOCK - N))
    xb = xf.reshape(*x.shape[:-2], nb, SCALE_BLOCK, D)
    amax = xb.abs().amax(dim=(-2, -1))
    descale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    x8 = (xb / descale[..., None, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return x8.reshape(*x.shape[:-2], nb * SCALE_BLOCK, D)[..., :N, :].contiguous(), descale


def vt_e4m3(v8: torch.Tensor) -> torch.Tensor:
    """V [B, Hkv, Nk, D] (e4m3) -> Vt [B, Hkv, D, Npad] (Npad = Nk rounded up to 32, padded with zeros), the
    keys of each group of 32 in the kernel's order: column 16 hh + 4 t + 2 j + e of a group holds key
    16 hh + 8 j + 2 t + e (flash_wgmma_fp8.cu's header). On a CUDA tensor of the kernel's head dims, one small
    kernel of the FP8 module (flash_wgmma_fp8.cu: vt_e4m3_kernel); elsewhere :func:`vt_e4m3_reference`."""
    B, Hkv, Nk, D = v8.shape
    if not v8.is_cuda or D not in _HEAD_DIMS:
        return vt_e4m3_reference(v8)
    v8 = v8.contiguous()
    if v8.data_ptr() % 16:  # the kernel reads rows 16 bytes at a time
        v8 = v8.clone()
    vt = torch.empty((B, Hkv, D, -(-Nk // VT_GROUP) * VT_GROUP), dtype=torch.float8_e4m3fn, device=v8.device)
    if _ops.POISON:  # 0xFF is e4m3's NaN
        vt.view(torch.uint8).fill_(0xFF)
    _build.load(_MODULE).vt(v8, vt)
    return vt


def vt_e4m3_reference(v8: torch.Tensor) -> torch.Tensor:
    """:func:`vt_e4m3` with torch's copy kernels (any device; the GPU tests compare the two)."""
    B, Hkv, Nk, D = v8.shape
    npad = -(-Nk // VT_GROUP) * VT_GROUP
    u = v8.view(torch.uint8)
    if npad != Nk:
        u = torch.nn.functional.pad(u, (0, 0, 0, npad - Nk))
    # key = 32 g + 16 hh + 8 j + 2 t + e  ->  column 32 g + 16 hh + 4 t + 2 j + e
    u = u.reshape(B, Hkv, npad // VT_GROUP, 2, 2, 4, 2, D).permute(0, 1, 7, 2, 3, 5, 4, 6)
    return u.reshape(B, Hkv, D, npad).view(torch.float8_e4m3fn)


def vt_key_of_column(col: int) -> int:
    """The key whose V row sits in column ``col`` of :func:`vt_e4m3`'s output (within a group, the inverse
    of the kernel's fragment order; for tests and readers)."""
    g, c = divmod(col, VT_GROUP)
    hh, c = divmod(c, 16)
    t, c = divmod(c, 4)
    j, e = divmod(c, 2)
    return g * VT_GROUP + 16 * hh + 8 * j + 2 * t + e


def _check_descale(name: str, d: Any, blocks: tuple[int, int, int]) -> bool:
    """Whether descale ``d`` is per block (a tensor of shape ``blocks`` = (B, H, ceil(N / 128)) of its tensor), after
    checking that it is that or a per-tensor one (a positive float, a one-element tensor)."""
    if isinstance(d, torch.Tensor):
        if not d.is_floating_point() or d.dtype == torch.float8_e4m3fn or (
                d.numel() != 1 and tuple(d.shape) != blocks):
            raise ValueError(f"{name} must be a positive float, a one-element floating-point tensor (per tensor) or "
                             f"a floating-point tensor of shape {blocks} (per block of {SCALE_BLOCK} rows: "
                             f"[B, heads, ceil(N / {SCALE_BLOCK})]); got a {d.dtype} tensor of shape "
                             f"{tuple(d.shape)}")
        return d.numel() != 1 or tuple(d.shape) == blocks
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d) or d <= 0:
        raise ValueError(f"{name} must be a positive finite float or a one-element tensor (x ~= x8 * descale); "
                         f"got {d!r}")
    return False


@functools.lru_cache(maxsize=64)
def _descale_floats(values: tuple[float, float, float], device: torch.device) -> torch.Tensor:
    """[dq, dk, dv] on ``device``, made once per distinct triple (a host-to-device copy waits for the stream);
    the kernel only reads it."""
    return torch.tensor(values, dtype=torch.float32, device=device)


def d_numel(d: Any) -> int:
    """Elements of a descale: a float is one."""
    return d.numel() if isinstance(d, torch.Tensor) else 1


def _descale(name: str, d: Any, device: torch.device) -> torch.Tensor:
    """A checked descale as an fp32 tensor on ``device`` (one element, or its blocks)."""
    if isinstance(d, torch.Tensor):
        if d.device != device:
            raise ValueError(f"{name} is on {d.device} but q8 is on {device}; a tensor descale must share q8's "
                             f"device")
        return d.detach().float()
    return torch.tensor(float(d), dtype=torch.float32, device=device)


def _check(q8: Any, k8: Any, v8: Any, out_dtype: Any) -> tuple[int, ...]:
    names, tensors = ("q8", "k8", "v8"), (q8, k8, v8)
    for name, t in zip(names, tensors, strict=True):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.float8_e4m3fn:
            raise TypeError(f"{name} must be torch.float8_e4m3fn (quantize with flash_kernels.quantize_e4m3); "
                            f"got {t.dtype}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D [B, H, N, D]; got shape {tuple(t.shape)}")
    B, H, Nq, D, Hkv, Nk = _ops._check_layout(names, tensors)
    if D not in _HEAD_DIMS:
        raise ValueError(f"attention_fp8 supports head dim {_HEAD_DIMS}; got D={D}")
    _ops._check_sizes(names, tensors, B, H, Nq, Hkv, Nk)
    if B * H > _ops._MAX_BH:
        raise ValueError(f"B*H = {B * H} exceeds {_ops._MAX_BH}, the kernel's grid limit; split the batch")
    if out_dtype not in _OUT_DTYPES:
        raise ValueError(f"out_dtype must be torch.bfloat16 or torch.float16; got {out_dtype!r}")
    return B, H, Nq, D, Hkv, Nk


def attention_fp8(q8: torch.Tensor, k8: torch.Tensor, v8: torch.Tensor, descale_q: Any, descale_k: Any,
                  descale_v: Any, causal: bool = False, scale: float | None = None,
                  out_dtype: torch.dtype = torch.bfloat16, return_lse: bool = False,
                  exp_on_fma: float = 0.0, o_sum: str | None = None, v_mean: torch.Tensor | None = None) -> Any:
    """softmax(scale * (q8 dq)(k8 dk)^T) (v8 dv) from e4m3 inputs; the output in ``out_dtype`` (bf16 or fp16),
    with the fp32 LSE [B, H, Nq] (natural log of the row sums of exp(scale * real scores)) if ``return_lse``.
    scale defaults to 1/sqrt(D); causal masking is top-left aligned (query i sees keys j <= i). ``exp_on_fma``
    (0, 0.25 or 0.5): the share of the softmax's exponentials computed by a degree-3 polynomial on the FMA
    units instead of the SFU (relative error <= 1.8e-4, below e4m3's rounding of P). ``o_sum`` (:data:`O_SUMS`):
    where O's sum over the K/V tiles is kept, "fp32" registers or the "tensor" cores' accumulator (None: fp32, at
    D = 256 the tensor cores, the only way there). ``v_mean``: None, or the mean row that was taken out of V
    before it was quantized (:func:`centered_v`'s ``mu``, [B, Hkv, 1, D] or [B, Hkv, D]), added to O's rows in
    the kernel's epilogue."""
    check_o_sum(o_sum)
    prepared = _prepare(q8, k8, v8, descale_q, descale_k, descale_v, causal, scale, out_dtype, exp_on_fma)
    mean = _check_v_mean(v_mean, k8.shape[0], k8.shape[1], q8.shape[-1], q8.device)
    out, lse = forward_vt(*prepared, o_sum=o_sum_for(o_sum, prepared[0].shape[-1]), v_mean=mean)
    return (out, lse) if return_lse else out


def _prepare(q8: Any, k8: Any, v8: Any, descale_q: Any, descale_k: Any, descale_v: Any, causal: Any, scale: Any,
             out_dtype: Any, exp_on_fma: Any) -> tuple[Any, ...]:
    """:func:`attention_fp8`'s arguments checked and made into :func:`forward_vt`'s: contiguous q8, k8 (q8's sign
    flipped for a negative scale), Vt, the descales as one device tensor, scale > 0."""
    B, H, Nq, D, Hkv, Nk = _check(q8, k8, v8, out_dtype)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    sc = _ops._scale(scale, D)
    if isinstance(exp_on_fma, bool) or exp_on_fma not in EXP_ON_FMA:
        raise ValueError(f"exp_on_fma must be one of {sorted(EXP_ON_FMA)}; got {exp_on_fma!r}")
    if D in O_SUM_ONLY and exp_on_fma:
        raise ValueError(f"at head dim {D} every exponential runs on the SFU: exp_on_fma must be 0; got {exp_on_fma!r}")
    names, ds = ("descale_q", "descale_k", "descale_v"), (descale_q, descale_k, descale_v)
    nb = (-(-Nq // SCALE_BLOCK), -(-Nk // SCALE_BLOCK))
    shapes = ((B, H, nb[0]), (B, Hkv, nb[1]), (B, Hkv, nb[1]))
    per_block = [_check_descale(name, d, blk) for name, d, blk in zip(names, ds, shapes, strict=True)]
    _ops._check_devices(("q8", "k8", "v8"), (q8, k8, v8))
    why = unavailable_reason("flash_wgmma", torch.cuda.get_device_capability(q8.device))
    if why is not None:
        raise ValueError(why.replace("flash_wgmma", "attention_fp8 (flash_wgmma's FP8 path)", 1))
    descale: torch.Tensor | tuple[torch.Tensor, ...]
    if any(per_block):  # three [planes * blocks] fp32 arrays; a per-tensor descale stands for all its blocks
        descale = tuple(_descale(n, d, q8.device).reshape(() if d_numel(d) == 1 else blk).expand(blk)
                        .contiguous().reshape(-1)
                        for n, d, blk in zip(names, ds, shapes, strict=True))
    elif not any(isinstance(d, torch.Tensor) for d in ds):  # floats: one cached device tensor, no copy per call
        descale = _descale_floats(tuple(float(d) for d in ds), q8.device)
    else:
        descale = torch.cat([_descale(n, d, q8.device).reshape(1) for n, d in zip(names, ds, strict=True)])
    q8, k8 = q8.contiguous(), k8.contiguous()
    if sc < 0:  # the kernel's softmax keeps the running max of the raw scores (scale > 0): flip q's sign bit
        q8 = (q8.view(torch.uint8) ^ 0x80).view(torch.float8_e4m3fn)
        sc = -sc
    return q8, k8, vt_e4m3(v8.contiguous()), descale, causal, sc, out_dtype, exp_on_fma


def forward_vt(q8: torch.Tensor, k8: torch.Tensor, vt: torch.Tensor, descale: torch.Tensor | tuple[torch.Tensor, ...],
               causal: bool, scale: float, out_dtype: torch.dtype, exp_on_fma: float = 0.0,
               pingpong: bool | None = None, o_sum: str | None = None,
               v_mean: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel alone, unchecked: q8, k8 contiguous e4m3, vt = :func:`vt_e4m3` (v8), descale = fp32
    [dq, dk, dv] on the device (per tensor) or a tuple of the three contiguous fp32 block arrays (per block:
    [B, H, ceil(Nq / 128)] and twice [B, Hkv, ceil(Nk / 128)]), scale > 0; ``v_mean``: None, or fp32 with
    B * Hkv * D elements (:func:`centered_v`'s mean rows), added to O's rows in the kernel's epilogue. For
    benchmarks that time the kernel without Vt's preparation;
    :func:`attention_fp8` is the checked entry point. ``pingpong``: the two consumer warpgroups take turns to
    issue their products; None: where it was measured faster (:data:`PINGPONG_HEAD_DIMS`, flash_wgmma_fp8.cu's
    header)."""
    B, H, Nq, D = q8.shape
    o = _ops._alloc((B, H, Nq, D), out_dtype, q8.device)
    lse = _ops._alloc((B, H, Nq), torch.float32, q8.device)
    if pingpong is None:
        pingpong = D in PINGPONG_HEAD_DIMS
    per_block = isinstance(descale, tuple)
    code = _KERNEL.encode(out_dtype=_OUT_DTYPES[out_dtype], exp_on_fma=exp_on_fma, pingpong=bool(pingpong),
                          scales="block" if per_block else "tensor", o_sum=o_sum_for(o_sum, D))
    ws = list(descale) if per_block else [descale] * 3  # a per-tensor descale holds all three in ws[0]
    if v_mean is not None:
        ws.append(v_mean.reshape(-1))  # ws[3]: the epilogue's row to add
    _build.load(_MODULE).fwd(code, q8, k8, vt, o, lse, ws, scale, causal)
    return o, lse


#: profiled_forward's prepared inputs: one set (captures run one case after another)
_PREPARED: dict[tuple[Any, ...], tuple[Any, ...]] = {}


def profiled_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                     scale: float | None = None, rotate: bool = DEFAULT_ROTATE, scales: str = DEFAULT_SCALES,
                     o_sum: str | None = None, center_v: bool | None = None) -> torch.Tensor:
    """The FP8 forward as an implementation of nsightlab's attention problem (flash_kernels.study registers it as
    ``flash_wgmma_fp8``): fp16 or bf16 q, k, v are quantized (by default as :func:`attention_fp8_from` does) and Vt
    made on the first call with these
    tensors (checked as :func:`attention_fp8` checks them), then kept, keyed by the tensors' storage, shape and version, so a
    later call (the one a capture's range holds, after the warm-up) runs the FP8 kernel alone. Output in q's dtype.
    ``rotate`` (default True): Q and K rotated first (Hadamard seed 0) as part of that preparation, so the range holds the same
    kernel; only the result's error changes. ``scales``: per tensor, or per block (the kernel's per-block
    variant); ``o_sum`` as :func:`attention_fp8`'s, ``center_v`` as :func:`attention_fp8_from`'s. Quantized as
    :func:`attention_fp8_from` quantizes (the fused kernels wherever they can), so both give the same result."""
    if not isinstance(q, torch.Tensor) or q.dtype not in _OUT_DTYPES:
        raise TypeError(f"profiled_forward takes fp16 or bf16 tensors to quantize; got "
                        f"{q.dtype if isinstance(q, torch.Tensor) else type(q).__name__}")
    if not isinstance(rotate, bool):
        raise TypeError(f"rotate must be a bool, got {type(rotate).__name__}")
    check_scales(scales)
    check_o_sum(o_sum)
    center = center_v_for(center_v, o_sum, q.shape[-1])
    key = tuple((t.data_ptr(), tuple(t.shape), t.dtype, t._version) for t in (q, k, v)) + (causal, scale, rotate,
                                                                                          scales, center)
    prep = _PREPARED.get(key)
    if prep is None:
        _PREPARED.clear()
        mu = mean_row(v) if center else None
        (q8, dq), (k8, dk), (v8, dv) = _quantized(q, k, v, rotate, 0, None, scales, v_mean=mu)
        prepared = _prepare(q8, k8, v8, dq, dk, dv, causal, scale, q.dtype, 0.0)
        prep = _PREPARED[key] = (prepared, _check_v_mean(mu, v.shape[0], v.shape[1], v.shape[-1], v.device))
    return forward_vt(*prep[0], o_sum=o_sum, v_mean=prep[1])[0]


def _quantized(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rotate: bool, seed: int,
               fused: bool | None, scales: str = "tensor",
               v_mean: torch.Tensor | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(x8, descale) of q, k, v per tensor or per block (``scales``), Q and K rotated first with ``rotate``, V less
    ``v_mean`` (fp32 [B, Hkv, 1, D], :func:`centered_v`'s mean) where given: by the fused Triton kernels
    (:mod:`flash_kernels.quantize`) unless ``fused`` is False or they cannot take an input (then the torch
    operations: :func:`_rotated`, :func:`centered_v`'s subtraction, :func:`quantize_e4m3`; ``fused`` True refuses
    that)."""
    if fused is not None and not isinstance(fused, bool):
        raise TypeError(f"fused must be None (wherever it can), True or False; got {fused!r}")
    why = next((f"{n}: {r}" for n, t in (("q", q), ("k", k), ("v", v)) if (r := quantize.fused_reason(t))), None)
    if fused and why:
        raise ValueError(f"attention_fp8_from(fused=True): the fused quantization cannot take {why}")
    if rotate:
        _rotated(q, k, seed, check_only=True)
    if fused is not False and why is None:
        rs = _check_seed(seed) if rotate else None
        return [quantize.quantize_e4m3_fused(q, rs, scales), quantize.quantize_e4m3_fused(k, rs, scales),
                quantize.quantize_e4m3_fused(v, None, scales, mean=v_mean)]
    if rotate:
        q, k = _rotated(q, k, seed)
    if v_mean is not None:
        v = (v.float() - v_mean).to(v.dtype)
    return [quantize_e4m3(t, scales=scales) for t in (q, k, v)]


def centered_v(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(V less its mean row, the mean row): ``mu`` is the mean over the keys of each batch entry and KV head, fp32
    ``[B, Hkv, 1, D]``; the first is in V's dtype. Attention's rows of weights sum to one, so attention over the
    centred V plus ``mu`` (:func:`add_v_mean`) is the attention over V, for any mask that leaves a row a key. What it
    buys: O's sum over thousands of keys no longer carries V's common part, the part an accumulator of few bits
    (the FP8 tensor cores' own, ``o_sum="tensor"``) loses most of; and e4m3's range goes to what differs."""
    mu = mean_row(v)
    return (v.detach().float() - mu).to(v.dtype), mu


def mean_row(v: torch.Tensor) -> torch.Tensor:
    """V's mean row over the keys of each batch entry and KV head, fp32 ``[B, Hkv, 1, D]`` (one pass over V, summed
    in fp32): what :func:`centered_v` takes out, and the fused quantization subtracts in its own pass."""
    return v.detach().mean(dim=-2, keepdim=True, dtype=torch.float32)


def add_v_mean(o: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    """``o`` ([B, H, N, D]) plus :func:`centered_v`'s ``mu`` ([B, Hkv, 1, D]) of each query head's KV head (query
    heads h * H / Hkv .. (h + 1) * H / Hkv - 1 share KV head h, as the kernels group them), in place, in o's
    dtype."""
    H, Hkv = o.shape[1], mu.shape[1]
    return o.add_((mu.repeat_interleave(H // Hkv, dim=1) if H != Hkv else mu).to(o.dtype))


def _check_v_mean(v_mean: Any, B: int, Hkv: int, D: int, device: torch.device) -> torch.Tensor | None:
    """attention_fp8's ``v_mean`` as the kernel takes it (contiguous fp32 [B * Hkv * D] on the inputs' device), or
    None; a clear error for anything else."""
    if v_mean is None:
        return None
    if not isinstance(v_mean, torch.Tensor):
        raise TypeError(f"v_mean must be a torch.Tensor (V's mean row per batch entry and KV head, fp32 [B, Hkv, 1, D] "
                        f"or [B, Hkv, D]) or None, got {type(v_mean).__name__}")
    if v_mean.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise TypeError(f"v_mean must be fp32 (or fp16, bf16, fp64, converted to fp32); got {v_mean.dtype}")
    if tuple(v_mean.shape) not in ((B, Hkv, 1, D), (B, Hkv, D)):
        raise ValueError(f"v_mean must have shape [B, Hkv, 1, D] = {[B, Hkv, 1, D]} or [B, Hkv, D] = {[B, Hkv, D]}; "
                         f"got {list(v_mean.shape)}")
    if v_mean.device != device:
        raise ValueError(f"v_mean must be on the inputs' device ({device}); got {v_mean.device}")
    flat = v_mean.to(torch.float32).contiguous().reshape(-1)
    return flat if flat.data_ptr() % 8 == 0 else flat.clone()  # the epilogue reads it 8 bytes at a time


def center_v_for(center_v: Any, o_sum: str | None, D: int) -> bool:
    """Whether V is centred (:func:`centered_v`): ``center_v``, or by default (None) wherever O is summed in the
    tensor cores (:func:`o_sum_for`), whose accumulator loses V's common part over long rows; a clear error for
    anything but None or a bool."""
    if center_v is not None and not isinstance(center_v, bool):
        raise TypeError(f"center_v must be None (where O is summed in the tensor cores) or a bool (V's mean row taken "
                        f"out before quantizing and added back to O), got {type(center_v).__name__}")
    return o_sum_for(o_sum, D) == "tensor" if center_v is None else center_v


def _rotated(q: Any, k: Any, seed: int = 0, check_only: bool = False) -> Any:
    """rotate_qk's fp32 products, after the kernel's shape check (so that D = 96 is refused as the kernel refuses
    it, not as a Hadamard size); ``check_only``: the checks alone."""
    for name, t in (("q", q), ("k", k)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4 or t.shape[-1] not in _HEAD_DIMS:
            raise ValueError(f"attention_fp8 supports 4-D [B, H, N, D] tensors of head dim {_HEAD_DIMS}; got "
                             f"{name} of shape {tuple(t.shape)}")
    if check_only:
        _check_seed(seed)
        return None
    return rotate_qk(q, k, seed, out_dtype=torch.float32)


def attention_fp8_from(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                       scale: float | None = None, rotate: bool = DEFAULT_ROTATE, seed: int = 0,
                       out_dtype: torch.dtype | None = None, return_lse: bool = False,
                       fused: bool | None = None, scales: str = DEFAULT_SCALES, o_sum: str | None = None,
                       center_v: bool | None = None) -> Any:
    """The FP8 forward from unquantized fp32, fp16 or bf16 q, k, v: each quantized (:func:`quantize_e4m3`) per
    block of 128 rows (``scales="block"``, the default) or per tensor, then :func:`attention_fp8`. With ``rotate``
    (the default; the defaults are :data:`DEFAULT_ROTATE`, :data:`DEFAULT_SCALES`, chosen by measurement), Q and K
    are first multiplied by the
    random orthogonal Hadamard matrix of ``seed`` (:func:`flash_kernels.hadamard.rotate_qk`, in fp32, rounded once
    to e4m3): the attention is the same in exact arithmetic (scale still defaults to 1/sqrt(D)), outliers along D
    are spread out before quantization; V is not rotated. Output in ``out_dtype`` (bf16 or fp16; default q's dtype,
    bf16 for fp32 q), with the LSE if ``return_lse``. Nothing is kept between calls: the quantization, the
    rotation and Vt are done on every call (a timer of this call times them all with the kernel).

    ``fused`` (default: wherever it can): quantize, and rotate, with :func:`flash_kernels.quantize.quantize_e4m3_fused`
    (two Triton passes over each 16-bit input, the rotation inside them) instead of the torch operations; False takes
    the torch path, True refuses inputs the fused kernels cannot take.

    ``center_v`` (default: where O is summed in the tensor cores, :func:`center_v_for`): V's mean row over the keys
    (per batch entry and KV head) is taken out before V is quantized and added back to O in the kernel's epilogue
    (:func:`centered_v`; the same attention in exact arithmetic, as :func:`add_v_mean` says with torch
    operations): two more passes over V, for the accuracy of O summed over long rows in the tensor cores."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"attention_fp8_from takes fp32, fp16 or bf16 q, k, v to quantize (e4m3 tensors go to "
                            f"attention_fp8); got {name} in {t.dtype}")
    if not isinstance(rotate, bool):
        raise TypeError(f"rotate must be a bool, got {type(rotate).__name__}")
    check_scales(scales)
    if out_dtype is None:
        out_dtype = q.dtype if q.dtype in _OUT_DTYPES else torch.bfloat16
    check_o_sum(o_sum)
    if q.dim() == 4:  # a head dim that takes one way of summing O refuses the other before anything is quantized
        o_sum_for(o_sum, q.shape[-1])
    mu = None
    center = center_v_for(center_v, o_sum, q.shape[-1]) if q.dim() == 4 else center_v_for(center_v, "fp32", 0)
    if center and v.dim() == 4 and v.shape[-2] > 0:  # other shapes: attention_fp8 refuses them
        mu = mean_row(v)
    (q8, dq), (k8, dk), (v8, dv) = _quantized(q, k, v, rotate, seed, fused, scales, v_mean=mu)
    return attention_fp8(q8, k8, v8, dq, dk, dv, causal=causal, scale=scale, out_dtype=out_dtype,
                         return_lse=return_lse, o_sum=o_sum, v_mean=mu)
