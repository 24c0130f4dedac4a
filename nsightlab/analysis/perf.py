"""Benchmark results (the CSVs a capture's bench step writes): tidy frames in, tidy frames out.

Nothing here names an implementation or a problem: the one to track, the reference and the targets are
the caller's (a notebook's parameters); without a reference, the implementation fastest in the most
configurations is used. What identifies a configuration, the field a suite sweeps and the columns and
order of a table are the problem's (the one :func:`nsightlab.store.captures.load_bench` read the CSVs as,
``df.attrs["problem"]``, else the registered problem whose fields the columns are).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from ..core.text import csv_list
from ..problems import problem as problems
from ..problems.problem import Problem

#: the columns that identify a benchmark row whatever its problem (a configuration's name spells its shape;
#: :func:`key` adds the problem's key fields)
BASE_KEY = ["suite", "config", "dtype", "pass"]
#: other spellings of the CSVs' dtypes
DTYPE_ALIASES = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32", "float": "float32",
                 "fp64": "float64", "double": "float64"}


def problem_of(df: pd.DataFrame) -> Problem:
    """The problem of a benchmark frame: the one it was read as (``attrs["problem"]``), else the registered
    problem whose fields its columns are, else the default."""
    name = df.attrs.get("problem")
    return problems.get(name) if isinstance(name, str) and name in problems.known() else problems.for_fields(df.columns)


def key(df: pd.DataFrame) -> list[str]:
    """The columns that identify a configuration of ``df``: suite, configuration, the problem's key fields
    that ``df`` has, dtype and pass."""
    fields = [f for f in problem_of(df).required_fields if f in df and f not in BASE_KEY]
    return [*BASE_KEY[:2], *fields, *BASE_KEY[2:]]


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"].copy()


def pick_reference(df: pd.DataFrame) -> str:
    """The implementation with the least time in the most configurations (ties: by name)."""
    ok = ok_rows(df)
    if ok.empty:
        raise ValueError("no successful benchmark rows")
    best = ok.loc[ok.groupby(key(df))["ms"].idxmin(), "impl"].value_counts()
    return str(sorted(best[best == best.max()].index)[0])


def implementations(df: pd.DataFrame) -> pd.DataFrame:
    """What the CSVs say about each implementation: kind, passes, dtypes, options seen, rows that
    ran and rows skipped (in the order the CSVs list them)."""
    rows = []
    for impl, g in df.groupby("impl", sort=False):
        opts = sorted({o for o in g["options"].astype(str) if o})
        rows.append({"implementation": impl, "kind": ", ".join(dict.fromkeys(g["kind"].astype(str))),
                     "passes": ", ".join(dict.fromkeys(g["pass"])), "dtypes": ", ".join(dict.fromkeys(g["dtype"])),
                     "options": "; ".join(opts[:4]) + (" ..." if len(opts) > 4 else ""),
                     "rows ok": int((g["status"] == "ok").sum()), "rows skipped": int((g["status"] != "ok").sum())})
    return pd.DataFrame(rows)


def ratio_to(df: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Each implementation's throughput over ``reference``'s in the same run and config (1.0 = equal)."""
    ok = ok_rows(df)
    k = key(df)
    ref = ok[ok["impl"] == reference][k + ["tflops"]].rename(columns={"tflops": "ref_tflops"})
    out = ok.merge(ref, on=k, how="inner")
    out.attrs = dict(df.attrs)
    out["ratio"] = out["tflops"] / out["ref_tflops"]
    return out


#: an implementation is competitive when its median throughput is at least this share of the fastest's, config by config
COMPETITIVE = 0.5


def competitive(df: pd.DataFrame, within: float = COMPETITIVE) -> tuple[list[str], dict[str, float]]:
    """The implementations of ``df`` (one suite and dtype) worth comparing on a linear axis: those whose median,
    over the configurations they ran, of their throughput over the fastest one's in the same configuration is at
    least ``within``; and every other one's median share (name -> share), for the sentence that names them."""
    ok = ok_rows(df)
    ok = ok[ok["tflops"] > 0]
    if ok.empty:
        return [], {}
    k = key(df)
    best = ok.groupby(k)["tflops"].transform("max")
    share = (ok["tflops"] / best).groupby(ok["impl"]).median()
    keep = [i for i in dict.fromkeys(ok["impl"]) if share[i] >= within]
    return keep, {str(i): float(share[i]) for i in share.index if i not in keep}


