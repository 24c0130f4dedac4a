"""flash_wgmma smoke test: correctness against a float64 reference, then timings beside flash_mma and
SDPA flash. Builds only the modules it runs (flash_wgmma_fwd, and flash_mma_fwd for the timings).

    python scripts/wgmma_smoke.py                   # every (tile, pipeline) on ragged / GQA / cross shapes, then timings
    python scripts/wgmma_smoke.py --no-time         # correctness only
    python scripts/wgmma_smoke.py --tiles 128x128   # one tile, every pipeline
    python scripts/wgmma_smoke.py --pipelines tma   # one pipeline (cp.async, tma, tma-ws, tma-ws-overlap), every tile
    python scripts/wgmma_smoke.py --pipelines tma,tma-ws,tma-ws-overlap   # several

Correctness: inputs random normal + 0.5 (relative errors mean something), outputs poisoned with NaN
before each call; O against torch SDPA run in float64 on the upcast inputs, LSE against a float64
logsumexp; bounds from flash_kernels.testing.TOLERANCES (the GPU tests' table). On a failure the
line says where: LSE right but O wrong points at O += P V (the V descriptor, the P fragment); LSE
wrong points at S = Q K^T (the Q/K descriptors) or the softmax.
Timing: CUDA events around each call, median of 20 after 5 warm-up calls (no L2 flush);
TFLOP/s = 4 B H Nq Nk D / time, halved when causal with Nq == Nk. Exit status 1 on any FAIL.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import flash_kernels as fk  # noqa: E402
from flash_kernels import _build, _ops  # noqa: E402
from flash_kernels.testing import TOLERANCES, poisoned_outputs, random_attention_inputs  # noqa: E402

DT = {"float16": torch.float16, "bfloat16": torch.bfloat16}
#: (B, H, Hkv, Nq, Nk): one query/key, ragged sizes, Nq != Nk both ways, grouped-query and multi-query
CHECK_SHAPES = [(1, 2, 2, 1, 1), (1, 2, 2, 77, 77), (2, 3, 3, 300, 300), (1, 2, 2, 1000, 1000),
                (1, 4, 2, 77, 300), (1, 4, 1, 300, 77), (2, 4, 4, 1, 1000), (1, 2, 2, 128, 128)]
#: (B, H, N): 16k tokens per batch (FlashAttention's convention)
TIME_SHAPES = [(16, 16, 1024), (4, 16, 4096), (2, 16, 8192)]


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
              scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, LSE) in float64: O from SDPA (math backend, float64), LSE = logsumexp of the scaled, masked scores."""
    H, Hkv, Nq, Nk = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    qd, kd, vd = (t.double() for t in (q, k, v))
    o = F.scaled_dot_product_attention(qd, kd, vd, is_causal=causal, scale=scale,
                                       **({"enable_gqa": True} if Hkv < H else {}))
    kx = kd.repeat_interleave(H // Hkv, dim=1)
    s = torch.matmul(qd, kx.transpose(-1, -2)) * scale
    if causal:  # top-left: query i sees keys j <= i
        s = s.masked_fill(torch.ones(Nq, Nk, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return o, torch.logsumexp(s, dim=-1)


def check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, tile: str,
          pipeline: str) -> tuple[bool, dict[str, float], str]:
    """One flash_wgmma forward against the reference: (passed, error metrics, diagnosis when it failed)."""
    dtype = str(q.dtype).removeprefix("torch.")
    tol = TOLERANCES[dtype]
    scale = q.shape[-1] ** -0.5
    ref_o, ref_lse = reference(q, k, v, causal, scale)
    with poisoned_outputs():
        o, lse = fk.forward(q, k, v, variant="flash_wgmma", causal=causal, wg_tile=tile, pipeline=pipeline)
    torch.cuda.synchronize()
    nonfinite = int((~torch.isfinite(o)).sum()) + int((~torch.isfinite(lse)).sum())
    diff = torch.nan_to_num(o.double() - ref_o, nan=1e30)
    err = diff.abs()
    m = {"max_abs": err.max().item(), "max_rel": err.max().item() / ref_o.abs().max().item(),
         "rel_l2": (diff.norm() / ref_o.norm()).item(),
         "lse_abs": torch.nan_to_num((lse.double() - ref_lse).abs(), nan=1e30).max().item(), "nonfinite": nonfinite}
    ok = (nonfinite == 0 and m["rel_l2"] <= tol["out_rel_l2"] and m["max_rel"] <= tol["out_max_rel"]
          and m["lse_abs"] <= tol["lse_abs"])
    diag = ""
    if not ok:
        bad = err > tol["out_max_rel"] * ref_o.abs().max().item()
        idx = bad.nonzero()
        where = f"first bad O[b,h,i,d] = {tuple(idx[0].tolist())}, {int(bad.sum())} bad" if len(idx) else "no bad O element"
        row_ids = bad.any(-1).nonzero()[:, 2].unique().tolist()
        blocks = [f"{err[..., c:c + 64].max().item():.1e}" for c in range(0, q.shape[-1], 64)]
        hint = ("LSE right, O wrong: look at O += P V (V descriptor / P fragments)" if m["lse_abs"] <= tol["lse_abs"]
                else "LSE wrong: look at S = Q K^T (Q/K descriptors) or the softmax/masking")
        diag = (f"{where}; bad query rows {row_ids[:8]}{'...' if len(row_ids) > 8 else ''} (of {q.shape[2]}); "
                f"max err per 64-column block of D: {blocks}; {hint}")
    return ok, m, diag


def fmt(m: dict[str, float]) -> str:
    return (f"max_abs {m['max_abs']:8.2e}  max_rel {m['max_rel']:8.2e}  rel_l2 {m['rel_l2']:8.2e}  "
            f"lse_abs {m['lse_abs']:8.2e}  nonfinite {int(m['nonfinite'])}")


def median_ms(fn, reps: int = 20, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def kernel_fn(variant: str, q, k, v, causal: bool, **options):
    """The variant's forward with the argument checks done once, outside the timed call."""
    var, (q, k, v), scale, opts = _ops._prepare(variant, ("q", "k", "v"), (q, k, v), causal, None, options, "forward")
    return lambda: _ops._forward(var, q, k, v, causal, scale, opts)


def sdpa_flash_fn(q, k, v, causal: bool):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def run() -> torch.Tensor:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiles", default="all", help="comma-separated wg_tile values, or all")
    p.add_argument("--pipelines", default="all", help="comma-separated pipeline values, or all")
    p.add_argument("--no-time", action="store_true", help="correctness only")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    cap = torch.cuda.get_device_capability()
    print(f"GPU: {torch.cuda.get_device_name()} (compute capability {cap[0]}.{cap[1]}), torch {torch.__version__}")
    why = fk.unavailable_reason("flash_wgmma", cap)
    if why:
        print(f"FAIL: {why}")
        return 1
    options = fk.VARIANTS["flash_wgmma"].options
    tiles = list(options["wg_tile"].choices) if a.tiles == "all" else a.tiles.split(",")
    pipelines = list(options["pipeline"].choices) if a.pipelines == "all" else a.pipelines.split(",")
    for name, got in (("wg_tile", tiles), ("pipeline", pipelines)):
        bad = [x for x in got if x not in options[name].choices]
        if bad:
            p.error(f"unknown {name} {bad}; accepted: {', '.join(options[name].choices)}")
    #: (tile, pipeline) pairs, each a column of the tables
    configs = [(t, pl) for pl in pipelines for t in tiles]
    t0 = time.perf_counter()
    _build.load("flash_wgmma_fwd", verbose=False)
    print(f"built flash_wgmma_fwd in {time.perf_counter() - t0:.1f} s")

    failures = 0
    shown = 0
    print("\n== correctness (fp64 reference; outputs NaN-poisoned); worst over the shapes per line ==")
    print("   shapes (B, H, Hkv, Nq, Nk): " + ", ".join(map(str, CHECK_SHAPES)))
    for tile, pipe in configs:
        for dtype in DT:
            for D in (64, 128):
                for causal in (False, True):
                    worst: dict[str, float] = {}
                    n_bad = 0
                    for B, H, Hkv, Nq, Nk in CHECK_SHAPES:
                        q, k, v, _ = random_attention_inputs(B, H, Nq, D, DT[dtype], Hkv=Hkv, Nk=Nk,
                                                             seed=Nq * 7 + Nk + D)
                        ok, m, diag = check(q, k, v, causal, tile, pipe)
                        worst = {key: max(worst.get(key, 0.0), val) for key, val in m.items()}
                        if not ok:
                            n_bad += 1
                            if shown < 12:  # the first failures in full
                                shown += 1
                                print(f"  FAIL {tile} {pipe} {dtype} D={D} causal={causal} B={B} H={H} Hkv={Hkv} Nq={Nq} "
                                      f"Nk={Nk}: {fmt(m)}\n       {diag}")
                    failures += n_bad
                    print(f"  {'PASS' if n_bad == 0 else 'FAIL'} {tile:8s} {pipe:8s} {dtype:8s} D={D:<3d} "
                          f"{'causal' if causal else 'full  '} {fmt(worst)}"
                          + (f"  ({n_bad}/{len(CHECK_SHAPES)} shapes failed)" if n_bad else ""))

    if not a.no_time:
        print("\n== timing, fp16 (median of 20 after warm-up; TFLOP/s) ==")
        _build.load("flash_mma_fwd")
        for D in (64, 128):
            for causal in (False, True):
                for B, H, N in TIME_SHAPES:
                    q, k, v, _ = random_attention_inputs(B, H, N, D, torch.float16, seed=N + D)
                    flop = 4 * B * H * N * N * D / (2 if causal else 1)
                    # correctness at this size on a slice (first batch, 2 heads), every (tile, pipeline)
                    for tile, pipe in configs:
                        ok, m, diag = check(q[:1, :2], k[:1, :2], v[:1, :2], causal, tile, pipe)
                        failures += not ok
                        if not ok:
                            print(f"  FAIL {tile} {pipe} D={D} causal={causal} N={N} (B=1, H=2 slice): {fmt(m)}\n"
                                  f"       {diag}")
                    res = {}
                    for tile, pipe in configs:
                        res[f"{pipe} {tile}"] = median_ms(kernel_fn("flash_wgmma", q, k, v, causal, wg_tile=tile,
                                                                    pipeline=pipe))
                    res["flash_mma"] = median_ms(kernel_fn("flash_mma", q, k, v, causal))
                    with torch.no_grad():
                        res["sdpa_flash"] = median_ms(sdpa_flash_fn(q, k, v, causal))
                    cols = "  ".join(f"{n} {flop / (ms * 1e-3) / 1e12:6.1f}" for n, ms in res.items())
                    print(f"  D={D:<3d} {'causal' if causal else 'full  '} B={B:<2d} H={H} N={N:<5d} {cols}")

    print(f"\n{'PASS' if failures == 0 else 'FAIL'}: flash_wgmma forward, {failures} failing checks")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
