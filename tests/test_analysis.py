"""The analysis modules on synthetic frames with known answers (no GPU, no reports): counted work
from either metric form, missing metrics, foreign range names, work models as columns, the roofline,
the FLOP check, the L2 onsets, timelines, option studies, the device page and the figures' styles."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsightlab.analysis import counters as C
from nsightlab.analysis import device, l2, options, perf, roofline, timeline
from nsightlab.core import metrics as M
from nsightlab.core.ranges import RangeSchema, decode
from nsightlab.render import figures
from nsightlab.render.page import sweep_field
from nsightlab.store.read import infer_schema

SCHEMA = RangeSchema("t", ("variant", "pass"), fields={"B": "int", "N": "int", "D": "int"},
                     choices={"pass": ("forward", "backward")})
CLOCKS = {M.CLOCKS["sm"]: 2e9, M.CLOCKS["smsp"]: 2e9, M.CLOCKS["dram"]: 3e9, M.CLOCKS["lts"]: 2e9, M.CLOCKS["l1tex"]: 2e9}
PEAKS = {M.PEAKS["tensor_fp16"]: 500_000.0, M.PEAKS["ffma"]: 16896.0, M.PEAKS["hfma"]: 16896.0,
         M.PEAKS["dram_bytes"]: 1500.0, M.PEAKS["lts2xbar"]: 160.0, M.PEAKS["l1_writeback"]: 132.0}


def launch(rng="t:k:forward:B=1,N=1024,D=64", kernel="k_main", ns=1e6, tensor=0.0, ffma=0.0, fadd=0.0, fmul=0.0,
           hfma=0.0, dram=0.0, l2_cycles=0.0, l1_cycles=0.0, sectors=100.0, hit=50.0, drop=(), **extra):
    """One parsed Nsight Compute row in this project's own metric form (``.sum`` totals)."""
    row = {**decode(rng, (SCHEMA,)), "domain": "", "kernel": kernel, "launch": 0}
    row.update({M.WORK["tensor_fp16"]: tensor, M.WORK["ffma"]: ffma, M.WORK["fadd"]: fadd, M.WORK["fmul"]: fmul,
                M.WORK["hfma"]: hfma, M.TRAFFIC["dram_bytes"]: dram, M.TRAFFIC["lts2xbar"]: l2_cycles,
                M.TRAFFIC["l1_writeback"]: l1_cycles, M.TRAFFIC["lts_sectors"]: sectors,
                M.TRAFFIC["lts_hit_rate"]: hit, M.LAUNCH["duration"]: ns, M.LAUNCH["occupancy"]: 25.0,
                M.LAUNCH["registers"]: 96, **CLOCKS, **PEAKS, **extra})
    for name in drop:
        row.pop(name, None)
    return row


def work_of(*rows):
    return C.kernel_work(pd.DataFrame(list(rows)))


# --------------------------------------------------------------------------- counted work


def test_peaks_are_nsight_peaks_times_recorded_clocks():
    w = work_of(launch())
    assert w["peak_tensor"].iloc[0] == pytest.approx(500_000 * 2e9 / 2)  # dense: half the tensor path's (2:4 sparse) peak
    assert w["peak_tensor_path"].iloc[0] == pytest.approx(500_000 * 2e9)
    assert w["peak_fp32"].iloc[0] == pytest.approx(16896 * 2 * 2e9)
    assert w["peak_DRAM"].iloc[0] == pytest.approx(1500 * 3e9)
    assert w["peak_L2"].iloc[0] == pytest.approx(160 * 32 * 2e9)
    assert w["peak_L1"].iloc[0] == pytest.approx(132 * 128 * 2e9)


