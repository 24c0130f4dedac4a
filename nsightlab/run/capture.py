"""Capture a sweep under Nsight Compute / Nsight Systems into a self-describing profile folder.

    python -m nsightlab.capture --suite seqlen,blocksize,bench          # sweeps registered by plug-ins
    python -m nsightlab.capture --sweep my_sweep.toml
    python -m nsightlab.capture --impl mypkg.attn:my_attention --impl sdpa_flash -N 1024,4096 -D 128 --name mine
    python -m nsightlab.capture --impl examples.gemm.gemm:IMPL -M 1024,4096 -N 4096 -K 1024 --name gemm
    python -m nsightlab.capture --suite seqlen --list                   # the cases (deep ones marked), no GPU needed
    python -m nsightlab.capture --suite seqlen --deep 'flash_mma:forward:.*N=4096,D=128,' --deep-only

The shape flags are the chosen problem's parameters (``--problem``, else the problem the ``--impl``
implementations solve, else attention): ``-B -H -N -D --Hkv --Nk --dtype --causal`` for attention,
``-M -N -K --dtype`` for the GEMM example.

Each sweep lands in ``<profiles>/<gpu>/<name>/`` with ``manifest.json``: the GPU, versions, commit,
the sweep itself (so the capture re-runs exactly), every case with its range name, status and work
model, the exact command lines, files with sizes and SHA-256, timings and measured ceilings. It is
written into a temporary folder beside it and moved into place only when complete: a failed or
interrupted (Ctrl-C, SIGTERM) capture leaves the previous one as it was, keeps its partial output in
``<profiles>/.failed-<name>-<time>/`` and says what failed and which cases had finished.

Two Nsight Compute tiers: the light tier profiles every case with the few metrics the roofline, FLOP
check and L2 pages need (a handful of replay passes); the deep tier profiles again only the cases
whose range name matches the sweep's ``deep`` regex (or ``--deep``), with the sections that explain
time (:data:`DEEP_SECTIONS`, the CUDA source imported), into ``deep.ncu-rep`` beside Nsight Compute's
own CSV exports of it (``deep_details.csv``, ``deep_raw.csv``: what the parsers are tested against).
``--deep-only`` takes the deep tier alone, into ``<name>-deep/``.

This module imports without torch: the workload (``python -m nsightlab.run.workload``), the ceilings
and a sweep's benchmark run as subprocesses, which is also how a notebook launches a capture. Where an
implementation has a ``setup`` (a kernel package building its kernels), the workload runs it once with
``--setup-only`` before any profiler starts (``setup.log``), so that no profiled process builds them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from ..core import metrics as M
from ..core.args import BAD_INPUT, ArgumentParser, positive_int, print_error
from ..core.environment import git_commit
from ..core.errors import CaptureError, ProfileError, ToolError
from ..core.ranges import RangeSchema
from ..core.text import csv_list
from ..core.tools import check_ncu_output, check_nsys_importer, find_ncu, find_nsys, tool_version
from ..problems import problem as problems
from ..problems.impls import load_plugins, resolve
from ..problems.problem import DEFAULT_PROBLEM, PASSES, Problem
from ..store import manifest
from ..store.captures import gpu_slug
from .sweep import TOOLS, Case, Sweep, find, from_args, named_sweeps, nothing_to_run, regex

#: the deep tier's Nsight Compute sections: what explains a kernel's time (speed of light, pipes, memory
#: tables, occupancy and its limiter, launch facts, issue slots, warp stall reasons, instruction mix, and
#: the per-instruction source counters behind the hotspots)
DEEP_SECTIONS = M.DEEP_SECTIONS
#: the deep tier replays each kernel: its ~40 passes under application replay would rerun the whole
#: workload process (startup, kernel builds, warm-ups) ~40 times
DEEP_REPLAY_MODE = "kernel"
#: ncu flushes every cache before each profiled kernel (each starts cold: the pages say so)
CACHE_CONTROL = "all"


# --------------------------------------------------------------------------- command lines


def workload_command(sweep_file: str | os.PathLike, *, python: str = sys.executable, iters: int = 1,
                     warmup: int | None = None, only: str | Sequence[str] | None = None,
                     log: str | os.PathLike | None = None, warmup_only: str = "all", extra: Sequence[str] = ()) -> list[str]:
    """The workload's command line; ``only``: a regex over range names, or several that a case must all match."""
    cmd = [python, "-m", "nsightlab.run.workload", "--sweep", str(sweep_file), "--iters", str(iters),
           "--warmup-only", warmup_only]
    if warmup is not None:
        cmd += ["--warmup", str(warmup)]
    for text in [only] if isinstance(only, str) else (only or ()):
        cmd += ["--only", text]
    if log:
        cmd += ["--log", str(log)]
    return cmd + list(extra)


