"""The device page: the GPU as the capture recorded it, and the cases' modeled working sets."""

from __future__ import annotations

import pandas as pd

from ..core import metrics
from ..core.errors import NotApplicable
from ..problems import problem as problems
from .counters import has_model
from .l2 import modeled_onset


def _fmt(v: object, scale: float, unit: str, digits: int = 0) -> str | None:
    if not isinstance(v, (int, float)) or v != v:
        return None
    return f"{v / scale:.{digits}f} {unit}"


def run_clocks(ncu: pd.DataFrame | None) -> dict[str, tuple[float, float, float, int]]:
    """The clocks the profiled launches ran at, from Nsight Compute's own counters (``sm__cycles_elapsed.avg.per_second``
    and ``dram__cycles_elapsed.avg.per_second`` of every launch of a capture's light tier, :data:`metrics.CLOCKS`):
    ``{"SM": (min, median, max, launches), "memory": ...}`` in MHz; a clock the frame lacks is left out."""
    out = {}
    if ncu is None:
        return out
    for name, key in (("SM", "sm"), ("memory", "dram")):
        col = metrics.CLOCKS[key]
        if col in ncu:
            v = pd.to_numeric(ncu[col], errors="coerce").dropna() / 1e6
            if len(v):
                out[name] = (float(v.min()), float(v.median()), float(v.max()), len(v))
    return out


def clock_text(c: tuple[float, float, float, int]) -> str:
    """``1,755-1,980 MHz (median 1,980; 48 launches)``: one of :func:`run_clocks`' values."""
    lo, mid, hi, n = c
    span = f"{lo:,.0f} MHz" if round(lo) == round(hi) else f"{lo:,.0f}-{hi:,.0f} MHz (median {mid:,.0f})"
    return f"{span}, over {n} profiled launch{'es' if n != 1 else ''}"


