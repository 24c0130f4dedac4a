"""Parsers: Nsight exports -> tidy pandas DataFrames (pure functions of a file path).

- :func:`ncu_frame` reads a ``.ncu-rep`` through the ``ncu-report`` package: one row per profiled
  kernel launch, every collected metric in its base unit (units in ``df.attrs["units"]``).
- :func:`ncu_csv_frame` reads ``ncu --import X --csv --page raw`` output the same way (the fallback,
  and the oracle the tests hold the first against).
- :func:`nsys_tables` reads an Nsight Systems SQLite export: every kernel, every NVTX range, and the
  kernel<->range join (runtime API correlation id -> launching thread -> the innermost range that
  encloses the launch on that thread).

Every kernel row has ``range`` (the raw innermost push/pop range name as pushed, "" outside every
range) and ``domain`` (its NVTX domain), and the fields :func:`nsightlab.core.ranges.decode` reads from
the name: with a schema the caller passes (a capture's manifest records its own) or a registered one,
else generic ``key=value`` decoding. Names outside every grammar are kept, never fatal; nothing is
guessed from kernel names.
"""

from __future__ import annotations

import csv
import re
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.errors import ProfileError
from ..core.files import local_copy
from ..core.ranges import RangeSchema, decode

#: the columns every parsed kernel row has, whatever the range names say
RANGE_COLUMNS = ["range", "domain", "variant", "pass"]
DEFAULT_DOMAIN = "<default domain>"  # what Nsight Compute calls NVTX's unnamed domain


def _with_ranges(rows: list[dict[str, Any]], schemas: Iterable[RangeSchema]) -> pd.DataFrame:
    """Rows with raw ``range``/``domain`` -> a frame with the decoded fields as further columns."""
    schemas = tuple(schemas)
    cache: dict[str, dict[str, Any]] = {}
    decoded = []
    for r in rows:
        name = r.get("range") or ""
        if name not in cache:
            cache[name] = decode(name, schemas)
        decoded.append(cache[name])
    dec = pd.DataFrame(decoded, index=range(len(rows)))
    df = pd.DataFrame(rows, index=range(len(rows)))
    extra = [c for c in dec.columns if c not in df.columns]
    out = pd.concat([df, dec[extra]], axis=1)
    for c in RANGE_COLUMNS:
        if c not in out:
            out[c] = None
    out["range"] = out["range"].fillna("")
    out["domain"] = out["domain"].fillna("")
    lead = [*RANGE_COLUMNS, *[c for c in extra if c not in RANGE_COLUMNS]]
    return out[lead + [c for c in out.columns if c not in lead]]


# --------------------------------------------------------------------------- Nsight Compute


def _import_ncu_report():
    # Only PyPI's ncu-report: Nsight Compute 2025.3.1's bundled extras/python module took the process
    # down with a segmentation fault on a 491-kernel report (seen on the H200), so it is not a fallback.
    try:
        import ncu_report
    except ImportError:
        raise ProfileError("reading .ncu-rep files needs the ncu-report package: pip install ncu-report "
                           "(or export the report with 'ncu --import R --csv --page raw' and read that)") from None
    return ncu_report


def ncu_action_range(action, schemas: Iterable[RangeSchema] = ()) -> tuple[str, str]:
    """(innermost push/pop range name, its domain) of one profiled launch; ("", "") outside every
    range. Where several domains hold ranges, one that a schema decodes wins, else the default domain."""
    state = action.nvtx_state()
    if state is None:
        return "", ""
    found: list[tuple[str, str]] = []
    for dom_id in state.domains():
        dom = state.domain_by_id(dom_id)
        stack = [s for s in (dom.push_pop_ranges() or ()) if s]
        if stack:
            found.append((stack[-1], dom.name() or DEFAULT_DOMAIN))
    if not found:
        return "", ""
    schemas = tuple(schemas)
    for name, domain in found:
        if decode(name, schemas).get("schema"):
            return name, domain
    for name, domain in found:
        if domain == DEFAULT_DOMAIN:
            return name, domain
    return found[0]


