"""The profile store: profiles/<gpu>/<suite>/ folders, each self-described by a manifest; the benchmark CSVs
beside it, read as cases of the problem their manifest names (:func:`load_bench`: the columns it checks are
the problem's, :mod:`nsightlab.problems`, never a particular problem's)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.errors import ProfileError
from ..core.files import COMPRESSIONS, MANIFEST, file_table, sha256, uncompressed_name, write_xz
from ..core.ranges import format_options
from ..parse.ncu import ncu_csv_frame, ncu_frame
from ..parse.nsys import nsys_tables
from ..problems import problem as problems


@dataclass(frozen=True)
class Capture:
    gpu: str
    suite: str
    path: Path

    @property
    def label(self) -> str:
        return f"{self.gpu}/{self.suite}"


def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200' (the folder name of a GPU's captures)."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug or "unknown-gpu"


def shown_path(path: Path | str) -> str:
    """``path`` as text that can be printed and written anywhere: bytes of a name that are not UTF-8 as
    ``\\xNN`` escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a name whose bytes are not UTF-8 (os.fsdecode's surrogate escapes)
        return False
    return True


def list_captures(root: Path, skipped: list[str] | None = None) -> list[Capture]:
    """Every <gpu>/<suite> folder under ``root`` (names starting with . or _ left out: backups, temporary
    and failed captures). A folder whose name is not UTF-8 cannot be named on a page: it is left out, and,
    where ``skipped`` is given, one line saying so is appended to it. ProfileError when ``root`` is missing
    or is a file."""
    root = Path(root)
    if not root.is_dir():
        what = "is a file, not a folder" if root.exists() else "does not exist"
        raise ProfileError(f"profile folder {shown_path(root)} {what}; accepted: a folder of <gpu>/<capture>/ "
                           "folders, as nsightlab capture and import write them")
    out = []
    for gpu in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        for suite in sorted(p for p in gpu.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
            if _utf8(gpu.name) and _utf8(suite.name):
                out.append(Capture(gpu.name, suite.name, suite))
            elif skipped is not None:
                skipped.append(f"{shown_path(suite)}: skipped: its folder name is not UTF-8 (rename it with "
                               "letters, digits and . _ + -)")
    return out


#: the columns every benchmark CSV has, whatever its problem; besides them, its problem's key fields (the
#: parameters every case has: :attr:`nsightlab.problems.problem.Problem.required_fields`)
REQUIRED_COLUMNS = ("suite", "config", "dtype", "impl", "kind", "pass", "status", "ms", "tflops")


def write_bench(rows: list[dict[str, Any]], out_dir: Path, suite: str, fields: list[str],
                manifest: dict[str, Any]) -> Path:
    """Write one benchmark suite as :func:`load_bench` reads it: ``<suite>.csv`` (columns ``fields``, which must
    hold :data:`REQUIRED_COLUMNS`; floats to 6 significant digits, NaN as empty) and ``<suite>.manifest.json``
    (``manifest``: it names the problem and the plug-ins that register it), each written to a temporary file
    and renamed into place, so that no half-written suite is ever read. Returns the CSV's path."""
    import csv
    import math
    import tempfile

    missing = [c for c in REQUIRED_COLUMNS if c not in fields]
    if missing:
        raise ValueError(f"a benchmark CSV needs the columns {list(REQUIRED_COLUMNS)}; {missing} are not among {fields}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / f"{suite}.csv"
    with tempfile.NamedTemporaryFile("w", dir=out_dir, suffix=".tmp", delete=False, newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) and not math.isnan(v) else
                            ("" if isinstance(v, float) else v)) for k, v in r.items()})
        tmp = fh.name
    os.replace(tmp, csv_path)
    with tempfile.NamedTemporaryFile("w", dir=out_dir, suffix=".tmp", delete=False) as fh:
        json.dump(manifest, fh, indent=2, default=str)
        tmp = fh.name
    os.replace(tmp, out_dir / f"{suite}.manifest.json")
    return csv_path


