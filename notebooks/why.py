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
# is a metric of the report, as `ncu --import R --page details` prints it. With `b_capture`, side b comes from
# a second capture: one kernel before and after a change. The same table in a terminal:
# `nsightlab why CAPTURE --a A --b B --case "field=value,..."` (or `--b-capture OTHER`).

# %% tags=["parameters"]
capture: str = "nvidia-h200/bottleneck-deep"  # capture folder holding a deep report (deep.ncu-rep) or a --set full import
a: str = ""  # the implementation to explain (empty: the first of the capture)
b: str = ""  # the implementation to compare it with (empty: the second of the capture; with b_capture: a)
b_capture: str = ""  # a second capture for side b (empty: both from capture): the same kernel after a change
case: str = ""  # the case: comma-separated field-equals-value pairs, as nsightlab why --case takes them (empty: the first range of a, the fastest setting)
kernel: str = ""  # a regular expression: compare the longest launch of each side whose kernel name or signature matches it (empty: the longest launch of each)
top: int = 10  # source lines and SASS instructions listed per kernel
style_order: str = ""  # the order legends list implementations in (colours follow the name alone; empty: this capture's order)
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)

# %%
import pandas as pd

from nsightlab.analysis import advice as A
from nsightlab.analysis import bottleneck as B
from nsightlab.analysis import why
from nsightlab.core.errors import ProfileError
from nsightlab.render import figures
from nsightlab.render import page as nb
from nsightlab.store import captures, find, read

nb.check_parameters(globals())

path, manifest = nb.prepare(capture, plotlyjs)
try:
    wanted = B.parse_case(case)
except ValueError as exc:
    raise nb.ParameterError(f"case={case!r}: {exc}") from None
try:
    deep = B.load(*find.deep_report(path))
except ProfileError as exc:
    raise nb.ParameterError(f"capture={capture!r}: {exc}") from None
path_b, manifest_b, deep_b = path, manifest, None
if b_capture:
    try:
        path_b, manifest_b = nb.prepare(b_capture, plotlyjs)
        deep_b = B.load(*find.deep_report(path_b))
    except (nb.ParameterError, ProfileError) as exc:
        raise nb.ParameterError(f"b_capture={b_capture!r}: {exc}") from None
nb.choose("a", a, list(dict.fromkeys(deep.launches["variant"].dropna())))  # a misspelt name: "did you mean"
nb.choose("b (b_capture)" if b_capture else "b", b,
          list(dict.fromkeys((deep_b if deep_b is not None else deep).launches["variant"].dropna())))
try:
    tags = captures.capture_tags(manifest, path, manifest_b, path_b)
    at, side_a, side_b = why.pick_sides(deep, deep_b, a, b, wanted, tags, kernel)
except ValueError as exc:
    raise nb.ParameterError(f"a={a!r}, b={b!r}, case={case!r}, kernel={kernel!r}: {exc}") from None
pair = side_b is not None
sides = [side_a, side_b] if pair else [side_a]
longest = B.compares_longest([s.sel for s in sides], [s.launch for s in sides])  # no kernel pattern, or it picked the longest
kind = "longest kernel" if longest else "compared kernel"  # in titles: which launch a side shows
each = f"{kind} of each"
commit_of = {side_a.name: manifest.get("git_commit"), **({side_b.name: manifest_b.get("git_commit")} if pair else {})}
style = nb.style(manifest, deep.launches, order=",".join([*(s.name for s in sides), style_order]))  # a, then b
if pair and side_a.impl == side_b.impl:  # one kernel in two captures: b (the later) in its colour, a in grey
    style = figures.before_after(style, side_a.name, side_b.name, side_a.impl)
ranked = B.explain(side_a.deep, side_a.launch, side_b.deep, side_b.launch) if pair else None
compared = {s.name: B.profile(s.deep).set_index("launch").loc[s.launch] for s in sides}  # each side's profile row
access_hot = {s.name: B.access_hotspots(s.deep, s.launch, top, read.REPO, commit_of[s.name]) for s in sides}
access = {s.name: B.access_line(f"**{s.name}**", compared[s.name], access_hot[s.name]) for s in sides}
predicated_hot = {s.name: B.predicated_hotspots(s.deep, s.launch, top, read.REPO, commit_of[s.name]) for s in sides}
predicated = {s.name: B.predicated_line(f"**{s.name}**", compared[s.name], predicated_hot[s.name]) for s in sides}
gaps = B.metric_gaps(side_a.deep, side_a.launch, *((side_b.deep, side_b.launch) if pair else (side_a.deep, side_a.launch)))
where = why.case_line(at, sides)
call = B.call_line(side_a.name, side_a.sel, side_b.name, side_b.sel, (side_a.launch, side_b.launch)) if pair else None
launch_of = {s.name: A.Launch(s.name, s.deep, s.launch, commit_of[s.name]) for s in sides}
if pair:
    to_try = A.what_to_try(launch_of[side_a.name], launch_of[side_b.name], ranked, read.REPO)
