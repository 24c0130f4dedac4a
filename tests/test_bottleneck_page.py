"""The bottleneck page's pieces: which captures get the page (from the manifest, no report opened),
choosing one case for two implementations, every implementation at that case, and the figures (one
colour per implementation, the first implementation's bar on top, nothing empty)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from nsightlab.analysis import advice as A
from nsightlab.analysis import bottleneck as B
from nsightlab.analysis import why
from nsightlab.render import figures
from nsightlab.render.report import applicable
from nsightlab.store import captures, find

PROFILES = Path(__file__).resolve().parent.parent / "profiles" / "nvidia-h200"


def _manifest(name: str) -> dict:
    return json.loads((PROFILES / name / "manifest.json").read_text())


def test_the_page_applies_where_the_report_carries_warp_state_stats():
    for name in ("bottleneck-deep", "d256-deep", "flash-wgmma-fwd-full"):
        assert B.lacks_warp_state(_manifest(name)) is None, name
        ok, _ = applicable(PROFILES / name, _manifest(name))
        assert "why" in ok, name
    reason = B.lacks_warp_state(_manifest("seqlen"))
    assert reason and "WarpStateStats" in reason and "--deep" in reason and "--set full" in reason
    _, why_not = applicable(PROFILES / "seqlen", _manifest("seqlen"))
    assert why_not["why"] == reason
    assert B.page_hint(_manifest("seqlen")) == "" and "why.html" in B.page_hint(_manifest("bottleneck-deep"))


@pytest.fixture(scope="module")
def deep() -> B.Deep:
    return B.load(*find.deep_report(PROFILES / "bottleneck-deep"))


def test_a_partial_case_is_completed_from_the_first_matching_range(deep):
    assert B.case_fields(deep) == ["pass", "B", "H", "N", "D", "dtype", "causal"]
    case = B.complete_case(deep, "flash_wgmma", {"pass": "backward"})
    assert case == {"pass": "backward", "B": "4", "H": "16", "N": "4096", "D": "128", "dtype": "float16", "causal": "0"}
    assert B.select_range(deep, "sdpa_cudnn", case)["kernel"].iloc[0].startswith("cudnn_generated")
    with pytest.raises(ValueError, match="flash_mma: no range matches --case D=64"):
        B.complete_case(deep, "flash_mma", {"D": "64"})
    with pytest.raises(ValueError, match="no implementation 'nope'"):
        B.complete_case(deep, "nope", {})


def test_one_implementation_in_several_settings_is_narrowed_by_its_own_options():
    """A capture of flash_wgmma's pipelines beside cuDNN (the H100's pipeline-deep: three pipelines, causal and
    not): the common fields leave three flash_wgmma ranges, so an empty case also takes flash_wgmma's options,
    from its fastest range, and an option of flash_wgmma's in --case narrows flash_wgmma without ruling cuDNN out."""
    deep = B.load(*find.deep_report(PROFILES.parent / "nvidia-h100-80gb-hbm3" / "pipeline-deep"))
    case = B.complete_case(deep, "flash_wgmma", {})
    assert case["pipeline"] == "tma-ws-persistent-pingpong" and case["wg_tile"] == "192x128" and case["causal"] == "0"
    L = deep.launches[deep.launches["variant"] == "flash_wgmma"]
    times = L[L["causal"] == False].groupby("pipeline")["time_ns"].sum()  # noqa: E712 (a column of bools)
    assert times.idxmin() == "tma-ws-persistent-pingpong" and times.nunique() == 3
    case = B.complete_case(deep, "flash_wgmma", {"pipeline": "tma-ws", "causal": "1"})
    assert B.select_range(deep, "flash_wgmma", case)["range"].iloc[0].endswith(
        "causal=1,bwd_pipeline=tma-ws,group_split=auto,pipeline=tma-ws,tail=auto,wg_bwd_tile=64x128,wg_tile=192x128")
    assert B.select_range(deep, "sdpa_cudnn", case)["kernel"].iloc[0].startswith("cudnn_generated")
    case = B.complete_case(deep, "flash_wgmma", {"pipeline": "tma-ws-persistent-pingpong"})
    # the persistent pipeline's range: the kernel and the zeroing of its tile counter, longest first
    assert list(B.select_range(deep, "flash_wgmma", case)["kernel"]) == ["flash_wgmma_ws_forward_kernel",
                                                                          "vectorized_elementwise_kernel"]
    assert list(B.at_case(deep, case)["variant"]) == ["flash_wgmma", "sdpa_cudnn"]
    with pytest.raises(ValueError, match="flash_wgmma: 6 ranges match --case D=128; narrow it to one of"):
        B.select_range(deep, "flash_wgmma", {"D": "128"})
    with pytest.raises(ValueError, match="flash_wgmma: 3 ranges match --case D=128,causal=1; narrow it to one of") as e:
        B.select_range(deep, "flash_wgmma", {"D": "128", "causal": "1"})
    assert "causal=0" not in str(e.value)  # the list names the matching ranges only
    with pytest.raises(ValueError, match="flash_wgmma: no range matches --case pipeline=cp.async"):
        B.complete_case(deep, "flash_wgmma", {"pipeline": "cp.async"})


