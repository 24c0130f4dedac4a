"""The comparison page: two captures, range by range, with a verdict.

    nsightlab compare BASE NEW [--threshold 5%] [--only REGEX] [--reports OUT]

BASE and NEW are capture folders or ``gpu/name`` labels of the store (``--profiles``, default
``profiles/``). The comparison itself (matching, noise, verdicts) is nsightlab.analysis.comparison;
here are its tables and figures for notebooks/compare, the page's rendering (an HTML page with a
``<name>.json`` sidecar of what it found, and ``index.json`` over every sidecar of its folder), the
comparisons a profiles folder declares for ``nsightlab report`` (``comparisons.toml``). The
command line (its options, what it prints, its exit status) is nsightlab.cli.compare.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import threading
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..analysis import roofline as rf
from ..analysis.comparison import (
    BELOW,
    COUNTERS,
    DRIFT,
    FASTER,
    SAME,
    SLOWER,
    SOURCE_TEXT,
    TIMING,
    UNMOVED,
    VERDICTS,
    Comparison,
    Side,
    match_pairs,
    parse_threshold,
)
from ..core.errors import NotApplicable, ProfileError
from ..store.captures import gpu_slug
from ..store.read import PROFILES, REPO, in_repo, resolve
from .execute import render_notebook, write_if_changed
from .figures import TEMPLATE, log_axis, message, style_for
from .numbers import MISSING, fmt_change, fmt_num
from .page import table_html

NOTEBOOK = REPO / "notebooks" / "compare.ipynb"
WHY_NOTEBOOK = REPO / "notebooks" / "why.ipynb"
#: the comparisons a profiles folder asks ``nsightlab report`` to render, beside its captures
DECLARED = "comparisons.toml"
#: the colours of a verdict in a table
VERDICT_CSS = {SLOWER: "background-color:#fbe3e3;color:#8a1c1c", FASTER: "background-color:#e2f3e4;color:#1d5e2a",
               DRIFT: "background-color:#f1f1f1;color:#555;font-style:italic"}


# --------------------------------------------------------------------------- tables for the page


def delta_table(rows: pd.DataFrame, marks: dict[str, str] | None = None, part: str = "all",
                what: str = "range", grouped: bool = True) -> pd.DataFrame:
    """The per-row table for the page: time base → new with change, noise and verdict, throughput,
    effective bandwidth, and the counters (``base → new``), units in the headers, numbers formatted.
    Columns marked (not like for like) carry a † in the header. ``part``: "timing" (time, verdict,
    throughput), "counters" (Nsight Compute) or "all". ``grouped``: the rows are one implementation
    and pass (a group of :func:`groups`), so ranges are named by their case alone."""
    marks = marks or {}
    out = pd.DataFrame(index=rows.index)
    if what == "range":
        out["range"] = rows["case"] if "case" in rows and grouped else rows["label"]
    else:
        out["kernel"] = rows["kernel"]
    if part in ("timing", "all"):
        out["base [ms]"] = rows["base_ms"].map(fmt_num)
        out["new [ms]"] = rows["new_ms"].map(fmt_num)
        out["change"] = rows["change"].map(fmt_change)
        out["noise"] = [("±" + f"{n:.1%}" + ("" if k else "*")) for n, k in zip(rows["noise"], rows["noise_known"], strict=True)]
        out["verdict"] = rows["verdict"]

    def pair(col: str) -> pd.Series | None:
        b, n = rows.get(f"base_{col}"), rows.get(f"new_{col}")
        if b is None or n is None or (b.isna().all() and n.isna().all()):
            return None
        return pd.Series([f"{fmt_num(x)} → {fmt_num(y)}" for x, y in zip(b, n, strict=True)], index=rows.index)

    for col, (name, unit) in (("tflops", TIMING["tflops"]), ("gbs", TIMING["gbs"])):
        s = pair(col)
        if s is not None and part in ("timing", "all"):
            out[f"{name} [{unit}]"] = s
    if part in ("counters", "all"):
        for col, (name, unit, _) in COUNTERS.items():
            if marks.get(col, "").startswith("not compared"):
                continue
            s = pair(col)
            if s is not None:
                out[f"{name}{f' [{unit}]' if unit else ''}{' †' if col in marks else ''}"] = s
    return out.reset_index(drop=True)


def groups(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Rows split by implementation and pass (the page's per-range tables), in label order."""
    if rows.empty:
        return []
    keys = [c for c in ("variant", "pass") if c in rows and rows[c].notna().any()]
    if not keys:
        return [("all ranges", rows)]
    out = []
    for k, g in rows.groupby([rows[c].fillna(MISSING).astype(str) for c in keys], sort=True):
        name = " ".join(k) if isinstance(k, tuple) else str(k)
        out.append((name, g))
    return out


