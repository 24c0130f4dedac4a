"""Import Nsight reports captured anywhere into a capture folder of the profile store.

    python -m nsightlab.import theirs.ncu-rep timeline.nsys-rep --profiles profiles --name theirs

Accepts Nsight Compute reports (``.ncu-rep``, ``.ncu-rep.xz``, ``.ncu-rep.gz``) and Nsight Systems SQLite
exports (``.sqlite``, ``.sqlite.xz``, ``.sqlite.gz``), whatever their range names, domains and metric sets, kernels outside
every range included; a ``.nsys-rep`` is exported to SQLite with ``nsys export --type sqlite`` where
``nsys`` is found (else the error says to export it with nsys first). The result is
``<profiles>/<gpu-slug>/<name>/`` with ``manifest.json`` (schema 2, ``origin: "imported"``), shaped
like the suite's own captures, so that ``store validate``, the parsers and the reports read it.

Everything is written into a temporary folder under ``<profiles>`` and moved into place only when
complete; a failure removes it and leaves any earlier folder of the same name as it was. A capture that
already exists under that name is never replaced unless ``--replace`` is given: then it is moved to
``<profiles>/<gpu>/.replaced-<name>-<time>/`` while the new one moves in, and removed once it is in place.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..core import ranges, tools
from ..core.errors import ProfileError
from ..core.files import local_copy, place, sha256
from ..core.ranges import RangeSchema
from ..parse.ncu import ncu_device, ncu_frame
from ..parse.ncu_session import ncu_session, ncu_settings
from ..parse.nsys import nsys_tables
from . import captures as store
from . import manifest as capture_manifest

#: what the importer reads, by how the file name ends
NCU_SUFFIXES = (".ncu-rep", ".ncu-rep.xz", ".ncu-rep.gz")
SQLITE_SUFFIXES = (".sqlite", ".sqlite.xz", ".sqlite.gz")
NSYS_REP_SUFFIX = ".nsys-rep"
ACCEPTED = (*NCU_SUFFIXES, *SQLITE_SUFFIXES, NSYS_REP_SUFFIX)
#: a capture name: one folder name that store.list_captures lists (it skips names starting with . or _)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")


def _suffix(path: Path) -> str | None:
    name = path.name.lower()
    return next((s for s in sorted(ACCEPTED, key=len, reverse=True) if name.endswith(s)), None)


def default_name(path: str | Path) -> str:
    """The capture name for a report: its file name without the report suffix, made folder-safe."""
    p = Path(path)
    suf = _suffix(p)
    stem = p.name[: -len(suf)] if suf else p.stem
    stem = re.sub(r"[^A-Za-z0-9._+-]+", "-", stem).lstrip("._-")[:100]
    return stem or "imported"


def check_name(name: str) -> str:
    if not _NAME.match(name or ""):
        raise ProfileError(f"capture name {name!r}: use letters, digits and . _ + - only, starting with a letter or "
                           "digit, at most 100 characters")
    return name


# --------------------------------------------------------------------------- what each kind of report says


#: manifest gpu key -> ncu device attribute (device__attribute_<name>)
NCU_GPU = {"name": "display_name", "sm_count": "multiprocessor_count", "l2_bytes": "l2_cache_size",
           "total_memory_bytes": "total_memory", "clock_rate_khz": "clock_rate",
           "max_gpu_frequency_khz": "max_gpu_frequency_khz", "memory_clock_rate_khz": "memory_clock_rate",
           "max_mem_frequency_khz": "max_mem_frequency_khz", "memory_bus_width_bits": "global_memory_bus_width",
           "shared_memory_per_block_optin": "max_shared_memory_per_block_optin",
           "shared_memory_per_sm": "max_shared_memory_per_multiprocessor",
           "registers_per_sm": "max_registers_per_multiprocessor", "max_warps_per_sm": "max_warps_per_multiprocessor",
           "warp_size": "warp_size", "ecc_enabled": "ecc_enabled"}
#: manifest gpu key -> nsys TARGET_INFO_GPU column (and a scale to the manifest's unit)
NSYS_GPU = {"name": ("name", None), "sm_count": ("smCount", None), "l2_bytes": ("l2CacheSize", None),
            "total_memory_bytes": ("totalMemory", None), "clock_rate_khz": ("clockRate", 1e-3),
            "memory_bandwidth_bytes_per_s": ("memoryBandwidth", None),
            "shared_memory_per_block_optin": ("maxShmemPerBlockOptin", None), "shared_memory_per_sm": ("maxShmemPerSm", None),
            "registers_per_sm": ("maxRegistersPerSm", None), "max_warps_per_sm": ("maxWarpsPerSm", None),
            "chip": ("chipName", None)}
#: environment key -> nsys TARGET_INFO_SYSTEM_ENV name (only these: the table also holds the whole process environment)
NSYS_ENV = {"driver": "NvDriverVersion", "cuda": "CudaDriverVersion", "host": "Hostname", "os": "OsDescription"}


def _plain(v: Any) -> Any:
    """A JSON-ready scalar (numpy ints and floats to Python's; whole floats to int)."""
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


@dataclass
class Report:
    """One input report: where it came from, what it is stored as, and what it says."""

    path: Path
    kind: str  # "ncu" | "nsys"
    stored: str = ""
    rep_stored: str | None = None  # the copied .nsys-rep, when the SQLite was exported from one
    readable: Path | None = None  # the file the parsers read (the export, for a .nsys-rep)
    gpu_names: list[str] = field(default_factory=list)
    gpu: dict[str, Any] = field(default_factory=dict)
    gpu_source: dict[str, str] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    env_source: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    range_names: set[str] = field(default_factory=set)


def _named(path: Path, exc: ProfileError) -> ProfileError:
    """``exc`` with the report's path in front when its message does not name it already."""
    text = str(exc)
    return exc if str(path) in text or path.name in text else ProfileError(f"{path}: {text}")


def describe_ncu(rep: Report) -> None:
    """Open a .ncu-rep with the parsers (every launch), and read its GPU, metrics and session."""
    try:
        frame = ncu_frame(rep.readable)  # type: ignore[arg-type]
        per_launch = ncu_frame(rep.readable, metrics=["device__attribute_display_name",  # type: ignore[arg-type]
                                                      "profiler__replayer_passes"])
        dev = ncu_device(rep.readable)  # type: ignore[arg-type]
    except ProfileError as exc:
        raise _named(rep.path, exc) from None
    names = per_launch.get("device__attribute_display_name")
    rep.gpu_names = sorted({str(n) for n in names.dropna()}) if names is not None else []
    if not rep.gpu_names and dev.get("display_name"):
        rep.gpu_names = [str(dev["display_name"])]
    src = f"ncu device__attribute_* of the first launch ({rep.path.name})"
    for key, attr in NCU_GPU.items():
        if attr in dev and dev[attr] is not None:
            rep.gpu[key] = _plain(dev[attr])
            rep.gpu_source[key] = src.replace("*", attr, 1)
    if "compute_capability_major" in dev:
        rep.gpu["compute_capability"] = f"{int(dev['compute_capability_major'])}.{int(dev.get('compute_capability_minor', 0))}"
        rep.gpu_source["compute_capability"] = src.replace("*", "compute_capability_major/minor", 1)
    if "memory_clock_rate_khz" in rep.gpu and "memory_bus_width_bits" in rep.gpu:
        rep.gpu["memory_bandwidth_bytes_per_s"] = int(2 * rep.gpu["memory_clock_rate_khz"] * 1e3
                                                      * rep.gpu["memory_bus_width_bits"] / 8)
        rep.gpu_source["memory_bandwidth_bytes_per_s"] = (
            f"2 x memory_clock_rate x global_memory_bus_width / 8 (CUDA's peak formula, double data rate) from {src}")
    session = ncu_session(rep.readable)  # type: ignore[arg-type]
    for key in ("cuda", "host", "os", "cpu", "captured_utc"):
        if session.get(key):
            rep.env[key] = session[key]
            rep.env_source[key] = f"ncu session info ({rep.path.name})"
    passes = per_launch.get("profiler__replayer_passes")
    rep.range_names = {r for r in frame["range"] if r}
    units = frame.attrs.get("units", {})
    rep.info = {"version": session.get("version"), "metrics": sorted(units), "kernels_profiled": len(frame),
                "ranges": int(frame.loc[frame["range"] != "", "range"].nunique()),
                "kernels_outside_ranges": int((frame["range"] == "").sum()),
                "domains": sorted({d for d in frame["domain"] if d}),
                "max_passes_per_kernel": _plain(passes.max()) if passes is not None and passes.notna().any() else None,
                "command": session.get("command"), **ncu_settings(session.get("command"))}


def _sqlite_rows(path: Path, query: str) -> list[tuple]:
    try:
        con = sqlite3.connect(f"file:{local_copy(path)}?mode=ro", uri=True)
        try:
            return con.execute(query).fetchall()
        finally:
            con.close()
    except sqlite3.DatabaseError:
        return []


def _nsys_gpu(rep: Report, kern: pd.DataFrame, gpu: pd.DataFrame) -> None:
    """The GPU the kernels ran on, from TARGET_INFO_GPU (the devices the kernels name, else every one)."""
    if not len(gpu) or "name" not in gpu:
        return
    used = gpu
    dev_col = "cuDevice" if "cuDevice" in gpu else "id" if "id" in gpu else None
    if dev_col and "deviceId" in kern:
        sel = gpu[gpu[dev_col].isin(set(kern["deviceId"].dropna()))]
        used = sel if len(sel) else gpu
    rep.gpu_names = sorted({str(n) for n in used["name"].dropna()})
    row = used.iloc[0].to_dict()
    for key, (col, scale) in NSYS_GPU.items():
        if col in row and row[col] is not None and row[col] == row[col]:
            rep.gpu[key] = _plain(row[col] * scale if scale else row[col])
            rep.gpu_source[key] = f"nsys TARGET_INFO_GPU.{col} ({rep.path.name})"
    if "computeMajor" in row:
        rep.gpu["compute_capability"] = f"{int(row['computeMajor'])}.{int(row.get('computeMinor', 0))}"
        rep.gpu_source["compute_capability"] = f"nsys TARGET_INFO_GPU.computeMajor/computeMinor ({rep.path.name})"


def _nsys_environment(rep: Report, path: Path) -> None:
    """Driver, CUDA, host, OS (TARGET_INFO_SYSTEM_ENV) and the capture's start time."""
    env = dict(_sqlite_rows(path, "SELECT name, value FROM TARGET_INFO_SYSTEM_ENV WHERE name IN "
                                  f"({', '.join(repr(v) for v in NSYS_ENV.values())})"))
    for key, name in NSYS_ENV.items():
        if env.get(name):
            value = str(env[name])
            if key == "cuda" and value.isdigit():  # 13000 -> 13.0, as CUDA prints its version
                value = f"{int(value) // 1000}.{int(value) % 1000 // 10}"
            rep.env[key] = value
            rep.env_source[key] = f"nsys TARGET_INFO_SYSTEM_ENV.{name} ({rep.path.name})"
    start = _sqlite_rows(path, "SELECT utcTime FROM TARGET_INFO_SESSION_START_TIME")
    if start and start[0][0]:
        rep.env["captured_utc"] = str(start[0][0])
        rep.env_source["captured_utc"] = f"nsys TARGET_INFO_SESSION_START_TIME ({rep.path.name})"


def _nsys_application(path: Path) -> list[str]:
    """The profiled application's command line (META_DATA_CAPTURE's first process), [] where unknown."""
    capture = _sqlite_rows(path, "SELECT name, value FROM META_DATA_CAPTURE "
                                 "WHERE name = 'PROCESS_0:COMMAND' OR name LIKE 'PROCESS_0:ARGUMENT_%'")
    argv = [v for k, v in capture if k == "PROCESS_0:COMMAND"]
    args = [(k.rsplit("_", 1)[1], v) for k, v in capture if k.startswith("PROCESS_0:ARGUMENT_")]
    return argv + [v for _, v in sorted(args, key=lambda nv: int(nv[0]) if nv[0].isdigit() else 0)]


def describe_nsys(rep: Report) -> None:
    """Open an nsys SQLite export with the parsers, and read its GPU, versions and environment."""
    path: Path = rep.readable  # type: ignore[assignment]
    try:
        t = nsys_tables(path)
    except ProfileError as exc:
        raise _named(rep.path, exc) from None
    kern, ranges = t["kernels"], t["ranges"]
    if kern.empty:
        raise ProfileError(f"{rep.path}: holds no profiled kernel (no row in its CUPTI_ACTIVITY_KIND_KERNEL table; "
                           "was it captured with --trace=cuda?)")
    _nsys_gpu(rep, kern, t["gpu"])
    _nsys_environment(rep, path)
    meta = dict(_sqlite_rows(path, "SELECT name, value FROM META_DATA_EXPORT"))
    rep.range_names = {r for r in ranges["range"] if r} if len(ranges) else set()
    rep.info = {"version": meta.get("EXPORT_PRODUCT_VERSION"), "export_schema_version": meta.get("EXPORT_SCHEMA_VERSION"),
                "kernels": len(kern), "ranges": len(ranges),
                "range_names": int(ranges["range"].nunique()) if len(ranges) else 0,
                "kernels_outside_ranges": int((kern["range"] == "").sum()),
                "domains": sorted({d for d in ranges["domain"] if d}) if len(ranges) else [],
                "application": _nsys_application(path) or None}


# --------------------------------------------------------------------------- importing


def export_nsys_rep(src: Path, out: Path, nsys: Path) -> list[str]:
    """``nsys export --type sqlite`` of ``src`` into ``out``; returns the command line."""
    cmd = [str(nsys), "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(src)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ProfileError(f"{src}: 'nsys export --type sqlite' could not run ({exc})") from None
    if res.returncode != 0 or not out.exists():
        tail = " | ".join((res.stdout + res.stderr).strip().splitlines()[-3:])
        raise ProfileError(f"{src}: 'nsys export --type sqlite' failed (status {res.returncode}): {tail or 'no output'}")
    return cmd


def reports_in(folder: Path) -> list[Path]:
    """The reports in ``folder`` and below (every accepted suffix), sorted by path; ProfileError when there are none."""
    found = sorted(p for p in folder.rglob("*") if p.is_file() and _suffix(p) is not None
                   and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    if not found:
        raise ProfileError(f"{folder}: a folder with no report in it; accepted: {', '.join(ACCEPTED)}")
    return found


def expand(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """``paths`` with each folder replaced by the reports in it (:func:`reports_in`)."""
    return [r for p in map(Path, paths) for r in (reports_in(p) if p.is_dir() else [p])]


def _classify(paths: Sequence[str | os.PathLike]) -> list[Report]:
    if not paths:
        raise ProfileError(f"no report given; accepted: {', '.join(ACCEPTED)}")
    reports = []
    for p in map(Path, paths):
        if not p.exists():
            raise ProfileError(f"{p}: no such file")
        if not p.is_file():
            raise ProfileError(f"{p}: not a file")
        suf = _suffix(p)
        if suf is None:
            raise ProfileError(f"{p}: not a report this importer reads; accepted: {', '.join(ACCEPTED)} "
                               "(Nsight Compute reports, Nsight Systems SQLite exports or .nsys-rep)")
        reports.append(Report(p, "ncu" if suf in NCU_SUFFIXES else "nsys"))
    return reports


def _merge(reports: list[Report], attr: str, source_attr: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Merge the reports' ``gpu``/``env`` dicts: the first report that says a value wins (ncu first)."""
    out: dict[str, Any] = {}
    src: dict[str, str] = {}
    for rep in sorted(reports, key=lambda r: r.kind != "ncu"):
        for k, v in getattr(rep, attr).items():
            if k not in out:
                out[k] = v
                src[k] = getattr(rep, source_attr)[k]
    return out, src


def _nsys_for(reports: list[Report], nsys: str | os.PathLike | None) -> Path | None:
    """The nsys that exports the reports' .nsys-rep files; None when there are none."""
    rep = next((r.path for r in reports if r.path.name.lower().endswith(NSYS_REP_SUFFIX)), None)
    if rep is None:
        return None
    try:
        return tools.find_nsys(nsys)
    except tools.ToolError as exc:
        raise tools.ToolError(f"{rep}: a .nsys-rep is read through its SQLite export, which needs Nsight Systems, "
                              f"and it is not available here ({exc}). Export it with nsys first: "
                              f"'nsys export --type sqlite -o {default_name(rep)}.sqlite {rep.name}', "
                              "then import the .sqlite") from None


def _stage(rep: Report, base: str, tmp: Path, nsys_exe: Path | None, commands: list[dict[str, Any]]) -> None:
    """Name the report's file in the capture (``base`` + its suffix) and what the parsers read: a
    .nsys-rep is copied and exported to SQLite in ``tmp``, any other report is read where it is."""
    if not rep.path.name.lower().endswith(NSYS_REP_SUFFIX):
        rep.stored = base + (_suffix(rep.path) or "")
        rep.readable = rep.path  # parse the user's own file, so that errors name it
        return
    rep.rep_stored = base + NSYS_REP_SUFFIX
    shutil.copyfile(rep.path, tmp / rep.rep_stored)
    rep.stored = base + ".sqlite"
    t0 = time.monotonic()
    cmd = export_nsys_rep(tmp / rep.rep_stored, tmp / rep.stored, nsys_exe)  # type: ignore[arg-type]
    commands.append({"step": "nsys export", "argv": cmd, "seconds": round(time.monotonic() - t0, 2), "returncode": 0})
    rep.readable = tmp / rep.stored


def _one_gpu(reports: list[Report]) -> str:
    """The one GPU every report ran on; ProfileError where a report names none, or several, or they differ."""
    for rep in reports:
        if not rep.gpu_names:
            raise ProfileError(f"{rep.path}: does not say which GPU it ran on (no device attributes / TARGET_INFO_GPU)")
        if len(rep.gpu_names) > 1:
            raise ProfileError(f"{rep.path}: holds kernels of several GPUs ({', '.join(map(repr, rep.gpu_names))}); "
                               "a capture folder is one GPU's")
    first = reports[0]
    for rep in reports[1:]:
        if rep.gpu_names[0] != first.gpu_names[0]:
            raise ProfileError(f"the reports are from different GPUs: {first.gpu_names[0]!r} ({first.path}) and "
                               f"{rep.gpu_names[0]!r} ({rep.path}); import each GPU's reports separately")
    return first.gpu_names[0]


def _describe(rep: Report, plugins: Sequence[str] = ()) -> Report:
    """Read one report (a Dask task where several are read at once: the plug-ins loaded in its process too)."""
    if plugins:
        from ..problems.impls import load_plugins

        load_plugins(list(plugins))
    (describe_ncu if rep.kind == "ncu" else describe_nsys)(rep)
    _one_gpu([rep])  # a report of several GPUs is said as such, naming it
    return rep


def describe_all(reports: list[Report], jobs: int = 1, plugins: Sequence[str] = ()) -> list[Report]:
    """Every report read (:func:`describe_ncu`, :func:`describe_nsys`), ``jobs`` at once in worker processes of a
    Dask LocalCluster (the readers hold the GIL and Nsight's reader is not known to be thread-safe); in order. The
    first report that does not read (in the given order) raises its error."""
    if jobs <= 1 or len(reports) < 2:
        return [_describe(r, plugins) for r in reports]
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=min(jobs, len(reports)), threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=40) as cluster, Client(cluster) as client:
        futures = [client.submit(_describe, r, tuple(plugins), pure=False) for r in reports]
        client.gather(futures, errors="skip")
        for f in futures:  # the first failure in the reports' order
            if f.status == "error":
                raise f.exception()
        return client.gather(futures)


def _fill(tmp: Path, reports: list[Report], nsys_exe: Path | None, commands: list[dict[str, Any]], name: str,
          description: str | None, stamp: str, jobs: int = 1, plugins: Sequence[str] = ()) -> str:
    """Read every report and write the capture into ``tmp`` (files, manifest, compacted, checked);
    returns the GPU's name."""
    count = {"ncu": 0, "nsys": 0}
    for rep in reports:
        count[rep.kind] += 1
        _stage(rep, rep.kind if count[rep.kind] == 1 else f"{rep.kind}-{count[rep.kind]}", tmp, nsys_exe, commands)
    reports[:] = describe_all(reports, jobs, plugins)
    gpu_name = _one_gpu(reports)
    for rep in reports:
        if not (tmp / rep.stored).exists():
            shutil.copyfile(rep.path, tmp / rep.stored)
    capture_manifest.write(tmp, _manifest(reports, name, description, commands, stamp))
    store.validate(tmp, open_reports=False)
    return gpu_name


def import_reports(paths: Sequence[str | os.PathLike], profiles: str | os.PathLike = "profiles", name: str | None = None,
                   nsys: str | os.PathLike | None = None, *, description: str | None = None,
                   argv: Sequence[str] | None = None, replace: bool = False, jobs: int = 1,
                   plugins: Sequence[str] = ()) -> Path:
    """Import ``paths`` into ``<profiles>/<gpu-slug>/<name>/`` and return that folder. An existing folder
    there is replaced only with ``replace`` (kept in a dated backup until the new one is in place). A folder among
    ``paths`` stands for the reports in it (:func:`reports_in`); ``jobs``: reports read at once (``plugins``: the
    modules the readers' processes load).

    Raises ProfileError (missing file, unknown suffix, bad name, a report that does not open or
    holds no kernel, reports of different GPUs, a capture of that name that exists and no ``replace``)
    or tools.ToolError (a .nsys-rep and no nsys)."""
    reports = _classify(expand(paths))
    if name is None and len(paths) == 1 and Path(paths[0]).is_dir():
        name = default_name(Path(paths[0]).resolve().name)
    name = check_name(name) if name is not None else default_name(reports[0].path)
    nsys_exe = _nsys_for(reports, nsys)
    profiles = Path(profiles).resolve()
    if profiles.exists() and not profiles.is_dir():
        raise ProfileError(f"--profiles {profiles}: is a file, not a folder; accepted: a profile store folder "
                           "(created if missing)")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    tmp = profiles / f".tmp-import-{name}-{stamp}-{os.getpid()}"
    commands: list[dict[str, Any]] = [{"step": "import", "argv": ["python", "-m", "nsightlab.import", *(
        argv if argv is not None else [*map(str, paths), "--profiles", str(profiles), "--name", name])]}]
    tmp.mkdir(parents=True)
    try:
        gpu_name = _fill(tmp, reports, nsys_exe, commands, name, description, stamp, jobs, plugins)
        dest = profiles / store.gpu_slug(gpu_name) / name
        place(tmp, dest, replace=replace)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _manifest(reports: list[Report], name: str, description: str | None, commands: list[dict[str, Any]],
              stamp: str) -> dict[str, Any]:
    gpu, gpu_src = _merge(reports, "gpu", "gpu_source")
    env, env_src = _merge(reports, "env", "env_source")
    gpu["name"] = reports[0].gpu_names[0]
    gpu["source"] = gpu_src
    env["source"] = env_src
    ncu = [r for r in reports if r.kind == "ncu"]
    nsys = [r for r in reports if r.kind == "nsys"]
    ncu_info: dict[str, Any] = {}
    if ncu:
        first = ncu[0].info
        ncu_info = {"version": first["version"],
                    "metrics": sorted({m for r in ncu for m in r.info["metrics"]}),
                    "kernels_profiled": sum(r.info["kernels_profiled"] for r in ncu),
                    "kernels_outside_ranges": sum(r.info["kernels_outside_ranges"] for r in ncu),
                    "ranges": sum(r.info["ranges"] for r in ncu),
                    "domains": sorted({d for r in ncu for d in r.info["domains"]}),
                    "max_passes_per_kernel": max((r.info["max_passes_per_kernel"] for r in ncu
                                                  if r.info["max_passes_per_kernel"] is not None), default=None),
                    "clock_control": first["clock_control"], "replay_mode": first["replay_mode"],
                    "cache_control": first["cache_control"], "set": first["set"],
                    "command": first["command"],
                    "source": ncu[0].path.name, "files": [r.stored for r in ncu],
                    "reports": [{"file": r.stored, "source": r.path.name, **{k: r.info[k] for k in (
                        "version", "kernels_profiled", "clock_control", "replay_mode")}} for r in ncu],
                    "reader": _ncu_report_version()}
    nsys_info: dict[str, Any] = {}
    if nsys:
        first = nsys[0].info
        nsys_info = {"version": first["version"], "export_schema_version": first["export_schema_version"],
                     "kernels": sum(r.info["kernels"] for r in nsys), "ranges": sum(r.info["ranges"] for r in nsys),
                     "kernels_outside_ranges": sum(r.info["kernels_outside_ranges"] for r in nsys),
                     "domains": sorted({d for r in nsys for d in r.info["domains"]}),
                     "application": first["application"],
                     "source": nsys[0].path.name, "files": [r.stored for r in nsys],
                     "nsys_reps": [r.rep_stored for r in nsys if r.rep_stored]}
    used = [t for t, group in (("ncu", ncu), ("nsys", nsys)) if group]
    names = ", ".join(r.path.name for r in reports)
    return capture_manifest.build(
        name=name, description=description or f"imported from {names}", origin="imported", created=stamp, gpu=gpu,
        environment=env, tools=used, range_schemas=_schemas_used(reports), commands=commands,
        ncu=ncu_info, nsys=nsys_info, cases=[],
        imported_from=[{"name": r.path.name, "bytes": r.path.stat().st_size, "sha256": sha256(r.path),
                        "stored_as": r.rep_stored or r.stored} for r in reports])


def _schemas_used(reports: list[Report]) -> list[RangeSchema]:
    """The registered range schemas (those of loaded plug-ins) that decode some range name of the
    reports: recorded in the manifest, so that the reports decode those names with them."""
    names = {n for r in reports for n in r.range_names}
    return [s for s in ranges.registered() if any(s.parse(n) is not None for n in names)]


def _ncu_report_version() -> str | None:
    try:
        from importlib.metadata import version

        return f"ncu-report {version('ncu-report')}"
    except Exception:  # noqa: BLE001 - only a label
        return None
