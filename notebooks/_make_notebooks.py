"""Writes notebooks/*.ipynb (without outputs). Edit here or in JupyterLab; commit them stripped."""

from pathlib import Path

import nbformat as nbf

HERE = Path(__file__).resolve().parent


def md(s: str):
    return nbf.v4.new_markdown_cell(s.strip())


def code(s: str, tags=None):
    c = nbf.v4.new_code_cell(s.strip())
    if tags:
        c.metadata["tags"] = tags
    return c


def performance():
    cells = [
        md("""
# Attention kernels: performance and correctness

Every kernel variant of `flash_kernels` against PyTorch's SDPA backends (flash, cuDNN, memory-efficient,
math) and PyTorch on the CPU, **timed in the same run on the same GPU**: CUDA events around each launch,
after warm-up, the L2 flushed before every repeat, medians reported. Every row was first checked against
an fp64 reference computed from the same inputs (random normal + 0.5).

FLOP convention: forward 4·B·H·N²·D (halved when causal), backward 2.5 × forward.
"""),
        code("""
capture: str = "profiles/nvidia-h200/seeds"  # capture folder: <suite>.csv + <suite>.manifest.json per suite
dtype: str = "float16"  # dtype of the throughput figures
impl: str = "flash_mma"  # the kernel whose ratio to SDPA flash is tracked
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)
""", tags=["parameters"]),
        code("""
import pandas as pd
from IPython.display import Markdown, display

from flash_kernels.registry import describe
from nsightlab import figures, perf
from nsightlab.store import load_bench

figures.set_plotlyjs(plotlyjs)
df, manifests = load_bench(capture)
suites = sorted(df["suite"].unique())
first = manifests[suites[0]]["environment"]
gpu = first.get("gpu", {})
display(Markdown(
    f"**GPU** {gpu.get('name')} (CC {gpu.get('compute_capability')}, {gpu.get('sm_count')} SMs, "
    f"L2 {gpu.get('l2_bytes', 0) / 2**20:.0f} MiB, driver {gpu.get('nvidia_smi', {}).get('driver_version')}) · "
    f"**torch** {first.get('torch')} · **CUDA** {first.get('cuda_runtime')} · **cuDNN** {first.get('cudnn')} · "
    f"**commit** `{first.get('git_commit')}` · suites: {', '.join(suites)}"
))
pd.DataFrame([{"suite": s, "command": " ".join(m["command"][1:]), "rows": m["rows"], "seconds": round(m["seconds"])}
              for s, m in manifests.items()])
"""),
        md("""
## The variants

One registry feeds the API, the benchmark, the tests and these reports.
"""),
        code("""pd.DataFrame(describe())[["variant", "description", "dtypes", "passes", "options"]]"""),
        md("""
## Tensor-core FlashAttention vs PyTorch's flash backend

The FlashAttention convention sweep (B·N = 16384 tokens, H·D = 2048). The dotted lines are this project's
targets (forward ≥ 80 %, backward ≥ 60 % of SDPA flash, for N ≥ 2048).
"""),
        code("""
if "convention" in suites:
    figures.show(figures.ratio_vs_n(df, "convention", dtype, impl))
    display(perf.target_table(df, impl).style.format(
        {"tflops": "{:.1f}", "ref_tflops": "{:.1f}", "ratio": "{:.0%}", "target": "{:.0%}"}))
else:
    display(Markdown("_This capture has no convention sweep._"))
"""),
        md("""
## Throughput against sequence length

Textbook attention materializes the N×N score matrix and stays far below the tensor-core kernels; the
FlashAttention variants never write it. Materializing variants are skipped where their N×N matrices would
not fit (the skips are listed at the end).
"""),
        code("""
for suite in ("convention", "seed002"):
    if suite in suites:
        figures.show(figures.throughput_vs_n(df, suite, dtype, f"{suite}: TFLOP/s vs N ({dtype})"))
"""),
        md("""
## Seed 004's ten configurations

Latency per configuration (log scale), and the speedup of every implementation over SDPA flash
(time of SDPA flash / time of the implementation; > 1 is faster).
"""),
        code("""
if "seed004" in suites:
    for dt in sorted(df[df["suite"] == "seed004"]["dtype"].unique()):
        for pass_ in ("forward", "backward"):
            figures.show(figures.latency_bars(df, "seed004", dt, pass_))
    display(perf.speedup_table(df, "seed004", "forward", "float16").style.format("{:.2f}"))
"""),
        md("""
## Accuracy

Worst error of each implementation against the fp64 reference (max_rel = max|err| / max|ref|,
rel_l2 = ‖err‖ / ‖ref‖). SDPA's own errors are the yardstick for what fp16/bf16 arithmetic allows.
"""),
        code("""perf.accuracy_table(df).style.format({c: "{:.2e}" for c in ["max_abs", "mean_abs", "mse", "max_rel", "rel_l2"]})"""),
        md("""## Skipped combinations and why"""),
        code("""
skipped = df[df["status"] != "ok"]
skipped.groupby(["impl", "status"]).size().rename("cases").reset_index()
"""),
    ]
    nb = nbf.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb




PARAMS = """
capture: str = "{capture}"  # capture folder, profiles/<gpu>/<suite> (python -m nsightlab.store list)
mode: str = "replay"  # "replay": analyse the capture as it is; "live": capture `suite` on this GPU first (ncu/nsys)
suite: str = "{suite}"  # live mode: the capture suite to run (seqlen, blocksize, seeds)
only: str = ""  # live mode: regex of NVTX range names to capture (empty: the whole suite)
live_profiles: str = "profiles_live"  # live mode: where the new capture is written
variants: str = ""  # comma-separated variants to show (empty: all in the capture)
N: str = ""  # comma-separated sequence lengths to show (empty: all)
D: str = ""  # comma-separated head dims to show (empty: all)
dtype: str = "float16"  # dtype to show
causal: bool = False  # causal or full attention
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)
"""

SETUP = """
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from nsightlab import analysis as A, figures, parse
from nsightlab.notebook import header, prepare, select
from nsightlab.store import find_file

path, manifest = prepare(capture, mode, suite, only, live_profiles, plotlyjs)
display(Markdown(header(manifest, path)))
"""

NCU_LOAD = """
report = find_file(path, "ncu.ncu-rep")
if report is None:
    raise FileNotFoundError(f"{path} holds no Nsight Compute report (ncu.ncu-rep[.gz])")
work = A.kernel_work(parse.ncu_frame(report))
ranges = select(A.per_range(work), variants, N, D, dtype, causal)
ceil = A.ceilings(work, manifest)
l2_bytes = manifest["gpu"]["l2_bytes"]
"""


def _nb(cells):
    nb = nbf.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def _params(capture, suite):
    return code(PARAMS.format(capture=capture, suite=suite), tags=["parameters"])


def device():
    return _nb([
        md("""
# The device, and where each variant outgrows its L2

What the capture recorded about the GPU (seed 000's `check_specs`), the ceilings measured in the same capture
(a large GEMM and a device-to-device copy), and the analytic minimum working set of each variant against N:
the materializing variants keep one (forward) or two (backward) fp32 N×N score matrices per head alive, the
FlashAttention variants only their inputs and outputs.
"""),
        _params("profiles/nvidia-h200/seqlen", "seqlen"),
        code(SETUP),
        code("""
gpu_row = None
sq = find_file(path, "nsys.sqlite")
if sq is not None:
    g = parse.nsys_tables(sq)["gpu"]
    gpu_row = g.iloc[0].to_dict() if len(g) else None
A.device_table(manifest, gpu_row)
"""),
        md("## Ceilings measured in this capture"),
        code("""
c = manifest.get("ceilings") or {}
pd.DataFrame([{"ceiling": k, **{kk: vv for kk, vv in v.items() if kk != "note"}} for k, v in c.items() if isinstance(v, dict)])
"""),
        md("""
## Minimum working set per variant (MiB), B=1, H=8

The last column is the N at which the modeled working set passes the L2 size recorded in the manifest; past it,
a variant that re-reads its working set must go to DRAM.
"""),
        code("""
l2_bytes = manifest["gpu"]["l2_bytes"]
Ds = [int(x) for x in D.split(",")] if D else [64, 128]
for d in Ds:
    display(Markdown(f"**D = {d}**"))
    ws = A.working_set_table(1, 8, d, dtype, l2_bytes)
    figures.show(figures.working_set_vs_n(ws, l2_bytes, f"Modeled working set, B=1, H=8, D={d}"))
    display(ws.round(1))
"""),
    ])


