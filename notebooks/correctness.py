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
# # Correctness against a reference computation
#
# Every benchmark row was checked before it was timed: the same random inputs through a high-precision
# reference, outputs compared. max_rel = max|err| / max|ref|, rel_l2 = ‖err‖ / ‖ref‖; for a backward pass the
# worst of its gradients. Library implementations' own errors are the yardstick for what the dtype allows.

# %% tags=["parameters"]
capture: str = "profiles/nvidia-h200/seeds"  # capture folder with <suite>.csv + <suite>.manifest.json per benchmark suite
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)

# %%
from nsightlab import figures, perf
from nsightlab import notebook as nb
from nsightlab.store import load_bench

path, manifest = nb.prepare(capture, plotlyjs)
df, manifests = load_bench(path)
ok = perf.ok_rows(df)
nb.say(f"{len(ok)} checked rows from suites {', '.join(dict.fromkeys(df['suite']))}. "
       f"**FLOP source:** none used on this page (errors only).")

# %%
figures.show(figures.accuracy_strip(ok, figures.style_for(dict.fromkeys(df["impl"]))))

# %%
nb.table(perf.accuracy_table(df), {c: "{:.2e}" for c in ["max_abs", "mean_abs", "mse", "max_rel", "rel_l2"]}, "accuracy")
