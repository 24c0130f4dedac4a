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
# # Hierarchical roofline
#
# Every measured range (one implementation × case × pass, all its kernels summed) placed at three levels of
# the memory hierarchy, as Nsight Compute's roofline places a kernel: its FLOPs over the bytes moved at DRAM,
# L2 (L2→SM) and L1, against its FLOP/s. The FLOPs are the *useful* ones, the work model's, where the capture
# declares one, so that two implementations of one case rank as their times do; the FLOPs the hardware
# *counted* are in every point's hover, and a point whose kernel executes more than 1.1× the model (recomputation,
# masked or padded tiles) is ringed; the last section says where the excess comes from. The ceilings are Nsight
# Compute's own peaks per cycle, drawn at the highest clock a range of the figure ran at (the clock is in the label;
# the tensor peak the dense one, derived below the figure; a range's share of a peak is taken at the clock it ran
# at), and what the capture measured on this GPU: cuBLAS GEMMs and a device copy, and in captures that have them,
# the `mma.sync` and `wgmma` tensor instructions and the MUFU exp2 rate that bounds softmax.

# %% tags=["parameters"]
capture: str = "profiles/nvidia-h200/seqlen"  # capture folder (python -m nsightlab.store list); relative paths: cwd, then the repo
variants: str = ""  # comma-separated implementations to show (empty: all)
where: str = ""  # a pandas query over the range fields (e.g. D > 64 and not causal); empty: all ranges
mode: str = "replay"  # "replay": analyse the capture as it is; "live": capture the sweep `suite` on this GPU first
suite: str = "seqlen"  # live mode: the sweep to capture (name or TOML path)
only: str = ""  # live mode: regex of range names to capture (empty: the whole sweep)
live_profiles: str = "profiles_live"  # live mode: where the new capture is written
style_order: str = ""  # the order legends list implementations in (colours follow the name alone; empty: this capture's order)
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)

# %%
from nsightlab.analysis import bottleneck, counters, roofline
from nsightlab.render import figures
from nsightlab.render import page as nb
from nsightlab.store import captures, read

nb.check_parameters(globals())

path, manifest = nb.prepare(capture, plotlyjs, mode, suite, only, live_profiles)
work = counters.kernel_work(read.load_ncu(path, manifest))
ranges = counters.attach_model(counters.per_range(work, by_kernel_if_no_ranges=True), captures.cases(manifest))
ranges = nb.select(ranges, variants, where)
style = nb.style(manifest, ranges, order=style_order)
sweep = nb.sweep_field(ranges)
fields = [c for c in counters.identity_columns(ranges) if c not in ("variant",)]
pts = nb.attempt(roofline.roofline_points, ranges)
ceil = nb.attempt(roofline.ceilings, work, manifest, pts)
fc = nb.attempt(roofline.flop_check, ranges)
not_measured, not_measured_note = roofline.instruction_status(manifest)
nb.summary([*(roofline.findings(pts, ceil, fc, fields=fields) if pts is not None and ceil is not None else []),
            *not_measured[:1]])
nb.note(nb.header(manifest, path))
nb.note(f"**FLOPs:** {roofline.basis_text(pts) if pts is not None else 'none'}; counted by "
        f"{counters.flop_counter_summary(work)} (Nsight Compute, this capture). "
        f"{len(ranges)} ranges grouped by {ranges.attrs.get('grouped_by')}; "
        f"{ranges.attrs.get('outside', 0)} launches outside every range left out.")
for line in roofline.caveats(manifest, pts):
    nb.note(line)

# %% [markdown]
# ## The roofline
#
# Marker shape is the memory level, colour the implementation, size the swept field; a range's three markers share
# its FLOP/s and are joined; a black ring marks a range that counts more than 1.1× its model's FLOPs. The menu at
# the top right shows one level at a time; click a legend entry to hide an implementation. The roofs: solid, the
# limits no point can pass (the top compute peak at the highest clock a range ran at, and each memory level's
# peak); dotted, the peak of one pipe (HFMA2, FFMA), a limit only for work done on that pipe; dashed and marked
# *ref.*, reference lines: the same peak at the GPU's maximum clock, what cuBLAS GEMMs, the warp-level `mma.sync`
# and the warpgroup `wgmma` instructions reach on this GPU in microbenchmarks (FP16 and BF16, which Hopper runs at
# one rate, as one grey band with their spread; and FP8 e4m3 `wgmma`, drawn only where a range's products ran on a
# tensor path the counters leave out, or pass every 16-bit roof), the MUFU exp2 rate in attention FLOP/s at that
# pass and head dimension, and the device copy (its bytes are read and written, so a kernel that only reads can pass it). A
# point drawn as ▶ at the right edge lies beyond the axis (its intensity is in the hover): the L1 level of a
# TMA/wgmma kernel, which the L1 counters barely see.

# %%
with nb.section():
    nb.need(pts, ceil)
    for title, sel, row in roofline.views(pts, sweep):
        figures.show(figures.roofline(sel, ceil, "Hierarchical roofline" + (f", {title}" if title else ""), style,
                                      fields=fields, size_by=sweep, facet_row=row, note=not_measured_note,
                                      hover_note=bottleneck.page_hint(manifest)))
    nb.note(roofline.tensor_peak_derivation(work, manifest, ranges))
    for line in not_measured:
        nb.note(line)
    nb.table(roofline.ceiling_table(ceil), {"FLOP per SM-clock cycle (all SMs)": "{:,.0f}"}, "ceilings",
             title="The ceilings and where they come from", collapse=True)

# %% [markdown]
# ## Where each number comes from
#
# Nsight Compute names the same quantity in several ways (this project's `.sum` totals; the roofline
# sections' `.per_cycle_elapsed` and `.per_second` rates; `derived__*` forms). Each quantity is taken from the
# first form the report holds.

# %%
nb.table(nb.used_derivations(work), name="derivations", headers={"launches": "launches using it"},
         title="The recipe used for each quantity, and for how many launches", collapse=True)

# %% [markdown]
# ## Counted FLOPs against the work model
#
# Where the capture declares a work model for its cases (the FLOPs an implementation is credited with), the
# counters must come close to it. They see every floating-point instruction: elementwise arithmetic,
# recomputation beyond what the model credits, masked and padded tiles show up as counted > model.
# Disagreements beyond 10 % are flagged and explained by computation: the tensor-core and other shares of the
# excess, and the range's counted FLOPs against those of its siblings (the same case in the other pass, or
# without the mask) where those agree with their model.

# %%
with nb.section():
    fc = roofline.flop_check(ranges)
    nb.note("**Work model:** " + "; ".join(f"{s} ({n} ranges)" for s, n in fc["model_source"].value_counts().items()))
    figures.show(figures.flop_check(fc, "Counted / model FLOPs per range (shaded: within 10%)", sweep or "range", style))
    flagged = fc[fc["flag"]]
    nb.say(f"{len(flagged)} of {len(fc)} ranges disagree by more than 10%.")
    if len(flagged):
        nb.table(flagged[["range", "counted_over_model", "explanation"]], {"counted_over_model": "{:.3f}"}, "flagged",
                 headers={"counted_over_model": "counted / model FLOPs"}, title="The ranges that disagree, and why",
                 collapse=True)
