"""Reading a capture back: where a capture folder is, which of its files hold what, and those files as
frames decoded with the capture's own range schemas.

Every page, the report runner and the comparison read captures through these functions, so a capture
is found and decoded the same way everywhere.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from ..core.errors import NotApplicable, ProfileError
from ..core.ranges import RangeSchema, schemas_of
from ..parse.ncu import ncu_csv_frame, ncu_frame
from ..parse.nsys import nsys_tables
from ..problems import problem as problems
from .captures import bench_csvs, bench_manifest, list_captures

#: the repository this package sits in: notebooks run from notebooks/ (JupyterLab) still find profiles/
REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "profiles"


# --------------------------------------------------------------------------- where a capture is


def in_repo(path: str | os.PathLike) -> Path:
    """``path`` as given where it exists (or is absolute), else relative to the repository root."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists() or not (REPO / p).exists():
        return p
    return REPO / p


def resolve(capture: str | os.PathLike, profiles: str | os.PathLike = PROFILES) -> Path:
    """A capture folder: ``capture`` relative to the working directory, then to the repository, then
    as a ``gpu/name`` label under ``profiles``. ProfileError naming the places looked at and the
    known labels otherwise."""
    p = Path(capture).expanduser()
    places = [p] if p.is_absolute() else [p, REPO / p, in_repo(profiles) / p]
    for cand in places:
        if cand.is_dir():
            return cand.resolve()
    looked = " and ".join(dict.fromkeys(str(c.resolve()) for c in places))
    try:
        known = ", ".join(c.label for c in list_captures(in_repo(profiles))) or "none"
    except ProfileError:
        known = f"none ({profiles} does not exist)"
    raise ProfileError(f"{capture}: neither a capture folder nor a label under {profiles} (looked at {looked}; "
                       f"known: {known})")


# --------------------------------------------------------------------------- what a capture holds


def _reports(path: Path, suffixes: tuple[str, ...], preferred: str) -> list[Path]:
    found = sorted(p for p in Path(path).iterdir() if p.is_file() and p.name.endswith(suffixes))
    found.sort(key=lambda p: (not p.name.startswith(preferred), p.name))
    return found


def ncu_files(path: Path) -> list[Path]:
    """The capture's Nsight Compute reports (``ncu.ncu-rep`` first), else its raw CSV exports. A capture that
    took both tiers keeps the deep tier's second profile of some cases in ``deep.ncu-rep`` beside the light
    tier's: that one is read by the deep-tier pages, not here (its launches would count twice in a range's
    time); a deep-only capture's is its only report."""
    reps = _reports(path, (".ncu-rep", ".ncu-rep.gz", ".ncu-rep.xz"), "ncu.ncu-rep")
    reps = [p for p in reps if not p.name.startswith("deep.")] or reps
    return reps or _reports(path, ("ncu_raw.csv", "ncu_raw.csv.gz", "ncu_raw.csv.xz"), "ncu_raw.csv")


def nsys_files(path: Path) -> list[Path]:
    """The capture's Nsight Systems SQLite exports (``nsys.sqlite`` first)."""
    return _reports(path, (".sqlite", ".sqlite.gz", ".sqlite.xz"), "nsys.sqlite")


def bench_files(path: Path) -> list[Path]:
    """Benchmark CSVs: ``<suite>.csv`` (or compacted, ``<suite>.csv.xz`` / ``.gz``) with ``<suite>.manifest.json``
    beside it."""
    return [p for p in bench_csvs(Path(path)) if bench_manifest(p).exists()]


def tools_of(manifest: dict) -> list[str]:
    """The tools a capture ran (``tools``; schema-1 manifests: ``parameters.tools``)."""
    return list(manifest.get("tools") or (manifest.get("parameters") or {}).get("tools") or [])


def case_names(manifest: dict) -> list[str]:
    """The range names of the capture's cases (``cases[].range``; schema 1: ``parameters.cases``)."""
    new = [c.get("range") for c in manifest.get("cases") or [] if isinstance(c, dict) and c.get("range")]
    return new or [str(c) for c in (manifest.get("parameters") or {}).get("cases") or []]


def infer_schema(names: Iterable[str]) -> RangeSchema | None:
    """A schema for names ``prefix:label:pass:key=value,...`` that all share one prefix (schema-1
    manifests recorded the names but not their grammar): keys every name has become typed fields,
    the rest options. None if the names do not look like that."""
    names = [n for n in names if n]
    parts = [n.split(":", 3) for n in names]
    if not parts or any(len(p) != 4 for p in parts) or len({p[0] for p in parts}) != 1:
        return None
    kvs = [dict(item.split("=", 1) for item in p[3].split(",") if "=" in item) for p in parts]
    common = set.intersection(*(set(kv) for kv in kvs)) if kvs else set()
    fields = {}
    for key in sorted(common, key=lambda k: list(kvs[0]).index(k)):
        vals = [kv[key] for kv in kvs]
        fields[key] = "int" if all(re.fullmatch(r"\d+", v) for v in vals) else "str"
    passes = tuple(sorted({p[2] for p in parts}))
    try:
        return RangeSchema(parts[0][0], ("variant", "pass"), fields=fields, choices={"pass": passes},
                           description="inferred from the capture's case names")
    except (ValueError, TypeError):
        return None


def capture_schemas(manifest: dict) -> tuple[RangeSchema, ...]:
    """The range schemas to decode a capture's names with: the manifest's own, else (schema-1
    manifests) one inferred from its case names; imported captures have none (generic decoding). A recorded
    schema of a registered problem's grammar that predates ``same_as`` takes the problem's (which optional
    fields equal which when a name leaves them out)."""
    own = schemas_of(manifest)
    if own:
        return tuple(_with_problem_same_as(s, manifest) for s in own)
    inferred = infer_schema(case_names(manifest))
    return (inferred,) if inferred else ()


def _with_problem_same_as(schema: RangeSchema, manifest: dict) -> RangeSchema:
    sweep = manifest.get("sweep")
    name = sweep.get("problem") if isinstance(sweep, dict) else None
    if schema.same_as or not isinstance(name, str) or name not in problems.known():
        return schema
    mine = problems.get(name).schema(schema.prefix)
    if (dict(mine.fields), dict(mine.optional)) != (dict(schema.fields), dict(schema.optional)):
        return schema
    return dataclasses.replace(schema, same_as=dict(mine.same_as))


# --------------------------------------------------------------------------- its data as frames


def load_ncu(path: Path, manifest: dict) -> pd.DataFrame:
    """Every launch of the capture's Nsight Compute data (all its reports), decoded with its schemas.
    NotApplicable when the capture has none."""
    files = ncu_files(path)
    if not files:
        raise NotApplicable(f"{Path(path).name} holds no Nsight Compute report (*.ncu-rep) or raw CSV export")
    schemas = capture_schemas(manifest)
    frames = [ncu_csv_frame(f, schemas) if ".csv" in f.name else ncu_frame(f, schemas=schemas) for f in files]
    out = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    out.attrs = {**frames[0].attrs, "files": [f.name for f in files]}
    for f in frames[1:]:
        out.attrs.setdefault("units", {}).update(f.attrs.get("units", {}))
    return out


def load_nsys(path: Path, manifest: dict) -> dict[str, pd.DataFrame]:
    """The capture's Nsight Systems tables (the first export), decoded with its schemas.
    NotApplicable when the capture has none."""
    files = nsys_files(path)
    if not files:
        raise NotApplicable(f"{Path(path).name} holds no Nsight Systems export (*.sqlite)")
    return nsys_tables(files[0], capture_schemas(manifest))
