"""Plotly figures for the reports, and the offline HTML embedding of them.

One colour and one marker per implementation, the same in every figure of every page: fixed by the
implementation's name (:data:`IMPL_STYLE`, the styles the problems and plug-ins registered; unknown names
by a hash of the name, :func:`impl_style`),
never by which other implementations a page holds. Whatever else varies is drawn in another channel:
the series of one implementation (its head dimensions, its dtypes) as line dashes (:data:`DASHES`)
with its colour, named "flash_mma D=128"; its option studies as bar patterns (:data:`PATTERNS`); option
settings on a roofline on a sequential grey scale (:func:`sequence_style`), greys being no
implementation's colour. A line trace is one series: every field that varies besides the x axis
splits or facets the traces (:func:`split_series`). A figure without data is no chart: :func:`show`
writes the sentence :func:`message` carries instead.

Axes that span decades are logarithmic with ticks at powers of ten written as plain numbers in the
axis unit (TFLOP/s, MiB, ms), so no tick mixes ``10^15`` with ``100T``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis.counters import identity_columns
from ..analysis.perf import facets, ok_rows, problem_of, ratio_to
from ..analysis.roofline import applies, roofs
from ..analysis.timeline import busy_ms
from ..core.text import impl_key
from ..problems import problem as problems
from .numbers import fmt_num, natural_key, plain_value, rounded

_EMBEDDED = {"done": False, "src": "inline"}
TEMPLATE = "plotly_white"
class _RegisteredStyles(Mapping[str, tuple[str, str]]):
    """The registered implementation styles (:func:`nsightlab.problems.problem.styles`), read when used: each
    problem and plug-in registers the colour and marker of its implementations."""

    def __getitem__(self, key: str) -> tuple[str, str]:
        found = problems.style_of(key)
        if found is None:
            raise KeyError(key)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(problems.styles())

    def __len__(self) -> int:
        return len(problems.styles())


#: The colour and marker of every implementation a problem or plug-in registered, keyed by its name: the same on
#: every page (captures, imported reports, comparisons, option studies), whatever else a figure draws beside it.
#: Greys and black are never an implementation's: they are kept for what is not one (ceilings, bands,
#: base / new, option settings on a sequential grey scale, annotations).
IMPL_STYLE: Mapping[str, tuple[str, str]] = _RegisteredStyles()
#: colours for names IMPL_STYLE lacks (a hash of the name picks one): each at least ΔE 20 (CIELAB) from every
#: colour above and from the greys, so an unknown implementation never passes for a known one
SPARE_COLORS = ("#511CFB", "#AA0DFE", "#FE00CE", "#3283FE", "#FF0092", "#F97B72", "#862A16", "#6F4070", "#117733",
                "#CC6677", "#B10DA1", "#00B5F7", "#80BA5A", "#B68E00", "#6C4516", "#11A579")
MARKERS = ("circle", "square", "diamond", "triangle-up", "cross", "x", "triangle-down", "pentagon", "star", "hexagon")
#: line dashes of the series of one implementation (its head dimensions, say): the colour stays the implementation's
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
#: marker fill patterns of the groups of one implementation's bars (its option studies)
PATTERNS = ("", "/", "x", ".", "\\", "+", "-", "|")
LEVEL_SYMBOL = {"DRAM": "circle", "L2": "square", "L1": "diamond"}
LEVEL_GLYPH = {"DRAM": "●", "L2": "■", "L1": "◆"}
#: width the page gives a figure (px): used to angle the labels of sloped lines
PAGE_WIDTH = 1180
GREY = "#888888"

Style = Mapping[str, Mapping[str, str]]


def set_plotlyjs(src: str) -> None:
    """Where the figures get plotly.js: "inline" (the first figure of a notebook carries it) or a
    relative path such as ``../../plotly.min.js`` (the report runner ships one copy beside the reports)."""
    _EMBEDDED["src"] = src
    _EMBEDDED["done"] = False


#: draws a page's figures: the first at once, the others when they come within a screen of the window
#: (IntersectionObserver), and whatever is left one at a time once the page has loaded and the browser is idle, so
#: that a long page shows its first figure as fast as a short one and is complete soon after; the page keeps its
#: vertical scrollbar from the start, so a figure drawn while the page is still short is not left 15 px too wide
#: (a scrollbar that appears later resizes no window, so plotly does not redraw), and a figure's output area never
#: scrolls (a figure a pixel taller than its box, from rounding, would give it a scrollbar and a sideways scroll)
LOADER = """<style>html{overflow-y:scroll}.jp-OutputArea-output:has(>.nsl-fig){overflow:visible}</style>
<script>(function(){if(window.nslFigure)return;var all=[],io=null;
function draw(el){if(el.getAttribute('data-drawn')||typeof Plotly==='undefined')return;el.setAttribute('data-drawn','1');
var f=JSON.parse(document.getElementById(el.id+'-spec').textContent);Plotly.newPlot(el,f.data,f.layout,f.config);}
function idle(){var next=all.find(function(e){return !e.getAttribute('data-drawn');});if(!next)return;draw(next);
setTimeout(idle,30);}
window.nslFigure=function(id){var el=document.getElementById(id);all.push(el);
if(all.length===1||!('IntersectionObserver' in window)){draw(el);return;}
if(!io){io=new IntersectionObserver(function(es){es.forEach(function(e){if(e.isIntersecting){io.unobserve(e.target);
draw(e.target);}});},{rootMargin:'1200px 0px'});}io.observe(el);};
window.addEventListener('load',function(){setTimeout(idle,200);});})();</script>"""


def html(fig: go.Figure) -> str:
    """The figure as an HTML fragment that works offline and keeps plotly's interactivity, drawn by
    :data:`LOADER` (the first figure of a page at once, the others as they are scrolled to or the browser
    is idle; its height is kept free meanwhile, so the page does not jump). Its numbers are written to
    :data:`~nsightlab.render.numbers.PAGE_DIGITS` significant digits and the div id is derived from them,
    so the same data gives the same bytes on every machine (last-digit differences between CPUs or numpy
    builds do not reach the page)."""
    first = not _EMBEDDED["done"]
    _EMBEDDED["done"] = True
    src = _EMBEDDED["src"]
    spec = rounded(json.loads(fig.to_json()))
    div = "fig-" + hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    head = ""
    if first:
        if src == "inline":
            from plotly.offline import get_plotlyjs

            head = f'<script charset="utf-8">{get_plotlyjs()}</script>'
        else:
            head = f'<script charset="utf-8" src="{src}"></script>'
        head += LOADER
    spec = {"data": spec.get("data", []), "layout": spec.get("layout", {}),
            "config": {"displaylogo": False, "responsive": True}}
    text = json.dumps(spec, separators=(",", ":")).replace("</", "<\\/").replace("<!--", "\\u003c!--")
    height = int(spec["layout"].get("height") or 450)
    return (f'{head}<div id="{div}" class="plotly-graph-div nsl-fig" style="height:{height}px; width:100%;"></div>'
            f'<script type="application/json" id="{div}-spec">{text}</script>'
            f'<script>nslFigure("{div}")</script>')


def show(fig: go.Figure) -> None:
    """Put ``fig`` on the page; a figure with nothing to draw (:func:`message`) as one sentence instead."""
    from IPython.display import HTML, display

    if is_empty(fig):
        import html as _html

        display(HTML(f'<p class="nsl-note nsl-empty">{_html.escape(empty_sentence(fig))}</p>'))
        return
    display(HTML(html(fig)))


# --------------------------------------------------------------------------- style


def impl_style(name: object) -> dict[str, str]:
    """The colour and marker of implementation ``name``: the registered one (:data:`IMPL_STYLE`) for a known name, else
    picked from :data:`SPARE_COLORS` and :data:`MARKERS` by a hash of the name (two independent picks,
    so two unknown names that share a colour rarely share the marker too). Depends on the name alone."""
    key = impl_key(name)
    registered = problems.style_of(key)
    if registered is not None:
        color, symbol = registered
        return {"color": color, "symbol": symbol}
    h = hashlib.sha256(key.encode()).digest()
    return {"color": SPARE_COLORS[int.from_bytes(h[:4], "big") % len(SPARE_COLORS)],
            "symbol": MARKERS[int.from_bytes(h[4:8], "big") % len(MARKERS)]}


def sweep_axis(frame: pd.DataFrame, x: str | None = None) -> str:
    """``x``, else the sweep axis of the problem whose fields ``frame`` has
    (:attr:`nsightlab.problems.problem.Problem.sweep_axis`)."""
    return problems.axis_for(frame.columns, x)


def style_for(names: Iterable[str]) -> dict[str, dict[str, str]]:
    """The colour and marker of each name (:func:`impl_style`: by the name alone, never by its position or
    by the other names), deduplicated, in the order given (the order legends list them)."""
    out: dict[str, dict[str, str]] = {}
    for name in names:
        if name is None or (isinstance(name, float) and np.isnan(name)) or str(name) in out:
            continue
        out[str(name)] = impl_style(name)
    return out


#: the colour of the "before" side when one implementation is compared with itself across two captures:
#: a grey, which is no implementation's colour (the "after" side keeps the implementation's own)
BEFORE_COLOR = "#9a9a9a"


def before_after(style: Style, before: str, after: str, impl: str) -> Style:
    """``style`` with the two sides of one implementation across two captures (``impl @ tag`` names): ``after``
    (the second capture's side, a change's result) in the implementation's own colour and marker, ``before``
    in :data:`BEFORE_COLOR` with the same marker, so that the two read apart and the implementation keeps
    its colour."""
    own = impl_style(impl)
    return {**style, before: {"color": BEFORE_COLOR, "symbol": own["symbol"]}, after: dict(own)}


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


def sequence_style(values: Iterable[object], symbol: str = "circle") -> dict[str, dict[str, str]]:
    """A sequential grey scale over ``values`` in their natural order (light to dark), for colouring by
    something that is not an implementation (an implementation's option settings): greys are no
    implementation's colour, so such a figure cannot be read as one implementation per colour."""
    labels = sorted(dict.fromkeys(str(v) for v in values), key=natural_key)
    n = len(labels)
    out = {}
    for i, lab in enumerate(labels):
        level = 0x1a if n == 1 else round(0xb4 - (0xb4 - 0x1a) * i / (n - 1))
        out[lab] = {"color": f"#{level:02x}{level:02x}{level:02x}", "symbol": symbol}
    return out


def _yes_no(field: str) -> bool:
    """Whether ``field`` is a yes/no parameter of a registered problem (named when true, "non-..." when false)."""
    return any(field in p.yes_no_fields for p in problems.known().values())


def _series_value(field: str, v: object) -> str:
    missing = v is None or (isinstance(v, (float, np.floating)) and np.isnan(v))
    if _yes_no(field) or isinstance(v, (bool, np.bool_)):
        return field if bool(v) else f"non-{field}"
    if field == "options":
        return "default options" if missing or v == "" else str(v)
    if field in ("pass", "dtype", "variant"):
        return str(v)
    if missing:
        return f"{field} not in the range name"  # an optional field left at its default (attention's Hkv = H)
    return f"{field}={plain_value(v)}"


def series_fields(d: pd.DataFrame, x: str, fields: Iterable[str], by: Sequence[str] = ("variant",)) -> list[str]:
    """The ``fields`` that split ``d``'s lines (traces are ``by`` and facets): each field that, within one
    line so far (``by`` and the fields chosen before it), takes two values at one ``x``, where a single
    line would zig-zag between them. A field that changes with ``x`` alone (B as N grows) splits nothing,
    nor does one that follows from those chosen (a tile option per head dimension)."""
    keys = [c for c in by if c in d]
    out: list[str] = []
    for c in fields:
        if c not in d or c == x or c in keys or c in out or d[c].nunique(dropna=False) < 2:
            continue
        n = d.groupby([*keys, *out, x], dropna=False, sort=False)[c].nunique(dropna=False)
        if (n > 1).any():
            out.append(c)
    return out


def split_series(d: pd.DataFrame, x: str, fields: Iterable[str], by: Sequence[str] = ("variant",)) -> pd.DataFrame:
    """``d`` with ``_series`` (the row's values of the :func:`series_fields`: ``D=128``; "" where no field
    splits) and ``_trace`` (``flash_mma D=128``: the line's name), and ``attrs["series"]``: the series
    labels in their fields' natural order (D=64 before D=128, non-causal before causal)."""
    split = series_fields(d, x, list(fields), by)
    out = d.copy()
    if split:
        out["_series"] = [" ".join(_series_value(f, v) for f, v in zip(split, row, strict=True))
                          for row in out[split].itertuples(index=False, name=None)]
        order = _shape_order(out, split, out["_series"])
    else:
        out["_series"] = ""
        order = [""]
    name = out[by[0]].astype(str) if by and by[0] in out else pd.Series("", index=out.index)
    out["_trace"] = (name + " " + out["_series"]).str.strip()
    out.attrs["series"] = order
    out.attrs["series_fields"] = split
    return out


def series_dash(order: Sequence[str]) -> dict[str, str]:
    """The dash of each series label (the first solid): the same series, the same dash, in every colour."""
    return {s: DASHES[i % len(DASHES)] for i, s in enumerate(order)}


def message(text: str, title: str = "") -> go.Figure:
    """Why there is nothing to draw (``text``: a sentence's end for users, e.g. "sdpa_cudnn ran no float32
    case"). :func:`show` writes it as a sentence instead of drawing a figure; the figure itself (a note in
    an empty frame) is for callers that embed it anyway. ``layout.meta["empty"]`` holds the text."""
    fig = go.Figure()
    fig.add_annotation(text=text, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font={"size": 14})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(title=title, template=TEMPLATE, height=180, margin={"t": 40, "b": 10},
                      meta={"empty": text, "title": title})
    return fig


def is_empty(fig: go.Figure) -> bool:
    """Whether ``fig`` is a :func:`message` (nothing drawn)."""
    meta = fig.layout.meta
    return isinstance(meta, dict) and bool(meta.get("empty"))


def empty_sentence(fig: go.Figure) -> str:
    """A :func:`message` figure as one sentence for the page: ``No figure for “<title>”: <text>.``"""
    meta = fig.layout.meta
    text = str(meta.get("empty", "")).rstrip(".")
    title = re.sub(r"<[^>]+>", " ", str(meta.get("title") or "")).strip()
    title = re.sub(r"\s+", " ", title)
    return f"No figure for “{title}”: {text}." if title else f"No figure: {text}."


# --------------------------------------------------------------------------- axes, facets, legends


def log_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Tick values at powers of ten between ``lo`` and ``hi`` (with 2 and 5 between them when the
    range spans less than three decades), labelled as plain numbers (``10k``, ``1M`` once the axis
    reaches 100,000, so long axes stay legible)."""
    lo, hi = max(lo, 1e-30), max(hi, lo * 10)
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    mult = (1, 2, 5) if b - a < 3 else (1,)
    vals = [m * 10.0**e for e in range(a, b + 1) for m in mult if lo <= m * 10.0**e <= hi]
    if len(vals) < 2:
        vals = [10.0**a, 10.0**b]
    compact = hi >= 1e5
    return vals, [_tick(v, compact) for v in vals]


def _tick(v: float, compact: bool) -> str:
    if 0 < v < 1e-3:
        m, e = f"{v:.0e}".split("e")
        return f"{m}e{int(e)}"
    if compact and v >= 1000:
        for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
            if v >= div:
                return f"{v / div:g}{suffix}"
    return fmt_num(v)


def log_axis(fig: go.Figure, axis: str, lo: float, hi: float, title: str | None = None, pad: float = 1.6,
             **where: int) -> None:
    """Make ``axis`` ("x" or "y") logarithmic over [lo / pad, hi * pad] with plain-number decade ticks."""
    lo, hi = lo / pad, hi * pad
    vals, text = log_ticks(lo, hi)
    upd = {"type": "log", "range": [math.log10(lo), math.log10(hi)], "tickvals": vals, "ticktext": text}
    if title is not None:
        upd["title_text"] = title
    (fig.update_xaxes if axis == "x" else fig.update_yaxes)(**upd, **where)


def _finite(values: Iterable[float]) -> np.ndarray:
    a = np.asarray(list(values), dtype=float)
    return a[np.isfinite(a) & (a > 0)]


def clean_facet_labels(fig: go.Figure) -> None:
    """Facet titles read ``D=64`` or ``forward``, not ``shape=D=64`` or ``pass=forward``."""
    def fix(a: go.layout.Annotation) -> None:
        text = a.text or ""
        key, sep, val = text.partition("=")
        if sep and key in ("pass", "shape", "series", "study", "view", "facet"):
            a.update(text=val)

    fig.for_each_annotation(fix)


def rank_legend(fig: go.Figure, names: Sequence[str]) -> None:
    """Legend entries in the style's order, whichever facet a trace first appears in."""
    pos = {n: i for i, n in enumerate(names)}
    fig.for_each_trace(lambda t: t.update(legendrank=100 + pos[t.name]) if t.name in pos else None)


def reveal_coinciding(fig: go.Figure, rtol: float = 0.01) -> list[list[str]]:
    """Line traces on the same axes that lie on one another (the same x values, every y within ``rtol``)
    are drawn as nested stripes, so that no implementation hides under another: the first drawn widest,
    each later one narrower on top of it (markers likewise), and each one's hover names the others.
    Returns the groups found (trace names, in drawing order)."""
    seen: dict[tuple, list[Any]] = {}
    for t in fig.data:
        if t.type not in ("scatter", "scattergl") or "lines" not in (t.mode or "lines") or t.x is None or t.y is None:
            continue
        x = tuple(None if v is None or (isinstance(v, float) and np.isnan(v)) else v for v in t.x)
        y = np.asarray(t.y, dtype=float)
        for (axes, gx), group in seen.items():
            first = group[0]
            if axes == (t.xaxis, t.yaxis) and gx == x and np.allclose(y, np.asarray(first.y, dtype=float),
                                                                  rtol=rtol, equal_nan=True):
                group.append(t)
                break
        else:
            seen[((t.xaxis, t.yaxis), x)] = [t]
    groups = [g for g in seen.values() if len(g) > 1]
    for group in groups:
        names = [str(t.name) for t in group]
        for k, t in enumerate(group):
            wider = len(group) - 1 - k
            t.line.width = 2 + 2.5 * wider
            t.marker.size = 6 + 4 * wider
            others = ", ".join(n for n in names if n != str(t.name))
            note = f"<br>(lies on {others}: drawn as nested stripes)"
            if t.hovertext is not None and not isinstance(t.hovertext, str):
                t.hovertext = [f"{h}{note}" for h in t.hovertext]
            elif isinstance(t.hovertext, str):
                t.hovertext = t.hovertext + note
    return [[str(t.name) for t in g] for g in groups]


def fit_legend(fig: go.Figure, entries: int, min_height: int = 420) -> None:
    """Tall enough that the legend's ``entries`` never scroll."""
    need = 110 + 21 * entries
    h = fig.layout.height or 450
    fig.update_layout(height=max(h, need, min_height))


def shape_label(df: pd.DataFrame, fields: Sequence[str]) -> pd.Series:
    """``D=64, causal`` style labels from the given fields (yes/no fields by name when true)."""
    def one(r: pd.Series) -> str:
        out = []
        for f in fields:
            v = r[f]
            if isinstance(v, (bool, np.bool_)) or _yes_no(f):
                if bool(v):
                    out.append(f)
            elif f in ("pass", "variant"):
                out.append(str(v))
            elif pd.notna(v) and v != "":
                out.append(f"{f}={plain_value(v)}")
        return ", ".join(out) or "all"

    return df.apply(one, axis=1) if len(df) else pd.Series([], dtype=str)


def _shape_order(df: pd.DataFrame, fields: Sequence[str], label: pd.Series) -> list[str]:
    """The distinct labels sorted by the fields' values (numbers numerically, false before true)."""
    keyed = df.assign(_label=label).drop_duplicates("_label")
    keyed = keyed.sort_values(list(fields), key=lambda s: s.map(lambda v: natural_key(plain_value(v))))
    return list(keyed["_label"])


_ORDER = {"pass": ["forward", "backward"]}


def _orders(d: pd.DataFrame, **extra: list) -> dict[str, list]:
    """Category orders for a figure of ``d``: the passes it holds, forward first (a pass listed but absent would
    draw an empty facet: the decode suite times the forward alone), and ``extra``."""
    held = set(d["pass"]) if "pass" in d else set()
    return {"pass": [p for p in _ORDER["pass"] if p in held] + sorted(held - set(_ORDER["pass"]), key=str), **extra}


# --------------------------------------------------------------------------- benchmark CSVs

def _hover(d: pd.DataFrame, *extra: str) -> list[str]:
    """A benchmark figure's hover fields: the configuration, the problem's table columns, dtype, options, times."""
    cols = ["config", *problem_of(d).table_columns(), "dtype", "options", *extra]
    return [c for c in dict.fromkeys(cols) if c in d]


def _bench_axes(d: pd.DataFrame) -> tuple[str, list[str], list[str]]:
    """A benchmark frame's sweep axis (its problem's), the fields its rows are faceted by (those the problem sorts
    before the axis: attention's head dim and mask), and the other fields that can tell two rows of one
    implementation apart at one value of the axis (:func:`split_series`)."""
    problem = problem_of(d)
    axis, rows = problem.sweep_axis, [f for f in facets(problem) if f in d]
    rest = [f for f in (*problem.sort_order(), *problem.key_fields) if f in d and f not in (axis, *rows)
            and f not in ("suite", "config", "dtype", "pass")]
    return axis, rows, [*dict.fromkeys(rest), *(["options"] if "options" in d else [])]


def _axis_title(d: pd.DataFrame, axis: str) -> str:
    """``N (query length)`` style: the parameter's name and the first words of its help."""
    try:
        text = problem_of(d).parameter(axis).help
    except KeyError:  # not one of the problem's parameters
        text = ""
    short = re.split(r"[:;,(]", text or "")[0].strip()
    return f"{axis} ({short})" if short and len(short) <= 40 else axis


def _trace_style(d: pd.DataFrame, st: Style, name: str) -> tuple[list[str], dict[str, str], dict[str, str], dict[str, str]]:
    """For a frame from :func:`split_series`: its traces (implementations in the style's order, then
    series), and each trace's colour and marker (its implementation's) and dash (its series')."""
    dash = series_dash(d.attrs.get("series") or [""])
    rank = {n: i for i, n in enumerate(st)}
    srank = {s: i for i, s in enumerate(dash)}
    first = d.drop_duplicates("_trace")
    rows = sorted(zip(first["_trace"], first[name].astype(str), first["_series"], strict=True),
                  key=lambda t: (rank.get(t[1], len(rank)), srank.get(t[2], 0)))
    traces = [t for t, _, _ in rows]
    colors = {t: st[n]["color"] for t, n, _ in rows}
    symbols = {t: st[n]["symbol"] for t, n, _ in rows}
    dashes = {t: dash.get(s, "solid") for t, _, s in rows}
    return traces, colors, symbols, dashes


def throughput_vs_n(df: pd.DataFrame, suite: str, dtype: str, title: str, style: Style | None = None,
                    only: Sequence[str] | None = None, left_out: Mapping[str, float] | None = None) -> go.Figure:
    """TFLOP/s against the problem's sweep axis (attention: N), one line per implementation, faceted by pass
    (columns) and the fields the problem sorts before its axis (rows; attention: D × causal); any other field that
    varies at one value of the axis splits an implementation's line ("H=32", dashed). The axis is logarithmic. With ``only`` (the competitive implementations,
    :func:`nsightlab.analysis.perf.competitive`) just those are drawn, on a linear TFLOP/s axis zoomed to each
    row's range, so a few per cent between two fast kernels can be seen; ``left_out`` (name -> median share of
    the fastest) is named under the title. Without it every implementation is drawn on a log axis."""
    ok = ok_rows(df)
    axis, rows, others = _bench_axes(df)
    ok = ok[(ok["suite"] == suite) & (ok["dtype"] == dtype) & (ok["tflops"] > 0)].sort_values(axis)
    if only is not None:
        ok = ok[ok["impl"].isin(list(only))]
    if ok.empty:
        return message(f"no {dtype} case of {suite} ran successfully", title)
    ok["shape"] = shape_label(ok, rows)
    shapes = _shape_order(ok, rows, ok["shape"])
    st = _style(style, ok["impl"].unique())
    ok = split_series(ok, axis, others, by=("impl", "pass", "shape"))
    traces, colors, symbols, dashes = _trace_style(ok, st, "impl")
    if left_out:
        names = ", ".join(f"{n} ({v:.2g}x)" for n, v in sorted(left_out.items(), key=lambda kv: -kv[1]))
        title = f"{title}<br><sup>not drawn (median share of the fastest): {names}; the ratios below hold them</sup>"
    fig = px.line(ok, x=axis, y="tflops", color="_trace", symbol="_trace", line_dash="_trace", facet_col="pass",
                  facet_row="shape", markers=True, hover_data=_hover(ok, "ms", "tflops", "gbps", "rel_l2"), title=title,
                  labels={"tflops": "TFLOP/s", axis: _axis_title(ok, axis), "_trace": "implementation"},
                  color_discrete_map=colors, symbol_map=symbols, line_dash_map=dashes,
                  category_orders=_orders(ok, _trace=traces, shape=shapes), facet_row_spacing=0.06 if only else 0.04)
    clean_facet_labels(fig)
    if only is None:
        log_axis(fig, "y", ok["tflops"].min(), ok["tflops"].max())
    else:  # linear, each row zoomed to its own range (rows differ in D and masking, so in attainable TFLOP/s)
        fig.update_yaxes(matches=None, showticklabels=True, rangemode="normal", tickformat=",.0f")
        for i, shp in enumerate(reversed(shapes), 1):  # plotly numbers facet rows from the bottom
            v = ok.loc[ok["shape"] == shp, "tflops"]
            lo, hi = float(v.min()), float(v.max())
            pad = max(0.04 * hi, 0.075 * (hi - lo))
            fig.update_yaxes(range=[max(lo - pad, 0.0), hi + pad], row=i)
    log_axis(fig, "x", ok[axis].min(), ok[axis].max(), pad=1.15)
    fig.update_yaxes(title_text="")
    fig.update_yaxes(title_text="TFLOP/s", col=1)
    fig.update_layout(height=80 + 300 * len(shapes) + (30 if left_out else 0), template=TEMPLATE)
    if left_out:
        fig.update_layout(margin={"t": 110})
    rank_legend(fig, traces)
    fit_legend(fig, len(traces))
    return fig


def ratio_vs_n(df: pd.DataFrame, suite: str, dtype: str, impl: str, reference: str,
               targets: Mapping[str, float] | None = None, style: Style | None = None) -> go.Figure:
    """``impl``'s throughput over ``reference``'s against the problem's sweep axis (attention: N), one facet per
    pass, one line per shape (the fields the problem sorts before its axis, and any other field that varies at one
    value of it), all in ``impl``'s colour, told apart by dash and marker, with the pass's target as a line."""
    axis, rows, others = _bench_axes(df)
    r = ratio_to(df[(df["suite"] == suite) & (df["dtype"] == dtype)], reference)
    r = r[r["impl"] == impl].sort_values(axis)
    title = f"{impl} relative to {reference}, same run ({suite}, {dtype})"
    if r.empty:
        return message(f"{impl} and {reference} ran no {dtype} configuration of {suite} in common", title)
    r["shape"] = shape_label(r, rows)
    r = split_series(r, axis, others, by=("shape", "pass"))
    r["shape"] = (r["shape"] + " " + r["_series"]).str.strip()
    shapes = _shape_order(r, [*rows, *r.attrs.get("series_fields", [])], r["shape"])
    color = _style(style, [impl])[impl]["color"]
    passes = [p for p in ("forward", "backward") if p in set(r["pass"])]
    fig = make_subplots(rows=1, cols=len(passes), subplot_titles=passes, shared_yaxes=True, horizontal_spacing=0.06)
    for j, p in enumerate(passes, 1):
        for k, shp in enumerate(shapes):
            g = r[(r["pass"] == p) & (r["shape"] == shp)]
            if g.empty:
                continue
            fig.add_trace(go.Scatter(x=g[axis], y=g["ratio"], mode="lines+markers", name=shp, legendgroup=shp,
                                     showlegend=j == 1, line={"color": color, "dash": DASHES[k % len(DASHES)]},
                                     marker={"symbol": MARKERS[k % len(MARKERS)]},
                                     hovertemplate=f"{shp} {axis}=%{{x}}<br>ratio %{{y:.0%}}<extra>{p}</extra>"), 1, j)
        t = (targets or {}).get(p)
        if t is not None:
            fig.add_hline(y=t, line_dash="dot", line_color="#222222", annotation_text=f"target {t:.0%}",
                          annotation_position="top left", row=1, col=j)
    fig.update_yaxes(tickformat=".0%", title_text=f"{impl} / {reference}", col=1)
    log_axis(fig, "x", r[axis].min(), r[axis].max(), _axis_title(r, axis), pad=1.15)
    fig.update_layout(title=title, template=TEMPLATE, height=420, legend_title_text=f"{impl}: shape")
    return fig


def latency_bars(df: pd.DataFrame, suite: str, dtype: str, pass_: str, style: Style | None = None) -> go.Figure:
    """Median time per configuration (rows), one marker per implementation on a logarithmic time axis:
    a dot plot, since a bar's length on a log axis means nothing."""
    ok = ok_rows(df)
    ok = ok[(ok["suite"] == suite) & (ok["dtype"] == dtype) & (ok["pass"] == pass_)]
    title = f"{suite}: {pass_} latency, {dtype}"
    if ok.empty:
        return message(f"no {pass_} case of {suite} ran successfully in {dtype}", title)
    st = _style(style, ok["impl"].unique())
    impls = [i for i in st if i in set(ok["impl"])]
    configs = list(dict.fromkeys(ok["config"]))
    fig = px.scatter(ok, x="ms", y="config", color="impl", symbol="impl",
                     hover_data=_hover(ok, "ms", "tflops", "gbps", "rel_l2"), title=title,
                     labels={"ms": "median time [ms]", "impl": "implementation", "config": ""},
                     color_discrete_map=_colors(st), symbol_map=_symbols(st),
                     category_orders={"impl": impls, "config": configs})
    log_axis(fig, "x", ok["ms"].min(), ok["ms"].max(), "median time [ms] (log)", pad=1.3)
    fig.update_yaxes(autorange="reversed", tickfont={"size": 12}, showgrid=True)
    fig.update_traces(marker={"size": 10, "line": {"width": 0.5, "color": "white"}})
    fig.update_layout(template=TEMPLATE, height=max(320, 150 + 26 * len(configs)))
    rank_legend(fig, impls)
    fit_legend(fig, len(impls))
    return fig


#: ratios whose largest over their smallest passes this go on a log axis; closer ones on a linear axis around 1x
RATIO_DECADE = 10.0


def speedup_vs_reference(df: pd.DataFrame, suite: str, dtype: str, reference: str,
                         style: Style | None = None) -> go.Figure:
    """Time of ``reference`` over time of each implementation, per configuration (> 1 is faster than the
    reference; a log axis where the ratios span more than :data:`RATIO_DECADE`, else a linear one zoomed around
    1x), one facet per pass; configurations in rows, so their names read horizontally at full size."""
    ok = ok_rows(df)
    ok = ok[(ok["suite"] == suite) & (ok["dtype"] == dtype)]
    title = f"{suite} ({dtype}): speed relative to {reference} (> 1: faster)"
    ref = ok[ok["impl"] == reference][["config", "pass", "ms"]].rename(columns={"ms": "ref_ms"})
    d = ok.merge(ref, on=["config", "pass"])
    d = d[d["impl"] != reference]
    if d.empty:
        why = (f"{reference} ran no {dtype} case of {suite}" if ref.empty else
               f"no other implementation ran a {dtype} configuration of {suite} that {reference} ran")
        return message(why, title)
    d["speedup"] = d["ref_ms"] / d["ms"]
    st = _style(style, d["impl"].unique())
    impls = [i for i in st if i in set(d["impl"])]
    configs = list(dict.fromkeys(c for c in ok["config"] if c in set(d["config"])))
    fig = px.scatter(d, x="speedup", y="config", color="impl", symbol="impl", facet_col="pass",
                     category_orders=_orders(d, impl=impls, config=configs), title=title,
                     labels={"speedup": f"× {reference}", "impl": "implementation", "config": ""},
                     hover_data=["ms", "ref_ms", *[c for c in problem_of(d).table_columns() if c in d]],
                     color_discrete_map=_colors(st),
                     symbol_map=_symbols(st))
    clean_facet_labels(fig)
    fig.add_vline(x=1, line_color=GREY, line_width=1)
    lo, hi = float(min(d["speedup"].min(), 1.0)), float(max(d["speedup"].max(), 1.0))
    if hi / lo > RATIO_DECADE:  # ratios that span decades: log
        log_axis(fig, "x", lo, hi, pad=1.5)
    else:  # close to 1x: linear, zoomed, so that 0.96x and 1.0x are told apart
        pad = 0.08 * (hi - lo) + 0.01
        fig.update_xaxes(type="linear", range=[lo - pad, hi + pad], tickformat=".2f")
    fig.update_xaxes(title_text=f"{reference} time / time")
    fig.update_yaxes(autorange="reversed", tickfont={"size": 12}, showgrid=True)
    fig.update_traces(marker={"size": 9, "line": {"width": 0.5, "color": "white"}})
    fig.update_layout(template=TEMPLATE, height=max(360, 160 + 24 * len(configs)))
    rank_legend(fig, impls)
    fit_legend(fig, len(impls))
    return fig


def accuracy_strip(ok: pd.DataFrame, style: Style | None = None) -> go.Figure:
    """Relative L2 error of every checked row, per implementation (log scale; colour: the
    implementation, marker: the dtype)."""
    title = "Relative L2 error against the fp64 reference, every checked row"
    if ok.empty or "rel_l2" not in ok:
        return message("no checked rows", title)
    d = ok[ok["rel_l2"] > 0]
    st = _style(style, d["impl"].unique())
    impls = [i for i in st if i in set(d["impl"])]
    fig = px.strip(d, x="impl", y="rel_l2", color="impl", facet_col="pass", title=title,
                   hover_data=["suite", *_hover(d, "max_rel")], labels={"rel_l2": "relative L2 error", "impl": ""},
                   category_orders=_orders(d, impl=impls), color_discrete_map=_colors(st))
    clean_facet_labels(fig)
    log_axis(fig, "y", d["rel_l2"].min(), d["rel_l2"].max(), pad=2)
    fig.update_layout(template=TEMPLATE, height=480, showlegend=False)
    fig.update_xaxes(tickangle=-35)
    return fig


# --------------------------------------------------------------------------- roofline


def _label(r: pd.Series, fields: Iterable[str]) -> str:
    return " ".join(f"{c}={plain_value(r[c])}" for c in fields if c in r and pd.notna(r[c]) and r[c] != "")


def _label_spots(values: Sequence[float], widths: Sequence[float], height: float, px_per_decade: float,
                 plot_px: float, obstacles: Sequence[tuple[float, float]] = ()) -> list[tuple[float, bool]]:
    """Where to write the labels of horizontal lines so that no two overlap: for each line (``values``
    in log10 units; ``widths`` and ``height`` of its label in pixels), the label's right end as a
    fraction of the plot's width and whether it sits above its line. Greedy from the highest line:
    above, else below, at the right end or further left; a spot whose label would cross another
    line, or cover one of the ``obstacles`` (data points: x in pixels from the plot's left, y in log10 units),
    is taken only if no other is free."""
    pts = [(x, y * px_per_decade) for x, y in obstacles]
    order = sorted(range(len(values)), key=lambda i: -values[i])
    ys = [v * px_per_decade for v in values]
    boxes: list[tuple[float, float, float, float]] = []  # x0, x1, y0, y1 in pixels
    out: dict[int, tuple[float, bool]] = {}
    steps = [1.0 - 0.05 * k for k in range(15)]
    for i in order:
        for strict in (True, False):
            for right in steps:
                x1 = right * plot_px
                x0 = x1 - widths[i]
                if x0 < 0:
                    continue
                for above in (True, False):
                    y0, y1 = (ys[i], ys[i] + height) if above else (ys[i] - height, ys[i])
                    if any(x0 < bx1 and x1 > bx0 and y0 < by1 and y1 > by0 for bx0, bx1, by0, by1 in boxes):
                        continue
                    if strict and any(y0 + 1 < w < y1 - 1 for j, w in enumerate(ys) if j != i):
                        continue
                    if strict and any(x0 - 6 < px < x1 + 6 and y0 - 6 < py < y1 + 6 for px, py in pts):
                        continue
                    boxes.append((x0, x1, y0, y1))
                    out[i] = (right, above)
                    break
                if i in out:
                    break
            if i in out:
                break
    return [out.get(i, (1.0, True)) for i in range(len(values))]


@dataclass(frozen=True)
class _RoofAxes:
    """What every panel of a roofline shares: facets, axis ranges and the geometry of its labels."""

    rows: list[Any]  # facet_row values, or [None]
    cols: list[Any]  # passes, or [None]
    top: float  # the highest roof that holds everywhere [TFLOP/s]
    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float
    height: int
    px_per_decade: float  # one decade of the y axis on screen [px]
    w_px: float  # one panel's width on screen [px]
    angle: float  # a memory roof's slope on screen [degrees]

    def px(self, x: float, y: float) -> tuple[float, float]:
        """A point's place on screen (px from the panel's bottom left)."""
        return (math.log10(x / self.x_lo) / math.log10(self.x_hi / self.x_lo) * self.w_px,
                math.log10(y / self.y_lo) * self.px_per_decade)


#: a roofline's margins (px): fixed, so that labels can be placed off the data by computation
ROOF_MARGIN = {"l": 80, "r": 20, "t": 110, "b": 60}
#: how far right of the data the intensity axis reaches: a level whose points lie further (the L1 of TMA and
#: wgmma kernels, whose shared-memory traffic the L1 counters do not see) is drawn at the edge, pointing right
CLIP_DECADES = 0.6


def _roof_axes(pts: pd.DataFrame, roofs: pd.DataFrame, facet_row: str | None, legend_px: float = 260) -> _RoofAxes:
    passes = [p for p in ("forward", "backward") if "pass" in pts and p in set(pts["pass"])]
    cols = passes if len(passes) > 1 else [None]
    rows: list[Any] = [None]
    if facet_row and facet_row in pts and pts[facet_row].nunique() > 1:
        rows = sorted(pts[facet_row].dropna().unique(), key=lambda v: natural_key(plain_value(v)))
    comp = roofs[(roofs["kind"] == "compute") & roofs["where"].isna() & (roofs["role"] != "reference")]
    comp = comp if len(comp) else roofs[roofs["kind"] == "compute"]
    top = comp["value"].max() / 1e12 if len(comp) else pts["tflops"].max() * 2
    mem = roofs[(roofs["kind"] == "memory") & (roofs["role"] == "limit")]
    mem = mem if len(mem) else roofs[roofs["kind"] == "memory"]
    ridge = top * 1e12 / mem["value"].max() if len(mem) else pts["intensity"].min()  # where the steepest roof bends
    slow_ridge = top * 1e12 / mem["value"].min() if len(mem) else pts["intensity"].max()
    # the levels that mean something for the kernel set the axis: DRAM and L2 (all levels where there is no other)
    core = pts[pts["level"] != "L1"] if (pts["level"] != "L1").any() else pts
    x_lo = min(pts["intensity"].min() / 4, ridge / 3)
    x_hi = max(core["intensity"].max() * 4, slow_ridge * 10 ** CLIP_DECADES * 2)
    x_hi = min(x_hi, pts["intensity"].max() * 4)
    y_hi = top * 2.5
    y_lo = max(min(pts["tflops"].min() / 4, y_hi / 10**3), top / 1e6)  # at least three decades: slopes stay legible
    height = 110 + 470 * len(rows)
    # label angles: one decade on each axis in pixels (the figure's width is the page's)
    w_px = (PAGE_WIDTH - ROOF_MARGIN["l"] - ROOF_MARGIN["r"] - legend_px) * (1 - 0.05 * (len(cols) - 1)) / len(cols)
    h_px = (height - ROOF_MARGIN["t"] - ROOF_MARGIN["b"]) / len(rows) - (40 if len(rows) > 1 else 0)
    px_per_decade = h_px / math.log10(y_hi / y_lo)
    slope_px = px_per_decade / (w_px / math.log10(x_hi / x_lo))
    return _RoofAxes(rows, cols, top, x_lo, x_hi, y_lo, y_hi, height, px_per_decade, w_px,
                     -math.degrees(math.atan(slope_px)))


ROOF_LINE = {"limit": {"dash": "solid", "width": 1.5, "color": "#444"},
             "pipe": {"dash": "dot", "width": 1.2, "color": "#666"},
             "reference": {"dash": "dash", "width": 1.0, "color": "#9a9a9a"}}
ROOF_BAND = "rgba(150,150,150,0.22)"


def _roof_meta(r: pd.Series) -> dict[str, Any]:
    """What a roof trace says of itself (tests read it: a limit no point may pass, and its clock)."""
    unit = 1e12
    return {"role": str(r["role"]), "kind": str(r["kind"]), "level": r["level"] if isinstance(r["level"], str) else None,
            "value": float(r["hi"]) / unit, "lo": float(r["lo"]) / unit,
            "clock_hz": float(r["clock_hz"]) if np.isfinite(r["clock_hz"]) else None, "label": str(r["label"])}


def _memory_roofs(fig: go.Figure, mem: pd.DataFrame, ax: _RoofAxes, i: int, j: int,
                  level_of: list[str | None], data_px: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The memory roofs of one panel, each rising to the top roof, labelled above its slope where the label
    covers no data point and no other label; the screen points of the labels and lines (for the compute
    roofs' labels to avoid)."""
    xs = np.logspace(math.log10(ax.x_lo), math.log10(ax.x_hi), 120)
    taken: list[tuple[float, float]] = []  # sample points of the labels placed so far
    lines: list[tuple[float, float]] = []
    rad = math.radians(-ax.angle)
    cos, sin = math.cos(rad), math.sin(rad)
    mem = mem.sort_values("value", ascending=False)
    for _, m in mem.iterrows():
        fig.add_trace(go.Scatter(x=xs, y=np.minimum(ax.top, m["value"] / 1e12 * xs), mode="lines", showlegend=False,
                                 hoverinfo="text", hovertext=m["label"], meta=_roof_meta(m),
                                 line=ROOF_LINE[str(m["role"])]), i, j)
        level_of.append(None)
    groups: list[list[pd.Series]] = []  # lines closer than 1.35x share one label, on the highest of them
    for _, m in mem.iterrows():
        if groups and groups[-1][0]["value"] / m["value"] <= 1.35:
            groups[-1].append(m)
        else:
            groups.append([m])
    for grp in groups:
        m = grp[0]
        bw = m["value"] / 1e12
        texts = [" · ".join(str(g["label"]) for g in grp),
                 " · ".join(f"{str(g['label']).split()[0]} {g['value'] / 1e12:.2f}" + (" ref." if g["role"] ==
                                                                                       "reference" else "")
                            for g in grp)]
        text = texts[0]
        x_in = max(ax.x_lo, ax.y_lo * 1.2 / bw)
        x_ridge = min(ax.x_hi, ax.top / bw)
        lines += [ax.px(x, bw * x) for x in np.logspace(math.log10(x_in), math.log10(x_ridge), 40)]
        px_ridge = ax.px(x_ridge, ax.top)[0]
        if ax.px(x_in, bw * x_in)[0] + (5.4 * len(text) + 6) * cos > px_ridge:
            text = texts[1]  # the long label does not fit along the line: the short one
        w = 5.4 * len(text) + 6
        best: tuple[int, float, int, list[tuple[float, float]]] | None = None
        # above the line; the lowest line may also be labelled below it (no other line is there to claim it)
        for side in ((1, -1) if grp is groups[-1] else (1,)):
            for k in range(14):  # anchors along the sloped part of the line, low to high; the label runs up along it
                x0 = x_in * (x_ridge / x_in) ** (0.03 + 0.07 * k)
                p0 = ax.px(x0, bw * x0)
                if p0[0] + w * cos > px_ridge + 2 and k:
                    break
                hs = (4, 12) if side > 0 else (-6, -14)
                box = [(p0[0] + t * cos - h * sin, p0[1] + t * sin + h * cos) for t in np.arange(0, w, 8) for h in hs]
                bad = sum(1 for px, py in data_px
                          if -4 < (px - p0[0]) * cos + (py - p0[1]) * sin < w + 4
                          and -4 < side * (-(px - p0[0]) * sin + (py - p0[1]) * cos) < 20)
                bad += sum(1 for bx, by in box for tx, ty in taken if abs(bx - tx) < 9 and abs(by - ty) < 9)
                if best is None or bad < best[0]:
                    best = (bad, x0, side, box)
                if bad == 0:
                    break
            if best is not None and best[0] == 0:
                break
        if best is None:
            continue
        _, x0, side, box = best
        taken += box
        # anchored at its centre (plotly turns a label about its centre): half its width up the line, and off it
        px_per_x_decade = ax.w_px / math.log10(ax.x_hi / ax.x_lo)
        xc = x0 * 10 ** (w / 2 * cos / px_per_x_decade)
        off = 10 if side > 0 else -10
        fig.add_annotation(x=math.log10(xc), y=math.log10(bw * xc), text=text, showarrow=False, textangle=ax.angle,
                           xanchor="center", yanchor="middle", xshift=-off * sin, yshift=off * cos,
                           font={"size": 10, "color": "#444"}, row=i, col=j)
    return lines + taken


def _compute_roofs(fig: go.Figure, here: pd.DataFrame, ax: _RoofAxes, n_cols: int, i: int, j: int,
                   level_of: list[str | None], data_px: list[tuple[float, float]]) -> None:
    """The compute roofs that hold for one panel: limits solid, pipes' peaks dotted, references dashed, a band
    where two measured roofs are one; each labelled where no other label, line or data point is."""
    here = here.sort_values("value", ascending=False)
    spots = _label_spots([math.log10(v / 1e12) for v in here["value"]], [5.6 * len(t) + 6 for t in here["label"]],
                         14, ax.px_per_decade, ax.w_px, [(x, y / ax.px_per_decade) for x, y in data_px])
    xl = np.logspace(math.log10(ax.x_lo), math.log10(ax.x_hi), 24)
    for (_, c), (frac, above) in zip(here.iterrows(), spots, strict=True):
        v, lo = c["hi"] / 1e12, c["lo"] / 1e12
        if lo < v * 0.995:  # a band: the two measured rates the hardware defines as equal
            fig.add_trace(go.Scatter(x=[*xl, *xl[::-1]], y=[v] * len(xl) + [lo] * len(xl), mode="lines",
                                     fill="toself", fillcolor=ROOF_BAND, line={"width": 0}, showlegend=False,
                                     hoverinfo="text", hovertext=c["label"], meta=_roof_meta(c)), i, j)
        else:
            fig.add_trace(go.Scatter(x=xl, y=[v] * len(xl), mode="lines", showlegend=False, hoverinfo="text",
                                     hovertext=c["label"], meta=_roof_meta(c), line=ROOF_LINE[str(c["role"])]), i, j)
        level_of.append(None)
        fig.add_annotation(x=math.log10(ax.x_lo) + frac * math.log10(ax.x_hi / ax.x_lo), y=math.log10(v),
                           text=c["label"], showarrow=False, xanchor="right", yanchor="bottom" if above else "top",
                           yshift=0 if above else -(math.log10(v / lo) * ax.px_per_decade),
                           font={"size": 10, "color": "#333" if c["role"] != "reference" else "#777"},
                           bgcolor="rgba(255,255,255,0.7)", borderpad=0, row=i, col=j)


def _range_points(fig: go.Figure, sub: pd.DataFrame, st: Style, label: str, fields: list[str], shown: set[str],
                  i: int, j: int, level_of: list[str | None], hover_note: str = "") -> None:
    """One panel's ranges: a marker per level, a range's levels joined by a faint line."""
    series = [s for s in st if s in set(sub[label])]
    for name in series:
        g = sub[sub[label] == name]
        color = st[name]["color"]
        jx, jy = [], []
        for _, rg in g.groupby("range", sort=False):
            if len(rg) > 1:
                jx += [*rg["_x"], None]
                jy += [*rg["tflops"], None]
        if jx:
            fig.add_trace(go.Scatter(x=jx, y=jy, mode="lines", showlegend=False, hoverinfo="skip",
                                     legendgroup=name, line={"color": color, "width": 1}, opacity=0.45), i, j)
            level_of.append("join")
        for level, lg in g.groupby("level", sort=False):
            hover = [f"<b>{name}</b> {_label(r, fields)}<br>{level}: {fmt_num(r.intensity)} FLOP/B, "
                     f"{fmt_num(r.tflops)} {'useful ' if r.get('basis') == 'useful' else ''}TFLOP/s, "
                     f"{fmt_num(r.ms)} ms{_counted_hover(r)}{hover_note and '<br>' + hover_note}"
                     for _, r in lg.iterrows()]
            ringed = lg["_excess"].to_numpy()
            clipped = lg["_x"] < lg["intensity"]
            symbol = LEVEL_SYMBOL.get(str(level), "circle")
            fig.add_trace(go.Scatter(
                x=lg["_x"], y=lg["tflops"], mode="markers", name=name, legendgroup=name, meta={"role": "data",
                                                                                               "level": str(level)},
                showlegend=name not in shown, legendrank=100 + list(st).index(name), hovertext=hover, hoverinfo="text",
                marker={"symbol": ["triangle-right" if c else symbol for c in clipped], "size": lg["_size"],
                        "color": color, "line": {"width": [2.5 if x else 0.5 for x in ringed],
                                                 "color": ["#111" if x else "white" for x in ringed]}}), i, j)
            shown.add(name)
            level_of.append(str(level))


#: counted / model FLOPs above which a roofline point is ringed: the kernel executes work the model does not credit
EXCESS_RATIO = 1.1


def _counted_hover(r: pd.Series) -> str:
    ratio = r.get("counted_over_model")
    if r.get("basis") != "useful" or not isinstance(ratio, float) or not np.isfinite(ratio):
        return ""
    return (f"<br>counted: {fmt_num(r['counted_flop_per_s'] / 1e12)} TFLOP/s ({ratio:.2f}× the model's FLOPs"
            + ("; ringed: work beyond the model" if ratio > EXCESS_RATIO else "") + ")")


def _marker_sizes(pts: pd.DataFrame, size_by: str | None) -> str:
    """Marker sizes (``_size``) by ``size_by`` on a log scale; the legend's note on them ("" if none)."""
    if size_by and size_by in pts and pts[size_by].nunique() > 1:
        v = np.log(pts[size_by].astype(float).clip(lower=1e-9))
        pts["_size"] = 6 + 10 * (v - v.min()) / (v.max() - v.min())
        return f"; size: {size_by} {plain_value(pts[size_by].min())} → {plain_value(pts[size_by].max())}"
    pts["_size"] = 9.0
    return ""


def _level_menu(level_of: list[str | None], levels: list[str]) -> list[dict[str, Any]]:
    """A menu that shows one level's markers (and every roof) at a time."""
    buttons = [{"label": "all levels", "method": "restyle", "args": [{"visible": [True] * len(level_of)}]}]
    for lv in levels:
        buttons.append({"label": f"{lv} only", "method": "restyle",
                        "args": [{"visible": [t is None or t == lv for t in level_of]}]})
    return [{"buttons": buttons, "direction": "down", "x": 1.0, "xanchor": "right", "y": 1.0, "yanchor": "bottom",
             "pad": {"b": 22}, "showactive": True}]


def roofline(points: pd.DataFrame, ceil: pd.DataFrame, title: str, style: Style | None = None,
             label: str = "variant", fields: Iterable[str] = (), size_by: str | None = None,
             facet_row: str | None = None, note: str = "", hover_note: str = "") -> go.Figure:
    """Hierarchical roofline as Nsight Compute draws it: the memory ceilings (DRAM, L2, L1 and any
    measured copy) rising to the compute ceilings, every ceiling labelled on its line (Nsight's peaks
    dotted, library GEMMs dashed, instruction microbenchmarks long-dashed, the MUFU softmax bound
    dash-dotted); one marker per range and level (marker: level, colour: ``label``, size:
    ``size_by``), a range's levels joined by a line (they share its FLOP/s). A ceiling with
    ``where`` is drawn only in the facets whose points it holds for, and only up to the highest
    unconditional one. Facets: pass in columns, ``facet_row`` in rows; a menu shows one level at a
    time. ``note`` goes under the title (e.g. the ceilings this capture did not measure); ``hover_note``
    ends every point's hover (e.g. where the page that explains the points is: plotly hovers hold no links)."""
    if points.empty or not len(ceil):
        return message("no range to place on the roofline" if points.empty else "no ceiling", title)
    pts = points.copy()
    pts["tflops"] = pts["flop_per_s"] / 1e12
    pts[label] = pts[label].astype(str)
    ratio = pts["counted_over_model"] if "counted_over_model" in pts else pd.Series(np.nan, index=pts.index)
    pts["_excess"] = ratio.fillna(0) > EXCESS_RATIO
    useful = "basis" in pts and (pts["basis"] == "useful").any()
    fields = [f for f in fields if f in pts]
    drawn = roofs(ceil, pts)
    st = {s: v for s, v in _style(style, pts[label].unique()).items() if s in set(pts[label])}
    size_note = _marker_sizes(pts, size_by)
    levels = [lv for lv in LEVEL_SYMBOL if lv in set(pts["level"])]
    glyphs = " ".join(f"{LEVEL_GLYPH[lv]} {lv}" for lv in levels)
    legend_title = f"marker: {glyphs}{size_note}"
    if pts["_excess"].any():
        legend_title += f"<br>ringed: counts > {EXCESS_RATIO:g}× model"
    legend_px = 40 + 6.6 * max([len(n) for n in st] + [len(x) for x in legend_title.split("<br>")])
    ax = _roof_axes(pts, drawn, facet_row, legend_px)
    comp, mem = drawn[drawn["kind"] == "compute"], drawn[drawn["kind"] == "memory"]
    # a bound above every roof binds nothing
    comp = comp[comp["where"].isna() | (comp["value"] <= ax.top * 1e12 * 1.05)]
    edge = ax.x_hi / 10 ** 0.08
    pts["_x"] = pts["intensity"].clip(upper=edge)
    titles = [", ".join(x for x in ((f"{facet_row}={plain_value(rv)}" if rv is not None else ""), (cv or "")) if x)
              for rv in ax.rows for cv in ax.cols]
    fig = make_subplots(rows=len(ax.rows), cols=len(ax.cols), shared_xaxes="all", shared_yaxes="all",
                        subplot_titles=titles if any(titles) else None, horizontal_spacing=0.05,
                        vertical_spacing=0.08 if len(ax.rows) > 1 else 0.02)
    level_of: list[str | None] = []  # per trace: its level, "join", or None (a ceiling)
    shown: set[str] = set()
    for i, rv in enumerate(ax.rows, 1):
        for j, cv in enumerate(ax.cols, 1):
            sub = pts if rv is None else pts[pts[facet_row] == rv]
            sub = sub if cv is None else sub[sub["pass"] == cv]
            data_px = [ax.px(x, y) for x, y in zip(sub["_x"], sub["tflops"], strict=True) if x > 0 and y > 0]
            drawn_px = _memory_roofs(fig, mem, ax, i, j, level_of, data_px)
            _compute_roofs(fig, comp[[applies(w, sub) for w in comp["where"]]], ax, len(ax.cols), i, j, level_of,
                           data_px + drawn_px)
            _range_points(fig, sub, st, label, fields, shown, i, j, level_of, hover_note)
    log_axis(fig, "x", ax.x_lo, ax.x_hi, pad=1.0)
    log_axis(fig, "y", ax.y_lo, ax.y_hi, pad=1.0)
    fig.update_xaxes(title_text="arithmetic intensity [FLOP/byte]", row=len(ax.rows))
    fig.update_yaxes(title_text="useful performance [TFLOP/s, work model]" if useful else "performance [TFLOP/s]",
                     col=1)
    notes = [note] if note else []
    if (pts["_x"] < pts["intensity"]).any():
        far = pts.loc[pts["_x"] < pts["intensity"], "level"]
        notes.append(f"▶ at the right edge: {', '.join(dict.fromkeys(far))} points beyond the axis (true intensity "
                     "in the hover)")
    clocks = sorted({round(float(h)) for h in pts.get("hz_sm", pd.Series(dtype=float)).dropna()})
    meta = {"roofs": [_roof_meta(r) for _, r in drawn.iterrows()], "clocks_hz": clocks}
    fig.update_layout(title=title + "".join(f"<br><sup>{n}</sup>" for n in notes), template=TEMPLATE,
                      height=ax.height, margin=ROOF_MARGIN,
                      legend={"title": {"text": legend_title}, "itemsizing": "constant"},
                      updatemenus=_level_menu(level_of, levels), meta=meta)
    fit_legend(fig, len(st) + 2)
    return fig


def flop_check(fc: pd.DataFrame, title: str, x: str, style: Style | None = None, tolerance: float = 0.10) -> go.Figure:
    """Counted / modeled FLOPs per range against the sweep field ``x`` (shaded: within tolerance)."""
    if fc.empty:
        return message("no range with both counted and modeled FLOPs", title)
    st = _style(style, fc["variant"].astype(str).unique())
    names = [s for s in st if s in set(fc["variant"].astype(str))]
    d = fc.sort_values(["variant", x] if x in fc else ["variant"])
    fig = px.scatter(d, x=x if x in d else "range", y="counted_over_model", color="variant", symbol="variant",
                     facet_col="pass" if "pass" in d and d["pass"].nunique() > 1 else None,
                     hover_data=[c for c in ("range", "flop", "model_flop", "flop_counters", "explanation") if c in d],
                     title=title, labels={"counted_over_model": "counted / model FLOPs", "variant": "implementation"},
                     color_discrete_map=_colors(st), symbol_map=_symbols(st),
                     category_orders=_orders(d, variant=names))
    clean_facet_labels(fig)
    if x in d and pd.api.types.is_numeric_dtype(d[x]):
        log_axis(fig, "x", d[x].min(), d[x].max(), pad=1.2)
    fig.add_hrect(y0=1 - tolerance, y1=1 + tolerance, fillcolor="green", opacity=0.08, line_width=0)
    r = pd.to_numeric(d["counted_over_model"], errors="coerce")
    r = r[np.isfinite(r) & (r > 0)]
    lo, hi = (float(min(r.min(), 1 - tolerance)), float(max(r.max(), 1 + tolerance))) if len(r) else (0.5, 1.5)
    if hi / lo > RATIO_DECADE:  # a ratio that spans decades (a kernel executing 100x the modelled work): log
        log_axis(fig, "y", lo, hi, pad=1.3)
    else:  # linear, from zero (a FLOP ratio is never negative) to just above the highest point
        fig.update_yaxes(range=[0, hi * 1.12], tickformat=".2f")
    fig.update_layout(template=TEMPLATE, height=440)
    rank_legend(fig, names)
    fit_legend(fig, len(names))
    return fig


# --------------------------------------------------------------------------- L2


def l2_vs_x(l2: pd.DataFrame, l2_bytes: float, onsets: pd.DataFrame | None, title: str, x: str | None = None,
            style: Style | None = None) -> go.Figure:
    """L2 hit rate, DRAM / compulsory bytes and DRAM / L2-to-SM bytes against ``x``, one line per
    implementation and every other field that varies at one ``x`` ("flash_mma D=128", dashed:
    :func:`split_series`); each one's modeled onset (working set = L2) as a dotted vertical line in
    its colour and its measured onset as a black cross. ``x`` None: the sweep axis of the frame's problem."""
    if l2.empty:
        return message("no ranges", title)
    x = sweep_axis(l2, x)
    panels = [("l2_hit_rate", "L2 hit rate [%]"), ("dram_over_compulsory", "DRAM bytes / compulsory bytes"),
              ("dram_over_l2", "DRAM bytes / L2→SM bytes")]
    panels = [p for p in panels if p[0] in l2 and l2[p[0]].notna().any()]
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.07,
                        subplot_titles=[p[1] for p in panels])
    st = _style(style, l2["variant"].astype(str).unique())
    d = split_series(l2.assign(variant=l2["variant"].astype(str)), x, identity_columns(l2))
    traces, _, _, dashes = _trace_style(d, st, "variant")
    drawn: set[tuple[str, float]] = set()
    for trace in traces:
        g = d[d["_trace"] == trace].sort_values(x)
        variant = str(g["variant"].iloc[0])
        s = st[variant]
        for j, (y, _) in enumerate(panels):
            hover = [f"{trace} {r.get('pass') or ''} {x}={plain_value(r[x])}<br>hit {r.l2_hit_rate:.1f}%, DRAM "
                     f"{fmt_num(r.bytes_DRAM / 1e6)} MB"
                     + (f", working set {fmt_num(r.working_set / 2**20)} MiB ({r.working_set_over_l2:.2f} × L2)"
                        if pd.notna(r.get("working_set")) else "") for _, r in g.iterrows()]
            fig.add_trace(go.Scatter(x=g[x], y=g[y], mode="lines+markers", name=trace, legendgroup=trace,
                                     showlegend=j == 0, line={"color": s["color"], "dash": dashes[trace]},
                                     marker={"symbol": s["symbol"]}, hovertext=hover, hoverinfo="text"),
                          row=j + 1, col=1)
        if onsets is None or not len(onsets):
            continue
        on = onsets[onsets["variant"].astype(str) == variant]
        if "sweep" in on and "sweep" in g:
            on = on[on["sweep"].isin(set(g["sweep"]))]
        for _, o in on.iterrows():
            mod = o.get("modeled_onset")
            if pd.notna(mod) and l2[x].min() <= mod <= l2[x].max() * 1.5 and (variant, float(mod)) not in drawn:
                drawn.add((variant, float(mod)))
                fig.add_vline(x=float(mod), line={"color": s["color"], "dash": "dot", "width": 1.5})
            meas = o.get("measured_onset")
            hit = g[g[x] == meas]["l2_hit_rate"] if pd.notna(meas) else pd.Series(dtype=float)
            if len(hit):
                fig.add_trace(go.Scatter(x=[meas], y=[hit.iloc[0]], mode="markers", showlegend=False,
                                         marker={"symbol": "x-thin-open", "size": 18, "line": {"width": 3},
                                                 "color": "#111111"}, hoverinfo="text",
                                         hovertext=f"{trace}: measured onset at {x}={plain_value(meas)}"),
                              row=1, col=1)
    # the legend names the onset marks too: a dotted line in a kernel's colour, a black cross
    keys = []
    if drawn:
        keys.append(go.Scatter(x=[None], y=[None], mode="lines", name=f"modeled onset: working set = L2 "
                               f"({l2_bytes / 2**20:.0f} MiB), in the kernel's colour",
                               line={"color": GREY, "dash": "dot", "width": 1.5}, legendrank=1))
    if any(t.hovertext and "measured onset" in str(t.hovertext) for t in fig.data):
        keys.append(go.Scatter(x=[None], y=[None], mode="markers", name="measured onset (where the hit rate fell)",
                               marker={"symbol": "x-thin-open", "size": 12, "line": {"width": 3}, "color": "#111111"},
                               legendrank=2))
    for k in keys:
        fig.add_trace(k, row=1, col=1)
    log_axis(fig, "x", l2[x].min(), l2[x].max(), pad=1.15)
    fig.update_xaxes(title_text=x, row=len(panels), col=1)
    for j, (y, _) in enumerate(panels):
        if y == "l2_hit_rate":
            fig.update_yaxes(range=[0, 102], ticksuffix="%", row=j + 1, col=1)
        else:
            v = _finite(l2[y])
            if len(v):
                log_axis(fig, "y", v.min(), v.max(), row=j + 1, col=1)
    nested = reveal_coinciding(fig)
    fig.update_layout(title=title + f"<br><sup>dotted: modeled working set = L2 ({l2_bytes / 2**20:.0f} MiB); "
                      "black ×: measured onset" + ("; nested stripes: lines that lie on one another" if nested else "")
                      + "</sup>", template=TEMPLATE, height=290 * len(panels) + 110)
    fit_legend(fig, len(traces) + len(keys))
    return fig


def onset_evidence(ev: pd.DataFrame, x: str, title: str, color: str = "#1f77b4", drop_points: float = 10.0) -> go.Figure:
    """The measured-onset rule's evidence: the hit rate, the best it reached at smaller ``x`` and
    that best minus the drop the rule asks for; the onset (if any) marked."""
    if ev.empty:
        return message("no points", title)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=ev[x], y=ev["running_max_before"], mode="lines", name=f"best at smaller {x}",
                             line={"dash": "dot", "color": GREY}))
    fig.add_trace(go.Scatter(x=ev[x], y=ev["running_max_before"] - drop_points, mode="lines",
                             name=f"best − {drop_points:g} points (the rule's threshold)",
                             line={"dash": "dash", "color": "#c88"}, fill=None))
    fig.add_trace(go.Scatter(x=ev[x], y=ev["l2_hit_rate"], mode="lines+markers", name="L2 hit rate",
                             line={"color": color}))
    if "onset" in ev and ev["onset"].any():
        o = ev[ev["onset"]]
        fig.add_trace(go.Scatter(x=o[x], y=o["l2_hit_rate"], mode="markers", name="onset",
                                 marker={"size": 16, "symbol": "x-thin-open", "line": {"width": 3}, "color": "#c00"}))
    log_axis(fig, "x", ev[x].min(), ev[x].max(), x, pad=1.15)
    fig.update_yaxes(range=[0, 102], ticksuffix="%", title_text="L2 hit rate")
    fig.update_layout(title=title, template=TEMPLATE, height=330, legend={"orientation": "h", "y": -0.25})
    return fig


