"""The ``nsightlab report`` command: every page of every capture, the comparison pages and the index
(the rendering is nsightlab.render.report's; its docstring is the command's description). Says what it
rendered, what was up to date and what failed, one line each."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ..core.args import BAD_INPUT, ArgumentParser, positive_int, print_error
from ..core.errors import ProfileError
from ..core.text import csv_list
from ..render import report
from ..render.compare import declared_comparisons
from ..render.compare import write_index as write_comparison_index
from ..render.documents import write_documents
from ..render.execute import ship_assets
from ..render.index import write_index
from ..render.report import (
    COMPARE,
    NOTEBOOK_ORDER,
    Index,
    code_hash,
    comparison_jobs,
    open_captures,
    page_jobs,
    read_comparisons,
    read_meta,
    render_all,
    writable_folder,
)
from ..run.cluster import ClusterError
from ..store.captures import list_captures
from ..store.read import REPO


def _parser(prog: str) -> argparse.ArgumentParser:
    p = ArgumentParser(prog=prog, description=report.__doc__,
                       epilog="exit status: 0 every page rendered or up to date, 1 some page or capture failed (each "
                              "said in one line; the others rendered), 2 bad input (arguments, a --profiles or "
                              "--reports folder that cannot be read or written, nothing to render), 130 interrupted")
    p.add_argument("--profiles", default=str(REPO / "profiles"), help="the profile folder whose captures are rendered")
    p.add_argument("--reports", default=str(REPO / "reports"),
                   help="where the pages go (created if missing; pages whose inputs did not change are kept)")
    p.add_argument("--kernel", default="python3", help="Jupyter kernel name for papermill")
    p.add_argument("--jobs", "-j", type=positive_int, default=2,
                   help="pages rendered at once (Dask worker threads of this process, each page's notebook in a "
                        "kernel process of its own; `make report` gives the machine's cores)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="render the pages on the workers of a running Dask cluster instead (they must see this "
                        "repository and the profiles and reports folders at the same paths)")
    p.add_argument("--only", default="", help="comma-separated notebook names to render (default: all that apply; "
                   f"'{COMPARE}': the comparison pages; 'why' also renders the declared [[why]] before/after pages, "
                   "whose notebook it is); the index still lists every page already rendered")
    p.add_argument("--title", default="Nsight reports", help="the index page's title")
    p.add_argument("--standalone", action="store_true",
                   help="self-contained pages (plotly.js and the stylesheet inside each page; still offline)")
    p.add_argument("--force", action="store_true", help="render every page even if its inputs did not change")
    return p


def main(argv: list[str] | None = None, prog: str = "nsightlab report") -> int:
    try:
        return _main(argv, prog)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None, prog: str) -> int:
    a = _parser(prog).parse_args(argv)
    a.prog = prog
    # The notebooks run in the repository (execute's cwd): relative folders are the caller's, so they are
    # re-expressed from the repository (as given, when the caller is there: pages name them the same everywhere),
    # or made absolute where they lie outside it
    a.profiles, a.reports = (str(_from_repo(Path(x))) for x in (a.profiles, a.reports))
    cwd = Path.cwd()
    os.chdir(REPO)
    try:
        return _run(a)
    finally:
        os.chdir(cwd)


def _from_repo(path: Path) -> Path:
    """``path`` (relative to the current folder) relative to the repository when it lies inside it, else absolute."""
    path = path.absolute()
    try:
        return path.relative_to(REPO)
    except ValueError:
        return path


def _run(a: argparse.Namespace) -> int:
    only = csv_list(a.only)
    unknown = [n for n in only if n not in (*NOTEBOOK_ORDER, COMPARE)]
    if unknown:
        print_error(a.prog, f"--only {','.join(unknown)}: no such notebook; the notebooks are "
                            f"{', '.join((*NOTEBOOK_ORDER, COMPARE))}", see_help=True)
        return BAD_INPUT
    profiles, reports = Path(a.profiles), Path(a.reports)
    skipped: list[str] = []
    try:
        captures, declared = list_captures(profiles, skipped), declared_comparisons(profiles)
    except ProfileError as exc:
        print_error(a.prog, str(exc))
        return BAD_INPUT
    unwritable = writable_folder(reports)
    if unwritable:
        print_error(a.prog, unwritable)
        return BAD_INPUT
    try:
        if not a.standalone:
            ship_assets(reports)
    except OSError as exc:
        print_error(a.prog, f"--reports {reports}: the shared assets could not be written ({exc})")
        return BAD_INPUT
    t_all = time.perf_counter()
    index = Index(title=a.title)
    for line in skipped:  # a folder no page can name: said once, the others still render
        index.failures.append((line.split(": ", 1)[0], line.split(": ", 1)[1]))
        print(f"FAILED {line}", file=sys.stderr, flush=True)
    code = code_hash()
    pages = page_jobs(open_captures(captures, index), reports, a.standalone, code, index)
    jobs = pages + comparison_jobs(declared, profiles, reports, a.standalone, code, index)
    if not jobs and not index.failures:
        print_error(a.prog, f"no capture under {profiles} holds anything a notebook can render")
        return BAD_INPUT
    chosen = [j for j in jobs if not only or j.notebook in only or (COMPARE in only and j.comparison is not None)]
    todo = [j for j in chosen if a.force or not j.out.exists() or read_meta(j.out).get("inputs") != j.inputs]
    if len(chosen) > len(todo):
        print(f"{len(chosen) - len(todo)} page(s) up to date (inputs unchanged)", flush=True)
    try:
        failed = render_all(todo, a, reports)
    except ClusterError as exc:
        print_error(a.prog, str(exc))
        return BAD_INPUT
    if failed is None:
        return 130
    index.failures += failed
    if (reports / "compare").is_dir():  # comparison pages rendered now or before (--only may have left them out)
        write_comparison_index(reports / "compare")
    bad = {label for label, _ in index.failures}
    for j in pages:
        if j.out.exists() and j.label not in bad:
            index.summaries[j.label] = list(read_meta(j.out).get("summary") or [])
            index.pages.append((j.label, os.path.relpath(j.out, reports)))
    index.comparisons = read_comparisons(reports)
    index.failures += [] if only else write_documents(profiles)  # plug-ins' documents (a study's results page)
    changed = write_index(reports, index)
    print(f"{len(todo) - len(failed)} page(s) rendered, {len(chosen) - len(todo)} up to date, "
          f"{len(index.failures)} failure(s) in {time.perf_counter() - t_all:.1f} s; "
          f"index: {reports / 'index.html'}{'' if changed else ' (unchanged)'}")
    return 1 if index.failures else 0
