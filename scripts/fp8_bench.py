"""flash_wgmma's FP8 forward beside the 16-bit kernels, in one run: time, TFLOP/s against the dense FP8 peak, and
the error against fp64 attention (of the dequantized inputs, and of the original inputs before quantization).

    python scripts/fp8_bench.py --out fp8_bench.csv            # the convention shapes, D = 64 and 128, N >= 1024

Per shape (FlashAttention's convention: B*N = 16384, H*D = 2048, causal and not), timed as the bench times
(flash_kernels.bench.time_gpu: CUDA events, L2 flushed, a GPU-side wait before each repeat, medians):
  fp8          the e4m3 kernel alone (flash_kernels.fp8.forward_vt, Vt made beforehand), its default schedule
  fp8-free, fp8-pingpong   the same with free-running consumer warpgroups / taking turns to issue their products
  fp8-fma25, fp8-fma50   the same with a quarter / half of the exponentials on the FMA units (exp_on_fma)
  fp8+vt       flash_kernels.attention_fp8 as a user calls it (Vt's transpose of v8 included, argument checks)
  flash_wgmma  our fp16 forward (its default pipeline and tile)
  sdpa_cudnn, sdpa_flash   PyTorch's SDPA backends, fp16
The fp16 inputs are the fp32 draws (normal, mean 0.5) the e4m3 ones are quantized from (per tensor). Needs an
sm_90a GPU (H100 / H200).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys

import torch

import flash_kernels as fk
from flash_kernels import bench, fp8
from flash_kernels.bench_suites import convention
from flash_kernels.reference import reference_forward
from flash_kernels.testing import error_metrics, random_attention_inputs

IMPLS = ("fp8", "fp8-free", "fp8-pingpong", "fp8-fma25", "fp8-fma50", "fp8+vt", "flash_wgmma", "sdpa_cudnn",
         "sdpa_flash")


def sm_clock_ghz() -> float | None:
    """The GPU's maximum SM clock (nvidia-smi), or None where it cannot be read."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits", "-i",
                              str(torch.cuda.current_device())], capture_output=True, text=True, timeout=20)
        return float(out.stdout.strip().splitlines()[0]) / 1000.0
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def measure(cfg, peak: float, flush: bench.L2Flusher, hold: bench.GpuHold, budget_ms: float) -> dict:
    """One convention shape: every implementation timed, the FP8 output's errors; printed and returned as a row."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v, _ = random_attention_inputs(cfg.B, cfg.H, cfg.N, cfg.D, torch.float32, seed=cfg.N + cfg.D)
    (q8, dq), (k8, dk), (v8, dv) = (fp8.quantize_e4m3(t) for t in (q, k, v))
    q16, k16, v16 = (t.half() for t in (q, k, v))
    descale = torch.stack([dq, dk, dv]).float()
    vt = fp8.vt_e4m3(v8)
    scale = cfg.D ** -0.5

    def sdpa(backend):
        def call():
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q16, k16, v16, is_causal=cfg.causal)
        return call

    calls = {
        "fp8": lambda: fp8.forward_vt(q8, k8, vt, descale, cfg.causal, scale, torch.bfloat16),
        "fp8-free": lambda: fp8.forward_vt(q8, k8, vt, descale, cfg.causal, scale, torch.bfloat16, pingpong=False),
        "fp8-pingpong": lambda: fp8.forward_vt(q8, k8, vt, descale, cfg.causal, scale, torch.bfloat16, pingpong=True),
        "fp8-fma25": lambda: fp8.forward_vt(q8, k8, vt, descale, cfg.causal, scale, torch.bfloat16, 0.25),
        "fp8-fma50": lambda: fp8.forward_vt(q8, k8, vt, descale, cfg.causal, scale, torch.bfloat16, 0.5),
        "fp8+vt": lambda: fk.attention_fp8(q8, k8, v8, dq, dk, dv, causal=cfg.causal),
        "flash_wgmma": lambda: fk.forward(q16, k16, v16, variant="flash_wgmma", causal=cfg.causal),
        "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
        "sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION),
    }
    # errors: the FP8 output against fp64 attention of the dequantized inputs and of the fp32 draws
    o8 = calls["fp8+vt"]()
    real = [x8.double() * d.double() for x8, d in ((q8, dq), (k8, dk), (v8, dv))]
    err_deq = error_metrics(o8, reference_forward(*real, causal=cfg.causal)[0])
    ref32 = reference_forward(q, k, v, causal=cfg.causal)[0]
    err_src = error_metrics(o8, ref32)
    err_16 = error_metrics(calls["flash_wgmma"]()[0], ref32)
    del real, ref32
    flop = 4.0 * cfg.B * cfg.H * cfg.N * cfg.N * cfg.D * (0.5 if cfg.causal else 1.0)
    ms = {}
    for impl in IMPLS:
        reps = bench.time_gpu(calls[impl], flush, warmup=3, reps=50, budget_ms=budget_ms, hold=hold)
        ms[impl] = statistics.median(reps.ms)
    row = {"config": cfg.name, "B": cfg.B, "H": cfg.H, "N": cfg.N, "D": cfg.D, "causal": int(cfg.causal),
           **{f"{i}_ms": round(ms[i], 5) for i in IMPLS},
           "fp8_tflops": round(flop / ms["fp8"] / 1e9, 1),
           "fp8_free_tflops": round(flop / ms["fp8-free"] / 1e9, 1),
           "fp8_pingpong_tflops": round(flop / ms["fp8-pingpong"] / 1e9, 1),
           "fp8_fma25_tflops": round(flop / ms["fp8-fma25"] / 1e9, 1),
           "fp8_fma50_tflops": round(flop / ms["fp8-fma50"] / 1e9, 1), "fp8_peak_frac": round(flop / ms["fp8"] / 1e9 / peak, 4),
           "flash_wgmma_tflops": round(flop / ms["flash_wgmma"] / 1e9, 1),
           "fp8_x_cudnn": round(ms["sdpa_cudnn"] / ms["fp8"], 3),
           "fp8_x_flash_wgmma": round(ms["flash_wgmma"] / ms["fp8"], 3),
           "fp8_rel_l2_vs_dequantized": f"{err_deq['rel_l2']:.3e}",
           "fp8_max_rel_vs_dequantized": f"{err_deq['max_rel']:.3e}",
           "fp8_rel_l2_vs_fp32_inputs": f"{err_src['rel_l2']:.3e}",
           "fp16_rel_l2_vs_fp32_inputs": f"{err_16['rel_l2']:.3e}"}
    print(f"{cfg.name:18s} fp8 {ms['fp8']:.3f} ms ({row['fp8_tflops']:.0f} TFLOP/s, {100 * row['fp8_peak_frac']:.0f}% "
          f"of peak) free {row['fp8_free_tflops']:.0f} pingpong {row['fp8_pingpong_tflops']:.0f} fma25 {row['fp8_fma25_tflops']:.0f} "
          f"fma50 {row['fp8_fma50_tflops']:.0f} fp8+vt {ms['fp8+vt']:.3f} "
          f"| fp16 flash_wgmma {ms['flash_wgmma']:.3f} "
          f"({row['flash_wgmma_tflops']:.0f}) cuDNN {ms['sdpa_cudnn']:.3f} FA2 {ms['sdpa_flash']:.3f} | fp8 x cuDNN "
          f"{row['fp8_x_cudnn']:.2f} | rel_l2 {row['fp8_rel_l2_vs_dequantized']} (deq) "
          f"{row['fp8_rel_l2_vs_fp32_inputs']} (fp32 src; fp16 {row['fp16_rel_l2_vs_fp32_inputs']})", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="CSV file to write (written to a temporary name, then moved)")
    p.add_argument("--min-n", type=int, default=1024, help="leave out the convention shapes with N below this")
    p.add_argument("--head-dims", default="64,128", help="comma-separated subset of 64,128")
    p.add_argument("--budget-ms", type=float, default=300.0, help="time budget per implementation and shape")
    a = p.parse_args(argv)
    try:
        head_dims = {int(x) for x in a.head_dims.split(",")}
    except ValueError:
        p.error(f"--head-dims takes comma-separated integers; got {a.head_dims!r}")
    if not head_dims <= {64, 128}:
        p.error(f"--head-dims: accepted 64 and 128; got {sorted(head_dims)}")
    if a.min_n < 1 or a.budget_ms <= 0:
        p.error("--min-n must be >= 1 and --budget-ms > 0")
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU (torch.cuda.is_available() is False)")
    why = fk.unavailable_reason("flash_wgmma", torch.cuda.get_device_capability())
    if why is not None:
        p.error(why)

    props = torch.cuda.get_device_properties(0)
    peak = fp8.fp8_dense_peak_tflops(props.multi_processor_count)
    clock = sm_clock_ghz()
    print(f"# {props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}; dense FP8 peak "
          f"{peak:.0f} TFLOP/s at the published 1.83 GHz (8192 FLOP/SM/cycle)"
          + (f", {fp8.fp8_dense_peak_tflops(props.multi_processor_count, clock):.0f} at this GPU's max SM clock "
             f"{clock:.2f} GHz" if clock else ""), flush=True)
    flush, hold = bench.L2Flusher(), bench.GpuHold()
    rows = [measure(cfg, peak, flush, hold, a.budget_ms) for cfg in convention()
            if cfg.N >= a.min_n and cfg.D in head_dims]
    tmp = a.out + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
