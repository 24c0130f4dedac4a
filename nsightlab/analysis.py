"""Analysis: roofline points and ceilings, FLOP cross-check, L2 traffic vs working set, timelines.

Pure functions of the parsed frames (nsightlab.parse) and of the capture's manifest. Peaks come
from the report itself (Nsight's ``.peak_sustained`` metrics times the clocks it recorded) and from
the capture's measured ceilings, never from a table of GPU specifications.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from flash_kernels import model
from flash_kernels.registry import VARIANTS

from . import metrics as M

LEVELS = ("DRAM", "L2", "L1")
RANGE_KEYS = ["range", "variant", "pass", "B", "H", "N", "D", "dtype", "causal", "options"]


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    if name not in df:
        return pd.Series(np.nan, index=df.index)
    return pd.to_numeric(df[name], errors="coerce")


def kernel_work(df: pd.DataFrame) -> pd.DataFrame:
    """Per kernel launch: counted FLOPs by pipe, bytes per memory level, duration, peaks and clocks."""
    out = df[[c for c in [*RANGE_KEYS, "kernel", "launch"] if c in df]].copy()
    w, p, t, c, launch = M.WORK, M.PEAKS, M.TRAFFIC, M.CLOCKS, M.LAUNCH
    f = M.FLOP_PER_INST
    out["flop_fp32"] = f["ffma"] * _col(df, w["ffma"]) + f["fadd"] * _col(df, w["fadd"]) + f["fmul"] * _col(df, w["fmul"])
    out["flop_fp16"] = f["hfma"] * _col(df, w["hfma"])
    out["flop_tensor"] = f["tensor_fp16"] * _col(df, w["tensor_fp16"])
    out["flop"] = out[["flop_fp32", "flop_fp16", "flop_tensor"]].fillna(0).sum(axis=1)
    out["bytes_DRAM"] = _col(df, t["dram_bytes"])
    out["bytes_L2"] = _col(df, t["lts2xbar"]) * M.LTS2XBAR_BYTES
    out["bytes_L1"] = _col(df, t["l1_writeback"]) * M.L1_WRITEBACK_BYTES
    out["bytes_shared"] = _col(df, t["shared_wavefronts"]) * M.SHARED_WAVEFRONT_BYTES
    out["dram_read"] = _col(df, t["dram_read"])
    out["dram_write"] = _col(df, t["dram_write"])
    out["lts_sectors"] = _col(df, t["lts_sectors"])
    out["l2_hit_rate"] = _col(df, t["lts_hit_rate"])
    out["seconds"] = _col(df, launch["duration"]) * 1e-9
    out["occupancy"] = _col(df, launch["occupancy"])
    out["registers"] = _col(df, launch["registers"])
    out["smem_bytes"] = _col(df, launch["smem_static"]).fillna(0) + _col(df, launch["smem_dynamic"]).fillna(0)
    out["block_size"] = _col(df, launch["block_size"])
    out["grid_size"] = _col(df, launch["grid_size"])
    sm_hz = _col(df, c["sm"])
    out["peak_fp32"] = _col(df, p["ffma"]) * f["ffma"] * sm_hz
    out["peak_fp16"] = _col(df, p["hfma"]) * f["hfma"] * sm_hz
    out["peak_tensor"] = _col(df, p["tensor_fp16"]) * sm_hz
    out["peak_DRAM"] = _col(df, p["dram_bytes"]) * _col(df, c["dram"])
    out["peak_L2"] = _col(df, p["lts2xbar"]) * M.LTS2XBAR_BYTES * _col(df, c["lts"])
    out["peak_L1"] = _col(df, p["l1_writeback"]) * M.L1_WRITEBACK_BYTES * _col(df, c["l1tex"])
    out["sm_hz"] = sm_hz
    return out


def ceilings(work: pd.DataFrame, manifest: dict | None = None) -> pd.DataFrame:
    """The roofline's ceilings: compute (fp32, fp16, tensor) in FLOP/s and bandwidth (DRAM, L2, L1)
    in B/s, each the median over the report's kernels of Nsight's peak at the clocks it recorded;
    plus the capture's measured ceilings (GEMM, device copy) when the manifest has them."""
    rows = []
    for kind, col, label in (("compute", "peak_fp32", "FP32 (FFMA)"), ("compute", "peak_fp16", "FP16 (HFMA2)"),
                             ("compute", "peak_tensor", "Tensor FP16"), ("memory", "peak_DRAM", "DRAM"),
                             ("memory", "peak_L2", "L2"), ("memory", "peak_L1", "L1")):
        v = work[col].dropna()
        if len(v):
            per_sm_cycle = float((work[col] / work["sm_hz"]).median()) if kind == "compute" else float("nan")
            rows.append({"kind": kind, "name": label, "value": float(v.median()), "source": "ncu peak x recorded clock",
                         "per_cycle": per_sm_cycle})
    meas = (manifest or {}).get("ceilings") or {}
    for key, label in (("gemm_fp16", "measured FP16 GEMM"), ("gemm_bf16", "measured BF16 GEMM"),
                       ("gemm_fp32", "measured FP32 GEMM")):
        if key in meas:
            rows.append({"kind": "compute", "name": label, "value": float(meas[key]["flop_per_s"]),
                         "source": f"torch.matmul {meas[key]['n']}^3"})
    if "copy_d2d" in meas:
        rows.append({"kind": "memory", "name": "measured D2D copy", "value": float(meas["copy_d2d"]["bytes_per_s"]),
                     "source": "1 GiB device copy, read+write"})
    return pd.DataFrame(rows)