def parse_targets(text: str) -> dict[str, float]:
    """``"forward:0.8,backward:0.6"`` (or ``=``) -> {"forward": 0.8, "backward": 0.6} (empty: none).
    ValueError naming the item that is not ``pass:ratio``."""
    out = {}
    for item in csv_list(text or ""):
        key, sep, val = item.replace("=", ":").partition(":")
        try:
            out[key.strip()] = float(val.strip().rstrip("%")) / (100 if val.strip().endswith("%") else 1)
        except ValueError:
            raise ValueError(f"{item!r} is not pass:ratio (e.g. forward:0.8)") from None
        if not sep or not key.strip():
            raise ValueError(f"{item!r} is not pass:ratio (e.g. forward:0.8)")
    return out


def target_table(df: pd.DataFrame, impl: str, reference: str, targets: Mapping[str, float], min_n: int = 2048,
                 suite: str | None = None) -> pd.DataFrame:
    """Rows of ``suite`` (all suites: None) whose sweep axis (the problem's,
    :attr:`~nsightlab.problems.problem.Problem.sweep_axis`) is at least ``min_n``: impl and reference TFLOP/s,
    ratio, the pass's target and whether it is met; the problem's table columns, sorted in its order."""
    problem = problem_of(df)
    axis = problem.sweep_axis
    sel = df if suite is None else df[df["suite"] == suite]
    r = ratio_to(sel, reference)
    r = r[(r["impl"] == impl) & ((r[axis] >= min_n) if axis in r else True)]
    r = r.assign(target=r["pass"].map(dict(targets)))
    r["met"] = r["ratio"] >= r["target"]
    lead = [c for c in ("suite", "dtype") if c in r and (suite is None or c != "suite")]
    shown = [c for c in problem.table_columns() if c in r and c not in lead]
    cols = ["pass", *lead, *shown, "tflops", "ref_tflops", "ratio", "target", "met"]
    order = {"forward": 0, "backward": 1}
    r = r.assign(_p=r["pass"].map(order).fillna(2))
    by = [c for c in problem.sort_order() if c in shown]
    return r.sort_values(["_p", *lead, *by], kind="stable")[cols].reset_index(drop=True)


def speedup_table(df: pd.DataFrame, suite: str, pass_: str, dtype: str, baseline: str) -> pd.DataFrame:
    """config x impl table of time(baseline) / time(impl)."""
    ok = ok_rows(df)
    ok = ok[(ok["suite"] == suite) & (ok["pass"] == pass_) & (ok["dtype"] == dtype)]
    piv = ok.pivot_table(index="config", columns="impl", values="ms", aggfunc="first")
    if baseline not in piv:
        return piv.iloc[0:0]
    order = ok.drop_duplicates("config")["config"]
    return piv.rdiv(piv[baseline], axis=0).reindex(order)  # baseline ms / impl ms


def suite_table(manifests: Mapping[str, dict]) -> pd.DataFrame:
    """One row per suite: its description, rows and run time."""
    return pd.DataFrame([{"suite": s, "description": m.get("description", ""), "rows": m.get("rows"),
                          "run time [s]": round(m.get("seconds", 0))} for s, m in manifests.items()])


def skipped_table(df: pd.DataFrame) -> pd.DataFrame:
    """Skipped cases per implementation, pass and reason."""
    sk = df[df["status"] != "ok"]
    if sk.empty:
        return pd.DataFrame(columns=["implementation", "pass", "reason", "cases"])
    out = sk.groupby(["impl", "pass", "status"], sort=False).size().rename("cases").reset_index()
    return out.rename(columns={"impl": "implementation", "status": "reason"})


def host_bound_table(df: pd.DataFrame) -> pd.DataFrame | None:
    """Per implementation and pass, the timed rows whose host time per call (``host_ms``: Python, argument
    checks, launches; the GPU's work queued, not waited for) exceeds their GPU time: called one after another
    without CUDA graphs, those calls run at the host's pace, not the kernel's. None where the CSVs have no
    ``host_ms`` (benchmarks from before it was measured)."""
    if "host_ms" not in df:
        return None
    ok = ok_rows(df).assign(host_ms=lambda d: pd.to_numeric(d["host_ms"], errors="coerce")).dropna(subset=["host_ms"])
    if ok.empty:
        return None
    rows = []
    for (impl, pass_), g in ok.groupby(["impl", "pass"], sort=False):
        over = g[g["host_ms"] > g["ms"]]
        rows.append({"implementation": impl, "pass": pass_, "rows": len(g), "host-bound rows": len(over),
                     "host µs per call (median)": 1e3 * float(g["host_ms"].median()),
                     "GPU µs of the host-bound rows (median)": 1e3 * float(over["ms"].median()) if len(over) else None})
    return pd.DataFrame(rows)


