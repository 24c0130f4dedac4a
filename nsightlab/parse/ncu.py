"""Nsight Compute -> tidy pandas frames (pure functions of a file path).

- :func:`ncu_frame` reads a ``.ncu-rep`` through the ``ncu-report`` package: one row per profiled
  kernel launch, every collected metric in its base unit (units in ``df.attrs["units"]``).
- :func:`ncu_csv_frame` reads ``ncu --import X --csv --page raw`` output the same way (the fallback,
  and the oracle the tests hold the first against); :func:`unit_scale` turns ncu's printed units
  into base units.

Every row carries the range columns of :mod:`nsightlab.parse.range_columns`.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.errors import ProfileError
from ..core.files import local_copy
from ..core.ranges import RangeSchema, decode, registered
from . import isolated
from .range_columns import DEFAULT_DOMAIN, with_ranges


def _import_ncu_report() -> Any:
    # Only PyPI's ncu-report: Nsight Compute 2025.3.1's bundled extras/python module took the process
    # down with a segmentation fault on a 491-kernel report (seen on the H200), so it is not a fallback.
    try:
        import ncu_report
    except ImportError:
        raise ProfileError("reading .ncu-rep files needs the ncu-report package: pip install ncu-report "
                           "(or export the report with 'ncu --import R --csv --page raw' and read that)") from None
    return ncu_report


def open_report(path: Path) -> tuple[Any, Any]:
    """(the ncu_report module, the opened report) of a .ncu-rep (or its compressed form)."""
    if not path.exists():
        raise ProfileError(f"{path}: no such Nsight Compute report")
    ncu_report = _import_ncu_report()
    local = local_copy(path)
    if local.stat().st_size == 0:
        raise ProfileError(f"{path}: empty file, not an Nsight Compute report")
    try:
        return ncu_report, ncu_report.load_report(str(local))
    except Exception as exc:  # noqa: BLE001 - the module raises its own exception types
        raise ProfileError(f"{path}: Nsight Compute cannot open it ({exc}); the file may be truncated") from None


def ncu_action_range(action: Any, schemas: Iterable[RangeSchema] = ()) -> tuple[str, str]:
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


def _launch_row(ncu_report: Any, action: Any, launch: int, metrics: list[str] | None, schemas: tuple[RangeSchema, ...],
                units: dict[str, str]) -> dict[str, Any]:
    """One launch's row (range, kernel names, metrics); the metrics' units go into ``units``."""
    names = metrics if metrics is not None else [m for m in action.metric_names() if not m.startswith(_SKIP_PREFIXES)]
    rname, domain = ncu_action_range(action, schemas)
    row: dict[str, Any] = {"range": rname, "domain": domain, "kernel": action.name(),
                           "kernel_full": action.name(ncu_report.IAction.NameBase_DEMANGLED), "launch": launch}
    for m in names:
        metric = action.metric_by_name(m)
        if metric is None:
            continue
        row[m] = metric.value()
        units.setdefault(m, metric.unit())
    return row


def ncu_frame(path: str | Path, metrics: list[str] | None = None, schemas: Iterable[RangeSchema] = ()) -> pd.DataFrame:
    """One row per kernel launch of a .ncu-rep (or .ncu-rep.xz / .gz): ``range``, ``domain``, decoded
    range fields, ``kernel``, ``kernel_full``, ``launch`` (order in the report) and one column per
    metric (base units; ``metrics`` None: every metric but the device attributes). The report is read
    in a process of its own (:mod:`nsightlab.parse.isolated`: ncu-report keeps what it read until its
    process ends)."""
    path = Path(path)
    schemas = tuple(schemas)
    rows, units = isolated.call(_launch_rows, path, metrics, (*schemas, *registered()))
    df = with_ranges(rows, schemas)
    df.attrs["units"] = units
    df.attrs["source"] = str(path)
    return df


def _launch_rows(path: Path, metrics: list[str] | None,
                 schemas: tuple[RangeSchema, ...]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """:func:`ncu_frame`'s rows (range names not yet decoded) and the metrics' units, read from the report."""
    ncu_report, ctx = open_report(path)
    rows: list[dict[str, Any]] = []
    units: dict[str, str] = {}
    for ri in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(ri)
        for ai in range(rng.num_actions()):
            action = rng.action_by_idx(ai)
            if action.name() is None:  # what a report cut short leaves behind: an action without name or metrics
                raise ProfileError(f"{path}: launch {len(rows)} has no kernel name or metrics; the report is truncated "
                                   "or corrupt (re-export it, or re-capture)")
            rows.append(_launch_row(ncu_report, action, len(rows), metrics, schemas, units))
    if not rows:
        raise ProfileError(f"{path}: holds no profiled kernel (an empty or truncated report: Nsight Compute "
                           "reads a report cut short as one with no launches)")
    return rows, units


def ncu_device(path: str | Path) -> dict[str, Any]:
    """The device attributes (``device__attribute_*``, without the prefix) of a report's first launch
    (read in a process of its own, as :func:`ncu_frame`)."""
    return isolated.call(_device, Path(path))


def _device(path: Path) -> dict[str, Any]:
    _, ctx = open_report(path)
    try:
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


# --------------------------------------------------------------------------- ncu's raw CSV export

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


def _csv_table(path: Path) -> tuple[list[str], list[str], list[list[str]]]:
    """(header, unit row, data rows) of an ncu raw CSV export, every row checked for its width."""
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
    return header, unit_row, data


def ncu_csv_frame(path: str | Path, schemas: Iterable[RangeSchema] = ()) -> pd.DataFrame:
    """The ``ncu --csv --page raw`` export as the same frame as :func:`ncu_frame` (base units);
    ``df.attrs["printed"]`` keeps the strings and units as printed, for digit-exact comparison."""
    path = Path(path)
    header, unit_row, data = _csv_table(path)
    rcol = next((i for i, h in enumerate(header) if "Push/Pop_Range" in h), None)
    kcol = header.index("Kernel Name")
    first_metric = next((i for i, h in enumerate(header) if "__" in h), len(header))
    scales = [unit_scale(u)[0] for u in unit_row]
    out, printed = [], []
    for launch, r in enumerate(data):
        name, domain = csv_range(r[rcol]) if rcol is not None else ("", "")
        row: dict[str, Any] = {"range": name, "domain": domain, "kernel_full": r[kcol], "launch": launch}
        for i in range(first_metric, len(header)):
            try:
                row[header[i]] = parse_number(r[i]) * scales[i]
            except ValueError:
                row[header[i]] = r[i]
        out.append(row)
        printed.append({header[i]: (r[i], unit_row[i]) for i in range(first_metric, len(header))})
    df = with_ranges(out, schemas)
    df.attrs["printed"] = printed
    df.attrs["source"] = str(path)
    return df
