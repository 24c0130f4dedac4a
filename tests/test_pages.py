"""Pages a kernel engineer trusts at a glance: every figure of a representative set of pages, rendered with the
real notebooks from the committed captures, is walked for a point above a roof drawn as a limit, a compute roof
drawn at a clock no range ran at, and a line drawn through categorical x values; headless Chromium measures how
long the first figure takes to draw and whether anything is wider than the page at 1400 px; and the index
(nsightlab.render.index) puts the comparisons first, one line per capture, each verdict once.

``python tests/test_pages.py PAGE.html OUT.png [HEIGHT]`` takes a 1400 px wide screenshot of a page.
"""

from __future__ import annotations

import asyncio
import base64
import html as _html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from nsightlab.analysis import counters, perf, roofline
from nsightlab.render import figures as F
from nsightlab.render import index as I  # noqa: N812
from nsightlab.store import captures, read

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "profiles" / "nvidia-h200"
#: the pages the issue names, rendered with the real notebooks: (capture, notebook)
PAGES = (("decode", "roofline"), ("triton-example", "roofline"), ("bench", "performance"), ("seqlen", "l2_thrashing"),
         ("decode", "device"))
#: the first figure of a page appears within this many ms in headless Chromium (2 CPU cores)
FIRST_FIGURE_MS = 3000
TOLERANCE = 1.02


# --------------------------------------------------------------------------- a page in headless Chromium (DevTools)

#: the width the pages are read at
WIDTH = 1400

#: recorded in the page from its first byte on: when the first figure's SVG appeared (ms after navigation start)
FIRST_FIGURE = """new MutationObserver(function(ms,o){if(document.querySelector('.plotly-graph-div .main-svg')){
window.__nslFirstFigure=performance.now();o.disconnect();}}).observe(document,{childList:true,subtree:true});"""

#: the page's widest elements: those whose right edge passes the window, and the boxes that scroll sideways
WIDEST = """(function(){var W=document.documentElement.clientWidth,out=[],seen=0;
document.querySelectorAll('body *').forEach(function(e){var r=e.getBoundingClientRect();if(!r.width)return;
var cs=getComputedStyle(e);var scrolls=(cs.overflowX=='auto'||cs.overflowX=='scroll')&&e.scrollWidth>e.clientWidth+1;
if(r.right>W+1||scrolls){out.push({tag:e.tagName.toLowerCase(),cls:String(e.className).slice(0,60),
right:Math.round(r.right),scroll:scrolls?e.scrollWidth-e.clientWidth:0,text:(e.innerText||'').slice(0,60)});}});
return {window:W,page:document.documentElement.scrollWidth,height:document.documentElement.scrollHeight,
over:out.slice(0,20)};})()"""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class Page:
    """One page in a fresh headless Chromium (no network), read at :data:`WIDTH` px."""

    def __init__(self, path: Path, height: int = 1000) -> None:
        self.path, self.height = Path(path), height

    async def __aenter__(self) -> Page:
        from tornado.websocket import websocket_connect

        self._profile = tempfile.TemporaryDirectory(prefix="nsl-chrome-", ignore_cleanup_errors=True)
        self._proc = subprocess.Popen(
            [chromium() or "chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND", "--remote-debugging-port=0",
             f"--user-data-dir={self._profile.name}", f"--window-size={WIDTH},{self.height}", "about:blank"],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        port = None
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            m = re.search(r"ws://127\.0\.0\.1:(\d+)/", line)
            if m:
                port = int(m.group(1))
                break
        assert port, "Chromium did not open its DevTools port"
        tabs = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30))
        url = next(t for t in tabs if t["type"] == "page")["webSocketDebuggerUrl"]
        self._ws = await websocket_connect(url, max_message_size=1 << 28)
        self._n = 0
        await self.call("Page.enable")
        await self.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=self.height, deviceScaleFactor=1,
                        mobile=False)
        await self.call("Page.addScriptToEvaluateOnNewDocument", source=FIRST_FIGURE)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._ws.close()
        self._proc.kill()
        self._proc.wait()
        self._profile.cleanup()

    async def call(self, method: str, **params: Any) -> dict:
        self._n += 1
        me = self._n
        await self._ws.write_message(json.dumps({"id": me, "method": method, "params": params}))
        while True:
            raw = await asyncio.wait_for(self._ws.read_message(), 120)
            assert raw is not None, "Chromium closed the connection"
            msg = json.loads(raw)
            if msg.get("id") == me:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    async def js(self, expression: str) -> Any:
        r = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return r.get("result", {}).get("value")

    async def open(self, timeout: float = 30.0) -> float | None:
        """Navigate to the page; the first figure's draw time in ms after navigation start (None: no figure
        drew within ``timeout``)."""
        await self.call("Page.navigate", url=self.path.resolve().as_uri())
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            first = await self.js("window.__nslFirstFigure||0")
            if first:
                return float(first)
            if await self.js("document.readyState=='complete'&&!document.querySelector('.plotly-graph-div')"):
                return None
            await asyncio.sleep(0.05)
        return None

    async def settle(self, timeout: float = 60.0) -> None:
        """Scroll through the page (so that figures drawn when scrolled to are drawn) and wait until every
        figure has its SVG."""
        h = int(await self.js("document.documentElement.scrollHeight") or 0)
        for y in range(0, h + self.height, self.height // 2):
            await self.js(f"window.scrollTo(0,{y})")
            await asyncio.sleep(0.05)
        end = time.monotonic() + timeout
        while time.monotonic() < end and await self.js(
                "Array.from(document.querySelectorAll('.plotly-graph-div')).some(d=>!d.querySelector('.main-svg'))"):
            await asyncio.sleep(0.2)
        await self.js("window.scrollTo(0,0)")
        await asyncio.sleep(0.3)

    async def widest(self) -> dict:
        return await self.js(WIDEST)

    async def screenshot(self, out: Path, height: int | None = None) -> None:
        full = int(await self.js("document.documentElement.scrollHeight") or self.height)
        h = min(full, height or full)
        r = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                            clip={"x": 0, "y": 0, "width": WIDTH, "height": h, "scale": 1})
        Path(out).write_bytes(base64.b64decode(r["data"]))