def accuracy_table(df: pd.DataFrame) -> pd.DataFrame:
    """Worst error metrics per implementation, pass and dtype (against the fp64 reference)."""
    ok = ok_rows(df)
    cols = [c for c in ["max_abs", "mean_abs", "mse", "max_rel", "rel_l2"] if c in ok]
    return ok.groupby(["impl", "pass", "dtype"], sort=False)[cols].max().reset_index()


def facets(problem: Problem) -> list[str]:
    """The shape fields a sweep's lines are drawn apart by: the problem's required fields that it sorts before
    its sweep axis (attention: the head dim and the mask), dtype and pass aside."""
    order = list(problem.sort_order())
    axis = problem.sweep_axis
    before = order[: order.index(axis)] if axis in order else order
    return [c for c in before if c in problem.required_fields and c not in BASE_KEY]


def sweeps_axis(df: pd.DataFrame, suite: str) -> bool:
    """Whether a suite is a sweep over its problem's sweep axis (3+ values for one implementation and pass, and
    no value run twice with other shapes: then lines against it connect like with like)."""
    problem = problem_of(df)
    axis = problem.sweep_axis
    s = ok_rows(df[df["suite"] == suite])
    if not len(s) or axis not in s:
        return False
    by = ["impl", "pass", "dtype", *[c for c in facets(problem) if c in s]]
    g = s.groupby(by)[axis]
    return int(g.nunique().max()) >= 3 and bool((g.nunique() == g.size()).all())


#: the name the performance page calls :func:`sweeps_axis` by (an attention suite sweeps N)
sweeps_n = sweeps_axis


def flop_source(manifests: Mapping[str, dict]) -> str:
    """The page's FLOP-source line: the benchmark computed ``tflops`` itself."""
    mods = set()
    for m in manifests.values():
        cmd = [str(c) for c in m.get("command") or []]
        mods.add(cmd[cmd.index("-m") + 1] if "-m" in cmd and cmd.index("-m") + 1 < len(cmd) else "the benchmark")
    return (f"the benchmark CSVs' `tflops` column, computed by {', '.join(sorted(mods)) or 'the benchmark'} from its "
            "own FLOP convention")


#: how a benchmark emptied the L2 before each timed repeat, by its manifest's timing.flush
FLUSH_WORDS = {
    "read": "the L2 flushed before each repeat by reading a buffer of twice its size (it holds no dirty line)",
    "write": "the L2 flushed before each repeat by overwriting a buffer of twice its size: the call first writes "
             "back that buffer's dirty lines, which slows short memory-bound calls",
    "none": "the L2 not flushed between repeats: inputs that fit in it are read from it",
}


def flush_note(manifests: Mapping[str, dict]) -> str:
    """The page's L2-flush line, from each suite manifest's ``timing.flush``. A manifest without it predates the
    field: its benchmark overwrote a buffer ("write"). Suites that differ are named."""
    modes = {name: (m.get("timing") or {}).get("flush", "write") for name, m in manifests.items()}
    unknown = sorted({v for v in modes.values() if v not in FLUSH_WORDS})
    if unknown:
        return f"L2 flush mode(s) {', '.join(map(str, unknown))} not known to this version"
    if len(set(modes.values())) == 1:
        return FLUSH_WORDS[next(iter(modes.values()))]
    return "; ".join(f"{name}: {FLUSH_WORDS[v]}" for name, v in modes.items())


def order_note(manifests: Mapping[str, dict]) -> str:
    """How a configuration's implementations took turns, from each suite manifest's ``timing.rounds``: round-robin
    in that many rounds (``timing.one_go_ms``, where recorded: calls at least that long timed in one go), or (1, or a
    manifest that predates the field) each timed in one go, one after another. Suites that differ are named."""
    def words(m: dict) -> str:
        timing = m.get("timing") or {}
        rounds = timing.get("rounds", 1)
        if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
            return f"timing.rounds {rounds!r} not known to this version"
        if rounds == 1:
            return "a configuration's implementations timed one after another, each in one go"
        one_go = timing.get("one_go_ms")
        return (f"a configuration's implementations timed round-robin, {rounds} rounds of a share of the repeats each "
                "(a drift of the GPU's state falls on all of them alike"
                + (f"; a call of {one_go:g} ms or more in one go" if isinstance(one_go, (int, float)) else "") + ")")
    notes = {name: words(m) for name, m in manifests.items()}
    if len(set(notes.values())) <= 1:
        return next(iter(notes.values()), "")
    return "; ".join(f"{name}: {v}" for name, v in notes.items())