def test_rate_forms_of_a_full_report_give_the_same_quantities():
    """A --set full / roofline-section report: .per_cycle_elapsed and .per_second rates, derived__
    byte rates and peaks, clocks as .per_second; no .sum totals for the instruction counters."""
    ns, hz = 2e6, 1.8e9
    seconds, cycles = ns * 1e-9, hz * ns * 1e-9
    total = launch(ns=ns, tensor=4e12, ffma=3e9, fadd=1e9, fmul=2e9, dram=6e8, l2_cycles=2.7e8, l1_cycles=2e6,
                   **{M.CLOCKS["smsp"]: hz, M.CLOCKS["sm"]: hz, M.CLOCKS["lts"]: hz, M.CLOCKS["l1tex"]: hz})
    rate = {k: v for k, v in total.items() if "__" not in k}
    rate.update({M.LAUNCH["duration"]: ns, M.CLOCKS["smsp"]: hz, M.CLOCKS["sm"]: hz, M.CLOCKS["lts"]: hz,
                 M.CLOCKS["l1tex"]: hz, M.CLOCKS["dram"]: 3e9,
                 M.WORK["ffma"] + ".per_cycle_elapsed": 3e9 / cycles,
                 M.WORK["fadd"] + ".per_cycle_elapsed": 1e9 / cycles,
                 "derived__smsp__sass_thread_inst_executed_op_fmul_pred_on_x1": 2e9 / cycles,
                 M.WORK["tensor_fp16"] + ".per_cycle_elapsed": 4e12 / cycles,
                 "dram__bytes.sum.per_second": 6e8 / seconds,
                 "derived__lts__lts2xbar_bytes.sum.per_second": 2.7e8 * 32 / seconds,
                 "derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.per_second": 2e6 * 128 / seconds,
                 "derived__sm__sass_thread_inst_executed_op_ffma_pred_on_x2": 33792.0,
                 "derived__lts__lts2xbar_bytes.sum.peak_sustained": 160 * 32,
                 M.PEAKS["tensor_fp16"]: 500_000.0, M.PEAKS["dram_bytes"]: 1500.0,
                 M.TRAFFIC["lts_sectors"]: 100.0, M.TRAFFIC["lts_hit_rate"]: 50.0})
    a, b = work_of(total).iloc[0], work_of(rate).iloc[0]
    for q in ("flop", "flop_fp32", "flop_tensor", "bytes_DRAM", "bytes_L2", "bytes_L1", "peak_fp32", "peak_L2",
              "peak_tensor", "seconds"):
        assert b[q] == pytest.approx(a[q], rel=1e-9), q
    assert b["flop"] == pytest.approx(2 * 3e9 + 1e9 + 2e9 + 4e12)
    used = work_of(rate).attrs["used"]
    assert any("per_cycle_elapsed" in r for r in used["inst_ffma"])
    assert any("derived__" in r for r in used["bytes_L2"])


def test_metric_lists_say_what_they_can_give():
    got = C.available(M.metric_names())
    assert got["inst_ffma"] and got["bytes_L2"] and got["peak_tensor"] and got["l2_hit_rate"]
    assert got["inst_hadd"] is None
    full = ["gpu__time_duration.sum", "smsp__cycles_elapsed.avg.per_second",
            "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed"]
    assert C.available(full)["inst_ffma"].endswith("@cycles_smsp")
    assert C.available(["gpu__time_duration.sum"])["inst_ffma"] is None


def test_a_kernel_with_only_fmul_counters_gets_its_flops_from_fmul():
    elementwise = launch(rng="scale:fwd M=4096", kernel="scale_kernel", fmul=4096.0,
                         drop=[M.WORK[k] for k in ("ffma", "fadd", "hfma", "tensor_fp16")])
    w = work_of(elementwise)
    assert w["flop"].iloc[0] == 4096 and w["flop_fp32"].iloc[0] == 4096
    assert w["flop_counters"].iloc[0] == "fmul"
    assert np.isnan(w["flop_tensor"].iloc[0])  # not counted is not zero
    assert "inst_ffma" in w.attrs["missing"]


def test_no_flop_counter_at_all_is_not_applicable_and_names_the_metrics():
    row = launch(drop=list(M.WORK.values()))
    rng = C.per_range(work_of(row))
    assert rng["flop"].isna().all()
    with pytest.raises(C.NotApplicable, match="missing metrics: FLOPs .*smsp__sass_thread_inst_executed_op_ffma"):
        roofline.roofline_points(rng)


def test_mixed_availability_per_launch():
    a = launch(ffma=10.0, kernel="a")
    b = launch(fmul=3.0, kernel="b", drop=[M.WORK["ffma"]])
    w = work_of(a, b)
    assert list(w["flop_fp32"]) == [20.0, 3.0]
    assert w["flop_counters"].iloc[1] == "fadd fmul hfma tensor_fp16"


def test_empty_input_is_not_applicable():
    with pytest.raises(C.NotApplicable):
        C.kernel_work(pd.DataFrame())


# --------------------------------------------------------------------------- ranges, models


