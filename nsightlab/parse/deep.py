"""A deep Nsight Compute report -> tidy frames: what each section says, and where the warps waited.

A *deep* report carries the sections that explain time (``nsightlab.core.metrics.DEEP_SECTIONS``):
the deep capture tier writes one (``deep.ncu-rep``), and so does anyone's ``ncu --set full`` (or
``--set detailed``, which lacks the per-instruction source counters). Seven frames, all keyed by
``launch`` (the launch's order in the report, as Nsight Compute numbers it in its CSV ``ID`` column):

- :func:`launches`: one row per profiled launch: its range columns, kernel name, duration and the
  sections the report holds for it.
- :func:`section_metrics`: one row per metric that a section shows: the section's identifier and
  name, ``part`` (``header``: the table on the details page; ``body``: its charts and tables),
  the metric's name, Nsight's label, unit and value, exactly as stored in the report.
- :func:`metric_values`: every numeric, non-instanced metric of every launch (long form), for
  the analysis' named quantities (stall reasons, pipes, bank conflicts) wherever a section shows them.
- :func:`sass_samples`: one row per SASS instruction with warp-state samples: address, SASS text,
  CUDA file and line (where the kernel was built with ``-lineinfo``), all and not-issued samples,
  and one ``stall_<reason>`` column per stall reason (samples), as Nsight's source page shows them.
- :func:`access_counts`: one row per global or shared memory instruction: the L2 sectors and shared-memory
  wavefronts it took against the ideal for its threads' bytes (the excess: uncoalesced access, bank conflicts),
  as the same page shows them.
- :func:`issue_counts`: one row per executed SASS instruction: how many times warps executed it, and its
  thread instructions, all and predicated on (the rest ran with their predicate false: issued for nothing),
  as the same page shows them.
- :func:`rule_results`: one row per result of Nsight Compute's rules (the guidance its details page leads with):
  section, rule, type, title, message (as the CLI prints it) and estimated speedup (local or global).
- :func:`instruction_mix`: executed warp instructions per SASS opcode and per opcode category, as the
  InstructionStats section's instanced metrics hold them.

:func:`read` gives any of them in one pass over the report.

Values are read from the report through the ``ncu-report`` package; nothing is recomputed, so the
tests can hold them against ``ncu --import R --csv --page details|raw|source``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from ..core import files
from ..core.errors import ProfileError
from ..core.metrics import BOTTLENECK_SECTIONS, DEEP_SECTIONS
from ..core.ranges import RangeSchema, registered
from . import isolated
from .ncu import ncu_action_range, open_report
from .range_columns import with_ranges

#: per-instruction warp-state sampling metrics (the SourceCounters section's source of truth)
PCSAMP_PREFIX = "smsp__pcsamp_warps_issue_stalled_"
PCSAMP_TOTAL = "smsp__pcsamp_sample_count"
#: per-instruction memory counters (the source page's "L2 Theoretical Sectors Global" and "L1 Wavefronts Shared"
#: columns, each with its Ideal and Excessive): column of :func:`access_counts` -> metric
ACCESS_METRICS = {
    "global_sectors": "memory_l2_theoretical_sectors_global",
    "global_sectors_ideal": "memory_l2_theoretical_sectors_global_ideal",
    "global_sectors_excessive": "derived__memory_l2_theoretical_sectors_global_excessive",
    "shared_wavefronts": "memory_l1_wavefronts_shared",
    "shared_wavefronts_ideal": "memory_l1_wavefronts_shared_ideal",
    "shared_wavefronts_excessive": "derived__memory_l1_wavefronts_shared_excessive",
}
#: per-instruction execution counts (the source page's "Instructions Executed", "Thread Instructions Executed" and
#: "Predicated-On Thread Instructions Executed"): column of :func:`issue_counts` -> metric
ISSUE_METRICS = {
    "inst_executed": "inst_executed",
    "thread_inst_executed": "thread_inst_executed",
    "thread_inst_executed_true": "thread_inst_executed_true",
}
#: the InstructionStats section's executed warp instructions by opcode: ``level`` of :func:`instruction_mix` -> metric
MIX_METRICS = {"opcode": "sass__inst_executed_per_opcode", "category": "sass__inst_executed_per_opcode_category"}
#: a rule message's type as Nsight Compute's CLI prints it in the details page's "Rule Type" column
#: (ncu_report's MsgType values: NONE, OK, OPTIMIZATION, WARNING, ERR)
RULE_TYPES = {0: "", 1: "INF", 2: "OPT", 3: "WRN", 4: "ERR"}
#: an estimated speedup's type as the CLI prints it ("Estimated Speedup Type"; ncu_report's SpeedupType values)
SPEEDUP_TYPES = {0: "", 1: "local", 2: "global"}


def _actions(path: Path) -> Iterator[tuple[int, Any, Any]]:
    ncu_report, ctx = open_report(path)
    launch = 0
    for ri in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(ri)
        for ai in range(rng.num_actions()):
            action = rng.action_by_idx(ai)
            if action.name() is None:
                raise ProfileError(f"{path}: launch {launch} has no kernel name or metrics; the report is truncated or corrupt")
            yield launch, ncu_report, action
            launch += 1


def _value(metric: Any) -> Any:
    """A metric's value as the report stores it: float for numbers, str for strings, None when empty."""
    if not metric.has_value():
        return None
    if metric.kind() == metric.ValueKind_STRING:
        return metric.as_string()
    return metric.as_double()


