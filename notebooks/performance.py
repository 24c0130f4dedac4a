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
# # Performance: latency and throughput of every benchmarked implementation
#
# The benchmark CSVs of a capture: every implementation timed in the same run on the same GPU (CUDA events
# around each launch after warm-up, the L2 flushed before every repeat as the header says, medians reported),
# every row first checked against a reference computed from the same inputs.

# %% tags=["parameters"]
capture: str = "profiles/nvidia-h200/bench"  # capture folder with <suite>.csv + <suite>.manifest.json per benchmark suite
dtype: str = ""  # dtype of the figures, as the CSVs write it (e.g. float16); empty: every dtype in the CSVs
impl: str = ""  # the implementation whose ratio to the reference is tracked (empty: none)
reference: str = ""  # the implementation the others are compared with (empty: the one fastest in most configurations)
targets: str = ""  # ratio targets of impl per pass, comma-separated pass:ratio (e.g. forward:0.8,backward:0.6); empty: none
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
suites = list(dict.fromkeys(df["suite"]))
impls = list(dict.fromkeys(df["impl"]))
ok_dtypes = list(dict.fromkeys(perf.ok_rows(df)["dtype"]))
dtype = nb.choose("dtype", dtype, ok_dtypes, aliases=perf.DTYPE_ALIASES)
impl = nb.choose("impl", impl, impls)
reference = nb.choose("reference", reference, impls)
goals = nb.check_targets(targets, impl, list(dict.fromkeys(df["pass"])))
ref = reference or perf.pick_reference(df)
dtypes = [dtype] if dtype else ok_dtypes
style = figures.style_for([*nb.csv_list(style_order), *impls])
axis = perf.problem_of(df).sweep_axis
nb.summary(perf.findings(df, ref, impl, goals, dtypes))
first = manifests[suites[0]].get("environment", {})
gpu = first.get("gpu", {})
nb.note(f"**GPU** {gpu.get('name')} (CC {gpu.get('compute_capability')}, {gpu.get('sm_count')} SMs, "
        f"L2 {gpu.get('l2_bytes', 0) / 2**20:.0f} MiB, driver {gpu.get('nvidia_smi', {}).get('driver_version')}) · "
        f"**torch** {first.get('torch')} · **CUDA** {first.get('cuda_runtime')} · **commit** "
        f"`{str(first.get('git_commit'))[:12]}` · **suites** {', '.join(suites)} · "
        f"**FLOP source:** {perf.flop_source(manifests)} · **timing:** {perf.timing_note(manifests)}.")

# %% [markdown]
# ## Throughput along the sweep, latency per configuration
#
# Suites that sweep the problem's axis (attention: N; a GEMM: M) are drawn as lines: TFLOP/s along it for the
# competitive implementations (median at least half the fastest's, configuration by configuration), on a linear
# axis zoomed to each row, so that a few per cent between two fast kernels can be read; the slower ones are named
# under the title and drawn in the ratios below.
# The other suites: latency bars per configuration.

# %%
for suite in suites:
    for dt in dtypes:
        if not len(perf.ok_rows(df[(df["suite"] == suite) & (df["dtype"] == dt)])):
            continue
        if perf.sweeps_axis(df, suite):
            fast, slow = perf.competitive(df[(df["suite"] == suite) & (df["dtype"] == dt)])
            figures.show(figures.throughput_vs_n(df, suite, dt, f"{suite}: TFLOP/s against {axis} ({dt})", style,
                                                 only=fast, left_out=slow))
        else:
            timed = set(df[df["suite"] == suite]["pass"])  # a suite that times one pass (decode: forward) has no other
            for pass_ in [p for p in ("forward", "backward") if p in timed]:
                figures.show(figures.latency_bars(df, suite, dt, pass_, style))

# %% [markdown]
# ## Against the reference
#
# Time of the reference over time of each implementation, per configuration (> 1 is faster than the
# reference; logarithmic where the ratios span more than a decade, else linear around 1x). The tables under each
# chart give the numbers.

# %%
nb.say(f"**Reference:** {ref}" + (" (the fastest in most configurations)" if not reference else ""))
for suite in suites:
    for dt in dtypes:
        if not len(perf.ok_rows(df[(df["suite"] == suite) & (df["dtype"] == dt)])):
            continue
        figures.show(figures.speedup_vs_reference(df, suite, dt, ref, style))
        for pass_ in ("forward", "backward"):
            t = perf.speedup_table(df, suite, pass_, dt, ref)
            if len(t):
                nb.table(t.reset_index(), "{:.3g}", f"speedup-{suite}-{pass_}-{dt}", collapse=True,
                         headers={"config": "configuration"},
                         title=f"{suite}, {pass_}, {dt}: {ref} time / time, per configuration")

