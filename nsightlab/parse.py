"""Parsers: Nsight exports -> tidy pandas DataFrames (pure functions of a file path).

- :func:`ncu_frame` reads a ``.ncu-rep`` through the ``ncu-report`` package: one row per profiled
  kernel launch, the NVTX range decoded into columns, every collected metric in its base unit
  (units in ``df.attrs["units"]``).
- :func:`ncu_csv_frame` reads ``ncu --import X --csv --page raw`` output the same way (the fallback,
  and the oracle the tests hold the first against).
- :func:`nsys_tables` reads an Nsight Systems SQLite export: kernels, NVTX ranges, and the
  kernel<->range join (runtime API correlation id -> launching thread -> the range that encloses
  the launch on that thread).

Range names are decoded only by nsightlab.ranges; nothing is guessed from kernel names.
"""

from __future__ import annotations

import csv
import re
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .ranges import COLUMNS, is_range_name, parse_range
from .store import ProfileError, local_copy

RANGE_COLUMNS = list(COLUMNS)


def _range_columns(name: str | None) -> dict[str, Any]:
    if not name:
        return {c: None for c in RANGE_COLUMNS} | {"range": None}
    spec = parse_range(name)
    return spec.as_row() | {"range": name}


# --------------------------------------------------------------------------- Nsight Compute


def _import_ncu_report():
    try:
        import ncu_report  # PyPI: ncu-report, or Nsight Compute's extras/python
    except ImportError:
        import glob
        import sys

        for d in sorted(glob.glob("/opt/nvidia/nsight-compute/*/extras/python"), reverse=True):
            sys.path.append(d)
            try:
                import ncu_report
            except ImportError:
                sys.path.remove(d)
                continue
            return ncu_report
        raise ProfileError("reading .ncu-rep files needs the ncu-report package: pip install ncu-report "
                           "(or Nsight Compute's extras/python on PYTHONPATH)") from None
    return ncu_report


def _action_range(action) -> str | None:
    state = action.nvtx_state()
    if state is None:
        return None
    for dom_id in state.domains():
        for name in state.domain_by_id(dom_id).push_pop_ranges():
            if is_range_name(name):
                return name
    return None


def ncu_frame(path: str | Path, metrics: list[str] | None = None) -> pd.DataFrame:
    """One row per kernel launch of a .ncu-rep (or .ncu-rep.gz): range columns, ``kernel``,
    ``kernel_full``, ``launch`` (order in the report), and one column per metric (base units)."""
    path = Path(path)
    if not path.exists():
        raise ProfileError(f"{path}: no such Nsight Compute report")
    ncu_report = _import_ncu_report()
    local = local_copy(path)
    try:
        ctx = ncu_report.load_report(str(local))
    except Exception as exc:  # the module raises its own exception types
        raise ProfileError(f"{path}: Nsight Compute cannot open it ({exc}); the file may be truncated") from None
    rows, units = [], {}
    launch = 0
    for ri in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(ri)
        for ai in range(rng.num_actions()):
            a = rng.action_by_idx(ai)
            names = metrics if metrics is not None else [m for m in a.metric_names()
                                                       if not m.startswith(("device__", "nvlink__", "numa__", "c2clink__",
                                                                            "profiler__", "breakdown:"))]
            row: dict[str, Any] = _range_columns(_action_range(a))
            row["kernel"] = a.name()
            row["kernel_full"] = a.name(ncu_report.IAction.NameBase_DEMANGLED) if hasattr(ncu_report, "IAction") else a.name()
            row["launch"] = launch
            for m in names:
                metric = a.metric_by_name(m)
                if metric is None:
                    continue
                value = metric.value()
                row[m] = value
                units.setdefault(m, metric.unit())
            rows.append(row)
            launch += 1
    df = pd.DataFrame(rows)
    df.attrs["units"] = units
    df.attrs["source"] = str(path)
    return df


_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_UNIT = re.compile(r"^(?P<p>[KMGTmun]?)(?P<base>byte|hz|second|inst|cycle|sector|warp|thread|register|block)(?P<rest>.*)$",
                   re.IGNORECASE)