def launches(path: str | Path, schemas: Iterable[RangeSchema] = ()) -> pd.DataFrame:
    """One row per profiled launch: range columns, ``launch``, ``kernel``, ``kernel_full``, ``time_ns``,
    ``sections`` (the identifiers of the sections the report holds for it, sorted)."""
    return read(path, schemas, parts=("launches",))["launches"]


def section_metrics(path: str | Path) -> pd.DataFrame:
    """Every metric every section shows, per launch: ``launch``, ``section`` (identifier),
    ``section_name``, ``part`` (header|body), ``metric``, ``label``, ``unit``, ``value``."""
    return read(path, parts=("sections",))["sections"]


def metric_values(path: str | Path, pattern: str | None = None) -> pd.DataFrame:
    """Every numeric, non-instanced metric per launch (``pattern``: only names it matches):
    ``launch``, ``metric``, ``unit``, ``value``."""
    return read(path, parts=("values",), pattern=pattern)["values"]


def sass_samples(path: str | Path) -> pd.DataFrame:
    """One row per sampled SASS instruction of every launch that carries source counters: ``launch``,
    ``address``, ``sass``, ``file``, ``line``, ``samples``, ``samples_not_issued``, ``stall_<reason>``.
    Empty when the report holds no warp-state sampling (captured without the SourceCounters section)."""
    return read(path, parts=("sass",))["sass"]


def access_counts(path: str | Path) -> pd.DataFrame:
    """One row per global or shared memory instruction of every launch that carries source counters: ``launch``,
    ``address``, ``sass``, ``file``, ``line`` and the :data:`ACCESS_METRICS` columns: the L2 sectors a global access
    touched against the fewest its threads' bytes need (``_ideal``; the rest is ``_excessive``: uncoalesced), the
    shared-memory wavefronts against the ideal (the excess: bank conflicts), as Nsight's source page shows them."""
    return read(path, parts=("access",))["access"]


def rule_results(path: str | Path) -> pd.DataFrame:
    """One row per rule result with a message of every launch, in the report's order: ``launch``, ``section`` (identifier),
    ``rule`` (identifier), ``name``, ``type`` (``OPT``, ``INF``, ``WRN``, ``ERR``: :data:`RULE_TYPES`), ``title``,
    ``message`` (:func:`rule_text`: as Nsight Compute's CLI prints it), ``speedup_type`` (``local``, ``global`` or
    empty) and ``speedup`` (the estimated speedup in percent; NaN where the rule gives none), ``focus_metrics``
    (the metrics the rule read, comma-separated)."""
    return read(path, parts=("rules",))["rules"]


def instruction_mix(path: str | Path) -> pd.DataFrame:
    """Executed warp instructions of every launch by SASS opcode (``level`` ``opcode``) and by opcode category
    (``category``): ``launch``, ``level``, ``name``, ``inst_executed``, from :data:`MIX_METRICS`."""
    return read(path, parts=("mix",))["mix"]


_LINK = re.compile(r"@(url|section|sass|source):([^@]*)@")


def rule_text(message: str) -> str:
    """A rule message with its links written as the CLI writes them: ``@url:TEXT:ADDRESS@`` as ``TEXT (ADDRESS)``,
    ``@section:ID:TEXT@`` and ``@sass:ADDRESS:TEXT@`` as ``TEXT``, ``@source:FILE:LINE:TEXT@`` as ``TEXT``."""
    def link(m: re.Match[str]) -> str:
        kind, body = m[1], m[2]
        if kind == "url":
            text, _, address = body.partition(":")
            return f"{text} ({address})"
        return body.split(":", 3 if kind == "source" else 1)[-1]
    return _LINK.sub(link, message)


