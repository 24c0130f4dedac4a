"""The GEMM example's benchmark: the capture's bench step for a problem that is not attention.

    python -m examples.gemm.bench --out profiles/<gpu>/gemm-example -M 1024,4096 -N 4096 -K 1024,4096

It writes what every benchmark writes for the performance and correctness pages: ``<suite>.csv`` (one row
per implementation × case × pass: the generic columns ``suite, config, dtype, impl, kind, pass, status, ms,
tflops`` and the problem's own fields ``M, N, K``) and ``<suite>.manifest.json`` beside it, which names the
problem (``"problem": "gemm"``) and the module that registers it (``"plugins"``), so that :func:`nsightlab.store.captures.load_bench` reads the rows as GEMM
cases. Timing: :func:`nsightlab.run.timing.time_gpu`, the L2 flushed by reading before each repeat; FLOPs
and bytes from the problem's work model; every row checked against a float64 product first.

:func:`rows` and :func:`write` take the timings as data, so a test can write a benchmark folder without a
GPU (tests/test_gemm_pages.py); :func:`main` measures. Torch is imported by :func:`measure` only.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from .gemm import IMPL, PROBLEM

SUITE = "gemm"
#: the module that registers the GEMM problem
PLUGIN = "examples.gemm.gemm"
CSV_FIELDS = ["suite", "config", "M", "N", "K", "dtype", "impl", "kind", "pass", "options", "status", "ms", "ms_min",
              "ms_max", "tflops", "gbps", "rel_l2", "host_ms"]
TIMING = {"method": "CUDA events around each repeat after warm-up (nsightlab.run.timing.time_gpu)", "flush": "read",
          "rounds": 1}


def config_name(case: Mapping[str, Any]) -> str:
    return f"M{case['M']}-N{case['N']}-K{case['K']}"


def cases(Ms: Iterable[int], Ns: Iterable[int], Ks: Iterable[int], dtype: str = "float16") -> list[dict[str, Any]]:
    """Every (M, N, K) of the grid, normalized by the problem."""
    return [PROBLEM.normalize({"M": m, "N": n, "K": k, "dtype": dtype}) for m in Ms for n in Ns for k in Ks]


def rows(suite: str, timed: Iterable[tuple[Mapping[str, Any], str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Result rows from ``(case, pass, measured)`` triples, ``measured`` holding ``ms`` (median), ``ms_min``,
    ``ms_max``, ``host_ms`` and ``rel_l2`` (or ``status``: why it did not run), and ``impl`` (an Implementation or
    its ``module:attribute``; default the cuBLAS one); TFLOP/s and GB/s from the problem's work model."""
    out = []
    for case, pass_, m in timed:
        impl = _implementation(m.get("impl", IMPL))
        work = PROBLEM.work.evaluate(case, pass_) if PROBLEM.work else {}
        status = m.get("status", "ok")
        ms = float(m.get("ms", math.nan))
        ok = status == "ok" and ms > 0
        out.append({"suite": suite, "config": config_name(case), **{f: case[f] for f in ("M", "N", "K", "dtype")},
                    "impl": impl.name, "kind": str(impl.traits.get("kind", "library")), "pass": pass_, "options": "", "status": status,
                    "ms": ms if ok else math.nan, "ms_min": float(m.get("ms_min", ms)) if ok else math.nan,
                    "ms_max": float(m.get("ms_max", ms)) if ok else math.nan,
                    "tflops": work["flop"] / (ms * 1e-3) / 1e12 if ok and "flop" in work else math.nan,
                    "gbps": work["bytes"] / (ms * 1e-3) / 1e9 if ok and "bytes" in work else math.nan,
                    "rel_l2": float(m.get("rel_l2", math.nan)), "host_ms": float(m.get("host_ms", math.nan))})
    return out