def test_per_range_sums_kernels_weights_hit_rate_and_finds_the_main_kernel():
    a = launch(tensor=100, dram=10, kernel="helper", ns=3e6)
    b = launch(tensor=300, dram=30, kernel="main_thing", ns=1e6, sectors=300.0, hit=100.0)
    r = C.per_range(work_of(a, b))
    assert len(r) == 1 and r["kernels"].iloc[0] == 2
    assert r["flop"].iloc[0] == 400 and r["bytes_DRAM"].iloc[0] == 40
    assert r["l2_hit_rate"].iloc[0] == pytest.approx((50 * 100 + 100 * 300) / 400)
    assert r["main_kernel"].iloc[0] == "helper" and r["main_share"].iloc[0] == pytest.approx(0.75)


def test_foreign_range_names_are_grouped_and_decoded_generically():
    rows = [launch(rng=f"gemm:fwd M={m} K=1024", tensor=2.0 * m * m * 1024, kernel="sm90_xmma_gemm") for m in (512, 1024, 2048)]
    rows.append(launch(rng="", kernel="warmup"))  # outside every range
    rng = C.per_range(work_of(*rows))
    assert list(rng["variant"]) == ["gemm:fwd"] * 3 and list(rng["M"]) == [512, 1024, 2048]
    assert rng.attrs["outside"] == 1
    assert sweep_field(rng) == "M"
    rng = C.attach_model(rng, None)
    assert rng["model_flop"].isna().all() and (rng["model_source"] == "").all()
    with pytest.raises(C.NotApplicable, match="no work model"):
        roofline.flop_check(rng)


def test_no_ranges_at_all():
    w = work_of(launch(rng="", kernel="a"), launch(rng="", kernel="b"))
    with pytest.raises(C.NotApplicable, match="no kernel launch ran inside an NVTX range"):
        C.per_range(w)
    by_kernel = C.per_range(w, by_kernel_if_no_ranges=True)
    assert sorted(by_kernel["variant"]) == ["a", "b"]


def _cases(rng, **traits):
    rows = []
    for _, r in rng.iterrows():
        f = 4.0 * r["B"] * r["N"] ** 2 * r["D"] * (2.5 if r["pass"] == "backward" else 1)
        rows.append({"range": r["range"], "impl": r["variant"], "pass": r["pass"], "model_flop": f,
                     "model_bytes": 1e6, "model_working_set": 1e6, "model_source": "test model",
                     **{f"trait_{k}": v for k, v in traits.items()}})
    return pd.DataFrame(rows)


def test_flop_check_flags_and_explains_from_columns_and_traits():
    model = 4.0 * 1 * 1024**2 * 64
    for tensor, ffma, expect in ((model * 1.05, 0, None), (0, model, "counted > model"), (model / 2, 0, "counted < model")):
        rng = C.per_range(work_of(launch(tensor=tensor, ffma=ffma)))
        fc = roofline.flop_check(C.attach_model(rng, _cases(rng, materializes=True)))
        r = fc.iloc[0]
        if expect is None:
            assert not r["flag"] and r["counted_over_model"] == pytest.approx(1.05)
        else:
            assert r["flag"] and expect in r["explanation"]
    ffma_only = C.attach_model(rng := C.per_range(work_of(launch(ffma=model))), _cases(rng, materializes=True))
    assert "materializes" in roofline.flop_check(ffma_only)["explanation"].iloc[0]
    plain = C.attach_model(rng, _cases(rng, materializes=False))
    assert "CUDA-core" in roofline.flop_check(plain)["explanation"].iloc[0]
    odd = C.per_range(work_of(launch(rng="t:k:backward:B=1,N=1000,D=64", ffma=4.0 * 1000**2 * 64 * 2.5)))
    text = roofline.flop_check(C.attach_model(odd, _cases(odd)))["explanation"].iloc[0]
    assert "N=1000 is not a multiple of 64" in text and "backward" in text


def test_a_kernel_at_the_ridge_lands_on_both_ceilings():
    peak_flops, peak_bw = 500_000 * 2e9, 1500 * 3e9
    ridge = peak_flops / peak_bw
    seconds = 1e-3
    flop = peak_flops * seconds
    pts = roofline.roofline_points(C.per_range(work_of(launch(tensor=flop, dram=flop / ridge, ns=seconds * 1e9))))
    d = pts[pts["level"] == "DRAM"].iloc[0]
    assert d["intensity"] == pytest.approx(ridge)
    assert d["flop_per_s"] == pytest.approx(float(roofline.attainable(d["intensity"], peak_flops, peak_bw)))
    ceil = roofline.ceilings(work_of(launch()), {"ceilings": {"copy_d2d": {"bytes_per_s": 4e12}}})
    assert "measured D2D copy" in set(ceil["name"]) and "Tensor FP16 dense" in set(ceil["name"])


