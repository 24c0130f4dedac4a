"""The report pipeline on the committed captures and on an imported one (generic range names, no
work model, a raw CSV export with an FMUL-only kernel): which notebooks apply and why not, every
applicable notebook executed by papermill, every page loaded in headless Chromium with networking off
(no console errors, every plotly figure drawn), and a broken capture reported while the others render."""

import csv
import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from nsightlab import metrics as M
from nsightlab import perf
from nsightlab.files import file_table
from nsightlab.report import applicable
from nsightlab.report import main as report_main
from nsightlab.store import ProfileError, list_captures, load_bench, load_manifest

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "profiles"
BENCH = PROFILES / "nvidia-h200" / "bench"


def test_committed_captures_validate_and_open():
    from nsightlab.store import validate

    caps = list_captures(PROFILES)
    assert {c.suite for c in caps} >= {"seqlen", "blocksize", "bench", "triton-example", "foreign-example"}
    for cap in caps:
        man = validate(cap.path)  # checksums, sizes, and every report opens
        assert man["gpu"]["name"] and man["schema"] == 2
        if man["origin"] == "captured":  # what this project captured says where, with what and at which commit
            assert man["git_commit"] not in (None, "unknown") and man["ceilings"]["copy_d2d"]["bytes_per_s"] > 0
            assert man["sweep"]["name"] == cap.suite
            if set(man["tools"]) & {"ncu", "nsys"}:
                assert man["cases"] and man["range_schemas"]
        else:  # imported: what the reports themselves say
            assert man["imported_from"] and man["gpu"]["source"]


def test_committed_benchmarks_are_correct_to_the_tolerances():
    from flash_kernels.testing import TOLERANCES

    df, manifests = load_bench(BENCH)
    assert set(df["suite"]) == set(manifests) == {"mixed", "d128", "convention"}
    ok = df[(df["status"] == "ok") & (df["kind"] == "kernel")]
    assert len(ok) > 300
    for _, r in ok.iterrows():
        tol = TOLERANCES[r["dtype"]]["out_rel_l2" if r["pass"] == "forward" else "grad_rel_l2"]
        assert r["rel_l2"] <= tol, f"{r['impl']} {r['config']} {r['pass']}: rel_l2 {r['rel_l2']}"


def test_target_table_ratios():
    df, _ = load_bench(BENCH)
    t = perf.target_table(df, "flash_mma", "sdpa_flash", {"forward": 0.8, "backward": 0.6}, suite="convention")
    assert len(t) == 32
    assert ((t["ratio"] - t["tflops"] / t["ref_tflops"]).abs() < 1e-12).all()


def test_missing_and_corrupt_bench_files(tmp_path):
    cap = tmp_path / "bench"
    shutil.copytree(BENCH, cap)
    (cap / "mixed.manifest.json").unlink()
    with pytest.raises(ProfileError, match="mixed.csv: its manifest mixed.manifest.json is missing"):
        load_bench(cap)
    (cap / "d128.csv").write_text("a,b\n1,2\n")
    (cap / "mixed.csv").unlink()
    with pytest.raises(ProfileError, match="missing columns"):
        load_bench(cap)


GENERIC = ["gemm:fwd M=1024 K=512", "gemm:fwd M=2048 K=512", "gemm:fwd M=4096 K=512", "scale:fwd M=1024",
           "scale:fwd M=4096"]


def make_imported(dest: Path) -> Path:
    """An imported capture as someone else's profiler run leaves it: an ncu raw CSV export whose
    ranges have generic names (``gemm:fwd M=1024 K=512``) and whose elementwise kernel has only
    the FMUL counter; no cases, no range schemas, no work model."""
    dest.mkdir(parents=True)
    rows = list(csv.reader(open(PROFILES / "nvidia-h200" / "blocksize" / "ncu_raw.csv", encoding="utf-8")))
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
    shutil.copy(PROFILES / "nvidia-h200" / "blocksize" / "ncu.ncu-rep.gz", bare / "ncu.ncu-rep.gz")
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


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    profiles = tmp / "profiles"
    shutil.copytree(PROFILES, profiles)
    make_imported(profiles / "gpu-x" / "theirs")
    broken = profiles / "gpu-y" / "broken"
    shutil.copytree(PROFILES / "nvidia-h200" / "blocksize", broken)
    gz = broken / "ncu.ncu-rep.gz"
    gz.write_bytes(gz.read_bytes()[:1000])  # truncated: its checksum no longer matches
    missing = profiles / "gpu-y" / "nomanifest"
    missing.mkdir()
    (missing / "ncu.log").write_text("x")
    reports = tmp / "reports"
    rc = report_main(["--profiles", str(profiles), "--reports", str(reports)])
    return rc, profiles, reports


def test_every_notebook_renders_and_broken_captures_are_reported(rendered):
    rc, profiles, reports = rendered
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
    assert "FLOP source:" in theirs and "FMUL" in theirs and "no work model" in theirs
    assert "gpu-y/broken" in index and "truncated" in index
    assert "gpu-y/nomanifest" in index and "no manifest.json" in index
    assert not list(reports.glob("**/.render-*")), "temporary render folders left behind"
    all_nbs = {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
    done = {p.stem for p in reports.glob("*/*/*.html")}
    assert all_nbs <= done, f"notebooks never rendered: {all_nbs - done}"


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
    pages = sorted(reports.glob("*/*/*.html")) + sorted((ROOT / "reports" / "live").glob("**/*.html"))
    assert len(pages) >= 10
    for page in pages:
        dom, errors = load_in_chromium(page, tmp_path / "chrome")
        assert not errors, f"{page}: console errors {errors[:3]}"
        n = len(re.findall(r'class="plotly-graph-div', dom))
        assert n >= 1 or "Not applicable here" in dom, f"{page}: no plotly figure and no reason why"
        assert _undrawn(dom) == 0, f"{page}: a figure without a drawn SVG"
        assert "Traceback" not in dom, f"{page}: a notebook cell failed"


def test_missing_profiles_folder(tmp_path):
    assert report_main(["--profiles", str(tmp_path / "nope"), "--reports", str(tmp_path / "r")]) == 2