def open_groups(rows: pd.DataFrame, most: int = 4) -> set[str]:
    """The :func:`groups` a page shows unfolded: those with a range that is slower; if none, those with
    a range that is faster, when there are at most ``most`` of them (else the reader unfolds them)."""
    gs = groups(rows)
    slow = {n for n, g in gs if (g["verdict"] == SLOWER).any()}
    if slow:
        return slow
    fast = {n for n, g in gs if (g["verdict"] == FASTER).any()}
    return fast if len(fast) <= most else set()


def table(df: pd.DataFrame, name: str, wrap: bool = False) -> str:
    """A comparison table as HTML (:func:`nsightlab.render.page.table_html`), verdicts coloured: numbers and
    short values right-aligned and never wrapping after the first column, long text (a kernel's signature)
    left-aligned and wrapping, so that the table fits the page (``wrap``: every column text)."""
    def short(col: str) -> bool:
        return bool(df[col].astype(str).str.len().max() <= SHORT_CELL) if len(df) else True

    right = [] if wrap else [c for c in df.columns[1:] if short(c)]
    return table_html(df, name=name, collapse=False, right=right,
                      cell_css={"verdict": lambda v: VERDICT_CSS.get(v, "color:#666")})


#: a table cell of at most this many characters is a value (right-aligned, never wrapped); longer ones are text
SHORT_CELL = 24


def _moves(r: pd.DataFrame, sign: int, n: int = 5) -> str:
    """The ``n`` largest moves of ``r``: slowdowns first (``sign`` 1), speed-ups first (-1), or either (0)."""
    m = np.log(r["ratio"])
    r = r.assign(_m=sign * m if sign else np.abs(m)).sort_values(["_m", "label"], ascending=[False, True]).head(n)
    return "; ".join(f"{x.label} {x.change:+.1%} ({fmt_num(x.base_ms)} → {fmt_num(x.new_ms)} ms)" for x in r.itertuples())


def headline(cmp: Comparison) -> str:
    """The page's opening paragraph (Markdown): counts, what gates, the largest change of an
    implementation under test, the biggest moves each way among them; the references' moves (SDPA's
    backends: :func:`nsightlab.analysis.comparison.is_reference`) in a line of their own, as drift where
    nothing they run on changed between the captures (they then neither gate nor lead)."""
    c = cmp.counts()
    n = len(cmp.ranges)
    lines = [f"**{n} ranges matched** ({SOURCE_TEXT[cmp.source]}): **{c[SLOWER]} slower**, **{c[FASTER]} faster**, "
             + (f"{c[BELOW]} below the threshold (moved beyond the noise, less than the threshold), " if c[BELOW] else "")
             + f"{c[SAME]} within noise" + (f", {c[DRIFT]} reference drift" if c[DRIFT] else "")
             + f", at a threshold of {cmp.threshold:.0%} on the time."]
    ut = cmp.under_test
    if len(ut):
        top = next(cmp.biggest(1, judged=False).itertuples())
        moved = top.verdict in (SLOWER, FASTER)
        lines.append(f"**Largest change** of an implementation under test: **{top.label} {top.change:+.1%}** "
                     f"({fmt_num(top.base_ms)} → {fmt_num(top.new_ms)} ms, "
                     + ("beyond its noise" if moved else "within its noise and the threshold") + ").")
    ob = int((cmp.unmatched["side"] == "base").sum()) if len(cmp.unmatched) else 0
    on = int((cmp.unmatched["side"] == "new").sum()) if len(cmp.unmatched) else 0
    if ob or on:
        lines.append(f"{ob} range(s) only in base and {on} only in new are listed at the end.")
    gate = cmp.regressions
    gate_text = (f"**Gate: fails** ({len(gate)} range(s) slower beyond threshold and noise: exit status 1 of "
                 if len(gate) else "**Gate: passes** (no range slower beyond threshold and noise: exit status 0 of ")
    lines.append(gate_text + "`nsightlab compare`)"
                 + (f"; ranges under {cmp.min_ms:g} ms in base do not gate" if cmp.min_ms else "") + ".")
    for what, sign, name in ((SLOWER, 1, "Largest slowdowns"), (FASTER, -1, "Largest speed-ups")):
        r = ut[ut["verdict"] == what]
        if len(r):
            lines.append(f"{name}: {_moves(r, sign)}.")
    refs = cmp.references
    moved = refs[refs["verdict"].isin([SLOWER, FASTER, DRIFT])]
    if len(moved):
        names = ", ".join(sorted(set(moved["variant"].astype(str))))
        big = _moves(moved, 0, 3)
        if cmp.drift:
            lines.append(f"**Reference drift** (not a verdict on the change: the references ran the same library on "
                         f"the same GPU and driver in both captures): {len(moved)} range(s) of {names} moved beyond "
                         f"their noise, up to {big}. They neither gate nor lead this summary.")
        else:
            lines.append(f"**References** ({names}; their library, GPU or driver differs between the captures, so "
                         f"their moves are part of the comparison): {len(moved)} range(s) moved beyond their noise, "
                         f"the largest {big}.")
    if not len(ut[ut["verdict"].isin([SLOWER, FASTER])]) and len(ut):
        lines.append("No implementation under test moved beyond its noise and the threshold.")
    return "\n\n".join(lines)