def test_every_implementation_at_a_case(deep):
    case = B.complete_case(deep, "flash_mma", {"pass": "backward", "causal": "0"})
    rows = B.at_case(deep, case)
    assert list(rows["variant"]) == ["flash_mma", "sdpa_flash", "flash_wgmma", "sdpa_cudnn"]
    assert (rows["launches"] >= 3).all()  # a backward pass is several launches
    longest = deep.launches.set_index("launch").loc[rows["launch"], "time_ns"].to_numpy()
    assert (rows["range_ms"].to_numpy() * 1e6 > longest).all()
    line = B.kernel_line("flash_mma", B.profile(deep).set_index("launch").loc[int(rows["launch"].iloc[0])])
    assert "largest stall" in line and "occupancy" in line and "limited by" in line
    assert set(B.LABELS) >= set(B.PROFILE_METRICS)


def test_hotspot_files_are_named_as_in_the_repository(deep):
    launch = int(B.select_range(deep, "flash_wgmma", {"pass": "backward", "causal": "0"})["launch"].iloc[0])
    h = B.hotspots(deep, launch, 5, "line", PROFILES.parents[1])
    assert all(not f.startswith("/") for f in h["file"]), list(h["file"])
    assert any(f.startswith("flash_kernels/csrc/") for f in h["file"])


def test_figures_put_implementations_side_by_side_in_their_colours(deep):
    case = B.complete_case(deep, "flash_wgmma", {"pass": "forward", "causal": "0"})
    launch = {v: int(B.select_range(deep, v, case)["launch"].iloc[0]) for v in ("flash_wgmma", "sdpa_cudnn")}
    style = figures.style_for(["flash_mma", "sdpa_flash", "flash_wgmma", "sdpa_cudnn"])
    st, pp = B.stalls(deep), B.pipes(deep)
    st = pd.concat([st[st["launch"] == k].assign(variant=v) for v, k in launch.items()], ignore_index=True)
    pp = pd.concat([pp[pp["launch"] == k].assign(variant=v) for v, k in launch.items()], ignore_index=True)
    for fig in (figures.stall_bars(st, "t", style), figures.pipe_bars(pp, "t", style)):
        bars = [t for t in fig.data if t.type == "bar"]
        assert bars and all(len(t.y) for t in bars)
        assert {t.name: t.marker.color for t in bars} == {v: style[v]["color"] for v in launch}
        assert [t.name for t in bars if t.showlegend is not False][-1] == "flash_wgmma"  # drawn last: on top
    assert figures.stall_bars(st, "t", style).to_json() == figures.stall_bars(st, "t", style).to_json()
    assert "no warp-state samples" in figures.stall_bars(st.iloc[0:0], "t", style).layout.annotations[0].text