# %%
if impl:
    for suite in suites:
        for dt in dtypes:
            if perf.sweeps_axis(df, suite):
                figures.show(figures.ratio_vs_n(df, suite, dt, impl, ref, goals, style))
    if goals:
        t = perf.target_table(df, impl, ref, goals)
        nb.table(t, {"tflops": "{:.1f}", "ref_tflops": "{:.1f}", "ratio": "{:.0%}", "target": "{:.0%}"}, "targets",
                 headers={"tflops": f"{impl} [TFLOP/s]", "ref_tflops": f"{ref} [TFLOP/s]", "ratio": "ratio",
                          "target": "target", "met": "met"}, title=f"{impl} against its targets (N ≥ 2048)")

# %% [markdown]
# ## Memory-bound suites: bandwidth against the memory roof
#
# A suite whose configurations are (three in four at least) below this GPU's ridge (the measured GEMM's FLOP/s
# over the measured copy's bytes per second; decoding one query against a long KV cache is far below it) is
# limited by memory, so its speed is
# read as the compulsory bytes (each input read once, each output written once) per second. Its roof is what a
# kernel that only reads can reach: the DRAM read stream the capture measured (solid; dashed, as a reference, where
# this capture's kernels pass it: then the read-only kernel fell short of the DRAM's rate). The device-to-device copy
# (dashed) counts the bytes it reads and writes, and writing costs the HBM more than reading, so a kernel that only
# reads passes it: it is drawn as a reference, not a limit.

# %%
bound = perf.memory_bound_suites(df, manifest)
roof = perf.bandwidth_roofs(manifest, perf.best_bytes_per_s(df, bound))
if not bound:
    nb.say("_No suite of this capture is memory-bound by that measure"
           + ("" if roof else " (the capture measured no copy bandwidth to compare with)") + "._")
elif not any(r["role"] == "limit" for r in roof):
    read = next((r for r in roof if "passed_by" in r), None)
    nb.note(f"The ceilings step's read-only kernel read {read['value'] / 1e12:.2f} TB/s, less than these kernels "
            f"reach ({read['passed_by'] / 1e12:.2f} TB/s), so it is drawn as a reference and the charts have no limit "
            "line: the DRAM's read rate lies above both." if read else
            "This capture predates the DRAM read-stream ceiling and records no HBM peak, so its charts have no "
            "limit line: the copy is only a reference, and the kernels that only read sit above it. A new capture "
            "measures the read stream in its ceilings step.")
for suite in bound:
    for dt in dtypes:
        for pass_ in ("forward", "backward"):
            rows = perf.ok_rows(df[(df["suite"] == suite) & (df["dtype"] == dt) & (df["pass"] == pass_)])
            if len(rows):
                figures.show(figures.bandwidth_vs_config(df, suite, dt, pass_, roof, style))

# %% [markdown]
# ## The host's time per call
#
# The GPU times above leave the host out: each repeat waits on the GPU until the host has queued the whole call.
# A call whose host time (Python, argument checks, launches) exceeds its GPU time runs at the host's pace when
# calls follow one another without CUDA graphs; a decode step is the usual case.

# %%
host = perf.host_bound_table(df)
if host is None:
    nb.say("_These CSVs predate the host-time column (`host_ms`), so this capture cannot say._")
else:
    nb.table(host, {"host µs per call (median)": "{:.0f}", "GPU µs of the host-bound rows (median)": "{:.0f}"},
             "host_time", title="Rows whose host time per call exceeds their GPU time")

# %% [markdown]
# ## The implementations in these CSVs, and what was skipped
#
# Implementations are skipped where a case would not fit in memory or would take too long; the correctness
# page shows every checked row's error.

# %%
nb.table(perf.implementations(df), name="implementations", title="Implementations, their options and rows",
         collapse=True)
nb.table(perf.suite_table(manifests), name="suites", title="Suites in this capture", collapse=True)
skipped = perf.skipped_table(df)
if len(skipped):
    nb.table(skipped, name="skipped", title="Skipped cases per implementation and reason", collapse=True)