def summary_html(cmp: Comparison) -> str:
    """The one-line summary the command line prints, for the page (and the index)."""
    return f'<p class="compare-summary"><b>In one line</b> (as printed by the command line): {html.escape(cmp.summary())}</p>'


def verdicts_by(cmp: Comparison, by: str = "time") -> pd.DataFrame:
    """How many ranges are faster / slower / within noise, by base time (``time``: < 0.1 ms, 0.1–1 ms,
    1–10 ms, ≥ 10 ms) or by implementation and pass (``impl``)."""
    r = cmp.ranges
    if r.empty:
        return pd.DataFrame(columns=list(VERDICTS))
    if by == "time":
        edges = [0, 0.1, 1, 10, np.inf]
        names = ["< 0.1 ms", "0.1 – 1 ms", "1 – 10 ms", "≥ 10 ms"]
        g = pd.cut(r["base_ms"], edges, labels=names, right=False)
        key: Any = g
    else:
        cols = [c for c in ("variant", "pass") if c in r and r[c].notna().any()]
        key = [r[c].fillna(MISSING).astype(str) for c in cols] if cols else pd.Series("all", index=r.index)
    t = pd.crosstab(key, r["verdict"]).reindex(columns=list(VERDICTS), fill_value=0)
    t["median change"] = r.groupby(key, observed=False)["change"].median().map(fmt_change)
    t.columns.name = None
    return t


def compat_table(cmp: Comparison) -> pd.DataFrame:
    """The differences between the two captures, for the page."""
    return pd.DataFrame(cmp.compat, columns=["aspect", "base", "new", "consequence"])


def caveats(cmp: Comparison) -> list[str]:
    """Plain sentences: the timing source, notes (a source not used, unknown noise) and marked columns."""
    out = [f"Timing: {SOURCE_TEXT[cmp.source]}."]
    out += [n[0].upper() + n[1:] + ("" if n.endswith(".") else ".") for n in cmp.notes]
    for col, why in cmp.marks.items():
        out.append(f"{COUNTERS[col][0]}{'' if why.startswith('not compared') else ' †'}: {why}.")
    if cmp.base.ncu_ranges is None or cmp.new.ncu_ranges is None:
        out.append("No counters compared: " + " and ".join(s.label for s in (cmp.base, cmp.new) if s.ncu_ranges is None)
                   + " holds no Nsight Compute data.")
    return out


# --------------------------------------------------------------------------- figures for the page


def _style(names: Iterable[str]) -> dict[str, dict[str, str]]:
    return style_for(sorted({str(n) for n in names if n is not None and str(n) != "nan"}))