# --------------------------------------------------------------------------- L2


def test_modeled_onset_interpolates_log_log_between_sweep_points():
    n = np.array([256, 512, 1024, 2048, 4096])
    ws = 3.0 * n.astype(float) ** 2  # a power law: log-log interpolation is exact
    l2_bytes = 3.0 * 1500.0**2
    on, note = l2.modeled_onset(n, ws, l2_bytes)
    assert on == pytest.approx(1500.0) and "between 1024 and 2048" in note
    assert np.isnan(l2.modeled_onset(n, ws, 1e12)[0])
    assert np.isnan(l2.modeled_onset(n, ws, 1.0)[0])
    assert "no modeled working set" in l2.modeled_onset(n, [np.nan] * 5, l2_bytes)[1]


def _curve(hits, dram=None):
    d = pd.DataFrame({"N": [256, 512, 1024, 2048, 4096, 8192][: len(hits)], "l2_hit_rate": hits})
    if dram is not None:
        d["dram_over_compulsory"] = dram
    return d


def test_measured_onset_rule():
    falling = l2.measured_onset(_curve([80, 79, 77, 60, 40, 30]))
    assert falling.value == 2048 and "falls" in falling.reason
    assert bool(falling.evidence.set_index("N").loc[2048, "onset"])
    assert falling.evidence["running_max_before"].iloc[3] == 80
    for flat_or_rising in ([50, 60, 70, 80, 90, 95], [70, 70, 71, 70, 70, 71], [10, 50, 50, 50, 50, 50]):
        assert np.isnan(l2.measured_onset(_curve(flat_or_rising)).value), flat_or_rising
    assert np.isnan(l2.measured_onset(_curve([80, 80, 60, 80, 80, 80])).value)  # a dip that recovers
    # a drop that then wobbles upwards counts only if DRAM per compulsory byte rises with it
    wobble = [80, 80, 60, 65, 62, 66]
    assert np.isnan(l2.measured_onset(_curve(wobble)).value)
    assert l2.measured_onset(_curve(wobble, [1, 1, 5, 6, 7, 8])).value == 1024
    assert np.isnan(l2.measured_onset(_curve([80, 40])).value)  # too few points


def test_onset_table_and_traffic_with_and_without_a_model():
    rows = [launch(rng=f"t:mat:forward:B=1,N={n},D=64", dram=d, hit=h) for n, d, h in
            ((256, 1e6, 80), (512, 2e6, 79), (1024, 8e6, 60), (2048, 64e6, 40))]
    rng = C.per_range(work_of(*rows))
    tr = l2.l2_traffic(C.attach_model(rng, None), 60 * 2**20)
    assert tr["dram_over_compulsory"].isna().all()
    t = l2.onset_table(tr, 60 * 2**20)
    assert t["measured_onset"].iloc[0] == 1024 and t["modeled_note"].iloc[0] == "no work model"
    cs = _cases(rng).assign(model_working_set=lambda d: 4.0 * 8 * d["range"].map(rng.set_index("range")["N"]) ** 2)
    t = l2.onset_table(l2.l2_traffic(C.attach_model(rng, cs), 60 * 2**20), 60 * 2**20)
    assert 1024 < t["modeled_onset"].iloc[0] < 2048


# --------------------------------------------------------------------------- timelines


def _nsys(names, kernel_spans):
    ranges = pd.DataFrame([{"start": 0, "end": 100_000, "tid": 1, "ms": 0.1, **decode(n, (SCHEMA,))} for n in names])
    kernels = pd.DataFrame([{"start": s, "end": e, "range_id": rid, "kernel": "k", "range": names[rid]}
                            for s, e, rid in kernel_spans])
    return kernels, ranges


