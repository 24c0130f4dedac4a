"""The report pipeline on the committed captures and on an imported one (generic range names, no
work model, a raw CSV export with an FMUL-only kernel): which notebooks apply and why not, every
applicable notebook executed by papermill, every page loaded in headless Chromium with networking off
(no console errors, every plotly figure drawn, no outside request), a broken capture and a comparison of
a capture that does not exist reported while the others render; the comparison pages a profiles folder
declares rendered with the rest and saying what the comparison gives today; pages that open with a
summary; quiet rendering (one line per page with the time left, no kernel warnings); incremental and
deterministic rendering; ``--only`` and ``--standalone``; a page copied away from its folder saying
what is missing; Ctrl-C. Everything renders into temporary folders, never into the repository's reports/."""

import csv
import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from nsightlab.analysis import perf
from nsightlab.cli.report import main as report_main
from nsightlab.core import metrics as M
from nsightlab.core.files import file_table, local_copy
from nsightlab.render.report import NOTEBOOK_ORDER, applicable, read_meta
from nsightlab.store.captures import ProfileError, find_file, list_captures, load_bench, load_manifest

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "profiles"
BENCH = PROFILES / "nvidia-h200" / "bench"


def test_committed_captures_validate_and_open():
    from nsightlab.store.captures import validate

    caps = list_captures(PROFILES)
    assert {c.suite for c in caps} >= {"seqlen", "blocksize", "bench", "triton-example", "foreign-example"}
    for cap in caps:
        man = validate(cap.path)  # checksums, sizes, and every report opens
        assert man["gpu"]["name"] and man["schema"] == 2
        if man["origin"] == "captured":  # what this project captured says where, with what and at which commit
            assert man["git_commit"] not in (None, "unknown") and man["ceilings"]["copy_d2d"]["bytes_per_s"] > 0
            # a capture kept beside its re-take is named <sweep>-<what it holds> (bench-mma-bwd-4warp)
            assert man["sweep"]["name"] == cap.suite or cap.suite.startswith(man["sweep"]["name"] + "-")
            if set(man["tools"]) & {"ncu", "nsys"}:
                assert man["cases"] and man["range_schemas"]
        else:  # imported: what the reports themselves say
            assert man["imported_from"] and man["gpu"]["source"]


def test_committed_benchmarks_are_correct_to_the_tolerances():
    from flash_kernels.testing import TOLERANCES

    df, manifests = load_bench(BENCH)
    assert set(df["suite"]) == set(manifests) == {"mixed", "d128", "convention", "gqa", "decode", "d256"}
    ok = df[(df["status"] == "ok") & (df["kind"] == "kernel")]
    assert len(ok) > 300
    for _, r in ok.iterrows():
        tol = TOLERANCES[r["dtype"]]["out_rel_l2" if r["pass"] == "forward" else "grad_rel_l2"]
        assert r["rel_l2"] <= tol, f"{r['impl']} {r['config']} {r['pass']}: rel_l2 {r['rel_l2']}"


def test_target_table_ratios():
    df, _ = load_bench(BENCH)
    t = perf.target_table(df, "flash_mma", "sdpa_flash", {"forward": 0.8, "backward": 0.6}, suite="convention")
    assert len(t) == 64 and set(t["dtype"]) == {"float16", "bfloat16"}
    assert list(t["pass"].unique()) == ["forward", "backward"]
    assert ((t["ratio"] - t["tflops"] / t["ref_tflops"]).abs() < 1e-12).all()


def test_compacted_bench_csvs_read_as_the_plain_ones(tmp_path):
    """The store compacts large exports (X.csv -> X.csv.xz); a bench capture reads the same either way."""
    import pandas as pd

    from nsightlab.core.files import copy_content
    from nsightlab.store.read import bench_files

    cap = tmp_path / "bench"
    shutil.copytree(BENCH, cap)
    plain = cap / "plain"
    plain.mkdir()
    for p in list(cap.iterdir()):
        if p.name.endswith((".csv.xz", ".csv.gz")):
            with open(plain / p.name.rsplit(".", 1)[0], "wb") as out:
                copy_content(p, out)
        elif p.is_file():
            shutil.copy(p, plain / p.name)
    assert any(p.name.endswith(".csv.xz") for p in cap.iterdir()), "the committed bench has a compacted CSV"
    assert [p.name for p in bench_files(cap)] != [p.name for p in bench_files(plain)]
    assert len(bench_files(cap)) == len(bench_files(plain)) == 6
    a, ma = load_bench(cap)
    b, mb = load_bench(plain)
    pd.testing.assert_frame_equal(a, b)
    assert ma == mb


