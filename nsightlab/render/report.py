"""Render every notebook on every capture into reports/<gpu>/<suite>/<notebook>.html, plus an index.

    python -m nsightlab.report --profiles profiles --reports reports [--standalone] [--only roofline,...]

Which notebooks a capture gets is decided from its data (:func:`applicable`): each notebook declares
what it needs (:data:`NEEDS`: files, counter quantities from the metrics the manifest lists, a sweep,
option settings); the index lists the others with the reason. Each notebook runs headlessly through
papermill and is converted by nbconvert into a temporary folder; the page is moved into place only
when complete. A broken capture is reported and the others still render; the exit status is
non-zero if any failed.

Pages are deterministic (the same inputs give the same bytes) and incremental: beside each page,
``<notebook>.meta.json`` records the hash of everything that went into it (the notebook, the
capture's files, nsightlab's code, the parameters, the rendering library versions) and the page's
summary; a page whose inputs did not change is not rendered again. By default the pages share
``plotly.min.js`` and ``nsightlab.css`` at the top of the reports folder (and say so on the page
when it is opened without them); ``--standalone`` writes self-contained pages instead. No page makes
an outside request.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import html
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..analysis.counters import FLOP_TERMS, MEANING, available, needed_metrics
from ..core.ranges import decode
from ..store.captures import ProfileError, list_captures, load_bench, short_commit, validate
from . import page as nb_helpers

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"

#: every notebook, in the order the index lists them
NOTEBOOK_ORDER = ("device", "correctness", "performance", "roofline", "l2_thrashing", "timeline", "options")
#: the order in which a capture's pages lend their findings to the index
SUMMARY_ORDER = ("performance", "roofline", "l2_thrashing", "timeline", "options", "correctness", "device")
PLOTLY_JS = "plotly.min.js"
PAGE_CSS = "nsightlab.css"
#: bump when the page format changes in a way the hashed inputs do not show
FORMAT = "nsightlab-report 2"


@dataclass(frozen=True)
class Needs:
    """What a notebook needs from a capture to have something to show."""

    #: data files, by kind: "ncu" (a .ncu-rep or raw CSV), "nsys" (a .sqlite export), "bench" (benchmark CSVs)
    files: tuple[str, ...] = ()
    #: counter quantities (nsightlab.analysis.counters), each group any-of, every group required
    quantities: tuple[tuple[str, ...], ...] = ()
    #: manifest ``gpu`` keys
    gpu: tuple[str, ...] = ()
    #: a sweep: ranges of one case that differ in one numeric field, at least this many points
    sweep_points: int = 0
    #: an option study: a case run with at least two option settings
    options: bool = False


FLOP_QUANTITIES = tuple(f"inst_{k}" for parts in FLOP_TERMS.values() for k, _ in parts)
NEEDS: dict[str, Needs] = {
    "device": Needs(gpu=("name",)),
    "correctness": Needs(files=("bench",)),
    "performance": Needs(files=("bench",)),
    "roofline": Needs(files=("ncu",), quantities=(("seconds",), FLOP_QUANTITIES, ("bytes_DRAM", "bytes_L2", "bytes_L1"))),
    "l2_thrashing": Needs(files=("ncu",), quantities=(("l2_hit_rate",), ("bytes_DRAM",)), gpu=("l2_bytes",),
                          sweep_points=3),
    "timeline": Needs(files=("nsys",)),
    "options": Needs(files=("ncu",), quantities=(("seconds",),), options=True),
}
_FILES = {"ncu": ("Nsight Compute report (*.ncu-rep) or raw CSV export", nb_helpers.ncu_files),
          "nsys": ("Nsight Systems SQLite export (*.sqlite)", nb_helpers.nsys_files),
          "bench": ("benchmark CSV with its manifest (<suite>.csv + <suite>.manifest.json)", nb_helpers.bench_files)}


def _decoded_cases(manifest: dict) -> list[dict]:
    schemas = nb_helpers.capture_schemas(manifest)
    return [decode(n, schemas) for n in nb_helpers.case_names(manifest)]


def _has_sweep(rows: list[dict], points: int) -> bool:
    """Some numeric field takes ``points`` values among cases equal in every other field (a field a
    case does not have, such as another implementation's option, counts as equal)."""
    if not rows:
        return False
    df = pd.DataFrame(rows)
    skip = {"range", "variant", "pass", "schema", "options", "domain"}
    numeric = [c for c in df.columns if c not in skip and pd.api.types.is_numeric_dtype(df[c])]
    for x in numeric:
        keys = [c for c in df.columns if c not in (x, "range")]
        if keys:
            most = df.astype({c: str for c in keys}).fillna({c: "" for c in keys}).groupby(keys, dropna=False)[x] \
                .nunique().max()
        else:
            most = df[x].nunique()
        if pd.notna(most) and int(most) >= points:
            return True
    return False


def _has_option_study(rows: list[dict]) -> bool:
    df = pd.DataFrame(rows)
    if df.empty or "options" not in df or not (df["options"].fillna("") != "").any():
        return False
    opt_keys = {item.split("=", 1)[0] for o in df["options"].dropna() for item in str(o).split(";") if "=" in item}
    keys = [c for c in df.columns if c not in ("range", "options", "schema", *opt_keys)]
    return bool((df.astype({c: str for c in keys}).groupby(keys, dropna=False)["options"].nunique() >= 2).any())


def why_not(notebook: str, capture_path: Path, manifest: dict) -> str | None:
    """None if ``notebook`` has something to show for the capture, else the reason (what is missing:
    files, the metric names that would give the missing quantities, a sweep, option settings)."""
    need = NEEDS[notebook]
    reasons = []
    gpu = manifest.get("gpu") or {}
    missing_gpu = [k for k in need.gpu if not gpu.get(k)]
    if missing_gpu:
        reasons.append("the manifest does not record the GPU's " + ", ".join(missing_gpu))
    for kind in need.files:
        what, finder = _FILES[kind]
        if not finder(capture_path):
            reasons.append(f"no {what} in the capture (tools: {', '.join(nb_helpers.tools_of(manifest)) or 'none listed'})")
    if reasons:
        return "; ".join(reasons)
    if need.quantities:
        listed = (manifest.get("ncu") or {}).get("metrics") or []
        if not listed:
            reasons.append("the manifest lists no Nsight Compute metrics (ncu.metrics), so what the report holds is unknown")
        else:
            got = available(listed)
            for group in need.quantities:
                if not any(got.get(q) for q in group):
                    names = [needed_metrics(q)[0] for q in group]
                    label = "FLOPs" if group == FLOP_QUANTITIES else " or ".join(MEANING.get(q, q) for q in group)
                    reasons.append(f"missing metrics for {label}: {', '.join(names)} (or their rate forms)")
    rows = _decoded_cases(manifest)
    if need.sweep_points:
        known = rows or None
        ranges = (manifest.get("ncu") or {}).get("ranges")
        if known is not None and not _has_sweep(rows, need.sweep_points):
            reasons.append(f"no sweep: no case is run at {need.sweep_points} or more values of one field")
        elif known is None and isinstance(ranges, int) and ranges < need.sweep_points:
            reasons.append(f"no sweep: the report holds {ranges} NVTX range(s)")
    if need.options and not _has_option_study(rows):
        reasons.append("no option study: no case is run with two or more option settings"
                       + ("" if rows else " (the capture lists no cases with decoded options)"))
    return "; ".join(reasons) or None


def applicable(capture_path: Path | str, manifest: dict) -> tuple[list[str], dict[str, str]]:
    """The notebooks that have something to show for a capture, decided from its data (files,
    the metrics its manifest lists, its cases); and for each other notebook the reason why not."""
    ok, reasons = [], {}
    for nbname in NOTEBOOK_ORDER:
        why = why_not(nbname, Path(capture_path), manifest)
        if why is None:
            ok.append(nbname)
        else:
            reasons[nbname] = why
    return ok, reasons


def report_parameters(notebook: Path, manifest: dict, name: str) -> dict[str, Any]:
    """Parameters a capture asks its reports to use (manifest ``reports.<notebook>``, or the sweep's),
    restricted to those the notebook declares."""
    wanted = dict(((manifest.get("sweep") or {}).get("reports") or {}).get(name) or {})
    wanted.update((manifest.get("reports") or {}).get(name) or {})
    if not wanted:
        return {}
    return {k: v for k, v in wanted.items() if k in declared_parameters(notebook)}


def declared_parameters(notebook: Path) -> set[str]:
    """The parameters ``notebook`` declares (its parameters cell, as papermill reads it)."""
    return set(_declared(str(notebook), Path(notebook).stat().st_mtime_ns))


@functools.lru_cache(maxsize=64)
def _declared(notebook: str, _mtime: int) -> tuple[str, ...]:
    import papermill as pm

    return tuple(pm.inspect_notebook(notebook))


def style_order(captures: list[tuple[Any, dict]]) -> list[str]:
    """Every implementation of every capture, captures taken in the order they were made (so a new
    capture's new names come last and no colour already on a page moves): one colour per name on
    every page."""
    names: dict[str, None] = {}
    for cap, man in sorted(captures, key=lambda cm: (str(cm[1].get("created", "")), cm[0].label)):
        for n in nb_helpers.implementations(man):
            names.setdefault(n, None)
        for csv in nb_helpers.bench_files(cap.path):
            try:
                for n in pd.read_csv(csv, usecols=["impl"])["impl"].astype(str):
                    names.setdefault(n, None)
            except (ValueError, OSError):
                continue
    return list(names)


# --------------------------------------------------------------------------- assets and page template

CSS = """
:root{--nsl-fg:#1d2433;--nsl-muted:#5b6475;--nsl-line:#dde1e8;--nsl-accent:#1f5fbf}
*{box-sizing:border-box}
body{margin:0;color:var(--nsl-fg);font:15px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;background:#fff}
main{max-width:1240px;margin:0 auto;padding:18px 28px 60px}
h1{font-size:1.75em;margin:.4em 0 .3em} h2{font-size:1.3em;margin:1.6em 0 .4em;padding-bottom:.2em;
border-bottom:1px solid var(--nsl-line)} h3{font-size:1.08em;margin:1.2em 0 .3em}
p{margin:.45em 0} a{color:var(--nsl-accent)} a.anchor-link{display:none}
code{font:.88em/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;background:#f3f4f7;padding:.05em .3em;border-radius:3px}
blockquote{margin:.6em 0;padding:.4em .9em;border-left:4px solid #e0b400;background:#fffbea;color:#4a3b00}
.jp-Cell{margin:0;padding:0} .jp-InputPrompt,.jp-OutputPrompt,.jp-Collapser{display:none}
.jp-OutputArea-output{overflow-x:auto} .jp-RenderedText pre,pre{white-space:pre-wrap;font-size:.85em}
.jp-mod-noOutputs.jp-mod-noInput{display:none}
.nsl-summary{border:1px solid #b9cbe8;background:#f3f7fd;border-radius:6px;padding:.6em 1.1em;margin:.8em 0 .6em}
.nsl-summary-title{font-weight:600;color:#1f4f99;text-transform:uppercase;font-size:.78em;letter-spacing:.06em}
.nsl-summary ul{margin:.3em 0 .1em;padding-left:1.2em} .nsl-summary li{margin:.2em 0}
.nsl-note{color:var(--nsl-muted);font-size:.86em;line-height:1.45}
.nsl-scroll{overflow-x:auto;margin:.4em 0 1em}
table.nsl-table,table.dataframe{border-collapse:collapse;font-size:.84em;margin:0}
table.nsl-table th,table.nsl-table td,table.dataframe th,table.dataframe td{padding:.28em .7em;
border-bottom:1px solid var(--nsl-line);text-align:left;vertical-align:top;max-width:46em}
table.nsl-table thead th,table.dataframe thead th{background:#f5f6f9;font-weight:600;border-bottom:2px solid #c9ced8;
white-space:nowrap} table.nsl-table tbody tr:hover{background:#fafbfd}
.nsl-table-title{font-weight:600;font-size:.9em;margin-top:.8em}
details.nsl-details{margin:.3em 0 1.2em;border:1px solid var(--nsl-line);border-radius:5px;padding:.3em .8em}
details.nsl-details>summary{cursor:pointer;color:var(--nsl-accent);font-size:.9em}
details.nsl-details[open]>summary{margin-bottom:.4em}
.nsl-missing{display:none;background:#fff3cd;border:1px solid #e0b400;padding:.6em 1em;margin:1em auto;
max-width:1180px;font-family:system-ui,sans-serif}
"""

TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block notebook_css -%}{{ resources.nsightlab_head }}{%- endblock notebook_css -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block body_header -%}
<body class="jp-Notebook nsl-page">
{{ resources.nsightlab_banner }}
<main>
{%- endblock body_header -%}
"""


def _banner(js: str) -> str:
    """What a page says when its shared plotly.js is not where it expects it."""
    return (f'<div id="nsl-missing" class="nsl-missing" style="display:none;background:#fff3cd;border:1px solid '
            f'#e0b400;padding:.6em 1em;margin:1em;font-family:sans-serif"><b>The figures on this page did not load.'
            f'</b> They need <code>{html.escape(js)}</code> (shared by every page of the reports folder), which is not '
            f'there: this page was copied or opened without the folder it belongs to. Open it inside that folder, or '
            f'render self-contained pages with <code>python -m nsightlab.report --standalone</code>.</div>'
            '<script>window.addEventListener("load",function(){if(typeof window.Plotly==="undefined"&&'
            'document.querySelector(".plotly-graph-div")){document.getElementById("nsl-missing").style.display='
            '"block";}});</script>')


def _write_if_changed(path: Path, text: str) -> bool:
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return True


def ship_assets(reports: Path) -> None:
    """One copy of plotly.js and of the page stylesheet beside the reports (offline, and each page
    stays small); rewritten only when they change."""
    from plotly.offline import get_plotlyjs

    _write_if_changed(reports / PLOTLY_JS, get_plotlyjs())
    _write_if_changed(reports / PAGE_CSS, CSS.strip() + "\n")


def ship_plotly_js(reports: Path) -> None:  # the older name
    ship_assets(reports)


def _exporter() -> Any:
    import jinja2
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", extra_loaders=[jinja2.DictLoader({"nsightlab.html.j2": TEMPLATE})])
    exporter.template_file = "nsightlab.html.j2"
    exporter.exclude_input = True
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    return exporter


def _page_resources(out_html: Path, reports: Path | None, standalone: bool) -> dict[str, Any]:
    if standalone or reports is None:
        return {"nsightlab_head": f"<style>{CSS}</style>", "nsightlab_banner": ""}
    css = os.path.relpath(reports / PAGE_CSS, out_html.parent)
    js = os.path.relpath(reports / PLOTLY_JS, out_html.parent)
    return {"nsightlab_head": f'<link rel="stylesheet" href="{html.escape(css)}">', "nsightlab_banner": _banner(js)}


#: kernels of notebooks being rendered, so that an interrupt can stop them (they run in their own session)
_KERNELS: set[Any] = set()
_KERNELS_LOCK = threading.Lock()


def _kernel_manager_class() -> type:
    from jupyter_client.manager import AsyncKernelManager

    class TrackedKernelManager(AsyncKernelManager):
        async def start_kernel(self, **kw: Any) -> None:  # type: ignore[override]
            await super().start_kernel(**kw)
            with _KERNELS_LOCK:
                _KERNELS.add(self)

        async def shutdown_kernel(self, *a: Any, **kw: Any) -> None:  # type: ignore[override]
            with _KERNELS_LOCK:
                _KERNELS.discard(self)
            await super().shutdown_kernel(*a, **kw)

    return TrackedKernelManager


def stop_kernels() -> None:
    """Kill the kernels this process started for notebooks still running (by their process ids)."""
    with _KERNELS_LOCK:
        live = list(_KERNELS)
    for km in live:
        proc = getattr(getattr(km, "provisioner", None), "process", None)
        if proc is not None:
            try:
                proc.kill()
            except OSError:
                pass


def page_summary(node: Any) -> list[str]:
    """The summary lines a notebook published (output metadata ``nsightlab.summary``)."""
    for cell in node.cells:
        for out in cell.get("outputs", []):
            meta = (out.get("metadata") or {}).get("nsightlab") or {}
            if meta.get("summary"):
                return [str(x) for x in meta["summary"]]
    return []


def page_title(node: Any, default: str) -> str:
    for cell in node.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return default


def render_notebook(nb: Path, params: dict, out_html: Path, kernel: str = "python3", *, reports: Path | None = None,
                    standalone: bool = False, stop: threading.Event | None = None) -> dict[str, Any]:
    """Execute ``nb`` with ``params`` (papermill, working directory: the repository) and write its
    page to ``out_html`` atomically. Returns the page's summary and title."""
    import nbformat
    import papermill as pm

    out_html.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_html.parent, prefix=".render-") as tmp:
        executed = Path(tmp) / nb.name
        pm.execute_notebook(str(nb), str(executed), parameters=params, kernel_name=kernel, progress_bar=False,
                            cwd=str(REPO), kernel_manager_class=_kernel_manager_class())
        node = nbformat.read(executed, as_version=4)
        for i, cell in enumerate(node.cells):  # papermill gives its injected cell a random id: pages must not churn
            if "injected-parameters" in cell.get("metadata", {}).get("tags", []):
                cell["id"] = f"injected-parameters-{i}"
        body, _ = _exporter().from_notebook_node(node, resources=_page_resources(out_html, reports, standalone))
        if stop is not None and stop.is_set():
            raise KeyboardInterrupt
        tmp_html = Path(tmp) / out_html.name
        tmp_html.write_text(body, encoding="utf-8")
        os.replace(tmp_html, out_html)
    return {"summary": page_summary(node), "title": page_title(node, nb.stem)}


