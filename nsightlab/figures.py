"""Plotly figures for the reports, and the offline HTML embedding of them.

One colour and one marker per implementation, the same in every figure of a capture:
:func:`style_for` assigns them from the capture's full, ordered list of implementations (pass that
list to every figure, so a forward-only chart and a backward-only chart agree). A figure without
data says so (:func:`message`), never an empty chart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from .perf import ok_rows, ratio_to

_EMBEDDED = {"done": False, "src": "inline"}
TEMPLATE = "plotly_white"
PALETTE = (*px.colors.qualitative.D3, *px.colors.qualitative.Dark24)
MARKERS = ("circle", "square", "diamond", "triangle-up", "cross", "x", "triangle-down", "pentagon", "star", "hexagon")
_LEVEL_SYMBOL = {"DRAM": "circle", "L2": "square", "L1": "diamond"}

Style = Mapping[str, Mapping[str, str]]


def set_plotlyjs(src: str) -> None:
    """Where the figures get plotly.js: "inline" (the first figure of a notebook carries it) or a
    relative path such as ``../../plotly.min.js`` (the report runner ships one copy beside the reports)."""
    _EMBEDDED["src"] = src
    _EMBEDDED["done"] = False


def html(fig: go.Figure) -> str:
    """The figure as an HTML fragment that works offline and keeps plotly's interactivity; the div
    id is derived from the figure itself, so the same data gives the same bytes."""
    import hashlib

    first = not _EMBEDDED["done"]
    _EMBEDDED["done"] = True
    src = _EMBEDDED["src"]
    include = (True if src == "inline" else src) if first else False
    div = "fig-" + hashlib.sha256(fig.to_json().encode()).hexdigest()[:16]
    return fig.to_html(full_html=False, include_plotlyjs=include, div_id=div,
                       config={"displaylogo": False, "responsive": True})


def show(fig: go.Figure) -> None:
    from IPython.display import HTML, display

    display(HTML(html(fig)))


# --------------------------------------------------------------------------- style


def style_for(names: Iterable[str]) -> dict[str, dict[str, str]]:
    """A fixed colour and marker per name, by position in ``names`` (deduplicated, order kept):
    pass the capture's full list of implementations so every figure agrees."""
    out: dict[str, dict[str, str]] = {}
    for name in names:
        if name is None or (isinstance(name, float) and np.isnan(name)) or str(name) in out:
            continue
        i = len(out)
        out[str(name)] = {"color": PALETTE[i % len(PALETTE)], "symbol": MARKERS[i % len(MARKERS)]}
    return out


def _style(style: Style | None, names: Iterable[str]) -> Style:
    """``style`` extended by any name it lacks (after its own, in sorted order)."""
    base = dict(style or {})
    extra = sorted({str(n) for n in names if n is not None and str(n) not in base})
    for name, s in style_for([*base, *extra]).items():
        base.setdefault(name, s)
    return base


def _colors(style: Style) -> dict[str, str]:
    return {k: v["color"] for k, v in style.items()}


def _symbols(style: Style) -> dict[str, str]:
    return {k: v["symbol"] for k, v in style.items()}


def message(text: str, title: str = "") -> go.Figure:
    """A small figure that says why there is nothing to draw."""
    fig = go.Figure()
    fig.add_annotation(text=text, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font={"size": 14})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(title=title, template=TEMPLATE, height=180, margin={"t": 40, "b": 10})
    return fig


def facets(df: pd.DataFrame, x: str, candidates: Iterable[str]) -> tuple[str | None, str | None]:
    """(facet column, facet row) for a figure against ``x``: ``pass`` in columns where it varies,
    the first other candidate field with 2..4 values in rows."""
    col = "pass" if "pass" in df and df["pass"].nunique() > 1 else None
    row = next((c for c in candidates if c in df and c not in (x, "pass", "variant") and 1 < df[c].nunique() <= 4), None)
    return col, row


_ORDER = {"pass": ["forward", "backward"]}


# --------------------------------------------------------------------------- benchmark CSVs

_HOVER = ["config", "B", "H", "N", "D", "causal", "dtype", "options", "ms", "tflops", "gbps", "rel_l2"]


