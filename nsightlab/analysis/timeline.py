"""Timelines (Nsight Systems): GPU time per NVTX range, launch gaps, throughput, comparisons.

Throughput needs FLOPs: the work model's (``model_flop``) where the capture declares one, else the
FLOPs Nsight Compute counted for the same range in the same capture, else none; every row says
which in ``flop_source``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ..core.text import plain_value
from ..problems import problem as problems
from .counters import (
    NotApplicable,
    attach_model,
    has_model,
    identity_columns,
    matching,
    option_columns,
    range_columns,
    sources_text,
)

TIMES = ["gpu_ms", "wall_ms", "span_ms", "gap_ms", "kernels"]


def busy_and_gaps(starts: np.ndarray, ends: np.ndarray) -> tuple[float, np.ndarray]:
    """Of kernels sorted by start: the time at least one of them ran, and the idle gaps between them. Kernels
    that overlap count once: a kernel launched dependent on the one before it (programmatic dependent launch,
    sm_90) starts before that one ends, and adding up durations would count the overlap twice."""
    reach = np.maximum.accumulate(ends)  # the latest end so far
    gaps = np.clip(starts[1:] - reach[:-1], 0, None)
    return float(reach[-1] - starts[0] - gaps.sum()), gaps


def busy_ms(kernels: pd.DataFrame) -> pd.Series:
    """Per ``range_id`` of ``kernels`` (start, end in ns): the milliseconds at least one of its kernels ran
    (:func:`busy_and_gaps`)."""
    k = kernels.sort_values("start")
    return pd.Series({rid: busy_and_gaps(g["start"].to_numpy(), g["end"].to_numpy())[0] / 1e6
                      for rid, g in k.groupby("range_id")}, dtype=float)


def range_timing(kernels: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """Per range instance that launched kernels: wall time, GPU time (the time at least one of its kernels
    ran: :func:`busy_and_gaps`), kernel count, span (first kernel start to last end) and the launch gaps
    (GPU idle time between consecutive kernels of the range). NotApplicable if no kernel was launched inside
    a range."""
    k = kernels[kernels["range_id"] >= 0].sort_values("start") if "range_id" in kernels else kernels.iloc[0:0]
    if k.empty:
        raise NotApplicable("no kernel was launched inside an NVTX range (nothing to time per range)")
    fields = range_columns(ranges)
    rows = []
    for rid, grp in k.groupby("range_id"):
        r = ranges.loc[rid]
        starts, ends = grp["start"].to_numpy(), grp["end"].to_numpy()
        busy, gaps = busy_and_gaps(starts, ends)
        rows.append({**{c: r[c] for c in fields}, "range_id": rid, "wall_ms": r["ms"],
                     "gpu_ms": busy / 1e6, "span_ms": float(ends.max() - starts.min()) / 1e6,
                     "kernels": len(grp), "gap_ms": float(gaps.sum()) / 1e6,
                     "max_gap_us": float(gaps.max()) / 1e3 if len(gaps) else 0.0})
    return pd.DataFrame(rows)


def timing_summary(rt: pd.DataFrame, cases: pd.DataFrame | None = None, counted: pd.DataFrame | None = None) -> pd.DataFrame:
    """Median over the repeated instances of each range; ``tflops`` = FLOPs / GPU time, with
    ``flop_source``: "work model: <source>" (``model_flop`` from ``cases`` or already in ``rt``),
    else "hardware counters" (``counted``: a per_range frame of the same capture's Nsight Compute
    report, matched by range name), else "none" (tflops NaN)."""
    fields = [c for c in range_columns(rt) if c != "range"]
    g = rt.groupby("range", sort=False)
    out = g[TIMES].median().reset_index()
    first = g[fields].first().reset_index(drop=True)
    out = pd.concat([out[["range"]], first, out.drop(columns="range")], axis=1)
    out["iters"] = g.size().to_numpy()
    if cases is not None or "model_flop" not in out:
        out = attach_model(out, cases)
    flop = pd.to_numeric(out["model_flop"], errors="coerce")
    source = pd.Series(np.where(flop.notna(), "work model: " + out["model_source"].astype(str), ""), index=out.index)
    if counted is not None and "flop" in counted and len(counted):
        hw = out["range"].map(counted.drop_duplicates("range").set_index("range")["flop"])
        use = flop.isna() & hw.notna() & (hw > 0)
        flop = flop.where(~use, hw)
        source[use] = "hardware counters (Nsight Compute, same capture)"
    source[source == ""] = "none"
    out["flop_used"] = flop
    out["flop_source"] = source
    out["tflops"] = flop / (out["gpu_ms"] * 1e-3) / 1e12
    return out


def flop_sources(summary: pd.DataFrame) -> str:
    """One line for the page: which FLOP source the throughputs use, with counts."""
    return sources_text(summary["flop_source"], "range")


def config_columns(summary: pd.DataFrame) -> list[str]:
    """The fields that define a configuration across implementations: every decoded field but the
    label and the options (which belong to an implementation)."""
    drop = {"variant", "options", *option_columns(summary)}
    return [c for c in identity_columns(summary) if c not in drop]


def pick_reference(summary: pd.DataFrame) -> str:
    """The implementation fastest (least GPU time) in the most configurations (ties: by name)."""
    keys = config_columns(summary)
    if not keys:
        return str(summary.sort_values("gpu_ms")["variant"].iloc[0])
    best = summary.loc[summary.groupby(keys, dropna=False)["gpu_ms"].idxmin(), "variant"]
    counts = best.value_counts()
    return str(sorted(counts[counts == counts.max()].index)[0])


def speedup_vs(summary: pd.DataFrame, reference: str = "") -> pd.DataFrame:
    """Each range's GPU time relative to ``reference``'s in the same configuration (``speedup`` =
    reference ms / ms: > 1 is faster). ``reference`` "" picks one (:func:`pick_reference`)."""
    if summary.empty:
        raise NotApplicable("no timed ranges")
    ref = reference or pick_reference(summary)
    if ref not in set(summary["variant"]):
        raise NotApplicable(f"reference {ref!r} is not in this capture (it has: {', '.join(sorted(set(summary['variant'])))})")
    keys = config_columns(summary)
    r = summary[summary["variant"] == ref][[*keys, "gpu_ms"]].rename(columns={"gpu_ms": "reference_ms"})
    r = r.drop_duplicates(keys) if keys else r.head(1)
    out = summary.merge(r, on=keys, how="left") if keys else summary.assign(reference_ms=r["reference_ms"].iloc[0])
    out["reference"] = ref
    out["speedup"] = out["reference_ms"] / out["gpu_ms"]
    out.attrs["reference"] = ref
    return out


def window(kernels: pd.DataFrame, ranges: pd.DataFrame, query: str = "",
           prefer: Mapping[str, Any] | None = None) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The ranges (and their kernels) to draw on one time axis: those matching ``query`` (a pandas
    query over the decoded fields), else those of the configuration ``prefer`` (the page's headline case,
    :func:`headline_case`) where some ran it, else the configuration with the most implementations (the
    middle one of those, in sorted order). Returns (kernels, ranges, a description)."""
    timed = ranges.loc[sorted(set(kernels.loc[kernels["range_id"] >= 0, "range_id"]))] if "range_id" in kernels else ranges
    if timed.empty:
        raise NotApplicable("no range launched a kernel")
    preferred = matching(timed, prefer) if prefer and not query else timed.iloc[0:0]
    if query:
        sel = timed.query(query)
        if sel.empty:
            raise NotApplicable(f"no range matches {query!r}")
        what = query
    elif len(preferred):
        keys = [c for c in config_columns(timed) if c in prefer]
        sel, what = preferred, ", ".join(f"{c}={plain_value(prefer[c])}" for c in keys if prefer[c] == prefer[c])
    else:
        keys = config_columns(timed)
        shared = keys and int(timed.groupby(keys, dropna=False)["variant"].nunique().max()) > 1
        if not shared:  # no configuration that two implementations ran: every range, one row each
            sel, what = timed, "every range"
        if shared:
            g = timed.groupby(keys, dropna=False)["variant"].nunique()
            best = sorted(g[g == g.max()].index, key=str)
            pick = best[len(best) // 2]
            pick = pick if isinstance(pick, tuple) else (pick,)
            sel = matching(timed, dict(zip(keys, pick, strict=True)))
            what = ", ".join(f"{c}={plain_value(v)}" for c, v in zip(keys, pick, strict=True) if v == v and v is not None)
    ks = kernels[kernels["range_id"].isin(sel.index)] if "range_id" in kernels else kernels.iloc[0:0]
    return ks, sel, what


def _yes_no_fields(frame: pd.DataFrame) -> list[str]:
    """The yes/no fields of ``frame`` (its problem's boolean parameters, and boolean columns): named when true."""
    declared = problems.for_fields(frame.columns).yes_no_fields
    return [c for c in frame.columns if c in declared or (c != "variant" and pd.api.types.is_bool_dtype(frame[c]))]


def has_flops(summary: pd.DataFrame) -> bool:
    return "tflops" in summary and summary["tflops"].notna().any()


def headline_case(summary: pd.DataFrame, x: str | None = None) -> dict[str, Any]:
    """The configuration the page's headline speaks of (and its one-configuration figures draw): the
    largest ``x`` (default: the sweep axis of the summary's problem) that most implementations ran, and there
    the configuration most of them ran (the last in sorted order). Its fields and values; empty where the
    summary has no numeric ``x``."""
    x = problems.axis_for(summary if summary is not None else (), x)
    if summary is None or summary.empty or x not in summary or not pd.api.types.is_numeric_dtype(summary[x]):
        return {}
    keys = [c for c in config_columns(summary) if c != x]
    counts = summary.groupby(x)["variant"].nunique()
    top = max(counts[counts == counts.max()].index)
    s = summary[summary[x] == top]
    case: dict[str, Any] = {x: top}
    if keys:
        g = s.groupby(keys, dropna=False)["variant"].nunique()
        best = sorted(g[g == g.max()].index, key=str)[-1]
        case.update(zip(keys, best if isinstance(best, tuple) else (best,), strict=True))
    return case


def findings(summary: pd.DataFrame, x: str | None = None) -> list[str]:
    """The timeline page's findings: at the largest ``x`` (default: the sweep axis of the summary's problem)
    that most implementations ran, each one's GPU time against the fastest; the throughput peak; launch gaps
    where a range has several kernels."""
    if summary is None or summary.empty:
        return []
    x = problems.axis_for(summary, x)
    out = []
    if x not in summary or not pd.api.types.is_numeric_dtype(summary[x]):  # no sweep: each range on its own
        s = summary.sort_values("gpu_ms")
        out.append("GPU time per range: " + ", ".join(f"{r['range']} {r['gpu_ms']:.3g} ms" for _, r in
                                                     s.head(6).iterrows()) + (" ..." if len(s) > 6 else "") + ".")
        if has_flops(summary):
            t = summary.loc[summary["tflops"].idxmax()]
            out.append(f"Highest throughput: {t['range']} at {t['tflops']:,.0f} TFLOP/s ({t['flop_source']}).")
        return out
    keys = [c for c in config_columns(summary) if c != x]
    s = matching(summary, headline_case(summary, x)).sort_values("gpu_ms")
    if len(s):
        fast = s.iloc[0]
        shown = [c for c in [x, *keys] if c in summary and (c == x or summary[c].nunique(dropna=True) > 1)]
        yes_no = _yes_no_fields(summary)
        where = ", ".join([*(str(fast[c]) if c == "pass" else f"{c}={plain_value(fast[c])}" for c in shown
                             if pd.notna(fast[c]) and c not in yes_no),
                           *(c for c in yes_no if c in fast and pd.notna(fast[c]) and bool(fast[c]))])
        others = [f"{r['variant']} {r['gpu_ms'] / fast['gpu_ms']:.1f}×" for _, r in s.iloc[1:].iterrows()]
        out.append(f"At {where}: **{fast['variant']}** takes {fast['gpu_ms']:.3g} ms on the GPU"
                   + (f"; relative to it: {', '.join(others[:6])}" + (" ..." if len(others) > 6 else "") if others
                      else "") + ".")
    if has_flops(summary):
        t = summary.loc[summary["tflops"].idxmax()]
        where = ", ".join(([str(t["pass"])] if "pass" in t and pd.notna(t["pass"]) else [])
                          + [f"{c}={plain_value(t[c])}" for c in config_columns(summary) if c != "pass" and summary[c].nunique() > 1
                             and pd.notna(t[c])])
        out.append(f"Highest throughput: {t['variant']} at {t['tflops']:,.0f} TFLOP/s" + (f" ({where})" if where else "")
                   + ".")
    multi = summary[summary["kernels"] > 1]
    if len(multi):
        share = (multi["gap_ms"] / multi["span_ms"]).groupby(multi["variant"].astype(str)).max().sort_values()
        worst = share.index[-1]
        out.append(f"Multi-kernel ranges idle between their kernels at most {share.iloc[-1]:.0%} of their span "
                   f"({worst}); single-kernel implementations pay no launch gap.")
    return out


__all__ = ["findings", "range_timing", "timing_summary", "flop_sources", "speedup_vs", "pick_reference", "window", "has_flops",
           "config_columns", "has_model"]
