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
# # Option studies: block sizes, tile shapes, ...
#
# Ranges that run the same case with different options (a block size, a tile shape) form a study; the fields
# they share (N, D, ...) name it. Per option setting: the range's GPU time relative to the best setting of
# its study, and its main kernel's (the one with the largest share of the range's time) achieved occupancy and
# registers per thread, from the launch statistics Nsight Compute recorded; then where each setting lands on
# the roofline.

# %% tags=["parameters"]
capture: str = "profiles/nvidia-h200/blocksize"  # capture folder (python -m nsightlab.store list); relative paths: cwd, then the repo
variants: str = ""  # comma-separated implementations to show (empty: all)
where: str = ""  # a pandas query over the range fields (e.g. D > 64 and not causal); empty: all ranges
style_order: str = ""  # implementations in the order they take colours (empty: this capture's order)
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)

# %%
from nsightlab.analysis import counters, options, roofline
from nsightlab.render import figures
from nsightlab.render import page as nb
from nsightlab.store import read

nb.check_parameters(globals())
path, manifest = nb.prepare(capture, plotlyjs)
work = counters.kernel_work(read.load_ncu(path, manifest))
study = nb.attempt(options.option_study, work)
if study is not None:
    study = nb.select(study, variants, where)
style = nb.style(manifest, work, order=style_order)
nb.summary(options.findings(study) if study is not None else [])
nb.note(nb.header(manifest, path))
nb.note(f"**FLOP source:** {counters.flop_counter_summary(work)} (Nsight Compute, this capture; the roofline below).")

# %%
with nb.section():
    study = options.option_study(work) if study is None else study
    for v in study["variant"].unique():
        figures.show(figures.option_bars(study, v, style))
    cols = ["variant", "pass", "study", "option", "ms", "relative_time", "main_kernel", "main_share", "occupancy",
            "registers", "smem_bytes", "threads_per_block"]
    nb.table(study[[c for c in cols if c in study]],
             {"ms": "{:.3f}", "relative_time": "{:.2f}", "main_share": "{:.0%}", "occupancy": "{:.1f}"}, "study",
             headers={"variant": "implementation", "option": "option setting", "ms": "GPU time [ms]",
                      "relative_time": "time / study's best", "main_kernel": "main kernel",
                      "main_share": "its share of the time", "occupancy": "achieved occupancy [%]",
                      "registers": "registers / thread", "smem_bytes": "shared memory / block [B]",
                      "threads_per_block": "threads / block (launch)"},
             title="Every option setting: time and its main kernel's launch statistics", collapse=True)

# %% [markdown]
# ## Roofline position per option setting
#
# Each setting in a shade of its implementation's colour; marker shape is the memory level.

# %%
with nb.section():
    nb.need(study)
    ranges = counters.per_range(work)
    ranges = ranges[ranges["range"].isin(study["range"])]
    pts = roofline.roofline_points(ranges)
    pts = pts.merge(study[["range", "option"]], on="range")
    pts["setting"] = pts["variant"].astype(str) + " " + pts["option"]
    for title, sel, row in roofline.views(pts, nb.sweep_field(ranges), label="setting"):
        figures.show(figures.roofline(sel, roofline.ceilings(work, manifest),
                                      "Roofline position per option setting" + (f", {title}" if title else ""),
                                      figures.sub_style(sel, "setting", style), label="setting",
                                      fields=counters.identity_columns(ranges), size_by=nb.sweep_field(ranges),
                                      facet_row=row))
