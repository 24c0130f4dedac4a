"""Figures that cannot mislead (nsightlab.render.figures and the comparison page's figures), on the committed
captures: one colour per implementation on every page, whatever else a page holds (a capture's pages, an
imported report, a comparison); every line trace one series (no line joins two head dimensions); no bar on a
log axis; tick labels of readable size; a figure with nothing to draw is a sentence, not an empty frame.

:func:`check_figure` walks any plotly figure for those rules; :func:`page_figures` builds the figures of every
page that the small committed captures make (performance and correctness from a benchmark capture, L2,
timeline and device from the H200 seqlen study, options from the blocksize study, an imported report's
timeline, a comparison page)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import pytest

from nsightlab.analysis import comparison as C
from nsightlab.analysis import counters, device, l2, options, perf, timeline
from nsightlab.render import compare as page
from nsightlab.render import figures as F
from nsightlab.render import page as nb
from nsightlab.render.numbers import no_empty_brackets
from nsightlab.store import captures, read

PROFILES = Path(__file__).resolve().parent.parent / "profiles"
H200 = PROFILES / "nvidia-h200"


# --------------------------------------------------------------------------- walking a figure


def _segments(xs) -> list[list]:
    """A trace's x values split where a None breaks the line."""
    out: list[list] = [[]]
    for v in xs:
        if v is None or (isinstance(v, float) and np.isnan(v)):
            out.append([])
        else:
            out[-1].append(v)
    return [s for s in out if s]


def line_traces(fig: go.Figure) -> list:
    """The traces drawn as lines (scatter with a line in its mode; plotly draws lines when mode is unset)."""
    return [t for t in fig.data if t.type in ("scatter", "scattergl") and "lines" in (t.mode or "lines")]


def zigzags(fig: go.Figure) -> list[str]:
    """Line traces that visit one x value twice in one stretch of line (two shapes joined into one trace)."""
    bad = []
    for t in line_traces(fig):
        if t.x is None:
            continue
        for seg in _segments(list(t.x)):
            if len(set(seg)) < len(seg):
                bad.append(f"{t.name!r} repeats x values: {sorted(set(v for v in seg if seg.count(v) > 1))[:5]}")
    return bad


def _axis(fig: go.Figure, ref: str | None, letter: str):
    ref = ref or letter
    return fig.layout[f"{letter}axis{ref[1:]}"]


def log_bars(fig: go.Figure) -> list[str]:
    """Bar traces whose value axis is logarithmic (a bar's length there means nothing)."""
    bad = []
    for t in fig.data:
        if t.type != "bar":
            continue
        value = "x" if t.orientation == "h" else "y"
        ax = _axis(fig, t.xaxis if value == "x" else t.yaxis, value)
        if ax.type == "log":
            bad.append(f"bar trace {t.name!r} on a log {value} axis")
    return bad


def small_ticks(fig: go.Figure, least: float = 11) -> list[str]:
    """Axes whose tick labels are set smaller than ``least`` px."""
    bad = []
    for key in fig.layout:
        if key.startswith(("xaxis", "yaxis")):
            size = fig.layout[key].tickfont.size
            if size is not None and size < least:
                bad.append(f"{key} ticks at {size}px")
    return bad


def check_figure(fig: go.Figure) -> None:
    """Fails on a zig-zag line, a bar on a log axis or tick labels under 11 px."""
    problems = zigzags(fig) + log_bars(fig) + small_ticks(fig)
    assert not problems, f"{fig.layout.title.text!r}: " + "; ".join(problems)


def colours(fig: go.Figure, names) -> dict[str, set[str]]:
    """Each implementation's colours in ``fig``: from the trace named after it (or after one of its series,
    "flash_mma D=128"), or, where one trace holds several (a marker colour per point), from the point's
    category. Lines count where a trace draws them."""
    names = sorted(names, key=len, reverse=True)
    out: dict[str, set[str]] = {}

    def owner(label: object) -> str | None:
        label = str(label)
        return next((n for n in names if label == n or label.startswith(n + " ")), None)

    for t in fig.data:
        if t.type not in ("scatter", "scattergl", "bar", "box"):
            continue
        mc = t.marker.color if t.marker is not None else None
        if isinstance(mc, (list, tuple, np.ndarray)):
            cats = t.y if t.orientation == "h" or (t.x is not None and not isinstance(t.x[0], str)) else t.x
            for cat, c in zip(cats, mc, strict=True):
                if owner(cat):
                    out.setdefault(owner(cat), set()).add(str(c).upper())
            continue
        n = owner(t.name)
        if n is None:
            continue
        if isinstance(mc, str):
            out.setdefault(n, set()).add(mc.upper())
        if "lines" in (t.mode or "") and t.line is not None and t.line.color:
            out.setdefault(n, set()).add(str(t.line.color).upper())
    return out