def ncu_command(ncu: str | os.PathLike, workload: Sequence[str], export: str | os.PathLike, *,
                metrics: Sequence[str] | None = None, clock_control: str = "none",
                nvtx_include: str = "regex:^[^/]*/", section_set: str | None = None, sections: Sequence[str] = (),
                replay_mode: str = "kernel", kernel_regex: str | None = None,
                extra: Sequence[str] = (), cache_control: str = CACHE_CONTROL) -> list[str]:
    """ncu over the workload, profiling only launches inside the measured NVTX ranges (and, with
    ``kernel_regex``, only kernels whose name matches; ``extra``: further ncu options). What it
    collects: ``section_set`` (``--set``), else ``sections`` (``--section`` each), else ``metrics``
    (default: :func:`nsightlab.core.metrics.metric_names`).

    ``replay_mode="kernel"`` replays each profiled kernel once per counter pass, saving and
    restoring its memory each time (about 0.15 s per pass per kernel on the H200, whatever its
    size); ``"application"`` reruns the whole (deterministic) workload once per pass instead: no
    save/restore, but in the pass that counts instructions (SASS patching) every launch of the
    process runs patched, ~10x slower for CUDA-core kernels. Measured: seqlen (491 short kernels)
    391 s kernel vs 218 s application on the H200; blocksize (long CUDA-core kernels) 86 s kernel
    on the H200 vs 345 s application on an H100, 266 s of it in the patched pass."""
    if clock_control not in ("none", "base"):
        raise ValueError(f"clock_control must be 'none' (leave the GPU's clocks alone) or 'base', not {clock_control!r}")
    if replay_mode not in ("kernel", "application"):
        raise ValueError(f"replay_mode must be 'kernel' or 'application', not {replay_mode!r}")
    if cache_control not in ("all", "none"):
        raise ValueError(f"cache_control must be 'all' (flush before each profiled kernel) or 'none', not {cache_control!r}")
    cmd = [str(ncu), "--nvtx", "--nvtx-include", nvtx_include, "--clock-control", clock_control,
           "--cache-control", cache_control, "--replay-mode", replay_mode, "--target-processes", "all"]
    if kernel_regex:
        cmd += ["--kernel-name", f"regex:{kernel_regex}"]
    cmd += list(extra)
    if section_set:
        cmd += ["--set", section_set]
    elif sections:
        cmd += [arg for name in sections for arg in ("--section", name)]
    else:
        cmd += ["--metrics", ",".join(metrics if metrics is not None else M.metric_names())]
    return [*cmd, "--export", str(export), "--force-overwrite", *workload]


def deep_ncu_command(ncu: str | os.PathLike, workload: Sequence[str], export: str | os.PathLike, *,
                     clock_control: str = "none", nvtx_include: str = "regex:^[^/]*/",
                     sections: Sequence[str] = DEEP_SECTIONS) -> list[str]:
    """The deep tier's ncu: :data:`DEEP_SECTIONS` (or ``sections``: a sweep's deep_skip leaves some out), the
    CUDA source imported into the report (SASS maps to source lines where the kernels were built with
    -lineinfo), each kernel replayed."""
    return ncu_command(ncu, workload, export, clock_control=clock_control, nvtx_include=nvtx_include,
                       sections=sections, replay_mode=DEEP_REPLAY_MODE, extra=["--import-source", "yes"])


def nsys_command(nsys: str | os.PathLike, workload: Sequence[str], output: str | os.PathLike) -> list[str]:
    return [str(nsys), "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true",
            "--output", str(output), *workload]


def nsys_export_command(nsys: str | os.PathLike, report: str | os.PathLike, sqlite: str | os.PathLike) -> list[str]:
    return [str(nsys), "export", "--type", "sqlite", "--force-overwrite=true", "--output", str(sqlite), str(report)]


def ncu_raw_csv_command(ncu: str | os.PathLike, report: str | os.PathLike, *, base_units: bool = False) -> list[str]:
    """What Nsight Compute itself says about a report (the parsers' oracle, and their fallback input);
    ``base_units``: every value in its metric's base unit (bytes, ns, ...), as the deep tier exports it."""
    return [str(ncu), "--import", str(report), "--csv", "--page", "raw", *(["--print-units", "base"] if base_units else [])]


def ncu_details_csv_command(ncu: str | os.PathLike, report: str | os.PathLike) -> list[str]:
    """Nsight Compute's details page of a report (every section's metrics as the GUI shows them), in base
    units and keyed by metric name: what the bottleneck page's values are tested against."""
    return [str(ncu), "--import", str(report), "--csv", "--page", "details", "--print-units", "base",
            "--print-metric-name", "name"]


def nsys_stats_command(nsys: str | os.PathLike, sqlite: str | os.PathLike, prefix: str | os.PathLike) -> list[str]:
    return [str(nsys), "stats", "--report", "cuda_gpu_kern_sum,nvtx_sum", "--format", "csv", "--force-export=false",
            "--output", str(prefix), str(sqlite)]