else:  # one kernel: Nsight Compute's own advice, its rules with the largest estimated speedups
    advice = A.rules(side_a.deep, side_a.launch)
    to_try = [A.rule_line(side_a.name, r) for _, r in advice[(advice["type"] == "OPT") & (advice["speedup"] >= 1)].head(3).iterrows()]
nb.summary([f"**At {where}:** " + (call + (" Longest launch: " if longest else " Compared launch: ") if call else "")
            + (B.verdict(side_a.name, side_b.name, ranked, gaps) if pair else
               f"{side_a.name} is the only implementation in this report; it is shown alone."),
            ("**What to try**, " + ("computed from the counters, rules and source lines below:" if pair else
                                    "from Nsight Compute's rules below:"), to_try),
            *(B.kernel_line(f"**{s.name}**", compared[s.name]) for s in sides),
            *(f"Memory accesses beyond the ideal: {line}" for line in access.values() if line),
            *(f"Issued for nothing: {line}" for line in predicated.values() if line)])
nb.note(nb.header(manifest, path))
if b_capture:
    nb.note("**Side b:** " + nb.header(manifest_b, path_b))
reports_shown = [s.deep for i, s in enumerate(sides) if all(s.deep is not t.deep for t in sides[:i])]
nb.note("; ".join(f"**Report** `{d.path.name}`: {len(d.launches)} launches, {d.launches['range'].nunique()} ranges"
                  for d in reports_shown) + ". "
        + "; ".join(f"**{s.name}**: `{s.sel['range'].iloc[0]}`" for s in sides) + ".")

# %% [markdown]
# ## Every implementation at this case
#
# One row per implementation that has a range at this case: the range's time (all its launches) and the
# profile of its longest launch (whichever launch the page's `kernel` picks for the sections below). Compute and
# memory throughput are Nsight's speed-of-light percentages; *warp cycles per issued instruction* is how long,
# on average, a warp waits between two of its instructions (lower is better, and more warps per scheduler hide more of it).

# %%
overview = why.at_case(sides, at)
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
st = why.per_side(B.stalls, sides)
figures.show(figures.stall_bars(st, f"Warp cycles per issued instruction by stall reason, {each}", style))
pp = why.per_side(B.pipes, sides)
figures.show(figures.pipe_bars(pp, f"Pipe utilization, {each}", style))
meanings = st.drop_duplicates("name")[["name", "meaning"]].sort_values("name")
nb.table(meanings, name="stall-meanings", headers={"name": "stall reason (Nsight)", "meaning": "the warp was"},
         title="What each stall reason means", collapse=True)

# %% [markdown]
# ## Side by side
#
# Each quantity of the two kernels compared (the longest launch of each side, unless the page's `kernel` picks
# another) beside each other (ratio: first / second). Occupancy is the share
# of the SM's warp slots in use; the limiter is the resource that allows the fewest blocks per SM. Bank
# conflicts are extra shared-memory wavefronts; spilling requests are local-memory traffic from registers
# the compiler could not keep.

# %%
# one format per quantity: TB/s to two decimals, percentages to one, counts in full, ratios to three digits
side = nb.format_rows(gaps, "quantity", ["a", "b"], {"*_tbps": "{:.2f}", "*_pct": "{:.1f}", "time_ns": "{:,.0f}",
                                                      "warp_cycles_per_issued": "{:.2f}", "*_per_scheduler": "{:,.2f}",
                                                      "inst_issued_per_scheduler": "{:,.0f}", "waves_per_sm": "{:.2f}",
                                                      "*_per_inst": "{:.2f}", "*_per_sector": "{:.1f}", "inst_issued": "{:,.0f}",
                                                      "shared_*": "{:,.0f}", "global_*": "{:,.0f}"})
