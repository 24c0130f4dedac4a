"""Render every notebook on every capture into reports/<gpu>/<suite>/<notebook>.html, the comparison
pages a profiles folder declares into reports/compare/, and an index.

    nsightlab report --profiles profiles --reports reports [--standalone] [--only roofline,...]

Which notebooks a capture gets is decided from its data (:func:`applicable`): each notebook declares
what it needs (:data:`PAGES`: files, counter quantities from the metrics the manifest lists, a sweep,
option settings, or a rule of its own); the index lists the others with the reason. The comparison
pages are the ``[[comparison]]`` entries of ``<profiles>/comparisons.toml`` (nsightlab.render.compare).
Each notebook runs headlessly through papermill and is converted by nbconvert into a temporary folder;
the page is moved into place only when complete (nsightlab.render.execute). A broken capture is
reported and the others still render; the exit status is non-zero if any failed. One line per page
says how far the run is and about how long it has left.

Pages are deterministic (the same inputs give the same bytes) and incremental: beside each page,
``<notebook>.meta.json`` records the hash of everything that went into it (the notebook, the
captures' files, nsightlab's code, the parameters, the rendering library versions) and the page's
summary; a page whose inputs did not change is not rendered again. By default the pages share
``plotly.min.js`` and ``nsightlab.css`` at the top of the reports folder (and say so on the page
when it is opened without them); ``--standalone`` writes self-contained pages instead. No page makes
an outside request.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..analysis.bottleneck import lacks_warp_state
from ..analysis.counters import FLOP_TERMS, MEANING, available, needed_metrics
from ..core.errors import ProfileError
from ..core.ranges import decode
from ..core.sources import source_key
from ..store.captures import Capture, load_bench, load_manifest, short_commit, validate
from ..store.read import REPO, bench_files, capture_schemas, case_names, ncu_files, nsys_files, resolve, tools_of
from . import checks
from .compare import Declared, DeclaredWhy, comparison_entries, publish, publish_why
from .execute import PLOTLY_JS, allow_kernels, stop_kernels, write_if_changed
from .execute import render_notebook as execute_notebook
from .page import implementations

NOTEBOOKS = REPO / "notebooks"
#: bump when the page format changes in a way the hashed inputs do not show
FORMAT = "nsightlab-report 3"


# --------------------------------------------------------------------------- which notebooks a capture gets


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
    #: a rule the fields above cannot say: (capture folder, manifest) -> None when the notebook applies,
    #: else the reason the index shows
    check: Callable[[Path, dict], str | None] | None = None


@dataclass(frozen=True)
class Page:
    """A notebook the report renders for every capture it applies to: ``notebooks/<name>.ipynb``."""

    name: str
    #: its line on the index
    blurb: str
    needs: Needs = field(default_factory=Needs)


FLOP_QUANTITIES = tuple(f"inst_{k}" for parts in FLOP_TERMS.values() for k, _ in parts)

#: Every notebook, in the order the index lists them.
#:
#: To add a notebook: write ``notebooks/<name>.py`` and pair it (``jupytext --sync notebooks/<name>.py``
#: writes the .ipynb the report runs), then add a Page here saying what it needs. A rule that the fields
#: of Needs cannot say goes in ``check``, a function of the capture folder and its manifest that returns
#: None when the page applies, else the reason; for a page that reads Nsight Compute's warp-state section:
#:
#:     Page("mypage", "what the page shows, one line for the index",
#:          Needs(files=("ncu",), check=has_warp_state_stats)),
#:
#: where ``has_warp_state_stats(path, manifest)`` returns None if the capture's Nsight Compute report
#: carries the WarpStateStats section, else e.g. "no Nsight Compute report with the WarpStateStats section
#: (capture with --deep)". Name it in nsightlab.render.index.SUMMARY_ORDER too if its findings should lead the capture's index entry.
PAGES: tuple[Page, ...] = (
    Page("device", "the GPU as captured, measured ceilings, each case's modeled working set against the L2",
         Needs(gpu=("name",))),
    Page("correctness", "every benchmarked result against the reference computation", Needs(files=("bench",))),
    Page("performance", "latency and TFLOP/s of every benchmarked implementation, speedups against a reference",
         Needs(files=("bench",))),
    Page("roofline", "hierarchical roofline (DRAM, L2, L1) with Nsight's peaks; counted FLOPs against the work model",
         Needs(files=("ncu",), quantities=(("seconds",), FLOP_QUANTITIES, ("bytes_DRAM", "bytes_L2", "bytes_L1")))),
    Page("why", "why one kernel is slower than another: stall reasons, pipes, occupancy limiter, source hotspots",
         Needs(files=("ncu",), check=lambda _path, manifest: lacks_warp_state(manifest))),
    Page("l2_thrashing", "L2 hit rate and DRAM traffic along the sweep, modeled and measured onset of thrashing",
         Needs(files=("ncu",), quantities=(("l2_hit_rate",), ("bytes_DRAM",)), gpu=("l2_bytes",), sweep_points=3)),
    Page("timeline", "NVTX ranges and their kernels in time (Nsight Systems), GPU time, launch gaps, throughput",
         Needs(files=("nsys",))),
    Page("options", "option studies (block size, tile shape, ...): time, occupancy, registers, roofline",
         Needs(files=("ncu",), quantities=(("seconds",),), options=True)),
)
NOTEBOOK_ORDER = tuple(p.name for p in PAGES)
_PAGES = {p.name: p for p in PAGES}
#: the comparison pages' notebook (rendered per declared comparison, not per capture)
COMPARE = "compare"
_FILES = {"ncu": ("Nsight Compute report (*.ncu-rep) or raw CSV export", ncu_files),
          "nsys": ("Nsight Systems SQLite export (*.sqlite)", nsys_files),
          "bench": ("benchmark CSV with its manifest (<suite>.csv + <suite>.manifest.json)", bench_files)}


def _decoded_cases(manifest: dict) -> list[dict]:
    schemas = capture_schemas(manifest)
    return [decode(n, schemas) for n in case_names(manifest)]


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
    need = _PAGES[notebook].needs
    reasons = []
    gpu = manifest.get("gpu") or {}
    missing_gpu = [k for k in need.gpu if not gpu.get(k)]
    if missing_gpu:
        reasons.append("the manifest does not record the GPU's " + ", ".join(missing_gpu))
    for kind in need.files:
        what, finder = _FILES[kind]
        if not finder(capture_path):
            reasons.append(f"no {what} in the capture (tools: {', '.join(tools_of(manifest)) or 'none listed'})")
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
    if need.check is not None and (why := need.check(capture_path, manifest)):
        reasons.append(why)
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
    capture's new names come last): the order legends list them in on every page. Colours do not depend
    on it: each name's colour is its own (:func:`nsightlab.render.figures.impl_style`)."""
    names: dict[str, None] = {}
    for cap, man in sorted(captures, key=lambda cm: (str(cm[1].get("created", "")), cm[0].label)):
        for n in implementations(man):
            names.setdefault(n, None)
        for csv in bench_files(cap.path):
            try:
                for n in pd.read_csv(csv, usecols=["impl"])["impl"].astype(str):
                    names.setdefault(n, None)
            except (ValueError, OSError):
                continue
    return list(names)


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
    """Every file of a capture folder, names and bytes."""
    return _hash_files([p for p in Path(path).rglob("*") if p.is_file()], Path(path))