async def measure(path: Path, shot: Path | None = None, shot_height: int | None = None) -> dict:
    """First figure's draw time (ms), the widest elements, and optionally a screenshot, of one page."""
    async with Page(path) as p:
        first = await p.open()
        await p.settle()
        wide = await p.widest()
        if shot is not None:
            await p.screenshot(shot, shot_height)
    return {"first_figure_ms": first, **wide}


# --------------------------------------------------------------------------- reading a figure back


def _array(v: object) -> list:
    """A plotly array as a list (plotly writes numeric arrays as base64 ``bdata``)."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
    return list(v) if isinstance(v, (list, tuple)) else []


def figure_specs(page_html: str) -> list[dict]:
    """Every figure of a rendered page, as plotly's JSON (data, layout)."""
    # nbconvert writes the page again: attributes in its order, so the pattern takes them in any
    return [json.loads(m) for m in re.findall(r'<script[^>]*\bid="fig-[0-9a-f]+-spec"[^>]*>(.*?)</script>', page_html,
                                              re.S)]


def _traces(spec: dict) -> list[dict]:
    return [t for t in spec.get("data", []) if t.get("type", "scatter") in ("scatter", "scattergl")]


def _role(t: dict) -> str:
    meta = t.get("meta")
    return str(meta.get("role", "")) if isinstance(meta, dict) else ""


def roof_problems(spec: dict) -> list[str]:
    """A point above a roof drawn as a limit (of its kind: a compute roof bounds every point, a memory roof the
    points of its level), and a limit drawn at a clock no range of the figure ran at."""
    out = []
    title = ((spec.get("layout") or {}).get("title") or {}).get("text", "")
    traces = _traces(spec)
    data = [t for t in traces if _role(t) == "data"]
    for roof in (t for t in traces if _role(t) == "limit"):
        m = roof["meta"]
        axes = (roof.get("xaxis", "x"), roof.get("yaxis", "y"))
        for t in data:
            if (t.get("xaxis", "x"), t.get("yaxis", "y")) != axes:
                continue
            ys = np.asarray(_array(t.get("y")), dtype=float)
            if m.get("kind") == "memory":
                if t["meta"].get("level") != m.get("level"):
                    continue
                xs = np.asarray(_array(t.get("x")), dtype=float)
                over = ys > m["value"] * xs * TOLERANCE
            else:
                over = ys > m["value"] * TOLERANCE
            if over.any():
                out.append(f"{title!r}: {t.get('name')} has {int(over.sum())} point(s) above the limit {m['label']!r}")
    clocks = ((spec.get("layout") or {}).get("meta") or {}).get("clocks_hz") or []
    for r in ((spec.get("layout") or {}).get("meta") or {}).get("roofs") or []:
        hz = r.get("clock_hz")
        if hz and r["role"] != "reference" and not any(abs(hz / c - 1) < 0.005 for c in clocks):
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
        xs = _array(t.get("x"))
        if "lines" not in mode or _role(t) in ("limit", "pipe", "reference") or t.get("fill"):
            continue
        cats = [x for x in xs if x is not None and not _numeric(x)]
        if len(set(cats)) > 2:
            out.append(f"{t.get('name')!r}: a line through {len(set(cats))} categories ({cats[:3]} ...)")
    return out


