#!/usr/bin/env bash
# The GPU work of this project in one call, on any Linux machine with a CUDA GPU (a lent node that keeps
# nothing between calls included): build the kernels, run the GPU tests and compute-sanitizer, benchmark,
# capture, and write logs and results under $OUT. Run it from the repository root; `make gpu-node` is the same.
#   STEPS="build test" bash scripts/gpu_node.sh                 # the GPU test suite (tests/gpu, examples)
#   STEPS="build test sanitize bench capture" bash scripts/gpu_node.sh
#   (each step also alone: info build test sanitize bench capture cluster example gemm foreign hang ab probe passes
#   full live report-scaling; cluster: scripts/cluster_bench.py, --gpus all against --gpus 0, CLUSTER_N the lengths;
#   CLUSTER_MODE=fixed: one shard's fixed and per-case cost on one GPU, CLUSTER_REPLAY its replay mode;
#   CLUSTER_MODE=fault: on one GPU, two workers: one killed mid-sweep, an interrupted capture resumed)
# Settings (environment):
#   OUT (/tmp/fk_out)              where logs, CSVs and captures (one tarball each, split in 15 MiB parts) go
#   CUDA_HOME (/usr/local/cuda)    its bin/ is put first on PATH (nvcc, compute-sanitizer)
#   NSIGHTLAB_GIT_COMMIT           the commit the manifests record, where the machine's .git is absent or stale
#   TEST_PATHS, PYTEST_ARGS (-x)   which GPU tests, and pytest's arguments (shell-quoted)
#   FK_SANITIZE_VARIANTS           the variants compute-sanitizer checks (tests/gpu/test_sanitizer.py)
#   BENCH_SUITES, BENCH_ARGS       python -m flash_kernels.bench --suite ... (convention,d128,mixed)
#   CAPTURE_SUITES, CAPTURE_ARGS   python -m nsightlab.capture --suite ... (seqlen,blocksize,bench)
#   GEMM_SWEEP                     STEPS=gemm: the GEMM example's sweep (examples/gemm/sweep.toml)
#   HANG_ARGS                      STEPS=hang: the Nsight Compute sections a case stalls under (nsightlab.run.hang)
#   AB_CMD, AB_ROUNDS, AB_MODULES  STEPS=ab: the working tree against .ab/base (made by `make ab-base`)
#   REPORT_JOBS, REPORT_CAPTURES   STEPS=report-scaling: --jobs 1 against REPORT_JOBS (4), over these captures (all)
#   BUILD_PTXAS=0                  the build step skips ptxas.json (every .cu compiled again for its report)
#   DEADLINE_S (590), DEADLINE_EPOCH, DEADLINE_MARGIN_S (60): test, bench, capture and ab stop (SIGINT) the margin
#     before the deadline, so that what they have is kept, for machines that kill a call after a fixed time;
#     DEADLINE_S=0: no deadline. A command that chains several runs exports DEADLINE_EPOCH once.
# .carry/site-report.txz (the report packages and ncu-report unpacked, xz-compressed to fit beside the tree), wheels in .whl/ and Debian packages in .deb/ (libdw1, libelf1 for Nsight Systems' importer), where present, are
# installed under /tmp first, for machines without network access.
set -uo pipefail
OUT=${OUT:-/tmp/fk_out}
STEPS=${STEPS:-"build test sanitize bench"}
BENCH_SUITES=${BENCH_SUITES:-"convention,d128,mixed"}
BENCH_ARGS=${BENCH_ARGS:-}
PYTEST_ARGS=${PYTEST_ARGS:--x}  # shell-quoted: PYTEST_ARGS='-x -k "not wgmma"' keeps the expression whole
eval "pytest_args=($PYTEST_ARGS)" || { echo "PYTEST_ARGS is not valid shell words: $PYTEST_ARGS"; exit 2; }
mkdir -p "$OUT"
export OUT
export PYTHONUNBUFFERED=1
export FLASH_KERNELS_BUILD_DIR=${FLASH_KERNELS_BUILD_DIR:-$PWD/build/fk}  # git-ignored: kept between calls on a warm node
export PATH=${CUDA_HOME:-/usr/local/cuda}/bin:$PATH
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export NSIGHTLAB_PLUGINS=${NSIGHTLAB_PLUGINS:-flash_kernels.study}  # no pip install here, so no entry points
if [ -f .carry/site-report.txz ]; then  # the report's packages unpacked ahead (ncu-report included), xz: fits a carry
  mkdir -p /tmp/site && tar xJf .carry/site-report.txz -C /tmp/site \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site JUPYTER_PATH=/tmp/site/share/jupyter || { echo "site unpack failed"; exit 1; }