def passes_per_kernel(ncu_log: str) -> dict[str, int]:
    """Replay passes per profiled kernel name, from ncu's '==PROF== Profiling "k": ... - 13 passes' lines."""
    out: dict[str, int] = {}
    for m in re.finditer(r'==PROF== Profiling "([^"]+)".*?- (\d+) pass', ncu_log):
        out[m.group(1)] = max(out.get(m.group(1), 0), int(m.group(2)))
    if not out:  # application replay: the whole process runs once per pass, each kernel profiled each time
        runs = len(re.findall(r"==PROF== Connected to process", ncu_log))
        for name in re.findall(r'==PROF== Profiling "([^"]+)"', ncu_log):
            out[name] = runs
    return out


def kernels_profiled(ncu_log: str) -> int:
    """Distinct kernel launches profiled (under application replay each appears once per run)."""
    n = len(re.findall(r"==PROF== Profiling", ncu_log))
    if re.search(r'==PROF== Profiling "[^"]+".*?- \d+ pass', ncu_log):
        return n
    return n // max(1, len(re.findall(r"==PROF== Connected to process", ncu_log)))


def _ncu_cost(ncu_log: str) -> dict[str, Any]:
    """What an ncu run cost, from its log: kernels profiled and replay passes per kernel."""
    passes = passes_per_kernel(ncu_log)
    return {"kernels_profiled": kernels_profiled(ncu_log), "passes_per_kernel": passes,
            "max_passes_per_kernel": max(passes.values(), default=0)}


# --------------------------------------------------------------------------- running


class _Runner:
    """Runs one step's command, its output to a log in the capture folder (and, summarized, to ``echo``)."""

    def __init__(self, folder: Path, echo: Callable[[str], None]) -> None:
        self.folder, self.echo = folder, echo
        self.commands: list[dict[str, Any]] = []

    def __call__(self, step: str, cmd: list[str], *, log: str, env: dict[str, str] | None = None,
                 stdout_to: str | None = None, check: Callable[[str, int], None] | None = None) -> str:
        self.echo(f"[{step}] {' '.join(cmd[:6])}{' ...' if len(cmd) > 6 else ''}")
        t0 = time.perf_counter()
        log_path = self.folder / log
        with open(log_path, "w") as lf:
            if stdout_to:
                with open(self.folder / stdout_to, "w") as out:
                    proc = subprocess.run(cmd, stdout=out, stderr=lf, env=env)
            else:
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
                assert proc.stdout is not None
                try:
                    for line in proc.stdout:
                        lf.write(line)
                        if line.strip() and not line.startswith("==PROF== Profiling"):
                            self.echo(f"  [{step}] {line.rstrip()[:200]}")
                        if SLOW_LAUNCH in line:
                            self.echo(f"  [{step}] {slow_launch_hint(self.folder)}")
                    proc.wait()
                except KeyboardInterrupt:
                    proc.terminate()
                    proc.wait(timeout=30)
                    raise
        secs = time.perf_counter() - t0
        self.commands.append({"step": step, "argv": cmd, "seconds": round(secs, 2), "returncode": proc.returncode,
                              "log": log, **({"stdout": stdout_to} if stdout_to else {})})
        text = log_path.read_text(errors="replace")
        if check:
            check(text, proc.returncode)
        elif proc.returncode != 0:
            tail = " | ".join(text.strip().splitlines()[-5:])
            raise CaptureError(f"step {step} failed (exit {proc.returncode}); log {log}: {tail}")
        self.echo(f"[{step}] done in {secs:.1f} s")
        return text


#: what Nsight Compute prints while a profiled kernel does not finish (a replay pass that hangs)
SLOW_LAUNCH = "Launching the workload is taking more time than expected"


def slow_launch_hint(folder: Path) -> str:
    """What to tell the user when Nsight Compute says a profiled launch is taking long: which case."""
    flight = _in_flight(folder)
    which = "; ".join(flight.values()) or "the one after the last case listed as finished"
    return (f"the case in flight: {which}. If it does not finish, stop the capture (Ctrl-C or the timeout: the cases "
            f"that finished are kept in .failed-*/) and leave that case out (--only / the sweep's deep regex); "
            f"`nsightlab hang --sweep SWEEP --only RANGE` finds the sections it stalls under")


def _case_records(log: Path) -> list[dict]:
    """The finished cases a workload's cases log holds, one record a line (a line cut short is left out)."""
    out = []
    for line in log.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _finished(folder: Path) -> dict[str, str]:
    """range -> status of the cases the workload logs in ``folder`` say finished."""
    return {rec.get("range", ""): rec.get("status", "?")
            for log in sorted(folder.glob("cases_*.jsonl")) for rec in _case_records(log)}


