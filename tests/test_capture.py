"""Capture: command lines, tool discovery, error messages, and the store's atomic write (no GPU:
the profilers and the Python that runs the workload are stand-in scripts)."""

import json
import os
import stat
from pathlib import Path

import pytest

from nsightlab import capture as C
from nsightlab import metrics as M
from nsightlab import tools as T
from nsightlab.store import ProfileError, list_captures, validate


def test_ncu_command_profiles_only_ranges_with_clocks_left_alone():
    cmd = C.ncu_command("/x/ncu", ["py", "-m", "w"], "out/ncu")
    assert cmd[0] == "/x/ncu" and cmd[-3:] == ["py", "-m", "w"]
    assert cmd[cmd.index("--nvtx-include") + 1] == "regex:^fk:.*/" and "--nvtx" in cmd
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--metrics") + 1].split(",") == M.metric_names()
    assert cmd[cmd.index("--export") + 1] == "out/ncu"
    base = C.ncu_command("ncu", [], "o", clock_control="base")
    assert base[base.index("--clock-control") + 1] == "base"
    with pytest.raises(ValueError, match="clock_control"):
        C.ncu_command("ncu", [], "o", clock_control="boost")
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


FAKE_PYTHON = """#!/usr/bin/env python3
import json, sys
args = sys.argv[1:]
if args[:2] == ["-m", "flash_kernels.ceilings"]:
    out = args[args.index("--out") + 1]
    json.dump({"ceilings": {"copy_d2d": {"bytes": 1, "ms": 1, "bytes_per_s": 1.0}},
               "environment": {"gpu": {"name": "Fake GPU X", "l2_bytes": 1 << 20}, "git_commit": "abc"}}, open(out, "w"))
    print("ceilings measured")
else:
    print("workload", " ".join(args))
"""

FAKE_NCU = """#!/bin/sh
if [ "$1" = "--import" ]; then echo '"ID","Kernel Name"'; echo '"",""'; exit 0; fi
if [ -n "$FAKE_NCU_FAIL" ]; then echo "==ERROR== ERR_NVGPUCTRPERM - no permission"; exit 1; fi
while [ "$1" != "--export" ]; do shift; done
echo '==PROF== Profiling "k_kernel" - 0: 0%....50%....100% - 5 passes'
printf 'report' > "$2.ncu-rep"
"""


def test_capture_is_atomic_idempotent_and_keeps_the_previous_on_failure(tmp_path, monkeypatch):
    py = _exe(tmp_path / "python", FAKE_PYTHON)
    ncu = _exe(tmp_path / "ncu", FAKE_NCU)
    profiles = tmp_path / "profiles"
    dest = C.capture("blocksize", profiles, ncu=str(ncu), python=str(py), echo=lambda s: None)
    assert dest == profiles / "fake-gpu-x" / "blocksize"
    man = validate(dest, open_reports=False)
    assert man["ncu"]["max_passes_per_kernel"] == 5 and man["ncu"]["clock_control"] == "none"
    assert man["ncu"]["replay_mode"] == "kernel"  # the suite's own: long kernels, kernel replay
    assert {"ncu.ncu-rep", "ncu_raw.csv", "ceilings.json", "ncu.log"} <= set(man["files"])
    ncu_argv = next(c["argv"] for c in man["commands"] if "--nvtx-include" in c["argv"])
    assert "--warmup-refs-only" not in ncu_argv  # kernel replay: warm-ups run unpatched, keep them
    assert man["parameters"]["cases"] and "timings_seconds" in man
    first = (dest / "manifest.json").read_text()
    C.capture("blocksize", profiles, ncu=str(ncu), python=str(py), echo=lambda s: None)  # re-run: replaced whole
    assert [c.label for c in list_captures(profiles)] == ["fake-gpu-x/blocksize"]
    second = (dest / "manifest.json").read_text()
    monkeypatch.setenv("FAKE_NCU_FAIL", "1")
    with pytest.raises(C.CaptureError, match="failed.*previous capture.*untouched"):
        C.capture("blocksize", profiles, ncu=str(ncu), python=str(py), echo=lambda s: None)
    assert (dest / "manifest.json").read_text() == second != ""  # the good capture survives
    failed = list(profiles.glob(".failed-blocksize-*"))
    assert failed and "ERR_NVGPUCTRPERM" in (failed[0] / "FAILED.txt").read_text()
    assert first != ""
    monkeypatch.delenv("FAKE_NCU_FAIL")
    dest = C.capture("blocksize", profiles, ncu=str(ncu), python=str(py), replay_mode="application",
                     echo=lambda s: None)
    man = validate(dest, open_reports=False)
    ncu_argv = next(c["argv"] for c in man["commands"] if "--nvtx-include" in c["argv"])
    assert man["ncu"]["replay_mode"] == "application" and ncu_argv[ncu_argv.index("--replay-mode") + 1] == "application"
    assert "--warmup-refs-only" in ncu_argv  # application replay: our kernels' warm-ups would run patched
    assert man["ceilings_measured_by"] == "this capture"


