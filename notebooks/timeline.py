# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Timeline (Nsight Systems)
#
# The workload's NVTX ranges and the kernels each one launched, from the Nsight Systems SQLite export. Kernels
# are joined to ranges through the CUDA runtime's correlation id and the range open on the launching thread
# (a backward pass's kernels run on PyTorch's autograd thread, where the workload opens its ranges).

# %% tags=["parameters"]
capture: str = "profiles/nvidia-h200/seqlen"  # capture folder (python -m nsightlab.store list); relative paths: cwd, then the repo
variants: str = ""  # comma-separated implementations to show (empty: all)
where: str = ""  # a pandas query over the range fields (e.g. D < 128 and not causal); empty: all ranges
reference: str = ""  # the implementation others are compared with (empty: the one fastest in most configurations)
show: str = ""  # a pandas query choosing the ranges drawn on the time axis (empty: the configuration most implementations ran)
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)

# %%
from IPython.display import display

from nsightlab import counters, figures, timeline
from nsightlab import notebook as nb

path, manifest = nb.prepare(capture, plotlyjs)
nb.say(nb.header(manifest, path))
tables = nb.load_nsys(path, manifest)
kernels, nvtx = tables["kernels"], tables["ranges"]
cases = nb.capture_cases(manifest)
style = figures.style_for(nb.implementations(manifest, nvtx))
inside = int((kernels["range_id"] >= 0).sum())
nb.say(f"{len(kernels)} kernels, {len(nvtx)} NVTX ranges; {inside} kernels launched inside a range, "
       f"{len(kernels) - inside} outside every range.")

# %%
summary, x = None, "range"
with nb.section():
    rt = nb.select(timeline.range_timing(kernels, nvtx), variants, where)
    has_model = counters.has_model(counters.attach_model(rt, cases))
    counted = None if has_model else nb.counted_per_range(path, manifest)
    summary = timeline.speedup_vs(timeline.timing_summary(rt, cases, counted), reference)
    x = nb.sweep_field(summary) or "range"
    nb.say(f"**FLOP source:** {timeline.flop_sources(summary)}. **Reference:** {summary.attrs['reference']}.")

# %% [markdown]
# ## One configuration on the time axis

# %%
with nb.section():
    ks, rs, what = timeline.window(kernels, nb.select(nvtx, variants, where), show)
    figures.show(figures.timeline(ks, rs, f"{what}: NVTX ranges and their kernels", style))

# %% [markdown]
# ## GPU time, throughput and launch gaps per range
#
# Median over the repeated launches of each range. GPU time is the sum of the range's kernel durations; the
# gap is GPU idle time between consecutive kernels of a range (launch overhead that multi-kernel
# implementations pay). Throughput divides the FLOPs of the source named above by the GPU time.

# %%
with nb.section():
    nb.need(summary)
    facet = counters.identity_columns(summary)
    figures.show(figures.lines_vs_x(summary, "gpu_ms", "GPU time per range [ms]", x, style, ylabel="ms",
                                    facet_candidates=facet))
    if timeline.has_flops(summary):
        figures.show(figures.lines_vs_x(summary, "tflops", "Throughput: FLOPs / GPU time", x, style,
                                        ylabel="TFLOP/s", facet_candidates=facet))
    else:
        nb.say("No FLOPs for these ranges (no work model, no Nsight Compute counts): throughput is not shown.")
    ref = summary.attrs["reference"]
    figures.show(figures.lines_vs_x(summary[summary["variant"] != ref], "speedup",
                                    f"Speed relative to {ref} (same capture; > 1 is faster)", x, style,
                                    ylabel=f"× {ref}", facet_candidates=facet))

# %%
with nb.section():
    nb.need(summary)
    cols = ["variant", "pass", x, "gpu_ms", "tflops", "flop_source", "speedup", "kernels", "gap_ms", "iters"]
    display(summary[[c for c in dict.fromkeys(cols) if c in summary]].round(3))
