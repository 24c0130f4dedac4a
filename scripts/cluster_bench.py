"""The many-GPU benchmark of issue 52 (not a timed test): one light-tier sweep captured with ``--gpus all`` and with
``--gpus 0`` on the same node, both wall times, and the counted metrics compared case by case.

    OUT=/tmp/out python3 scripts/cluster_bench.py                 # what `STEPS="build cluster" scripts/gpu_node.sh` runs
    CLUSTER_N=1024,2048,4096,8192 python3 scripts/cluster_bench.py   # the 96-case sweep (too long for one 600 s call)
    CLUSTER_MODE=fixed python3 scripts/cluster_bench.py            # one GPU: a shard's fixed cost and per-case cost

The sweep: ``--impl flash_mma --impl sdpa_flash --impl sdpa_cudnn -B 2 -H 16 -N $CLUSTER_N -D 64,128 --causal both
--pass forward,backward --tools ncu`` (CLUSTER_N default 1024,2048,4096: 72 cases). ``--gpus all`` runs first (the
shorter), then ``--gpus 0`` (CLUSTER_GPUS_ONE), each under the time left (DEADLINE_EPOCH, as gpu_node.sh sets it).
Each capture's counters are read from Nsight Compute's own raw CSV exports (no ncu-report needed), summed per case
and kernel, and compared: the counted metrics (instructions, bytes, FLOP terms) exactly and as the largest relative
difference, the kernel times as the median ratio. Writes $OUT/cluster_bench.log and $OUT/cluster_bench.json.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OUT = Path(os.environ.get("OUT", "/tmp/fk_out"))
N = os.environ.get("CLUSTER_N", "1024,2048,4096")
GPUS_ALL, GPUS_ONE = os.environ.get("CLUSTER_GPUS_ALL", "all"), os.environ.get("CLUSTER_GPUS_ONE", "0")
SWEEP = ["--impl", "flash_mma", "--impl", "sdpa_flash", "--impl", "sdpa_cudnn", "-B", "2", "-H", "16", "-N", N,
         "-D", "64,128", "--causal", "both", "--pass", "forward,backward", "--tools", "ncu"]
#: counted metrics: the same work gives the same count on any GPU of the model (times and rates are not counts)
COUNTED = re.compile(r"(inst_executed|sass_thread_inst_executed_op|__bytes|_bytes\.sum|sectors)")
NOT_COUNTED = re.compile(r"(per_second|pct|ratio|per_cycle|peak|duration|cycles|clock|device__|launch__)")
#: of the counted metrics, those a run repeats exactly: the work's instruction counts, summed over the device (or
#: averaged over its units). Memory traffic (DRAM bytes, L2 sectors: what the caches held before) and a count's
#: spread over the units (.min, .max: which SM ran which block) differ from one run of the same capture to the next
#: (an uninterrupted capture against another on the same GPU shows it), so they are compared, not required equal
EXACT = re.compile(r"inst_executed")
SPREAD = re.compile(r"\.(min|max)$")
LOG = OUT / "cluster_bench.log"
#: CLUSTER_MODE=fixed: what one shard costs before its first case and per case, on one GPU with nothing else
#: running: the sweep's quarter (QUARTER: its D=128, not causal cases, 18 of the 72) and the whole sweep, each one
#: shard on --gpus 0 under CLUSTER_REPLAY (application: then the quarter under kernel replay too). A shard's ncu step is
#: fixed + cases x per-case cost, so two sizes give both; the quarter alone is what each of four shards would take
#: if four GPUs did not slow each other down
QUARTER = ["-D", "128", "--causal", "false"]


def say(line: str) -> None:
    print(line, flush=True)
    with open(LOG, "a") as fh:
        fh.write(line + "\n")


def time_left() -> float:
    deadline = float(os.environ.get("DEADLINE_EPOCH", time.time() + 3600))
    return deadline - time.time() - float(os.environ.get("DEADLINE_MARGIN_S", 30))


def sweep(*overrides: str) -> list[str]:
    """SWEEP with the options in ``overrides`` (flag, value pairs) put in place of its own."""
    out, flags = list(SWEEP), dict(zip(overrides[::2], overrides[1::2], strict=True))
    for flag, value in flags.items():
        if flag in out:
            out[out.index(flag) + 1] = value
        else:
            out += [flag, value]
    return out


def capture(name: str, gpus: str, args: list[str] | None = None) -> dict:
    profiles = OUT / "cluster_profiles"
    cmd = [sys.executable, "-m", "nsightlab.capture", *(args or SWEEP), "--name", name, "--gpus", gpus, "--profiles",
           str(profiles), "--replace"]
    limit = time_left()
    say(f"$ {' '.join(cmd)}   (time left: {limit:.0f} s)")
    if limit < 30:
        return {"name": name, "gpus": gpus, "status": "not started: no time left in this call"}
    t0 = time.perf_counter()
    with open(OUT / f"cluster_{name}.log", "w") as fh:
        try:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=limit, cwd=ROOT).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    wall = time.perf_counter() - t0
    out = {"name": name, "gpus": gpus, "returncode": rc, "wall_s": round(wall, 1)}
    found = sorted(profiles.glob(f"*/{name}/manifest.json"))
    if rc == 0 and found:
        man = json.loads(found[0].read_text())
        out.update(folder=str(found[0].parent), timings=man.get("timings_seconds"),
                   cases=len(man["cases"]), ok=sum(c["status"] == "ok" for c in man["cases"]),
                   gpus_used=[f"{g['index']} {g['uuid']}" for g in man.get("gpus", [])],
                   engine=(man.get("cluster") or {}).get("engine"),
                   shards=[{k: s[k] for k in ("index", "gpu", "seconds", "cost_estimate")}
                           for s in (man.get("cluster") or {}).get("shards", [])])
    say(f"{name}: --gpus {gpus}: exit {rc}, wall {wall:.1f} s" + (f", timings {out.get('timings')}" if "timings" in out else ""))
    for s in out.get("shards", []):
        say(f"  shard {s['index']} on GPU {s['gpu'].get('index')} ({s['gpu'].get('uuid')}): {s['seconds']} s, "
            f"estimated cost {s['cost_estimate']}")
    return out


def counters(folder: Path):
    import pandas as pd

    from nsightlab.parse.ncu import ncu_csv_frame

    files = sorted(p for p in folder.iterdir() if re.fullmatch(r"ncu_raw(-s\d+)?\.csv(\.xz|\.gz)?", p.name))
    frame = pd.concat([ncu_csv_frame(p) for p in files], ignore_index=True)
    frame.attrs = {}  # pandas deep-copies attrs on every column access
    dtypes = frame.dtypes
    cols = [c for c in frame.columns if COUNTED.search(c) and not NOT_COUNTED.search(c)
            and pd.api.types.is_numeric_dtype(dtypes[c])]
    keyed = frame.groupby(["range", "kernel_full"], dropna=False)
    return keyed[cols].sum(), keyed["gpu__time_duration.sum"].sum() if "gpu__time_duration.sum" in frame else None


def compare(a: dict, b: dict) -> dict:
    ca, ta = counters(Path(a["folder"]))
    cb, tb = counters(Path(b["folder"]))
    common = ca.index.intersection(cb.index)
    out = {"cases_kernels": [len(ca), len(cb), len(common)], "metrics": len(ca.columns)}
    diff = (ca.loc[common] - cb.loc[common]).abs()
    rel = diff / cb.loc[common].abs().where(cb.loc[common] != 0, 1)
    unequal = {c: int((diff[c] > 0).sum()) for c in diff.columns if (diff[c] > 0).any()}
    out["identical_metrics"] = len(diff.columns) - len(unequal)
    out["unequal"] = {c: {"rows": n, "max_rel": float(rel[c].max())} for c, n in sorted(unequal.items())}
    exact = [c for c in diff.columns if EXACT.search(c) and not SPREAD.search(c)]
    out["exact_metrics"] = exact
    out["exact_unequal"] = sorted(c for c in exact if c in unequal)
    if ta is not None and tb is not None:
        ratio = (ta.loc[common] / tb.loc[common]).dropna()
        out["time_ratio_all_over_one"] = {"median": float(ratio.median()), "p10": float(ratio.quantile(0.1)),
                                          "p90": float(ratio.quantile(0.9))}
    return out


def fixed_and_per_case(small: dict, large: dict) -> dict | None:
    """A shard's ncu step as fixed + cases x per case, from one shard of each size (the shard's own seconds)."""
    try:
        (a,), (b,) = small["shards"], large["shards"]
    except (KeyError, ValueError):
        return None
    n_a, n_b = small["cases"], large["cases"]
    per_case = (b["seconds"] - a["seconds"]) / (n_b - n_a)
    return {"fixed_s": round(a["seconds"] - n_a * per_case, 1), "per_case_s": round(per_case, 3),
            "cases": [n_a, n_b], "shard_s": [a["seconds"], b["seconds"]]}


def main_fixed() -> int:
    """CLUSTER_MODE=fixed (see QUARTER)."""
    OUT.mkdir(parents=True, exist_ok=True)
    LOG.write_text("")
    say(f"shard cost on one GPU: {' '.join(SWEEP)}; the quarter: {' '.join(QUARTER)}")
    gpu, replay = GPUS_ONE, os.environ.get("CLUSTER_REPLAY", "application")
    mode = ("--replay-mode", replay)
    runs = {"quarter": capture(f"shard-quarter-{replay}", gpu, sweep(*QUARTER, *mode)),
            "whole": capture(f"shard-whole-{replay}", gpu, sweep(*mode))}
    if replay == "application":
        runs["quarter_kernel_replay"] = capture("shard-quarter-kernel", gpu, sweep(*QUARTER, "--replay-mode", "kernel"))
    result: dict = {"sweep": SWEEP, "quarter": QUARTER, "replay_mode": replay, "runs": runs}
    fit = fixed_and_per_case(runs["quarter"], runs["whole"]) if all(
        r.get("returncode") == 0 for r in (runs["quarter"], runs["whole"])) else None
    if fit:
        result[f"{replay}_replay"] = fit
        say(f"{replay} replay, one shard on one GPU: {fit['shard_s'][0]} s for {fit['cases'][0]} cases, "
            f"{fit['shard_s'][1]} s for {fit['cases'][1]}: fixed {fit['fixed_s']} s per shard + "
            f"{fit['per_case_s']} s per case")
    k = runs.get("quarter_kernel_replay", {})
    if k.get("returncode") == 0 and k.get("shards"):
        say(f"kernel replay, the quarter: {k['shards'][0]['seconds']} s for {k['cases']} cases")
    (OUT / "cluster_bench.json").write_text(json.dumps(result, indent=1, default=str))
    return 0 if fit else 1


#: CLUSTER_MODE=fault's sweep: SDPA's backends only (nothing to build), kernel replay (short), 32 cases
FAULT_SWEEP = ["--impl", "sdpa_flash", "--impl", "sdpa_cudnn", "-B", "2", "-H", "16", "-N", "1024,2048", "-D", "64,128",
               "--causal", "both", "--pass", "forward,backward", "--tools", "ncu", "--replay-mode", "kernel"]
#: seconds after the shards are handed out that fault-killed kills a worker (CLUSTER_KILL_AFTER_S)
KILL_AFTER_S = float(os.environ.get("CLUSTER_KILL_AFTER_S", "15"))


def _run_watched(cmd: list[str], log: Path, when: str | None = None, act=None) -> int | str:
    """``cmd`` with its output in ``log``; ``act(proc)`` once, at the first output line that holds ``when``."""
    limit = time_left()
    if limit < 30:
        return "not started: no time left in this call"
    done = False
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})  # its lines as they are printed
        t0 = time.monotonic()
        for line in proc.stdout:
            fh.write(line)
            if not done and when is not None and when in line:
                done = True
                fh.write(f"### cluster_bench: {act(proc)}\n")
            if time.monotonic() - t0 > limit:
                proc.kill()
                return "timeout"
        return proc.wait()


def main_fault() -> int:
    """CLUSTER_MODE=fault: faults on a one-GPU node. A Dask cluster of two worker processes (nannies) that both see
    GPU 0 stands for two GPUs. (1) A sharded capture whose worker processes are known: once a case has finished under
    Nsight Compute, one worker process is killed (SIGKILL); the nanny restarts it, Dask runs its shard again, and the
    capture must be complete. (2) The same sweep interrupted (SIGINT) once a shard is done, then --resume. (3) The
    sweep uninterrupted on --gpus 0. The counted metrics of (1) and (2) are compared with (3)'s."""
    import signal

    from distributed import Client, LocalCluster

    OUT.mkdir(parents=True, exist_ok=True)
    LOG.write_text("")
    profiles = OUT / "cluster_profiles"
    say(f"faults on one GPU: {' '.join(FAULT_SWEEP)}")
    result: dict = {"sweep": FAULT_SWEEP}
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0")  # both workers inherit it: the one GPU
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc, \
            Client(lc) as client:
        base = [sys.executable, "-m", "nsightlab.capture", "--scheduler", lc.scheduler_address, "--profiles",
                str(profiles)]
        pids = sorted(client.run(os.getpid).values())
        acted: list[str] = []
        timers: list[threading.Timer] = []

        def kill(proc) -> str:
            # the line that starts the shards is printed as they are handed out: both workers are mid-shard
            # KILL_AFTER_S later (a shard of these 16 cases takes about 27 s under kernel replay on an H200, its
            # ceilings about 9 s of them)
            def later() -> None:
                if proc.poll() is None:  # never after the capture has ended
                    os.kill(pids[0], signal.SIGKILL)
                    acted.append(f"killed worker process {pids[0]} (SIGKILL) {KILL_AFTER_S} s into the shards")
            timers.append(threading.Timer(KILL_AFTER_S, later))
            timers[-1].start()
            return f"worker process {pids[0]} to be killed in {KILL_AFTER_S} s"

        rc = _run_watched([*base, *FAULT_SWEEP, "--name", "fault-killed", "--replace"], OUT / "cluster_fault-killed.log",
                          "shard(s) over", kill)
        for t in timers:  # a kill still pending once the capture has ended would hit the next experiment
            t.cancel()
            t.join()
        client.wait_for_workers(2, timeout=60)
        after = sorted(client.run(os.getpid).values())
        result["killed"] = {"returncode": rc, "workers_before": pids, "workers_after": after, "acted": list(acted),
                            "restarted": pids[0] not in after}
        say(f"fault-killed: exit {rc}; {acted[0] if acted else 'NO worker was killed (the shards ended first)'}; "
            f"worker processes {pids} -> {after}")

        def interrupt(proc) -> str:
            proc.send_signal(signal.SIGINT)
            return "interrupted (SIGINT)"

        rc1 = _run_watched([*base, *FAULT_SWEEP, "--name", "fault-resumed", "--replace", "--shards-per-gpu", "2"],
                           OUT / "cluster_fault-interrupted.log", "shards done", interrupt)
        left = sorted(p.name for p in profiles.glob(".failed-fault-resumed-*"))
        rc2 = _run_watched([*base, "--resume", "fault-resumed"], OUT / "cluster_fault-resumed.log")
        result["resumed"] = {"interrupted_returncode": rc1, "failed_folders": left, "resume_returncode": rc2}
        say(f"fault-resumed: interrupted with exit {rc1}, left {left}; --resume exit {rc2}")
    whole = capture("fault-whole", GPUS_ONE, FAULT_SWEEP)
    for name in ("fault-killed", "fault-resumed"):
        found = sorted(profiles.glob(f"*/{name}/manifest.json"))
        if not found or whole.get("returncode") != 0:
            say(f"{name}: no complete capture to compare")
            continue
        man = json.loads(found[0].read_text())
        statuses = sorted({c["status"] for c in man["cases"]})
        c = compare({"folder": str(found[0].parent)}, whole)
        result[name + "_compare"] = {"cases": len(man["cases"]), "statuses": statuses, **c}
        say(f"{name}: {len(man['cases'])} cases ({', '.join(statuses)}); instruction counts: "
            f"{len(c['exact_metrics']) - len(c['exact_unequal'])} of {len(c['exact_metrics'])} identical against the "
            f"uninterrupted capture ({c['cases_kernels'][2]} case x kernel rows); all counted metrics: "
            f"{c['identical_metrics']} of {c['metrics']} identical (traffic and per-unit spread vary run to run)")
        for m, d in c["unequal"].items():
            say(f"  differs: {m}: {d['rows']} rows, largest relative difference {d['max_rel']:.2e}")
    (OUT / "cluster_bench.json").write_text(json.dumps(result, indent=1, default=str))
    def complete(k: str) -> bool:  # every case ok, the same case x kernel rows as the uninterrupted capture, counts equal
        c = result.get(k + "_compare")
        return (c is not None and c["statuses"] == ["ok"] and len(set(c["cases_kernels"])) == 1
                and not c["exact_unequal"])

    runs_ok = result.get("killed", {}).get("returncode") == 0 and result.get("resumed", {}).get("resume_returncode") == 0
    killed = bool(result.get("killed", {}).get("acted"))
    return 0 if runs_ok and killed and all(complete(k) for k in ("fault-killed", "fault-resumed")) else 1