def test_missing_and_corrupt_bench_files(tmp_path):
    cap = tmp_path / "bench"
    shutil.copytree(BENCH, cap)
    (cap / "mixed.manifest.json").unlink()
    with pytest.raises(ProfileError, match=r"mixed\.csv(\.xz)?: its manifest mixed.manifest.json is missing"):
        load_bench(cap)
    (cap / "mixed.manifest.json").write_text("{}")
    find_file(cap, "gqa.csv").unlink()  # a suite whose CSV is gone: named, not silently left out
    with pytest.raises(ProfileError, match="gqa.manifest.json without the benchmark CSV beside it"):
        load_bench(cap)
    (cap / "gqa.manifest.json").unlink()
    find_file(cap, "d128.csv").unlink()
    (cap / "d128.csv").write_text("a,b\n1,2\n")
    find_file(cap, "mixed.csv").unlink()
    (cap / "mixed.manifest.json").unlink()
    with pytest.raises(ProfileError, match="missing columns"):
        load_bench(cap)


GENERIC = ["gemm:fwd M=1024 K=512", "gemm:fwd M=2048 K=512", "gemm:fwd M=4096 K=512", "scale:fwd M=1024",
           "scale:fwd M=4096"]


def make_imported(dest: Path) -> Path:
    """An imported capture as someone else's profiler run leaves it: an ncu raw CSV export whose
    ranges have generic names (``gemm:fwd M=1024 K=512``) and whose elementwise kernel has only
    the FMUL counter; no cases, no range schemas, no work model."""
    dest.mkdir(parents=True)
    raw = local_copy(find_file(PROFILES / "nvidia-h200" / "blocksize", "ncu_raw.csv"))  # stored as .csv.xz
    rows = list(csv.reader(open(raw, encoding="utf-8")))
    head = rows[0]
    rcol = next(i for i, h in enumerate(head) if "Push/Pop" in h)
    kcol = head.index("Kernel Name")
    not_fmul = {i for i, h in enumerate(head) if h.startswith((M.WORK["ffma"], M.WORK["fadd"], M.WORK["hfma"],
                                                                M.WORK["tensor_fp16"]))}
    out = rows[:2]
    for i, r in enumerate(rows[2:12]):
        r, name = list(r), GENERIC[i % len(GENERIC)]
        r[rcol] = f'1 "<default domain>:{name}:none:none:RGB:0x8000:REGISTERED:{name}" '
        if name.startswith("scale"):
            r[kcol] = "void scale_kernel<float>(float*, int)"
            for j in not_fmul:
                r[j] = ""
        out.append(r)
    with open(dest / "ncu_raw.csv", "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL).writerows(out)
    gpu = load_manifest(PROFILES / "nvidia-h200" / "seqlen")["gpu"]
    man = {"schema": 2, "name": dest.name, "description": "imported: generic range names, no work model",
           "origin": "imported", "created": "20261122-000000", "gpu": gpu, "environment": {}, "git_commit": None,
           "ncu": {"version": "2025.3.1", "metrics": sorted({h for h in head if "__" in h}), "ranges": len(GENERIC)},
           "tools": ["ncu"], "cases": [], "range_schemas": [], "files": file_table(dest)}
    (dest / "manifest.json").write_text(json.dumps(man, indent=2))
    return dest


def test_applicability_is_decided_from_the_data(tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    ok, why = applicable(bare, {"gpu": {"name": "X"}})
    assert ok == ["device"]
    assert "no Nsight Compute report" in why["roofline"] and "no Nsight Systems" in why["timeline"]
    assert "no benchmark CSV" in why["performance"]
    shutil.copy(PROFILES / "nvidia-h200" / "blocksize" / "ncu.ncu-rep.xz", bare / "ncu.ncu-rep.xz")
    _, why = applicable(bare, {"gpu": {"name": "X"}})  # a report, but the manifest lists no metrics
    assert "lists no Nsight Compute metrics" in why["roofline"]
    no_flops = [m for m in M.metric_names() if m not in M.WORK.values()]
    _, why = applicable(bare, {"gpu": {"name": "X"}, "ncu": {"metrics": no_flops}})
    assert "missing metrics for FLOPs" in why["roofline"] and M.WORK["ffma"] in why["roofline"]
    cases = [{"range": f"t:k:forward:N={n},o={o}", "impl": "k"} for n in (1, 2, 3) for o in (1, 2)]
    man = {"gpu": {"name": "X", "l2_bytes": 1}, "ncu": {"metrics": M.metric_names()}, "cases": cases,
           "range_schemas": [{"prefix": "t", "positional": ["variant", "pass"], "fields": {"N": "int"}}]}
    ok, why = applicable(bare, man)
    assert {"roofline", "l2_thrashing", "options"} <= set(ok), why
    man["cases"] = [c for c in cases if c["range"].endswith("o=1")][:2]
    ok, why = applicable(bare, man)
    assert "no sweep" in why["l2_thrashing"] and "no option study" in why["options"]


def test_imported_capture_applicability(tmp_path):
    cap = make_imported(tmp_path / "gpu-x" / "theirs")
    ok, why = applicable(cap, load_manifest(cap))
    assert ok == ["device", "roofline", "l2_thrashing"], why
    assert "no option study" in why["options"]


#: the H200 captures the rendered report holds: ncu + nsys (seqlen, the two Triton ones the declared comparison
#: pairs, the GEMM example), ncu alone (blocksize), a deep tier (bottleneck-deep), ncu + nsys + a deep tier
#: (decode), a benchmark (bench), imported
#: reports with the deep sections (flash-wgmma-fwd-full) and with too few for most pages (flash-mma-d128), and a
#: foreign workload (foreign-example)
RENDERED_CAPTURES = ("seqlen", "triton-example", "triton-example-mask-all-blocks", "gemm-example", "blocksize",
                     "bottleneck-deep", "decode", "bench", "flash-wgmma-fwd-full", "flash-mma-d128", "foreign-example")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    profiles = tmp / "profiles"
    # one capture of each kind from one GPU (the other GPU's and the re-takes kept beside them render the same
    # way): every notebook, captured (ncu, ncu + nsys, bench, deep) and imported (with warp state and without)
    for name in RENDERED_CAPTURES:
        shutil.copytree(PROFILES / "nvidia-h200" / name, profiles / "nvidia-h200" / name)
    make_imported(profiles / "gpu-x" / "theirs")
    broken = profiles / "gpu-y" / "broken"
    shutil.copytree(PROFILES / "nvidia-h200" / "blocksize", broken)
    xz = broken / "ncu.ncu-rep.xz"
    xz.write_bytes(xz.read_bytes()[:1000])  # truncated: its checksum no longer matches
    missing = profiles / "gpu-y" / "nomanifest"
    missing.mkdir()
    (missing / "ncu.log").write_text("x")
    (profiles / "comparisons.toml").write_text(
        f'[[comparison]]\nname = "{COMPARED[0]}"\ntitle = "Triton example: masking every block → the split mask"\n'
        f'base = "{COMPARED[1]}"\nnew = "{COMPARED[2]}"\n\n'
        '[[comparison]]\nname = "to-nowhere"\ntitle = "a capture that is not there"\nbase = "nvidia-h200/seqlen"\n'
        'new = "gpu-z/nowhere"\n')
    reports = tmp / "reports"
    rc = report_main(["--profiles", str(profiles), "--reports", str(reports)])
    return rc, profiles, reports


#: the comparison the rendered profiles declare: its page's name, base and new
COMPARED = ("split-mask", "nvidia-h200/triton-example-mask-all-blocks", "nvidia-h200/triton-example")


def test_every_notebook_renders_and_broken_captures_are_reported(rendered):
    rc, profiles, reports = rendered

    def kind(path: Path) -> tuple:
        m = load_manifest(path)
        return m.get("origin"), tuple(m.get("tools") or ()), bool(m.get("deep"))

    every = {kind(p) for p in (PROFILES / "nvidia-h200").iterdir() if (p / "manifest.json").exists()}
    assert every == {kind(PROFILES / "nvidia-h200" / n) for n in RENDERED_CAPTURES}, "a kind of capture not rendered"
    assert rc == 1  # the broken captures fail...
    index = (reports / "index.html").read_text()
    for cap in list_captures(profiles):
        if cap.gpu == "gpu-y":
            continue
        ok, why = applicable(cap.path, load_manifest(cap.path))
        for nb in ok:
            page = reports / cap.gpu / cap.suite / f"{nb}.html"
            assert page.exists(), page  # ...and every good one still renders
            assert f"{cap.gpu}/{cap.suite}/{nb}.html" in index
        for nb, reason in why.items():
            assert f"{nb}: not applicable &mdash; {html.escape(reason)}" in index
    theirs = (reports / "gpu-x" / "theirs" / "roofline.html").read_text()
    assert "FLOPs:" in theirs and "counted FLOP/s" in theirs and "FMUL" in theirs and "no work model" in theirs
    assert "breaks the page checks" not in index, "a page's figure breaks nsightlab.render.checks (see the index)"
    assert "gpu-y/broken" in index and "truncated" in index
    assert "gpu-y/nomanifest" in index and "no manifest.json" in index
    assert not list(reports.glob("**/.render-*")), "temporary render folders left behind"
    done = {p.stem for p in reports.glob("*/*/*.html")}
    assert set(NOTEBOOK_ORDER) <= done, f"notebooks never rendered: {set(NOTEBOOK_ORDER) - done}"
    assert "l2_thrashing" in {p.stem for p in (reports / "nvidia-h200" / "seqlen").glob("*.html")}


def test_pages_and_index_open_with_a_summary_from_the_data(rendered):
    _, _, reports = rendered
    index = (reports / "index.html").read_text()
    for page in reports.glob("*/*/*.html"):
        text = page.read_text()
        assert 'class="nsl-summary"' in text, f"{page}: no summary"
        meta = read_meta(page)
        assert meta["summary"] and meta["inputs"], f"{page}: no summary or inputs hash beside it"
        assert html.escape(meta["summary"][0]) in index, f"{page}: its finding is not on the index"
    seqlen = read_meta(reports / "nvidia-h200" / "seqlen" / "roofline.html")["summary"]
    assert re.search(r"Fastest range: \w+ .* at [\d,]+ useful TFLOP/s", seqlen[0]), seqlen
    name, base, new = COMPARED
    assert "Comparisons" in index and f'href="compare/{name}.html"' in index and f"{base} → {new}" in index
    assert "compare/to-nowhere" in index and "gpu-z/nowhere: neither a capture folder nor a label" in index


def test_declared_comparisons_render_with_the_rest_and_are_current(rendered):
    """The page a profiles folder declares says what the comparison gives today, in its sidecar and on
    the index; it shares the report's plotly.js and stylesheet."""
    from nsightlab.analysis.comparison import compare_captures

    _, profiles, reports = rendered
    name, base, new = COMPARED
    folder = reports / "compare"
    side = json.loads((folder / f"{name}.json").read_text())
    listed = json.loads((folder / "index.json").read_text())["comparisons"]
    assert [e["name"] for e in listed] == [name] and listed[0]["summary"] == side["summary"]
    cmp = compare_captures(profiles / base, profiles / new)
    assert side["summary"] == cmp.summary() and side["exit_status"] == cmp.exit_status
    assert (side["base"], side["new"]) == (base, new) and side["counts"] == cmp.counts()
    text = (folder / f"{name}.html").read_text(encoding="utf-8")
    assert html.escape(cmp.summary()) in text and html.escape(cmp.summary()) in (reports / "index.html").read_text()
    assert 'src="../plotly.min.js"' in text and 'href="../nsightlab.css"' in text
    assert read_meta(folder / f"{name}.html")["inputs"]


def test_make_report_renders_the_declared_comparisons_again(rendered):
    """`make report` runs `nsightlab report --profiles profiles --reports reports` (no --only), which renders
    the comparison pages the profiles folder declares (comparisons.toml), and renders one again, the same
    bytes, when its page is gone."""
    rc0, profiles, reports = rendered
    recipe = re.search(r"^report:.*\n\t(.+)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    assert recipe[0].endswith("/bin/nsightlab") and recipe[1:] == ["report", "--profiles", "profiles", "--reports",
                                                                   "reports", "--jobs", "$(JOBS)"]
    argv = [str(profiles) if a == "profiles" else str(reports) if a == "reports" else "2" if a == "$(JOBS)" else a
            for a in recipe[2:]]
    name = COMPARED[0]
    page, side = reports / "compare" / f"{name}.html", reports / "compare" / f"{name}.json"
    before = page.read_bytes(), side.read_bytes()
    page.unlink()
    side.unlink()
    assert report_main(argv) == rc0
    assert (page.read_bytes(), side.read_bytes()) == before


def test_pages_share_their_assets_and_make_no_outside_request(rendered):
    _, _, reports = rendered
    assert (reports / "plotly.min.js").exists() and (reports / "nsightlab.css").exists()
    for page in reports.glob("*/*/*.html"):
        text = page.read_text()
        markup = re.sub(r"<script\b[^>]*>.*?</script>", "", text, flags=re.S)
        assert not re.findall(r'(?:src|href)=["\']?(?:https?:)?//', markup), f"{page}: an outside request"
        assert "cdnjs" not in text and "require.min.js" not in text, f"{page}: a CDN script"
        assert set(re.findall(r'<script[^>]*src="([^"]+)"', text)) <= {"../../plotly.min.js"}, page
        assert len(text.encode()) < 1_500_000, f"{page}: {len(text.encode())} bytes"
        assert 'href="../../nsightlab.css"' in text
        assert 'class="plotly-graph-div' not in text or 'src="../../plotly.min.js"' in text


def test_unchanged_inputs_render_nothing_and_only_keeps_the_index(rendered, capsys):
    rc0, profiles, reports = rendered
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in reports.rglob("*") if p.is_file()}
    t0 = time.perf_counter()
    rc = report_main(["--profiles", str(profiles), "--reports", str(reports)])
    took = time.perf_counter() - t0
    assert rc == rc0 and took < 30, took
    assert "0 page(s) rendered" in capsys.readouterr().out
    # --only renders only what it names (here: nothing changed) and keeps every other page on the index
    assert report_main(["--profiles", str(profiles), "--reports", str(reports), "--only", "device"]) == rc0
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in reports.rglob("*") if p.is_file()}
    assert after == before, "an unchanged tree was rewritten"


