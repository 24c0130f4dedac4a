"""The host's time per call of each implementation at one bench shape (Python, argument checks, launches;
the GPU's work queued, not waited for), and where our own wrapper spends it (cProfile).

    python scripts/host_overhead.py --suite decode --config Nq1-Nk4096-Hkv1 --impls flash_decode,sdpa_flash,sdpa_cudnn

The calls are the bench's own (flash_kernels.bench.implementation_call), so what this prints is what the bench's
host_ms column reports, broken down. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time

import torch

from flash_kernels import VARIANTS, bench
from flash_kernels.bench_suites import SUITES
from flash_kernels.testing import random_attention_inputs


def host_us(fn, calls: int) -> list[float]:
    """Microseconds per call, host side, synchronizing every 10 calls so the launch queue never fills."""
    out = []
    for i in range(calls):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
        if i % 10 == 9:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="decode", help=f"one of {', '.join(SUITES)}")
    p.add_argument("--config", default="Nq1-Nk4096-Hkv1", help="a configuration of the suite")
    p.add_argument("--impls", default="flash_decode,sdpa_flash,sdpa_cudnn", help="comma-separated")
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    p.add_argument("--calls", type=int, default=200)
    a = p.parse_args(argv)
    if a.suite not in SUITES:
        p.error(f"--suite: unknown {a.suite!r}; accepted: {', '.join(SUITES)}")
    cfgs = {c.name: c for c in SUITES[a.suite][0]}
    if a.config not in cfgs:
        p.error(f"--config: {a.config!r} is not in suite {a.suite}; accepted: {', '.join(cfgs)}")
    known = [*VARIANTS, *bench.REFERENCES]
    impls = a.impls.split(",")
    bad = [i for i in impls if i not in known]
    if bad:
        p.error(f"--impls: unknown {bad}; accepted: {', '.join(known)}")
    if a.calls < 1:
        p.error(f"--calls takes a positive number; got {a.calls}")
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU (torch.cuda.is_available() is False)")
    cfg = cfgs[a.config]
    inputs = random_attention_inputs(cfg.B, cfg.H, cfg.N, cfg.D, getattr(torch, a.dtype), Hkv=cfg.Hkv, Nk=cfg.Nk,
                                     seed=bench.input_seed(cfg))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {a.suite} {cfg.name} {a.dtype}, forward")
    for impl in impls:
        try:
            fn, _ = bench.implementation_call(impl, cfg, inputs, "forward", {}, bench.Limits())
        except bench.Skip as why:
            print(f"  {impl:16s} skipped: {why}")
            continue
        host_us(fn, 20)  # warm: builds, plans, allocator
        us = host_us(fn, a.calls)
        print(f"  {impl:16s} host {statistics.median(us):7.1f} us per call (median of {len(us)}; min {min(us):.1f})")
        if impl in VARIANTS:
            prof = cProfile.Profile()
            prof.enable()
            host_us(fn, a.calls)
            prof.disable()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
            print("\n".join("    " + line for line in s.getvalue().splitlines()[4:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
