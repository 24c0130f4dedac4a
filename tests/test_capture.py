"""Capture: command lines, tool discovery, error messages, and the store's atomic write (no GPU:
the profilers and the Python that runs the workload are stand-in scripts)."""

import dataclasses
import json
import os
import re
import signal
import stat
import sys
from pathlib import Path

import pytest

from nsightlab.cli import capture as CC
from nsightlab.core import metrics as M
from nsightlab.core import tools as T
from nsightlab.core.ranges import decode, schemas_of
from nsightlab.problems import attention
from nsightlab.run import capture as C
from nsightlab.run.sweep import Sweep, find
from nsightlab.store.captures import ProfileError, find_file, list_captures, validate


def test_ncu_command_profiles_only_ranges_with_clocks_left_alone():
    cmd = C.ncu_command("/x/ncu", ["py", "-m", "w"], "out/ncu", nvtx_include=attention.schema("fk").nvtx_include())
    assert cmd[0] == "/x/ncu" and cmd[-3:] == ["py", "-m", "w"]
    assert cmd[cmd.index("--nvtx-include") + 1] == "regex:^fk:.*/" and "--nvtx" in cmd
    assert cmd[cmd.index("--replay-mode") + 1] == "kernel" and cmd[cmd.index("--cache-control") + 1] == "all"
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--metrics") + 1].split(",") == M.metric_names()
    assert cmd[cmd.index("--export") + 1] == "out/ncu"
    base = C.ncu_command("ncu", [], "o", clock_control="base")
    assert base[base.index("--clock-control") + 1] == "base"
    with pytest.raises(ValueError, match="clock_control"):
        C.ncu_command("ncu", [], "o", clock_control="boost")
    assert cmd[cmd.index("--cache-control") + 1] == "all"  # every profiled kernel starts with cold caches
    cold = C.ncu_command("ncu", [], "o", cache_control="none")
    assert cold.count("--cache-control") == 1 and cold[cold.index("--cache-control") + 1] == "none"
    with pytest.raises(ValueError, match="cache_control"):
        C.ncu_command("ncu", [], "o", cache_control="some")
    full = C.ncu_command("ncu", ["py"], "o", section_set="full", kernel_regex="flash_mma_backward",
                         extra=["--import-source", "yes"])
    assert "--set" in full and "--metrics" not in full and full[-1] == "py"
    assert full[full.index("--kernel-name") + 1] == "regex:flash_mma_backward"
    assert full[full.index("--import-source") + 1] == "yes"
    assert "--kernel-name" not in cmd


def test_nsys_commands():
    cmd = C.nsys_command("nsys", ["py"], "o/nsys")
    assert cmd[:2] == ["nsys", "profile"] and "--trace=cuda,nvtx" in cmd and "--sample=none" in cmd
    assert "--cpuctxsw=none" in cmd and cmd[-1] == "py"
    exp = C.nsys_export_command("nsys", "a.nsys-rep", "a.sqlite")
    assert exp[1:4] == ["export", "--type", "sqlite"]
    st = C.nsys_stats_command("nsys", "a.sqlite", "p")
    assert "cuda_gpu_kern_sum,nvtx_sum" in st and "csv" in st


def test_metric_list_names_each_metric_once_and_covers_the_roofline():
    names = M.metric_names()
    assert len(names) == len(set(names))
    for group in ("clocks", "work", "peaks", "traffic", "launch"):
        assert set(M.GROUPS[group].values()) <= set(names)


def test_passes_per_kernel_from_the_log():
    log = '==PROF== Profiling "a_kernel" - 0: 0%....50%....100% - 5 passes\n==PROF== Profiling "b" - 1: 0%..100% - 7 passes\n'
    assert C.passes_per_kernel(log) == {"a_kernel": 5, "b": 7} and C.kernels_profiled(log) == 2
    app = "==PROF== Connected to process 1\n" + '==PROF== Profiling "k" - 0: 0%....50%....100%\n' * 2
    app = app * 5  # application replay: the workload runs once per pass
    assert C.passes_per_kernel(app) == {"k": 5} and C.kernels_profiled(app) == 2