fi
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site JUPYTER_PATH=/tmp/site/share/jupyter || { echo "wheel install failed"; exit 1; }
fi
if compgen -G ".deb/*.deb" >/dev/null; then  # libdw1/libelf1: Nsight Systems' importer needs them and the node lacks them
  mkdir -p /tmp/debs && for d in .deb/*.deb; do dpkg -x "$d" /tmp/debs; done
  export LD_LIBRARY_PATH=/tmp/debs/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
CAPTURE_SUITES=${CAPTURE_SUITES:-"seqlen,blocksize,bench"}
export NSIGHTLAB_GIT_COMMIT=${NSIGHTLAB_GIT_COMMIT:-${FK_GIT_COMMIT:-}}
[ -n "$NSIGHTLAB_GIT_COMMIT" ] || unset NSIGHTLAB_GIT_COMMIT
CAPTURE_ARGS=${CAPTURE_ARGS:-}
DEADLINE_S=${DEADLINE_S:-590}
[ "$DEADLINE_S" = 0 ] && DEADLINE_S=$(( 10 * 365 * 86400 ))  # no deadline
DEADLINE_EPOCH=${DEADLINE_EPOCH:-$(( $(date +%s) + DEADLINE_S ))}
DEADLINE_MARGIN_S=${DEADLINE_MARGIN_S:-60}
export DEADLINE_EPOCH
status=0
# run "$@" until DEADLINE_MARGIN_S before the deadline (or LIMIT seconds, if given first as --limit LIMIT, when
# that is sooner), then SIGINT (SIGKILL 40 s later: a capture waits up to 30 s for its profiler to stop): a capture
# keeps its partial output, pytest prints its summary. Its own messages go to the console (fd 3), past any filter.
exec 3>&2
time_left() { echo $(( DEADLINE_EPOCH - $(date +%s) - DEADLINE_MARGIN_S )); }  # seconds a step may still run
until_deadline() {
  local limit=0
  if [ "$1" = --limit ]; then limit=$2; shift 2; fi
  local t; t=$(time_left)
  if [ "$limit" -gt 0 ] && [ "$limit" -lt "$t" ]; then t=$limit; fi
  if [ "$t" -le 0 ]; then echo "not started: the device call's deadline is less than $DEADLINE_MARGIN_S s away" >&3; return 124; fi
  timeout --signal=INT --kill-after=40 "$t" "$@"
  local rc=$?
  [ "$rc" = 124 ] && echo "stopped after $t s (SIGINT): the device call's deadline or the step's limit" >&3
  return $rc
}
ship() {  # files back from $OUT: at most 8, 16 MiB each: one tarball per capture (or interrupted one), split
  for d in "$OUT"/profiles/*/*/ "$OUT"/profiles/.failed-*/ "$OUT"/profiles/.tmp-*/; do
    [ -d "$d" ] || continue; d=${d%/}; name=$(basename "$d"); name=${name#.}; rel=${d#"$OUT"/}
    (cd "$OUT" && tar czf "$name.tgz" "$rel" && split -b 15m -d "$name.tgz" "$name.tgz." && rm -f "$name.tgz")
  done
  [ -d "$OUT/profiles" ] && find "$OUT/profiles" -mindepth 1 -maxdepth 1 -exec rm -rf {} +; ls -la "$OUT"
}
step() { echo "=== $1 ($(date +%T))"; }
for s in $STEPS; do
  case $s in
    info)
      step info
      nvidia-smi | tee "$OUT/nvidia-smi.txt"
      python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())" ;;
    build)
      step build
      python3 - <<'PY' 2>&1 | tee "$OUT/build.log"
