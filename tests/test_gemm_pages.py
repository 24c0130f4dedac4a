"""The GEMM example (examples/gemm: a problem that is not attention) gets the roofline, performance and compare
pages through the same generic path as attention: its problem (axis M, fields M, N, K) is found from the
capture's manifest, its benchmark CSV is read by its own columns, and the pages render without error and
along M, never along attention's N.

The pages render from the committed captures: gemm-triton (a Triton GEMM beside cuBLAS: Nsight Compute, Nsight
Systems and the deep tier) gives the roofline and the why page, gemm-bench (both timed with CUDA events, M swept
over four values) the performance page, and gemm-example against gemm-triton the comparison. The bench writer
(:func:`examples.gemm.bench.write`) is also checked without a GPU: a bench capture is written here, into a
temporary folder, from gemm-example's Nsight Systems range times (median, min and max of its five timed iterations
per case), so its numbers are measured ones too."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nsightlab.analysis import comparison, counters, perf, timeline
from nsightlab.problems import problem as problems
from nsightlab.render import page as nb
from nsightlab.store import captures, read

ROOT = Path(__file__).resolve().parent.parent
GEMM = ROOT / "profiles" / "nvidia-h200" / "gemm-example"
TRITON = ROOT / "profiles" / "nvidia-h200" / "gemm-triton"
BENCH = ROOT / "profiles" / "nvidia-h200" / "gemm-bench"


def _bench_capture(dest: Path) -> Path:
    """A bench capture of the GEMM beside the light one: ``manifest.json`` (the light capture's GPU, environment
    and sweep; tools: bench) and ``gemm.csv`` + ``gemm.manifest.json``, timed by the light capture's nsys ranges."""
    from examples.gemm import bench

    man = captures.load_manifest(GEMM)
    t = read.load_nsys(GEMM, man)
    rt = timeline.range_timing(t["kernels"], t["ranges"])
    timed = []
    for (pass_, m, n, k), g in rt.groupby(["pass", "M", "N", "K"], sort=True):
        case = problems.get("gemm").normalize({"M": int(m), "N": int(n), "K": int(k), "dtype": "float16"})
        timed.append((case, pass_, {"ms": float(g["gpu_ms"].median()), "ms_min": float(g["gpu_ms"].min()),
                                    "ms_max": float(g["gpu_ms"].max())}))
    bench.write(bench.rows("gemm", timed), dest, "gemm", {
        "description": "GEMM times from gemm-example's Nsight Systems ranges (GPU time per range, 5 iterations)",
        "environment": man.get("environment") or {},
        "timing": {"method": "Nsight Systems range GPU time", "flush": "none", "rounds": 1}, "seconds": 0})
    own = {k: man[k] for k in ("schema", "gpu", "environment", "git_commit", "ceilings", "sweep", "created") if k in man}
    (dest / "manifest.json").write_text(json.dumps({**own, "name": "gemm-bench", "suite": "gemm-bench",
                                                    "origin": "captured", "tools": ["bench"], "files": {}}))
    return dest


@pytest.fixture(scope="module")
def gemm_bench(tmp_path_factory):
    return _bench_capture(tmp_path_factory.mktemp("profiles") / "nvidia-h200" / "gemm-bench")


def test_the_capture_is_read_as_a_gemm():
    man = captures.load_manifest(GEMM)
    assert "problem" not in man and man["sweep"]["problem"] == "custom"  # recorded before captures named it
    problem = problems.of_manifest(man)  # its sweep's implementation module registers it
    assert problem.name == "gemm" and problem.sweep_axis == "M"
    assert problems.of_manifest({}).name == problems.default_name()  # a capture that says nothing: the default


def test_the_gemm_benchmark_csv_is_read_by_its_own_columns(gemm_bench):
    df, manifests = captures.load_bench(gemm_bench)
    assert df.attrs["problem"] == "gemm" and manifests["gemm"]["problem"] == "gemm"
    assert {"M", "N", "K"} <= set(df) and not {"B", "H", "D", "causal"} & set(df)
    assert perf.key(df) == ["suite", "config", "M", "N", "K", "dtype", "pass"]
    assert perf.facets(perf.problem_of(df)) == ["K", "N"] and not perf.sweeps_axis(df, "gemm")  # M: 2 values
    assert perf.pick_reference(df) == "torch_gemm" and len(df) == 8 and (df["tflops"] > 0).all()
    t = perf.target_table(df, "torch_gemm", "torch_gemm", {"forward": 1.0}, min_n=1024)
    assert list(t.columns[:6]) == ["pass", "suite", "dtype", "M", "N", "K"] and len(t) == 8