def style(cmp: Comparison) -> dict[str, dict[str, str]]:
    """One colour and marker per implementation of the comparison: its own on every page (by its name alone,
    :func:`nsightlab.render.figures.impl_style`), whichever implementations the comparison holds."""
    names = [*cmp.ranges.get("variant", pd.Series(dtype=str)), *cmp.unmatched.get("variant", pd.Series(dtype=str))]
    return _style(names)


def change_figure(cmp: Comparison, title: str = "") -> Any:
    """Every matched range: new/base time (log axis, so 2× slower and 2× faster are equally far from 1)
    against its base time, coloured by implementation, ▲ slower / ▼ faster (hollow: a reference's drift);
    bars: the noise; the grey band: the threshold."""
    r = cmp.ranges
    if r.empty:
        return message("no matched range", title)
    st = style(cmp)
    fig = go.Figure()
    for name, g in r.groupby(r.get("variant", pd.Series("range", index=r.index)).astype(str), sort=True):
        s = st.get(name, {"color": "#444", "symbol": "circle"})
        # colour: the implementation (figures.impl_style, as on every page); marker: the verdict (a reference's
        # drift hollow, pointing the way it moved)
        sym = [s["symbol"] if v in UNMOVED else ("triangle-up" if v == SLOWER else "triangle-down") if v != DRIFT else
               ("triangle-up-open" if q > 1 else "triangle-down-open") for v, q in zip(g["verdict"], g["ratio"], strict=True)]
        fig.add_trace(go.Scatter(
            x=g["base_ms"], y=g["ratio"], mode="markers", name=name,
            marker={"color": s["color"], "symbol": sym, "size": [6 if v in UNMOVED else 10 for v in g["verdict"]],
                    "line": {"width": [1.6 if v == DRIFT else 0 for v in g["verdict"]], "color": s["color"]}},
            error_y={"type": "data", "symmetric": False, "array": g["ratio"] * g["noise"],
                     "arrayminus": g["ratio"] * (1 - 1 / (1 + g["noise"])), "thickness": 0.8, "width": 0,
                     "color": s["color"]},
            hovertext=[f"{lab}<br>{b:.4g} → {n:.4g} ms ({c:+.1%}, noise ±{nz:.1%})<br>{v}"
                       for lab, b, n, c, nz, v in zip(g["label"], g["base_ms"], g["new_ms"], g["change"], g["noise"],
                                                      g["verdict"], strict=True)],
            hoverinfo="text"))
    fig.add_hrect(y0=1 / (1 + cmp.threshold), y1=1 + cmp.threshold, fillcolor="#888", opacity=0.12, line_width=0)
    fig.add_hline(y=1, line={"color": "#666", "width": 1})
    lo, hi = float(r["ratio"].min()), float(r["ratio"].max())
    span = max(1 / lo, hi, 1 + 2 * cmp.threshold) * 1.15
    # ticks outward from 1, each at least 1/14 of the axis from the last (labels never overlap)
    gap = 2 * math.log10(span) / 14
    ticks = [1.0]
    for side in ((1.05, 1.1, 1.25, 1.5, 2, 3, 4), (0.95, 0.9, 0.8, 0.67, 0.5, 0.33, 0.25)):
        last = 1.0
        for t in side:
            if 1 / span <= t <= span and abs(math.log10(t / last)) >= gap:
                ticks.append(t)
                last = t
    ticks.sort()
    log_axis(fig, "x", float(r["base_ms"].min()), float(r["base_ms"].max()), f"base time [ms] ({cmp.base.label})", pad=1.3)
    fig.update_yaxes(type="log", title="new time / base time (above 1: slower)", range=[-math.log10(span), math.log10(span)],
                     tickvals=ticks, ticktext=[f"{t:g}×" for t in ticks])
    fig.update_layout(title=title, template=TEMPLATE, height=480, legend={"title": "implementation"})
    return fig


