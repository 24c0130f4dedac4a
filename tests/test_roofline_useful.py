"""The roofline cannot mislead: it plots useful FLOP/s (the work model's), so implementations of one
case rank as their measured times do, with the counted FLOP/s beside them; one peak per GPU; ceilings
that match the dtype; the excess of counted over modeled FLOPs explained by computation."""

import re
from pathlib import Path

import pandas as pd
import pytest

from nsightlab.analysis import counters, roofline
from nsightlab.render import figures
from nsightlab.store import captures, read

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "profiles" / "nvidia-h200"


def _load(name):
    path = H200 / name
    man = captures.load_manifest(path)
    work = counters.kernel_work(read.load_ncu(path, man))
    rng = counters.attach_model(counters.per_range(work, by_kernel_if_no_ranges=True), captures.cases(man))
    return work, man, rng


@pytest.fixture(scope="module")
def triton():
    return _load("triton-example")


def test_the_triton_roofline_ranks_implementations_as_their_times_do(triton):
    _, _, rng = triton
    pts = roofline.roofline_points(rng)
    pts = pts[pts["level"] == "DRAM"]
    assert set(pts["basis"]) == {"useful"}
    fields = [c for c in counters.identity_columns(pts) if c not in ("variant", "options", "bwd_tile", "tile")]
    pairs = 0
    for _, g in pts.groupby(fields):
        if {"triton_fa2", "sdpa_flash"} <= set(g["variant"]):
            a, b = (g[g["variant"] == v].iloc[0] for v in ("triton_fa2", "sdpa_flash"))
            assert (a["flop_per_s"] > b["flop_per_s"]) == (a["ms"] < b["ms"]), (a["range"], b["range"])
            pairs += 1
        by_rate = list(g.sort_values("flop_per_s", ascending=False)["variant"])
        assert by_rate == list(g.sort_values("ms")["variant"])
    assert pairs == 8
    # the backward that is 2x slower than SDPA flash's counts 2.2x the model's FLOPs: ringed, and on counted
    # FLOP/s it would have ranked above it
    bwd = pts[(pts["pass"] == "backward") & (pts["N"] == 4096) & ~pts["causal"].astype(bool)].set_index("variant")
    assert bwd.loc["triton_fa2", "counted_over_model"] > 2.1 and bwd.loc["sdpa_flash", "counted_over_model"] < 1.1
    assert bwd.loc["triton_fa2", "counted_flop_per_s"] > bwd.loc["sdpa_flash", "counted_flop_per_s"]
    assert bwd.loc["triton_fa2", "flop_per_s"] < bwd.loc["sdpa_flash", "flop_per_s"]


def test_the_figure_rings_the_excess_and_says_what_it_plots(triton):
    work, man, rng = triton
    pts = roofline.roofline_points(rng)
    fig = figures.roofline(pts, roofline.ceilings(work, man, pts), "t")
    assert fig.layout.yaxis.title.text.startswith("useful performance")
    ringed = [t for t in fig.data if t.mode == "markers" and isinstance(t.marker.line.width, tuple)
              and max(t.marker.line.width) > 1]
    assert {t.name for t in ringed} == {"triton_fa2", "flash_mma", "sdpa_flash"}  # causal N=1024 tiles too
    assert "ringed" in fig.layout.legend.title.text
    hover = [h for t in fig.data if t.name == "triton_fa2" and t.hovertext for h in t.hovertext]
    assert any("counted:" in h and "2.21× the model's FLOPs; ringed" in h for h in hover)


def test_the_excess_is_explained_by_computation(triton):
    _, _, rng = triton
    fc = roofline.flop_check(rng).set_index("range")
    bwd = fc.loc["attn:triton_fa2:backward:B=4,H=16,N=4096,D=128,dtype=float16,causal=0"]
    assert "tensor-core FLOPs 2.20× the model" in bwd["explanation"]
    assert "5.47× the FLOPs of the forward pass" in bwd["explanation"] and "credits 2.50×" in bwd["explanation"]
    assert "recomputed forward products" not in bwd["explanation"]  # the old guess: the model includes them
    causal = fc.loc["attn:sdpa_flash:forward:B=4,H=16,N=1024,D=128,dtype=float16,causal=1"]
    assert "whole tiles of 128 along the mask's edge" in causal["explanation"]