def per_range(work: pd.DataFrame) -> pd.DataFrame:
    """Sum the kernels of each measured range (one launch group = one variant x config x pass)."""
    keys = [k for k in RANGE_KEYS if k in work]
    w = work.dropna(subset=["range"]).copy()
    w["_hit_sectors"] = w["l2_hit_rate"] / 100 * w["lts_sectors"]
    sums = ["flop", "flop_fp32", "flop_fp16", "flop_tensor", "bytes_DRAM", "bytes_L2", "bytes_L1", "bytes_shared",
            "dram_read", "dram_write", "lts_sectors", "_hit_sectors", "seconds"]
    g = w.groupby(keys, dropna=False, sort=False)
    out = g[sums].sum(min_count=1).reset_index()
    out["kernels"] = g.size().to_numpy()
    out["l2_hit_rate"] = 100 * out.pop("_hit_sectors") / out["lts_sectors"]
    for c in ("B", "H", "N", "D"):
        out[c] = out[c].astype(int)
    return out


def roofline_points(rng: pd.DataFrame) -> pd.DataFrame:
    """One point per range and memory level: arithmetic intensity (FLOP/byte) and FLOP/s."""
    rows = []
    for _, r in rng.iterrows():
        for level in LEVELS:
            b = r[f"bytes_{level}"]
            if not (b > 0 and r["seconds"] > 0 and r["flop"] > 0):
                continue
            rows.append({**{k: r[k] for k in RANGE_KEYS if k in r}, "level": level, "intensity": r["flop"] / b,
                         "flop_per_s": r["flop"] / r["seconds"], "bytes": b, "flop": r["flop"], "ms": r["seconds"] * 1e3})
    return pd.DataFrame(rows)


def attainable(intensity: float | np.ndarray, peak_flops: float, peak_bw: float) -> Any:
    """The roofline: min(compute peak, bandwidth x intensity)."""
    return np.minimum(peak_flops, peak_bw * np.asarray(intensity, dtype=float))