import json, os, time
t = time.perf_counter()
import flash_kernels as fk
secs = fk.build()
print("cold build of all modules (parallel):", round(time.perf_counter() - t, 1), "s", secs)
import importlib, subprocess, sys
t = time.perf_counter()
subprocess.run([sys.executable, "-c", "import flash_kernels as fk; fk.build()"], check=True)
print("warm import+load in a fresh process:", round(time.perf_counter() - t, 2), "s (includes torch import)")
# ptxas's report per kernel (every .cu compiled again, in parallel): BUILD_PTXAS=0 skips it
t = time.perf_counter()
rows = fk.resource_usage() if os.environ.get("BUILD_PTXAS", "1") != "0" else []
if rows:
    json.dump(rows, open(os.environ["OUT"] + "/ptxas.json", "w"), indent=1)
    print("ptxas reports of every kernel:", round(time.perf_counter() - t, 1), "s")
for r in rows:
    if "flash_mma" in r["kernel"]:
        print(f'{r["kernel"]:60s} regs {r["registers"]:3d} smem {r["shared_bytes"]:6d} spills {r["spill_store_bytes"]}/{r["spill_load_bytes"]}')
PY
      [ "${PIPESTATUS[0]}" = 0 ] || { status=1; echo "BUILD FAILED"; break; } ;;
    test)
      step test
      until_deadline python3 -m pytest ${TEST_PATHS:-tests/gpu examples} -q -p no:cacheprovider --ignore=tests/gpu/test_sanitizer.py "${pytest_args[@]}" 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    sanitize)
      step sanitize
      python3 -m pytest tests/gpu/test_sanitizer.py -q -p no:cacheprovider 2>&1 | tee "$OUT/sanitizer.log" | tail -20
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    hang)
      # which Nsight Compute sections a case stalls under (nsightlab.run.hang), e.g.
      # HANG_ARGS="--sweep pipeline --only 'D=128,dtype=float16,causal=0,.*pipeline=tma-ws-persistent,tail=none,'"
      step hang
      eval "hang_args=(${HANG_ARGS:-})" || { echo "HANG_ARGS is not valid shell words"; status=1; continue; }
      python3 -m nsightlab.hang --out "$OUT/hang" "${hang_args[@]}" 2>&1 | tee "$OUT/hang.log" | tail -40
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    ab)
      # the working tree against .ab/base (`make ab-base REF=... FILES="..."`: some files as at another commit):
      # AB_CMD run in each tree in turn, AB_ROUNDS (2) times, each tree with its own kernel build folder
      step ab
      [ -f .ab/base.ref ] && [ -n "${AB_CMD:-}" ] || { echo "ab: needs .ab/base (make ab-base REF=... FILES=\"...\"; carry .ab) and AB_CMD"; status=1; continue; }
      rm -rf /tmp/ab_base && mkdir -p /tmp/ab_base \
        && tar --exclude=./build --exclude=./.ab --exclude=./.git --exclude=./profiles -cf - . | tar -xf - -C /tmp/ab_base \
        && cp -r .ab/base/. /tmp/ab_base/ || { echo "ab: could not copy the tree to /tmp/ab_base"; status=1; continue; }
      echo "base: $(cat .ab/base.ref)" | tee "$OUT/ab.log"
      # both trees' kernels built first, side by side (AB_MODULES: only these modules, e.g. "flash_wgmma_fwd
      # flash_wgmma_bwd"), so that no timed round is cut short by a build of its own: AB_MODULES must hold every
      # module AB_CMD's variants load (a backward's forward module too), or a round builds it inside its time share
      ab_build="import sys, flash_kernels as fk; print(fk.build(modules=sys.argv[1:] or None))"
      python3 -c "$ab_build" ${AB_MODULES:-} > "$OUT/ab_build_tree.log" 2>&1 &
      tree_pid=$!
      base_path=/tmp/ab_base${PYTHONPATH#"$PWD"}  # the base tree's PYTHONPATH, for its build and its rounds
      (cd /tmp/ab_base && PYTHONPATH=$base_path FLASH_KERNELS_BUILD_DIR=/tmp/ab_base/build/fk \
        python3 -c "$ab_build" ${AB_MODULES:-}) > "$OUT/ab_build_base.log" 2>&1 &
      base_pid=$!
      wait $tree_pid && wait $base_pid || { echo "ab: a build failed (ab_build_*.log)"; tail -5 "$OUT"/ab_build_*.log; status=1; continue; }
      tail -n1 "$OUT"/ab_build_*.log
      rounds=${AB_ROUNDS:-2}
      # every run gets an equal share of the time left, so that a slow first run cannot starve the base side
      share=$(( $(time_left) / (2 * rounds) ))
      [ "$share" -gt 0 ] || share=1
      for r in $(seq "$rounds"); do
        echo "== tree, round $r" | tee -a "$OUT/ab.log"
        until_deadline --limit "$share" bash -c "$AB_CMD" 2>&1 | tee -a "$OUT/ab.log"
        [ "${PIPESTATUS[0]}" = 0 ] || { status=1; echo "ab: the tree round $r did not finish (ab.log has why)"; }
        echo "== base, round $r" | tee -a "$OUT/ab.log"
        (cd /tmp/ab_base && PYTHONPATH=$base_path FLASH_KERNELS_BUILD_DIR=/tmp/ab_base/build/fk \
          until_deadline --limit "$share" bash -c "$AB_CMD") 2>&1 | tee -a "$OUT/ab.log"
        [ "${PIPESTATUS[0]}" = 0 ] || { status=1; echo "ab: the base round $r did not finish (ab.log has why)"; }
      done ;;
    bench)
      step bench
      until_deadline python3 -m flash_kernels.bench --suite "$BENCH_SUITES" --out "$OUT/bench" $BENCH_ARGS 2>&1 | tee "$OUT/bench.log" | grep -E "flash_mma|sdpa_flash|wrote|Error|error" | tail -80
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    probe)
      step probe
      NC=$(ls -d /opt/nvidia/nsight-compute/*/ | sort -V | tail -1)
      for f in "$NC"sections/SpeedOfLight_Hierarchical*RooflineChart.section; do cp "$f" "$OUT/probe_$(basename "$f")"; done
      ncu --query-metrics --chip gh100 > "$OUT/probe_query_metrics.txt" 2>&1
      python3 - <<'PY' 2>&1 | tee "$OUT/probe_metrics.log"
import re
from nsightlab.core.metrics import metric_names
import os
text = open(os.environ["OUT"] + "/probe_query_metrics.txt").read()
bases = set(re.findall(r"^(\S+)", text, re.M))
for m in metric_names():
    base = m.split(".")[0]
    print(("ok   " if base in bases else "MISSING ") + m)
PY
      ls -la "$OUT" ;;
    passes)
      # which metric groups cost ncu replay passes: the full list, then the list without each group
      step passes
      python3 - <<'PY' 2>&1 | tee "$OUT/passes.log"
import subprocess, sys, time
from nsightlab.core import metrics
from nsightlab.run.capture import ncu_command, passes_per_kernel, workload_command
from nsightlab.core.tools import find_ncu
full = metrics.metric_names()
drop = {"none": [], "clocks": list(metrics.CLOCKS.values()), "work": list(metrics.WORK.values()),
        **{m: [m] for m in (*metrics.WORK.values(), *metrics.TRAFFIC.values(), metrics.LAUNCH["duration"],
                            metrics.LAUNCH["occupancy"])}}
wl = workload_command(python=sys.executable, warmup=0, extra=["--variant", "flash_mma", "--pass", "forward", "-N", "1024",
                                                              "-D", "64"])
for name, gone in drop.items():
    cmd = ncu_command(find_ncu(), wl, "/tmp/passes_probe", metrics=[m for m in full if m not in gone],
                      kernel_regex="flash_mma", extra=["--launch-count", "1"])
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    p = passes_per_kernel(out)
    print(f"without {name:60s} passes {max(p.values()) if p else '?'}  {time.perf_counter() - t:5.1f} s", flush=True)
PY
      ;;
    full)
      # one kernel with Nsight Compute's full section set and the CUDA source, for the GUI
      # (FULL_VARIANT, FULL_PASS: flash_mma backward by default; the seqlen case N=4096, D=128; FULL_KERNEL: a regex)
      step full
      python3 - <<'PY' 2>&1 | tee "$OUT/full.log"
import os, subprocess, sys, time
from nsightlab.run.capture import ncu_command, workload_command
from nsightlab.core.tools import find_ncu
variant, pass_ = os.environ.get("FULL_VARIANT", "flash_mma"), os.environ.get("FULL_PASS", "backward")
# the seqlen sweep's case at N=4096, D=128, not causal (B=1, H=8), its default options
wl = workload_command("seqlen", python=sys.executable, warmup=1,
                      only=f"^fk:{variant}:{pass_}:B=1,H=8,N=4096,D=128,dtype=float16,causal=0,")
cmd = ncu_command(find_ncu(), wl, os.environ["OUT"] + f"/{variant}_{pass_[:3]}_d128_full", section_set="full",
                  nvtx_include=f"regex:^fk:{variant}:{pass_}:.*/",
                  kernel_regex=os.environ.get("FULL_KERNEL", f"{variant}.*{pass_}|{pass_}.*{variant}"),
                  extra=["--import-source", "yes"])