def test_the_walker_catches_what_it_is_for():
    d = pd.DataFrame({"variant": "flash_mma", "N": [1024, 1024, 2048, 2048], "D": [64, 128, 64, 128],
                      "gpu_ms": [1.0, 2.0, 3.0, 5.0]})
    joined = px.line(d, x="N", y="gpu_ms", color="variant")  # D=64 and D=128 in one trace
    assert zigzags(joined) and not zigzags(px.line(d, x="N", y="gpu_ms", color="D"))
    assert not zigzags(go.Figure(go.Scatter(x=[1, 2, None, 1, 2], y=[1, 2, None, 3, 4])))  # joined stretches
    bars = go.Figure(go.Bar(x=["a", "b"], y=[1, 100]))
    bars.update_yaxes(type="log")
    assert log_bars(bars)
    small = go.Figure()
    small.update_xaxes(tickfont={"size": 8})
    assert small_ticks(small)


# --------------------------------------------------------------------------- the figures of every page


@pytest.fixture(scope="module")
def bench():
    df, _ = captures.load_bench(H200 / "bench")
    return df


@pytest.fixture(scope="module")
def seqlen():
    path = H200 / "seqlen"
    man = captures.load_manifest(path)
    work = counters.kernel_work(read.load_ncu(path, man))
    ranges = counters.attach_model(counters.per_range(work), captures.cases(man))
    tables = read.load_nsys(path, man)
    return path, man, ranges, tables


def _bench_figures(df: pd.DataFrame) -> list[go.Figure]:
    impls = list(dict.fromkeys(df["impl"]))
    style = F.style_for(impls)
    ref = perf.pick_reference(df)
    out = []
    for suite in dict.fromkeys(df["suite"]):
        for dt in dict.fromkeys(perf.ok_rows(df)["dtype"]):
            if not len(perf.ok_rows(df[(df["suite"] == suite) & (df["dtype"] == dt)])):
                continue
            if perf.sweeps_n(df, suite):
                out.append(F.throughput_vs_n(df, suite, dt, f"{suite} {dt}", style))
                out.append(F.ratio_vs_n(df, suite, dt, "flash_mma", ref, {"forward": 0.8}, style))
            else:
                out += [F.latency_bars(df, suite, dt, p, style) for p in ("forward", "backward")]
            out.append(F.speedup_vs_reference(df, suite, dt, ref, style))
    out.append(F.accuracy_strip(perf.ok_rows(df), style))
    return out


def _seqlen_figures(seqlen) -> list[go.Figure]:
    path, man, ranges, tables = seqlen
    style = nb.style(man, ranges)
    l2_bytes = float(man["gpu"]["l2_bytes"])
    traffic = l2.with_sweeps(l2.l2_traffic(ranges, l2_bytes), "N")
    onsets = l2.onset_table(traffic, l2_bytes, "N")
    out = [F.l2_vs_x(sel, l2_bytes, onsets[onsets["sweep"].isin(sel["sweep"])], title, "N", style)
           for title, sel in l2.panels(traffic, "N")]
    for _, row in onsets[onsets["measured_onset"].notna()].head(2).iterrows():
        m = l2.measured_onset(traffic[traffic["sweep"] == row["sweep"]], "N")
        out.append(F.onset_evidence(m.evidence, "N", row["sweep"], style[str(row["variant"])]["color"]))
    kernels, nvtx = tables["kernels"], tables["ranges"]
    ks, rs, what = timeline.window(kernels, nvtx, "")
    out += [F.range_durations(rs, ks, what, style), F.timeline(ks, rs, what, style)]
    summary = timeline.speedup_vs(timeline.timing_summary(timeline.range_timing(kernels, nvtx), captures.cases(man)), "")
    facet = counters.identity_columns(summary)
    ref = summary.attrs["reference"]
    out += [F.lines_vs_x(summary, "gpu_ms", "GPU time", "N", style, facet_candidates=facet),
            F.lines_vs_x(summary, "tflops", "throughput", "N", style, facet_candidates=facet),
            F.lines_vs_x(summary[summary["variant"] != ref], "speedup", "speed", "N", style, facet_candidates=facet)]
    cases = captures.cases(man)
    out.append(F.working_set_vs_x(device.working_set_table(cases, l2_bytes, "N"), l2_bytes, "working set", "N", style))
    return out


