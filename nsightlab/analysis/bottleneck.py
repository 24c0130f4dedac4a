"""Why one kernel is slower than another, from Nsight Compute's own sections.

:func:`load` reads a deep report (``deep.ncu-rep`` of a capture, or anyone's ``--set full`` report)
into a :class:`Deep`; the functions below turn it into tidy frames, every value a metric of the report
(so the page shows exactly what ``ncu --import R --page details|raw`` prints):

- :func:`profile`: one row per launch: time, compute and memory speed-of-light, issue slots, warp
  cycles per issued instruction, occupancy (theoretical, achieved, the limiter), registers, spills,
  shared-memory bank conflicts, L1 / L2 / DRAM throughput, the busiest pipe.
- :func:`stalls`: warp cycles per issued instruction split by stall reason (Nsight's names, each with
  a one-line meaning); :func:`pipes`: pipe utilization; :func:`occupancy_limits`: blocks per SM each
  resource allows.
- :func:`explain`: two launches side by side, and a ranked table of what explains the difference in
  time. The time ratio is split exactly (logarithmic-mean shares, which add up to the whole gap) into
  instructions issued, warp cycles per issued instruction (by stall reason), warps per scheduler
  (latency hiding) and the rest (idle SMs, tail, clock); :func:`verdict` says it in one sentence.
- :func:`hotspots`: the SASS instructions and CUDA source lines with the most warp-stall samples.
- :func:`access_hotspots`: the source lines whose memory instructions took the most L2 sectors (global) or
  shared-memory wavefronts beyond the ideal for their threads' bytes: uncoalesced access, bank conflicts.
- :func:`predicated_hotspots`: the source lines whose instructions were issued with their threads' predicate
  false: issue slots spent on nothing (a test the compiler predicated instead of branching around).

The model behind :func:`explain`: a scheduler issues at most one instruction per cycle, so its active
cycles are about (instructions it issued) x (warp cycles per issued instruction) / (warps it holds).
Nsight's ``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio`` split the middle factor
by reason (they add up to ``smsp__average_warp_latency_per_inst_issued.ratio``).

The metric names are nsightlab.core.metrics'; the source text beside a line number is read (the file, or git at
the capture's commit) by nsightlab.core.sources.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.errors import ProfileError
from ..core.metrics import (
    L2_SECTOR_BYTES,
    OCCUPANCY_LIMITS,
    PIPE_METRIC,
    PROFILE_METRICS,
    STALL_METRIC,
    TBPS_METRIC,
)
from ..core.ranges import RangeSchema
from ..core.sources import repo_path, source_line
from ..core.sources import rev as source_rev
from ..core.text import csv_list
from ..parse import deep as deep_parse

#: Nsight Compute's warp stall reasons: (the name Nsight shows, what the warp was waiting for)
STALLS: dict[str, tuple[str, str]] = {
    "barrier": ("Stall Barrier", "waiting at a block-wide barrier (__syncthreads, bar.sync) for the other warps"),
    "branch_resolving": ("Stall Branch Resolving", "waiting for a branch target to be computed"),
    "dispatch_stall": ("Stall Dispatch", "selected, but the dispatcher could not issue (pipeline conflict)"),
    "drain": ("Stall Drain", "after EXIT, waiting for its memory writes to drain"),
    "gmma": ("Stall GMMA", "waiting on a warpgroup MMA (wgmma): its operands or its result"),
    "imc_miss": ("Stall IMC Miss", "waiting for an immediate-constant cache miss"),
    "lg_throttle": ("Stall LG Throttle", "the local/global memory instruction queue is full"),
    "long_scoreboard": ("Stall Long Scoreboard", "waiting for an L1TEX result: global, local or texture memory"),
    "math_pipe_throttle": ("Stall Math Pipe Throttle", "the math pipe it needs is busy with other warps' work"),
    "membar": ("Stall Membar", "waiting at a memory fence"),
    "mio_throttle": ("Stall MIO Throttle", "the MIO queue (shared memory, special math, ldmatrix) is full"),
    "misc": ("Stall Misc", "other hardware reasons"),
    "no_instruction": ("Stall No Instruction", "no instruction fetched yet: instruction-cache miss or a jump"),
    "not_selected": ("Stall Not Selected", "eligible, but another warp issued this cycle"),
    "selected": ("Selected", "issuing an instruction (one cycle per instruction)"),
    "short_scoreboard": ("Stall Short Scoreboard", "waiting for an MIO result: shared memory, MUFU, ldmatrix"),
    "sleeping": ("Stall Sleeping", "asleep (nanosleep) or waiting on an mbarrier try_wait"),
    "tex_throttle": ("Stall Tex Throttle", "the texture / TMA unit's queue is full"),
    "wait": ("Stall Wait", "a fixed-latency dependency: the compiler's wait count"),
}
#: :func:`profile`'s throughputs in TB/s (10^12 bytes per second) -> the per-second metric each is read from
TBPS_OF = {"dram_tbps": "dram_bytes_per_s", "l2_tbps": "l2_sectors_per_s"}
#: what each :data:`PROFILE_METRICS` column (and :func:`profile`'s derived ones) is, with its unit, for tables
LABELS: dict[str, str] = {
    "time_ns": "duration [ns]", "compute_sol_pct": "compute (SM) throughput [% of peak]",
    "memory_sol_pct": "memory throughput [% of peak]", "issue_slots_busy_pct": "issue slots busy [%]",
    "eligible_pct": "cycles with an eligible warp [%]", "warp_cycles_per_issued": "warp cycles per issued instruction",
    "inst_issued": "instructions issued", "inst_issued_per_scheduler": "instructions issued per scheduler",
    "warps_per_scheduler": "active warps per scheduler", "eligible_warps_per_scheduler": "eligible warps per scheduler",
    "sm_active_cycles": "SM active cycles", "elapsed_cycles": "elapsed cycles",
    "theoretical_occupancy_pct": "theoretical occupancy [%]", "achieved_occupancy_pct": "achieved occupancy [%]",
    "registers_per_thread": "registers per thread", "block_size": "block size [threads]", "grid_size": "grid size [blocks]",
    "waves_per_sm": "waves per SM", "spill_requests": "local-memory spilling requests",
    "shared_ld_bank_conflicts": "shared loads: bank conflicts", "shared_st_bank_conflicts": "shared stores: bank conflicts",
    "shared_ld_wavefronts": "shared loads: wavefronts", "shared_st_wavefronts": "shared stores: wavefronts",
    "global_ld_instructions": "global load instructions (warp-level)",
    "global_ld_bytes_per_sector": "global loads: bytes used per 32-byte sector",
    "global_st_instructions": "global store instructions (warp-level)",
    "global_st_bytes_per_sector": "global stores: bytes used per 32-byte sector",
    "threads_per_inst": "active threads per executed instruction", "pred_on_threads_per_inst":
    "predicated-on threads per executed instruction", "inst_executed": "warp instructions executed",
    "issued_predicated_off": "warp instructions' worth of predicated-off threads",
    "global_sectors": "global accesses: L2 sectors", "global_sectors_excessive": "global accesses: L2 sectors beyond the ideal",
    "shared_wavefronts": "shared accesses: wavefronts",
    "shared_wavefronts_excessive": "shared accesses: wavefronts beyond the ideal",
    "l1_pct": "L1/TEX throughput [% of peak]", "l2_pct": "L2 throughput [% of peak]",
    "dram_pct": "DRAM throughput [% of peak]", "dram_bytes_per_s": "DRAM throughput [bytes/s]",
    "l2_sectors_per_s": "L2 throughput [sectors/s]", "dram_tbps": "DRAM throughput [TB/s]",
    "l2_tbps": "L2 throughput [TB/s]", "tensor_pipe_pct": "tensor pipe busy [% of active cycles]",
    "top_pipe_pct": "busiest pipe, instructions [% of peak]", "occupancy_limiter": "occupancy limited by",
    "top_stall": "largest stall reason",
}
LIMITS = OCCUPANCY_LIMITS
_PIPE = re.compile(PIPE_METRIC)


@dataclass
class Deep:
    """A deep report, parsed: launches, section metrics, metric values, per-instruction samples."""

    path: Path
    launches: pd.DataFrame
    sections: pd.DataFrame
    values: pd.DataFrame
    sass: pd.DataFrame
    access: pd.DataFrame
    issue: pd.DataFrame
    rules: pd.DataFrame
    mix: pd.DataFrame

    def value(self, launch: int, metric: str) -> float | None:
        v = self._wide.get((launch, metric))
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else v

    def __post_init__(self) -> None:
        self._wide = {(int(r.launch), r.metric): r.value for r in self.values.itertuples()}


def load(path: str | Path, schemas: Iterable[RangeSchema] = ()) -> Deep:
    """Parse a deep report; one clear error if it lacks the sections the analysis needs."""
    path = Path(path)
    frames = deep_parse.read(path, schemas)  # one pass over the report, every frame
    deep_parse.require_sections(frames["launches"])
    return Deep(path, frames["launches"], frames["sections"], frames["values"], frames["sass"], frames["access"],
                frames["issue"], frames["rules"], frames["mix"])


# --------------------------------------------------------------------------- one launch at a time

def occupancy_limits(deep: Deep) -> pd.DataFrame:
    """Blocks per SM that each resource allows, per launch: ``launch``, ``limit``, ``blocks``, ``limiting``."""
    rows = []
    for launch in deep.launches["launch"]:
        vals = {name: deep.value(launch, m) for name, m in LIMITS.items()}
        vals = {k: v for k, v in vals.items() if v is not None}
        low = min(vals.values()) if vals else None
        rows += [{"launch": launch, "limit": k, "blocks": v, "limiting": v == low} for k, v in vals.items()]
    return pd.DataFrame(rows, columns=["launch", "limit", "blocks", "limiting"])


def _limiter(limits: pd.DataFrame, launch: int) -> str:
    lim = limits[(limits["launch"] == launch) & limits["limiting"]]
    return " = ".join(lim["limit"]) if len(lim) else ""


def _range_shares(launches: pd.DataFrame) -> pd.Series:
    """Each launch's share of its range's time (a backward pass is several launches)."""
    total = launches.groupby("range")["time_ns"].transform("sum")
    return launches["time_ns"] / total


def profile(deep: Deep) -> pd.DataFrame:
    """One row per launch: range columns, kernel, the :data:`PROFILE_METRICS` columns, ``range_share``
    (of its range's time), ``occupancy_limiter``, ``tensor_pipe_pct`` (the busiest tensor pipe's
    cycles), ``top_pipe`` / ``top_pipe_pct`` and ``top_stall`` / ``top_stall_cycles``."""
    out = deep.launches.drop(columns=["time_ns"]).copy()
    for col, metric in PROFILE_METRICS.items():
        out[col] = [deep.value(launch, metric) for launch in out["launch"]]
    out["range_share"] = _range_shares(out)
    out["dram_tbps"] = out["dram_bytes_per_s"] / 1e12
    out["l2_tbps"] = out["l2_sectors_per_s"] * L2_SECTOR_BYTES / 1e12
    limits = occupancy_limits(deep)
    out["occupancy_limiter"] = [_limiter(limits, launch) for launch in out["launch"]]
    p, s = pipes(deep), stalls(deep)
    out["tensor_pipe_pct"] = [_tensor_busy(p, launch) for launch in out["launch"]]
    top_p = p[p["kind"] == "instructions"].sort_values("pct", ascending=False).drop_duplicates("launch").set_index("launch")
    out["top_pipe"] = out["launch"].map(top_p["pipe"])
    out["top_pipe_pct"] = out["launch"].map(top_p["pct"])
    waits = s[s["reason"] != "selected"].sort_values("cycles", ascending=False).drop_duplicates("launch").set_index("launch")
    out["top_stall"] = out["launch"].map(waits["reason"])
    out["top_stall_cycles"] = out["launch"].map(waits["cycles"])
    # the per-instruction counters summed over each launch (NaN where the report has none)
    for rows, cols in ((deep.access, ACCESS_SUMS), (_predicated_off(deep.issue), ISSUE_SUMS)):
        sums = rows.groupby("launch")[list(cols)].sum() if len(rows) else None
        for col in cols:
            out[col] = out["launch"].map(sums[col]) if sums is not None else float("nan")
    return out


#: :func:`profile`'s sums of the per-instruction execution counts (:func:`nsightlab.parse.deep.issue_counts`) over a
#: launch: warp instructions executed, and how many of them went to threads whose predicate was false
ISSUE_SUMS = ("inst_executed", "issued_predicated_off")


def _predicated_off(issue: pd.DataFrame) -> pd.DataFrame:
    """``issue`` with ``issued_predicated_off``: each instruction's executions times the share of its thread
    instructions that ran predicated off (all of them when no thread's predicate was ever true): the warp
    instructions it was issued for nothing."""
    done = issue["thread_inst_executed"]
    off = (done - issue["thread_inst_executed_true"]).clip(lower=0)
    return issue.assign(issued_predicated_off=(issue["inst_executed"] * off / done.where(done > 0)).fillna(0.0))


#: :func:`profile`'s sums of the per-instruction memory counters (:func:`nsightlab.parse.deep.access_counts`)
#: over a launch: Nsight prints the excessive ones as the launch's ``derived__memory_*_excessive``
ACCESS_SUMS = ("global_sectors", "global_sectors_excessive", "shared_wavefronts", "shared_wavefronts_excessive")


def _tensor_busy(p: pd.DataFrame, launch: int) -> float | None:
    t = p[(p["launch"] == launch) & (p["kind"] == "cycles active") & p["pipe"].str.startswith("tensor")]
    return float(t["pct"].max()) if len(t) else None


def stalls(deep: Deep) -> pd.DataFrame:
    """Warp cycles per issued instruction by stall reason, per launch: ``launch``, ``reason``, ``name``,
    ``meaning``, ``metric``, ``cycles``, ``share`` (of the launch's warp cycles per issued instruction)."""
    rows = []
    for launch in deep.launches["launch"]:
        for reason, (name, meaning) in STALLS.items():
            metric = STALL_METRIC.format(reason)
            v = deep.value(launch, metric)
            if v is not None:
                rows.append({"launch": launch, "reason": reason, "name": name, "meaning": meaning, "metric": metric,
                             "cycles": v})
    df = pd.DataFrame(rows, columns=["launch", "reason", "name", "meaning", "metric", "cycles"])
    df["share"] = df["cycles"] / df.groupby("launch")["cycles"].transform("sum")
    return df


def pipes(deep: Deep) -> pd.DataFrame:
    """Pipe utilization per launch, % of peak over active cycles: ``launch``, ``pipe``, ``kind``
    (``instructions``: issue rate into the pipe; ``cycles active``: cycles the pipe was busy), ``metric``, ``pct``."""
    rows = []
    for r in deep.values.itertuples():
        m = _PIPE.match(r.metric)
        if m:
            kind = "instructions" if m["ip"] else "cycles active"
            rows.append({"launch": r.launch, "pipe": m["ip"] or m["cp"], "kind": kind, "metric": r.metric, "pct": r.value})
    return pd.DataFrame(rows, columns=["launch", "pipe", "kind", "metric", "pct"]).sort_values(
        ["launch", "kind", "pct"], ascending=[True, True, False], ignore_index=True)


def details(deep: Deep, launch: int, sections: Sequence[str] = ()) -> pd.DataFrame:
    """The details page of one launch as Nsight prints it: the header table of each section
    (``sections``: only those), with Nsight's labels and units."""
    s = deep.sections
    s = s[(s["launch"] == launch) & (s["part"] == "header")]
    if sections:
        s = s[s["section"].isin(sections)]
    return s[["section_name", "label", "unit", "value", "metric"]].reset_index(drop=True)


# --------------------------------------------------------------------------- two launches side by side

def _logmean(a: float, b: float) -> float:
    """The logarithmic mean: (a - b) / ln(a / b), and a where a == b."""
    return a if math.isclose(a, b, rel_tol=1e-12) else (a - b) / math.log(a / b)


def _need(deep: Deep, launch: int, col: str) -> float:
    v = deep.value(launch, PROFILE_METRICS[col])
    if v is None or v <= 0:
        raise ProfileError(f"{deep.path}: launch {launch} has no {PROFILE_METRICS[col]} (needed to explain its time)")
    return float(v)


def _terms(a: Deep, la: int, b: Deep, lb: int) -> list[dict[str, Any]]:
    """ln(time_a / time_b) split into additive terms (see the module docstring)."""
    q = {side: {c: _need(d, l, c) for c in ("time_ns", "inst_issued_per_scheduler", "warp_cycles_per_issued",
                                            "warps_per_scheduler")} for side, d, l in (("a", a, la), ("b", b, lb))}
    terms = [{"term": "instructions issued", "what": f"{PROFILE_METRICS['inst_issued_per_scheduler']} (per scheduler)",
              "a": q["a"]["inst_issued_per_scheduler"], "b": q["b"]["inst_issued_per_scheduler"],
              "log": math.log(q["a"]["inst_issued_per_scheduler"] / q["b"]["inst_issued_per_scheduler"])},
             {"term": "warps per scheduler (latency hiding)", "what": PROFILE_METRICS["warps_per_scheduler"],
              "a": q["a"]["warps_per_scheduler"], "b": q["b"]["warps_per_scheduler"],
              "log": -math.log(q["a"]["warps_per_scheduler"] / q["b"]["warps_per_scheduler"])}]
    lat_a, lat_b = q["a"]["warp_cycles_per_issued"], q["b"]["warp_cycles_per_issued"]
    mean = _logmean(lat_a, lat_b)
    for reason, (name, meaning) in STALLS.items():
        ra, rb = a.value(la, STALL_METRIC.format(reason)), b.value(lb, STALL_METRIC.format(reason))
        if ra is None and rb is None:
            continue
        ra, rb = ra or 0.0, rb or 0.0
        terms.append({"term": f"{name}", "reason": reason, "what": f"{meaning} (warp cycles per issued instruction)",
                      "a": ra, "b": rb, "log": (ra - rb) / mean})
    modelled = sum(t["log"] for t in terms)
    total = math.log(q["a"]["time_ns"] / q["b"]["time_ns"])
    terms.append({"term": "the rest: idle SMs, tail, clock", "what": "time not explained by the scheduler model",
                  "a": None, "b": None, "log": total - modelled})
    return terms


def explain(a: Deep, la: int, b: Deep, lb: int) -> pd.DataFrame:
    """What explains launch ``la`` of ``a`` taking longer (or shorter) than launch ``lb`` of ``b``: one row
    per term, ranked by how much of the time gap it accounts for: ``term``, ``what``, ``a``, ``b``,
    ``share`` (of the gap; the shares add up to 1), ``ms`` (of the gap, signed; they add up to
    time_a - time_b). A term with a share of the same sign as the gap widens it; one of the other sign
    narrows it."""
    ta, tb = _need(a, la, "time_ns"), _need(b, lb, "time_ns")
    terms = _terms(a, la, b, lb)
    total = math.log(ta / tb)
    gap_ms = (ta - tb) / 1e6
    df = pd.DataFrame(terms)
    df["share"] = df["log"] / total if total else float("nan")
    df["ms"] = df["share"] * gap_ms if total else 0.0
    df = df.reindex(df["ms"].abs().sort_values(ascending=False).index).reset_index(drop=True)
    df.attrs.update({"time_a_ms": ta / 1e6, "time_b_ms": tb / 1e6, "ratio": ta / tb})
    return df.drop(columns=["log"])[["term", "what", "a", "b", "share", "ms", *(["reason"] if "reason" in df else [])]]


def metric_gaps(a: Deep, la: int, b: Deep, lb: int) -> pd.DataFrame:
    """The profile quantities of the two launches beside each other: ``quantity``, ``metric``, ``a``,
    ``b``, ``ratio`` (a / b)."""
    pa = profile(a).set_index("launch").loc[la]
    pb = profile(b).set_index("launch").loc[lb]
    rows = []
    shown = [c for c in PROFILE_METRICS if c not in TBPS_OF.values()]
    at = shown.index("dram_pct") + 1  # each throughput in TB/s beside its % of peak
    for col in [*shown[:at], *TBPS_OF, *shown[at:], *ACCESS_SUMS, "tensor_pipe_pct", "top_pipe_pct", "occupancy_limiter",
                "top_stall"]:
        va, vb = pa.get(col), pb.get(col)
        ratio = va / vb if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and vb else None
        metric = PROFILE_METRICS.get(col) or ACCESS_SOURCE.get(col) or TBPS_METRIC.get(col, "")
        rows.append({"quantity": col, "metric": metric, "a": va, "b": vb, "ratio": ratio})
    return pd.DataFrame(rows)


def _pct(x: float) -> str:
    return f"{x:.0%}"


CLOSE = 0.05  # verdict: a gap within 5% is told in milliseconds per term, not as shares of it


def verdict(name_a: str, name_b: str, ranked: pd.DataFrame, gaps: pd.DataFrame | None = None) -> str:
    """One computed sentence: the time ratio, the terms that explain most of it, and the tensor pipe."""
    ratio = ranked.attrs["ratio"]
    slower = ratio > 1
    lead = (f"{name_a} takes {ratio:.2f}x the time of {name_b} ({ranked.attrs['time_a_ms']:.3f} vs "
            f"{ranked.attrs['time_b_ms']:.3f} ms)")
    widening = ranked[ranked["share"] > 0].head(2)
    # where terms that add time and terms that save it cancel (a gap within CLOSE, or a term larger than the
    # whole gap), a share of the gap reads as "519%": each widening term is given as the time it adds instead
    close = abs(math.log(ratio)) < math.log(1 + CLOSE) or bool((widening["share"] > 1).any())
    parts = []
    for t in widening.itertuples():
        how = (f"+{t.ms:.3f} ms" if t.ms >= 0.01 else f"+{t.ms * 1e3:.3g} us") if close else f"{_pct(t.share)} of the gap"
        if t.a is None or (isinstance(t.a, float) and math.isnan(t.a)):
            parts.append(f"{t.term} ({how})")
        elif t.term == "instructions issued":
            parts.append(f"it issues {t.a / t.b:.2f}x the instructions ({how})")
        elif t.term.startswith("warps per scheduler"):
            parts.append(f"it keeps {t.a:.2f} warps per scheduler vs {t.b:.2f} ({how})")
        else:
            parts.append(f"its warps spend {t.a:.2f} cycles per instruction on {t.term} vs {t.b:.2f} ({how})")
    if parts and slower and close:
        if (ranked["share"] < 0).any():
            lead += ": terms that add time and terms that save it partly cancel"
        lead += "; the two that add the most" if len(parts) > 1 else "; the one that adds the most"
    text = lead + (": " + "; ".join(parts) if parts and slower else "") + "."
    if gaps is not None:
        tp = gaps.set_index("quantity").loc["tensor_pipe_pct"]
        if tp["a"] is not None and tp["b"] is not None and not (pd.isna(tp["a"]) or pd.isna(tp["b"])):
            text += f" Its tensor pipe is busy {tp['a']:.0f}% of active cycles vs {tp['b']:.0f}%."
    return text


# --------------------------------------------------------------------------- source hotspots

def _top_reasons(row: pd.Series, reasons: list[str], n: int = 2) -> str:
    vals = sorted(((row[f"stall_{r}"], r) for r in reasons if row.get(f"stall_{r}", 0) > 0), reverse=True)[:n]
    total = row["samples"] or 1
    return ", ".join(f"{r} {v / total:.0%}" for v, r in vals)


def hotspots(deep: Deep, launch: int, n: int = 10, by: str = "line", repo: str | Path = ".",
             commit: str | None = None) -> pd.DataFrame:
    """The ``n`` SASS instructions (``by="sass"``) or CUDA source lines (``by="line"``) of one launch with
    the most warp-state samples: ``samples``, ``share`` (of the launch's samples), ``top_stalls``,
    ``file`` (as in the repository where found, else as the report names it), ``line``, ``source``
    (the line's text from the repository) and, by SASS, ``address`` and ``sass``. With ``commit`` (the
    capture's, from its manifest) a line's text is read from the file as it was at that commit (git), so
    that later edits that move lines do not put the wrong text beside a line number; ``attrs["source_from"]``
    says where the text came from. Raises one clear line when the report carries no per-instruction
    samples (no SourceCounters section)."""
    s = deep.sass[deep.sass["launch"] == launch] if len(deep.sass) else deep.sass
    if not len(s):
        raise ProfileError(f"{deep.path}: launch {launch} carries no warp-state samples per instruction; capture "
                           "with --section SourceCounters (the deep tier does; so does ncu --set full)")
    reasons = [c.removeprefix("stall_") for c in s.columns if c.startswith("stall_")]
    if by == "line":
        s = s.groupby(["file", "line"], dropna=False, as_index=False)[["samples", *[f"stall_{r}" for r in reasons]]].sum()
    elif by != "sass":
        raise ValueError(f"by must be 'line' or 'sass', not {by!r}")
    total = float(deep.sass.loc[deep.sass["launch"] == launch, "samples"].sum()) or 1.0
    top = s.sort_values("samples", ascending=False).head(n).copy()
    top["share"] = top["samples"] / total
    top["top_stalls"] = [_top_reasons(r, reasons) for _, r in top.iterrows()]
    return _with_source(top, Path(repo), by, commit)


#: where :data:`ACCESS_SUMS` come from, for tables: the per-instruction metric summed over the launch
ACCESS_SOURCE = {col: f"{deep_parse.ACCESS_METRICS[col]} (sum over instructions)" for col in ACCESS_SUMS}


def _opcode(sass: str) -> str:
    words = [w for w in str(sass).split() if not w.startswith("@")]
    return words[0] if words else ""


def access_hotspots(deep: Deep, launch: int, n: int = 5, repo: str | Path = ".", commit: str | None = None) -> pd.DataFrame:
    """The ``n`` CUDA source lines of one launch whose memory instructions took the most L2 sectors (global
    accesses) and shared-memory wavefronts beyond the ideal for the bytes their threads asked for (Nsight's
    "Excessive" source counters: uncoalesced or partial-sector global access, shared-memory bank conflicts):
    ``file``, ``line``, ``source`` (as :func:`hotspots` gives them), the :data:`ACCESS_SUMS` over the line's
    instructions, ``share`` (of the launch's excess, sectors and wavefronts counted alike) and ``sass`` (the
    line's instructions with excess, by opcode). Empty where the launch has no excess or no source counters."""
    a = deep.access
    if len(a):
        a = a[(a["launch"] == launch) & ((a["global_sectors_excessive"] > 0) | (a["shared_wavefronts_excessive"] > 0))]
    cols = ["file", "line", "source", *ACCESS_SUMS, "share", "sass"]
    if not len(a):
        return pd.DataFrame(columns=cols)
    a = a.assign(excess=a["global_sectors_excessive"] + a["shared_wavefronts_excessive"], op=a["sass"].map(_opcode))
    g = a.groupby(["file", "line"], dropna=False, as_index=False).agg(
        **{c: (c, "sum") for c in [*ACCESS_SUMS, "excess"]},
        sass=("op", lambda ops: ", ".join(f"{op} x{k}" if k > 1 else op for op, k in ops.value_counts().sort_index().items())))
    top = g.sort_values(["excess", "file", "line"], ascending=[False, True, True]).head(n).copy()
    top["share"] = top["excess"] / a["excess"].sum()
    return _with_source(top, Path(repo), "line", commit, cols=[c for c in cols if c != "source"])


def _opcodes(ops: pd.Series, most: int = 5) -> str:
    """``FSEL x32, ISETP.GE.AND x32, ...``: the opcodes of a line's instructions, the most frequent first."""
    counts = sorted(ops.value_counts().items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{op} x{k}" if k > 1 else op for op, k in counts[:most])
    rest = len(counts) - most
    return text + (f" and {rest} other opcode{'s' if rest > 1 else ''}" if rest > 0 else "")


def predicated_hotspots(deep: Deep, launch: int, n: int = 5, repo: str | Path = ".",
                        commit: str | None = None) -> pd.DataFrame:
    """The ``n`` CUDA source lines of one launch whose instructions were issued most often with their threads'
    predicate false (Nsight's source counters "Instructions Executed", "Thread Instructions Executed" and
    "Predicated-On Thread Instructions Executed"): ``file``, ``line``, ``source`` (as :func:`hotspots` gives them),
    ``inst_executed`` (the line's warp instructions), ``issued_predicated_off`` (of them, the warp instructions'
    worth of threads that ran predicated off), ``off_share`` (that over the line's), ``share`` (over the launch's
    instructions executed) and ``sass`` (the line's predicated instructions, by opcode). A line the compiler
    if-converted (a test per element inside a loop, predicated instead of branched around) shows here with its
    whole cost on every pass, taken or not. Empty where the launch has no source counters or none predicated off."""
    i = deep.issue
    cols = ["file", "line", "source", *ISSUE_SUMS, "off_share", "share", "sass"]
    if not len(i):
        return pd.DataFrame(columns=cols)
    i = _predicated_off(i[i["launch"] == launch])
    total = float(i["inst_executed"].sum()) or 1.0
    off = i[i["issued_predicated_off"] > 0]
    if not len(off):
        return pd.DataFrame(columns=cols)
    lines = i.groupby(["file", "line"], dropna=False, as_index=False)[list(ISSUE_SUMS)].sum()
    ops = off.assign(op=off["sass"].map(_opcode)).groupby(["file", "line"], dropna=False)["op"].agg(_opcodes)
    lines = lines[lines["issued_predicated_off"] > 0].merge(ops.rename("sass").reset_index(), on=["file", "line"], how="left")
    top = lines.sort_values(["issued_predicated_off", "file", "line"], ascending=[False, True, True]).head(n).copy()
    top["off_share"] = top["issued_predicated_off"] / top["inst_executed"]
    top["share"] = top["issued_predicated_off"] / total
    return _with_source(top, Path(repo), "line", commit, cols=[c for c in cols if c != "source"])


def _with_source(top: pd.DataFrame, repo: Path, by: str, commit: str | None = None,
                 cols: Sequence[str] = ("file", "line", "samples", "share", "top_stalls")) -> pd.DataFrame:
    files = [repo_path(f, repo) for f in top["file"]]
    rev = source_rev(commit)
    texts, used = [], set()
    for f, ln in zip(files, top["line"], strict=True):
        if not f or pd.isna(ln):
            texts.append("")
            continue
        text, origin = source_line(repo, f, ln, commit)  # the source text, read (git or the file) by nsightlab.core
        used.add(origin)
        texts.append(text)
    top["source"] = texts
    top["file"] = [f or (str(orig) if isinstance(orig, str) else "(no source line)") for f, orig in zip(files, top["file"], strict=True)]
    cols = [*cols[:2], "source", *cols[2:]]
    if by == "sass":
        cols = ["address", "sass", *cols]
    out = top[cols].reset_index(drop=True)
    out["line"] = out["line"].astype("Int64")
    dirty = " (captured from a tree with uncommitted changes: lines may differ)" if rev and commit != rev else ""
    out.attrs["source_from"] = " and ".join(f"{u}{dirty}" if u == f"commit {rev}" else u for u in sorted(used))
    return out


# --------------------------------------------------------------------------- choosing what to compare

_TRUTH = {"true": "1", "false": "0", "yes": "1", "no": "0"}


def parse_case(text: str) -> dict[str, str]:
    """``"N=4096,D=128,causal=False,pass=forward"`` -> {field: value}; one clear error if malformed."""
    out = {}
    for part in csv_list(text or ""):
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--case takes field=value pairs separated by commas (e.g. N=4096,D=128,pass=forward), not {text!r}")
        out[key.strip()] = value.strip()
    return out


def _norm(v: Any) -> str:
    s = str(v).strip().lower()
    if s.endswith(".0") and s[:-2].lstrip("-").isdigit():
        s = s[:-2]
    return _TRUTH.get(s, s)


def _matching(deep: Deep, variant: str, case: dict[str, str]) -> pd.DataFrame:
    """The launches of ``variant`` whose decoded fields match ``case`` (errors name the fields and
    implementations that exist). A field none of the implementation's ranges has (another implementation's
    option, such as flash_wgmma's ``pipeline`` for cuDNN) does not constrain it."""
    L = deep.launches
    unknown = [k for k in case if k not in L.columns]
    if unknown:
        fields = [c for c in L.columns if c not in ("range", "domain", "launch", "kernel", "kernel_full", "time_ns", "sections", "schema")]
        raise ValueError(f"--case field(s) {', '.join(unknown)} not in this report's range names; fields: {', '.join(fields)}")
    if variant not in set(L["variant"].dropna()):
        raise ValueError(f"no implementation {variant!r} in {deep.path.name}; it holds: {', '.join(sorted(set(L['variant'].dropna())))}")
    sel = L[L["variant"] == variant]
    for k, v in case.items():
        if sel[k].notna().any():
            sel = sel[sel[k].map(_norm) == _norm(v)]
    return sel


def select_range(deep: Deep, variant: str, case: dict[str, str]) -> pd.DataFrame:
    """The launches of the one range of ``variant`` whose decoded fields match ``case``, longest first.
    Errors name what exists when nothing or several ranges match."""
    L = deep.launches
    sel = _matching(deep, variant, case)
    ranges = sorted(set(sel["range"]))
    if len(ranges) != 1:
        # several matches: those are what to narrow down to; none: every range of the implementation
        have = ranges or sorted(set(L.loc[L["variant"] == variant, "range"]))
        what = "no range matches" if not ranges else f"{len(ranges)} ranges match"
        raise ValueError(f"{variant}: {what} --case {','.join(f'{k}={v}' for k, v in case.items()) or '(none)'}; narrow it "
                         f"to one of: " + "; ".join(have[:12]) + (" ..." if len(have) > 12 else ""))
    return sel.sort_values("time_ns", ascending=False)


def launch_table(deep: Deep, launches: pd.DataFrame) -> pd.DataFrame:
    """The launches of one range with their time and share of the range's time (a backward is several)."""
    t = launches[["launch", "kernel", "time_ns"]].copy()
    t["share"] = t["time_ns"] / t["time_ns"].sum()
    return t.reset_index(drop=True)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def pick_launch(sel: pd.DataFrame, kernel: str = "") -> int:
    """The launch of a range (``sel``: its launches, longest first) that a comparison takes: the longest, or with
    ``kernel`` (a regular expression, searched in the kernel's name and its full signature) the longest of those
    it matches. ValueError names the range's kernels where none matches."""
    if not kernel:
        return int(sel["launch"].iloc[0])
    try:
        pattern = re.compile(kernel)
    except re.error as exc:
        raise ValueError(f"kernel={kernel!r} is not a regular expression ({exc})") from None
    full = sel["kernel_full"] if "kernel_full" in sel else sel["kernel"]
    hit = [bool(pattern.search(str(k)) or pattern.search(str(f))) for k, f in zip(sel["kernel"], full, strict=True)]
    if not any(hit):
        raise ValueError(f"kernel={kernel!r} matches no kernel of {sel['range'].iloc[0]}; its kernels: "
                         + ", ".join(dict.fromkeys(sel["kernel"].astype(str))))
    return int(sel.loc[hit, "launch"].iloc[0])


def compares_longest(sels: Sequence[pd.DataFrame], compared: Sequence[int] | None = None) -> bool:
    """Whether a comparison is of the longest launch of each side: ``sels``, each side's launches longest first
    (:func:`pick_launch`), and ``compared``, the launch id of each that it takes (default the longest of each).
    False where any side compares another launch (a kernel pattern that picked one other than the longest)."""
    return compared is None or all(k == pick_launch(sel) for sel, k in zip(sels, compared, strict=True))


def call_line(name_a: str, sel_a: pd.DataFrame, name_b: str, sel_b: pd.DataFrame,
              compared: tuple[int, int] | None = None) -> str | None:
    """Where either side's range launches more than one kernel, the sentence that comes first: the whole calls'
    times (every launch of each range) and what the launches other than the compared ones take, since the rest
    of the comparison is of one launch of each (``compared``: their launch ids; default the longest of each) and
    can point the other way. None where both launch one."""
    if len(sel_a) < 2 and len(sel_b) < 2:
        return None
    ta, tb = float(sel_a["time_ns"].sum()), float(sel_b["time_ns"].sum())
    rest, kernels = [], []
    sides = [sel.sort_values("time_ns", ascending=False) for sel in (sel_a, sel_b)]
    longest = compares_longest(sides, compared)
    for i, (name, ordered) in enumerate(zip((name_a, name_b), sides, strict=True)):
        mine = ordered.index[0] if compared is None else ordered.index[ordered["launch"] == compared[i]][0]
        kernels.append(ordered.loc[mine, "kernel"])
        others = ordered.drop(index=mine)
        if len(others):
            rest.append(f"the other launches of {name} take {_ms(others['time_ns'].sum())} ("
                        + ", ".join(f"{k} {_ms(t)}" for k, t in zip(others["kernel"], others["time_ns"], strict=True))
                        + ")")
    ka, kb = kernels
    which = ("the longest launch of each" if longest else
             f"the {ka} launch of each" if ka == kb else f"{ka} with {kb}")
    return (f"The whole call: {name_a} takes {ta / tb:.2f}x the time of {name_b} ({_ms(ta)} vs {_ms(tb)}, "
            f"{len(sel_a)} and {len(sel_b)} launches); " + "; ".join(rest)
            + f". What follows compares {which}.")


# --------------------------------------------------------------------------- the bottleneck page

#: the Nsight Compute section without which nothing on the bottleneck page can be said
WARP_STATE = "WarpStateStats"
WARP_STATE_METRIC = PROFILE_METRICS["warp_cycles_per_issued"]
_META = ("range", "domain", "launch", "kernel", "kernel_full", "time_ns", "sections", "schema", "variant", "options")


def lacks_warp_state(manifest: dict) -> str | None:
    """None when a capture's manifest says its Nsight Compute report carries the WarpStateStats section
    (the deep tier's ``deep.sections``, an imported ``--set full``/``detailed`` report, or a metric list
    with the warp-state metrics), else the reason, with the flags that would collect it."""
    if WARP_STATE in ((manifest.get("deep") or {}).get("sections") or []):
        return None
    ncu = manifest.get("ncu") or {}
    if ncu.get("set") in ("full", "detailed") or WARP_STATE_METRIC in (ncu.get("metrics") or []):
        return None
    return (f"no Nsight Compute report with the {WARP_STATE} section (capture with nsightlab capture ... --deep REGEX, "
            "or import an ncu --set full report)")


def case_fields(deep: Deep) -> list[str]:
    """The decoded fields every range of the report has (an implementation's own options excluded)."""
    L = deep.launches
    return [c for c in L.columns if c not in _META and L[c].notna().all()]


def _shown(v: Any) -> str:
    return str(int(v)) if pd.api.types.is_bool(v) else str(v)  # causal=0, as range names write it


def complete_case(deep: Deep, variant: str, case: dict[str, str], strict: bool = False) -> dict[str, str]:
    """``case`` completed with the fields every range has, from the first range of ``variant`` (in the
    report's order) that matches it: the page compares implementations at one case, so a partial or
    empty ``case`` picks the first such one. Where several ranges of ``variant`` still match (one
    implementation captured with several settings of its options), its own option fields are those of the
    fastest of them (the setting worth explaining against another implementation); they do not constrain
    the other implementation (:func:`_matching`). ``strict``: where the ranges ``case`` matches differ in a field
    every range has (``causal=0`` matching a forward and a backward range), ValueError names the field and its
    values instead of taking the first. Errors as :func:`select_range`'s."""
    sel = _matching(deep, variant, case)
    if sel.empty:
        select_range(deep, variant, case)  # raises, naming the ranges of the implementation
    if strict:
        open_fields = {k: sorted(map(_shown, sel[k].dropna().unique()), key=str) for k in case_fields(deep) if k not in case}
        differ = {k: v for k, v in open_fields.items() if len(v) > 1}
        if differ:
            given = ",".join(f"{k}={v}" for k, v in case.items()) or "(none)"
            raise ValueError(f"--case {given} matches {sel['range'].nunique()} ranges of {variant} that differ in "
                             + "; ".join(f"{k} ({', '.join(v)})" for k, v in differ.items())
                             + f": add {' and '.join(f'{k}=...' for k in differ)} to --case")
    first = sel.iloc[0]
    out = {**{k: _shown(first[k]) for k in case_fields(deep)}, **case}
    sel = _matching(deep, variant, out)
    if sel["range"].nunique() > 1:
        fastest = sel.groupby("range", sort=False)["time_ns"].sum().idxmin()
        row = sel[sel["range"] == fastest].iloc[0]
        own = [c for c in sel.columns if c not in _META and c not in out and sel[c].notna().all()]
        out.update({k: _shown(row[k]) for k in own})
    return out


def at_case(deep: Deep, case: dict[str, str]) -> pd.DataFrame:
    """Every implementation at ``case``: one row per implementation, its range's time
    (``range_ms``, all its launches), its number of launches and the :func:`profile` row of its
    longest launch. Implementations without a range at the case are left out."""
    prof = profile(deep).set_index("launch")
    rows = []
    for variant in dict.fromkeys(deep.launches["variant"].dropna()):
        try:
            sel = select_range(deep, variant, case)
        except ValueError:
            continue
        rows.append(range_row(prof, variant, sel))
    return pd.DataFrame(rows)


def range_row(prof: pd.DataFrame, variant: str, sel: pd.DataFrame) -> dict[str, Any]:
    """One row of :func:`at_case`: a range's launches (``sel``, longest first, :func:`select_range`) as its time
    (``range_ms``, all its launches), its number of launches and the :func:`profile` row (``prof``, indexed by
    launch) of its longest launch, named ``variant``."""
    top = prof.loc[int(sel["launch"].iloc[0])]
    return {"variant": variant, "range_ms": sel["time_ns"].sum() / 1e6, "launches": len(sel),
            "launch": int(sel["launch"].iloc[0]), **top.drop("variant", errors="ignore").to_dict()}


def kernel_line(name: str, row: pd.Series) -> str:
    """One sentence on one launch (a :func:`profile` row): its largest stall reason, its tensor pipe and
    its occupancy with the limiter."""
    tensor = row.get("tensor_pipe_pct")
    stall = STALLS.get(str(row.get("top_stall")), (str(row.get("top_stall")), ""))[0]
    return (f"{name} ({row['kernel']}): largest stall *{stall}* ({row['top_stall_cycles']:.2f} of "
            f"{row['warp_cycles_per_issued']:.2f} warp cycles per issued instruction)"
            + ("" if tensor is None or pd.isna(tensor) else f", tensor pipe busy {tensor:.0f}% of active cycles")
            + f", occupancy {row['achieved_occupancy_pct']:.0f}% of {row['theoretical_occupancy_pct']:.0f}% "
            f"possible (limited by {row['occupancy_limiter'] or 'nothing reported'})")


def access_line(name: str, row: pd.Series, hot: pd.DataFrame | None = None) -> str | None:
    """One sentence on one launch's memory accesses beyond the ideal (a :func:`profile` row; ``hot``: its
    :func:`access_hotspots`), or None where it has none (or no per-instruction memory counters): the bytes its
    global loads and stores use of each 32-byte sector, the L2 sectors and shared-memory wavefronts beyond what
    its threads' bytes need (uncoalesced or partial-sector access, bank conflicts), and the line with the most."""
    ex_g, ex_s = row.get("global_sectors_excessive"), row.get("shared_wavefronts_excessive")
    if ex_g is None or pd.isna(ex_g) or not (ex_g or ex_s):
        return None
    use = [f"{what} use {row[f'global_{op}_bytes_per_sector']:.1f} of each 32-byte sector's bytes"
           for op, what in (("st", "global stores"), ("ld", "global loads"))
           if row.get(f"global_{op}_instructions") and row.get(f"global_{op}_bytes_per_sector", 32) < 31.95]
    beyond = [f"{v:,.0f} {unit} beyond the ideal ({v / total:.0%} of its {what})"
              for v, total, unit, what in ((ex_g, row["global_sectors"], "L2 sectors", "global sectors"),
                                           (ex_s, row["shared_wavefronts"], "shared-memory wavefronts", "shared wavefronts"))
              if v and total]
    text = f"{name} ({row['kernel']}): " + "; ".join([*use, *beyond])
    if hot is not None and len(hot):
        h = hot.iloc[0]
        where = f"{h['file']}:{h['line']}" if pd.notna(h["line"]) else "an instruction without a source line"
        text += f"; the most ({h['share']:.0%}) at {where} ({h['sass']})"
    return text + "."


def predicated_share(row: pd.Series) -> float | None:
    """The share of a launch's executed warp instructions that went to predicated-off threads (a :func:`profile`
    row), or None where the report has no per-instruction source counters for it."""
    done, off = row.get("inst_executed"), row.get("issued_predicated_off")
    return None if done is None or pd.isna(done) or not done else float(off / done)


#: the share of a launch's instructions predicated off below which :func:`predicated_line` says nothing
PREDICATED_AT_LEAST = 0.02


def predicated_line(name: str, row: pd.Series, hot: pd.DataFrame | None = None,
                    at_least: float = PREDICATED_AT_LEAST) -> str | None:
    """One sentence on one launch's instructions issued with their threads predicated off (a :func:`profile` row;
    ``hot``: its :func:`predicated_hotspots`), or None where they are under ``at_least`` of its instructions (or
    it has no source counters): Nsight's predicated-on and active threads per executed instruction, the share
    of its issued instructions that did nothing, and the line with the most."""
    share = predicated_share(row)
    if share is None or share < at_least:
        return None
    text = (f"{name} ({row['kernel']}): {share:.1%} of its executed warp instructions went to threads whose "
            f"predicate was false ({row['pred_on_threads_per_inst']:.1f} predicated-on threads per executed "
            f"instruction of {row['threads_per_inst']:.1f} active, Nsight's averages)")
    if hot is not None and len(hot):
        h = hot.iloc[0]
        where = f"{h['file']}:{h['line']}" if pd.notna(h["line"]) else "an instruction without a source line"
        text += (f"; the most at {where}: {h['share']:.1%} of the kernel's instructions, {h['off_share']:.0%} of the "
                 f"line's predicated off ({h['sass']})")
    return text + "."


def page_hint(manifest: dict) -> str:
    """A line for other pages' hovers pointing at the capture's bottleneck page ("" where it has none)."""
    return "" if lacks_warp_state(manifest) else "why it runs at this speed: why.html (this capture)"