def test_range_timing_gaps_speedup_and_flop_sources():
    names = ["t:ref:forward:B=1,N=64,D=64", "t:slow:forward:B=1,N=64,D=64"]
    kernels, ranges = _nsys(names, [(10_000, 20_000, 0), (30_000, 40_000, 0), (50_000, 54_000, 1)])
    rt = timeline.range_timing(kernels, ranges)
    assert rt.loc[0, "gpu_ms"] == pytest.approx(0.02) and rt.loc[0, "gap_ms"] == pytest.approx(0.01)
    sp = timeline.speedup_vs(timeline.timing_summary(rt), "ref")
    assert sp.set_index("variant").loc["slow", "speedup"] == pytest.approx(0.02 / 0.004)
    assert (sp["flop_source"] == "none").all() and sp["tflops"].isna().all()
    assert timeline.pick_reference(sp) == "slow"  # the fastest in most configurations
    cases = pd.DataFrame({"range": [names[0]], "model_flop": [2e9], "model_source": ["test model"]})
    counted = pd.DataFrame({"range": [names[1]], "flop": [4e8]})
    s = timeline.timing_summary(rt, cases, counted).set_index("variant")
    assert s.loc["ref", "flop_source"] == "work model: test model" and s.loc["ref", "tflops"] == pytest.approx(100.0)
    assert s.loc["slow", "flop_source"].startswith("hardware counters") and s.loc["slow", "tflops"] == pytest.approx(100.0)
    with pytest.raises(C.NotApplicable):
        timeline.range_timing(kernels.assign(range_id=-1), ranges)


def test_overlapping_kernels_count_once_in_a_ranges_gpu_time():
    """A merge kernel launched dependent on its split kernel (programmatic dependent launch) starts 2 us before
    the split kernel ends: the range's GPU time is the 36 us the GPU was busy, not 38; a third kernel after a
    4 us gap, and one inside the first, leave the gap at 4 us."""
    names = ["t:ours:forward:B=1,N=64,D=64"]
    kernels, ranges = _nsys(names, [(0, 30_000, 0), (5_000, 10_000, 0), (28_000, 36_000, 0), (40_000, 41_000, 0)])
    rt = timeline.range_timing(kernels, ranges)
    assert rt.loc[0, "gpu_ms"] == pytest.approx(0.037) and rt.loc[0, "gap_ms"] == pytest.approx(0.004)
    assert rt.loc[0, "span_ms"] == pytest.approx(0.041) and rt.loc[0, "max_gap_us"] == pytest.approx(4.0)
    busy, gaps = timeline.busy_and_gaps(np.array([0, 10]), np.array([5, 12]))
    assert busy == 7 and list(gaps) == [5]
    assert timeline.busy_ms(kernels).to_dict() == {0: pytest.approx(0.037)}


# --------------------------------------------------------------------------- option study


def test_option_study_uses_the_largest_time_share_not_kernel_names():
    rows = []
    for bs, main_ns in ((4, 9e6), (8, 5e6), (16, 3e6)):
        name = f"t:k:forward:B=1,N=1024,D=64,block_size={bs},tile=1"
        rows.append(launch(rng=name, kernel="the_forward_kernel", ns=1e6, registers=40))
        rows.append(launch(rng=name, kernel="softmax_helper", ns=main_ns, **{M.LAUNCH["registers"]: 64 + bs}))
    rows.append(launch(rng="t:k:forward:B=1,N=2048,D=64,block_size=4,tile=1", kernel="x"))  # alone: no study
    st = options.option_study(work_of(*rows))
    assert list(st["option"]) == ["block_size=4", "block_size=8", "block_size=16"]
    assert set(st["main_kernel"]) == {"softmax_helper"}
    assert list(st["registers"]) == [68, 72, 80]
    assert st["ms"].iloc[0] == pytest.approx(10.0) and st["main_share"].iloc[0] == pytest.approx(0.9)
    assert "N=1024" in st["study"].iloc[0]
    with pytest.raises(C.NotApplicable, match="no option study"):
        options.option_study(work_of(launch()))


def test_a_ladder_of_settings_reads_against_the_other_implementations_of_its_case():
    rows = []
    for pipe, ns in (("a", 4e6), ("b", 2e6)):
        for n in (1024, 2048):
            rows.append(launch(rng=f"t:mine:forward:B=1,N={n},D=64,pipeline={pipe}", kernel="k", ns=ns * n / 1024))
    rows.append(launch(rng="t:lib:forward:B=1,N=1024,D=64", kernel="lk", ns=3e6))  # the case of one study only
    rows.append(launch(rng="t:lib:forward:B=1,N=1024,D=128", kernel="lk", ns=1e6))  # another case: not beside it
    rows.append(launch(rng="t:old:forward:B=1,N=2048,D=64,tile=8", kernel="ok", ns=8e6))  # its own options differ
    w = work_of(*rows)
    st = options.option_study(w)
    o = options.beside_others(w, st).set_index(["study", "other"])
    assert sorted(o.index) == [("N=1024", "lib"), ("N=2048", "old")]
    lib = o.loc[("N=1024", "lib")]
    assert lib["best_option"] == "pipeline=b" and lib["best_ms"] == pytest.approx(2.0)
    assert lib["other_ms"] == pytest.approx(3.0) and lib["speed"] == pytest.approx(1.5)
    assert o.loc[("N=2048", "old"), "speed"] == pytest.approx(2.0)
    assert options.ladder_findings(options.beside_others(w, st))[0] == \
        "**mine** forward, its best setting in each study: 1.50× lib's speed (> 1: faster; 1 study)."
    fig = figures.option_ladder(st, options.beside_others(w, st), "mine", "forward", figures.style_for(["mine"]))
    names = [t.name for t in fig.data]
    assert names.count("mine") == 2 and {"lib", "old"} <= set(names)
    assert {t.line.color for t in fig.data if t.name == "lib"} == {figures.impl_style("lib")["color"]}
    assert options.beside_others(work_of(*rows[:4]), options.option_study(work_of(*rows[:4]))).empty
    assert figures.is_empty(figures.option_ladder(st, options.beside_others(w, st), "mine", "backward"))


