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
# # Correctness against a reference computation
#
# Every benchmark row was checked before it was timed: the same random inputs through a high-precision
# reference, outputs compared. max_rel = max|err| / max|ref|, rel_l2 = ‖err‖ / ‖ref‖; for a backward pass the
# worst of its gradients. Library implementations' own errors are the yardstick for what the dtype allows.

# %% tags=["parameters"]
capture: str = "profiles/nvidia-h200/bench"  # capture folder with <suite>.csv + <suite>.manifest.json per benchmark suite
style_order: str = ""  # the order legends list implementations in (colours follow the name alone; empty: this capture's order)
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)

# %%
from nsightlab.analysis import perf
from nsightlab.render import figures
from nsightlab.render import page as nb
from nsightlab.store.captures import load_bench

nb.check_parameters(globals())
path, manifest = nb.prepare(capture, plotlyjs)
df, manifests = load_bench(path)
ok = perf.ok_rows(df)
nb.summary(perf.accuracy_findings(df))
nb.note(f"{len(ok)} checked rows from suites {', '.join(dict.fromkeys(df['suite']))}. "
        "**FLOP source:** none used on this page (errors only).")

# %%
figures.show(figures.accuracy_strip(ok, figures.style_for([*nb.csv_list(style_order), *dict.fromkeys(df["impl"])])))
nb.table(perf.accuracy_table(df), {c: "{:.2e}" for c in ["max_abs", "mean_abs", "mse", "max_rel", "rel_l2"]},
         "accuracy", headers={"impl": "implementation", "max_abs": "max |err|", "mean_abs": "mean |err|",
                              "mse": "mean squared err", "max_rel": "max |err| / max |ref|",
                              "rel_l2": "‖err‖ / ‖ref‖"},
         title="Worst error per implementation, pass and dtype")