def bench_csvs(capture: Path) -> list[Path]:
    """The CSVs of a capture folder, stored plain or compacted (``X.csv.xz``, ``X.csv.gz``), by name."""
    return sorted(p for p in Path(capture).iterdir() if p.is_file() and uncompressed_name(p.name).endswith(".csv"))


def bench_suite(csv: Path) -> str:
    """The suite of a benchmark CSV: ``<suite>`` of ``<suite>.csv[.xz|.gz]``."""
    return uncompressed_name(csv.name)[: -len(".csv")]


def bench_manifest(csv: Path) -> Path:
    """The manifest of a benchmark CSV: ``<suite>.manifest.json`` beside ``<suite>.csv[.xz|.gz]``."""
    return csv.with_name(bench_suite(csv) + ".manifest.json")


def load_bench(capture: Path) -> tuple[pd.DataFrame, dict[str, dict]]:
    """All benchmark CSVs of a capture folder as one frame, and their manifests by suite name.

    A CSV's rows are cases of the problem its suite manifest names (``problem``; a manifest that names none,
    as every benchmark written before manifests did, holds the default problem's cases:
    :func:`nsightlab.problems.problem.of_manifest`). Besides :data:`REQUIRED_COLUMNS` it has that problem's key
    fields; its yes/no fields are read as booleans, and an optional field a CSV or row leaves out takes the
    value of the field it equals then (the problem's ``same_as``). The frame's ``attrs["problem"]`` names the
    problem.

    Raises ProfileError naming the file when a CSV has no manifest, cannot be parsed or lacks columns, and
    when the suites of one capture are cases of different problems.
    """
    capture = Path(capture)
    csvs = bench_csvs(capture)
    if not csvs:
        raise ProfileError(f"{capture}: no benchmark CSV (expected <suite>.csv with <suite>.manifest.json beside it)")
    # a suite's manifest without its CSV is a suite the pages would silently leave out
    have = {bench_manifest(c).name for c in csvs}
    orphans = sorted(m.name for m in capture.glob("*.manifest.json") if m.name not in have)
    if orphans:
        raise ProfileError(f"{capture}: {', '.join(orphans)} without the benchmark CSV beside it (expected "
                           f"<suite>.csv, or compacted <suite>.csv.xz / .csv.gz)")
    frames, manifests, solved = [], {}, {}
    for csv in csvs:
        man = bench_manifest(csv)
        if not man.exists():
            raise ProfileError(f"{csv}: its manifest {man.name} is missing; re-run the benchmark to capture both")
        try:
            manifests[bench_suite(csv)] = json.loads(man.read_text())
        except json.JSONDecodeError as exc:
            raise ProfileError(f"{man}: not valid JSON ({exc})") from None
        try:
            df = pd.read_csv(csv)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise ProfileError(f"{csv}: cannot be read as CSV ({exc})") from None
        suite_man = manifests[bench_suite(csv)]
        problem = problems.of_manifest(suite_man, df.columns)
        named = suite_man.get("problem") if isinstance(suite_man, dict) else None
        if named and named != problem.name:
            raise ProfileError(f"{man}: names the problem {named!r}, which is not registered here (known: "
                               f"{', '.join(sorted(problems.known()))}); its plug-in registers it: list the module in "
                               "the manifest's plugins, or load it (--plugin, NSIGHTLAB_PLUGINS)")
        missing = [c for c in (*REQUIRED_COLUMNS, *problem.required_fields) if c not in df.columns]
        if missing:
            says = "names it" if named else "names no problem, so the default"
            raise ProfileError(f"{csv}: missing columns {missing}; a benchmark CSV of the {problem.name} problem (its "
                               f"manifest {says}) has {', '.join(dict.fromkeys((*REQUIRED_COLUMNS, *problem.required_fields)))}")
        solved[csv.name] = problem
        frames.append(df)
    if len({p.name for p in solved.values()}) > 1:
        raise ProfileError(f"{capture}: its benchmark CSVs are cases of different problems ("
                           + ", ".join(f"{k}: {p.name}" for k, p in solved.items()) + "); one capture is one problem")
    problem = next(iter(solved.values()))
    df = pd.concat(frames, ignore_index=True)
    for col in problem.yes_no_fields:
        if col in df:
            df[col] = df[col].astype(str).str.lower().isin(("true", "1", "yes"))
    # optional fields: CSVs written before these columns (or rows without them) leave them out where they equal the
    # field they name (attention's Hkv = H, Nk = N: self-attention)
    for col, like in problem.schema().same_as.items():
        df[col] = (df[col].fillna(df[like]) if col in df else df[like]).astype(df[like].dtype)
    df["options"] = df["options"].astype(object).fillna("") if "options" in df else ""
    df.attrs["problem"] = problem.name
    return df, manifests