def test_only_rejects_an_unknown_notebook(rendered, capsys):
    _, profiles, reports = rendered
    assert report_main(["--profiles", str(profiles), "--reports", str(reports), "--only", "roofline,rofline"]) == 2
    err = capsys.readouterr().err
    assert "rofline" in err and "roofline, why, l2_thrashing" in err


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr",
                  "--v=0", "--virtual-time-budget=20000", "--dump-dom"]


def _chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    assert exe, "headless Chromium is required (Debian: apt install chromium); `make test` installs it"
    return exe


def load_in_chromium(page: Path, profile_dir: Path) -> tuple[str, list[str]]:
    """The DOM after scripts ran, and the console errors, of ``page`` opened from disk, network off."""
    out = subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    errors = [line for line in out.stderr.splitlines()
              if "CONSOLE" in line and ("Uncaught" in line or ":ERROR:" in line or "Error" in line)]
    return out.stdout, errors


def test_chromium_detects_a_broken_page(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><div class="plotly-graph-div"></div><script>throw new Error("boom")</script></body></html>')
    dom, errors = load_in_chromium(bad, tmp_path / "chrome")
    assert errors, "a page that throws must be caught"
    assert _undrawn(dom) == 1


def _undrawn(dom: str) -> int:
    soup = BeautifulSoup(dom, "html.parser")
    divs = soup.select("div.plotly-graph-div")
    return sum(1 for d in divs if not any(s.find(["path", "rect", "g"]) for s in d.select("svg.main-svg")))


def test_every_page_loads_offline_without_errors_and_draws_every_figure(rendered, tmp_path):
    _, _, reports = rendered
    pages = sorted(reports.glob("*/*/*.html")) + sorted(reports.glob("compare/*.html"))
    assert len(pages) >= 10 and any(p.parent.name == "compare" for p in pages)

    def check(ip: tuple[int, Path]) -> None:
        i, page = ip
        dom, errors = load_in_chromium(page, tmp_path / f"chrome{i}")
        assert not errors, f"{page}: console errors {errors[:3]}"
        n = len(re.findall(r'class="plotly-graph-div', dom))
        assert n >= 1 or "Not applicable here" in dom, f"{page}: no plotly figure and no reason why"
        assert _undrawn(dom) == 0, f"{page}: a figure without a drawn SVG"
        assert "Traceback" not in dom, f"{page}: a notebook cell failed"
        assert not re.search(r'id="nsl-missing"[^>]*display: ?block', dom), f"{page}: says its script is missing"

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(check, enumerate(pages)))


