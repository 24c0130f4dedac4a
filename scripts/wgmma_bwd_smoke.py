"""flash_wgmma backward smoke test: dQ, dK, dV against a float64 reference, then backward timings beside
flash_mma and SDPA flash (FlashAttention-2). Builds only the modules it runs (flash_wgmma_bwd; for the
timings also flash_mma_fwd and flash_mma_bwd).

    python scripts/wgmma_bwd_smoke.py                    # every backward tile on ragged / GQA / cross shapes, then timings
    python scripts/wgmma_bwd_smoke.py --no-time          # correctness only
    python scripts/wgmma_bwd_smoke.py --tiles 64x128     # one wg_bwd_tile

Correctness: inputs random normal + 0.5 (relative errors mean something); O and LSE from the float64
reference (flash_kernels.reference.reference_forward; O cast to the input dtype), so a wrong gradient is
the backward's own; outputs poisoned with NaN before each call; dQ, dK, dV against
reference_backward (float64) with the GPU tests' bounds (flash_kernels.testing.TOLERANCES). Grouped-query
shapes run with the group swept by one block (group_split=1) and split over H/Hkv blocks (fp32 atomics).
With a single key dQ and dK are zero up to rounding: an absolute bound there. A failing line says which
gradient, which rows (queries for dQ, keys for dK/dV) and which 64 columns of D, and what to look at.
Timing: CUDA events around each backward call (Dd preprocessing, the kernel, the dQ cast: what the
autograd backward runs), median of 20 after 5 warm-up calls, no L2 flush; SDPA flash timed as
torch.autograd.grad of F.scaled_dot_product_attention under sdpa_kernel(FLASH_ATTENTION) (its own
backward kernels only). TFLOP/s = 2.5 x 4 B H N^2 D / time, halved when causal. Exit status 1 on any FAIL.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from wgmma_smoke import median_ms  # noqa: E402  (CUDA-event median, shared with the forward smoke)

import flash_kernels as fk  # noqa: E402
from flash_kernels import _build, _ops  # noqa: E402
from flash_kernels.reference import reference_backward, reference_forward  # noqa: E402
from flash_kernels.testing import TOLERANCES, poisoned_outputs, random_attention_inputs  # noqa: E402

DT = {"float16": torch.float16, "bfloat16": torch.bfloat16}
#: (B, H, Hkv, Nq, Nk): one query/key, ragged sizes, Nq != Nk both ways (causal rows past the last key,
#: key blocks no query sees), grouped-query and multi-query, several key and query blocks
CHECK_SHAPES = [(1, 2, 2, 1, 1), (1, 2, 2, 77, 77), (2, 3, 3, 300, 300), (1, 2, 2, 1000, 1000),
                (1, 4, 2, 77, 300), (1, 4, 1, 300, 77), (2, 4, 4, 1, 1000), (1, 2, 2, 128, 128),
                (1, 8, 2, 1000, 129), (1, 4, 1, 513, 700), (1, 2, 2, 257, 1)]
#: (B, H, N): 16k tokens per batch (FlashAttention's convention)
TIME_SHAPES = [(16, 16, 1024), (4, 16, 4096), (2, 16, 8192)]
GRADS = ("dQ", "dK", "dV")
HINTS = {
    "dV": "dV = P^T dO: P^T (S^T = K Q^T descriptors, LSE, masking) or dO read MN-major (wgmma RS, trans-b)",
    "dK": "dK = scale dS^T Q with dV right: dS^T (dP^T = V dO^T, Dd) or Q read MN-major (wgmma RS)",
    "dQ": "dQ = scale dS K with dK, dV right: the dS^T stores to shared memory, the transposed A descriptor, "
          "K read MN-major, or the dQ split between warpgroups / atomics",
}


def check(q, k, v, g, causal: bool, tile: str, split: int) -> tuple[bool, dict[str, dict[str, float]], str]:
    """One flash_wgmma backward against the reference: (passed, metrics per gradient, diagnosis)."""
    dtype = str(q.dtype).removeprefix("torch.")
    tol = TOLERANCES[dtype]
    ref_o, ref_lse = reference_forward(q, k, v, causal=causal)
    o, lse = ref_o.to(q.dtype), ref_lse.float()
    refs = reference_backward(q, k, v, g, causal=causal)
    with poisoned_outputs():
        grads = fk.backward(q, k, v, o, lse, g, variant="flash_wgmma", causal=causal, wg_bwd_tile=tile,
                            group_split=split)
    torch.cuda.synchronize()
    metrics: dict[str, dict[str, float]] = {}
    diags = []
    for name, got, ref in zip(GRADS, grads, refs, strict=True):
        diff = torch.nan_to_num(got.double() - ref, nan=1e30)
        err = diff.abs()
        scale = ref.abs().max().item()
        m = {"max_abs": err.max().item(), "max_rel": err.max().item() / max(scale, 1e-30),
             "rel_l2": (diff.norm() / max(ref.norm().item(), 1e-30)).item(),
             "nonfinite": float(int((~torch.isfinite(got)).sum()))}
        metrics[name] = m
        # every row sees one key (Nk = 1, or causal with Nq = 1): P = 1, so dS = dP - rowsum(dO * O) = 0
        # and dQ, dK are zero up to rounding (LSE comes from the fp64 reference here): absolute error
        if (k.shape[2] == 1 or (causal and q.shape[2] == 1)) and name != "dV":
            ok = m["nonfinite"] == 0 and m["max_abs"] <= tol["grad_max_rel"]
            bad = err > tol["grad_max_rel"]
        else:
            ok = m["nonfinite"] == 0 and m["rel_l2"] <= tol["grad_rel_l2"] and m["max_rel"] <= tol["grad_max_rel"]
            bad = err > tol["grad_max_rel"] * scale
        if not ok:
            rows = bad.any(-1).nonzero()[:, 2].unique().tolist()
            heads = bad.any(-1).any(-1).nonzero()[:, 1].unique().tolist()
            blocks = [f"{err[..., c:c + 64].max().item():.1e}" for c in range(0, q.shape[-1], 64)]
            what = "query rows" if name == "dQ" else "key rows"
            diags.append(f"{name}: {int(bad.sum())} bad, {what} {rows[:8]}{'...' if len(rows) > 8 else ''} "
                         f"(of {got.shape[2]}), heads {heads[:8]}; max err per 64 columns of D {blocks}; "
                         f"nonfinite {int(m['nonfinite'])}")
    failed = [d.split(":")[0] for d in diags]
    if failed:
        first = next(n for n in ("dV", "dK", "dQ") if n in failed)
        diags.append(f"look at: {HINTS[first]}")
    return not diags, metrics, "\n       ".join(diags)


def fmt(metrics: dict[str, dict[str, float]]) -> str:
    return "  ".join(f"{n} rel_l2 {m['rel_l2']:8.2e} max_rel {m['max_rel']:8.2e}" for n, m in metrics.items())


def backward_fn(variant: str, q, k, v, g, causal: bool, **options):
    """The variant's backward (from its own forward's O, LSE) with the argument checks done once."""
    o, lse = fk.forward(q, k, v, variant="flash_mma", causal=causal)
    var, (q, k, v, o, g), scale, opts = _ops._prepare(variant, ("q", "k", "v", "out", "grad_out"), (q, k, v, o, g),
                                                      causal, None, options, "backward")
    return lambda: _ops._backward(var, q, k, v, o, lse, g, causal, scale, opts)


def sdpa_flash_backward_fn(q, k, v, g, causal: bool):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    qs, ks, vs = (t.detach().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)

    def run():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return torch.autograd.grad(out, (qs, ks, vs), g, retain_graph=True)

    return run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiles", default="all", help="comma-separated wg_bwd_tile values, or all")
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
    opt = fk.VARIANTS["flash_wgmma"].options["wg_bwd_tile"]
    tiles = list(opt.choices) if a.tiles == "all" else a.tiles.split(",")
    bad = [t for t in tiles if t not in opt.choices]
    if bad:
        p.error(f"unknown wg_bwd_tile {bad}; accepted: {', '.join(opt.choices)}")
    t0 = time.perf_counter()
    _build.load("flash_wgmma_bwd")
    print(f"built flash_wgmma_bwd in {time.perf_counter() - t0:.1f} s")

    failures = 0
    shown = 0
    print("\n== correctness (fp64 reference; outputs NaN-poisoned); worst over the shapes per line ==")
    print("   shapes (B, H, Hkv, Nq, Nk): " + ", ".join(map(str, CHECK_SHAPES)))
    for tile in tiles:
        for dtype in DT:
            for D in (64, 128):
                if D not in opt.head_dims.get(tile, (D,)):
                    continue
                for causal in (False, True):
                    worst: dict[str, dict[str, float]] = {}
                    n_bad = n_run = 0
                    for B, H, Hkv, Nq, Nk in CHECK_SHAPES:
                        q, k, v, g = random_attention_inputs(B, H, Nq, D, DT[dtype], Hkv=Hkv, Nk=Nk,
                                                             seed=Nq * 7 + Nk + D)
                        for split in sorted({1, H // Hkv}):
                            n_run += 1
                            ok, m, diag = check(q, k, v, g, causal, tile, split)
                            for name, mm in m.items():
                                w = worst.setdefault(name, {})
                                for key, val in mm.items():
                                    w[key] = max(w.get(key, 0.0), val)
                            if not ok:
                                n_bad += 1
                                if shown < 12:  # the first failures in full
                                    shown += 1
                                    print(f"  FAIL {tile} {dtype} D={D} causal={causal} B={B} H={H} Hkv={Hkv} "
                                          f"Nq={Nq} Nk={Nk} split={split}: {fmt(m)}\n       {diag}")
                    failures += n_bad
                    print(f"  {'PASS' if n_bad == 0 else 'FAIL'} {tile:8s} {dtype:8s} D={D:<3d} "
                          f"{'causal' if causal else 'full  '} {fmt(worst)}"
                          + (f"  ({n_bad}/{n_run} cases failed)" if n_bad else ""))

    if not a.no_time:
        print("\n== backward timing, fp16 (median of 20 after warm-up; TFLOP/s = 2.5 x 4 B H N^2 D, halved causal) ==")
        for D in (64, 128):
            for causal in (False, True):
                for B, H, N in TIME_SHAPES:
                    q, k, v, g = random_attention_inputs(B, H, N, D, torch.float16, seed=N + D)
                    flop = 2.5 * 4 * B * H * N * N * D / (2 if causal else 1)
                    if N <= 4096:  # correctness at this size on one head (the fp64 reference's memory)
                        for tile in tiles:
                            if D not in opt.head_dims.get(tile, (D,)):
                                continue
                            ok, m, diag = check(q[:1, :1], k[:1, :1], v[:1, :1], g[:1, :1], causal, tile, 1)
                            failures += not ok
                            if not ok:
                                print(f"  FAIL {tile} D={D} causal={causal} N={N} (B=1, H=1 slice): {fmt(m)}\n"
                                      f"       {diag}")
                    res = {}
                    for tile in tiles:
                        if D in opt.head_dims.get(tile, (D,)):
                            res[f"wgmma {tile}"] = median_ms(backward_fn("flash_wgmma", q, k, v, g, causal,
                                                                         wg_bwd_tile=tile))
                    res["flash_mma"] = median_ms(backward_fn("flash_mma", q, k, v, g, causal))
                    res["sdpa_flash"] = median_ms(sdpa_flash_backward_fn(q, k, v, g, causal))
                    cols = "  ".join(f"{n} {flop / (ms * 1e-3) / 1e12:6.1f}" for n, ms in res.items())
                    ratio = "  ".join(f"{n}/sdpa {res['sdpa_flash'] / ms:4.2f}" for n, ms in res.items()
                                      if n.startswith("wgmma"))
                    print(f"  D={D:<3d} {'causal' if causal else 'full  '} B={B:<2d} H={H} N={N:<5d} {cols}  {ratio}")

    print(f"\n{'PASS' if failures == 0 else 'FAIL'}: flash_wgmma backward, {failures} failing checks")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