side = side.assign(quantity=gaps["quantity"].map(B.LABELS).fillna(gaps["quantity"]))
nb.table(side[["quantity", "a", "b", "ratio", "metric"] if pair else ["quantity", "a", "metric"]], {"ratio": "{:.2f}"},
         "side-by-side", headers={"a": side_a.name, "b": side_b.name if pair else "", "metric": "Nsight Compute metric"},
         title=f"{side_a.name} and {side_b.name}, {each}" if pair else f"{side_a.name}, {kind}",
         open_rows=60, right=["a", "b", "ratio"])

# %% [markdown]
# ## What explains the difference
#
# The ratio of the two kernels' times split exactly into terms, which add up to the whole gap: instructions issued
# per scheduler, the cycles between two issues of a scheduler, and the rest (idle SMs, the tail of the grid, the
# clock). The cycles between issues are the warps' cycles per issued instruction, split by stall reason, over the
# warps per scheduler that hide them; the terms that cancel are gathered: more warps per scheduler bring their own
# *Not Selected* stalls (a warp that was ready while another issued), so the two are one net term, with its parts
# under it. The waterfall walks from the first kernel's time to the second's, one step per term: a dark step is
# time the first kernel spends more on that term, a light one time it spends less. *ms* is each term's part of the
# time difference (first minus second); a share of the gap is given only where it reads plainly (a clear gap that
# each of the three factors widens). Warps per scheduler counts every resident warp, whether or not it computes: in
# a warp-specialised kernel the producer warps, which only issue copies, count too, and warps that exit early lower
# it, so there it measures how many warps were resident rather than how many hid the consumers' latency.

# %%
if pair:
    g = A.grouped(ranked)
    steps = A.waterfall(g)
    figures.show(figures.gap_waterfall(steps, f"From {side_a.name}'s {ranked.attrs['time_a_ms']:.3f} ms to "
                                              f"{side_b.name}'s {ranked.attrs['time_b_ms']:.3f} ms, term by term ({each})",
                                       (side_a.name, side_b.name), style))
    what = dict(zip(ranked["term"], ranked["what"], strict=True)) | {
        A.ISSUE_INTERVAL: "warp cycles per issued instruction over warps per scheduler: the terms under it",
        A.WARPS_NET: "warps per scheduler with the Not Selected and Selected stalls that more warps bring"}
    # one format per row: instructions per scheduler as a count, cycles (per instruction, between issues) and warps
    # to three decimals (no 6.2e-06 beside 2,310,076)
    shown = nb.format_rows(g, "term", ["a", "b"], {"instructions issued": "{:,.0f}", "*": "{:.3f}"})
    shown = shown.assign(term=["\u2003" * int(lv) + t for lv, t in zip(g["level"], g["term"], strict=True)],
                         what=g["term"].map(what).fillna(""))
    cols = ["term", "a", "b", "ms", *(["share"] if g["share"].notna().any() else []), "what"]
    nb.table(shown[cols], {"ms": "{:+.3f}", "share": "{:.0%}"}, "grouped",
             headers={"a": side_a.name, "b": side_b.name, "ms": "of the gap [ms]", "share": "share of the gap",
                      "what": "what it is"},
             title=f"What explains the difference: the terms, those that cancel gathered (they add up to "
                   f"{ranked.attrs['time_a_ms'] - ranked.attrs['time_b_ms']:+.3f} ms)", open_rows=40,
             widths={"term": "15em"}, cell_css={"term": lambda v: "" if str(v).startswith("\u2003") else "font-weight:600"})
    nb.table(ranked[["term", "a", "b", "share", "ms", "what"]], {"share": "{:+.0%}", "ms": "{:+.3f}"}, "explain",
             headers={"a": side_a.name, "b": side_b.name, "share": "share of the gap", "ms": "of the gap [ms]", "what": "what it is"},
             title="Every term, ungathered and ranked (for reference)", collapse=True)
else:
    nb.say("One implementation only: nothing to compare it with.")

# %% [markdown]
# ## From term to line
#
# Where each stall term of the gap happens in the code: for every stall reason that accounts for at least 1 % of
# the gap (at least the six largest), the source line of each kernel with the most warp-state samples of that reason,
# its share of the kernel's samples of that reason, and its text at the capture's commit. A kernel built without
# `-lineinfo` has no source lines: its SASS instruction with the most samples is shown instead.

