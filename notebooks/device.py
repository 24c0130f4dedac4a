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
# # The device, and where each case outgrows its L2
#
# What the capture recorded about the GPU, the clocks its launches ran at under Nsight Compute (the clocks are
# not locked: each range runs at whatever clock the GPU chose), the ceilings it measured beside the profilers (a
# large GEMM and a device-to-device copy, where it ran them), and the work model's working set of every case
# against the L2 size: past that size, a kernel that re-reads its working set must go to DRAM.

# %% tags=["parameters"]
capture: str = "profiles/nvidia-h200/seqlen"  # capture folder (python -m nsightlab.store list); relative paths: cwd, then the repo
style_order: str = ""  # the order legends list implementations in (colours follow the name alone; empty: this capture's order)
plotlyjs: str = "inline"  # where figures load plotly.js: "inline" or a relative path (make report ships one copy)

# %%
from nsightlab.analysis import counters, device
from nsightlab.render import figures
from nsightlab.render import page as nb
from nsightlab.store import captures, read

nb.check_parameters(globals())
path, manifest = nb.prepare(capture, plotlyjs)
cases = captures.cases(manifest)
l2_bytes = float((manifest.get("gpu") or {}).get("l2_bytes") or 0)
x = nb.sweep_field(cases) or "N"
ws = nb.attempt(device.working_set_table, cases, l2_bytes, x)
clocks = device.run_clocks(nb.attempt(read.load_ncu, path, manifest) if read.ncu_files(path) else None)
nb.summary(device.findings(manifest, ws, x, clocks))
nb.note(nb.header(manifest, path))
model = (counters.sources_text(cases["model_source"]) if "model_source" in cases else "") or \
    "none: the capture declares no work model"
nb.note(f"**FLOP source:** none used on this page. **Working sets:** {model}.")

# %%
with nb.section():
    gpu_row = None
    if read.nsys_files(path):
        g = read.load_nsys(path, manifest)["gpu"]
        gpu_row = g.iloc[0].to_dict() if len(g) else None
    nb.table(device.device_table(manifest, gpu_row, clocks), name="device", title="The GPU as the capture recorded it",
             collapse=False)

# %% [markdown]
# ## Ceilings measured in this capture

# %%
with nb.section():
    method = (manifest.get("ceilings") or {}).get("method")
    nb.table(device.measured_ceilings_table(manifest), name="ceilings", collapse=False,
             title=f"Measured: {method}" if isinstance(method, str) else "")

# %% [markdown]
# ## Modeled working set per case
#
# One line per implementation and pass (backward dashed; implementations whose working sets coincide share a
# line), against the L2 size recorded in the manifest.

# %%
with nb.section():
    ws = device.working_set_table(cases, l2_bytes, x)
    style = nb.style(manifest, order=style_order)
    figures.show(figures.working_set_vs_x(ws, l2_bytes, f"Modeled working set against {x}", x, style))
    nb.table(ws, {c: "{:,.1f}" for c in ws.columns if c.startswith(f"{x}=")} | {f"outgrows L2 at {x}": "{:,.0f}"},
             "working-set", headers={c: f"{c} [MiB]" for c in ws.columns if c.startswith(f"{x}=")},
             title="Modeled working set [MiB] per case, and where it outgrows the L2", collapse=True)
