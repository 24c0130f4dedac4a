"""What the notebooks share: finding the capture and its files, loading them, selection, headers,
and printing why a section does not apply.

The notebooks hold narrative and figures only; everything they compute comes from here and from
the analysis modules (counters, roofline, l2, timeline, options, device) and nsightlab.figures.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from . import figures
from .counters import NotApplicable, range_columns
from .ranges import RangeSchema, schemas_of
from .store import ProfileError, cases, find_file, load_manifest, short_commit

pd.set_option("display.max_colwidth", 200)  # the tables' explanation columns are sentences

REPO = Path(__file__).resolve().parent.parent
MODES = ("replay", "live")


def resolve(capture: str | Path) -> Path:
    """A capture folder given relative to the working directory, else to the repository root."""
    p = Path(capture).expanduser()
    if p.is_dir() or p.is_absolute():
        return p
    alt = REPO / p
    return alt if alt.is_dir() else p


def prepare(capture: str, plotlyjs: str = "inline", mode: str = "replay", suite: str = "", only: str = "",
            live_profiles: str = "profiles_live") -> tuple[Path, dict]:
    """The capture folder to analyse and its manifest. ``replay`` reads ``capture`` as it is;
    ``live`` first captures the sweep ``suite`` (restricted to the ranges matching ``only``) on this
    machine's GPU through nsightlab.capture, into ``live_profiles``, and analyses that."""
    figures.set_plotlyjs(plotlyjs)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if mode == "live":
        from .capture import capture as run_capture

        if not suite:
            raise ValueError("live mode needs the sweep to capture (parameter 'suite')")
        path = run_capture(suite, live_profiles, only=only or None)
    else:
        path = resolve(capture)
        if not path.is_dir():
            raise ProfileError(f"capture folder {capture} does not exist (looked in {Path.cwd()} and {REPO}); see "
                               "profiles/ for the committed ones (python -m nsightlab.store list)")
    return path, load_manifest(path)


# --------------------------------------------------------------------------- what a capture holds


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
    manifests) one inferred from its case names; imported captures have none (generic decoding)."""
    own = schemas_of(manifest)
    if own:
        return own
    inferred = infer_schema(case_names(manifest))
    return (inferred,) if inferred else ()


def capture_cases(manifest: dict) -> pd.DataFrame:
    """The capture's cases with their work model (:func:`nsightlab.store.cases`); empty if none."""
    return cases(manifest)


def _reports(path: Path, suffixes: tuple[str, ...], preferred: str) -> list[Path]:
    found = sorted(p for p in Path(path).iterdir() if p.is_file() and p.name.endswith(suffixes))
    found.sort(key=lambda p: (not p.name.startswith(preferred), p.name))
    return found


def ncu_files(path: Path) -> list[Path]:
    """The capture's Nsight Compute reports (``ncu.ncu-rep`` first), else its raw CSV exports."""
    reps = _reports(path, (".ncu-rep", ".ncu-rep.gz"), "ncu.ncu-rep")
    return reps or _reports(path, ("ncu_raw.csv", "ncu_raw.csv.gz"), "ncu_raw.csv")


def nsys_files(path: Path) -> list[Path]:
    """The capture's Nsight Systems SQLite exports (``nsys.sqlite`` first)."""
    return _reports(path, (".sqlite", ".sqlite.gz"), "nsys.sqlite")


def bench_files(path: Path) -> list[Path]:
    """Benchmark CSVs: ``<suite>.csv`` with ``<suite>.manifest.json`` beside it."""
    return [p for p in sorted(Path(path).glob("*.csv")) if p.with_suffix(".manifest.json").exists()]


