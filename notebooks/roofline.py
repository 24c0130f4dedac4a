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
# # Hierarchical roofline
#
# Every measured range (one implementation × case × pass, all its kernels summed) placed at three levels of
# the memory hierarchy: its FLOPs over the bytes moved at DRAM, L2 (L2→SM crossbar) and L1 (LSU writeback),
# against its FLOP/s. Ceilings are Nsight Compute's own peaks (`*.peak_sustained` × the clock each kernel ran
# at) for the pipes the capture counted, plus the capture's measured GEMM and copy (dashed) where it made them.
# FLOPs here are always *counted* by the hardware (instructions weighted as Nsight's roofline sections weigh
# them), never assumed; the work model, where the capture has one, is checked against them at the end.

# %% tags=["parameters"]
capture: str = "profiles/nvidia-h200/seqlen"  # capture folder (python -m nsightlab.store list); relative paths: cwd, then the repo
variants: str = ""  # comma-separated implementations to show (empty: all)
where: str = ""  # a pandas query over the range fields (e.g. D < 128 and not causal); empty: all ranges
mode: str = "replay"  # "replay": analyse the capture as it is; "live": capture the sweep `suite` on this GPU first
suite: str = "seqlen"  # live mode: the sweep to capture (name or TOML path)
only: str = ""  # live mode: regex of range names to capture (empty: the whole sweep)
live_profiles: str = "profiles_live"  # live mode: where the new capture is written
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)

# %%
from IPython.display import display

from nsightlab import counters, figures, roofline
from nsightlab import notebook as nb

path, manifest = nb.prepare(capture, plotlyjs, mode, suite, only, live_profiles)
nb.say(nb.header(manifest, path))
work = counters.kernel_work(nb.load_ncu(path, manifest))
ranges = counters.attach_model(counters.per_range(work, by_kernel_if_no_ranges=True), nb.capture_cases(manifest))
ranges = nb.select(ranges, variants, where)
style = figures.style_for(nb.implementations(manifest, ranges))
sweep = nb.sweep_field(ranges)
nb.say(f"**FLOP source:** {counters.flop_counter_summary(work)} (Nsight Compute, this capture). "
       f"{len(ranges)} ranges grouped by {ranges.attrs.get('grouped_by')}; "
       f"{ranges.attrs.get('outside', 0)} launches outside every range left out.")

# %% [markdown]
# ## Where each number comes from
#
# Nsight Compute names the same quantity in several ways (this project's `.sum` totals; the roofline
# sections' `.per_cycle_elapsed` and `.per_second` rates; `derived__*` forms). Each quantity is taken from the
# first form the report holds; the table lists the forms used here and for how many launches.

# %%
nb.used_derivations(work)

# %%
ceil = None
with nb.section():
    ceil = roofline.ceilings(work, manifest)
    display(ceil.assign(value_T=ceil["value"] / 1e12).drop(columns="value"))

# %% [markdown]
# Read the tensor ceiling with care: Nsight Compute's `sm__ops_path_tensor_src_fp16.sum.peak_sustained` is
# the per-cycle peak of the whole FP16 tensor path (`per_cycle` above, all SMs); on Hopper it is twice what a
# dense FP16 GEMM reaches, the factor between the 2:4-sparse and the dense rates. A measured GEMM (dashed,
# where the capture has one) is the practical dense ceiling.

# %%
with nb.section():
    nb.need(ceil)
    pts = roofline.roofline_points(ranges)
    fields = [c for c in counters.identity_columns(ranges) if c not in ("variant", "pass")]
    passes = [p for p in ("forward", "backward") if p in set(pts.get("pass", []))] or [None]
    for p in passes:
        sel = pts if p is None else pts[pts["pass"] == p]
        figures.show(figures.roofline(sel, ceil, f"Hierarchical roofline{', ' + p if p else ''}", style,
                                      fields=fields))

# %% [markdown]
# ## Counted FLOPs against the work model
#
# Where the capture declares a work model for its cases (the FLOPs an implementation is credited with), the
# counters must come close to it. They see every floating-point instruction: elementwise arithmetic,
# recomputation in a backward pass and padded tiles show up as counted > model. Disagreements beyond 10 % are
# flagged and explained from the case's own fields and traits.

# %%
with nb.section():
    fc = roofline.flop_check(ranges)
    nb.say("**Work model:** " + "; ".join(f"{s} ({n} ranges)" for s, n in fc["model_source"].value_counts().items()))
    figures.show(figures.flop_check(fc, "Counted / model FLOPs per range (shaded: within 10%)", sweep or "range", style))
    flagged = fc[fc["flag"]]
    nb.say(f"{len(flagged)} of {len(fc)} ranges disagree by more than 10%.")
    display(flagged[["range", "counted_over_model", "explanation"]].round(3))
