"""Render every notebook on every capture into reports/<gpu>/<suite>/<notebook>.html, plus an index.

    python -m nsightlab.report --profiles profiles --reports reports

Each notebook runs headlessly through papermill and is converted by nbconvert, into a temporary
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
from pathlib import Path

from .store import ProfileError, list_captures, load_bench

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"

#: notebook -> what a capture folder must hold for it to apply
NOTEBOOK_NEEDS = {"performance": "*.csv"}


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
        body, _ = exporter.from_notebook_node(nbformat.read(executed, as_version=4))
        tmp_html = Path(tmp) / out_html.name
        tmp_html.write_text(body, encoding="utf-8")
        os.replace(tmp_html, out_html)


def write_index(reports: Path, entries: list[tuple[str, str, str]], failures: list[tuple[str, str]]) -> None:
    rows = "\n".join(f'<li><a href="{html.escape(href)}">{html.escape(label)}</a> &mdash; {html.escape(desc)}</li>'
                     for label, href, desc in entries)
    bad = "\n".join(f"<li><b>{html.escape(label)}</b>: {html.escape(err)}</li>" for label, err in failures)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>Attention kernels: reports</title>
<style>body{{font-family:system-ui,sans-serif;max-width:900px;margin:2em auto;line-height:1.5}}</style></head>
<body><h1>Attention kernels: reports</h1>
<p>Rendered from the captures in <code>profiles/</code> by <code>make report</code>.</p>
<ul>{rows}</ul>
{"<h2>Captures that failed to render</h2><ul>" + bad + "</ul>" if failures else ""}
</body></html>"""
    tmp = reports / ".index.html.tmp"
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, reports / "index.html")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nsightlab.report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profiles", default=str(REPO / "profiles"))
    p.add_argument("--reports", default=str(REPO / "reports"))
    p.add_argument("--kernel", default="python3", help="Jupyter kernel name for papermill")
    a = p.parse_args(argv)
    profiles, reports = Path(a.profiles), Path(a.reports)
    try:
        captures = list_captures(profiles)
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    reports.mkdir(parents=True, exist_ok=True)
    entries, failures = [], []
    t_all = time.perf_counter()
    jobs = [(c, nb) for c in captures for nb, pattern in NOTEBOOK_NEEDS.items() if any(c.path.glob(pattern))]
    if not jobs:
        print(f"error: no capture under {profiles} holds anything a notebook can render", file=sys.stderr)
        return 2
    for i, (cap, nb) in enumerate(jobs, 1):
        label = f"{cap.label}/{nb}"
        t0 = time.perf_counter()
        print(f"[{i}/{len(jobs)}] {label} ...", flush=True)
        try:
            load_bench(cap.path)  # validate first: a clear error beats a traceback from inside a notebook
            out = reports / cap.gpu / cap.suite / f"{nb}.html"
            render_notebook(NOTEBOOKS / f"{nb}.ipynb", {"capture": str(cap.path.resolve())}, out, a.kernel)
            entries.append((label, os.path.relpath(out, reports), f"{nb} report of {cap.label}"))
            print(f"    wrote {out} ({time.perf_counter() - t0:.1f} s)", flush=True)
        except ProfileError as exc:
            failures.append((label, str(exc)))
            print(f"    FAILED: {exc}", file=sys.stderr, flush=True)
        except Exception as exc:  # noqa: BLE001 - one broken capture must not stop the others
            msg = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            failures.append((label, f"{type(exc).__name__}: {msg}"))
            print(f"    FAILED: {type(exc).__name__}: {msg}", file=sys.stderr, flush=True)
    write_index(reports, entries, failures)
    for stale in reports.glob("**/.render-*"):
        shutil.rmtree(stale, ignore_errors=True)
    print(f"{len(entries)} report(s), {len(failures)} failure(s) in {time.perf_counter() - t_all:.1f} s; "
          f"index: {reports / 'index.html'}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