print(" ".join(cmd), flush=True)
t = time.perf_counter()
rc = subprocess.run(cmd).returncode
print(f"rc {rc}, {time.perf_counter() - t:.0f} s", flush=True)
PY
      ;;
    capture)
      # one command for all the sweeps (the GEMM/copy ceilings are measured once), then ship each
      step capture
      t0=$(date +%s)
      eval "capture_args=(${CAPTURE_ARGS:-})" || { echo "CAPTURE_ARGS is not valid shell words"; status=1; continue; }
      until_deadline --limit "${CAPTURE_TIMEOUT:-3000}" python3 -m nsightlab.capture --suite "$CAPTURE_SUITES" --profiles "$OUT/profiles" "${capture_args[@]}" 2>&1 | tee -a "$OUT/capture.log"
      [ "${PIPESTATUS[0]}" = 0 ] || status=1
      echo "capture wall time: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/capture.log"
      ship ;;
    cluster)
      # issue 52: one light-tier sweep with --gpus all, then --gpus 0 (scripts/cluster_bench.py: both wall times, the
      # counted metrics compared case by case); the captures stay here, their manifests and logs come back
      step cluster
      python3 scripts/cluster_bench.py 2>&1 | tee "$OUT/cluster_step.log"
      [ "${PIPESTATUS[0]}" = 0 ] || status=1
      for m in "$OUT"/cluster_profiles/*/*/manifest.json; do
        [ -f "$m" ] && cp "$m" "$OUT/$(basename "$(dirname "$m")").manifest.json"
      done
      rm -rf "$OUT/cluster_profiles" "$OUT/cluster_step.log" ;;
    example)
      # the Triton example, plugged in only through the public path, beside flash_mma and SDPA flash
      step example
      t0=$(date +%s)
      # EXAMPLE_MODULE/EXAMPLE_NAME: another version of the kernel (e.g. an earlier one, named by what it does), for a comparison
      python3 -m nsightlab.capture --impl triton_fa2=examples.triton_attention.${EXAMPLE_MODULE:-triton_attention}:attention \
        --impl flash_mma --impl sdpa_flash -B 4 -H 16 -N 1024,4096 -D ${EXAMPLE_D:-128} --causal both \
        --pass forward,backward --name ${EXAMPLE_NAME:-triton-example} \
        --description "${EXAMPLE_DESCRIPTION:-a FlashAttention-2-style kernel in Triton (examples/triton_attention), beside flash_mma and SDPA flash}" \
        --profiles "$OUT/profiles" 2>&1 | tee -a "$OUT/example.log"
      [ "${PIPESTATUS[0]}" = 0 ] || status=1
      echo "example capture wall time: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/example.log"
      ship ;;
    gemm)
      # a kernel that is not attention: a custom problem with its own inputs and work model (GEMM_SWEEP: which
      # sweep; examples/gemm/triton.toml puts a user's Triton GEMM beside cuBLAS, with the deep tier)
      step gemm
      python3 -m nsightlab.capture --sweep ${GEMM_SWEEP:-examples/gemm/sweep.toml} --profiles "$OUT/profiles" 2>&1 | tee -a "$OUT/gemm.log"
      [ "${PIPESTATUS[0]}" = 0 ] || status=1
      ship ;;
    foreign)
      # a workload this project did not write, captured the way a colleague would (Nsight Compute's
      # roofline sections; Nsight Systems), with Nsight's own CSV exports beside it: test data
      step foreign
      mkdir -p "$OUT/foreign"
      python3 - <<'PY' 2>&1 | tee "$OUT/foreign.log"
