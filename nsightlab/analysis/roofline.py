"""The hierarchical roofline: ceilings, one point per range and memory level, and the FLOP check.

Peaks come from the capture itself: Nsight Compute's ``.peak_sustained`` rates times the clock each
launch ran at (see :mod:`nsightlab.analysis.counters` for every recipe; the tensor peak is the dense one,
:func:`tensor_peak_derivation` says how it follows from the report), and the manifest's measured
ceilings where the capture made them: cuBLAS GEMMs and a copy, and the instruction-class ceilings of
:mod:`nsightlab.run.ceilings` (mma.sync, wgmma, MUFU exp2); never from a table of GPU specifications.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

from ..core.metrics import PEAKS
from ..problems import problem as problems
from ..run.ceilings import INSTRUCTION_KEYS
from .counters import (
    FLOP_TERMS,
    TENSOR_DENSE_FACTOR,
    TENSOR_DENSE_PEAK,
    NotApplicable,
    has_model,
    identity_columns,
    missing_message,
    require,
)

LEVELS = ("DRAM", "L2", "L1")
#: the compute and memory peaks kernel_work derives, with their labels
PEAK_LABELS = (("compute", "peak_fp32", "FP32 (FFMA)"), ("compute", "peak_fp16", "FP16 (HFMA2)"),
               ("compute", "peak_fp64", "FP64 (DFMA)"), ("compute", "peak_tensor", "Tensor FP16 dense"),
               ("memory", "peak_DRAM", "DRAM"), ("memory", "peak_L2", "L2"), ("memory", "peak_L1", "L1"))
#: the manifest's measured compute ceilings: key, label (a name starting "measured" is drawn dashed and is
#: never a range's "nearest roof": it is what some code reached, not what the hardware allows)
MEASURED_COMPUTE = (("gemm_fp16", "measured cuBLAS FP16 GEMM"), ("gemm_bf16", "measured cuBLAS BF16 GEMM"),
                    ("gemm_fp32", "measured cuBLAS FP32 GEMM"), ("mma_sync_fp16", "measured mma.sync FP16"),
                    ("mma_sync_bf16", "measured mma.sync BF16"), ("wgmma_fp16", "measured wgmma FP16"),
                    ("wgmma_bf16", "measured wgmma BF16"), ("wgmma_e4m3", "measured wgmma FP8 e4m3"))
#: the measured FP8 roofs: drawn only where a point passes every other compute roof or ran on a tensor path the
#: counters leave out (:func:`uncounted_tensor_work`)
FP8_ROOFS = ("measured wgmma FP8 e4m3",)
#: instruction-class ceilings added after the others: a capture from before them does not name them missing
LATER_INSTRUCTION_KEYS = ("wgmma_e4m3",)
#: the instruction-class ceilings for people
INSTRUCTION_LABELS = {"mma_sync_fp16": "mma.sync FP16", "mma_sync_bf16": "mma.sync BF16",
                      "wgmma_fp16": "wgmma FP16", "wgmma_bf16": "wgmma BF16", "wgmma_e4m3": "wgmma FP8 e4m3",
                      "mufu_ex2": "MUFU exp2"}


def _source(entry: dict) -> str:
    c = entry.get("config") or {}
    what = entry.get("what") or ""
    if "n" in entry:
        return f"torch.matmul (cuBLAS) {entry['n']}^3, this capture"
    launch = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in c.items() if k in ("blocks", "threads_per_block",
                                                                                     "warpgroups_per_block"))
    return f"{what}; {launch}; median of timed launches, checked against torch; this capture"


def nominal_sm_hz(work: pd.DataFrame, manifest: dict | None = None) -> tuple[float, str]:
    """The one SM clock a GPU's compute peaks are stated at: its maximum (``nvidia-smi``'s
    ``clocks.max.sm``, recorded in the manifest), else the highest clock a launch of the capture ran
    at; with where it comes from. NaN when neither is known."""
    smi = (((manifest or {}).get("gpu") or {}).get("nvidia_smi") or {}) if isinstance(manifest, dict) else {}
    m = re.match(r"\s*([\d.]+)\s*MHz", str(smi.get("clocks.max.sm", "")))
    if m and float(m.group(1)) > 0:
        return float(m.group(1)) * 1e6, "the GPU's maximum SM clock, nvidia-smi clocks.max.sm"
    hz = work["hz_sm"].dropna() if "hz_sm" in work else pd.Series(dtype=float)
    if len(hz):
        return float(hz.max()), "the highest SM clock a launch of this capture ran at (no nvidia-smi maximum recorded)"
    return float("nan"), ""


def clock_range(work: pd.DataFrame) -> str:
    """The SM clocks the capture's launches ran at, as text ("1.740–1.973 GHz over 56 launches")."""
    hz = work["hz_sm"].dropna() if "hz_sm" in work else pd.Series(dtype=float)
    if not len(hz):
        return "no recorded clock"
    return f"{hz.min() / 1e9:.3f}–{hz.max() / 1e9:.3f} GHz over {len(hz)} launches"


#: the dtype names of a case's ``dtype`` field, as the measured ceilings' keys spell them
_DTYPE_KEYS = {"float16": "fp16", "half": "fp16", "fp16": "fp16", "bfloat16": "bf16", "bf16": "bf16",
               "float32": "fp32", "fp32": "fp32"}


