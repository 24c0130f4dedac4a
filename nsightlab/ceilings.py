"""Measured ceilings of this GPU (torch at run time), run once per capture command: large GEMMs (bf16, fp16, fp32 without TF32)
and a device-to-device copy. Medians of CUDA-event timings after warm-up.

    python -m nsightlab.ceilings --out ceilings.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys


def _time(fn, reps: int = 10, warmup: int = 3) -> float:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def measure() -> dict:
    import torch

    out: dict = {"method": "median of 10 CUDA-event timings after 3 warm-up calls"}
    torch.backends.cuda.matmul.allow_tf32 = False
    for name, dtype, n in (("gemm_bf16", torch.bfloat16, 8192), ("gemm_fp16", torch.float16, 8192),
                           ("gemm_fp32", torch.float32, 4096)):
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        c = torch.empty(n, n, device="cuda", dtype=dtype)
        ms = _time(lambda a=a, b=b, c=c: torch.matmul(a, b, out=c))
        out[name] = {"n": n, "ms": ms, "flop_per_s": 2.0 * n**3 / (ms * 1e-3)}
        del a, b, c
    n_bytes = 1 << 30
    src = torch.empty(n_bytes, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    ms = _time(lambda: dst.copy_(src))
    out["copy_d2d"] = {"bytes": n_bytes, "ms": ms, "bytes_per_s": 2.0 * n_bytes / (ms * 1e-3),
                       "note": "bytes read + bytes written per second"}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nsightlab.ceilings", description=__doc__)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("error: no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    from .environment import environment

    res = {"ceilings": measure(), "environment": environment()}
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=2, default=str)
    c = res["ceilings"]
    print(f"bf16 GEMM {c['gemm_bf16']['flop_per_s'] / 1e12:.0f} TFLOP/s, fp16 {c['gemm_fp16']['flop_per_s'] / 1e12:.0f}, "
          f"fp32 {c['gemm_fp32']['flop_per_s'] / 1e12:.1f}; copy {c['copy_d2d']['bytes_per_s'] / 1e12:.2f} TB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