def _page_alone(src: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dest / src.name)
    return dest / src.name


def test_a_page_copied_alone_says_what_is_missing(rendered, tmp_path):
    _, _, reports = rendered
    alone = _page_alone(reports / "nvidia-h200" / "blocksize" / "options.html", tmp_path / "alone")
    dom, _ = load_in_chromium(alone, tmp_path / "chrome")
    assert re.search(r'id="nsl-missing"[^>]*display: ?block', dom), "no message on a page without its script"
    assert "plotly.min.js" in dom and "--standalone" in dom


def test_standalone_pages_travel_and_rendering_is_deterministic_and_quiet(tmp_path, capfd):
    small = tmp_path / "profiles" / "nvidia-h200"
    small.mkdir(parents=True)
    shutil.copytree(PROFILES / "nvidia-h200" / "blocksize", small / "blocksize")
    (tmp_path / "profiles" / "comparisons.toml").write_text(  # declared, but left out by --only
        '[[comparison]]\nname = "same"\ntitle = "t"\nbase = "nvidia-h200/blocksize"\nnew = "nvidia-h200/blocksize"\n')
    outs = [tmp_path / "standalone", tmp_path / "again"]
    for out in outs:
        assert report_main(["--profiles", str(tmp_path / "profiles"), "--reports", str(out), "--standalone",
                            "--only", "options,device"]) == 0
        assert not (out / "compare").exists()
    # quiet: one line per page (how far, how long so far, about how long is left), then the total; the
    # kernels print nothing (no transport warning), and neither does papermill
    printed, warned = capfd.readouterr()
    assert warned == "", warned
    lines = printed.splitlines()
    assert len(lines) == 6, lines
    assert re.fullmatch(r"\[1/2\] nvidia-h200/blocksize/(options|device): \d+\.\d s \(\d+:\d\d elapsed, about \d+:\d\d left\)",
                        lines[0]), lines[0]
    assert re.fullmatch(r"\[2/2\] nvidia-h200/blocksize/(options|device): \d+\.\d s \(\d+:\d\d elapsed\)", lines[1]), lines[1]
    assert lines[2].startswith("2 page(s) rendered, 0 up to date, 0 failure(s) in ")
    assert not (outs[0] / "plotly.min.js").exists()
    for page in outs[0].glob("*/*/*.html"):  # the same inputs give the same bytes
        assert (outs[1] / page.relative_to(outs[0])).read_bytes() == page.read_bytes(), f"{page} is not deterministic"
    page = _page_alone(outs[0] / "nvidia-h200" / "blocksize" / "options.html", tmp_path / "moved")
    markup = re.sub(r"<script\b[^>]*>.*?</script>", "", page.read_text(), flags=re.S)  # plotly.js quotes URLs
    assert "../../" not in markup and not re.findall(r'(?:src|href)=["\']?(?:https?:)?//', markup)
    dom, errors = load_in_chromium(page, tmp_path / "chrome")
    assert not errors and _undrawn(dom) == 0 and len(re.findall(r'class="plotly-graph-div', dom)) >= 2


