"""FP8 attention's error and time for each quantization setting: per tensor, per tensor + Hadamard rotation of Q and K
(FlashAttention-3's incoherent processing), per block of 128 rows (FA3's block quantization), per block + rotation
(flash_kernels.fp8.attention_fp8_from(rotate=..., scales=...)). On an H200 / H100:

    python scripts/fp8_accuracy.py --out fp8_accuracy.json        # also writes fp8_accuracy.csv beside it

Error: relative L2 (and max|err| / max|ref|) of the bf16 output against the fp64 attention of the same inputs
(flash_kernels.reference.reference_forward), for D = 64 and 128, N = 1024 and 4096, causal and not, on standard
normal inputs and on FlashAttention-3's outlier inputs (N(0, 1) + N(0, 100) Bernoulli(0.001),
flash_kernels.hadamard.outlier_normal); --heads query heads (as many K/V heads), batch 1, inputs rounded to
--dtype first (the quantized path's inputs), the same inputs for both methods.

Time: the whole call (quantization of Q, K, V, the rotation where asked, Vt, the kernel) by the project's one
timer (nsightlab.run.timing.time_gpu: CUDA events, warm-up calls, the L2 flushed by a read before each repeat, a
GPU-side wait so that the host's launches are not timed), median of the repeats; also the kernel alone
(fp8.forward_vt on prepared inputs), at --tokens tokens per call (batch = tokens / N) and --time-heads heads.

cuDNN's FP8 attention through PyTorch is measured too if this PyTorch exposes it; else one line says it is not
and how that was checked. One run takes well under 3 minutes on an H200 (--deadline: rows left when it passes
are skipped, and say so; the clock starts once the FP8 module is loaded, which compiles it first if the build cache lacks it).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import flash_kernels as fk  # noqa: E402
from flash_kernels import fp8, hadamard  # noqa: E402
from flash_kernels.reference import reference_forward  # noqa: E402
from flash_kernels.testing import error_metrics  # noqa: E402
from nsightlab.run.timing import GpuHold, L2Flusher, time_gpu  # noqa: E402

DISTS = ("normal", "outlier")
#: method -> (rotate, scales)
METHODS = {"per_tensor": (False, "tensor"), "rotated": (True, "tensor"), "per_block": (False, "block"),
           "per_block_rotated": (True, "block")}
#: the most a setting may add to the per-tensor call's median time to be the default (5 %)
DEFAULT_COST = 1.05


def inputs(dist: str, B: int, H: int, N: int, D: int, dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
    """q, k, v [B, H, N, D] on the GPU in ``dtype``: standard normal, or FlashAttention-3's outlier inputs."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    if dist == "normal":
        return [torch.randn(B, H, N, D, generator=gen, device="cuda").to(dtype) for _ in range(3)]
    return [hadamard.outlier_normal(B, H, N, D, generator=gen, device="cuda").to(dtype) for _ in range(3)]


def accuracy_row(dist: str, D: int, N: int, causal: bool, a: argparse.Namespace) -> dict[str, Any]:
    q, k, v = inputs(dist, 1, a.heads, N, D, a.dtype, a.seed)
    ref, _ = reference_forward(q, k, v, causal=causal)  # fp64
    row: dict[str, Any] = {"dist": dist, "D": D, "N": N, "causal": causal, "B": 1, "H": a.heads}
    for method, (rotate, scales) in METHODS.items():
        o = fp8.attention_fp8_from(q, k, v, causal=causal, rotate=rotate, scales=scales)
        m = error_metrics(o, ref)
        row[f"rel_l2_{method}"], row[f"max_rel_{method}"] = m["rel_l2"], m["max_rel"]
        row[f"nonfinite_{method}"] = m["nonfinite"]
    base = row["rel_l2_per_tensor"]
    row["rel_l2_ratio"] = row["rel_l2_rotated"] / base if base else math.nan
    row["rel_l2_ratio_block"] = row["rel_l2_per_block"] / base if base else math.nan
    row["rel_l2_ratio_block_rotated"] = row["rel_l2_per_block_rotated"] / base if base else math.nan
    for method, scales in (("per_tensor", "tensor"), ("per_block", "block")):  # O summed in the tensor cores
        o = fp8.attention_fp8_from(q, k, v, causal=causal, rotate=False, scales=scales, o_sum="tensor")
        row[f"rel_l2_{method}_tsum"] = error_metrics(o, ref)["rel_l2"]
    return row


