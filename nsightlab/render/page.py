"""What the notebooks share: checking their parameters, opening the capture they are given,
selection, the page's summary, tables and headers, and printing why a section does not apply.

The notebooks hold narrative and figures only; they read a capture through nsightlab.store.read
(files, frames), compute with the analysis modules (counters, roofline, l2, timeline, options,
device) and draw with nsightlab.render.figures; values are written by nsightlab.render.numbers.

Parameters are checked before anything is drawn (:func:`check_parameters`, then :func:`select`,
:func:`choose`, :func:`check_field` against the capture's own values): a bad one stops the notebook
with a one-line :class:`ParameterError` naming the accepted values, under papermill and in JupyterLab
alike."""

from __future__ import annotations

import ast
import difflib
import hashlib
import html as _html
import math
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.counters import derivations, kernel_work, per_range, range_columns
from ..core.errors import NotApplicable, ProfileError
from ..core.text import csv_list
from ..problems import problem as problems
from ..store.captures import load_manifest, short_commit
from ..store.read import capture_schemas, case_names, load_ncu, resolve
from . import figures
from .numbers import MISSING, fmt_value, is_missing, natural_key, no_empty_brackets, plain_value

pd.set_option("display.max_colwidth", None)  # the tables' explanation columns are sentences

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
    vals = sorted({v for v in frame[col].dropna().unique()}, key=natural_key)
    shown = [plain_value(v) for v in vals]
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
        try:
            path = resolve(capture)
        except ProfileError as exc:
            raise ParameterError(f"capture={capture!r}: {exc}") from None
        if not (path / "manifest.json").exists():
            raise ParameterError(f"capture={capture!r}: {path} holds no manifest.json (not a capture folder)")
    manifest = load_manifest(path)
    # the plug-ins the capture names, also where its problem is registered already (a built-in one): their
    # implementations' colours reach every page; then its problem (its axis)
    problems.load_named(manifest)
    problems.of_manifest(manifest)
    return path, manifest


# --------------------------------------------------------------------------- what a capture holds


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


def sweep_field(frame: pd.DataFrame, preferred: str | None = None) -> str | None:
    """The field a capture sweeps: ``preferred`` (default: the sweep axis of the frame's problem,
    :func:`nsightlab.problems.problem.axis_for`) where it takes 2+ values, else the numeric decoded
    field with the most distinct values (ties: the first); None if no numeric field varies."""
    preferred = problems.axis_for(frame.columns, preferred)
    fields = [c for c in range_columns(frame) if c not in ("range", "domain", "variant", "pass", "schema", "options")]
    numeric = [c for c in fields if pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])
               and frame[c].nunique() > 1]  # a yes/no field (causal) is no axis to sweep along
    if preferred in numeric:
        return preferred
    return max(numeric, key=lambda c: frame[c].nunique(), default=None)


def say(text: str) -> None:
    from IPython.display import Markdown, display

    display(Markdown(text))


def _inline_md(text: str) -> str:
    """The little Markdown the summaries use (**bold**, *italic*, `code`) as HTML; a code span is taken as it
    is (a source line's ``*`` or ``**`` is no emphasis)."""
    parts = re.split(r"(`[^`]+`)", str(text))
    out = []
    for part in parts:
        if len(part) > 1 and part.startswith("`") and part.endswith("`"):
            out.append(f"<code>{_html.escape(part[1:-1], quote=False)}</code>")
            continue
        t = _html.escape(part, quote=False)
        t = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", t)
        out.append(re.sub(r"(?<![*\w])\*(?!\s)(.+?)(?<!\s)\*(?![*\w])", r"<i>\1</i>", t))
    return "".join(out)


def plain(text: str) -> str:
    """A summary line without its Markdown (for the index)."""
    return re.sub(r"\*\*(.+?)\*\*|`(.+?)`|(?<![*\w])\*(?!\s)(.+?)(?<!\s)\*(?![*\w])",
                  lambda m: next(g for g in m.groups() if g is not None), str(text))


