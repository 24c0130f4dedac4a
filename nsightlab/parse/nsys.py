"""Nsight Systems SQLite exports -> tidy pandas frames (pure functions of a file path).

:func:`nsys_tables` reads every kernel, every NVTX range, and the kernel<->range join (runtime API
correlation id -> launching thread -> the innermost range that encloses the launch on that thread).
Every kernel and range row carries the range columns of :mod:`nsightlab.parse.range_columns`.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.errors import ProfileError
from ..core.files import local_copy
from ..core.ranges import RangeSchema
from .range_columns import DEFAULT_DOMAIN, RANGE_COLUMNS, fill_range_columns, with_ranges

#: NVTX_EVENTS.eventType values (Nsight Systems' schema): push/pop and start/end ranges, domain names
NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE = 59, 60, 75
#: kernel columns kept where the export has them
KERNEL_EXTRA = ("globalPid", "registersPerThread", "staticSharedMemory", "dynamicSharedMemory", "gridX", "gridY", "gridZ",
                "blockX", "blockY", "blockZ", "streamId", "deviceId")


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]


def _version(name: str, stem: str) -> int:
    tail = name[len(stem):]
    return int(tail[2:]) if tail.startswith("_V") else 0


def _find_table(con: sqlite3.Connection, stem: str, required: bool = True) -> str | None:
    """The table for ``stem``, accepting versioned names (``X``, ``X_V2`` ... ``X_V10``: the highest
    version number wins)."""
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
    cands = [n for n in names if re.fullmatch(re.escape(stem) + r"(_V\d+)?", n)]
    if not cands:
        if required:
            raise ProfileError(f"the Nsight Systems export has no {stem} table (tables: {', '.join(sorted(names)[:40])}); "
                               "was the capture run with --trace=cuda,nvtx and exported with 'nsys export --type sqlite'?")
        return None
    return max(cands, key=lambda n: _version(n, stem))


def _pick(cols: list[str], *options: str) -> str | None:
    return next((c for c in options if c in cols), None)


def _kernels(con: sqlite3.Connection, path: Path) -> pd.DataFrame:
    """CUPTI's kernel table: start, end, correlationId, name ids (or names) and launch shape."""
    k_tab = _find_table(con, "CUPTI_ACTIVITY_KIND_KERNEL")
    kc = _columns(con, k_tab)  # type: ignore[arg-type]
    name_col = _pick(kc, "demangledName", "name", "shortName")
    short_col = _pick(kc, "shortName", "name", "demangledName")
    if name_col is None:
        raise ProfileError(f"{path}: table {k_tab} has no kernel name column (demangledName, shortName or name)")
    extra = "".join(f", {c}" for c in KERNEL_EXTRA if c in kc)
    return pd.read_sql_query(f"SELECT start, end, correlationId, {name_col} AS name_id, {short_col} AS short_id{extra} "
                             f"FROM {k_tab}", con)


def _runtime(con: sqlite3.Connection) -> pd.DataFrame:
    """Runtime API calls: correlationId, launching thread (``tid``), its process, launch time."""
    r_tab = _find_table(con, "CUPTI_ACTIVITY_KIND_RUNTIME", required=False)
    if r_tab:
        rt = pd.read_sql_query(f"SELECT correlationId, globalTid AS tid, start AS launch_start FROM {r_tab}", con)
    else:
        rt = pd.DataFrame({"correlationId": pd.Series(dtype="int64"), "tid": pd.Series(dtype="float64"),
                           "launch_start": pd.Series(dtype="float64")})
    # correlation ids are unique per process only: join on (process, id); a global thread id
    # carries its process in the bits above 24 (Nsight Systems' globalTid encoding)
    rt["globalPid"] = (rt["tid"].to_numpy(dtype="int64") >> 24) << 24 if len(rt) else rt["tid"]
    return rt