def _median_ms(fn: Any, flush: L2Flusher, hold: GpuHold, a: argparse.Namespace) -> float:
    return statistics.median(time_gpu(fn, flush, warmup=a.warmup, reps=a.reps, budget_ms=a.budget_ms,
                                      hold=hold).ms)


def timing_row(D: int, N: int, causal: bool, flush: L2Flusher, hold: GpuHold, a: argparse.Namespace) -> dict[str, Any]:
    B = max(1, a.tokens // N)
    q, k, v = inputs("normal", B, a.time_heads, N, D, a.dtype, a.seed)
    row: dict[str, Any] = {"D": D, "N": N, "causal": causal, "B": B, "H": a.time_heads}
    (q8, dq), (k8, dk), (v8, dv) = (fp8.quantize_e4m3(t) for t in (q, k, v))
    prep = fp8._prepare(q8, k8, v8, dq, dk, dv, causal, None, torch.bfloat16, 0.0)
    row["kernel_ms"] = _median_ms(lambda: fp8.forward_vt(*prep), flush, hold, a)
    row["kernel_ms_tsum"] = _median_ms(lambda: fp8.forward_vt(*prep, o_sum="tensor"), flush, hold, a)
    (q8, dq), (k8, dk), (v8, dv) = (fp8.quantize_e4m3(t, scales="block") for t in (q, k, v))
    prep_b = fp8._prepare(q8, k8, v8, dq, dk, dv, causal, None, torch.bfloat16, 0.0)
    row["kernel_ms_block"] = _median_ms(lambda: fp8.forward_vt(*prep_b), flush, hold, a)
    row["kernel_ms_block_tsum"] = _median_ms(lambda: fp8.forward_vt(*prep_b, o_sum="tensor"), flush, hold, a)
    flops = 4 * B * a.time_heads * N * N * D / (2 if causal else 1)
    for k_ in ("kernel_ms", "kernel_ms_tsum", "kernel_ms_block", "kernel_ms_block_tsum"):
        row["tflops_" + (k_.removeprefix("kernel_ms").strip("_") or "kernel")] = flops / row[k_] / 1e9
    if not a.whole_call:
        return row
    for method, (rotate, scales) in METHODS.items():
        # the fused Triton quantization, and (per tensor) the torch one
        for fused, tail in ((True, ""), (False, "_torch")) if scales == "tensor" else ((True, ""),):
            row[f"ms_{method}{tail}"] = _median_ms(
                lambda r=rotate, f=fused, sc=scales: fp8.attention_fp8_from(q, k, v, causal=causal, rotate=r,
                                                                           fused=f, scales=sc),
                flush, hold, a)
    row["ms_ratio"] = row["ms_rotated"] / row["ms_per_tensor"]
    row["ms_ratio_block"] = row["ms_per_block"] / row["ms_per_tensor"]
    row["ms_ratio_block_rotated"] = row["ms_per_block_rotated"] / row["ms_per_tensor"]
    # the work of the rotation alone (two fp32 products along D), for the reader
    row["ms_rotation"] = _median_ms(lambda: hadamard.rotate_qk(q, k, out_dtype=torch.float32), flush, hold, a)
    row["tflops_per_tensor"] = flops / row["ms_per_tensor"] / 1e9
    return row


def choose_default(acc: list[dict[str, Any]], tim: list[dict[str, Any]]) -> dict[str, Any]:
    """The defaults' rule: the most accurate setting (lowest mean relative L2 error over every measured row) among
    those whose whole call costs at most DEFAULT_COST x per-tensor's at every timed shape."""
    ok_acc = [r for r in acc if r.get("status") == "ok"]
    ok_tim = [r for r in tim if r.get("status") == "ok" and not r.get("kernels_only")]
    if not ok_acc or not ok_tim:
        return {"method": "per_tensor", "why": "nothing measured; per-tensor kept"}
    out: dict[str, Any] = {"mean_rel_l2": {}, "worst_ms_ratio": {}}
    for method in METHODS:
        out["mean_rel_l2"][method] = statistics.fmean(r[f"rel_l2_{method}"] for r in ok_acc)
        out["worst_ms_ratio"][method] = max(r[f"ms_{method}"] / r["ms_per_tensor"] for r in ok_tim)
    cheap = [m for m in METHODS if out["worst_ms_ratio"][m] <= DEFAULT_COST]
    out["method"] = min(cheap, key=lambda m: out["mean_rel_l2"][m])
    out["why"] = ", ".join(f"{m}: mean error {out['mean_rel_l2'][m]:.4f}, worst time {out['worst_ms_ratio'][m]:.3f}x"
                           for m in METHODS)
    return out


def cudnn_fp8_probe() -> tuple[bool, str]:
    """(exposed, how it was checked): the cuDNN SDPA op's schema (any descale / FP8 scale arguments?) and a call of
    F.scaled_dot_product_attention on float8_e4m3fn tensors with cuDNN as the only backend allowed."""
    schema = ""
    try:
        schema = str(torch.ops.aten._scaled_dot_product_cudnn_attention.default._schema)
    except (AttributeError, RuntimeError) as e:
        schema = f"(no aten::_scaled_dot_product_cudnn_attention: {e})"
    scale_args = [w for w in ("descale", "scale_q", "scale_k", "scale_v", "amax") if w in schema]
    how = (f"aten::_scaled_dot_product_cudnn_attention's schema has "
           f"{'the arguments ' + ', '.join(scale_args) if scale_args else 'no descale/amax arguments'}")
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        x = (torch.randn(1, 2, 256, 128, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            o = F.scaled_dot_product_attention(x, x, x)
        torch.cuda.synchronize()
        return True, (f"{how}; F.scaled_dot_product_attention on float8_e4m3fn inputs with only "
                      f"SDPBackend.CUDNN_ATTENTION ran (output {o.dtype})")
    except Exception as e:  # noqa: BLE001 - any refusal is the answer
        msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        return False, (f"{how}; F.scaled_dot_product_attention on float8_e4m3fn inputs with only "
                       f"SDPBackend.CUDNN_ATTENTION raised {type(e).__name__}: {msg}")


def cudnn_row(D: int, N: int, causal: bool, flush: L2Flusher, hold: GpuHold, a: argparse.Namespace) -> dict[str, Any]:
    """cuDNN's FP8 SDPA (only where exposed) on per-tensor e4m3 inputs, the descales folded into the softmax scale
    and the output on the host side of the call (the call times the attention alone, not the quantization)."""
    q, k, v = inputs("normal", 1, a.heads, N, D, a.dtype, a.seed)
    ref, _ = reference_forward(q, k, v, causal=causal)
    (q8, dq), (k8, dk), (v8, dv) = (fp8.quantize_e4m3(t) for t in (q, k, v))
    sc, dvf = float(dq) * float(dk) / math.sqrt(D), float(dv)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def call() -> torch.Tensor:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q8, k8, v8, is_causal=causal, scale=sc)

    m = error_metrics(call().float() * dvf, ref)
    return {"D": D, "N": N, "causal": causal, "rel_l2_cudnn_fp8": m["rel_l2"],
            "ms_cudnn_fp8_attention_only": _median_ms(call, flush, hold, a)}


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    cells = [[_fmt(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) if cells else len(c) for i, c in enumerate(cols)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(x.rjust(w) for x, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="results file: .json (a .csv is written beside it) or .csv")
    p.add_argument("--dims", type=int, nargs="+", default=[64, 128])
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--kernel-lengths", type=int, nargs="*", default=[8192, 16384],
                   help="further lengths at which only the kernels are timed (the PFLOP/s question)")
    p.add_argument("--kernel-tokens", type=int, default=32768, help="batch x N of those calls")
    p.add_argument("--heads", type=int, default=8, help="heads of the error measurement (batch 1)")
    p.add_argument("--time-heads", type=int, default=16, help="heads of the timed calls")
    p.add_argument("--tokens", type=int, default=16384, help="batch x N of the timed calls")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--budget-ms", type=float, default=200.0, help="GPU time per timed call's repeats")
    p.add_argument("--deadline", type=float, default=120.0,
                   help="seconds (after the FP8 module is loaded) after which the rows left are skipped")
    a = p.parse_args(argv)
    a.dtype = getattr(torch, a.dtype)
    a.whole_call = True
    if not torch.cuda.is_available():
        print("fp8_accuracy: needs a CUDA GPU (Hopper: sm_90)", file=sys.stderr)
        return 2
    why = fk.unavailable_reason("flash_wgmma", torch.cuda.get_device_capability())
    if why is not None:
        print(f"fp8_accuracy: {why}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    fk.build(modules=["flash_wgmma_fp8"])
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()  # --deadline counts from here: a cold build (nvcc) is not this script's time
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN "
          f"{torch.backends.cudnn.version()}; FP8 module loaded in {build_s:.1f} s", flush=True)

    def late() -> bool:
        return time.perf_counter() - t0 > a.deadline

    configs = [(D, N, c) for D in a.dims for N in a.lengths for c in (False, True)]
    acc: list[dict[str, Any]] = []
    for dist in DISTS:
        for D, N, c in configs:
            if late():
                acc.append({"dist": dist, "D": D, "N": N, "causal": c, "status": "skipped: past --deadline"})
                continue
            try:
                acc.append({**accuracy_row(dist, D, N, c, a), "status": "ok"})
            except Exception as e:  # noqa: BLE001 - one failing row must not lose the others
                acc.append({"dist": dist, "D": D, "N": N, "causal": c, "status": f"error: {type(e).__name__}: {e}"})
            torch.cuda.empty_cache()
    print("\nrelative L2 error against fp64 (bf16 output; ratio* = the setting's error / per-tensor's)")
    print(table(acc, ["dist", "D", "N", "causal", "rel_l2_per_tensor", "rel_l2_rotated", "rel_l2_per_block",
                      "rel_l2_per_block_rotated", "rel_l2_ratio", "rel_l2_ratio_block", "rel_l2_ratio_block_rotated",
                      "rel_l2_per_tensor_tsum", "rel_l2_per_block_tsum", "status"]), flush=True)

    flush, hold = L2Flusher("read"), GpuHold()
    tim: list[dict[str, Any]] = []
    for D, N, c in configs:
        if late():
            tim.append({"D": D, "N": N, "causal": c, "status": "skipped: past --deadline"})
            continue
        try:
            tim.append({**timing_row(D, N, c, flush, hold, a), "status": "ok"})
        except Exception as e:  # noqa: BLE001
            tim.append({"D": D, "N": N, "causal": c, "status": f"error: {type(e).__name__}: {e}"})
        torch.cuda.empty_cache()
    for D, N, c in [(D, N, c) for D in a.dims for N in a.kernel_lengths for c in (False, True)]:
        if late():
            tim.append({"D": D, "N": N, "causal": c, "status": "skipped: past --deadline"})
            continue
        try:
            ka = argparse.Namespace(**{**vars(a), "tokens": a.kernel_tokens, "whole_call": False})
            tim.append({**timing_row(D, N, c, flush, hold, ka), "status": "ok", "kernels_only": True})
        except Exception as e:  # noqa: BLE001
            tim.append({"D": D, "N": N, "causal": c, "status": f"error: {type(e).__name__}: {e}"})
        torch.cuda.empty_cache()
    print("\nmedian ms per call (quantization + [rotation] + Vt + kernel; L2 flushed; ratio = rotated / per-tensor, both "
          "with the fused Triton quantization; *_torch: the torch operations; kernel_ms*: the kernel alone, per "
          "tensor / per block, O summed in fp32 or in the tensor cores (tsum))")
    print(table(tim, ["D", "N", "causal", "B", "H", "tflops_kernel", "tflops_tsum", "tflops_block", "tflops_block_tsum"]),
          flush=True)
    print(table(tim, ["D", "N", "causal", "B", "H", "kernel_ms", "kernel_ms_block", "ms_per_tensor", "ms_rotated",
                      "ms_per_block", "ms_per_block_rotated", "ms_ratio", "ms_ratio_block", "ms_ratio_block_rotated",
                      "ms_per_tensor_torch", "ms_rotated_torch", "ms_rotation", "tflops_per_tensor", "status"]),
          flush=True)
    default = choose_default(acc, tim)
    print(f"\ndefault by the rule (the lowest mean error among settings whose slowest call is under "
          f"{DEFAULT_COST:.2f}x per-tensor's): {default['method']} -- {default['why']}", flush=True)

    exposed, how = cudnn_fp8_probe()
    cudnn: list[dict[str, Any]] = []
    if exposed:
        print(f"\ncuDNN FP8 attention through PyTorch {torch.__version__}: exposed ({how})")
        for D, N, c in configs:
            if late():
                break
            try:
                cudnn.append(cudnn_row(D, N, c, flush, hold, a))
            except Exception as e:  # noqa: BLE001
                cudnn.append({"D": D, "N": N, "causal": c, "status": f"error: {type(e).__name__}: {e}"})
        print(table(cudnn, ["D", "N", "causal", "rel_l2_cudnn_fp8", "ms_cudnn_fp8_attention_only", "status"]))
    else:
        print(f"\ncuDNN FP8 attention through PyTorch {torch.__version__}: not exposed ({how})")

    meta = {"default": default, "device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "dtype": str(a.dtype).removeprefix("torch."),
            "seed": a.seed, "error_reference": "fp64 attention of the same (dtype-rounded) inputs",
            "outlier_distribution": f"N(0,1) + N(0,{hadamard.OUTLIER_STD ** 2:g}) * Bernoulli({hadamard.OUTLIER_P})",
            "timing": f"nsightlab.run.timing.time_gpu, L2 read-flushed, GPU-side wait, warmup {a.warmup}, "
                      f"up to {a.reps} repeats / {a.budget_ms} ms, median",
            "cudnn_fp8": {"exposed": exposed, "how_checked": how}, "build_seconds": build_s,
            "seconds": time.perf_counter() - t0}
    out = a.out
    out.parent.mkdir(parents=True, exist_ok=True)
    by_shape = {(r["D"], r["N"], r["causal"]): r for r in tim}
    flat = [{**r, **{f"time_{k}": v for k, v in by_shape.get((r["D"], r["N"], r["causal"]), {}).items()
                     if k not in ("D", "N", "causal")}} for r in acc]
    csv_path = out if out.suffix == ".csv" else out.with_suffix(".csv")
    if out.suffix != ".csv":
        out.write_text(json.dumps({"meta": meta, "accuracy": acc, "timing": tim, "cudnn_fp8": cudnn}, indent=1,
                                  default=str) + "\n")
    fields: list[str] = []
    for r in flat:
        fields += [k for k in r if k not in fields]
    with csv_path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(flat)
    print(f"\nwrote {out}" + (f" and {csv_path}" if csv_path != out else "") + f" in {meta['seconds']:.0f} s")
    return 0 if all(r.get("status") == "ok" for r in acc + tim) else 1


if __name__ == "__main__":
    sys.exit(main())
