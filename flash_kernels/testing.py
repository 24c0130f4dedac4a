"""Helpers shared by the GPU tests and the benchmark: poisoning, error metrics, tolerances."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from . import _ops

#: One tolerance table per dtype: bounds on ||out - ref|| / ||ref|| (rel_l2) and on
#: max|out - ref| / max|ref| (max_rel), for the forward output O and for the gradients.
#: LSE is compared by absolute error (it is a log).
TOLERANCES: dict[str, dict[str, float]] = {
    "float32": {"out_rel_l2": 1e-5, "out_max_rel": 1e-4, "grad_rel_l2": 5e-5, "grad_max_rel": 5e-4, "lse_abs": 1e-4},
    "float16": {"out_rel_l2": 2e-3, "out_max_rel": 1e-2, "grad_rel_l2": 1e-2, "grad_max_rel": 3e-2, "lse_abs": 2e-3},
    "bfloat16": {"out_rel_l2": 1.6e-2, "out_max_rel": 6e-2, "grad_rel_l2": 5e-2, "grad_max_rel": 1.5e-1,
                 "lse_abs": 2e-3},
}


@contextlib.contextmanager
def poisoned_outputs() -> Iterator[None]:
    """Within the block, every output buffer is filled with NaN before the kernels write it."""
    old = _ops.POISON
    _ops.POISON = True
    try:
        yield
    finally:
        _ops.POISON = old


def error_metrics(out: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    """max_abs, mean_abs, mse, max_rel (= max|err| / max|ref|), rel_l2, nonfinite (count)."""
    o = out.double()
    r = ref.double().to(o.device)
    err = (o - r).abs()
    finite = torch.isfinite(o)
    nonfinite = int((~finite).sum().item())
    ref_max = float(r.abs().max().item()) or 1.0
    ref_norm = float(r.norm().item()) or 1.0
    if nonfinite:
        nan = float("nan")
        return {"max_abs": nan, "mean_abs": nan, "mse": nan, "max_rel": nan, "rel_l2": nan, "nonfinite": nonfinite}
    return {
        "max_abs": float(err.max().item()),
        "mean_abs": float(err.mean().item()),
        "mse": float((err * err).mean().item()),
        "max_rel": float(err.max().item()) / ref_max,
        "rel_l2": float((o - r).norm().item()) / ref_norm,
        "nonfinite": 0,
    }


def random_qkv(B: int, H: int, N: int, D: int, dtype: torch.dtype, device: str = "cuda", seed: int = 0,
               mean: float = 0.5, n: int = 3) -> list[torch.Tensor]:
    """Random normal tensors shifted by ``mean`` (non-zero so that relative errors mean something)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    return [(torch.randn(B, H, N, D, generator=gen, device=device, dtype=torch.float32) + mean).to(dtype)
            for _ in range(n)]


def random_attention_inputs(B: int, H: int, N: int, D: int, dtype: torch.dtype, *, Hkv: int | None = None,
                            Nk: int | None = None, seed: int = 0, device: str = "cuda",
                            mean: float = 0.5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, k, v, g) for grouped-query / cross attention: q and g (the output gradient) [B, H, N, D],
    k and v [B, Hkv, Nk, D] (Hkv defaults to H, Nk to N), random normal shifted by ``mean``.

    Drawn in the order q, k, v, g from one generator, so with Hkv = H and Nk = N they are exactly
    ``random_qkv(B, H, N, D, dtype, device, seed, mean, n=4)``."""
    Hkv = H if Hkv is None else Hkv
    Nk = N if Nk is None else Nk
    if min(B, H, N, D, Hkv, Nk) < 1:
        raise ValueError(f"sizes must be positive: B={B}, H={H}, N={N}, D={D}, Hkv={Hkv}, Nk={Nk}")
    if H % Hkv:
        raise ValueError(f"H={H} must be a multiple of Hkv={Hkv} (grouped-query attention)")
    gen = torch.Generator(device=device).manual_seed(seed)

    def rnd(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, device=device, dtype=torch.float32) + mean).to(dtype)

    q = rnd(B, H, N, D)
    k = rnd(B, Hkv, Nk, D)
    v = rnd(B, Hkv, Nk, D)
    return q, k, v, rnd(B, H, N, D)
