"""Capture a sweep under Nsight Compute / Nsight Systems into a self-describing profile folder.

    python -m nsightlab.capture --suite seqlen,blocksize,bench          # sweeps registered by plug-ins
    python -m nsightlab.capture --sweep my_sweep.toml
    python -m nsightlab.capture --impl mypkg.attn:my_attention --impl sdpa_flash -N 1024,4096 -D 128 --name mine
    python -m nsightlab.capture --suite seqlen --list                   # the cases, no GPU needed

Each sweep lands in ``<profiles>/<gpu>/<name>/`` with ``manifest.json``: the GPU, versions, commit,
the sweep itself (so the capture re-runs exactly), every case with its range name, status and work
model, the exact command lines, files with sizes and SHA-256, timings and measured ceilings. It is
written into a temporary folder beside it and moved into place only when complete: a failed or
interrupted capture leaves the previous one as it was, keeps its partial output in
``<profiles>/.failed-<name>-<time>/`` and says what failed and which cases had finished.

This module imports without torch: the workload (``python -m nsightlab.run.workload``), the ceilings
and a sweep's benchmark run as subprocesses, which is also how a notebook launches a capture.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..core import metrics as M
from ..core.environment import git_commit
from ..core.errors import CaptureError, ToolError
from ..core.files import place
from ..core.tools import check_ncu_output, check_nsys_importer, find_ncu, find_nsys, tool_version
from ..store.captures import compact, file_table, gpu_slug
from .sweep import Case, Sweep, find, from_args

SCHEMA = 2
REPO = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- command lines


def workload_command(sweep_file: str | os.PathLike, *, python: str = sys.executable, iters: int = 1,
                     warmup: int | None = None, only: str | None = None, log: str | os.PathLike | None = None,
                     warmup_only: str = "all", extra: Sequence[str] = ()) -> list[str]:
    cmd = [python, "-m", "nsightlab.run.workload", "--sweep", str(sweep_file), "--iters", str(iters),
           "--warmup-only", warmup_only]
    if warmup is not None:
        cmd += ["--warmup", str(warmup)]
    if only:
        cmd += ["--only", only]
    if log:
        cmd += ["--log", str(log)]
    return cmd + list(extra)


def ncu_command(ncu: str | os.PathLike, workload: Sequence[str], export: str | os.PathLike, *,
                metrics: Sequence[str] | None = None, clock_control: str = "none",
                nvtx_include: str = "regex:^[^/]*/", section_set: str | None = None,
                replay_mode: str = "kernel", kernel_regex: str | None = None,
                extra: Sequence[str] = ()) -> list[str]:
    """ncu over the workload, profiling only launches inside the measured NVTX ranges (and, with
    ``kernel_regex``, only kernels whose name matches; ``extra``: further ncu options).

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
    cmd = [str(ncu), "--nvtx", "--nvtx-include", nvtx_include, "--clock-control", clock_control,
           "--cache-control", "all", "--replay-mode", replay_mode, "--target-processes", "all"]
    if kernel_regex:
        cmd += ["--kernel-name", f"regex:{kernel_regex}"]
    cmd += list(extra)
    if section_set:
        cmd += ["--set", section_set]
    else:
        cmd += ["--metrics", ",".join(metrics if metrics is not None else M.metric_names())]
    return [*cmd, "--export", str(export), "--force-overwrite", *workload]


def nsys_command(nsys: str | os.PathLike, workload: Sequence[str], output: str | os.PathLike) -> list[str]:
    return [str(nsys), "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true",
            "--output", str(output), *workload]


def nsys_export_command(nsys: str | os.PathLike, report: str | os.PathLike, sqlite: str | os.PathLike) -> list[str]:
    return [str(nsys), "export", "--type", "sqlite", "--force-overwrite=true", "--output", str(sqlite), str(report)]


def ncu_raw_csv_command(ncu: str | os.PathLike, report: str | os.PathLike) -> list[str]:
    """What Nsight Compute itself says about a report (the parsers' oracle, and their fallback input)."""
    return [str(ncu), "--import", str(report), "--csv", "--page", "raw"]


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


def _finished(folder: Path) -> dict[str, str]:
    """range -> status of the cases the workload logs in ``folder`` say finished."""
    out: dict[str, str] = {}
    for log in sorted(folder.glob("cases_*.jsonl")):
        for line in log.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            out[rec.get("range", "")] = rec.get("status", "?")
    return out


