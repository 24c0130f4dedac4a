"""Plotly figures for the reports, and the offline HTML embedding of them."""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from .perf import ok_rows, ratio_to

_EMBEDDED = {"done": False}


def html(fig: go.Figure) -> str:
    """The figure as an HTML fragment; the first one of a notebook carries plotly.js inline, so the
    report works offline and keeps plotly's interactivity."""
    first = not _EMBEDDED["done"]
    _EMBEDDED["done"] = True
    return fig.to_html(full_html=False, include_plotlyjs=True if first else False,
                       config={"displaylogo": False, "responsive": True})


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