def test_every_page_figure_is_one_shape_per_line_without_log_bars_and_with_readable_ticks(bench, seqlen):
    figs = _bench_figures(bench) + _seqlen_figures(seqlen)
    drawn = [f for f in figs if not F.is_empty(f)]
    assert len(drawn) >= 20
    for fig in drawn:
        check_figure(fig)
    # the seqlen study's H=8 panels and the timeline hold D=64 and D=128: each a line of its own, named so
    h8 = next(f for f in figs if f.layout.title.text.startswith("forward, H=8"))
    names = {t.name for t in h8.data if t.showlegend}
    assert {"flash_mma D=64", "flash_mma D=128", "sdpa_flash D=128"} <= names
    gpu = next(f for f in figs if f.layout.title.text == "GPU time")
    dash = {t.name: t.line.dash for t in gpu.data}
    assert dash["flash_mma D=64"] != dash["flash_mma D=128"] and dash["flash_mma D=64"] == dash["naive D=64"]
    assert len(colours(gpu, ["flash_mma"])["flash_mma"]) == 1  # both series in flash_mma's colour


def test_option_studies_keep_implementation_colours_and_tell_studies_apart_otherwise():
    path = H200 / "blocksize"
    man = captures.load_manifest(path)
    work = counters.kernel_work(read.load_ncu(path, man))
    study = options.option_study(work)
    style = nb.style(man, work)
    for v in study["variant"].unique():
        fig = F.option_bars(study, v, style)
        check_figure(fig)
        assert {t.marker.color for t in fig.data} == {F.impl_style(v)["color"]}
        assert len({t.marker.pattern.shape for t in fig.data}) == study[study["variant"] == v]["study"].nunique()
    greys = F.sequence_style(["block_size=64", "block_size=16", "block_size=32"])
    assert list(greys) == ["block_size=16", "block_size=32", "block_size=64"]
    for s in greys.values():  # a grey: never an implementation's colour
        r, g, b = (s["color"][i:i + 2] for i in (1, 3, 5))
        assert r == g == b
    assert not {s["color"].upper() for s in greys.values()} & {c for c, _ in F.IMPL_STYLE.values()}


# --------------------------------------------------------------------------- one colour per implementation


def test_colour_and_marker_depend_on_the_name_alone():
    known = F.style_for(["sdpa_flash", "flash_mma"])
    assert known == {"sdpa_flash": F.impl_style("sdpa_flash"), "flash_mma": F.impl_style("flash_mma")}
    assert F.style_for(["naive", "tiled", "flash_mma", "sdpa_flash"])["sdpa_flash"] == known["sdpa_flash"]
    assert F.impl_style("SDPA flash") == known["sdpa_flash"]  # an imported report's name for it
    assert len({c for c, _ in F.IMPL_STYLE.values()}) == len(F.IMPL_STYLE)
    # an unknown name: a spare colour (none of the known ones, no grey), the same in every process
    mine = F.impl_style("my_attention")
    assert mine == F.style_for(["zeta", "my_attention"])["my_attention"] and mine["color"] in F.SPARE_COLORS
    assert not set(F.SPARE_COLORS) & {c for c, _ in F.IMPL_STYLE.values()}


def test_every_implementation_has_one_colour_on_every_page(bench):
    """A capture's performance page, an imported report's timeline and a comparison page: each
    implementation in the same colour on all of them, whatever else each holds."""
    perf_fig = F.throughput_vs_n(bench, "convention", "float16", "t", F.style_for(list(dict.fromkeys(bench["impl"]))))
    cmp = C.compare_captures("nvidia-h200/triton-example-mask-all-blocks", "nvidia-h200/triton-example")
    cmp_fig = page.change_figure(cmp, "t")
    path = H200 / "foreign-example"
    man = captures.load_manifest(path)
    t = read.load_nsys(path, man)
    foreign_fig = F.range_durations(t["ranges"], t["kernels"], "t", nb.style(man, t["ranges"]))
    names = set(bench["impl"]) | set(cmp.ranges["variant"])
    on_perf, on_cmp = colours(perf_fig, names), colours(cmp_fig, names)
    assert {"flash_mma", "sdpa_flash", "triton_fa2"} <= set(on_cmp) and len(on_perf) >= 8
    for name in set(on_perf) | set(on_cmp):
        seen = on_perf.get(name, set()) | on_cmp.get(name, set())
        assert seen == {F.impl_style(name)["color"].upper()}, (name, on_perf.get(name), on_cmp.get(name))
    # the imported report's SDPA range ("sdpa flash") in SDPA flash's colour
    on_foreign = colours(foreign_fig, ["sdpa flash"])
    assert on_foreign["sdpa flash"] == on_perf["sdpa_flash"]