def throughput_vs_n(df: pd.DataFrame, suite: str, dtype: str, title: str, style: Style | None = None) -> go.Figure:
    """TFLOP/s against N, one line per implementation, faceted by pass (columns) and D × causal (rows)."""
    ok = ok_rows(df)
    ok = ok[(ok["suite"] == suite) & (ok["dtype"] == dtype)].sort_values("N")
    if ok.empty:
        return message(f"no successful rows for suite {suite}, {dtype}", title)
    ok["shape"] = "D=" + ok["D"].astype(str) + ok["causal"].map({True: ", causal", False: ""})
    st = _style(style, ok["impl"].unique())
    fig = px.line(ok, x="N", y="tflops", color="impl", symbol="impl", facet_col="pass", facet_row="shape", markers=True,
                  log_x=True, hover_data=[c for c in _HOVER if c in ok], title=title,
                  labels={"tflops": "TFLOP/s", "N": "sequence length N"}, color_discrete_map=_colors(st),
                  symbol_map=_symbols(st), category_orders={**_ORDER, "impl": list(st)})
    fig.update_layout(height=300 * max(1, ok["shape"].nunique()), template=TEMPLATE)
    return fig


def ratio_vs_n(df: pd.DataFrame, suite: str, dtype: str, impl: str, reference: str,
               targets: Mapping[str, float] | None = None) -> go.Figure:
    """``impl``'s throughput over ``reference``'s against N, with the targets as lines."""
    r = ratio_to(df[(df["suite"] == suite) & (df["dtype"] == dtype)], reference)
    r = r[r["impl"] == impl].sort_values("N")
    title = f"{impl} relative to {reference}, same run ({suite}, {dtype})"
    if r.empty:
        return message(f"no configuration where both {impl} and {reference} ran", title)
    r["series"] = r["pass"] + ", D=" + r["D"].astype(str) + r["causal"].map({True: ", causal", False: ""})
    fig = px.line(r, x="N", y="ratio", color="series", markers=True, log_x=True,
                  hover_data=["config", "tflops", "ref_tflops", "options"],
                  labels={"ratio": f"{impl} / {reference} (TFLOP/s)", "N": "sequence length N"}, title=title)
    for pass_, t in (targets or {}).items():
        fig.add_hline(y=t, line_dash="dot", annotation_text=f"{pass_} target {t:.0%}")
    fig.update_layout(template=TEMPLATE, height=450)
    return fig


def latency_bars(df: pd.DataFrame, suite: str, dtype: str, pass_: str, style: Style | None = None) -> go.Figure:
    ok = ok_rows(df)
    ok = ok[(ok["suite"] == suite) & (ok["dtype"] == dtype) & (ok["pass"] == pass_)]
    title = f"{suite}: {pass_} latency, {dtype} (log scale)"
    if ok.empty:
        return message(f"no successful {pass_} rows", title)
    st = _style(style, ok["impl"].unique())
    fig = px.bar(ok, x="config", y="ms", color="impl", barmode="group", log_y=True,
                 hover_data=[c for c in _HOVER if c in ok], title=title, labels={"ms": "median ms"},
                 color_discrete_map=_colors(st), category_orders={"impl": list(st)})
    fig.update_layout(template=TEMPLATE, height=450)
    return fig


def accuracy_strip(ok: pd.DataFrame, style: Style | None = None) -> go.Figure:
    """Relative L2 error of every checked row, per implementation (log scale)."""
    title = "Relative L2 error against the fp64 reference, every checked row"
    if ok.empty or "rel_l2" not in ok:
        return message("no checked rows", title)
    fig = px.strip(ok, x="impl", y="rel_l2", color="dtype", facet_col="pass", log_y=True, title=title,
                   hover_data=[c for c in ("suite", "config", "B", "H", "N", "D", "causal", "max_rel") if c in ok],
                   category_orders={**_ORDER, "impl": list(_style(style, ok["impl"].unique()))})
    fig.update_layout(template=TEMPLATE, height=500)
    return fig


# --------------------------------------------------------------------------- Nsight figures


def _label(r: pd.Series, fields: Iterable[str]) -> str:
    return " ".join(f"{c}={r[c]}" for c in fields if c in r and pd.notna(r[c]) and r[c] != "")