def _roofs(fig: go.Figure, cmp: Comparison, x: np.ndarray, level: str) -> None:
    """Each side's roof at ``level`` (base dashed, new solid; dotted: the measured read + write copy, a
    reference), its bandwidth up to its top Nsight compute peak drawn at the highest SM clock the side's
    launches ran at (:func:`nsightlab.analysis.roofline.roofs`), the clock named in the legend."""
    for pre, side, dash in (("base", cmp.base, "dash"), ("new", cmp.new, "solid")):
        if side.ncu_work is None:
            continue
        try:
            ceil = rf.ceilings(side.ncu_work, side.manifest)
        except NotApplicable:
            continue
        rr = rf.roofs(ceil, side.ncu_work)
        comp = rr[(rr["kind"] == "compute") & (rr["role"] == "limit")]
        top = float(comp["value"].max()) if len(comp) else np.inf
        top_label = str(comp.loc[comp["value"].idxmax(), "label"]) if len(comp) else ""
        for _, m in rr[(rr["kind"] == "memory") & (rr["level"] == level)].iterrows():
            ref = m["role"] == "reference"
            what = str(m["label"]) + ("" if ref or not top_label else f", {top_label} TFLOP/s")
            fig.add_trace(go.Scatter(x=x, y=np.minimum(top, m["value"] * x) / 1e12, mode="lines", hoverinfo="name",
                                     line={"dash": "dot" if ref else dash, "width": 1 if ref else 1.6,
                                           "color": "#999" if ref else "#444"},
                                     name=f"{pre} roof ({side.gpu}): {what}", legendgroup="ceilings",
                                     meta={"role": str(m["role"]), "kind": "memory", "level": level, "side": pre,
                                           "value": float(m["value"]), "label": str(m["label"])}))
            if not ref and np.isfinite(top):
                fig.add_trace(go.Scatter(x=x[[0, -1]], y=[top / 1e12] * 2, mode="lines", hoverinfo="skip",
                                         showlegend=False, line={"width": 0}, legendgroup="ceilings",
                                         meta={"role": "limit", "kind": "compute", "side": pre, "value": top / 1e12,
                                               "label": top_label}))


def roofline_figure(cmp: Comparison, pts: pd.DataFrame, title: str, level: str = "DRAM") -> Any:
    """Both captures' rooflines overlaid: each side's ceilings (base dashed, new solid), base points
    hollow, new points filled, an arrow from each base point to its new point."""
    if pts.empty:
        return message("no range to place", title)
    fig = go.Figure()
    lo = max(min(pts["base_x"].min(), pts["new_x"].min()) / 3, 1e-3)
    hi = max(pts["base_x"].max(), pts["new_x"].max()) * 3
    _roofs(fig, cmp, np.logspace(np.log10(lo), np.log10(hi), 120), level)
    var = pts["variant"].astype(str) if "variant" in pts else pd.Series("range", index=pts.index)
    st = style(cmp)
    for name, g in pts.groupby(var, sort=True):
        s = st.get(name, {"color": "#444", "symbol": "circle"})
        hover = [f"{lab}<br>base {bx:.3g} FLOP/B, {by / 1e12:.3g} TFLOP/s<br>new {nx:.3g} FLOP/B, {ny / 1e12:.3g} TFLOP/s"
                 f"<br>time {c:+.1%} ({v})" for lab, bx, by, nx, ny, c, v in
                 zip(g["label"], g["base_x"], g["base_y"], g["new_x"], g["new_y"], g["change"], g["verdict"], strict=True)]
        fig.add_trace(go.Scatter(x=g["base_x"], y=g["base_y"] / 1e12, mode="markers", name=f"{name} (base)", legendgroup=name,
                                 marker={"symbol": s["symbol"] + "-open", "size": 8, "color": s["color"]},
                                 hovertext=hover, hoverinfo="text", meta={"role": "data", "level": level, "side": "base"}))
        fig.add_trace(go.Scatter(x=g["new_x"], y=g["new_y"] / 1e12, mode="markers", name=f"{name} (new)", legendgroup=name,
                                 marker={"symbol": s["symbol"], "size": 8, "color": s["color"]},
                                 hovertext=hover, hoverinfo="text", meta={"role": "data", "level": level, "side": "new"}))
        for bx, by, nx, ny in zip(g["base_x"], g["base_y"], g["new_x"], g["new_y"], strict=True):
            if abs(math.log10(nx / bx)) < 0.01 and abs(math.log10(ny / by)) < 0.01:
                continue  # no visible move: an arrow would be a blot on the marker
            # on log axes plotly places annotations in log10 units
            fig.add_annotation(x=math.log10(nx), y=math.log10(ny / 1e12), ax=math.log10(bx), ay=math.log10(by / 1e12),
                               xref="x", yref="y", axref="x", ayref="y", showarrow=True, arrowhead=2,
                               arrowsize=1, arrowwidth=1.2, arrowcolor=s["color"], opacity=0.8, text="")
    ys = np.concatenate([pts["base_y"].to_numpy(), pts["new_y"].to_numpy()]) / 1e12
    fig.update_xaxes(type="log", title=f"arithmetic intensity [FLOP / {level} byte]", range=[np.log10(lo), np.log10(hi)])
    useful = set(pts["base_basis"]) | set(pts["new_basis"]) == {"useful"} if "base_basis" in pts else False
    fig.update_yaxes(type="log", title=("useful performance [TFLOP/s, work model / ncu duration]" if useful
                                        else "performance [TFLOP/s] (FLOPs / ncu duration; counted where no work model)"),
                     range=[np.log10(ys.min() / 3), np.log10(ys.max() * 4)])
    fig.update_layout(title=title, template=TEMPLATE, height=650, legend={"font": {"size": 11}})
    return fig