def load_ncu(path: Path, manifest: dict) -> pd.DataFrame:
    """Every launch of the capture's Nsight Compute data (all its reports), decoded with its schemas."""
    from . import parse

    files = ncu_files(path)
    if not files:
        raise NotApplicable(f"{Path(path).name} holds no Nsight Compute report (*.ncu-rep) or raw CSV export")
    schemas = capture_schemas(manifest)
    frames = []
    for f in files:
        df = parse.ncu_csv_frame(f, schemas) if ".csv" in f.name else parse.ncu_frame(f, schemas=schemas)
        frames.append(df)
    out = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    out.attrs = {**frames[0].attrs, "files": [f.name for f in files]}
    for f in frames[1:]:
        out.attrs.setdefault("units", {}).update(f.attrs.get("units", {}))
    return out


def load_nsys(path: Path, manifest: dict) -> dict[str, pd.DataFrame]:
    """The capture's Nsight Systems tables (the first export), decoded with its schemas."""
    from . import parse

    files = nsys_files(path)
    if not files:
        raise NotApplicable(f"{Path(path).name} holds no Nsight Systems export (*.sqlite)")
    return parse.nsys_tables(files[0], capture_schemas(manifest))


def implementations(manifest: dict, *frames: pd.DataFrame) -> list[str]:
    """Every implementation of the capture, in the order its cases list them, then any further label
    the frames hold (sorted): pass to :func:`nsightlab.figures.style_for` so colours agree everywhere."""
    names: dict[str, None] = {}
    for c in manifest.get("cases") or []:
        if isinstance(c, dict) and c.get("impl"):
            names.setdefault(str(c["impl"]), None)
    if not names:
        dec = [capture_schemas(manifest)[0].parse(n) for n in case_names(manifest)] if capture_schemas(manifest) else []
        for d in dec:
            if d and d.get("variant"):
                names.setdefault(str(d["variant"]), None)
    extra: set[str] = set()
    for f in frames:
        if f is not None and "variant" in f:
            extra |= {str(v) for v in f["variant"].dropna().unique()}
    return [*names, *sorted(extra - set(names))]


def sweep_field(frame: pd.DataFrame, preferred: str = "N") -> str | None:
    """The field a capture sweeps: ``preferred`` where it takes 2+ values, else the numeric decoded
    field with the most distinct values (ties: the first); None if no numeric field varies."""
    fields = [c for c in range_columns(frame) if c not in ("range", "domain", "variant", "pass", "schema", "options")]
    numeric = [c for c in fields if pd.api.types.is_numeric_dtype(frame[c]) and frame[c].nunique() > 1]
    if preferred in numeric:
        return preferred
    return max(numeric, key=lambda c: frame[c].nunique(), default=None)


def csv_list(text: str, cast: Any = str) -> list:
    return [cast(x.strip()) for x in str(text).split(",") if x.strip()]


def select(df: pd.DataFrame, variants: str = "", where: str = "") -> pd.DataFrame:
    """Rows of a range-keyed frame: the implementations in ``variants`` (comma-separated; "" = all)
    that match ``where`` (a pandas query over the decoded fields, e.g. ``"D == 64 and causal == 0"``;
    "" = all). NotApplicable if nothing is left."""
    out = df
    if variants:
        out = out[out["variant"].isin(csv_list(variants))]
    if where:
        try:
            out = out.query(where)
        except Exception as exc:  # noqa: BLE001 - pandas raises many kinds for a bad query
            raise NotApplicable(f"the filter {where!r} does not apply to this capture's fields "
                                f"({', '.join(range_columns(df))}): {exc}") from None
    if out.empty and not df.empty:
        raise NotApplicable(f"no range matches variants={variants!r} where={where!r}")
    return out


def say(text: str) -> None:
    from IPython.display import Markdown, display

    display(Markdown(text))


def not_applicable(exc: Exception) -> None:
    """Print why a section has nothing to show (a NotApplicable's message) on the page."""
    say(f"> **Not applicable here.** {exc}")