def main() -> int:
    if os.environ.get("CLUSTER_MODE") == "fixed":
        return main_fixed()
    if os.environ.get("CLUSTER_MODE") == "fault":
        return main_fault()
    OUT.mkdir(parents=True, exist_ok=True)
    LOG.write_text("")
    say(f"cluster benchmark: {' '.join(SWEEP)}")
    say(subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name", "--format=csv,noheader"], capture_output=True,
                       text=True).stdout.strip())
    runs = [capture("cluster-all", GPUS_ALL), capture("cluster-one", GPUS_ONE)]
    result: dict = {"sweep": SWEEP, "runs": runs}
    if all(r.get("returncode") == 0 and r.get("folder") for r in runs):
        result["speedup_wall"] = round(runs[1]["wall_s"] / runs[0]["wall_s"], 2)
        sw = [r["timings"].get("shards_wall") for r in runs]
        if all(sw):
            result["speedup_shards_phase"] = round(sw[1] / sw[0], 2)
        result["compare"] = compare(runs[0], runs[1])
        say(f"speedup, wall clock (--gpus {GPUS_ONE} / --gpus {GPUS_ALL}): {result['speedup_wall']}x; "
            f"the shards phase alone (after the GPUs were found): {result.get('speedup_shards_phase')}x")
        c = result["compare"]
        say(f"counted metrics: {c['identical_metrics']} of {c['metrics']} identical on every case and kernel "
            f"({c['cases_kernels'][2]} case x kernel rows in both)")
        for m, d in c["unequal"].items():
            say(f"  differs: {m}: {d['rows']} rows, largest relative difference {d['max_rel']:.2e}")
        if "time_ratio_all_over_one" in c:
            say(f"kernel times, --gpus {GPUS_ALL} over --gpus {GPUS_ONE}: median {c['time_ratio_all_over_one']['median']:.3f} "
                f"(p10 {c['time_ratio_all_over_one']['p10']:.3f}, p90 {c['time_ratio_all_over_one']['p90']:.3f})")
    else:
        say("a capture did not finish: no comparison (see cluster_*.log)")
    (OUT / "cluster_bench.json").write_text(json.dumps(result, indent=1, default=str))
    return 0 if "compare" in result else 1


if __name__ == "__main__":
    raise SystemExit(main())