# --------------------------------------------------------------------------- nothing to draw, labels


def test_a_figure_with_nothing_to_draw_is_a_sentence_for_users(bench):
    # the mixed suite ran no float32 case of the reference: no empty frame with a developer's note
    fig = F.speedup_vs_reference(bench, "mixed", "float32", "sdpa_cudnn")
    assert F.is_empty(fig)
    text = F.empty_sentence(fig)
    assert text == ("No figure for “mixed (float32): speed relative to sdpa_cudnn (> 1: faster)”: sdpa_cudnn ran "
                    "no float32 case of mixed.")
    assert not F.is_empty(F.speedup_vs_reference(bench, "mixed", "float16", "sdpa_flash"))


def test_a_suite_timed_forward_only_gets_no_empty_backward_facet(bench):
    """The decode suite times the forward pass alone: its speed figure has one facet, not an empty backward one;
    a suite with both passes keeps both, forward first."""
    fig = F.speedup_vs_reference(bench, "decode", "float16", "sdpa_cudnn")
    facets = [a.text for a in fig.layout.annotations if a.text in ("forward", "backward")]
    assert facets == ["forward"] and {t.xaxis for t in fig.data} == {"x"}
    both = F.speedup_vs_reference(bench, "convention", "float16", "sdpa_cudnn")
    assert [a.text for a in both.layout.annotations if a.text in ("forward", "backward")] == ["forward", "backward"]


def test_empty_brackets_are_dropped_from_labels():
    assert no_empty_brackets("Fastest range: **gemm:fwd** () at 673 TFLOP/s") == "Fastest range: **gemm:fwd** at 673 TFLOP/s"
    assert no_empty_brackets("flash_mma (D=64)") == "flash_mma (D=64)"
    assert no_empty_brackets("torch.compile() twice") == "torch.compile() twice"


# --------------------------------------------------------------------------- memory-bound suites, the roofline


