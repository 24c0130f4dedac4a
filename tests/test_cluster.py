"""Many GPUs, one capture (nsightlab.run.cluster and capture_sharded), on a real ``distributed.LocalCluster`` of
processes with stand-in tools: the ceilings, the workload and ncu are the scripts below (no GPU, no Nsight), each
worker names a fake GPU of its own. What runs for real: the planning and balancing, the Dask tasks and their
retries, a worker process killed mid-shard, a crashing case, the merge into one folder and one manifest, an
interrupted capture and its --resume, two captures into one profiles folder at once, and the command line's
one-line refusals."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")

from nsightlab.cli import capture as CC  # noqa: E402
from nsightlab.run import capture as C  # noqa: E402
from nsightlab.run import cluster  # noqa: E402
from nsightlab.store.captures import validate  # noqa: E402
from nsightlab.store.read import ncu_files  # noqa: E402
from tests.test_capture import FAKE_NCU  # noqa: E402  the same stand-in ncu as the one-GPU capture tests

ROOT = Path(__file__).resolve().parent.parent

def sweep(name="mine"):
    """8 light cases (a user's implementation and sdpa_flash, two lengths, causal or not), imported in a blink."""
    from nsightlab.run.sweep import from_args

    return from_args(name, ["tests.stand_in:my_attention", "sdpa_flash"],
                     {"B": [2], "H": [4], "N": [256, 4096], "D": [64], "causal": [False, True]}, ["forward"], {}, ["ncu"])


# the Python the capture runs: fake ceilings, a workload that logs each case as run; it reads fake_control.json
# from the first folder above the sweep that holds one: {"crash": regex} exits 1 in a matching case (as a kernel
# fault takes the process down), {"hang": regex} stops in a matching case once (writing hung.json with the Dask
# worker's pid) until its profiler is gone
FAKE_PYTHON = """#!{python}
import json, os, re, sys, time
sys.path.insert(0, {root!r})
args = sys.argv[1:]
def arg(flag):
    return args[args.index(flag) + 1] if flag in args else None
def control():
    for d in __import__("pathlib").Path(arg("--cases") or arg("--out")).resolve().parents:
        if (d / "fake_control.json").exists():
            return d, json.loads((d / "fake_control.json").read_text())
    return None, {{}}
if args[:2] == ["-m", "nsightlab.run.ceilings"]:
    json.dump({{"ceilings": {{"copy_d2d": {{"bytes": 1, "ms": 1, "bytes_per_s": 1.0}}}},
               "environment": {{"gpu": {{"name": os.environ.get("FAKE_GPU_NAME", "Fake GPU X"), "l2_bytes": 1 << 20}},
                               "git_commit": "abc"}}}},
              open(arg("--out"), "w"))
elif args[:2] == ["-m", "nsightlab.run.workload"] and "--setup-only" in args:
    print("setup (fake)")
elif args[:2] == ["-m", "nsightlab.run.workload"]:
    from nsightlab.run import sweep as S
    from nsightlab.run.workload import running_file
    if "--sweep" in args:  # the capture hands each workload its cases (--cases): none expands the sweep again
        sys.exit("fake python: the workload was made to expand the sweep again instead of reading its cases")
    only = [args[i + 1] for i, a in enumerate(args) if a == "--only"]
    cases = [c for c in S.read_cases(arg("--cases")).cases if c.runnable and all(re.search(o, c.range) for o in only)]
    where, ctl = control()
    with open(arg("--log"), "a") as log:
        for c in cases:
            running_file(arg("--log")).write_text(c.range + "\\n")
            if ctl.get("crash") and re.search(ctl["crash"], c.range):
                sys.exit("fake workload: illegal memory access in " + c.range)
            if ctl.get("hang") and re.search(ctl["hang"], c.range) and not (where / "hung.json").exists():
                ncu = os.getppid()
                worker = int(open(f"/proc/{{ncu}}/stat").read().rsplit(")", 1)[1].split()[1])
                (where / "hung.json").write_text(json.dumps({{"worker": worker, "range": c.range}}))
                while os.getppid() == ncu:  # until the profiler (killed with its worker) is gone
                    time.sleep(0.1)
                sys.exit(1)
            log.write(json.dumps({{"range": c.range, "impl": c.impl, "pass": c.pass_, "status": "ok"}}) + "\\n")
            log.flush()
    running_file(arg("--log")).unlink(missing_ok=True)
else:
    sys.exit("fake python: unexpected " + " ".join(args))
"""



def fake_gpu() -> dict:
    """A worker's GPU: the LocalCluster names its workers 0, 1, ...: GPU 0, GPU 1, ... of one host."""
    i = int(distributed.get_worker().name)
    os.environ["FAKE_GPU_NAME"] = "Fake GPU X"  # what the stand-in ceilings, started by this worker, report
    return {"index": i, "uuid": f"GPU-fake-{i}", "name": "Fake GPU X", "host": "fakehost"}


def _exe(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    d = tmp_path_factory.mktemp("tools")
    return (str(_exe(d / "python", FAKE_PYTHON.format(python=sys.executable, root=str(ROOT)))),
            str(_exe(d / "ncu", FAKE_NCU)))


@pytest.fixture(scope="module")
def client():
    """Two worker processes (nannies restart a killed one), one thread each: two fake GPUs."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=50) as lc, Client(lc) as cl:
        yield cl


def _sharded(tools, profiles, client, **kw):
    py, ncu = tools
    return C.capture_sharded(sweep(), profiles, client=client, ncu=ncu, python=py, identify=fake_gpu,
                             echo=kw.pop("echo", lambda s: None), **kw)


def _cases(man):
    return {c["range"]: c["status"] for c in man["cases"]}


# --------------------------------------------------------------------------- planning (no cluster)


def test_balance_is_longest_first_even_and_deterministic():
    costs = [16, 1, 1, 16, 1, 1, 16, 1, 16, 1]
    items = [cluster.Item("ncu", [f"r{i}"], c) for i, c in enumerate(costs)]
    shards = cluster.balance(items, 4)
    assert [s.cost for s in shards] == sorted((s.cost for s in shards), reverse=True)  # longest first
    assert max(s.cost for s in shards) - min(s.cost for s in shards) <= 1
    assert sorted(r for s in shards for r in s.ranges("ncu")) == sorted(f"r{i}" for i in range(10))
    for s in shards:  # each shard's cases in the sweep's order
        assert s.ranges("ncu") == sorted(s.ranges("ncu"), key=lambda r: int(r[1:]))
    again = cluster.balance(items, 4)
    assert [s.ranges("ncu") for s in again] == [s.ranges("ncu") for s in shards]
    assert [s.index for s in cluster.balance(items, 2, first_index=5)] == [5, 6]
    assert len(cluster.balance(items[:2], 8)) == 2  # no empty shard


def test_case_cost_is_work_times_passes():
    small, big = {"flop": 1e12, "bytes": 1e9}, {"flop": 16e12, "bytes": 4e9}
    assert cluster.case_cost(big, 5) > cluster.case_cost(small, 5) > 0
    assert cluster.case_cost(small, 40) == pytest.approx(8 * cluster.case_cost(small, 5))
    assert cluster.case_cost(None, 5) == pytest.approx(5 * cluster.PASS_OVERHEAD_S)  # no model: the overhead ranks it


def test_shard_files_sit_beside_each_other():
    assert C._shard_name("ncu.ncu-rep", "s01") == "ncu-s01.ncu-rep"
    assert C._shard_name("cases_ncu.jsonl", "s01") == "cases_ncu-s01.jsonl"
    assert C._shard_name("ncu_raw.csv", "s01") == "ncu_raw-s01.csv"
    assert cluster.anchored(["a.b", "c"]) == r"^(?:a\.b|c)$"


# --------------------------------------------------------------------------- bad input: one line each

GPUS = [{"index": 0, "uuid": "GPU-a", "name": "NVIDIA H200"}, {"index": 1, "uuid": "GPU-b", "name": "NVIDIA H200"},
        {"index": 2, "uuid": "GPU-c", "name": "NVIDIA H100 80GB HBM3"}]


@pytest.mark.parametrize("argv, message", [
    (["--gpus", "7"], "--gpus 7: there is no GPU 7 on this machine; its GPUs: 0 (NVIDIA H200), 1 (NVIDIA H200), 2 ("),
    (["--gpus", "0,x"], "--gpus 0,x: 'x' is not a GPU index"),
    (["--gpus", "0,0"], "--gpus 0,0: GPU 0 is given twice"),
    (["--gpus", "all"], "the GPUs are of different models: NVIDIA H200 (GPU 0, 1); NVIDIA H100 80GB HBM3 (GPU 2)"),
    (["--gpus", "1,2"], "--allow-mixed"),
    (["--gpus", "0", "--scheduler", "tcp://x:1"], "--gpus and --scheduler: give one"),
])
def test_bad_gpu_flags_are_one_line(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(cluster, "local_gpus", lambda: GPUS)
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    base = ["--impl", "sdpa_flash", "-B", "1", "-H", "2", "-N", "128", "-D", "64", "--tools", "ncu",
            "--profiles", "/nonexistent-profiles"]
    assert CC.main(base + argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("nsightlab capture: error: "), err


def test_mixed_models_are_taken_with_allow_mixed(monkeypatch):
    monkeypatch.setattr(cluster, "local_gpus", lambda: GPUS)
    a = CC.parser("x", CC.problems.get("attention")).parse_args(["--gpus", "all", "--allow-mixed"])
    assert CC.where_from_args(a).gpus == (0, 1, 2)


def test_no_gpu_here_is_one_line(capsys, monkeypatch):
    monkeypatch.setattr(cluster, "local_gpus", lambda: [])
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    assert CC.main(["--impl", "sdpa_flash", "-N", "128", "-D", "64", "--gpus", "all", "--profiles", "/nonexistent-profiles"]) == 2
    assert "this machine has no GPU that nvidia-smi lists" in capsys.readouterr().err


def test_an_unreachable_scheduler_is_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", 1.0)
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    t0 = time.monotonic()
    assert CC.main(["--suite", "blocksize", "--scheduler", "tcp://127.0.0.1:9",
                   "--profiles", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--scheduler tcp://127.0.0.1:9: the scheduler cannot be reached within 1 s" in err and err.count("\n") == 1
    assert time.monotonic() - t0 < 30
    assert CC.main(["--suite", "blocksize", "--scheduler-file", str(tmp_path / "none.json"),
                   "--profiles", str(tmp_path)]) == 2
    assert "--scheduler-file" in capsys.readouterr().err and not list(tmp_path.glob(".tmp-*"))


def test_resume_of_nothing_is_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    assert CC.main(["--resume", "blocksize", "--profiles", str(tmp_path)]) == 2
    assert "--resume blocksize: no interrupted sharded capture" in capsys.readouterr().err


# --------------------------------------------------------------------------- on a LocalCluster of processes


def test_one_sweep_two_gpus_one_capture(tools, tmp_path, client):
    """Two workers: two balanced shards, one folder, one manifest; each case says its GPU; the cases and their
    statuses are those of the one-GPU capture of the same sweep."""
    dest = _sharded(tools, tmp_path / "p", client)
    assert dest == tmp_path / "p" / "fake-gpu-x" / "mine"
    man = validate(dest, open_reports=False)
    assert [s["index"] for s in man["cluster"]["shards"]] == [0, 1]
    assert {c["gpu"]["uuid"] for c in man["cases"]} == {"GPU-fake-0", "GPU-fake-1"}
    for c in man["cases"]:
        assert c["gpu"]["index"] == int(c["gpu"]["uuid"][-1]) and c["shard"] in (0, 1)
    costs = [s["cost_estimate"] for s in man["cluster"]["shards"]]
    assert abs(costs[0] - costs[1]) <= 0.1 * max(costs)  # the 4 heavy cases split 2 and 2
    assert [f.name for f in ncu_files(dest)] == ["ncu-s00.ncu-rep", "ncu-s01.ncu-rep"]
    assert {"cases_ncu-s00.jsonl", "cases_ncu-s01.jsonl", "ceilings.json", "ceilings-gpu0.json", "ceilings-gpu1.json",
            "sweep.toml"} <= set(man["files"])
    assert [g["tag"] for g in man["gpus"]] == ["gpu0", "gpu1"] and all(g["ceilings"] for g in man["gpus"])
    assert not [p for p in dest.iterdir() if p.name.startswith(".") or p.is_dir()]
    assert {c["step"] for c in man["commands"]} >= {"ceilings", "ncu", "ncu-raw-csv"}
    assert man["ncu"]["kernels_profiled"] == 2 and man["ncu"]["max_passes_per_kernel"] == 5
    py, ncu = tools
    one = validate(C.capture(sweep(), tmp_path / "one", ncu=ncu, python=py, echo=lambda s: None),
                   open_reports=False)
    assert _cases(man) == _cases(one) and set(_cases(man).values()) == {"ok"} and len(man["cases"]) == 8


def mixed_gpu() -> dict:
    """Worker 0 a GPU of one model, worker 1 of another (a cluster of two GPU generations)."""
    i = int(distributed.get_worker().name)
    os.environ["FAKE_GPU_NAME"] = ("Fake GPU X", "Fake GPU Y")[i]
    return {"index": 0, "uuid": f"GPU-mixed-{i}", "name": os.environ["FAKE_GPU_NAME"], "host": f"host{i}"}


def test_mixed_models_give_one_capture_per_model(tools, tmp_path, client):
    """--allow-mixed: each GPU model's cases become a capture of their own in that model's folder, with that GPU's
    ceilings alone, so every page reads one GPU's peaks; each says where the other cases are; together they hold
    every case, each once, as the one-GPU capture does."""
    py, ncu = tools
    dest = C.capture_sharded(sweep(), tmp_path / "p", client=client, ncu=ncu, python=py, identify=mixed_gpu,
                             allow_mixed=True, echo=lambda s: None)
    parts = {p.parent.name: validate(p, open_reports=False) for p in sorted((tmp_path / "p").glob("*/mine"))}
    assert dest.name == "mine" and set(parts) == {"fake-gpu-x", "fake-gpu-y"}
    assert not [p for p in (tmp_path / "p").iterdir() if p.name.startswith(".")], "a temporary folder left behind"
    ran: dict[str, str] = {}
    for slug, man in parts.items():
        assert man["gpu"]["name"] == {"fake-gpu-x": "Fake GPU X", "fake-gpu-y": "Fake GPU Y"}[slug]
        assert len(man["gpus"]) == 1 and man["gpus"][0]["name"] == man["gpu"]["name"]
        other = "fake-gpu-y" if slug == "fake-gpu-x" else "fake-gpu-x"
        for c in man["cases"]:
            if c["status"] == "ok":
                assert c["range"] not in ran and c["gpu"]["uuid"] == man["gpus"][0]["uuid"]
                ran[c["range"]] = slug
            else:
                assert c["status"].startswith("ran on Fake GPU") and f"{other}/mine" in c["status"], c["status"]
    one = validate(C.capture(sweep(), tmp_path / "one", ncu=ncu, python=py, echo=lambda s: None), open_reports=False)
    assert set(ran) == {r for r, s in _cases(one).items() if s == "ok"} and len(set(ran.values())) == 2


def test_mixed_models_failing_after_the_split_stay_whole_and_resume(tools, tmp_path, client, monkeypatch):
    """A mixed-model capture whose second part fails while it is merged: no part is published, no temporary part is
    left behind, and the one .failed-* folder holds every shard, so --resume (running nothing again) gives the two
    captures an uninterrupted run gives."""
    py, ncu = tools
    profiles = tmp_path / "p"
    real_merge, calls = C._merge, []

    def merge(folder, res, gs):
        calls.append(folder)
        if len(calls) == 2:
            raise RuntimeError("a part that cannot be merged")
        return real_merge(folder, res, gs)

    monkeypatch.setattr(C, "_merge", merge)
    with pytest.raises(C.CaptureError, match="--resume mine"):
        C.capture_sharded(sweep(), profiles, client=client, ncu=ncu, python=py, identify=mixed_gpu, allow_mixed=True,
                          echo=lambda s: None)
    assert len(calls) == 2
    assert not list(profiles.glob(".tmp-*")) and not list(profiles.glob("*/mine")), "a part was left or published"
    (failed,) = profiles.glob(".failed-mine-*")
    shards = [json.loads(f.read_text()) for f in failed.glob(".shards/*/shard.json")]
    assert sum(len(d["statuses"]) + len(d["failed"]) for d in shards) == 8
    monkeypatch.setattr(C, "_merge", real_merge)
    lines: list[str] = []
    C.capture_sharded(None, profiles, client=client, ncu=ncu, python=py, identify=mixed_gpu, resume="mine",
                      allow_mixed=True, echo=lines.append)
    assert not [p for p in profiles.iterdir() if p.name.startswith(".")]
    parts = {p.parent.name: validate(p, open_reports=False) for p in sorted(profiles.glob("*/mine"))}
    assert set(parts) == {"fake-gpu-x", "fake-gpu-y"}
    ran = [c["range"] for man in parts.values() for c in man["cases"] if c["status"] == "ok"]
    assert len(ran) == len(set(ran)) == 8 and f"{len(shards)} shard(s) already done" in lines[0]


def test_a_crashing_case_is_marked_failed_and_the_sweep_goes_on(tools, tmp_path, client):
    profiles = tmp_path / "p"
    profiles.mkdir()
    bad = "attn:sdpa_flash:forward:B=2,H=4,N=256,D=64,dtype=float16,causal=1"
    (profiles / "fake_control.json").write_text(json.dumps({"crash": bad}))
    man = validate(_sharded(tools, profiles, client), open_reports=False)
    statuses = _cases(man)
    failed = [r for r, s in statuses.items() if s.startswith("failed:")]
    assert failed == [bad] and "crashed in this case" in statuses[failed[0]]
    assert sum(s == "ok" for s in statuses.values()) == 7
    shard = next(s for s in man["cluster"]["shards"] if s["failed"])
    assert shard["steps"]["ncu"]["attempts"] == 2 and any("crashed" in f for f in man["files"])


def test_a_worker_killed_mid_shard_its_shard_runs_again(tools, tmp_path, client):
    """The worker process running a shard is killed (SIGKILL) while its profiler runs: the nanny starts it again,
    Dask runs the shard again, the capture is complete, and the killed run's tools are gone."""
    profiles = tmp_path / "p"
    profiles.mkdir()
    (profiles / "fake_control.json").write_text(json.dumps({"hang": "my_attention:forward:.*N=4096,.*causal=1"}))
    killed = []

    def killer():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (profiles / "hung.json").exists():
            time.sleep(0.05)
        time.sleep(0.2)
        pid = json.loads((profiles / "hung.json").read_text())["worker"]
        killed.append(pid)
        os.kill(pid, signal.SIGKILL)

    t = threading.Thread(target=killer)
    t.start()
    dest = _sharded(tools, profiles, client)
    t.join()
    man = validate(dest, open_reports=False)
    assert set(_cases(man).values()) == {"ok"} and len(man["cases"]) == 8
    client.wait_for_workers(2, timeout=30)
    assert killed and killed[0] not in client.run(os.getpid).values()  # that process is gone, a new one serves


def test_interrupted_then_resumed_equals_uninterrupted(tools, tmp_path, client):
    """Ctrl-C once the first of four shards is done: a .failed-* folder that --resume finishes, running only the
    cases left; the result has the cases, statuses and files of an uninterrupted capture."""
    profiles = tmp_path / "p"
    said = []

    def echo(line):
        said.append(line)
        if "shards done" in line:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _sharded(tools, profiles, client, shards_per_gpu=2, echo=echo)
    (failed,) = profiles.glob(".failed-mine-*")
    assert (failed / "plan.json").exists() and "--resume mine" in said[-1]
    time.sleep(1)  # the shards that were running see the stop event
    # the shards that had finished by then (the first, and on a busy machine another that ended beside it)
    done = [json.loads(f.read_text()) for f in failed.glob(".shards/*/shard.json")]
    lines = []
    dest = C.capture_sharded(None, profiles, client=client, ncu=tools[1], python=tools[0], identify=fake_gpu,
                             resume="mine", echo=lines.append)
    assert not list(profiles.glob(".failed-*")) and not list(profiles.glob(".tmp-*"))
    man = validate(dest, open_reports=False)
    ref = validate(_sharded(tools, tmp_path / "ref", client, shards_per_gpu=2), open_reports=False)
    assert _cases(man) == _cases(ref) and set(_cases(man).values()) == {"ok"}
    assert done and f"{len(done)} shard(s) already done" in lines[0]
    indices = {d["index"] for d in done}
    kept = [c for c in man["cases"] if c["shard"] in indices]
    assert len(kept) == sum(len(d["statuses"]) for d in done) and 0 < len(kept) < 8  # those cases did not run again
    assert all(c["shard"] > max(indices) for c in man["cases"] if c not in kept)  # the rest: new shards


def test_two_captures_into_one_profiles_folder_at_once(tools, tmp_path):
    """Two captures of different sweeps at once both land; two of the same name at once: one lands, the other fails
    saying so (its output kept aside), and the one that landed is whole."""
    import dataclasses

    py, ncu = tools
    profiles = tmp_path / "p"
    mine = sweep()
    out: dict[str, object] = {}

    def run(key, s):
        try:
            out[key] = C.capture(s, profiles, ncu=ncu, python=py, echo=lambda line: None)
        except C.CaptureError as exc:
            out[key] = exc

    def both(a, b):
        out.clear()
        threads = [threading.Thread(target=run, args=kv) for kv in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return dict(out)

    got = both(("a", mine), ("b", dataclasses.replace(mine, name="other")))
    assert all(isinstance(v, Path) for v in got.values()), got
    for v in got.values():
        validate(v, open_reports=False)
    got = both(("a", dataclasses.replace(mine, name="same")), ("b", dataclasses.replace(mine, name="same")))
    good = [v for v in got.values() if isinstance(v, Path)]
    refused = [v for v in got.values() if isinstance(v, C.CaptureError)]
    assert len(good) == 1 and len(refused) == 1 and "already exists" in str(refused[0]), got
    validate(good[0], open_reports=False)
    assert not list(profiles.glob(".tmp-*"))


def test_a_sharded_light_tier_under_application_replay_says_what_each_shard_pays():
    from nsightlab.run.capture import replay_note

    note = replay_note("application", 4, ncu=True)
    assert "each of the 4 light-tier shards restarts the workload once per Nsight Compute replay pass" in note
    assert "--replay-mode kernel" in note
    # one shard, kernel replay, or no Nsight Compute in the capture: nothing to say
    assert replay_note("application", 1, ncu=True) is None
    assert replay_note("kernel", 4, ncu=True) is None
    assert replay_note("application", 4, ncu=False) is None
