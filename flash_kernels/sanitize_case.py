"""One small forward + backward of every variant, option and dtype: the program that the GPU
tests run under compute-sanitizer (memcheck, racecheck). Sizes are not multiples of any tile; the
variants with grouped-query and cross attention also run k/v with fewer heads and another length.
FK_SANITIZE_VARIANTS=a,b limits it to those variants (the default is every variant)."""

from __future__ import annotations

import os

import torch

import flash_kernels as fk
from flash_kernels import _ops, fp8
from flash_kernels.registry import Variant
from flash_kernels.testing import random_attention_inputs

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def refused(var: Variant, opts: dict[str, object], D: int, H: int, Hkv: int, Nq: int,
            capability: tuple[int, int]) -> str | None:
    """Why ``var``'s own option check (_ops._OPTION_CHECKS) refuses ``opts`` at this shape on a GPU of
    ``capability`` (flash_decode's wgmma and 128-row blocks off Hopper), or None where it takes them."""
    check = _ops._OPTION_CHECKS.get(var.name)
    if check is None:
        return None
    try:
        check(var.name, var.resolve_options(opts, D), H, Hkv, Nq, tuple(capability))
    except ValueError as why:
        return str(why)
    return None


def main() -> None:
    fk.build()
    launches = 0
    capability = torch.cuda.get_device_capability()
    only = [v for v in os.environ.get("FK_SANITIZE_VARIANTS", "").split(",") if v]  # default: every variant
    unknown = sorted(set(only) - set(fk.VARIANTS))
    if unknown:
        raise SystemExit(f"FK_SANITIZE_VARIANTS names unknown variants {unknown}; known: {', '.join(fk.VARIANTS)}")
    for name, var in fk.VARIANTS.items():
        if only and name not in only:
            print(f"sanitize_case: skipped {name}: not in FK_SANITIZE_VARIANTS")
            continue
        why = fk.unavailable_reason(var, capability)
        if why is not None:
            print(f"sanitize_case: skipped {name}: {why}")
            continue
        # every option choice once (the others at their defaults), every dtype once, both head dims
        cases: list[tuple[dict[str, object], str]] = [({}, dt) for dt in var.dtypes]
        cases += [({opt.name: ch}, var.dtypes[0]) for opt in var.options.values() for ch in opt.choices]
        for opts, dtype in cases:
            for D in var.head_dims:
                if any(D not in var.options[k].head_dims.get(v, var.head_dims) for k, v in opts.items()):
                    continue
                shapes = [(2, 2, 75, 75)]  # H, Hkv, Nq, Nk
                if "group_split" in opts:  # a split must divide H / Hkv: one k/v head for 32 query heads
                    shapes = [(32, 1, 75, 130)]
                if var.grouped_query and var.cross and not opts and dtype == var.dtypes[0]:
                    shapes += [(4, 2, 75, 130), (4, 1, 130, 75)]  # the head/key indexing is the same for every option
                for H, Hkv, Nq, Nk in shapes:
                    why = refused(var, opts, D, H, Hkv, Nq, capability)
                    if why is not None:  # an option choice this GPU does not run (flash_decode's wgmma off Hopper)
                        print(f"sanitize_case: skipped {name} {opts} at D={D}: {why}")
                        continue
                    q, k, v, g = random_attention_inputs(1, H, Nq, D, DTYPES[dtype], Hkv=Hkv, Nk=Nk, seed=1)
                    for causal in (False, True):
                        o, lse = fk.forward(q, k, v, variant=name, causal=causal, **opts)
                        if "backward" in var.passes and D in var.head_dims_of("backward"):
                            fk.backward(q, k, v, o, lse, g, variant=name, causal=causal, **opts)
                        launches += 1
        if name == "flash_wgmma":  # its FP8 forward (flash_kernels.fp8): head dims, output dtypes, per-tensor and per-block scales
            for D in fp8.HEAD_DIMS:
                # the last shape's 600 keys are more K/V tiles than the ring has stages (2 at D = 256, 4 below):
                # every stage is released and refilled, its scales rewritten beside it, under racecheck
                for H, Hkv, Nq, Nk in [(2, 2, 75, 75), (4, 1, 130, 75), (1, 1, 130, 600)]:
                    q, k, v, _ = random_attention_inputs(1, H, Nq, D, torch.float32, Hkv=Hkv, Nk=Nk, seed=1)
                    mu = v.mean(dim=-2, keepdim=True)  # a row for the epilogue to add (v_mean)
                    x8 = [fk.quantize_e4m3(t) for t in (q, k, v)]
                    for causal, out_dtype in ((False, torch.bfloat16), (True, torch.float16)):
                        fk.attention_fp8(*(x for x, _ in x8), *(d for _, d in x8), causal=causal, out_dtype=out_dtype)
                        launches += 1
                    (q8, dq), (k8, dk), (v8, dv) = x8
                    fp8.forward_vt(q8, k8, fp8.vt_e4m3(v8), torch.stack([dq, dk, dv]).float(), True, D ** -0.5,
                                   torch.bfloat16, pingpong=True, v_mean=mu.reshape(-1))
                    launches += 1
                    xb = [fk.quantize_e4m3(t, scales="block") for t in (q, k, v)]  # a descale per 128 rows
                    for causal in (False, True):
                        for o_sum in fp8.O_SUMS if D not in fp8.O_SUM_ONLY else (fp8.O_SUM_ONLY[D],):
                            fk.attention_fp8(*(x for x, _ in xb), *(d for _, d in xb), causal=causal, o_sum=o_sum,
                                             v_mean=mu)
                            launches += 1
    torch.cuda.synchronize()
    print(f"sanitize_case: ran {launches} forward/backward cases")


if __name__ == "__main__":
    main()