# --------------------------------------------------------------------------- manifests and validation

#: exports larger than this are stored xz-compressed (.xz) to keep the committed profiles small
COMPACT_BYTES = 1 << 20
COMPACT_SUFFIXES = (".ncu-rep", ".sqlite", ".csv", ".nsys-rep", ".log", ".jsonl")


def find_file(capture: Path, name: str) -> Path | None:
    """``capture/name`` or its compressed form (``name.xz``, else ``name.gz``)."""
    for cand in (name, *(name + suffix for suffix in COMPRESSIONS)):
        if (Path(capture) / cand).exists():
            return Path(capture) / cand
    return None


#: the manifest fields whose JSON type the readers rely on -> the types accepted (None: null). Fields not
#: named here, and fields left out, are not checked (schema-1 and imported manifests lack some).
MANIFEST_FIELDS: dict[str, tuple[type | None, ...]] = {
    "schema": (int,), "name": (str,), "suite": (str,), "description": (str,), "origin": (str,), "created": (str,),
    "git_commit": (str, None), "files": (dict,), "gpu": (dict, None), "environment": (dict, None),
    "tools": (list, None), "cases": (list, None), "range_schemas": (list, None), "commands": (list, None),
    "ncu": (dict, None), "nsys": (dict, None), "deep": (dict, None), "sweep": (dict, None), "reports": (dict, None),
    "parameters": (dict, None), "timings_seconds": (dict, None), "ceilings": (dict, None), "compacted": (dict, None),
}
#: list fields whose every entry must be an object, or a string
_ENTRIES: dict[str, type] = {"cases": dict, "range_schemas": dict, "commands": dict, "tools": str}
_JSON_NAMES = {dict: "an object", list: "an array", str: "a string", int: "an integer", float: "a number",
               bool: "true or false", None: "null"}


def _json_type(value: Any) -> str:
    return _JSON_NAMES[None if value is None else bool if isinstance(value, bool) else type(value)]


def _is(value: Any, accepted: tuple[type | None, ...]) -> bool:
    if value is None:
        return None in accepted
    if isinstance(value, bool):  # JSON true/false is no integer here
        return bool in accepted
    return any(t is not None and isinstance(value, t) for t in accepted)


def check_manifest(man: Any, path: Path | str) -> dict:
    """``man`` (a manifest as JSON gave it) if its shape is what the readers rely on (:data:`MANIFEST_FIELDS`:
    an object, its known fields of their types, ``files`` an object of ``{"bytes": int, "sha256": str}``);
    else ProfileError in one line: the file, the field that is wrong, what it is and what is accepted."""
    if not isinstance(man, dict):
        raise ProfileError(f"{path}: the manifest is {_json_type(man)}, not an object; accepted: a JSON object with "
                           "the capture's fields (schema, name, gpu, files, ...), as nsightlab capture and import write it")
    for key, accepted in MANIFEST_FIELDS.items():
        if key in man and not _is(man[key], accepted):
            raise ProfileError(f"{path}: field {key!r} is {_json_type(man[key])}; accepted: "
                               + " or ".join(_JSON_NAMES[t] for t in accepted)
                               + (' ({"<file name>": {"bytes": <size>, "sha256": "<hex digest>"}, ...})'
                                  if key == "files" else ""))
    for key, kind in _ENTRIES.items():
        bad = next((i for i, v in enumerate(man.get(key) or []) if not _is(v, (kind,))), None)
        if bad is not None:
            raise ProfileError(f"{path}: {key}[{bad}] is {_json_type(man[key][bad])}; accepted: {_JSON_NAMES[kind]} "
                               f"per entry of {key!r}")
    for name, meta in (man.get("files") or {}).items():
        if not isinstance(meta, dict):
            raise ProfileError(f"{path}: files[{name!r}] is {_json_type(meta)}; accepted: an object "
                               '{"bytes": <size>, "sha256": "<hex digest>"} per file')
        for key, accepted in (("bytes", (int,)), ("sha256", (str,))):
            if key in meta and not _is(meta[key], accepted):
                raise ProfileError(f"{path}: files[{name!r}].{key} is {_json_type(meta[key])}; accepted: "
                                   f"{_JSON_NAMES[accepted[0]]}")
    return man


