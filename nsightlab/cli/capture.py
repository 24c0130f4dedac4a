"""The ``nsightlab capture`` command: its options (the shape flags from the problem's parameters), the sweeps
they ask for, where the capture runs (one GPU, this machine's GPUs, a Dask cluster), the case listing, and
the lines and exit status a capture ends with. The capture itself is nsightlab.run.capture's; its docstring
is the command's description."""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any, NoReturn

from ..core.args import BAD_INPUT, ArgumentParser, non_negative_int, positive_int, print_error
from ..core.errors import CaptureError, ProfileError, ToolError
from ..core.metrics import DEEP_SECTIONS
from ..core.text import csv_list
from ..problems import problem as problems
from ..problems.impls import known as known_impls
from ..problems.impls import load_plugins, resolve
from ..problems.problem import PASSES, Problem
from ..run import capture as run_capture
from ..run import cluster
from ..run.capture import (
    PLAN_FILE,
    capture,
    capture_sharded,
    check_destination,
    find_resumable,
    plan,
    plan_cases,
    sigterm_as_interrupt,
)
from ..run.cluster import ClusterError, Where
from ..run.sweep import Sweep, find, from_args, named_sweeps, nothing_to_run, regex


def _option(text: str) -> tuple[str, Any]:
    key, sep, val = text.partition("=")
    if not sep or not key or not val:
        raise ValueError(f"--option takes name=value (e.g. block_size=32 or tile=128x64), not {text!r}")
    vals = [int(v) if v.isdigit() else v for v in val.split(",")]
    return key, vals if len(vals) > 1 else vals[0]


def _impl_specs(values: Sequence[str]) -> list[str]:
    return [s for spec in values for s in spec.split(",") if s]


def _problem(name: str | None, impl_specs: Sequence[str]) -> Problem:
    """``name``'s problem, else the one the implementations solve (resolving them imports their modules)."""
    if name:
        return problems.get(name)
    return problems.get(problems.one_of([resolve(s).problem for s in impl_specs], "--impl"))