def test_one_tensor_peak_per_gpu_and_shares_at_each_ranges_clock(triton):
    work, man, rng = triton
    gwork, gman, grng = _load("gemm-example")
    peaks = []
    for w, m, r in ((work, man, rng), (gwork, gman, grng)):
        ceil = roofline.ceilings(w, m, roofline.roofline_points(r)).set_index("name")
        peaks.append(ceil.loc["Tensor FP16 dense", "value"])
        assert "1.980 GHz" in ceil.loc["Tensor FP16 dense", "source"]
    assert peaks[0] == pytest.approx(peaks[1], rel=1e-6)
    assert peaks[0] == pytest.approx(4096 * 132 * 1.98e9, rel=1e-3)  # Hopper: 4,096 dense FLOP per SM per cycle
    assert work["hz_sm"].max() < 1.98e9  # ... and no launch ran at that clock
    pts = roofline.roofline_points(rng)
    near = roofline.nearest_roof(pts, roofline.ceilings(work, man, pts)).set_index("range")
    r = near.loc["attn:sdpa_flash:forward:B=4,H=16,N=4096,D=128,dtype=float16,causal=0"]
    assert r["nearest"] == "Tensor FP16 dense peak"
    assert r["fraction"] == pytest.approx(r["flop_per_s"] / (4096 * 132 * r["hz_sm"]), rel=1e-3)


def test_ceilings_match_the_dtype():
    work = pd.DataFrame({"hz_sm": [1.9e9], "peak_tensor": [1e15]})
    man = {"ceilings": {"gemm_fp16": {"flop_per_s": 7e14, "n": 8192}, "gemm_bf16": {"flop_per_s": 7.1e14, "n": 8192},
                        "gemm_fp32": {"flop_per_s": 5e13, "n": 4096}}}
    names = set(roofline.ceilings(work, man, pd.DataFrame({"dtype": ["float16"]}))["name"])
    assert {"measured cuBLAS FP16 GEMM", "measured cuBLAS FP32 GEMM"} <= names
    assert "measured cuBLAS BF16 GEMM" not in names
    assert "measured cuBLAS BF16 GEMM" in set(roofline.ceilings(work, man, None)["name"])


def test_caveats_say_how_caches_were_treated_and_what_l1_counts():
    text = " ".join(roofline.caveats({"origin": "captured", "ncu": {"clock_control": "none"}}))
    assert "Caches flushed before every kernel" in text and "TMA" in text
    assert "not flushed" in " ".join(roofline.caveats({"origin": "imported", "ncu": {"cache_control": "none"}}))
    assert "not recorded" in " ".join(roofline.caveats({"origin": "imported", "ncu": {}}))


def test_the_performance_summary_names_whose_is_the_runs_highest_throughput():
    from nsightlab.analysis import perf

    rows = []
    for cfg, n in (("a", 1024), ("b", 2048), ("c", 4096)):
        for impl, ms, tf in (("cudnn", 1.0, 700.0), ("mine", 1.1 if cfg != "c" else 0.9, 715.0 if cfg == "c" else 600.0)):
            rows.append({"suite": "s", "config": cfg, "B": 1, "H": 1, "Hkv": 1, "N": n, "Nk": n, "D": 128,
                         "causal": False, "dtype": "float16", "impl": impl, "pass": "forward", "options": "",
                         "status": "ok", "ms": ms, "tflops": tf})
    df = pd.DataFrame(rows)
    for c in ("cudnn", "mine"):
        df.loc[(df["impl"] == c) & (df["config"] == "b"), "tflops"] = 650.0 if c == "cudnn" else 600.0
    out = perf.findings(df, "cudnn")
    assert out[0].startswith("**cudnn** is the fastest in 2 of 3 configurations (its highest: 700 TFLOP/s forward)")
    assert out[1] == "The highest throughput of the run: forward 715 TFLOP/s by **mine** (c)."