# %%
if pair:
    gap = ranked.attrs["time_a_ms"] - ranked.attrs["time_b_ms"]
    terms = g[g["reason"].notna() & (g["ms"] != 0)].copy()
    terms = terms.reindex(terms["ms"].abs().sort_values(ascending=False, kind="stable").index)
    big = terms[terms["ms"].abs() >= 0.01 * abs(gap)]
    terms = big if len(big) >= 6 else terms.head(6)
    rows = []
    for t in terms.itertuples():
        row = {"term": t.term, "ms": t.ms}
        for k, s in (("a", side_a), ("b", side_b)):
            h = A.stall_lines(s.deep, s.launch, t.reason, 1, "line", read.REPO, commit_of[s.name])
            if len(h) and pd.isna(h["line"].iloc[0]):  # no source line: the SASS instruction
                h = A.stall_lines(s.deep, s.launch, t.reason, 1, "sass", read.REPO, commit_of[s.name])
                row |= {f"where_{k}": "SASS (no source line)" if len(h) else "—",
                        f"share_{k}": h["share"].iloc[0] if len(h) else None,
                        f"text_{k}": str(h["sass"].iloc[0]) if len(h) else ""}
                continue
            row |= {f"where_{k}": A.where(h) if len(h) else "—", f"share_{k}": h["share"].iloc[0] if len(h) else None,
                    f"text_{k}": str(h["source"].iloc[0]).strip() if len(h) else ""}
        rows.append(row)
    lines = pd.DataFrame(rows, columns=["term", "ms", *(f"{c}_{k}" for k in "ab" for c in ("where", "share", "text"))])
    nb.table(lines, {"ms": "{:+.3f}", "share_a": "{:.0%}", "share_b": "{:.0%}"}, "term-lines",
             headers={"ms": "of the gap [ms]", "where_a": f"{side_a.name}: line", "share_a": f"{side_a.name}: share",
                      "text_a": f"{side_a.name}: source", "where_b": f"{side_b.name}: line", "share_b": f"{side_b.name}: share",
                      "text_b": f"{side_b.name}: source"},
             title="The source line with the most samples of each stall term, per kernel (share: of the kernel's "
                   "samples of that stall reason)", open_rows=20,
             widths={"term": "8em", "where_a": "12em", "where_b": "12em", "text_a": "14em", "text_b": "14em"},
             cell_css={f"text_{k}": lambda v: "font-family:ui-monospace,monospace;font-size:.95em" for k in "ab"})
else:
    nb.say("One implementation only: no gap to trace; the source hotspots below give its lines with the most samples "
           "and their largest stall reasons.")

# %% [markdown]
# ## Instruction mix
#
# Executed warp instructions per SASS opcode (InstructionStats' `sass__inst_executed_per_opcode`): which
# instructions make up the *instructions issued* term. The bars show the difference per opcode, the fifteen
# largest: to the right where the first kernel executes more. *Of the other's total* is the opcode's difference
# over the second kernel's total: these add up to the ratio of the two totals minus one.

# %%
if pair:
    mix = A.instruction_mix(side_a.deep, side_a.launch, side_b.deep, side_b.launch)
    sentence = A.mix_sentence(side_a.name, side_b.name, mix)
    if sentence is None:
        nb.say("No per-opcode instruction counts in this report (capture with the InstructionStats section).")
    else:
        nb.say(sentence)
        figures.show(figures.mix_bars(mix, f"Warp instructions executed per opcode: {side_a.name} − {side_b.name}, "
                                           f"the {min(15, len(mix))} largest differences", (side_a.name, side_b.name), style))
        counts = {c: "{:,.0f}" for c in ("a", "b")} | {"diff": "{:+,.0f}", "of_b": "{:+.1%}", "share": "{:+.0%}"}
        heads = {"a": side_a.name, "b": side_b.name, "diff": "difference", "of_b": f"of {side_b.name}'s total",
                 "share": "of the difference", "kind": "what it does"}
        nb.table(mix.head(15)[["name", "kind", "a", "b", "diff", "of_b"]], counts, "mix-opcode",
                 headers={**heads, "name": "opcode"}, title="The 15 opcodes that differ the most", open_rows=15)
        cat = A.instruction_mix(side_a.deep, side_a.launch, side_b.deep, side_b.launch, "category")
        if len(cat):
            nb.table(cat[["name", "a", "b", "diff", "of_b"]], counts, "mix-category", headers={**heads, "name": "category"},
                     title="By opcode category (sass__inst_executed_per_opcode_category)", open_rows=20)
        nb.table(mix[["name", "kind", "a", "b", "diff", "of_b"]], counts, "mix-all", headers={**heads, "name": "opcode"},
                 title="Every opcode", collapse=True)
