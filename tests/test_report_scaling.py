"""scripts/report_scaling.py's comparison of two rendered trees and its refusals (the renders themselves are
nsightlab report's, tested in test_report.py)."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("report_scaling", ROOT / "scripts" / "report_scaling.py")
rs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rs)


def test_tree_diff_names_missing_extra_and_changed_files(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        (root / "gpu" / "cap").mkdir(parents=True)
        (root / "gpu" / "cap" / "same.html").write_bytes(b"<p>1</p>")
    (a / "gpu" / "cap" / "changed.html").write_bytes(b"x")
    (b / "gpu" / "cap" / "changed.html").write_bytes(b"y")
    (a / "only_a.html").write_text("a")
    (b / "only_b.html").write_text("b")
    assert rs.tree_diff(a, b) == ["gpu/cap/changed.html", "only_a.html", "only_b.html"]
    assert rs.tree_diff(a, a) == []


def test_page_counts_reads_pages_and_failed_lines(tmp_path):
    (tmp_path / "gpu").mkdir()
    for name in ("index.html", "gpu/roofline.html", "gpu/why.html"):
        (tmp_path / name).write_text("")
    log = "[1/2] gpu/roofline 3.0 s\n[2/2] gpu/why FAILED: a point above a roof\n"
    assert rs.page_counts(tmp_path, log) == {"pages": 2, "failed": 1}


@pytest.mark.parametrize("argv, match", [
    (["--jobs", "4"], "two or more positive counts"),
    (["--jobs", "1", "0"], "two or more positive counts"),
])
def test_bad_jobs_are_refused_in_one_line(argv, match, tmp_path, capsys):
    with pytest.raises(SystemExit):
        rs.main([*argv, "--out", str(tmp_path / "o.json"), "--profiles", str(ROOT / "profiles")])
    assert match in capsys.readouterr().err


def test_a_folder_without_captures_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        rs.main(["--profiles", str(tmp_path), "--out", str(tmp_path / "o.json")])
    assert "holds no captures" in capsys.readouterr().err


def test_each_render_starts_from_a_cold_cache_of_its_own(tmp_path, monkeypatch):
    """The baseline would otherwise fill the parse cache that the parallel run then reads: its speedup would count
    the parsing once instead of twice."""
    seen = []

    def fake_run(cmd, **kw):
        cache = Path(kw["env"]["NSIGHTLAB_CACHE"])
        seen.append((cache, cache.is_dir() and not any(cache.iterdir())))
        (cache / "parsed").write_text("x")  # what a render leaves there

        class Done:
            returncode, stdout, stderr = 0, "", ""
        return Done()

    monkeypatch.setattr(rs.subprocess, "run", fake_run)
    monkeypatch.setenv("NSIGHTLAB_CACHE", str(tmp_path / "shared"))
    for jobs in (1, 4):
        rs.render(tmp_path / "profiles", tmp_path / f"out{jobs}", jobs, [])
    assert [empty for _, empty in seen] == [True, True]
    assert seen[0][0] != seen[1][0] and all(not c.exists() for c, _ in seen)
    assert not (tmp_path / "shared").exists()


def test_a_deadline_keeps_the_runs_that_finished_and_says_where_it_stopped(tmp_path, monkeypatch):
    import json

    def fake_render(profiles, reports, jobs, extra):
        if jobs == 4:
            raise KeyboardInterrupt
        (reports / "gpu").mkdir(parents=True)
        (reports / "gpu" / "page.html").write_text("same")
        return {"jobs": jobs, "seconds": 10.0 / jobs, "returncode": 0, "pages": 1, "failed": 0}

    monkeypatch.setattr(rs, "render", fake_render)
    out = tmp_path / "o.json"
    assert rs.main(["--jobs", "1", "2", "4", "--out", str(out), "--profiles", str(ROOT / "profiles")]) == 1
    data = json.loads(out.read_text())
    assert [r["jobs"] for r in data["runs"]] == [1, 2] and data["interrupted"] == "stopped during the run of --jobs 4"
    assert data["runs"][1]["speedup"] == 2.0 and data["runs"][1]["differs_from_baseline"] == []