def summary(lines: Iterable[str | tuple[str, Iterable[str]]], title: str = "At a glance") -> None:
    """The page's opening box: its two or three findings, computed from the data. A line may be a pair
    ``(head, items)``: the head with its items as a list under it (what to try, say). The lines travel
    with the output (metadata ``nsightlab.summary``: a pair's head, then its items), so the report index
    can quote them."""
    from IPython.display import HTML, display

    shown: list[tuple[str, list[str]]] = []
    for x in lines:
        if isinstance(x, tuple):
            head, items = x
            items = [no_empty_brackets(str(i)) for i in items if i]
            if items:
                shown.append((no_empty_brackets(str(head)), items))
        elif x:
            shown.append((no_empty_brackets(str(x)), []))
    if not shown:
        shown = [("nothing in this capture for this page to summarize (see the sections below)", [])]
    items_html = "".join(f"<li>{_inline_md(h)}" + ("<ul>" + "".join(f"<li>{_inline_md(i)}</li>" for i in sub) + "</ul>"
                                                  if sub else "") + "</li>" for h, sub in shown)
    flat = [plain(y) for h, sub in shown for y in (h, *sub)]
    display(HTML(f'<div class="nsl-summary"><div class="nsl-summary-title">{_html.escape(title)}</div>'
                 f"<ul>{items_html}</ul></div>"), metadata={"nsightlab": {"summary": flat}})


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
    deep = manifest.get("deep") or {}
    if deep.get("skipped_sections"):
        parts.append(f"**deep tier** without {', '.join(deep['skipped_sections'])} (the sweep's deep_skip)")
    if nsys:
        parts.append(f"**Nsight Systems** {nsys.get('version')}"
                     + (f", {nsys['iters']} measured launches per range" if nsys.get("iters") else ""))
    if t.get("total"):
        parts.append(f"capture took {t['total']:.0f} s")
    if manifest.get("provenance_note"):
        parts.append(f"*{manifest['provenance_note']}*")
    return " · ".join(parts)


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
    try:
        rng = per_range(kernel_work(load_ncu(path, manifest)))
    except NotApplicable:
        return None
    return rng if rng["flop"].notna().any() else None


def used_derivations(work: pd.DataFrame) -> pd.DataFrame:
    """The recipes that gave this capture's quantities (:func:`nsightlab.analysis.counters.derivations`),
    only those used, most launches first within each quantity."""
    d = derivations(work)
    d = d[d["launches"] > 0]
    return d[~d["quantity"].str.startswith(("hz_", "cycles_"))].reset_index(drop=True)


def table(df: pd.DataFrame, formats: Mapping[str, Any] | str | None = None, name: str = "t", *,
          headers: Mapping[str, str] | None = None, title: str = "", collapse: bool | None = None,
          open_rows: int = 12, right: Iterable[str] | None = None, widths: Mapping[str, str] | None = None,
          cell_css: Mapping[str, Callable[[Any], str]] | None = None) -> None:
    """Show ``df`` on the page, formatted by :func:`table_html`."""
    from IPython.display import HTML, display

    display(HTML(table_html(df, formats, name, headers=headers, title=title, collapse=collapse,
                            open_rows=open_rows, right=right, widths=widths, cell_css=cell_css)))


def format_rows(df: pd.DataFrame, key: str, columns: Iterable[str], formats: Mapping[str, str]) -> pd.DataFrame:
    """``df`` with ``columns`` written as text, one format per row: the row's ``key`` value picks its format
    in ``formats`` (a key, or a pattern such as ``*_pct`` or ``*_tbps``), else :func:`fmt_value`. For a table
    of quantities one under another (TB/s, %, counts), where one format per column cannot do."""
    def pick(k: object) -> str | None:
        k = str(k)
        if k in formats:
            return formats[k]
        return next((f for pat, f in formats.items() if "*" in pat and re.fullmatch(re.escape(pat).replace("\\*", ".*"), k)), None)

    out = df.copy()
    fmt = [pick(k) for k in df[key]]
    for c in columns:
        out[c] = [MISSING if is_missing(v) else (f.format(v) if f and isinstance(v, (int, float, np.number))
                                                 and not isinstance(v, (bool, np.bool_)) else fmt_value(v))
                  for v, f in zip(df[c], fmt, strict=True)]
    return out


