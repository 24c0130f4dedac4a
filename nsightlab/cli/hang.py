"""The ``nsightlab hang`` command: which Nsight Compute sections keep a kernel from finishing (the bisection and
the ncu runs are nsightlab.run.hang's; its docstring is the command's description). Prints a line per run,
a summary and the verdicts."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..core.args import ArgumentParser, positive_float
from ..core.metrics import DEEP_SECTIONS
from ..core.text import csv_list
from ..core.tools import ToolError, find_ncu
from ..run import hang
from ..run.capture import CACHE_CONTROL, ncu_command, workload_command
from ..run.hang import DONE, FAILED, STALL, minimal_stalling, run_ncu, section_folder, section_metrics
from ..run.sweep import find, nothing_to_run
from ..run.workload import selected


def main(argv: list[str] | None = None, prog: str = "nsightlab hang") -> int:
    p = ArgumentParser(prog=prog, description=hang.__doc__,
                       epilog="exit status: 0 narrowed down (or the sections finish: nothing to narrow; or --dry-run), "
                              "1 the first run failed rather than stalled, 2 bad input (arguments, sweep, no ncu)")
    p.add_argument("--sweep", required=True, help="a registered sweep's name or a sweep TOML file")
    p.add_argument("--only", action="append", default=[], required=True,
                   help="the case(s) to profile: a regex over range names (repeated: must match every one)")
    p.add_argument("--sections", default=",".join(DEEP_SECTIONS),
                   help="comma-separated Nsight Compute sections to narrow down (default: the deep tier's)")
    p.add_argument("--timeout", type=positive_float, default=45.0,
                   help="seconds after which a run counts as stalled (default 45)")
    p.add_argument("--ncu", default=None, help="path to ncu (else $NCU, PATH, standard folders)")
    p.add_argument("--out", default=None, help="folder for the runs' logs (default ncu-hang-<time>/)")
    p.add_argument("--section-folder", default=None,
                   help="Nsight Compute's .section files, whose metrics are narrowed down after the sections "
                        "(default: beside ncu)")
    p.add_argument("--dry-run", action="store_true", help="print the first ncu command and exit (no GPU needed)")
    a = p.parse_args(argv)
    sections = csv_list(a.sections)
    if not sections:
        p.error("--sections names no section")
    try:
        sweep = find(a.sweep)
        cases = selected(sweep.cases(), a.only, sweep.name)
    except ValueError as exc:
        p.error(str(exc))
    idle = nothing_to_run(sweep.name, cases)
    if idle:
        p.error(idle)
    if not a.dry_run:
        try:
            a.ncu = str(find_ncu(a.ncu))
        except ToolError as exc:
            p.error(str(exc))
    sweep_file = Path(a.sweep) if Path(a.sweep).suffix == ".toml" else None
    out = Path(a.out or f"ncu-hang-{time.strftime('%Y%m%d-%H%M%S')}")
    if sweep_file is None:
        out.mkdir(parents=True, exist_ok=True)
        sweep_file = out / "sweep.toml"
        sweep_file.write_text(sweep.to_toml())
    wl = workload_command(sweep_file, python=sys.executable, only=a.only)
    include = sweep.schema().nvtx_include()

    def command(subset: list[str], replay: str = "kernel", cache: str = CACHE_CONTROL,
                metrics: bool = False) -> list[str]:
        return ncu_command(a.ncu or "ncu", wl, out / "profile", nvtx_include=include,
                           sections=() if metrics else subset, metrics=subset if metrics else None,
                           replay_mode=replay, cache_control=cache, extra=["--import-source", "yes"])

    if a.dry_run:
        print(" ".join(command(sections)))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    print(f"{len([c for c in cases if c.runnable])} case(s): " + "; ".join(c.range for c in cases if c.runnable))
    runs: list[tuple[str, str, float]] = []
    n = 0

    def trial(subset: list[str], replay: str = "kernel", cache: str = CACHE_CONTROL, metrics: bool = False) -> str:
        nonlocal n
        n += 1
        what = (f"{len(subset)} metrics: " if metrics and len(subset) > 3 else "metrics " if metrics else "")
        shown = ",".join(subset) if len(subset) <= 12 else ",".join(subset[:12]) + f",... ({len(subset) - 12} more)"
        label = (f"{what}{shown}{'' if replay == 'kernel' else f' (replay {replay})'}"
                 f"{'' if cache == CACHE_CONTROL else f' --cache-control {cache}'}")
        print(f"[{n}] {label}", flush=True)
        verdict, secs = run_ncu(command(subset, replay, cache, metrics), out / f"run{n:02d}.log", a.timeout)
        runs.append((label, verdict, secs))
        return verdict

    first = trial(sections)
    if first != STALL:
        print(f"verdict: the {len(sections)} section(s) {first} on these cases within {a.timeout:.0f} s; nothing to narrow")
        return 0 if first == DONE else 1
    minimal = minimal_stalling(sections, lambda s: trial(s) == STALL)
    app = trial(minimal, "application")
    nocache = trial(minimal, cache="none")
    culprits = _metric_stage(a, minimal, trial)
    print("summary:")
    for label, verdict, secs in runs:
        print(f"  {verdict:9s} {secs:5.1f} s  {label}")
    print(f"verdict: {','.join(minimal)} stall(s) these cases (no section of it can be left out with the stall kept); "
          f"with application replay the set {app}, with --cache-control none it {nocache} "
          f"(the capture's default is --cache-control {CACHE_CONTROL}); logs in {out}")
    if culprits:
        print(f"verdict: of their metrics, {','.join(culprits)} alone stall(s) these cases "
              "(no metric of it can be left out with the stall kept)")
    return 0


def _metric_stage(a: argparse.Namespace, minimal: list[str], trial: Callable[..., str]) -> list[str]:
    """The metrics of the stalling sections, narrowed down the same way: [] where the section files are not
    found, the sections name no metric, or their metrics alone (without the sections) finish."""
    folder = Path(a.section_folder) if a.section_folder else section_folder(a.ncu)
    if folder is None:
        print("metrics: Nsight Compute's section files were not found beside ncu (--section-folder); not narrowed")
        return []
    metrics = list(dict.fromkeys(m for sec in minimal for m in section_metrics(folder, sec)))
    if not metrics:
        print(f"metrics: no section file in {folder} names metrics for {','.join(minimal)}; not narrowed")
        return []
    print(f"metrics: {len(metrics)} in {','.join(minimal)} ({folder})")
    verdict = trial(metrics, metrics=True)
    if verdict == FAILED:
        print("metrics: Nsight Compute did not take them by name (its log says why); not narrowed")
        return []
    if verdict != STALL:
        print("metrics: asked for by name, without their sections, they do not stall; not narrowed")
        return []
    return minimal_stalling(metrics, lambda m: trial(m, metrics=True) == STALL)