def issue_counts(path: str | Path) -> pd.DataFrame:
    """One row per SASS instruction that warps executed, of every launch that carries source counters: ``launch``,
    ``address``, ``sass``, ``file``, ``line`` and the :data:`ISSUE_METRICS` columns: warp-level executions, and the
    thread instructions they carried, all active threads and those whose predicate was true (an instruction
    whose threads are all predicated off is issued and does nothing), as Nsight's source page shows them."""
    return read(path, parts=("issue",))["issue"]


PARTS = ("launches", "sections", "values", "sass", "access", "issue", "rules", "mix")
_COLUMNS = {"sections": ["launch", "section", "section_name", "part", "metric", "label", "unit", "value"],
            "values": ["launch", "metric", "unit", "value"],
            "access": ["launch", "address", "sass", "file", "line", *ACCESS_METRICS],
            "issue": ["launch", "address", "sass", "file", "line", *ISSUE_METRICS],
            "rules": ["launch", "section", "rule", "name", "type", "title", "message", "speedup_type", "speedup",
                      "focus_metrics"],
            "mix": ["launch", "level", "name", "inst_executed"]}


def read(path: str | Path, schemas: Iterable[RangeSchema] = (), parts: Iterable[str] = PARTS,
         pattern: str | None = None) -> dict[str, pd.DataFrame]:
    """The frames ``parts`` names (of :data:`PARTS`: :func:`launches`, :func:`section_metrics`,
    :func:`metric_values`, :func:`sass_samples`, :func:`access_counts`, :func:`issue_counts`,
    :func:`rule_results`, :func:`instruction_mix`) read in one pass
    over the report, in a process of its own (:mod:`nsightlab.parse.isolated`: ncu-report keeps what it read
    until its process ends), or from the cache of an earlier read of the same report with the same arguments
    (below: :func:`_cache_file`)."""
    path, schemas, parts = Path(path), tuple(schemas), tuple(parts)
    bad = [x for x in parts if x not in PARTS]
    if bad:
        raise ValueError(f"deep.read: no part {bad}; the parts are {', '.join(PARTS)}")
    every = (*schemas, *registered())
    cached = _cache_file(path, parts, every, pattern)
    found = _cached_frames(cached)
    if found is None:
        rows = isolated.call(_rows, path, parts, every, pattern)
        # the launches as rows (with_ranges decodes them against the schemas of this call), the rest as frames
        found = {part: got if part == "launches" else pd.DataFrame(got, columns=_COLUMNS.get(part))
                 for part, got in rows.items()}
        _keep_frames(cached, found)
    out = {}
    for part, got in found.items():
        if part == "launches":
            out[part] = with_ranges(got, schemas)
            out[part].attrs["source"] = str(path)
        else:
            out[part] = got
    return out


# Reading a deep report takes seconds to tens of seconds (the helper process, Nsight's libraries, every launch's
# sections), and a page or `nsightlab why` opens the same report again and again. What a read found is kept in the
# cache folder (nsightlab.core.files.cache_dir: $NSIGHTLAB_CACHE, or ~/.cache/nsightlab) under a key made of the
# report's content, what was asked for, and the source of the code that reads it, so that a changed report or
# reader misses the cache instead of being served stale rows. A cache that can't be read or written is skipped.

@functools.cache
def _reader_version() -> str:
    """A digest of what decides :func:`_rows`' output and the cached frames' form: the source of the modules that
    read, and the versions of the report reader (ncu-report) and of pandas."""
    from importlib import metadata

    from ..core import ranges
    from . import ncu
    h = hashlib.sha256()
    for mod in (__file__, ncu.__file__, ranges.__file__):
        h.update(Path(mod).read_bytes())
    for package in ("ncu-report", "pandas"):
        try:
            h.update(f"{package} {metadata.version(package)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{package} absent".encode())
    return h.hexdigest()


def _cache_file(path: Path, parts: tuple[str, ...], schemas: tuple[RangeSchema, ...],
                pattern: str | None) -> Path | None:
    try:
        key = hashlib.sha256(files.sha256(path).encode())
        key.update(pickle.dumps((parts, pattern, schemas, _reader_version()), protocol=4))
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        return None  # no report to hash (the reader says why), or a schema that can't be pickled: no cache
    return files.cache_dir() / "deep-frames" / f"{key.hexdigest()[:40]}.pkl"


def _cached_frames(cached: Path | None) -> dict[str, Any] | None:
    if cached is None or not cached.is_file():
        return None
    try:
        with open(cached, "rb") as fh:
            found = pickle.load(fh)
        os.utime(cached)  # used now: the cache's cap removes the least recently used files first
    except Exception:  # a cut-short or foreign file: read the report instead
        return None
    return found if isinstance(found, dict) else None