# --------------------------------------------------------------------------- the figures, on the committed captures


def _roofline_figures(name: str) -> list:
    path = H200 / name
    man = captures.load_manifest(path)
    work = counters.kernel_work(read.load_ncu(path, man))
    rng = counters.attach_model(counters.per_range(work, by_kernel_if_no_ranges=True), captures.cases(man))
    pts = roofline.roofline_points(rng)
    ceil = roofline.ceilings(work, man, pts)
    sweep = "N" if "N" in pts else None
    return [F.roofline(sel, ceil, title or name, size_by=sweep, facet_row=row)
            for title, sel, row in roofline.views(pts, sweep)]


def _spec(fig) -> dict:
    return json.loads(fig.to_json())


@pytest.mark.parametrize("name", ["decode", "triton-example", "seqlen"])
def test_rooflines_hold_their_points_at_the_clocks_the_ranges_ran_at(name):
    for fig in _roofline_figures(name):
        spec = _spec(fig)
        assert not roof_problems(spec), roof_problems(spec)
        assert not categorical_lines(spec)
        roofs = spec["layout"]["meta"]["roofs"]
        limits = [r for r in roofs if r["role"] == "limit" and r["kind"] == "compute"]
        assert len(limits) == 1 and "GHz" in limits[0]["label"]  # the top peak, its clock named
        # the measured FP16 and BF16 roofs the hardware defines as equal: one band each, the spread stated
        bands = [r for r in roofs if r["lo"] < r["value"] * 0.995]
        assert all("FP16/BF16" in r["label"] and "±" in r["label"] for r in bands)
        for what in ("wgmma", "mma.sync", "cuBLAS"):  # never an FP16 and a BF16 roof of one kind side by side
            assert not all(any(r["label"].startswith(f"{what} {t} ") for r in roofs) for t in ("FP16", "BF16"))
        # every reference line says so
        assert all("ref." in r["label"] for r in roofs if r["role"] == "reference")


def test_the_decode_roofline_keeps_its_l1_points_on_the_axis():
    fig = _roofline_figures("decode")[0]
    x_hi = 10 ** fig.layout.xaxis.range[1]
    assert x_hi < 1e5, "the TMA kernels' L1 points (~1M FLOP/byte) must not stretch the axis"
    assert "right edge" in fig.layout.title.text


def test_the_checks_catch_a_point_above_a_limit_a_foreign_clock_and_a_categorical_line():
    spec = {"layout": {"title": {"text": "t"}, "meta": {"clocks_hz": [1.8e9], "roofs": [
        {"role": "limit", "kind": "compute", "value": 100.0, "lo": 100.0, "clock_hz": 1.98e9, "label": "peak"}]}},
        "data": [{"type": "scatter", "x": [1, 2], "y": [50, 120], "meta": {"role": "data", "level": "DRAM"}},
                 {"type": "scatter", "x": [1, 10], "y": [100, 100], "mode": "lines",
                  "meta": {"role": "limit", "kind": "compute", "value": 100.0, "label": "peak"}},
                 {"type": "scatter", "x": ["a", "b", "c"], "y": [1, 2, 3], "mode": "lines+markers", "name": "k"}]}
    problems = roof_problems(spec)
    assert any("above the limit" in p for p in problems) and any("no range ran at" in p for p in problems)
    assert categorical_lines(spec)


