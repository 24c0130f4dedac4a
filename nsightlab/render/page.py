"""What the notebooks share: checking their parameters, finding the capture and its files, loading
them, selection, the page's summary, tables and headers, and printing why a section does not apply.

The notebooks hold narrative and figures only; everything they compute comes from here and from
the analysis modules (counters, roofline, l2, timeline, options, device) and nsightlab.render.figures.

Parameters are checked before anything is drawn (:func:`check_parameters`, then :func:`select`,
:func:`choose`, :func:`check_field` against the capture's own values): a bad one stops the notebook
with a one-line :class:`ParameterError` naming the accepted values, under papermill and in JupyterLab
alike.
"""

from __future__ import annotations

import ast
import difflib
import html as _html
import math
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.counters import NotApplicable, range_columns
from ..core.ranges import RangeSchema, schemas_of
from ..store.captures import cases, find_file, load_manifest, short_commit
from . import figures

pd.set_option("display.max_colwidth", None)  # the tables' explanation columns are sentences

REPO = Path(__file__).resolve().parents[2]
MODES = ("replay", "live")


# --------------------------------------------------------------------------- parameters


class ParameterError(ValueError):
    """A notebook parameter the capture cannot honour; the message names the accepted values. In a
    notebook it shows as its one line, not a traceback (IPython's ``_render_traceback_``)."""

    def _render_traceback_(self) -> list[str]:
        return [f"ParameterError: {self}"]


def _injected(history: Iterable[str]) -> dict[str, Any]:
    """The names papermill injected (its ``# Parameters`` cell, as IPython recorded it), with values."""
    out: dict[str, Any] = {}
    for src in history or []:
        if not isinstance(src, str) or not src.lstrip().startswith("# Parameters"):
            continue
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        try:
                            out[t.id] = ast.literal_eval(node.value)
                        except ValueError:
                            out[t.id] = ast.unparse(node.value)
    return out


def _coerce(name: str, value: Any, kind: Any) -> Any:
    """``value`` as the declared type ``kind`` (papermill's ``-p`` turns ``128`` into an int and
    ``False`` into a bool; ``-r`` passes Python literals), or a ParameterError."""
    if kind is str:
        if isinstance(value, bool) or value is None:
            raise ParameterError(f"{name} takes text, not {value!r}")
        return value if isinstance(value, str) else str(value)
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, np.integer)) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.strip().lower() in ("true", "1", "yes")
        raise ParameterError(f"{name} takes true or false, not {value!r}")
    if kind is int:
        if isinstance(value, bool):
            raise ParameterError(f"{name} takes a whole number, not {value!r}")
        if isinstance(value, (int, np.integer)):
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
            return int(value)
        raise ParameterError(f"{name} takes a whole number, not {value!r}")
    if kind is float:
        if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
            return float(value)
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ParameterError(f"{name} takes a number, not {value!r}") from None
    return value


def check_parameters(ns: dict[str, Any]) -> None:
    """Check a notebook's parameters in its namespace (pass ``globals()``): every name papermill
    injected must be declared in the parameters cell (its annotations), and every declared value
    must have the declared type (coerced in place where papermill's typing differs: ``-p only 1024``
    is text). ParameterError otherwise, naming the parameters the notebook takes."""
    declared: dict[str, Any] = dict(ns.get("__annotations__") or {})
    injected = _injected(ns.get("In") or [])
    unknown = [k for k in injected if k not in declared]
    if unknown:
        k = unknown[0]
        hint = (f"; to choose ranges by a field, use -p where '{k} == {injected[k]!r}'" if "where" in declared
                and re.fullmatch(r"[A-Za-z_]\w*", k) else "")
        raise ParameterError(f"unknown parameter {k}={injected[k]!r}: this notebook takes "
                             f"{', '.join(declared)}{hint}")
    for name, kind in declared.items():
        if name in ns:
            ns[name] = _coerce(name, ns[name], kind)


