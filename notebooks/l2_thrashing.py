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
# # L2 thrashing: when does the working set stop fitting?
#
# A kernel that re-reads data it wrote (a materialized N×N score matrix, say) is cheap while that data fits in
# the L2 and pays DRAM traffic once it outgrows it; a kernel that keeps its tiles on chip reads its inputs
# (almost) once at every size. Per implementation, along the capture's sweep: the L2 hit rate, DRAM bytes over
# the work model's compulsory bytes (inputs read once, outputs written once) and DRAM bytes over L2→SM bytes.
# The dotted lines mark where the modeled working set equals the L2 size the capture recorded.

# %% tags=["parameters"]
capture: str = "profiles/nvidia-h200/seqlen"  # capture folder (python -m nsightlab.store list); relative paths: cwd, then the repo
variants: str = ""  # comma-separated implementations to show (empty: all)
where: str = ""  # a pandas query over the range fields (e.g. D < 128 and not causal); empty: all ranges
sweep: str = ""  # the swept range field (empty: N where it varies, else the numeric field with most values)
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)

# %%
from IPython.display import display

from nsightlab import counters, figures, l2
from nsightlab import notebook as nb

path, manifest = nb.prepare(capture, plotlyjs)
nb.say(nb.header(manifest, path))
work = counters.kernel_work(nb.load_ncu(path, manifest))
ranges = counters.attach_model(counters.per_range(work), nb.capture_cases(manifest))
ranges = nb.select(ranges, variants, where)
style = figures.style_for(nb.implementations(manifest, ranges))
x = sweep or nb.sweep_field(ranges) or "N"
l2_bytes = float((manifest.get("gpu") or {}).get("l2_bytes") or 0)
model = "; ".join(sorted({s for s in ranges["model_source"] if s})) or "none: the capture declares no work model"
nb.say(f"**FLOP source:** none used on this page (bytes and hit rates only). **Working set and compulsory bytes:** "
       f"{model}. **Sweep:** {x}. **L2:** {l2_bytes / 2**20:.0f} MiB (manifest).")

# %%
traffic = onsets = None
with nb.section():
    traffic = l2.l2_traffic(ranges, l2_bytes)
with nb.section():
    nb.need(traffic)
    traffic = l2.with_sweeps(traffic, x)
    onsets = l2.onset_table(traffic, l2_bytes, x)
    for title, sel in l2.panels(traffic, x):
        figures.show(figures.l2_vs_x(sel, l2_bytes, onsets[onsets["sweep"].isin(sel["sweep"])], title, x, style))
if traffic is not None and onsets is None:
    nb.say("Without a sweep, each range on its own:")
    figures.show(figures.l2_per_range(traffic, "L2 hit rate per range", style))

# %% [markdown]
# ## Where thrashing starts: model against measurement
#
# *Modeled*: the sweep value at which the working set equals the L2 size (log-log interpolation between the
# two sweep points that bracket it). *Measured*: the first point from which the hit rate stays at least 10
# points below the best it reached at smaller sizes, provided it keeps falling (or DRAM per compulsory byte
# rises): a rising or flat hit-rate curve cannot trigger it. NaN: not within the sweep (the note says why).

# %%
with nb.section():
    nb.need(onsets)
    display(onsets.drop(columns=["measured_note"]).round(0))

# %% [markdown]
# The evidence behind each measured onset: the hit rate, the best at smaller sizes, and the point the rule
# picked.

# %%
with nb.section():
    nb.need(onsets)
    found = onsets[onsets["measured_onset"].notna()]
    if found.empty:
        nb.say("No sweep shows a measured onset within its range.")
    for name in found["sweep"]:
        m = l2.measured_onset(traffic[traffic["sweep"] == name], x)
        nb.say(f"**{name}:** {m.reason}")
        figures.show(figures.onset_evidence(m.evidence, x, name))