def _points(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{"range": f"r{i}", "variant": r.pop("variant"), "pass": "forward", **r} for i, r in enumerate(rows)])


def test_roofline_views_split_a_cross_product_and_keep_a_sweep_of_several_grids_in_one_figure():
    # a cross product: D in the rows, dtype splits the figures (2 of them)
    cross = _points([{"variant": v, "N": n, "D": d, "dtype": t} for v in ("a", "b") for n in (1024, 4096)
                     for d in (64, 128) for t in ("float16", "bfloat16")])
    views = roofline.views(cross, "N")
    assert [(title, row, len(sel)) for title, sel, row in views] == [("dtype=bfloat16", "D", 8), ("dtype=float16", "D", 8)]
    # two grids (a decode sweep's): Nk x N at one Hkv and dtype, then Hkv x dtype at one Nk: splitting by the
    # fields besides D would give 9 figures of one to three ranges each
    grids = _points([{"variant": v, "N": n, "D": 128, "Hkv": 8, "Nk": nk, "dtype": "float16"}
                     for v in ("a", "b") for n in (1, 16) for nk in (1024, 8192, 131072)]
                    + [{"variant": "a", "N": 4, "D": d, "Hkv": h, "Nk": 16384, "dtype": t}
                       for d in (64, 128) for h in (1, 8, 32) for t in ("float16", "bfloat16")])
    # a full cross product of more than 4 figures stays split: each figure's points share their fields
    big = _points([{"variant": "a", "N": n, "D": 128, "Nk": nk, "dtype": t, "causal": c} for n in (1, 16)
                   for nk in (1024, 2048, 4096, 8192, 131072) for t in ("float16", "bfloat16") for c in (False, True)])
    assert [(row, len(sel)) for _, sel, row in roofline.views(big, "N")] == [("dtype", 4)] * 10
    assert len(roofline.views(grids, "N", max_figures=100)) == 9
    (title, sel, row), = roofline.views(grids, "N")
    assert row == "D" and len(sel) == len(grids)
    assert title == "every range (Hkv, Nk, dtype in each point's hover)"


def test_a_range_above_every_counted_pipe_gets_no_nearest_roof():
    """The FP8 kernel's useful FLOP/s are 10x the FP32 peak, the only pipe its counters saw (the capture counts the
    fp16 tensor path, not the FP8 one): the page says so instead of naming FP32 its nearest roof."""
    path = ROOT / "profiles" / "nvidia-h200" / "fp8"
    man = captures.load_manifest(path)
    work = counters.kernel_work(read.load_ncu(path, man))
    rng = counters.attach_model(counters.per_range(work, by_kernel_if_no_ranges=True), captures.cases(man))
    pts = roofline.roofline_points(rng)
    ceil = roofline.ceilings(work, man, pts)
    near = roofline.nearest_roof(pts, ceil)
    fp8 = near[near["variant"] == "flash_wgmma_fp8"]
    assert len(fp8) and (fp8["fraction"] > roofline.UNCOUNTED_PATH).all()
    lines = roofline.findings(pts, ceil)
    nearest = next(x for x in lines if x.startswith("Nearest roof"))
    assert "flash_wgmma_fp8" not in nearest and re.search(r"flash_wgmma \d+% of Tensor FP16 dense peak", nearest)
    # the capture measured the FP8 wgmma ceiling: drawn for the FP8 kernel's uncounted work, and read against it
    e4m3 = ceil.set_index("name").loc["measured wgmma FP8 e4m3", "value"]
    assert e4m3 == man["ceilings"]["wgmma_e4m3"]["flop_per_s"]
    assert roofline.uncounted_tensor_work(pts[pts["variant"] == "flash_wgmma_fp8"]).all()
    assert not roofline.uncounted_tensor_work(pts[pts["variant"] != "flash_wgmma_fp8"]).any()
    line = next(x for x in lines if x.startswith("flash_wgmma_fp8: "))
    share = fp8["flop_per_s"].max() / e4m3
    assert "not count" in line and line.endswith(f"ceiling drawn here ({e4m3 / 1e12:,.0f} TFLOP/s): {share:.0%} of it.")