def timing_note(manifests: Mapping[str, dict]) -> str:
    """The page's timing line: :func:`flush_note` and :func:`order_note`."""
    return "; ".join(x for x in (flush_note(manifests), order_note(manifests)) if x)


def _t(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def findings(df: pd.DataFrame, reference: str, impl: str = "", targets: Mapping[str, float] | None = None,
             dtypes: list[str] | None = None) -> list[str]:
    """The page's two or three findings, from the CSVs: which implementation is fastest where and
    how fast; how the others compare with the reference (median over the configurations both ran);
    the tracked implementation against its targets."""
    ok = ok_rows(df)
    if dtypes:
        ok = ok[ok["dtype"].isin(dtypes)]
    if ok.empty:
        return ["no successful benchmark rows"]
    out = []
    best = ok.loc[ok.groupby(key(df))["ms"].idxmin()]
    wins = best["impl"].value_counts()
    top = str(wins.index[0])
    peaks = ok[ok["impl"] == top].groupby("pass")["tflops"].max()
    peak_txt = ", ".join(f"{_t(peaks[p])} TFLOP/s {p}" for p in ("forward", "backward") if p in peaks)
    out.append(f"**{top}** is the fastest in {wins.iloc[0]} of {len(best)} configurations"
               + (f" (its highest: {peak_txt})" if peak_txt else "") + ".")
    # the highest throughput of the whole run may belong to another implementation: say whose it is
    highest = []
    for p in ("forward", "backward"):
        g = ok[ok["pass"] == p]
        if len(g) and g["tflops"].notna().any():
            r = g.loc[g["tflops"].idxmax()]
            if str(r["impl"]) != top:
                highest.append(f"{p} {_t(r['tflops'])} TFLOP/s by **{r['impl']}** ({r.get('config', '')})")
    if highest:
        out.append("The highest throughput of the run: " + "; ".join(highest) + ".")
    r = ratio_to(ok, reference)
    r = r[r["impl"] != reference]
    if len(r):
        med = r.groupby("impl")["ratio"].median().sort_values(ascending=False)
        shown = [f"{i} {v:.2f}×" if v >= 0.1 else f"{i} {v:.3f}×" for i, v in med.items()]
        out.append(f"Throughput relative to **{reference}** (median over the configurations both ran): "
                   + ", ".join(shown[:4]) + (f" ... slowest {shown[-1]}" if len(shown) > 4 else "") + ".")
    if impl and targets:
        t = target_table(df, impl, reference, targets)
        if len(t):
            parts = []
            for p, g in t.groupby("pass", sort=False):
                parts.append(f"{p} {int(g['met'].sum())} of {len(g)} (ratio {g['ratio'].min():.0%}–"
                             f"{g['ratio'].max():.0%}, target {g['target'].iloc[0]:.0%})")
            out.append(f"**{impl}** meets its targets against {reference} in " + "; ".join(parts) + ".")
    return out


def accuracy_findings(df: pd.DataFrame) -> list[str]:
    """The correctness page's findings: rows checked and the worst relative error per dtype."""
    ok = ok_rows(df)
    if ok.empty or "rel_l2" not in ok:
        return ["no checked rows"]
    out = [f"{len(ok)} benchmark rows of {ok['impl'].nunique()} implementations were checked against the "
           "reference before they were timed."]
    parts = []
    for dt, g in ok.groupby("dtype", sort=False):
        w = g.loc[g["rel_l2"].idxmax()]
        parts.append(f"{dt} {w['rel_l2']:.1e} ({w['impl']} {w['pass']}, {w['config']})")
    out.append("Worst relative L2 error per dtype: " + "; ".join(parts) + ".")
    return out


def bandwidth_roof(manifest: dict | None) -> tuple[float, str] | None:
    """The memory roof of a benchmark capture: the device-to-device copy the capture measured (bytes
    read + written per second), with its label; None without one."""
    copy = ((manifest or {}).get("ceilings") or {}).get("copy_d2d") if isinstance(manifest, dict) else None
    if isinstance(copy, dict) and isinstance(copy.get("bytes_per_s"), (int, float)) and copy["bytes_per_s"] > 0:
        return float(copy["bytes_per_s"]), "HBM: measured device-to-device copy (read + write)"
    return None


#: how far a measured point may pass a measured roof before the roof is no longer drawn as a limit (the page check,
#: nsightlab.render.checks, holds the limits it draws to the same margin)
ROOF_TOLERANCE = 1.02


def bandwidth_roofs(manifest: dict | None, best: float | None = None) -> list[dict[str, Any]]:
    """The memory roofs of a benchmark capture's bandwidth chart, each with its role: a limit (the DRAM read
    stream the capture measured, the read-only kernel's roof; the GPU's peak where the manifest records one)
    or a reference (the device-to-device copy: its rate counts reads and writes, so a kernel that only reads
    can pass it). ``best``: the highest bytes per second the chart's kernels reached; a measured read stream
    they pass (beyond :data:`ROOF_TOLERANCE`) is no limit of theirs, only a reference (``passed_by``: ``best``), and
    its label says so; one they pass within that margin stays a limit whose label gives by how much."""
    man = manifest if isinstance(manifest, dict) else {}
    ceil = man.get("ceilings") or {}
    out = []
    read = ceil.get("read_stream")
    if isinstance(read, dict) and isinstance(read.get("bytes_per_s"), (int, float)) and read["bytes_per_s"] > 0:
        bw = float(read["bytes_per_s"])
        if best is not None and best > bw * ROOF_TOLERANCE:
            out.append({"value": bw, "role": "reference", "passed_by": best,
                        "label": f"measured DRAM read stream (this capture's kernels reach {best / 1e12:.2f} TB/s: a "
                                 "reference, not a limit)"})
        elif best is not None and best > bw:  # passed within the margin of measurement: a limit, and it says so
            out.append({"value": bw, "role": "limit", "label": f"measured DRAM read stream (a read-only kernel's roof; "
                        f"kernels reach {best / 1e12:.2f} TB/s, {100 * (best / bw - 1):.1f} % above: within the "
                        f"{100 * (ROOF_TOLERANCE - 1):.0f} % margin)"})
        else:
            out.append({"value": bw, "role": "limit", "label": "measured DRAM read stream (a read-only kernel's roof)"})
    peak = (man.get("gpu") or {}).get("memory_bandwidth_bytes_per_s")
    if isinstance(peak, (int, float)) and peak > 0:
        out.append({"value": float(peak), "role": "limit", "label": "HBM peak (the GPU's memory clock × bus width)"})
    copy = bandwidth_roof(manifest)
    if copy is not None:
        out.append({"value": copy[0], "role": "reference",
                    "label": "device-to-device copy (read + write; a reference, not a limit for kernels that read)"})
    return out


def best_bytes_per_s(df: pd.DataFrame, suites: list[str] | None = None) -> float | None:
    """The highest compulsory bytes per second (the CSVs' ``gbps``) of ``df``'s measured rows, in ``suites`` (all
    where None): what the bandwidth charts draw, for :func:`bandwidth_roofs`; None where no row has one."""
    ok = ok_rows(df)
    if "gbps" not in ok or not len(ok):
        return None
    if suites is not None:
        ok = ok[ok["suite"].isin(suites)]
    best = ok["gbps"].max()
    return float(best) * 1e9 if pd.notna(best) and best > 0 else None


#: the share of a suite's configurations that must lie below the ridge for the suite to count as memory-bound
MEMORY_BOUND_SHARE = 0.75


def memory_bound_suites(df: pd.DataFrame, manifest: dict | None, ridge: float | None = None,
                        share: float = MEMORY_BOUND_SHARE) -> list[str]:
    """Suites with at least ``share`` of their configurations below the ridge of this GPU (the measured
    tensor GEMM over the measured copy, or ``ridge``) in arithmetic intensity (model FLOPs per compulsory
    byte, from the CSVs' ``tflops`` and ``gbps``). Their speed is a bandwidth, best read in GB/s against the
    memory roof. A suite that only mixes small shapes (latency-bound, not bandwidth-bound) with large ones
    does not qualify."""
    if ridge is None:
        ceil = (manifest or {}).get("ceilings") or {}
        roof = bandwidth_roof(manifest)
        flops = max((float(v["flop_per_s"]) for k, v in ceil.items()
                     if k.startswith("gemm_") and isinstance(v, dict) and isinstance(v.get("flop_per_s"), (int, float))),
                    default=0.0)
        if roof is None or not flops:
            return []
        ridge = flops / roof[0]
    ok = ok_rows(df)
    if not {"tflops", "gbps"} <= set(ok):
        return []
    ok = ok[(ok["gbps"] > 0) & ok["tflops"].notna()]
    per_config = (ok["tflops"] * 1e3 / ok["gbps"]).groupby([ok["suite"], ok["config"]]).median()
    below = (per_config < ridge).groupby(level=0).mean()
    return [s for s in dict.fromkeys(ok["suite"]) if s in below and below[s] >= share]
