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
# # The device, and where each case outgrows its L2
#
# What the capture recorded about the GPU, the ceilings it measured beside the profilers (a large GEMM and a
# device-to-device copy, where it ran them), and the work model's working set of every case against the L2
# size: past that size, a kernel that re-reads its working set must go to DRAM.

# %% tags=["parameters"]
capture: str = "profiles/nvidia-h200/seqlen"  # capture folder (python -m nsightlab.store list); relative paths: cwd, then the repo
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)

# %%
from IPython.display import display

from nsightlab import device, figures
from nsightlab import notebook as nb

path, manifest = nb.prepare(capture, plotlyjs)
nb.say(nb.header(manifest, path))
cases = nb.capture_cases(manifest)
model = "; ".join(sorted({s for s in cases.get("model_source", []) if s})) or "none: the capture declares no work model"
nb.say(f"**FLOP source:** none used on this page. **Working sets:** {model}.")

# %%
with nb.section():
    gpu_row = None
    if nb.nsys_files(path):
        g = nb.load_nsys(path, manifest)["gpu"]
        gpu_row = g.iloc[0].to_dict() if len(g) else None
    display(device.device_table(manifest, gpu_row))

# %% [markdown]
# ## Ceilings measured in this capture

# %%
with nb.section():
    display(device.measured_ceilings(manifest))

# %% [markdown]
# ## Modeled working set per case (MiB)
#
# One row per implementation and pass (and any other field the cases vary); the last columns give the size at
# which the working set passes the L2 size recorded in the manifest.

# %%
with nb.section():
    l2_bytes = float((manifest.get("gpu") or {}).get("l2_bytes") or 0)
    x = nb.sweep_field(cases) or "N"
    ws = device.working_set_table(cases, l2_bytes, x)
    style = figures.style_for(nb.implementations(manifest))
    figures.show(figures.working_set_vs_x(ws, l2_bytes, f"Modeled working set against {x}", x, style))
    display(ws.round(1))
