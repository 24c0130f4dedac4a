"""Render every notebook on every capture into reports/<gpu>/<suite>/<notebook>.html, plus an index.

    python -m nsightlab.report --profiles profiles --reports reports

Which notebooks a capture gets is decided from its data (:func:`applicable`): each notebook declares
what it needs (:data:`NEEDS`: files, counter quantities from the metrics the manifest lists, a sweep,
option settings); the index lists the others with the reason. Each notebook runs headlessly through papermill and is converted by nbconvert, into a temporary
folder; the HTML is moved into place only when complete. A broken capture is reported and the
others still render; the exit status is non-zero if any failed.
"""

from __future__ import annotations

import argparse
import html
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from . import notebook as nb_helpers
from .counters import FLOP_TERMS, MEANING, available, needed_metrics
from .ranges import decode
from .store import ProfileError, list_captures, load_bench, short_commit, validate

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"

#: every notebook, in the order the index lists them
NOTEBOOK_ORDER = ("device", "correctness", "performance", "roofline", "l2_thrashing", "timeline", "options")
PLOTLY_JS = "plotly.min.js"


@dataclass(frozen=True)
class Needs:
    """What a notebook needs from a capture to have something to show."""

    #: data files, by kind: "ncu" (a .ncu-rep or raw CSV), "nsys" (a .sqlite export), "bench" (benchmark CSVs)
    files: tuple[str, ...] = ()
    #: counter quantities (nsightlab.counters), each group any-of, every group required
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
    """Some numeric field takes ``points`` values among cases equal in every other field."""
    if not rows:
        return False
    df = pd.DataFrame(rows)
    skip = {"range", "variant", "pass", "schema", "options", "domain"}
    numeric = [c for c in df.columns if c not in skip and pd.api.types.is_numeric_dtype(df[c])]
    for x in numeric:
        keys = [c for c in df.columns if c not in (x, "range")]
        most = df.astype({c: str for c in keys}).groupby(keys)[x].nunique().max() if keys else df[x].nunique()
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
    import papermill as pm

    declared = set(pm.inspect_notebook(str(notebook)))
    return {k: v for k, v in wanted.items() if k in declared}


def ship_plotly_js(reports: Path) -> None:
    """One copy of plotly.js beside the reports (offline, and each page stays small)."""
    from plotly.offline import get_plotlyjs

    dest = reports / PLOTLY_JS
    text = get_plotlyjs()
    if not dest.exists() or dest.read_text(encoding="utf-8") != text:
        tmp = reports / (PLOTLY_JS + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, dest)


def render_notebook(nb: Path, params: dict, out_html: Path, kernel: str = "python3") -> None:
    import nbformat
    import papermill as pm
    from nbconvert import HTMLExporter

    out_html.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_html.parent, prefix=".render-") as tmp:
        executed = Path(tmp) / nb.name
        pm.execute_notebook(str(nb), str(executed), parameters=params, kernel_name=kernel, progress_bar=False,
                            cwd=str(REPO))
        exporter = HTMLExporter(template_name="lab")
        exporter.exclude_input = True
        exporter.exclude_input_prompt = True
        exporter.exclude_output_prompt = True
        node = nbformat.read(executed, as_version=4)
        for i, cell in enumerate(node.cells):  # papermill gives its injected cell a random id: pages must not churn
            if "injected-parameters" in cell.get("metadata", {}).get("tags", []):
                cell["id"] = f"injected-parameters-{i}"
        body, _ = exporter.from_notebook_node(node)
        tmp_html = Path(tmp) / out_html.name
        tmp_html.write_text(body, encoding="utf-8")
        os.replace(tmp_html, out_html)


NOTEBOOK_BLURB = {
    "device": "the GPU as captured, measured ceilings, each case's modeled working set against the L2",
    "correctness": "every benchmarked result against the reference computation",
    "performance": "latency and TFLOP/s of every benchmarked implementation, speedups against a reference",
    "roofline": "hierarchical roofline (DRAM, L2, L1) with Nsight's peaks; counted FLOPs against the work model",
    "l2_thrashing": "L2 hit rate and DRAM traffic along the sweep, modeled and measured onset of thrashing",
    "timeline": "NVTX ranges and their kernels in time (Nsight Systems), GPU time, launch gaps, throughput",
    "options": "option studies (block size, tile shape, ...): time, occupancy, registers, shared memory, roofline",
}


