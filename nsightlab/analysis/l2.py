"""L2 traffic against the working set: where a sweep's cases stop fitting in the L2.

Per range: the L2 hit rate, DRAM bytes over the work model's compulsory bytes and over the L2→SM
bytes, and the model's working set over the L2 size. Along a sweep (one case varied in one field, by
default the sweep axis its problem declares, :attr:`nsightlab.problems.problem.Problem.sweep_axis`) the
*modeled* onset is where the working set crosses the L2 size, interpolated log-log between the sweep's
points; the *measured* onset is where the hit rate breaks down, by a rule that a rising or flat curve
cannot trigger (:func:`measured_onset`), returned with its evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..problems import problem as problems
from .counters import NotApplicable, has_model, identity_columns, require


def l2_traffic(rng: pd.DataFrame, l2_bytes: float) -> pd.DataFrame:
    """Per range (a :func:`nsightlab.analysis.counters.per_range` frame, model attached): ``l2_hit_rate``,
    ``bytes_DRAM``, ``bytes_L2``, ``compulsory`` and ``working_set`` (the model's; NaN without one),
    ``dram_over_compulsory``, ``dram_over_l2`` and ``working_set_over_l2``."""
    require(rng, "l2_hit_rate", "bytes_DRAM", what="the L2 analysis")
    cols = ["range", *identity_columns(rng), "bytes_DRAM", "bytes_L2", "l2_hit_rate", "seconds"]
    out = rng[[c for c in dict.fromkeys(cols) if c in rng]].copy()
    nan = pd.Series(np.nan, index=rng.index)
    out["compulsory"] = pd.to_numeric(rng.get("model_bytes", nan), errors="coerce")
    out["working_set"] = pd.to_numeric(rng.get("model_working_set", nan), errors="coerce")
    out["dram_over_compulsory"] = out["bytes_DRAM"] / out["compulsory"]
    out["dram_over_l2"] = out["bytes_DRAM"] / out.get("bytes_L2", nan)
    out["working_set_over_l2"] = out["working_set"] / l2_bytes
    return out


def modeled_onset(x: np.ndarray | pd.Series, working_set: np.ndarray | pd.Series, l2_bytes: float) -> tuple[float, str]:
    """(x at which the modeled working set equals ``l2_bytes``, a note). Interpolated log-log
    between the two sweep points that bracket the crossing; NaN with a note when the working set
    is unknown, never reaches the L2 within the sweep, or already exceeds it at its first point."""
    d = pd.DataFrame({"x": np.asarray(x, dtype=float), "ws": np.asarray(working_set, dtype=float)}).dropna()
    d = d[(d["x"] > 0) & (d["ws"] > 0)].sort_values("x").drop_duplicates("x")
    if d.empty:
        return float("nan"), "no modeled working set"
    xs, ws = d["x"].to_numpy(), d["ws"].to_numpy()
    if ws[0] > l2_bytes:
        return float("nan"), f"exceeds the L2 already at the smallest point ({xs[0]:g})"
    for i in range(1, len(xs)):
        if ws[i - 1] <= l2_bytes < ws[i]:
            lx0, lx1, lw0, lw1 = np.log(xs[i - 1]), np.log(xs[i]), np.log(ws[i - 1]), np.log(ws[i])
            t = (np.log(l2_bytes) - lw0) / (lw1 - lw0)
            return float(np.exp(lx0 + t * (lx1 - lx0))), f"between {xs[i - 1]:g} and {xs[i]:g} (log-log interpolation)"
    return float("nan"), f"fits in the L2 over the whole sweep (up to {xs[-1]:g})"


@dataclass
class Onset:
    """A measured onset: the sweep value (NaN: none), why, and the points the rule looked at."""

    value: float
    reason: str
    evidence: pd.DataFrame = field(default_factory=pd.DataFrame)


def measured_onset(points: pd.DataFrame, x: str | None = None, drop_points: float = 10.0, tolerance: float = 2.0) -> Onset:
    """The first sweep point from which the L2 hit rate stays at least ``drop_points`` percentage
    points below the best it reached at smaller ``x`` (the running maximum), provided the curve then
    falls (each later point no more than ``tolerance`` points above the one before) or the DRAM
    bytes per compulsory byte (``dram_over_compulsory``, where known) rise above their value at that
    best point. A curve that rises or stays flat cannot trigger it: each point's reference is a
    maximum over earlier points, which a rising curve never falls below. ``evidence``: the points
    with the running maximum and which of them are below it by ``drop_points``."""
    x = problems.axis_for(points, x)
    if x not in points or "l2_hit_rate" not in points:
        raise NotApplicable(f"measured onset needs the columns {x!r} and 'l2_hit_rate'")
    s = points.dropna(subset=[x, "l2_hit_rate"]).sort_values(x).reset_index(drop=True)
    h = s["l2_hit_rate"].to_numpy(dtype=float)
    dc = s["dram_over_compulsory"].to_numpy(dtype=float) if "dram_over_compulsory" in s else np.full(len(s), np.nan)
    run_max = np.array([np.nan] + [h[:i].max() for i in range(1, len(h))])
    ev = pd.DataFrame({x: s[x], "l2_hit_rate": h, "running_max_before": run_max,
                       "below_by_drop": h <= run_max - drop_points, "dram_over_compulsory": dc})
    if len(s) < 3:
        return Onset(float("nan"), f"fewer than 3 sweep points ({len(s)}): no onset can be told from noise", ev)
    for i in range(1, len(h)):
        ref = run_max[i]
        if not np.all(h[i:] <= ref - drop_points):
            continue
        best = int(np.argmax(h[:i]))
        falls = bool(np.all(np.diff(h[i - 1:]) <= tolerance))
        dram_rises = bool(np.isfinite(dc[i]) and np.isfinite(dc[best]) and dc[i] > dc[best])
        if not (falls or dram_rises):
            continue
        how = []
        if falls:
            how.append("the hit rate falls from there on")
        if dram_rises:
            how.append(f"DRAM per compulsory byte rises from {dc[best]:.2f} to {dc[i]:.2f}")
        reason = (f"hit rate {h[i]:.1f}% at {x}={s[x].iloc[i]:g}, at least {drop_points:g} points below the best "
                  f"{ref:.1f}% (at {x}={s[x].iloc[best]:g}) and below it at every larger {x}; " + " and ".join(how))
        ev["onset"] = ev[x] == s[x].iloc[i]
        return Onset(float(s[x].iloc[i]), reason, ev)
    ev["onset"] = False
    return Onset(float("nan"), f"the hit rate never stays {drop_points:g} points below its earlier best", ev)


def sweep_groups(frame: pd.DataFrame, x: str | None = None) -> list[tuple[dict, pd.DataFrame]]:
    """The frame split into sweeps along ``x``: groups of ranges that share every other decoded field."""
    x = problems.axis_for(frame, x)
    if x not in frame:
        raise NotApplicable(f"no sweep: the ranges have no field {x!r}")
    keys = [c for c in identity_columns(frame, drop=[x]) if c in frame]
    out = []
    for key, g in frame.groupby(keys, dropna=False, sort=True) if keys else [((), frame)]:
        key = key if isinstance(key, tuple) else (key,)
        out.append((dict(zip(keys, key, strict=True)), g))
    return out


def with_sweeps(frame: pd.DataFrame, x: str | None = None) -> pd.DataFrame:
    """``frame`` with a ``sweep`` column naming each range's sweep (its fields but ``x``: those that
    differ between sweeps, implementation first)."""
    x = problems.axis_for(frame, x)
    groups = sweep_groups(frame, x)
    keys = list(groups[0][0]) if groups else []
    varying = [k for k in keys if len({str(key[k]) for key, _ in groups}) > 1]
    varying = [k for k in ("variant", "pass") if k in varying] + [k for k in varying if k not in ("variant", "pass")]
    out = frame.copy()
    out["sweep"] = ""
    for key, g in groups:
        out.loc[g.index, "sweep"] = " ".join(str(key[k]) if k in ("variant", "pass") else f"{k}={key[k]}"
                                             for k in varying if pd.notna(key[k]) and key[k] != "") or "all"
    return out


def onset_table(l2: pd.DataFrame, l2_bytes: float, x: str | None = None, drop_points: float = 10.0) -> pd.DataFrame:
    """Per sweep (ranges sharing every field but ``x``, at least 2 points; ``sweep`` names it, as
    :func:`with_sweeps` does): the modeled and the measured onset, with notes. Key columns that are
    the same for every sweep are left out. NotApplicable if no field varies across 2+ points."""
    x = problems.axis_for(l2, x)
    rows = []
    if "sweep" not in l2:
        l2 = with_sweeps(l2, x)
    for key, g in sweep_groups(l2.drop(columns="sweep"), x):
        if g[x].nunique() < 2:
            continue
        key = {"sweep": l2.loc[g.index[0], "sweep"], **key}
        modeled, note = modeled_onset(g[x], g["working_set"], l2_bytes) if has_model(g, "working_set") else \
            (float("nan"), "no work model")
        m = measured_onset(g, x, drop_points)
        rows.append({**key, "modeled_onset": modeled, "modeled_note": note, "measured_onset": m.value,
                     "measured_note": m.reason, f"{x}_range": f"{g[x].min():g}..{g[x].max():g}", "points": len(g)})
    if not rows:
        raise NotApplicable(f"no sweep along {x}: no two ranges differ in {x} alone")
    out = pd.DataFrame(rows)
    keys = [c for c in out.columns if c in l2.columns and c != x]
    const = [c for c in keys if out[c].nunique(dropna=False) <= 1 and c not in ("variant", "pass")]
    return out.drop(columns=const)


def panels(frame: pd.DataFrame, x: str | None = None, max_values: int = 4) -> list[tuple[str, pd.DataFrame]]:
    """One figure's worth of ranges each: split by pass and by the first other field (not ``x``,
    not the implementation, not an option) that takes 2..``max_values`` values; titled by them."""
    x = problems.axis_for(frame, x)
    from .counters import option_columns

    skip = {x, "variant", "pass", "options", *option_columns(frame)}
    by = [c for c in identity_columns(frame) if c not in skip and 1 < frame[c].nunique() <= max_values][:1]
    if "pass" in frame and frame["pass"].notna().any():
        by = ["pass", *by]
    if not by:
        return [("all ranges", frame)]
    out = []
    for key, g in frame.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        out.append((", ".join(f"{c}={v}" if c != "pass" else str(v) for c, v in zip(by, key, strict=True)), g))
    order = {"forward": 0, "backward": 1}
    return sorted(out, key=lambda t: (order.get(t[0].split(",")[0], 2), t[0]))


def findings(traffic: pd.DataFrame, onsets: pd.DataFrame | None, x: str | None = None) -> list[str]:
    """The L2 page's findings: where the hit rate breaks down (measured onset, with the hit rate
    before and after, beside the modeled onset), and which implementations keep their hit rate
    over the whole sweep."""
    x = problems.axis_for(traffic if traffic is not None else (), x)
    if traffic is None or traffic.empty:
        return []
    out = []
    if onsets is None or onsets.empty or "variant" not in onsets:
        h = traffic.dropna(subset=["l2_hit_rate"])
        if len(h):
            lo, hi = h.loc[h["l2_hit_rate"].idxmin()], h.loc[h["l2_hit_rate"].idxmax()]
            out.append(f"L2 hit rate ranges from {lo['l2_hit_rate']:.0f}% ({lo['range']}) to {hi['l2_hit_rate']:.0f}% "
                       f"({hi['range']}).")
        return out
    found = onsets[onsets["measured_onset"].notna()].sort_values("measured_onset")
    broke = []
    for variant, g in found.groupby(found["variant"].astype(str), sort=False):
        r = g.iloc[0]
        pts = traffic[traffic["sweep"] == r["sweep"]].sort_values(x)
        after = pts[pts[x] == r["measured_onset"]]["l2_hit_rate"]
        before = pts[pts[x] < r["measured_onset"]]["l2_hit_rate"].max()
        mod = g["modeled_onset"].dropna()
        broke.append(f"{variant} at {x}={r['measured_onset']:,.0f} ({r['sweep']}; hit rate {before:.0f}% → "
                     f"{after.iloc[0]:.0f}%" + (f"; modeled {x}≈{mod.iloc[0]:,.0f}" if len(mod) else "") + ")")
    if broke:
        out.append("The L2 hit rate breaks down (measured onset) for " + "; ".join(broke[:4])
                   + (f"; and {len(broke) - 4} more" if len(broke) > 4 else "") + ".")
    both = found.dropna(subset=["modeled_onset"])
    if len(both):
        ratio = both["measured_onset"] / both["modeled_onset"]
        far = both[(ratio >= 1.5) | (ratio <= 1 / 1.5)]
        if len(far):
            r = far.loc[(np.log(far["measured_onset"] / far["modeled_onset"])).abs().idxmax()]
            k = r["measured_onset"] / r["modeled_onset"]
            swept = traffic.loc[traffic["sweep"] == r["sweep"], x]
            prev = swept[swept < r["measured_onset"]].max()
            within = f", between the sweep's {x}={prev:,.0f} and {r['measured_onset']:,.0f}" if pd.notna(prev) else ""
            out.append(f"Where the two onsets differ ({r['variant']}, {r['sweep']}: measured {x}={r['measured_onset']:,.0f}"
                       f"{within}; {k:.1f}x the modeled {x}≈{r['modeled_onset']:,.0f}), believe the measured one: it is what the "
                       "L2 did. The modeled onset is where the work model's whole working set would stop fitting at "
                       "once; a kernel whose blocks touch only part of it at a time breaks down later than that, one "
                       "that moves more than the model counts, earlier.")
    steady = [v for v in dict.fromkeys(onsets["variant"].astype(str)) if v not in set(found["variant"].astype(str))]
    if steady:
        t = traffic[traffic["variant"].astype(str).isin(steady)]
        low = t.groupby(t["variant"].astype(str))["l2_hit_rate"].min()
        out.append("No breakdown within the sweep: " + ", ".join(f"{v} (lowest hit rate {low[v]:.0f}%)" for v in steady
                                                                    if v in low) + ".")
    return out
