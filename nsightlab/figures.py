"""Plotly figures for the reports, and the offline HTML embedding of them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from .perf import ok_rows, ratio_to

_EMBEDDED = {"done": False, "src": "inline"}


def set_plotlyjs(src: str) -> None:
    """Where the figures get plotly.js: "inline" (the first figure of a notebook carries it) or a
    relative path such as ``../../plotly.min.js`` (the report runner ships one copy beside the reports)."""
    _EMBEDDED["src"] = src
    _EMBEDDED["done"] = False


def html(fig: go.Figure) -> str:
    """The figure as an HTML fragment that works offline and keeps plotly's interactivity."""
    first = not _EMBEDDED["done"]
    _EMBEDDED["done"] = True
    src = _EMBEDDED["src"]
    include = (True if src == "inline" else src) if first else False
    return fig.to_html(full_html=False, include_plotlyjs=include, config={"displaylogo": False, "responsive": True})


def show(fig: go.Figure) -> None:
    from IPython.display import HTML, display

    display(HTML(html(fig)))


_HOVER = ["config", "B", "H", "N", "D", "causal", "dtype", "options", "ms", "tflops", "gbps", "rel_l2"]


def throughput_vs_n(df: pd.DataFrame, suite: str, dtype: str, title: str) -> go.Figure:
    """TFLOP/s against N, one line per implementation, faceted by pass (columns) and D x causal (rows)."""
    ok = ok_rows(df)
    ok = ok[(ok["suite"] == suite) & (ok["dtype"] == dtype)].sort_values("N")
    ok["shape"] = "D=" + ok["D"].astype(str) + (" causal" if False else "") + ok["causal"].map(
        {True: ", causal", False: ""})
    fig = px.line(ok, x="N", y="tflops", color="impl", facet_col="pass", facet_row="shape", markers=True,
                  log_x=True, hover_data=[c for c in _HOVER if c in ok], title=title,
                  labels={"tflops": "TFLOP/s", "N": "sequence length N"},
                  category_orders={"pass": ["forward", "backward"]})
    fig.update_layout(height=300 * max(1, ok["shape"].nunique()), template="plotly_white")
    return fig


def ratio_vs_n(df: pd.DataFrame, suite: str, dtype: str, impl: str = "flash_mma",
               targets: dict[str, float] | None = None) -> go.Figure:
    """impl's throughput over SDPA flash's, against N, with the issue's targets as lines."""
    targets = targets or {"forward": 0.80, "backward": 0.60}
    r = ratio_to(df[(df["suite"] == suite) & (df["dtype"] == dtype)])
    r = r[r["impl"] == impl].sort_values("N")
    r["series"] = r["pass"] + ", D=" + r["D"].astype(str) + r["causal"].map({True: ", causal", False: ""})
    fig = px.line(r, x="N", y="ratio", color="series", markers=True, log_x=True,
                  hover_data=["config", "tflops", "ref_tflops", "options"],
                  labels={"ratio": f"{impl} / SDPA flash (TFLOP/s)", "N": "sequence length N"},
                  title=f"{impl} relative to PyTorch SDPA's flash backend, same run")
    for pass_, t in targets.items():
        fig.add_hline(y=t, line_dash="dot", annotation_text=f"{pass_} target {t:.0%}")
    fig.update_layout(template="plotly_white", height=450)
    return fig


def latency_bars(df: pd.DataFrame, suite: str, dtype: str, pass_: str) -> go.Figure:
    ok = ok_rows(df)
    ok = ok[(ok["suite"] == suite) & (ok["dtype"] == dtype) & (ok["pass"] == pass_)]
    fig = px.bar(ok, x="config", y="ms", color="impl", barmode="group", log_y=True,
                 hover_data=[c for c in _HOVER if c in ok],
                 title=f"{suite}: {pass_} latency, {dtype} (log scale)", labels={"ms": "median ms"})
    fig.update_layout(template="plotly_white", height=450)
    return fig


# --------------------------------------------------------------------------- Nsight figures

_RANGE_HOVER = ["variant", "pass", "B", "H", "N", "D", "dtype", "options"]
_LEVEL_SYMBOL = {"DRAM": "circle", "L2": "square", "L1": "diamond"}