def _dtype_ok(key: str, points: pd.DataFrame | None) -> bool:
    """Whether a measured FP16/BF16 ceiling matches the dtypes of the points (FP32 ones always do:
    CUDA-core kernels accumulate in FP32 whatever their inputs)."""
    kind = key.rsplit("_", 1)[-1]
    if kind not in ("fp16", "bf16") or points is None or "dtype" not in points:
        return True
    have = {_DTYPE_KEYS.get(str(d).lower()) for d in points["dtype"].dropna().unique()}
    return not (have - {None}) or kind in have


#: a point whose counted FLOPs are under this share of its work model's, with no tensor FLOPs counted, did its products
#: on a tensor path the capture's metric list leaves out (FP8 or INT8)
UNCOUNTED_SHARE = 0.5


def uncounted_tensor_work(points: pd.DataFrame) -> pd.Series:
    """Per point: whether its useful FLOPs are mostly ones the counters did not see while they counted no tensor
    FLOPs, and its inputs are not bf16 (whose path has its own roofs): its products ran on a tensor path this capture
    does not count, FP8 or INT8, for which the measured wgmma FP8 e4m3 ceiling is the roof to read."""
    if not {"basis", "counted_over_model", "flop"} <= set(points.columns):
        return pd.Series(False, index=points.index)
    tensor = points["flop_tensor"].fillna(0) if "flop_tensor" in points else pd.Series(0.0, index=points.index)
    bf16 = (points["dtype"].astype(str).str.lower().map(_DTYPE_KEYS) == "bf16") if "dtype" in points else False
    return ((points["basis"] == "useful") & (points["counted_over_model"] < UNCOUNTED_SHARE)
            & (tensor <= 0.01 * points["flop"]) & ~bf16)


def ceilings(work: pd.DataFrame, manifest: dict | None = None, points: pd.DataFrame | None = None) -> pd.DataFrame:
    """The roofline's ceilings: compute in FLOP/s and bandwidth in B/s, each the median over the
    report's launches of Nsight's peak at the clock it recorded (``per_cycle``: the compute peak per
    SM-clock cycle, all SMs; the tensor peak is the dense one), plus the manifest's measured ceilings
    (``measured ...``: cuBLAS GEMMs, mma.sync, wgmma, the copy), plus the ceilings the cases' problem derives
    from what the capture measured (:attr:`nsightlab.problems.problem.Problem.ceilings`, given ``points``; the
    attention problem's softmax bound of each pass and head dimension from the MUFU exp2 rate), each holding
    only for the cases it names (``where``). Compute peaks of pipes no launch used (an FP64 peak in an FP16 study) are left
    out. NotApplicable if there is no ceiling at all."""
    rows = []
    used_pipes = {t for t in FLOP_TERMS if f"flop_{t}" in work and (work[f"flop_{t}"].fillna(0) > 0).any()}
    hz, hz_source = nominal_sm_hz(work, manifest)
    clock = (f" × {hz / 1e9:.3f} GHz ({hz_source}; the launches ran at {clock_range(work)}, and each range is "
             "compared with a peak at its own clock)" if np.isfinite(hz) else " × recorded clock (median)")
    for kind, col, label in PEAK_LABELS:
        v = work[col].dropna() if col in work else pd.Series(dtype=float)
        if not len(v):
            continue
        if col == "peak_fp64" and "fp64" not in used_pipes:
            continue
        per_cycle = float((work[col] / work["hz_sm"]).median()) if kind == "compute" else float("nan")
        value = per_cycle * hz if kind == "compute" and np.isfinite(hz) and np.isfinite(per_cycle) else float(v.median())
        source = "Nsight Compute peak per cycle" + clock if kind == "compute" else "Nsight Compute peak × recorded clock"
        if col == "peak_tensor":
            source = ("Nsight Compute dense (sparsity off) tensor peak per cycle" if _dense_in_report(work) else
                      f"Nsight Compute tensor-path peak per cycle × {TENSOR_DENSE_FACTOR:g} (dense)") + clock
        rows.append({"kind": kind, "name": label, "value": value, "per_cycle": per_cycle,
                     "source": source, "where": None})
    meas = (manifest or {}).get("ceilings") or {}
    for key, label in MEASURED_COMPUTE:
        if isinstance(meas.get(key), dict) and "flop_per_s" in meas[key] and _dtype_ok(key, points):
            rows.append({"kind": "compute", "name": label, "value": float(meas[key]["flop_per_s"]), "per_cycle": np.nan,
                         "source": _source(meas[key]), "where": None})
    # the FP8 roof only where some point needs it (work past every 16-bit roof) or may be its own (work on a tensor
    # path the counters leave out): elsewhere it would only stretch the axis over the points
    fp8 = [r for r in rows if r["name"] in FP8_ROOFS]
    others = max((r["value"] for r in rows if r["kind"] == "compute" and r["name"] not in FP8_ROOFS), default=0.0)
    if fp8 and (points is None or "flop_per_s" not in points
                or not ((points["flop_per_s"] > others).any() or uncounted_tensor_work(points).any())):
        rows = [r for r in rows if r["name"] not in FP8_ROOFS]
    problem = problems.of_manifest(manifest, [] if points is None else points.columns)
    if problem.ceilings is not None and points is not None:
        for c in problem.ceilings(meas, points):
            rows.append({"kind": "compute", "name": str(c["name"]), "value": float(c["value"]), "per_cycle": np.nan,
                         "source": str(c.get("source", "")), "where": c.get("where")})
    if isinstance(meas.get("read_stream"), dict) and "bytes_per_s" in meas["read_stream"]:
        rows.append({"kind": "memory", "name": "measured DRAM read", "value": float(meas["read_stream"]["bytes_per_s"]),
                     "per_cycle": np.nan, "source": f"{meas['read_stream'].get('bytes', 0) / 2**30:.0f} GiB read once "
                     "(16-byte non-allocating loads), this capture: the roof of a kernel that only reads", "where": None})
    if isinstance(meas.get("copy_d2d"), dict) and "bytes_per_s" in meas["copy_d2d"]:
        rows.append({"kind": "memory", "name": "measured D2D copy", "value": float(meas["copy_d2d"]["bytes_per_s"]),
                     "per_cycle": np.nan, "source": "device-to-device copy, read + write, this capture", "where": None})
    if not rows:
        msg = missing_message(work, ["peak_fp32", "peak_tensor", "peak_DRAM"]) or "no peak metric"
        raise NotApplicable(f"no roofline ceiling: {msg}, and the manifest records no measured ceilings")
    return pd.DataFrame(rows)