def _exe(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_find_ncu_order_and_missing(tmp_path, monkeypatch):
    monkeypatch.delenv("NCU", raising=False)
    mine = _exe(tmp_path / "ncu", "#!/bin/sh\n")
    assert T.find_ncu(mine, which=lambda _: None) == mine
    monkeypatch.setenv("NCU", str(mine))
    assert T.find_ncu(which=lambda _: "/elsewhere/ncu") == mine
    monkeypatch.setenv("NCU", str(tmp_path / "nope"))
    with pytest.raises(T.ToolError, match=r"\$NCU is not an executable"):
        T.find_ncu(which=lambda _: None)
    monkeypatch.delenv("NCU")
    assert T.find_ncu(which=lambda _: "/on/path/ncu") == Path("/on/path/ncu")
    monkeypatch.setattr(T, "NCU_DIRS", (str(tmp_path / "none*"),))
    with pytest.raises(T.ToolError, match="ncu not found.*Install Nsight Compute"):
        T.find_ncu(which=lambda _: None)


def test_find_nsys_falls_back_to_the_copy_inside_nsight_compute(tmp_path, monkeypatch):
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.setattr(T, "NSYS_DIRS", (str(tmp_path / "none*"),))
    root = tmp_path / "nsight-compute" / "2025.3.1"
    _exe((root / "host/target-linux-x64").mkdir(parents=True) or root / "host/target-linux-x64/nsys", "#!/bin/sh\n")
    with pytest.raises(T.ToolError, match="importer"):
        T.find_nsys(which=lambda _: None, ncu_roots=(str(tmp_path / "nsight-compute/*"),), cache=tmp_path / "c")
    _exe((root / T.NCU_NSYS_IMPORTER_DIR).mkdir(parents=True) or root / T.NCU_NSYS_IMPORTER_DIR / "QdstrmImporter",
         "#!/bin/sh\n")
    nsys = T.find_nsys(which=lambda _: None, ncu_roots=(str(tmp_path / "nsight-compute/*"),), cache=tmp_path / "c")
    assert nsys.name == "nsys" and (nsys.parent.parent / "host-linux-x64" / "QdstrmImporter").exists()
    with pytest.raises(T.ToolError, match="nsys not found.*Nsight Systems"):
        T.find_nsys(which=lambda _: None, ncu_roots=(str(tmp_path / "none/*"),))


def test_importer_missing_libraries_says_what_to_install(tmp_path, monkeypatch):
    d = tmp_path / "n"
    (d / "target-linux-x64").mkdir(parents=True)
    (d / "host-linux-x64").mkdir()
    _exe(d / "host-linux-x64" / "QdstrmImporter", "")
    monkeypatch.setattr(T, "missing_libraries", lambda _: ["libdw.so.1"])
    with pytest.raises(T.ToolError, match="missing libdw.so.1.*apt install libdw1"):
        T.check_nsys_importer(d / "target-linux-x64" / "nsys")


def test_ncu_errors_become_advice():
    with pytest.raises(T.ToolError, match="performance counters.*NVreg_RestrictProfilingToAdminUsers"):
        T.check_ncu_output("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission", 1)
    with pytest.raises(T.ToolError, match="metric list"):
        T.check_ncu_output("==ERROR== Failed to find metric foo__bar", 1)
    with pytest.raises(T.ToolError, match="profiled no kernel"):
        T.check_ncu_output("==WARNING== No kernels were profiled.", 0)
    T.check_ncu_output("==PROF== Report: x.ncu-rep", 0)


ROOT = Path(__file__).resolve().parent.parent

# the Python that capture runs: the ceilings with a fake GPU, and a workload that logs every runnable case as
# run (the cases read from the plan the capture hands it, --cases, as the real one does: a workload given a sweep to
# expand again fails); the same interpreter, so nsightlab imports
FAKE_PYTHON = """#!{python}
import json, re, sys
sys.path.insert(0, {root!r})
args = sys.argv[1:]
def arg(flag):
    return args[args.index(flag) + 1] if flag in args else None
if args[:2] == ["-m", "nsightlab.run.ceilings"]:
    json.dump({{"ceilings": {{"copy_d2d": {{"bytes": 1, "ms": 1, "bytes_per_s": 1.0}}}},
               "environment": {{"gpu": {{"name": "Fake GPU X", "l2_bytes": 1 << 20}}, "git_commit": "abc"}}}},
              open(arg("--out"), "w"))
    print("ceilings measured")
elif args[:2] == ["-m", "nsightlab.run.workload"] and "--setup-only" in args:
    import os
    if not os.environ.get("FAKE_SETUP_REAL"):  # the real setups of kernel packages would build their kernels
        print("setup (fake)")
        sys.exit(0)
    from nsightlab.run import sweep as S
    from nsightlab.run.workload import run_setups
    if "--sweep" in args or S.EXPANSIONS:
        sys.exit("fake python: the workload was made to expand the sweep again instead of reading its cases (--cases)")
    sys.exit(run_setups(S.read_cases(arg("--cases")).cases))
elif args[:2] == ["-m", "nsightlab.run.workload"]:
    from nsightlab.run import sweep as S
    if "--sweep" in args:
        sys.exit("fake python: the workload was made to expand the sweep again instead of reading its cases (--cases)")
    only = [args[i + 1] for i, a in enumerate(args) if a == "--only"]
    cases = [c for c in S.read_cases(arg("--cases")).cases if c.runnable and all(re.search(o, c.range) for o in only)]
    if S.EXPANSIONS:
        sys.exit("fake python: reading the plan expanded the sweep")
    import os, time
    from nsightlab.run.workload import running_file
    hang_after = int(os.environ.get("FAKE_WORKLOAD_HANG_AFTER", -1))  # a kernel that never finishes under the profiler
    with open(arg("--log"), "a") as log:
        for i, c in enumerate(cases):
            running_file(arg("--log")).write_text(c.range + "\\n")
            if i == hang_after:
                print("==WARNING== Launching the workload is taking more time than expected. If this continues to hang, ...",
                      flush=True)
                time.sleep(120)
            log.write(json.dumps({{"range": c.range, "impl": c.impl, "pass": c.pass_, "status": "ok"}}) + "\\n")
            log.flush()
    running_file(arg("--log")).unlink(missing_ok=True)
    print("workload ran", len(cases), "cases")
else:
    sys.exit("fake python: unexpected " + " ".join(args))
"""

FAKE_NCU = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "Version 2025.3.1 (fake)"; exit 0; fi
if [ "$1" = "--import" ]; then echo '"ID","Kernel Name"'; echo '"",""'; exit 0; fi
if [ -n "$FAKE_NCU_FAIL" ]; then echo "==ERROR== ERR_NVGPUCTRPERM - no permission"; exit 1; fi
if [ -n "$FAKE_NCU_HANG" ]; then echo "==PROF== Connected to process (fake, hanging)"; exec sleep 120; fi
while [ "$1" != "--export" ]; do shift; done
out="$2"
while [ "$1" != "--force-overwrite" ]; do shift; done
shift
"$@" || exit 1
echo '==PROF== Profiling "k_kernel" - 0: 0%....50%....100% - 5 passes'
printf 'report' > "$out.ncu-rep"
"""

FAKE_NSYS = """#!/bin/sh
cmd="$1"
if [ "$cmd" = "--version" ]; then echo "NVIDIA Nsight Systems version 2025.1 (fake)"; exit 0; fi
while [ "$1" != "--output" ]; do shift; done
out="$2"
shift 2
case "$cmd" in
  profile) "$@" || exit 1
           if [ -n "$FAKE_NSYS_FAIL" ]; then echo "nsys: fake failure after the workload"; exit 3; fi
           printf 'rep' > "$out.nsys-rep" ;;
  export) printf 'sqlite' > "$out" ;;
  stats) printf 'Name,Time\\nk_kernel,1\\n' > "${out}_cuda_gpu_kern_sum.csv" ;;