def flop_check(rng: pd.DataFrame, tolerance: float = 0.10) -> pd.DataFrame:
    """Analytic FLOPs (the convention) against the FLOPs the counters saw, per range; flags and
    explains disagreements beyond ``tolerance``."""
    out = rng[[k for k in RANGE_KEYS if k in rng] + ["flop", "flop_fp32", "flop_fp16", "flop_tensor"]].copy()
    out["analytic"] = [model.flops(r.B, r.H, r.N, r.D, causal=bool(r.causal), pass_=r["pass"]) for _, r in out.iterrows()]
    out["counted_over_analytic"] = out["flop"] / out["analytic"]
    out["flag"] = (out["counted_over_analytic"] - 1).abs() > tolerance
    out["explanation"] = [_explain(r) for _, r in out.iterrows()]
    return out


def _explain(r: pd.Series) -> str:
    ratio = r["counted_over_analytic"]
    if abs(ratio - 1) <= 0.10:
        return "agrees within 10%"
    tensor_share = r["flop_tensor"] / r["flop"] if r["flop"] else 0
    var = VARIANTS.get(r["variant"])
    parts = []
    if ratio > 1:
        if r["pass"] == "backward":
            parts.append("backward: the convention's 2.5x omits recomputing S=QK^T (flash) and the softmax-gradient "
                         "arithmetic (rowsum(dO*O), dS = P*(dP - D))")
        if var is not None and var.materializes:
            parts.append("materialized softmax: max, exp, sum and scaling count as FP32 instructions on every score")
        elif tensor_share < 0.5:
            parts.append("CUDA-core kernel: online-softmax rescaling (exp, max, FMA per score) adds FP32 work")
        if r["N"] % 64:
            parts.append("N is not a multiple of the tile: padded tiles are computed and masked")
        return "counted > analytic: " + "; ".join(parts or ["extra instructions beyond the two matrix products"])
    parts.append("work on pipes the metric list does not count (HADD/HMUL, BF16 or integer tensor paths, "
                 "FP32 work folded into tensor-core instructions)")
    if r["variant"].startswith("sdpa_"):
        parts.append("library kernels may use instructions outside the counted ones")
    return "counted < analytic: " + "; ".join(parts)


def l2_traffic(rng: pd.DataFrame, l2_bytes: float) -> pd.DataFrame:
    """Per range: L2 hit rate, DRAM bytes / compulsory bytes, DRAM bytes / L2-to-SM bytes, and the
    modeled working set against the L2 size."""
    out = rng[[k for k in RANGE_KEYS if k in rng] + ["bytes_DRAM", "bytes_L2", "l2_hit_rate", "seconds"]].copy()
    out["compulsory"] = [model.compulsory_bytes(r.B, r.H, r.N, r.D, r["dtype"], pass_=r["pass"]) for _, r in out.iterrows()]
    out["working_set"] = [model.working_set_bytes(bool(VARIANTS[r.variant].materializes) if r.variant in VARIANTS else False,
                                                  r.B, r.H, r.N, r.D, r["dtype"], pass_=r["pass"]) for _, r in out.iterrows()]
    out["dram_over_compulsory"] = out["bytes_DRAM"] / out["compulsory"]
    out["dram_over_l2"] = out["bytes_DRAM"] / out["bytes_L2"]
    out["working_set_over_l2"] = out["working_set"] / l2_bytes
    return out


def modeled_onset(variant: str, B: int, H: int, D: int, dtype: str, pass_: str, l2_bytes: float,
                  n_max: int = 1 << 17) -> float:
    """The smallest N (continuous) at which the variant's modeled working set exceeds the L2."""
    mat = VARIANTS[variant].materializes if variant in VARIANTS else False
    lo, hi = 1.0, float(n_max)
    if model.working_set_bytes(mat, B, H, int(hi), D, dtype, pass_=pass_) <= l2_bytes:
        return float("inf")
    for _ in range(60):
        mid = (lo + hi) / 2
        ws = model.working_set_bytes(mat, B, H, mid, D, dtype, pass_=pass_)  # type: ignore[arg-type]
        lo, hi = (mid, hi) if ws <= l2_bytes else (lo, mid)
    return hi