#: a roof's role on a figure: a limit no point of its kind may pass (a peak, or a measured rate of the same kind
#: of work), a pipe's peak (a limit only for work on that pipe), or a reference line (what some other code reached,
#: or a peak at a clock no range ran at), drawn and labelled as such
ROLES = ("limit", "pipe", "reference")
#: measured ceilings that the hardware defines as equal (Hopper's FP16 and BF16 tensor rates): one band each
_EQUAL_PAIRS = (("measured cuBLAS FP16 GEMM", "measured cuBLAS BF16 GEMM", "cuBLAS FP16/BF16 GEMM"),
                ("measured mma.sync FP16", "measured mma.sync BF16", "mma.sync FP16/BF16"),
                ("measured wgmma FP16", "measured wgmma BF16", "wgmma FP16/BF16"))
_ROOF_SHORT = {"Tensor FP16 dense": "tensor dense", "FP16 (HFMA2)": "HFMA2", "FP32 (FFMA)": "FFMA",
               "FP64 (DFMA)": "DFMA"}


def _tflops(v: float) -> str:
    return f"{v / 1e12:,.0f}" if v >= 1e13 else f"{v / 1e12:,.1f}"


def range_clock(points: pd.DataFrame | None) -> float:
    """The clock a figure's compute peaks are drawn at: the highest SM clock a range of ``points`` ran at
    (a peak at it bounds every range; a range that ran slower has a lower peak of its own). NaN if unknown."""
    if points is None or "hz_sm" not in points:
        return float("nan")
    hz = pd.to_numeric(points["hz_sm"], errors="coerce").dropna()
    return float(hz.max()) if len(hz) else float("nan")


def roofs(ceil: pd.DataFrame, points: pd.DataFrame | None = None) -> pd.DataFrame:
    """The roofs a roofline draws, each with its role (:data:`ROLES`):

    - Nsight's compute peaks per cycle at the highest clock a range of ``points`` ran at (``clock_hz``; the
      capture's nominal value, at the GPU's maximum clock, becomes a reference line beside the top one
      where it differs): the top one a limit, the others limits of their pipe only;
    - the memory peaks (DRAM, L2, L1) and a measured read-only DRAM stream: limits of their level;
    - measured rates of other code (cuBLAS, mma.sync, wgmma, the MUFU softmax bound, the read + write copy):
      references; those the hardware defines as equal (FP16 and BF16 on Hopper) merged into one band
      (``lo``..``hi``, the spread in the label).

    Columns: kind, name, label, value (the line; a band's top), lo, hi, role, level (memory roofs), clock_hz,
    where, source."""
    hz = range_clock(points)
    rows: list[dict[str, Any]] = []
    comp = ceil[(ceil["kind"] == "compute") & ~ceil["name"].str.startswith("measured")]
    top = comp["value"].idxmax() if len(comp) else None
    for i, c in ceil.iterrows():
        name, kind, v = str(c["name"]), str(c["kind"]), float(c["value"])
        base = {"kind": kind, "name": name, "lo": v, "hi": v, "value": v, "level": None, "clock_hz": np.nan,
                "where": c.get("where") if isinstance(c.get("where"), dict) and c.get("where") else None}
        per_cycle = c.get("per_cycle")
        if kind == "compute" and not name.startswith("measured"):
            short = _ROOF_SHORT.get(name, name)
            if isinstance(per_cycle, float) and np.isfinite(per_cycle) and np.isfinite(hz):
                at = per_cycle * hz
                rows.append({**base, "value": at, "lo": at, "hi": at, "clock_hz": hz,
                             "role": "limit" if i == top else "pipe",
                             "label": f"{short} {_tflops(at)} at {hz / 1e9:.2f} GHz"})
                if i == top and abs(v / at - 1) > 0.01:
                    rows.append({**base, "name": f"{name} at {v / per_cycle / 1e9:.2f} GHz", "role": "reference",
                                 "label": f"{short} {_tflops(v)} at {v / per_cycle / 1e9:.2f} GHz (max clock, ref.)"})
            else:
                rows.append({**base, "role": "limit" if i == top else "pipe", "label": f"{short} {_tflops(v)}"})
        elif kind == "memory":
            level = name if name in LEVELS else ("DRAM" if "DRAM" in name or "copy" in name else None)
            if name == "measured D2D copy":
                rows.append({**base, "level": level, "role": "reference",
                             "label": f"copy {v / 1e12:.2f} TB/s (read+write, ref.)"})
            else:
                rows.append({**base, "level": level, "role": "limit",
                             "label": f"{name.removeprefix('measured ')} {v / 1e12:.2f} TB/s"})
        else:
            short = "MUFU exp2" if "MUFU" in name else name.removeprefix("measured ")
            rows.append({**base, "role": "reference", "label": f"{short} {_tflops(v)} (ref.)"})
    out = pd.DataFrame(rows, columns=["kind", "name", "label", "value", "lo", "hi", "role", "level", "clock_hz",
                                      "where"])
    for a, b, merged in _EQUAL_PAIRS:
        if {a, b} <= set(out["name"]):
            pair = out[out["name"].isin([a, b])]
            lo, hi = float(pair["value"].min()), float(pair["value"].max())
            spread = hi / lo - 1
            label = (f"{merged} {_tflops(lo)}–{_tflops(hi)} (±{spread / 2:.0%}, ref.)" if spread >= 0.005 else
                     f"{merged} {_tflops(hi)} (ref.)")
            row = {**pair.iloc[0].to_dict(), "name": f"measured {merged}", "label": label, "value": hi, "lo": lo,
                   "hi": hi}
            out = pd.concat([out[~out["name"].isin([a, b])], pd.DataFrame([row])], ignore_index=True)
    return out


