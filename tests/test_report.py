"""The report pipeline on the committed captures, and its errors on broken ones (no GPU, no torch needed)."""

import json
import shutil
from pathlib import Path

import pytest

from nsightlab import perf
from nsightlab.report import main as report_main
from nsightlab.store import ProfileError, list_captures, load_bench

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "profiles"


def test_committed_captures_load_with_manifests():
    caps = list_captures(PROFILES)
    assert caps, "no committed captures"
    for cap in caps:
        df, manifests = load_bench(cap.path)
        assert set(df["suite"]) == set(manifests)
        for m in manifests.values():
            env = m["environment"]
            assert env["gpu"]["name"] and env["torch"] and env["git_commit"] != "unknown"
        ok = df[df["status"] == "ok"]
        assert (ok["ms"] > 0).all() and ok["rel_l2"].notna().all()


def test_committed_results_are_correct_to_the_tolerances():
    from flash_kernels.testing import TOLERANCES  # imports torch only for the poison flag

    for cap in list_captures(PROFILES):
        df, _ = load_bench(cap.path)
        ok = df[(df["status"] == "ok") & (df["kind"] == "kernel")]
        for _, r in ok.iterrows():
            tol = TOLERANCES[r["dtype"]]["out_rel_l2" if r["pass"] == "forward" else "grad_rel_l2"]
            assert r["rel_l2"] <= tol, f"{r['impl']} {r['config']} {r['pass']}: rel_l2 {r['rel_l2']}"


def test_target_table_ratios():
    df, _ = load_bench(list_captures(PROFILES)[0].path)
    t = perf.target_table(df)
    assert len(t) == 32  # 2 passes x 2 head dims x causal/not x N in 2048..16384
    assert ((t["ratio"] - t["tflops"] / t["ref_tflops"]).abs() < 1e-12).all()


def _copy_capture(tmp_path: Path) -> Path:
    src = list_captures(PROFILES)[0].path
    dst = tmp_path / "profiles" / "gpu-x" / "seeds"
    shutil.copytree(src, dst)
    return dst


def test_missing_manifest_is_a_clear_error(tmp_path):
    cap = _copy_capture(tmp_path)
    (cap / "seed004.manifest.json").unlink()
    with pytest.raises(ProfileError, match="seed004.csv: its manifest seed004.manifest.json is missing"):
        load_bench(cap)


def test_corrupt_manifest_and_csv(tmp_path):
    cap = _copy_capture(tmp_path)
    (cap / "seed002.manifest.json").write_text("{not json")
    with pytest.raises(ProfileError, match="not valid JSON"):
        load_bench(cap)
    (cap / "seed002.manifest.json").write_text(json.dumps({"environment": {}}))
    (cap / "seed002.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ProfileError, match="missing columns"):
        load_bench(cap)


def test_make_report_renders_and_survives_a_broken_capture(tmp_path):
    good = _copy_capture(tmp_path)
    bad = tmp_path / "profiles" / "gpu-y" / "broken"
    bad.mkdir(parents=True)
    (bad / "convention.csv").write_text("suite,config\n")
    reports = tmp_path / "reports"
    rc = report_main(["--profiles", str(tmp_path / "profiles"), "--reports", str(reports)])
    assert rc == 1  # the broken capture fails...
    page = reports / "gpu-x" / "seeds" / "performance.html"
    assert page.exists()  # ...and the good one still renders
    html = page.read_text()
    assert html.count('class="plotly-graph-div"') >= 4
    assert html.count("plotly.js v") == 1 or "Plotly" in html  # plotly.js inline once: works offline
    assert "Traceback" not in html and "Error" not in html.split("Skipped combinations")[0][-2000:]
    index = (reports / "index.html").read_text()
    assert "gpu-x/seeds/performance" in index and "gpu-y/broken" in index and "missing its manifest" not in index
    assert not list(reports.glob("**/.render-*")), "temporary render folders left behind"
    assert good.exists()


def test_missing_profiles_folder(tmp_path):
    assert report_main(["--profiles", str(tmp_path / "nope"), "--reports", str(tmp_path / "r")]) == 2