def test_memory_bound_suites_are_drawn_as_bandwidth_against_the_measured_copy(bench):
    man = captures.load_manifest(H200 / "bench")
    roof = perf.bandwidth_roof(man)
    assert roof is not None and roof[0] == man["ceilings"]["copy_d2d"]["bytes_per_s"]
    bound = perf.memory_bound_suites(bench, man)
    # decoding one query against a long KV cache sits far below the ridge; the 4k-token convention suite far above
    assert bound == ["decode"]  # the mixed suite's small shapes are below the ridge, its large ones above: not
    # the rule is the ridge: every suite is below an absurdly high one, none below zero
    assert set(perf.memory_bound_suites(bench, man, ridge=1e12)) == set(bench["suite"])
    assert perf.memory_bound_suites(bench, man, ridge=0.0) == []
    assert perf.memory_bound_suites(bench, {}) == [] and perf.bandwidth_roof({"ceilings": {}}) is None
    # the capture measured the read stream, and the decode kernels pass it: it is drawn as a reference, not a limit
    best = perf.best_bytes_per_s(bench, bound)
    read = man["ceilings"]["read_stream"]["bytes_per_s"]
    assert best == bench[(bench["suite"] == "decode") & (bench["status"] == "ok")]["gbps"].max() * 1e9
    roofs = perf.bandwidth_roofs(man, best)
    if best > read * perf.ROOF_TOLERANCE:  # passed beyond the margin: a reference
        assert [r["role"] for r in roofs] == ["reference", "reference"] and roofs[0]["passed_by"] == best
    else:  # within it (or not passed): a limit
        assert [r["role"] for r in roofs] == ["limit", "reference"]
    if best > read:  # either way its label says how far the kernels reach
        assert f"kernels reach {best / 1e12:.2f} TB/s" in roofs[0]["label"]
    # the rule on both sides of the margin, whatever this capture measured
    far, near = read * perf.ROOF_TOLERANCE * 1.01, read * 1.01
    assert [r["role"] for r in perf.bandwidth_roofs(man, far)] == ["reference", "reference"]
    near_roofs = perf.bandwidth_roofs(man, near)
    assert [r["role"] for r in near_roofs] == ["limit", "reference"] and "1.0 % above" in near_roofs[0]["label"]
    assert [r["role"] for r in perf.bandwidth_roofs(man, read)] == ["limit", "reference"]  # not passed: a limit
    assert "kernels reach" not in perf.bandwidth_roofs(man, read)[0]["label"]
    no_read = {**man, "ceilings": {k: v for k, v in man["ceilings"].items() if k != "read_stream"}}
    roofs_old = perf.bandwidth_roofs(no_read)  # a capture from before the read-stream ceiling: the copy alone
    assert [r["role"] for r in roofs_old] == ["reference"] and "not a limit" in roofs_old[0]["label"]
    assert perf.best_bytes_per_s(bench.iloc[:0]) is None
    fig = F.bandwidth_vs_config(bench, "decode", "float16", "forward", roofs, F.style_for(bench["impl"].unique()))
    check_figure(fig)
    ok = perf.ok_rows(bench)
    ok = ok[(ok["suite"] == "decode") & (ok["dtype"] == "float16") & (ok["pass"] == "forward")]
    drawn = {t.name: t for t in fig.data if (t.meta or {}).get("role") == "data"}
    assert set(drawn) == set(ok["impl"])
    assert all(t.mode == "markers" for t in drawn.values())  # configurations are categories: no line joins them
    for name, t in drawn.items():  # TB/s = the CSV's gbps / 1000, at the CSV's configurations
        rows = ok[ok["impl"] == name].set_index("config")
        assert list(t.x) == [c for c in dict.fromkeys(ok["config"]) if c in rows.index]
        assert np.allclose(t.y, rows.loc[list(t.x), "gbps"] / 1e3)
        assert t.marker.color == F.impl_style(name)["color"]
    roof_text = [t.name for t in fig.data if (t.meta or {}).get("role") == "reference"]
    assert any(f"{roof[0] / 1e12:.2f} TB/s" in s and "copy" in s and "reference" in s for s in roof_text)
    assert fig.layout.yaxis.range[1] >= roof[0] / 1e12  # the roof is on the figure
    assert F.is_empty(F.bandwidth_vs_config(bench, "decode", "float64", "forward", roof))


def test_roofline_figures_follow_the_rules_too(seqlen):
    from nsightlab.analysis import roofline

    _, man, ranges, _ = seqlen
    pts = roofline.roofline_points(ranges)
    path = H200 / "triton-example"
    tman = captures.load_manifest(path)
    twork = counters.kernel_work(read.load_ncu(path, tman))
    trng = counters.attach_model(counters.per_range(twork, by_kernel_if_no_ranges=True), captures.cases(tman))
    tpts = roofline.roofline_points(trng)
    for fig in (F.roofline(tpts, roofline.ceilings(twork, tman, tpts), "triton"),):
        check_figure(fig)
        names = set(tpts["variant"])
        assert {n: {F.impl_style(n)["color"].upper()} for n in names} == {
            n: c for n, c in colours(fig, names).items() if n in names}
    assert len(pts) and set(pts["basis"]) == {"useful"}
    # a capture whose ranges differ in no field: its fastest range is named without empty brackets
    path = H200 / "gemm-example"
    gman = captures.load_manifest(path)
    gwork = counters.kernel_work(read.load_ncu(path, gman))
    gpts = roofline.roofline_points(counters.attach_model(
        counters.per_range(gwork, by_kernel_if_no_ranges=True), captures.cases(gman)))
    first = roofline.findings(gpts, roofline.ceilings(gwork, gman, gpts), fields=["N"])[0]  # N is 4096 in all
    assert first.startswith("Fastest range: **") and "()" not in first


