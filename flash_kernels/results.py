"""flash_kernels' results page, ``docs/results.md``, rendered from the committed captures (no GPU, no torch).

``nsightlab report`` writes it: ``flash_kernels.study`` registers :func:`render` as a document of the repository's
profiles folder (:func:`nsightlab.render.documents.register`), so every number the documentation quotes about a
kernel is generated from a capture and names the file it comes from. ``python -m flash_kernels.results`` prints it.
"""

from __future__ import annotations

import gzip
import json
import lzma
import re
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from nsightlab.analysis import counters, l2, perf, timeline
from nsightlab.analysis.bottleneck import parse_case
from nsightlab.analysis.roofline import flop_check
from nsightlab.core.errors import ProfileError
from nsightlab.core.sources import changed_between, comment_only
from nsightlab.parse.ncu import ncu_frame
from nsightlab.parse.nsys import nsys_tables
from nsightlab.store.captures import bench_csvs, bench_manifest, cases, find_file, load_bench, load_manifest
from nsightlab.store.read import capture_schemas, tools_of

from . import model
from .registry import get_variant
from .variants import kernel

ROOT = Path(__file__).resolve().parent.parent
#: the kernels' sources (repository-relative): a deep capture of another commit profiled the same kernels as a
#: benchmark's rows where none of these differs between the two commits
KERNEL_SOURCES = ("flash_kernels/csrc",)
#: the page, and the profiles folder it is rendered from
PAGE, PROFILES = ROOT / "docs" / "results.md", ROOT / "profiles"
#: benchmark CSVs kept outside a capture folder (no capture manifest): profiles/_bench/<gpu>/
LOOSE = "_bench"

#: flash_mma's FlashAttention-2 parity target: its throughput over SDPA's flash backend (N >= 2048)
TARGETS = {"forward": 0.95, "backward": 0.85}
#: flash_wgmma against cuDNN in the same run, by (pass, head dim): the targets of the top of the ladder
TOP_TARGETS = {("forward", 64): 1.0, ("forward", 128): 1.05, ("backward", 64): 0.90, ("backward", 128): 0.90}