def roofline(points: pd.DataFrame, ceil: pd.DataFrame, title: str, style: Style | None = None,
             label: str = "variant", fields: Iterable[str] = ()) -> go.Figure:
    """Hierarchical roofline: every memory ceiling against the highest compute ceiling (log-log),
    the compute ceilings as flat lines, the measured ones dashed; one point per range and level
    (marker = level, colour = ``label``)."""
    if points.empty:
        return message("no range to place on the roofline", title)
    fig = go.Figure()
    lo = max(points["intensity"].min() / 3, 1e-3)
    hi = points["intensity"].max() * 3
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    comp = ceil[ceil["kind"] == "compute"]
    mem = ceil[ceil["kind"] == "memory"]
    nsight = comp[~comp["name"].str.startswith("measured")]
    top = (nsight if len(nsight) else comp)["value"].max() if len(comp) else points["flop_per_s"].max() * 2
    for _, m in mem.iterrows():
        measured = m["name"].startswith("measured")
        fig.add_trace(go.Scatter(x=x, y=np.minimum(top, m["value"] * x), mode="lines", name=f"{m['name']} {m['value'] / 1e12:.2f} TB/s",
                                 line={"dash": "dash" if measured else "solid", "width": 1.5, "color": "#777"},
                                 hoverinfo="name", legendgroup="ceilings"))
    for _, c in comp.iterrows():
        measured = c["name"].startswith("measured")
        fig.add_trace(go.Scatter(x=[lo, hi], y=[c["value"]] * 2, mode="lines", name=f"{c['name']} {c['value'] / 1e12:.1f} TFLOP/s",
                                 line={"dash": "dash" if measured else "dot", "width": 1, "color": "#444"},
                                 hoverinfo="name", legendgroup="ceilings"))
    st = _style(style, points[label].astype(str).unique())
    fields = list(fields)
    for (name, level), g in points.groupby([points[label].astype(str), "level"], sort=False):
        hover = [f"{name} {_label(r, fields)}<br>{level}: {r.intensity:.2f} FLOP/B, {r.flop_per_s / 1e12:.2f} TFLOP/s, "
                 f"{r.ms:.3f} ms" for _, r in g.iterrows()]
        fig.add_trace(go.Scatter(x=g["intensity"], y=g["flop_per_s"], mode="markers", name=f"{name} @ {level}",
                                 legendgroup=name, marker={"symbol": _LEVEL_SYMBOL.get(level, "circle"), "size": 8,
                                                           "color": st[name]["color"]},
                                 hovertext=hover, hoverinfo="text"))
    fig.update_xaxes(type="log", title="arithmetic intensity [FLOP / byte]")
    fig.update_yaxes(type="log", title="performance [FLOP / s]")
    fig.update_layout(title=title, template=TEMPLATE, height=650)
    return fig


def flop_check(fc: pd.DataFrame, title: str, x: str, style: Style | None = None, tolerance: float = 0.10) -> go.Figure:
    """Counted / modeled FLOPs per range against the sweep field ``x`` (shaded: within tolerance)."""
    if fc.empty:
        return message("no range with both counted and modeled FLOPs", title)
    st = _style(style, fc["variant"].astype(str).unique())
    d = fc.sort_values(["variant", x] if x in fc else ["variant"])
    fig = px.scatter(d, x=x if x in d else "range", y="counted_over_model", color="variant", symbol="variant",
                     facet_col="pass" if "pass" in d and d["pass"].nunique() > 1 else None, log_x=x in d,
                     hover_data=[c for c in ("range", "flop", "model_flop", "flop_counters", "explanation") if c in d],
                     title=title, labels={"counted_over_model": "counted FLOPs / model FLOPs"},
                     color_discrete_map=_colors(st), symbol_map=_symbols(st),
                     category_orders={**_ORDER, "variant": list(st)})
    fig.add_hrect(y0=1 - tolerance, y1=1 + tolerance, fillcolor="green", opacity=0.08, line_width=0)
    fig.update_layout(template=TEMPLATE, height=450)
    return fig