class _Quiet(ArgumentParser):
    """A parser that raises ValueError instead of exiting (a first look at a command line)."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(message)


def _problem_of_flags(argv: Sequence[str]) -> tuple[Problem, str | None]:
    """The problem whose parameters are this command line's shape flags (``--problem``, else the one its
    ``--impl`` implementations solve, else the default), and the error met choosing it (the parser,
    built with the default problem's flags, reports it)."""
    pre = _Quiet(add_help=False, allow_abbrev=False)
    pre.add_argument("--problem")
    pre.add_argument("--impl", action="append", default=[])
    pre.add_argument("--plugin", action="append", default=[])
    try:
        known, _ = pre.parse_known_args(argv)
    except ValueError:  # e.g. --impl without a value: the command's own parser says so
        return problems.default(), None
    try:
        load_plugins(known.plugin)
        return _problem(known.problem, _impl_specs(known.impl)), None
    except ValueError as exc:
        return problems.default(), str(exc)


def parser(prog: str, problem: Problem) -> argparse.ArgumentParser:
    """The capture command's parser, its shape flags from ``problem``'s parameters."""
    p = ArgumentParser(prog=prog, description=run_capture.__doc__, allow_abbrev=False,
                       epilog="exit status: 0 every sweep captured (or listed), 1 a capture step failed (its partial "
                              "output is kept in <profiles>/.failed-*), 2 bad input (arguments, sweep, an existing "
                              "capture without --replace), 130 interrupted")
    src = p.add_argument_group("what to capture (one of)")
    src.add_argument("--suite", help="registered sweep names, comma-separated (see --list-suites)")
    src.add_argument("--sweep", help="a sweep TOML file")
    src.add_argument("--impl", action="append", default=[],
                     help="an implementation: a registered name"
                          + (f" (e.g. {', '.join(sorted(known_impls())[:3])})" if known_impls() else "")
                          + ", module:callable, or name=module:callable; repeat or comma-separate")
    shp = p.add_argument_group(f"{problem.name} shapes, with --impl (comma-separated values sweep)")
    shp.add_argument("--problem", help="the problem whose parameters these flags are (default: the one the --impl "
                                       f"implementations solve); known: {', '.join(sorted(problems.known()))}")
    for q in problem.parameters:
        shp.add_argument(*q.cli_flags(), dest=f"param_{q.name}", metavar=q.name.upper(), help=q.cli_help())
    shp.add_argument("--pass", dest="passes", default="forward,backward", help="forward, backward or both")
    shp.add_argument("--option", action="append", default=[], help="implementation option name=value[,value]")
    shp.add_argument("--name", default="custom", help="the capture's name (its folder under profiles/<gpu>/)")
    shp.add_argument("--description", help="one line saying what the capture is for")
    shp.add_argument("--tools", default="ncu,nsys", help="ncu, nsys or both (default both)")
    shp.add_argument("--plugin", action="append", default=[], help="a module that registers implementations or problems")
    _run_arguments(p)
    return p


def _run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profiles", default="profiles", help="profile store root (default: profiles)")
    p.add_argument("--replace", action="store_true",
                   help="replace an existing capture of the same name on this GPU (without it the command refuses, "
                        "before any GPU work); the old one is moved to <profiles>/<gpu>/.replaced-<name>-<time>/ and "
                        "removed once the new one is complete and in place (a failed capture leaves it as it was)")
    p.add_argument("--only", help="only cases whose NVTX range name matches this regex")
    p.add_argument("--deep", help="profile the cases whose NVTX range name matches this regex a second time with "
                                  f"Nsight Compute's deep sections ({', '.join(DEEP_SECTIONS)}); "
                                  "replaces a sweep's own deep field")
    p.add_argument("--deep-skip", help="deep-tier sections to leave out, comma-separated (for a kernel that stalls "
                                       "under one: see nsightlab hang); replaces a sweep's own deep_skip")
    p.add_argument("--deep-only", action="store_true",
                   help="only the deep tier (no light ncu, no nsys, no benchmark), into <name>-deep/")
    p.add_argument("--list", action="store_true", help="print each sweep's cases (range names, skips, deep ones) and "
                                                       "exit; no GPU")
    p.add_argument("--list-suites", action="store_true", help="print the registered sweeps and exit")
    p.add_argument("--ncu", help="path to ncu (else $NCU, PATH, standard folders)")
    p.add_argument("--nsys", help="path to nsys (else $NSYS, PATH, standard folders, Nsight Compute's copy)")
    p.add_argument("--clock-control", default="none", choices=("none", "base"),
                   help="ncu --clock-control (default none: the GPU's clocks are left as they are)")
    p.add_argument("--nsys-iters", type=positive_int, default=None, help="measured launches per range under nsys (default: the sweep's)")
    p.add_argument("--replay-mode", default=None, choices=("kernel", "application"),
                   help="light ncu tier's replay: rerun the whole (deterministic) workload per counter pass, or replay "
                        "each kernel; default: the sweep's")
    many = p.add_argument_group("many GPUs, one capture (Dask; docs/capture.md, \"Many GPUs and clusters\")")
    many.add_argument("--gpus", metavar="all|I,J,...",
                      help="shard the cases over these GPUs of this machine (one Dask worker per GPU, "
                           "CUDA_VISIBLE_DEVICES pinned: dask-cuda's LocalCUDACluster) into one capture folder; each "
                           "case records the GPU (index, UUID) it ran on; default: no Dask, the one GPU the process sees")
    many.add_argument("--scheduler", metavar="ADDRESS",
                      help="run the shards on a running Dask cluster (tcp://host:8786), e.g. a dask-jobqueue "
                           "SLURMCluster of one-GPU workers; profiles/ must be on a filesystem every worker sees")
    many.add_argument("--scheduler-file", metavar="FILE", help="as --scheduler, the address read from a Dask scheduler file")
    many.add_argument("--allow-mixed", action="store_true",
                      help="accept GPUs of different models in one capture (else refused in one line); each case keeps "
                           "its GPU in the manifest")
    many.add_argument("--shards-per-gpu", type=positive_int, default=1, metavar="N",
                      help="shards per worker: more are balanced better and lose less to an interruption, each pays "
                           "the profiler's and the workload's start again")
    many.add_argument("--retries", type=non_negative_int, default=cluster.RETRIES, metavar="N",
                      help="times a shard whose task failed runs again, on any worker (a worker that dies under a "
                           "shard: Dask reruns it elsewhere, up to its allowed-failures)")
    many.add_argument("--resume", metavar="NAME",
                      help="finish the interrupted or failed sharded capture NAME (its <profiles>/.failed-NAME-*/): "
                           "only the cases its finished shards did not run are run; give no sweep flags")


def sweeps_from_args(a: argparse.Namespace) -> list[Sweep]:
    """The sweeps a command line asks for; ValueError with a readable message on bad input."""
    chosen = [x for x in ("suite", "sweep", "impl") if getattr(a, x)]
    if len(chosen) != 1:
        raise ValueError("give exactly one of --suite NAME, --sweep FILE or --impl SPEC (with its shapes, e.g. -N ...)")
    if a.suite:
        return [find(s) for s in a.suite.split(",") if s]
    if a.sweep:
        return [find(a.sweep)]
    specs = _impl_specs(a.impl)
    problem = _problem(a.problem, specs)
    given = {q.name: getattr(a, f"param_{q.name}", None) for q in problem.parameters}
    if any(q.required and given[q.name] is None for q in problem.parameters):
        raise ValueError(f"--impl needs the shapes: {problem.shapes_needed()}")
    params = problem.cli_values(given)
    passes = [p for p in a.passes.split(",") if p]
    if not passes or any(p not in PASSES for p in passes):
        raise ValueError(f"--pass takes forward, backward or forward,backward, not {a.passes!r}")
    tools = [t for t in a.tools.split(",") if t]
    return [from_args(a.name, specs, params, passes, dict(_option(o) for o in a.option), tools, plugins=a.plugin,
                      description=a.description or "", problem=a.problem)]


def _checked(sweeps: list[Sweep], a: argparse.Namespace) -> list[Sweep]:
    """``sweeps`` with ``--deep`` applied, every one expanded (so that a bad one fails before the first runs)
    and the deep tier asked for matching some case; ValueError says what is wrong."""
    if a.only:
        regex(a.only, "--only")
    if a.deep is not None:
        regex(a.deep, "--deep")
        sweeps = [dataclasses.replace(s, deep=a.deep) if s.grids else s for s in sweeps]
    if a.deep_skip is not None:
        sweeps = [dataclasses.replace(s, deep_skip=tuple(csv_list(a.deep_skip))) for s in sweeps]
    deep = {s.name: plan_cases(s, a.only)[1] for s in sweeps}
    if a.deep is not None and not any(deep.values()):
        raise ValueError(f"--deep {a.deep!r} matches no case to run of {', '.join(deep)}")
    if a.deep_only and not all(deep.values()):
        raise ValueError(f"--deep-only: no deep case to run in {', '.join(n for n, d in deep.items() if not d)} "
                         "(give --deep REGEX, or a sweep with deep = \"...\")")
    return sweeps


def _idle(sweeps: Sequence[Sweep], only: str | None) -> str | None:
    """Why some sweep would run no case (every one skipped: options its implementation refuses, shapes it
    does not support; or none matching --only), or None. A sweep that only runs its benchmark has no cases."""
    for s in sweeps:
        cases = plan_cases(s, only)[0]
        if cases or set(s.tools) & {"ncu", "nsys"}:
            why = nothing_to_run(s.name + (f" matching --only {only!r}" if only else ""), cases)
            if why:
                return why
    return None


def _print_cases(sweeps: Sequence[Sweep], only: str | None) -> None:
    for s in sweeps:
        cases, deep_cases = plan_cases(s, only)
        deep = {c.range for c in deep_cases}
        print(f"# {s.name}: {sum(c.runnable for c in cases)} case(s) to run, {sum(not c.runnable for c in cases)} skipped"
              + (f", {len(deep)} deep (deep = {s.deep!r})" if s.deep else "")
              + (f" (matching --only {only!r})" if only else ""))
        for c in cases:
            print(c.range + ("    [deep]" if c.range in deep else "") + ("" if c.runnable else f"    [{c.status}]"))


def _capture_all(sweeps: Sequence[Sweep], a: argparse.Namespace, prog: str, where: Where | None = None) -> int:
    try:
        return _capture_each(sweeps, a, prog, where)
    except ClusterError as exc:  # the cluster could not be started or joined
        print_error(prog, str(exc))
        return BAD_INPUT


def _capture_each(sweeps: Sequence[Sweep], a: argparse.Namespace, prog: str, where: Where | None) -> int:
    t0 = time.perf_counter()
    status = 0
    first: Path | None = None  # the GEMM and copy ceilings are measured once per command
    with cluster.client_for(where) if where is not None else nullcontext() as client:
        for s in sweeps:
            t = time.perf_counter()
            try:
                if where is not None:
                    dest = capture_sharded(s, a.profiles, where=where, client=client, ncu=a.ncu, nsys=a.nsys,
                                           clock_control=a.clock_control, only=a.only, nsys_iters=a.nsys_iters,
                                           replay_mode=a.replay_mode, deep_only=a.deep_only, replace=a.replace,
                                           allow_mixed=a.allow_mixed, shards_per_gpu=a.shards_per_gpu, retries=a.retries)
                else:
                    dest = capture(s, a.profiles, ncu=a.ncu, nsys=a.nsys, clock_control=a.clock_control, only=a.only,
                                   nsys_iters=a.nsys_iters, replay_mode=a.replay_mode, ceilings_from=first,
                                   deep_only=a.deep_only, replace=a.replace)
                first = first or dest
            except ClusterError as exc:
                print_error(prog, str(exc))
                return BAD_INPUT
            except (ToolError, CaptureError, ValueError) as exc:
                print_error(prog, str(exc))
                status = 1
            except KeyboardInterrupt:
                print("interrupted", file=sys.stderr)
                return 130
            print(f"sweep {s.name}: {time.perf_counter() - t:.0f} s", file=sys.stderr)
    print(f"all sweeps ({', '.join(s.name for s in sweeps)}): {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return status


def where_from_args(a: argparse.Namespace, gpus: Callable[[], list[dict[str, Any]]] | None = None) -> Where | None:
    """Where the flags say the capture runs: None (one GPU, no Dask), this machine's GPUs (``--gpus``, checked against
    ``gpus()``: an unknown index and GPUs of different models without --allow-mixed are ClusterError) or a scheduler."""
    given = [f for f, v in (("--gpus", a.gpus), ("--scheduler", a.scheduler), ("--scheduler-file", a.scheduler_file))
             if v]
    if len(given) > 1:
        raise ClusterError(f"{' and '.join(given)}: give one (--gpus starts workers on this machine's GPUs; "
                           "--scheduler / --scheduler-file join a running cluster)")
    if a.gpus:
        known = (gpus or cluster.local_gpus)()
        chosen = cluster.parse_gpus(a.gpus, known)
        cluster.check_models([g for g in known if g["index"] in chosen], a.allow_mixed)
        return Where(gpus=tuple(chosen))
    if a.scheduler or a.scheduler_file:
        return Where(address=a.scheduler, scheduler_file=a.scheduler_file)
    return None


def _resume(a: argparse.Namespace, prog: str) -> int:
    """``--resume NAME``: the rest of an interrupted sharded capture, on the cluster the flags say (else the GPUs it
    was started on)."""
    try:
        old = find_resumable(Path(a.profiles).resolve(), a.resume)
        saved = json.loads((old / PLAN_FILE).read_text()).get("where") or {}
        where = where_from_args(a)
        if where is None:
            where = Where(gpus=tuple(saved.get("gpus") or ()), address=saved.get("address"),
                          scheduler_file=saved.get("scheduler_file"))
            if not (where.gpus or where.address or where.scheduler_file):
                where = Where(gpus=tuple(cluster.parse_gpus("all", cluster.local_gpus())))
        capture_sharded(None, a.profiles, where=where, ncu=a.ncu, nsys=a.nsys, replace=a.replace, retries=a.retries,
                        allow_mixed=a.allow_mixed, resume=a.resume)
    except (ClusterError, ProfileError) as exc:
        print_error(prog, str(exc))
        return BAD_INPUT
    except (ToolError, CaptureError, ValueError) as exc:
        print_error(prog, str(exc))
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


def main(argv: list[str] | None = None, prog: str = "nsightlab capture") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    problem, error = _problem_of_flags(argv)
    p = parser(prog, problem)
    a, extra = p.parse_known_args(argv)
    if error:  # before "unrecognized arguments": the shape flags of a problem that could not be chosen
        p.error(error)
    if extra:
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `--list | head` ends quietly
    sigterm_as_interrupt()
    if a.list_suites:
        for name, path in named_sweeps().items():
            print(f"{name:16s} {path}")
        return 0
    if a.resume:
        if a.suite or a.sweep or a.impl:
            p.error("--resume NAME takes the sweep of the interrupted capture: give no --suite, --sweep or --impl")
        return _resume(a, prog)
    try:
        sweeps = _checked(sweeps_from_args(a), a)
    except ValueError as exc:
        p.error(str(exc))
    if a.list:
        _print_cases(sweeps, a.only)
    idle = _idle(sweeps, a.only)
    if idle:  # after the listing, which shows each case's reason
        p.error(idle)
    if a.list:
        return 0
    try:  # every sweep's folder and the GPUs asked for, before the first runs: a refusal costs no GPU time
        for s in sweeps:
            check_destination(a.profiles, plan(s, a.only, a.deep_only).name, replace=a.replace)
        where = where_from_args(a)
    except (ProfileError, ClusterError) as exc:
        print_error(prog, str(exc))
        return BAD_INPUT
    return _capture_all(sweeps, a, prog, where)