def test_figures_and_tables_give_the_same_bytes_whatever_the_last_digits():
    """Values that differ only beyond the 7th significant digit (two CPUs, two numpy builds) give the same
    figure and table bytes, ids included; a change a reader could see still shows."""
    import numpy as np
    import pandas as pd
    import plotly.graph_objects as go

    from nsightlab.render import figures
    from nsightlab.render.page import table_html

    def fig_html(e: float) -> str:
        y = np.array([0.123456789, 12.3456789, 1234.56789]) * (1 + e)
        fig = go.Figure(go.Scatter(x=[256, 1024, 4096], y=y, customdata=np.stack([y, 2 * y], axis=1)))
        fig.add_trace(go.Bar(x=[1.0 * (1 + e), 2.0], y=[3.0, 4.0 / 3.0 * (1 + e)]))
        fig.update_yaxes(type="log", range=[float(np.log10(y.min())), float(np.log10(y.max()))])
        figures.set_plotlyjs("../../plotly.min.js")
        return figures.html(fig)

    def table(e: float) -> str:
        return table_html(pd.DataFrame({"N": [1024, 4096], "ms": np.array([1.23456789, 9.87654321]) * (1 + e)}), name="t")

    base = fig_html(0.0)
    assert fig_html(4e-9) == fig_html(-4e-9) == base
    assert fig_html(1e-4) != base
    assert table(4e-9) == table(-4e-9) == table(0.0)


