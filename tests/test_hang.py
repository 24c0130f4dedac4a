"""nsightlab.run.hang: narrowing down the Nsight Compute sections under which a kernel stalls (no GPU: fake ncu)."""

from __future__ import annotations

import stat
import sys
import time

import pytest

from nsightlab.cli import hang as hang_cmd
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
    seen.clear()
    many = [f"m{i}" for i in range(64)]
    assert hang.minimal_stalling(many, stalls_with("m41")) == ["m41"]
    assert len(seen) <= 12  # about 2 log2(64) runs for a lone culprit among 64
    assert hang.minimal_stalling(many, stalls_with("m3", "m60")) == ["m3", "m60"]
    seen.clear()
    assert hang.minimal_stalling(DEEP_SECTIONS, stalls_with(*DEEP_SECTIONS[2:5])) == list(DEEP_SECTIONS[2:5])
    assert len(seen) == len({tuple(x) for x in seen})  # no subset is run twice


_SECTION = """Identifier: "{ident}"
DisplayName: "{ident} shown"
Header {{
  Metrics {{
    Label: "Throughput"
    Name: "{m0}"
  }}
  Metrics {{
    Label: "Busy"
    Name: "{m1}"
  }}
}}
Body {{
  Items {{
    Table {{ Label: "Breakdown" Metrics {{ Name: "breakdown:{m2}" }} }}
  }}
}}
"""


def test_section_files_name_their_metrics(tmp_path):
    (tmp_path / "A.section").write_text(_SECTION.format(ident="Alpha", m0="dram__bytes.sum", m1="lts__t_sectors.sum",
                                                        m2="gpu__throughput.avg.pct_of_peak_sustained_elapsed"))
    (tmp_path / "B.section").write_text(_SECTION.format(ident="Beta", m0="sm__cycles_active.avg", m1="dram__bytes.sum",
                                                        m2="sm__throughput.avg"))
    assert hang.section_metrics(tmp_path, "Alpha") == [
        "dram__bytes.sum", "lts__t_sectors.sum", "breakdown:gpu__throughput.avg.pct_of_peak_sustained_elapsed"]
    assert hang.section_metrics(tmp_path, "Gamma") == []
    (tmp_path / "C.section").write_text('''Identifier: "Gamma"
MetricDefinitions { MetricDefinitions { Name: "derived__own_ratio" Expression: "a__b / c__d" } }
Header {
  Metrics {
    Name: "sm__warps_active.avg"
    Options { Name: "sm__warps_active_old.avg" Filter { MaxArch: CC_75 } }
  }
}
''')
    assert hang.section_metrics(tmp_path, "Gamma") == ["sm__warps_active.avg"]  # no stand-ins, no definitions
    bin_ = tmp_path / "ncu-2025" / "bin"
    bin_.mkdir(parents=True)
    (bin_.parent / "sections").mkdir()
    (bin_.parent / "sections" / "A.section").write_text("Identifier: \"A\"\n")
    assert hang.section_folder(bin_ / "ncu") is None  # not beside ncu, no nsight-compute* sibling
    (bin_ / "sections").mkdir()
    (bin_ / "sections" / "A.section").write_text("Identifier: \"A\"\n")
    assert hang.section_folder(bin_ / "ncu") == bin_ / "sections"


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
    rc = hang_cmd.main(["--sweep", "blocksize", "--only", "flash_simt:forward:.*N=1024,D=64,dtype=float16,causal=0,block_size=16",
                    "--ncu", ncu, "--out", str(out), "--timeout", "20"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "verdict: LaunchStats,WarpStateStats stall(s) these cases" in text
    assert "with application replay the set stalls, with --cache-control none it finishes" in text
    assert (out / "run01.log").exists() and (out / "sweep.toml").exists()
    assert "metrics: Nsight Compute's section files were not found" in text


def test_the_command_narrows_the_stalling_sections_metrics(tmp_path, capsys):
    """A fake ncu that stalls whenever the metric lts__t_sectors_op_atom.sum is collected, by its section or by
    name: the verdict names the section, then that metric (the section files are fakes too)."""
    folder = tmp_path / "sections"
    folder.mkdir()
    for ident, metrics in (("MemoryWorkloadAnalysis", ["dram__bytes.sum", "lts__t_sectors_op_atom.sum", "l1tex__t_bytes.sum"]),
                           ("SpeedOfLight", ["sm__throughput.avg", "gpu__time_duration.sum", "dram__bytes.sum"])):
        (folder / f"{ident}.section").write_text(
            f'Identifier: "{ident}"\n' + "".join(f'Metrics {{ Name: "{m}" }}\n' for m in metrics))
    ncu = _script(tmp_path / "ncu", """
case "$*" in
  *"--section MemoryWorkloadAnalysis "*|*"lts__t_sectors_op_atom.sum"*)
    echo "==WARNING== Launching the workload is taking more time than expected."; exec sleep 60 ;;
esac
echo '==PROF== Disconnected'
""")
    rc = hang_cmd.main(["--sweep", "blocksize", "--only", "flash_simt:forward:.*N=1024,D=64,dtype=float16,causal=0,block_size=16",
                    "--ncu", ncu, "--out", str(tmp_path / "out"), "--timeout", "20", "--section-folder", str(folder),
                    "--sections", "SpeedOfLight,MemoryWorkloadAnalysis,Occupancy"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "verdict: MemoryWorkloadAnalysis stall(s) these cases" in text
    assert "metrics: 3 in MemoryWorkloadAnalysis" in text
    assert "verdict: of their metrics, lts__t_sectors_op_atom.sum alone stall(s) these cases" in text


def test_bad_arguments_say_what_is_accepted(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        hang_cmd.main(["--sweep", "blocksize", "--only", "flash_simt", "--ncu", str(tmp_path / "no-ncu")])
    assert "ncu" in capsys.readouterr().err and not list(tmp_path.iterdir())  # nothing written before the check
    with pytest.raises(SystemExit) as e:
        hang_cmd.main(["--sweep", "blocksize", "--only", "no-such-range-xyz", "--dry-run"])
    assert e.value.code == 2 and "matches no case" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        hang_cmd.main(["--sweep", "blocksize", "--only", "flash_simt", "--timeout", "0"])
    assert "argument --timeout: takes a number greater than 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        hang_cmd.main(["--sweep", "no-such-sweep", "--only", "x"])
    assert "unknown sweep" in capsys.readouterr().err


def test_dry_run_prints_the_deep_tier_command(tmp_path, capsys):
    assert hang_cmd.main(["--sweep", "blocksize", "--only", "flash_simt:forward:.*N=1024,D=64,", "--dry-run",
                      "--out", str(tmp_path)]) == 0
    line = capsys.readouterr().out
    assert all(f"--section {s}" in line for s in DEEP_SECTIONS) and "--import-source yes" in line
    assert "--clock-control none" in line and sys.executable in line