def roofline(points: pd.DataFrame, ceil: pd.DataFrame, title: str) -> go.Figure:
    """Hierarchical roofline: every memory ceiling against every compute ceiling (log-log), and one
    point per range and level (symbol = level, colour = variant); the measured ceilings dashed."""
    import numpy as np

    fig = go.Figure()
    lo = max(points["intensity"].min() / 3, 1e-3) if len(points) else 1e-2
    hi = points["intensity"].max() * 3 if len(points) else 1e4
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    comp = ceil[ceil["kind"] == "compute"]
    mem = ceil[ceil["kind"] == "memory"]
    top = comp[~comp["name"].str.startswith("measured")]["value"].max()
    for _, m in mem.iterrows():
        measured = m["name"].startswith("measured")
        fig.add_trace(go.Scatter(x=x, y=np.minimum(top, m["value"] * x), mode="lines", name=f"{m['name']} {m['value'] / 1e12:.2f} TB/s",
                                 line={"dash": "dash" if measured else "solid", "width": 1.5}, hoverinfo="name"))
    for _, c in comp.iterrows():
        measured = c["name"].startswith("measured")
        fig.add_trace(go.Scatter(x=[lo, hi], y=[c["value"]] * 2, mode="lines", name=f"{c['name']} {c['value'] / 1e12:.0f} TFLOP/s",
                                 line={"dash": "dash" if measured else "dot", "width": 1}, hoverinfo="name"))
    palette = px.colors.qualitative.Plotly + px.colors.qualitative.Dark24
    color = {v: palette[i % len(palette)] for i, v in enumerate(sorted(points["variant"].unique()))}
    for (variant, level), g in points.groupby(["variant", "level"]):
        hover = [f"{variant} {r['pass']} B={r.B} H={r.H} N={r.N} D={r.D} {r['dtype']} {r['options']}<br>"
                 f"{level}: {r.intensity:.2f} FLOP/B, {r.flop_per_s / 1e12:.2f} TFLOP/s, {r.ms:.3f} ms"
                 for _, r in g.iterrows()]
        fig.add_trace(go.Scatter(x=g["intensity"], y=g["flop_per_s"], mode="markers", name=f"{variant} @ {level}",
                                 legendgroup=variant, marker={"symbol": _LEVEL_SYMBOL[level], "size": 8,
                                                              "color": color[variant]},
                                 hovertext=hover, hoverinfo="text"))
    fig.update_xaxes(type="log", title="arithmetic intensity [FLOP / byte]")
    fig.update_yaxes(type="log", title="performance [FLOP / s]")
    fig.update_layout(title=title, template="plotly_white", height=650)
    return fig


def flop_check_bars(fc: pd.DataFrame, title: str) -> go.Figure:
    fc = fc.sort_values(["variant", "pass", "N"])
    fig = px.scatter(fc, x="N", y="counted_over_analytic", color="variant", symbol="pass", log_x=True,
                     hover_data=[*_RANGE_HOVER, "flop", "analytic", "explanation"], title=title,
                     labels={"counted_over_analytic": "counted FLOPs / analytic FLOPs"})
    fig.add_hrect(y0=0.9, y1=1.1, fillcolor="green", opacity=0.08, line_width=0)
    fig.update_layout(template="plotly_white", height=450)
    return fig