esac
"""


def _tools(tmp_path):
    py = _exe(tmp_path / "python", FAKE_PYTHON.format(python=sys.executable, root=str(ROOT)))
    return py, _exe(tmp_path / "ncu", FAKE_NCU), _exe(tmp_path / "nsys", FAKE_NSYS)


def _ncu_argv(man):
    return next(c["argv"] for c in man["commands"] if c["step"] == "ncu")


def test_capture_is_atomic_idempotent_and_keeps_the_previous_on_failure(tmp_path, monkeypatch):
    py, ncu, _ = _tools(tmp_path)
    profiles = tmp_path / "profiles"
    dest = C.capture("blocksize", profiles, ncu=str(ncu), python=str(py), echo=lambda s: None)
    assert dest == profiles / "fake-gpu-x" / "blocksize"
    man = validate(dest, open_reports=False)
    assert man["ncu"]["max_passes_per_kernel"] == 5 and man["ncu"]["clock_control"] == "none"
    assert man["ncu"]["replay_mode"] == "kernel"  # the sweep's own: long kernels, kernel replay
    assert {"ncu.ncu-rep", "ncu_raw.csv", "ceilings.json", "ncu.log", "sweep.toml", "cases_ncu.jsonl"} <= set(man["files"])
    wl = _ncu_argv(man)[_ncu_argv(man).index("-m"):]
    assert wl[:2] == ["-m", "nsightlab.run.workload"] and wl[wl.index("--warmup-only") + 1] == "all"  # kernel replay: keep warm-ups
    assert _ncu_argv(man)[_ncu_argv(man).index("--nvtx-include") + 1] == "regex:^fk:.*/"
    statuses = [c["status"] for c in man["cases"]]
    assert statuses.count("ok") == 82 and sum(s.startswith("skipped:") for s in statuses) == 2
    first = (dest / "manifest.json").read_text()
    with pytest.raises(ProfileError, match=r"blocksize already exists; nothing was captured or replaced .*--replace"):
        C.capture("blocksize", profiles, ncu=str(ncu), python=str(py), echo=lambda s: None)  # not asked to replace
    assert (dest / "manifest.json").read_text() == first
    second = None
    for _ in range(2):  # re-run: replaced whole
        C.capture("blocksize", profiles, ncu=str(ncu), python=str(py), echo=lambda s: None, replace=True)
        second = (dest / "manifest.json").read_text()
    assert [c.label for c in list_captures(profiles)] == ["fake-gpu-x/blocksize"]
    assert not [p.name for p in profiles.rglob(".*") if p.name.startswith((".tmp", ".old", ".failed", ".replaced"))]
    monkeypatch.setenv("FAKE_NCU_FAIL", "1")
    with pytest.raises(C.CaptureError, match="failed.*previous capture.*untouched"):
        C.capture("blocksize", profiles, ncu=str(ncu), python=str(py), echo=lambda s: None, replace=True)
    assert (dest / "manifest.json").read_text() == second != ""  # the good capture survives
    failed = list(profiles.glob(".failed-blocksize-*"))
    assert len(failed) == 1 and "ERR_NVGPUCTRPERM" in (failed[0] / "FAILED.txt").read_text()
    assert "cases finished (0 of 82)" in (failed[0] / "FAILED.txt").read_text()
    monkeypatch.delenv("FAKE_NCU_FAIL")
    dest = C.capture("blocksize", profiles, ncu=str(ncu), python=str(py), replay_mode="application",
                     echo=lambda s: None, replace=True)
    man = validate(dest, open_reports=False)
    argv = _ncu_argv(man)
    assert man["ncu"]["replay_mode"] == "application" and argv[argv.index("--replay-mode") + 1] == "application"
    assert argv[argv.index("--warmup-only") + 1] == "needed"  # application replay: warm-ups would run patched
    assert man["ceilings_measured_by"] == "this capture"


ONLY_SIMT_1024 = "flash_simt:forward:.*N=1024,D=64,"


def _capture_until(tmp_path, marker, **env):
    """A blocksize capture (the fake tools, ``env`` added) in a process of its own that turns SIGTERM into an
    interrupt, read until a line with ``marker``: (the process, still running, the lines so far, profiles)."""
    import subprocess

    py, ncu, _ = _tools(tmp_path)
    profiles = tmp_path / "profiles"
    script = ("import sys\nfrom nsightlab.run import capture as C\nC.sigterm_as_interrupt()\n"
              f"try:\n    C.capture('blocksize', {str(profiles)!r}, ncu={str(ncu)!r}, python={str(py)!r}, "
              f"only={ONLY_SIMT_1024!r})\nexcept KeyboardInterrupt:\n    sys.exit(130)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, **env, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"})
    seen = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            break
    assert proc.poll() is None, "".join(seen)
    return proc, seen, profiles


def test_sigterm_ends_a_capture_as_ctrl_c_does(tmp_path):
    """`timeout`'s default signal (or a scheduler's kill) in the middle of a tool: the tool is stopped, the partial
    folder kept aside as .failed-<name>-<time> saying why, no .tmp-* left, a non-zero exit."""
    import time

    # until the capture echoes the (fake) profiler's first line: ncu is running
    proc, seen, profiles = _capture_until(tmp_path, "hanging", FAKE_NCU_HANG="1")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out = "".join(seen) + proc.communicate(timeout=60)[0]
    assert proc.returncode == 130 and time.monotonic() - t0 < 30, out
    assert "interrupted (terminated by signal" in out and "partial output and logs are in" in out, out
    assert not list(profiles.glob(".tmp-*"))
    (failed,) = profiles.glob(".failed-blocksize-*")
    assert "SIGTERM" in (failed / "FAILED.txt").read_text() and (failed / "ncu.log").exists()


def test_a_case_that_hangs_under_the_profiler_is_named(tmp_path):
    """Nsight Compute warns that a launch is taking long (a replay pass that never ends): the capture says which
    case is in flight at once, and the stopped capture's FAILED.txt and message name it beside the finished ones."""
    proc, seen, profiles = _capture_until(tmp_path, "the case in flight:", FAKE_WORKLOAD_HANG_AFTER="2")
    hung = [c.range for c in find("blocksize").cases() if c.runnable and re.search(ONLY_SIMT_1024, c.range)][2]
    assert hung in seen[-1] and "leave that case out" in seen[-1]
    proc.send_signal(signal.SIGTERM)
    out = "".join(seen) + proc.communicate(timeout=60)[0]
    assert proc.returncode == 130, out
    (failed,) = profiles.glob(".failed-blocksize-*")
    text = (failed / "FAILED.txt").read_text()
    assert "cases finished (2 of 4)" in text and f"case in flight when it stopped (ncu step): {hung}" in text, text
    assert f"The case in flight (ncu step): {hung}." in out, out