def l2_vs_x(l2: pd.DataFrame, l2_bytes: float, onsets: pd.DataFrame | None, title: str, x: str = "N",
            style: Style | None = None) -> go.Figure:
    """L2 hit rate, DRAM / compulsory bytes and DRAM / L2-to-SM bytes against ``x``, one line per
    implementation; each one's modeled onset (working set = L2) as a dotted vertical line."""
    from plotly.subplots import make_subplots

    if l2.empty:
        return message("no ranges", title)
    panels = [("l2_hit_rate", "L2 hit rate [%]"), ("dram_over_compulsory", "DRAM bytes / compulsory bytes"),
              ("dram_over_l2", "DRAM bytes / L2-to-SM bytes")]
    panels = [p for p in panels if p[0] in l2 and l2[p[0]].notna().any()]
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=[p[1] for p in panels])
    st = _style(style, l2["variant"].astype(str).unique())
    for variant, g in l2.sort_values(x).groupby(l2["variant"].astype(str), sort=False):
        s = st[variant]
        for j, (y, _) in enumerate(panels):
            hover = [f"{variant} {r.get('pass') or ''} {x}={r[x]}<br>hit {r.l2_hit_rate:.1f}%, DRAM {r.bytes_DRAM / 1e6:.1f} MB"
                     + (f", working set {r.working_set / 2**20:.1f} MiB ({r.working_set_over_l2:.2f} × L2)"
                        if pd.notna(r.get("working_set")) else "") for _, r in g.iterrows()]
            fig.add_trace(go.Scatter(x=g[x], y=g[y], mode="lines+markers", name=variant, legendgroup=variant,
                                     showlegend=j == 0, line={"color": s["color"]}, marker={"symbol": s["symbol"]},
                                     hovertext=hover, hoverinfo="text"), row=j + 1, col=1)
        if onsets is not None and len(onsets) and "modeled_onset" in onsets:
            on = onsets[onsets["variant"].astype(str) == variant]["modeled_onset"].dropna()
            if len(on) and on.iloc[0] < l2[x].max() * 1.5:
                fig.add_vline(x=float(on.iloc[0]), line={"color": s["color"], "dash": "dot", "width": 1})
    fig.update_xaxes(type="log")
    fig.update_xaxes(title_text=x, row=len(panels), col=1)
    for j, (y, _) in enumerate(panels):
        if y != "l2_hit_rate":
            fig.update_yaxes(type="log", row=j + 1, col=1)
    fig.update_layout(title=title + f" (dotted: modeled working set = L2 = {l2_bytes / 2**20:.0f} MiB)",
                      template=TEMPLATE, height=300 * len(panels) + 60)
    return fig


def timeline(kernels: pd.DataFrame, ranges: pd.DataFrame, title: str, style: Style | None = None) -> go.Figure:
    """NVTX ranges (one row per implementation) and the kernels each launched, on a time axis in ms."""
    if ranges.empty:
        return message("no ranges to draw", title)
    t0 = min(ranges["start"].min(), kernels["start"].min()) if len(kernels) else ranges["start"].min()
    st = _style(style, ranges["variant"].astype(str).unique())
    fig = go.Figure()
    r = ranges.assign(s=(ranges["start"] - t0) / 1e6, d=(ranges["end"] - ranges["start"]) / 1e6)
    fig.add_trace(go.Bar(y=["NVTX " + str(v) for v in r["variant"]], x=r["d"], base=r["s"], orientation="h",
                         name="NVTX ranges", marker={"color": [st[str(v)]["color"] for v in r["variant"]], "opacity": 0.45},
                         hovertext=r["range"], hoverinfo="text+x"))
    k = kernels.assign(s=(kernels["start"] - t0) / 1e6, d=(kernels["end"] - kernels["start"]) / 1e6)
    labels = k["variant"].astype(object).where(k["variant"].notna(), "(outside ranges)").astype(str)
    fig.add_trace(go.Bar(y=["GPU " + v for v in labels], x=k["d"], base=k["s"], orientation="h", name="kernels",
                         marker={"color": [st.get(v, {"color": "#999"})["color"] for v in labels]},
                         hovertext=[f"{a}<br>{b}<br>{d * 1e3:.1f} us" for a, b, d in zip(k["kernel"], k["range"], k["d"],
                                                                                          strict=True)],
                         hoverinfo="text"))
    fig.update_layout(title=title, barmode="overlay", template=TEMPLATE, height=220 + 30 * r["variant"].nunique(),
                      xaxis_title="time [ms] from the first event shown")
    return fig


def lines_vs_x(df: pd.DataFrame, y: str, title: str, x: str = "N", style: Style | None = None, log_y: bool = True,
               ylabel: str | None = None, facet_candidates: Iterable[str] = ()) -> go.Figure:
    """``y`` against the sweep field ``x``, one line per implementation, faceted by pass and one
    other varying field."""
    d = df[df[y].notna()] if y in df else df.iloc[0:0]
    if d.empty:
        return message(f"no values of {ylabel or y}", title)
    d = d.sort_values(x)
    st = _style(style, d["variant"].astype(str).unique())
    col, row = facets(d, x, facet_candidates)
    fig = px.line(d, x=x, y=y, color="variant", symbol="variant", facet_col=col, facet_row=row, markers=True,
                  log_x=True, log_y=log_y, title=title, labels={y: ylabel or y},
                  hover_data=[c for c in ("range", "gpu_ms", "tflops", "flop_source", "kernels", "gap_ms") if c in d],
                  color_discrete_map=_colors(st), symbol_map=_symbols(st),
                  category_orders={**_ORDER, "variant": list(st)})
    fig.update_layout(template=TEMPLATE, height=300 * (d[row].nunique() if row else 1) + 150)
    return fig