@dataclass
class Plan:
    """What one capture runs: its cases, the ones the deep tier profiles again, its steps, its folder name."""

    sweep: Sweep
    cases: list[Case]
    deep: list[Case]
    schema: RangeSchema
    only: str | None = None
    deep_only: bool = False

    @property
    def name(self) -> str:
        return f"{self.sweep.name}-deep" if self.deep_only else self.sweep.name

    @property
    def runnable(self) -> list[Case]:
        return [c for c in self.cases if c.runnable]

    @property
    def steps(self) -> list[str]:
        light = [] if self.deep_only else [t for t in TOOLS if t in self.sweep.tools]
        return ["ceilings", *light, *(["deep"] if self.deep else [])]

    @property
    def tools(self) -> list[str]:
        """The profilers and benchmark the capture runs (the deep tier is ncu)."""
        return [t for t in TOOLS if t in self.steps or (t == "ncu" and "deep" in self.steps)]


def plan_cases(sweep: Sweep, only: str | None) -> tuple[list[Case], list[Case]]:
    """A sweep's cases (those matching ``only``) and, of them, the deep ones."""
    cases = sweep.cases()
    if only:
        rx = regex(only, "--only")
        cases = [c for c in cases if rx.search(c.range)]
    return cases, sweep.deep_cases(cases)


def plan(sweep: Sweep, only: str | None = None, deep_only: bool = False) -> Plan:
    """The capture of ``sweep``: its cases (``only``: those whose range name matches), the deep ones
    (``deep_only``: only those). CaptureError when nothing would be profiled."""
    cases, deep = plan_cases(sweep, only)
    profiled = bool(set(sweep.tools) & {"ncu", "nsys"}) or deep_only
    if only and not cases and profiled:
        raise CaptureError(f"--only {only!r} matches no case of sweep {sweep.name}")
    if deep_only:
        if not sweep.deep:
            raise CaptureError(f"--deep-only needs a deep regex: --deep REGEX, or deep = \"...\" in sweep {sweep.name}")
        if not deep:
            raise CaptureError(f"deep {sweep.deep!r} matches no case to run of sweep {sweep.name}")
        cases = deep
    if profiled and not any(c.runnable for c in cases):
        raise CaptureError(f"sweep {sweep.name}: no case can run ({len(cases)} skipped: "
                           + "; ".join(sorted({c.status for c in cases}))[:300] + ")")
    return Plan(sweep, cases, deep, sweep.schema(), only, deep_only)


