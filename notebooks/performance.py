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
# # Performance: latency and throughput of every benchmarked implementation
#
# The benchmark CSVs of a capture: every implementation timed in the same run on the same GPU (CUDA events
# around each launch after warm-up, the L2 flushed before every repeat, medians reported), every row first
# checked against a reference computed from the same inputs.

# %% tags=["parameters"]
capture: str = "profiles/nvidia-h200/seeds"  # capture folder with <suite>.csv + <suite>.manifest.json per benchmark suite
dtype: str = ""  # dtype of the throughput figures (empty: every dtype in the CSVs)
impl: str = ""  # the implementation whose ratio to the reference is tracked (empty: none)
reference: str = ""  # the implementation the others are compared with (empty: the one fastest in most configurations)
targets: str = ""  # ratio targets of impl per pass, comma-separated pass:ratio (e.g. forward:0.8,backward:0.6); empty: none
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)

# %%
import pandas as pd
from IPython.display import display

from nsightlab import figures, perf
from nsightlab import notebook as nb
from nsightlab.store import load_bench

path, manifest = nb.prepare(capture, plotlyjs)
df, manifests = load_bench(path)
suites = list(dict.fromkeys(df["suite"]))
first = manifests[suites[0]].get("environment", {})
gpu = first.get("gpu", {})
nb.say(f"**GPU** {gpu.get('name')} (CC {gpu.get('compute_capability')}, {gpu.get('sm_count')} SMs, "
       f"L2 {gpu.get('l2_bytes', 0) / 2**20:.0f} MiB, driver {gpu.get('nvidia_smi', {}).get('driver_version')}) · "
       f"**torch** {first.get('torch')} · **CUDA** {first.get('cuda_runtime')} · **commit** `{first.get('git_commit')}` · "
       f"suites: {', '.join(suites)}")
nb.say(f"**FLOP source:** {perf.flop_source(manifests)}.")
style = figures.style_for(dict.fromkeys(df["impl"]))
ref = reference or perf.pick_reference(df)
dtypes = [dtype] if dtype else list(dict.fromkeys(perf.ok_rows(df)["dtype"]))
display(pd.DataFrame([{"suite": s, "description": m.get("description", ""), "rows": m.get("rows"),
                       "seconds": round(m.get("seconds", 0))} for s, m in manifests.items()]))

# %% [markdown]
# ## The implementations in these CSVs

# %%
perf.implementations(df)

# %% [markdown]
# ## Throughput against N, latency per configuration
#
# Suites that sweep N are drawn as lines (TFLOP/s against N); the others as latency bars per configuration.
# Implementations skipped where a case would not fit or would take too long are listed at the end.

# %%
for suite in suites:
    for dt in dtypes:
        if not len(perf.ok_rows(df[(df["suite"] == suite) & (df["dtype"] == dt)])):
            continue
        if perf.sweeps_n(df, suite):
            figures.show(figures.throughput_vs_n(df, suite, dt, f"{suite}: TFLOP/s against N ({dt})", style))
        else:
            for pass_ in ("forward", "backward"):
                figures.show(figures.latency_bars(df, suite, dt, pass_, style))

# %% [markdown]
# ## Against the reference
#
# Time of the reference over time of each implementation, per configuration (> 1 is faster), and the tracked
# implementation's throughput ratio with its targets where the parameters name them.

# %%
nb.say(f"**Reference:** {ref}" + (" (the fastest in most configurations)" if not reference else ""))
for suite in suites:
    for dt in dtypes:
        for pass_ in ("forward", "backward"):
            t = perf.speedup_table(df, suite, pass_, dt, ref)
            if len(t):
                nb.say(f"**{suite}, {pass_}, {dt}**")
                display(nb.table(t, "{:.2f}", f"speedup-{suite}-{pass_}-{dt}"))

# %%
if impl:
    for suite in suites:
        for dt in dtypes:
            if perf.sweeps_n(df, suite):
                figures.show(figures.ratio_vs_n(df, suite, dt, impl, ref, perf.parse_targets(targets)))
    if targets:
        t = perf.target_table(df, impl, ref, perf.parse_targets(targets))
        display(nb.table(t, {"tflops": "{:.1f}", "ref_tflops": "{:.1f}", "ratio": "{:.0%}", "target": "{:.0%}"}, "targets"))
else:
    nb.say("_No implementation is tracked against the reference (parameter `impl`)._")

# %% [markdown]
# ## Accuracy
#
# Worst error of each implementation against the reference computation (max_rel = max|err| / max|ref|,
# rel_l2 = ‖err‖ / ‖ref‖).

# %%
nb.table(perf.accuracy_table(df), {c: "{:.2e}" for c in ["max_abs", "mean_abs", "mse", "max_rel", "rel_l2"]}, "accuracy")

# %% [markdown]
# ## Skipped combinations and why

# %%
skipped = df[df["status"] != "ok"]
skipped.groupby(["impl", "status"]).size().rename("cases").reset_index()