def test_sides_of_one_report_and_of_one_kernel_across_two_captures(deep):
    """Two implementations of one report; one kernel before and after a change (the H100 D=64 mask step:
    backward-deep-predicated-mask at f9d774b, backward at caf73dc): side b defaults to the same kernel, each
    side is named with its capture's commit, and each row, stall and pipe comes from its own report."""
    at, a, b = why.pick_sides(deep, None, "flash_wgmma", "", {"pass": "backward"})
    assert (a.name, b.name) == ("flash_wgmma", "flash_mma") and a.deep is b.deep and at["D"] == "128"  # the next held
    assert set(why.at_case([a, b], at)["variant"]) >= {"flash_wgmma", "flash_mma", "sdpa_cudnn"}
    with pytest.raises(ValueError, match="a and b are both 'flash_wgmma'; choose two of: .*or give b_capture"):
        why.pick_sides(deep, None, "flash_wgmma", "flash_wgmma", {"pass": "backward"})
    with pytest.raises(ValueError, match="a='nope': no implementation 'nope' in the report; held: "):
        why.pick_sides(deep, None, "nope", "", {})

    h100 = PROFILES.parent / "nvidia-h100-80gb-hbm3"
    before_path, after_path = h100 / "backward-deep-predicated-mask", h100 / "backward"
    before, after = (B.load(*find.deep_report(p)) for p in (before_path, after_path))
    mb, ma = (json.loads((p / "manifest.json").read_text()) for p in (before_path, after_path))
    tags = captures.capture_tags(mb, before_path, ma, after_path)
    assert tags == ("f9d774b", "caf73dc")
    assert captures.capture_tags(mb, before_path, mb, after_path) == ("backward-deep-predicated-mask", "backward")
    at, a, b = why.pick_sides(before, after, "flash_wgmma", "", {"D": "64", "bwd_pipeline": "tma-ws"}, tags)
    assert (a.name, b.name) == ("flash_wgmma @ f9d774b", "flash_wgmma @ caf73dc")
    assert a.deep is before and b.deep is after and a.sel["range"].iloc[0] == b.sel["range"].iloc[0]
    assert a.deep.value(a.launch, "gpu__time_duration.sum") == 2032320  # as the README quotes them
    assert b.deep.value(b.launch, "gpu__time_duration.sum") == 1467424
    rows = why.at_case([a, b], at)
    assert list(rows["variant"]) == [a.name, b.name]
    st = why.per_side(B.stalls, [a, b])
    assert set(st["variant"]) == {a.name, b.name} and set(st["launch"]) == {a.launch, b.launch}
    with pytest.raises(ValueError, match="b='sdpa_math': no implementation 'sdpa_math' in b_capture"):
        why.pick_sides(before, after, "flash_wgmma", "sdpa_math", {})
    with pytest.raises(ValueError, match="a='flash_mma' has no range in b_capture, so side b needs .* named"):
        why.pick_sides(deep, before, "flash_mma", "", {})  # the H200 report has flash_mma, the H100 one not


def test_a_case_field_only_the_later_capture_has_picks_its_range_alone(deep):
    """One kernel across captures between which an option was added (the H200 backward at 7a78894, before
    ``bwd_pipeline`` existed, and at 4554f28, captured with two settings of it): the field narrows side b alone;
    without it side b is ambiguous and the error names both ranges; a field neither report has is refused with
    side a's fields. The page's table then holds each side's own range."""
    after = B.load(*find.deep_report(PROFILES / "backward"))
    case = {"D": "128", "causal": "0", "pass": "backward"}
    at, a, b = why.pick_sides(deep, after, "flash_wgmma", "", {**case, "bwd_pipeline": "tma-ws"}, ("7a78894", "4554f28"))
    assert "bwd_pipeline" not in at and a.sel["range"].iloc[0].startswith("attn:flash_wgmma:backward:")
    assert ",bwd_pipeline=tma-ws," in b.sel["range"].iloc[0] and b.deep is after
    assert a.deep.value(a.launch, "gpu__time_duration.sum") == 3782592  # as the why page's comparison shows them
    assert b.deep.value(b.launch, "gpu__time_duration.sum") == 2474624
    rows = why.at_case([a, b], at)
    assert list(rows["variant"]) == [a.name, b.name] and list(rows["launch"]) == [a.launch, b.launch]
    assert rows["range_ms"].iloc[1] == pytest.approx(b.sel["time_ns"].sum() / 1e6)
    with pytest.raises(ValueError, match="b_capture: flash_wgmma: 2 ranges match .*bwd_pipeline=cp.async.*; "
                                         ".*bwd_pipeline=tma-ws"):
        why.pick_sides(deep, after, "flash_wgmma", "", case)
    with pytest.raises(ValueError, match="--case field\\(s\\) nope not in this report's range names; fields: "):
        why.pick_sides(deep, after, "flash_wgmma", "", {**case, "nope": "1"})


def test_one_implementation_with_other_options_in_the_later_capture():
    """flash_decode before and after its blocks of two warpgroups over the keys (the H200 decode-blocks-before
    and decode-blocks captures, one range a shape in each, with other options): side b is picked by the case as
    given when side a's options match no range there; a case that leaves side b two ranges is still refused."""
    before, after = (B.load(*find.deep_report(PROFILES / n)) for n in ("decode-blocks-before", "decode-blocks"))
    at, a, b = why.pick_sides(before, after, "flash_decode", "", {"Hkv": "8", "N": "16"}, ("5e49893", "5e49893"))
    assert ",mma=mma.sync," in a.sel["range"].iloc[0] and ",warpgroups=2" in b.sel["range"].iloc[0]
    assert (a.name, b.name) == ("flash_decode @ 5e49893 (a)", "flash_decode @ 5e49893 (b)")
    assert a.deep.value(a.launch, "gpu__time_duration.sum") > b.deep.value(b.launch, "gpu__time_duration.sum")
    line = why.case_line(at, [a, b])  # the fields both ranges share, then each side's own
    assert line == ("pass=forward, B=8, H=32, N=16, D=128, dtype=float16, causal=0, Hkv=8, Nk=16384, splits=auto "
                    "(flash_decode @ 5e49893 (a): mma=mma.sync, rows=auto, warpgroups=auto; flash_decode @ 5e49893 "
                    "(b): mma=auto, rows=64, warpgroups=2)"), line
    assert why.case_line(at, [a]) == ", ".join(f"{k}={v}" for k, v in at.items())
    with pytest.raises(ValueError, match="b_capture: flash_decode: no range matches .*mma=mma.sync"):
        why.pick_sides(before, after, "flash_decode", "", {"D": "128"})  # two shapes in each: ambiguous


