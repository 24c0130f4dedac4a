"""Capture a suite under Nsight Compute / Nsight Systems into a self-describing profile folder.

    python -m nsightlab.capture --suite seqlen,blocksize,seeds --profiles profiles
    python -m nsightlab.capture --suite seqlen --only 'flash_mma' --profiles /tmp/p   # a subset

Each suite lands in ``<profiles>/<gpu>/<suite>/`` with ``manifest.json`` (GPU, versions, commit,
parameters, exact command lines, files with sizes and SHA-256, timings, measured ceilings). It is
written into a temporary folder beside it and moved into place only when complete: a failed or
interrupted capture leaves the previous one as it was, keeps its partial output in
``<profiles>/.failed-<suite>-<time>/`` and says what failed. Re-running a suite replaces it whole.

This module imports without torch: the workload, the ceilings and the benchmark run as subprocesses
(``python -m flash_kernels.workload`` etc.), which is also how a notebook launches a capture.
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

from flash_kernels._env import git_commit

from . import metrics as M
from .ranges import NCU_NVTX_INCLUDE
from .store import compact, file_table, gpu_slug
from .tools import ToolError, check_ncu_output, check_nsys_importer, find_ncu, find_nsys, tool_version

SCHEMA = 1
REPO = Path(__file__).resolve().parent.parent


class CaptureError(RuntimeError):
    """A capture step failed; the message names the step and where its log and partial output are."""


# --------------------------------------------------------------------------- command lines


def workload_command(suite: str | None = None, *, python: str = sys.executable, iters: int = 1, warmup: int = 1,
                     only: str | None = None, log: str | os.PathLike | None = None, warmup_refs_only: bool = False,
                     extra: Sequence[str] = ()) -> list[str]:
    cmd = [python, "-m", "flash_kernels.workload"]
    if suite:
        cmd += ["--suite", suite]
    if only:
        cmd += ["--only", only]
    cmd += ["--iters", str(iters), "--warmup", str(warmup)]
    if warmup_refs_only:
        cmd += ["--warmup-refs-only"]
    if log:
        cmd += ["--log", str(log)]
    return cmd + list(extra)


def ncu_command(ncu: str | os.PathLike, workload: Sequence[str], export: str | os.PathLike, *,
                metrics: Sequence[str] | None = None, clock_control: str = "none",
                nvtx_include: str = NCU_NVTX_INCLUDE, section_set: str | None = None,
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
                    proc = subprocess.run(cmd, stdout=out, stderr=lf, env=env, cwd=REPO)
            else:
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                        cwd=REPO)
                assert proc.stdout is not None
                for line in proc.stdout:
                    lf.write(line)
                    if line.strip() and not line.startswith("==PROF== Profiling"):
                        self.echo(f"  {line.rstrip()[:200]}")
                proc.wait()
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


def _place(tmp: Path, dest: Path) -> None:
    """Move a complete capture into place; the previous one is removed only after the move."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if dest.exists():
        old = dest.parent / f".old-{dest.name}-{os.getpid()}"
        os.replace(dest, old)
    try:
        os.replace(tmp, dest)
    except OSError:
        if old is not None:
            os.replace(old, dest)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def capture(suite: str, profiles: str | os.PathLike = "profiles", *, ncu: str | None = None, nsys: str | None = None,
            python: str = sys.executable, clock_control: str = "none", only: str | None = None,
            nsys_iters: int = 5, replay_mode: str | None = None, ceilings_from: Path | None = None,
            echo: Callable[[str], None] = print) -> Path:
    """Capture one suite (see flash_kernels.configs.CAPTURE_SUITES) and return its folder.
    ``replay_mode`` None: the suite's own (CaptureSuite.replay_mode). ``ceilings_from``: an earlier
    capture of the same command on the same GPU whose measured ceilings this one reuses."""
    from flash_kernels.configs import get_capture_suite

    spec = get_capture_suite(suite)
    replay_mode = replay_mode or spec.replay_mode
    profiles = Path(profiles).resolve()
    tools: dict[str, Path] = {}
    if "ncu" in spec.tools:
        tools["ncu"] = find_ncu(ncu)
    if "nsys" in spec.tools:
        tools["nsys"] = find_nsys(nsys)
        check_nsys_importer(tools["nsys"])
    profiles.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    tmp = profiles / f".tmp-{suite}-{stamp}-{os.getpid()}"
    tmp.mkdir()
    run = _Runner(tmp, echo)
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("FK_GIT_COMMIT", git_commit())  # the node's copy of the tree may have no .git
    try:
        t = time.perf_counter()
        if ceilings_from is not None:
            for name in ("ceilings.json", "ceilings.log"):
                shutil.copyfile(Path(ceilings_from) / name, tmp / name)
            echo(f"[ceilings] reused from {ceilings_from} (measured earlier in this command)")
        else:
            run("ceilings", [python, "-m", "flash_kernels.ceilings", "--out", str(tmp / "ceilings.json")],
                log="ceilings.log", env=env)
        timings["ceilings"] = time.perf_counter() - t
        measured = json.loads((tmp / "ceilings.json").read_text())
        environment = measured["environment"]
        gpu = environment.get("gpu", {})
        dest = profiles / gpu_slug(gpu.get("name", "unknown")) / suite
        ncu_info: dict[str, Any] = {}
        if "ncu" in tools:
            t = time.perf_counter()
            # under application replay the patched pass would run our kernels' warm-ups patched too; their
            # counters do not need one (ncu flushes the caches before each profiled kernel)
            wl = workload_command(suite, python=python, iters=1, warmup=1, only=only, log=tmp / "cases_ncu.jsonl",
                                  warmup_refs_only=replay_mode == "application")
            text = run("ncu", ncu_command(tools["ncu"], wl, tmp / "ncu", clock_control=clock_control,
                                          replay_mode=replay_mode),
                       log="ncu.log", env=env, check=check_ncu_output)
            timings["ncu"] = time.perf_counter() - t
            t = time.perf_counter()
            run("ncu-raw-csv", ncu_raw_csv_command(tools["ncu"], tmp / "ncu.ncu-rep"), log="ncu_raw_csv.log",
                stdout_to="ncu_raw.csv", env=env)
            timings["ncu_raw_csv"] = time.perf_counter() - t
            passes = passes_per_kernel(text)
            ncu_info = {"version": tool_version(tools["ncu"]), "path": str(tools["ncu"]), "metrics": M.metric_names(),
                        "clock_control": clock_control, "nvtx_include": NCU_NVTX_INCLUDE, "replay_mode": replay_mode,
                        "kernels_profiled": kernels_profiled(text),
                        "passes_per_kernel": passes,
                        "max_passes_per_kernel": max(passes.values(), default=0)}
        nsys_info: dict[str, Any] = {}
        if "nsys" in tools:
            t = time.perf_counter()
            wl = workload_command(suite, python=python, iters=nsys_iters, warmup=1, only=only,
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
        if "bench" in spec.tools:
            t = time.perf_counter()
            run("bench", [python, "-m", "flash_kernels.bench", "--suite", ",".join(spec.bench_suites), "--out", str(tmp),
                          *spec.bench_args], log="bench.log", env=env)
            timings["bench"] = time.perf_counter() - t
        timings["total"] = time.perf_counter() - t_start
        manifest = {
            "schema": SCHEMA, "suite": suite, "description": spec.description, "created": stamp,
            "gpu": gpu, "environment": environment, "git_commit": environment.get("git_commit"),
            "ncu": ncu_info, "nsys": nsys_info, "ceilings": measured["ceilings"],
            "ceilings_measured_by": (f"an earlier capture of the same command ({Path(ceilings_from).name})"
                                     if ceilings_from is not None else "this capture"),
            "parameters": {"only": only, "tools": list(spec.tools), "bench_suites": list(spec.bench_suites),
                           "bench_args": list(spec.bench_args),
                           "cases": [c.range_name() for c in spec.cases],
                           "skipped": [{"range": c.range_name(), "reason": why} for c, why in spec.skipped]},
            "commands": run.commands, "timings_seconds": {k: round(v, 2) for k, v in timings.items()},
            "files": file_table(tmp),
        }
        with open(tmp / "manifest.json", "w") as fh:
            json.dump(manifest, fh, indent=2, default=str)
        compact(tmp)  # gzip the large exports; the manifest then lists the .gz files
        _place(tmp, dest)
    except BaseException as exc:
        failed = profiles / f".failed-{suite}-{stamp}"
        with open(tmp / "FAILED.txt", "w") as fh:
            fh.write(f"{type(exc).__name__}: {exc}\n")
        os.replace(tmp, failed)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise CaptureError(f"capture of suite {suite!r} failed: {exc}. The previous capture (if any) is untouched; "
                           f"partial output and logs are in {failed}") from exc
    echo(f"captured {suite} into {dest} in {timings['total']:.0f} s")
    return dest


def main(argv: list[str] | None = None) -> int:
    from flash_kernels.configs import CAPTURE_SUITES

    p = argparse.ArgumentParser(prog="python -m nsightlab.capture", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", required=True, help=f"comma-separated, from {', '.join(CAPTURE_SUITES)}")
    p.add_argument("--profiles", default="profiles", help="profile store root (default: profiles)")
    p.add_argument("--only", help="only cases whose NVTX range name matches this regex")
    p.add_argument("--ncu", help="path to ncu (else $NCU, PATH, standard folders)")
    p.add_argument("--nsys", help="path to nsys (else $NSYS, PATH, standard folders, Nsight Compute's copy)")
    p.add_argument("--clock-control", default="none", choices=("none", "base"),
                   help="ncu --clock-control (default none: the GPU's clocks are left as they are)")
    p.add_argument("--nsys-iters", type=int, default=5)
    p.add_argument("--replay-mode", default=None, choices=("kernel", "application"),
                   help="ncu replay: rerun the whole (deterministic) workload per counter pass, or replay each "
                        "kernel; default: the suite's own (seqlen application, blocksize kernel)")
    a = p.parse_args(argv)
    suites = [s for s in a.suite.split(",") if s]
    unknown = [s for s in suites if s not in CAPTURE_SUITES]
    if unknown:
        p.error(f"unknown suite(s) {unknown}; known: {', '.join(CAPTURE_SUITES)}")
    t0 = time.perf_counter()
    status = 0
    first: Path | None = None  # the GEMM and copy ceilings are measured once per command
    for s in suites:
        t = time.perf_counter()
        try:
            dest = capture(s, a.profiles, ncu=a.ncu, nsys=a.nsys, clock_control=a.clock_control, only=a.only,
                           nsys_iters=a.nsys_iters, replay_mode=a.replay_mode, ceilings_from=first)
            first = first or dest
        except (ToolError, CaptureError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 1
        print(f"suite {s}: {time.perf_counter() - t:.0f} s", file=sys.stderr)
    print(f"all suites ({','.join(suites)}): {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
