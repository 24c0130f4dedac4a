"""The roofline's ceilings: the dense tensor peak derived from the committed reports (checked against
Hopper's published dense rate at the clocks Nsight recorded), the measured instruction-class ceilings
drawn when a capture has them and named as missing when it does not, the microbenchmark runner's
error paths without a GPU, and the microbenchmark source compiling for sm_90a."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from nsightlab.analysis import counters, roofline
from nsightlab.core.ranges import schemas_of
from nsightlab.parse.ncu import ncu_csv_frame
from nsightlab.render import figures
from nsightlab.run import ceilings as CE
from nsightlab.store.captures import find_file, load_manifest

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted(p.parent for p in (ROOT / "profiles").glob("*/seqlen/manifest.json"))
#: NVIDIA's published dense FP16 tensor rate of the H100 SXM (989.4 TFLOP/s at its 1,830 MHz boost
#: clock, 132 SMs); the H200 has the same SMs
H100_DENSE, H100_CLOCK, H100_SMS = 989.4e12, 1.83e9, 132


def _load(path: Path):
    man = load_manifest(path)
    df = ncu_csv_frame(find_file(path, "ncu_raw.csv"), schemas=schemas_of(man))
    # the CSV frame keeps every printed string in attrs, which pandas deep-copies on every operation: keep one row
    df.attrs = {"printed": df.attrs["printed"][:1]}
    return counters.kernel_work(df), man


@pytest.fixture(scope="module", params=CAPTURES, ids=lambda p: p.parent.name)
def capture(request):
    return _load(request.param)


@pytest.fixture(scope="module")
def h200():
    """The H200's seqlen capture: taken (1ebba72) with the instruction-class ceilings measured."""
    return _load(ROOT / "profiles" / "nvidia-h200" / "seqlen")


@pytest.fixture(scope="module")
def h100():
    """The H100's seqlen capture: taken (060d1a6) before the instruction-class ceilings existed."""
    return _load(ROOT / "profiles" / "nvidia-h100-80gb-hbm3" / "seqlen")


def test_the_committed_captures_are_there():
    assert {p.parent.name for p in CAPTURES} >= {"nvidia-h200", "nvidia-h100-80gb-hbm3"}


def test_dense_tensor_peak_is_hoppers_published_rate_at_the_recorded_clocks(capture):
    work, man = capture
    assert man["gpu"]["compute_capability"] == "9.0" and int(work["sm_count"].iloc[0]) == H100_SMS
    per_sm_cycle = work["peak_tensor"] / (work["sm_count"] * work["hz_sm"])
    assert per_sm_cycle.round(6).unique().tolist() == [4096.0]
    assert 4096.0 == pytest.approx(H100_DENSE / (H100_SMS * H100_CLOCK), rel=1e-4)  # the published rate per SM-cycle
    assert (work["peak_tensor_path"] / work["peak_tensor"]).round(9).unique().tolist() == [2.0]
    ceil = roofline.ceilings(work, man)
    dense = ceil.loc[ceil["name"] == "Tensor FP16 dense", "value"].item()
    # one peak per GPU: the published number scaled to the GPU's maximum SM clock (nvidia-smi, in the manifest),
    # whatever clocks this capture's launches ran at
    max_hz = float(man["gpu"]["nvidia_smi"]["clocks.max.sm"].split()[0]) * 1e6
    assert dense == pytest.approx(H100_DENSE * max_hz / H100_CLOCK, rel=1e-3)
    assert work["hz_sm"].max() <= max_hz * 1.01  # ncu measures the clock to within about 1 %
    # the instruction-class roofs are drawn exactly when the capture measured them
    measured = "mma_sync_fp16" in man["ceilings"] and "flop_per_s" in man["ceilings"]["mma_sync_fp16"]
    assert any(ceil["name"].str.contains("mma.sync|wgmma|MUFU")) == measured
    text = roofline.tensor_peak_derivation(work, man)
    assert "8,192 per SM per cycle" in text and "4,096 FLOP per SM per cycle" in text
    assert f"**{dense / 1e12:,.0f} TFLOP/s**" in text and "2:4 structured sparsity" in text