def capture(sweep: Sweep | str, profiles: str | os.PathLike = "profiles", *, ncu: str | None = None,
            nsys: str | None = None, python: str = sys.executable, clock_control: str = "none", only: str | None = None,
            nsys_iters: int | None = None, replay_mode: str | None = None, ceilings_from: Path | None = None,
            echo: Callable[[str], None] = print) -> Path:
    """Capture one sweep (a :class:`~nsightlab.run.sweep.Sweep`, a registered sweep's name or a TOML
    path) and return its folder. ``only``: a regex over range names. ``ceilings_from``: an earlier
    capture of the same command on the same GPU whose measured ceilings this one reuses."""
    if isinstance(sweep, str):
        sweep = find(sweep)
    replay_mode = replay_mode or sweep.replay_mode
    nsys_iters = nsys_iters or sweep.nsys_iters
    cases: list[Case] = sweep.cases()
    if only:
        rx = re.compile(only)
        cases = [c for c in cases if rx.search(c.range)]
        if not cases and set(sweep.tools) & {"ncu", "nsys"}:
            raise CaptureError(f"--only {only!r} matches no case of sweep {sweep.name}")
    runnable = [c for c in cases if c.runnable]
    if set(sweep.tools) & {"ncu", "nsys"} and not runnable:
        raise CaptureError(f"sweep {sweep.name}: no case can run ({len(cases)} skipped: "
                           + "; ".join(sorted({c.status for c in cases}))[:300] + ")")
    profiles = Path(profiles).resolve()
    tools: dict[str, Path] = {}
    if "ncu" in sweep.tools:
        tools["ncu"] = find_ncu(ncu)
    if "nsys" in sweep.tools:
        tools["nsys"] = find_nsys(nsys)
        check_nsys_importer(tools["nsys"])
    profiles.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    tmp = profiles / f".tmp-{sweep.name}-{stamp}-{os.getpid()}"
    tmp.mkdir()
    (tmp / "sweep.toml").write_text(sweep.to_toml(), encoding="utf-8")
    run = _Runner(tmp, echo)
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("NSIGHTLAB_GIT_COMMIT", git_commit())  # a copy of the tree may have no .git
    if sweep.plugins:
        env["NSIGHTLAB_PLUGINS"] = ",".join([*sweep.plugins, *filter(None, env.get("NSIGHTLAB_PLUGINS", "").split(","))])
    schema = sweep.schema()
    steps = [s for s in ("ceilings", "ncu", "nsys", "bench") if s == "ceilings" or s in sweep.tools]
    echo(f"capture {sweep.name}: {len(runnable)} case(s) to run ({len(cases) - len(runnable)} skipped), "
         f"steps: {', '.join(steps)}")
    try:
        t = time.perf_counter()
        if ceilings_from is not None:
            for name in ("ceilings.json", "ceilings.log"):
                shutil.copyfile(Path(ceilings_from) / name, tmp / name)
            echo(f"[ceilings] reused from {ceilings_from} (measured earlier in this command)")
        else:
            run("ceilings", [python, "-m", "nsightlab.run.ceilings", "--out", str(tmp / "ceilings.json")], log="ceilings.log",
                env=env)
        timings["ceilings"] = time.perf_counter() - t
        measured = json.loads((tmp / "ceilings.json").read_text())
        environment = measured["environment"]
        gpu = environment.get("gpu", {})
        dest = profiles / gpu_slug(gpu.get("name", "unknown")) / sweep.name
        ncu_info: dict[str, Any] = {}
        if "ncu" in tools:
            t = time.perf_counter()
            # under application replay the patched pass would run the warm-ups patched too; kernels whose
            # implementation says it needs none skip them (ncu flushes the caches before each profiled kernel)
            wl = workload_command(tmp / "sweep.toml", python=python, iters=1, only=only, log=tmp / "cases_ncu.jsonl",
                                  warmup_only="needed" if replay_mode == "application" else "all")
            text = run("ncu", ncu_command(tools["ncu"], wl, tmp / "ncu", clock_control=clock_control,
                                          replay_mode=replay_mode, nvtx_include=schema.nvtx_include()),
                       log="ncu.log", env=env, check=check_ncu_output)
            timings["ncu"] = time.perf_counter() - t
            t = time.perf_counter()
            run("ncu-raw-csv", ncu_raw_csv_command(tools["ncu"], tmp / "ncu.ncu-rep"), log="ncu_raw_csv.log",
                stdout_to="ncu_raw.csv", env=env)
            timings["ncu_raw_csv"] = time.perf_counter() - t
            passes = passes_per_kernel(text)
            ncu_info = {"version": tool_version(tools["ncu"]), "path": str(tools["ncu"]), "metrics": M.metric_names(),
                        "clock_control": clock_control, "nvtx_include": schema.nvtx_include(), "replay_mode": replay_mode,
                        "kernels_profiled": kernels_profiled(text), "passes_per_kernel": passes,
                        "max_passes_per_kernel": max(passes.values(), default=0)}
        nsys_info: dict[str, Any] = {}
        if "nsys" in tools:
            t = time.perf_counter()
            wl = workload_command(tmp / "sweep.toml", python=python, iters=nsys_iters, only=only,
                                  log=tmp / "cases_nsys.jsonl")
            run("nsys", nsys_command(tools["nsys"], wl, tmp / "nsys"), log="nsys.log", env=env)
            if not (tmp / "nsys.nsys-rep").exists():
                raise CaptureError("nsys wrote no nsys.nsys-rep (its importer failed?); see nsys.log")
            run("nsys-export", nsys_export_command(tools["nsys"], tmp / "nsys.nsys-rep", tmp / "nsys.sqlite"),
                log="nsys_export.log", env=env)
            run("nsys-stats", nsys_stats_command(tools["nsys"], tmp / "nsys.sqlite", tmp / "nsys_stats"),
                log="nsys_stats.log", env=env)
            timings["nsys"] = time.perf_counter() - t
            nsys_info = {"version": tool_version(tools["nsys"]), "path": str(tools["nsys"]), "iters": nsys_iters}
        if "bench" in sweep.tools and sweep.bench:
            t = time.perf_counter()
            run("bench", [python, "-m", sweep.bench["module"], "--out", str(tmp), *map(str, sweep.bench.get("args", []))],
                log="bench.log", env=env)
            timings["bench"] = time.perf_counter() - t
        timings["total"] = time.perf_counter() - t_start
        finished = _finished(tmp)
        manifest = {
            "schema": SCHEMA, "name": sweep.name, "suite": sweep.name, "description": sweep.description,
            "origin": "captured", "created": stamp, "gpu": gpu, "environment": environment,
            "git_commit": environment.get("git_commit"), "ncu": ncu_info, "nsys": nsys_info,
            "ceilings": measured["ceilings"],
            "ceilings_measured_by": (f"an earlier capture of the same command ({Path(ceilings_from).name})"
                                     if ceilings_from is not None else "this capture"),
            "tools": list(sweep.tools), "only": only, "sweep": sweep.to_dict(), "range_schemas": [schema.to_json()],
            "cases": [{**c.to_json(), "status": finished.get(c.range, c.status if not c.runnable else "not run")}
                      for c in cases],
            "commands": run.commands, "timings_seconds": {k: round(v, 2) for k, v in timings.items()},
            "files": file_table(tmp),
        }
        with open(tmp / "manifest.json", "w") as fh:
            json.dump(manifest, fh, indent=2, default=str)
        compact(tmp)  # gzip the large exports; the manifest then lists the .gz files
        place(tmp, dest)
    except BaseException as exc:
        failed = profiles / f".failed-{sweep.name}-{stamp}"
        done = _finished(tmp)
        with open(tmp / "FAILED.txt", "w") as fh:
            fh.write(f"{type(exc).__name__}: {exc}\n")
            fh.write(f"cases finished ({len(done)} of {len(runnable)}):\n" + "".join(f"  {s:10s} {r}\n" for r, s in done.items()))
        os.replace(tmp, failed)
        what = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"failed: {exc}"
        msg = (f"capture of {sweep.name!r} {what}. {len(done)} of {len(runnable)} case(s) had finished (listed in "
               f"{failed}/FAILED.txt). The previous capture (if any) is untouched; partial output and logs are in {failed}")
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            echo(msg)
            raise
        raise CaptureError(msg) from exc
    echo(f"captured {sweep.name} into {dest} in {timings['total']:.0f} s")
    return dest