def test_a_finished_capture_keeps_no_record_of_a_case_in_flight(tmp_path):
    py, ncu, _ = _tools(tmp_path)
    dest = C.capture("blocksize", tmp_path / "p", ncu=str(ncu), python=str(py), echo=lambda s: None,
                     only="flash_simt:forward:.*N=1024,D=64,")
    assert not list(dest.glob("*.running")) and validate(dest, open_reports=False)


def test_a_later_sweep_of_the_same_command_reuses_the_ceilings(tmp_path):
    py, ncu, _ = _tools(tmp_path)
    first = C.capture("blocksize", tmp_path / "a", ncu=str(ncu), python=str(py), echo=lambda s: None,
                      only="flash_simt:forward:.*N=1024,D=64,")
    dest = C.capture("blocksize", tmp_path / "b", ncu=str(ncu), python=str(py), ceilings_from=first,
                     only="flash_simt:forward:.*N=1024,D=64,", echo=lambda s: None)
    man = validate(dest, open_reports=False)
    assert "earlier capture of the same command" in man["ceilings_measured_by"]
    assert not any(c["step"] == "ceilings" for c in man["commands"])
    assert man["ceilings"]["copy_d2d"]["bytes_per_s"] == 1.0 and "ceilings.json" in man["files"]
    assert len(man["cases"]) == 4 and all(c["status"] == "ok" for c in man["cases"]) and man["only"]


def _mine():
    """The sweep `--impl tests.stand_in:my_attention --impl sdpa_flash -B 2 -H 4 -N 128,256 -D 64 --causal both`."""
    a = CC.parser("nsightlab capture", attention.PROBLEM).parse_args([
        "--impl", "tests.stand_in:my_attention", "--impl", "sdpa_flash", "-B", "2", "-H", "4", "-N", "128,256", "-D", "64",
        "--causal", "both", "--name", "mine"])
    (sweep,) = CC.sweeps_from_args(a)
    return sweep


def test_a_user_implementation_end_to_end_with_simulated_tools(tmp_path, monkeypatch):
    py, ncu, nsys = _tools(tmp_path)
    profiles = tmp_path / "profiles"
    sweep = _mine()
    cases = sweep.cases()
    assert len(cases) == 16 and all(c.runnable for c in cases)
    dest = C.capture(sweep, profiles, ncu=str(ncu), nsys=str(nsys), python=str(py), echo=lambda s: None)
    assert dest == profiles / "fake-gpu-x" / "mine"
    man = validate(dest, open_reports=False)
    assert man["schema"] == 2 and man["origin"] == "captured" and man["name"] == "mine"
    assert man["range_schemas"] == [attention.schema("attn").to_json()]
    assert schemas_of(man) == (attention.schema("attn"),)
    assert [c["range"] for c in man["cases"]] == [c.range for c in cases]
    assert {c["impl"] for c in man["cases"]} == {"my_attention", "sdpa_flash"}
    for c in man["cases"]:
        s = c["shape"]
        flop = 4.0 * s["B"] * s["H"] * s["N"] * s["N"] * s["D"] / (2 if s["causal"] else 1) * (2.5 if c["pass"] == "backward" else 1)
        assert c["status"] == "ok" and c["model"]["flop"] == flop, c["range"]
        assert decode(c["range"], schemas_of(man))["variant"] == c["impl"]
    assert man["sweep"] == sweep.to_dict() and Sweep.from_dict(man["sweep"]).cases() == cases
    assert Sweep.load(dest / "sweep.toml").cases() == cases  # the capture re-runs exactly
    assert {"sweep.toml", "ceilings.json", "ncu.ncu-rep", "ncu_raw.csv", "nsys.nsys-rep", "nsys.sqlite", "cases_ncu.jsonl",
            "cases_nsys.jsonl", "nsys_stats_cuda_gpu_kern_sum.csv"} <= set(man["files"])
    assert all(len(meta["sha256"]) == 64 and meta["bytes"] >= 0 for meta in man["files"].values())
    assert man["nsys"]["iters"] == 5 and man["tools"] == ["ncu", "nsys"]
    nsys_wl = next(c["argv"] for c in man["commands"] if c["step"] == "nsys")
    assert nsys_wl[nsys_wl.index("--iters") + 1] == "5"
    assert _ncu_argv(man)[_ncu_argv(man).index("--nvtx-include") + 1] == "regex:^attn:.*/"
    assert "setup" not in [c["step"] for c in man["commands"]]  # neither implementation has a setup

    # a tool failing after the workload ran: the previous capture stays, the partial one says what finished
    before = (dest / "manifest.json").read_text()
    monkeypatch.setenv("FAKE_NSYS_FAIL", "1")
    with pytest.raises(C.CaptureError, match=r"step nsys failed \(exit 3\).*16 of 16 case\(s\) had finished"):
        C.capture(sweep, profiles, ncu=str(ncu), nsys=str(nsys), python=str(py), echo=lambda s: None, replace=True)
    assert (dest / "manifest.json").read_text() == before
    validate(dest, open_reports=False)
    (failed,) = profiles.glob(".failed-mine-*")
    text = (failed / "FAILED.txt").read_text()
    assert "cases finished (16 of 16)" in text and all(c.range in text for c in cases)
    assert (failed / "nsys.log").exists() and not (failed / "manifest.json").exists()


def test_implementations_are_set_up_before_any_profiler_runs(tmp_path, monkeypatch):
    """An implementation with a setup (a kernel package building its kernels) gets it run in a process of its
    own before Nsight Compute starts, so that no profiled process builds them."""
    py, ncu, nsys = _tools(tmp_path)
    monkeypatch.setenv("FAKE_SETUP_REAL", "1")
    a = CC.parser("nsightlab capture", attention.PROBLEM).parse_args([
        "--impl", "tests.stand_in:built_attention", "--impl", "sdpa_flash", "-B", "1", "-H", "2", "-N", "128",
        "-D", "64", "--name", "built", "--tools", "ncu"])
    (sweep,) = CC.sweeps_from_args(a)
    dest = C.capture(sweep, tmp_path / "profiles", ncu=str(ncu), nsys=str(nsys), python=str(py), echo=lambda s: None)
    man = validate(dest, open_reports=False)
    steps = [c["step"] for c in man["commands"]]
    assert steps.index("setup") < steps.index("ncu"), steps
    setup = next(c for c in man["commands"] if c["step"] == "setup")
    assert setup["argv"][-1] == "--setup-only" and setup["returncode"] == 0
    log = (dest / setup["log"]).read_text()
    assert "stand-in setup: built" in log and "setup: built_attention in" in log
    assert "setup" in man["timings_seconds"]