def instruction_status(manifest: dict | None) -> tuple[list[str], str]:
    """What the capture says about the instruction-class ceilings: (one line per ceiling not measured,
    with its reason; a short note for a figure, "" when all were measured)."""
    meas = (manifest or {}).get("ceilings") or {}
    if not any(k in meas for k in INSTRUCTION_KEYS):
        return (["The mma.sync, wgmma and MUFU exp2 ceilings were not measured in this capture (it predates them; "
                 "`python -m nsightlab.run.ceilings` measures them in every capture's ceilings step)."],
                "not measured in this capture: the mma.sync, wgmma and MUFU exp2 ceilings")
    lines, missing = [], []
    for key in INSTRUCTION_KEYS:
        e = meas.get(key)
        if isinstance(e, dict) and ("flop_per_s" in e or "exp2_per_s" in e):
            continue
        if e is None and key in LATER_INSTRUCTION_KEYS:  # the capture predates it: nothing it tried and missed
            continue
        reason = e.get("reason", "no result") if isinstance(e, dict) else "not in this capture's ceilings"
        lines.append(f"{INSTRUCTION_LABELS[key]}: not measured ({reason}).")
        missing.append(INSTRUCTION_LABELS[key])
    return lines, ("not measured in this capture: " + ", ".join(missing)) if missing else ""


def tensor_peak_derivation(work: pd.DataFrame, manifest: dict | None = None, ranges: pd.DataFrame | None = None) -> str:
    """How the dense tensor peak follows from this report's own counters and clocks, as text (markdown)."""
    if "peak_tensor" not in work or work["peak_tensor"].isna().all():
        return ("**Tensor peak:** not in this report (" + (missing_message(work, ["peak_tensor"]) or "") + ").")
    sms = work["sm_count"].dropna() if "sm_count" in work else pd.Series(dtype=float)
    n_sm = int(sms.median()) if len(sms) else (manifest or {}).get("gpu", {}).get("sm_count")
    hz, hz_source = nominal_sm_hz(work, manifest)
    per_cycle_all = float((work["peak_tensor"] / work["hz_sm"]).median())
    value = per_cycle_all * hz
    clock = (f"{hz / 1e9:.3f} GHz ({hz_source}). One peak per GPU, whatever clock a capture's launches ran at "
             f"(here {clock_range(work)}, from `sm__cycles_elapsed.avg.per_second`): a range's share of it is "
             "taken at the range's own clock, so a kernel that ran slower clocks is not counted as less efficient")
    if _dense_in_report(work):
        return (f"**Dense tensor peak, from this report:** `{TENSOR_DENSE_PEAK}` = {per_cycle_all:,.0f} FLOP per cycle "
                f"(all SMs) × {clock} = **{value / 1e12:,.0f} TFLOP/s**.")
    path = work["peak_tensor_path"] / work["hz_sm"] if "peak_tensor_path" in work else pd.Series(dtype=float)
    path_cycle = float(path.median()) if path.notna().any() else float("nan")
    unit, per = ("SM per cycle", path_cycle / n_sm) if n_sm else ("cycle (all SMs)", path_cycle)
    ratio = _tensor_count_ratio(ranges)
    txt = (f"**Dense tensor peak, derived from this report.** Nsight Compute's `{PEAKS['tensor_fp16']}` is "
           f"{path_cycle:,.0f} operations per cycle" + (f" on {n_sm} SMs (`launch__sm_count`): {per:,.0f} per SM per "
                                                        "cycle" if n_sm else "") + ". "
           "The counter counts 2 operations per multiply-add"
           + (f" (here the ranges whose counted FLOPs are all tensor-core ones count {ratio:.3f}× their work "
              "model's 2·M·N·K, median)" if ratio is not None else "")
           + ", and its peak is the tensor path's rate with 2:4 structured sparsity, twice the dense rate. Dense: "
           f"{per:,.0f} × {TENSOR_DENSE_FACTOR:g} = {per * TENSOR_DENSE_FACTOR:,.0f} FLOP per {unit}"
           + (f" × {n_sm} SMs" if n_sm else "") + f" × {clock} = **{value / 1e12:,.0f} TFLOP/s**, drawn as a "
           "reference line; the limit on the figure is the same peak at the highest clock a range ran at. Nsight Compute's own tensor roof, unhalved, would be "
           f"{path_cycle * hz / 1e12:,.0f} TFLOP/s.")
    cc = str((manifest or {}).get("gpu", {}).get("compute_capability", ""))
    if cc == "9.0" and n_sm and abs(per * TENSOR_DENSE_FACTOR - 4096) < 1:
        txt += (" Cross-check (not an input): 4,096 FLOP per SM per cycle is NVIDIA's published dense FP16 rate for "
                "Hopper, e.g. the H100 SXM's 989.4 TFLOP/s = 4,096 × 132 SMs × 1.83 GHz.")
    return txt