def test_a_kernel_that_finishes_starting_after_ctrl_c_is_killed_at_once():
    """Ctrl-C kills the notebook kernels it finds running; a kernel still starting then was not among them, and its
    notebook would run to its end while the runner waits. Such a kernel is killed as its start completes, until a
    new render run allows kernels again."""
    import asyncio

    from nsightlab.render import execute as ex

    async def start() -> object:
        km = ex._kernel_manager_class()(kernel_name="python3")
        await km.start_kernel()
        return km

    ex.stop_kernels()
    try:
        km = asyncio.run(start())
        proc = km.provisioner.process
        assert proc.wait(timeout=10) is not None, "the kernel kept running after Ctrl-C"
    finally:
        ex.allow_kernels()
    km = asyncio.run(start())
    try:
        assert km.provisioner.process.poll() is None, "a kernel started after allow_kernels was killed"
    finally:
        asyncio.run(km.shutdown_kernel(now=True))


def _sigint_default() -> None:
    """In the runner's process before it starts: Ctrl-C as a terminal delivers it. A suite started in the
    background (``cmd &`` without job control, nohup) hands its children SIGINT ignored, and Python then installs
    no KeyboardInterrupt handler, so the runner would render on to the end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_the_runner_and_leaves_no_render_folder(tmp_path):
    profiles = tmp_path / "profiles" / "nvidia-h200"
    profiles.mkdir(parents=True)
    shutil.copytree(PROFILES / "nvidia-h200" / "seqlen", profiles / "seqlen")
    reports = tmp_path / "reports"
    proc = subprocess.Popen([sys.executable, "-m", "nsightlab.report", "--profiles", str(tmp_path / "profiles"),
                             "--reports", str(reports)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_sigint_default)
    deadline = time.time() + 90
    while time.time() < deadline and not list(reports.glob("**/.render-*")):
        time.sleep(0.2)
    assert list(reports.glob("**/.render-*")), "the runner never started a notebook"
    time.sleep(1.0)
    t0 = time.time()
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        raise AssertionError("the runner did not stop within 30 s of Ctrl-C") from None
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert time.time() - t0 < 30
    assert "interrupted" in err
    assert not list(reports.glob("**/.render-*")), "a render folder was left behind"
    assert not (reports / "index.html").exists()


def test_missing_profiles_folder(tmp_path):
    assert report_main(["--profiles", str(tmp_path / "nope"), "--reports", str(tmp_path / "r")]) == 2


def test_relative_folders_are_the_callers(tmp_path, monkeypatch, capsys):
    """The notebooks run in the repository; relative --profiles / --reports are read from the caller's folder
    (outside the repository: made absolute), inside it they stay relative (pages name them alike on every
    machine), and the caller's folder is given back."""
    from nsightlab.cli.report import _from_repo
    from nsightlab.store.read import REPO

    assert _from_repo(REPO / "profiles") == Path("profiles")
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path)
    assert _from_repo(Path("empty")) == tmp_path / "empty"
    assert report_main(["--profiles", "empty", "--reports", "out"]) == 2
    assert f"no capture under {tmp_path / 'empty'}" in capsys.readouterr().err
    assert Path.cwd() == tmp_path and (tmp_path / "out").is_dir()  # the caller's out/, not the repository's


