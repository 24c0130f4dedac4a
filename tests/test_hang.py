"""nsightlab.run.hang: narrowing down the Nsight Compute sections under which a kernel stalls (no GPU: fake ncu)."""

from __future__ import annotations

import stat
import sys
import time

import pytest

from nsightlab.core.metrics import DEEP_SECTIONS
from nsightlab.run import hang


def test_the_set_narrows_to_the_sections_that_stall_together():
    seen: list[list[str]] = []

    def stalls_with(*culprits):
        def stalls(subset):
            seen.append(subset)
            return set(culprits) <= set(subset)
        return stalls

    assert hang.minimal_stalling(DEEP_SECTIONS, stalls_with("SchedulerStats")) == ["SchedulerStats"]
    assert len(seen) <= 8  # halving: a handful of runs, not one per section
    pair = ("MemoryWorkloadAnalysis_Chart", "SourceCounters")  # in different halves: leave-one-out finds both
    assert hang.minimal_stalling(DEEP_SECTIONS, stalls_with(*pair)) == list(pair)
    assert hang.minimal_stalling(["A"], stalls_with("A")) == ["A"]


def _script(path, body):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_run_is_cut_off_at_the_warning_or_the_timeout(tmp_path):
    warn = _script(tmp_path / "warn", f"echo '==WARNING== {hang.SLOW_LAUNCH}. If this continues ...'\nexec sleep 60\n")
    t0 = time.monotonic()
    assert hang.run_ncu([warn], tmp_path / "w.log", timeout=30, echo=lambda s: None)[0] == hang.STALL
    assert time.monotonic() - t0 < 15 and hang.SLOW_LAUNCH in (tmp_path / "w.log").read_text()
    quiet = _script(tmp_path / "quiet", "exec sleep 60\n")
    verdict, secs = hang.run_ncu([quiet], tmp_path / "q.log", timeout=1, echo=lambda s: None)
    assert verdict == hang.STALL and secs < 15
    assert hang.run_ncu([_script(tmp_path / "ok", "echo done\n")], tmp_path / "o.log", 30, lambda s: None)[0] == hang.DONE
    assert hang.run_ncu([_script(tmp_path / "bad", "exit 3\n")], tmp_path / "b.log", 30, lambda s: None)[0] == hang.FAILED


def test_the_command_narrows_a_fake_stall_and_says_so(tmp_path, capsys):
    """A fake ncu that stalls whenever WarpStateStats and LaunchStats are both asked for, and under application
    replay too: the verdict names the two, and the runs' logs are kept."""
    ncu = _script(tmp_path / "ncu", """
case "$*" in
  *"--section LaunchStats"*"--section WarpStateStats"*)
    case "$*" in *"--cache-control none"*) echo fine; exit 0 ;; esac
    echo "==WARNING== Launching the workload is taking more time than expected."; exec sleep 60 ;;
esac
echo '==PROF== Disconnected'
""")
    out = tmp_path / "out"
    rc = hang.main(["--sweep", "blocksize", "--only", "flash_simt:forward:.*N=1024,D=64,dtype=float16,causal=0,block_size=16",
                    "--ncu", ncu, "--out", str(out), "--timeout", "20"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "verdict: LaunchStats,WarpStateStats stall(s) these cases" in text
    assert "with application replay the set stalls, with --cache-control none it finishes" in text
    assert (out / "run01.log").exists() and (out / "sweep.toml").exists()


def test_bad_arguments_say_what_is_accepted(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        hang.main(["--sweep", "blocksize", "--only", "flash_simt", "--ncu", str(tmp_path / "no-ncu")])
    assert "ncu" in capsys.readouterr().err and not list(tmp_path.iterdir())  # nothing written before the check
    with pytest.raises(SystemExit) as e:
        hang.main(["--sweep", "blocksize", "--only", "no-such-range-xyz", "--dry-run"])
    assert e.value.code == 2 and "matches no case" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        hang.main(["--sweep", "blocksize", "--only", "flash_simt", "--timeout", "0"])
    assert "--timeout must be > 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        hang.main(["--sweep", "no-such-sweep", "--only", "x"])
    assert "unknown sweep" in capsys.readouterr().err


def test_dry_run_prints_the_deep_tier_command(tmp_path, capsys):
    assert hang.main(["--sweep", "blocksize", "--only", "flash_simt:forward:.*N=1024,D=64,", "--dry-run",
                      "--out", str(tmp_path)]) == 0
    line = capsys.readouterr().out
    assert all(f"--section {s}" in line for s in DEEP_SECTIONS) and "--import-source yes" in line
    assert "--clock-control none" in line and sys.executable in line