def inputs_hash(notebook: Path, captures: str, params: dict, code: str, standalone: bool) -> str:
    """Everything a page is made of: ``captures`` names the captures and hashes their files."""
    # absolute paths (the captures' contents are hashed) would make the hash differ between checkouts
    stable = {k: v for k, v in params.items() if k not in ("capture", "profiles")}
    h = hashlib.sha256()
    for part in (FORMAT, notebook.read_bytes().hex(), captures, json.dumps(stable, sort_keys=True), code,
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
    write_if_changed(meta_path(page), json.dumps(data, indent=1, sort_keys=True) + "\n")


# --------------------------------------------------------------------------- the index

@dataclass
class Index:
    """What reports/index.html lists."""

    #: (capture label/notebook, page relative to the reports folder) per rendered page
    pages: list[tuple[str, str]] = field(default_factory=list)
    #: (what, why) per capture or page that failed
    failures: list[tuple[str, str]] = field(default_factory=list)
    #: capture label -> one sentence from its manifest
    captions: dict[str, str] = field(default_factory=dict)
    #: capture label -> notebook -> why it does not apply
    skipped: dict[str, dict[str, str]] = field(default_factory=dict)
    #: capture label/notebook -> the page's summary lines
    summaries: dict[str, list[str]] = field(default_factory=dict)
    #: comparison pages: href, title, base, new, summary
    comparisons: list[dict[str, str]] = field(default_factory=list)
    title: str = "Nsight reports"


def read_comparisons(reports: Path) -> list[dict[str, str]]:
    """The comparison pages in ``reports/compare`` (:func:`nsightlab.render.compare.comparison_entries`),
    as the index links them."""
    return [{"href": f"compare/{e['html']}", "title": str(e["title"]), "base": str(e.get("base") or "?"),
             "new": str(e.get("new") or "?"), "summary": str(e.get("summary") or "")}
            for e in comparison_entries(reports / "compare")]


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
    """One page to render: a notebook on a capture, or a declared comparison."""

    #: how the progress lines and the index name it: gpu/capture/notebook, or compare/<name>
    label: str
    notebook: str
    out: Path
    params: dict[str, Any]
    #: :func:`inputs_hash` of everything the page is made of
    inputs: str
    comparison: Declared | DeclaredWhy | None = None


class Progress:
    """One line per finished page: how many of how many, the time so far and about how long is left
    (the pages so far took this long on average)."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.start = total, 0, time.perf_counter()
        self._lock = threading.Lock()

    def line(self, label: str, outcome: str) -> str:
        with self._lock:
            self.done += 1
            done = self.done
        elapsed = time.perf_counter() - self.start
        left = f", about {_clock(elapsed / done * (self.total - done))} left" if done < self.total else ""
        return f"[{done}/{self.total}] {label}: {outcome} ({_clock(elapsed)} elapsed{left})"


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}:{s:02d}" if m < 60 else f"{m // 60}:{m % 60:02d}:{s:02d}"


def open_captures(captures: list[Capture], index: Index) -> list[tuple[Capture, dict]]:
    """The captures that validate (checksums, benchmark CSVs that read), each captioned on the index;
    the others are failures, said in one line each."""
    good = []
    for cap in captures:
        try:
            man = validate(cap.path, open_reports=False)  # a clear error beats a traceback from inside a notebook
            if bench_files(cap.path) or "bench" in tools_of(man):
                load_bench(cap.path)
        except ProfileError as exc:
            index.failures.append((cap.label, str(exc)))
            print(f"FAILED {cap.label}: {exc}", file=sys.stderr, flush=True)
            continue
        index.captions[cap.label] = caption(man)
        good.append((cap, man))
    return good


def page_jobs(good: list[tuple[Capture, dict]], reports: Path, standalone: bool, code: str,
               index: Index) -> list[Job]:
    """A job per capture and notebook that applies to it; the index learns why the others do not."""
    order = ",".join(style_order(good))
    jobs = []
    for cap, man in good:
        ok, index.skipped[cap.label] = applicable(cap.path, man)
        cap_hash = f"{cap.label}:{capture_hash(cap.path)}"
        for nb in ok:
            nb_file = NOTEBOOKS / f"{nb}.ipynb"
            out = reports / cap.gpu / cap.suite / f"{nb}.html"
            js = "inline" if standalone else os.path.relpath(reports / PLOTLY_JS, out.parent)
            params = {**report_parameters(nb_file, man, nb), "capture": str(cap.path.resolve()), "plotlyjs": js}
            if "style_order" in declared_parameters(nb_file):
                params["style_order"] = order
            # the why page's hotspots read source text at the capture's commit where it is at hand
            key = f"{cap_hash}|{source_key(REPO, man.get('git_commit'))}" if nb == "why" else cap_hash
            jobs.append(Job(f"{cap.label}/{nb}", nb, out, params, inputs_hash(nb_file, key, params, code, standalone)))
    return jobs


def comparison_jobs(declared: list[Declared | DeclaredWhy], profiles: Path, reports: Path, standalone: bool, code: str,
                     index: Index) -> list[Job]:
    """A job per declared comparison (and before/after why page) whose two captures exist; the others are
    failures."""
    out_dir = reports / "compare"
    jobs = []
    for c in declared:
        notebook = "why" if isinstance(c, DeclaredWhy) else COMPARE
        nb_file = NOTEBOOKS / f"{notebook}.ipynb"
        try:
            paths = {label: resolve(label, profiles) for label in (c.base, c.new)}
            sides = "|".join(f"{label}:{capture_hash(path)}" for label, path in paths.items())
            if isinstance(c, DeclaredWhy):
                sides += "".join(f"|{source_key(REPO, load_manifest(path).get('git_commit'))}" for path in paths.values())
        except ProfileError as exc:
            index.failures.append((f"compare/{c.name}", str(exc)))
            print(f"FAILED compare/{c.name}: {exc}", file=sys.stderr, flush=True)
            continue
        out = out_dir / f"{c.name}.html"
        params = {**asdict(c), "plotlyjs": "inline" if standalone else os.path.relpath(reports / PLOTLY_JS, out_dir)}
        jobs.append(Job(f"compare/{c.name}", notebook, out, params, inputs_hash(nb_file, sides, params, code, standalone),
                        c))
    return jobs


def _render(job: Job, a: argparse.Namespace, reports: Path, stop: threading.Event) -> dict[str, Any]:
    shared = None if a.standalone else reports
    if isinstance(job.comparison, DeclaredWhy):
        return publish_why(job.comparison, job.out.parent, profiles=a.profiles, reports=shared,
                           plotlyjs=job.params["plotlyjs"], kernel=a.kernel, stop=stop)
    if job.comparison is not None:
        return publish(job.comparison, job.out.parent, profiles=a.profiles, reports=shared,
                       plotlyjs=job.params["plotlyjs"], kernel=a.kernel, stop=stop)
    return execute_notebook(NOTEBOOKS / f"{job.notebook}.ipynb", job.params, job.out, a.kernel, reports=reports,
                            standalone=a.standalone, stop=stop)


#: the notebooks that take longest per page first within a capture (why: the deep tier, its sources and Nsight's
#: rules; roofline and device: every report's counters; timeline and correctness: one table), a scheduling order only
SLOW_FIRST = ("why", "compare", "roofline", "device", "performance", "l2_thrashing", "options", "timeline",
              "correctness")


def submission_order(todo: list[Job]) -> list[Job]:
    """The order the pages are handed to the workers (the index keeps its own): each capture's (or comparison's)
    pages slowest notebook first (:data:`SLOW_FIRST`), then round by round, the first page of every capture, largest
    capture on disk first, then the second page of each, and so on. So the first pages of different captures run
    side by side, each parsing its own capture into the cache that its later pages read, instead of several pages of
    one capture parsing it at once, and the longest pages do not start last."""
    def capture_of(job: Job) -> str:  # a comparison (compare/<name>) is a group of its own
        return job.label if job.label.startswith("compare/") else job.label.rsplit("/", 1)[0]

    def slow(job: Job) -> int:
        return SLOW_FIRST.index(job.notebook) if job.notebook in SLOW_FIRST else len(SLOW_FIRST)

    def size(job: Job) -> int:
        path = job.params.get("capture")
        if not path or not Path(path).is_dir():
            return 0
        return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())

    groups: dict[str, list[Job]] = {}
    for j in todo:
        groups.setdefault(capture_of(j), []).append(j)
    sizes = {name: size(js[0]) for name, js in groups.items()}
    ordered = [sorted(js, key=slow) for name, js in sorted(groups.items(), key=lambda kv: -sizes[kv[0]])]
    return [g[i] for i in range(max((len(g) for g in ordered), default=0)) for g in ordered if i < len(g)]


def render_all(todo: list[Job], a: argparse.Namespace, reports: Path) -> list[tuple[str, str]] | None:
    """Render ``todo`` as Dask tasks: on ``--jobs`` worker threads of this process (each page's notebook runs in
    a Jupyter kernel process of its own: the threads wait on them, and papermill's and nbconvert's Python in
    between), or on the workers of ``--scheduler``. The failures, or None when interrupted (Ctrl-C: the notebooks
    still running are stopped and no page is left half-written)."""
    from distributed import Client, LocalCluster, as_completed

    from ..run.cluster import join

    stop = threading.Event()
    allow_kernels()
    progress = Progress(len(todo))
    failures: list[tuple[str, str]] = []
    if not todo:
        return failures
    remote = bool(getattr(a, "scheduler", None))
    token = f"{os.getpid()}-{id(stop)}"
    _STOPS[token] = stop  # the tasks are pickled even in this process: they find the event by its name
    cluster = None
    if remote:
        client = join(a.scheduler, None)  # ClusterError: said in one line by _run
    else:
        cluster = LocalCluster(n_workers=1, threads_per_worker=max(1, a.jobs), processes=False,
                               dashboard_address=None, silence_logs=40)
        client = Client(cluster)
    futures = []
    try:
        for j in submission_order(todo):  # any free worker takes the next; the index lists them in its own order
            futures.append(client.submit(_page_task, j, a, reports, None if remote else token, pure=False,
                                         key=f"page-{len(futures)}-{j.label}-{token}"))
        for fut in as_completed(futures):
            label, err, seconds = fut.result()
            if err:
                if err != "interrupted":
                    print(progress.line(label, f"FAILED: {err}"), file=sys.stderr, flush=True)
                failures.append((label, err))
            else:
                print(progress.line(label, f"{seconds:.1f} s"), flush=True)
    except KeyboardInterrupt:
        stop.set()
        print("interrupted: stopping the notebooks still running ...", file=sys.stderr, flush=True)
        client.cancel(futures, force=True)
        stop_kernels()
        _clean_render_dirs(reports)
        print("interrupted: no page was left half-written; the index is unchanged", file=sys.stderr, flush=True)
        return None
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
        _STOPS.pop(token, None)
        _clean_render_dirs(reports)
    return failures


#: the stop events of the renders running in this process, by name (a Dask task's arguments are pickled)
_STOPS: dict[str, threading.Event] = {}


def _page_task(job: Job, a: argparse.Namespace, reports: Path, token: str | None) -> tuple[str, str | None, float]:
    """A Dask task: render one page and write its meta; (its label, the failure's one line or None, seconds).
    ``token``: the name of this process's stop event (None on another machine's worker)."""
    stop = _STOPS.get(token) if token else None
    if stop is not None and stop.is_set():
        return job.label, "interrupted", 0.0
    t0 = time.perf_counter()
    try:
        info = _in_own_thread(_render, job, a, reports, stop or threading.Event())
        wrong = checks.page_problems(job.out.read_text(encoding="utf-8")) if job.out.suffix == ".html" else []
        if wrong:  # written, so that it can be looked at, but not counted as done: the next report renders it again
            more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
            return job.label, f"a figure breaks the page checks (nsightlab.render.checks): {wrong[0]}{more}", 0.0
        write_meta(job.out, {"inputs": job.inputs, "summary": info["summary"], "title": info["title"],
                             "notebook": job.notebook, "page": job.label})
        return job.label, None, time.perf_counter() - t0
    except KeyboardInterrupt:
        return job.label, "interrupted", 0.0
    except Exception as exc:  # noqa: BLE001 - one broken capture must not stop the others
        if stop is not None and stop.is_set():
            return job.label, "interrupted", 0.0
        text = str(exc).strip()
        return job.label, f"{type(exc).__name__}: {text.splitlines()[-1] if text else ''}".rstrip(": "), 0.0


def _in_own_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on a thread of its own, its result or its exception: papermill and nbclient drive the notebook's
    kernel with an asyncio loop of their own, which a thread that already has one running (a Dask worker thread of
    this process, where an earlier client left its loop) refuses ("This event loop is already running")."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller as is
            out["error"] = exc
    t = threading.Thread(target=run, name="nsightlab-page", daemon=True)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _clean_render_dirs(reports: Path) -> None:
    for stale in reports.glob("**/.render-*"):
        shutil.rmtree(stale, ignore_errors=True)


def writable_folder(folder: Path) -> str | None:
    """Why pages cannot be written into ``folder`` (a file, not creatable, not writable), or None: it is
    created where missing."""
    if folder.exists() and not folder.is_dir():
        return f"--reports {folder}: is a file, not a folder; accepted: a folder for the pages (created if missing)"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"--reports {folder}: cannot be created ({exc.strerror or exc})"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"--reports {folder}: is not writable; accepted: a folder this user can write"
    return None
