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

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from ..core import metrics as M
from ..core.environment import git_commit
from ..core.errors import CaptureError, ProfileError, ToolError
from ..core.ranges import RangeSchema
from ..core.tools import check_ncu_output, check_nsys_importer, find_ncu, find_nsys, tool_version
from ..problems.impls import resolve
from ..store import manifest
from ..store.captures import gpu_slug
from . import cluster
from .cluster import ClusterError, Item, Shard, Where, die_with_parent
from .sweep import CASES_FILE, TOOLS, Case, Sweep, find, from_args, read_cases, regex, write_cases

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
    """The workload's command line; ``only``: a regex over range names, or several that a case must all match.
    ``sweep_file``: a plan's cases (a ``.json`` file, :data:`~nsightlab.run.sweep.CASES_FILE`: the workload reads
    them) or a sweep TOML (the workload expands it)."""
    source = "--cases" if str(sweep_file).endswith(".json") else "--sweep"
    cmd = [python, "-m", "nsightlab.run.workload", source, str(sweep_file), "--iters", str(iters),
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

    def __init__(self, folder: Path, echo: Callable[[str], None], *, on_worker: bool = False) -> None:
        self.folder, self.echo = folder, echo
        self.commands: list[dict[str, Any]] = []
        #: on a Dask worker: each tool dies with the worker thread that started it (nsightlab.run.cluster.die_with_parent)
        self.on_worker = on_worker
        #: the tool running now (a worker's stop watcher terminates it)
        self.proc: subprocess.Popen | None = None

    def __call__(self, step: str, cmd: list[str], *, log: str, env: dict[str, str] | None = None,
                 stdout_to: str | None = None, check: Callable[[str, int], None] | None = None) -> str:
        self.echo(f"[{step}] {' '.join(cmd[:6])}{' ...' if len(cmd) > 6 else ''}")
        t0 = time.perf_counter()
        log_path = self.folder / log
        extra: dict[str, Any] = {"preexec_fn": die_with_parent} if self.on_worker else {}
        with open(log_path, "w") as lf:
            if stdout_to:
                with open(self.folder / stdout_to, "w") as out:
                    proc = subprocess.run(cmd, stdout=out, stderr=lf, env=env, **extra)
            else:
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                        **extra)
                self.proc = proc
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
                finally:
                    self.proc = None
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
        return workload_command(self.folder / CASES_FILE, python=self.python, iters=iters, log=self.folder / log,
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
            cmd = workload_command(self.folder / CASES_FILE, python=self.python, only=self.plan.only,
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


def _fail(exc: BaseException, msg: str, echo: Callable[[str], None]) -> NoReturn:
    """End a capture that ``exc`` stopped, ``msg`` saying what was kept: an interrupt (Ctrl-C, exit) goes on as
    itself after ``echo`` prints it, anything else becomes a CaptureError carrying it."""
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        echo(msg)
        raise exc
    raise CaptureError(msg) from exc


def _keep_failed(exc: BaseException, plan: Plan, tmp: Path, profiles: Path, stamp: str,
                 done: dict[str, str] | None = None) -> str:
    """Move a failed capture's folder aside with a FAILED.txt (what failed, which cases had finished, the
    case in flight); the message that says so. ``done``: the finished cases where the cases logs do not say
    (a sharded capture: its finished shards')."""
    failed = profiles / f".failed-{plan.name}-{stamp}"
    done = _finished(tmp) if done is None else done
    flight, reruns = _in_flight(tmp), _reruns(tmp, len(plan.runnable))
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


def _new_tmp(profiles: Path, name: str, stamp: str) -> Path:
    """A temporary folder of its own for a capture under ``profiles``: two captures at once (two processes, or two
    threads of one in the same second) never share one."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix=f".tmp-{name}-{stamp}-{os.getpid()}-", dir=profiles))


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
    tmp = _new_tmp(profiles, todo.name, stamp)
    (tmp / "sweep.toml").write_text(sweep.to_toml(), encoding="utf-8")
    write_cases(tmp / CASES_FILE, sweep, todo.cases)  # the plan, expanded once: what every workload runs
    steps = _Steps(todo, tmp, _Runner(tmp, echo), _environment(sweep), python, tools, clock_control,
                   replay_mode or sweep.replay_mode, nsys_iters or sweep.nsys_iters)
    echo(f"capture {todo.name}: {len(todo.runnable)} case(s) to run ({len(todo.cases) - len(todo.runnable)} skipped"
         f"{f', {len(todo.deep)} deep' if todo.deep else ''}), steps: {', '.join(todo.steps)}")
    try:
        man = _run_steps(steps, stamp, ceilings_from)
        dest = profiles / gpu_slug(man["gpu"].get("name", "unknown")) / todo.name
        manifest.publish(tmp, dest, man, replace=replace)
    except BaseException as exc:
        _fail(exc, _keep_failed(exc, todo, tmp, profiles, stamp), echo)
    echo(f"captured {todo.name} into {dest} in {steps.timings['total']:.0f} s")
    return dest


# --------------------------------------------------------------------------- many GPUs: one sweep in shards, one capture

#: where a sharded capture's tasks write, inside its temporary folder: one folder per shard task (and attempt),
#: one per GPU for its ceilings; the client moves their files into the capture once every shard is done
SHARDS_DIR, GPUS_DIR = ".shards", ".gpus"
#: what a resumed capture needs to plan the rest: the command's settings (the sweep itself is sweep.toml)
PLAN_FILE = "plan.json"
#: a finished shard task's record in its folder: what a resumed capture keeps
SHARD_FILE = "shard.json"
#: the steps a shard can run, in the order it runs them
SHARD_STEPS = ("ncu", "nsys", "bench", "deep")


@dataclass
class ShardJob:
    """What one shard task needs on its worker (pickled to it): the capture's temporary folder, the shard, the
    tools (None: found on the worker), the settings, the environment to add to the worker's own."""

    root: str
    shard: Shard
    python: str | None
    ncu: str | None
    nsys: str | None
    clock_control: str
    replay_mode: str
    nsys_iters: int
    env: dict[str, str]
    identify: Callable[[], dict[str, Any]] | None = None
    stop: str | None = None


def _added_environment(sweep: Sweep) -> dict[str, str]:
    """What a worker's tools get beside the worker's own environment (which pins its GPU)."""
    env = {"PYTHONUNBUFFERED": "1", "NSIGHTLAB_GIT_COMMIT": os.environ.get("NSIGHTLAB_GIT_COMMIT") or git_commit()}
    plugins = [*sweep.plugins, *filter(None, os.environ.get("NSIGHTLAB_PLUGINS", "").split(","))]
    if plugins:
        env["NSIGHTLAB_PLUGINS"] = ",".join(plugins)
    return env


def _gpu_said(gpu: dict[str, Any]) -> str:
    return f"GPU {gpu.get('index')} of {gpu.get('host')}" if gpu.get("index") is not None else f"the GPU of {gpu.get('host')}"


@contextmanager
def _stop_watch(runner_of: Callable[[], _Runner | None], name: str | None) -> Iterator[None]:
    """While a shard runs on a worker: a thread that terminates its running tool once the client sets the Dask
    event ``name`` (an interrupted capture on a cluster this process did not start)."""
    if not name:
        yield
        return
    import threading

    from distributed import Event

    done = threading.Event()

    def watch() -> None:
        event = Event(name)
        while not done.is_set():
            try:
                if event.wait(timeout=2):
                    r = runner_of()
                    if r is not None and r.proc is not None:
                        r.proc.terminate()
            except Exception:  # noqa: BLE001 - the scheduler gone: the worker goes with it
                return

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()


def _task_folder(root: Path, *parts: str) -> Path:
    """A task's folder inside the capture's temporary folder ``root``, which must still be there: a task that
    outlived its capture (interrupted, its folder moved aside as .failed-*) must not create it again."""
    if not root.is_dir():
        raise CaptureError(f"{root} is gone (the capture was interrupted or failed): this task's output has nowhere to go")
    folder = root
    for part in parts:  # one level at a time: never the capture's folder itself again
        folder = folder / part
        folder.mkdir(exist_ok=True)
    return folder


def run_shard(job: ShardJob, *after: Any) -> dict[str, Any]:
    """A Dask task: run the shard's steps on this worker's GPU into a folder of its own under the capture's
    ``.shards/``, and return (and write as ``shard.json``) what the client merges. A case that crashes the
    workload (the step fails with that case in flight) is marked failed and the step runs again without it; any
    other failure raises (Dask retries the shard). ``after``: tasks it waits for (the implementations' setup)."""
    import uuid

    root = Path(job.root)
    gpu = (job.identify or cluster.worker_gpu)()
    sweep = Sweep.load(root / "sweep.toml")
    by_range = {c.range: c for c in read_cases(root / CASES_FILE).cases}  # the client's plan, not expanded again
    folder = _task_folder(root, SHARDS_DIR, f"s{job.shard.index:02d}-{uuid.uuid4().hex[:8]}")
    kinds = [k for k in SHARD_STEPS if job.shard.has(k)]
    tools = _find_tools(["deep" if k == "deep" else k for k in kinds], job.ncu, job.nsys)
    python = job.python or sys.executable
    env = {**os.environ, **job.env}
    tag = f"[shard {job.shard.index} {_gpu_said(gpu)}]"

    def echo(line: str) -> None:
        print(f"{tag} {line}", flush=True)

    out: dict[str, Any] = {"index": job.shard.index, "gpu": gpu, "folder": folder.name, "statuses": {}, "failed": {},
                           "steps": {}, "commands": [], "timings": {}, "cost": job.shard.cost}
    current: list[_Runner] = []
    t0 = time.perf_counter()
    with _stop_watch(lambda: current[-1] if current else None, job.stop):
        for kind in kinds:
            remaining = job.shard.ranges(kind)
            attempts: list[str] = []
            while remaining or kind == "bench":
                sub = folder / f"{kind}-a{len(attempts)}"
                sub.mkdir()
                attempts.append(sub.name)
                shutil.copyfile(root / "sweep.toml", sub / "sweep.toml")
                cases = [by_range[r] for r in remaining]
                write_cases(sub / CASES_FILE, sweep, cases)
                todo = Plan(sweep, cases, cases if kind == "deep" else [], sweep.schema(),
                            only=cluster.anchored(remaining) if remaining else None)
                runner = _Runner(sub, echo, on_worker=True)
                current.append(runner)
                steps = _Steps(todo, sub, runner, env, python, tools, job.clock_control, job.replay_mode, job.nsys_iters)
                try:
                    facts = {"ncu": steps.ncu, "nsys": steps.nsys, "bench": steps.bench, "deep": steps.deep}[kind]()
                except (CaptureError, ToolError) as exc:
                    out["commands"] += runner.commands
                    flight = _in_flight(sub).get(kind)
                    if kind == "bench" or flight not in remaining:
                        raise CaptureError(f"shard {job.shard.index} on {_gpu_said(gpu)}: {exc}") from exc
                    echo(f"the {kind} step's workload crashed in {flight}: marked failed, the step runs again without it")
                    out["failed"][flight] = (f"failed: the workload crashed in this case under {kind} on "
                                             f"{_gpu_said(gpu)} ({str(exc)[:300]})")
                    remaining = [r for r in remaining if r != flight]
                    continue
                out["commands"] += runner.commands
                out["steps"][kind] = {"folder": sub.name, "attempts": attempts, "facts": facts or {},
                                      "seconds": round(steps.timings.get(kind, 0.0), 2),
                                      "timings": {k: round(v, 2) for k, v in steps.timings.items()}}
                if kind == "ncu":
                    out["statuses"].update(_finished(sub))
                for stale in sub.glob("cases_*.jsonl.running"):
                    stale.unlink()
                break
    out["seconds"] = round(time.perf_counter() - t0, 2)
    for c in out["commands"]:
        c.update(shard=job.shard.index, gpu=gpu.get("index"), host=gpu.get("host"))
    out["shard"] = dataclasses.asdict(job.shard)
    out = json.loads(json.dumps(out, default=str))  # what the client gets is what a resumed capture reads back
    (folder / SHARD_FILE).write_text(json.dumps(out, indent=1))
    return out


def measure_ceilings(root: str, tag: str, python: str | None, env: dict[str, str]) -> dict[str, Any]:
    """A Dask task pinned to one GPU's worker: the ceilings of that GPU into ``.gpus/<tag>/``."""
    folder = _task_folder(Path(root), GPUS_DIR, tag)
    runner = _Runner(folder, lambda line: print(f"[{tag}] {line}", flush=True), on_worker=True)
    t0 = time.perf_counter()
    runner("ceilings", [python or sys.executable, "-m", "nsightlab.run.ceilings", "--out", str(folder / "ceilings.json")],
           log="ceilings.log", env={**os.environ, **env})
    (folder / "done.json").write_text(json.dumps({"commands": runner.commands, "seconds": time.perf_counter() - t0}))
    return {"tag": tag, "commands": runner.commands, "seconds": round(time.perf_counter() - t0, 2)}


def run_setup(root: str, python: str | None, env: dict[str, str], only: str | None) -> float:
    """A Dask task: the implementations' setup (building their kernels) once, before any shard profiles."""
    folder = _task_folder(Path(root), GPUS_DIR)
    runner = _Runner(folder, lambda line: print(f"[setup] {line}", flush=True), on_worker=True)
    t0 = time.perf_counter()
    runner("setup", workload_command(Path(root) / CASES_FILE, python=python or sys.executable, only=only,
                                     extra=["--setup-only"]), log="setup.log", env={**os.environ, **env})
    return time.perf_counter() - t0


def replay_note(replay_mode: str, shards: int, ncu: bool) -> str | None:
    """The line a light tier split over ``shards`` shards prints under application replay: each of them restarts
    the workload once per replay pass (docs/capture.md, "Plan past one node": 52 s per shard for the attention sweep
    on an H200 node), which kernel replay does once per shard."""
    if not ncu or shards < 2 or replay_mode != "application":
        return None
    return (f"note: under application replay each of the {shards} light-tier shards restarts the workload once per "
            "Nsight Compute replay pass; where a shard profiles few launches, --replay-mode kernel starts it once per "
            "shard (docs/capture.md: Plan past one node)")


def _items(todo: Plan, *, replay_mode: str) -> list[Item]:
    """The capture's work as shard items: each light-tier case alone, the timeline, the benchmark and the deep tier
    each whole (one process, one report: what the readers of nsys.sqlite and deep.ncu-rep expect)."""
    light_passes = cluster.PASSES["ncu"]
    items = []
    runnable = todo.runnable
    if "ncu" in todo.steps:
        # application replay reruns the whole workload per pass; kernel replay replays the kernel: either way the
        # cost is the case's work times its passes
        items += [Item("ncu", [c.range], cluster.case_cost(c.model, light_passes)) for c in runnable]
    if "nsys" in todo.steps:
        items.append(Item("nsys", [c.range for c in runnable],
                          sum(cluster.case_cost(c.model, todo.sweep.nsys_iters + 1) for c in runnable)))
    if "bench" in todo.steps:
        items.append(Item("bench", [], sum(cluster.case_cost(c.model, 10) for c in runnable) or 1.0))
    if "deep" in todo.steps:
        items.append(Item("deep", [c.range for c in todo.deep if c.runnable],
                          sum(cluster.case_cost(c.model, cluster.PASSES["deep"]) for c in todo.deep if c.runnable)))
    del replay_mode
    return items


def _gpu_tag(gpu: dict[str, Any], hosts: int, worker: int) -> str:
    if gpu.get("index") is None:
        return f"worker{worker}"
    return f"gpu{gpu['index']}" if hosts <= 1 else f"{gpu.get('host')}-gpu{gpu['index']}"


def _done_shards(tmp: Path) -> list[dict[str, Any]]:
    """The finished shards' records in a (partial) sharded capture folder."""
    out = []
    for f in sorted((tmp / SHARDS_DIR).glob(f"*/{SHARD_FILE}")):
        try:
            out.append(json.loads(f.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    return out


def _left_to_do(items: list[Item], done: list[dict[str, Any]]) -> list[Item]:
    """``items`` less what the finished shards ran (a resumed capture): their light-tier cases (failed ones too),
    and the whole steps (timeline, benchmark, deep tier) one of them ran."""
    ran: set[str] = set()
    whole: set[str] = set()
    for d in done:
        for it in d["shard"]["items"]:
            if it["kind"] == "ncu":
                ran.update(it["ranges"])
            else:
                whole.add(it["kind"])
    return [it for it in items if (it.ranges[0] not in ran if it.kind == "ncu" else it.kind not in whole)]


def _move(src: Path, dest: Path) -> None:
    if src.is_file():
        os.replace(src, dest)


def _shard_name(name: str, tag: str) -> str:
    """``ncu.ncu-rep`` -> ``ncu-s01.ncu-rep``, ``cases_ncu.jsonl`` -> ``cases_ncu-s01.jsonl``: a shard's file beside
    the other shards' (the readers take every ``*.ncu-rep`` but ``deep.*``, and every ``cases_*.jsonl``)."""
    head, dot, rest = name.partition(".")
    return f"{head}-{tag}{dot}{rest}"


def _merge(tmp: Path, done: list[dict[str, Any]], gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """Move the shards' and GPUs' files into the capture folder ``tmp`` (one shard of a step: the names a
    one-GPU capture has; several: each with its shard's tag) and return what the manifest says of them."""
    light = [d for d in done if "ncu" in d["steps"]]
    files: dict[str, list[str]] = {}
    for d in sorted(done, key=lambda d: d["index"]):
        folder = tmp / SHARDS_DIR / d["folder"]
        for kind, step in d["steps"].items():
            sub = folder / step["folder"]
            tag = f"s{d['index']:02d}" if kind == "ncu" and len(light) > 1 else ""
            for f in sorted(sub.iterdir()):
                if f.name in ("sweep.toml", CASES_FILE) or f.name.endswith(".running") or not f.is_file():
                    continue
                name = _shard_name(f.name, tag) if tag else f.name
                _move(f, tmp / name)
                files.setdefault(str(d["index"]), []).append(name)
            for crashed in step["attempts"][:-1]:  # the crashed attempts' tool logs (their partial reports are dropped)
                for f in sorted((folder / crashed).glob("*.log")):
                    name = _shard_name(f.name, f"s{d['index']:02d}-crashed-{crashed.rsplit('-', 1)[1]}")
                    _move(f, tmp / name)
    per_gpu = []
    for g in gpus:
        src = tmp / GPUS_DIR / g["tag"]
        per_gpu.append({**{k: g[k] for k in ("index", "uuid", "name", "host", "tag")},
                        "ceilings": json.loads((src / "ceilings.json").read_text())["ceilings"],
                        "ceilings_file": "ceilings.json" if len(gpus) == 1 else f"ceilings-{g['tag']}.json"})
    first = tmp / GPUS_DIR / gpus[0]["tag"]
    for name in ("ceilings.json", "ceilings.log"):
        shutil.copyfile(first / name, tmp / name)
    if len(gpus) > 1:
        for g in gpus:
            for name in ("ceilings.json", "ceilings.log"):
                shutil.copyfile(tmp / GPUS_DIR / g["tag"] / name, tmp / _shard_name(name, g["tag"]))
    if (tmp / GPUS_DIR / "setup.log").exists():
        _move(tmp / GPUS_DIR / "setup.log", tmp / "setup.log")
    return {"files": files, "gpus": per_gpu}


def _merged_ncu(results: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """One step's facts over its shards: the first's settings, kernels summed, passes the largest per kernel."""
    facts = [d["steps"][kind]["facts"] for d in results if kind in d["steps"]]
    if not facts:
        return {}
    out = dict(facts[0])
    if len(facts) > 1:
        passes: dict[str, int] = {}
        for f in facts:
            for k, v in (f.get("passes_per_kernel") or {}).items():
                passes[k] = max(passes.get(k, 0), v)
        out.update(kernels_profiled=sum(f.get("kernels_profiled", 0) for f in facts), passes_per_kernel=passes,
                   max_passes_per_kernel=max(passes.values(), default=0))
    return out


def _sharded_manifest(todo: Plan, tmp: Path, stamp: str, results: list[dict[str, Any]], merged: dict[str, Any],
                      ceilings: list[dict[str, Any]], where: dict[str, Any], timings: dict[str, float],
                      shards_planned: int, elsewhere: dict[str, str] | None = None) -> dict[str, Any]:
    """The manifest of a sharded capture (or of one GPU model's part of a mixed one: ``elsewhere`` says, for each
    case another model's part holds, where it is)."""
    measured = json.loads((tmp / "ceilings.json").read_text())
    environment = measured["environment"]
    statuses: dict[str, str] = {}
    ran_on: dict[str, dict[str, Any]] = {}
    for d in sorted(results, key=lambda d: d["index"]):
        statuses.update(d["statuses"])
        statuses.update(d["failed"])
        for kind in d["steps"]:
            for r in [r for it in d["shard"]["items"] if it["kind"] == kind for r in it["ranges"]]:
                if kind == "ncu" or r not in ran_on:
                    ran_on[r] = {"gpu": {"index": d["gpu"].get("index"), "uuid": d["gpu"].get("uuid"),
                                         "host": d["gpu"].get("host")}, "shard": d["index"]}
        for r in d["failed"]:
            ran_on[r] = {"gpu": {"index": d["gpu"].get("index"), "uuid": d["gpu"].get("uuid"),
                                 "host": d["gpu"].get("host")}, "shard": d["index"]}
    deep = {c.range for c in todo.deep}
    commands = [c for g in ceilings for c in g["commands"]] + [c for d in sorted(results, key=lambda d: d["index"])
                                                              for c in d["commands"]]
    facts = {"ncu": _merged_ncu(results, "ncu"), "nsys": _merged_ncu(results, "nsys"), "deep": _merged_ncu(results, "deep")}
    models = sorted({g["name"] for g in merged["gpus"]})
    return manifest.build(
        name=todo.name, description=todo.sweep.description, origin="captured", created=stamp,
        gpu=environment.get("gpu", {}), environment=environment, tools=todo.tools, range_schemas=[todo.schema],
        commands=commands, **facts, ceilings=measured["ceilings"],
        ceilings_measured_by=("this capture" if len(merged["gpus"]) == 1 else
                              f"this capture, once per GPU (gpus[].ceilings; the top-level ones: {_gpu_said(merged['gpus'][0])})"),
        only=todo.only, deep_only=todo.deep_only, sweep=todo.sweep.to_dict(),
        cases=[{**c.to_json(), "status": statuses.get(c.range, (elsewhere or {}).get(c.range) or
                                                      (c.status if not c.runnable else "not run")),
                **({"deep": True} if c.range in deep else {}), **ran_on.get(c.range, {})} for c in todo.cases],
        gpus=merged["gpus"], mixed_models=len(models) > 1,
        cluster={**where, "workers": len({(d["gpu"].get("host"), d["gpu"].get("uuid")) for d in results}),
                 "shards_planned": shards_planned,
                 "shards": [{"index": d["index"], "gpu": d["gpu"], "cost_estimate": round(d["cost"], 3),
                             "seconds": d["seconds"], "files": merged["files"].get(str(d["index"]), []),
                             "steps": {k: {"seconds": v["seconds"], "attempts": len(v["attempts"])}
                                       for k, v in d["steps"].items()},
                             "failed": sorted(d["failed"])} for d in sorted(results, key=lambda d: d["index"])]},
        timings_seconds={k: round(v, 2) for k, v in timings.items()})


def find_resumable(profiles: str | os.PathLike, name: str) -> Path:
    """The newest interrupted or failed sharded capture of ``name`` under ``profiles`` (``.failed-<name>-*/`` with its
    plan); ProfileError in one line where there is none."""
    root = Path(profiles)
    found = sorted((p for p in root.glob(f".failed-{name}-*") if (p / PLAN_FILE).is_file()), key=lambda p: p.name)
    if not found:
        others = sorted(p.name for p in root.glob(".failed-*") if (p / PLAN_FILE).is_file())
        raise ProfileError(f"--resume {name}: no interrupted sharded capture of {name!r} under {root} (looked for "
                           f".failed-{name}-*/{PLAN_FILE}; resumable: {', '.join(others) or 'none'}). Only captures "
                           "made with --gpus or --scheduler resume")
    return found[-1]


def capture_sharded(sweep: Sweep | str | None, profiles: str | os.PathLike = "profiles", *, where: Where | None = None,
                    client: Any = None, ncu: str | None = None, nsys: str | None = None, python: str | None = None,
                    clock_control: str = "none", only: str | None = None, nsys_iters: int | None = None,
                    replay_mode: str | None = None, deep_only: bool = False, replace: bool = False,
                    allow_mixed: bool = False, shards_per_gpu: int = 1, retries: int = cluster.RETRIES,
                    identify: Callable[[], dict[str, Any]] | None = None, resume: str | None = None,
                    echo: Callable[[str], None] = print) -> Path:
    """Capture one sweep over the GPUs of a Dask cluster into ONE capture folder (as :func:`capture` does on one GPU).

    ``where`` (:class:`~nsightlab.run.cluster.Where`): GPUs of this machine, started as one worker each, or a running
    scheduler; or ``client``: a ``distributed.Client`` already connected (tests). The cases are planned into
    ``shards_per_gpu`` x workers shards, balanced by their estimated cost (work model x replay passes), longest
    first; each shard is one Dask task that profiles its cases on its worker's GPU (``retries``: runs again on any
    worker after a failure; a worker that dies under it: Dask runs it elsewhere). The ceilings are measured once
    per GPU, the implementations' setup once. A case that crashes its workload is marked failed. The manifest
    records each case's GPU (index, UUID) and shard, each GPU's ceilings, each shard's files and seconds.

    ``resume``: the name of an interrupted or failed sharded capture under ``profiles`` (its ``.failed-*`` folder):
    only what its finished shards did not run is run, and the result is placed as the whole capture would have
    been. ``identify``: how a worker names its GPU (default: nvidia-smi and CUDA_VISIBLE_DEVICES)."""
    profiles = Path(profiles).resolve()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if resume is not None:
        old = find_resumable(profiles, resume)
        saved = json.loads((old / PLAN_FILE).read_text())
        sweep = Sweep.load(old / "sweep.toml")
        only, deep_only, replace = saved["only"], saved["deep_only"], replace or saved["replace"]
        clock_control, replay_mode, nsys_iters = saved["clock_control"], saved["replay_mode"], saved["nsys_iters"]
        shards_per_gpu = saved.get("shards_per_gpu", shards_per_gpu)
        allow_mixed = allow_mixed or saved.get("allow_mixed", False)
    if isinstance(sweep, str):
        sweep = find(sweep)
    assert sweep is not None
    todo = plan(sweep, only, deep_only)
    check_destination(profiles, todo.name, replace=replace)
    replay = replay_mode or sweep.replay_mode
    iters = nsys_iters or sweep.nsys_iters
    profiles.mkdir(parents=True, exist_ok=True)
    if resume is not None:
        tmp = profiles / f".tmp-{todo.name}-{stamp}-{os.getpid()}-resumed"
        os.replace(old, tmp)  # claimed: a second --resume of the same name finds nothing to take
        (tmp / "FAILED.txt").unlink(missing_ok=True)
    else:
        tmp = _new_tmp(profiles, todo.name, stamp)
        (tmp / "sweep.toml").write_text(sweep.to_toml(), encoding="utf-8")
    write_cases(tmp / CASES_FILE, sweep, todo.cases)  # the plan, expanded once: what the shards' workloads run
    (tmp / PLAN_FILE).write_text(json.dumps({
        "only": only, "deep_only": deep_only, "replace": replace, "clock_control": clock_control,
        "replay_mode": replay, "nsys_iters": iters, "shards_per_gpu": shards_per_gpu, "allow_mixed": allow_mixed,
        "where": where.to_json() if where else None}, indent=1))
    done = _done_shards(tmp)
    items = _left_to_do(_items(todo, replay_mode=replay), done)
    echo(f"capture {todo.name}: {len(todo.runnable)} case(s) to run ({len(todo.cases) - len(todo.runnable)} skipped"
         f"{f', {len(todo.deep)} deep' if todo.deep else ''}), steps: {', '.join(todo.steps)}"
         + (f"; resumed from {old.name}: {len(done)} shard(s) already done, {len(items)} item(s) left" if resume else ""))
    t_start = time.perf_counter()
    stop_name = f"nsightlab-stop-{todo.name}-{stamp}-{os.getpid()}"
    try:
        with nullcontext(client) if client is not None else cluster.client_for(where or Where()) as cl:
            results, ceilings, gpus, timings = _run_on(cl, todo, tmp, items, done, python=python, ncu=ncu, nsys=nsys,
                                                       clock_control=clock_control, replay_mode=replay, nsys_iters=iters,
                                                       allow_mixed=allow_mixed, shards_per_gpu=shards_per_gpu,
                                                       retries=retries, identify=identify, stop=stop_name, echo=echo)
            engine = type(getattr(cl, "cluster", None)).__name__ if getattr(cl, "cluster", None) is not None else \
                "a running scheduler"
        info = {"where": (where or Where()).describe() if client is None else "a client given", "engine": engine}
        parts = _by_model(tmp, profiles, todo.name, stamp, results, gpus, ceilings)
        timings["total"] = time.perf_counter() - t_start
        ready = []
        try:  # every part merged before any is published: a part that fails puts the shards back into tmp
            for model, folder, res, gs, ceil in parts:
                merged = _merge(folder, res, gs)
                others = {r: f"ran on {m} ({gpu_slug(m)}/{todo.name})" for m, _, rs, _, _ in parts if m != model
                          for d in rs for r in [*d["statuses"], *d["failed"]]}
                ready.append((folder, _sharded_manifest(todo, folder, stamp, res, merged, ceil, info, timings,
                                                        len(results), others)))
        except BaseException:
            _unsplit(tmp, parts)
            raise
        placed = []
        for folder, man in ready:
            for leftover in (SHARDS_DIR, GPUS_DIR):
                shutil.rmtree(folder / leftover, ignore_errors=True)
            (folder / PLAN_FILE).unlink(missing_ok=True)
            dest = profiles / gpu_slug(man["gpu"].get("name", "unknown")) / todo.name
            manifest.publish(folder, dest, man, replace=replace)
            placed.append(dest)
        if len(parts) > 1:
            shutil.rmtree(tmp, ignore_errors=True)  # its shards and GPUs went into the parts
        dest = placed[0]
    except BaseException as exc:
        if isinstance(exc, ClusterError):
            shutil.rmtree(tmp, ignore_errors=True) if resume is None else os.replace(tmp, old)
            raise
        finished = {r: s for d in _done_shards(tmp) for r, s in {**d["statuses"], **d["failed"]}.items()}
        msg = _keep_failed(exc, todo, tmp, profiles, stamp, done=finished)
        _fail(exc, msg + f" Resume it with: nsightlab capture --resume {todo.name} --profiles {profiles} (only the cases "
                         "left run)", echo)
    echo(f"captured {todo.name} into {', '.join(map(str, placed))} in {timings['total']:.0f} s on {len(gpus)} GPU(s), "
         f"{len(results)} shard(s)" + (f": one capture per GPU model ({len(placed)})" if len(placed) > 1 else ""))
    return dest


def _by_model(tmp: Path, profiles: Path, name: str, stamp: str, results: list[dict[str, Any]],
              gpus: list[dict[str, Any]], ceilings: list[dict[str, Any]]) -> list[tuple[str, Path, list, list, list]]:
    """A sweep run on GPUs of one model: ``tmp`` whole, one part. Of several models (``--allow-mixed``): one part per
    model, each a folder of its own under ``profiles`` holding that model's shards and GPUs, so that each becomes a
    capture of its own in its GPU's folder (its cases, its ceilings, its pages: a roofline drawn at one GPU's peaks);
    the steps that run whole (nsys, the deep tier, a benchmark) land in the part of the GPU that ran them.
    (model, folder, results, gpus, ceilings) per part, the first GPU's model first."""
    models = list(dict.fromkeys(g.get("name", "unknown") for g in gpus))
    if len(models) == 1:
        return [(models[0], tmp, results, gpus, ceilings)]
    parts = []
    for m in models:
        gs = [g for g in gpus if g.get("name", "unknown") == m]
        tags = {g["tag"] for g in gs}
        res = [d for d in results if d["gpu"].get("name", "unknown") == m]
        folder = _new_tmp(profiles, name, stamp)
        for sub, names in ((SHARDS_DIR, [d["folder"] for d in res]), (GPUS_DIR, sorted(tags))):
            (folder / sub).mkdir()
            for n in names:
                os.replace(tmp / sub / n, folder / sub / n)
        if (tmp / GPUS_DIR / "setup.log").exists():
            shutil.copyfile(tmp / GPUS_DIR / "setup.log", folder / GPUS_DIR / "setup.log")
        for f in ("sweep.toml", CASES_FILE):
            shutil.copyfile(tmp / f, folder / f)
        parts.append((m, folder, res, gs, [c for c in ceilings if c.get("tag") in tags]))
    return parts


def _unsplit(tmp: Path, parts: list[tuple[str, Path, list, list, list]]) -> None:
    """:func:`_by_model` undone: every part's shards and GPUs moved back into ``tmp`` and the parts' folders removed,
    so that a capture that fails after the split is kept whole (one resumable ``.failed-*`` folder, no stray parts)."""
    for _, folder, *_ in parts:
        if folder == tmp:
            continue
        for sub in (SHARDS_DIR, GPUS_DIR):
            for entry in sorted((folder / sub).iterdir()) if (folder / sub).is_dir() else []:
                if not (tmp / sub / entry.name).exists():  # setup.log: a copy of tmp's own
                    os.replace(entry, tmp / sub / entry.name)
        shutil.rmtree(folder, ignore_errors=True)


def _run_on(client: Any, todo: Plan, tmp: Path, items: list[Item], done: list[dict[str, Any]], *, python: str | None,
            ncu: str | None, nsys: str | None, clock_control: str, replay_mode: str, nsys_iters: int, allow_mixed: bool,
            shards_per_gpu: int, retries: int, identify: Callable[[], dict[str, Any]] | None, stop: str,
            echo: Callable[[str], None]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]],
                                                   dict[str, float]]:
    """The Dask part of :func:`capture_sharded`: the GPUs, their ceilings, the setup, the shards; every result."""
    from distributed import as_completed

    workers = cluster.workers_gpus(client, identify or cluster.worker_gpu)
    hosts = len({g.get("host") for g in workers.values()})
    gpus: list[dict[str, Any]] = []
    pinned: dict[str, str] = {}
    for j, (addr, g) in enumerate(workers.items()):
        key = g.get("uuid") or addr
        if key in pinned:
            continue
        pinned[key] = addr
        gpus.append({**g, "tag": _gpu_tag(g, hosts, j), "worker": addr})
    cluster.check_models(gpus, allow_mixed)
    env = _added_environment(todo.sweep)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    ceiling_futures = [client.submit(measure_ceilings, str(tmp), g["tag"], python, env, workers=[g["worker"]],
                                     allow_other_workers=False, pure=False, priority=100, key=f"ceilings-{g['tag']}-{stop}")
                       for g in gpus if not (tmp / GPUS_DIR / g["tag"] / "done.json").exists()]
    after = []
    if any(resolve(n).setup is not None for n in sorted({c.impl for c in todo.runnable})):
        after = [client.submit(run_setup, str(tmp), python, env, todo.only, pure=False, priority=90, key=f"setup-{stop}")]
    shards = cluster.balance(items, len(workers) * shards_per_gpu,
                             first_index=max((d["index"] for d in done), default=-1) + 1)
    echo(f"{len(shards)} shard(s) over {len(workers)} worker(s) ({', '.join(g['tag'] for g in gpus)}); estimated costs "
         f"{', '.join(f'{s.cost:.0f}' for s in shards)} (work model x replay passes)")
    note = replay_note(replay_mode, sum(any(i.kind == "ncu" for i in s.items) for s in shards), ncu is not None)
    if note:
        echo(note)
    jobs = [ShardJob(str(tmp), s, python, ncu, nsys, clock_control, replay_mode, nsys_iters, env, identify, stop)
            for s in shards]
    futures = [client.submit(run_shard, job, *after, retries=retries, pure=False, priority=len(shards) - k,
                             key=f"shard-{job.shard.index}-{stop}") for k, job in enumerate(jobs)]
    results = list(done)
    ceilings = [json.loads((tmp / GPUS_DIR / g["tag"] / "done.json").read_text()) | {"tag": g["tag"]}
                for g in gpus if (tmp / GPUS_DIR / g["tag"] / "done.json").exists()]
    try:
        for fut in as_completed([*ceiling_futures, *after, *futures]):
            value = fut.result()
            if fut in ceiling_futures:
                ceilings.append(value)
                timings["ceilings"] = max(timings.get("ceilings", 0.0), value["seconds"])
            elif fut in after:
                timings["setup"] = value
            else:
                results.append(value)
                n = sum(len(v) for v in [value["statuses"], value["failed"]])
                echo(f"[shard {value['index']}] {n} case(s) on {_gpu_said(value['gpu'])} in {value['seconds']:.0f} s "
                     f"({len(results) - len(done)} of {len(futures)} shards done, {time.perf_counter() - t0:.0f} s)"
                     + (f"; failed: {', '.join(value['failed'])}" if value["failed"] else ""))
    except BaseException:
        _stop(client, stop, [*ceiling_futures, *after, *futures])
        raise
    for d in results:
        for kind, step in d["steps"].items():
            timings[kind] = timings.get(kind, 0.0) + step["seconds"]
    timings["shards_wall"] = time.perf_counter() - t0
    return results, ceilings, gpus, timings


def _stop(client: Any, name: str, futures: list[Any]) -> None:
    """Cancel what has not run and tell the running shards to stop their tools (a cluster this process did not start
    keeps its workers)."""
    try:
        from distributed import Event

        Event(name, client=client).set()
        client.cancel(futures, force=True)
    except Exception:  # noqa: BLE001 - the cluster already gone
        pass


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


def sigterm_as_interrupt() -> None:
    """Make SIGTERM end a capture as Ctrl-C does: the running tool is stopped and the partial folder is kept aside
    as ``.failed-<name>-<time>/`` with its FAILED.txt, rather than left behind as ``.tmp-*`` (``timeout``'s default
    signal, a job scheduler's kill, a notebook stopping its capture subprocess). Main thread only."""
    import signal

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"terminated by signal {signum} (SIGTERM)")

    signal.signal(signal.SIGTERM, interrupt)