@dataclass
class _Steps:
    """The steps of one capture, each run into its temporary folder by the runner, timed."""

    plan: Plan
    folder: Path
    run: _Runner
    env: dict[str, str]
    python: str
    tools: dict[str, Path]
    clock_control: str
    replay_mode: str
    nsys_iters: int
    timings: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def timed(self, key: str) -> Iterator[None]:
        t = time.perf_counter()
        yield
        self.timings[key] = time.perf_counter() - t

    def workload(self, log: str, *, iters: int = 1, only: Sequence[str] = (), warmup_only: str = "all") -> list[str]:
        return workload_command(self.folder / "sweep.toml", python=self.python, iters=iters, log=self.folder / log,
                                only=[x for x in (self.plan.only, *only) if x], warmup_only=warmup_only)

    def ceilings(self, reuse: Path | None) -> dict[str, Any]:
        """The measured ceilings and the environment (``ceilings.json``), or ``reuse``'s."""
        with self.timed("ceilings"):
            if reuse is not None:
                for name in ("ceilings.json", "ceilings.log"):
                    shutil.copyfile(Path(reuse) / name, self.folder / name)
                self.run.echo(f"[ceilings] reused from {reuse} (measured earlier in this command)")
            else:
                self.run("ceilings", [self.python, "-m", "nsightlab.run.ceilings", "--out",
                                      str(self.folder / "ceilings.json")], log="ceilings.log", env=self.env)
        return json.loads((self.folder / "ceilings.json").read_text())

    def setup(self) -> None:
        """The implementations' setup (e.g. building their kernels) in a process of its own, before any profiler
        runs: otherwise the first profiled process builds them, under Nsight Compute's injection and replay."""
        names = {c.impl for c in self.plan.cases if c.runnable}
        if not any(resolve(n).setup is not None for n in sorted(names)):
            return
        with self.timed("setup"):
            cmd = workload_command(self.folder / "sweep.toml", python=self.python, only=self.plan.only,
                                   extra=["--setup-only"])
            self.run("setup", cmd, log="setup.log", env=self.env)

    def ncu(self) -> dict[str, Any]:
        """The light tier: every case, the roofline's metrics."""
        # under application replay the patched pass would run the warm-ups patched too; kernels whose
        # implementation says it needs none skip them (ncu flushes the caches before each profiled kernel)
        wl = self.workload("cases_ncu.jsonl", warmup_only="needed" if self.replay_mode == "application" else "all")
        include = self.plan.schema.nvtx_include()
        with self.timed("ncu"):
            text = self.run("ncu", ncu_command(self.tools["ncu"], wl, self.folder / "ncu", clock_control=self.clock_control,
                                               replay_mode=self.replay_mode, nvtx_include=include),
                            log="ncu.log", env=self.env, check=check_ncu_output)
        with self.timed("ncu_raw_csv"):
            self.run("ncu-raw-csv", ncu_raw_csv_command(self.tools["ncu"], self.folder / "ncu.ncu-rep"),
                     log="ncu_raw_csv.log", stdout_to="ncu_raw.csv", env=self.env)
        return {"version": tool_version(self.tools["ncu"]), "path": str(self.tools["ncu"]), "metrics": M.metric_names(),
                "clock_control": self.clock_control, "cache_control": CACHE_CONTROL, "nvtx_include": include, "replay_mode": self.replay_mode,
                **_ncu_cost(text)}

    def nsys(self) -> dict[str, Any]:
        """The timeline: every case ``nsys_iters`` times, exported to SQLite and summarized."""
        nsys, folder = self.tools["nsys"], self.folder
        with self.timed("nsys"):
            self.run("nsys", nsys_command(nsys, self.workload("cases_nsys.jsonl", iters=self.nsys_iters), folder / "nsys"),
                     log="nsys.log", env=self.env)
            if not (folder / "nsys.nsys-rep").exists():
                raise CaptureError("nsys wrote no nsys.nsys-rep (its importer failed?); see nsys.log")
            self.run("nsys-export", nsys_export_command(nsys, folder / "nsys.nsys-rep", folder / "nsys.sqlite"),
                     log="nsys_export.log", env=self.env)
            self.run("nsys-stats", nsys_stats_command(nsys, folder / "nsys.sqlite", folder / "nsys_stats"),
                     log="nsys_stats.log", env=self.env)
        return {"version": tool_version(nsys), "path": str(nsys), "iters": self.nsys_iters}

    def bench(self) -> None:
        bench = self.plan.sweep.bench or {}
        with self.timed("bench"):
            self.run("bench", [self.python, "-m", bench["module"], "--out", str(self.folder),
                               *map(str, bench.get("args", []))], log="bench.log", env=self.env)

    def deep(self) -> dict[str, Any]:
        """The deep tier: the deep cases again, with :data:`DEEP_SECTIONS` (less the sweep's deep_skip), then
        Nsight Compute's own CSVs of it."""
        ncu, report = self.tools["ncu"], self.folder / "deep.ncu-rep"
        sections = self.plan.sweep.deep_sections()
        include = self.plan.schema.nvtx_include()
        wl = self.workload("cases_deep.jsonl", only=[self.plan.sweep.deep or ""])
        with self.timed("deep"):
            text = self.run("deep", deep_ncu_command(ncu, wl, self.folder / "deep", clock_control=self.clock_control,
                                                     nvtx_include=include, sections=sections),
                            log="deep.log", env=self.env,
                            check=check_ncu_output)
        report_bytes = report.stat().st_size
        with self.timed("deep_csv"):
            self.run("deep-details-csv", ncu_details_csv_command(ncu, report), log="deep_details_csv.log",
                     stdout_to="deep_details.csv", env=self.env)
            self.run("deep-raw-csv", ncu_raw_csv_command(ncu, report, base_units=True), log="deep_raw_csv.log",
                     stdout_to="deep_raw.csv", env=self.env)
        return {"regex": self.plan.sweep.deep, "cases": [c.range for c in self.plan.deep],
                "version": tool_version(ncu), "path": str(ncu), "sections": list(sections),
                **({"skipped_sections": list(self.plan.sweep.deep_skip)} if self.plan.sweep.deep_skip else {}),
                "import_source": True,
                "replay_mode": DEEP_REPLAY_MODE, "clock_control": self.clock_control, "cache_control": CACHE_CONTROL, "nvtx_include": include,
                "seconds": round(self.timings["deep"], 2), "export_seconds": round(self.timings["deep_csv"], 2),
                "report_bytes": report_bytes, **_ncu_cost(text)}


