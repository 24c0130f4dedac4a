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
# # Why one kernel is slower than another
#
# Two implementations at one case, read from Nsight Compute's own sections (a deep capture, or anyone's
# `--set full` report): where each kernel's time goes (speed-of-light, issue slots, warp stalls by reason,
# pipes, occupancy and its limiter, shared-memory bank conflicts, memory throughput, registers and spills),
# and a ranked account of the gap between them, down to the source lines where the warps waited. Every value
# is a metric of the report, as `ncu --import R --page details` prints it. The same table in a terminal:
# `nsightlab why CAPTURE --a A --b B --case "field=value,..."`.

# %% tags=["parameters"]
capture: str = "nvidia-h200/bottleneck-deep"  # capture folder holding a deep report (deep.ncu-rep) or a --set full import
a: str = ""  # the implementation to explain (empty: the capture's first)
b: str = ""  # the implementation to compare it with (empty: the capture's second)
case: str = ""  # the case, as nsightlab why --case takes it: comma-separated field-equals-value pairs (empty: the first range of a; of a captured in several settings, the fastest)
top: int = 10  # source lines and SASS instructions listed per kernel
style_order: str = ""  # the order legends list implementations in (colours follow the name alone; empty: this capture's order)
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)

# %%
import pandas as pd

from nsightlab.analysis import bottleneck as B
from nsightlab.analysis import why
from nsightlab.core.errors import ProfileError
from nsightlab.render import figures
from nsightlab.render import page as nb
from nsightlab.store import read

nb.check_parameters(globals())

path, manifest = nb.prepare(capture, plotlyjs)
try:
    wanted = B.parse_case(case)
except ValueError as exc:
    raise nb.ParameterError(f"case={case!r}: {exc}") from None
try:
    deep = B.load(*why.deep_report(path))
except ProfileError as exc:
    raise nb.ParameterError(f"capture={capture!r}: {exc}") from None
held = list(dict.fromkeys(deep.launches["variant"].dropna()))
a = nb.choose("a", a, held) or held[0]
b = nb.choose("b", b, held) or next((v for v in held if v != a), a)
if b == a and len(held) > 1:
    raise nb.ParameterError(f"a and b are both {a!r}; choose two of: {', '.join(held)}")
try:
    at = B.complete_case(deep, a, wanted)
    la, lb = B.select_range(deep, a, at), B.select_range(deep, b, at)
except ValueError as exc:
    raise nb.ParameterError(f"case={case!r}: {exc}") from None
style = nb.style(manifest, deep.launches, order=style_order)
ka, kb = int(la["launch"].iloc[0]), int(lb["launch"].iloc[0])
pair = b != a
ranked = B.explain(deep, ka, deep, kb) if pair else None
gaps = B.metric_gaps(deep, ka, deep, kb)
where = ", ".join(f"{k}={v}" for k, v in at.items())
prof = B.profile(deep).set_index("launch")
nb.summary([f"**At {where}:** " + (B.verdict(a, b, ranked, gaps) if pair else
                                   f"{a} is the only implementation in this report; it is shown alone."),
            *(B.kernel_line(f"**{name}**", prof.loc[k]) for name, k in ((a, ka), (b, kb))[:1 + pair])])
nb.note(nb.header(manifest, path))
nb.note(f"**Report** `{deep.path.name}`: {len(deep.launches)} launches, {deep.launches['range'].nunique()} ranges. "
        f"**{a}**: `{la['range'].iloc[0]}`" + (f"; **{b}**: `{lb['range'].iloc[0]}`" if pair else "") + ".")

# %% [markdown]
# ## Every implementation at this case
#
# One row per implementation that has a range at this case: the range's time (all its launches) and the
# profile of its longest launch. Compute and memory throughput are Nsight's speed-of-light percentages;
# *warp cycles per issued instruction* is how long, on average, a warp waits between two of its instructions
# (lower is better, and more warps per scheduler hide more of it).

# %%
overview = B.at_case(deep, at)
cols = ["variant", "range_ms", "launches", "compute_sol_pct", "memory_sol_pct", "issue_slots_busy_pct",
        "warp_cycles_per_issued", "top_stall", "tensor_pipe_pct", "achieved_occupancy_pct", "occupancy_limiter",
        "registers_per_thread", "spill_requests", "kernel"]
nb.table(overview[cols], {"range_ms": "{:.3f}", "launches": "{:d}"}, "overview",
         headers={"variant": "implementation", "range_ms": "range time [ms]", "kernel": "longest kernel", **B.LABELS},
         title="Every implementation at this case")

# %% [markdown]
# ## Where the warps wait
#
# A scheduler issues at most one instruction per cycle; between two instructions of one warp, the warp is
# stalled for a reason Nsight Compute names. The bars split each kernel's warp cycles per issued instruction
# by reason (hover for what each means); the reasons add up to the total in the table above. The pipes show
# how busy each execution unit was: cycles it was active, and instructions issued to it.