def write(result: list[dict[str, Any]], out_dir: Path, suite: str, manifest: Mapping[str, Any]) -> Path:
    """``<suite>.csv`` and ``<suite>.manifest.json`` (the problem and the module that registers it named in it, so
    that a report in a fresh process imports it), each written whole or not at all (the store's writer)."""
    from nsightlab.store.captures import write_bench

    man = {"suite": suite, "problem": PROBLEM.name, "plugins": [PLUGIN], "rows": len(result), **manifest}
    return write_bench(result, Path(out_dir), suite, CSV_FIELDS, man)


#: the implementations timed by default: cuBLAS (torch.matmul) and the Triton GEMM beside it
DEFAULT_IMPLS = "examples.gemm.gemm:IMPL,examples.gemm.triton_gemm:IMPL"


def _implementation(spec: Any) -> Any:
    """An Implementation from itself or from its ``module:attribute``."""
    if not isinstance(spec, str):
        return spec
    import importlib

    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr or "IMPL")


def measure(case: Mapping[str, Any], pass_: str, warmup: int, reps: int, budget_ms: float,
            impl: Any = IMPL) -> dict[str, Any]:
    """One case's pass of ``impl`` on the GPU: checked against a float64 product, then timed."""
    import statistics

    import torch

    from nsightlab.run.timing import L2Flusher, time_gpu

    call = _implementation(impl).callable()
    (a, b), _ = PROBLEM.inputs(case, "cuda")
    if pass_ == "forward":
        def fn() -> Any:
            return call(a, b)
        got, want = fn().double(), a.double() @ b.double()
    else:
        a.requires_grad_(True)
        b.requires_grad_(True)
        dc = torch.randn(case["M"], case["N"], device="cuda", dtype=a.dtype)

        def fn() -> Any:
            return torch.autograd.grad(call(a, b), (a, b), dc)
        da, _ = fn()
        got, want = da.double(), dc.double() @ b.detach().double().T
    rel = float((got - want).norm() / want.norm())
    r = time_gpu(fn, L2Flusher(TIMING["flush"]), warmup=warmup, reps=reps, budget_ms=budget_ms)
    return {"ms": statistics.median(r.ms), "ms_min": min(r.ms), "ms_max": max(r.ms),
            "host_ms": statistics.median(r.host_ms), "rel_l2": rel, "impl": _implementation(impl)}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None, measure_fn: Callable[..., dict[str, Any]] = measure) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.gemm.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the capture folder the CSV and manifest go into")
    p.add_argument("--suite", default=SUITE)
    p.add_argument("-M", default="1024,4096")
    p.add_argument("-N", default="4096")
    p.add_argument("-K", default="1024,4096")
    p.add_argument("--dtype", default="float16")
    p.add_argument("--passes", default="forward,backward")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--budget-ms", type=float, default=500.0)
    p.add_argument("--impl", default=DEFAULT_IMPLS,
                   help=f"the implementations to time, comma-separated module:attribute (default {DEFAULT_IMPLS})")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    todo = [(c, pass_) for c in cases(_ints(a.M), _ints(a.N), _ints(a.K), a.dtype) for pass_ in a.passes.split(",")]
    impls = [_implementation(x.strip()) for x in a.impl.split(",") if x.strip()]
    timed = [(c, pass_, measure_fn(c, pass_, a.warmup, a.reps, a.budget_ms, impl=i)) for i in impls
             for c, pass_ in todo]
    from nsightlab.core.environment import environment

    path = write(rows(a.suite, timed), Path(a.out), a.suite, {
        "description": f"GEMM ({', '.join(i.name for i in impls)}): time per call and TFLOP/s",
        "command": [sys.executable, "-m", "examples.gemm.bench", *(argv if argv is not None else sys.argv[1:])],
        "environment": environment(), "timing": {**TIMING, "warmup": a.warmup, "max_reps": a.reps,
                                                 "budget_ms": a.budget_ms},
        "seconds": time.perf_counter() - t0})
    print(f"wrote {path} ({len(timed)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
