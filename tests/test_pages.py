"""Pages a kernel engineer trusts at a glance. ``nsightlab report`` walks every figure of every page it renders
(nsightlab.render.checks) and counts a page that fails as FAILED; here a representative set of pages, rendered with
the real notebooks from the committed captures, is walked the same way for a point above a roof drawn as a limit, a compute roof
drawn at a clock no range ran at, and a line drawn through categorical x values; headless Chromium measures how
long the first figure takes to draw and whether anything is wider than the page at 1400 px; and the index
(nsightlab.render.index) puts the comparisons first, one line per capture, each verdict once.

``python tests/test_pages.py PAGE.html OUT.png [HEIGHT]`` takes a 1400 px wide screenshot of a page.
"""

from __future__ import annotations

import asyncio
import html as _html
import json
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from nsightlab.analysis import counters, perf, roofline
from nsightlab.render import checks
from nsightlab.render import figures as F
from nsightlab.render import index as I  # noqa: N812
from nsightlab.render.browser import WIDTH, chromium, measure  # noqa: F401 - the screenshot helper below uses them
from nsightlab.store import captures, read

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "profiles" / "nvidia-h200"
#: a representative set, rendered with the real notebooks: (capture, notebook); scripts/check_pages.py reads them all
PAGES = (("decode", "roofline"), ("triton-example", "roofline"), ("bench", "performance"), ("seqlen", "l2_thrashing"),
         ("decode", "device"), ("backward", "why"), ("seqlen", "timeline"))
#: the first figure of a page appears within this many ms in headless Chromium (2 CPU cores)
FIRST_FIGURE_MS = 3000


# --------------------------------------------------------------------------- reading a figure back


figure_specs, roof_problems, categorical_lines = checks.figure_specs, checks.roof_problems, checks.categorical_lines


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


def test_the_index_is_the_same_whatever_order_the_pages_failed_in():
    """Pages render in parallel and fail in any order; the index lists them by name, so it is byte-identical."""
    fails = [("nvidia-h200/b/roofline", "ProfileError: x"), ("nvidia-h200/a/why", "ValueError: y")]
    assert I.render(_index(failures=fails)) == I.render(_index(failures=fails[::-1]))


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


def test_the_report_counts_a_page_whose_figure_breaks_a_check_as_failed(tmp_path, monkeypatch):
    """nsightlab report runs the checks on every page it renders: a page with a point above its limit is written
    (to be looked at) but reported FAILED and not recorded as done, so the next report renders it again."""
    import plotly.graph_objects as go

    from nsightlab.render import report

    fig = go.Figure([go.Scatter(x=[1, 2], y=[5, 9], mode="lines", meta={"role": "limit", "kind": "compute",
                                                                          "value": 4, "label": "peak 4"}),
                     go.Scatter(x=[1, 2], y=[3, 6], mode="markers", name="mine", meta={"role": "data"})])
    html = f'<html><body><script type="application/json" id="fig-0123abcd-spec">{fig.to_json()}</script></body></html>'
    assert checks.page_problems(html) == ["'': mine has 1 point(s) above the limit 'peak 4'"]
    page = tmp_path / "gpu" / "cap" / "roofline.html"
    page.parent.mkdir(parents=True)

    def fake_render(job, a, reports, stop):
        page.write_text(html, encoding="utf-8")
        return {"summary": "", "title": "t"}

    monkeypatch.setattr(report, "_render", fake_render)
    job = SimpleNamespace(label="gpu/cap/roofline", out=page, inputs="x", notebook="roofline")
    label, err, _ = report._page_task(job, SimpleNamespace(), tmp_path, None)
    assert label == "gpu/cap/roofline" and err and "above the limit 'peak 4'" in err
    assert page.exists() and not report.meta_path(page).exists()


if __name__ == "__main__":
    shot = asyncio.run(measure(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None))
    print(json.dumps(shot, indent=1))


def test_a_page_loads_the_plug_ins_its_capture_names_even_for_a_built_in_problem(tmp_path, monkeypatch):
    """An attention capture (a problem nsightlab registers itself) naming a plug-in: preparing its page imports the
    plug-in, so the colours it registers reach the figures (before, only a capture of an unregistered problem
    loaded its plug-ins, and a user's colours fell back to spare ones)."""
    import json
    import shutil
    import sys

    from nsightlab.render import figures
    from nsightlab.render import page as nb

    (tmp_path / "my_colours_plugin.py").write_text(
        "from nsightlab.problems.problem import register_style\n"
        "register_style('my_fast_attention', '#123456', 'circle')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cap = tmp_path / "profiles" / "gpu" / "bench"
    shutil.copytree(Path(__file__).resolve().parent.parent / "profiles" / "nvidia-h200" / "bench", cap)
    man = json.loads((cap / "manifest.json").read_text())
    man["plugins"], man["problem"] = ["my_colours_plugin"], "attention"
    (cap / "manifest.json").write_text(json.dumps(man))
    assert figures.impl_style("my_fast_attention")["color"] in figures.SPARE_COLORS
    try:
        nb.prepare(str(cap))
        assert figures.impl_style("my_fast_attention") == {"color": "#123456", "symbol": "circle"}
    finally:
        from nsightlab.problems import problem

        problem._STYLES.pop("my_fast_attention", None)
        sys.modules.pop("my_colours_plugin", None)