def test_the_workload_runs_setups_alone(tmp_path, capsys, monkeypatch):
    import tests.stand_in as stand_in
    from nsightlab.problems import impls
    from nsightlab.run import workload

    monkeypatch.setitem(impls._REGISTRY, "failing_setup",
                        impls.Implementation("failing_setup", "tests.stand_in:my_attention", setup=lambda: 1 / 0))
    a = CC.parser("nsightlab capture", attention.PROBLEM).parse_args([
        "--impl", "tests.stand_in:built_attention", "--impl", "sdpa_flash", "-B", "1", "-H", "2", "-N", "128,256",
        "-D", "64", "--name", "built"])
    (sweep,) = CC.sweeps_from_args(a)
    path = tmp_path / "sweep.toml"
    path.write_text(sweep.to_toml())
    before = len(stand_in.SETUPS)
    assert workload.main(["--sweep", str(path), "--setup-only"]) == 0
    assert len(stand_in.SETUPS) == before + 1  # once, though two cases use it; sdpa_flash has none
    assert "setup: built_attention in" in capsys.readouterr().out
    a = CC.parser("nsightlab capture", attention.PROBLEM).parse_args([
        "--impl", "failing_setup", "-B", "1", "-H", "2", "-N", "128", "-D", "64", "--name", "bad"])
    (sweep,) = CC.sweeps_from_args(a)
    path.write_text(sweep.to_toml())
    assert workload.main(["--sweep", str(path), "--setup-only"]) == 2
    assert "error: the setup of failing_setup failed: ZeroDivisionError: division by zero" in capsys.readouterr().err


def _main(argv, monkeypatch):
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # main() resets SIGPIPE for `--list | head`
    return CC.main(argv)


def test_capture_list_of_a_command_line_sweep(capsys, monkeypatch):
    argv = ["--impl", "tests.stand_in:my_attention", "--impl", "sdpa_flash", "--impl", "flash_mma", "-B", "4", "-H", "16",
            "-N", "1024,4096", "-D", "128", "--causal", "both", "--pass", "forward,backward", "--name", "mine", "--list"]
    assert _main(argv, monkeypatch) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# mine: 24 case(s) to run, 0 skipped" and len(lines) == 25
    assert lines[1] == "attn:my_attention:forward:B=4,H=16,N=1024,D=128,dtype=float16,causal=0"
    assert sum(":flash_mma:" in n for n in lines) == 8 and sum("causal=1" in n for n in lines) == 12
    assert _main(["--suite", "blocksize,seqlen", "--list"], monkeypatch) == 0
    out = capsys.readouterr().out
    assert "# blocksize: 82 case(s) to run, 2 skipped" in out and "# seqlen: 224 case(s) to run, 0 skipped" in out


def test_deep_tier_command_lines():
    cmd = C.deep_ncu_command("/x/ncu", ["py", "-m", "w"], "out/deep", nvtx_include="regex:^fk:.*/")
    sections = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--section"]
    assert sections == ["SpeedOfLight", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis", "MemoryWorkloadAnalysis_Tables",
                        "MemoryWorkloadAnalysis_Chart", "Occupancy", "LaunchStats", "SchedulerStats", "WarpStateStats",
                        "InstructionStats", "SourceCounters"]
    assert cmd[cmd.index("--import-source") + 1] == "yes" and cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--replay-mode") + 1] == "kernel" and cmd[cmd.index("--nvtx-include") + 1] == "regex:^fk:.*/"
    assert "--metrics" not in cmd and "--set" not in cmd and "--nvtx" in cmd
    assert cmd[cmd.index("--export") + 1] == "out/deep" and cmd[-3:] == ["py", "-m", "w"]
    assert C.ncu_details_csv_command("ncu", "deep.ncu-rep") == [
        "ncu", "--import", "deep.ncu-rep", "--csv", "--page", "details", "--print-units", "base", "--print-metric-name", "name"]
    assert C.ncu_raw_csv_command("ncu", "deep.ncu-rep", base_units=True) == [
        "ncu", "--import", "deep.ncu-rep", "--csv", "--page", "raw", "--print-units", "base"]
    assert C.ncu_raw_csv_command("ncu", "ncu.ncu-rep") == ["ncu", "--import", "ncu.ncu-rep", "--csv", "--page", "raw"]
    wl = C.workload_command("s.toml", only=["^attn:", "D=64"])
    assert [wl[i + 1] for i, a in enumerate(wl) if a == "--only"] == ["^attn:", "D=64"]


DEEP = "sdpa_flash:forward:.*N=256,"


def _step(man, name):
    return next(c["argv"] for c in man["commands"] if c["step"] == name)


def test_deep_tier_after_the_light_one(tmp_path):
    py, ncu, nsys = _tools(tmp_path)
    sweep = dataclasses.replace(_mine(), deep=DEEP)
    dest = C.capture(sweep, tmp_path / "profiles", ncu=str(ncu), nsys=str(nsys), python=str(py), echo=lambda s: None)
    man = validate(dest, open_reports=False)
    deep = [c["range"] for c in man["cases"] if c.get("deep")]
    assert deep == [c.range for c in sweep.cases() if re.search(DEEP, c.range)] and len(deep) == 2
    d = man["deep"]
    assert d["regex"] == DEEP and d["cases"] == deep and d["sections"] == list(C.DEEP_SECTIONS) and d["import_source"]
    assert d["passes_per_kernel"] == {"k_kernel": 5} and d["max_passes_per_kernel"] == 5 and d["kernels_profiled"] == 1
    assert d["report_bytes"] == len("report") and d["seconds"] >= 0 and d["replay_mode"] == "kernel"
    assert {"deep.ncu-rep", "deep_details.csv", "deep_raw.csv", "deep.log", "cases_deep.jsonl"} <= set(man["files"])
    argv = _step(man, "deep")
    assert argv[argv.index("--import-source") + 1] == "yes" and argv.count("--section") == len(C.DEEP_SECTIONS)
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--only"] == [DEEP]  # the workload runs the deep cases only
    assert _step(man, "deep-details-csv")[-2:] == ["--print-metric-name", "name"]
    assert man["ncu"]["kernels_profiled"] == 1 and man["nsys"]["iters"] == 5 and man["tools"] == ["ncu", "nsys"]
    assert set(man["timings_seconds"]) >= {"ncu", "nsys", "deep", "deep_csv", "total"}
    assert Sweep.load(dest / "sweep.toml").deep == DEEP  # the capture re-runs with its deep tier


