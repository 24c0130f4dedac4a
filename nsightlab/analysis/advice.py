"""From accounting to action: what to change, read from Nsight Compute's own counters and rules.

:func:`nsightlab.analysis.bottleneck.explain` splits the time gap between two launches exactly into terms.
This module turns that account into what a kernel engineer acts on:

- :func:`rules` / :func:`rules_side_by_side`: every rule result Nsight Compute recorded for each launch (the
  guidance its details page leads with), with its estimated speedup, the two launches side by side and ranked.
- :func:`instruction_mix`: executed warp instructions per opcode (or opcode category) of the two launches and
  the difference that accounts for the instructions term; :func:`mix_sentence` says it in one sentence, by what
  the extra instructions do (:data:`OPCODE_KIND`).
- :func:`stall_lines`: the source lines (or SASS instructions) that carry the most warp-state samples of one
  stall reason: where a stall term of the ranking happens in the code.
- :func:`grouped`: the ranking with the terms that cancel gathered: the scheduler's issue interval (warps per
  scheduler and every stall reason) as one net term with its parts, warps per scheduler netted with the Not
  Selected and Selected stalls that more warps bring. :func:`waterfall` gives its leaves as steps from one
  launch's time to the other's.
- :func:`what_to_try`: computed sentences, each citing the metric or rule it reads and the lines it points at.

Everything is a value of the report (no model, no tolerance); the tests hold the rules, the mix and the per-line
samples against Nsight Compute's own CSV exports of the same reports.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..core.sources import repo_path
from . import bottleneck as B

# --------------------------------------------------------------------------- Nsight's rules


def rules(deep: B.Deep, launch: int) -> pd.DataFrame:
    """The rule results of one launch (:func:`nsightlab.parse.deep.rule_results`' columns less ``launch``), those
    with an estimated speedup first, largest first, then the others in the report's order."""
    r = deep.rules[deep.rules["launch"] == launch].drop(columns=["launch"])
    order = r.assign(_has=r["speedup"].notna(), _pos=range(len(r)))
    return (order.sort_values(["_has", "speedup", "_pos"], ascending=[False, False, True])
            .drop(columns=["_has", "_pos"]).reset_index(drop=True))


def _keyed(r: pd.DataFrame) -> pd.DataFrame:
    """Rule results keyed by (section, rule, title, k): the k-th result of that rule with that title (a rule
    such as CPIStall reports several)."""
    r = r.copy()
    r["k"] = r.groupby(["section", "rule", "title"]).cumcount()
    return r.set_index(["section", "rule", "title", "k"])


def rules_side_by_side(a: B.Deep, la: int, b: B.Deep, lb: int) -> pd.DataFrame:
    """Every rule result of either launch, one row per rule (and title): ``section``, ``rule``, ``name``,
    ``title``, and for each side ``type_a``, ``speedup_a``, ``speedup_type_a``, ``message_a`` (empty or NaN
    where that side has no such result) and ``_b``; ranked by the larger estimated speedup of the two
    (results without one last, optimisation advice before information)."""
    ka, kb = _keyed(rules(a, la)), _keyed(rules(b, lb))
    cols = ["type", "speedup", "speedup_type", "message"]
    both = ka[["name", *cols]].add_suffix("_a").join(kb[["name", *cols]].add_suffix("_b"), how="outer")
    both["name"] = both["name_a"].fillna(both["name_b"])
    both = both.drop(columns=["name_a", "name_b"]).reset_index()
    top = both[["speedup_a", "speedup_b"]].max(axis=1)
    opt = (both["type_a"] == "OPT") | (both["type_b"] == "OPT")
    both = both.assign(_top=top.fillna(-1.0), _opt=opt).sort_values(["_top", "_opt", "section", "rule", "k"],
                                                                      ascending=[False, False, True, True, True])
    return both.drop(columns=["_top", "_opt", "k"]).reset_index(drop=True)[
        ["section", "rule", "name", "title", *(f"{c}_{s}" for s in "ab" for c in cols)]]


def rule_line(name: str, r: pd.Series) -> str:
    """One sentence on one rule result (a :func:`rules` row): which rule, its estimate and its message's first
    sentence."""
    est = (f" estimates a {r['speedup_type']} speedup of up to {r['speedup']:.1f}%" if pd.notna(r["speedup"]) else "")
    title = f" ({r['title']})" if r["title"] else ""
    first = str(r["message"]).split(". ")[0].rstrip(".")
    return f"Nsight Compute's {r['name']} rule{title}{est} for {name}: {first}."


# --------------------------------------------------------------------------- the instruction mix

#: what a SASS opcode does, in the words a kernel engineer looks for (the base opcode, its modifiers dropped)
OPCODE_KIND: dict[str, str] = {
    **dict.fromkeys(("IMAD", "IADD3", "IADD", "LEA", "SHF", "LOP3", "IABS", "VIADD", "VIMNMX", "IMNMX", "SGXT", "BMSK",
                     "POPC", "FLO", "PRMT", "UIADD3", "UIMAD", "ULEA", "USHF", "ULOP3", "USEL"),
                    "integer arithmetic: addresses, indices, loop counters"),
    **dict.fromkeys(("ISETP", "FSETP", "PLOP3", "FSEL", "SEL", "P2R", "R2P", "UISETP", "VOTE", "VOTEU"),
                    "compares, selects and predicates: masks, bounds tests"),
    **dict.fromkeys(("FFMA", "FMUL", "FADD", "FMNMX", "FCHK", "FSWZADD"), "FP32 arithmetic"),
    **dict.fromkeys(("HFMA2", "HMUL2", "HADD2", "HMNMX2"), "packed FP16 arithmetic"),
    "MUFU": "special functions: exp2, reciprocal",
    **dict.fromkeys(("HMMA", "HGMMA", "IMMA", "QGMMA", "GMMA"), "tensor-core matrix multiply-accumulate"),
    **dict.fromkeys(("LDS", "LDSM", "STS", "STSM", "ATOMS"), "shared-memory access"),
    **dict.fromkeys(("LDG", "STG", "LDGSTS", "RED", "REDG", "ATOMG", "ATOM", "LD", "ST"), "global-memory access"),
    "REDUX": "warp-wide reductions",
    **dict.fromkeys(("LDL", "STL"), "local-memory access: spills"),
    **dict.fromkeys(("UTMALDG", "UTMASTG", "UTMAREDG", "UBLKCP", "UTMACCTL", "UTMAPF"), "TMA bulk copies"),
    **dict.fromkeys(("F2FP", "F2F", "I2F", "F2I", "I2FP", "F2IP"), "conversions"),
    **dict.fromkeys(("MOV", "UMOV", "SHFL", "S2R", "S2UR", "CS2R", "R2UR", "LDC", "ULDC", "IMAD.MOV"),
                    "moves, shuffles and special registers"),
    **dict.fromkeys(("BAR", "BSYNC", "BSSY", "WARPSYNC", "DEPBAR", "LDGDEPBAR", "SYNCS", "MEMBAR", "ERRBAR", "WARPGROUP",
                     "ARRIVES"), "barriers and dependency waits"),
    **dict.fromkeys(("BRA", "EXIT", "RET", "CALL", "BRX", "JMP", "NOP", "YIELD", "NANOSLEEP"), "control flow"),
}


def instruction_mix(a: B.Deep, la: int, b: B.Deep, lb: int, level: str = "opcode") -> pd.DataFrame:
    """Executed warp instructions of the two launches per ``level`` (``opcode`` or ``category``, from the
    InstructionStats section's ``sass__inst_executed_per_opcode[_category]``): ``name``, ``kind`` (what the
    opcode does, :data:`OPCODE_KIND`), ``a``, ``b``, ``diff`` (a - b), ``of_b`` (diff over b's total: the
    opcode's part of ``ratio - 1``), ``share`` (of the whole difference). Ranked by the size of the difference.
    ``attrs``: ``total_a``, ``total_b``, ``ratio``. Empty where either launch has no such metric."""
    def counts(deep: B.Deep, launch: int) -> pd.Series:
        m = deep.mix
        m = m[(m["launch"] == launch) & (m["level"] == level)] if len(m) else m
        return m.set_index("name")["inst_executed"] if len(m) else pd.Series(dtype=float)
    ca, cb = counts(a, la), counts(b, lb)
    cols = ["name", "kind", "a", "b", "diff", "of_b", "share"]
    if ca.empty or cb.empty:
        return pd.DataFrame(columns=cols)
    df = pd.concat([ca.rename("a"), cb.rename("b")], axis=1).fillna(0.0)
    ta, tb = float(df["a"].sum()), float(df["b"].sum())
    df["diff"] = df["a"] - df["b"]
    df["of_b"] = df["diff"] / tb
    df["share"] = df["diff"] / (ta - tb) if ta != tb else float("nan")
    df = df.rename_axis("name").reset_index()
    df["kind"] = df["name"].map(OPCODE_KIND).fillna("") if level == "opcode" else ""
    df = df.reindex(df["diff"].abs().sort_values(ascending=False, kind="stable").index).reset_index(drop=True)
    df.attrs.update(total_a=ta, total_b=tb, ratio=ta / tb if tb else float("nan"))
    return df[cols]


def mix_sentence(name_a: str, name_b: str, mix: pd.DataFrame, n: int = 3) -> str | None:
    """``A executes 1.25x the warp instructions of B: of the 0.25x more, 0.21x are integer arithmetic (IMAD 0.14x,
    LOP3 0.06x), ...``: the side that executes more, and its extra instructions (in units of the other side's total)
    by what they do (:data:`OPCODE_KIND`, the ``n`` kinds that add the most, net of their opcodes that the other
    side executes more of) with their opcodes that add the most; from :func:`instruction_mix`. None where it is
    empty."""
    if not len(mix):
        return None
    more = mix.attrs["ratio"] >= 1
    hi, lo = (name_a, name_b) if more else (name_b, name_a)
    extra = (mix["diff"] / mix.attrs["total_b"]) if more else (-mix["diff"] / mix.attrs["total_a"])
    m = mix.assign(extra=extra, kind=mix["kind"].where(mix["kind"] != "", "other"))
    kinds = m.groupby("kind")["extra"].sum().sort_values(ascending=False)
    kinds = kinds[kinds > 0].head(n)
    r = mix.attrs["ratio"] if more else 1 / mix.attrs["ratio"]
    parts = []
    for kind, total in kinds.items():
        ops = m[(m["kind"] == kind) & (m["extra"] >= 0.005)].sort_values("extra", ascending=False).head(3)  # shown as 0.01x or more
        parts.append(f"{total:.2f}x {kind}" + (" (" + ", ".join(f"{o.name} {o.extra:.2f}x" for o in ops.itertuples()) + ")" if len(ops) else ""))
    return (f"{hi} executes {r:.2f}x the warp instructions of {lo} (sass__inst_executed_per_opcode)"
            + (f"; of the {r - 1:.2f}x more: " + "; ".join(parts) if parts and r > 1 else "") + ".")


def opcode_lines(deep: B.Deep, launch: int, opcode: str, n: int = 3, repo: str | Path = ".",
                 commit: str | None = None) -> pd.DataFrame:
    """The ``n`` CUDA source lines of one launch that executed ``opcode`` (its base name) most often, from the
    per-instruction source counters: ``file``, ``line``, ``source``, ``inst_executed``, ``share`` (of the launch's
    executions of that opcode). Empty where the launch has no source counters."""
    i = deep.issue
    cols = ["file", "line", "source", "inst_executed", "share"]
    if not len(i):
        return pd.DataFrame(columns=cols)
    i = i[i["launch"] == launch]
    i = i[i["sass"].map(B._opcode).str.split(".").str[0] == opcode]
    if not len(i):
        return pd.DataFrame(columns=cols)
    g = i.groupby(["file", "line"], dropna=False, as_index=False)["inst_executed"].sum()
    top = g.sort_values(["inst_executed", "file", "line"], ascending=[False, True, True]).head(n).copy()
    top["share"] = top["inst_executed"] / float(i["inst_executed"].sum())
    return B._with_source(top, Path(repo), "line", commit, cols=[c for c in cols if c != "source"])


# --------------------------------------------------------------------------- from a stall term to its lines

#: a stall reason of :data:`bottleneck.STALLS` -> the name its per-instruction samples carry
#: (``smsp__pcsamp_warps_issue_stalled_<name>``) where the two differ
SAMPLED_AS = {"no_instruction": "no_instructions"}


def stall_lines(deep: B.Deep, launch: int, reason: str, n: int = 3, by: str = "line", repo: str | Path = ".",
                commit: str | None = None) -> pd.DataFrame:
    """The ``n`` CUDA source lines (``by="line"``) or SASS instructions (``by="sass"``) of one launch with the most
    warp-state samples of stall ``reason`` (a key of :data:`bottleneck.STALLS`): ``file``, ``line``, ``source``,
    ``samples`` (of that reason), ``share`` (of the launch's samples of that reason), and by SASS ``address``,
    ``sass``. Empty where the report samples no such reason for the launch."""
    s = deep.sass[deep.sass["launch"] == launch] if len(deep.sass) else deep.sass
    col = f"stall_{SAMPLED_AS.get(reason, reason)}"
    cols = ["file", "line", "samples", "share"]
    if not len(s) or col not in s.columns or not s[col].sum():
        return pd.DataFrame(columns=[*(["address", "sass"] if by == "sass" else []), "file", "line", "source", "samples", "share"])
    s = s.assign(samples=s[col])
    if by == "line":
        s = s.groupby(["file", "line"], dropna=False, as_index=False)["samples"].sum()
    total = float(s["samples"].sum())
    top = s[s["samples"] > 0].sort_values(["samples", "file", "line"], ascending=[False, True, True]).head(n).copy()
    top["share"] = top["samples"] / total
    return B._with_source(top, Path(repo), by, commit, cols=cols)


#: the instructions a scoreboard stall can wait on, by opcode (the base name): Long Scoreboard on the L1TEX
#: path (global, local, texture and surface memory, cp.async's copies), Short Scoreboard on the MIO path (shared
#: memory, ldmatrix/stmatrix, special functions, shuffles)
SCOREBOARD_OPS = {
    "long_scoreboard": ("LDG", "STG", "REDG", "ATOMG", "RED", "ATOM", "LD", "ST", "LDL", "STL", "LDGSTS", "TEX", "TLD",
                        "TLD4", "TXQ", "SULD", "SUST", "SURED", "SUATOM"),
    "short_scoreboard": ("LDS", "STS", "LDSM", "STSM", "ATOMS", "MUFU", "SHFL", "S2R", "LDC", "REDUX", "MATCH"),
}
#: of those, the ones with no result register (a store or reduction): a later instruction waits on one only to
#: overwrite its operands
STORE_OPS = ("STG", "REDG", "RED", "ST", "STL", "SUST", "SURED", "STS", "STSM")
#: how far back (instructions, in address order) :func:`scoreboard_source` looks for the instruction waited on
SCOREBOARD_LOOKBACK = 64
_REG = re.compile(r"\bR(\d+)(?:\.(64|128))?\b")


def _registers(sass: str) -> set[int]:
    """The general registers a SASS instruction names (R12.64: R12 and R13; .128: four; RZ is none)."""
    out: set[int] = set()
    for m in _REG.finditer(str(sass)):
        first, width = int(m.group(1)), {None: 1, "64": 2, "128": 4}[m.group(2)]
        out.update(range(first, first + width))
    return out


def scoreboard_source(deep: B.Deep, launch: int, address: int, reason: str) -> pd.Series | None:
    """For an instruction stalled on a scoreboard (``reason`` ``long_scoreboard`` or ``short_scoreboard``): the
    nearest earlier instruction (in address order, at most :data:`SCOREBOARD_LOOKBACK` back) of the kind that
    reason waits on (:data:`SCOREBOARD_OPS`) that names one of its registers: a load whose result it reads, or a
    store or reduction whose operand register it is about to overwrite. A row of the per-instruction counters
    (``address``, ``sass``, ``file``, ``line``), with ``registers`` (the shared ones, sorted); None where there is
    none (a wait across a branch or the loop's back edge from further away)."""
    ops = SCOREBOARD_OPS.get(reason)
    i = deep.issue
    if ops is None or not len(i):
        return None
    i = i[i["launch"] == launch].sort_values("address").reset_index(drop=True)
    at = i.index[i["address"] == address]
    if not len(at):
        return None
    mine = _registers(i.at[at[0], "sass"])
    for k in range(at[0] - 1, max(-1, at[0] - 1 - SCOREBOARD_LOOKBACK), -1):
        sass = i.at[k, "sass"]
        if B._opcode(sass).split(".")[0] in ops and (shared := mine & _registers(sass)):
            row = i.loc[k, ["address", "sass", "file", "line"]].copy()
            row["registers"] = sorted(shared)
            return row
    return None


#: where a launch's Stall Barrier samples fall: at a warpgroup's wait for its own wgmma results, or just after a
#: block-wide or named barrier (the sample is taken on the instruction the warp cannot issue: with
#: BAR.SYNC.DEFER_BLOCKING, one of the next few, :data:`BAR_WINDOW`)
BARRIER_WAITS = {
    "wgmma": "WARPGROUP.DEPBAR (wgmma.wait_group: the warpgroup waiting for its own wgmma results, the tensor cores' "
             "latency left uncovered)",
    "bar": "the instructions just after a BAR (bar.sync: warps waiting for the others at a block-wide or named "
           "barrier)",
}
#: how many instructions after a BAR count as waiting at it (:func:`barrier_split`)
BAR_WINDOW = 3


def barrier_split(deep: B.Deep, launch: int) -> dict[str, float]:
    """The shares of one launch's Stall Barrier samples that are waits for wgmma results (``wgmma``: at
    WARPGROUP.DEPBAR) and waits at a barrier (``bar``: at the :data:`BAR_WINDOW` instructions after a BAR, in
    address order, other than those); {} where the launch has no such samples or no per-instruction counters."""
    s = deep.sass[deep.sass["launch"] == launch] if len(deep.sass) else deep.sass
    i = deep.issue[deep.issue["launch"] == launch] if len(deep.issue) else deep.issue
    if not len(s) or "stall_barrier" not in s.columns or not s["stall_barrier"].sum() or not len(i):
        return {}
    i = i.sort_values("address")
    bar = i["sass"].map(B._opcode).str.startswith("BAR")
    after = pd.concat([bar.shift(k, fill_value=False) for k in range(1, BAR_WINDOW + 1)], axis=1).any(axis=1)
    ops = s["sass"].map(B._opcode)
    wgmma = ops.str.startswith("WARPGROUP.DEPBAR")
    total = float(s["stall_barrier"].sum())
    return {"wgmma": float(s.loc[wgmma, "stall_barrier"].sum()) / total,
            "bar": float(s.loc[s["address"].isin(set(i["address"][after])) & ~wgmma, "stall_barrier"].sum()) / total}


def where(h: pd.DataFrame, i: int = 0) -> str:
    """``file:line`` of row ``i`` of a per-line frame, or a note where the instruction has no source line."""
    r = h.iloc[i]
    return f"{r['file']}:{int(r['line'])}" if pd.notna(r["line"]) else "an instruction without a source line"


# --------------------------------------------------------------------------- one honest ranking

ISSUE_INTERVAL = "cycles between issues (per scheduler)"
WARPS_NET = "warps per scheduler, net of Not Selected"
#: below this share of its theoretical occupancy, a kernel's advice says the achieved part is lost while it runs
ACHIEVED_SHARE = 0.9
_WARPS = "warps per scheduler (latency hiding)"
_WITH_WARPS = ("not_selected", "selected")  # the stalls that more warps per scheduler bring by themselves


def grouped(ranked: pd.DataFrame) -> pd.DataFrame:
    """:func:`bottleneck.explain`'s terms gathered so that terms that cancel are shown as one: ``level`` 0 for
    the three factors of a scheduler's time (instructions issued, the cycles between two issues, the rest), 1 for
    the parts of the cycles between issues (warps per scheduler netted with the Not Selected and Selected stalls
    that more warps bring by themselves, ``level`` 2 under it; then each other stall reason), with ``term``,
    ``reason``, ``a``, ``b``, ``ms`` (signed, of the gap; each level's rows add up to their parent) and ``share``
    (of the net gap; only for level 0, and only where the gap is clear of :data:`bottleneck.CLOSE` and each
    level-0 factor widens it: else NaN, the milliseconds alone). Ranked by
    ``|ms|`` within each level. ``attrs`` as ``ranked``'s."""
    r = ranked.copy()
    if "reason" not in r:
        r["reason"] = None
    instr = r[r["term"] == "instructions issued"]
    rest = r[r["term"].str.startswith("the rest")]
    warps = r[r["term"] == _WARPS]
    stalls = r[r["reason"].notna()]
    with_warps = stalls[stalls["reason"].isin(_WITH_WARPS)]
    others = stalls[~stalls["reason"].isin(_WITH_WARPS)]
    ratio = ranked.attrs["ratio"]

    def row(level: int, term: str, part: pd.DataFrame, a: float | None = None, b: float | None = None,
            reason: str | None = None) -> dict:
        return {"level": level, "term": term, "reason": reason, "a": a, "b": b, "ms": float(part["ms"].sum()),
                "share_raw": float(part["share"].sum())}

    ta, tb = ranked.attrs["time_a_ms"], ranked.attrs["time_b_ms"]
    interval = pd.concat([warps, stalls])
    # each side's warp cycles per issued instruction (the stalls add up to it) over its warps per scheduler
    lat = {s: float(stalls[s].fillna(0).sum()) for s in "ab"}
    w = {s: float(warps[s].iloc[0]) if len(warps) else float("nan") for s in "ab"}
    out = [row(0, "instructions issued", instr, *(instr[s].iloc[0] for s in "ab")) if len(instr) else None,
           row(0, ISSUE_INTERVAL, interval, lat["a"] / w["a"], lat["b"] / w["b"]),
           row(0, rest["term"].iloc[0], rest) if len(rest) else None]
    lvl1 = [row(1, WARPS_NET, pd.concat([warps, with_warps]), w["a"], w["b"])]
    lvl2 = [row(2, t.term, pd.DataFrame([t._asdict()]), t.a, t.b, t.reason)
            for t in pd.concat([warps, with_warps]).itertuples()]
    lvl1 += [row(1, t.term, pd.DataFrame([t._asdict()]), t.a, t.b, t.reason) for t in others.itertuples()]
    top = sorted([x for x in out if x], key=lambda x: -abs(x["ms"]))
    rows = []
    for x in top:
        rows.append(x)
        if x["term"] == ISSUE_INTERVAL:
            for y in sorted(lvl1, key=lambda y: -abs(y["ms"])):
                rows.append(y)
                if y["term"] == WARPS_NET:
                    rows += sorted(lvl2, key=lambda z: -abs(z["ms"]))
    df = pd.DataFrame(rows)
    # a share of the gap is shown only where it reads plainly: a clear gap that the three factors each widen
    # (shares between 0 and 1); where factors cancel, milliseconds alone
    top_shares = df.loc[df["level"] == 0, "share_raw"]
    clear = abs(math.log(ratio)) >= math.log(1 + B.CLOSE) and bool(top_shares.between(0, 1).all())
    df["share"] = [s if lvl == 0 and clear else float("nan") for lvl, s in zip(df["level"], df["share_raw"], strict=True)]
    df = df.drop(columns=["share_raw"])
    df.attrs.update(ranked.attrs, time_a_ms=ta, time_b_ms=tb)
    return df


def leaves(g: pd.DataFrame, smallest: float = 0.02) -> pd.DataFrame:
    """The rows of :func:`grouped` that add up to the whole gap without overlap: the instructions term, the net
    warps term, each other stall reason and the rest. Stall reasons under ``smallest`` of the larger time are
    gathered into one row, ``other stall reasons``."""
    keep = g[(g["level"] == 0) & (g["term"] != ISSUE_INTERVAL) | (g["level"] == 1)]
    big = max(g.attrs["time_a_ms"], g.attrs["time_b_ms"])
    small = (keep["level"] == 1) & (keep["term"] != WARPS_NET) & (keep["ms"].abs() < smallest * big)
    out = keep[~small]
    if small.any():
        out = pd.concat([out, pd.DataFrame([{"level": 1, "term": "other stall reasons", "reason": None, "a": None, "b": None,
                                             "ms": float(keep.loc[small, "ms"].sum()), "share": float("nan")}])],
                        ignore_index=True)
    out = out.reindex(out["ms"].abs().sort_values(ascending=False, kind="stable").index).reset_index(drop=True)
    out.attrs.update(g.attrs)
    return out


def waterfall(g: pd.DataFrame) -> pd.DataFrame:
    """Steps from a's time to b's: ``label``, ``measure`` (``absolute`` for the two times, ``relative`` for the
    steps), ``ms`` (a step removes its term's part of the gap: a's time minus the steps is b's time)."""
    lv = leaves(g)
    rows = [{"label": "a", "measure": "absolute", "ms": g.attrs["time_a_ms"]}]
    rows += [{"label": t.term, "measure": "relative", "ms": -t.ms} for t in lv.itertuples()]
    rows.append({"label": "b", "measure": "total", "ms": g.attrs["time_b_ms"]})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- what to try


@dataclass
class Launch:
    """One side of a comparison as :func:`what_to_try` reads it: its name, report, launch and the commit its
    source lines are read at."""
    name: str
    deep: B.Deep
    launch: int
    commit: str | None = None


def time_text(ms: float, sign: bool = True) -> str:
    """A time in milliseconds as ``+0.474 ms``, or in microseconds (``+3.6 us``) under 0.01 ms."""
    return (f"{ms:+.3f} ms" if sign else f"{ms:.3f} ms") if abs(ms) >= 0.01 else \
        (f"{ms * 1e3:+.1f} us" if sign else f"{ms * 1e3:.1f} us")


def _waits_on(x: Launch, reason: str, line: pd.Series, repo: str | Path) -> str:
    """``; its most-stalled instruction there ... waits on R90 of the REDG... at file:line`` for a scoreboard stall's
    top line (:func:`scoreboard_source`), or an empty string."""
    if reason not in SCOREBOARD_OPS:
        return ""
    s = x.deep.sass[(x.deep.sass["launch"] == x.launch) & (x.deep.sass["line"] == line["line"])]
    files = {f: repo_path(f, Path(repo)) for f in s["file"].unique()}  # as stall_lines names them
    s = s[s["file"].map(files) == line["file"]]
    col = f"stall_{SAMPLED_AS.get(reason, reason)}"
    if not len(s) or not s[col].max():
        return ""
    ins = s.loc[s[col].idxmax()]
    src = scoreboard_source(x.deep, x.launch, int(ins["address"]), reason)
    if src is None:
        return ""
    regs = ", ".join(f"R{r}" for r in src["registers"])
    at = B._with_source(pd.DataFrame([{"file": src["file"], "line": src["line"]}]), Path(repo), "line", x.commit,
                        cols=("file", "line"))
    text = str(at.iloc[0]["source"]).strip()
    op = B._opcode(src["sass"])
    before = f"the `{op}` at {where(at)} shortly before it" + (f" (`{text[:80]}`)" if text else "")
    if op.split(".")[0] in STORE_OPS:
        return (f"; its most-stalled instruction there, `{str(ins['sass']).strip()}`, is about to overwrite {regs}, "
                f"an operand of {before}: a store or reduction holds its operand registers until the memory system "
                f"has taken them, so this wait is that {op.split('.')[0]}'s")
    return (f"; its most-stalled instruction there, `{str(ins['sass']).strip()}`, uses {regs}, which {before} "
            f"writes or reads: this wait is that {op.split('.')[0]}'s")


def what_to_try(a: Launch, b: Launch, ranked: pd.DataFrame, repo: str | Path = ".", n: int = 3,
                at_least: float = 0.05) -> list[str]:
    """Computed sentences on what to change in the slower of the two launches: for each of the ``n`` terms that
    widen the gap most (each at least ``at_least`` of the gap), what it is in counters and where in the code
    (the opcodes behind an instructions term and the lines that execute the most of them; the source line with
    the most samples of a stall reason; the occupancy limiter behind fewer warps; the SMs' idle cycles behind
    the rest); then its tensor pipe's idle share, and Nsight Compute's rules with the largest estimated speedups.
    Each sentence names the metric or rule it reads."""
    slow, fast = (a, b) if ranked.attrs["ratio"] >= 1 else (b, a)
    sign = 1.0 if slow is a else -1.0
    g = grouped(ranked)
    lv = leaves(g)
    gap = abs(ranked.attrs["time_a_ms"] - ranked.attrs["time_b_ms"])
    big = max(ranked.attrs["time_a_ms"], ranked.attrs["time_b_ms"])
    floor = max(at_least * gap, 0.01 * big)
    widening = lv.assign(add=lv["ms"] * sign)
    widening = widening[(widening["add"] > floor) & (widening["term"] != "other stall reasons")].head(n)
    ps, pf = (B.profile(x.deep).set_index("launch").loc[x.launch] for x in (slow, fast))
    out = []
    for t in widening.itertuples():
        cost = f"{time_text(t.add)} of the {time_text(gap, sign=False)} gap"
        if t.term == "instructions issued":
            mix = instruction_mix(slow.deep, slow.launch, fast.deep, fast.launch)
            text = mix_sentence(slow.name, fast.name, mix) or (
                f"{slow.name} issues {ps['inst_issued'] / pf['inst_issued']:.2f}x the instructions of {fast.name} "
                f"(smsp__inst_issued.sum).")
            text = text.rstrip(".") + f" ({cost})."
            if len(mix):
                op = mix.assign(extra=mix["diff"] * (1 if slow is a else -1)).sort_values("extra", ascending=False).iloc[0]
                lines = opcode_lines(slow.deep, slow.launch, op["name"], 1, repo, slow.commit)
                if len(lines):
                    text += (f" The most {op['name']} executions of {slow.name} are at {where(lines)} "
                             f"({lines.iloc[0]['share']:.0%} of them): the line where fewer instructions count most.")
            out.append(text)
        elif t.term == WARPS_NET:
            text = (f"{slow.name} keeps {ps['warps_per_scheduler']:.2f} warps per scheduler vs {pf['warps_per_scheduler']:.2f} "
                    f"(smsp__warps_active.avg.per_cycle_active; net of the Not Selected stalls more warps bring: {cost}): "
                    f"its occupancy is {ps['achieved_occupancy_pct']:.1f}% of {ps['theoretical_occupancy_pct']:.1f}% possible, "
                    f"limited by {ps['occupancy_limiter'] or 'nothing reported'} ({ps['registers_per_thread']:.0f} registers "
                    f"per thread, {ps['block_size']:.0f} threads a block); fewer registers or less shared memory per "
                    f"block would let more warps hide each other's latency.")
            reached = ps["achieved_occupancy_pct"] / ps["theoretical_occupancy_pct"] \
                if ps["theoretical_occupancy_pct"] > 0 else float("nan")
            if reached < ACHIEVED_SHARE:
                text += (f" It reaches {reached:.0%} of what is possible: the rest is lost while it runs, to warps that "
                         "exit before their block does or to imbalance within and across blocks (Nsight Compute's "
                         "Achieved Occupancy rule), which fewer registers would not recover.")
            out.append(text)
        elif isinstance(t.reason, str) and t.reason in B.STALLS:
            name, meaning = B.STALLS[t.reason]
            va, vb = (t.a, t.b) if slow is a else (t.b, t.a)
            text = (f"{slow.name}'s warps spend {va:.2f} cycles per issued instruction on {name} vs {vb:.2f} "
                    f"({B.STALL_METRIC.format(t.reason)}: {meaning}; {cost}).")
            lines = stall_lines(slow.deep, slow.launch, t.reason, 1, "line", repo, slow.commit)
            if len(lines):
                src = str(lines.iloc[0]["source"]).strip()
                text += (f" The most {name} samples are at {where(lines)} ({lines.iloc[0]['share']:.0%} of them"
                         + (f": `{src[:80]}`" if src else "") + ")" + _waits_on(slow, t.reason, lines.iloc[0], repo) + ".")
            if t.reason == "barrier":
                parts = [f"{share:.0%} {'are ' if not i else ''}at {BARRIER_WAITS[k]}" for i, (k, share) in
                         enumerate((k, v) for k, v in barrier_split(slow.deep, slow.launch).items() if v >= 0.05)]
                if parts:
                    text += f" Of all its {name} samples, " + " and ".join(parts) + "."
            out.append(text)
        elif str(t.term).startswith("the rest"):
            act = {x.name: (p["sm_active_cycles"] / p["elapsed_cycles"]) for x, p in ((slow, ps), (fast, pf))}
            out.append(f"The rest ({cost}) is time the scheduler model does not cover: {slow.name}'s SMs are active "
                       f"{act[slow.name]:.0%} of the elapsed cycles vs {act[fast.name]:.0%} (sm__cycles_active.avg / "
                       f"gpc__cycles_elapsed.max), with {ps['grid_size']:.0f} blocks in {ps['waves_per_sm']:.2f} waves per SM: "
                       "idle SMs, the grid's tail or a lower clock.")
    tp_s, tp_f = ps.get("tensor_pipe_pct"), pf.get("tensor_pipe_pct")
    if tp_s is not None and tp_f is not None and not (pd.isna(tp_s) or pd.isna(tp_f)) and max(tp_s, tp_f) >= 5:
        out.append(f"{slow.name}'s tensor pipe is idle {100 - tp_s:.0f}% of its active cycles vs {100 - tp_f:.0f}% for "
                   f"{fast.name} (sm__pipe_tensor_*_cycles_active).")
    r = rules(slow.deep, slow.launch)
    r = r[(r["type"] == "OPT") & (r["speedup"] >= 1.0)].head(2)
    out += [rule_line(slow.name, x) for _, x in r.iterrows()]
    return out