def load_manifest(capture: Path) -> dict:
    """The capture's manifest, checked by :func:`check_manifest`; ProfileError (one line) when it is
    missing, not JSON, or not of the shape the readers rely on."""
    path = Path(capture) / MANIFEST
    if not path.exists():
        raise ProfileError(f"{capture}: no {MANIFEST}; a capture folder is written by 'python -m nsightlab.capture' "
                           "and is complete only with its manifest")
    try:
        man = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: not valid JSON ({exc})") from None
    return check_manifest(man, path)


def validate(capture: Path, *, open_reports: bool = True) -> dict:
    """Check a capture folder: manifest present and readable, every listed file present with its
    size and SHA-256, and (``open_reports``) every report opening. Returns the manifest; raises
    ProfileError listing every problem."""
    capture = Path(capture)
    man = load_manifest(capture)
    problems = []
    files = man.get("files")
    if not isinstance(files, dict) or not files:
        raise ProfileError(f"{capture}/{MANIFEST}: lists no files")
    for name, meta in files.items():
        p = capture / name
        if not p.exists():
            problems.append(f"{name}: listed in the manifest but missing")
            continue
        if p.stat().st_size != meta.get("bytes"):
            problems.append(f"{name}: {p.stat().st_size} bytes, the manifest says {meta.get('bytes')} (truncated?)")
        elif sha256(p) != meta.get("sha256"):
            problems.append(f"{name}: SHA-256 does not match the manifest (file changed or corrupt)")
    if not problems and open_reports:
        problems = [p for name in files if (p := _open_problem(capture, name))]
    if problems:
        raise ProfileError(f"{capture}: " + "; ".join(problems))
    return man


def _open_problem(capture: Path, name: str) -> str | None:
    """Why the capture's file ``name`` (a report or export, compressed or not) does not open; None if it does."""
    base = uncompressed_name(name)
    try:
        if base.endswith(".ncu-rep"):
            if ncu_frame(capture / name, metrics=["gpu__time_duration.sum"]).empty:
                return f"{name}: holds no profiled kernel"
        elif base.endswith(".sqlite"):
            nsys_tables(capture / name)
        elif base == "ncu_raw.csv":
            ncu_csv_frame(capture / name)
        elif base.endswith(".csv"):
            pd.read_csv(capture / name)
    except (ProfileError, ValueError, pd.errors.ParserError) as exc:
        return f"{name}: does not open ({exc})"
    return None


def short_commit(commit: object, n: int = 12) -> str:
    """'0123abcd4567ef89...-dirty' -> '0123abcd4567-dirty': short, keeping the dirty mark."""
    text = str(commit)
    dirty = text.endswith("-dirty")
    return text.removesuffix("-dirty")[:n] + ("-dirty" if dirty else "")


def capture_tags(manifest_a: dict, path_a: Path, manifest_b: dict, path_b: Path) -> tuple[str, str]:
    """What tells two captures apart on a page that compares one kernel across them: their commits, or
    (the same commit, or none recorded) their folder names."""
    ca, cb = manifest_a.get("git_commit"), manifest_b.get("git_commit")
    if ca and cb and short_commit(ca) != short_commit(cb):
        return short_commit(ca), short_commit(cb)
    return Path(path_a).name, Path(path_b).name