# --------------------------------------------------------------------------- from accounting to action: the page

BACKWARD = PROFILES / "backward-n8192-deep"


@pytest.fixture(scope="module")
def backward() -> tuple[B.Deep, why.Side, why.Side]:
    d = B.load(*find.deep_report(BACKWARD))
    _, a, b = why.pick_sides(d, None, "flash_wgmma", "sdpa_cudnn", {})
    return d, a, b


def test_the_waterfall_walks_from_a_time_to_b_time_in_steps_labelled_with_their_ms(backward):
    _, a, b = backward
    ranked = B.explain(a.deep, a.launch, b.deep, b.launch)
    steps = A.waterfall(A.grouped(ranked))
    style = figures.style_for([a.name, b.name])
    fig = figures.gap_waterfall(steps, "t", (a.name, b.name), style)
    w = next(t for t in fig.data if t.type == "waterfall")
    x, measure = list(w.x), list(w.measure)
    assert measure[0] == "absolute" and measure[-1] == "total" and set(measure[1:-1]) == {"relative"}
    assert x[0] == pytest.approx(ranked.attrs["time_a_ms"]) and x[-1] == pytest.approx(ranked.attrs["time_b_ms"])
    assert x[0] + sum(x[1:-1]) == pytest.approx(x[-1], abs=1e-9)  # the steps add up from a's time to b's
    assert a.name in w.y[0] and b.name in w.y[-1]  # the sides named in the first and last bars
    assert all(f"{v:+.3f} ms" == t for v, t in zip(x[1:-1], w.text[1:-1], strict=True))
    assert w.text[0] == f"{x[0]:.3f} ms" and w.text[-1] == f"{x[-1]:.3f} ms"
    # the two times in their implementations' colours; the steps in greys no implementation has
    ends = {t.y[0]: t.marker.color for t in fig.data if t.type == "bar" and t.y[0] is not None}
    assert ends == {w.y[0]: style[a.name]["color"], w.y[-1]: style[b.name]["color"]}
    impl_colors = {c.lower() for c, _ in figures.IMPL_STYLE.values()} | {c.lower() for c in figures.SPARE_COLORS}
    assert {w.increasing.marker.color.lower(), w.decreasing.marker.color.lower()}.isdisjoint(impl_colors)
    assert fig.to_json() == figures.gap_waterfall(steps, "t", (a.name, b.name), style).to_json()  # deterministic
    # the axis starts below the lowest point the steps reach and leaves room for the labels
    path = [x[0] + sum(x[1:i + 1]) for i in range(1, len(x) - 1)]
    lo, hi = fig.layout.xaxis.range
    assert lo <= min(path + [x[-1]]) and hi > max(path + [x[0]])


def test_the_mix_figure_diverges_in_the_colours_of_the_side_that_executes_more(backward):
    _, a, b = backward
    mix = A.instruction_mix(a.deep, a.launch, b.deep, b.launch)
    style = figures.style_for([a.name, b.name])
    fig = figures.mix_bars(mix, "t", (a.name, b.name), style)
    bar = fig.data[0]
    assert list(bar.y) == list(mix["name"].head(15))
    assert [c == style[a.name]["color"] for c in bar.marker.color] == [d > 0 for d in mix["diff"].head(15)]


def _text(html_page: str) -> str:
    import html as _html
    import re

    body = re.sub(r"<(script|style)\b.*?</\1>", " ", html_page, flags=re.S)
    return re.sub(r"\s+", " ", _html.unescape(re.sub(r"<[^>]+>", " ", body)))