def distribution_figure(cmp: Comparison, rows: pd.DataFrame, title: str) -> Any:
    """Timing distributions side by side, one row per range, base and new: every launch (Nsight
    Systems) as a box with its points, or min / median / max (benchmark), on a time axis relative to
    the base median (1 = the base's median time)."""
    if rows.empty:
        return message("no range to show", title)
    fig = go.Figure()
    src = cmp.source
    nkey = {}
    if src in ("nsys", "ncu"):
        pairs = match_pairs(cmp.base.samples[src], cmp.new.samples[src])
        nkey = {v: k for k, v in pairs.items()}
    order = list(rows["label"])
    # base and new are no implementations: light grey and black (greys are no implementation's colour)
    for pre, side, color in (("base", cmp.base, "#a6a6a6"), ("new", cmp.new, "#222222")):
        s = side.samples[src]
        ys, xs, q = [], [], {"lowerfence": [], "q1": [], "median": [], "q3": [], "upperfence": [], "y": []}
        for r in rows.itertuples():
            k = r.key if pre == "base" else nkey.get(r.key, r.key)
            g = s[s["key"] == k]
            if src == "bench":
                b = g.iloc[0]
                q["y"].append(r.label)
                for f, col in (("lowerfence", "_lo"), ("q1", "ms"), ("median", "ms"), ("q3", "ms"), ("upperfence", "_hi")):
                    q[f].append(b[col] / r.base_ms)
            else:
                ys += [r.label] * len(g)
                xs += list(g["ms"] / r.base_ms)
        name = f"{pre}: {side.label}"
        if src == "bench":
            fig.add_trace(go.Box(y=q["y"], lowerfence=q["lowerfence"], q1=q["q1"], median=q["median"], q3=q["q3"],
                                 upperfence=q["upperfence"], name=name, orientation="h", marker_color=color,
                                 line={"width": 1.5}))
        else:
            fig.add_trace(go.Box(x=xs, y=ys, name=name, orientation="h", marker={"color": color, "size": 4},
                                 boxpoints="all", jitter=0.3, pointpos=0, line={"width": 1}))
    fig.update_layout(boxmode="group", template=TEMPLATE, title=title, height=140 + 34 * len(rows),
                      legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0})
    fig.update_yaxes(categoryorder="array", categoryarray=order[::-1], automargin=True)
    fig.update_xaxes(title="time / base median (1 = base median; < 1: new is faster); grey band: the threshold")
    fig.add_vrect(x0=1 / (1 + cmp.threshold), x1=1 + cmp.threshold, fillcolor="#888", opacity=0.1, line_width=0)
    fig.add_vline(x=1, line={"color": "#444", "width": 1, "dash": "dot"})
    return fig


# --------------------------------------------------------------------------- pages, and the comparisons a profiles folder declares


@dataclass(frozen=True)
class Declared:
    """One comparison page that ``nsightlab report`` renders: an entry of ``comparisons.toml``."""

    name: str
    title: str
    base: str
    new: str
    threshold: str = "5%"
    only: str = ""
    min_ms: float = 0.0


