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
# # L2 thrashing: when does the working set stop fitting?
#
# A kernel that re-reads data it wrote (a materialized N×N score matrix, say) is cheap while that data fits in
# the L2 and pays DRAM traffic once it outgrows it; a kernel that keeps its tiles on chip reads its inputs
# (almost) once at every size. Per implementation, along the capture's sweep: the L2 hit rate, DRAM bytes over
# the work model's compulsory bytes (inputs read once, outputs written once) and DRAM bytes over L2→SM bytes.

# %% tags=["parameters"]
capture: str = "profiles/nvidia-h200/seqlen"  # capture folder (python -m nsightlab.store list); relative paths: cwd, then the repo
variants: str = ""  # comma-separated implementations to show (empty: all)
where: str = ""  # a pandas query over the range fields (e.g. D > 64 and not causal); empty: all ranges
sweep: str = ""  # the swept range field (empty: N where it varies, else the numeric field with most values)
style_order: str = ""  # the order legends list implementations in (colours follow the name alone; empty: this capture's order)
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)

# %%
from nsightlab.analysis import counters, l2
from nsightlab.render import figures
from nsightlab.render import page as nb
from nsightlab.store import captures, read

nb.check_parameters(globals())
path, manifest = nb.prepare(capture, plotlyjs)
work = counters.kernel_work(read.load_ncu(path, manifest))
ranges = counters.attach_model(counters.per_range(work), captures.cases(manifest))
ranges = nb.select(ranges, variants, where)
x = nb.check_field("sweep", sweep, ranges, min_values=2) or nb.sweep_field(ranges) or "N"
style = nb.style(manifest, ranges, order=style_order)
l2_bytes = float((manifest.get("gpu") or {}).get("l2_bytes") or 0)
traffic = nb.attempt(l2.l2_traffic, ranges, l2_bytes)
onsets = None
if traffic is not None and x in traffic:
    traffic = l2.with_sweeps(traffic, x)
    onsets = nb.attempt(l2.onset_table, traffic, l2_bytes, x)
nb.summary(l2.findings(traffic, onsets, x))
nb.note(nb.header(manifest, path))
model = "; ".join(sorted({s for s in ranges["model_source"] if s})) or "none: the capture declares no work model"
nb.note(f"**FLOP source:** none used on this page (bytes and hit rates only). **Working set and compulsory "
        f"bytes:** {model}. **Sweep:** {x}. **L2:** {l2_bytes / 2**20:.0f} MiB (manifest).")

# %%
with nb.section():
    nb.need(traffic)
    if onsets is None:
        nb.say("No sweep in these ranges: each range on its own.")
        figures.show(figures.l2_per_range(traffic, "L2 hit rate per range", style))
    else:
        for title, sel in l2.panels(traffic, x):
            figures.show(figures.l2_vs_x(sel, l2_bytes, onsets[onsets["sweep"].isin(sel["sweep"])], title, x, style))

# %% [markdown]
# ## Where thrashing starts: model against measurement
#
# *Modeled*: the sweep value at which the working set equals the L2 size (log-log interpolation between the
# two sweep points that bracket it). *Measured*: the first point from which the hit rate stays at least 10
# points below the best it reached at smaller sizes, provided it keeps falling (or DRAM per compulsory byte
# rises). Each point is compared with the *best earlier* point, so a rising or flat hit-rate curve cannot
# trigger it. The charts below show that evidence for every sweep where the rule fired.

# %%
with nb.section():
    nb.need(traffic)
    if onsets is None:
        raise counters.NotApplicable(f"no sweep along {x} in these ranges (no two ranges differ in {x} alone), so "
                                     "there is no onset to find")
    found = onsets[onsets["measured_onset"].notna()]
    if found.empty:
        nb.say("No sweep shows a measured onset within its range (the table says why for each).")
    for _, row in found.iterrows():
        m = l2.measured_onset(traffic[traffic["sweep"] == row["sweep"]], x)
        color = style.get(str(row.get("variant")), {}).get("color", "#1f77b4")
        figures.show(figures.onset_evidence(m.evidence, x, f"{row['sweep']}: measured onset at {x}="
                                            f"{m.value:,.0f}", color))
        nb.note(f"**{row['sweep']}:** {m.reason}.")
    # the sweep's name spells its fields (implementation, pass, shape, options): the table keeps it and the onsets
    shown = [c for c in ("sweep", "modeled_onset", "modeled_note", "measured_onset", "measured_note", f"{x}_range",
                         "points") if c in onsets]
    nb.table(onsets[shown], {"modeled_onset": "{:,.0f}", "measured_onset": "{:,.0f}"}, "onsets",
             headers={"modeled_onset": f"modeled onset ({x})", "modeled_note": "modeled: how",
                      "measured_onset": f"measured onset ({x})", "measured_note": "measured: the rule's reading",
                      f"{x}_range": f"{x} range", "points": "points"},
             title="Modeled and measured onset of every sweep", collapse=True)