def test_a_setting_reads_the_same_in_every_study_and_each_panel_shows_its_own():
    """One study varies a second option (tail, at D=128 only): every study of the implementation labels its
    settings with both, and the ladder's panels show the settings their study ran, no empty slots."""
    rows = [launch(rng=f"t:mine:forward:B=1,N=1024,D={d},pipeline={p},tail=auto", kernel="k", ns=ns)
            for d in (64, 128) for p, ns in (("a", 2e6), ("b", 1e6))]
    rows.append(launch(rng="t:mine:forward:B=1,N=1024,D=128,pipeline=b,tail=none", kernel="k", ns=1.1e6))
    rows.append(launch(rng="t:lib:forward:B=1,N=1024,D=64", kernel="lk", ns=3e6))
    rows.append(launch(rng="t:lib:forward:B=1,N=1024,D=128", kernel="lk", ns=3e6))
    w = work_of(*rows)
    st = options.option_study(w)
    by = st.groupby("study")["option"].apply(list).to_dict()
    assert by == {"D=64": ["pipeline=a;tail=auto", "pipeline=b;tail=auto"],
                  "D=128": ["pipeline=a;tail=auto", "pipeline=b;tail=auto", "pipeline=b;tail=none"]}
    fig = figures.option_ladder(st, options.beside_others(w, st), "mine", "forward", figures.style_for(["mine"]))
    bars = {t.xaxis: list(t.x) for t in fig.data if t.type == "bar"}
    assert sorted(map(len, bars.values())) == [2, 3] and all(pd.notna(t.y).all() for t in fig.data if t.type == "bar")


# --------------------------------------------------------------------------- device, figures, schemas


def test_working_set_table_from_cases():
    cs = pd.DataFrame([{"range": f"r{n}{p}", "impl": "mat", "pass": p, "N": n, "D": 64, "model_flop": 1.0,
                        "model_working_set": 4.0 * n * n * (2 if p == "backward" else 1), "model_source": "m"}
                       for n in (1024, 2048, 4096) for p in ("forward", "backward")])
    ws = device.working_set_table(cs, 4.0 * 3000**2)
    assert list(ws["variant"]) == ["mat", "mat"] and "N=4096" in ws
    fwd = ws[ws["pass"] == "forward"].iloc[0]
    assert fwd["N=1024"] == pytest.approx(4.0 * 1024**2 / 2**20)
    assert fwd["outgrows L2 at N"] == pytest.approx(3000.0)
    with pytest.raises(C.NotApplicable, match="no modeled working set"):
        device.working_set_table(cs.assign(model_working_set=np.nan), 1.0)
    assert "SMs" in set(device.device_table({"gpu": {"name": "X", "sm_count": 10}})["property"])


def test_style_is_fixed_per_implementation():
    full = ["naive", "tiled", "flash", "lib"]
    a, b = figures.style_for(full), figures.style_for(full)
    assert a == b and len({s["color"] for s in a.values()}) == 4
    backward_only = figures._style(a, ["flash", "lib"])
    assert backward_only["flash"] == a["flash"]
    fig = figures.roofline(pd.DataFrame(columns=["intensity", "flop_per_s", "variant", "level"]), pd.DataFrame(), "t")
    assert "no range" in fig.layout.annotations[0].text


def test_schema_inferred_from_schema_1_case_names():
    names = ["fk:naive:forward:B=1,N=256,D=64,dtype=float16", "fk:mma:backward:B=1,N=512,D=64,dtype=float16,tile=4"]
    s = infer_schema(names)
    row = s.parse(names[1])
    assert row["variant"] == "mma" and row["pass"] == "backward" and row["N"] == 512 and row["options"] == "tile=4"
    assert infer_schema(["gemm:fwd M=4096"]) is None