def _md(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def _cite(*paths: Path | None) -> str:
    """``Source: `profiles/<gpu>/<capture>/<file>` ...`` for files under a profiles folder."""
    names = []
    for p in paths:
        if p is not None:
            p = Path(p)
            names.append(f"`{p.parent.parent.parent.name}/{p.parent.parent.name}/{p.parent.name}/{p.name}`")
    return "Source: " + ", ".join(names) + "."


def _bench_sources(gpu: Path, suite: str) -> str:
    return _cite(*(c for c in bench_csvs(gpu / "bench") if c.name.startswith(suite + ".")),
                 gpu / "bench" / f"{suite}.manifest.json")


def capture_table(gpu: Path) -> str:
    """Every capture of one GPU: where it came from, what profiled it, how long it took."""
    rows = []
    for man in sorted(gpu.glob("*/manifest.json")):
        cap = man.parent
        m = load_manifest(cap)
        ncu, t = m.get("ncu") or {}, m.get("timings_seconds") or {}
        parts = [f"{k} {v:.0f} s" for k, v in t.items() if k not in ("total", "ncu_raw_csv") and v >= 1]
        passes = f"{ncu.get('max_passes_per_kernel')} passes" if ncu.get("max_passes_per_kernel") else "passes ?"
        deep = m.get("deep") or {}
        profiled = (f"{ncu['kernels_profiled']} × {passes} ({ncu.get('replay_mode') or '?'} replay)" if ncu else
                    f"{deep['kernels_profiled']} × {deep['max_passes_per_kernel']} passes (deep tier, "
                    f"{deep.get('replay_mode') or '?'} replay)" if deep.get("kernels_profiled") else "—")
        rows.append({"capture": f"`{cap.name}`", "origin": m.get("origin", "captured"), "tools": " + ".join(tools_of(m)),
                     "kernels profiled": profiled,
                     "time": f"{t['total']:.0f} s ({', '.join(parts)})" if t else "—"})
    return _md(pd.DataFrame(rows)) + f"\n\nSource: each capture's `{gpu.parent.name}/{gpu.name}/<capture>/manifest.json`."


def _ratio_cell(r: float, target: float) -> str:
    """``r`` to two decimals, or as many more (up to four) as it takes for the printed number to meet ``target``
    exactly when ``r`` does: 0.895 against 0.90 prints 0.895, 1.0498 against 1.05 prints 1.0498."""
    for digits in (2, 3, 4):
        cell = f"{r:.{digits}f}"
        if target != target or (float(cell) >= target) == (r >= target):  # no target (NaN), or they agree
            return cell
    return cell


def _pivot_targets(t: pd.DataFrame, impl: str, what: str = "", with_target: bool = True) -> str:
    rows = []
    for (p, dt, D, causal), g in t.groupby(["pass", "dtype", "D", "causal"], sort=False):
        row = {"pass": p + (f" {what}" if what else ""), "dtype": dt, "D": D, "causal": "yes" if causal else "no"}
        row.update({f"N={n}": _ratio_cell(r, tg if with_target else float("nan"))
                    for n, r, tg in zip(g["N"], g["ratio"], g["target"], strict=True)})
        row[f"{impl} TFLOP/s"] = f"{g['tflops'].min():.0f}–{g['tflops'].max():.0f}"
        met = g["ratio"] >= g["target"]
        row["target"] = f"{g['target'].iloc[0]:.2f}" if with_target else "—"
        row["met"] = f"{int(met.sum())} of {len(g)}" if with_target else "—"
        rows.append(row)
    return _md(pd.DataFrame(rows))


def target_table(gpu: Path) -> str:
    """flash_mma / SDPA flash per convention row, N across: one line per pass, dtype, D and causal."""
    df, _ = load_bench(gpu / "bench")
    return _pivot_targets(perf.target_table(df, "flash_mma", "sdpa_flash", TARGETS, suite="convention"), "flash_mma")


def top_table(gpu: Path) -> str:
    """flash_wgmma against cuDNN, convention rows with N >= 4096, with the targets of the top of the ladder."""
    df, _ = load_bench(gpu / "bench")
    parts: list[str] = []
    for (p, D), target in TOP_TARGETS.items():
        t = perf.target_table(df[df["D"] == D], "flash_wgmma", "sdpa_cudnn", {p: target}, min_n=4096,
                              suite="convention")
        t = t[t["pass"] == p]
        if t.empty:
            return "(no flash_wgmma rows in this GPU's bench capture)"
        lines = _pivot_targets(t, "flash_wgmma", "× cuDNN").splitlines()
        parts += lines if not parts else lines[2:]
    return "\n".join(parts)


def sdpa_flash_table(gpu: Path) -> str:
    """flash_wgmma against SDPA's FlashAttention-2 backend, convention rows with N >= 4096 (no target)."""
    df, _ = load_bench(gpu / "bench")
    parts: list[str] = []
    for p in ("forward", "backward"):
        t = perf.target_table(df, "flash_wgmma", "sdpa_flash", {p: float("nan")}, min_n=4096, suite="convention")
        t = t[t["pass"] == p]
        if t.empty:
            return "(no flash_wgmma rows in this GPU's bench capture)"
        lines = _pivot_targets(t, "flash_wgmma", "× SDPA flash", with_target=False).splitlines()
        parts += lines if not parts else lines[2:]
    return "\n".join(parts)


def gqa_table(gpu: Path) -> str:
    """The gqa suite: flash_mma and cuDNN over SDPA flash, per Hkv, N and causal, both passes."""
    df, _ = load_bench(gpu / "bench")
    r = perf.ratio_to(df[df["suite"] == "gqa"], "sdpa_flash")
    rows = []
    for (hkv, causal, n), g in r.groupby(["Hkv", "causal", "N"], sort=True):
        row = {"Hkv": hkv, "causal": "yes" if causal else "no", "N": n}
        for p in ("forward", "backward"):
            for impl in ("flash_mma", "sdpa_cudnn"):
                x = g[(g["pass"] == p) & (g["impl"] == impl)]
                row[f"{p} {impl}"] = f"{x['ratio'].iloc[0]:.2f}" if len(x) else "—"
        rows.append(row)
    return _md(pd.DataFrame(rows).sort_values(["Hkv", "causal", "N"], ascending=[False, True, True]))


def decode_table(gpu: Path) -> str:
    """The decode suite's forward pass: microseconds per call (memory-bound: GB/s of compulsory traffic), for the
    implementations the capture timed there; with flash_decode, its speed over the best SDPA backend's."""
    df, _ = load_bench(gpu / "bench")
    d = df[(df["suite"] == "decode") & (df["pass"] == "forward") & (df["status"] == "ok") & (df["dtype"] == "float16")]
    impls = [i for i in ("flash_decode", "flash_mma", "sdpa_flash", "sdpa_cudnn") if i in set(d["impl"])]
    rows = []
    for cfg, g in d.groupby("config", sort=False):
        row = {"config": cfg}
        ms = {}
        for impl in impls:
            x = g[g["impl"] == impl]
            row[f"{impl} µs (GB/s)"] = f"{1e3 * x['ms'].iloc[0]:.0f} ({x['gbps'].iloc[0]:.0f})" if len(x) else "—"
            if len(x):
                ms[impl] = x["ms"].iloc[0]
        if "flash_decode" in impls:
            best = min((v for k, v in ms.items() if k.startswith("sdpa_")), default=float("nan"))
            row["flash_decode × best SDPA"] = f"{best / ms['flash_decode']:.2f}" if "flash_decode" in ms else "—"
        rows.append(row)
    return _md(pd.DataFrame(rows))


def one_config_table(gpu: Path, config: str = "B4-H16-N4096-D128") -> str:
    """Every implementation of the d128 suite at one configuration: time, TFLOP/s and error of both passes."""
    df, _ = load_bench(gpu / "bench")
    d = df[(df["suite"] == "d128") & (df["config"] == config)]
    rows, notes = [], []
    for impl, g in d.groupby("impl", sort=False):
        row = {"implementation": impl}
        for p in ("forward", "backward"):
            r = g[g["pass"] == p]
            ok = len(r) and r["status"].iloc[0] == "ok"
            row[f"{p} ms"] = f"{r['ms'].iloc[0]:.2f}" if ok else ("skipped" if len(r) and "has no" not in r["status"].iloc[0] else "—")
            row[f"{p} TFLOP/s"] = f"{r['tflops'].iloc[0]:.1f}" if ok else "—"
            row[f"{p} rel_l2"] = f"{r['rel_l2'].iloc[0]:.1e}" if ok else "—"
            if len(r) and not ok and "has no" not in r["status"].iloc[0]:
                notes.append(f"{impl} {p}: {r['status'].iloc[0]}")
        rows.append(row)
    return _md(pd.DataFrame(rows)) + ("\n\n" + "\n".join(f"- {n}" for n in notes) if notes else "")


def tile_files(gpu: Path, tiles: tuple[str, ...] = ("128x32", "128x64")) -> list[Path] | None:
    """The benchmark CSVs of flash_mma's forward tile step (profiles/_bench/<gpu>/flash_mma_tile_<tile>.csv),
    or None where one is missing."""
    found = [find_file(gpu.parent / LOOSE / gpu.name, f"flash_mma_tile_{tile}.csv") for tile in tiles]
    return None if any(f is None for f in found) else found  # type: ignore[return-value]


def tile_step_table(gpu: Path, tiles: tuple[str, ...] = ("128x32", "128x64")) -> str:
    """flash_mma's forward tile step: its speed relative to SDPA flash and cuDNN (reference time / its time,
    same run) per tile (fp16 convention suite, forward; ``python -m flash_kernels.bench --suite convention
    --variants flash_mma --passes forward --dtypes float16 --option tile=<tile> --refs sdpa_flash,sdpa_cudnn``)."""
    files = tile_files(gpu, tiles)
    if files is None:
        return "(no flash_mma tile CSVs for this GPU)"
    frames = []
    for tile, path in zip(tiles, files, strict=True):
        df = pd.read_csv(path)
        df = df[(df["status"] == "ok") & (df["pass"] == "forward")]
        ms = df.pivot_table(index=["D", "causal", "N"], columns="impl", values="ms")
        ms["tile"] = tile
        frames.append(ms.reset_index())
    t = pd.concat(frames)
    rows = []
    for (D, causal, tile), g in t.groupby(["D", "causal", "tile"], sort=True):
        for ref, label in (("sdpa_flash", "× SDPA flash"), ("sdpa_cudnn", "× cuDNN")):
            row = {"D": D, "causal": "yes" if causal else "no", "tile": tile, "speed": label}
            row.update({f"N={n}": f"{r:.2f}" for n, r in zip(g["N"], g[ref] / g["flash_mma"], strict=True)})
            rows.append(row)
    return _md(pd.DataFrame(rows))


def d256_file(gpu: Path) -> Path | None:
    """The head dim 256 benchmark CSV: of the bench-d256 capture's and the bench capture's d256 suite, the one taken
    last (the capture manifests' ``created``; bench-d256's where they do not tell), else the one kept apart
    (profiles/_bench/<gpu>/flash_wgmma_d256.csv), if this GPU has one."""
    found = [(folder, f) for folder in (gpu / "bench-d256", gpu / "bench") if (f := find_file(folder, "d256.csv"))]

    def created(folder: Path) -> str:
        try:
            return str(load_manifest(folder).get("created") or "")
        except (OSError, ValueError, ProfileError):
            return ""

    if found:  # max keeps the first of equals: bench-d256
        return max(found, key=lambda ff: created(ff[0]))[1]
    return find_file(gpu.parent / LOOSE / gpu.name, "flash_wgmma_d256.csv")


#: flash_wgmma's forward at D = 256 against cuDNN in the same run (the backward's there has no target: it is shown)
D256_TARGET = 1.0


def _d256_rows(gpu: Path) -> pd.DataFrame:
    """The d256 CSV's checked rows (empty where this GPU has none)."""
    path = d256_file(gpu)
    if path is None:
        return pd.DataFrame(columns=["pass", "impl", "dtype", "causal", "N", "ms", "tflops"])
    df = pd.read_csv(path)
    return df[df["status"] == "ok"]


def d256_table(gpu: Path) -> str:
    """flash_wgmma at D = 256 (d256 suite: ``python -m flash_kernels.bench --suite d256 --variants flash_wgmma
    --refs sdpa_flash,sdpa_cudnn``), per pass it times: cuDNN's and SDPA flash's time over its time per N, its
    TFLOP/s, and how many forward rows meet D256_TARGET against cuDNN."""
    df = _d256_rows(gpu)
    if df.empty:
        return "(no head dim 256 benchmark CSV for this GPU)"
    rows = []
    for pass_ in ("forward", "backward"):
        d = df[df["pass"] == pass_]
        if "flash_wgmma" not in set(d["impl"]):
            continue
        ms = d.pivot_table(index=["dtype", "causal", "N"], columns="impl", values="ms").reset_index()
        tf = d[d["impl"] == "flash_wgmma"].set_index(["dtype", "causal", "N"])["tflops"]
        target = D256_TARGET if pass_ == "forward" else float("nan")
        for (dtype, causal), g in ms.groupby(["dtype", "causal"], sort=False):
            g = g.sort_values("N")
            for ref, label in (("sdpa_cudnn", "× cuDNN"), ("sdpa_flash", "× SDPA flash")):
                ratio = g[ref] / g["flash_wgmma"]
                row = {"pass": pass_, "dtype": dtype, "causal": "yes" if causal else "no", "speed": label}
                row.update({f"N={n}": _ratio_cell(r, target if ref == "sdpa_cudnn" else float("nan"))
                            for n, r in zip(g["N"], ratio, strict=True)})
                t = tf.loc[[(dtype, causal, n) for n in g["N"]]]
                row["flash_wgmma TFLOP/s"] = f"{t.min():.0f}–{t.max():.0f}"
                row["met"] = (f"{int((ratio >= target).sum())} of {len(g)}" if ref == "sdpa_cudnn" and target == target
                              else "—")
                rows.append(row)
    return _md(pd.DataFrame(rows))


def fp8_file(gpu: Path) -> Path | None:
    """The FP8 forward's benchmark CSV (profiles/_bench/<gpu>/fp8_forward.csv), if this GPU has one."""
    return find_file(gpu.parent / LOOSE / gpu.name, "fp8_forward.csv")


def fp8_table(gpu: Path) -> str:
    """flash_wgmma's FP8 forward: per head dim and mask, TFLOP/s of the kernel alone at each N (in brackets: the
    share of the dense FP8 peak), its speed against cuDNN's and our own fp16 forward in the same run, the cost of
    making Vt, and the error."""
    path = fp8_file(gpu)
    if path is None:
        return "(no FP8 benchmark CSV for this GPU)"
    df = pd.read_csv(path)

    def span(g: pd.DataFrame, col: str, fmt: str = "{:.2f}") -> str:
        return _span(g[col], fmt)

    rows = []
    for (D, causal), g in df.groupby(["D", "causal"], sort=True):
        g = g.sort_values("N")
        cells = {f"N={r.N}": f"{r.fp8_tflops:.0f} ({100 * r.fp8_peak_frac:.0f} %)" for r in g.itertuples()}
        # the whole call's extra time (Vt, argument checks) at the shortest N: at the longer ones it is below the
        # spread of two separately timed medians
        first = g.iloc[0]
        vt_us = (first["fp8+vt_ms"] - first["fp8_ms"]) * 1e3
        rows.append({"D": D, "causal": "yes" if causal else "no", **cells,
                     "× cuDNN fp16": span(g, "fp8_x_cudnn"), "× flash_wgmma fp16": span(g, "fp8_x_flash_wgmma"),
                     f"Vt + checks at N={first['N']}, µs": f"{vt_us:.0f}",
                     "rel. L2 error: dequantized / fp32 inputs": f"{span(g, 'fp8_rel_l2_vs_dequantized', '{:.1e}')} / "
                                                                 f"{span(g, 'fp8_rel_l2_vs_fp32_inputs', '{:.1e}')}"})
    return _md(pd.DataFrame(rows))


def ab_file(gpu: Path, name: str = "wgmma_forward_split_ab.log") -> Path | None:
    """A same-machine A/B log of gpu_node.sh's ab step (profiles/_bench/<gpu>/<name>), if this GPU has one."""
    return find_file(gpu.parent / LOOSE / gpu.name, name)


_AB_BENCH = re.compile(r"^\S+\s+(?P<config>\S+)\s+\S+\s+\S+\s+(?P<impl>\S+)\s+(?P<ms>[\d.]+) ms")
_AB_FP8 = re.compile(r"^fp8 D=(?P<D>\d+) N=(?P<N>\d+) causal=(?P<causal>\d) (?P<ms>[\d.]+) ms")


def ab_rows(path: Path) -> pd.DataFrame:
    """The timings of an A/B log: one row per (side: tree or base, round, what, impl), ``ms``."""
    rows, side, rnd = [], None, 0
    for line in path.read_text().splitlines():
        m = re.match(r"^== (tree|base), round (\d+)", line)
        if m:
            side, rnd = m[1], int(m[2])
            continue
        if side is None:
            continue
        if b := _AB_BENCH.match(line):
            rows.append({"side": side, "round": rnd, "what": f"fp16 {b['config']}", "impl": b["impl"], "ms": float(b["ms"])})
        elif f := _AB_FP8.match(line):
            what = f"fp8 D{f['D']}-N{f['N']}-{'causal' if f['causal'] == '1' else 'full'}"
            rows.append({"side": side, "round": rnd, "what": what, "impl": "flash_wgmma fp8", "ms": float(f["ms"])})
    return pd.DataFrame(rows, columns=["side", "round", "what", "impl", "ms"])


def ab_table(path: Path, impls: tuple[str, ...] = ("flash_wgmma", "flash_wgmma fp8")) -> str:
    """Per shape: each side's times over its rounds, and the tree's median over the base's (below 1: the tree is
    faster), beside the same ratio for the references that ran in the same rounds (their drift)."""
    df = ab_rows(path)
    rows = []
    for what, g in df.groupby("what", sort=False):
        med = g.groupby(["impl", "side"])["ms"].median().unstack("side")
        ours = med.loc[[i for i in impls if i in med.index]]
        refs = med.drop(index=ours.index)
        for impl, r in ours.iterrows():
            times = {side: ", ".join(f"{v:.3f}" for v in g[(g["impl"] == impl) & (g["side"] == side)]["ms"])
                     for side in ("tree", "base")}
            rows.append({"shape": what, "kernel": impl, "tree [ms]": times["tree"], "base [ms]": times["base"],
                         "tree / base (medians)": f"{r['tree'] / r['base']:.3f}",
                         "reference in the same rounds": "; ".join(f"{i} {x['tree'] / x['base']:.3f}"
                                                                   for i, x in refs.iterrows()) or "—"})
    return _md(pd.DataFrame(rows))


def example_table(gpu: Path, N: int = 4096) -> str:
    """The Triton example beside flash_mma and SDPA flash (nsys GPU time, median of the launches)."""
    cap = gpu / "triton-example"
    m = load_manifest(cap)
    T = nsys_tables(find_file(cap, "nsys.sqlite"), capture_schemas(m))
    s = timeline.speedup_vs(timeline.timing_summary(timeline.range_timing(T["kernels"], T["ranges"]), cases(m)), "sdpa_flash")
    s = s[s["N"] == N].sort_values(["pass", "causal", "variant"], ascending=[False, True, True])
    t = pd.DataFrame({"pass": s["pass"], "causal": s["causal"].map({True: "yes", False: "no"}), "implementation": s["variant"],
                      "GPU ms": s["gpu_ms"].map("{:.3f}".format), "TFLOP/s": s["tflops"].map("{:.0f}".format),
                      "× SDPA flash": s["speedup"].map("{:.2f}".format)})
    return _md(t)


def seqlen_findings(gpu: Path) -> str:
    """What the seqlen capture says: counted against analytic FLOPs, naive attention's L2 hit rate and where it
    falls, flash_mma's DRAM traffic against the compulsory bytes, and throughput at N=4096, D=128."""
    cap = gpu / "seqlen"
    m = load_manifest(cap)
    schemas = capture_schemas(m)
    cs = cases(m)
    work = counters.kernel_work(ncu_frame(find_file(cap, "ncu.ncu-rep"), schemas=schemas))
    rng = counters.attach_model(counters.per_range(work), cs)
    fc = flop_check(rng)
    out = []
    tensor = ["flash_mma", "sdpa_flash", "sdpa_cudnn"]
    for group, sel in (("tensor-core (flash_mma, SDPA)", fc["variant"].isin(tensor)),
                       ("CUDA-core and materializing", ~fc["variant"].isin(tensor))):
        r = fc[sel]["counted_over_model"]
        out.append(f"- counted/analytic FLOPs, {group}: {r.min():.2f}–{r.max():.2f}")
    l2_bytes = m["gpu"]["l2_bytes"]
    tr = l2.l2_traffic(rng, l2_bytes)
    nv = tr[(tr["variant"] == "naive") & (tr["pass"] == "forward") & (tr["D"] == 64)].sort_values("N")
    out.append("- naive forward D=64 L2 hit rate by N: " + ", ".join(f"{n}: {h:.0f}%" for n, h in zip(nv["N"], nv["l2_hit_rate"], strict=True)))
    modeled, _ = l2.modeled_onset(nv["N"], nv["working_set"], l2_bytes)
    measured = l2.measured_onset(nv, "N").value
    out.append(f"- naive forward D=64: modeled onset N≈{modeled:.0f}, measured onset N={measured:.0f}")
    fm = tr[(tr["variant"] == "flash_mma") & (tr["pass"] == "forward")]
    out.append(f"- flash_mma forward DRAM / compulsory bytes: {fm['dram_over_compulsory'].min():.2f}–"
               f"{fm['dram_over_compulsory'].max():.2f} (N≥1024: {fm[fm['N'] >= 1024]['dram_over_compulsory'].min():.2f}–"
               f"{fm[fm['N'] >= 1024]['dram_over_compulsory'].max():.2f}); L2 hit rate at N=4096 D=64: "
               f"{fm[(fm['N'] == 4096) & (fm['D'] == 64)]['l2_hit_rate'].iloc[0]:.0f}%")
    T = nsys_tables(find_file(cap, "nsys.sqlite"), schemas)
    s = timeline.speedup_vs(timeline.timing_summary(timeline.range_timing(T["kernels"], T["ranges"]), cs), "sdpa_flash")
    sel = s[(s["N"] == 4096) & (s["D"] == 128)]
    for v in ("flash_mma", "sdpa_flash", "sdpa_cudnn"):
        f = sel[(sel["variant"] == v) & (sel["pass"] == "forward")].iloc[0]
        b = sel[(sel["variant"] == v) & (sel["pass"] == "backward")].iloc[0]
        out.append(f"- N=4096 D=128 (nsys, median of {int(f['iters'])} launches): {v} {f['tflops']:.0f} / {b['tflops']:.0f} "
                   f"TFLOP/s fwd/bwd ({f['speedup']:.2f}× / {b['speedup']:.2f}× SDPA flash)")
    return "\n".join(out)


def _gpu_line(gpu: Path) -> str:
    cap = next((gpu / c for c in ("bench", "seqlen") if (gpu / c / "manifest.json").exists()), None)
    m = load_manifest(cap) if cap is not None else {}
    g, env = m.get("gpu") or {}, m.get("environment") or {}
    sms, l2_bytes = g.get("sm_count") or g.get("multiprocessor_count"), g.get("l2_bytes")
    bits = [g.get("name") or gpu.name]
    if sms:
        bits.append(f"{sms} SMs")
    if l2_bytes:
        bits.append(f"{l2_bytes / 2**20:.0f} MiB L2")
    driver = (g.get("nvidia_smi") or {}).get("driver_version")
    if driver:
        bits.append(f"driver {driver}")
    if env.get("torch"):
        bits.append(f"torch {env['torch']}")
    return ", ".join(bits)


def fp8_suite_file(gpu: Path) -> Path | None:
    """The fp8 benchmark suite's CSV (``python -m flash_kernels.bench --suite fp8``): the bench-fp8 capture's, else
    the one kept apart (profiles/_bench/<gpu>/fp8.csv), if this GPU has one."""
    return find_file(gpu / "bench-fp8", "fp8.csv") or find_file(gpu.parent / LOOSE / gpu.name, "fp8.csv")


#: the fp8 suite's FP8 calls: the kernel alone, with V's transpose in the call, the whole call from fp16
FP8_KERNEL, FP8_VT, FP8_CALL = "flash_wgmma_fp8", "flash_wgmma_fp8_vt", "flash_wgmma_fp8_call"


def _fp8_suite(path: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The fp8 suite's rows: every row, and the ok rows' ms, TFLOP/s and rel_l2 by (D, causal, N) x impl."""
    df = pd.read_csv(path)
    ok = df[(df["status"] == "ok") & (df["pass"] == "forward")]
    piv = {v: ok.pivot_table(index=["D", "causal", "N"], columns="impl", values=v) for v in ("ms", "tflops", "rel_l2")}
    return df, piv["ms"], piv["tflops"], piv["rel_l2"]


def _span(values: pd.Series, fmt: str = "{:.2f}", mark: float | None = None) -> str:
    """``lo–hi`` of ``values`` in ``fmt``; with a ``mark``, each bound as :func:`_ratio_cell` writes it against the
    mark (0.998 against 1.00 prints 0.998), so that a miss never reads as met."""
    def one(v: float) -> str:
        return fmt.format(v) if mark is None else _ratio_cell(v, mark)

    lo, hi = one(values.min()), one(values.max())
    return lo if lo == hi else f"{lo}–{hi}"


#: a cell whose repeats spread more than this (fastest to slowest over the median) is named under its table
SPREAD_NOTE = 0.05
#: how far the fp8 suite's fp16 forward may run from the bench capture's at the same shapes before the table says so
FP16_DRIFT_NOTE = 0.03
#: the FP8 kernel's relative L2 error above which the table names the cells and where O was summed
ERROR_NOTE = 0.02


def _ratio_span(g: pd.DataFrame, ref: str, impl: str) -> str:
    """The span of ``ref``'s time over ``impl``'s in ``g``'s rows where both ran, or — where none did."""
    if ref not in g or impl not in g:
        return "—"
    r = (g[ref] / g[impl]).dropna()
    return _span(r) if not r.empty else "—"


def fp8_suite_table(gpu: Path) -> str:
    """The fp8 suite: per head dim and mask, the FP8 kernel's TFLOP/s at each N (in brackets: the share of the
    dense FP8 peak at the published clock), the FP8 call with V's transpose against cuDNN's and flash_wgmma's fp16
    forwards, the whole call from fp16 against flash_wgmma's, and the error of FP8 and of fp16 against fp64."""
    path = fp8_suite_file(gpu)
    if path is None:
        return "(no fp8 suite CSV for this GPU)"
    df, ms, tf, err = _fp8_suite(path)
    man = json.loads(path.with_name("fp8.manifest.json").read_text()) if path.with_name("fp8.manifest.json").exists() \
        else {}
    sms = ((man.get("environment") or {}).get("gpu") or {}).get("sm_count")
    peak = model.fp8_dense_peak_tflops(sms) if sms else None
    rows = []
    for (D, causal), g in ms.groupby(level=["D", "causal"], sort=True):
        if FP8_KERNEL not in g or g[FP8_KERNEL].isna().all():
            continue
        g = g.dropna(subset=[FP8_KERNEL])
        t = tf.loc[g.index]
        row: dict[str, str] = {"D": str(D), "causal": "yes" if causal else "no"}
        row.update({f"N={n}": f"{v:.0f}" + (f" ({100 * v / peak:.0f} %)" if peak else "")
                    for (_, _, n), v in t[FP8_KERNEL].items()})
        row["with Vt × cuDNN fp16"] = _ratio_span(g, "sdpa_cudnn", FP8_VT)
        row["with Vt × flash_wgmma fp16"] = _ratio_span(g, "flash_wgmma", FP8_VT)
        row["whole call × flash_wgmma fp16"] = _ratio_span(g, "flash_wgmma", FP8_CALL)
        e = err.loc[g.index]
        row["rel. L2 error: FP8 / fp16"] = (f"{_span(e[FP8_KERNEL], '{:.1e}')} / "
                                            f"{_span(e['flash_wgmma'], '{:.1e}') if 'flash_wgmma' in e else '—'}")
        rows.append(row)
    out = _md(pd.DataFrame(rows).fillna("—"))
    timed = df[(df["impl"] == FP8_KERNEL) & (df["status"] == "ok")]
    if {"ms_min", "ms_max"} <= set(timed.columns):
        spread = (timed["ms_max"] - timed["ms_min"]) / timed["ms"]
        wide = timed[spread > SPREAD_NOTE].assign(spread=spread)
        if not wide.empty:
            cells = ", ".join(f"D={r.D} N={r.N} {'causal' if r.causal else 'not causal'} ({100 * r.spread:.0f} %)"
                              for r in wide.sort_values(["D", "causal", "N"]).itertuples())
            out += (f"\n\nThe FP8 kernel's repeats spread more than {100 * SPREAD_NOTE:.0f} % (fastest to slowest, over "
                    f"the median) at {cells}: read those cells with that margin.")
    out += _fp8_centred_note(df)
    out += _fp8_error_note(df)
    out += fp16_drift_note(gpu, path)
    torch_quant = _torch_quantized_dims(df)
    if torch_quant:
        out += (f"\n\nThe whole call at D={', '.join(map(str, torch_quant))} quantized (and rotated) with torch "
                f"operations in this run (its rows' quant=torch), several passes over each input instead of the fused "
                f"Triton quantization (flash_kernels.quantize).")
    refused = df[(df["impl"] == FP8_KERNEL) & df["status"].str.startswith("skipped")]
    for D, g in refused.groupby("D"):
        out += f"\n\nHead dim {D}: the FP8 path refuses it ({g['status'].iloc[0].removeprefix('skipped: ')})."
    return out


def _commit_of(path: Path) -> str:
    """The commit a benchmark CSV's manifest (``<suite>.manifest.json`` beside it, else the capture's) records."""
    for m in (bench_manifest(path), path.parent / "manifest.json"):
        if m.exists():
            env = json.loads(m.read_text()).get("environment") or {}
            if env.get("git_commit"):
                return str(env["git_commit"])
    return "?"


def deep_source(capture: Path, rows: Path | None) -> str:
    """Where a why sentence comes from: the deep capture, and, where the rows it explains (a benchmark CSV) ran
    another commit than it profiled, that they did (no commit ids: the two manifests name them) and, where git has
    both commits, whether the kernel sources (:data:`KERNEL_SOURCES`) differ between them: if they do, the why is
    of that other build until the deep capture is re-taken."""
    deep = str(load_manifest(capture).get("git_commit") or "?")[:7]
    ran = _commit_of(rows)[:7] if rows is not None else "?"
    if "?" in (deep, ran) or deep == ran:
        return f"the deep tier of the {capture.name} capture"
    changed = changed_between(ROOT, deep, ran, KERNEL_SOURCES)
    if changed is None:  # git does not have both commits here
        other = "of a build other than these rows'"
    elif not changed:
        other = "of another commit than these rows', with the same kernel sources"
    else:
        comments = comment_only(ROOT, deep, ran, changed)
        code = [f for f in changed if f not in comments]
        if not code:
            other = f"of another commit than these rows', whose kernel sources differ only in comments, in {_files(comments)}"
        else:
            other = f"of a build other than these rows', whose kernel sources differ in {_files(code)}" + (
                f", and only in comments in {_files(comments)}" if comments else "")
    return f"the deep tier of the {capture.name} capture, {other} (the two manifests name the commits)"


def _files(paths: list[str]) -> str:
    """``a.cu``, ``a.cu and b.cuh``, ``a.cu, b.cuh and c.h``, or ``N files`` past three."""
    names = sorted(Path(f).name for f in paths)
    if len(names) == 1:
        return names[0]
    if len(names) <= 3:
        return ", ".join(names[:-1]) + " and " + names[-1]
    return f"{len(names)} files"


def fp16_drift(gpu: Path, fp8_csv: Path) -> pd.DataFrame:
    """flash_wgmma's fp16 forward in the fp8 suite's run against the bench capture's convention suite, at the
    shapes both ran (B, H, N, D, causal): ``ratio`` = the fp8 suite's time over the bench capture's. Empty where
    this GPU has no bench capture or no shape is shared."""
    cols = ["B", "H", "N", "D", "causal"]
    conv = find_file(gpu / "bench", "convention.csv")
    if conv is None:
        return pd.DataFrame(columns=[*cols, "ratio"])
    a = pd.read_csv(fp8_csv)
    b = pd.read_csv(conv)
    a = a[(a["impl"] == "flash_wgmma") & (a["status"] == "ok") & (a["pass"] == "forward")]
    b = b[(b["impl"] == "flash_wgmma") & (b["status"] == "ok") & (b["pass"] == "forward") & (b["dtype"] == "float16")]
    m = a.merge(b, on=cols, suffixes=("_fp8", "_bench"))
    return m.assign(ratio=m["ms_fp8"] / m["ms_bench"])[[*cols, "ratio"]]


def fp16_drift_note(gpu: Path, fp8_csv: Path) -> str:
    """A line under the FP8 table where the fp8 suite's fp16 forward ran more than :data:`FP16_DRIFT_NOTE` from the
    bench capture's at the same shapes: the FP8-to-fp16 ratios are against the suite's own run."""
    m = fp16_drift(gpu, fp8_csv)
    off = m[(m["ratio"] - 1).abs() > FP16_DRIFT_NOTE]
    if off.empty:
        return ""
    cells = "; ".join(f"D={D} {'causal' if c else 'not causal'}: {_span(g['ratio'])}×"
                      for (D, c), g in off.groupby(["D", "causal"]))
    same = _commit_of(fp8_csv) == _commit_of(find_file(gpu / "bench", "convention.csv"))
    commits = ("both at the same commit" if same else
               "the two ran different commits, which their manifests name")
    return (f"\n\nflash_wgmma's fp16 forward in this run took more than {100 * FP16_DRIFT_NOTE:.0f} % longer or "
            f"shorter than in the bench capture at the same shapes ({cells} its time there; {commits}): the FP8 "
            "calls' ratios to it above are against this run's fp16 forward.")


def _o_sum(options: str, D: int) -> str:
    """Where the FP8 kernel summed O in a row: its options' o_sum, else the head dim's default (no torch here)."""
    given = dict(kv.split("=", 1) for kv in str(options or "").split(";") if "=" in kv)
    where = given.get("o_sum") or model.fp8_default_o_sum(D)
    return {"fp32": "fp32 registers", "tensor": "the tensor cores' accumulator"}.get(where, where)


def _fp8_kernel_errors(df: pd.DataFrame) -> pd.DataFrame:
    """The FP8 kernel's rows that ran and carry an error, with where each summed O (``o_sum``) and whether it
    centred V (``centred``: center_v=1 in its options)."""
    ok = df[(df["impl"] == FP8_KERNEL) & (df["status"] == "ok")].dropna(subset=["rel_l2"])
    opts = ok.get("options", pd.Series("", index=ok.index)).fillna("").astype(str)
    return ok.assign(o_sum=[_o_sum(o, D) for o, D in zip(opts, ok["D"], strict=True)],
                     centred=["center_v=1" in o.split(";") for o in opts])


def _torch_quantized_dims(df: pd.DataFrame) -> list[int]:
    """The head dims whose whole-call FP8 rows say they quantized with torch operations (options quant=torch; rows
    from before the bench recorded it say nothing)."""
    calls = df[df["impl"] == FP8_CALL]
    opts = calls.get("options", pd.Series("", index=calls.index)).fillna("").astype(str)
    return sorted({int(d) for d, o in zip(calls["D"], opts, strict=True) if "quant=torch" in o.split(";")})


def _fp8_centred_note(df: pd.DataFrame) -> str:
    """The head dims whose FP8 kernel rows ran with V centred (center_v=1 in their options): where O was summed,
    and the error range there."""
    ok = _fp8_kernel_errors(df)
    centred = ok[ok["centred"].astype(bool)]
    if centred.empty:
        return ""
    parts = []
    for where, g in centred.groupby("o_sum", sort=True):
        lo, hi = 100 * g["rel_l2"].min(), 100 * g["rel_l2"].max()
        span = f"{lo:.2f} %" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}–{hi:.2f} %"
        parts.append(f"at D={', '.join(map(str, sorted(set(g['D']))))} with O summed in {where}: {span}")
    return ("\n\nV is centred (center_v: given, or by default where O is summed in the tensor cores' accumulator, "
            "which loses V's common part over long rows): its mean row over the keys is taken out before V is "
            f"quantized and added back to O in the kernel's epilogue. The error (rel. L2) {'; '.join(parts)}.")


def _fp8_error_note(df: pd.DataFrame) -> str:
    """The head dims where the FP8 kernel's error passes :data:`ERROR_NOTE`: the error at each N and mask, where O
    was summed, beside the largest error of the head dims that stay under it."""
    ok = _fp8_kernel_errors(df)
    if ok.empty:
        return ""
    worst = ok.groupby("D")["rel_l2"].max()
    high, low = worst[worst > ERROR_NOTE], worst[worst <= ERROR_NOTE]
    out = ""
    for D in high.index:
        g = ok[ok["D"] == D].sort_values(["causal", "N"])
        cells = ", ".join(f"{100 * r.rel_l2:.1f} % at N={r.N}{' causal' if r.causal else ''}" for r in g.itertuples())
        sums = " and ".join(sorted(set(g["o_sum"])))
        beside = (f"; at D={', '.join(str(d) for d in low.index)} (O summed in "
                  f"{' and '.join(sorted(set(ok[ok['D'].isin(low.index)]['o_sum'])))}) it stays at or under "
                  f"{100 * low.max():.1f} %" if not low.empty else "")
        out += (f"\n\nThe FP8 error passes {100 * ERROR_NOTE:.0f} % at D={D}, where O is summed in {sums}: {cells}"
                f"{beside}.")
    return out


def fp8_accuracy_file(gpu: Path) -> Path | None:
    """scripts/fp8_accuracy.py's results (profiles/_bench/<gpu>/fp8_accuracy.json, or .json.xz), if this GPU has
    them."""
    return find_file(gpu.parent / LOOSE / gpu.name, "fp8_accuracy.json")


def fp8_pingpong_file(gpu: Path) -> Path | None:
    """The FP8 kernel timed with its consumers' ping-pong off and on (profiles/_bench/<gpu>/fp8_pingpong.csv: the fp8
    suite's rows with ``--option pingpong=0`` and ``=1``, a ``round`` column naming each run), if this GPU has it."""
    return find_file(gpu.parent / LOOSE / gpu.name, "fp8_pingpong.csv")


def pingpong_ratio(gpu: Path, D: int) -> pd.Series | None:
    """The FP8 kernel's time with its consumers' ping-pong over its time without, per (causal, N) at head dim ``D``:
    the median over the rounds of fp8_pingpong_file's runs; None where this GPU has no such runs at ``D``."""
    path = fp8_pingpong_file(gpu)
    if path is None:
        return None
    df = pd.read_csv(path)
    df = df[(df["impl"] == FP8_KERNEL) & (df["status"] == "ok") & (df["D"] == D)]
    pp = df["options"].str.extract(r"pingpong=(\d)", expand=False)
    ms = df.assign(pp=pp).pivot_table(index=["causal", "N"], columns="pp", values="ms", aggfunc="median")
    if not {"0", "1"} <= set(ms.columns) or ms.empty:
        return None
    return (ms["1"] / ms["0"]).dropna()


def _pingpong_note(gpu: Path, D: int) -> str:
    """What the FP8 kernel's ping-pong does at head dim ``D``, where it was measured; else the run that would tell."""
    r = pingpong_ratio(gpu, D)
    if r is None or r.empty:
        return "what to try is the fp8 suite with --option pingpong=1"
    faster = int((r < 1.0).sum())
    return (f"its ping-pong, measured there ({fp8_pingpong_file(gpu).name}: the kernel alone, pingpong=0 and 1 "  # type: ignore[union-attr]
            f"alternating over {r.size} shapes), takes {_span(r, mark=1.0)}× the time without it "
            f"({faster} of {r.size} faster)"
            + (f": faster at every shape, so D = {D} could join fp8.PINGPONG_HEAD_DIMS" if faster == r.size
               else ", so the default stays"))


def _read_text(path: Path) -> str:
    """A text file, xz- or gzip-compressed where its name says so (find_file's forms)."""
    opener = {".xz": lzma.open, ".gz": gzip.open}.get(path.suffix)
    if opener is None:
        return path.read_text()
    with opener(path, "rt") as fh:
        return fh.read()


def _exp_bound_note(gpu: Path, D: int) -> str:
    """Why FP8's faster products buy little at head dim ``D``, from the bench capture's measured ceilings: the
    forward's bound from the MUFU exp2 rate (one exponential per score) beside the fp16 wgmma ceiling; empty where
    the ceilings lack either."""
    path = find_file(gpu / "bench", "ceilings.json")
    if path is None:
        return ""
    c = json.loads(path.read_text()).get("ceilings", {})
    bound = (c.get("mufu_ex2") or {}).get("softmax_bound_flop_per_s", {}).get(f"forward, D={D}")
    fp16 = (c.get("wgmma_fp16") or {}).get("flop_per_s")
    if not bound or not fp16:
        return ""
    return (f": the measured exp2 rate bounds the forward at D={D} at {bound / 1e12:,.0f} TFLOP/s, "
            f"{bound / fp16:.2f}× the fp16 wgmma ceiling measured beside it ({fp16 / 1e12:,.0f}), all that faster "
            "products can gain there")


def _verdict(sa: Any, sb: Any) -> str:
    """``nsightlab why``'s one-sentence verdict on two sides it loaded (analysis.why.sides_in: their longest
    launches)."""
    from nsightlab.analysis import bottleneck as B

    return B.verdict(sa.name, sb.name, B.explain(sa.deep, sa.launch, sb.deep, sb.launch),
                     B.metric_gaps(sa.deep, sa.launch, sb.deep, sb.launch))


def why_sentence(capture: Path, a: str, b: str, case: str = "") -> str:
    """``nsightlab why``'s verdict on the deep capture: why ``a`` takes the time it does against ``b`` (their
    longest launches), one computed sentence; or why it cannot be said here."""
    from nsightlab.analysis import why

    try:
        sa, sb, _ = why.sides_in(capture, a, b, case)
        if sb is None:
            return f"(no {b} in {capture.name})"
        return _verdict(sa, sb)
    except (ProfileError, ValueError, OSError, ImportError) as exc:
        return f"({capture.name}'s deep report could not be read here: {' '.join(str(exc).split())[:200]})"


#: the Hopper rung's targets, set beside FlashAttention-3's FP8 forward (about 1.2 PFLOP/s reported) and cuDNN's speed
FP8_TFLOPS_MARK = {False: 1000.0, True: 900.0}
#: the head dims the FP8 rate targets hold at
FP8_MARK_HEAD_DIMS = (128, 256)
BACKWARD_MARKS = {"flash_wgmma": ("sdpa_cudnn", 1.0, 2048), "flash_mma": ("sdpa_flash", 0.95, 8192)}
#: the deep capture whose why page explains both backwards, and its case
BACKWARD_WHY = ("backward-n8192-deep", "N=8192,D=128,pass=backward")
#: the deep capture of head dim 256 (flash_kernels/sweeps/d256-deep.toml) and its case per pass (the forward's at
#: each N it profiles): flash_wgmma against cuDNN, the why of the D = 256 marks where this GPU has it
D256_WHY = ("d256-deep", {"forward": "N={N},D=256,pass=forward", "backward": "N=4096,D=256,pass=backward"})
#: the deep capture whose why page puts the FP8 forward beside the fp16 one (D=128), and the two sides
FP8_WHY = ("fp8", FP8_KERNEL, "flash_wgmma")
#: the head dim of that capture's deep cases: its why is given for the FP8 marks at this head dim only
FP8_WHY_D = 128


def fp8_why(gpu: Path) -> str | None:
    """Why the FP8 forward stays where it is, from the deep capture :data:`FP8_WHY` names: ``nsightlab why``'s
    verdict against the fp16 forward and the instruction mix beside it; None where this GPU has no such capture."""
    from nsightlab.analysis import advice, why

    capture, a, b = gpu / FP8_WHY[0], FP8_WHY[1], FP8_WHY[2]
    if not capture.is_dir():
        return None
    try:
        sa, sb, _ = why.sides_in(capture, a, b, "")
    except (ProfileError, ValueError, OSError, ImportError):
        return None  # the caller's fallback, not an error message in the table
    if sb is None:
        return None
    out = _verdict(sa, sb)
    mix = advice.mix_sentence(sa.name, sb.name, advice.instruction_mix(sa.deep, sa.launch, sb.deep, sb.launch))
    return f"{out}{f' {mix}' if mix else ''} From {deep_source(capture, fp8_suite_file(gpu))}, at D={FP8_WHY_D}."


def _fp8_error_mark(df: pd.DataFrame, D: int, causal: bool, min_n: int = 8192) -> str:
    """The why cell of a met FP8 rate mark: — where the kernel's error in the mark's rows (``D``, ``causal``, N at
    least ``min_n``) stays under :data:`ERROR_NOTE`, else their error span, pointing at the FP8 table's error line."""
    e = df[(df["impl"] == FP8_KERNEL) & (df["status"] == "ok") & (df["D"] == D) & (df["causal"] == causal)
           & (df["N"] >= min_n)]["rel_l2"].dropna()
    if e.empty or e.max() <= ERROR_NOTE:
        return "—"
    return (f"met, but the FP8 error at D={D} is {_span(100 * e, '{:.1f}')} % (rel. L2), past {100 * ERROR_NOTE:.0f} %: "
            "the FP8 table's error line")


def _met(ok: pd.Series) -> str:
    return f"{int(ok.sum())} of {len(ok)}"


def _deep_forward_ns(capture: Path) -> list[int]:
    """The N of a D = 256 deep capture's fp16, not causal forward cases of flash_wgmma ([] where there is none)."""
    if not capture.is_dir():
        return []
    try:
        c = cases(load_manifest(capture))
    except (OSError, ValueError, ProfileError):
        return []
    if c.empty or not {"impl", "pass", "dtype", "N", "D"} <= set(c.columns):
        return []
    sel = c[(c["impl"] == "flash_wgmma") & (c["pass"] == "forward") & (c["dtype"] == "float16") & (c["D"] == 256)]
    if "causal" in sel.columns:
        sel = sel[~sel["causal"].astype(bool)]
    return sorted({int(n) for n in sel["N"]})


def _deep_command(missed: pd.Series) -> str:
    """The capture that would explain the worst of the D = 256 forward's missed rows (index dtype, causal, N): both
    sides at its shape (the d256 suite's B = 16384 / N, H = 8), deep tier only."""
    dtype, causal, N = missed.idxmin()
    return (f"`nsightlab capture --impl flash_wgmma --impl sdpa_cudnn -B {16384 // N} -H 8 -N {N} -D 256 --dtype "
            f"{dtype} --causal {'yes' if causal else 'no'} --pass forward --deep . --deep-only`")


def anchors_table(gpu: Path) -> str:
    """Each mark of the Hopper rung against what this GPU's captures measured: met in how many rows, or missed by
    how much, and, where a deep capture holds both sides, why (``nsightlab why``'s verdict)."""
    rows: list[dict[str, str]] = []

    def add(mark: str, measured: str, met: str, why_: str) -> None:
        rows.append({"target": mark, "measured": measured, "met": met, "why / what it needs": why_})

    fp8 = fp8_suite_file(gpu)
    if fp8 is not None:
        df, ms, tf, _ = _fp8_suite(fp8)
        fallback = "the softmax's instruction count bounds it (docs/kernels.md, from the SASS)"
        rate_why = {FP8_WHY_D: fp8_why(gpu) or fallback}
        for D in FP8_MARK_HEAD_DIMS:
            rows_d = df[(df["impl"] == FP8_KERNEL) & (df["D"] == D)]
            if not rows_d.empty and rows_d["status"].str.startswith("skipped").all():
                add(f"FP8 forward at D={D}", "refused", "0 of 1", rows_d["status"].iloc[0].removeprefix("skipped: "))
                continue
            for causal, mark in FP8_TFLOPS_MARK.items():
                try:
                    t = tf.xs((D, causal), level=["D", "causal"])
                    t = t[t.index >= 8192][FP8_VT].dropna()
                except KeyError:  # a partial run: no such rows
                    continue
                if t.empty:
                    continue
                ok = t >= mark
                add(f"FP8 forward ≥ {mark:.0f} TFLOP/s, D={D}, N ≥ 8k, {'causal' if causal else 'not causal'} "
                    "(V's transpose counted)", f"{_span(t, '{:.0f}')} TFLOP/s", _met(ok),
                    f"short by {100 * (1 - t.min() / mark):.0f} % at worst; {rate_why.get(D, fallback)}"
                    if not ok.all() else _fp8_error_mark(df, D, causal))
        g = ms[ms.index.get_level_values("N") >= 2048]
        ratio = (g["flash_wgmma"] / g[FP8_VT]).dropna() if {"flash_wgmma", FP8_VT} <= set(g.columns) else pd.Series()
        worst = ratio.idxmin() if not ratio.empty else None
        if worst is not None:
            why_ = f"the worst: D={worst[0]}, N={worst[2]}, {'causal' if worst[1] else 'not causal'}"
            for D, d in ratio.groupby(level="D"):
                if (d < 1.0).all():
                    why_ += f"; every row at D={D} misses ({_span(d)}×)" + _exp_bound_note(gpu, D)
                    fp16 = df[(df["impl"] == "flash_wgmma") & (df["D"] == D) & (df["status"] == "ok")].get(
                        "options", pd.Series(dtype=object))
                    opts = dict(o.split("=", 1) for o in str(fp16.iloc[0]).split(";") if "=" in o) if len(fp16) else {}
                    if "wg_tile" in opts:
                        bm = kernel("flash_wgmma_fp8").constants["scale_block"]  # its query tile: one scale block
                        why_ += (f"; the fp16 forward there runs {opts['wg_tile']} tiles, {opts.get('pipeline', '')} "
                                 f"(its rows' options), the FP8 kernel {bm}-row tiles with its consumers' ping-pong "
                                 "by default only where it was measured faster (fp8.PINGPONG_HEAD_DIMS): "
                                 + _pingpong_note(gpu, int(D)))
            if fp16_drift_note(gpu, fp8):
                why_ += "; against the fp8 suite's own fp16 run, which the note under the FP8 table compares"
            add("FP8 forward ≥ our fp16 forward at every N ≥ 2048 (V's transpose counted)", f"{_span(ratio, mark=1.0)}×",
                _met(ratio >= 1.0), why_ if not (ratio >= 1.0).all() else "—")
    acc = fp8_accuracy_file(gpu)
    if acc is not None:
        rows_ = [r for r in json.loads(_read_text(acc))["accuracy"] if r.get("status") == "ok"]
        if rows_:
            mean = {k: sum(r[f"rel_l2_{k}"] for r in rows_) / len(rows_) for k in ("per_tensor", "per_block_rotated")}
            gain = mean["per_tensor"] / mean["per_block_rotated"]
            add("FP8 error: per-block scales + Hadamard rotation against per tensor (FlashAttention-3: 2.6× lower)",
                f"mean rel. L2 {mean['per_tensor']:.3f} → {mean['per_block_rotated']:.3f} over {len(rows_)} shapes",
                f"{gain:.1f}× lower", "the default (fp8.DEFAULT_ROTATE, DEFAULT_SCALES), chosen by "
                "scripts/fp8_accuracy.py's rule; cuDNN's FP8 attention is not exposed by this PyTorch")
    d256_rows, d256_deep, d256_csv = _d256_rows(gpu), gpu / D256_WHY[0], d256_file(gpu)
    if not d256_rows.empty:
        df = d256_rows[d256_rows["pass"] == "forward"]
        p = df.pivot_table(index=["dtype", "causal", "N"], columns="impl", values="ms")
        ratio = p["sdpa_cudnn"] / p["flash_wgmma"]
        missed = ratio[ratio < D256_TARGET]
        where = "; ".join(f"{'causal' if causal else 'not causal'}: N = {', '.join(map(str, sorted({n for *_, n in g.index})))}"
                          for causal, g in missed.groupby(level="causal"))
        # the deep capture's fp16, not causal forward cases explain the misses at their N only: N = 4096 first,
        # else the shortest missed N it profiles; a miss it does not profile gets the command that would
        deep_ns = _deep_forward_ns(d256_deep)
        at = [n for n in sorted(deep_ns, key=lambda n: (n != 4096, n)) if ("float16", False, n) in missed.index]
        profiled = [n for n in deep_ns if ("float16", False, n) in ratio.index]  # all met where `at` is empty
        why_fwd = ""
        if at:
            case = D256_WHY[1]["forward"].format(N=at[0])
            why_fwd = (f"; at N = {at[0]}, from {deep_source(d256_deep, d256_csv)}: "
                       f"{why_sentence(d256_deep, 'flash_wgmma', 'sdpa_cudnn', case)}")
        elif not missed.empty:
            where_deep = (f" ({d256_deep.name} profiles fp16, not causal, {', '.join(f'N = {n}' for n in profiled)}, "
                          f"which {'meets' if len(profiled) == 1 else 'meet'} it)" if profiled else "")
            why_fwd = f"; no deep capture profiles these shapes{where_deep}: {_deep_command(missed)} would"
        add(f"Forward at D=256 ≥ {D256_TARGET:.1f}× cuDNN", f"{_span(ratio, mark=D256_TARGET)}×", _met(ratio >= D256_TARGET),
            "—" if missed.empty else f"short by {100 * (1 - ratio.min()):.0f} % at worst; missed (in fp16 or bf16) at "
            f"{where}{why_fwd}")
    dims = get_variant("flash_wgmma").head_dims_of("backward")
    if 256 not in dims:
        add("Backward at D=256", "not built", "0 of 1", f"flash_wgmma's backward takes D={', '.join(map(str, dims))}: "
            "dK and dV of 64 keys × 256 columns are 256 registers per thread")
    else:
        bwd = d256_rows[d256_rows["pass"] == "backward"]
        p = bwd.pivot_table(index=["dtype", "causal", "N"], columns="impl", values="ms")
        if not {"flash_wgmma", "sdpa_cudnn", "sdpa_flash"} <= set(p.columns):
            add("Backward at D=256 built (its speed has no target)", "not timed on this GPU", "1 of 1",
                "no d256 CSV here times the backward of flash_wgmma, cuDNN and SDPA flash: the bench-d256 capture does")
        else:
            add("Backward at D=256 built (its speed has no target)",
                f"{_span(p['sdpa_cudnn'] / p['flash_wgmma'])}× cuDNN, {_span(p['sdpa_flash'] / p['flash_wgmma'])}× "
                f"SDPA flash over {len(p)} rows", "1 of 1",
                "the 64×64 tile on the cp.async pipeline (two warpgroups over 64 keys, half the head dim each; P^T "
                "and dS^T through shared memory, dQ by the copy engine's bulk reduce-add): no producer warpgroup, "
                "no overlap of one query block's products with the next" + (
                    f"; at N = 4096, from {deep_source(d256_deep, d256_csv)}: "
                    f"{why_sentence(d256_deep, 'flash_wgmma', 'sdpa_cudnn', D256_WHY[1]['backward'])}"
                    if d256_deep.is_dir() else ""))
    bench = gpu / "bench"
    if bench.is_dir() and bench_csvs(bench):
        df, _ = load_bench(bench)
        deep, conv = gpu / BACKWARD_WHY[0], find_file(bench, "convention.csv")
        case = parse_case(BACKWARD_WHY[1])
        for impl, (ref, mark, min_n) in BACKWARD_MARKS.items():
            t = perf.target_table(df[df["D"] == 128] if impl == "flash_wgmma" else df, impl, ref, {"backward": mark},
                                  min_n=min_n, suite="convention")
            t = t[(t["pass"] == "backward") & ((t["N"] == min_n) if impl == "flash_mma" else True)]
            if t.empty:
                continue
            why_ = f"short by {100 * (1 - t['ratio'].min() / mark):.0f} % at worst"
            if deep.is_dir():
                why_ += (f"; {why_sentence(deep, impl, ref, BACKWARD_WHY[1])} From {deep_source(deep, conv)}, at "
                         f"N = {case['N']}, D = {case['D']}.")
            where = f"D=128, N ≥ {min_n}" if impl == "flash_wgmma" else f"N = {min_n}"
            add(f"{impl} backward ≥ {mark:.2f}× {ref} ({where})", f"{_span(t['ratio'], mark=mark)}×",
                _met(t["ratio"] >= mark), why_ if not t["met"].all() else "—")
    return _md(pd.DataFrame(rows)) if rows else "(no captures of the Hopper rung's marks for this GPU)"


def _section(title: str, body: str, source: str, note: str = "") -> list[str]:
    return [f"### {title}", "", *([note, ""] if note else []), body, "", source, ""]


def gpu_sections(gpu: Path) -> list[str]:
    """One GPU's part of the page."""
    name = gpu.name
    out = [f"## {name}", "", _gpu_line(gpu) + ".", ""]
    out += _section("Captures", capture_table(gpu), "",
                    "Every capture folder of this GPU: its origin, the tools that profiled it, how many kernels and "
                    "replay passes, and the time each step took.")[:-2]
    bench = gpu / "bench"
    if bench.is_dir():
        df, _ = load_bench(bench)
        suites = set(df["suite"])
        conv = _bench_sources(gpu, "convention")
        out += _section("flash_wgmma against cuDNN in the same run (convention suite, N ≥ 4096)", top_table(gpu), conv,
                        "Throughput over cuDNN's (SDPA's cuDNN backend, same process, same inputs); the targets of "
                        "the top of the ladder: forward ≥ 1.0 × at D=64 and ≥ 1.05 × at D=128, backward ≥ 0.90 ×.")
        out += _section("flash_wgmma against SDPA's FlashAttention-2 backend (convention suite, N ≥ 4096)",
                        sdpa_flash_table(gpu), conv)
        out += _section("flash_mma against SDPA's FlashAttention-2 backend (convention suite, N ≥ 2048)",
                        target_table(gpu), conv,
                        "The FlashAttention-2 parity targets of the tensor-core rung: forward ≥ 0.95 ×, backward ≥ 0.85 ×.")
        if "gqa" in suites:
            out += _section("Grouped-query attention (gqa suite: H=32, D=128, B·N = 16384): throughput over SDPA flash's",
                            gqa_table(gpu), _bench_sources(gpu, "gqa"))
        if "decode" in suites:
            out += _section("KV-cache decode (decode suite: B=8, H=32, D=128, fp16, forward): µs per call and GB/s of "
                            "compulsory traffic", decode_table(gpu), _bench_sources(gpu, "decode"))
        if "d128" in suites:
            out += _section("Every variant, one configuration (d128 suite: B=4, H=16, N=4096, D=128, not causal)",
                            one_config_table(gpu), _bench_sources(gpu, "d128"))
    tiles = tile_files(gpu)
    if tiles is not None:
        out += _section("flash_mma's forward tile step: 128×32 and 128×64 (fp16, convention shapes)",
                        tile_step_table(gpu), _cite(*tiles),
                        "Reference time over flash_mma's time in the same run, per tile; the 128×64 tile is "
                        "the default at D=128.")
    d256 = d256_file(gpu)
    if d256 is not None:
        out += _section("flash_wgmma at head dim 256 (d256 suite: B·N = 16384, H = 8)", d256_table(gpu),
                        _cite(d256, d256.parent / ("flash_wgmma_d256.manifest.json" if d256.parent.parent.name == LOOSE
                                                   else "d256.manifest.json")),
                        "Reference time over flash_wgmma's in the same run, L2 flushed, medians: the forward on the "
                        "128×64 tile of tma-ws-pingpong, against its target of "
                        f"≥ {D256_TARGET:.1f} × cuDNN; the backward (where the CSV times it) on the 64×64 tile of "
                        "cp.async, shown without a target.")
    fp8s = fp8_suite_file(gpu)
    if fp8s is not None:
        out += _section("FP8 forward (fp8 suite: B·N = 16384, H·D = 2048; e4m3 by `attention_fp8_from`'s defaults, per "
                        "block + rotation)", fp8_suite_table(gpu), _cite(fp8s, fp8s.with_name("fp8.manifest.json")),
                        "TFLOP/s of the FP8 kernel alone (inputs quantized and V transposed before the call; in "
                        "brackets: the share of the dense FP8 peak at the published 1.83 GHz), then the FP8 call "
                        "with V's transpose and the whole call from fp16 inputs (quantize, rotate, transpose, the "
                        "kernel) against the fp16 forwards, all in one run on the same fp16 inputs, L2 flushed, "
                        "medians. Both errors are against fp64 attention of the fp16 inputs.")
    if fp8s is not None:  # the marks are the H200's (FlashAttention-3's FP8 and cuDNN's numbers there)
        files = [fp8s, fp8_accuracy_file(gpu), d256_file(gpu),
                 *(c for c in (bench_csvs(gpu / "bench") if (gpu / "bench").is_dir() else [])
                   if c.name.startswith("convention.")),
                 fp8_pingpong_file(gpu), find_file(gpu / FP8_WHY[0], "manifest.json"),
                 find_file(gpu / D256_WHY[0], "manifest.json"), find_file(gpu / BACKWARD_WHY[0], "manifest.json")]
        out += _section("The Hopper rung against its targets: FP8, head dim 256, the backward at cuDNN's speed",
                        anchors_table(gpu), _cite(*files),
                        "The targets, set beside what FlashAttention-3 reports (FP8 near 1.2 PFLOP/s, head dim 256) "
                        "and cuDNN's speed: what the captures measured, in how many rows each is met, and, where one "
                        "is missed, by how much and why: for the backwards, `nsightlab why`'s verdict on the deep "
                        "capture that holds both sides.")
    fp8 = fp8_file(gpu)
    if fp8 is not None:
        out += _section("FP8 forward (`fk.attention_fp8`): e4m3 inputs, per-tensor scales", fp8_table(gpu), _cite(fp8),
                        "TFLOP/s of the FP8 kernel alone (in brackets: the share of the dense FP8 peak), B·N = 16k, "
                        "H·D = 2048, L2 flushed, medians, in one run with the fp16 forward and SDPA's backends on the "
                        "same fp16-rounded inputs. The error is against fp64 attention of the dequantized e4m3 inputs, "
                        "and of the fp32 draws before quantization.")
    split = ab_file(gpu)
    if split is not None:
        out += _section("The Hopper forward split into parts: the same machine before and after", ab_table(split),
                        _cite(split),
                        "flash_wgmma's warp-specialised forward split into producer, consumer, epilogue and tile "
                        "scheduler parts (the FP8 forward sharing the consumer loop), timed against the sources "
                        "before the split on one GPU, the two trees alternating over two rounds, cuDNN in every "
                        "round as a drift check. The log holds the command and every timing.")
    if (gpu / "triton-example").is_dir():
        cap = gpu / "triton-example"
        out += _section("The Triton example (B=4, H=16, N=4096, D=128; Nsight Systems, median of the launches)",
                        example_table(gpu), _cite(find_file(cap, "nsys.sqlite"), cap / "manifest.json"))
    if (gpu / "seqlen").is_dir():
        cap = gpu / "seqlen"
        out += _section("What the seqlen capture says", seqlen_findings(gpu),
                        _cite(find_file(cap, "ncu.ncu-rep"), find_file(cap, "nsys.sqlite"), cap / "manifest.json"))
    return out


def gpus(profiles: Path) -> list[Path]:
    return sorted(p for p in Path(profiles).iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def render(profiles: Path = PROFILES) -> str:
    """The whole page, from every GPU folder of ``profiles``."""
    lines = ["# Results", "",
             "Generated by `make report` (`nsightlab report`, through `flash_kernels/results.py`) from the committed "
             "captures; do not edit by hand. Each table names the files it is computed from. Benchmarks time CUDA "
             "events around each call with the L2 flushed before it and report medians; every row was first checked "
             "against an fp64 reference. Ratios are the reference's time over ours (above 1: ours is faster).", ""]
    for gpu in gpus(profiles):
        lines += gpu_sections(gpu)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    sys.stdout.write(render(Path(argv[0]) if argv else PROFILES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
