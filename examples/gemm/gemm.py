"""A kernel that is not attention: a half-precision GEMM (cuBLAS through torch.matmul), plugged into
nsightlab as a "custom" problem with its own inputs and work model.

    python -m nsightlab.capture --sweep examples/gemm/sweep.toml --list
    python -m nsightlab.capture --sweep examples/gemm/sweep.toml

The sweep's grid names the shape fields (M, N, K, dtype); ``inputs`` turns one case's fields into the
callable's arguments, and the work model says how many FLOPs and bytes a case is, so the reports can
set the hardware counters against it (without one they fall back to the counters and say so).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nsightlab.problems.impls import Implementation, WorkModel

BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


def gemm(a: Any, b: Any) -> Any:
    return a @ b


def inputs(p: Mapping[str, Any], device: str = "cuda") -> tuple[Any, Any]:
    import torch

    dt = getattr(torch, p.get("dtype", "float16"))
    gen = torch.Generator(device=device).manual_seed(p["M"] * 31 + p["N"] * 7 + p["K"])
    a = torch.randn(p["M"], p["K"], generator=gen, device=device, dtype=torch.float32).to(dt)
    b = torch.randn(p["K"], p["N"], generator=gen, device=device, dtype=torch.float32).to(dt)
    return a, b


def _flops(p: Mapping[str, Any], pass_: str) -> float:
    f = 2.0 * p["M"] * p["N"] * p["K"]
    return f * (2.0 if pass_ == "backward" else 1.0)  # backward: dA = dC B^T and dB = A^T dC


def _bytes(p: Mapping[str, Any], pass_: str) -> float:
    e = BYTES[p.get("dtype", "float16")]
    once = (p["M"] * p["K"] + p["K"] * p["N"] + p["M"] * p["N"]) * e
    return float(once * (2 if pass_ == "backward" else 1))


IMPL = Implementation(
    "torch_gemm", gemm, problem="custom", inputs=inputs,
    work=WorkModel("GEMM: 2·M·N·K FLOPs (backward twice that); A, B and C moved once each", _flops, _bytes, _bytes),
    traits={"library": "cuBLAS"}, description="C = A @ B through torch.matmul (cuBLAS)")