def _suggest(value: str, allowed: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def choose(name: str, value: str, allowed: Iterable[Any], *, aliases: Mapping[str, str] | None = None,
           empty_ok: bool = True) -> str:
    """``value`` if it is one of ``allowed`` (or ``""`` when ``empty_ok``; ``aliases`` map other
    spellings to allowed values), else a ParameterError listing them."""
    allowed = [str(a) for a in dict.fromkeys(allowed)]
    if value == "" and empty_ok:
        return value
    v = str(value)
    if aliases and v in aliases and aliases[v] in allowed:
        return aliases[v]
    if v not in allowed:
        raise ParameterError(f"{name}={v!r} is not in this capture; it has: {', '.join(allowed) or 'none'}"
                             f"{_suggest(v, allowed)}")
    return v


def choose_many(name: str, value: str, allowed: Iterable[Any]) -> list[str]:
    """``value`` as a comma-separated list, each one of ``allowed`` (ParameterError otherwise)."""
    return [choose(name, v, allowed, empty_ok=False) for v in csv_list(value)]


def check_field(name: str, value: str, frame: pd.DataFrame, *, numeric: bool = True, min_values: int = 2) -> str:
    """``value`` if it names a field of ``frame``'s ranges that is numeric and takes at least
    ``min_values`` values ("" passes), else a ParameterError listing the fields that would."""
    if value == "":
        return value
    fields = [c for c in range_columns(frame) if c not in ("range", "domain", "schema", "options", "variant")]
    ok = [c for c in fields if (not numeric or pd.api.types.is_numeric_dtype(frame[c])) and
          frame[c].nunique() >= min_values]
    if value not in ok:
        what = "numeric fields that vary" if numeric else "fields"
        raise ParameterError(f"{name}={value!r} is not a field this capture sweeps; its {what}: "
                             f"{', '.join(ok) or 'none'}{_suggest(value, ok)}")
    return value


def _values(frame: pd.DataFrame, col: str) -> str:
    vals = sorted({v for v in frame[col].dropna().unique()}, key=lambda v: figures.natural_key(v))
    shown = [figures._plain(v) for v in vals]
    return ", ".join(shown[:12]) + (f" ... ({len(shown)} values)" if len(shown) > 12 else "")


def select(df: pd.DataFrame, variants: str = "", where: str = "", *, name: str = "where") -> pd.DataFrame:
    """Rows of a range-keyed frame: the implementations in ``variants`` (comma-separated; "" = all)
    that match ``where`` (a pandas query over the decoded fields, e.g. ``"D == 64 and causal == 0"``;
    "" = all). ParameterError (naming the implementations, the fields and the values they take)
    for an unknown implementation, a query that does not parse or names no field, or a selection
    that leaves nothing. ``name``: the parameter that holds the query (for messages)."""
    out = df
    fields = [c for c in range_columns(df) if c not in ("range", "domain", "schema")]
    if variants:
        names = list(dict.fromkeys(df["variant"].dropna().astype(str))) if "variant" in df else []
        out = out[out["variant"].astype(str).isin(choose_many("variants", variants, names))]
    if where:
        used = [c for c in dict.fromkeys(re.findall(r"[A-Za-z_]\w*", where)) if c in df.columns]
        unknown = [w for w in re.findall(r"(?<![\w.'\"])([A-Za-z_]\w*)\s*(?:==|!=|<=|>=|<|>|\bin\b)", where)
                   if w not in df.columns]
        if unknown:
            raise ParameterError(f"{name}={where!r}: no field {unknown[0]!r} in this capture; its fields: "
                                 f"{', '.join(fields)}{_suggest(unknown[0], fields)}")
        try:
            out = out.query(where)
        except Exception as exc:  # noqa: BLE001 - pandas raises many kinds for a bad query
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ParameterError(f"{name}={where!r} is not a query over this capture's fields "
                                 f"({', '.join(fields)}): {first}") from None
        if out.empty and not df.empty:
            values = "; ".join(f"{c} takes {_values(df, c)}" for c in used) or f"its fields: {', '.join(fields)}"
            raise ParameterError(f"{name}={where!r} matches no range of this capture"
                                 + (f" (with variants={variants!r})" if variants else "") + f"; {values}")
    if out.empty and not df.empty:
        raise ParameterError(f"no range matches variants={variants!r} where={where!r}")
    return out


def check_targets(text: str, impl: str, passes: Iterable[str]) -> dict[str, float]:
    """``targets`` (``pass:ratio,...``) as a dict, checked: well formed, passes the capture has,
    ratios in (0, 10], and an implementation to track (``impl``)."""
    from ..analysis.perf import parse_targets

    passes = list(passes)
    try:
        goals = parse_targets(text)
    except ValueError as exc:
        raise ParameterError(f"targets={text!r}: {exc}; passes in this capture: {', '.join(passes)}") from None
    for p, v in goals.items():
        choose("targets: pass", p, passes, empty_ok=False)
        if not 0 < v <= 10:
            raise ParameterError(f"targets={text!r}: the ratio for {p} must be above 0 (a fraction such as 0.8)")
    if goals and not impl:
        raise ParameterError("targets needs the implementation they are for (parameter impl)")
    return goals


def style(manifest: dict, *frames: pd.DataFrame, order: str = "") -> dict[str, dict[str, str]]:
    """The colour and marker of every implementation: those named in ``order`` (comma-separated, the
    report runner passes every capture's) first, then this capture's (:func:`implementations`)."""
    return figures.style_for([*csv_list(order), *implementations(manifest, *frames)])


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
    machine's GPU through nsightlab.run.capture, into ``live_profiles``, and analyses that."""
    if plotlyjs != "inline" and not str(plotlyjs).endswith(".js"):
        raise ParameterError(f"plotlyjs={plotlyjs!r}: give \"inline\" or the relative path of a plotly.min.js")
    figures.set_plotlyjs(plotlyjs)
    if mode not in MODES:
        raise ParameterError(f"mode={mode!r} is not a mode; accepted: {', '.join(MODES)}")
    if mode == "live":
        from ..run.capture import capture as run_capture

        if not suite:
            raise ParameterError("mode='live' needs the sweep to capture (parameter suite)")
        path = run_capture(suite, live_profiles, only=only or None)
    else:
        path = resolve(capture)
        if not path.is_dir():
            places = [str(Path(capture).expanduser().resolve())]
            if not Path(capture).expanduser().is_absolute():
                places.append(str((REPO / capture).resolve()))
            known = sorted(str(p.parent.relative_to(REPO)) for p in (REPO / "profiles").glob("*/*/manifest.json"))
            raise ParameterError(f"capture={capture!r}: no such folder (looked at {' and '.join(places)}); "
                                 f"committed captures: {', '.join(known) or 'none'}")
        if not (path / "manifest.json").exists():
            raise ParameterError(f"capture={capture!r}: {path} holds no manifest.json (not a capture folder)")
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
    """The capture's cases with their work model (:func:`nsightlab.store.captures.cases`); empty if none."""
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
    from ..parse import frames as parse

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
    from ..parse import frames as parse

    files = nsys_files(path)
    if not files:
        raise NotApplicable(f"{Path(path).name} holds no Nsight Systems export (*.sqlite)")
    return parse.nsys_tables(files[0], capture_schemas(manifest))


def implementations(manifest: dict, *frames: pd.DataFrame) -> list[str]:
    """Every implementation of the capture, in the order its cases list them, then any further label
    the frames hold (sorted): pass to :func:`nsightlab.render.figures.style_for` so colours agree everywhere."""
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


def say(text: str) -> None:
    from IPython.display import Markdown, display

    display(Markdown(text))


def _inline_md(text: str) -> str:
    """The little Markdown the summaries use (**bold**, *italic*, `code`) as HTML."""
    t = _html.escape(str(text), quote=False)
    t = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", t)
    t = re.sub(r"(?<![*\w])\*(?!\s)(.+?)(?<!\s)\*(?![*\w])", r"<i>\1</i>", t)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", t)


def plain(text: str) -> str:
    """A summary line without its Markdown (for the index)."""
    return re.sub(r"\*\*(.+?)\*\*|`(.+?)`|(?<![*\w])\*(?!\s)(.+?)(?<!\s)\*(?![*\w])",
                  lambda m: next(g for g in m.groups() if g is not None), str(text))


def summary(lines: Iterable[str], title: str = "At a glance") -> None:
    """The page's opening box: its two or three findings, computed from the data. The lines travel
    with the output (metadata ``nsightlab.summary``), so the report index can quote them."""
    from IPython.display import HTML, display

    lines = [str(x) for x in lines if x]
    if not lines:
        lines = ["nothing in this capture for this page to summarize (see the sections below)"]
    items = "".join(f"<li>{_inline_md(x)}</li>" for x in lines)
    display(HTML(f'<div class="nsl-summary"><div class="nsl-summary-title">{_html.escape(title)}</div>'
                 f"<ul>{items}</ul></div>"), metadata={"nsightlab": {"summary": [plain(x) for x in lines]}})


def note(text: str) -> None:
    """A small paragraph (where a figure's data came from, what the capture is)."""
    from IPython.display import HTML, display

    display(HTML(f'<p class="nsl-note">{_inline_md(text)}</p>'))


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


def attempt(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, or None if it raises NotApplicable (the section that needs it says why)."""
    try:
        return fn(*args, **kwargs)
    except NotApplicable:
        return None


def need(*values: object) -> None:
    """In a ``with section():`` body: NotApplicable if an earlier section produced nothing (None)."""
    if any(v is None for v in values):
        raise NotApplicable("needs the result of an earlier section, which did not apply (see above)")


def counted_per_range(path: Path, manifest: dict) -> pd.DataFrame | None:
    """The capture's Nsight Compute FLOPs per range (for throughput without a work model), or None
    when the capture has no Nsight Compute data or it counted no FLOPs."""
    from ..analysis.counters import kernel_work, per_range

    try:
        rng = per_range(kernel_work(load_ncu(path, manifest)))
    except NotApplicable:
        return None
    return rng if rng["flop"].notna().any() else None


def used_derivations(work: pd.DataFrame) -> pd.DataFrame:
    """The recipes that gave this capture's quantities (:func:`nsightlab.analysis.counters.derivations`),
    only those used, most launches first within each quantity."""
    from ..analysis.counters import derivations

    d = derivations(work)
    d = d[d["launches"] > 0]
    return d[~d["quantity"].str.startswith(("hz_", "cycles_"))].reset_index(drop=True)


def fmt_value(v: Any) -> str:
    """One table cell for people: thousands separators, three significant digits, ``—`` for
    missing, yes/no for booleans."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT:
        return "—"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        if float(v).is_integer() and abs(v) < 1e7:
            return f"{int(v):,}"
        return figures.fmt_num(float(v))
    return str(v)


def table(df: pd.DataFrame, formats: Mapping[str, Any] | str | None = None, name: str = "t", *,
          headers: Mapping[str, str] | None = None, title: str = "", collapse: bool | None = None,
          open_rows: int = 12) -> None:
    """Show ``df`` on the page, formatted by :func:`table_html`."""
    from IPython.display import HTML, display

    display(HTML(table_html(df, formats, name, headers=headers, title=title, collapse=collapse,
                            open_rows=open_rows)))


def table_html(df: pd.DataFrame, formats: Mapping[str, Any] | str | None = None, name: str = "t", *,
               headers: Mapping[str, str] | None = None, title: str = "", collapse: bool | None = None,
               open_rows: int = 12) -> str:
    """``df`` as an HTML table for people: no index column, numbers formatted (``formats``: a
    format string or callable per column, or one for all; otherwise :func:`fmt_value`), ``—`` for
    missing values, headers renamed by ``headers`` (give units there: ``{"ms": "GPU time [ms]"}``).
    Tables longer than ``open_rows`` (or ``collapse=True``) fold behind a ``title`` line, so the
    figure they support comes first. The element id is fixed by the content (the same capture gives
    the same bytes)."""
    import hashlib

    d = df.reset_index(drop=True)
    per: dict[str, Callable[[Any], str]] = {}
    for c in d.columns:
        f = formats.get(c) if isinstance(formats, Mapping) else (
            formats if pd.api.types.is_numeric_dtype(d[c]) and not pd.api.types.is_bool_dtype(d[c]) else None)
        if f is None:
            per[c] = fmt_value
        elif callable(f):
            per[c] = (lambda g: lambda v: "—" if _missing(v) else g(v))(f)
        else:
            per[c] = (lambda s: lambda v: "—" if _missing(v) else s.format(v))(f)
    shown = pd.DataFrame({c: [per[c](v) for v in d[c]] for c in d.columns}, index=d.index)
    shown = shown.rename(columns=dict(headers or {}))
    uid = name + "-" + hashlib.sha256(d.to_csv().encode()).hexdigest()[:8]
    numeric = [i for i, c in enumerate(d.columns) if pd.api.types.is_numeric_dtype(d[c])
               and not pd.api.types.is_bool_dtype(d[c])]
    st = shown.style.set_uuid(uid).hide(axis="index")
    body = st.to_html(table_attributes='class="nsl-table"')
    if numeric:
        rules = "".join(f"#T_{uid} td.col{i} {{text-align: right}} " for i in numeric)
        body = f"<style>{rules}</style>{body}"
    fold = collapse if collapse is not None else len(d) > open_rows
    if fold:
        rows = f"{len(d)} row" + ("s" if len(d) != 1 else "")
        return (f'<details class="nsl-details"><summary>{_html.escape(title or "Table")} ({rows})</summary>'
                f'<div class="nsl-scroll">{body}</div></details>')
    head = f'<div class="nsl-table-title">{_html.escape(title)}</div>' if title else ""
    return f'{head}<div class="nsl-scroll">{body}</div>'


def _missing(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, (float, np.floating)) and math.isnan(v))