def _nvtx_events(con: sqlite3.Connection) -> pd.DataFrame:
    n_tab = _find_table(con, "NVTX_EVENTS", required=False)
    if not n_tab:
        return pd.DataFrame(columns=["start", "end", "eventType", "text", "tid"])
    cols = ["start", "end", "eventType", "text", "globalTid AS tid"]
    cols += [c for c in ("textId", "domainId") if c in _columns(con, n_tab)]
    return pd.read_sql_query(f"SELECT {', '.join(cols)} FROM {n_tab}", con)


def _read_export(path: Path) -> dict[str, Any]:
    """The raw tables of an export: kernels, runtime calls, NVTX events, GPUs and the string table."""
    if not path.exists():
        raise ProfileError(f"{path}: no such Nsight Systems SQLite export")
    try:
        con = sqlite3.connect(f"file:{local_copy(path)}?mode=ro", uri=True)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise ProfileError(f"{path}: not a readable SQLite file ({exc})") from None
    try:
        s_tab = _find_table(con, "StringIds", required=False) or _find_table(con, "StringTable", required=False)
        gpu_tab = _find_table(con, "TARGET_INFO_GPU", required=False)
        return {"kernels": _kernels(con, path), "runtime": _runtime(con), "nvtx": _nvtx_events(con),
                "strings": dict(con.execute(f"SELECT id, value FROM {s_tab}").fetchall()) if s_tab else {},
                "gpu": pd.read_sql_query(f"SELECT * FROM {gpu_tab}", con) if gpu_tab else pd.DataFrame()}
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:
        raise ProfileError(f"{path}: the Nsight Systems export cannot be read ({exc})") from None
    finally:
        con.close()


def nsys_tables(path: str | Path, schemas: Iterable[RangeSchema] = ()) -> dict[str, pd.DataFrame]:
    """``kernels`` (every kernel, with its launching thread, the innermost NVTX range enclosing the
    launch on that thread and that range's decoded fields; ``range`` "" and ``range_id`` -1 outside
    every range), ``ranges`` (every NVTX push/pop and start/end range, decoded) and ``gpu``
    (TARGET_INFO_GPU) of an nsys SQLite export (or its .xz / .gz)."""
    path = Path(path)
    raw = _read_export(path)
    kern, rt, strings = raw["kernels"], raw["runtime"], raw["strings"]
    ids_used = any(not isinstance(v, str) for col in ("name_id", "short_id") for v in kern[col].head(50))
    if ids_used and not strings:
        raise ProfileError(f"{path}: kernel names are string ids but the export has no StringIds table; "
                           "re-export with 'nsys export --type sqlite'")
    for col in ("name_id", "short_id"):
        kern[col] = kern[col].map(lambda v: strings.get(v, v) if not isinstance(v, str) else v)
    kern = kern.rename(columns={"name_id": "kernel_full", "short_id": "kernel"})
    ranges = _nsys_ranges(raw["nvtx"], strings, schemas)
    keys = ["globalPid", "correlationId"] if "globalPid" in kern else ["correlationId"]
    kern = kern.merge(rt if "globalPid" in kern else rt.drop(columns="globalPid"), on=keys, how="left")
    kern["ms"] = (kern["end"] - kern["start"]) / 1e6
    kern = _join_ranges(kern.sort_values("start").reset_index(drop=True), ranges)
    return {"kernels": kern, "ranges": ranges, "gpu": raw["gpu"]}


def _nsys_ranges(nv: pd.DataFrame, strings: dict, schemas: Iterable[RangeSchema]) -> pd.DataFrame:
    """Every closed NVTX range with its domain name, decoded."""
    if "textId" in nv:
        nv["text"] = nv["text"].where(nv["text"].notna(), nv["textId"].map(strings))
    domains: dict[Any, str] = {}
    if "domainId" in nv and "eventType" in nv:
        created = nv[nv["eventType"] == NVTX_DOMAIN_CREATE]
        domains = dict(zip(created["domainId"], created["text"].fillna(""), strict=False))
    if "eventType" in nv and nv["eventType"].isin([NVTX_PUSHPOP, NVTX_STARTEND]).any():
        nv = nv[nv["eventType"].isin([NVTX_PUSHPOP, NVTX_STARTEND])]
    nv = nv[nv["end"].notna() & nv["text"].notna()].copy()
    rows = [{"range": str(t), "domain": domains.get(d, "") if d == d and d else DEFAULT_DOMAIN}
            for t, d in zip(nv["text"], nv["domainId"] if "domainId" in nv else [0] * len(nv), strict=False)]
    dec = with_ranges(rows, schemas)
    dec.index = nv.index
    out = pd.concat([nv[["start", "end", "tid"]], dec], axis=1).sort_values("start").reset_index(drop=True)
    out["ms"] = (out["end"] - out["start"]) / 1e6
    return out


