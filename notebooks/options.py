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
style_order: str = ""  # the order legends list implementations in (colours follow the name alone; empty: this capture's order)
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)

# %%
from nsightlab.analysis import counters, options, roofline
from nsightlab.render import figures
from nsightlab.render import page as nb
from nsightlab.store import captures, read

nb.check_parameters(globals())
path, manifest = nb.prepare(capture, plotlyjs)
work = counters.kernel_work(read.load_ncu(path, manifest))
study = nb.attempt(options.option_study, work)
if study is not None:
    study = nb.select(study, variants, where)
style = nb.style(manifest, work, order=style_order)
others = options.beside_others(work, study) if study is not None else None
nb.summary((options.findings(study) + options.ladder_findings(others)) if study is not None else [])
nb.note(nb.header(manifest, path))
nb.note("**FLOPs** (the roofline below): the work model's (useful) where the cases carry one, else the counted; "
        f"counted by {counters.flop_counter_summary(work)} (Nsight Compute, this capture).")

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
# ## Each setting beside the other implementations of its case
#
# Where other implementations ran a study's case (the same fields, their own options), each setting's GPU time is
# drawn against theirs: a dashed line per implementation, in its colour. A ladder of settings (how K and V reach
# shared memory, say) reads as steps between the kernel below it and the one above.

# %%
with nb.section():
    nb.need(study)
    if others is None or others.empty:
        nb.say("_No other implementation ran the case of any study in this capture._")
    else:
        for (v, p), _ in others.groupby(["variant", "pass"], sort=False):
            figures.show(figures.option_ladder(study, others, str(v), str(p), style))
        nb.table(others, {"other_ms": "{:.3f}", "best_ms": "{:.3f}", "speed": "{:.2f}"}, "ladder",
                 headers={"variant": "implementation", "study": "study", "other": "other implementation",
                          "other_ms": "its GPU time [ms]", "best_option": "best setting",
                          "best_ms": "best setting's GPU time [ms]", "speed": "best setting's speed / other's"},
                 title="Each study's best setting against the other implementations of the case", collapse=True)

# %% [markdown]
# ## Roofline position per option setting
#
# One roofline per implementation. Its option settings go from light to dark grey in their natural order (greys are
# no implementation's colour on any page: a colour here never means another implementation); marker shape is the
# memory level.

# %%
with nb.section():
    nb.need(study)
    ranges = counters.attach_model(counters.per_range(work), captures.cases(manifest))
    ranges = ranges[ranges["range"].isin(study["range"])]
    pts = roofline.roofline_points(ranges)
    pts = pts.merge(study[["range", "option"]], on="range")
    pts["setting"] = pts["variant"].astype(str) + " " + pts["option"]
    # colour by setting on a sequential grey scale, one figure per implementation (its name in the title): the
    # implementations' colours (figures.IMPL_STYLE) stay theirs alone
    for v in [s for s in style if s in set(pts["variant"].astype(str))]:
        one = pts[pts["variant"].astype(str) == v]
        for title, sel, row in roofline.views(one, nb.sweep_field(ranges), label="setting", max_figures=10**6):
            figures.show(figures.roofline(sel, roofline.ceilings(work, manifest, sel),
                                          f"{v}: roofline position per option setting" + (f", {title}" if title else ""),
                                          figures.sequence_style(sel["setting"]), label="setting",
                                          fields=counters.identity_columns(ranges), size_by=nb.sweep_field(ranges),
                                          facet_row=row))