def roofline():
    return _nb([
        md("""
# Hierarchical roofline

Every measured range (one variant × config × pass, all its kernels summed) placed at three levels of the
memory hierarchy: its FLOPs over the bytes moved at DRAM, L2 (L2→SM crossbar) and L1 (LSU writeback), against
its FLOP/s. Ceilings are Nsight Compute's own peaks (`*.peak_sustained` × the clock each kernel ran at), for
FP32 (FFMA), FP16 (HFMA2) and the FP16 tensor path, plus this capture's measured GEMM and copy (dashed).
FLOPs are *counted* by the hardware (instructions weighted as Nsight's roofline sections weigh them), not assumed.
"""),
        _params("profiles/nvidia-h200/seqlen", "seqlen"),
        code(SETUP),
        code(NCU_LOAD),
        code("""ceil.assign(value_T=ceil["value"] / 1e12).drop(columns="value")"""),
        md("""
Read the tensor ceiling with care: Nsight Compute's `sm__ops_path_tensor_src_fp16.sum.peak_sustained` is the
per-cycle peak of the whole FP16 tensor path (`per_cycle` above, for all SMs); on Hopper it is twice what the
measured dense FP16 GEMM of the same capture reaches, the same factor as between the 2:4-sparse and the dense
rates in NVIDIA's published figures. The measured GEMM (dashed) is the practical dense ceiling here.
"""),
        code("""
pts = A.roofline_points(ranges)
for p in ("forward", "backward"):
    sel = pts[pts["pass"] == p]
    if len(sel):
        figures.show(figures.roofline(sel, ceil, f"Hierarchical roofline, {p} ({dtype}, causal={causal})"))
"""),
        md("""
## Counted vs analytic FLOPs

The convention counts 4·B·H·N²·D per forward (2.5× for backward). The counters see every floating-point
instruction: softmax arithmetic, backward recomputation and padded tiles show up as counted > analytic.
Disagreements beyond 10 % are flagged and explained.
"""),
        code("""
fc = A.flop_check(ranges)
figures.show(figures.flop_check_bars(fc, "Counted / analytic FLOPs per range (shaded: within 10%)"))
flagged = fc[fc["flag"]]
display(Markdown(f"{len(flagged)} of {len(fc)} ranges disagree by more than 10%."))
flagged[["variant", "pass", "N", "D", "counted_over_analytic", "explanation"]].round(3)
"""),
    ])


def l2_thrashing():
    return _nb([
        md("""
# L2 thrashing: when does the working set stop fitting?

Textbook attention writes S = QKᵀ and P = softmax(S) to global memory. While the B·H·N² fp32 scores fit in
the L2, re-reading them is cheap; once they outgrow it, every pass over them goes to DRAM. FlashAttention keeps
its tiles on chip and reads Q, K, V (almost) once. Per variant and N: the L2 hit rate, DRAM bytes over the
compulsory bytes (inputs read once, outputs written once), and DRAM bytes over L2→SM bytes; the dotted line is
where the modeled working set equals the L2 size from the manifest.
"""),
        _params("profiles/nvidia-h200/seqlen", "seqlen"),
        code(SETUP),
        code(NCU_LOAD),
        code("""
l2 = A.l2_traffic(ranges, l2_bytes)
onsets = A.onset_table(l2, l2_bytes)
for p in ("forward", "backward"):
    for d in sorted(l2["D"].unique()):
        sel = l2[(l2["pass"] == p) & (l2["D"] == d)]
        if len(sel):
            figures.show(figures.l2_vs_n(sel, l2_bytes, onsets[(onsets["pass"] == p) & (onsets["D"] == d)],
                                         f"{p}, D={d}"))
"""),
        md("""
## Where thrashing starts: model vs data

*Modeled*: the N at which the working set equals the L2. *Measured*: the first N at which the L2 hit rate
falls more than 10 points below its small-N value. Empty (NaN) means it never happens within the sweep.
"""),
        code("""onsets.round(0)"""),
    ])