else:
    mix = A.instruction_mix(side_a.deep, side_a.launch, side_a.deep, side_a.launch)
    if not len(mix):
        nb.say("No per-opcode instruction counts in this report (capture with the InstructionStats section).")
    else:
        mix = mix.sort_values(["a", "name"], ascending=[False, True]).assign(of_a=lambda d: d["a"] / d["a"].sum())
        for rows, fold in ((mix.head(15), False), (mix, True)):
            nb.table(rows[["name", "kind", "a", "of_a"]], {"a": "{:,.0f}", "of_a": "{:.1%}"}, "mix-one",
                     headers={"name": "opcode", "kind": "what it does", "a": side_a.name, "of_a": "of its total"},
                     title=f"{side_a.name}: warp instructions executed per opcode, the {len(rows)} most executed of "
                           f"{mix['a'].sum():,.0f} in all" if not fold else "Every opcode", collapse=fold)

# %% [markdown]
# ## Nsight Compute's rules
#
# The guidance Nsight Compute's details page leads with: each rule that fired for either kernel, with its estimated
# speedup (*local*: of the part of the kernel the rule looks at; *global*: of the whole kernel) and its message, the
# two kernels side by side, ranked by the larger estimate. Rules without an estimate (information) are folded below.

# %%
if pair:
    rules = A.rules_side_by_side(side_a.deep, side_a.launch, side_b.deep, side_b.launch)
    if not len(rules):
        nb.say("No rule results in this report (Nsight Compute records them with each section it collects).")
    else:
        est = lambda v, kind: None if pd.isna(v) else f"{v:.1f}% {kind or ''}".strip()  # noqa: E731
        shown = pd.DataFrame({
            "rule": [n + (f": {t}" if t else "") for n, t in zip(rules["name"], rules["title"], strict=True)],
            **{f"est_{k}": [est(v, t) for v, t in zip(rules[f"speedup_{k}"], rules[f"speedup_type_{k}"], strict=True)]
               for k in "ab"},
            **{f"msg_{k}": rules[f"message_{k}"].fillna("") for k in "ab"}})
        heads = {"rule": "rule", "est_a": f"{side_a.name}: estimated speedup", "est_b": f"{side_b.name}: estimated speedup",
                 "msg_a": f"{side_a.name}: what Nsight Compute says", "msg_b": f"{side_b.name}: what Nsight Compute says"}
        has = rules[["speedup_a", "speedup_b"]].notna().any(axis=1)
        cols = ["rule", "est_a", "est_b", "msg_a", "msg_b"]
        nb.table(shown[has][cols], None, "rules", headers=heads, right=["est_a", "est_b"],
                 widths={"rule": "11em", "est_a": "7em", "est_b": "7em"},
                 title=f"{int(has.sum())} rules with an estimated speedup, largest first", open_rows=30)
        if (~has).any():
            nb.table(shown[~has][cols], None, "rules-info", headers=heads, widths={"rule": "11em"},
                     title=f"{int((~has).sum())} rules without an estimate", collapse=True)
else:
    rules = A.rules(side_a.deep, side_a.launch)
    if not len(rules):
        nb.say("No rule results in this report (Nsight Compute records them with each section it collects).")
    else:
        shown = pd.DataFrame({
            "rule": [n + (f": {t}" if t else "") for n, t in zip(rules["name"], rules["title"], strict=True)],
            "est": [None if pd.isna(v) else f"{v:.1f}% {k or ''}".strip()
                    for v, k in zip(rules["speedup"], rules["speedup_type"], strict=True)],
            "msg": rules["message"].fillna("")})
        nb.table(shown, None, "rules-one", headers={"est": "estimated speedup", "msg": "what Nsight Compute says"},
                 right=["est"], widths={"rule": "14em", "est": "7em"},
                 title=f"{side_a.name}: {len(rules)} rule results, those with an estimated speedup first", open_rows=30)

# %% [markdown]
# ## Each launch of the range
#
# A range is everything the implementation launched for the case: a backward pass is several kernels (the
# preprocessing dot product, the main kernel, the conversion of dQ). Their shares of the range's time say
# whether the comparison of the two kernels above is the whole story.