def _keep_frames(cached: Path | None, found: dict[str, Any]) -> None:
    """Keep what a read found (the launches' rows, the other parts' frames) for the next read of the same question."""
    if cached is None:
        return
    tmp = None
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cached.parent, delete=False) as fh:
            tmp = fh.name
            pickle.dump(found, fh, protocol=4)
        os.replace(tmp, cached)  # whole or not at all: a reader beside this one never sees half a file
    except OSError:  # a read-only or full cache folder: the next read reads the report again
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        return
    files.trim_cache(keep=cached)  # the cache's cap holds for these frames too


def _rows(path: Path, parts: tuple[str, ...], schemas: tuple[RangeSchema, ...],
          pattern: str | None) -> dict[str, list[dict[str, Any]]]:
    """:func:`read`'s rows, each launch of the report visited once."""
    want = re.compile(pattern) if pattern else None
    out: dict[str, list[dict[str, Any]]] = {part: [] for part in parts}
    for launch, ncu_report, action in _actions(path):
        if "launches" in out:
            out["launches"].append(_launch_row(launch, ncu_report, action, schemas))
        if "sections" in out:
            out["sections"] += _section_rows(launch, action)
        if "values" in out:
            out["values"] += _value_rows(launch, action, want)
        if "sass" in out:
            out["sass"] += _sass_rows(launch, action)
        if "access" in out:
            out["access"] += _access_rows(launch, action)
        if "issue" in out:
            out["issue"] += _issue_rows(launch, action)
        if "rules" in out:
            out["rules"] += _rule_rows(launch, action)
        if "mix" in out:
            out["mix"] += _mix_rows(launch, action)
    if "launches" in out and not out["launches"]:
        raise ProfileError(f"{path}: holds no profiled kernel")
    return out


def _launch_row(launch: int, ncu_report: Any, action: Any, schemas: tuple[RangeSchema, ...]) -> dict[str, Any]:
    rname, domain = ncu_action_range(action, schemas)
    dur = action.metric_by_name("gpu__time_duration.sum")
    return {"range": rname, "domain": domain, "launch": launch, "kernel": action.name(),
            "kernel_full": action.name(ncu_report.IAction.NameBase_DEMANGLED),
            "time_ns": _value(dur) if dur is not None else None,
            "sections": tuple(sorted(s.identifier() for s in action.sections()))}


def _section_rows(launch: int, action: Any) -> list[dict[str, Any]]:
    rows = []
    for sec in action.sections():
        for part, metrics in (("header", sec.header_metrics()), ("body", sec.body_metrics())):
            for m in metrics or ():
                rows.append({"launch": launch, "section": sec.identifier(), "section_name": sec.name(),
                             "part": part, "metric": m.name(), "label": m.label(), "unit": m.unit(),
                             "value": _value(m)})
    return rows


_SKIP = ("device__", "nvlink__", "numa__", "c2clink__", "profiler__", "group:", "breakdown:")


def _value_rows(launch: int, action: Any, want: re.Pattern[str] | None) -> list[dict[str, Any]]:
    rows = []
    for name in action.metric_names():
        if name.startswith(_SKIP) or (want and not want.search(name)):
            continue
        m = action.metric_by_name(name)
        if m is None or m.kind() == m.ValueKind_STRING or not m.has_value() or m.num_instances() > 1:
            continue
        rows.append({"launch": launch, "metric": name, "unit": m.unit(), "value": m.as_double()})
    return rows


def _instanced(action: Any, name: str) -> dict[int, float]:
    """A per-instruction metric as {address: value}."""
    m = action.metric_by_name(name)
    if m is None or not m.has_correlation_ids():
        return {}
    ids = m.correlation_ids()
    return {ids.as_uint64(i): m.as_double(i) for i in range(m.num_instances())}


def _stall_names(action: Any) -> list[str]:
    """The stall reasons the report samples, in Nsight's order of names."""
    return sorted(n.removeprefix(PCSAMP_PREFIX) for n in action.metric_names()
                  if n.startswith(PCSAMP_PREFIX) and not n.endswith("_not_issued"))


def _instruction(launch: int, action: Any, pc: int) -> dict[str, Any]:
    """The columns every per-instruction row starts with: ``launch``, ``address``, ``sass`` and, where the kernel
    was built with line information, its CUDA ``file`` and ``line``."""
    info = action.source_info(pc)
    return {"launch": launch, "address": pc, "sass": (action.sass_by_pc(pc) or "").strip(),
            "file": info.file_name() if info is not None else None, "line": info.line() if info is not None else None}