def _dense_in_report(work: pd.DataFrame) -> bool:
    """Whether some launch's tensor peak came from the report's dense (sparsity off) peak metric."""
    used = work.attrs.get("used", {}).get("peak_tensor", {})
    return any(text.startswith(TENSOR_DENSE_PEAK) and n for text, n in used.items())


def applies(where: Any, points: pd.DataFrame) -> bool:
    """Whether a ceiling that holds only for some cases (``where``: field -> value) holds for every
    point of ``points`` (a ceiling without ``where`` holds everywhere)."""
    if not isinstance(where, dict) or not where:
        return True
    if points.empty:
        return False
    for field, value in where.items():
        if field not in points or set(points[field].dropna().unique()) != {value}:
            return False
    return True


def _tensor_count_ratio(ranges: pd.DataFrame | None) -> float | None:
    """Median counted / modeled FLOPs over ranges whose counted FLOPs are ≥ 99% tensor-core ones
    (None without such ranges or a work model)."""
    if ranges is None or not has_model(ranges) or "flop_tensor" not in ranges:
        return None
    r = ranges[(ranges["flop_tensor"].fillna(0) >= 0.99 * ranges["flop"].fillna(np.inf))]
    r = r[pd.to_numeric(r["model_flop"], errors="coerce") > 0]
    if r.empty:
        return None
    return float((r["flop_tensor"] / r["model_flop"].astype(float)).median())


def roofline_points(rng: pd.DataFrame) -> pd.DataFrame:
    """One point per range and memory level: arithmetic intensity (FLOP / bytes moved at that level)
    and FLOP/s (FLOP / the range's kernel time). The FLOPs are the *useful* ones, the work model's
    (``model_flop``, from :func:`nsightlab.analysis.counters.attach_model`), where the range has one, so
    that two implementations of one case rank as their times do; else the counted ones (``basis``
    says which). The counted FLOP/s ride along (``counted_flop_per_s``, ``counted_over_model``):
    a kernel that executes more than the model (recomputation, masked or padded tiles) is fast on
    the counters without being fast. NotApplicable, naming the missing metrics, without FLOPs,
    durations or bytes at any level."""
    require(rng, "flop", "seconds", what="the roofline")
    levels = [lv for lv in LEVELS if f"bytes_{lv}" in rng and rng[f"bytes_{lv}"].notna().any()]
    if not levels:
        require(rng, "bytes_DRAM", "bytes_L2", "bytes_L1", what="the roofline")
    keep = ["range", *identity_columns(rng), "flop_counters", *[f"flop_{t}" for t in FLOP_TERMS], "hz_sm"]
    model = (pd.to_numeric(rng["model_flop"], errors="coerce") if "model_flop" in rng
             else pd.Series(np.nan, index=rng.index))
    rows = []
    for (_, r), m in zip(rng.iterrows(), model, strict=True):
        useful = bool(np.isfinite(m) and m > 0)
        used = float(m) if useful else r["flop"]
        for level in levels:
            b = r[f"bytes_{level}"]
            if not (b > 0 and r["seconds"] > 0 and used > 0):
                continue
            counted = r["flop"] if r["flop"] == r["flop"] else np.nan
            rows.append({**{k: r[k] for k in keep if k in r}, "level": level, "intensity": used / b,
                         "flop_per_s": used / r["seconds"], "bytes": b, "flop": used, "ms": r["seconds"] * 1e3,
                         "basis": "useful" if useful else "counted", "counted_flop": counted,
                         "counted_flop_per_s": counted / r["seconds"],
                         "counted_over_model": counted / m if useful else np.nan})
    if not rows:
        raise NotApplicable("no range has FLOPs, bytes and a duration above zero (nothing to place)")
    return pd.DataFrame(rows)


def basis_text(points: pd.DataFrame) -> str:
    """What the points' FLOP/s are, for an axis title or a note."""
    bases = set(points["basis"]) if "basis" in points else {"counted"}
    if bases == {"useful"}:
        return "useful FLOP/s: the work model's FLOPs over the measured time"
    if bases == {"counted"}:
        return "counted FLOP/s: the FLOPs Nsight Compute counted over the measured time (no work model)"
    return "useful FLOP/s (the work model's) where a case has a work model, counted FLOP/s elsewhere"


