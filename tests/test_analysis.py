"""Analysis functions on synthetic frames with known answers."""

import numpy as np
import pandas as pd
import pytest

from nsightlab import analysis as A
from nsightlab import metrics as M


def _kernel(flop_tensor=0.0, ffma=0.0, dram=0.0, l2_cycles=0.0, l1_cycles=0.0, ns=1e6, name="k_forward_kernel",
            rng="fk:flash_mma:forward:B=1,H=8,N=1024,D=64,dtype=float16,causal=0"):
    from nsightlab.ranges import parse_range

    row = {**parse_range(rng).as_row(), "range": rng, "kernel": name, "launch": 0}
    row.update({M.WORK["tensor_fp16"]: flop_tensor, M.WORK["ffma"]: ffma, M.WORK["fadd"]: 0, M.WORK["fmul"]: 0,
                M.WORK["hfma"]: 0, M.TRAFFIC["dram_bytes"]: dram, M.TRAFFIC["lts2xbar"]: l2_cycles,
                M.TRAFFIC["l1_writeback"]: l1_cycles, M.TRAFFIC["lts_sectors"]: 100.0, M.TRAFFIC["lts_hit_rate"]: 50.0,
                M.LAUNCH["duration"]: ns, M.CLOCKS["sm"]: 2e9, M.CLOCKS["dram"]: 3e9, M.CLOCKS["lts"]: 2e9,
                M.CLOCKS["l1tex"]: 2e9, M.PEAKS["tensor_fp16"]: 500_000.0, M.PEAKS["ffma"]: 16896.0,
                M.PEAKS["hfma"]: 16896.0, M.PEAKS["dram_bytes"]: 1500.0, M.PEAKS["lts2xbar"]: 160.0,
                M.PEAKS["l1_writeback"]: 132.0})
    return row


def test_peaks_are_nsight_peaks_times_recorded_clocks():
    w = A.kernel_work(pd.DataFrame([_kernel()]))
    assert w["peak_tensor"].iloc[0] == pytest.approx(500_000 * 2e9)
    assert w["peak_fp32"].iloc[0] == pytest.approx(16896 * 2 * 2e9)
    assert w["peak_DRAM"].iloc[0] == pytest.approx(1500 * 3e9)
    assert w["peak_L2"].iloc[0] == pytest.approx(160 * 32 * 2e9)
    assert w["peak_L1"].iloc[0] == pytest.approx(132 * 128 * 2e9)


def test_a_kernel_at_the_ridge_lands_on_both_ceilings():
    peak_flops, peak_bw = 500_000 * 2e9, 1500 * 3e9
    ridge = peak_flops / peak_bw  # FLOP/byte
    seconds = 1e-3
    flop = peak_flops * seconds  # runs at the compute ceiling...
    dram = flop / ridge  # ...with exactly the ridge intensity
    w = A.kernel_work(pd.DataFrame([_kernel(flop_tensor=flop, dram=dram, ns=seconds * 1e9)]))
    pts = A.roofline_points(A.per_range(w))
    d = pts[pts["level"] == "DRAM"].iloc[0]
    assert d["intensity"] == pytest.approx(ridge)
    assert d["flop_per_s"] == pytest.approx(float(A.attainable(d["intensity"], peak_flops, peak_bw)))
    # a memory-bound kernel at a tenth of the ridge, streaming at full bandwidth, sits on the slope
    w2 = A.kernel_work(pd.DataFrame([_kernel(flop_tensor=flop / 10, dram=dram, ns=seconds * 1e9)]))
    p2 = A.roofline_points(A.per_range(w2))
    p2 = p2[p2["level"] == "DRAM"].iloc[0]
    assert p2["flop_per_s"] == pytest.approx(float(A.attainable(p2["intensity"], peak_flops, peak_bw)))


def test_per_range_sums_kernels_and_weights_hit_rate_by_sectors():
    a = _kernel(flop_tensor=100, dram=10, name="a")
    b = _kernel(flop_tensor=300, dram=30, name="b")
    b[M.TRAFFIC["lts_hit_rate"]] = 100.0
    b[M.TRAFFIC["lts_sectors"]] = 300.0
    r = A.per_range(A.kernel_work(pd.DataFrame([a, b])))
    assert len(r) == 1 and r["kernels"].iloc[0] == 2
    assert r["flop"].iloc[0] == 400 and r["bytes_DRAM"].iloc[0] == 40
    assert r["l2_hit_rate"].iloc[0] == pytest.approx((50 * 100 + 100 * 300) / 400)


def test_flop_check_flags_and_explains():
    analytic = 4 * 1 * 8 * 1024 * 1024 * 64
    ok = A.flop_check(A.per_range(A.kernel_work(pd.DataFrame([_kernel(flop_tensor=analytic * 1.05)]))))
    assert not ok["flag"].iloc[0] and ok["counted_over_analytic"].iloc[0] == pytest.approx(1.05)
    hi = A.flop_check(A.per_range(A.kernel_work(pd.DataFrame([_kernel(ffma=analytic)]))))  # 2 FLOP per FFMA
    assert hi["flag"].iloc[0] and "counted > analytic" in hi["explanation"].iloc[0]
    lo = A.flop_check(A.per_range(A.kernel_work(pd.DataFrame([_kernel(flop_tensor=analytic / 2)]))))
    assert lo["flag"].iloc[0] and "counted < analytic" in lo["explanation"].iloc[0]


def test_onsets_modeled_and_measured():
    l2 = 60 * 2**20
    n = A.modeled_onset("naive", 1, 8, 64, "float16", "forward", l2)
    from flash_kernels import model

    assert model.working_set_bytes(True, 1, 8, int(n) - 1, 64, "float16") <= l2 < model.working_set_bytes(
        True, 1, 8, int(n) + 1, 64, "float16")
    s = pd.DataFrame({"N": [256, 512, 1024, 2048, 4096], "l2_hit_rate": [80, 79, 77, 60, 40]})
    assert A.measured_onset(s) == 2048
    assert np.isnan(A.measured_onset(s.assign(l2_hit_rate=[50, 60, 70, 80, 90])))


def test_range_timing_gaps_and_speedup():
    ranges = pd.DataFrame([{"start": 0, "end": 100_000, "tid": 1, "range": "r", "variant": v, "pass": "forward", "B": 1,
                            "H": 1, "N": 64, "D": 64, "dtype": "float16", "causal": False, "options": "", "ms": 0.1}
                           for v in ("sdpa_flash", "naive")])
    kernels = pd.DataFrame({"start": [10_000, 30_000, 50_000], "end": [20_000, 40_000, 54_000], "range_id": [0, 0, 1]})
    rt = A.range_timing(kernels, ranges)
    assert rt.loc[0, "gpu_ms"] == pytest.approx(0.02) and rt.loc[0, "gap_ms"] == pytest.approx(0.01)
    sp = A.speedup_vs(A.timing_summary(rt))
    assert sp.set_index("variant").loc["naive", "speed_vs_sdpa_flash"] == pytest.approx(0.02 / 0.004)


def test_option_label():
    assert A.option_label("flash_mma", "forward", "bwd_tile=64x64;tile=128x32") == "tile=128x32"
    assert A.option_label("flash_mma", "backward", "bwd_tile=64x64;tile=128x32") == "bwd_tile=64x64"
    assert A.option_label("flash_simt", "forward", "block_size=8") == "block_size=8"