def l2_vs_n(l2: pd.DataFrame, l2_bytes: float, onsets: pd.DataFrame, title: str) -> go.Figure:
    """L2 hit rate, DRAM/compulsory bytes and DRAM/L2-to-SM bytes against N, with each variant's
    modeled thrashing onset (working set = L2) as a vertical line."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.05,
                        subplot_titles=("L2 hit rate [%]", "DRAM bytes / compulsory bytes", "DRAM bytes / L2-to-SM bytes"))
    colors = px.colors.qualitative.Plotly
    for i, (variant, g) in enumerate(l2.sort_values("N").groupby("variant")):
        col = colors[i % len(colors)]
        for j, y in enumerate(("l2_hit_rate", "dram_over_compulsory", "dram_over_l2")):
            hover = [f"{variant} {r['pass']} N={r.N} D={r.D}<br>hit {r.l2_hit_rate:.1f}%, DRAM {r.bytes_DRAM / 1e6:.1f} MB, "
                     f"compulsory {r.compulsory / 1e6:.1f} MB, working set {r.working_set / 2**20:.1f} MiB "
                     f"({r.working_set_over_l2:.2f} x L2)" for _, r in g.iterrows()]
            fig.add_trace(go.Scatter(x=g["N"], y=g[y], mode="lines+markers", name=variant, legendgroup=variant,
                                     showlegend=j == 0, line={"color": col}, hovertext=hover, hoverinfo="text"),
                          row=j + 1, col=1)
        on = onsets[onsets["variant"] == variant]["modeled_onset_N"]
        if len(on) and np.isfinite(on.iloc[0]) and on.iloc[0] < l2["N"].max() * 1.5:
            fig.add_vline(x=float(on.iloc[0]), line={"color": col, "dash": "dot", "width": 1})
    fig.update_xaxes(type="log")
    fig.update_xaxes(title_text="sequence length N", row=3, col=1)
    fig.update_yaxes(type="log", row=2, col=1)
    fig.update_yaxes(type="log", row=3, col=1)
    fig.update_layout(title=title + f" (dotted: modeled working set = L2 = {l2_bytes / 2**20:.0f} MiB)",
                      template="plotly_white", height=900)
    return fig


def timeline(kernels: pd.DataFrame, ranges: pd.DataFrame, title: str) -> go.Figure:
    """NVTX ranges (top rows) and their kernels (one row per variant) on a time axis in ms."""
    t0 = min(ranges["start"].min(), kernels["start"].min()) if len(kernels) else ranges["start"].min()
    fig = go.Figure()
    r = ranges.assign(s=(ranges["start"] - t0) / 1e6, d=(ranges["end"] - ranges["start"]) / 1e6)
    fig.add_trace(go.Bar(y=["NVTX " + v for v in r["variant"]], x=r["d"], base=r["s"], orientation="h", name="NVTX ranges",
                         marker={"color": "rgba(44,160,44,0.5)"}, hovertext=r["range"], hoverinfo="text+x"))
    k = kernels.assign(s=(kernels["start"] - t0) / 1e6, d=(kernels["end"] - kernels["start"]) / 1e6)
    fig.add_trace(go.Bar(y=["GPU " + v for v in k["variant"].fillna("(outside ranges)")], x=k["d"], base=k["s"],
                         orientation="h", name="kernels", marker={"color": "rgba(31,119,180,0.8)"},
                         hovertext=[f"{a}<br>{b}<br>{d * 1e3:.1f} us" for a, b, d in zip(k["kernel"], k["range"], k["d"], strict=False)],
                         hoverinfo="text"))
    fig.update_layout(title=title, barmode="overlay", template="plotly_white", height=500,
                      xaxis_title="time [ms] from the first event shown")
    return fig


def metric_vs_option(df: pd.DataFrame, x: str, y: str, title: str, color: str = "variant") -> go.Figure:
    fig = px.bar(df, x=x, y=y, color=color, barmode="group", facet_col="pass", facet_row="D",
                 hover_data=[c for c in [*_RANGE_HOVER, "ms", "occupancy", "registers", "smem_bytes"] if c in df],
                 title=title)
    fig.update_layout(template="plotly_white", height=600)
    return fig


def lines_vs_n(df: pd.DataFrame, y: str, title: str, log_y: bool = True, ylabel: str | None = None) -> go.Figure:
    d = df.sort_values("N")
    fig = px.line(d, x="N", y=y, color="variant", facet_col="pass", facet_row="D", markers=True, log_x=True, log_y=log_y,
                  hover_data=[c for c in [*_RANGE_HOVER, "gpu_ms", "tflops", "kernels", "gap_ms"] if c in d], title=title,
                  labels={y: ylabel or y, "N": "sequence length N"}, category_orders={"pass": ["forward", "backward"]})
    fig.update_layout(template="plotly_white", height=650)
    return fig


def working_set_vs_n(ws: pd.DataFrame, l2_bytes: float, title: str) -> go.Figure:
    """Modeled working set [MiB] per variant and pass against N, with the L2 size as a line."""
    cols = [c for c in ws.columns if c.startswith("N=")]
    long = ws.melt(id_vars=["variant", "pass"], value_vars=cols, var_name="N", value_name="MiB")
    long["N"] = long["N"].str[2:].astype(int)
    long["series"] = long["variant"] + " " + long["pass"]
    fig = px.line(long, x="N", y="MiB", color="series", markers=True, log_x=True, log_y=True, title=title,
                  labels={"MiB": "modeled working set [MiB]", "N": "sequence length N"})
    fig.add_hline(y=l2_bytes / 2**20, line_dash="dot", annotation_text=f"L2 {l2_bytes / 2**20:.0f} MiB")
    fig.update_layout(template="plotly_white", height=500)
    return fig