# %%
names = dict.fromkeys([a, b])
launch_of = {a: ka, b: kb}
st = B.stalls(deep)
st = pd.concat([st[st["launch"] == launch_of[n]].assign(variant=n) for n in names], ignore_index=True)
figures.show(figures.stall_bars(st, "Warp cycles per issued instruction by stall reason, longest kernel of each", style))
pp = B.pipes(deep)
pp = pd.concat([pp[pp["launch"] == launch_of[n]].assign(variant=n) for n in names], ignore_index=True)
figures.show(figures.pipe_bars(pp, "Pipe utilization, longest kernel of each", style))
meanings = st.drop_duplicates("name")[["name", "meaning"]].sort_values("name")
nb.table(meanings, name="stall-meanings", headers={"name": "stall reason (Nsight)", "meaning": "the warp was"},
         title="What each stall reason means", collapse=True)

# %% [markdown]
# ## Side by side
#
# Each quantity of the two longest kernels beside each other (ratio: first / second). Occupancy is the share
# of the SM's warp slots in use; the limiter is the resource that allows the fewest blocks per SM. Bank
# conflicts are extra shared-memory wavefronts; spilling requests are local-memory traffic from registers
# the compiler could not keep.

# %%
side = gaps.assign(quantity=gaps["quantity"].map(B.LABELS))
nb.table(side[["quantity", "a", "b", "ratio", "metric"] if pair else ["quantity", "a", "metric"]], {"ratio": "{:.2f}"},
         "side-by-side", headers={"a": a, "b": b, "metric": "Nsight Compute metric"},
         title=f"{a} and {b}, longest kernel of each" if pair else f"{a}, longest kernel", open_rows=40)

# %% [markdown]
# ## What explains the difference
#
# The ratio of the two kernels' times split exactly into terms (logarithmic-mean shares, which add up to the
# whole gap): instructions issued per scheduler, warp cycles per issued instruction by stall reason, warps per
# scheduler (latency hiding), and the rest (idle SMs, the tail of the grid, the clock). A positive share widens
# the gap, a negative one narrows it; *ms* is the share of the time difference. Warps per scheduler counts every
# resident warp, whether or not it computes: in a warp-specialised kernel the producer warps, which only issue
# copies, count too, and warps that exit early lower it, so there it measures how many warps were resident rather
# than how many hid the consumers' latency.

# %%
if pair:
    nb.table(ranked[["term", "a", "b", "share", "ms", "what"]], {"share": "{:+.0%}", "ms": "{:+.3f}"}, "explain",
             headers={"a": a, "b": b, "share": "share of the gap", "ms": "of the gap [ms]", "what": "what it is"},
             title="What explains the difference, ranked", open_rows=30)
else:
    nb.say("One implementation only: nothing to compare it with.")

# %% [markdown]
# ## Each launch of the range
#
# A range is everything the implementation launched for the case: a backward pass is several kernels (the
# preprocessing dot product, the main kernel, the conversion of dQ). Their shares of the range's time say
# whether the comparison of the longest kernels above is the whole story.

# %%
for name, sel in ((a, la), (b, lb))[:1 + pair]:
    t = B.launch_table(deep, sel).assign(ms=lambda d: d["time_ns"] / 1e6)
    nb.table(t[["launch", "kernel", "ms", "share"]], {"ms": "{:.3f}", "share": "{:.0%}", "launch": "{:d}"},
             f"launches-{name}", headers={"ms": "time [ms]", "share": "share of the range"},
             title=f"{name}: {len(t)} launch(es), {t['ms'].sum():.3f} ms")

# %% [markdown]
# ## Source hotspots
#
# The CUDA source lines and SASS instructions of each longest kernel with the most warp-state samples, with
# the stall reasons that dominate there. Files are named as they are in the repository where found; a line's
# text is read from the file as it was at the capture's commit (git), so edits made since do not misplace it.
# The kernels must be built with `-lineinfo` and captured with the SourceCounters section for lines to appear.

# %%
for by, what in (("line", "source lines"), ("sass", "SASS instructions")):
    for name in names:
        try:
            h = B.hotspots(deep, launch_of[name], top, by, read.REPO, manifest.get("git_commit"))
        except ProfileError as exc:
            nb.say(f"> **{name}:** {exc}")
            continue
        if by == "line" and not h["line"].notna().any():
            nb.say(f"> **{name}:** no CUDA source line in this kernel's samples (built without `-lineinfo`); "
                   "its SASS instructions are listed below.")
            continue
        h = h.drop(columns=["address"], errors="ignore")
        source_from = h.attrs.get("source_from")
        nb.table(h, {"share": "{:.1%}", "samples": "{:,.0f}"}, f"hotspots-{by}-{name}",
                 headers={"share": "share of samples", "top_stalls": "largest stall reasons"},
                 title=f"{name}: the {len(h)} {what} with the most warp-state samples"
                       + (f" (source text: {source_from})" if source_from else ""), open_rows=top)
