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
# # Option studies: block sizes, tile shapes, ...
#
# Ranges that run the same case with different options (a block size, a tile shape) form a study. Per option
# setting: the range's GPU time, and its main kernel's (the one with the largest share of the range's time)
# achieved occupancy, registers per thread and shared memory per block, from the launch statistics Nsight
# Compute recorded; then where each setting lands on the roofline.

# %% tags=["parameters"]
capture: str = "profiles/nvidia-h200/blocksize"  # capture folder (python -m nsightlab.store list); relative paths: cwd, then the repo
variants: str = ""  # comma-separated implementations to show (empty: all)
where: str = ""  # a pandas query over the range fields (e.g. D < 128 and not causal); empty: all ranges
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)

# %%
from IPython.display import display

from nsightlab import counters, figures, options, roofline
from nsightlab import notebook as nb

path, manifest = nb.prepare(capture, plotlyjs)
nb.say(nb.header(manifest, path))
work = counters.kernel_work(nb.load_ncu(path, manifest))
nb.say(f"**FLOP source:** {counters.flop_counter_summary(work)} (Nsight Compute, this capture; the roofline below).")

# %%
study = None
with nb.section():
    study = nb.select(options.option_study(work), variants, where)
    cols = ["variant", "pass", "study", "option", "ms", "main_kernel", "main_share", "occupancy", "registers",
            "smem_bytes", "threads_per_block"]
    display(study[[c for c in cols if c in study]].round(3))

# %%
with nb.section():
    nb.need(study)
    for v in study["variant"].unique():
        sel = study[study["variant"] == v]
        figures.show(figures.metric_vs_option(sel, "ms", f"{v}: GPU time per range [ms]", "ms"))
        figures.show(figures.metric_vs_option(sel, "occupancy", f"{v}: main kernel's achieved occupancy [%]", "%"))
        figures.show(figures.metric_vs_option(sel, "registers", f"{v}: main kernel's registers per thread",
                                              "registers"))

# %% [markdown]
# ## Roofline position per option setting (DRAM and L1)

# %%
with nb.section():
    nb.need(study)
    ranges = counters.per_range(work)
    ranges = ranges[ranges["range"].isin(study["range"])]
    pts = roofline.roofline_points(ranges)
    pts = pts[pts["level"] != "L2"].merge(study[["range", "option"]], on="range")
    pts["setting"] = pts["variant"].astype(str) + " " + pts["option"]
    style = figures.style_for(sorted(pts["setting"].unique()))
    figures.show(figures.roofline(pts, roofline.ceilings(work, manifest), "Roofline position per option setting",
                                  style, label="setting", fields=counters.identity_columns(ranges)))