def _environment(sweep: Sweep) -> dict[str, str]:
    """The subprocesses' environment: unbuffered output, the commit, the sweep's plug-ins."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("NSIGHTLAB_GIT_COMMIT", git_commit())  # a copy of the tree may have no .git
    if sweep.plugins:
        env["NSIGHTLAB_PLUGINS"] = ",".join([*sweep.plugins, *filter(None, env.get("NSIGHTLAB_PLUGINS", "").split(","))])
    return env


def _find_tools(steps: Sequence[str], ncu: str | None, nsys: str | None) -> dict[str, Path]:
    tools: dict[str, Path] = {}
    if "ncu" in steps or "deep" in steps:
        tools["ncu"] = find_ncu(ncu)
    if "nsys" in steps:
        tools["nsys"] = find_nsys(nsys)
        check_nsys_importer(tools["nsys"])
    return tools


def _run_steps(steps: _Steps, stamp: str, ceilings_from: Path | None) -> dict[str, Any]:
    """Every step of the plan, then the manifest that describes their output."""
    t_start = time.perf_counter()
    plan, names = steps.plan, steps.plan.steps
    measured = steps.ceilings(ceilings_from)
    steps.setup()
    facts = {"ncu": steps.ncu() if "ncu" in names else {}, "nsys": steps.nsys() if "nsys" in names else {}}
    if "bench" in names:
        steps.bench()
    facts["deep"] = steps.deep() if "deep" in names else {}
    steps.timings["total"] = time.perf_counter() - t_start
    for stale in steps.folder.glob("cases_*.jsonl.running"):  # a workload that ended early, its step still fine
        stale.unlink()
    finished, deep = _finished(steps.folder), {c.range for c in plan.deep}
    environment = measured["environment"]
    return manifest.build(
        name=plan.name, description=plan.sweep.description, origin="captured", created=stamp,
        gpu=environment.get("gpu", {}), environment=environment, tools=plan.tools, range_schemas=[plan.schema],
        commands=steps.run.commands, **facts, ceilings=measured["ceilings"],
        ceilings_measured_by=(f"an earlier capture of the same command ({Path(ceilings_from).name})"
                              if ceilings_from is not None else "this capture"),
        only=plan.only, deep_only=plan.deep_only, sweep=plan.sweep.to_dict(),
        cases=[{**c.to_json(), "status": finished.get(c.range, c.status if not c.runnable else "not run"),
                **({"deep": True} if c.range in deep else {})} for c in plan.cases],
        timings_seconds={k: round(v, 2) for k, v in steps.timings.items()})


def _in_flight(folder: Path) -> dict[str, str]:
    """step (ncu, nsys, deep) -> the range of the case its workload in ``folder`` was running when it stopped."""
    out: dict[str, str] = {}
    for path in sorted(folder.glob("cases_*.jsonl.running")):
        rng = path.read_text(errors="replace").strip()
        if rng:
            out[path.name.removeprefix("cases_").removesuffix(".jsonl.running")] = rng
    return out


def _reruns(folder: Path, cases: int) -> dict[str, tuple[int, int]]:
    """step -> (whole runs, cases of the run after them) of a workload that ran its ``cases`` cases more than once
    (application replay: once per replay pass), from its cases log in ``folder``; steps that ran them once are left
    out."""
    out: dict[str, tuple[int, int]] = {}
    for log in sorted(folder.glob("cases_*.jsonl")):
        done = len(_case_records(log))
        if cases and done > cases:
            out[log.name.removeprefix("cases_").removesuffix(".jsonl")] = divmod(done, cases)
    return out


def _keep_failed(exc: BaseException, plan: Plan, tmp: Path, profiles: Path, stamp: str) -> str:
    """Move a failed capture's folder aside with a FAILED.txt (what failed, which cases had finished, the
    case in flight); the message that says so."""
    failed = profiles / f".failed-{plan.name}-{stamp}"
    done, flight, reruns = _finished(tmp), _in_flight(tmp), _reruns(tmp, len(plan.runnable))
    with open(tmp / "FAILED.txt", "w") as fh:
        fh.write(f"{type(exc).__name__}: {exc}\n")
        fh.write(f"cases finished ({len(done)} of {len(plan.runnable)}):\n" + "".join(f"  {s:10s} {r}\n" for r, s in done.items()))
        fh.write("".join(f"case in flight when it stopped ({step} step): {r}\n" for step, r in flight.items()))
    os.replace(tmp, failed)
    what = (f"interrupted{f' ({exc})' if str(exc) else ''}" if isinstance(exc, KeyboardInterrupt)
            else f"failed: {exc}")
    where = "".join(f" The case in flight ({step} step): {r}." for step, r in flight.items())
    # application replay runs the workload once per pass: "finished" counts cases, not passes
    where += "".join(f" The {step} step's workload had run every case {runs} time(s) (application replay: once a "
                     f"replay pass) and {part} case(s) of the next run." for step, (runs, part) in reruns.items())
    return (f"capture of {plan.name!r} {what}. {len(done)} of {len(plan.runnable)} case(s) had finished (listed in "
            f"{failed}/FAILED.txt).{where} The previous capture (if any) is untouched; partial output and logs are in {failed}")


def gpus_here() -> set[str] | None:
    """The folder names (:func:`~nsightlab.store.captures.gpu_slug`) of this machine's GPUs, as nvidia-smi
    names them; None where nvidia-smi is not found or says nothing (the GPU is known only once the capture ran)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    names = {gpu_slug(line.strip()) for line in out.stdout.splitlines() if line.strip()} if out.returncode == 0 else set()
    return names or None


