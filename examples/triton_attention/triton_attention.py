"""A FlashAttention-2-style attention kernel written in Triton: forward and backward.

This module is the worked example of "profile your own kernel" with nsightlab: it is a user's
kernel, not part of ``flash_kernels``, and it reaches the profiler only through the public
plug-in path, which takes a ``module:callable`` (here ``triton_attention:attention``).

The structure follows Triton's fused-attention tutorial (``python/tutorials/06-fused-attention.py``)
and the FlashAttention-2 paper (Dao, 2023), written out plainly so that a profile of it is easy to read:

* forward (``_attn_fwd``): one program per (query block, batch*head). Q stays on chip; the program
  streams K/V blocks and keeps the online-softmax state (running max ``m``, running sum ``l``,
  un-normalised output ``acc``) in fp32. Scores are computed in base 2: ``log2(e)`` is folded into
  the softmax scale so that every exponential is one ``exp2``. It writes O and the row
  log-sum-exp ``LSE = log(sum_j exp(scale * q.k_j))`` (natural log, fp32, ``[B, H, N]``).
* backward, three kernels, no atomics (the result is deterministic, run to run):
  ``_attn_bwd_preprocess`` computes ``Delta = rowsum(dO * O)``;
  ``_attn_bwd_dkdv``: one program per key block, looping over query blocks, recomputes
  ``P = exp(S - LSE)`` and accumulates dV = P^T dO and dK = scale * dS^T Q;
  ``_attn_bwd_dq``: one program per query block, looping over key blocks, accumulates dQ = scale * dS K,
  where ``dS = P * (dO V^T - Delta)``.

Every load and store that can cross N is masked, so any sequence length N >= 1 is handled,
including the ragged tail block (N not a multiple of the block sizes). Causal masking is aligned top-left (query i sees
keys j <= i), like ``torch.nn.functional.scaled_dot_product_attention(..., is_causal=True)`` for
Nq == Nk.

Block sizes are fixed per head dim (no autotuning) so that a profile is deterministic: autotuning
would launch many configurations under the profiler. The forward masks only the blocks that need it
(the diagonal and the key tail; measured in reports/compare/); the backward's causal path applies the mask in every
iteration instead of splitting the loop into unmasked and diagonal blocks as the tutorial does; the
cost of that choice is visible in a profile.

Importing this module needs neither triton nor a GPU (the kernels are only defined when triton
imports); calling :func:`attention` without them raises a ``RuntimeError``.
"""

import math
from dataclasses import dataclass
from typing import Any

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # no triton here: the module still imports, attention() raises RuntimeError
    triton = None
    tl = None

__all__ = ["attention"]

_DTYPES = (torch.float16, torch.bfloat16)
_HEAD_DIMS = (64, 128)
_MAX_BH = 65535  # B*H runs on grid axis 1, whose limit is 65535
_LOG2E = 1.4426950408889634  # log2(e): exp(x) == exp2(x * log2(e))

_ACCEPTED = ("accepted: q, k, v CUDA tensors on one device, all of one shape [B, H, N, D] (Nq == Nk, N >= 1), "
             "dtype torch.float16 or torch.bfloat16, head dim D in (64, 128)")

#: Set to True (tests do) to fill every buffer the kernels write with NaN first, so an element a
#: kernel fails to write shows up as NaN instead of as stale memory.
_POISON = False


@dataclass(frozen=True)
class _Blocks:
    """A fixed launch configuration: tile sizes and the two Triton compile options."""

    block_m: int  # queries per tile
    block_n: int  # keys per tile
    num_warps: int
    num_stages: int