def column_format(values: pd.Series) -> str | None:
    """One format for a numeric column, so that no column mixes ``2.2e+07`` with ``132,096``: whole numbers
    with thousands separators; other numbers with the decimals that give the smallest three significant
    digits (at most four), or all in exponent form where they span too many decades for that. None for a
    column with no finite number (:func:`fmt_value` writes its cells)."""
    v = pd.to_numeric(values, errors="coerce").astype(float)
    v = v[np.isfinite(v)]
    if not len(v):
        return None
    if (v == v.round()).all():
        return "{:,.0f}"
    a = v.abs()
    small = float(a[a > 0].min()) if (a > 0).any() else 1.0
    big = float(a.max())
    if big >= 1e7 or small < 1e-3:
        return "{:.2e}"
    decimals = int(min(4, max(0, 2 - math.floor(math.log10(small)))))
    return "{:,." + str(decimals) + "f}"


def _cell_formats(d: pd.DataFrame, formats: Mapping[str, Any] | str | None) -> dict[str, Callable[[Any], str]]:
    """Per column: how a cell is written (``formats``' string or callable, else :func:`fmt_value`)."""
    per: dict[str, Callable[[Any], str]] = {}
    for c in d.columns:
        f = formats.get(c) if isinstance(formats, Mapping) else (
            formats if pd.api.types.is_numeric_dtype(d[c]) and not pd.api.types.is_bool_dtype(d[c]) else None)
        if f is None and pd.api.types.is_numeric_dtype(d[c]) and not pd.api.types.is_bool_dtype(d[c]):
            f = column_format(d[c])
        if f is None:
            per[c] = fmt_value
        elif callable(f):
            per[c] = (lambda g: lambda v: MISSING if is_missing(v) else g(v))(f)
        else:
            per[c] = (lambda s: lambda v: MISSING if is_missing(v) else s.format(v))(f)
    return per


