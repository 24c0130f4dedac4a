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
""", tags=["parameters"]),
        code("""
import pandas as pd
from IPython.display import Markdown, display

from flash_kernels.registry import describe
from nsightlab import figures, perf
from nsightlab.store import load_bench

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


if __name__ == "__main__":
    nbf.write(performance(), HERE / "performance.ipynb")