def existing_captures(profiles: str | os.PathLike, name: str, gpus: set[str] | None) -> list[Path]:
    """The capture folders ``<profiles>/<gpu>/<name>`` a capture named ``name`` would land on: those of the
    GPUs ``gpus`` (folder names), or of every GPU folder where ``gpus`` is None (this machine's GPU unknown)."""
    root = Path(profiles)
    if gpus is None:
        gpus = {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()
    return sorted(p for p in (root / g / name for g in gpus) if p.exists() or p.is_symlink())


def check_destination(profiles: str | os.PathLike, name: str, *, replace: bool = False,
                      gpus: set[str] | None = None) -> list[Path]:
    """Where a capture named ``name`` would replace an existing one (:func:`existing_captures`; ``gpus``
    default: :func:`gpus_here`): ProfileError in one line unless ``replace``, before any GPU work. Returns
    the folders it would replace (with ``replace``). Placing the capture checks again (nsightlab.core.files.place)."""
    found = existing_captures(profiles, name, gpus if gpus is not None else gpus_here())
    if found and not replace:
        raise ProfileError(f"{', '.join(map(str, found))} already exist{'s' if len(found) == 1 else ''}; nothing was "
                           f"captured or replaced (give another --name, or --replace to replace "
                           f"{'it' if len(found) == 1 else 'the one of this GPU'}; replace=True from Python)")
    return found


def capture(sweep: Sweep | str, profiles: str | os.PathLike = "profiles", *, ncu: str | None = None,
            nsys: str | None = None, python: str = sys.executable, clock_control: str = "none", only: str | None = None,
            nsys_iters: int | None = None, replay_mode: str | None = None, ceilings_from: Path | None = None,
            deep_only: bool = False, replace: bool = False, echo: Callable[[str], None] = print) -> Path:
    """Capture one sweep (a :class:`~nsightlab.run.sweep.Sweep`, a registered sweep's name or a TOML
    path) and return its folder. ``only``: a regex over range names. ``ceilings_from``: an earlier
    capture of the same command on the same GPU whose measured ceilings this one reuses.
    ``deep_only``: only the deep tier (the sweep's ``deep`` cases), into ``<name>-deep``.
    ``replace``: replace an existing capture of the same name (else ProfileError before any GPU work,
    :func:`check_destination`; the old one waits in a dated backup until the new one is in place)."""
    if isinstance(sweep, str):
        sweep = find(sweep)
    todo = plan(sweep, only, deep_only)
    check_destination(profiles, todo.name, replace=replace)
    tools = _find_tools(todo.steps, ncu, nsys)
    profiles = Path(profiles).resolve()
    profiles.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    tmp = profiles / f".tmp-{todo.name}-{stamp}-{os.getpid()}"
    tmp.mkdir()
    (tmp / "sweep.toml").write_text(sweep.to_toml(), encoding="utf-8")
    steps = _Steps(todo, tmp, _Runner(tmp, echo), _environment(sweep), python, tools, clock_control,
                   replay_mode or sweep.replay_mode, nsys_iters or sweep.nsys_iters)
    echo(f"capture {todo.name}: {len(todo.runnable)} case(s) to run ({len(todo.cases) - len(todo.runnable)} skipped"
         f"{f', {len(todo.deep)} deep' if todo.deep else ''}), steps: {', '.join(todo.steps)}")
    try:
        man = _run_steps(steps, stamp, ceilings_from)
        dest = profiles / gpu_slug(man["gpu"].get("name", "unknown")) / todo.name
        manifest.publish(tmp, dest, man, replace=replace)
    except BaseException as exc:
        msg = _keep_failed(exc, todo, tmp, profiles, stamp)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            echo(msg)
            raise
        raise CaptureError(msg) from exc
    echo(f"captured {todo.name} into {dest} in {steps.timings['total']:.0f} s")
    return dest


def profile(impls: Sequence[str | Callable[..., Any]], *, name: str = "notebook", profiles: str | os.PathLike = "profiles_live",
            tools: Sequence[str] = ("ncu", "nsys"), passes: Sequence[str] = ("forward",), options: dict[str, Any] | None = None,
            replace: bool = False, **params: Any) -> dict[str, Any]:
    """From a notebook: capture ``impls`` (registered names, ``module:callable`` strings, or functions
    defined in an importable module) on the shapes ``params`` (their problem's parameters; lists sweep), in a subprocess,
    and hand back the tidy frames: ``{"path", "manifest", "ncu" (per launch), "nsys" (tables)}``. An earlier
    capture of the same ``name`` is replaced only with ``replace`` (else ProfileError before any GPU work)."""
    from ..core.ranges import schemas_of
    from ..parse.ncu import ncu_frame
    from ..parse.nsys import nsys_tables
    from ..store.captures import find_file, load_manifest

    specs = []
    for impl in impls:
        if callable(impl):
            mod = getattr(impl, "__module__", "__main__")
            if mod == "__main__":
                raise ValueError(f"{impl.__name__} is defined in the notebook itself; the capture runs it in another "
                                 "process, which can only import it: put it in a .py file and import it from there")
            specs.append(f"{impl.__name__}={mod}:{impl.__qualname__}")
        else:
            specs.append(str(impl))
    sweep = from_args(name, specs, params, passes, options or {}, tools)
    path = capture(sweep, profiles, replace=replace)
    man = load_manifest(path)
    schemas = schemas_of(man)
    out: dict[str, Any] = {"path": path, "manifest": man}
    if (f := find_file(path, "ncu.ncu-rep")) is not None:
        out["ncu"] = ncu_frame(f, schemas=schemas)
    if (f := find_file(path, "nsys.sqlite")) is not None:
        out["nsys"] = nsys_tables(f, schemas=schemas)
    return out


def _option(text: str) -> tuple[str, Any]:
    key, sep, val = text.partition("=")
    if not sep or not key or not val:
        raise ValueError(f"--option takes name=value (e.g. block_size=32 or tile=128x64), not {text!r}")
    vals = [int(v) if v.isdigit() else v for v in val.split(",")]
    return key, vals if len(vals) > 1 else vals[0]



# --------------------------------------------------------------------------- command line


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
        return problems.get(DEFAULT_PROBLEM), None
    try:
        load_plugins(known.plugin)
        return _problem(known.problem, _impl_specs(known.impl)), None
    except ValueError as exc:
        return problems.get(DEFAULT_PROBLEM), str(exc)


def parser(prog: str, problem: Problem) -> argparse.ArgumentParser:
    """The capture command's parser, its shape flags from ``problem``'s parameters."""
    p = ArgumentParser(prog=prog, description=__doc__, allow_abbrev=False,
                       epilog="exit status: 0 every sweep captured (or listed), 1 a capture step failed (its partial "
                              "output is kept in <profiles>/.failed-*), 2 bad input (arguments, sweep, an existing "
                              "capture without --replace), 130 interrupted")
    src = p.add_argument_group("what to capture (one of)")
    src.add_argument("--suite", help="registered sweep names, comma-separated (see --list-suites)")
    src.add_argument("--sweep", help="a sweep TOML file")
    src.add_argument("--impl", action="append", default=[],
                     help="an implementation: a registered name (sdpa_flash, flash_mma, ...), module:callable, or "
                          "name=module:callable; repeat or comma-separate")
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


def _capture_all(sweeps: Sequence[Sweep], a: argparse.Namespace, prog: str) -> int:
    t0 = time.perf_counter()
    status = 0
    first: Path | None = None  # the GEMM and copy ceilings are measured once per command
    for s in sweeps:
        t = time.perf_counter()
        try:
            dest = capture(s, a.profiles, ncu=a.ncu, nsys=a.nsys, clock_control=a.clock_control, only=a.only,
                           nsys_iters=a.nsys_iters, replay_mode=a.replay_mode, ceilings_from=first, deep_only=a.deep_only,
                           replace=a.replace)
            first = first or dest
        except (ToolError, CaptureError, ValueError) as exc:
            print_error(prog, str(exc))
            status = 1
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        print(f"sweep {s.name}: {time.perf_counter() - t:.0f} s", file=sys.stderr)
    print(f"all sweeps ({', '.join(s.name for s in sweeps)}): {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return status


def sigterm_as_interrupt() -> None:
    """Make SIGTERM end a capture as Ctrl-C does: the running tool is stopped and the partial folder is kept aside
    as ``.failed-<name>-<time>/`` with its FAILED.txt, rather than left behind as ``.tmp-*`` (``timeout``'s default
    signal, a job scheduler's kill, a notebook stopping its capture subprocess). Main thread only."""
    import signal

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"terminated by signal {signum} (SIGTERM)")

    signal.signal(signal.SIGTERM, interrupt)


def main(argv: list[str] | None = None, prog: str = "nsightlab capture") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    problem, error = _problem_of_flags(argv)
    p = parser(prog, problem)
    a, extra = p.parse_known_args(argv)
    if error:  # before "unrecognized arguments": the shape flags of a problem that could not be chosen
        p.error(error)
    if extra:
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `--list | head` ends quietly
    sigterm_as_interrupt()
    if a.list_suites:
        for name, path in named_sweeps().items():
            print(f"{name:16s} {path}")
        return 0
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
    try:  # every sweep's folder, before the first runs: a refusal costs no GPU time
        for s in sweeps:
            check_destination(a.profiles, plan(s, a.only, a.deep_only).name, replace=a.replace)
    except ProfileError as exc:
        print_error(prog, str(exc))
        return BAD_INPUT
    return _capture_all(sweeps, a, prog)