def _innermost_enclosing(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For nested intervals (sorted by start) and query times ``t``: the index of the innermost
    interval with start <= t <= end, or -1. A sweep over starts, ends and queries with a stack."""
    ev = [(s, 0, i) for i, s in enumerate(starts)] + [(q, 1, j) for j, q in enumerate(t)] + \
         [(e, 2, i) for i, e in enumerate(ends)]
    ev.sort(key=lambda x: (x[0], x[1]))
    out = np.full(len(t), -1)
    stack: list[int] = []
    closed = np.zeros(len(starts), bool)
    for _, kind, i in ev:
        if kind == 0:
            stack.append(i)
        elif kind == 2:
            closed[i] = True
            while stack and closed[stack[-1]]:
                stack.pop()
        else:
            while stack and closed[stack[-1]]:
                stack.pop()
            if stack:
                out[i] = stack[-1]
    return out


def _join_ranges(kern: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """Attach to each kernel the innermost range that encloses its *launch* (runtime API call) on
    the launching thread. Kernels outside every range keep ``range`` "" and ``range_id`` -1."""
    idx = np.full(len(kern), -1)
    if len(ranges) and "tid" in kern:
        ktid = kern["tid"].to_numpy()
        kt = kern["launch_start"].to_numpy(dtype=float)
        for tid, grp in ranges.groupby("tid"):
            sel = np.flatnonzero((ktid == tid) & ~np.isnan(kt))
            if not len(sel):
                continue
            # a range nested in one that starts at the same instant sorts after it (longer first)
            grp = grp.assign(_neg_end=-grp["end"]).sort_values(["start", "_neg_end"], kind="stable")
            pos = _innermost_enclosing(grp["start"].to_numpy(), grp["end"].to_numpy(), kt[sel])
            ok = pos >= 0
            idx[sel[ok]] = grp.index.to_numpy()[pos[ok]]
    kern = kern.copy()
    kern["range_id"] = idx
    cols = [c for c in ranges.columns if c not in ("start", "end", "tid", "ms")] or list(RANGE_COLUMNS)
    joined = ranges.reindex(columns=cols).reindex(idx).reset_index(drop=True)
    joined.loc[idx < 0, :] = None
    return fill_range_columns(pd.concat([kern.reset_index(drop=True), joined], axis=1))


def nsys_kernel_summary(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per kernel name: total, count, average, median, min, max in ns (as ``nsys stats cuda_gpu_kern_sum``)."""
    d = kernels.assign(ns=kernels["end"] - kernels["start"])
    g = d.groupby("kernel_full")["ns"]
    return pd.DataFrame({"total_ns": g.sum(), "instances": g.count(), "avg_ns": g.mean(), "med_ns": g.median(),
                         "min_ns": g.min(), "max_ns": g.max()}).sort_values("total_ns", ascending=False)


def nsys_range_summary(ranges: pd.DataFrame) -> pd.DataFrame:
    """Per range name: total, count, average, min, max in ns (as ``nsys stats nvtx_sum``)."""
    d = ranges.assign(ns=ranges["end"] - ranges["start"])
    g = d.groupby("range")["ns"]
    return pd.DataFrame({"total_ns": g.sum(), "instances": g.count(), "avg_ns": g.mean(), "min_ns": g.min(),
                         "max_ns": g.max()}).sort_values("total_ns", ascending=False)