@pytest.fixture(scope="module")
def page(tmp_path_factory, backward) -> tuple[str, dict]:
    from nsightlab.render.execute import render_notebook

    out = tmp_path_factory.mktemp("why") / "why.html"
    info = render_notebook(Path(__file__).resolve().parent.parent / "notebooks" / "why.ipynb",
                           {"capture": str(BACKWARD), "a": "flash_wgmma", "b": "sdpa_cudnn"}, out, standalone=True)
    return out.read_text(encoding="utf-8"), info


def test_the_page_says_what_to_try_and_shows_the_rules_the_mix_and_the_lines(backward, page):
    from nsightlab.render.page import plain

    d, a, b = backward
    html_page, info = page
    text = " ".join(_text(html_page).replace(" ,", ",").split())
    ranked = B.explain(a.deep, a.launch, b.deep, b.launch)
    commit = json.loads((BACKWARD / "manifest.json").read_text()).get("git_commit")
    tries = A.what_to_try(A.Launch(a.name, a.deep, a.launch, commit), A.Launch(b.name, b.deep, b.launch, commit), ranked,
                          PROFILES.parents[1])
    assert len(tries) >= 3
    squash = lambda s: "".join(s.split())  # noqa: E731 - tags split a sentence's words differently
    for sentence in tries:
        assert squash(plain(sentence)) in squash(text), sentence
    # the what-to-try sentences lead the summary, after the verdict (the index quotes the first line)
    summary = info["summary"]
    assert f"takes {ranked.attrs['ratio']:.2f}x the time of sdpa_cudnn" in summary[0]
    assert summary[1].startswith("What to try")
    assert [plain(s) for s in tries] == summary[2:2 + len(tries)]
    # Nsight Compute's rules side by side, each side's estimate and message
    assert 'id="T_rules-' in html_page
    rules = A.rules_side_by_side(a.deep, a.launch, b.deep, b.launch)
    top = rules.iloc[0]
    assert f"{top['speedup_b']:.1f}% {top['speedup_type_b']}" in text and squash(top["message_b"]) in squash(text)
    # the instruction mix: its sentence, the opcode and category tables, the figure
    mix = A.instruction_mix(a.deep, a.launch, b.deep, b.launch)
    assert squash(A.mix_sentence(a.name, b.name, mix)) in squash(text)
    assert 'id="T_mix-opcode-' in html_page and 'id="T_mix-category-' in html_page
    # the gap: a waterfall, the grouped terms, the flat ranking folded; each stall term's line
    assert '"type":"waterfall"' in html_page and 'id="T_grouped-' in html_page and 'id="T_term-lines-' in html_page
    assert "Every term, ungathered and ranked (for reference)" in text
    sass = a.deep.sass[a.deep.sass["launch"] == a.launch]
    file, line = sass.groupby(["file", "line"])["stall_barrier"].sum().idxmax()  # the Stall Barrier term's top line
    assert f"flash_kernels/{file.rpartition('flash_kernels/')[2]}:{int(line)}" in text
    # DRAM and L2 in TB/s, two decimals
    q = B.metric_gaps(a.deep, a.launch, b.deep, b.launch).set_index("quantity")
    assert f"DRAM throughput [TB/s] {q.at['dram_tbps', 'a']:.2f} {q.at['dram_tbps', 'b']:.2f}" in text


def test_no_table_of_the_page_is_wider_than_the_page(page, tmp_path):
    """Every table carries the rules that let it wrap (headers between words, names anywhere, numbers never); in
    headless Chromium at 1400 px, with every folded table opened, none scrolls sideways."""
    import re
    import shutil
    import subprocess

    html_page, _ = page
    ids = re.findall(r'<table class="nsl-table" id="T_([^"]+)"', html_page)
    assert len(ids) >= 10
    for uid in ids:
        assert f"#T_{uid} td{{overflow-wrap:anywhere}}" in html_page, uid
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no headless Chromium to measure the tables with")
    probe = ("<script>addEventListener('load',()=>setTimeout(()=>{document.querySelectorAll('details').forEach(d=>d.open=true);"
             "const w=[...document.querySelectorAll('table.nsl-table')].filter(t=>t.parentElement.scrollWidth>"
             "t.parentElement.clientWidth+1).map(t=>t.id);const p=document.createElement('pre');p.id='WIDE';"
             "p.textContent=JSON.stringify(w);document.body.appendChild(p)},300))</script>")
    f = tmp_path / "page.html"
    f.write_text(html_page.replace("</body>", probe + "</body>"), encoding="utf-8")
    dom = subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,3000",
                          "--virtual-time-budget=15000", "--dump-dom", f.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    wide = re.search(r'<pre id="WIDE">(.*?)</pre>', dom)
    assert wide is not None, "the page did not load in Chromium"
    assert json.loads(wide.group(1)) == []
