# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
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
where: str = ""  # a pandas query over the range fields (e.g. D > 64 and not causal); empty: all ranges
reference: str = ""  # the implementation others are compared with (empty: the one fastest in most configurations)
show: str = ""  # a pandas query choosing the ranges drawn on the time axis (empty: the configuration most implementations ran)
style_order: str = ""  # the order legends list implementations in (colours follow the name alone; empty: this capture's order)
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)

# %%
from nsightlab.analysis import counters, timeline
from nsightlab.render import figures
from nsightlab.render import page as nb
from nsightlab.store import captures, read

nb.check_parameters(globals())
path, manifest = nb.prepare(capture, plotlyjs)
tables = read.load_nsys(path, manifest)
kernels, nvtx = tables["kernels"], tables["ranges"]
cases = captures.cases(manifest)
shown_nvtx = nb.select(nvtx, variants, where)
timed = shown_nvtx[shown_nvtx.index.isin(kernels.loc[kernels["range_id"] >= 0, "range_id"])]
reference = nb.choose("reference", reference, timed["variant"].dropna().astype(str).unique())
if show:
    nb.select(timed, "", show, name="show")
style = nb.style(manifest, nvtx, order=style_order)
summary, x = None, "range"
with nb.section():
    rt = nb.select(timeline.range_timing(kernels, nvtx), variants, where)
    has_model = counters.has_model(counters.attach_model(rt, cases))
    counted = None if has_model else nb.counted_per_range(path, manifest)
    summary = timeline.speedup_vs(timeline.timing_summary(rt, cases, counted), reference)
    x = nb.sweep_field(summary) or "range"
nb.summary(timeline.findings(summary, x) if summary is not None else [])
nb.note(nb.header(manifest, path))
inside = int((kernels["range_id"] >= 0).sum())
nb.note(f"{len(kernels)} kernels, {len(nvtx)} NVTX ranges; {inside} kernels launched inside a range, "
        f"{len(kernels) - inside} outside every range."
        + (f" **FLOP source:** {timeline.flop_sources(summary)}. **Reference:** {summary.attrs['reference']}."
           if summary is not None else ""))

# %% [markdown]
# ## One configuration, every implementation
#
# First each implementation's range against the others on a logarithmic axis; then each range zoomed to its
# own time axis, with the kernels it launched (its median-length repeat).

# %%
with nb.section():
    ks, rs, what = timeline.window(kernels, shown_nvtx, show, prefer=timeline.headline_case(summary, x))
    figures.show(figures.range_durations(rs, ks, f"{what}: time per range", style))
    figures.show(figures.timeline(ks, rs, f"{what}: each range on its own time axis", style))

# %% [markdown]
# ## GPU time, throughput and launch gaps per range
#
# Median over the repeated launches of each range. GPU time is the time at least one of the range's kernels
# ran (kernels that overlap, as a programmatic dependent launch does with the kernel before it, count once);
# the gap is GPU idle time between consecutive kernels of a range (launch overhead that multi-kernel
# implementations pay). Throughput divides the FLOPs of the source named above by the GPU time.

# %%
with nb.section():
    nb.need(summary)
    facet = counters.identity_columns(summary)
    figures.show(figures.lines_vs_x(summary, "gpu_ms", "GPU time per range", x, style, ylabel="GPU time [ms]",
                                    facet_candidates=facet))
    if timeline.has_flops(summary):
        figures.show(figures.lines_vs_x(summary, "tflops", "Throughput: FLOPs / GPU time", x, style,
                                        ylabel="TFLOP/s", facet_candidates=facet))
    else:
        nb.say("No FLOPs for these ranges (no work model, no Nsight Compute counts): throughput is not shown.")
    ref = summary.attrs["reference"]
    others = summary[summary["variant"] != ref]
    if "speedup" in others and others["speedup"].notna().any():
        figures.show(figures.lines_vs_x(others, "speedup", f"Speed relative to {ref} (same capture; > 1 is faster)", x,
                                        style, ylabel=f"{ref} time / time", facet_candidates=facet))
    else:
        nb.say(f"No speed comparison: no other implementation ran a configuration that {ref} ran.")
    cols = ["variant", "pass", *[c for c in facet if c not in ("variant", "pass", x)], x, "gpu_ms", "tflops",
            "speedup", "kernels", "gap_ms", "iters", "flop_source"]
    t = summary[[c for c in dict.fromkeys(cols) if c in summary and summary[c].nunique(dropna=False) > 1
                 or c in ("variant", x, "gpu_ms")]]
    nb.table(t, {"gpu_ms": "{:.4g}", "tflops": "{:.3g}", "speedup": "{:.3g}", "gap_ms": "{:.3g}"}, "timing",
             headers={"variant": "implementation", "gpu_ms": "GPU time [ms]", "tflops": "TFLOP/s",
                      "speedup": f"× {ref}", "kernels": "kernels", "gap_ms": "launch gaps [ms]",
                      "iters": "repeats", "flop_source": "FLOP source"},
             title="Per range: median GPU time, throughput, launch gaps", collapse=True)
