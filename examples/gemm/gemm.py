"""A kernel that is not attention: a half-precision GEMM (cuBLAS through torch.matmul), plugged into
nsightlab as a problem of its own, through the same Problem protocol the attention problem uses.

    python -m nsightlab.capture --sweep examples/gemm/sweep.toml --list
    python -m nsightlab.capture --sweep examples/gemm/sweep.toml
    python -m nsightlab.capture --impl examples.gemm.gemm:IMPL -M 1024,4096 -N 4096 -K 1024,4096 --list

The problem declares its parameters (M, N, K, dtype: the capture command's ``-M -N -K --dtype``), how
one case's inputs are built, and its work model, so the reports can set the hardware counters against
it; and what the reports need of it: the axis its figures sweep (M), the order its fields are named and
shown in, the fields its kernels tile along, and the colour of its implementation. The roofline,
performance and compare pages read a GEMM capture through the same generic path as an attention one.
Importing this module registers the problem (resolving ``examples.gemm.gemm:IMPL`` imports it, and so
does a report of a capture whose sweep names it: :func:`nsightlab.problems.problem.of_manifest`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nsightlab.problems import problem
from nsightlab.problems.impls import Implementation
from nsightlab.problems.problem import Parameter, Problem, WorkModel

BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


def gemm(a: Any, b: Any) -> Any:
    return a @ b


def inputs(p: Mapping[str, Any], device: str = "cuda") -> tuple[tuple[Any, Any], dict[str, Any]]:
    """A [M, K] and B [K, N], random normal, seeded by the shape (the same inputs on every run)."""
    import torch

    dt = getattr(torch, p["dtype"])
    gen = torch.Generator(device=device).manual_seed(p["M"] * 31 + p["N"] * 7 + p["K"])
    a = torch.randn(p["M"], p["K"], generator=gen, device=device, dtype=torch.float32).to(dt)
    b = torch.randn(p["K"], p["N"], generator=gen, device=device, dtype=torch.float32).to(dt)
    return (a, b), {}


def _flops(p: Mapping[str, Any], pass_: str) -> float:
    f = 2.0 * p["M"] * p["N"] * p["K"]
    return f * (2.0 if pass_ == "backward" else 1.0)  # backward: dA = dC B^T and dB = A^T dC


def _bytes(p: Mapping[str, Any], pass_: str) -> float:
    e = BYTES[p["dtype"]]
    once = (p["M"] * p["K"] + p["K"] * p["N"] + p["M"] * p["N"]) * e
    return float(once * (2 if pass_ == "backward" else 1))


PROBLEM = problem.register(Problem(
    "gemm",
    (Parameter("M", "int", "rows of A and C"), Parameter("N", "int", "columns of B and C"),
     Parameter("K", "int", "the reduced dimension: columns of A, rows of B"),
     Parameter("dtype", "str", "element type: float16, bfloat16 or float32", "float16", choices=tuple(BYTES))),
    inputs,
    WorkModel("GEMM: 2·M·N·K FLOPs (backward twice that); A, B and C moved once each", _flops, _bytes, _bytes),
    references=("torch_gemm",), range_prefix="gemm", range_description="GEMM case: implementation, pass, M, N, K, dtype",
    description="C = A @ B",
    # what the reports need to know of it: figures sweep along M; labels and tables name M, N, K; tiles run
    # along all three; cuBLAS's colour on every figure
    axis="M", naming=("suite", "config", "dtype", "K", "N", "M"), columns=("M", "N", "K"), tile_fields=("M", "N", "K"),
    styles={"torch_gemm": ("#AD1457", "hourglass")}))

IMPL = Implementation("torch_gemm", gemm, problem=PROBLEM.name, traits={"library": "cuBLAS"},
                      description="C = A @ B through torch.matmul (cuBLAS)")