def test_deep_only_takes_the_deep_tier_alone_into_its_own_folder(tmp_path):
    py, ncu, _ = _tools(tmp_path)
    profiles = tmp_path / "profiles"
    sweep = dataclasses.replace(_mine(), deep=DEEP)
    dest = C.capture(sweep, profiles, ncu=str(ncu), nsys="/no/nsys", python=str(py), deep_only=True, echo=lambda s: None)
    assert dest == profiles / "fake-gpu-x" / "mine-deep"
    man = validate(dest, open_reports=False)
    assert man["deep_only"] and man["tools"] == ["ncu"] and man["ncu"] == {} and man["nsys"] == {}
    assert [c["range"] for c in man["cases"]] == man["deep"]["cases"] and all(c["deep"] for c in man["cases"])
    assert [c["step"] for c in man["commands"]] == ["ceilings", "deep", "deep-details-csv", "deep-raw-csv"]
    assert "skipped_sections" not in man["deep"]
    assert not any(name.startswith(("ncu", "nsys")) for name in man["files"])
    with pytest.raises(C.CaptureError, match="--deep-only needs a deep regex"):
        C.capture(_mine(), profiles, ncu=str(ncu), python=str(py), deep_only=True, echo=lambda s: None)


def test_deep_skip_leaves_sections_out_and_says_so(tmp_path, capsys, monkeypatch):
    """A kernel that stalls under one deep section (nsightlab hang names it) is captured without it: the
    manifest lists the sections used and the ones left out, and the sweep re-runs the same way."""
    py, ncu, _ = _tools(tmp_path)
    sweep = dataclasses.replace(_mine(), deep=DEEP, deep_skip=("MemoryWorkloadAnalysis",))
    dest = C.capture(sweep, tmp_path / "profiles", ncu=str(ncu), nsys="/no/nsys", python=str(py), deep_only=True,
                     echo=lambda s: None)
    man = validate(dest, open_reports=False)
    argv = _step(man, "deep")
    used = [argv[i + 1] for i, a in enumerate(argv) if a == "--section"]
    assert used == [s for s in C.DEEP_SECTIONS if s != "MemoryWorkloadAnalysis"] == man["deep"]["sections"]
    assert man["deep"]["skipped_sections"] == ["MemoryWorkloadAnalysis"]
    assert Sweep.load(dest / "sweep.toml").deep_skip == ("MemoryWorkloadAnalysis",)
    from nsightlab.render.page import header

    assert "**deep tier** without MemoryWorkloadAnalysis" in header(man, dest)  # every page of it says so
    assert "deep_skip" not in _mine().to_dict()  # a sweep without it writes no key
    with pytest.raises(ValueError, match="deep_skip names \\['Memory'\\], which are not deep-tier sections; accepted: SpeedOfLight"):
        dataclasses.replace(_mine(), deep_skip=("Memory",))
    with pytest.raises(ValueError, match="leaves out every deep-tier section"):
        dataclasses.replace(_mine(), deep_skip=C.DEEP_SECTIONS)
    with pytest.raises(ValueError, match="leaves out every deep-tier section"):
        dataclasses.replace(_mine(), deep_skip=(*C.DEEP_SECTIONS, "Occupancy"))  # a repeat does not hide it
    assert dataclasses.replace(_mine(), deep_skip=("Occupancy",) * 11).deep_skip == ("Occupancy",)
    with pytest.raises(ValueError, match="deep_skip must be a list of section names, not 'Occupancy'"):
        dataclasses.replace(_mine(), deep_skip="Occupancy")
    argv = ["--impl", "sdpa_flash", "-N", "256,512", "--name", "mine", "--deep", "forward:.*N=512,",
            "--deep-skip", "Nope", "--list"]
    with pytest.raises(SystemExit) as exc:
        _main(argv, monkeypatch)
    assert exc.value.code == 2 and "deep_skip names ['Nope']" in capsys.readouterr().err


def test_list_marks_the_deep_cases(capsys, monkeypatch):
    argv = ["--impl", "sdpa_flash", "-N", "256,512", "--name", "mine", "--deep", "forward:.*N=512,", "--list"]
    assert _main(argv, monkeypatch) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# mine: 4 case(s) to run, 0 skipped, 1 deep (deep = 'forward:.*N=512,')"
    assert [line for line in lines if line.endswith("    [deep]")] == [
        "attn:sdpa_flash:forward:B=1,H=8,N=512,D=64,dtype=float16,causal=0    [deep]"]
    assert _main(["--suite", "seqlen", "--list"], monkeypatch) == 0
    out = capsys.readouterr().out.splitlines()
    deep = [line.split()[0] for line in out if line.endswith("[deep]")]
    # the committed suite's deep cases: each implementation and pass at N=4096, D=64 and D=128
    assert len(deep) == 20 and all(",N=4096," in n for n in deep) and {n.split(":")[1] for n in deep} == {
        "flash_fa1", "flash_simt", "flash_mma", "flash_wgmma", "sdpa_flash", "sdpa_cudnn"}
    assert sum(":backward:" in n for n in deep) == 8 and sum(",D=128," in n for n in deep) == 10


def test_shape_flags_come_from_the_problem(capsys, monkeypatch):
    argv = ["--impl", "examples.gemm.gemm:IMPL", "-M", "1024,4096", "-N", "4096", "-K", "1024", "--pass", "forward",
            "--name", "g", "--list"]
    assert _main(argv, monkeypatch) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [f"gemm:torch_gemm:forward:M={m},N=4096,K=1024,dtype=float16"
                                                        for m in (1024, 4096)]
    with pytest.raises(SystemExit):
        _main(["--impl", "examples.gemm.gemm:IMPL", "-M", "64", "-N", "64", "-K", "64", "-B", "2", "--list"], monkeypatch)
    assert "unrecognized arguments: -B 2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _main(["--impl", "examples.gemm.gemm:IMPL", "--help"], monkeypatch)
    help_text = capsys.readouterr().out
    assert "gemm shapes" in help_text and "-M M " in help_text and "PARAM_" not in help_text and "rows of A and C" in help_text


