"""The PyTorch reference: attention forward and backward in explicit higher-precision math.

Every kernel is checked against these, computed from the same (low-precision) inputs upcast to
fp64 (or fp32). Queries are processed in chunks so that the N x N intermediate never exceeds
``max_elems`` elements, which keeps long-sequence references within memory.
"""

from __future__ import annotations

import math

import torch


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


def _chunks(N: int, BH: int, max_elems: int) -> int:
    return max(1, min(N, max_elems // max(1, BH * N)))


def reference_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False, scale: float | None = None,
    dtype: torch.dtype = torch.float64, max_elems: int = 1 << 28,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, LSE) for [B, H, N, D] inputs, computed in ``dtype``. LSE = log sum_j exp(scale q_i . k_j)."""
    scale = default_scale(q.shape[-1]) if scale is None else scale
    q, k, v = (t.to(dtype) for t in (q, k, v))
    B, H, N, D = q.shape
    out = torch.empty_like(q)
    lse = torch.empty(B, H, N, dtype=dtype, device=q.device)
    step = _chunks(N, B * H, max_elems)
    cols = torch.arange(N, device=q.device)
    for i0 in range(0, N, step):
        i1 = min(N, i0 + step)
        s = torch.matmul(q[:, :, i0:i1], k.transpose(-1, -2)) * scale
        if causal:
            rows = torch.arange(i0, i1, device=q.device)
            s = s.masked_fill(cols[None, :] > rows[:, None], float("-inf"))
        lse_c = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse_c[..., None])
        out[:, :, i0:i1] = torch.matmul(p, v)
        lse[:, :, i0:i1] = lse_c
    return out, lse


def reference_backward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad_out: torch.Tensor, *, causal: bool = False,
    scale: float | None = None, dtype: torch.dtype = torch.float64, max_elems: int = 1 << 28,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) by the textbook formulas: dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)),
    dQ = scale dS K, dK = scale dS^T Q."""
    scale = default_scale(q.shape[-1]) if scale is None else scale
    q, k, v, g = (t.to(dtype) for t in (q, k, v, grad_out))
    B, H, N, D = q.shape
    dq = torch.empty_like(q)
    dk = torch.zeros_like(k)
    dv = torch.zeros_like(v)
    step = _chunks(N, B * H, max_elems)
    cols = torch.arange(N, device=q.device)
    for i0 in range(0, N, step):
        i1 = min(N, i0 + step)
        s = torch.matmul(q[:, :, i0:i1], k.transpose(-1, -2)) * scale
        if causal:
            rows = torch.arange(i0, i1, device=q.device)
            s = s.masked_fill(cols[None, :] > rows[:, None], float("-inf"))
        p = torch.softmax(s, dim=-1)
        gi = g[:, :, i0:i1]
        dv += torch.matmul(p.transpose(-1, -2), gi)
        dp = torch.matmul(gi, v.transpose(-1, -2))
        ds = p * (dp - (p * dp).sum(-1, keepdim=True))
        dq[:, :, i0:i1] = torch.matmul(ds, k) * scale
        dk += torch.matmul(ds.transpose(-1, -2), q[:, :, i0:i1]) * scale
    return dq, dk, dv


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False, scale: float | None = None
) -> torch.Tensor:
    """Differentiable textbook attention in the inputs' dtype (softmax in fp32), for comparisons."""
    scale = default_scale(q.shape[-1]) if scale is None else scale
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if causal:
        N = q.shape[-2]
        mask = torch.ones(N, N, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v.float()).to(q.dtype)