def measured_onset(series: pd.DataFrame, drop_points: float = 10.0) -> float:
    """The first N at which the L2 hit rate has fallen more than ``drop_points`` percentage points
    below its best over the two smallest N (NaN if it never does): where the L2 stops holding the
    working set. (DRAM / compulsory bytes is no criterion for the materializing variants: they
    write their score matrices by design at every N.)"""
    s = series.sort_values("N")
    base = s["l2_hit_rate"].iloc[:2].max()
    hit = s[s["l2_hit_rate"] < base - drop_points]
    return float(hit["N"].iloc[0]) if len(hit) else float("nan")


def onset_table(l2: pd.DataFrame, l2_bytes: float, drop_points: float = 10.0) -> pd.DataFrame:
    rows = []
    for (variant, pass_, D), s in l2.groupby(["variant", "pass", "D"]):
        B, H, dtype = int(s["B"].iloc[0]), int(s["H"].iloc[0]), s["dtype"].iloc[0]
        rows.append({"variant": variant, "pass": pass_, "D": D,
                     "modeled_onset_N": modeled_onset(variant, B, H, int(D), dtype, pass_, l2_bytes),
                     "measured_onset_N": measured_onset(s, drop_points),
                     "N_range": f"{int(s['N'].min())}..{int(s['N'].max())}"})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- timelines (nsys)