def _share_of_peak(flop_per_s: float, hz: Any, peak: float, per_cycle: Any) -> float:
    """A range's share of a compute peak, at the clock the range ran at when both are known."""
    if isinstance(per_cycle, (int, float)) and np.isfinite(per_cycle) and per_cycle > 0 and \
            isinstance(hz, (int, float)) and np.isfinite(hz) and hz > 0:
        return flop_per_s / (per_cycle * hz)
    return flop_per_s / peak


def attainable(intensity: float | np.ndarray, peak_flops: float, peak_bw: float) -> Any:
    """The roofline: min(compute peak, bandwidth × intensity)."""
    return np.minimum(peak_flops, peak_bw * np.asarray(intensity, dtype=float))


# --------------------------------------------------------------------------- counted vs modeled FLOPs


def flop_check(rng: pd.DataFrame, tolerance: float = 0.10) -> pd.DataFrame:
    """The work model's FLOPs (``model_flop``, attached by :func:`nsightlab.analysis.counters.attach_model`)
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
    out["explanation"] = [explain(r, tolerance, _sibling_text(r, out, tolerance)) for _, r in out.iterrows()]
    return out.reset_index(drop=True)


def _sibling_text(r: pd.Series, fc: pd.DataFrame, tolerance: float) -> str:
    """What the range's siblings say about its excess FLOPs, computed: ranges of the same implementation
    whose fields differ only in ``pass`` or in one yes/no field (a mask) and whose counters agree
    with their own model. The range's counted FLOPs as a multiple of the sibling's, against the
    multiple the work model credits, say how many of the sibling's operations it performs beyond the
    model (a backward pass recomputing more than the model's forward products; a masked case computing
    the masked part). "" without such a sibling or without excess."""
    ratio = r["counted_over_model"]
    if not (np.isfinite(ratio) and ratio > 1 + tolerance):
        return ""
    fields = [c for c in identity_columns(fc) if c in fc and c not in ("options",)]
    from .counters import option_columns

    fields = [c for c in fields if c not in option_columns(fc)]
    out = []
    for f in fields:
        if f == "variant" or f not in r.index:
            continue
        others = [c for c in fields if c != f]
        same = np.ones(len(fc), dtype=bool)
        for c in others:
            same &= (fc[c].astype(str) == str(r[c])).to_numpy()
        sib = fc[same & (fc[f].astype(str) != str(r[f])).to_numpy() & ~fc["flag"].to_numpy()]
        if sib.empty or not (f == "pass" or set(fc[f].dropna().astype(str)) <= {"True", "False", "0", "1"}):
            continue
        s = sib.iloc[0]
        counted, credited = r["flop"] / s["flop"], r["model_flop"] / s["model_flop"]
        if not counted > credited * (1 + tolerance / 2):
            continue  # the sibling does not account for this range's excess
        what = f"the {s[f]} pass" if f == "pass" else f"the same case with {f}={plain(s[f])}"
        txt = (f"it counts {counted:.2f}× the FLOPs of {what} (which agrees with its model) where the model credits "
               f"{credited:.2f}×")
        if f != "pass" and credited < 1 < 1 / credited and counted > credited:
            # a masked case computed by tiles: whole tiles along the mask's edge add 1/n of the unmasked
            # work per n tiles, so the excess names the tile
            n_field = next((c for c in problems.for_fields(r.index).tile_fields
                            if c in r.index and isinstance(r[c], (int, np.integer))), None)
            excess = counted / credited - 1
            if n_field and excess > 0:
                tile = r[n_field] * excess
                pow2 = 2 ** round(math.log2(tile)) if tile > 0 else 0
                if pow2 >= 16 and abs(tile / pow2 - 1) < 0.1:
                    txt += (f"; the excess ({excess:.1%}) is what computing whole tiles of {pow2} along the mask's "
                            f"edge adds at {n_field}={r[n_field]}")
        elif f == "pass":
            txt += f": {counted - credited:.2f}× {what}'s operations beyond the model (recomputed or redundant products)"
        out.append(txt)
    return "; ".join(out)


def plain(v: object) -> str:
    return str(v)


ALL_COUNTERS = tuple(k for parts in FLOP_TERMS.values() for k, _ in parts)


def explain(r: pd.Series, tolerance: float = 0.10, siblings: str = "") -> str:
    """Why counted and modeled FLOPs differ, computed from the row's counters and columns: the tensor
    and other shares of the excess, what siblings of the range say (``siblings``, from
    :func:`flop_check`), ``trait_materializes``, a field the problem's kernels tile along
    (:attr:`nsightlab.problems.problem.Problem.tile_fields`) not a multiple of 64, and the FLOP counters the
    capture lacks. Never from an implementation's name."""
    ratio = r["counted_over_model"]
    if not np.isfinite(ratio):
        return "no counted FLOPs"
    if abs(ratio - 1) <= tolerance:
        return f"agrees within {tolerance:.0%}"
    flop = r.get("flop", 0) or 0
    tensor = r.get("flop_tensor", 0) or 0
    tensor = 0.0 if tensor != tensor else float(tensor)
    tensor_share = tensor / flop if flop else 0.0
    tiled_values = [(f, r.get(f)) for f in problems.for_fields(r.index).tile_fields]
    off_grid = next(((f, int(v)) for f, v in tiled_values if isinstance(v, (int, float, np.integer, np.floating))
                     and not isinstance(v, (bool, np.bool_)) and np.isfinite(v) and int(v) % 64), None)
    parts = []
    if ratio > 1:
        model = float(r["model_flop"])
        parts.append(f"tensor-core FLOPs {tensor / model:.2f}× the model, other FLOPs {(flop - tensor) / model:.2f}×"
                     + (f" ({r.get('pass')} pass)" if r.get("pass") else ""))
        if siblings:
            parts.append(siblings)
        if _true(r.get("trait_materializes")):
            parts.append("materializes intermediates: elementwise arithmetic on every stored element (e.g. a softmax's "
                         "max, exp, sum and scaling) counts as FP32 instructions")
        elif tensor_share < 0.5:
            parts.append(f"mostly CUDA-core arithmetic ({1 - tensor_share:.0%} of counted FLOPs off the tensor pipe): "
                         "elementwise work beyond the model's products adds FP32 instructions")
        if off_grid is not None:
            parts.append(f"{off_grid[0]}={off_grid[1]} is not a multiple of 64: padded tiles are computed and masked")
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
    """``f=v`` per field; a yes/no field (its problem's boolean parameter) named where true, left out where false."""
    yes_no = problems.for_fields(r.index).yes_no_fields
    out = []
    for f in fields:
        v = r.get(f)
        if v is None or (isinstance(v, float) and np.isnan(v)) or v == "":
            continue
        if f in yes_no or isinstance(v, (bool, np.bool_)):
            out.append(f if _true(v) else "")
        elif f == "pass":
            out.append(str(v))
        else:
            out.append(f"{f}={int(v) if isinstance(v, float) and v.is_integer() else v}")
    return ", ".join(x for x in out if x)