def test_the_decode_bandwidth_chart_draws_the_read_stream_as_its_roof_and_the_copy_as_a_reference():
    df, _ = captures.load_bench(H200 / "bench")
    man = captures.load_manifest(H200 / "bench")
    best = perf.ok_rows(df).query("suite == 'decode'")["gbps"].max() * 1e9
    man = {**man, "ceilings": {**man["ceilings"], "read_stream": {"bytes_per_s": best * 1.01, "bytes": 2**31}}}
    roofs = perf.bandwidth_roofs(man)
    assert [r["role"] for r in roofs] == ["limit", "reference"]
    assert roofs[1]["value"] < best  # the read-only kernels pass the copy: it cannot be their limit
    fig = F.bandwidth_vs_config(df, "decode", "float16", "forward", roofs)
    spec = _spec(fig)
    assert not roof_problems(spec) and not categorical_lines(spec)
    # drawn as a limit, the copy would have been caught
    as_limit = [{**r, "role": "limit"} for r in roofs]
    assert roof_problems(_spec(F.bandwidth_vs_config(df, "decode", "float16", "forward", as_limit)))


# --------------------------------------------------------------------------- the pages, rendered


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """The pages of :data:`PAGES`, rendered with the real notebooks as the report renders them."""
    from nsightlab.render.execute import PLOTLY_JS, render_notebook, ship_assets

    reports = tmp_path_factory.mktemp("pages")
    ship_assets(reports)
    out = []
    for cap, nb in PAGES:
        page = reports / "nvidia-h200" / cap / f"{nb}.html"
        params = {"capture": str(H200 / cap), "plotlyjs": os.path.relpath(reports / PLOTLY_JS, page.parent)}
        render_notebook(ROOT / "notebooks" / f"{nb}.ipynb", params, page, reports=reports)
        out.append(page)
    return out


def test_every_figure_of_the_rendered_pages_keeps_its_roofs_true_and_its_categories_unjoined(rendered):
    problems, n = [], 0
    for page in rendered:
        for spec in figure_specs(page.read_text(encoding="utf-8")):
            n += 1
            problems += [f"{page.parent.name}/{page.name}: {p}" for p in roof_problems(spec) + categorical_lines(spec)]
    assert n >= len(rendered) and not problems, problems


def test_table_headers_break_after_underscores_and_cells_stay_as_written(rendered):
    text = next(p for p in rendered if p.name == "performance.html").read_text(encoding="utf-8")
    heads = re.findall(r"<thead>.*?</thead>", text, re.S)
    assert any(re.search(r"tiled_<wbr/?>uncoalesced", h) for h in heads)
    assert "<wbr" not in "".join(re.findall(r"<tbody>.*?</tbody>", text, re.S))
    assert "No implementation is tracked" not in text and "parameter impl" not in text


def test_one_number_format_per_column():
    from nsightlab.render.page import column_format

    fmt = column_format(pd.Series([2.2e7, 132096.0, 5.0]))
    assert [fmt.format(v) for v in (2.2e7, 132096.0)] == ["22,000,000", "132,096"]
    fmt = column_format(pd.Series([0.0123, 45.6]))
    assert fmt.format(45.6).count(".") == 1 and len(fmt.format(0.0123).split(".")[1]) == len(fmt.format(45.6).split(".")[1])


needs_chromium = pytest.mark.skipif(chromium() is None, reason="headless Chromium is not installed (Debian: apt install "
                                    "chromium): the draw-time and page-width checks need it")


@needs_chromium
def test_pages_draw_their_first_figure_fast_and_nothing_is_wider_than_the_page(rendered):
    pytest.importorskip("tornado", reason="the DevTools client needs tornado (installed with Jupyter)")
    for page in rendered:
        res = asyncio.run(measure(page))
        assert res["first_figure_ms"] is not None, f"{page}: no figure drew"
        assert res["first_figure_ms"] <= FIRST_FIGURE_MS, f"{page}: first figure after {res['first_figure_ms']:.0f} ms"
        assert res["page"] <= res["window"] and not res["over"], f"{page}: wider than the page: {res['over'][:3]}"


# --------------------------------------------------------------------------- the index


def _index(**kw) -> SimpleNamespace:
    base = {"pages": [], "failures": [], "captions": {}, "skipped": {}, "summaries": {}, "comparisons": [],
            "title": "Nsight reports"}
    return SimpleNamespace(**{**base, **kw})