def timeline():
    return _nb([
        md("""
# Timeline (Nsight Systems)

The workload's NVTX ranges and the kernels each one launched, from the Nsight Systems SQLite export. Kernels
are joined to ranges through the CUDA runtime's correlation id and the range open on the launching thread
(SDPA's backward kernels run on PyTorch's autograd thread, whose ranges the workload opens there).
"""),
        _params("profiles/nvidia-h200/seqlen", "seqlen"),
        code(SETUP),
        code("""
sq = find_file(path, "nsys.sqlite")
if sq is None:
    raise FileNotFoundError(f"{path} holds no Nsight Systems export (nsys.sqlite[.gz])")
T = parse.nsys_tables(sq)
rt = select(A.range_timing(T["kernels"], T["ranges"]), variants, N, D, dtype, causal)
summary = A.speedup_vs(A.timing_summary(rt))
display(Markdown(f"{len(T['kernels'])} kernels, {len(T['ranges'])} measured ranges; "
                 f"{int((T['kernels']['range_id'] >= 0).sum())} kernels inside them."))
"""),
        md("## One configuration on the time axis"),
        code("""
show_n = int(N.split(",")[0]) if N else 4096
show_d = int(D.split(",")[0]) if D else 64
rsel = T["ranges"][(T["ranges"]["N"] == show_n) & (T["ranges"]["D"] == show_d)]
ksel = T["kernels"][T["kernels"]["range_id"].isin(rsel.index)]
figures.show(figures.timeline(ksel, rsel, f"N={show_n}, D={show_d}: NVTX ranges and their kernels"))
"""),
        md("""
## Per-range GPU time, launch gaps, throughput

Median over the repeated launches of each range. GPU time is the sum of the range's kernel durations; the gap
is GPU idle time between consecutive kernels of the range (launch overhead the multi-kernel variants pay).
"""),
        code("""figures.show(figures.lines_vs_n(summary, "gpu_ms", "GPU time per range [ms]", ylabel="ms"))"""),
        code("""figures.show(figures.lines_vs_n(summary, "tflops", "Throughput (convention FLOPs / GPU time)", ylabel="TFLOP/s"))"""),
        code("""figures.show(figures.lines_vs_n(summary[summary["variant"] != "sdpa_flash"], "speed_vs_sdpa_flash",
                               "Speed relative to SDPA flash (same capture)", ylabel="x SDPA flash"))"""),
        code("""summary[["variant", "pass", "N", "D", "gpu_ms", "tflops", "speed_vs_sdpa_flash", "kernels", "gap_ms", "iters"]].round(3)"""),
    ])


def blocksize():
    return _nb([
        md("""
# Block size and tile shape

`flash_simt` (one warp per query row) at block sizes 4, 8, 16, 32 and `flash_mma`'s forward and backward tile
shapes, at two N: kernel time, achieved occupancy, registers and shared memory per block (from the launch
statistics Nsight Compute recorded), and where each lands on the roofline.
"""),
        _params("profiles/nvidia-h200/blocksize", "blocksize"),
        code(SETUP),
        code(NCU_LOAD),
        code("""
per = select(A.option_study(work), variants, N, D)
per.round(3)
"""),
        code("""
for v in sorted(per["variant"].unique()):
    sel = per[per["variant"] == v]
    figures.show(figures.metric_vs_option(sel, "option", "ms", f"{v}: main-kernel time [ms] per option", color="N"))
    figures.show(figures.metric_vs_option(sel, "option", "occupancy", f"{v}: achieved occupancy [%]", color="N"))
"""),
        code("""
pts = A.roofline_points(ranges)
pts["variant"] = pts["variant"] + " " + pts["options"]
figures.show(figures.roofline(pts[pts["level"] != "L2"], ceil, "Roofline position per block size / tile (DRAM and L1)"))
"""),
    ])


def correctness():
    return _nb([
        md("""
# Correctness against an fp64 reference

Every benchmark row was checked before it was timed: the same random inputs (normal + 0.5: a non-zero mean, so
softmax is not trivially uniform) through the fp64 reference, outputs compared. max_rel = max|err| / max|ref|,
rel_l2 = ‖err‖ / ‖ref‖; for backward the worst of dQ, dK, dV. SDPA's own errors are the yardstick for what
the dtype allows. (The GPU test suite asserts the same with tolerances per dtype, outputs poisoned first.)
"""),
        code("""
capture: str = "profiles/nvidia-h200/seeds"  # capture folder with the benchmark CSVs
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path
""", tags=["parameters"]),
        code("""
import plotly.express as px
from IPython.display import Markdown, display

from nsightlab import figures, perf
from nsightlab.store import load_bench

figures.set_plotlyjs(plotlyjs)
df, manifests = load_bench(capture)
ok = perf.ok_rows(df)
display(Markdown(f"{len(ok)} checked rows from suites {', '.join(sorted(df['suite'].unique()))}."))
"""),
        code("""
fig = px.strip(ok, x="impl", y="rel_l2", color="dtype", facet_col="pass", log_y=True,
               hover_data=["suite", "config", "B", "H", "N", "D", "causal", "max_rel"],
               title="Relative L2 error against the fp64 reference, every checked row")
fig.update_layout(template="plotly_white", height=500)
figures.show(fig)
"""),
        code("""perf.accuracy_table(df).style.format({c: "{:.2e}" for c in ["max_abs", "mean_abs", "mse", "max_rel", "rel_l2"]})"""),
    ])


NOTEBOOKS = {"device": device, "correctness": correctness, "performance": performance, "roofline": roofline,
             "l2_thrashing": l2_thrashing, "timeline": timeline, "blocksize": blocksize}

if __name__ == "__main__":
    for name, make in NOTEBOOKS.items():
        nbf.write(make(), HERE / f"{name}.ipynb")