_SKIP_PREFIXES = ("device__", "nvlink__", "numa__", "c2clink__", "profiler__", "breakdown:")


def ncu_frame(path: str | Path, metrics: list[str] | None = None, schemas: Iterable[RangeSchema] = ()) -> pd.DataFrame:
    """One row per kernel launch of a .ncu-rep (or .ncu-rep.gz): ``range``, ``domain``, decoded
    range fields, ``kernel``, ``kernel_full``, ``launch`` (order in the report) and one column per
    metric (base units; ``metrics`` None: every metric but the device attributes)."""
    path = Path(path)
    if not path.exists():
        raise ProfileError(f"{path}: no such Nsight Compute report")
    ncu_report = _import_ncu_report()
    local = local_copy(path)
    if local.stat().st_size == 0:
        raise ProfileError(f"{path}: empty file, not an Nsight Compute report")
    try:
        ctx = ncu_report.load_report(str(local))
    except Exception as exc:  # the module raises its own exception types
        raise ProfileError(f"{path}: Nsight Compute cannot open it ({exc}); the file may be truncated") from None
    schemas = tuple(schemas)
    rows, units = [], {}
    launch = 0
    for ri in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(ri)
        for ai in range(rng.num_actions()):
            a = rng.action_by_idx(ai)
            kname = a.name()
            if kname is None:  # what a report cut short leaves behind: an action without name or metrics
                raise ProfileError(f"{path}: launch {launch} has no kernel name or metrics; the report is truncated "
                                   "or corrupt (re-export it, or re-capture)")
            names = metrics if metrics is not None else [m for m in a.metric_names() if not m.startswith(_SKIP_PREFIXES)]
            rname, domain = ncu_action_range(a, schemas)
            row: dict[str, Any] = {"range": rname, "domain": domain, "kernel": kname,
                                   "kernel_full": a.name(ncu_report.IAction.NameBase_DEMANGLED), "launch": launch}
            for m in names:
                metric = a.metric_by_name(m)
                if metric is None:
                    continue
                row[m] = metric.value()
                units.setdefault(m, metric.unit())
            rows.append(row)
            launch += 1
    if not rows:
        raise ProfileError(f"{path}: holds no profiled kernel (an empty or truncated report: Nsight Compute "
                           "reads a report cut short as one with no launches)")
    df = _with_ranges(rows, schemas)
    df.attrs["units"] = units
    df.attrs["source"] = str(path)
    return df


def ncu_device(path: str | Path) -> dict[str, Any]:
    """The device attributes (``device__attribute_*``, without the prefix) of a report's first launch."""
    ncu_report = _import_ncu_report()
    try:
        ctx = ncu_report.load_report(str(local_copy(Path(path))))
        a = ctx.range_by_idx(0).action_by_idx(0)
    except Exception as exc:  # noqa: BLE001 - the module's own exception types
        raise ProfileError(f"{path}: Nsight Compute cannot open it ({exc})") from None
    if a is None or a.name() is None:
        raise ProfileError(f"{path}: holds no profiled kernel")
    out = {}
    for m in a.metric_names():
        if m.startswith("device__attribute_"):
            out[m.removeprefix("device__attribute_")] = a.metric_by_name(m).value()
    return out


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
    # ncu scales the printed number by a prefix it puts on any unit of the expression: 2234 %/byte
    # prints as 2.234 %/Kbyte
    m = re.search(r"(?<=/)(?P<p>[KMGT])(?P<base>byte|hz|second|inst|cycle|sector|warp|thread|register|block)", u)
    if m:
        return _PREFIX[m.group("p")], u[:m.start()] + m.group("base") + u[m.end():]
    return 1.0, u


def parse_number(text: str) -> float:
    t = text.strip().replace(",", "")
    if t in ("", "n/a", "N/A", "no data"):
        return float("nan")
    return float(t)