def profile(impls: Sequence[str | Callable[..., Any]], *, name: str = "notebook", profiles: str | os.PathLike = "profiles_live",
            tools: Sequence[str] = ("ncu", "nsys"), passes: Sequence[str] = ("forward",), options: dict[str, Any] | None = None,
            **params: Any) -> dict[str, Any]:
    """From a notebook: capture ``impls`` (registered names, ``module:callable`` strings, or functions
    defined in an importable module) on the attention shapes ``params`` (lists sweep), in a subprocess,
    and hand back the tidy frames: ``{"path", "manifest", "ncu" (per launch), "nsys" (tables)}``."""
    from ..core.ranges import schemas_of
    from ..parse import frames as parse
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
    path = capture(sweep, profiles)
    man = load_manifest(path)
    schemas = schemas_of(man)
    out: dict[str, Any] = {"path": path, "manifest": man}
    if (f := find_file(path, "ncu.ncu-rep")) is not None:
        out["ncu"] = parse.ncu_frame(f, schemas=schemas)
    if (f := find_file(path, "nsys.sqlite")) is not None:
        out["nsys"] = parse.nsys_tables(f, schemas=schemas)
    return out


# --------------------------------------------------------------------------- command line


def _ints(text: str | None, flag: str) -> list[int] | None:
    if text is None:
        return None
    try:
        vals = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag} takes positive integers, comma-separated (e.g. 1024,4096), not {text!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise ValueError(f"{flag} takes positive integers, comma-separated (e.g. 1024,4096), not {text!r}")
    return vals


def _option(text: str) -> tuple[str, Any]:
    key, sep, val = text.partition("=")
    if not sep or not key or not val:
        raise ValueError(f"--option takes name=value (e.g. block_size=32 or tile=128x64), not {text!r}")
    vals = [int(v) if v.isdigit() else v for v in val.split(",")]
    return key, vals if len(vals) > 1 else vals[0]


def sweeps_from_args(a: argparse.Namespace) -> list[Sweep]:
    """The sweeps a command line asks for; ValueError with a readable message on bad input."""
    chosen = [x for x in ("suite", "sweep", "impl") if getattr(a, x)]
    if len(chosen) != 1:
        raise ValueError("give exactly one of --suite NAME, --sweep FILE or --impl SPEC (with -N ...)")
    if a.suite:
        return [find(s) for s in a.suite.split(",") if s]
    if a.sweep:
        return [find(a.sweep)]
    if a.N is None:
        raise ValueError("--impl needs the shapes: at least -N (and -B -H -D, default 1, 8, 64)")
    causal = {"both": [False, True], "yes": True, "true": True, "no": False, "false": False}.get(a.causal.lower())
    if causal is None:
        raise ValueError(f"--causal takes both, yes or no, not {a.causal!r}")
    passes = [p for p in a.passes.split(",") if p]
    if not passes or any(p not in ("forward", "backward") for p in passes):
        raise ValueError(f"--pass takes forward, backward or forward,backward, not {a.passes!r}")
    tools = [t for t in a.tools.split(",") if t]
    params = {"B": _ints(a.B, "-B"), "H": _ints(a.H, "-H"), "N": _ints(a.N, "-N"), "D": _ints(a.D, "-D"),
              "Hkv": _ints(a.Hkv, "--Hkv"), "Nk": _ints(a.Nk, "--Nk"), "dtype": a.dtype.split(","), "causal": causal}
    impls = [s for spec in a.impl for s in spec.split(",") if s]
    return [from_args(a.name, impls, params, passes, dict(_option(o) for o in a.option), tools, plugins=a.plugin,
                      description=a.description or "")]


def main(argv: list[str] | None = None, prog: str = "nsightlab capture") -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_argument_group("what to capture (one of)")
    src.add_argument("--suite", help="registered sweep names, comma-separated (see --list-suites)")
    src.add_argument("--sweep", help="a sweep TOML file")
    src.add_argument("--impl", action="append", default=[],
                     help="an implementation: a registered name (sdpa_flash, flash_mma, ...), module:callable, or "
                          "name=module:callable; repeat or comma-separate")
    shp = p.add_argument_group("shapes, with --impl (comma-separated values sweep)")
    shp.add_argument("-B", help="batch (default 1)")
    shp.add_argument("-H", help="query heads (default 8)")
    shp.add_argument("-N", help="query length, e.g. 1024,4096")
    shp.add_argument("-D", help="head dim (default 64)")
    shp.add_argument("--Hkv", help="key/value heads (grouped-query attention; default H)")
    shp.add_argument("--Nk", help="key length (default N)")
    shp.add_argument("--dtype", default="float16", help="float16, bfloat16 or float32 (comma-separated)")
    shp.add_argument("--causal", default="no", help="no, yes or both")
    shp.add_argument("--pass", dest="passes", default="forward,backward", help="forward, backward or both")
    shp.add_argument("--option", action="append", default=[], help="implementation option name=value[,value]")
    shp.add_argument("--name", default="custom", help="the capture's name (its folder under profiles/<gpu>/)")
    shp.add_argument("--description", help="one line saying what the capture is for")
    shp.add_argument("--tools", default="ncu,nsys", help="ncu, nsys or both (default both)")
    shp.add_argument("--plugin", action="append", default=[], help="a module that registers implementations")
    p.add_argument("--profiles", default="profiles", help="profile store root (default: profiles)")
    p.add_argument("--only", help="only cases whose NVTX range name matches this regex")
    p.add_argument("--list", action="store_true", help="print each sweep's cases (range names, skips) and exit; no GPU")
    p.add_argument("--list-suites", action="store_true", help="print the registered sweeps and exit")
    p.add_argument("--ncu", help="path to ncu (else $NCU, PATH, standard folders)")
    p.add_argument("--nsys", help="path to nsys (else $NSYS, PATH, standard folders, Nsight Compute's copy)")
    p.add_argument("--clock-control", default="none", choices=("none", "base"),
                   help="ncu --clock-control (default none: the GPU's clocks are left as they are)")
    p.add_argument("--nsys-iters", type=int, default=None, help="measured launches per range under nsys (default: the sweep's)")
    p.add_argument("--replay-mode", default=None, choices=("kernel", "application"),
                   help="ncu replay: rerun the whole (deterministic) workload per counter pass, or replay each "
                        "kernel; default: the sweep's")
    a = p.parse_args(argv)
    if a.only:
        try:
            re.compile(a.only)
        except re.error as exc:
            p.error(f"--only {a.only!r} is not a regular expression: {exc}")
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `--list | head` ends quietly
    from ..problems.impls import load_plugins
    from .sweep import named_sweeps

    try:
        load_plugins(a.plugin)
    except ValueError as exc:
        p.error(str(exc))
    if a.list_suites:

        for name, path in named_sweeps().items():
            print(f"{name:16s} {path}")
        return 0
    try:
        sweeps = sweeps_from_args(a)
        if a.list:
            for s in sweeps:
                cases = [c for c in s.cases() if not a.only or re.search(a.only, c.range)]
                print(f"# {s.name}: {sum(c.runnable for c in cases)} case(s) to run, {sum(not c.runnable for c in cases)} skipped"
                      + (f" (matching --only {a.only!r})" if a.only else ""))
                for c in cases:
                    print(c.range + ("" if c.runnable else f"    [{c.status}]"))
            return 0
        for s in sweeps:
            s.cases()  # every sweep checked before the first one runs
    except ValueError as exc:
        p.error(str(exc))
    if a.nsys_iters is not None and a.nsys_iters < 1:
        p.error("--nsys-iters must be >= 1")
    t0 = time.perf_counter()
    status = 0
    first: Path | None = None  # the GEMM and copy ceilings are measured once per command
    for s in sweeps:
        t = time.perf_counter()
        try:
            dest = capture(s, a.profiles, ncu=a.ncu, nsys=a.nsys, clock_control=a.clock_control, only=a.only,
                           nsys_iters=a.nsys_iters, replay_mode=a.replay_mode, ceilings_from=first)
            first = first or dest
        except (ToolError, CaptureError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 1
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        print(f"sweep {s.name}: {time.perf_counter() - t:.0f} s", file=sys.stderr)
    print(f"all sweeps ({', '.join(s.name for s in sweeps)}): {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return status