#: a range whose useful FLOP/s exceed the peak of the pipe that did most of its counted FLOPs by more than this
#: did its work on a path the capture does not count (findings says so instead of naming a nearest roof)
UNCOUNTED_PATH = 1.05


def nearest_roof(points: pd.DataFrame, ceil: pd.DataFrame) -> pd.DataFrame:
    """Per range: its achieved fraction of every roof (each level's bandwidth: bytes/s over the
    level's peak; compute: FLOP/s over the Nsight peak of the pipe that did most of its counted
    FLOPs, else the highest one) and the nearest one (``nearest``, ``fraction``)."""
    peaks = {r["name"]: r["value"] for _, r in ceil.iterrows() if not str(r["name"]).startswith("measured")}
    per_cycle = {r["name"]: r.get("per_cycle") for _, r in ceil.iterrows()}
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
        name = name if name in peaks else top_name
        if name:
            fr[f"{name} peak"] = _share_of_peak(first["flop_per_s"], first.get("hz_sm"), peaks[name], per_cycle.get(name))
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
    if "where" in comp:  # the shares of the roofs that hold everywhere (the MUFU bounds have their own section)
        comp = comp[comp["where"].isna()]
    clock = best.get("hz_sm")
    at_clock = (f" at the {clock / 1e9:.2f} GHz it ran at" if isinstance(clock, float) and np.isfinite(clock) else "")
    shares = [f"{_share_of_peak(best['flop_per_s'], clock, c['value'], c.get('per_cycle')):.0%} of {c['name']}"
              + (at_clock if np.isfinite(c.get("per_cycle", np.nan)) else "")
              for _, c in comp.sort_values("value", ascending=False).iterrows()]
    useful = best.get("basis") == "useful"
    counted = best.get("counted_flop_per_s")
    extra = []
    if shares:
        extra.append(", ".join(shares[:2]))
    if useful and isinstance(counted, float) and np.isfinite(counted):
        extra.append(f"the counters saw {counted / 1e12:,.0f}")
    where = _fields_text(best, fields)
    out.append(f"Fastest range: **{best[label]}**{f' ({where})' if where else ''} at "
               f"{best['flop_per_s'] / 1e12:,.0f} {'useful ' if useful else ''}TFLOP/s"
               + (f" ({'; '.join(extra)})" if extra else "") + ".")
    near = nearest_roof(points, ceil)
    if len(near):
        top = near.loc[near.groupby(near[label].astype(str), sort=False)["flop_per_s"].idxmax()]
        top = top.sort_values("flop_per_s", ascending=False)
        # above the peak of the pipe its counters saw: the work ran on a path this capture does not count (an FP8,
        # INT8 or bf16 tensor path: the metric list counts the fp16 one), so no roof here is its own
        over = (top["fraction"] > UNCOUNTED_PATH) & top["nearest"].str.endswith(" peak")
        txt = ", ".join(f"{r[label]} {r['fraction']:.0%} of {r['nearest']}" for _, r in top[~over].head(8).iterrows())
        if txt:
            out.append(f"Nearest roof at each one's fastest range: {txt}"
                       + (f" (and {int((~over).sum()) - 8} more)" if (~over).sum() > 8 else "") + ".")
        fp8 = ceil[ceil["name"].isin(FP8_ROOFS)]
        for _, r in top[over].iterrows():
            own = (f"; if that path is FP8, its roof is the {fp8['name'].iloc[0]} ceiling drawn here "
                   f"({fp8['value'].iloc[0] / 1e12:,.0f} TFLOP/s): {r['flop_per_s'] / fp8['value'].iloc[0]:.0%} of it"
                   if len(fp8) else ", so none of the roofs drawn is its own")
            out.append(f"{r[label]}: {r['flop_per_s'] / 1e12:,.0f} useful TFLOP/s, {r['fraction']:.0%} of "
                       f"{r['nearest']}, the pipe that did most of its counted FLOPs: its work ran on a path these "
                       "counters do not count (the capture counts FP32, FP16 and the fp16 tensor path; an FP8, INT8 or "
                       f"bf16 tensor path is not among them){own}.")
    line = instruction_finding(points, ceil, label)
    if line:
        out.append(line)
    if fc is not None and len(fc):
        n_ok = int((~fc["flag"]).sum())
        more = int((fc["counted_over_model"] > 1.1).sum())
        out.append(f"Counted FLOPs agree with the work model within 10% for {n_ok} of {len(fc)} ranges"
                   + (f"; {more} count more than the model (ringed on the roofline, which plots the model's useful "
                      "FLOPs; the last section says where the excess comes from)" if more else "") + ".")
    return out


