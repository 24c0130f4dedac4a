"""Deep-tier probe on the GPU node: one small deep capture of the kernels the bottleneck page explains first,
and Nsight Compute's own CSV exports of it and of the committed --set full reports (the tests' oracle).

    python3 scripts/deep_probe.py OUTDIR        (on a machine with ncu and a CUDA GPU)

Writes OUTDIR/deep.ncu-rep, OUTDIR/<report>.{details,raw,source-<k>}.csv and OUTDIR/probe.log.
"""

from __future__ import annotations

import lzma
import shutil
import subprocess
import sys
import time
from pathlib import Path

from nsightlab.core.tools import find_ncu
from nsightlab.problems.impls import load_plugins
from nsightlab.run.capture import workload_command
from nsightlab.run.sweep import from_args

SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis", "MemoryWorkloadAnalysis_Tables",
            "MemoryWorkloadAnalysis_Chart", "Occupancy", "LaunchStats", "SchedulerStats", "WarpStateStats",
            "InstructionStats", "SourceCounters")


def run(cmd: list[str], out: Path | None = None) -> int:
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if out is not None:
        out.write_text(p.stdout)
    print(f"[{time.perf_counter() - t:6.1f} s rc={p.returncode}] {' '.join(cmd)[:300]}", flush=True)
    if p.returncode:
        print(p.stderr[-2000:], flush=True)
    return p.returncode


def exports(ncu: str, rep: Path, out: Path) -> None:
    base = [ncu, "--import", str(rep), "--csv"]
    run([*base, "--page", "details", "--print-units", "base", "--print-metric-name", "name"], out / f"{rep.stem}.details.csv")
    run([*base, "--page", "details", "--print-units", "base", "--print-details", "all"], out / f"{rep.stem}.details-all.csv")
    run([*base, "--page", "raw", "--print-units", "base"], out / f"{rep.stem}.raw.csv")
    run([*base, "--page", "source", "--print-source", "sass"], out / f"{rep.stem}.source-sass.csv")
    run([*base, "--page", "source", "--print-source", "cuda,sass"], out / f"{rep.stem}.source-cuda-sass.csv")


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    load_plugins()  # NSIGHTLAB_PLUGINS=flash_kernels.study on the node (no pip install there)
    ncu = str(find_ncu())
    run([ncu, "--help"], out / "ncu_help.txt")
    # Nsight's own exports of the committed --set full reports
    for cap in () if "--no-committed" in sys.argv else ("flash-mma-bwd-8warp-full", "flash-wgmma-fwd-full"):
        src = Path("profiles/nvidia-h200") / cap / "ncu.ncu-rep.xz"
        rep = out / f"{cap}.ncu-rep"
        with lzma.open(src) as f, rep.open("wb") as g:
            shutil.copyfileobj(f, g)
        exports(ncu, rep, out)
        rep.unlink()
    # a small deep capture: the two questions the bottleneck page answers first
    sweeps = [from_args("deep-probe-fwd", ["flash_mma", "sdpa_flash"], {"B": [4], "H": [16], "N": [4096], "D": [128]},
                        ["forward"], {}, ["ncu"]),
              from_args("deep-probe-bwd", ["flash_wgmma", "sdpa_cudnn"], {"B": [4], "H": [16], "N": [4096], "D": [128]},
                        ["backward"], {}, ["ncu"])]
    for sw in sweeps:
        toml = out / f"{sw.name}.toml"
        toml.write_text(sw.to_toml())
        wl = workload_command(toml, python=sys.executable, iters=1, warmup=1)
        cmd = [ncu, "--nvtx", "--nvtx-include", "regex:^attn:.*/", "--clock-control", "none", "--cache-control", "all",
               "--replay-mode", "kernel", "--target-processes", "all", "--import-source", "yes"]
        for s in SECTIONS:
            cmd += ["--section", s]
        rep = out / f"{sw.name}.ncu-rep"
        t = time.perf_counter()
        run([*cmd, "--export", str(rep), "--force-overwrite", *wl], out / f"{sw.name}.ncu.log")
        print(f"deep {sw.name}: {time.perf_counter() - t:.1f} s, {rep.stat().st_size if rep.exists() else 0} bytes", flush=True)
        if rep.exists():
            exports(ncu, rep, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