def test_the_timeline_draws_the_configuration_its_summary_speaks_of(seqlen):
    _, man, _, tables = seqlen
    kernels, nvtx = tables["kernels"], tables["ranges"]
    summary = timeline.speedup_vs(timeline.timing_summary(timeline.range_timing(kernels, nvtx), captures.cases(man)), "")
    case = timeline.headline_case(summary, "N")
    assert case["N"] == 8192 and case["pass"] == "forward"
    first = timeline.findings(summary, "N")[0]
    assert first.startswith(f"At N={case['N']}, forward, H={case['H']}, D={case['D']}:"), first
    _, rs, what = timeline.window(kernels, nvtx, "", prefer=case)
    for field in ("N", "H", "D", "pass"):
        assert set(rs[field]) == {case[field]}, field
    assert f"N={case['N']}" in what and rs["variant"].nunique() >= 5
    # an explicit query still wins, and a preferred case nobody ran falls back to the most-run configuration
    assert set(timeline.window(kernels, nvtx, "N == 1024 and D == 64", prefer=case)[1]["N"]) == {1024}
    assert len(timeline.window(kernels, nvtx, "", prefer={"N": 3})[1])


def test_lines_that_lie_on_one_another_are_drawn_as_nested_stripes(seqlen):
    """The seqlen study's one-head backward: naive, tiled and tiled_uncoalesced move the same DRAM bytes (to
    0.1 %), so their DRAM/compulsory lines coincide; each stays visible, widest first."""
    _, man, ranges, _ = seqlen
    l2_bytes = float(man["gpu"]["l2_bytes"])
    traffic = l2.with_sweeps(l2.l2_traffic(ranges, l2_bytes), "N")
    sel = next(s for title, s in l2.panels(traffic, "N") if title.startswith("backward, H=1"))
    fig = F.l2_vs_x(sel, l2_bytes, None, "t", "N", nb.style(man, ranges))
    panel = [t for t in fig.data if t.yaxis == "y2"]  # DRAM bytes / compulsory bytes
    widths = {t.name: t.line.width for t in panel}
    assert set(widths) == {"naive", "tiled", "tiled_uncoalesced"}
    assert widths["naive"] > widths["tiled"] > widths["tiled_uncoalesced"] >= 2
    assert all("lies on" in h for t in panel for h in t.hovertext)
    assert "nested stripes" in fig.layout.title.text
    hit = [t for t in fig.data if t.yaxis == "y"]  # their hit rates differ: drawn as usual
    assert {t.line.width for t in hit} == {None}
    two = go.Figure([go.Scatter(x=[1, 2], y=[1.0, 2.0], name="a"), go.Scatter(x=[1, 2], y=[1.0, 2.1], name="b")])
    assert F.reveal_coinciding(two) == []  # 5 % apart: not the same line


def test_a_series_label_names_a_field_the_range_left_out_instead_of_printing_nan():
    d = pd.DataFrame({"variant": ["a"] * 4, "N": [1, 16, 1, 16], "Hkv": [8.0, 8.0, float("nan"), float("nan")],
                      "y": [1.0, 2.0, 3.0, 4.0]})
    out = F.split_series(d, "N", ["Hkv"])
    assert list(out["_trace"]) == ["a Hkv=8", "a Hkv=8", "a Hkv not in the range name", "a Hkv not in the range name"]


def test_one_implementation_in_two_captures_reads_apart():
    """A why page of one kernel before and after a change: the second capture's side keeps the implementation's
    colour and marker, the first is grey (no implementation's colour) with the same marker."""
    before, after = "flash_wgmma @ ba46f69", "flash_wgmma @ 5fcc881"
    style = F.before_after(F.style_for([before, after, "sdpa_cudnn"]), before, after, "flash_wgmma")
    own = F.impl_style("flash_wgmma")
    assert style[after] == own and style[before] == {"color": F.BEFORE_COLOR, "symbol": own["symbol"]}
    assert style["sdpa_cudnn"] == F.impl_style("sdpa_cudnn")
    assert F.BEFORE_COLOR not in {c for c, _ in F.IMPL_STYLE.values()} | set(F.SPARE_COLORS)


def test_the_fp8_calls_have_colours_of_their_own_on_every_page():
    """Registered with the attention problem, as flash_kernels' other implementations are, so a page's kernel (which
    loads no plug-in) draws them in them: none of flash_wgmma's or a spare colour."""
    fp8 = ("flash_wgmma_fp8", "flash_wgmma_fp8_vt", "flash_wgmma_fp8_call")
    colours = {F.impl_style(n)["color"] for n in fp8}
    assert len(colours) == 3 and not colours & set(F.SPARE_COLORS)
    assert F.impl_style("flash_wgmma")["color"] not in colours