def _sass_rows(launch: int, action: Any) -> list[dict[str, Any]]:
    total = _instanced(action, PCSAMP_TOTAL)
    if not total:
        return []
    reasons = _stall_names(action)
    per_reason = {r: _instanced(action, PCSAMP_PREFIX + r) for r in reasons}
    not_issued = {r: _instanced(action, f"{PCSAMP_PREFIX}{r}_not_issued") for r in reasons}
    rows = []
    for pc in sorted(total):
        row = _instruction(launch, action, pc)
        row.update(samples=total[pc], samples_not_issued=sum(not_issued[r].get(pc, 0.0) for r in reasons))
        for r in reasons:
            row[f"stall_{r}"] = per_reason[r].get(pc, 0.0)
        rows.append(row)
    return rows


def _counted_rows(launch: int, action: Any, metrics: dict[str, str], kept: Iterable[str]) -> list[dict[str, Any]]:
    """One row per instruction where any of the ``kept`` columns is non-zero: :func:`_instruction`'s columns and
    each of ``metrics`` (column -> per-instruction metric)."""
    counts = {col: _instanced(action, metric) for col, metric in metrics.items()}
    pcs = {pc for col in kept for pc, v in counts[col].items() if v}
    return [_instruction(launch, action, pc) | {col: got.get(pc, 0.0) for col, got in counts.items()}
            for pc in sorted(pcs)]


def _access_rows(launch: int, action: Any) -> list[dict[str, Any]]:
    return _counted_rows(launch, action, ACCESS_METRICS, ("global_sectors", "shared_wavefronts"))


def _issue_rows(launch: int, action: Any) -> list[dict[str, Any]]:
    # only where the SourceCounters section was collected (its warp sampling): a light report can carry
    # inst_executed per instruction too, hundreds of thousands of rows that no analysis of it reads
    if action.metric_by_name(PCSAMP_TOTAL) is None:
        return []
    return _counted_rows(launch, action, ISSUE_METRICS, ("inst_executed",))


def _rule_rows(launch: int, action: Any) -> list[dict[str, Any]]:
    rows = []
    for rule in action.rule_results():
        msg = rule.rule_message() if rule.has_rule_message() else None
        if not msg or int(msg["type"]) == 0:
            continue  # a rule that ran and had nothing to say: the CLI prints no row for it
        speedup = rule.speedup_estimation() if rule.has_speedup_estimation() else None
        rows.append({"launch": launch, "section": rule.section_identifier(), "rule": rule.rule_identifier(),
                     "name": rule.name(), "type": RULE_TYPES.get(int(msg["type"]), str(msg["type"])),
                     "title": msg["title"], "message": rule_text(msg["message"]),
                     "speedup_type": SPEEDUP_TYPES.get(int(speedup["type"]), "") if speedup else "",
                     "speedup": float(speedup["speedup"]) if speedup else float("nan"),
                     "focus_metrics": ", ".join(f["name"] for f in rule.focus_metrics())})
    return rows


def _mix_rows(launch: int, action: Any) -> list[dict[str, Any]]:
    rows = []
    for level, name in MIX_METRICS.items():
        m = action.metric_by_name(name)
        if m is None or not m.has_correlation_ids():
            continue
        ids = m.correlation_ids()
        rows += [{"launch": launch, "level": level, "name": ids.as_string(i), "inst_executed": m.as_double(i)}
                 for i in range(m.num_instances())]
    return rows


def missing_sections(held: Iterable[str], needed: Iterable[str] = BOTTLENECK_SECTIONS) -> list[str]:
    """The sections of ``needed`` that a launch (``held``: its section identifiers) lacks."""
    have = set(held)
    return [s for s in needed if s not in have]


def require_sections(frame: pd.DataFrame, what: str = "the bottleneck analysis",
                     needed: Iterable[str] = BOTTLENECK_SECTIONS) -> None:
    """Raise one clear line when no launch of ``frame`` (from :func:`launches`) holds ``needed``."""
    needed = tuple(needed)
    lacking = sorted({s for held in frame["sections"] for s in missing_sections(held, needed)})
    if lacking and not any(not missing_sections(held, needed) for held in frame["sections"]):
        src = frame.attrs.get("source", "the report")
        flags = " ".join(f"--section {s}" for s in DEEP_SECTIONS)
        raise ProfileError(f"{src}: {what} needs the Nsight Compute sections {', '.join(lacking)}, which this report "
                           f"lacks; capture with the deep tier (nsightlab capture ... --deep REGEX), or with "
                           f"ncu {flags} --import-source yes (or ncu --set full); a capture whose sweep has "
                           f"deep_skip (--deep-skip) leaves its sections out")