@pytest.mark.parametrize("argv, message", [
    (["--impl", "nope", "-N", "64"], "unknown implementation 'nope'; known:"),
    (["--impl", "sdpa_flash", "-N", "-5"], "-N takes positive integers, comma-separated (e.g. 1024,4096), not '-5'"),
    (["--impl", "sdpa_flash", "-N", "abc"], "-N takes positive integers, comma-separated (e.g. 1024,4096), not 'abc'"),
    (["--impl", "sdpa_flash", "-N", "64", "--causal", "maybe"], "--causal takes both, yes or no, not 'maybe'"),
    (["--impl", "sdpa_flash", "-N", "64", "--pass", "sideways"], "--pass takes forward, backward"),
    (["--impl", "sdpa_flash", "-N", "64", "-H", "8", "--Hkv", "3"], "H=8 must be a multiple of Hkv=3"),
    (["--impl", "sdpa_flash", "-N", "64", "--tools", "foo"], "tools must be among ('ncu', 'nsys', 'bench'), not ['foo']"),
    (["--suite", "seqlen", "--impl", "sdpa_flash", "-N", "64"], "give exactly one of --suite NAME, --sweep FILE or --impl"),
    (["--list"], "give exactly one of --suite NAME, --sweep FILE or --impl"),
    (["--impl", "sdpa_flash"], "--impl needs the shapes: at least -N"),
    (["--impl", "sdpa_flash", "-N", "64", "--option", "tile"], "--option takes name=value"),
    (["--impl", "sdpa_flash", "-N", "64", "--dtype", "float8"], "dtype must be one of float16, bfloat16, float32"),
    (["--impl", "sdpa_flash", "-N", "64", "--name", "a/b"], "sweep name 'a/b' may only hold"),
    (["--impl", "tests.stand_in:nope", "-N", "64"], "module 'tests.stand_in' has no attribute 'nope'"),
    (["--impl", "sdpa_flash", "-N", "64", "--plugin", "no_such_plugin_xyz"], "plug-in 'no_such_plugin_xyz' cannot be imported"),
    (["--suite", "nope"], "unknown sweep 'nope'; known:"),
    (["--sweep", "missing.toml"], "sweep file missing.toml does not exist"),
    (["--impl", "sdpa_flash", "-N", "64", "--only", "("], "--only '(' is not a regular expression"),
    (["--impl", "sdpa_flash", "-N", "64", "--deep", "(", "--list"], "--deep '(' is not a regular expression"),
    (["--impl", "sdpa_flash", "-N", "64", "--deep", "zzz", "--list"], "--deep 'zzz' matches no case to run of custom"),
    (["--impl", "sdpa_flash", "-N", "64", "--deep-only"], "--deep-only: no deep case to run in custom"),
    (["--impl", "examples.gemm.gemm:IMPL", "-N", "64"], "--impl needs the shapes: at least -M -N -K"),
    (["--impl", "examples.gemm.gemm:IMPL", "-M", "8", "-N", "8", "-K", "0"], "-K takes positive integers"),
    (["--problem", "gemm", "--impl", "sdpa_flash", "-M", "8", "-N", "8", "-K", "8"],
     "implementation sdpa_flash solves attention, not gemm"),
    (["--impl", "sdpa_flash,examples.gemm.gemm:IMPL", "-N", "8"], "--impl mixes problems ['attention', 'gemm']"),
    (["--problem", "nope", "--impl", "sdpa_flash", "-N", "8"], "unknown problem 'nope'; known: attention"),
])
def test_bad_arguments_give_a_one_line_error(argv, message, capsys, monkeypatch):
    with pytest.raises(SystemExit) as exc:
        _main(argv, monkeypatch)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = err.splitlines()  # one line, no usage block before it
    assert line.startswith("nsightlab capture: error: ") and message in line
    assert line.endswith(" (see nsightlab capture --help)")


def test_an_implementation_whose_module_needs_torch_says_so(tmp_path, capsys, monkeypatch):
    """--list needs no GPU, but it imports a module:callable implementation: without torch, say that torch
    is missing (not "is it on PYTHONPATH?"); a module that is not there still gets the PYTHONPATH hint."""
    (tmp_path / "impl_that_needs_torch.py").write_text("import torch\n\n\ndef attn(q, k, v, *, causal=False, "
                                                       "scale=None):\n    return q\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    for spec, words, not_words in (("impl_that_needs_torch:attn", "needs torch, which is not installed here: "
                                    "pip install torch", "PYTHONPATH"),
                                   ("no_such_module_xyz:attn", "No module named 'no_such_module_xyz' (is it on "
                                    "PYTHONPATH", "pip install")):
        with pytest.raises(SystemExit) as exc:
            _main(["--impl", spec, "-N", "64", "--list"], monkeypatch)
        assert exc.value.code == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert words in line and not_words not in line, line


def test_a_sweep_that_would_run_no_case_exits_2_saying_why(capsys, monkeypatch):
    """Every case refused (an option the implementation does not take): --list shows the cases with their
    reasons, then one error line, exit 2; a capture does not start."""
    argv = ["--impl", "flash_mma", "-B", "1", "-H", "1", "-N", "1024", "-D", "64", "--option", "bogus=1"]
    with pytest.raises(SystemExit) as exc:
        _main([*argv, "--list"], monkeypatch)
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "# custom: 0 case(s) to run, 2 skipped" and out.count("[skipped: flash_mma: unknown") == 2
    (line,) = err.splitlines()
    assert line.startswith("nsightlab capture: error: no case would run: all 2 case(s) of sweep custom are skipped "
                           "(flash_mma: unknown option(s) bogus; accepted: "), line
    with pytest.raises(SystemExit) as exc:
        _main(argv, monkeypatch)
    assert exc.value.code == 2 and "no case would run" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # nothing matching --only: the same
        _main(["--suite", "seqlen", "--only", "zzz", "--list"], monkeypatch)
    assert exc.value.code == 2 and "no case would run: sweep seqlen matching --only 'zzz' has no case" in \
        capsys.readouterr().err
    assert _main(["--suite", "bench", "--list"], monkeypatch) == 0  # a benchmark-only sweep has no cases to run
    assert _main(["--suite", "bench-fp8", "--list"], monkeypatch) == 0