def write_index(reports: Path, entries: list[tuple[str, str, str]], failures: list[tuple[str, str]],
                captions: dict[str, str] | None = None, skipped: dict[str, dict[str, str]] | None = None,
                title: str = "Nsight reports") -> None:
    """reports/index.html: the reports grouped by capture, each capture captioned from its manifest,
    with the notebooks that do not apply to it and why (``skipped``: capture label -> notebook -> reason)."""
    captions = captions or {}
    skipped = skipped or {}
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for label, href, desc in entries:
        groups.setdefault(label.rsplit("/", 1)[0], []).append((label.rsplit("/", 1)[1], href, desc))
    for cap in skipped:
        groups.setdefault(cap, [])
    sections = []
    for cap, items in groups.items():
        rows = "\n".join(f'<li><a href="{html.escape(href)}">{html.escape(nb)}</a> &mdash; '
                         f'{html.escape(NOTEBOOK_BLURB.get(nb, desc))}</li>' for nb, href, desc in items)
        na = "\n".join(f'<li class="na">{html.escape(nb)}: not applicable &mdash; {html.escape(why)}</li>'
                       for nb, why in skipped.get(cap, {}).items())
        cap_html = f'<p class="cap">{html.escape(captions[cap])}</p>' if cap in captions else ""
        sections.append(f"<h2>{html.escape(cap)}</h2>{cap_html}<ul>{rows}{na}</ul>")
    bad = "\n".join(f"<li><b>{html.escape(label)}</b>: {html.escape(err)}</li>" for label, err in failures)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;line-height:1.5;color:#222}}
h2{{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}} .cap{{color:#555;font-size:.92em}}
a{{color:#1f5fbf;text-decoration:none}} a:hover{{text-decoration:underline}} .bad{{color:#a00}}
.na{{color:#777;font-size:.9em}}</style></head>
<body><h1>{html.escape(title)}</h1>
<p>Rendered from the captures in <code>profiles/</code> by <code>python -m nsightlab.report</code> (papermill +
nbconvert; every page works offline). Each capture lists the notebooks that apply to it, and why the others do not.</p>
{"".join(sections)}
{'<h2 class="bad">Captures that failed to render</h2><ul>' + bad + "</ul>" if failures else ""}
</body></html>"""
    tmp = reports / ".index.html.tmp"
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, reports / "index.html")


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nsightlab.report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profiles", default=str(REPO / "profiles"))
    p.add_argument("--reports", default=str(REPO / "reports"))
    p.add_argument("--kernel", default="python3", help="Jupyter kernel name for papermill")
    p.add_argument("--jobs", type=int, default=2, help="notebooks rendered in parallel (default 2)")
    p.add_argument("--only", default="", help="comma-separated notebook names to render (default: all that apply)")
    p.add_argument("--title", default="Nsight reports", help="the index page's title")
    a = p.parse_args(argv)
    profiles, reports = Path(a.profiles), Path(a.reports)
    try:
        captures = list_captures(profiles)
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    reports.mkdir(parents=True, exist_ok=True)
    ship_plotly_js(reports)
    entries, failures = [], []
    t_all = time.perf_counter()
    jobs = []
    captions: dict[str, str] = {}
    skipped: dict[str, dict[str, str]] = {}
    manifests: dict[str, dict] = {}
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
        manifests[cap.label] = man
        ok, reasons = applicable(cap.path, man)
        skipped[cap.label] = reasons
        jobs += [(cap, nb) for nb in ok if not a.only or nb in a.only.split(",")]
    if not jobs and not failures:
        print(f"error: no capture under {profiles} holds anything a notebook can render", file=sys.stderr)
        return 2

    def one(i_job):
        i, (cap, nb) = i_job
        label = f"{cap.label}/{nb}"
        t0 = time.perf_counter()
        out = reports / cap.gpu / cap.suite / f"{nb}.html"
        rel_js = os.path.relpath(reports / PLOTLY_JS, out.parent)
        try:
            params = {**report_parameters(NOTEBOOKS / f"{nb}.ipynb", manifests[cap.label], nb),
                      "capture": str(cap.path.resolve()), "plotlyjs": rel_js}
            render_notebook(NOTEBOOKS / f"{nb}.ipynb", params, out, a.kernel)
            print(f"[{i}/{len(jobs)}] {label}: wrote {out} ({time.perf_counter() - t0:.1f} s)", flush=True)
            return label, out, None
        except Exception as exc:  # noqa: BLE001 - one broken capture must not stop the others
            msg = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            print(f"[{i}/{len(jobs)}] {label}: FAILED: {type(exc).__name__}: {msg}", file=sys.stderr, flush=True)
            return label, None, f"{type(exc).__name__}: {msg}"

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        for label, out, err in pool.map(one, enumerate(jobs, 1)):
            if err:
                failures.append((label, err))
            else:
                entries.append((label, os.path.relpath(out, reports), label.rsplit("/", 1)[1] + " report of "
                                + label.rsplit("/", 1)[0]))
    for page in sorted((reports / "live").glob("**/*.html")):  # notebooks run in live mode on a GPU, committed
        captions[f"live/{page.parent.relative_to(reports / 'live')}"] = (
            "Notebooks run in live mode on the GPU node by papermill: captured there, then analysed "
            "(the capture manifest and the run's log are beside each page).")
        entries.append((f"live/{page.relative_to(reports / 'live').with_suffix('')}", os.path.relpath(page, reports),
                        "a notebook run in live mode on the GPU node (captured, then analysed, by papermill)"))
    write_index(reports, entries, failures, captions, skipped, a.title)
    for stale in reports.glob("**/.render-*"):
        shutil.rmtree(stale, ignore_errors=True)
    print(f"{len(entries)} report(s), {len(failures)} failure(s) in {time.perf_counter() - t_all:.1f} s; "
          f"index: {reports / 'index.html'}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