def test_pages_on_dask_worker_threads_are_the_same_whatever_jobs(tmp_path, monkeypatch):
    """--jobs N runs the pages as Dask tasks on N worker threads: every page is written once, with the same bytes,
    whatever N and whatever order they finish in; a page that fails is one line and the others still come."""
    import argparse
    import random
    import threading

    from nsightlab.render import report as R

    def fake(job, a, reports, stop):
        assert isinstance(stop, threading.Event)  # found by name in this process, though the task was pickled
        time.sleep(random.random() * 0.05)
        if job.notebook == "broken":
            raise ValueError("cell 3 failed\nKeyError: 'x'")
        job.out.parent.mkdir(parents=True, exist_ok=True)
        job.out.write_text(f"<html>{job.label} {json.dumps(job.params, sort_keys=True)}</html>")
        return {"summary": [job.label], "title": job.label}

    monkeypatch.setattr(R, "_render", fake)
    outs = {}
    for jobs in (1, 3):
        reports = tmp_path / f"r{jobs}"
        todo = [R.Job(f"gpu/cap{i}/{nb}", nb, reports / "gpu" / f"cap{i}" / f"{nb}.html", {"i": i}, f"h{i}")
                for i in range(6) for nb in ("roofline", "l2")] + [R.Job("gpu/bad/broken", "broken", reports / "b.html", {}, "x")]
        a = argparse.Namespace(standalone=False, profiles=str(tmp_path), kernel="python3", jobs=jobs, scheduler=None)
        failed = R.render_all(todo, a, reports)
        assert failed == [("gpu/bad/broken", "ValueError: KeyError: 'x'")]
        outs[jobs] = {p.relative_to(reports): p.read_bytes() for p in sorted(reports.rglob("*")) if p.is_file()}
    assert outs[1] == outs[3] and len([p for p in outs[1] if p.suffix == ".html"]) == 12