@dataclass(frozen=True)
class DeclaredWhy:
    """One before/after bottleneck page that ``nsightlab report`` renders: a ``[[why]]`` entry of
    ``comparisons.toml``: notebooks/why.py with side a from the capture ``base`` and side b from ``new``
    (``a``: the implementation, by default the report's first; ``b``: by default ``a``; ``case``: as
    ``nsightlab why --case`` takes it; ``kernel``: a regular expression that picks each side's launch, as
    ``nsightlab why --kernel`` takes it, by default the longest)."""

    name: str
    title: str
    base: str
    new: str
    a: str = ""
    b: str = ""
    case: str = ""
    kernel: str = ""


_REQUIRED = ("name", "title", "base", "new")
_ACCEPTED = ("each [[comparison]] takes name (the page's file name), title, base and new (capture folders or gpu/name "
             "labels), and optionally threshold (\"5%\"), only (a regular expression) and min_ms (a number); each "
             "[[why]] (one kernel's bottleneck page across two captures) takes name, title, base and new, and "
             "optionally a, b (implementations), case (field=value pairs) and kernel (a regular expression: the launch "
             "compared, by default the longest)")


def declared_comparisons(profiles: str | os.PathLike) -> list[Declared | DeclaredWhy]:
    """The ``[[comparison]]`` and ``[[why]]`` entries of ``<profiles>/comparisons.toml`` (none without the
    file). A malformed file or entry is a ProfileError in one line naming it and what is accepted."""
    path = in_repo(profiles) / DECLARED
    if not path.exists():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML ({exc}); {_ACCEPTED}") from None
    lists = all(isinstance(data.get(k, []), list) for k in ("comparison", "why"))
    entries = [(k, e) for k in ("comparison", "why") for e in data.get(k, [])] if lists else []
    if set(data) - {"comparison", "why"} or not lists or not all(isinstance(e, dict) for _, e in entries):
        raise ProfileError(f"{path}: holds {', '.join(sorted(data))}; it takes only [[comparison]] and [[why]] tables: "
                           f"{_ACCEPTED}")
    out: list[Declared | DeclaredWhy] = []
    counts = {"comparison": 0, "why": 0}
    for kind, e in entries:
        counts[kind] += 1
        what = f"{path}: {kind} {counts[kind]}"
        cls = Declared if kind == "comparison" else DeclaredWhy
        missing = [k for k in _REQUIRED if not isinstance(e.get(k), str) or not e[k].strip()]
        unknown = sorted(set(e) - set(cls.__dataclass_fields__))
        if missing or unknown:
            problem = f"lacks {', '.join(missing)}" if missing else f"has unknown key {unknown[0]!r}"
            raise ProfileError(f"{what} {problem}; {_ACCEPTED}")
        if not all(c.isalnum() or c in "._-" for c in e["name"]) or e["name"] in {d.name for d in out}:
            raise ProfileError(f"{what}: name {e['name']!r} must be unique and of letters, digits, '.', '_' and '-'")
        if cls is DeclaredWhy:
            bad = [k for k in ("a", "b", "case", "kernel") if not isinstance(e.get(k, ""), str)]
            if bad:
                raise ProfileError(f"{what} ({e['name']}): {bad[0]} must be a string; {_ACCEPTED}")
            try:
                re.compile(e.get("kernel", ""))
            except re.error as exc:
                raise ProfileError(f"{what} ({e['name']}): kernel {e['kernel']!r} is not a regular expression ({exc}); "
                                   f"{_ACCEPTED}") from None
            out.append(DeclaredWhy(e["name"], e["title"], e["base"], e["new"], e.get("a", ""), e.get("b", ""),
                                   e.get("case", ""), e.get("kernel", "")))
            continue
        try:
            parse_threshold(e.get("threshold", "5%"))
            min_ms = float(e.get("min_ms", 0.0))
            re.compile(str(e.get("only", "")))
        except (TypeError, ValueError, re.error) as exc:
            raise ProfileError(f"{what} ({e['name']}): {exc}; {_ACCEPTED}") from None
        out.append(Declared(e["name"], e["title"], e["base"], e["new"], str(e.get("threshold", "5%")),
                            str(e.get("only", "")), min_ms))
    return out


