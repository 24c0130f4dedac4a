"""flash_kernels: attention from textbook to tensor-core FlashAttention, forward and backward.

    import flash_kernels as fk
    out = fk.attention(q, k, v, variant="flash_mma", causal=True)   # autograd-capable
    out, lse = fk.forward(q, k, v, variant="flash_simt", block_size=32)
    dq, dk, dv = fk.backward(q, k, v, out, lse, grad_out, variant="flash_simt", block_size=32)
    out = fk.attention_fp8(*fk.quantize_e4m3(q), ...)                # see flash_kernels.fp8

Tensors are [B, H, N, D] CUDA tensors, as for torch.nn.functional.scaled_dot_product_attention.
The registry (VARIANTS) and the analytic model import without torch; the kernels load lazily.
"""

from __future__ import annotations

from typing import Any

from .registry import VARIANTS, Option, Variant, describe, get_variant, unavailable_reason

__all__ = ["VARIANTS", "Option", "Variant", "attention", "attention_fp8", "backward", "build", "describe", "forward",
           "get_variant", "quantize_e4m3", "resource_usage", "unavailable_reason"]


def attention(*args: Any, **kwargs: Any) -> Any:
    from ._ops import attention as _impl

    return _impl(*args, **kwargs)


def forward(*args: Any, **kwargs: Any) -> Any:
    from ._ops import forward as _impl

    return _impl(*args, **kwargs)


def backward(*args: Any, **kwargs: Any) -> Any:
    from ._ops import backward as _impl

    return _impl(*args, **kwargs)


def attention_fp8(*args: Any, **kwargs: Any) -> Any:
    """FP8 (e4m3) forward with per-tensor or per-block scales on Hopper (flash_kernels.fp8.attention_fp8)."""
    from .fp8 import attention_fp8 as _impl

    return _impl(*args, **kwargs)


def quantize_e4m3(*args: Any, **kwargs: Any) -> Any:
    """x -> (x8, descale), e4m3 quantization per tensor or per block of 128 rows (flash_kernels.fp8.quantize_e4m3)."""
    from .fp8 import quantize_e4m3 as _impl

    return _impl(*args, **kwargs)


def build(verbose: bool = False, modules: list[str] | tuple[str, ...] | None = None) -> dict[str, float]:
    """Compile (or load from cache) every kernel module (or only ``modules``, names of
    ``flash_kernels.sources.MODULES``) in parallel; returns seconds per module."""
    from ._build import build_all

    return build_all(verbose, modules)


def resource_usage(arch: str | None = None) -> list[dict[str, Any]]:
    """ptxas's report per kernel (registers, shared memory, stack, spills), from compiling each .cu
    for ``arch`` (default: the current GPU's, else sm_90); a file of an architecture-specific module
    (variants.Kernel.arch, e.g. sm_90a) for its own target."""
    from dataclasses import asdict

    from .sources import cu_files, ptxas_reports

    if arch is None:
        arch = "sm_90"
        try:
            import torch

            if torch.cuda.is_available():
                major, minor = torch.cuda.get_device_capability()
                arch = f"sm_{major}{minor}"
        except ImportError:
            pass
    reports = ptxas_reports(cu_files(), arch)  # compiled in parallel
    failed = next((r for r in reports.values() if isinstance(r, Exception)), None)
    if failed is not None:
        raise failed
    return [asdict(r) for rows in reports.values() for r in rows]