def l2_per_range(l2: pd.DataFrame, title: str, style: Style | None = None) -> go.Figure:
    """L2 hit rate per range (bars, one colour per implementation), for captures without a sweep."""
    d = l2[l2["l2_hit_rate"].notna()] if "l2_hit_rate" in l2 else l2.iloc[0:0]
    if d.empty:
        return message("no L2 hit rate", title)
    st = _style(style, d["variant"].astype(str).unique())
    names = [s for s in st if s in set(d["variant"].astype(str))]
    hover = [c for c in ("bytes_DRAM", "bytes_L2", "dram_over_compulsory", "working_set_over_l2") if c in d]
    fig = px.bar(d, x="l2_hit_rate", y="range", color="variant", orientation="h", title=title, hover_data=hover,
                 labels={"l2_hit_rate": "L2 hit rate [%]", "range": "", "variant": "implementation"},
                 color_discrete_map=_colors(st), category_orders={"variant": names})
    fig.update_xaxes(range=[0, 100], ticksuffix="%")
    fig.update_layout(template=TEMPLATE, height=160 + 28 * len(d))
    fit_legend(fig, len(names), 300)
    return fig


# --------------------------------------------------------------------------- timelines


def range_durations(ranges: pd.DataFrame, kernels: pd.DataFrame, title: str, style: Style | None = None) -> go.Figure:
    """One configuration, every implementation: the NVTX range's wall time and its kernels' GPU time
    (median over the range's repeats), log scale, so the fastest are as readable as the slowest."""
    if ranges.empty:
        return message("no ranges to draw", title)
    k = kernels[kernels["range_id"].isin(ranges.index)]
    gpu = busy_ms(k) if len(k) else pd.Series(dtype=float)  # overlapping kernels count once
    r = ranges.assign(wall=(ranges["end"] - ranges["start"]) / 1e6, gpu=gpu.reindex(ranges.index).fillna(0.0))
    med = r.groupby(r["variant"].astype(str)).agg(wall=("wall", "median"), gpu=("gpu", "median"), n=("wall", "size"))
    st = _style(style, med.index)
    names = [s for s in st if s in med.index]
    med = med.loc[names]
    fastest = med["gpu"][med["gpu"] > 0].min()
    # markers, not bars: on a log axis a bar's length means nothing (it starts at an arbitrary power of ten)
    fig = go.Figure()
    for n in names:
        w, g = float(med.loc[n, "wall"]), float(med.loc[n, "gpu"])
        if g > 0:
            fig.add_trace(go.Scatter(x=[g, w], y=[n, n], mode="lines", line={"color": st[n]["color"], "width": 2},
                                     opacity=0.45, hoverinfo="skip", showlegend=False))
    gpu_text = [f"{fmt_num(v)} ms" + (f" ({v / fastest:.1f}×)" if fastest and v > fastest * 1.05 else "")
                if v > 0 else "no kernel" for v in med["gpu"]]
    fig.add_trace(go.Scatter(y=names, x=med["wall"], mode="markers+text", name="NVTX range (wall)",
                             marker={"color": [st[n]["color"] for n in names], "symbol": "line-ns-open", "size": 16,
                                     "line": {"width": 2.5, "color": [st[n]["color"] for n in names]}},
                             text=gpu_text, textposition="middle right", textfont={"size": 12}, cliponaxis=False,
                             hovertemplate="%{y}: range %{x:.3f} ms<extra></extra>"))
    fig.add_trace(go.Scatter(y=names, x=med["gpu"].where(med["gpu"] > 0), mode="markers", name="its kernels (GPU time)",
                             marker={"color": [st[n]["color"] for n in names],
                                     "symbol": [st[n]["symbol"] for n in names], "size": 13,
                                     "line": {"width": 0.5, "color": "white"}},
                             hovertemplate="%{y}: kernels %{x:.3f} ms<extra></extra>"))
    v = _finite([*med["wall"], *med["gpu"]])
    log_axis(fig, "x", v.min(), v.max(), "time [ms] (log; median over the range's repeats)", pad=2.5)
    fig.update_yaxes(autorange="reversed", tickfont={"size": 12})
    fig.update_layout(title=f"{title}<br><sup>marker: its kernels' GPU time (written, × the fastest); bar |: the "
                      "NVTX range's wall time</sup>", template=TEMPLATE, height=max(240, 150 + 34 * len(names)),
                      showlegend=False, margin={"r": 140})
    return fig