def page_name(base: Side, new: Side) -> str:
    """``h100-to-h200-seqlen`` (GPU to GPU, same capture name) or ``h200-seqlen-to-seqlen-v2``."""

    def short(gpu_folder: str) -> str:
        parts = [p for p in gpu_slug(gpu_folder).split("-") if p != "nvidia"]
        return parts[0] if parts else gpu_folder

    bg, bn = base.label.split("/", 1) if "/" in base.label else ("", base.label)
    ng, nn = new.label.split("/", 1) if "/" in new.label else ("", new.label)
    if bn == nn and bg != ng:
        return f"{short(bg)}-to-{short(ng)}-{bn}"
    if bg == ng:
        return f"{short(bg)}-{bn}-to-{nn}"
    return f"{short(bg)}-{bn}-to-{short(ng)}-{nn}"


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def publish(comparison: Declared, out_dir: Path, *, profiles: str | os.PathLike = PROFILES, reports: Path | None = None,
            plotlyjs: str = "inline", kernel: str = "python3", stop: threading.Event | None = None) -> dict[str, Any]:
    """Render the page ``out_dir/<name>.html`` (papermill + nbconvert, atomic, byte-stable) and its
    sidecar ``<name>.json``: what the page's comparison found, as the notebook computed it, with the
    page's title and the two capture folders. ``reports``: the report folder whose stylesheet the page
    links (None: the page carries its own). Returns the page's summary, title and metadata."""
    out_dir.mkdir(parents=True, exist_ok=True)
    page = out_dir / f"{comparison.name}.html"
    params = {"base": comparison.base, "new": comparison.new, "threshold": comparison.threshold,
              "only": comparison.only, "min_ms": comparison.min_ms, "title": comparison.title,
              "profiles": str(in_repo(profiles).resolve()), "plotlyjs": plotlyjs}
    info = render_notebook(NOTEBOOK, params, page, kernel, reports=reports, stop=stop)
    sidecar = {**info["metadata"]["comparison"], "title": comparison.title, "html": page.name,
               "base_path": _rel(resolve(comparison.base, profiles)), "new_path": _rel(resolve(comparison.new, profiles))}
    _write_json(out_dir / f"{comparison.name}.json", sidecar)
    return info


def publish_why(w: DeclaredWhy, out_dir: Path, *, profiles: str | os.PathLike = PROFILES, reports: Path | None = None,
                plotlyjs: str = "inline", kernel: str = "python3", stop: threading.Event | None = None) -> dict[str, Any]:
    """Render the before/after bottleneck page ``out_dir/<name>.html`` (notebooks/why.py with
    ``b_capture``) and its sidecar ``<name>.json``, so that the index lists it with the comparisons."""
    out_dir.mkdir(parents=True, exist_ok=True)
    page = out_dir / f"{w.name}.html"
    base, new = resolve(w.base, profiles), resolve(w.new, profiles)
    params = {"capture": str(base.resolve()), "b_capture": str(new.resolve()), "a": w.a, "b": w.b, "case": w.case,
              "kernel": w.kernel, "plotlyjs": plotlyjs}
    info = render_notebook(WHY_NOTEBOOK, params, page, kernel, reports=reports, stop=stop)
    info["title"] = w.title
    sidecar = {"title": w.title, "html": page.name, "base": w.base, "new": w.new, "kind": "why",
               "summary": info["summary"][0] if info["summary"] else "", "base_path": _rel(base), "new_path": _rel(new)}
    _write_json(out_dir / f"{w.name}.json", sidecar)
    return info


def comparison_entries(folder: Path) -> list[dict[str, Any]]:
    """Every comparison page's sidecar in ``folder`` (``<name>.json`` beside ``<name>.html``), by name."""
    out = []
    for p in sorted(Path(folder).glob("*.json")):
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(d, dict) and "summary" in d and "html" in d and (p.parent / str(d["html"])).exists():
            out.append({"name": p.stem, "title": d.get("title", p.stem), "html": d["html"], "json": p.name,
                        "base": d.get("base"), "new": d.get("new"), "summary": d["summary"],
                        "exit_status": d.get("exit_status")})
    return out


def write_index(folder: Path) -> None:
    """``folder/index.json``: every comparison page of the folder (:func:`comparison_entries`)."""
    _write_json(folder / "index.json", {"comparisons": comparison_entries(folder)})


def _write_json(path: Path, data: Any) -> None:
    write_if_changed(path, json.dumps(data, indent=2, sort_keys=False) + "\n")