def test_a_report_with_the_dense_peak_metric_is_not_halved():
    df = pd.DataFrame([{counters.TENSOR_DENSE_PEAK: 540_672.0, "sm__cycles_elapsed.avg.per_second": 1.5e9,
                        "gpu__time_duration.sum": 1e6, "range": "", "launch__sm_count": 132}])
    w = counters.kernel_work(df)
    assert w["peak_tensor"].iloc[0] == pytest.approx(540_672.0 * 1.5e9)
    assert "dense (sparsity off)" in roofline.ceilings(w).set_index("name").loc["Tensor FP16 dense", "source"]


# --------------------------------------------------------------------------- the figure

MEASURED = {
    "mma_sync_fp16": {"flop_per_s": 660e12, "what": "mma.sync", "config": {"blocks": 264}},
    "mma_sync_bf16": {"flop_per_s": 659e12, "what": "mma.sync", "config": {"blocks": 264}},
    "wgmma_fp16": {"flop_per_s": 950e12, "what": "wgmma", "config": {"blocks": 132}},
    "wgmma_bf16": {"status": "not measured", "reason": "RuntimeError: a test's reason"},
    "wgmma_e4m3": {"flop_per_s": 1900e12, "what": "wgmma e4m3", "config": {"blocks": 132}},
    "mufu_ex2": {"exp2_per_s": 3.9e12, "what": "ex2"},
}


def _figure(work, man):
    rng = counters.per_range(work, by_kernel_if_no_ranges=True)
    pts = roofline.roofline_points(rng)
    ceil = roofline.ceilings(work, man, pts)
    _, note = roofline.instruction_status(man)
    sel = pts[pts["D"] == 64]  # the notebook's first view: D=64, H in rows, pass in columns
    fig = figures.roofline(sel, ceil, "roofline D=64", size_by="N", facet_row="H", note=note)
    return fig, [a.text for a in fig.layout.annotations], ceil


def test_the_figure_draws_the_measured_instruction_ceilings_labelled(h200):
    work, man = h200
    man = {**man, "ceilings": {**man["ceilings"], **MEASURED}}
    fig, texts, ceil = _figure(work, man)
    # an fp16 capture: the FP16 instruction ceilings, not the BF16 ones
    for label in ("tensor dense", "mma.sync FP16 660", "wgmma FP16 950", "cuBLAS", "HFMA2", "DRAM"):
        assert any(t.startswith(label) for t in texts), (label, texts)
    facets = [t for t in texts if t.startswith(("H=", "forward", "backward"))]
    # the MUFU bound (3.9e12 exp2/s x 4·64 FLOP = 998 TFLOP/s) holds for the forward, D=64 facets only
    assert sum(t.startswith("MUFU exp2") for t in texts) == sum("forward" in f for f in facets) > 0
    assert "wgmma BF16" in fig.layout.title.text and "a test's reason" not in fig.layout.title.text
    lines, note = roofline.instruction_status(man)
    assert lines == ["wgmma BF16: not measured (RuntimeError: a test's reason)."] and note.endswith("wgmma BF16")
    assert "measured MUFU exp2 bound (backward, D=128)" in set(ceil["name"])
    assert set(roofline.ceiling_table(ceil)["holds for"]) >= {"all", "pass=forward, D=64"}


def test_the_figure_of_an_older_capture_says_what_it_did_not_measure(h100):
    work, man = h100
    fig, texts, _ = _figure(work, man)
    assert not any(t.startswith(("mma.sync", "wgmma", "MUFU")) for t in texts)
    assert any(t.startswith("tensor dense") for t in texts) and len(fig.data) > 10
    assert "not measured in this capture: the mma.sync, wgmma and MUFU exp2 ceilings" in fig.layout.title.text


def test_findings_place_tensor_core_kernels_against_the_mma_sync_roof(h200, h100):
    for work, man in (h200, h100):
        rng = counters.per_range(work, by_kernel_if_no_ranges=True)
        pts = roofline.roofline_points(rng)
        line = roofline.instruction_finding(pts, roofline.ceilings(work, {**man, "ceilings": MEASURED}, pts))
        assert line and line.startswith("Against the measured mma.sync ceiling (660 TFLOP/s)")
        assert re.search(r"flash_mma \d+%", line) and "above it: sdpa_cudnn" in line and "1.44× mma.sync" in line
    # each capture's own: the H200's measured them (flash_wgmma near the mma.sync roof, cuDNN past it), the H100's not
    work, man = h200
    pts = roofline.roofline_points(counters.per_range(work, by_kernel_if_no_ranges=True))
    own = roofline.instruction_finding(pts, roofline.ceilings(work, man, pts))
    assert own and re.search(r"flash_wgmma \d+%", own) and "above it: sdpa_cudnn" in own
    work, man = h100
    pts = roofline.roofline_points(counters.per_range(work, by_kernel_if_no_ranges=True))
    assert roofline.instruction_finding(pts, roofline.ceilings(work, man, pts)) is None