_TIME = {"ns": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9, "nsecond": 1.0}


def unit_scale(unit: str) -> tuple[float, str]:
    """(factor, base unit) that turns a value printed by ncu in ``unit`` into the report's base unit
    (bytes, hertz, nanoseconds, ...). ncu prints decimal prefixes: Kbyte = 1000 bytes."""
    u = (unit or "").strip()
    if u in _TIME:
        return _TIME[u], "ns"
    if u.lower().endswith("hz") and len(u) > 2 and u[0] in "KMGT":
        return _PREFIX[u[0]], "hz"
    m = _UNIT.match(u)
    if m and m.group("p"):
        return _PREFIX[m.group("p")], m.group("base") + m.group("rest")
    return 1.0, u


def parse_number(text: str) -> float:
    t = text.strip().replace(",", "")
    if t in ("", "n/a", "N/A"):
        return float("nan")
    return float(t)


def ncu_csv_frame(path: str | Path) -> pd.DataFrame:
    """The ``ncu --csv --page raw`` export as the same frame as :func:`ncu_frame` (base units);
    ``df.attrs["printed"]`` keeps the strings and units as printed, for digit-exact comparison."""
    path = Path(path)
    if not path.exists():
        raise ProfileError(f"{path}: no such ncu CSV export")
    with open(local_copy(path), newline="") as fh:
        rows = list(csv.reader(fh))
    if len(rows) < 2 or "ID" not in rows[0] or "Kernel Name" not in rows[0]:
        raise ProfileError(f"{path}: not an 'ncu --csv --page raw' export (no ID / Kernel Name header)")
    header, unit_row, data = rows[0], rows[1], rows[2:]
    rcol = next((i for i, h in enumerate(header) if "Push/Pop_Range" in h), None)
    first_metric = next((i for i, h in enumerate(header) if "__" in h), len(header))
    out, printed = [], []
    for launch, r in enumerate(data):
        name = None
        if rcol is not None and r[rcol].strip():
            m = re.search(r"(fk:[^:]+:[^:]+:[^:\"]+)", r[rcol])
            name = m.group(1) if m else None
        row: dict[str, Any] = _range_columns(name)
        row["kernel_full"] = r[header.index("Kernel Name")]
        row["launch"] = launch
        pr = {}
        for i in range(first_metric, len(header)):
            h = header[i]
            scale, _ = unit_scale(unit_row[i])
            try:
                row[h] = parse_number(r[i]) * scale
            except ValueError:
                row[h] = r[i]
            pr[h] = (r[i], unit_row[i])
        out.append(row)
        printed.append(pr)
    df = pd.DataFrame(out)
    df.attrs["printed"] = printed
    df.attrs["source"] = str(path)
    return df


# --------------------------------------------------------------------------- Nsight Systems


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]


def _find_table(con: sqlite3.Connection, stem: str, required: bool = True) -> str | None:
    """The table for ``stem``, accepting versioned names (``CUPTI_ACTIVITY_KIND_KERNEL``,
    ``CUPTI_ACTIVITY_KIND_KERNEL_V2``...; the newest wins)."""
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
    cands = sorted((n for n in names if n == stem or re.fullmatch(re.escape(stem) + r"(_V\d+)?", n)), reverse=True)
    if not cands:
        if required:
            raise ProfileError(f"the Nsight Systems export has no {stem} table (tables: {', '.join(sorted(names)[:40])}); "
                               "was the capture run with --trace=cuda,nvtx and exported with 'nsys export --type sqlite'?")
        return None
    return cands[0]


def _pick(cols: list[str], *options: str) -> str | None:
    return next((c for c in options if c in cols), None)