def instruction_finding(points: pd.DataFrame, ceil: pd.DataFrame, label: str = "variant") -> str | None:
    """Each tensor-core implementation's fastest range against the measured mma.sync ceiling, and
    which go above it (only wgmma lets a kernel pass it); None when mma.sync was not measured."""
    named = dict(zip(ceil["name"], ceil["value"], strict=True))
    mma = max((named.get(f"measured mma.sync {t}", 0.0) for t in ("FP16", "BF16")), default=0.0)
    if not mma or points.empty:
        return None
    wg = max((named.get(f"measured wgmma {t}", 0.0) for t in ("FP16", "BF16")), default=0.0)
    per = points.loc[points.groupby(points[label].astype(str), sort=False)["flop_per_s"].idxmax()]
    if {"flop_tensor", "flop"} <= set(per):  # kernels whose counted FLOPs are mostly tensor-core ones
        per = per[per["flop_tensor"].fillna(0) >= 0.5 * per["flop"]]
    tensor = per
    tensor = tensor.sort_values("flop_per_s", ascending=False)
    if tensor.empty:
        return None
    txt = ", ".join(f"{r[label]} {r['flop_per_s'] / mma:.0%}" for _, r in tensor.head(6).iterrows())
    above = [str(r[label]) for _, r in tensor.iterrows() if r["flop_per_s"] > mma]
    wg_txt = (f"wgmma reaches {wg / 1e12:,.0f} TFLOP/s, {wg / mma:.2f}× mma.sync" if wg else
              "wgmma: not measured in this capture")
    return (f"Against the measured mma.sync ceiling ({mma / 1e12:,.0f} TFLOP/s), at each tensor-core implementation's "
            f"fastest range: {txt}" + (f"; above it: {', '.join(above)}" if above else "")
            + f" ({wg_txt}).")


def views(points: pd.DataFrame, size_by: str | None = None, label: str = "variant",
          max_rows: int = 4, max_figures: int = 4) -> list[tuple[str, pd.DataFrame, str | None]]:
    """How to lay a capture's roofline out: (title, points, facet row field) per figure. Pass goes
    in the columns; the first other field that varies (2..``max_rows`` values; not ``size_by``,
    ``label`` or an option) in the rows; any further varying field splits the figures, unless the
    fields do not vary as a cross product (a sweep of several grids: fewer groups than the product of
    their values) and splitting would make more than ``max_figures`` figures: their few points each
    would be scattered over many figures, so they share one instead, each point naming its fields in
    its hover."""
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
    cross = math.prod(points[c].nunique(dropna=False) for c in rest)
    if len(out) > max_figures and len(out) < cross:
        return [("every range (" + ", ".join(rest) + " in each point's hover)", points, row)]
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
    if "where" in ceil and ceil["where"].notna().any():
        out.insert(2, "holds for", [", ".join(f"{k}={v}" for k, v in w.items()) if isinstance(w, dict) else "all"
                                    for w in ceil["where"]])
    return out



def caveats(manifest: dict | None, points: pd.DataFrame | None = None) -> list[str]:
    """What changes the meaning of this capture's roofline, in words for the page: how Nsight Compute
    treated the caches between kernels, and what the L1 level counts."""
    man = manifest if isinstance(manifest, dict) else {}
    ncu = man.get("ncu") or man.get("deep") or {}
    cache = ncu.get("cache_control") if isinstance(ncu, dict) else None
    if cache is None and man.get("origin", "captured") == "captured" and ncu:
        cache = "all"  # `nsightlab capture` has always passed --cache-control all (nsightlab.run.capture)
    out = []
    if cache == "all":
        out.append("**Caches flushed before every kernel** (`ncu --cache-control all`): each profiled kernel starts "
                   "with a cold L2, so its DRAM bytes are a cold start's, and reuse across kernels (one launch finding "
                   "in L2 what the previous one left) cannot appear here; the nsys timings are of warm runs.")
    elif cache == "none":
        out.append("**Caches not flushed between kernels** (`ncu --cache-control none`): a kernel may find its inputs "
                   "in L2, left by the launch before it, so its DRAM bytes can be below a cold start's.")
    else:
        out.append("**Cache control between kernels: not recorded** for this capture (Nsight Compute's default "
                   "flushes every cache before each kernel).")
    if points is None or "L1" in set(points.get("level", [])):
        out.append("**What the L1 level counts:** the bytes of global and local loads and stores through the LSU "
                   "(`l1tex__..._mem_lgds`). Data a TMA copy (`cp.async.bulk`) brings into shared memory, and "
                   "operands `wgmma` reads straight from shared memory, are not in it: a TMA/wgmma kernel's L1 point "
                   "sits far to the right of where its shared-memory traffic would put it.")
    return out
