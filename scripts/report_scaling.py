"""How `make report` scales with its workers: the same profiles rendered from scratch with ``--jobs 1`` and with
``--jobs N``, each into a fresh folder, timed, and every file of the two compared byte for byte.

    python scripts/report_scaling.py --out report_scaling.json            # --jobs 1 against --jobs 4
    python scripts/report_scaling.py --jobs 1 2 4 --profiles profiles --out scaling.json

Any machine with the report's packages (``make report``'s environment, Nsight Compute's ``ncu_report`` for the
pages that read ``.ncu-rep`` files) and at least as many cores as the largest --jobs: no GPU is needed. The JSON
holds the machine (cores, CPU model), the versions, each run's wall time, pages written and failed (the report's
FAILED lines), the speedups against the first --jobs value, and the files that differ (none is the claim:
pages are deterministic whatever --jobs is). Exit status 0 when every run finished and no file differs.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def tree_diff(a: Path, b: Path) -> list[str]:
    """Relative paths that are in one tree and not the other, or whose bytes differ (sorted)."""
    fa = {p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file()}
    fb = {p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file()}
    out = sorted(fa ^ fb)
    out += sorted(r for r in fa & fb if not filecmp.cmp(a / r, b / r, shallow=False))
    return sorted(out)


def page_counts(reports: Path, log: str) -> dict[str, int]:
    """Pages written (``*.html`` but the index) and pages that failed (the report's ``FAILED`` lines)."""
    html = [p for p in reports.rglob("*.html") if p.name != "index.html"]
    return {"pages": len(html), "failed": sum("FAILED" in line for line in log.splitlines())}


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "")
    except OSError:
        pass
    return {"cores": os.cpu_count(), "cpu": cpu, "python": platform.python_version(), "platform": platform.platform()}


def render(profiles: Path, reports: Path, jobs: int, extra: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "nsightlab", "report", "--profiles", str(profiles), "--reports", str(reports),
           "--jobs", str(jobs), "--force", *extra]
    # each run from a cold cache of its own: a cache the previous run filled would time parsing once, not twice
    cache = Path(tempfile.mkdtemp(prefix="report-scaling-cache-"))
    try:
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "NSIGHTLAB_CACHE": str(cache)})
        seconds = time.perf_counter() - t0
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    log = proc.stdout + proc.stderr
    return {"jobs": jobs, "seconds": round(seconds, 2), "returncode": proc.returncode, "command": cmd,
            **page_counts(reports, log), "log_tail": log[-3000:]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--profiles", type=Path, default=ROOT / "profiles", help="the profiles folder to render")
    p.add_argument("--jobs", type=int, nargs="+", default=[1, 4], help="--jobs values, the first the baseline")
    p.add_argument("--out", type=Path, required=True, help="the results (.json); the rendered folders are removed")
    p.add_argument("--keep", type=Path, default=None, help="keep the rendered folders under this folder")
    p.add_argument("--only", default="", help="passed to nsightlab report --only (a subset of the notebooks)")
    a = p.parse_args(argv)
    if any(j < 1 for j in a.jobs) or len(a.jobs) < 2:
        p.error(f"--jobs takes two or more positive counts (the first is the baseline); got {a.jobs}")
    if not (a.profiles / "comparisons.toml").exists() and not any(a.profiles.glob("*/*/manifest.json")):
        p.error(f"{a.profiles} holds no captures (no <gpu>/<capture>/manifest.json)")
    cores = os.cpu_count() or 1
    if max(a.jobs) > cores:
        print(f"report_scaling: warning: --jobs {max(a.jobs)} on {cores} cores measures oversubscription",
              file=sys.stderr)
    extra = ["--only", a.only] if a.only else []
    work = Path(tempfile.mkdtemp(prefix="report-scaling-"))
    runs: list[dict[str, Any]] = []
    interrupted: str | None = None
    step = "starting"
    try:
        for j in a.jobs:
            step = f"the run of --jobs {j}"
            out = work / f"jobs{j}"
            print(f"report_scaling: --jobs {j} ...", flush=True)
            runs.append(render(a.profiles, out, j, extra))
            print(f"report_scaling: --jobs {j}: {runs[-1]['seconds']:.1f} s, {runs[-1]['pages']} pages, "
                  f"{runs[-1]['failed']} failed, rc {runs[-1]['returncode']}", flush=True)
            if len(runs) == 1:
                continue
            # each run against the baseline as soon as it is done: a deadline may stop the next
            step = f"the comparison of --jobs {j} with the baseline"
            base, r = runs[0], runs[-1]
            r["speedup"] = round(base["seconds"] / r["seconds"], 3) if r["seconds"] else None
            r["differs_from_baseline"] = tree_diff(work / f"jobs{base['jobs']}", work / f"jobs{r['jobs']}")
            print(f"report_scaling: --jobs {r['jobs']} against --jobs {base['jobs']}: {r['speedup']}x, "
                  f"{len(r['differs_from_baseline'])} files differ", flush=True)
        if a.keep is not None:
            step = "the copy of the rendered folders (--keep)"
            a.keep.mkdir(parents=True, exist_ok=True)
            for r in runs:
                shutil.copytree(work / f"jobs{r['jobs']}", a.keep / f"jobs{r['jobs']}", dirs_exist_ok=True)
    except KeyboardInterrupt:  # a deadline's SIGINT: the runs that finished are still written
        interrupted = f"stopped during {step}"
        print(f"report_scaling: interrupted after {len(runs)} run(s), {interrupted}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"machine": machine(), "profiles": str(a.profiles), "runs": runs,
              **({"interrupted": interrupted} if interrupted else {})}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.with_name(a.out.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(a.out)  # written whole, then moved into place
    ok = not interrupted and all(r["returncode"] == 0 for r in runs) and not any(r.get("differs_from_baseline") for r in runs[1:])
    print(f"report_scaling: wrote {a.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