def metric_vs_option(df: pd.DataFrame, y: str, title: str, ylabel: str | None = None) -> go.Figure:
    """A bar per option setting, grouped by study (the fields the settings share)."""
    d = df[df[y].notna()] if y in df else df.iloc[0:0]
    if d.empty:
        return message(f"no values of {ylabel or y}", title)
    fig = px.bar(d, x="option", y=y, color="study", barmode="group", title=title, labels={y: ylabel or y},
                 facet_col="pass" if "pass" in d and d["pass"].nunique() > 1 else None,
                 hover_data=[c for c in ("range", "main_kernel", "main_share", "ms", "occupancy", "registers",
                                         "smem_bytes") if c in d], category_orders=_ORDER)
    fig.update_xaxes(matches=None)
    fig.update_layout(template=TEMPLATE, height=450)
    return fig


def working_set_vs_x(ws: pd.DataFrame, l2_bytes: float, title: str, x: str = "N", style: Style | None = None) -> go.Figure:
    """The modeled working set [MiB] against ``x`` per implementation and pass, the L2 size as a line."""
    cols = [c for c in ws.columns if c.startswith(f"{x}=")]
    if ws.empty or not cols:
        return message("no modeled working set", title)
    ids = [c for c in ws.columns if c not in cols and c not in (f"outgrows L2 at {x}", "onset note")]
    long = ws.melt(id_vars=ids, value_vars=cols, var_name=x, value_name="MiB").dropna(subset=["MiB"])
    long[x] = long[x].str.split("=", n=1).str[1].astype(float)
    st = _style(style, long["variant"].astype(str).unique())
    extra = [c for c in ids if c not in ("variant",)]
    long["series"] = long["variant"].astype(str) + long[extra].astype(str).apply(lambda r: " " + " ".join(r), axis=1) \
        if extra else long["variant"].astype(str)
    fig = go.Figure()
    for series, g in long.groupby("series", sort=False):
        v = str(g["variant"].iloc[0])
        dash = "dash" if "backward" in series.split() else "solid"
        fig.add_trace(go.Scatter(x=g[x], y=g["MiB"], mode="lines+markers", name=series, legendgroup=v,
                                 line={"color": st[v]["color"], "dash": dash}, marker={"symbol": st[v]["symbol"]}))
    fig.add_hline(y=l2_bytes / 2**20, line_dash="dot", annotation_text=f"L2 {l2_bytes / 2**20:.0f} MiB")
    fig.update_xaxes(type="log", title=x)
    fig.update_yaxes(type="log", title="modeled working set [MiB]")
    fig.update_layout(title=title, template=TEMPLATE, height=500)
    return fig


def onset_evidence(ev: pd.DataFrame, x: str, title: str) -> go.Figure:
    """The measured-onset rule's evidence: the hit rate, the running maximum before each point and
    the points below it by the threshold; the onset (if any) marked."""
    if ev.empty:
        return message("no points", title)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=ev[x], y=ev["l2_hit_rate"], mode="lines+markers", name="L2 hit rate [%]"))
    fig.add_trace(go.Scatter(x=ev[x], y=ev["running_max_before"], mode="lines", name="best at smaller " + x,
                             line={"dash": "dot"}))
    if "onset" in ev and ev["onset"].any():
        o = ev[ev["onset"]]
        fig.add_trace(go.Scatter(x=o[x], y=o["l2_hit_rate"], mode="markers", name="onset",
                                 marker={"size": 14, "symbol": "x", "color": "#c00"}))
    fig.update_xaxes(type="log", title=x)
    fig.update_layout(title=title, template=TEMPLATE, height=320)
    return fig


def l2_per_range(l2: pd.DataFrame, title: str, style: Style | None = None) -> go.Figure:
    """L2 hit rate per range (bars, one colour per implementation), for captures without a sweep."""
    d = l2[l2["l2_hit_rate"].notna()] if "l2_hit_rate" in l2 else l2.iloc[0:0]
    if d.empty:
        return message("no L2 hit rate", title)
    st = _style(style, d["variant"].astype(str).unique())
    hover = [c for c in ("bytes_DRAM", "bytes_L2", "dram_over_compulsory", "working_set_over_l2") if c in d]
    fig = px.bar(d, x="l2_hit_rate", y="range", color="variant", orientation="h", title=title, hover_data=hover,
                 labels={"l2_hit_rate": "L2 hit rate [%]", "range": ""}, color_discrete_map=_colors(st),
                 category_orders={"variant": list(st)})
    fig.update_layout(template=TEMPLATE, height=160 + 28 * len(d))
    return fig
