"""scripts/cluster_bench.py's arithmetic and process handling (the captures themselves need GPUs: its log and JSON
are committed under profiles/_bench/)."""

import importlib.util
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("cluster_bench", ROOT / "scripts" / "cluster_bench.py")
cb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cb)


def test_a_shards_fixed_and_per_case_cost_come_from_two_sizes():
    fit = cb.fixed_and_per_case({"shards": [{"seconds": 65.21}], "cases": 18},
                                {"shards": [{"seconds": 104.23}], "cases": 72})
    assert fit == {"fixed_s": 52.2, "per_case_s": 0.723, "cases": [18, 72], "shard_s": [65.21, 104.23]}
    assert cb.fixed_and_per_case({"shards": [], "cases": 18}, {"shards": [{"seconds": 1.0}], "cases": 72}) is None


def test_sweep_overrides_replace_the_sweeps_own_values_and_add_new_flags():
    args = cb.sweep("-D", "128", "--replay-mode", "kernel")
    assert args[args.index("-D") + 1] == "128" and args.count("-D") == 1
    assert args[-2:] == ["--replay-mode", "kernel"] and cb.SWEEP[cb.SWEEP.index("-D") + 1] == "64,128"


def test_a_watched_command_is_acted_on_at_its_line(tmp_path, monkeypatch):
    monkeypatch.setattr(cb, "time_left", lambda: 60.0)
    code = "import time; print('starting', flush=True); print('go now', flush=True); time.sleep(30); print('late')"
    rc = cb._run_watched([sys.executable, "-c", code], tmp_path / "log", "go now",
                         lambda proc: proc.send_signal(signal.SIGTERM) or "stopped")
    log = (tmp_path / "log").read_text()
    assert rc == -signal.SIGTERM and "### cluster_bench: stopped" in log and "late" not in log
    assert cb._run_watched([sys.executable, "-c", "print('x')"], tmp_path / "log2") == 0


def test_only_instruction_counts_must_match_exactly_traffic_and_spread_are_reported(monkeypatch):
    import pandas as pd

    idx = pd.MultiIndex.from_tuples([("r0", "k"), ("r1", "k")], names=["range", "kernel_full"])
    a = pd.DataFrame({"smsp__inst_executed.sum": [10.0, 20.0], "smsp__inst_executed.max": [3.0, 5.0],
                      "dram__bytes.sum": [100.0, 200.0]}, index=idx)
    b = a.copy()
    b["smsp__inst_executed.max"] = [4.0, 5.0]  # which SM ran which block
    b["dram__bytes.sum"] = [150.0, 200.0]      # what the caches held
    frames = {"a": (a, None), "b": (b, None)}
    monkeypatch.setattr(cb, "counters", lambda folder: frames[folder.name])
    out = cb.compare({"folder": "a"}, {"folder": "b"})
    assert out["exact_metrics"] == ["smsp__inst_executed.sum"] and out["exact_unequal"] == []
    assert set(out["unequal"]) == {"smsp__inst_executed.max", "dram__bytes.sum"}
    b["smsp__inst_executed.sum"] = [10.0, 21.0]
    assert cb.compare({"folder": "a"}, {"folder": "b"})["exact_unequal"] == ["smsp__inst_executed.sum"]
