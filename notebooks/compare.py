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
# # Comparing two captures
#
# Before and after a change to a kernel, or one GPU against another. Ranges are matched by their decoded
# fields (implementation, pass, shape, dtype, options), ranges of foreign captures by their raw names; each
# matched range gets a verdict on its time: **slower**, **faster**, **below the threshold** (it moved beyond the
# noise, by less than the threshold) or **within noise**. The references (SDPA's
# backends) are yardsticks, not code under test: where they ran the same library on the same GPU and driver in both
# captures, a move of theirs is **reference drift**, reported apart and never a regression. The same comparison
# gates a CI job: `nsightlab compare BASE NEW --threshold 5%` exits 1 when a range is slower.

# %% tags=["parameters"]
base: str = "nvidia-h100-80gb-hbm3/seqlen"  # the base capture: a folder, or a gpu/name label of the store
new: str = "nvidia-h200/seqlen"  # the new capture, the same way
threshold: str = "5%"  # regression threshold on the time ("5%" or 0.05); noise beyond it widens the band
only: str = ""  # a regular expression the raw range names must match (empty: every range)
min_ms: float = 0.0  # ranges faster than this in base (ms) are judged but do not gate (0: all gate)
title: str = ""  # the page's title (empty: "BASE → NEW")
profiles: str = "profiles"  # where gpu/name labels are looked up
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (the report's pages: ../plotly.min.js)

# %%
from IPython.display import HTML, display

from nsightlab.analysis import comparison
from nsightlab.render import compare as C
from nsightlab.render import figures
from nsightlab.render import page as nb

figures.set_plotlyjs(plotlyjs)
cmp = comparison.compare_captures(base, new, threshold, only, profiles, min_ms=min_ms)
nb.say(f"## {title or f'{cmp.base.label} → {cmp.new.label}'}")
nb.say(C.headline(cmp))
display(HTML(C.summary_html(cmp)), metadata={"nsightlab": {"summary": [cmp.summary()], "comparison": cmp.facts()}})

# %% [markdown]
# ## Summary

# %%
figures.show(C.change_figure(cmp, "Time change of every matched range (bars: noise; grey band: the threshold)"))
display(HTML(C.table(C.verdicts_by(cmp, "time").reset_index(names="base time"), "by-time")))

# %%
display(HTML(nb.details("Verdicts by implementation and pass", C.table(C.verdicts_by(cmp, "impl").reset_index(), "by-impl"),
                        open_=True)))

# %% [markdown]
# ## The two captures
#
# What was compared, and everything that differs between the two captures beyond the code or the GPU under
# test. Quantities that are not like for like are marked † in the tables below; those a side cannot make are
# left out and named here.

# %%
nb.say("**Base.** " + nb.header(cmp.base.manifest, cmp.base.path))
nb.say("**New.** " + nb.header(cmp.new.manifest, cmp.new.path))
if cmp.compat:
    display(HTML(C.table(C.compat_table(cmp), "compat", wrap=True)))
else:
    nb.say("The two captures agree in GPU, tools, tool versions, metric set, clock control and replay mode.")
for line in C.caveats(cmp):
    nb.say(f"> {line}")

# %% [markdown]
# ## Rooflines, base → new
#
# Each matched range at its DRAM arithmetic intensity (FLOPs / DRAM bytes) and TFLOP/s (FLOPs / Nsight Compute
# duration), as each capture measured it. The FLOPs are the work model's (useful) where the captures declare one,
# so that a kernel that does more arithmetic for the same work does not rise; else the counted ones (the y axis
# says which). Hollow markers are the base, filled the new, an arrow
# joins them where the point moved. Each side's roof is drawn, its DRAM bandwidth up to its highest Nsight
# compute peak (base dashed, new solid; dotted: the capture's measured device-to-device copy). A point that
# moves up at the same intensity ran faster on the same work; one that moves sideways moved a different number
# of DRAM bytes (caching, a different algorithm).

# %%
with nb.section():
    pts = comparison.roofline_points(cmp, "DRAM")
    passes = [p for p in ("forward", "backward") if "pass" in pts and p in set(pts["pass"])] or [None]
    for p in passes:
        sel = pts if p is None else pts[pts["pass"] == p]
        figures.show(C.roofline_figure(cmp, sel, f"DRAM roofline, base → new{', ' + p if p else ''}"))

# %% [markdown]
# ## Every range
#
# One table per implementation and pass (unfolded: the groups with a slower range, else the few with a faster
# one). Time is the median over the launches each capture holds; *noise* is the relative spread of both sides
# in quadrature (\* where a side has a single launch and the noise is assumed). Throughput and effective
# bandwidth use the work model's FLOPs and compulsory bytes where the capture declares them, else the counted
# FLOPs; the counters come from Nsight Compute.

# %%
unfold = C.open_groups(cmp.ranges)
for name, g in C.groups(cmp.ranges):
    drift = int((g["verdict"] == comparison.DRIFT).sum())
    head = (f"<b>{name}</b>: {len(g)} ranges, {(g['verdict'] == comparison.SLOWER).sum()} slower, "
            f"{(g['verdict'] == comparison.FASTER).sum()} faster" + (f", {drift} reference drift" if drift else ""))
    body = C.table(C.delta_table(g, cmp.marks, "timing"), f"ranges-{name}")
    counters = C.delta_table(g, cmp.marks, "counters")
    if counters.shape[1] > 1:
        body += "<p><i>Nsight Compute counters, base → new:</i></p>" + C.table(counters, f"counters-{name}")
    display(HTML(nb.details(head, body, open_=name in unfold)))

# %% [markdown]
# ## Every kernel
#
# The same per kernel of each range (kernels matched by name within matched ranges). Kernel verdicts are shown,
# not gated on: a helper kernel that slows while its range does not is no regression of the workload.

# %%
with nb.section():
    for name, g in C.groups(comparison.kernels(cmp)):
        moved = int((~g["verdict"].isin(comparison.UNMOVED)).sum())
        head = f"<b>{name}</b>: {len(g)} kernels in {g['label'].nunique()} ranges, {moved} faster or slower"
        t = C.delta_table(g, cmp.marks, "timing", what="kernel")
        t.insert(0, "range", g["case"].to_numpy())
        body = C.table(t, f"kernels-{name}")
        counters = C.delta_table(g, cmp.marks, "counters", what="kernel")
        if counters.shape[1] > 1:
            counters.insert(0, "range", g["case"].to_numpy())
            body += "<p><i>Nsight Compute counters, base → new:</i></p>" + C.table(counters, f"kernel-counters-{name}")
        display(HTML(nb.details(head, body)))

# %% [markdown]
# ## Timing distributions
#
# The ranges that moved furthest beyond their noise (those that gate first), base and new side by side: every
# measured launch (Nsight Systems), or the benchmark's minimum, median and maximum, relative to the base
# median. Overlapping distributions are what *within noise* means.

# %%
top = comparison.distribution_rows(cmp, 30)
figures.show(C.distribution_figure(cmp, top, f"Timing distributions: the {len(top)} moves furthest beyond their noise"))

# %% [markdown]
# ## On one side only
#
# Ranges with no counterpart (or without a time) on the other side: compared with nothing, listed so that a
# dropped or added case is seen.

# %%
if len(cmp.unmatched):
    u = cmp.unmatched[["side", "range", "why"]].rename(columns={"side": "only in"})
    display(HTML(nb.details(f"{len(u)} range(s)", C.table(u, "unmatched", wrap=True), open_=len(u) <= 20)))
else:
    nb.say("Every range of either capture has a counterpart in the other.")

# %% [markdown]
# ## How the verdict is made
#
# For each range, *ratio* = new median / base median. Each side's spread is (max − min) / median over its
# repeated launches; the noise is the two spreads in quadrature, at least 1 % (drift between captures that
# back-to-back launches do not show), and at least 3 % where a side has one launch only (Nsight Compute
# timing). A range is **slower** when ratio > 1 + max(threshold, noise), **faster** when ratio < 1 / (1 +
# max(threshold, noise)), else **below the threshold** where it moved beyond the noise (a change measured, too small
# to count) and **within noise** where it did not. A reference implementation's range (sdpa_flash, sdpa_cudnn,
# sdpa_efficient, sdpa_math: library code this project does not change) that would be slower or faster is
# **reference drift** when the two captures share GPU, driver, torch and CUDA runtime: the same code on the same
# machine moved, which measures the machine (clocks, thermals, a neighbour), not the change. Drift neither gates nor
# leads the summary; where the GPU or the library differs, the references are judged like every other range.