def _to_compact(capture: Path) -> list[Path]:
    """The exports of a capture that compaction writes as .xz: large uncompressed ones, and any gzipped one."""
    out = []
    for p in sorted(capture.iterdir()):
        if not p.is_file() or not uncompressed_name(p.name).endswith(COMPACT_SUFFIXES):
            continue
        if p.suffix == ".gz" or (p.suffix not in COMPRESSIONS and p.stat().st_size > COMPACT_BYTES):
            out.append(p)
    return out


def _renamed(value: Any, old: str, new: str) -> Any:
    """``value`` (a manifest or a part of it) with every string that is exactly ``old`` replaced by ``new``."""
    if isinstance(value, dict):
        return {k: _renamed(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, old, new) for v in value]
    return new if value == old else value


def compact(capture: Path) -> list[str]:
    """Store the large exports of a capture xz-compressed (``X`` -> ``X.xz``; an older ``X.gz`` too)
    and rewrite the manifest: its file table, the uncompressed size and SHA-256 under ``compacted``,
    and every place it names a file by its old name. Returns the names written."""
    capture = Path(capture)
    man = load_manifest(capture)
    done = []
    for p in _to_compact(capture):
        base = uncompressed_name(p.name)
        xz = p.with_name(base + ".xz")
        digest, size = write_xz(p, xz)
        recorded = man.get("compacted", {}).pop(p.name, None)
        if recorded and recorded.get("sha256") != digest:
            xz.unlink()
            raise ProfileError(f"{p}: its content does not match the SHA-256 the manifest records for {base}")
        man.setdefault("compacted", {})[xz.name] = {"from": base, "bytes": size, "sha256": digest}
        if p.suffix in COMPRESSIONS:  # "X" still finds X.xz (find_file); "X.gz" would name a file now gone
            man = _renamed(man, p.name, xz.name)
        p.unlink()
        done.append(xz.name)
    if done:
        man["files"] = file_table(capture)
        tmp = capture / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(man, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, capture / MANIFEST)
    return done


# --------------------------------------------------------------------------- what a capture says about its cases

CASE_COLUMNS = ("range", "impl", "pass", "dtype", "options", "status", "model_flop", "model_bytes", "model_working_set",
                "model_source")


def cases(manifest: dict) -> pd.DataFrame:
    """The measured cases a capture's manifest records, one row per NVTX range name: ``range``,
    ``impl``, ``pass``, ``dtype``, ``options`` (``a=1;b=x``), ``status``, the shape fields as
    columns (B, H, N, D, ... or whatever the sweep's shapes name), the work model's quantities where
    the implementation declared one (``model_flop``, ``model_bytes``, ``model_working_set``,
    ``model_source``; NaN/"" where not) and its traits as ``trait_<name>`` columns. Empty (with those
    columns) for imported captures, which know no cases. ``attrs["problem"]`` names the problem the cases are
    (:func:`nsightlab.problems.problem.of_manifest`, which imports the plug-in a capture's sweep names)."""
    rows = []
    for c in manifest.get("cases") or []:
        if not isinstance(c, dict) or not c.get("range"):
            continue
        model = c.get("model") or {}
        opts = c.get("options") or {}
        row = {"range": c["range"], "impl": c.get("impl"), "pass": c.get("pass"), "dtype": c.get("dtype"),
               "options": format_options(opts) if isinstance(opts, dict) else str(opts),
               "status": c.get("status", "ok"),
               "model_flop": model.get("flop", float("nan")), "model_bytes": model.get("bytes", float("nan")),
               "model_working_set": model.get("working_set", float("nan")), "model_source": model.get("source", "")}
        row.update({k: v for k, v in (c.get("shape") or {}).items() if k not in row})
        row.update({f"trait_{k}": v for k, v in (c.get("traits") or {}).items()})
        rows.append(row)
    df = pd.DataFrame(rows, columns=None if rows else list(CASE_COLUMNS))
    out = df.drop_duplicates("range", keep="last").reset_index(drop=True) if len(df) else df
    # the problem the cases are (its plug-in loaded, so that its implementations' styles are registered before a
    # page picks its colours)
    out.attrs["problem"] = problems.of_manifest(manifest, [c for c in out.columns if c not in CASE_COLUMNS]).name
    return out