def test_store_validation_errors(tmp_path):
    src = Path(__file__).resolve().parent.parent / "profiles" / "nvidia-h200" / "blocksize"
    import shutil

    cap = tmp_path / "blocksize"
    shutil.copytree(src, cap)
    validate(cap, open_reports=False)
    log = find_file(cap, "ncu.log")  # compacted (ncu.log.xz) in the committed capture
    log.write_bytes(log.read_bytes()[:-10])
    with pytest.raises(ProfileError, match=rf"{re.escape(log.name)}: .* bytes, the manifest says .*truncated"):
        validate(cap, open_reports=False)
    shutil.copy(src / log.name, log)
    data = bytearray((cap / "ceilings.json").read_bytes())
    data[5] = ord("X") if data[5] != ord("X") else ord("Y")
    (cap / "ceilings.json").write_bytes(bytes(data))
    with pytest.raises(ProfileError, match="ceilings.json: SHA-256 does not match"):
        validate(cap, open_reports=False)
    (cap / "manifest.json").unlink()
    with pytest.raises(ProfileError, match="no manifest.json"):
        validate(cap)
    os.remove(cap / "ceilings.json")


def test_truncated_compressed_report_is_a_clear_error(tmp_path):
    from nsightlab.parse.ncu import ncu_frame
    from nsightlab.store.captures import find_file

    src = find_file(Path(__file__).resolve().parent.parent / "profiles" / "nvidia-h200" / "blocksize", "ncu.ncu-rep")
    assert src is not None and src.suffix in (".xz", ".gz")
    bad = tmp_path / src.name
    bad.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    os.environ["NSIGHTLAB_CACHE"] = str(tmp_path / "cache")
    try:
        with pytest.raises(ProfileError, match="corrupt or truncated"):
            ncu_frame(bad)
    finally:
        del os.environ["NSIGHTLAB_CACHE"]


def test_manifest_json_written_last():
    # the manifest is the capture's completeness marker: its file table covers every other file
    for cap in list_captures(Path(__file__).resolve().parent.parent / "profiles"):
        man = json.loads((cap.path / "manifest.json").read_text())
        on_disk = {p.name for p in cap.path.iterdir() if p.is_file()} - {"manifest.json"}
        assert on_disk == set(man["files"]), cap.label


def test_one_manifest_writer_for_captured_and_imported_folders(tmp_path):
    from nsightlab.store import importer, manifest

    (tmp_path / "small.log").write_text("ok\n")
    (tmp_path / "big.csv").write_text("x\n" * (1 << 20))  # over the store's compaction threshold
    man = manifest.build(name="n", description="d", origin="captured", created="20250101-000000",
                         gpu={"name": "G"}, environment={"git_commit": "abc", "host": "h"}, tools=["ncu"],
                         range_schemas=[attention.schema("attn")], commands=[{"step": "x", "argv": ["x"]}], cases=[])
    assert (man["schema"], man["suite"], man["git_commit"], man["cases"]) == (manifest.SCHEMA, "n", "abc", [])
    assert man["range_schemas"] == [attention.schema("attn").to_json()]
    written = manifest.write(tmp_path, man)
    assert written == json.loads((tmp_path / "manifest.json").read_text())
    assert "small.log" in written["files"] and "big.csv" not in written["files"] and "manifest.json" not in written["files"]
    assert any(name.startswith("big.csv.") for name in written["files"]) and written["compacted"]
    validate(tmp_path, open_reports=False)
    assert not hasattr(C, "SCHEMA") and not hasattr(importer, "SCHEMA")  # one schema constant, in store.manifest


def test_an_interrupted_application_replay_says_how_many_passes_ran(tmp_path):
    """Under application replay the workload runs every case once a replay pass, so "43 of 43 cases had finished"
    alone read as done while the fifth pass was in flight: the message says how many whole runs the step's
    workload made and how far the next one got."""
    (tmp_path / "cases_ncu.jsonl").write_text("".join(f'{{"range": "r{i % 3}", "status": "ok"}}\n' for i in range(8)))
    (tmp_path / "cases_nsys.jsonl").write_text("".join(f'{{"range": "r{i}", "status": "ok"}}\n' for i in range(3)))
    assert C._reruns(tmp_path, 3) == {"ncu": (2, 2)}
    assert C._reruns(tmp_path, 0) == {}
    (tmp_path / "cases_ncu.jsonl.running").write_text("r2")
    import types
    plan = types.SimpleNamespace(name="decode", runnable=[1, 2, 3])
    msg = C._keep_failed(KeyboardInterrupt(), plan, tmp_path, tmp_path.parent, "now")
    assert ("3 of 3 case(s) had finished" in msg and "The case in flight (ncu step): r2." in msg
            and "The ncu step's workload had run every case 2 time(s) (application replay: once a replay pass) and 2 "
                "case(s) of the next run." in msg and "nsys step's" not in msg), msg


def test_the_capture_expands_its_sweep_once_and_hands_the_workloads_its_cases(tmp_path, monkeypatch):
    """The plan is computed once: the capture expands the sweep into cases once, writes them beside sweep.toml
    (cases.json, each Case.to_json), and every step's workload reads them (--cases, Case.from_json); the stand-in
    workload fails if it is handed the sweep to expand again."""
    from nsightlab.run import sweep as S

    py, ncu, nsys = _tools(tmp_path)
    sweep = _mine()
    calls = []
    real = S.Sweep._expand
    monkeypatch.setattr(S.Sweep, "_expand", lambda self, load: calls.append(self.name) or real(self, load))
    dest = C.capture(sweep, tmp_path / "profiles", ncu=str(ncu), nsys=str(nsys), python=str(py), echo=lambda s: None)
    assert calls == ["mine"]
    man = validate(dest, open_reports=False)
    planned = S.read_cases(dest / S.CASES_FILE)
    assert planned.cases == sweep.cases() and [c.range for c in planned.cases] == [c["range"] for c in man["cases"]]
    for step in ("ncu", "nsys"):
        argv = next(c["argv"] for c in man["commands"] if c["step"] == step)
        assert "--sweep" not in argv and Path(argv[argv.index("--cases") + 1]).name == S.CASES_FILE