# --------------------------------------------------------------------------- incremental rendering


def _hash_files(files: list[Path], root: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(str(f.relative_to(root)).encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()


def code_hash() -> str:
    """nsightlab's code and the versions of the libraries that shape a page."""
    from importlib.metadata import PackageNotFoundError, version

    pkg = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(_hash_files(sorted(pkg.rglob("*.py")), pkg).encode())
    for lib in ("pandas", "plotly", "papermill", "nbconvert", "nbformat", "numpy", "jinja2", "ncu_report"):
        try:
            h.update(f"{lib}={version(lib)};".encode())
        except PackageNotFoundError:
            h.update(f"{lib}=-;".encode())
    return h.hexdigest()


def capture_hash(path: Path) -> str:
    return _hash_files([p for p in Path(path).rglob("*") if p.is_file()], Path(path))


def inputs_hash(notebook: Path, capture: str, params: dict, code: str, standalone: bool) -> str:
    stable = {k: v for k, v in params.items() if k != "capture"}  # the absolute path: the content is hashed
    h = hashlib.sha256()
    for part in (FORMAT, notebook.read_bytes().hex(), capture, json.dumps(stable, sort_keys=True), code,
                 "standalone" if standalone else "shared"):
        h.update(str(part).encode() + b"\0")
    return h.hexdigest()


def meta_path(page: Path) -> Path:
    return page.with_name(page.stem + ".meta.json")


def read_meta(page: Path) -> dict[str, Any]:
    try:
        data = json.loads(meta_path(page).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, json.JSONDecodeError):
        return {}


def write_meta(page: Path, data: dict[str, Any]) -> None:
    _write_if_changed(meta_path(page), json.dumps(data, indent=1, sort_keys=True) + "\n")


# --------------------------------------------------------------------------- the index

NOTEBOOK_BLURB = {
    "device": "the GPU as captured, measured ceilings, each case's modeled working set against the L2",
    "correctness": "every benchmarked result against the reference computation",
    "performance": "latency and TFLOP/s of every benchmarked implementation, speedups against a reference",
    "roofline": "hierarchical roofline (DRAM, L2, L1) with Nsight's peaks; counted FLOPs against the work model",
    "l2_thrashing": "L2 hit rate and DRAM traffic along the sweep, modeled and measured onset of thrashing",
    "timeline": "NVTX ranges and their kernels in time (Nsight Systems), GPU time, launch gaps, throughput",
    "options": "option studies (block size, tile shape, ...): time, occupancy, registers, roofline",
    "compare": "two captures side by side",
}


def read_comparisons(reports: Path) -> list[dict[str, str]]:
    """``reports/compare/index.json`` if present: a list (or ``{"comparisons": [...]}``) of entries
    with the page (``file`` or ``html``), ``title``, ``base``, ``new`` and ``summary``; entries
    without a page are left out."""
    folder = reports / "compare"
    try:
        data = json.loads((folder / "index.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return []
    items = data.get("comparisons", []) if isinstance(data, dict) else data
    out = []
    for e in items if isinstance(items, list) else []:
        if not isinstance(e, dict):
            continue
        page = e.get("file") or e.get("html")
        if not page:
            continue
        side: dict[str, Any] = {}
        if e.get("json") and (not e.get("base") or not e.get("new")):
            try:
                side = json.loads((folder / str(e["json"])).read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                side = {}
        href = page if (reports / str(page)).exists() and not (folder / str(page)).exists() else f"compare/{page}"
        s = e.get("summary")
        if isinstance(s, list):
            s = "; ".join(str(x) for x in s)
        elif isinstance(s, dict):
            s = "; ".join(f"{k}: {v}" for k, v in s.items())
        out.append({"href": str(href), "title": str(e.get("title") or Path(str(page)).stem),
                    "base": str(e.get("base") or side.get("base") or "?"),
                    "new": str(e.get("new") or side.get("new") or "?"), "summary": str(s or "")})
    return out


INDEX_CSS = """body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:1000px;margin:2em auto;
padding:0 1.2em;line-height:1.5;color:#1d2433}
h2{border-bottom:1px solid #dde1e8;padding-bottom:.2em;margin-top:1.8em;font-size:1.25em}
.cap{color:#5b6475;font-size:.88em} a{color:#1f5fbf;text-decoration:none} a:hover{text-decoration:underline}
.bad{color:#a00} .na{color:#7a8190;font-size:.86em}
.find{background:#f3f7fd;border:1px solid #b9cbe8;border-radius:6px;padding:.4em 1em .4em 2em;margin:.6em 0}
.find li{margin:.15em 0} .pages li{margin:.35em 0} .pages .first{color:#5b6475;font-size:.88em;display:block}
.top{background:#f3f7fd;border:1px solid #b9cbe8;border-radius:6px;padding:.6em 1.1em}"""


def write_index(reports: Path, entries: list[tuple[str, str, str]], failures: list[tuple[str, str]],
                captions: dict[str, str] | None = None, skipped: dict[str, dict[str, str]] | None = None,
                title: str = "Nsight reports", summaries: dict[str, list[str]] | None = None,
                comparisons: list[dict[str, str]] | None = None) -> bool:
    """reports/index.html: a short summary of the captures; the reports grouped by capture, each
    capture captioned from its manifest with its findings (from its pages' summaries), each page with
    its first finding; the notebooks that do not apply and why (``skipped``: capture label ->
    notebook -> reason); the comparisons. Written only if it changed; returns whether it did."""
    captions = captions or {}
    skipped = skipped or {}
    summaries = summaries or {}
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for label, href, desc in entries:
        groups.setdefault(label.rsplit("/", 1)[0], []).append((label.rsplit("/", 1)[1], href, desc))
    for cap in skipped:
        groups.setdefault(cap, [])
    sections, headlines = [], []
    for cap, items in groups.items():
        pages = {nb: href for nb, href, _ in items}
        finds: list[str] = []
        for nb in SUMMARY_ORDER:
            lines = summaries.get(f"{cap}/{nb}") or []
            for line in lines[: (2 if not finds else 1)]:
                if len(finds) < 3:
                    finds.append(line)
        if finds:
            headlines.append((cap, finds[0]))
        rows = []
        for nb, href, desc in items:
            first = (summaries.get(f"{cap}/{nb}") or [""])[0]
            rows.append(f'<li><a href="{html.escape(href)}">{html.escape(nb)}</a> &mdash; '
                        f'{html.escape(NOTEBOOK_BLURB.get(nb, desc))}'
                        + (f'<span class="first">{html.escape(first)}</span>' if first else "") + "</li>")
        na = "\n".join(f'<li class="na">{html.escape(nb)}: not applicable &mdash; {html.escape(why)}</li>'
                       for nb, why in skipped.get(cap, {}).items())
        cap_html = f'<p class="cap">{html.escape(captions[cap])}</p>' if cap in captions else ""
        find_html = ('<ul class="find">' + "".join(f"<li>{html.escape(f)}</li>" for f in finds) + "</ul>") if finds \
            else ""
        first_page = next(iter(pages.values()), None)
        head = f'<a href="{html.escape(first_page)}">{html.escape(cap)}</a>' if first_page else html.escape(cap)
        sections.append(f'<h2 id="{html.escape(cap)}">{head}</h2>{cap_html}{find_html}'
                        f'<ul class="pages">{"".join(rows)}{na}</ul>')
    gpus = sorted({c.split("/", 1)[0] for c in groups if "/" in c and not c.startswith("live/")})
    n_pages = sum(len(v) for v in groups.values())
    top = (f"<p>{len(groups)} capture{'s' if len(groups) != 1 else ''} on {len(gpus)} GPU"
           f"{'s' if len(gpus) != 1 else ''} ({', '.join(gpus)}), {n_pages} pages"
           + (f", {len(comparisons)} comparison{'s' if len(comparisons) != 1 else ''}" if comparisons else "")
           + (f"; <b class='bad'>{len(failures)} failed to render</b>" if failures else "") + ".</p>")
    if headlines:
        top += "<ul>" + "".join(f'<li><a href="#{html.escape(c)}">{html.escape(c)}</a>: {html.escape(f)}</li>'
                                for c, f in headlines) + "</ul>"
    cmp_html = ""
    if comparisons:
        items = "".join(f'<li><a href="{html.escape(c["href"])}">{html.escape(c["title"])}</a> &mdash; '
                        f'{html.escape(c["base"])} → {html.escape(c["new"])}'
                        + (f'<span class="first">{html.escape(c["summary"])}</span>' if c["summary"] else "")
                        + "</li>" for c in comparisons)
        cmp_html = f'<h2 id="comparisons">Comparisons</h2><ul class="pages">{items}</ul>'
    bad = "\n".join(f"<li><b>{html.escape(label)}</b>: {html.escape(err)}</li>" for label, err in failures)
    page = f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>{html.escape(title)}</title>
<style>{INDEX_CSS}</style></head>
<body><h1>{html.escape(title)}</h1>
<div class="top">{top}</div>
<p class="cap">Rendered from the captures in <code>profiles/</code> by <code>python -m nsightlab.report</code>
(papermill + nbconvert; every page works offline). Each capture lists the notebooks that apply to it, and why the
others do not.</p>
{"".join(sections)}
{cmp_html}
{'<h2 class="bad">Captures that failed to render</h2><ul>' + bad + "</ul>" if failures else ""}
</body></html>
"""
    return _write_if_changed(reports / "index.html", page)


def caption(manifest: dict) -> str:
    g = manifest.get("gpu") or {}
    t = manifest.get("timings_seconds") or {}
    env = manifest.get("environment") or {}
    parts = [str(manifest.get("description", "")).rstrip(".") + ".", f"{g.get('name', '?')}"]
    if env.get("torch"):
        parts.append(f"torch {env['torch']}")
    if manifest.get("git_commit"):
        parts.append(f"commit {short_commit(manifest.get('git_commit'), 10)}")
    how = "imported" if manifest.get("origin") == "imported" else "captured"
    parts.append(f"{how} {manifest.get('created')}" + (f" in {t['total']:.0f} s" if t.get("total") else ""))
    return parts[0] + " " + ", ".join(parts[1:]) + "."


# --------------------------------------------------------------------------- the runner


@dataclass
class Job:
    cap: Any
    nb: str
    out: Path
    params: dict[str, Any]
    inputs: str

    @property
    def label(self) -> str:
        return f"{self.cap.label}/{self.nb}"


def _clean_render_dirs(reports: Path) -> None:
    for stale in reports.glob("**/.render-*"):
        shutil.rmtree(stale, ignore_errors=True)


def main(argv: list[str] | None = None, prog: str = "nsightlab report") -> int:
    try:
        return _main(argv, prog)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None, prog: str) -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profiles", default=str(REPO / "profiles"))
    p.add_argument("--reports", default=str(REPO / "reports"))
    p.add_argument("--kernel", default="python3", help="Jupyter kernel name for papermill")
    p.add_argument("--jobs", type=int, default=2, help="notebooks rendered in parallel (default 2)")
    p.add_argument("--only", default="", help="comma-separated notebook names to render (default: all that apply); "
                   "the index still lists every page already rendered")
    p.add_argument("--title", default="Nsight reports", help="the index page's title")
    p.add_argument("--standalone", action="store_true",
                   help="self-contained pages (plotly.js and the stylesheet inside each page; still offline)")
    p.add_argument("--force", action="store_true", help="render every page even if its inputs did not change")
    a = p.parse_args(argv)
    only = [n.strip() for n in a.only.split(",") if n.strip()]
    unknown = [n for n in only if n not in NOTEBOOK_ORDER]
    if unknown:
        print(f"error: --only {','.join(unknown)}: no such notebook; the notebooks are {', '.join(NOTEBOOK_ORDER)}",
              file=sys.stderr)
        return 2
    profiles, reports = Path(a.profiles), Path(a.reports)
    try:
        captures = list_captures(profiles)
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    reports.mkdir(parents=True, exist_ok=True)
    if not a.standalone:
        ship_assets(reports)
    t_all = time.perf_counter()
    failures: list[tuple[str, str]] = []
    captions: dict[str, str] = {}
    skipped: dict[str, dict[str, str]] = {}
    good: list[tuple[Any, dict]] = []
    for cap in captures:
        try:
            man = validate(cap.path, open_reports=False)  # a clear error beats a traceback from inside a notebook
            if nb_helpers.bench_files(cap.path) or "bench" in nb_helpers.tools_of(man):
                load_bench(cap.path)
        except ProfileError as exc:
            failures.append((cap.label, str(exc)))
            print(f"FAILED {cap.label}: {exc}", file=sys.stderr, flush=True)
            continue
        captions[cap.label] = caption(man)
        good.append((cap, man))
    order = ",".join(style_order(good))
    code = code_hash()
    pages: list[Job] = []
    for cap, man in good:
        ok, reasons = applicable(cap.path, man)
        skipped[cap.label] = reasons
        cap_hash = capture_hash(cap.path)
        for nb in ok:
            nb_file = NOTEBOOKS / f"{nb}.ipynb"
            out = reports / cap.gpu / cap.suite / f"{nb}.html"
            js = "inline" if a.standalone else os.path.relpath(reports / PLOTLY_JS, out.parent)
            params = {**report_parameters(nb_file, man, nb), "capture": str(cap.path.resolve()), "plotlyjs": js}
            if "style_order" in declared_parameters(nb_file):
                params["style_order"] = order
            pages.append(Job(cap, nb, out, params, inputs_hash(nb_file, f"{cap.label}:{cap_hash}", params, code,
                                                               a.standalone)))
    if not pages and not failures:
        print(f"error: no capture under {profiles} holds anything a notebook can render", file=sys.stderr)
        return 2
    todo = [j for j in pages if (not only or j.nb in only)
            and (a.force or not j.out.exists() or read_meta(j.out).get("inputs") != j.inputs)]
    up_to_date = sum(1 for j in pages if (not only or j.nb in only)) - len(todo)
    if up_to_date:
        print(f"{up_to_date} page(s) up to date (inputs unchanged)", flush=True)
    stop = threading.Event()
    summaries: dict[str, list[str]] = {}

    def one(i: int, job: Job) -> tuple[Job, str | None]:
        if stop.is_set():
            return job, "interrupted"
        t0 = time.perf_counter()
        try:
            info = render_notebook(NOTEBOOKS / f"{job.nb}.ipynb", job.params, job.out, a.kernel, reports=reports,
                                   standalone=a.standalone, stop=stop)
            write_meta(job.out, {"inputs": job.inputs, "summary": info["summary"], "title": info["title"],
                                 "notebook": job.nb, "capture": job.cap.label})
            print(f"[{i}/{len(todo)}] {job.label}: wrote {job.out} ({time.perf_counter() - t0:.1f} s)", flush=True)
            return job, None
        except KeyboardInterrupt:
            return job, "interrupted"
        except Exception as exc:  # noqa: BLE001 - one broken capture must not stop the others
            if stop.is_set():
                return job, "interrupted"
            text = str(exc).strip()
            msg = text.splitlines()[-1] if text else type(exc).__name__
            print(f"[{i}/{len(todo)}] {job.label}: FAILED: {type(exc).__name__}: {msg}", file=sys.stderr, flush=True)
            return job, f"{type(exc).__name__}: {msg}"

    from concurrent.futures import ThreadPoolExecutor, as_completed

    pool = ThreadPoolExecutor(max_workers=max(1, a.jobs))
    try:
        futures = [pool.submit(one, i, j) for i, j in enumerate(todo, 1)]
        for fut in as_completed(futures):
            job, err = fut.result()
            if err:
                failures.append((job.label, err))
    except KeyboardInterrupt:
        stop.set()
        print("interrupted: stopping the notebooks still running ...", file=sys.stderr, flush=True)
        pool.shutdown(wait=False, cancel_futures=True)
        stop_kernels()
        pool.shutdown(wait=True)
        _clean_render_dirs(reports)
        print("interrupted: no page was left half-written; the index is unchanged", file=sys.stderr, flush=True)
        return 130
    finally:
        pool.shutdown(wait=True)
        _clean_render_dirs(reports)
    failed = {label for label, _ in failures}
    entries = []
    for j in pages:
        if j.out.exists() and j.label not in failed:
            meta = read_meta(j.out)
            summaries[j.label] = list(meta.get("summary") or [])
            entries.append((j.label, os.path.relpath(j.out, reports), f"{j.nb} report of {j.cap.label}"))
    for page in sorted((reports / "live").glob("**/*.html")):  # notebooks run in live mode on a GPU, committed
        captions[f"live/{page.parent.relative_to(reports / 'live')}"] = (
            "Notebooks run in live mode on the GPU node by papermill: captured there, then analysed "
            "(the capture manifest and the run's log are beside each page).")
        entries.append((f"live/{page.relative_to(reports / 'live').with_suffix('')}", os.path.relpath(page, reports),
                        "a notebook run in live mode on the GPU node (captured, then analysed, by papermill)"))
    changed = write_index(reports, entries, failures, captions, skipped, a.title, summaries, read_comparisons(reports))
    print(f"{len(todo) - len([f for f in failures if '/' in f[0] and f[0].count('/') == 2])} page(s) rendered, "
          f"{up_to_date} up to date, {len(failures)} failure(s) in {time.perf_counter() - t_all:.1f} s; "
          f"index: {reports / 'index.html'}{'' if changed else ' (unchanged)'}")
    return 1 if failures else 0
