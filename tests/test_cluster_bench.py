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