def test_analysis_modules_import_neither_torch_nor_the_kernels():
    code = ("import sys; import nsightlab.analysis.counters, nsightlab.analysis.roofline, nsightlab.analysis.l2, nsightlab.analysis.timeline, "
            "nsightlab.analysis.options, nsightlab.analysis.device, nsightlab.render.figures, nsightlab.render.page, nsightlab.render.report; "
            "bad = [m for m in ('torch', 'flash_kernels') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- real reports in the roofline sections' form


ROOT = Path(__file__).resolve().parent.parent
FOREIGN = ROOT / "profiles" / "nvidia-h200" / "foreign-example" / "ncu.ncu-rep.xz"
FULL = ROOT / "profiles" / "nvidia-h200" / "flash-mma-bwd-full" / "ncu.ncu-rep.xz"


@pytest.mark.skipif(not FOREIGN.exists(), reason="foreign test data not present")
def test_a_foreign_report_in_rate_form_counts_exact_flops():
    """A colleague's ncu report with Nsight's roofline sections (no .sum instruction totals): the GEMM's
    counted FLOPs are 2·M·N·K, the elementwise multiply's one FMUL per element."""
    from nsightlab.parse import ncu

    w = C.kernel_work(ncu.ncu_frame(FOREIGN))
    assert any("per_cycle_elapsed" in r for r in w.attrs["used"]["inst_fmul"])
    r = C.per_range(w).set_index("range")
    assert r.loc["gemm:fwd M=2048 N=2048 K=2048", "flop"] == pytest.approx(2 * 2048**3, rel=1e-6)
    assert r.loc["elementwise mul n=4194304", "flop"] == pytest.approx(4194304, rel=1e-6)
    assert r.loc["gemm:fwd M=2048 N=2048 K=2048", "bytes_L2"] > 0 and r["l2_hit_rate"].notna().all()
    assert r.attrs["outside"] > 0


@pytest.mark.skipif(not FULL.exists(), reason="--set full report not present")
def test_a_set_full_report_gives_the_roofline_quantities():
    from nsightlab.parse import ncu

    w = C.kernel_work(ncu.ncu_frame(FULL)).iloc[0]
    assert w["flop_tensor"] == pytest.approx(4 * 4 * 16 * 4096**2 * 128 * 2.5, rel=1e-6)  # B=4 H=16 N=4096 D=128 backward
    assert w["bytes_DRAM"] == pytest.approx(w["dram_read"] + w["dram_write"], rel=1e-3)
    assert w["peak_L2"] > 0 and w["peak_tensor"] > 0 and w["flop_fp32"] > 0


def test_sources_are_named_once_with_what_each_adds():
    s = pd.Series(["A; B"] * 3 + ["A; B; C"] * 2 + [""])
    assert C.sources_text(s) == "A; B, for 5 cases (2 of them add: C)"
    assert C.sources_text(pd.Series(["X"] * 4), "range") == "X (4 ranges)"
    assert C.sources_text(pd.Series(["X", "Y", "Y"])) == "Y (2 cases); X (1 case)"
    assert C.sources_text(pd.Series(["", ""])) == ""


def test_host_bound_rows_are_those_whose_host_time_exceeds_their_gpu_time():
    from nsightlab.analysis import perf

    df = pd.DataFrame({"impl": ["a", "a", "a", "b"], "pass": ["forward"] * 4, "status": ["ok"] * 4,
                       "ms": [0.010, 0.020, 1.0, 0.5], "host_ms": [0.040, 0.030, 0.040, 0.060]})
    t = perf.host_bound_table(df).set_index("implementation")
    assert t.loc["a", "host-bound rows"] == 2 and t.loc["a", "rows"] == 3
    assert t.loc["a", "GPU µs of the host-bound rows (median)"] == pytest.approx(15.0)
    assert t.loc["a", "host µs per call (median)"] == pytest.approx(40.0)
    assert t.loc["b", "host-bound rows"] == 0 and pd.isna(t.loc["b", "GPU µs of the host-bound rows (median)"])
    assert perf.host_bound_table(df.drop(columns="host_ms")) is None
    assert perf.host_bound_table(df.assign(host_ms=float("nan"))) is None


def test_flush_note_reads_each_suite_manifest():
    """The performance page's L2-flush line: one phrase when every suite agrees, each suite's otherwise; a
    manifest without timing.flush predates it and overwrote a buffer; an unknown mode is said, not guessed."""
    read = {"timing": {"flush": "read"}}
    assert perf.flush_note({"decode": read, "mixed": read}).startswith("the L2 flushed before each repeat by reading")
    assert "dirty lines" in perf.flush_note({"decode": {"timing": {"method": "CUDA events"}}})
    mixed = perf.flush_note({"decode": read, "old": {}})
    assert mixed.startswith("decode: the L2 flushed") and "; old: the L2 flushed before each repeat by overwriting" in mixed
    assert perf.flush_note({"x": {"timing": {"flush": "sideways"}}}) == "L2 flush mode(s) sideways not known to this version"


def test_order_note_says_how_the_implementations_took_turns():
    """timing.rounds: round-robin in that many rounds; 1, or a manifest from before the field, one after another;
    suites that differ are named; a value this version does not know is said so."""
    rr = {"timing": {"flush": "read", "rounds": 3}}
    assert "round-robin, 3 rounds" in perf.order_note({"decode": rr, "mixed": rr})
    assert perf.order_note({"old": {"timing": {"flush": "read"}}}).endswith("one after another, each in one go")
    mixed = perf.order_note({"decode": rr, "old": {}})
    assert mixed.startswith("decode: a configuration's") and "; old: " in mixed
    assert perf.order_note({"x": {"timing": {"rounds": 0}}}) == "timing.rounds 0 not known to this version"
    assert perf.order_note({"d": {"timing": {"rounds": 3, "one_go_ms": 50.0}}}).endswith(
        "alike; a call of 50 ms or more in one go)")
    line = perf.timing_note({"decode": rr})
    assert line.startswith("the L2 flushed before each repeat by reading") and "round-robin, 3 rounds" in line


def test_the_device_page_gives_the_clocks_the_launches_ran_at():
    """Not the idle clock nvidia-smi saw when the GPU was recorded: Nsight Compute's own elapsed-cycle rates of every
    profiled launch, min / median / max."""
    ncu = pd.DataFrame({"sm__cycles_elapsed.avg.per_second": [1.755e9, 1.98e9, 1.98e9],
                        "dram__cycles_elapsed.avg.per_second": [3.2e9] * 3})
    clocks = device.run_clocks(ncu)
    assert clocks == {"SM": (1755.0, 1980.0, 1980.0, 3), "memory": (3200.0, 3200.0, 3200.0, 3)}
    t = device.device_table({"gpu": {"name": "X", "nvidia_smi": {"clocks.sm": "345 MHz", "clocks.max.sm": "1980 MHz"}}},
                            None, clocks).set_index("property")["value"]
    assert t["SM clock while profiled (Nsight Compute)"] == "1,755-1,980 MHz (median 1,980), over 3 profiled launches"
    assert t["memory clock while profiled (Nsight Compute)"] == "3,200 MHz, over 3 profiled launches"
    assert t["SM clock when the GPU was recorded / max (nvidia-smi)"] == "345 MHz / 1980 MHz"
    said = device.findings({"gpu": {"name": "X"}}, clocks=clocks)
    assert any(s.startswith("While profiled, its clocks ran at: SM 1,755-1,980 MHz") for s in said)
    assert device.run_clocks(None) == {} and device.run_clocks(pd.DataFrame({"x": [1]})) == {}


def test_the_l2_findings_say_which_onset_to_believe():
    """Where the measured and modeled onsets are far apart, the page says which one to believe, and between which
    swept points the measured one lies."""
    from nsightlab.analysis import l2
    traffic = pd.DataFrame({"range": [f"r{n}" for n in (512, 1024, 2048, 4096)], "variant": "naive", "sweep": "s",
                            "N": [512, 1024, 2048, 4096], "l2_hit_rate": [81.0, 80.0, 67.0, 60.0]})
    onsets = pd.DataFrame({"sweep": ["s"], "variant": ["naive"], "modeled_onset": [928.0], "measured_onset": [2048.0]})
    said = l2.findings(traffic, onsets, "N")
    (line,) = [s for s in said if s.startswith("Where the two onsets differ")]
    assert "measured N=2,048, between the sweep's N=1,024 and 2,048; 2.2x the modeled N≈928" in line
    assert "believe the measured one" in line
    close = onsets.assign(modeled_onset=[1800.0])
    assert not any(s.startswith("Where the two onsets differ") for s in l2.findings(traffic, close, "N"))