def device_table(manifest: dict, gpu_row: dict | None = None,
                 clocks: dict[str, tuple[float, float, float, int]] | None = None) -> pd.DataFrame:
    """Property / value rows from the manifest's ``gpu`` (and nvidia-smi record), the clocks the profiled launches
    ran at (``clocks``: :func:`run_clocks`), the measured ceilings, and Nsight Systems' TARGET_INFO_GPU row when
    given; properties the capture did not record are left out."""
    g = manifest.get("gpu") or {}
    smi = g.get("nvidia_smi") or {}
    rows = [("name", g.get("name")), ("compute capability", g.get("compute_capability")), ("SMs", g.get("sm_count")),
            ("L2 cache", _fmt(g.get("l2_bytes"), 2**20, "MiB")),
            ("shared memory per block (opt-in)", _fmt(g.get("shared_memory_per_block_optin"), 1024, "KiB")),
            ("shared memory per SM", _fmt(g.get("shared_memory_per_sm"), 1024, "KiB")),
            ("registers per SM", g.get("registers_per_sm")),
            ("memory", _fmt(g.get("total_memory_bytes"), 2**30, "GiB")),
            *((f"{name} clock while profiled (Nsight Compute)", clock_text(c)) for name, c in (clocks or {}).items()),
            ("SM clock when the GPU was recorded / max (nvidia-smi)",
             f"{smi['clocks.sm']} / {smi.get('clocks.max.sm')}" if "clocks.sm" in smi else None),
            ("memory clock when the GPU was recorded / max (nvidia-smi)",
             f"{smi['clocks.mem']} / {smi.get('clocks.max.mem')}" if "clocks.mem" in smi else None),
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


def measured_ceilings_table(manifest: dict) -> pd.DataFrame:
    """The measured ceilings for people: what ran, its size, its time and the rate it reached."""
    c = manifest.get("ceilings") or {}
    rows = []
    for k, v in c.items():
        if not isinstance(v, dict):
            continue
        rate = (f"{v['flop_per_s'] / 1e12:,.1f} TFLOP/s" if "flop_per_s" in v else
                f"{v['bytes_per_s'] / 1e12:.2f} TB/s" if "bytes_per_s" in v else
                f"{v['exp2_per_s'] / 1e12:.2f} T exp2/s" if "exp2_per_s" in v else "—")
        what = (f"matrix multiply {v['n']:,} × {v['n']:,} × {v['n']:,}" if "n" in v else
                f"copy of {v['bytes'] / 2**30:.2f} GiB" if "bytes" in v else v.get("what", ""))
        note = v.get("note", "")
        if "reason" in v:
            note = f"{v.get('status', 'not measured')}: {v['reason']}"
        elif "check" in v:
            note = f"checked: {v['check']}"
        rows.append({"ceiling": k, "what ran": what, "time [ms]": v.get("ms"), "rate": rate, "note": note})
    if not rows:
        raise NotApplicable("this capture measured no ceilings (no GEMM or copy run beside the profilers)")
    out = pd.DataFrame(rows)
    return out if out["note"].astype(bool).any() else out.drop(columns="note")


_OUTGROWS = "outgrows L2 at "


def working_set_table(cases: pd.DataFrame, l2_bytes: float, x: str | None = None) -> pd.DataFrame:
    """The work model's working set [MiB] of every case, one row per implementation × pass × every
    other shape field and one column per value of ``x`` (``x=<value>``; default: the sweep axis of the cases'
    problem), with the ``x`` at which it outgrows the L2 (log-log interpolation; NaN within the sweep: see
    ``onset note``). NotApplicable without a modeled working set or without ``x``."""
    if cases is None or not has_model(cases, "model_working_set"):
        raise NotApplicable("no modeled working set: the capture's cases declare no work model")
    x = problems.axis_for(cases, x)
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


def findings(manifest: dict, ws: pd.DataFrame | None = None, x: str | None = None,
             clocks: dict[str, tuple[float, float, float, int]] | None = None) -> list[str]:
    """The device page's findings: the GPU and its measured ceilings, the clocks its launches ran at
    (``clocks``: :func:`run_clocks`); where the modeled working sets outgrow the L2 (``ws``: a
    :func:`working_set_table`, along ``x``: default, the field it was laid out along), implementations with
    similar onsets grouped."""
    if x is None and ws is not None:
        x = next((c[len(_OUTGROWS):] for c in ws.columns if str(c).startswith(_OUTGROWS)), None)
    g = manifest.get("gpu") or {}
    meas = manifest.get("ceilings") or {}
    parts = [f"**{g.get('name', 'unknown GPU')}**"]
    facts = []
    if g.get("sm_count"):
        facts.append(f"{g['sm_count']} SMs")
    if isinstance(g.get("l2_bytes"), (int, float)):
        facts.append(f"{g['l2_bytes'] / 2**20:.0f} MiB L2")
    if isinstance(g.get("total_memory_bytes"), (int, float)):
        facts.append(f"{g['total_memory_bytes'] / 2**30:.0f} GiB memory")
    line = parts[0] + (": " + ", ".join(facts) if facts else "")
    m = []
    if isinstance(meas.get("copy_d2d"), dict) and meas["copy_d2d"].get("bytes_per_s"):
        m.append(f"{meas['copy_d2d']['bytes_per_s'] / 1e12:.2f} TB/s device copy")
    if isinstance(meas.get("gemm_fp16"), dict) and meas["gemm_fp16"].get("flop_per_s"):
        m.append(f"{meas['gemm_fp16']['flop_per_s'] / 1e12:,.0f} TFLOP/s FP16 GEMM")
    out = [line + (f"; measured in this capture: {', '.join(m)}." if m else ".")]
    if clocks:
        out.append("While profiled, its clocks ran at: " + "; ".join(f"{name} {clock_text(c)}" for name, c in clocks.items())
                   + " (Nsight Compute's sm__cycles_elapsed.avg.per_second and dram__cycles_elapsed.avg.per_second; "
                   "captured without locking the clocks).")
    col = f"{_OUTGROWS}{x}"
    if ws is not None and len(ws) and col in ws:
        first = ws.groupby(ws["variant"].astype(str), sort=False)[col].min()
        inside = [v for v, o in first.items() if pd.isna(o)]
        onsets = first.dropna().sort_values()
        groups: list[list[tuple[str, float]]] = []
        for v, o in onsets.items():
            if groups and o <= groups[-1][0][1] * 1.6:
                groups[-1].append((v, o))
            else:
                groups.append([(v, o)])
        txt = "; ".join(", ".join(v for v, _ in grp) + f" at {x}≈{grp[0][1]:,.0f}"
                        + (f"–{grp[-1][1]:,.0f}" if grp[-1][1] > grp[0][1] * 1.05 else "") for grp in groups)
        if txt:
            out.append(f"The modeled working set first outgrows the L2: {txt}.")
        if inside:
            out.append(f"Fits in the L2 over the whole sweep: {', '.join(inside)}.")
    return out