import os, subprocess, sys
from nsightlab.core.tools import find_ncu, find_nsys
out = os.environ["OUT"] + "/foreign"
ncu, nsys = str(find_ncu()), str(find_nsys())
wl = [sys.executable, "scripts/foreign_workload.py"]
secs = ["SpeedOfLight", "SpeedOfLight_HierarchicalSingleRooflineChart", "SpeedOfLight_HierarchicalHalfRooflineChart",
        "SpeedOfLight_HierarchicalTensorRooflineChart", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis"]
cmd = [ncu, "--nvtx", "--clock-control", "none", *[x for s in secs for x in ("--section", s)], "-o", out + "/foreign",
       "--force-overwrite", *wl]
print(" ".join(cmd), flush=True); subprocess.run(cmd, check=True)
with open(out + "/foreign_raw.csv", "w") as fh:
    subprocess.run([ncu, "--import", out + "/foreign.ncu-rep", "--csv", "--page", "raw"], stdout=fh, check=True)
cmd = [nsys, "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true", "-o",
       out + "/foreign", *wl]
print(" ".join(cmd), flush=True); subprocess.run(cmd, check=True)
subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite=true", "-o", out + "/foreign.sqlite",
                out + "/foreign.nsys-rep"], check=True)
subprocess.run([nsys, "stats", "--report", "cuda_gpu_kern_sum,nvtx_sum", "--format", "csv", "--force-export=false",
                "--output", out + "/foreign_stats", out + "/foreign.sqlite"], check=True)