def test_report_scheduler_unreachable_is_one_line(tmp_path, capsys, monkeypatch):
    from nsightlab.run import cluster

    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", 1.0)
    assert report_main(["--profiles", "profiles", "--reports", str(tmp_path / "r"), "--only", "device",
                        "--scheduler", "tcp://127.0.0.1:9", "--force"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("nsightlab report: error: --scheduler tcp://127.0.0.1:9: the scheduler cannot be reached")


def test_pages_go_to_the_workers_slowest_first_one_capture_at_a_time(tmp_path):
    """submission_order: round by round over the captures (largest on disk first), each capture's pages slowest
    notebook first, so that no two pages of one capture start together while others wait; every page once."""
    from nsightlab.render import report as R

    caps = {}
    for name, size in (("small", 10), ("big", 1000), ("mid", 100)):
        caps[name] = tmp_path / name
        caps[name].mkdir()
        (caps[name] / "report.bin").write_bytes(b"x" * size)
    todo = [R.Job(f"gpu/{name}/{nb}", nb, tmp_path / f"{name}-{nb}.html", {"capture": str(caps[name])}, "h")
            for name in ("small", "big", "mid") for nb in ("timeline", "why", "device")
            if not (name == "small" and nb != "timeline")]
    todo += [R.Job(f"compare/{n}", "compare", tmp_path / f"{n}.html", {}, "h") for n in ("a-b", "c-d")]
    got = [j.label for j in R.submission_order(todo)]
    # each comparison a group of its own: both in the first round, not one a round behind the other
    assert got == ["gpu/big/why", "gpu/mid/why", "gpu/small/timeline", "compare/a-b", "compare/c-d",
                   "gpu/big/device", "gpu/mid/device", "gpu/big/timeline", "gpu/mid/timeline"]
    assert R.submission_order([]) == []