def test_label_spots_keep_labels_apart():
    ys = [3.0, 2.99, 2.97, 2.9, 2.85, 2.1, 1.8]  # log10 TFLOP/s: five roofs within 0.15 decades
    widths = [80.0] * len(ys)
    spots = figures._label_spots(ys, widths, 14, 90, 400)
    boxes = []
    for y, w, (right, above) in zip(ys, widths, spots, strict=True):
        x1, y0 = right * 400, y * 90 if above else y * 90 - 14
        boxes.append((x1 - w, x1, y0, y0 + 14))
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not (a[0] < b[1] and a[1] > b[0] and a[2] < b[3] and a[3] > b[2]), (a, b)


# --------------------------------------------------------------------------- the runner without a GPU


def test_instruction_ceilings_are_recorded_as_not_measured_without_a_gpu():
    out = CE.instruction_ceilings()  # CI: CPU torch, no device
    assert list(out) == list(CE.MICROBENCHMARK_KEYS)
    for entry in out.values():
        assert entry["status"] == "not measured" and "could not be built" in entry["reason"]


def test_measure_survives_a_build_failure(monkeypatch):
    import torch

    monkeypatch.setattr(CE, "library_ceilings", lambda: {"gemm_bf16": {"n": 8192, "ms": 1.0, "flop_per_s": 7e14}})
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: type("P", (), {"multi_processor_count": 132}))

    def no_compiler(capability):
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(CE, "build", no_compiler)
    out = CE.measure()
    assert out["gemm_bf16"]["flop_per_s"] == 7e14
    assert all("Ninja is required" in out[k]["reason"] for k in CE.MICROBENCHMARK_KEYS)
    lines = [CE.describe(k, v) for k, v in out.items() if k != "method"]
    assert lines[0].startswith("gemm_bf16") and "700.0 TFLOP/s" in lines[0]
    assert lines[1].startswith("mma_sync_fp16  not measured: the microbenchmarks could not be built")


def test_wgmma_is_not_measured_off_hopper_and_a_failing_kernel_is_not_a_ceiling(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: type("P", (), {"multi_processor_count": 108}))

    class Broken:  # every launch reports an error
        def __getattr__(self, name):
            return lambda *a: 1

    out = CE.instruction_ceilings(builder=lambda cc: Broken())
    assert out["wgmma_fp16"]["reason"] == "needs sm_90a (compute capability 9.0); this GPU is 8.0"
    assert out["mma_sync_fp16"]["status"] == "not measured" and "flop_per_s" not in out["mma_sync_fp16"]