PY
      [ "${PIPESTATUS[0]}" = 0 ] || status=1
      (cd "$OUT" && tar czf foreign.tgz foreign && rm -rf foreign) ;;
    live)
      # a notebook in live mode, end to end through papermill: capture on this GPU, then analyse
      step live
      python3 - <<'PY' 2>&1 | tee "$OUT/live.log"
import os, time
from pathlib import Path
from nsightlab.render.execute import render_notebook
t = time.perf_counter()
out = Path(os.environ["OUT"]) / "live_roofline.html"
render_notebook(Path("notebooks/roofline.ipynb"), {"mode": "live", "suite": "seqlen", "only": os.environ.get("LIVE_ONLY", "N=(1024|4096),D=64,"),
                "live_profiles": "/tmp/profiles_live", "capture": ""}, out)
print(f"live roofline notebook: {time.perf_counter() - t:.0f} s -> {out}")
PY
      [ "${PIPESTATUS[0]}" = 0 ] || status=1
      cp /tmp/profiles_live/*/seqlen/manifest.json "$OUT/live_manifest.json" 2>/dev/null ;;
    report-scaling)
      # issue 52: `nsightlab report` with --jobs 1 against --jobs REPORT_JOBS on this host's cores (no GPU used),
      # every file compared (scripts/report_scaling.py); REPORT_CAPTURES (gpu/capture ...) renders only those
      step report-scaling
      prof=profiles
      if [ -n "${REPORT_CAPTURES:-}" ]; then
        prof=/tmp/report_profiles; rm -rf "$prof"
        for c in $REPORT_CAPTURES; do mkdir -p "$prof/$(dirname "$c")" && cp -r "profiles/$c" "$prof/$c"; done
      fi
      until_deadline python3 scripts/report_scaling.py --profiles "$prof" --jobs 1 ${REPORT_JOBS:-4} \
        --out "$OUT/report_scaling.json" 2>&1 | tee "$OUT/report_scaling.log"
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    *) echo "unknown step $s"; status=2 ;;
  esac
done
echo "=== done ($(date +%T)) status=$status"
exit $status