def range_timing(kernels: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """Per measured range instance: wall time, GPU time (sum of its kernels), kernel count, and the
    launch gaps (GPU idle time between consecutive kernels of the range)."""
    k = kernels[kernels["range_id"] >= 0].sort_values("start")
    rows = []
    for rid, grp in k.groupby("range_id"):
        r = ranges.loc[rid]
        starts, ends = grp["start"].to_numpy(), grp["end"].to_numpy()
        gaps = np.clip(starts[1:] - ends[:-1], 0, None) if len(grp) > 1 else np.array([])
        rows.append({**{c: r[c] for c in RANGE_KEYS}, "range_id": rid, "wall_ms": r["ms"],
                     "gpu_ms": float((ends - starts).sum()) / 1e6, "span_ms": float(ends.max() - starts.min()) / 1e6,
                     "kernels": len(grp), "gap_ms": float(gaps.sum()) / 1e6,
                     "max_gap_us": float(gaps.max()) / 1e3 if len(gaps) else 0.0})
    return pd.DataFrame(rows)


def timing_summary(rt: pd.DataFrame) -> pd.DataFrame:
    """Median over the repeated launches of each range; TFLOP/s from the GPU time."""
    keys = [k for k in RANGE_KEYS if k in rt]
    g = rt.groupby(keys, sort=False)
    out = g[["gpu_ms", "wall_ms", "span_ms", "gap_ms", "kernels"]].median().reset_index()
    out["iters"] = g.size().to_numpy()
    out["tflops"] = [model.tflops(model.flops(r.B, r.H, r.N, r.D, causal=bool(r.causal), pass_=r["pass"]), r.gpu_ms)
                     for _, r in out.iterrows()]
    return out


def speedup_vs(summary: pd.DataFrame, ref: str = "sdpa_flash") -> pd.DataFrame:
    """Each variant's GPU time relative to ``ref`` at the same config and pass (ref_ms / ms)."""
    keys = ["pass", "B", "H", "N", "D", "dtype", "causal"]
    r = summary[summary["variant"] == ref][[*keys, "gpu_ms"]].rename(columns={"gpu_ms": "ref_ms"})
    out = summary.merge(r, on=keys, how="left")
    out["speed_vs_" + ref] = out["ref_ms"] / out["gpu_ms"]
    return out


# --------------------------------------------------------------------------- device page


def device_table(manifest: dict, gpu_row: dict | None = None) -> pd.DataFrame:
    """The GPU as the capture recorded it (manifest; nsys's TARGET_INFO_GPU when present)."""
    g = manifest.get("gpu", {})
    smi = g.get("nvidia_smi", {})
    rows = [("name", g.get("name")), ("compute capability", g.get("compute_capability")), ("SMs", g.get("sm_count")),
            ("L2 cache", f"{g.get('l2_bytes', 0) / 2**20:.0f} MiB"),
            ("shared memory per block (opt-in)", f"{g.get('shared_memory_per_block_optin', 0) / 1024:.0f} KiB"),
            ("shared memory per SM", f"{g.get('shared_memory_per_sm', 0) / 1024:.0f} KiB"),
            ("registers per SM", g.get("registers_per_sm")),
            ("memory", f"{g.get('total_memory_bytes', 0) / 2**30:.0f} GiB"),
            ("SM clock now / max", f"{smi.get('clocks.sm')} / {smi.get('clocks.max.sm')}"),
            ("memory clock now / max", f"{smi.get('clocks.mem')} / {smi.get('clocks.max.mem')}"),
            ("driver", smi.get("driver_version"))]
    if gpu_row:
        rows.append(("memory bandwidth (nsys)", f"{gpu_row.get('memoryBandwidth', 0) / 1e12:.2f} TB/s"))
        rows.append(("max warps per SM (nsys)", gpu_row.get("maxWarpsPerSm")))
    meas = manifest.get("ceilings") or {}
    if "copy_d2d" in meas:
        rows.append(("measured copy bandwidth", f"{meas['copy_d2d']['bytes_per_s'] / 1e12:.2f} TB/s"))
    if "gemm_bf16" in meas:
        rows.append(("measured BF16 GEMM", f"{meas['gemm_bf16']['flop_per_s'] / 1e12:.0f} TFLOP/s"))
    return pd.DataFrame(rows, columns=["property", "value"])


def working_set_table(B: int, H: int, D: int, dtype: str, l2_bytes: float,
                      ns: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192, 16384)) -> pd.DataFrame:
    """Minimum working set per variant and N (forward and backward), and the N where it outgrows L2."""
    rows = []
    for name, var in VARIANTS.items():
        for pass_ in var.passes:
            row: dict[str, Any] = {"variant": name, "pass": pass_}
            for n in ns:
                row[f"N={n}"] = model.working_set_bytes(var.materializes, B, H, n, D, dtype, pass_=pass_) / 2**20
            row["outgrows L2 at N"] = modeled_onset(name, B, H, D, dtype, pass_, l2_bytes)
            rows.append(row)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- block size / tile study


def option_label(variant: str, pass_: str, options: str) -> str:
    """The option a study varies: block_size for flash_simt, tile (forward) or bwd_tile (backward)."""
    parts = [o for o in str(options or "").split(";") if o]
    if variant == "flash_mma":
        key = "tile=" if pass_ == "forward" else "bwd_tile="
        parts = [o for o in parts if o.startswith(key)]
    return ";".join(parts)


def option_study(work: pd.DataFrame) -> pd.DataFrame:
    """Per variant x pass x N x D x option: main-kernel time, achieved occupancy, registers per
    thread, shared memory per block and block size (the attention kernel, not its helpers)."""
    k = work.dropna(subset=["range"])
    k = k[k["kernel"].str.contains("forward_kernel|backward_kernel", regex=True)].copy()
    k["option"] = [option_label(v, p, o) for v, p, o in zip(k["variant"], k["pass"], k["options"], strict=False)]
    out = k.groupby(["variant", "pass", "N", "D", "option"], as_index=False).agg(
        ms=("seconds", lambda s: 1e3 * s.sum()), occupancy=("occupancy", "mean"), registers=("registers", "max"),
        smem_bytes=("smem_bytes", "max"), block_size=("block_size", "max"))
    out["N"] = out["N"].astype(int)
    out["D"] = out["D"].astype(int)
    return out
