"""The device page: the GPU as the capture recorded it, and the cases' modeled working sets."""

from __future__ import annotations

import pandas as pd

from .counters import NotApplicable, has_model
from .l2 import modeled_onset


def _fmt(v: object, scale: float, unit: str, digits: int = 0) -> str | None:
    if not isinstance(v, (int, float)) or v != v:
        return None
    return f"{v / scale:.{digits}f} {unit}"


def device_table(manifest: dict, gpu_row: dict | None = None) -> pd.DataFrame:
    """Property / value rows from the manifest's ``gpu`` (and nvidia-smi record), the measured
    ceilings, and Nsight Systems' TARGET_INFO_GPU row when given; properties the capture did not
    record are left out."""
    g = manifest.get("gpu") or {}
    smi = g.get("nvidia_smi") or {}
    rows = [("name", g.get("name")), ("compute capability", g.get("compute_capability")), ("SMs", g.get("sm_count")),
            ("L2 cache", _fmt(g.get("l2_bytes"), 2**20, "MiB")),
            ("shared memory per block (opt-in)", _fmt(g.get("shared_memory_per_block_optin"), 1024, "KiB")),
            ("shared memory per SM", _fmt(g.get("shared_memory_per_sm"), 1024, "KiB")),
            ("registers per SM", g.get("registers_per_sm")),
            ("memory", _fmt(g.get("total_memory_bytes"), 2**30, "GiB")),
            ("SM clock now / max", f"{smi['clocks.sm']} / {smi.get('clocks.max.sm')}" if "clocks.sm" in smi else None),
            ("memory clock now / max", f"{smi['clocks.mem']} / {smi.get('clocks.max.mem')}" if "clocks.mem" in smi else None),
            ("driver", smi.get("driver_version") or g.get("driver")), ("recorded by", g.get("source"))]
    if gpu_row:
        rows.append(("memory bandwidth (nsys)", _fmt(gpu_row.get("memoryBandwidth"), 1e12, "TB/s", 2)))
        rows.append(("max warps per SM (nsys)", gpu_row.get("maxWarpsPerSm")))
    meas = manifest.get("ceilings") or {}
    if isinstance(meas.get("copy_d2d"), dict):
        rows.append(("measured copy bandwidth", _fmt(meas["copy_d2d"].get("bytes_per_s"), 1e12, "TB/s", 2)))
    for key, label in (("gemm_fp16", "measured FP16 GEMM"), ("gemm_bf16", "measured BF16 GEMM"),
                       ("gemm_fp32", "measured FP32 GEMM")):
        if isinstance(meas.get(key), dict):
            rows.append((label, _fmt(meas[key].get("flop_per_s"), 1e12, "TFLOP/s")))
    df = pd.DataFrame([(k, v) for k, v in rows if v not in (None, "")], columns=["property", "value"])
    if df.empty:
        raise NotApplicable("the manifest records nothing about the GPU")
    df["value"] = df["value"].astype(str)
    return df


def measured_ceilings(manifest: dict) -> pd.DataFrame:
    """The manifest's measured ceilings, one row each (NotApplicable if there are none)."""
    c = manifest.get("ceilings") or {}
    rows = [{"ceiling": k, **{kk: vv for kk, vv in v.items() if kk != "note"}} for k, v in c.items() if isinstance(v, dict)]
    if not rows:
        raise NotApplicable("this capture measured no ceilings (no GEMM or copy run beside the profilers)")
    return pd.DataFrame(rows)


def working_set_table(cases: pd.DataFrame, l2_bytes: float, x: str = "N") -> pd.DataFrame:
    """The work model's working set [MiB] of every case, one row per implementation × pass × every
    other shape field and one column per value of ``x`` (``x=<value>``), with the ``x`` at which it
    outgrows the L2 (log-log interpolation; NaN within the sweep: see ``onset note``).
    NotApplicable without a modeled working set or without ``x``."""
    if cases is None or not has_model(cases, "model_working_set"):
        raise NotApplicable("no modeled working set: the capture's cases declare no work model")
    if x not in cases:
        raise NotApplicable(f"the cases have no {x!r} field to lay the working set out along")
    c = cases[pd.to_numeric(cases["model_working_set"], errors="coerce").notna()].copy()
    skip = {"range", "status", "options", "model_flop", "model_bytes", "model_working_set", "model_source", x}
    keys = [k for k in c.columns if k not in skip and not k.startswith("trait_") and c[k].nunique(dropna=True) > 0]
    keys = [k for k in keys if k in ("impl", "pass") or c[k].nunique(dropna=False) > 1]
    rows = []
    for key, g in c.groupby(keys, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        g = g.sort_values(x).drop_duplicates(x)
        row = dict(zip(keys, key, strict=True))
        for xv, ws in zip(g[x], g["model_working_set"], strict=True):
            row[f"{x}={xv:g}" if isinstance(xv, float) else f"{x}={xv}"] = float(ws) / 2**20
        onset, note = modeled_onset(g[x], g["model_working_set"], l2_bytes)
        row[f"outgrows L2 at {x}"] = onset
        row["onset note"] = note
        rows.append(row)
    out = pd.DataFrame(rows)
    cols = [k for k in out.columns if not k.startswith(f"{x}=")]
    xs = sorted((k for k in out.columns if k.startswith(f"{x}=")), key=lambda s: float(s.split("=", 1)[1]))
    return out[[*cols[: len(keys)], *xs, *cols[len(keys):]]].rename(columns={"impl": "variant"})