def test_a_later_suite_of_the_same_command_reuses_the_ceilings(tmp_path):
    py = _exe(tmp_path / "python", FAKE_PYTHON)
    ncu = _exe(tmp_path / "ncu", FAKE_NCU)
    first = C.capture("blocksize", tmp_path / "a", ncu=str(ncu), python=str(py), echo=lambda s: None)
    dest = C.capture("blocksize", tmp_path / "b", ncu=str(ncu), python=str(py), ceilings_from=first,
                     echo=lambda s: None)
    man = validate(dest, open_reports=False)
    assert "earlier capture of the same command" in man["ceilings_measured_by"]
    assert not any(c["step"] == "ceilings" for c in man["commands"])
    assert man["ceilings"]["copy_d2d"]["bytes_per_s"] == 1.0 and "ceilings.json" in man["files"]


def test_store_validation_errors(tmp_path):
    src = Path(__file__).resolve().parent.parent / "profiles" / "nvidia-h200" / "blocksize"
    import shutil

    cap = tmp_path / "blocksize"
    shutil.copytree(src, cap)
    validate(cap, open_reports=False)
    log = cap / "ncu.log"
    log.write_bytes(log.read_bytes()[:-10])
    with pytest.raises(ProfileError, match="ncu.log: .* bytes, the manifest says .*truncated"):
        validate(cap, open_reports=False)
    shutil.copy(src / "ncu.log", log)
    data = bytearray((cap / "ceilings.json").read_bytes())
    data[5] = ord("X") if data[5] != ord("X") else ord("Y")
    (cap / "ceilings.json").write_bytes(bytes(data))
    with pytest.raises(ProfileError, match="ceilings.json: SHA-256 does not match"):
        validate(cap, open_reports=False)
    (cap / "manifest.json").unlink()
    with pytest.raises(ProfileError, match="no manifest.json"):
        validate(cap)
    os.remove(cap / "ceilings.json")


def test_truncated_gzip_report_is_a_clear_error(tmp_path):
    from nsightlab import parse

    src = Path(__file__).resolve().parent.parent / "profiles" / "nvidia-h200" / "blocksize" / "ncu.ncu-rep.gz"
    bad = tmp_path / "ncu.ncu-rep.gz"
    bad.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    os.environ["NSIGHTLAB_CACHE"] = str(tmp_path / "cache")
    try:
        with pytest.raises(ProfileError, match="corrupt or truncated"):
            parse.ncu_frame(bad)
    finally:
        del os.environ["NSIGHTLAB_CACHE"]


def test_manifest_json_written_last():
    # the manifest is the capture's completeness marker: its file table covers every other file
    for cap in list_captures(Path(__file__).resolve().parent.parent / "profiles"):
        man = json.loads((cap.path / "manifest.json").read_text())
        on_disk = {p.name for p in cap.path.iterdir() if p.is_file()} - {"manifest.json"}
        assert on_disk == set(man["files"]), cap.label
