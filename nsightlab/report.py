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

from .store import ProfileError, list_captures, load_bench, short_commit, validate

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"

#: every notebook, in the order the index lists them
NOTEBOOK_ORDER = ("device", "correctness", "performance", "roofline", "l2_thrashing", "timeline", "blocksize")
PLOTLY_JS = "plotly.min.js"


def applicable(manifest: dict) -> list[str]:
    """The notebooks that have something to show for a capture, from what its manifest says it holds."""
    params = manifest.get("parameters", {})
    tools = set(params.get("tools", []))
    cases = " ".join(params.get("cases", []))
    out = ["device"]
    if "bench" in tools:
        out += ["correctness", "performance"]
    if "ncu" in tools:
        out.append("roofline")
        if ":naive:" in cases or ":tiled:" in cases:
            out.append("l2_thrashing")
        if "block_size=4" in cases or "bwd_tile=32x64" in cases:
            out.append("blocksize")
    if "nsys" in tools:
        out.append("timeline")
    return [nb for nb in NOTEBOOK_ORDER if nb in out]


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
        body, _ = exporter.from_notebook_node(nbformat.read(executed, as_version=4))
        tmp_html = Path(tmp) / out_html.name
        tmp_html.write_text(body, encoding="utf-8")
        os.replace(tmp_html, out_html)


NOTEBOOK_BLURB = {
    "device": "the GPU as captured, measured ceilings, working set per variant against the L2",
    "correctness": "every benchmarked result against the fp64 reference",
    "performance": "latency and TFLOP/s of every variant and SDPA backend, ratios to SDPA flash",
    "roofline": "hierarchical roofline (DRAM, L2, L1) with Nsight's peaks; counted vs analytic FLOPs",
    "l2_thrashing": "L2 hit rate and DRAM traffic against N, modeled and measured onset of thrashing",
    "timeline": "NVTX ranges and their kernels in time (Nsight Systems), GPU time, launch gaps",
    "blocksize": "block size and tile shape: time, occupancy, registers, shared memory, roofline",
}


def write_index(reports: Path, entries: list[tuple[str, str, str]], failures: list[tuple[str, str]],
                captions: dict[str, str] | None = None) -> None:
    """reports/index.html: the reports grouped by capture, each capture captioned from its manifest."""
    captions = captions or {}
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for label, href, desc in entries:
        groups.setdefault(label.rsplit("/", 1)[0], []).append((label.rsplit("/", 1)[1], href, desc))
    sections = []
    for cap, items in groups.items():
        rows = "\n".join(f'<li><a href="{html.escape(href)}">{html.escape(nb)}</a> &mdash; '
                         f'{html.escape(NOTEBOOK_BLURB.get(nb, desc))}</li>' for nb, href, desc in items)
        cap_html = f'<p class="cap">{html.escape(captions[cap])}</p>' if cap in captions else ""
        sections.append(f"<h2>{html.escape(cap)}</h2>{cap_html}<ul>{rows}</ul>")
    bad = "\n".join(f"<li><b>{html.escape(label)}</b>: {html.escape(err)}</li>" for label, err in failures)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>Attention kernels: reports</title>
<style>body{{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;line-height:1.5;color:#222}}
h2{{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}} .cap{{color:#555;font-size:.92em}}
a{{color:#1f5fbf;text-decoration:none}} a:hover{{text-decoration:underline}} .bad{{color:#a00}}</style></head>
<body><h1>Attention kernels under Nsight: reports</h1>
<p>Why FlashAttention beats textbook attention, measured: rendered from the captures in <code>profiles/</code>
by <code>make report</code> (papermill + nbconvert; every page works offline).</p>
{"".join(sections)}
{'<h2 class="bad">Captures that failed to render</h2><ul>' + bad + "</ul>" if failures else ""}
</body></html>"""
    tmp = reports / ".index.html.tmp"
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, reports / "index.html")


def caption(manifest: dict) -> str:
    g = manifest.get("gpu", {})
    t = manifest.get("timings_seconds", {})
    return (f"{manifest.get('description', '')}. {g.get('name', '?')}, torch {manifest.get('environment', {}).get('torch')}, "
            f"commit {short_commit(manifest.get('git_commit'), 10)}, captured {manifest.get('created')} in {t.get('total', 0):.0f} s.")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nsightlab.report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profiles", default=str(REPO / "profiles"))
    p.add_argument("--reports", default=str(REPO / "reports"))
    p.add_argument("--kernel", default="python3", help="Jupyter kernel name for papermill")
    p.add_argument("--jobs", type=int, default=2, help="notebooks rendered in parallel (default 2)")
    p.add_argument("--only", default="", help="comma-separated notebook names to render (default: all that apply)")
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
    for cap in captures:
        try:
            man = validate(cap.path, open_reports=False)  # a clear error beats a traceback from inside a notebook
            if "bench" in man.get("parameters", {}).get("tools", []):
                load_bench(cap.path)
        except ProfileError as exc:
            failures.append((cap.label, str(exc)))
            print(f"FAILED {cap.label}: {exc}", file=sys.stderr, flush=True)
            continue
        captions[cap.label] = caption(man)
        jobs += [(cap, nb) for nb in applicable(man) if not a.only or nb in a.only.split(",")]
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
            params = {"capture": str(cap.path.resolve()), "plotlyjs": rel_js}
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
    write_index(reports, entries, failures, captions)
    for stale in reports.glob("**/.render-*"):
        shutil.rmtree(stale, ignore_errors=True)
    print(f"{len(entries)} report(s), {len(failures)} failure(s) in {time.perf_counter() - t_all:.1f} s; "
          f"index: {reports / 'index.html'}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