MEMORY_BOUND = ["Fastest range: **flash_decode** (forward, N=4) at 310 useful TFLOP/s (32% of Tensor FP16 dense).",
                "Nearest roof at each one's fastest range: sdpa_cudnn 50% of L2 bandwidth, flash_mma 26% of L2 "
                "bandwidth, sdpa_flash 27% of DRAM bandwidth."]


def test_the_index_puts_comparisons_first_one_line_per_capture_and_each_verdict_once(tmp_path):
    verdict = "2 regressions beyond 5%: flash_mma forward 8.1% slower (±1.0%)."
    idx = _index(
        pages=[("gpu/decode/roofline", "gpu/decode/roofline.html"), ("gpu/decode/device", "gpu/decode/device.html"),
               ("gpu/bench/performance", "gpu/bench/performance.html")],
        captions={"gpu/decode": "Decode attention. NVIDIA H200, captured 2026-01-01.", "gpu/bench": "Bench."},
        skipped={"gpu/decode": {"options": "no option study"}, "gpu/bench": {"roofline": "no Nsight Compute report"}},
        summaries={"gpu/decode/roofline": MEMORY_BOUND, "gpu/decode/device": ["NVIDIA H200: 132 SMs."],
                   "gpu/bench/performance": ["sdpa_cudnn is the fastest in 97 of 256 configurations."]},
        comparisons=[{"href": "compare/a.html", "title": "A → B", "base": "gpu/a", "new": "gpu/b", "summary": verdict}],
        failures=[("gpu-y/broken", "checksum mismatch: truncated")])
    assert I.write_index(tmp_path, idx) and not I.write_index(tmp_path, idx)  # written once, then unchanged
    text = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert text.index('id="comparisons"') < text.index('id="captures"')
    shown = re.sub(r"<[^>]+>", "", text)  # what a reader sees (a tooltip holds the verdict with its two sides)
    assert shown.count(_html.escape(verdict)) == 1
    assert len(re.findall(r'<tr class="nsl-row" id="gpu/', text)) == 2
    # the memory-bound capture's headline is a bandwidth share, not useful TFLOP/s
    row = re.search(r'<tr class="nsl-row" id="gpu/decode">.*?</tr>', text, re.S).group(0)
    line = re.search(r'<span class="line"[^>]*>(.*?)</span>', row, re.S).group(1)
    assert "bandwidth" in line and "TFLOP/s" not in line
    assert I.headline({"performance": ["x"], "roofline": MEMORY_BOUND}) == ("roofline", MEMORY_BOUND[1])
    assert I.headline({"roofline": ["Fastest range: a.", "Nearest roof at each one's fastest range: a 42% of Tensor "
                                    "FP16 dense peak."]}) == ("roofline", "Fastest range: a.")
    # what the report's index always said is still there: every page, its first finding, what does not apply, failures
    for href in ("gpu/decode/roofline.html", "gpu/decode/device.html", "gpu/bench/performance.html", "compare/a.html"):
        assert f'href="{href}"' in text
    assert _html.escape(MEMORY_BOUND[0]) in text and "options: not applicable &mdash; no option study" in text
    assert "gpu-y/broken" in text and "truncated" in text and 'id="nsl-filter"' in text
    assert I.render(idx) == I.render(idx)


@needs_chromium
def test_the_index_fits_a_screen_and_filters(tmp_path):
    pytest.importorskip("tornado", reason="the DevTools client needs tornado (installed with Jupyter)")
    caps = [f"gpu/c{i:02d}" for i in range(24)]
    idx = _index(pages=[(f"{c}/roofline", f"{c}/roofline.html") for c in caps],
                 captions={c: "A capture of some kernels over a sweep of sequence lengths. NVIDIA H200." for c in caps},
                 summaries={f"{c}/roofline": ["Fastest range: " + "x " * 150] for c in caps},
                 comparisons=[{"href": f"compare/{i}.html", "title": f"comparison {i}", "base": "a", "new": "b",
                               "summary": "no change beyond 5%"} for i in range(13)])
    I.write_index(tmp_path, idx)
    res = asyncio.run(measure(tmp_path / "index.html"))
    assert res["page"] <= res["window"] and not res["over"], res["over"][:3]
    assert res["height"] < 3 * 1000, f"the index is {res['height']} px tall for 24 captures and 13 comparisons"


if __name__ == "__main__":
    shot = asyncio.run(measure(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None))
    print(json.dumps(shot, indent=1))