def test_main_prints_one_line_per_ceiling(monkeypatch, tmp_path, capsys):
    import torch

    import nsightlab.core.environment

    fake = {"method": "m", "copy_d2d": {"bytes": 2**30, "ms": 0.5, "bytes_per_s": 4.1e12},
            "mma_sync_fp16": {"flop_per_s": 6.6e14, "ms": 20.0, "iters": 4096,
                              "config": {"blocks": 264, "blocks_per_sm": 2, "threads_per_block": 256}},
            "mufu_ex2": {"exp2_per_s": 4e12, "ms": 20.0, "iters": 9, "config": {"blocks": 1056},
                         "softmax_bound_flop_per_s": {"forward, D=64": 1.024e15}},
            "wgmma_fp16": CE.not_measured("needs sm_90a")}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(nsightlab.core.environment, "environment", lambda: {"gpu": {"name": "fake"}})
    monkeypatch.setattr(CE, "measure", lambda: fake)
    assert CE.main(["--out", str(tmp_path / "c.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == ["copy_d2d", "mma_sync_fp16", "mufu_ex2", "wgmma_fp16"]
    assert "660.0 TFLOP/s" in lines[1] and "softmax bound" in lines[2] and "not measured: needs sm_90a" in lines[3]
    assert json.loads((tmp_path / "c.json").read_text())["ceilings"] == fake


# --------------------------------------------------------------------------- the CUDA source


def _nvcc() -> str | None:
    return os.environ.get("NVCC") or shutil.which("nvcc") or next(
        (c for c in ("/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc") if Path(c).exists()), None)


def test_the_binding_declares_what_the_source_defines():
    src = " ".join(CE.CSRC.read_text().split())
    decls = [" ".join(d.split()) for d in re.findall(r"^[a-z].*?\);", CE._CPP, re.S | re.M)]
    assert len(decls) == len(CE._FUNCTIONS)
    for d in decls:
        assert d.removesuffix(";") + " {" in src, d


@pytest.mark.skipif(_nvcc() is None and not os.environ.get("CI"), reason="nvcc not installed")
def test_the_microbenchmarks_compile_for_sm90a_without_spills(tmp_path):
    nvcc = _nvcc()
    assert nvcc is not None, "CI must have nvcc (the CUDA toolkit) to compile the microbenchmarks"
    cmd = [nvcc, "-gencode=arch=compute_90a,code=sm_90a", "-gencode=arch=compute_80,code=sm_80", "-O3", "-std=c++17",
           "-Xptxas", "-v", "-c", str(CE.CSRC), "-o", str(tmp_path / "ceilings.o")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stderr
    assert "warning" not in log.lower(), log  # e.g. ptxas serializing the wgmma chain
    kernels = re.findall(r"Compiling entry function '(\w+)' for '(sm_\w+)'", log)
    names = {(re.sub(r"^_ZN3nsl\d+", "", k).split("I")[0].split("E")[0], arch) for k, arch in kernels}
    for arch in ("sm_90a", "sm_80"):
        assert {(n, arch) for n in ("mma_sync_kernel", "wgmma_kernel", "mufu_ex2_kernel")} <= names, names
    props = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert props and all(p == ("0", "0", "0") for p in props), props


def test_a_measured_read_stream_is_a_memory_roof_of_its_own():
    """A capture whose ceilings hold the DRAM read stream draws it beside the copy (whose rate counts reads and
    writes, so that a kernel that only reads can sit above it)."""
    from nsightlab.analysis import roofline
    work = pd.DataFrame({"peak_DRAM": [4.8e12], "hz_sm": [1.98e9]})
    man = {"ceilings": {"copy_d2d": {"bytes": 1 << 30, "ms": 0.5, "bytes_per_s": 4.2e12},
                        "read_stream": {"bytes": 2 << 30, "ms": 0.5, "bytes_per_s": 4.5e12}}}
    mem = roofline.ceilings(work, man).query("kind == 'memory'").set_index("name")
    assert mem.loc["measured DRAM read", "value"] == 4.5e12 and "read once" in mem.loc["measured DRAM read", "source"]
    assert mem.loc["measured D2D copy", "value"] == 4.2e12
    assert CE.describe("read_stream", {**man["ceilings"]["read_stream"], "config": {"blocks": 264, "blocks_per_sm": 2,
                                                                                  "threads_per_block": 1024}, "iters": 1}
                       ).startswith("read_stream        4.50 TB/s     2 GiB read once")


def test_an_fp8_wgmma_ceiling_is_a_measured_roof_and_a_capture_before_it_does_not_name_it_missing(h200):
    work, man = h200
    with_fp8 = {**man, "ceilings": {**man["ceilings"], **MEASURED}}
    pts = roofline.roofline_points(counters.per_range(work, by_kernel_if_no_ranges=True))
    # fp16 work: no point needs the FP8 roof, so it is not drawn (it would only stretch the axis)
    assert "measured wgmma FP8 e4m3" not in set(roofline.ceilings(work, with_fp8, pts)["name"])
    fast = pts.copy()
    fast.loc[fast.index[0], "flop_per_s"] = 1200e12  # FP8 work past every 16-bit roof
    ceil = roofline.ceilings(work, with_fp8, fast)
    assert ceil.set_index("name").loc["measured wgmma FP8 e4m3", "value"] == 1900e12
    before = {**man, "ceilings": {**man["ceilings"], **{k: v for k, v in MEASURED.items() if k != "wgmma_e4m3"}}}
    assert not any("e4m3" in line for line in roofline.instruction_status(before)[0])
    failed = {**before, "ceilings": {**before["ceilings"], "wgmma_e4m3": CE.not_measured("RuntimeError: no e4m3")}}
    assert "wgmma FP8 e4m3: not measured (RuntimeError: no e4m3)." in roofline.instruction_status(failed)[0]
