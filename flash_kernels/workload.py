"""The profiling workload: run cases (one variant x one config x one pass each) with warm-up outside
any NVTX range and the measured launches inside one range per case, named by nsightlab.ranges.

    python -m flash_kernels.workload --variant flash_mma --pass forward,backward -B 1 -H 8 -N 1024 -D 64
    python -m flash_kernels.workload --suite seqlen --iters 1          # what `ncu` runs
    python -m flash_kernels.workload --suite seqlen --list             # range names only (no GPU)

Nsight Compute profiles only the ranges (``--nvtx --nvtx-include``); Nsight Systems sees warm-up
and measured launches and the parsers keep the ranges. One line of JSON per case goes to --log.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from .configs import CAPTURE_SUITES, SDPA_REFERENCES, Case, Config, get_capture_suite
from .registry import DTYPES, VARIANTS, get_variant

_T0 = time.perf_counter()


def _parse_option(text: str) -> tuple[str, object]:
    key, sep, val = text.partition("=")
    if not sep or not key or not val:
        raise ValueError(f"--option takes name=value (e.g. block_size=32 or tile=128x64), not {text!r}")
    return key, int(val) if val.isdigit() else val


def cases_from_args(a: argparse.Namespace) -> list[Case]:
    """The cases the command line asks for; ValueError with a readable message on bad input."""
    if a.suite:
        if a.variant:
            raise ValueError("give either --suite or --variant, not both")
        cases = list(get_capture_suite(a.suite).cases)
        if a.only:
            import re

            rx = re.compile(a.only)
            cases = [c for c in cases if rx.search(c.range_name())]
            if not cases:
                raise ValueError(f"--only {a.only!r} matches no case of suite {a.suite}")
        return cases
    if not a.variant:
        raise ValueError("give --suite NAME or --variant NAME (with -B -H -N -D)")
    known = (*VARIANTS, *SDPA_REFERENCES)
    passes = [p for p in a.passes.split(",") if p]
    if not passes or any(p not in ("forward", "backward") for p in passes):
        raise ValueError(f"--pass takes forward, backward or forward,backward; got {a.passes!r}")
    if a.dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, not {a.dtype!r}")
    for name, val in (("-B", a.batch), ("-H", a.heads), ("-N", a.seqlen), ("-D", a.head_dim)):
        if val is None or val <= 0:
            raise ValueError(f"{name} must be a positive integer (got {val})")
    opts = tuple(sorted(_parse_option(o) for o in a.option))
    cases = []
    for variant in [v for v in a.variant.split(",") if v]:
        if variant not in known:
            raise ValueError(f"unknown variant {variant!r}; known: {', '.join(known)}")
        for p in passes:
            if variant in VARIANTS:
                var = get_variant(variant)
                if p not in var.passes:
                    raise ValueError(f"{variant} has no {p} pass (it has {', '.join(var.passes)})")
                if a.head_dim not in var.head_dims:
                    raise ValueError(f"{variant} supports head dims {var.head_dims}, not {a.head_dim}")
                if a.dtype not in var.dtypes:
                    raise ValueError(f"{variant} supports dtypes {var.dtypes}, not {a.dtype}")
            c = Case(variant, p, a.batch, a.heads, a.seqlen, a.head_dim, a.dtype, a.causal, opts)
            c.range_name()  # validates options
            cases.append(c)
    return cases


def _sdpa_backward_ranged(c: Case, q, k, v, g, name: str):
    """SDPA backward with its NVTX range opened and closed *inside* autograd.

    PyTorch runs CUDA backward nodes on its autograd device thread, and NVTX push/pop ranges belong
    to a thread: a range around ``torch.autograd.grad`` on the main thread would enclose none of the
    backward kernels. Two identity autograd functions bracket the SDPA node instead: the one on the
    output side opens the range (its backward runs first), the one on the inputs closes it (runs
    last), both on the thread that launches the kernels. Returns (fn, arm): ``arm(True)`` enables the
    range for the measured launches only (warm-up stays outside any range).
    """
    import nvtx
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    from . import bench

    state = {"on": False}

    class _Open(torch.autograd.Function):
        @staticmethod
        def forward(ctx, o):  # noqa: ANN001
            return o.view_as(o)

        @staticmethod
        def backward(ctx, go):  # noqa: ANN001
            if state["on"]:
                nvtx.push_range(name, color="green")
            return go

    class _Close(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b, d):  # noqa: ANN001
            return a.view_as(a), b.view_as(b), d.view_as(d)

        @staticmethod
        def backward(ctx, ga, gb, gd):  # noqa: ANN001
            if state["on"]:
                nvtx.pop_range()
            return ga, gb, gd

    backend = bench._sdpa_backends()[c.variant]
    qs, ks, vs = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    try:
        with sdpa_kernel(backend):
            o = _Open.apply(F.scaled_dot_product_attention(*_Close.apply(qs, ks, vs), is_causal=c.causal))
    except RuntimeError as exc:
        raise bench.Skip(f"{c.variant}: {str(exc).splitlines()[0][:160]}") from None

    def fn():
        return torch.autograd.grad(o, (qs, ks, vs), g, retain_graph=True)

    def arm(on: bool) -> None:
        state["on"] = on

    return fn, arm


def run_cases(cases: list[Case], *, warmup: int = 1, iters: int = 1, warmup_refs_only: bool = False, log=None,
              echo=print) -> list[dict[str, Any]]:
    """Run each case: inputs, warm-up (outside ranges), then ``iters`` launches inside its range.
    ``warmup_refs_only``: warm up the SDPA references only (flash_kernels' own kernels need none)."""
    import nvtx
    import torch

    from . import bench
    from .testing import random_qkv

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device: the workload needs a GPU (torch.cuda.is_available() is False)")
    dt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    results = []
    for c in cases:
        name = c.range_name()
        rec: dict[str, Any] = {"range": name, **c.as_dict(), "status": "ok", "started_unix": time.time()}
        t0 = time.perf_counter()
        try:
            q, k, v, g = random_qkv(c.B, c.H, c.N, c.D, dt[c.dtype], seed=c.N + c.D, n=4)
            cfg = Config(name, c.B, c.H, c.N, c.D, c.causal)
            arm = None
            if c.variant in VARIANTS:
                fn, _ = bench._kernel_fns(c.variant, cfg, q, k, v, g, c.pass_, c.options_dict, 1 << 62)
            elif c.pass_ == "backward":
                fn, arm = _sdpa_backward_ranged(c, q, k, v, g, name)
            else:
                fn, _ = bench._sdpa_fns(c.variant, cfg, q, k, v, g, c.pass_, 1 << 62)
            for _ in range(0 if warmup_refs_only and c.variant in VARIANTS else warmup):
                fn()
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            for _ in range(iters):
                if arm is not None:  # the range opens and closes on autograd's thread
                    arm(True)
                    fn()
                    torch.cuda.synchronize()
                    arm(False)
                    continue
                with nvtx.annotate(name, color="green"):
                    fn()
                    torch.cuda.synchronize()
            rec["range_seconds"] = (time.perf_counter() - t1) / max(iters, 1)
            del q, k, v, g, fn
        except bench.Skip as why:
            rec["status"] = f"skipped: {why}"
        except torch.cuda.OutOfMemoryError:
            rec["status"] = "skipped: out of GPU memory"
        torch.cuda.empty_cache()
        rec["seconds"] = time.perf_counter() - t0
        results.append(rec)
        if log is not None:
            log.write(json.dumps(rec) + "\n")
            log.flush()
        echo(f"{rec['status']:8.8s} {rec['seconds']:7.2f} s  {name}")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m flash_kernels.workload", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", help=f"a capture suite: {', '.join(k for k, s in CAPTURE_SUITES.items() if s.cases)}")
    p.add_argument("--only", help="with --suite: only cases whose range name matches this regex")
    p.add_argument("--variant", help=f"comma-separated, from {', '.join((*VARIANTS, *SDPA_REFERENCES))}")
    p.add_argument("--pass", dest="passes", default="forward,backward", help="forward, backward or both (comma)")
    p.add_argument("-B", "--batch", type=int, default=1)
    p.add_argument("-H", "--heads", type=int, default=8)
    p.add_argument("-N", "--seqlen", type=int)
    p.add_argument("-D", "--head-dim", type=int, default=64)
    p.add_argument("--dtype", default="float16", help=f"one of {', '.join(DTYPES)}")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--option", action="append", default=[], help="variant option, e.g. block_size=32, tile=128x64")
    p.add_argument("--warmup", type=int, default=1, help="launches per case before its range (not profiled)")
    p.add_argument("--warmup-refs-only", action="store_true",
                   help="warm up only the SDPA references (what ncu's application replay runs: there every "
                        "launch of the instruction-counting pass runs patched, warm-ups included)")
    p.add_argument("--iters", type=int, default=1, help="measured launches per case, inside its range")
    p.add_argument("--log", help="append one JSON line per case to this file")
    p.add_argument("--list", action="store_true", help="print the range names and exit (no GPU needed)")
    a = p.parse_args(argv)
    try:
        cases = cases_from_args(a)
    except ValueError as exc:
        p.error(str(exc))
    if a.iters < 1 or a.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")
    if a.list:
        for c in cases:
            print(c.range_name())
        return 0
    import torch

    if not torch.cuda.is_available():
        print("error: no CUDA device: the workload needs a GPU (torch.cuda.is_available() is False); "
              "use --list to see the range names without one", file=sys.stderr)
        return 2
    from . import _build

    t0 = time.perf_counter()
    _build.build_all()  # outside any range: compile or load the kernel modules
    print(f"kernel modules ready in {time.perf_counter() - t0:.1f} s; process up {time.perf_counter() - _T0:.1f} s",
          file=sys.stderr)
    log = open(a.log, "a") if a.log else None  # noqa: SIM115
    try:
        res = run_cases(cases, warmup=a.warmup, iters=a.iters, warmup_refs_only=a.warmup_refs_only, log=log)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if log:
            log.close()
    bad = [r for r in res if r["status"] != "ok"]
    print(f"{len(res) - len(bad)} cases ran, {len(bad)} skipped", file=sys.stderr)
    if a.log:
        print(f"log: {Path(a.log).resolve()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