def timeline(kernels: pd.DataFrame, ranges: pd.DataFrame, title: str, style: Style | None = None) -> go.Figure:
    """Each implementation's range (its median-length repeat) zoomed to its own time axis: the
    NVTX range as a pale bar, the kernels it launched on the GPU as solid bars labelled by name."""
    if ranges.empty:
        return message("no ranges to draw", title)
    r = ranges.assign(wall=(ranges["end"] - ranges["start"]) / 1e6)
    st = _style(style, r["variant"].astype(str).unique())
    names = [s for s in st if s in set(r["variant"].astype(str))]
    picks = []
    for n in names:
        g = r[r["variant"].astype(str) == n].sort_values("wall")
        picks.append(g.index[len(g) // 2])
    sub_titles = []
    for n, rid in zip(names, picks, strict=True):
        kk = kernels[kernels["range_id"] == rid]
        gpu = float(busy_ms(kk).iloc[0]) if len(kk) else 0.0
        wall = r.loc[rid, "wall"]
        zoom = ""
        if len(kk) and gpu < 0.2 * wall:
            first = (kk["start"].min() - ranges.loc[rid, "start"]) / 1e6
            zoom = f" (zoomed to the kernels, {fmt_num(first)} ms into the range)"
        sub_titles.append(f"<b>{n}</b>: range {fmt_num(wall)} ms, {len(kk)} kernel"
                          f"{'s' if len(kk) != 1 else ''} {fmt_num(gpu)} ms on the GPU{zoom}")
    height = 100 + 140 * len(names)
    fig = make_subplots(rows=len(names), cols=1, shared_xaxes=False, subplot_titles=sub_titles,
                        vertical_spacing=min(0.3, 78 / height))
    for i, (n, rid) in enumerate(zip(names, picks, strict=True), 1):
        t0 = ranges.loc[rid, "start"]
        wall = r.loc[rid, "wall"]
        color = st[n]["color"]
        fig.add_trace(go.Bar(y=["range"], x=[wall], base=[0], orientation="h", showlegend=False,
                             marker={"color": color, "opacity": 0.25}, hovertext=str(ranges.loc[rid, "range"]),
                             hoverinfo="text"), i, 1)
        kk = kernels[kernels["range_id"] == rid].sort_values("start")
        s = (kk["start"] - t0) / 1e6
        d = (kk["end"] - kk["start"]) / 1e6
        fig.add_trace(go.Bar(y=["GPU"] * len(kk), x=d, base=s, orientation="h", showlegend=False,
                             marker={"color": color, "line": {"width": 0.5, "color": "white"}},
                             text=[k if len(k) <= 40 else k[:38] + "…" for k in kk["kernel"].astype(str)],
                             textposition="inside", insidetextanchor="middle",
                             textfont={"size": 10}, constraintext="inside",
                             hovertext=[f"{a}<br>{fmt_num(dd * 1e3)} µs at {fmt_num(ss)} ms" for a, dd, ss in
                                        zip(kk["kernel"], d, s, strict=True)], hoverinfo="text"), i, 1)
        lo, hi = 0.0, wall * 1.02
        if len(kk) and (d.sum() < 0.2 * wall):  # host time dominates the range: zoom to its kernels
            span = float((s + d).max() - s.min())
            lo, hi = max(0.0, float(s.min()) - 0.08 * span), float((s + d).max()) + 0.08 * span
        fig.update_xaxes(range=[lo, hi], ticksuffix=" ms", row=i, col=1)
        fig.update_yaxes(categoryorder="array", categoryarray=["GPU", "range"], row=i, col=1)
    fig.update_layout(title=title, barmode="overlay", template=TEMPLATE, height=height, margin={"l": 70})
    fig.update_annotations(font={"size": 12}, xanchor="left", x=0)
    return fig


def lines_vs_x(df: pd.DataFrame, y: str, title: str, x: str | None = None, style: Style | None = None, log_y: bool = True,
               ylabel: str | None = None, facet_candidates: Iterable[str] = ()) -> go.Figure:
    """``y`` against the sweep field ``x``, one line per implementation, faceted by pass (columns)
    and one other varying field (rows, in its natural order); any further field that varies at one
    ``x`` (D beside H, say) splits an implementation's line ("flash_mma D=128", dashed:
    :func:`split_series`), so no line joins two shapes. ``x`` None: the sweep axis of the frame's problem."""
    x = sweep_axis(df, x)
    d = df[df[y].notna()] if y in df else df.iloc[0:0]
    if d.empty:
        return message(f"no range has a value of {ylabel or y}", title)
    d = d.sort_values(x).copy()
    d["variant"] = d["variant"].astype(str)
    st = _style(style, d["variant"].unique())
    names = [s for s in st if s in set(d["variant"])]
    if not pd.api.types.is_numeric_dtype(d[x]):  # no sweep: a marker per range (a log axis takes no bars)
        fig = px.scatter(d, x=y, y=x, color="variant", symbol="variant", title=title, log_x=log_y,
                         labels={y: ylabel or y, x: "", "variant": "implementation"},
                         hover_data=[c for c in ("gpu_ms", "tflops", "kernels", "gap_ms") if c in d],
                         color_discrete_map=_colors(st), symbol_map=_symbols(st), category_orders={"variant": names})
        v = _finite(d[y])
        if log_y and len(v):
            log_axis(fig, "x", v.min(), v.max(), ylabel or y, pad=2)
        fig.update_yaxes(autorange="reversed", tickfont={"size": 12}, showgrid=True)
        fig.update_traces(marker={"size": 11, "line": {"width": 0.5, "color": "white"}})
        fig.update_layout(template=TEMPLATE, height=160 + 30 * d[x].nunique())
        fit_legend(fig, len(names), 300)
        return fig
    col = "pass" if "pass" in d and d["pass"].nunique() > 1 else None
    row = next((c for c in facet_candidates if c in d and c not in (x, "pass", "variant")
                and 1 < d[c].nunique() <= 4), None)
    if row:
        d["facet"] = shape_label(d, [row])
    d = split_series(d, x, [c for c in identity_columns(d) if c not in ("variant", "facet")],
                     by=("variant", *([col] if col else []), *([row] if row else [])))
    traces, colors, symbols, dashes = _trace_style(d, st, "variant")
    orders = _orders(d, _trace=traces)
    if row:
        orders["facet"] = _shape_order(d, [row], d["facet"])
    fig = px.line(d, x=x, y=y, color="_trace", symbol="_trace", line_dash="_trace", facet_col=col,
                  facet_row="facet" if row else None, markers=True, title=title,
                  labels={y: ylabel or y, "_trace": "implementation"},
                  hover_data=[c for c in ("range", "gpu_ms", "tflops", "kernels", "gap_ms") if c in d],
                  color_discrete_map=colors, symbol_map=symbols, line_dash_map=dashes, category_orders=orders)
    clean_facet_labels(fig)
    if pd.api.types.is_numeric_dtype(d[x]):
        log_axis(fig, "x", d[x].min(), d[x].max(), pad=1.15)
    v = _finite(d[y])
    if log_y and len(v):
        log_axis(fig, "y", v.min(), v.max(), pad=1.5)
    fig.update_yaxes(title_text="")
    fig.update_yaxes(title_text=ylabel or y, col=1)
    fig.update_layout(template=TEMPLATE, height=310 * (d["facet"].nunique() if row else 1) + 130)
    rank_legend(fig, traces)
    fit_legend(fig, len(traces))
    return fig


# --------------------------------------------------------------------------- option studies

OPTION_METRICS = (("relative_time", "time / best in its study"), ("occupancy", "achieved occupancy [%]"),
                  ("registers", "registers / thread"))


def option_order(options: Iterable[object]) -> list:
    """The order option settings are drawn in: by their numbers where every setting has one (block_size=16
    after block_size=4, 64x64 before 128x64), else as the capture ran them (a sweep lists a ladder of named
    steps, cp.async -> tma -> tma-ws ..., in its own order, which no sort of the names would give)."""
    values = list(dict.fromkeys(options))
    if all(re.search(r"\d", str(v)) for v in values):
        return sorted(values, key=natural_key)
    return values


def option_bars(study: pd.DataFrame, variant: str, style: Style | None = None,
                metrics: Sequence[tuple[str, str]] = OPTION_METRICS) -> go.Figure:
    """One implementation's option study: per pass (columns), a bar per option setting (only the
    settings run in that pass, in natural order) for each metric (rows), grouped by study (the
    fields the settings share: N, D ...). Every bar is in the implementation's colour; the studies are
    told apart by the bars' fill pattern (:data:`PATTERNS`), not by colour, which means implementation
    on every page."""
    d = study[study["variant"].astype(str) == variant].copy()
    title = f"{variant}: option settings"
    if d.empty:
        return message(f"no option study for {variant}", title)
    metrics = [(m, lab) for m, lab in metrics if m in d and d[m].notna().any()]
    passes = [p for p in ("forward", "backward") if p in set(d["pass"])] or [None]
    color = _style(style, [variant])[variant]["color"]
    studies = sorted(d["study"].unique(), key=natural_key)
    pattern = {s: PATTERNS[k % len(PATTERNS)] for k, s in enumerate(studies)}
    fig = make_subplots(rows=len(metrics), cols=len(passes), shared_xaxes=False, vertical_spacing=0.08,
                        horizontal_spacing=0.06, column_titles=[p or "" for p in passes],
                        row_titles=[lab for _, lab in metrics])
    for j, p in enumerate(passes, 1):
        dp = d if p is None else d[d["pass"] == p]
        order = option_order(dp["option"])
        for i, (m, lab) in enumerate(metrics, 1):
            for s in studies:
                g = dp[dp["study"] == s].set_index("option").reindex(order)
                fig.add_trace(go.Bar(x=order, y=g[m], name=s, legendgroup=s, showlegend=(i == 1 and j == 1),
                                     marker={"color": color, "line": {"color": color, "width": 1},
                                             "pattern": {"shape": pattern[s], "fgcolor": "white", "solidity": 0.45}},
                                     customdata=np.stack([g["ms"].to_numpy(dtype=float)], axis=-1),
                                     hovertemplate=f"{s}<br>%{{x}}: {lab} %{{y:.3g}}<br>GPU time %{{customdata[0]:.3f}} ms"
                                                   "<extra></extra>"), i, j)
            fig.update_xaxes(categoryorder="array", categoryarray=order, row=i, col=j)
            if m == "relative_time":
                fig.add_hline(y=1, line_color=GREY, line_width=1, row=i, col=j)
            if m == "occupancy":
                fig.update_yaxes(range=[0, 100], ticksuffix="%", row=i, col=j)
    fig.update_layout(title=title, barmode="group", template=TEMPLATE, height=110 + 250 * len(metrics),
                      legend_title_text="study (fields shared by the settings)",
                      legend={"orientation": "h", "y": -0.08, "yanchor": "top"})
    fig.for_each_annotation(lambda a: a.update(font={"size": 11}))
    return fig


def working_set_vs_x(ws: pd.DataFrame, l2_bytes: float, title: str, x: str | None = None,
                     style: Style | None = None) -> go.Figure:
    """The modeled working set [MiB] against ``x`` per implementation and pass (backward dashed),
    the L2 size as a labelled line; implementations with the same working set share a line. ``x`` None: the
    field of the table's ``<field>=<value>`` columns."""
    x = x or next((m.group(1) for c in ws.columns if (m := re.match(r"^(\w+)=", str(c)))), "")
    cols = [c for c in ws.columns if c.startswith(f"{x}=")]
    if ws.empty or not cols:
        return message("no modeled working set", title)
    ids = [c for c in ws.columns if c not in cols and c not in (f"outgrows L2 at {x}", "onset note")]
    long = ws.melt(id_vars=ids, value_vars=cols, var_name=x, value_name="MiB").dropna(subset=["MiB"])
    long[x] = long[x].str.split("=", n=1).str[1].astype(float)
    st = _style(style, long["variant"].astype(str).unique())
    extra = [c for c in ids if c not in ("variant",)]
    long["_key"] = shape_label(long, extra).replace("all", "") if extra else ""
    fig = go.Figure()
    # implementations whose curves coincide (on the sizes both ran) are drawn once, named together
    curves: list[tuple[str, dict[float, float], list[str]]] = []
    groups = sorted(long.groupby([long["variant"].astype(str), "_key"], sort=False),
                    key=lambda kv: -len(kv[1]))
    for (variant, key), g in groups:
        pts = {float(a): round(float(b), 3) for a, b in zip(g[x], g["MiB"], strict=True)}
        same = next((c for c in curves if c[0] == key and all(c[1].get(a) == b for a, b in pts.items())), None)
        if same:
            same[2].append(variant)
        else:
            curves.append((key, pts, [variant]))
    order = {s: i for i, s in enumerate(st)}
    for key, pts, variants in sorted(curves, key=lambda c: (min(order.get(v, 99) for v in c[2]), c[0])):
        variants = sorted(variants, key=lambda v: order.get(v, 99))
        v = variants[0]
        dash = "dash" if "backward" in key else "solid"
        name = ", ".join(variants) + (f" — {key}" if key else "")
        xs = sorted(pts)
        fig.add_trace(go.Scatter(x=xs, y=[pts[a] for a in xs], mode="lines+markers", name=name, legendgroup=v,
                                 line={"color": st[v]["color"], "dash": dash}, marker={"symbol": st[v]["symbol"]},
                                 hovertemplate=f"{name}<br>{x}=%{{x}}: %{{y:,.1f}} MiB<extra></extra>"))
    l2 = l2_bytes / 2**20
    xmin, xmax = long[x].min(), long[x].max()
    fig.add_trace(go.Scatter(x=[xmin / 1.15, xmax * 1.15], y=[l2, l2], mode="lines", name=f"L2 ({l2:.0f} MiB)",
                             line={"color": "#222", "dash": "dot", "width": 2}, hoverinfo="name"))
    fig.add_annotation(x=math.log10(xmin), y=math.log10(l2), text=f"L2 = {l2:.0f} MiB", showarrow=False,
                       xanchor="left", yanchor="bottom", font={"color": "#222"})
    v = _finite([*long["MiB"], l2])
    log_axis(fig, "y", v.min(), v.max(), "modeled working set [MiB]")
    log_axis(fig, "x", xmin, xmax, x, pad=1.15)
    fig.update_layout(title=title, template=TEMPLATE, height=520, legend={"font": {"size": 11}})
    fit_legend(fig, len(curves) + 1)
    return fig


# --------------------------------------------------------------------------- bottlenecks


def _side_by_side_bars(frame: pd.DataFrame, y: str, x: str, hover: str, st: Style, order: list[str]) -> list[go.Bar]:
    """One horizontal bar per implementation (``variant``) and ``y`` category, in the implementation's colour;
    the first implementation's bar on top of each group (plotly stacks a group's first trace at the bottom)."""
    bars = []
    for name in reversed([s for s in st if s in set(frame["variant"])]):
        g = frame[frame["variant"] == name].set_index(y).reindex(order)
        bars.append(go.Bar(y=order, x=g[x], orientation="h", name=name, legendgroup=name,
                           marker={"color": st[name]["color"]}, hovertext=g[hover], hoverinfo="text"))
    return bars


def stall_bars(stalls: pd.DataFrame, title: str, style: Style | None = None, floor: float = 0.01) -> go.Figure:
    """Warp cycles per issued instruction by stall reason (nsightlab.analysis.bottleneck.stalls with a
    ``variant`` column), implementations side by side, largest reason on top; reasons under ``floor``
    cycles for every implementation are left out (named under the title)."""
    if stalls.empty:
        return message("no warp-state samples (the report lacks WarpStateStats)", title)
    st = _style(style, stalls["variant"].astype(str).unique())
    peak = stalls.groupby("name")["cycles"].max().sort_values()
    order, dropped = list(peak[peak >= floor].index), list(peak[peak < floor].index)
    d = stalls.assign(hover=[f"<b>{v}</b> {n}: {c:.3f} cycles per issued instruction ({s:.0%})<br>{m}"
                             for v, n, c, s, m in stalls[["variant", "name", "cycles", "share", "meaning"]].itertuples(
                                 index=False)])
    fig = go.Figure(_side_by_side_bars(d, "name", "cycles", "hover", st, order))
    note = f"<br><sup>under {floor} cycles for all: {', '.join(sorted(dropped))}</sup>" if dropped else ""
    fig.update_layout(title=title + note, template=TEMPLATE, barmode="group", height=140 + 26 * len(order) * len(
        set(stalls["variant"])) ** 0.6, xaxis_title="warp cycles per issued instruction", legend={"traceorder": "reversed"},
        margin={"l": 200})
    return fig


def pipe_bars(pipes: pd.DataFrame, title: str, style: Style | None = None, floor: float = 0.5) -> go.Figure:
    """Pipe utilization (nsightlab.analysis.bottleneck.pipes with a ``variant`` column), implementations
    side by side: cycles each pipe was busy (left) and instructions issued to it (right), both in %
    of peak over active cycles; pipes under ``floor`` % for every implementation are left out."""
    if pipes.empty:
        return message("no pipe utilization (the report lacks ComputeWorkloadAnalysis)", title)
    st = _style(style, pipes["variant"].astype(str).unique())
    kinds = [k for k in ("cycles active", "instructions") if k in set(pipes["kind"])]
    fig = make_subplots(rows=1, cols=len(kinds), horizontal_spacing=0.14,
                        subplot_titles=[f"{k} [% of peak]" for k in kinds])
    rows = 0
    for j, kind in enumerate(kinds, 1):
        d = pipes[pipes["kind"] == kind]
        peak = d.groupby("pipe")["pct"].max().sort_values()
        order = list(peak[peak >= floor].index)
        rows = max(rows, len(order))
        d = d.assign(hover=[f"<b>{v}</b> {p} ({kind}): {x:.1f}% of peak<br>{m}"
                            for v, p, x, m in d[["variant", "pipe", "pct", "metric"]].itertuples(index=False)])
        for bar in _side_by_side_bars(d, "pipe", "pct", "hover", st, order):
            bar.showlegend = j == 1
            fig.add_trace(bar, 1, j)
        fig.update_xaxes(range=[0, 100], title_text="% of peak", row=1, col=j)
    fig.update_layout(title=title, template=TEMPLATE, barmode="group", legend={"traceorder": "reversed"},
                      height=160 + 22 * rows * len(set(pipes["variant"])) ** 0.6)
    return fig


def bandwidth_vs_config(df: pd.DataFrame, suite: str, dtype: str, pass_: str,
                        roof: tuple[float, str] | Sequence[Mapping[str, Any]] | None,
                        style: Style | None = None) -> go.Figure:
    """A memory-bound suite's speed as bandwidth: the compulsory bytes (inputs read once, outputs
    written once) per second of each implementation, one marker per configuration (categories: markers, no
    lines), against the memory roofs (:func:`nsightlab.analysis.perf.bandwidth_roofs`: a limit solid, a
    reference dashed and named so; each in the legend, so no label sits on the data); the hover has the time."""
    d = ok_rows(df)
    d = d[(d["suite"] == suite) & (d["dtype"] == dtype) & (d["pass"] == pass_) & (d["gbps"] > 0)]
    title = f"{suite}, {pass_} ({dtype}): compulsory bytes per second against the memory roof"
    if d.empty:
        return message(f"no {pass_} row of {suite} ran in {dtype}", title)
    if roof is None:
        roofs_: list[Mapping[str, Any]] = []
    elif isinstance(roof, tuple):
        roofs_ = [{"value": roof[0], "label": roof[1], "role": "reference" if "copy" in roof[1] else "limit"}]
    else:
        roofs_ = list(roof)
    configs = list(dict.fromkeys(d["config"]))
    st = _style(style, d["impl"].unique())
    fig = go.Figure()
    top = d["gbps"].max() / 1e3
    for r in sorted(roofs_, key=lambda r: -float(r["value"])):
        bw = float(r["value"]) / 1e12
        ref = r.get("role") == "reference"
        fig.add_trace(go.Scatter(
            x=[configs[0], configs[-1]], y=[bw, bw], mode="lines",
            name=f"{bw:.2f} TB/s: " + re.sub(r" \(", "<br>(", str(r["label"]), count=1),
            line={"dash": "dash" if ref else "solid", "color": "#9a9a9a" if ref else "#444", "width": 1.4},
            hoverinfo="name", legendrank=1, meta={"role": str(r.get("role", "limit")), "kind": "y", "value": bw,
                                                     "label": str(r["label"])}))
        top = max(top, bw)
    for name in [s for s in st if s in set(d["impl"])]:
        g = d[d["impl"] == name].set_index("config").reindex(configs).dropna(subset=["gbps"])
        fig.add_trace(go.Scatter(
            x=list(g.index), y=g["gbps"] / 1e3, mode="markers", name=name, legendrank=100,
            marker={"size": 10, "color": st[name]["color"], "symbol": st[name].get("symbol", "circle"),
                    "line": {"width": 0.5, "color": "white"}}, meta={"role": "data"},
            hovertext=[f"<b>{name}</b> {c}<br>{fmt_num(r.gbps / 1e3)} TB/s, {fmt_num(r.ms * 1e3)} µs" for c, r in g.iterrows()],
            hoverinfo="text"))
    fig.update_yaxes(title_text="compulsory bytes per second [TB/s]", range=[0, top * 1.1], rangemode="tozero")
    fig.update_xaxes(title_text="configuration", tickfont={"size": 11}, automargin=True, type="category",
                     categoryorder="array", categoryarray=configs, showgrid=True)
    fig.update_layout(title=title, template=TEMPLATE, height=560, legend={"font": {"size": 11}})
    fit_legend(fig, len(st) + 2 * len(roofs_))
    return fig


def option_ladder(study: pd.DataFrame, others: pd.DataFrame, variant: str, pass_: str,
                  style: Style | None = None) -> go.Figure:
    """One implementation's option settings as a ladder, per study (one panel each): a bar per setting
    (GPU time, the implementation's colour, its value written above it), and each other implementation
    that ran the same case as a dashed horizontal line in its own colour (in the legend; its time in the
    hover): where each step of the ladder stands against the kernels below and above it."""
    d = study[(study["variant"].astype(str) == variant) & (study["pass"] == pass_)]
    title = f"{variant} {pass_}: each option setting's GPU time beside the other implementations of the case"
    if d.empty:
        return message(f"no option study of {variant} {pass_}", title)
    o = others[(others["variant"].astype(str) == variant) & (others["pass"] == pass_)]
    studies = sorted(d["study"].unique(), key=natural_key)
    everything = option_order(d["option"])
    st = _style(style, [variant, *o["other"].unique()])
    cols = min(len(studies), 2)
    rows = -(-len(studies) // cols)
    # slanted tick labels take about 5 px per character below each row: the gap between rows grows with them
    label_px = 5.5 * max(len(str(v)) for v in everything)
    row_px = 330 + label_px
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=studies,
                        vertical_spacing=min(0.3, (label_px + 50) / (rows * row_px)) if rows > 1 else 0.1,
                        horizontal_spacing=0.08)
    shown: set[str] = set()
    for k, s in enumerate(studies):
        r, c = k // cols + 1, k % cols + 1
        present = set(d.loc[d["study"] == s, "option"])
        order = [v for v in everything if v in present]  # each panel its own settings: no empty slots
        g = d[d["study"] == s].set_index("option").reindex(order)
        color = st[variant]["color"]
        fig.add_trace(go.Bar(x=order, y=g["ms"], name=variant, legendgroup=variant, showlegend=variant not in shown,
                             marker={"color": color}, text=[fmt_num(v) if pd.notna(v) else "" for v in g["ms"]],
                             textposition="outside", textfont={"size": 11},
                             hovertemplate=f"{s}<br>%{{x}}: %{{y:.3f}} ms<extra>{variant}</extra>"), r, c)
        shown.add(variant)
        top = float(g["ms"].max())
        for _, row in o[o["study"] == s].iterrows():
            name = str(row["other"])
            oc = st[name]["color"]
            # a line across the panel: a scatter (not a shape) so that it has a legend entry and a hover
            fig.add_trace(go.Scatter(x=[order[0], order[-1]], y=[row["other_ms"]] * 2, mode="lines", name=name,
                                     legendgroup=name, showlegend=name not in shown,
                                     line={"color": oc, "width": 2, "dash": "dash"},
                                     hovertemplate=f"{s}<br>{name}: {row['other_ms']:.3f} ms<extra></extra>"), r, c)
            shown.add(name)
            top = max(top, float(row["other_ms"]))
        fig.update_yaxes(range=[0, top * 1.18], title_text="GPU time [ms]" if c == 1 else None, row=r, col=c)
        fig.update_xaxes(categoryorder="array", categoryarray=order, tickfont={"size": 11}, row=r, col=c)
    fig.update_layout(title=title, template=TEMPLATE, height=int(120 + row_px * rows), bargap=0.35)
    fig.for_each_annotation(lambda a: a.update(font={"size": 12}))
    fit_legend(fig, len(shown))
    return fig


#: the steps of a waterfall (:func:`gap_waterfall`): greys, no implementation's colour
STEP_MORE, STEP_LESS = "#4a4a4a", "#bdbdbd"


def gap_waterfall(steps: pd.DataFrame, title: str, names: tuple[str, str] = ("a", "b"), style: Style | None = None,
                  zoom: bool = True) -> go.Figure:
    """From one launch's time to the other's (:func:`nsightlab.analysis.advice.waterfall`'s ``label``,
    ``measure``, ``ms``), as a horizontal waterfall read top to bottom: the first bar is a's time, each step
    removes one term's part of the gap (dark: a spends more time on that term than b, light: less), the last
    bar is b's time; each bar is labelled with its milliseconds, the two times in their implementations'
    colours and named. ``zoom``: the time axis starts near the lowest point the steps reach (the two bars of
    the times are then cut short; the axis says where it starts)."""
    if steps.empty:
        return message("no gap to split", title)
    st = _style(style, [n for n in names])
    ends = {"absolute": names[0], "total": names[1]}
    labels = [f"<b>{ends[m]}</b>: {ms:.3f} ms" if m in ends else str(lab)
              for lab, m, ms in steps[["label", "measure", "ms"]].itertuples(index=False)]
    ms = steps["ms"].astype(float).tolist()
    measure = steps["measure"].tolist()
    text = [f"{v:.3f} ms" if m in ends else f"{v:+.3f} ms" for v, m in zip(ms, measure, strict=True)]
    hover = []
    for lab, m, v in zip(steps["label"], measure, ms, strict=True):
        if m in ends:
            hover.append(f"<b>{ends[m]}</b>: {v:.3f} ms")
        else:
            who = "more" if v < 0 else "less"
            hover.append(f"{lab}: {names[0]} spends {abs(v):.3f} ms {who} than {names[1]} on it")
    # where the path goes: a's time, then a running sum of the steps, ending at b's time
    path = np.cumsum([ms[0], *ms[1:-1]])
    lo, hi = float(min(path.min(), ms[-1])), float(max(path.max(), ms[0]))
    span = max(hi - lo, 1e-9)
    start = max(0.0, lo - 0.25 * span) if zoom and lo - 0.25 * span > 0.2 * hi else 0.0
    fig = go.Figure(go.Waterfall(
        orientation="h", y=labels, x=ms, measure=measure, text=text, textposition="outside",
        textfont={"size": 12}, hovertext=hover, hoverinfo="text", cliponaxis=False,
        increasing={"marker": {"color": STEP_LESS}}, decreasing={"marker": {"color": STEP_MORE}},
        totals={"marker": {"color": "rgba(0,0,0,0)"}}, connector={"line": {"color": "#999", "width": 1, "dash": "dot"}},
        showlegend=False))
    # the two times in their implementations' colours (a waterfall colours all its totals alike)
    for i in (0, len(ms) - 1):
        name = ends[measure[i]]
        fig.add_trace(go.Bar(orientation="h", y=[labels[i]], x=[ms[i]], marker={"color": st[name]["color"]}, name=name,
                             hoverinfo="skip", showlegend=False, width=0.6))
    # a legend for the two kinds of step (empty traces: the waterfall itself has no legend entry per colour)
    for color, what in ((STEP_MORE, f"{names[0]} spends more time on it"), (STEP_LESS, f"{names[0]} spends less")):
        fig.add_trace(go.Bar(orientation="h", y=[None], x=[None], marker={"color": color}, name=what, showlegend=True))
    right = hi + 0.22 * span
    fig.update_xaxes(range=[start, right], title_text="time [ms]" + (f" (the axis starts at {start:.3f} ms)" if start else ""))
    fig.update_yaxes(autorange="reversed", automargin=True, categoryorder="array", categoryarray=labels)
    fig.update_layout(title=title, template=TEMPLATE, barmode="overlay", height=150 + 34 * len(ms),
                      legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0},
                      margin={"l": 20, "r": 20}, bargap=0.4)
    return fig


def mix_bars(mix: pd.DataFrame, title: str, names: tuple[str, str] = ("a", "b"), style: Style | None = None,
             n: int = 15) -> go.Figure:
    """The difference in executed warp instructions per opcode (:func:`nsightlab.analysis.advice.instruction_mix`),
    the ``n`` largest, as diverging horizontal bars: to the right (a's colour) where a executes more, to the left
    (b's colour) where b does; largest on top."""
    if mix.empty:
        return message("no instruction mix (the report lacks InstructionStats' per-opcode counts)", title)
    st = _style(style, list(names))
    top = mix.head(n)
    colors = [st[names[0]]["color"] if d > 0 else st[names[1]]["color"] for d in top["diff"]]
    hover = [f"<b>{r.name}</b> {('(' + r.kind + ')') if r.kind else ''}<br>{names[0]}: {r.a:,.0f}<br>{names[1]}: {r.b:,.0f}"
             f"<br>difference: {r.diff:+,.0f} ({r.of_b:+.1%} of {names[1]}'s total)" for r in top.itertuples()]
    fig = go.Figure(go.Bar(orientation="h", y=list(top["name"]), x=top["diff"] / 1e6, marker={"color": colors},
                           hovertext=hover, hoverinfo="text", showlegend=False,
                           text=[f"{d / 1e6:+,.1f}M" for d in top["diff"]], textposition="outside", cliponaxis=False))
    for name in names:  # which side each colour is
        fig.add_trace(go.Bar(orientation="h", y=[None], x=[None], marker={"color": st[name]["color"]},
                             name=f"{name} executes more", showlegend=True))
    m = float(top["diff"].abs().max()) / 1e6 * 1.25 or 1.0
    fig.update_xaxes(range=[-m, m], title_text=f"warp instructions executed, {names[0]} − {names[1]} [millions]",
                     zeroline=True, zerolinecolor="#555")
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_layout(title=title, template=TEMPLATE, height=150 + 24 * len(top), bargap=0.3,
                      legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0})
    return fig