def table_html(df: pd.DataFrame, formats: Mapping[str, Any] | str | None = None, name: str = "t", *,
               headers: Mapping[str, str] | None = None, title: str = "", collapse: bool | None = None,
               open_rows: int = 12, right: Iterable[str] | None = None,
               cell_css: Mapping[str, Callable[[Any], str]] | None = None,
               widths: Mapping[str, str] | None = None) -> str:
    """``df`` as an HTML table for people: no index column, numbers formatted (``formats``: a
    format string or callable per column, or one for all; otherwise :func:`fmt_value`), ``—`` for
    missing values, headers renamed by ``headers`` (give units there: ``{"ms": "GPU time [ms]"}``).
    Numeric columns (or those named in ``right``) are right-aligned and never wrap; ``cell_css``
    styles a column's cells by their value (a comparison colours its verdicts); ``widths`` gives a column a
    CSS min-width (a path that should not be squeezed). Cells are HTML-escaped (a source line's
    ``<``), and the table fits the page (:func:`_fit_css`). Tables longer than
    ``open_rows`` (or ``collapse=True``) fold behind a ``title`` line, so the figure they support
    comes first. The element id is fixed by the content (the same capture gives the same bytes)."""
    d = df.reset_index(drop=True)
    per = _cell_formats(d, formats)
    shown = pd.DataFrame({c: [per[c](v) for v in d[c]] for c in d.columns}, index=d.index)
    # the id from the cells as written (not the raw floats, whose last digits differ between machines)
    uid = re.sub(r"[^A-Za-z0-9_-]+", "-", name) + "-" + hashlib.sha256(shown.to_csv().encode()).hexdigest()[:8]
    if right is None:
        right = [c for c in d.columns if pd.api.types.is_numeric_dtype(d[c]) and not pd.api.types.is_bool_dtype(d[c])]
    aligned = [i for i, c in enumerate(d.columns) if c in set(right)]
    headers = dict(headers or {})
    st = shown.rename(columns=headers).style.set_uuid(uid).hide(axis="index").format(escape="html")
    for col, css in (cell_css or {}).items():
        if col in shown:
            st = st.map(css, subset=[headers.get(col, col)])
    body = _breakable_headers(st.to_html(table_attributes='class="nsl-table"'))
    # a text column is never squeezed below about half its longest cell (up to 7em): a long name wraps, not each letter
    # (the name column: its names up to 16 characters whole, so that "mma_sync_fp16" does not break before its "16")
    sized = [(i, (widths or {}).get(c) or f"{min(max((len(v) for v in shown[c]), default=0), 16) * (0.6 if i == 0 else 0.45):.2g}em")
             for i, c in enumerate(d.columns) if i not in aligned or c in (widths or {})]
    body = f"<style>{_fit_css(uid, aligned, sized, len(d.columns))}</style>{body}"
    fold = collapse if collapse is not None else len(d) > open_rows
    if fold:
        rows = f"{len(d)} row" + ("s" if len(d) != 1 else "")
        return details(f"{_html.escape(title or 'Table')} ({rows})", f'<div class="nsl-scroll">{body}</div>')
    head = f'<div class="nsl-table-title">{_html.escape(title)}</div>' if title else ""
    return f'{head}<div class="nsl-scroll">{body}</div>'


def _breakable_headers(body: str) -> str:
    """A header such as ``tiled_uncoalesced`` may break after each underscore (``<wbr>``); cells are left as
    they are (tests and readers search them)."""
    def wbr(m: re.Match) -> str:
        return re.sub(r"(>[^<]*<)", lambda t: t.group(1).replace("_", "_<wbr>"), m.group(0))

    return re.sub(r"<thead>.*?</thead>", wbr, body, count=1, flags=re.S)


def _fit_css(uid: str, aligned: list[int], widths: list[tuple[int, str]], columns: int = 0) -> str:
    """The rules that keep table ``uid`` within the page (about 1180 px): headers wrap between words, text
    cells wrap anywhere a long name, path or message must break (numbers, right-aligned, never wrap), and
    the first column stays in view should the table still scroll sideways. ``widths``: (column, CSS min-width);
    a table of many ``columns`` has narrower cell padding, and past 16 a smaller type."""
    t = f"#T_{uid}"
    rules = [f"{t} thead th{{white-space:normal;overflow-wrap:normal;min-width:3em}}",
             f"{t} td{{overflow-wrap:anywhere}}",
             f"{t} td.col0,{t} th.col0{{position:sticky;left:0;z-index:1;background:#fff}}",
             f"{t} thead th.col0{{background:#f5f6f9}}"]
    rules += [f"{t} td.col{i}{{text-align:right;white-space:nowrap;overflow-wrap:normal}}" for i in aligned]
    rules += [f"{t} td.col{i}{{min-width:{w}}}" for i, w in widths if w not in ("0em", "0")]
    if columns > 16:  # a wide table: a smaller type, so that it still fits at 1400 px
        rules.append(f"{t} th,{t} td{{padding-left:.3em;padding-right:.3em;font-size:.86em}}")
    elif columns > 8:
        rules.append(f"{t} th,{t} td{{padding-left:.4em;padding-right:.4em}}")
    return " ".join(rules)


def details(summary: str, body: str, open_: bool = False) -> str:
    """``body`` (HTML) folded behind a ``summary`` line (HTML), unfolded when ``open_``."""
    return f'<details class="nsl-details"{" open" if open_ else ""}><summary>{summary}</summary>{body}</details>'
