"""What every rendered page is checked for before ``nsightlab report`` counts it as done: each figure, read back
from the page as plotly's JSON, must keep its points under the roofs it draws as limits (a compute limit bounds
every point; a memory limit the points of its level), draw no limit at a clock no range of it ran at, and draw
no line through categorical x values (configurations are not a sequence). Figures say what their traces are
through plotly's ``meta``: ``{"role": "data" | "limit" | "pipe" | "reference", "kind", "level", "value",
"label", "side"}`` on a trace (``side``: a comparison's base or new, whose roofs bound only their own points),
and ``{"roofs": [...], "clocks_hz": [...]}`` on the layout.

    page_problems(html) -> ["'<figure title>': <what is wrong>", ...]   (empty: the page passes)
"""

from __future__ import annotations

import base64
import json
import re

import numpy as np

from ..analysis.perf import ROOF_TOLERANCE

#: how far above a limit a point may sit before it counts (the peaks are medians over launches, the points single
#: ranges: 2 % absorbs the launch-to-launch spread of the clock); the bandwidth charts demote a roof by the same rule
TOLERANCE = ROOF_TOLERANCE

_SPEC = re.compile(r'<script[^>]*\bid="fig-[0-9a-f]+-spec"[^>]*>(.*?)</script>', re.S)


def array(v: object) -> list:
    """A plotly array as a list (plotly writes numeric arrays as base64 ``bdata``)."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
    return list(v) if isinstance(v, (list, tuple)) else []


def figure_specs(page_html: str) -> list[dict]:
    """Every figure of a rendered page, as plotly's JSON (data, layout)."""
    return [json.loads(m) for m in _SPEC.findall(page_html)]


def _traces(spec: dict) -> list[dict]:
    return [t for t in spec.get("data", []) if t.get("type", "scatter") in ("scatter", "scattergl")]


def role(trace: dict) -> str:
    meta = trace.get("meta")
    return str(meta.get("role", "")) if isinstance(meta, dict) else ""


def _title(spec: dict) -> str:
    title = (spec.get("layout") or {}).get("title") or {}
    return str(title.get("text", "") if isinstance(title, dict) else title).split("<br>")[0]


def roof_problems(spec: dict) -> list[str]:
    """A point above a roof drawn as a limit, and a limit drawn at a clock no range of the figure ran at."""
    out = []
    title = _title(spec)
    traces = _traces(spec)
    data = [t for t in traces if role(t) == "data"]
    for roof in (t for t in traces if role(t) == "limit"):
        m = roof["meta"]
        axes = (roof.get("xaxis", "x"), roof.get("yaxis", "y"))
        for t in data:
            if (t.get("xaxis", "x"), t.get("yaxis", "y")) != axes:
                continue
            if m.get("side") and t["meta"].get("side") and m["side"] != t["meta"]["side"]:
                continue  # a comparison's base roof bounds the base points only (the sides may be two GPUs)
            ys = np.asarray(array(t.get("y")), dtype=float)
            if m.get("kind") == "memory":
                if t["meta"].get("level") != m.get("level"):
                    continue
                xs = np.asarray(array(t.get("x")), dtype=float)
                over = ys > m["value"] * xs * TOLERANCE
            else:
                over = ys > m["value"] * TOLERANCE
            if over.any():
                out.append(f"{title!r}: {t.get('name')} has {int(over.sum())} point(s) above the limit {m['label']!r}")
    layout_meta = (spec.get("layout") or {}).get("meta") or {}
    clocks = layout_meta.get("clocks_hz") or [] if isinstance(layout_meta, dict) else []
    for r in (layout_meta.get("roofs") or [] if isinstance(layout_meta, dict) else []):
        hz = r.get("clock_hz")
        if hz and r.get("role") != "reference" and not any(abs(hz / c - 1) < 0.005 for c in clocks):
            out.append(f"{title!r}: {r['label']!r} is drawn at {hz / 1e9:.3f} GHz, a clock no range ran at")
    return out


def _numeric(v: object) -> bool:
    try:
        float(str(v))
        return True
    except ValueError:
        return False


def categorical_lines(spec: dict) -> list[str]:
    """A line (not a roof or a reference) drawn through more than two categorical x values."""
    out = []
    for t in _traces(spec):
        mode = t.get("mode") or "lines+markers"
        if "lines" not in mode or role(t) in ("limit", "pipe", "reference") or t.get("fill"):
            continue
        cats = [x for x in array(t.get("x")) if x is not None and not _numeric(x)]
        if len(set(cats)) > 2:
            out.append(f"{_title(spec)!r}: {t.get('name')!r} is a line through {len(set(cats))} categories "
                       f"({cats[:3]} ...)")
    return out


def page_problems(page_html: str) -> list[str]:
    """Every figure problem of a rendered page (empty: it passes)."""
    out: list[str] = []
    for spec in figure_specs(page_html):
        out += roof_problems(spec) + categorical_lines(spec)
    return out
