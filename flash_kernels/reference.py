"""The PyTorch reference: attention forward and backward in explicit higher-precision math.

Every kernel is checked against these, computed from the same (low-precision) inputs upcast to
fp64 (or fp32). Shapes: q (and grad_out) ``[B, H, N, D]``, k and v ``[B, Hkv, Nk, D]`` with
``H % Hkv == 0``: query head h uses key/value head ``h // (H // Hkv)`` (grouped-query attention
when Hkv < H, multi-query when Hkv = 1, like SDPA's ``enable_gqa=True``), and Nk may differ from N
(cross attention, decoding against a KV cache). Causal masking is aligned top-left, as SDPA's
``is_causal``: query i sees keys j <= i (``torch.ones(N, Nk).tril()``).

Queries are processed in chunks so that the score intermediate (B·H·chunk·Nk) never exceeds
``max_elems`` elements, which keeps long-sequence references within memory. The query heads that
share a key/value head are folded into the rows of one product against that head's keys, so k and
v are never copied per query head, and dK and dV come out summed over the heads that share them.
"""

from __future__ import annotations

import math

import torch


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


def _chunks(N: int, rows_elems: int, max_elems: int) -> int:
    """Query rows per chunk: ``rows_elems`` score elements per query row (B·H·Nk)."""
    return max(1, min(N, max_elems // max(1, rows_elems)))


def _check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None = None) -> int:
    """The group size H // Hkv; ValueError naming the shapes when they do not fit together."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be 4-D [B, H, N, D]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, H, _, D = q.shape
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D:
        raise ValueError(f"k and v must be [B, Hkv, Nk, D] with q's B and D; got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    Hkv = k.shape[1]
    if H % Hkv:
        raise ValueError(f"q's heads H={H} must be a multiple of k/v's heads Hkv={Hkv}")
    if g is not None and g.shape != q.shape:
        raise ValueError(f"grad_out must be shaped like q {tuple(q.shape)}; got {tuple(g.shape)}")
    return H // Hkv


def _fold(x: torch.Tensor, Hkv: int) -> torch.Tensor:
    """[B, H, c, ...] -> [B, Hkv, G*c, ...]: the G query heads of a group as consecutive row blocks."""
    B, H, c = x.shape[:3]
    return x.reshape(B, Hkv, (H // Hkv) * c, *x.shape[3:])


def _unfold(x: torch.Tensor, H: int) -> torch.Tensor:
    """[B, Hkv, G*c, ...] -> [B, H, c, ...] (the inverse of _fold)."""
    B, Hkv, Gc = x.shape[:3]
    return x.reshape(B, H, Gc // (H // Hkv), *x.shape[3:])


def _masked_scores(qf: torch.Tensor, k: torch.Tensor, scale: float, causal: bool, i0: int, i1: int,
                   G: int) -> torch.Tensor:
    """Scores of the folded query rows i0..i1 (G heads each) against every key, top-left causal mask
    applied: row i sees keys j <= i."""
    s = torch.matmul(qf, k.transpose(-1, -2)) * scale
    if causal:
        rows = torch.arange(i0, i1, device=qf.device)
        cols = torch.arange(k.shape[-2], device=qf.device)
        s = s.masked_fill((cols[None, :] > rows[:, None]).repeat(G, 1), float("-inf"))
    return s


def reference_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False, scale: float | None = None,
    dtype: torch.dtype = torch.float64, max_elems: int = 1 << 28,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, LSE) computed in ``dtype``: O like q, LSE [B, H, N] = log sum_j exp(scale q_i . k_j) over
    the keys query i sees. k, v: [B, Hkv, Nk, D] (see the module docstring)."""
    G = _check_shapes(q, k, v)
    scale = default_scale(q.shape[-1]) if scale is None else scale
    q, k, v = (t.to(dtype) for t in (q, k, v))
    B, H, N, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    out = torch.empty_like(q)
    lse = torch.empty(B, H, N, dtype=dtype, device=q.device)
    step = _chunks(N, B * H * Nk, max_elems)
    for i0 in range(0, N, step):
        i1 = min(N, i0 + step)
        s = _masked_scores(_fold(q[:, :, i0:i1], Hkv), k, scale, causal, i0, i1, G)
        lse_c = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse_c[..., None])
        out[:, :, i0:i1] = _unfold(torch.matmul(p, v), H)
        lse[:, :, i0:i1] = _unfold(lse_c, H)
    return out, lse


def reference_backward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad_out: torch.Tensor, *, causal: bool = False,
    scale: float | None = None, dtype: torch.dtype = torch.float64, max_elems: int = 1 << 28,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) by the textbook formulas: dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)),
    dQ = scale dS K, dK = scale dS^T Q. dQ is shaped like q, dK and dV like k (summed over the query
    heads that share a key/value head)."""
    G = _check_shapes(q, k, v, grad_out)
    scale = default_scale(q.shape[-1]) if scale is None else scale
    q, k, v, g = (t.to(dtype) for t in (q, k, v, grad_out))
    B, H, N, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    dq = torch.empty_like(q)
    dk = torch.zeros_like(k)
    dv = torch.zeros_like(v)
    step = _chunks(N, B * H * Nk, max_elems)
    for i0 in range(0, N, step):
        i1 = min(N, i0 + step)
        qf, gf = _fold(q[:, :, i0:i1], Hkv), _fold(g[:, :, i0:i1], Hkv)
        p = torch.softmax(_masked_scores(qf, k, scale, causal, i0, i1, G), dim=-1)
        dv += torch.matmul(p.transpose(-1, -2), gf)
        dp = torch.matmul(gf, v.transpose(-1, -2))
        ds = p * (dp - (p * dp).sum(-1, keepdim=True))
        dq[:, :, i0:i1] = _unfold(torch.matmul(ds, k) * scale, H)
        dk += torch.matmul(ds.transpose(-1, -2), qf) * scale
    return dq, dk, dv


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False, scale: float | None = None
) -> torch.Tensor:
    """Differentiable textbook attention in the inputs' dtype (softmax in fp32), for comparisons.
    k, v: [B, Hkv, Nk, D], expanded over the query heads (autograd sums their gradients back)."""
    G = _check_shapes(q, k, v)
    scale = default_scale(q.shape[-1]) if scale is None else scale
    kf, vf = (t.float().repeat_interleave(G, dim=1) if G > 1 else t.float() for t in (k, v))
    s = torch.matmul(q.float(), kf.transpose(-1, -2)) * scale
    if causal:
        N, Nk = q.shape[-2], k.shape[-2]
        mask = torch.ones(N, Nk, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), vf).to(q.dtype)