# Forward: a 128-query tile amortises each K/V block over many rows; 64 keys per step keep the
# fp32 score tile (128 x 64) and the accumulator (128 x D) in registers. D=128 doubles the
# accumulator and the K/V tiles, hence 8 warps (half the registers per thread) and 2 stages of
# K/V in shared memory instead of 3.
_FWD = {64: _Blocks(128, 64, 4, 3), 128: _Blocks(128, 64, 8, 2)}
# dK/dV: a program holds K, V (block_n x D, fp16) and the two fp32 accumulators dK, dV on chip for its
# whole life, so its key tile is 64 and, for D=128, the query step is halved to 32.
_BWD_DKDV = {64: _Blocks(64, 64, 4, 2), 128: _Blocks(32, 64, 8, 2)}
# dQ: a program holds Q, dO and the fp32 dQ accumulator; for D=128 the key step is halved.
_BWD_DQ = {64: _Blocks(64, 64, 4, 2), 128: _Blocks(64, 32, 8, 2)}
_PRE_BLOCK_M = 128  # rows per program of the Delta preprocess kernel


# --------------------------------------------------------------------------------------------------
# Kernels. All tensors are contiguous [B, H, N, D]: row n of head bh starts at (bh * N + n) * D.
# LSE and Delta are contiguous [B, H, N] fp32. Defined only when triton imported.
# --------------------------------------------------------------------------------------------------
if triton is not None:

    @triton.jit
    def _attn_fwd_block(acc, l_i, m_i, q, K, V, offs_m, offs_n, offs_d, start_n, qk_scale, N,
                        MASK: tl.constexpr, CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr):
        """One key block of the online softmax. ``MASK`` False: a block wholly inside [0, N) and, when
        causal, wholly left of the diagonal: no bounds checks, no mask (most blocks of a long row)."""
        cols = start_n + offs_n
        if MASK:
            n_valid = cols < N
            k = tl.load(K + cols[:, None] * HEAD_DIM + offs_d[None, :], mask=n_valid[:, None], other=0.0)
            v = tl.load(V + cols[:, None] * HEAD_DIM + offs_d[None, :], mask=n_valid[:, None], other=0.0)
        else:
            k = tl.load(K + cols[:, None] * HEAD_DIM + offs_d[None, :])
            v = tl.load(V + cols[:, None] * HEAD_DIM + offs_d[None, :])

        s = tl.dot(q, tl.trans(k)) * qk_scale  # [BLOCK_M, BLOCK_N] fp32, already times log2(e)
        if MASK:
            keep = n_valid[None, :]  # the key tail past N must not enter the softmax
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None])
            s = tl.where(keep, s, float("-inf"))

        # Key 0 is visible to every row (causal or not) and lies in the first block processed, so
        # m_new is finite from the first block on: no (-inf) - (-inf) = NaN below.
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)  # rescales the old state to the new max (0 on the first block)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        return acc, l_i, m_new

    @triton.jit
    def _attn_fwd(Q, K, V, O, LSE, qk_scale, N,
                  CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        pid_m = tl.program_id(0)
        bh = tl.program_id(1).to(tl.int64)
        base = bh * N * HEAD_DIM
        Q += base
        K += base
        V += base
        O += base
        LSE += bh * N

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        m_valid = offs_m < N

        # The query tile stays in registers for the whole key loop. Rows past N load as 0.
        q = tl.load(Q + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=m_valid[:, None], other=0.0)

        # Online-softmax state, fp32, in base 2: m_i = running max of log2-scaled scores,
        # l_i = running sum of exp2(score - m_i), acc = running sum of exp2(score - m_i) * v.
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

        # Two phases: the blocks that need no mask (inside [0, N) and, when causal, left of this tile's
        # first row), then the masked ones (the diagonal blocks and the key tail). Causal: this tile's
        # last row is (pid_m + 1) * BLOCK_M - 1, so no key at or past hi is visible.
        full = (N // BLOCK_N) * BLOCK_N
        if CAUSAL:
            full = tl.minimum(pid_m * BLOCK_M, full)
            hi = tl.minimum((pid_m + 1) * BLOCK_M, N)
        else:
            hi = N
        for start_n in range(0, full, BLOCK_N):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            acc, l_i, m_i = _attn_fwd_block(acc, l_i, m_i, q, K, V, offs_m, offs_n, offs_d, start_n, qk_scale, N,
                                            MASK=False, CAUSAL=CAUSAL, HEAD_DIM=HEAD_DIM)
        for start_n in range(full, hi, BLOCK_N):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            acc, l_i, m_i = _attn_fwd_block(acc, l_i, m_i, q, K, V, offs_m, offs_n, offs_d, start_n, qk_scale, N,
                                            MASK=True, CAUSAL=CAUSAL, HEAD_DIM=HEAD_DIM)

        acc = acc / l_i[:, None]
        tl.store(O + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(O.dtype.element_ty), mask=m_valid[:, None])
        # Natural-log LSE: log(sum exp(scale * s)) = ln(2) * (m_i + log2(l_i)).
        lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
        tl.store(LSE + offs_m, lse, mask=m_valid)

    @triton.jit
    def _attn_bwd_preprocess(O, DO, DELTA, N, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
        pid_m = tl.program_id(0)
        bh = tl.program_id(1).to(tl.int64)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, HEAD_DIM)
        m_valid = offs_m < N
        ptrs = bh * N * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
        o = tl.load(O + ptrs, mask=m_valid[:, None], other=0.0).to(tl.float32)
        do = tl.load(DO + ptrs, mask=m_valid[:, None], other=0.0).to(tl.float32)
        delta = tl.sum(o * do, axis=1)  # Delta_i = sum_j P_ij dP_ij = dO_i . O_i
        tl.store(DELTA + bh * N + offs_m, delta, mask=m_valid)

    @triton.jit
    def _attn_bwd_dkdv(Q, K, V, DO, LSE, DELTA, DK, DV, sm_scale, qk_scale, N,
                       CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        pid_n = tl.program_id(0)
        bh = tl.program_id(1).to(tl.int64)
        base = bh * N * HEAD_DIM
        Q += base
        K += base
        V += base
        DO += base
        DK += base
        DV += base
        LSE += bh * N
        DELTA += bh * N

        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        n_valid = offs_n < N

        # This program's K and V stay on chip; keys past N load as 0 and are masked out of P below.
        k = tl.load(K + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=n_valid[:, None], other=0.0)
        v = tl.load(V + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=n_valid[:, None], other=0.0)
        dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
        dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)

        # Causal: queries before this key block's first key see none of its keys.
        if CAUSAL:
            lo = pid_n * BLOCK_N
        else:
            lo = 0
        for start_m in range(lo, N, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            m_valid = offs_m < N
            q = tl.load(Q + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=m_valid[:, None], other=0.0)
            do = tl.load(DO + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=m_valid[:, None], other=0.0)
            lse2 = tl.load(LSE + offs_m, mask=m_valid, other=0.0) * 1.4426950408889634  # to base 2
            delta = tl.load(DELTA + offs_m, mask=m_valid, other=0.0)

            # Transposed tiles ([keys, queries]) so that dV and dK come out as [keys, D].
            s_t = tl.dot(k, tl.trans(q)) * qk_scale
            p_t = tl.math.exp2(s_t - lse2[None, :])  # P^T, already normalised by the saved LSE
            keep = n_valid[:, None] & m_valid[None, :]
            if CAUSAL:
                keep = keep & (offs_m[None, :] >= offs_n[:, None])
            p_t = tl.where(keep, p_t, 0.0)  # where, not multiply: masked entries of exp2 may be inf

            dv += tl.dot(p_t.to(do.dtype), do)  # dV += P^T dO
            dp_t = tl.dot(v, tl.trans(do))  # (dO V^T)^T
            ds_t = p_t * (dp_t - delta[None, :])  # dS^T, without the softmax scale
            dk += tl.dot(ds_t.to(q.dtype), q)  # dK += dS^T Q

        dk = dk * sm_scale
        tl.store(DK + offs_n[:, None] * HEAD_DIM + offs_d[None, :], dk.to(DK.dtype.element_ty), mask=n_valid[:, None])
        tl.store(DV + offs_n[:, None] * HEAD_DIM + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=n_valid[:, None])

    @triton.jit
    def _attn_bwd_dq(Q, K, V, DO, LSE, DELTA, DQ, sm_scale, qk_scale, N,
                     CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        pid_m = tl.program_id(0)
        bh = tl.program_id(1).to(tl.int64)
        base = bh * N * HEAD_DIM
        Q += base
        K += base
        V += base
        DO += base
        DQ += base
        LSE += bh * N
        DELTA += bh * N

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        m_valid = offs_m < N

        q = tl.load(Q + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=m_valid[:, None], other=0.0)
        do = tl.load(DO + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=m_valid[:, None], other=0.0)
        lse2 = tl.load(LSE + offs_m, mask=m_valid, other=0.0) * 1.4426950408889634  # to base 2
        delta = tl.load(DELTA + offs_m, mask=m_valid, other=0.0)
        dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

        if CAUSAL:
            hi = tl.minimum((pid_m + 1) * BLOCK_M, N)
        else:
            hi = N
        for start_n in range(0, hi, BLOCK_N):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            cols = start_n + offs_n
            n_valid = cols < N
            k = tl.load(K + cols[:, None] * HEAD_DIM + offs_d[None, :], mask=n_valid[:, None], other=0.0)
            v = tl.load(V + cols[:, None] * HEAD_DIM + offs_d[None, :], mask=n_valid[:, None], other=0.0)

            s = tl.dot(q, tl.trans(k)) * qk_scale
            p = tl.math.exp2(s - lse2[:, None])
            keep = m_valid[:, None] & n_valid[None, :]
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None])
            p = tl.where(keep, p, 0.0)

            dp = tl.dot(do, tl.trans(v))  # dP = dO V^T
            ds = p * (dp - delta[:, None])
            dq += tl.dot(ds.to(k.dtype), k)  # dQ += dS K

        dq = dq * sm_scale
        tl.store(DQ + offs_m[:, None] * HEAD_DIM + offs_d[None, :], dq.to(DQ.dtype.element_ty), mask=m_valid[:, None])


# --------------------------------------------------------------------------------------------------
# Host side: checks, launches, autograd.
# --------------------------------------------------------------------------------------------------
def _require_runtime() -> None:
    if triton is None:
        raise RuntimeError("triton_attention needs the `triton` package, which could not be imported "
                           "(it ships with the CUDA builds of PyTorch on Linux; or `pip install triton`)")
    if not torch.cuda.is_available():
        raise RuntimeError("triton_attention needs a CUDA GPU, but torch.cuda.is_available() is False")


def _check_inputs(q: Any, k: Any, v: Any, causal: Any, scale: Any) -> float:
    """Validates the arguments of :func:`attention`; returns the softmax scale to use."""
    names = ("q", "k", "v")
    tensors = (q, k, v)
    for name, t in zip(names, tensors, strict=True):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}; {_ACCEPTED}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    for name, t in zip(names, tensors, strict=True):
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D [B, H, N, D], got shape {tuple(t.shape)}; {_ACCEPTED}")
    for name, t in zip(names[1:], tensors[1:], strict=True):
        if t.shape != q.shape:
            raise ValueError(f"q and {name} must have the same shape (different query/key lengths are not supported), "
                             f"got {tuple(q.shape)} and {tuple(t.shape)}; {_ACCEPTED}")
    B, H, N, D = q.shape
    if min(B, H, N) < 1:
        raise ValueError(f"B, H and N must be >= 1, got shape {tuple(q.shape)}; {_ACCEPTED}")
    if B * H > _MAX_BH:
        raise ValueError(f"B*H = {B * H} exceeds {_MAX_BH} (the grid limit of these kernels); split the batch")
    for name, t in zip(names, tensors, strict=True):
        if t.dtype not in _DTYPES:
            raise ValueError(f"{name} has dtype {t.dtype}, which is not supported; {_ACCEPTED}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}; {_ACCEPTED}")
    if D not in _HEAD_DIMS:
        raise ValueError(f"head dim D = {D} is not supported; {_ACCEPTED}")
    for name, t in zip(names, tensors, strict=True):
        if t.device.type != "cuda":
            raise ValueError(f"{name} is on {t.device}, but these kernels run on CUDA tensors only; {_ACCEPTED}")
        if t.device != q.device:
            raise ValueError(f"q is on {q.device} but {name} is on {t.device}; {_ACCEPTED}")
    if scale is None:
        return 1.0 / math.sqrt(D)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale == 0:
        raise ValueError(f"scale must be a finite non-zero number or None (meaning 1/sqrt(D)), got {scale!r}")
    return float(scale)


def _alloc(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    t = torch.empty(shape, dtype=dtype, device=device)
    if _POISON:
        t.fill_(float("nan"))
    return t


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Runs the forward kernel on contiguous, validated inputs; returns (O, LSE)."""
    B, H, N, D = q.shape
    o = _alloc((B, H, N, D), q.dtype, q.device)
    lse = _alloc((B, H, N), torch.float32, q.device)
    cfg = _FWD[D]
    grid = (triton.cdiv(N, cfg.block_m), B * H)
    with torch.cuda.device(q.device):
        _attn_fwd[grid](q, k, v, o, lse, scale * _LOG2E, N,
                        CAUSAL=causal, HEAD_DIM=D, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                        num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return o, lse


def _backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, do: torch.Tensor,
              causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Runs the three backward kernels on contiguous tensors; returns (dQ, dK, dV)."""
    B, H, N, D = q.shape
    delta = _alloc((B, H, N), torch.float32, q.device)
    dq = _alloc((B, H, N, D), q.dtype, q.device)
    dk = _alloc((B, H, N, D), k.dtype, q.device)
    dv = _alloc((B, H, N, D), v.dtype, q.device)
    kv, qb = _BWD_DKDV[D], _BWD_DQ[D]
    with torch.cuda.device(q.device):
        _attn_bwd_preprocess[(triton.cdiv(N, _PRE_BLOCK_M), B * H)](o, do, delta, N, HEAD_DIM=D, BLOCK_M=_PRE_BLOCK_M, num_warps=4)
        _attn_bwd_dkdv[(triton.cdiv(N, kv.block_n), B * H)](q, k, v, do, lse, delta, dk, dv, scale, scale * _LOG2E, N,
                                                            CAUSAL=causal, HEAD_DIM=D, BLOCK_M=kv.block_m, BLOCK_N=kv.block_n,
                                                            num_warps=kv.num_warps, num_stages=kv.num_stages)
        _attn_bwd_dq[(triton.cdiv(N, qb.block_m), B * H)](q, k, v, do, lse, delta, dq, scale, scale * _LOG2E, N,
                                                          CAUSAL=causal, HEAD_DIM=D, BLOCK_M=qb.block_m, BLOCK_N=qb.block_n,
                                                          num_warps=qb.num_warps, num_stages=qb.num_stages)
    return dq, dk, dv


class _TritonAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
        o, lse = _forward(q, k, v, causal, scale)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal = causal
        ctx.scale = scale
        return o

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _backward(q, k, v, o, lse, grad_out.contiguous(), ctx.causal, ctx.scale)
        return dq, dk, dv, None, None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """``softmax(scale * q k^T) v`` for ``[B, H, N, D]`` CUDA tensors, shaped like
    ``torch.nn.functional.scaled_dot_product_attention``; ``out.backward(g)`` runs the Triton backward.

    q, k, v: one shape ``[B, H, N, D]`` (Nq == Nk), dtype float16 or bfloat16, D in (64, 128), any N >= 1.
    causal: query i attends to keys j <= i (top-left aligned, as SDPA's ``is_causal=True``).
    scale: softmax scale; None means ``1 / sqrt(D)``.

    Non-contiguous inputs are copied to contiguous first. Raises ``ValueError`` for unsupported
    shapes, dtypes, devices or head dims, and ``RuntimeError`` when triton or a CUDA GPU is missing.
    """
    _require_runtime()
    sm_scale = _check_inputs(q, k, v, causal, scale)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    return _TritonAttention.apply(q, k, v, causal, sm_scale)