def header(manifest: dict, path: Path) -> str:
    """One Markdown paragraph: where and how the capture was made."""
    g = manifest.get("gpu", {}) or {}
    env = manifest.get("environment", {}) or {}
    ncu = manifest.get("ncu") or {}
    nsys = manifest.get("nsys") or {}
    t = manifest.get("timings_seconds", {}) or {}
    shown = Path(*Path(path).parts[-3:]) if len(Path(path).parts) >= 3 else path  # profiles/<gpu>/<capture>
    name = manifest.get("name") or manifest.get("suite")
    origin = manifest.get("origin", "captured")
    l2 = g.get("l2_bytes")
    parts = [f"**Capture** `{shown}` (*{name}*, {origin}, {manifest.get('created')})",
             f"**GPU** {g.get('name')} (CC {g.get('compute_capability')}, {g.get('sm_count')} SMs"
             + (f", L2 {l2 / 2**20:.0f} MiB" if isinstance(l2, (int, float)) else "")
             + (f", driver {(g.get('nvidia_smi') or {}).get('driver_version')}" if g.get("nvidia_smi") else "") + ")"]
    if env.get("torch") or manifest.get("git_commit"):
        parts.append(f"**torch** {env.get('torch')} · **CUDA** {env.get('cuda_runtime')} · **commit** "
                     f"`{short_commit(manifest.get('git_commit'))}`")
    if ncu:
        parts.append(f"**Nsight Compute** {ncu.get('version')}: {ncu.get('kernels_profiled', '?')} kernels, "
                     f"{ncu.get('max_passes_per_kernel', '?')} replay passes each ({ncu.get('replay_mode', 'kernel')} "
                     f"replay), clock control `{ncu.get('clock_control')}`, {len(ncu.get('metrics') or [])} metrics")
    if nsys:
        parts.append(f"**Nsight Systems** {nsys.get('version')}"
                     + (f", {nsys['iters']} measured launches per range" if nsys.get("iters") else ""))
    if t.get("total"):
        parts.append(f"capture took {t['total']:.0f} s")
    if manifest.get("provenance_note"):
        parts.append(f"*{manifest['provenance_note']}*")
    return " · ".join(parts)


def find_capture_file(path: Path, name: str) -> Path | None:
    return find_file(path, name)


class section:  # noqa: N801 - used as ``with section():``, reads as a statement
    """``with section():`` runs a notebook cell's body and, if it raises NotApplicable, prints the
    reason on the page instead of failing the notebook (other errors still fail it)."""

    def __enter__(self) -> section:
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: object) -> bool:
        if exc_type is not None and issubclass(exc_type, NotApplicable):
            not_applicable(exc)  # type: ignore[arg-type]
            return True
        return False


def need(*values: object) -> None:
    """In a ``with section():`` body: NotApplicable if an earlier section produced nothing (None)."""
    if any(v is None for v in values):
        raise NotApplicable("needs the result of an earlier section, which did not apply (see above)")


def counted_per_range(path: Path, manifest: dict) -> pd.DataFrame | None:
    """The capture's Nsight Compute FLOPs per range (for throughput without a work model), or None
    when the capture has no Nsight Compute data or it counted no FLOPs."""
    from .counters import kernel_work, per_range

    try:
        rng = per_range(kernel_work(load_ncu(path, manifest)))
    except NotApplicable:
        return None
    return rng if rng["flop"].notna().any() else None


def used_derivations(work: pd.DataFrame) -> pd.DataFrame:
    """The recipes that gave this capture's quantities (:func:`nsightlab.counters.derivations`),
    only those used, most launches first within each quantity."""
    from .counters import derivations

    d = derivations(work)
    d = d[d["launches"] > 0]
    return d[~d["quantity"].str.startswith(("hz_", "cycles_"))].reset_index(drop=True)


def table(df: pd.DataFrame, formats: Any = None, name: str = "t", na_rep: str = "—") -> Any:
    """``df`` formatted for the page, with a fixed element id (pandas' Styler picks a random one,
    and the same capture must give the same bytes)."""
    import hashlib

    uid = name + "-" + hashlib.sha256(df.to_csv().encode()).hexdigest()[:8]
    return df.style.set_uuid(uid).format(formats, na_rep=na_rep)