def nsys_tables(path: str | Path) -> dict[str, pd.DataFrame]:
    """``kernels`` (one row per kernel, with its launching thread and enclosing ``fk:`` range decoded),
    ``ranges`` (the ``fk:`` NVTX push/pop ranges) and ``gpu`` (TARGET_INFO_GPU) of an nsys SQLite export."""
    path = Path(path)
    if not path.exists():
        raise ProfileError(f"{path}: no such Nsight Systems SQLite export")
    try:
        con = sqlite3.connect(f"file:{local_copy(path)}?mode=ro", uri=True)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise ProfileError(f"{path}: not a readable SQLite file ({exc})") from None
    try:
        k_tab = _find_table(con, "CUPTI_ACTIVITY_KIND_KERNEL")
        r_tab = _find_table(con, "CUPTI_ACTIVITY_KIND_RUNTIME")
        n_tab = _find_table(con, "NVTX_EVENTS")
        s_tab = _find_table(con, "StringIds", required=False) or _find_table(con, "StringTable", required=False)
        kc = _columns(con, k_tab)
        name_col = _pick(kc, "demangledName", "name", "shortName")
        short_col = _pick(kc, "shortName", "name", "demangledName")
        strings = dict(con.execute(f"SELECT id, value FROM {s_tab}").fetchall()) if s_tab else {}
        extra = [c for c in ("registersPerThread", "staticSharedMemory", "dynamicSharedMemory", "gridX", "gridY", "gridZ",
                             "blockX", "blockY", "blockZ", "streamId", "deviceId") if c in kc]
        kern = pd.read_sql_query(f"SELECT start, end, correlationId, {name_col} AS name_id, {short_col} AS short_id"
                                 + "".join(f", {c}" for c in extra) + f" FROM {k_tab}", con)
        rt = pd.read_sql_query(f"SELECT correlationId, globalTid AS tid, start AS launch_start FROM {r_tab}", con)
        nc = _columns(con, n_tab)
        text_id = "textId" if "textId" in nc else None
        nv = pd.read_sql_query(f"SELECT start, end, eventType, text{', textId' if text_id else ''}, globalTid AS tid FROM {n_tab}",
                               con)
        gpu_tab = _find_table(con, "TARGET_INFO_GPU", required=False)
        gpu = pd.read_sql_query(f"SELECT * FROM {gpu_tab}", con) if gpu_tab else pd.DataFrame()
    finally:
        con.close()
    # kernel names may be string ids or text, by version
    for col in ("name_id", "short_id"):
        kern[col] = kern[col].map(lambda v: strings.get(v, v) if not isinstance(v, str) else v)
    kern = kern.rename(columns={"name_id": "kernel_full", "short_id": "kernel"})
    if text_id:
        nv["text"] = nv["text"].where(nv["text"].notna(), nv["textId"].map(strings))
    nv = nv[nv["text"].map(is_range_name) & nv["end"].notna()].copy()
    ranges = pd.DataFrame([_range_columns(t) for t in nv["text"]], index=nv.index)
    ranges = pd.concat([nv[["start", "end", "tid"]], ranges], axis=1).sort_values("start").reset_index(drop=True)
    ranges["ms"] = (ranges["end"] - ranges["start"]) / 1e6
    kern = kern.merge(rt, on="correlationId", how="left")
    kern["ms"] = (kern["end"] - kern["start"]) / 1e6
    kern = _join_ranges(kern, ranges)
    return {"kernels": kern.sort_values("start").reset_index(drop=True), "ranges": ranges, "gpu": gpu}


def _join_ranges(kern: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """Attach to each kernel the innermost fk: range that encloses its *launch* on the same thread."""
    idx = np.full(len(kern), -1)
    for tid, grp in ranges.groupby("tid"):
        starts, ends = grp["start"].to_numpy(), grp["end"].to_numpy()
        order = np.argsort(starts)
        starts, ends, ids = starts[order], ends[order], grp.index.to_numpy()[order]
        sel = np.flatnonzero(kern["tid"].to_numpy() == tid)
        t = kern["launch_start"].to_numpy()[sel]
        pos = np.searchsorted(starts, t, side="right") - 1
        ok = (pos >= 0) & (t <= ends[np.clip(pos, 0, None)])
        idx[sel[ok]] = ids[pos[ok]]
    kern["range_id"] = idx
    cols = ["range", *RANGE_COLUMNS]
    joined = ranges[cols].reindex(idx).reset_index(drop=True)
    joined.loc[idx < 0, :] = None
    return pd.concat([kern.reset_index(drop=True), joined], axis=1)


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