# %%
for s in sides:
    t = B.launch_table(s.deep, s.sel).assign(ms=lambda d: d["time_ns"] / 1e6)
    nb.table(t[["launch", "kernel", "ms", "share"]], {"ms": "{:.3f}", "share": "{:.0%}", "launch": "{:d}"},
             f"launches-{s.name}", headers={"ms": "time [ms]", "share": "share of the range"},
             title=f"{s.name}: {len(t)} launch(es), {t['ms'].sum():.3f} ms")

# %% [markdown]
# ## Source hotspots
#
# The CUDA source lines and SASS instructions of each compared kernel with the most warp-state samples, with
# the stall reasons that dominate there. Files are named as they are in the repository where found; a line's
# text is read from the file as it was at the capture's commit (git), so edits made since do not misplace it.
# The kernels must be built with `-lineinfo` and captured with the SourceCounters section for lines to appear.

# %%
for by, what in (("line", "source lines"), ("sass", "SASS instructions")):
    for side in sides:
        name = side.name
        try:
            h = B.hotspots(side.deep, side.launch, top, by, read.REPO, commit_of[name])
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

# %% [markdown]
# ## Memory accesses beyond the ideal
#
# For every global and shared memory instruction, Nsight Compute counts the L2 sectors (global) or wavefronts
# (shared) it took against the fewest its threads' bytes would need. The excess is uncoalesced or partial-sector
# global access (a warp that writes half of every 32-byte sector it touches moves twice the sectors) and
# shared-memory bank conflicts. The source lines with the most, per compared kernel; "bytes used per sector" is
# Nsight's average over the kernel's global loads and stores (32 is every byte used).

# %%
for s in sides:
    line = access[s.name]
    if line is None:
        nb.say(f"**{s.name}:** " + ("no per-instruction memory counters in this report (capture with the "
                                    "SourceCounters section)." if pd.isna(compared[s.name]["global_sectors_excessive"]) else
                                    "no global sector or shared wavefront beyond the ideal: every access is as "
                                    "coalesced and conflict-free as its width allows."))
        continue
    nb.say(line)
    h = access_hot[s.name]
    nb.table(h, {c: "{:,.0f}" for c in B.ACCESS_SUMS} | {"share": "{:.0%}"}, f"access-{s.name}",
             headers={**B.LABELS, "share": "share of the kernel's excess", "sass": "its instructions with excess"},
             title=f"{s.name}: the {len(h)} source lines with the most accesses beyond the ideal"
                   + (f" (source text: {h.attrs['source_from']})" if h.attrs.get("source_from") else ""), open_rows=top)

# %% [markdown]
# ## Instructions issued with their threads predicated off
#
# An instruction whose predicate is false in all of a warp's threads is still issued: it takes an issue slot and
# does nothing. Compilers predicate short conditional code instead of branching around it (if-conversion); inside
# an unrolled loop that can put a test on every element of every step, paid whether the condition ever holds or
# not. From Nsight's per-instruction source counters (*Instructions Executed*, *Thread Instructions Executed*,
# *Predicated-On Thread Instructions Executed*): each instruction's executions times the share of its thread
# instructions that ran predicated off, summed by source line. A kernel under 2 % is not listed; a line listed
# here is a candidate for a warp-uniform branch around it.

# %%
for s in sides:
    line, share = predicated[s.name], B.predicated_share(compared[s.name])
    if line is None:
        nb.say(f"**{s.name}:** " + ("no per-instruction source counters in this report (capture with the "
                                    "SourceCounters section)." if share is None else
                                    f"{share:.1%} of its executed warp instructions went to predicated-off threads "
                                    f"(under {B.PREDICATED_AT_LEAST:.0%}: not listed)."))
        continue
    nb.say(line)
    h = predicated_hot[s.name]
    nb.table(h, {"inst_executed": "{:,.0f}", "issued_predicated_off": "{:,.0f}", "off_share": "{:.0%}", "share": "{:.1%}"},
             f"predicated-{s.name}",
             headers={**B.LABELS, "inst_executed": "the line's warp instructions executed",
                      "off_share": "of them predicated off", "share": "share of the kernel's instructions",
                      "sass": "its predicated instructions, by opcode"},
             title=f"{s.name}: the {len(h)} source lines with the most instructions issued predicated off"
                   + (f" (source text: {h.attrs['source_from']})" if h.attrs.get("source_from") else ""), open_rows=top)