#: one entry of ncu's "Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg" column;
#: the range name may hold colons, and it is printed twice (as the range and as its message)
_CSV_RANGE = re.compile(r"^(?P<domain>[^:]*):(?P<name>.*):[^:]*:[^:]*:[^:]*:[^:]*:[^:]*:(?P=name)$", re.S)


def csv_range(cell: str) -> tuple[str, str]:
    """(innermost range name, domain) from ncu's CSV push/pop range cell; ("", "") if none."""
    entries = re.findall(r'"([^"]*)"', cell or "")
    for entry in reversed(entries):
        m = _CSV_RANGE.match(entry)
        if m and m.group("name"):
            return m.group("name"), m.group("domain")
    return "", ""


def ncu_csv_frame(path: str | Path, schemas: Iterable[RangeSchema] = ()) -> pd.DataFrame:
    """The ``ncu --csv --page raw`` export as the same frame as :func:`ncu_frame` (base units);
    ``df.attrs["printed"]`` keeps the strings and units as printed, for digit-exact comparison."""
    path = Path(path)
    if not path.exists():
        raise ProfileError(f"{path}: no such ncu CSV export")
    try:
        with open(local_copy(path), newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh, strict=True))  # strict: a file cut inside a quoted field is an error
    except (csv.Error, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: not a readable CSV file ({exc})") from None
    if len(rows) < 2 or "ID" not in rows[0] or "Kernel Name" not in rows[0]:
        raise ProfileError(f"{path}: not an 'ncu --csv --page raw' export (no ID / Kernel Name header)")
    header, unit_row, data = rows[0], rows[1], rows[2:]
    if len(unit_row) != len(header):
        raise ProfileError(f"{path}: the unit row has {len(unit_row)} fields, the header {len(header)}")
    if not data:
        raise ProfileError(f"{path}: holds no profiled kernel (header and units only)")
    for i, r in enumerate(data):
        if len(r) != len(header):
            raise ProfileError(f"{path}: row {i + 3} has {len(r)} fields, the header has {len(header)}: the file is cut "
                               "short or not one export (re-run 'ncu --import R --csv --page raw')")
    rcol = next((i for i, h in enumerate(header) if "Push/Pop_Range" in h), None)
    kcol = header.index("Kernel Name")
    first_metric = next((i for i, h in enumerate(header) if "__" in h), len(header))
    out, printed = [], []
    for launch, r in enumerate(data):
        name, domain = csv_range(r[rcol]) if rcol is not None else ("", "")
        row: dict[str, Any] = {"range": name, "domain": domain, "kernel_full": r[kcol], "launch": launch}
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
    df = _with_ranges(out, schemas)
    df.attrs["printed"] = printed
    df.attrs["source"] = str(path)
    return df


# --------------------------------------------------------------------------- Nsight Systems

#: NVTX_EVENTS.eventType values (Nsight Systems' schema): push/pop and start/end ranges, domain names
NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE = 59, 60, 75


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


def nsys_tables(path: str | Path, schemas: Iterable[RangeSchema] = ()) -> dict[str, pd.DataFrame]:
    """``kernels`` (every kernel, with its launching thread, the innermost NVTX range enclosing the
    launch on that thread and that range's decoded fields; ``range`` "" and ``range_id`` -1 outside
    every range), ``ranges`` (every NVTX push/pop and start/end range, decoded) and ``gpu``
    (TARGET_INFO_GPU) of an nsys SQLite export."""
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
        r_tab = _find_table(con, "CUPTI_ACTIVITY_KIND_RUNTIME", required=False)
        n_tab = _find_table(con, "NVTX_EVENTS", required=False)
        s_tab = _find_table(con, "StringIds", required=False) or _find_table(con, "StringTable", required=False)
        kc = _columns(con, k_tab)  # type: ignore[arg-type]
        name_col = _pick(kc, "demangledName", "name", "shortName")
        short_col = _pick(kc, "shortName", "name", "demangledName")
        if name_col is None:
            raise ProfileError(f"{path}: table {k_tab} has no kernel name column (demangledName, shortName or name)")
        strings = dict(con.execute(f"SELECT id, value FROM {s_tab}").fetchall()) if s_tab else {}
        extra = [c for c in ("globalPid", "registersPerThread", "staticSharedMemory", "dynamicSharedMemory", "gridX", "gridY", "gridZ",
                             "blockX", "blockY", "blockZ", "streamId", "deviceId") if c in kc]
        kern = pd.read_sql_query(f"SELECT start, end, correlationId, {name_col} AS name_id, {short_col} AS short_id"
                                 + "".join(f", {c}" for c in extra) + f" FROM {k_tab}", con)
        if r_tab:
            rt = pd.read_sql_query(f"SELECT correlationId, globalTid AS tid, start AS launch_start FROM {r_tab}", con)
        else:
            rt = pd.DataFrame({"correlationId": pd.Series(dtype="int64"), "tid": pd.Series(dtype="float64"),
                               "launch_start": pd.Series(dtype="float64")})
        # correlation ids are unique per process only: join on (process, id); a global thread id
        # carries its process in the bits above 24 (Nsight Systems' globalTid encoding)
        rt["globalPid"] = (rt["tid"].to_numpy(dtype="int64") >> 24) << 24 if len(rt) else rt["tid"]
        if n_tab:
            nc = _columns(con, n_tab)
            cols = ["start", "end", "eventType", "text", "globalTid AS tid"]
            cols += [c for c in ("textId", "domainId") if c in nc]
            nv = pd.read_sql_query(f"SELECT {', '.join(cols)} FROM {n_tab}", con)
        else:
            nv = pd.DataFrame(columns=["start", "end", "eventType", "text", "tid"])
        gpu_tab = _find_table(con, "TARGET_INFO_GPU", required=False)
        gpu = pd.read_sql_query(f"SELECT * FROM {gpu_tab}", con) if gpu_tab else pd.DataFrame()
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:
        raise ProfileError(f"{path}: the Nsight Systems export cannot be read ({exc})") from None
    finally:
        con.close()
    ids_used = any(not isinstance(v, str) for col in ("name_id", "short_id") for v in kern[col].head(50))
    if ids_used and not strings:
        raise ProfileError(f"{path}: kernel names are string ids but the export has no StringIds table; "
                           "re-export with 'nsys export --type sqlite'")
    for col in ("name_id", "short_id"):
        kern[col] = kern[col].map(lambda v: strings.get(v, v) if not isinstance(v, str) else v)
    kern = kern.rename(columns={"name_id": "kernel_full", "short_id": "kernel"})
    ranges = _nsys_ranges(nv, strings, schemas)
    keys = ["globalPid", "correlationId"] if "globalPid" in kern else ["correlationId"]
    kern = kern.merge(rt if "globalPid" in kern else rt.drop(columns="globalPid"), on=keys, how="left")
    kern["ms"] = (kern["end"] - kern["start"]) / 1e6
    kern = _join_ranges(kern.sort_values("start").reset_index(drop=True), ranges, schemas)
    return {"kernels": kern, "ranges": ranges, "gpu": gpu}


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
    dec = _with_ranges(rows, schemas)
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


def _join_ranges(kern: pd.DataFrame, ranges: pd.DataFrame, schemas: Iterable[RangeSchema]) -> pd.DataFrame:
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
    cols = [c for c in ranges.columns if c not in ("start", "end", "tid", "ms")]
    if not cols:
        cols = list(RANGE_COLUMNS)
    joined = ranges.reindex(columns=cols).reindex(idx).reset_index(drop=True)
    joined.loc[idx < 0, :] = None
    out = pd.concat([kern.reset_index(drop=True), joined], axis=1)
    for c in RANGE_COLUMNS:
        if c not in out:
            out[c] = None
    out["range"] = out["range"].fillna("")
    out["domain"] = out["domain"].fillna("")
    return out


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