def test_a_csv_without_its_problem_columns_says_which_problem_it_was_read_as(tmp_path):
    import pandas as pd

    import examples.gemm.gemm  # noqa: F401 - registers the problem

    pd.DataFrame([{"suite": "s", "config": "c", "M": 1, "dtype": "float16", "impl": "torch_gemm", "kind": "library",
                   "pass": "forward", "status": "ok", "ms": 1.0, "tflops": 1.0}]).to_csv(tmp_path / "s.csv", index=False)
    (tmp_path / "s.manifest.json").write_text(json.dumps({"problem": "gemm"}))
    with pytest.raises(captures.ProfileError, match=r"missing columns \['N', 'K'\]; a benchmark CSV of the gemm"):
        captures.load_bench(tmp_path)
    (tmp_path / "s.manifest.json").write_text("{}")  # a manifest that names no problem: the default's columns
    with pytest.raises(captures.ProfileError, match=r"missing columns \['B', 'H', 'N', 'D', 'causal'\]; a benchmark CSV "
                                                    r"of the attention problem \(its manifest names no problem"):
        captures.load_bench(tmp_path)
    (tmp_path / "s.manifest.json").write_text(json.dumps({"problem": "conv2d"}))  # a problem no plug-in registered
    with pytest.raises(captures.ProfileError, match="names the problem 'conv2d', which is not registered here"):
        captures.load_bench(tmp_path)


def test_the_roofline_and_the_comparison_go_along_m():
    man = captures.load_manifest(GEMM)
    work = counters.kernel_work(read.load_ncu(GEMM, man))
    ranges = counters.attach_model(counters.per_range(work, by_kernel_if_no_ranges=True), captures.cases(man))
    assert nb.sweep_field(ranges, problems.axis_for(ranges)) == "M"
    names = comparison.names(ranges)["label"]
    assert names.str.contains(r"K=\d+ M=\d+$").all(), names.tolist()  # the GEMM's order, its axis last


def test_the_committed_gemm_bench_sweeps_m_with_both_implementations():
    df, _ = captures.load_bench(BENCH)
    assert df.attrs["problem"] == "gemm" and set(df["impl"]) == {"torch_gemm", "triton_gemm"}
    assert perf.sweeps_axis(df, "gemm") and sorted(df["M"].unique()) == [1024, 2048, 4096, 8192]
    assert (df["status"] == "ok").all() and (df["rel_l2"] < 1e-3).all()  # each row checked against float64 first


@pytest.mark.parametrize("page", ["roofline", "performance", "compare", "why"])
def test_the_gemm_pages_render(tmp_path, page):
    from nsightlab.render.execute import PLOTLY_JS, render_notebook, ship_assets

    reports = tmp_path / "reports"
    reports.mkdir()
    ship_assets(reports)
    out = reports / f"{page}.html"
    params = {"roofline": {"capture": str(TRITON)}, "performance": {"capture": str(BENCH)},
              "compare": {"base": str(GEMM), "new": str(TRITON)},
              "why": {"capture": str(TRITON), "a": "triton_gemm", "b": "torch_gemm"}}[page]
    meta = render_notebook(ROOT / "notebooks" / f"{page}.ipynb", {**params, "plotlyjs": PLOTLY_JS}, out, reports=reports)
    html = out.read_text()
    assert "Traceback" not in html and "NotApplicable" not in html
    assert html.count("plotly-graph-div") >= 1
    # torch_gemm in the colour its plug-in registers (the page's kernel loaded it from the capture's manifest)
    assert problems.style_of("torch_gemm")[0] in html
    summary = " ".join(meta["summary"])
    assert "torch_gemm" in summary or page == "compare"
    assert "N=" not in summary.replace("N=4096", "") and "D=" not in summary and "causal" not in summary, summary
    if page == "roofline":
        assert re.search(r"M=\d+", summary) and "triton_gemm" in summary
    if page == "performance":
        assert "TFLOP/s against M" in html, "the throughput figure sweeps M"
    if page == "why":
        assert "triton_gemm" in summary and "examples/gemm/triton_gemm.py" in html  # the lines behind the terms
    if page == "compare":  # cuBLAS in both captures: its eight ranges matched
        assert "8" in summary, summary
