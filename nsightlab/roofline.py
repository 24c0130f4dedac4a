"""The hierarchical roofline: ceilings, one point per range and memory level, and the FLOP check.

Peaks come from the capture itself: Nsight Compute's ``.peak_sustained`` rates times the clock each
launch ran at (see :mod:`nsightlab.counters` for every recipe), and the manifest's measured ceilings
(a GEMM, a device copy) where the capture made them; never from a table of GPU specifications.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .counters import FLOP_TERMS, NotApplicable, has_model, identity_columns, missing_message, require

LEVELS = ("DRAM", "L2", "L1")
#: the compute and memory peaks kernel_work derives, with their labels
PEAK_LABELS = (("compute", "peak_fp32", "FP32 (FFMA)"), ("compute", "peak_fp16", "FP16 (HFMA2)"),
               ("compute", "peak_fp64", "FP64 (DFMA)"), ("compute", "peak_tensor", "Tensor FP16"),
               ("memory", "peak_DRAM", "DRAM"), ("memory", "peak_L2", "L2"), ("memory", "peak_L1", "L1"))


def ceilings(work: pd.DataFrame, manifest: dict | None = None) -> pd.DataFrame:
    """The roofline's ceilings: compute in FLOP/s and bandwidth in B/s, each the median over the
    report's launches of Nsight's peak at the clock it recorded (``per_cycle``: the compute peak per
    SM-clock cycle, all SMs), plus the manifest's measured ceilings (``measured ...``). Compute
    peaks of pipes no launch used (an FP64 peak in an FP16 study) are left out. NotApplicable if
    there is no ceiling at all."""
    rows = []
    used_pipes = {t for t in FLOP_TERMS if f"flop_{t}" in work and (work[f"flop_{t}"].fillna(0) > 0).any()}
    for kind, col, label in PEAK_LABELS:
        v = work[col].dropna() if col in work else pd.Series(dtype=float)
        if not len(v):
            continue
        if col == "peak_fp64" and "fp64" not in used_pipes:
            continue
        per_cycle = float((work[col] / work["hz_sm"]).median()) if kind == "compute" else float("nan")
        rows.append({"kind": kind, "name": label, "value": float(v.median()), "per_cycle": per_cycle,
                     "source": "Nsight Compute peak × recorded clock"})
    meas = (manifest or {}).get("ceilings") or {}
    for key, label in (("gemm_fp16", "measured FP16 GEMM"), ("gemm_bf16", "measured BF16 GEMM"),
                       ("gemm_fp32", "measured FP32 GEMM")):
        if isinstance(meas.get(key), dict) and "flop_per_s" in meas[key]:
            rows.append({"kind": "compute", "name": label, "value": float(meas[key]["flop_per_s"]), "per_cycle": np.nan,
                         "source": f"torch.matmul {meas[key].get('n', '?')}^3, this capture"})
    if isinstance(meas.get("copy_d2d"), dict) and "bytes_per_s" in meas["copy_d2d"]:
        rows.append({"kind": "memory", "name": "measured D2D copy", "value": float(meas["copy_d2d"]["bytes_per_s"]),
                     "per_cycle": np.nan, "source": "device-to-device copy, read + write, this capture"})
    if not rows:
        msg = missing_message(work, ["peak_fp32", "peak_tensor", "peak_DRAM"]) or "no peak metric"
        raise NotApplicable(f"no roofline ceiling: {msg}, and the manifest records no measured ceilings")
    return pd.DataFrame(rows)


def roofline_points(rng: pd.DataFrame) -> pd.DataFrame:
    """One point per range and memory level: arithmetic intensity (counted FLOP / bytes moved at
    that level) and FLOP/s (counted FLOP / the range's kernel time). NotApplicable, naming the
    missing metrics, without counted FLOPs, durations or bytes at any level."""
    require(rng, "flop", "seconds", what="the roofline")
    levels = [lv for lv in LEVELS if f"bytes_{lv}" in rng and rng[f"bytes_{lv}"].notna().any()]
    if not levels:
        require(rng, "bytes_DRAM", "bytes_L2", "bytes_L1", what="the roofline")
    keep = ["range", *identity_columns(rng), "flop_counters", *[f"flop_{t}" for t in FLOP_TERMS]]
    rows = []
    for _, r in rng.iterrows():
        for level in levels:
            b = r[f"bytes_{level}"]
            if not (b > 0 and r["seconds"] > 0 and r["flop"] > 0):
                continue
            rows.append({**{k: r[k] for k in keep if k in r}, "level": level, "intensity": r["flop"] / b,
                         "flop_per_s": r["flop"] / r["seconds"], "bytes": b, "flop": r["flop"], "ms": r["seconds"] * 1e3})
    if not rows:
        raise NotApplicable("no range has counted FLOPs, bytes and a duration above zero (nothing to place)")
    return pd.DataFrame(rows)


def attainable(intensity: float | np.ndarray, peak_flops: float, peak_bw: float) -> Any:
    """The roofline: min(compute peak, bandwidth × intensity)."""
    return np.minimum(peak_flops, peak_bw * np.asarray(intensity, dtype=float))


# --------------------------------------------------------------------------- counted vs modeled FLOPs


def flop_check(rng: pd.DataFrame, tolerance: float = 0.10) -> pd.DataFrame:
    """The work model's FLOPs (``model_flop``, attached by :func:`nsightlab.counters.attach_model`)
    against the FLOPs the counters saw, per range; ``flag`` marks disagreements beyond
    ``tolerance``, ``explanation`` gives the likely reasons from the case's columns. NotApplicable
    when no case has a work model or the capture counted no FLOPs."""
    if not has_model(rng):
        raise NotApplicable("the FLOP check is not applicable: no work model (the capture's manifest declares no "
                            "model FLOPs for its cases, so there is nothing to compare the counters with)")
    require(rng, "flop", what="the FLOP check")
    cols = ["range", *identity_columns(rng), "flop", *[f"flop_{t}" for t in FLOP_TERMS], "flop_counters",
            "model_flop", "model_source", *[c for c in rng.columns if c.startswith("trait_")]]
    out = rng[[c for c in dict.fromkeys(cols) if c in rng]].copy()
    out = out[pd.to_numeric(out["model_flop"], errors="coerce").notna()]
    out["counted_over_model"] = out["flop"] / out["model_flop"]
    out["flag"] = (out["counted_over_model"] - 1).abs() > tolerance
    out["explanation"] = [explain(r, tolerance) for _, r in out.iterrows()]
    return out.reset_index(drop=True)


ALL_COUNTERS = tuple(k for parts in FLOP_TERMS.values() for k, _ in parts)


def explain(r: pd.Series, tolerance: float = 0.10) -> str:
    """Why counted and modeled FLOPs differ, from generic rules over the row's columns: the pass,
    ``trait_materializes``, the tensor share of the counted FLOPs, N not a multiple of 64, and the
    FLOP counters the capture lacks. Never from an implementation's name."""
    ratio = r["counted_over_model"]
    if not np.isfinite(ratio):
        return "no counted FLOPs"
    if abs(ratio - 1) <= tolerance:
        return f"agrees within {tolerance:.0%}"
    flop = r.get("flop", 0) or 0
    tensor_share = (r.get("flop_tensor", 0) or 0) / flop if flop else 0.0
    n = r.get("N")
    parts = []
    if ratio > 1:
        if r.get("pass") == "backward":
            parts.append("backward pass: work models count the gradient's matrix products only; recomputed forward "
                         "products and the gradient's elementwise arithmetic are counted too")
        if _true(r.get("trait_materializes")):
            parts.append("materializes intermediates: elementwise arithmetic on every stored element (e.g. a softmax's "
                         "max, exp, sum and scaling) counts as FP32 instructions")
        elif tensor_share < 0.5:
            parts.append(f"mostly CUDA-core arithmetic ({1 - tensor_share:.0%} of counted FLOPs off the tensor pipe): "
                         "elementwise work beyond the model's products adds FP32 instructions")
        if isinstance(n, (int, float, np.integer, np.floating)) and np.isfinite(n) and int(n) % 64:
            parts.append(f"N={int(n)} is not a multiple of 64: padded tiles are computed and masked")
        return "counted > model: " + "; ".join(parts or ["instructions beyond the model's operations"])
    lacking = [k for k in ALL_COUNTERS if k not in str(r.get("flop_counters", "")).split()]
    if lacking:
        parts.append("the capture has no counter for " + ", ".join(k.upper().replace("TENSOR_", "tensor ")
                                                                     for k in lacking))
    parts.append("work on pipes the FLOP counters do not see (integer or other tensor paths, FP32 work folded "
                 "into tensor-core instructions)")
    return "counted < model: " + "; ".join(parts)


def _true(v: object) -> bool:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return False
    if isinstance(v, str):
        return v.lower() in ("1", "true", "yes")
    return bool(v)


# --------------------------------------------------------------------------- the page's findings


def _fields_text(r: pd.Series, fields: list[str]) -> str:
    out = []
    for f in fields:
        v = r.get(f)
        if v is None or (isinstance(v, float) and np.isnan(v)) or v == "":
            continue
        if f == "causal":
            out.append("causal" if bool(v) else "")
        elif f == "pass":
            out.append(str(v))
        else:
            out.append(f"{f}={int(v) if isinstance(v, float) and v.is_integer() else v}")
    return ", ".join(x for x in out if x)


def nearest_roof(points: pd.DataFrame, ceil: pd.DataFrame) -> pd.DataFrame:
    """Per range: its achieved fraction of every roof (each level's bandwidth: bytes/s over the
    level's peak; compute: FLOP/s over the Nsight peak of the pipe that did most of its counted
    FLOPs, else the highest one) and the nearest one (``nearest``, ``fraction``)."""
    peaks = {r["name"]: r["value"] for _, r in ceil.iterrows() if not str(r["name"]).startswith("measured")}
    pipe_peak = {col.removeprefix("peak_"): label for kind, col, label in PEAK_LABELS if kind == "compute"}
    comp = ceil[(ceil["kind"] == "compute") & ~ceil["name"].str.startswith("measured")]
    top_name = comp.loc[comp["value"].idxmax(), "name"] if len(comp) else None
    rows = []
    for rng, g in points.groupby("range", sort=False):
        first = g.iloc[0]
        fr = {}
        for _, r in g.iterrows():
            bw = peaks.get(r["level"])
            if bw:
                fr[f"{r['level']} bandwidth"] = r["bytes"] / (r["ms"] * 1e-3) / bw
        by_pipe = {t: first.get(f"flop_{t}") for t in FLOP_TERMS}
        by_pipe = {t: v for t, v in by_pipe.items() if isinstance(v, (int, float)) and v == v and v > 0}
        name = pipe_peak.get(max(by_pipe, key=by_pipe.get)) if by_pipe else top_name
        if name in peaks:
            fr[f"{name} peak"] = first["flop_per_s"] / peaks[name]
        elif top_name:
            fr[f"{top_name} peak"] = first["flop_per_s"] / peaks[top_name]
        if not fr:
            continue
        name, val = max(fr.items(), key=lambda kv: kv[1])
        rows.append({"range": rng, **{k: first[k] for k in first.index if k not in ("level", "intensity", "bytes")},
                     "nearest": name, "fraction": val})
    return pd.DataFrame(rows)


def findings(points: pd.DataFrame, ceil: pd.DataFrame, fc: pd.DataFrame | None = None, label: str = "variant",
             fields: list[str] | None = None) -> list[str]:
    """The roofline page's findings: the fastest range and its distance to the peaks; each
    implementation's nearest roof at its fastest range; the FLOP check's agreement."""
    if points.empty:
        return []
    fields = [f for f in (fields or []) if f in points and f not in (label, "options")
              and (points[f].nunique(dropna=True) > 1 or f == "pass")]
    out = []
    best = points.loc[points["flop_per_s"].idxmax()]
    comp = ceil[(ceil["kind"] == "compute") & (ceil["value"] >= best["flop_per_s"])]
    shares = [f"{best['flop_per_s'] / c['value']:.0%} of {c['name']}"
              for _, c in comp.sort_values("value", ascending=False).iterrows()]
    out.append(f"Fastest range: **{best[label]}** ({_fields_text(best, fields)}) at "
               f"{best['flop_per_s'] / 1e12:,.0f} TFLOP/s" + (f" — {', '.join(shares[:2])}" if shares else "") + ".")
    near = nearest_roof(points, ceil)
    if len(near):
        top = near.loc[near.groupby(near[label].astype(str), sort=False)["flop_per_s"].idxmax()]
        top = top.sort_values("flop_per_s", ascending=False)
        txt = ", ".join(f"{r[label]} {r['fraction']:.0%} of {r['nearest']}" for _, r in top.head(8).iterrows())
        out.append(f"Nearest roof at each one's fastest range: {txt}"
                   + (f" (and {len(top) - 8} more)" if len(top) > 8 else "") + ".")
    if fc is not None and len(fc):
        n_ok = int((~fc["flag"]).sum())
        more = int((fc["counted_over_model"] > 1.1).sum())
        out.append(f"Counted FLOPs agree with the work model within 10% for {n_ok} of {len(fc)} ranges"
                   + (f"; {more} count more than the model (see the last section)" if more else "") + ".")
    return out


def views(points: pd.DataFrame, size_by: str | None = None, label: str = "variant",
          max_rows: int = 4) -> list[tuple[str, pd.DataFrame, str | None]]:
    """How to lay a capture's roofline out: (title, points, facet row field) per figure. Pass goes
    in the columns; the first other field that varies (2..``max_rows`` values; not ``size_by``,
    ``label`` or an option) in the rows; any further varying field splits the figures."""
    from .counters import option_columns

    skip = {label, "variant", "pass", size_by, "options", *option_columns(points)}
    varying = [c for c in identity_columns(points) if c not in skip and points[c].nunique(dropna=True) > 1]
    row = next((c for c in varying if points[c].nunique() <= max_rows), None)
    rest = [c for c in varying if c != row]
    if not rest:
        return [("", points, row)]
    out = []
    for key, g in points.groupby(rest, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        out.append((", ".join(f"{c}={v}" for c, v in zip(rest, key, strict=True)), g, row))
    return out


def ceiling_table(ceil: pd.DataFrame) -> pd.DataFrame:
    """The ceilings for people: value with its unit, the compute peak per SM-clock cycle."""
    out = pd.DataFrame({
        "ceiling": ceil["name"],
        "kind": ceil["kind"],
        "value": [f"{v / 1e12:,.1f} TFLOP/s" if k == "compute" else f"{v / 1e12:.2f} TB/s"
                  for k, v in zip(ceil["kind"], ceil["value"], strict=True)],
        "FLOP per SM-clock cycle (all SMs)": ceil["per_cycle"],
        "source": ceil["source"],
    })
    return out
