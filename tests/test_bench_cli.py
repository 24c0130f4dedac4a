import math

import pytest

torch = pytest.importorskip("torch")

from flash_kernels import bench, model  # noqa: E402
from flash_kernels.bench_suites import SUITES, Config, get_suite, suite_passes  # noqa: E402
from flash_kernels.testing import random_attention_inputs, random_qkv  # noqa: E402
from nsightlab.store.captures import load_bench  # noqa: E402


def test_suites_hold_the_documented_configurations():
    mixed, _, _ = get_suite("mixed")
    assert [c.name for c in mixed][:2] == ["Small-1", "Small-2"] and len(mixed) == 10
    assert {c.N for c in mixed} >= {32, 100}
    d128, _, _ = get_suite("d128")
    assert all(c.B * c.N == 16384 and c.H == 16 and c.D == 128 for c in d128)
    conv, _, _ = get_suite("convention")
    assert len(conv) == 24 and all(c.B * c.N == 16384 and c.H * c.D == 2048 for c in conv)
    with pytest.raises(ValueError, match="known suites"):
        get_suite("nope")
    assert set(SUITES) == {"mixed", "d128", "convention", "gqa", "decode", "d256", "fp8"}
    assert all(c.Hkv is None and c.Nk is None for c in [*mixed, *d128, *conv])


def test_gqa_suite():
    cfgs, dtypes, desc = get_suite("gqa")
    assert dtypes == ("float16",) and "grouped-query" in desc
    assert len(cfgs) == 3 * 3 * 2
    assert all(c.H == 32 and c.D == 128 and c.B * c.N == 16384 and c.Nk is None for c in cfgs)
    assert {(c.Hkv, c.N, c.causal) for c in cfgs} == {(h, n, causal) for h in (32, 8, 1) for n in (2048, 4096, 8192)
                                                      for causal in (False, True)}
    by_name = {c.name: c for c in cfgs}
    assert by_name["Hkv8-N4096-causal"] == Config("Hkv8-N4096-causal", 4, 32, 4096, 128, True, Hkv=8)
    assert by_name["Hkv1-N8192-full"].kv_heads == 1 and by_name["Hkv1-N8192-full"].keys == 8192


def test_decode_suite():
    cfgs, dtypes, desc = get_suite("decode")
    assert dtypes == ("float16", "bfloat16") and "decode" in desc and "causal" in desc
    assert len(cfgs) == 3 * 4 * 3
    assert all(c.B == 8 and c.H == 32 and c.D == 128 and not c.causal for c in cfgs)
    assert {(c.N, c.Nk, c.Hkv) for c in cfgs} == {(nq, nk, h) for nq in (1, 4, 16)
                                                  for nk in (1024, 4096, 16384, 65536) for h in (32, 8, 1)}
    c = {c.name: c for c in cfgs}["Nq1-Nk4096-Hkv8"]
    assert (c.N, c.Nk, c.Hkv, c.kv_heads, c.keys) == (1, 4096, 8, 8, 4096)
    # a decode step is inference: the suite times the forward pass only, whatever --passes asks
    assert suite_passes("decode", ["forward", "backward"]) == ["forward"]
    assert suite_passes("decode", ["backward"]) == []
    assert suite_passes("gqa", ["forward", "backward"]) == ["forward", "backward"]
    # the benchmark's FLOPs and bytes: every query against every cached key; K/V dominate the bytes
    assert model.flops(c.B, c.H, c.N, c.D, causal=c.causal, Hkv=c.Hkv, Nk=c.Nk) == 4 * 8 * 32 * 1 * 4096 * 128
    assert model.flops(c.B, c.H, c.N, c.D, pass_="backward", Hkv=c.Hkv, Nk=c.Nk) == 2.5 * 4 * 8 * 32 * 4096 * 128
    q, kv, lse = 8 * 32 * 1 * 128 * 2, 8 * 8 * 4096 * 128 * 2, 4 * 8 * 32
    assert model.compulsory_bytes(c.B, c.H, c.N, c.D, "float16", Hkv=c.Hkv, Nk=c.Nk) == 2 * q + 2 * kv + lse
    assert bench.scores(c) == 8 * 32 * 1 * 4096


def test_config_names_are_unique_and_dicts_round_trip():
    for name, (cfgs, _, _) in SUITES.items():
        assert len({c.name for c in cfgs}) == len(cfgs), name
        for c in cfgs:
            d = c.as_dict()
            assert set(d) == {"name", "B", "H", "N", "D", "causal", "Hkv", "Nk"}
            assert Config(**d) == c
    with pytest.raises(ValueError, match="H=32 must be a multiple of Hkv=3"):
        Config("bad", 1, 32, 64, 64, Hkv=3)


def test_inputs_seeds_and_sdpa_arguments():
    plain = Config("x", 2, 4, 64, 32, True)
    assert bench.input_seed(plain) == 64 + 32  # the inputs of every committed benchmark capture
    assert bench.input_seed(Config("x", 2, 4, 64, 32, True, Hkv=4, Nk=64)) == 96
    seeds = {bench.input_seed(Config("x", 2, 4, 64, 32, Hkv=h, Nk=n)) for h in (4, 2, 1) for n in (64, 17, 300)}
    assert len(seeds) == 9
    assert bench.sdpa_kwargs(plain) == {"is_causal": True}
    assert bench.sdpa_kwargs(Config("x", 2, 4, 64, 32, Hkv=4, Nk=9)) == {"is_causal": False}
    assert bench.sdpa_kwargs(Config("x", 2, 4, 64, 32, Hkv=2)) == {"is_causal": False, "enable_gqa": True}


def test_random_attention_inputs():
    q, k, v, g = random_attention_inputs(2, 4, 10, 8, torch.float16, Hkv=2, Nk=7, seed=5, device="cpu")
    assert q.shape == g.shape == (2, 4, 10, 8) and k.shape == v.shape == (2, 2, 7, 8)
    assert all(t.dtype == torch.float16 for t in (q, k, v, g))
    # self-attention: exactly the tensors random_qkv gives (the benchmark's inputs do not change)
    same = random_attention_inputs(2, 4, 10, 8, torch.float32, seed=5, device="cpu", mean=0.25)
    for a, b in zip(same, random_qkv(2, 4, 10, 8, torch.float32, device="cpu", seed=5, mean=0.25, n=4), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="multiple of Hkv=3"):
        random_attention_inputs(1, 4, 8, 8, torch.float32, Hkv=3, device="cpu")


def test_a_variant_that_refuses_the_shape_is_a_skip(monkeypatch):
    def refuse(*args, **kwargs):
        raise ValueError("flash_mma takes k/v with as many heads\nand keys as q")

    monkeypatch.setattr(bench._ops, "_prepare", refuse)
    cfg = Config("Nq1-Nk64-Hkv2", 1, 4, 1, 64, Hkv=2, Nk=64)
    q, k, v, g = random_attention_inputs(1, 4, 1, 64, torch.float16, Hkv=2, Nk=64, device="cpu")
    with pytest.raises(bench.Skip, match="^flash_mma takes k/v with as many heads and keys as q$"):
        bench.implementation_call("flash_mma", cfg, (q, k, v, g), "forward", {}, bench.Limits())
    # materializing variants are judged on B*H*N*Nk scores
    with pytest.raises(bench.Skip, match="materializes 2.56e\\+02 scores"):
        bench.implementation_call("naive", cfg, (q, k, v, g), "forward", {}, bench.Limits(max_score_elems=255))


def test_csv_rows_name_hkv_and_nk_and_old_csvs_read_as_self_attention(tmp_path):
    assert bench.CSV_FIELDS[:8] == ["suite", "config", "B", "H", "Hkv", "N", "Nk", "D"]
    row = {"suite": "decode", "config": "Nq1-Nk4096-Hkv8", "B": 8, "H": 32, "Hkv": 8, "N": 1, "Nk": 4096, "D": 128,
           "causal": False, "dtype": "float16", "impl": "sdpa_flash", "kind": "sdpa", "pass": "forward",
           "status": "ok", "ms": 0.05, "tflops": 1.5, "speed_vs_sdpa_flash": 1.0, "options": "x"}
    path = bench.write_results([row], tmp_path / "new", "decode", {"suite": "decode"})
    text = path.read_text().splitlines()
    assert text[0].startswith("suite,config,B,H,Hkv,N,Nk,D,causal,") and text[1].startswith(
        "decode,Nq1-Nk4096-Hkv8,8,32,8,1,4096,128,False,")
    # an old CSV (no Hkv/Nk columns), alone and next to a new one: the missing values are H and N
    for folder in (tmp_path / "old", tmp_path / "new"):
        folder.mkdir(exist_ok=True)
        (folder / "mixed.csv").write_text("suite,config,B,H,N,D,causal,dtype,impl,kind,pass,options,status,ms,tflops\n"
                                          "mixed,Small-1,1,1,128,64,False,float16,sdpa_flash,sdpa,forward,x,ok,0.01,0.2\n")
        (folder / "mixed.manifest.json").write_text("{}")
    df, _ = load_bench(tmp_path / "old")
    assert list(df["Hkv"]) == [1] and list(df["Nk"]) == [128]
    df, _ = load_bench(tmp_path / "new")
    got = {r["config"]: (r["H"], r["Hkv"], r["N"], r["Nk"]) for _, r in df.iterrows()}
    assert got == {"Nq1-Nk4096-Hkv8": (32, 8, 1, 4096), "Small-1": (1, 1, 128, 128)}
    assert str(df["Hkv"].dtype) == str(df["H"].dtype) == "int64"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cli_without_gpu_says_so(capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--suite", "mixed"])
    assert exc.value.code == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_slow_cases_skip_only_cases_with_no_less_work():
    slow = bench.SlowCases()
    key = ("naive", "backward", "float16")
    slow.check(key, 1e9)  # nothing recorded yet: runs
    slow.record(key, 2e9, "B4-H16-N4096-D128", 1492.0)
    slow.check(key, 1.9e9)  # less work than the slow case: still runs
    with pytest.raises(bench.Skip, match=r"B4-H16-N4096-D128 \(no more work\) took 1492 ms"):
        slow.check(key, 2e9)
    with pytest.raises(bench.Skip):
        slow.check(key, 8e9)
    slow.check(("naive", "forward", "float16"), 8e9)  # another pass is judged on its own
    slow.check(("naive", "backward", "float32"), 8e9)  # and another dtype
    slow.record(key, 1e9, "smaller", 900.0)  # a smaller slow case lowers the bar
    with pytest.raises(bench.Skip, match="smaller"):
        slow.check(key, 1.5e9)


def test_run_on_the_cpu_checks_times_and_skips(monkeypatch):
    """The run loop without a GPU: torch_cpu's rows are checked against the fp64 reference and timed; a
    variant that does not take the dtype is a skipped row with its reason."""
    monkeypatch.setattr(bench, "L2Flusher", lambda mode="read": None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(bench, "random_attention_inputs",
                        lambda *a, **kw: random_attention_inputs(*a, **kw, device="cpu"))
    lines: list[str] = []
    rows = bench.run("mixed", ["flash_mma"], ["torch_cpu"], ["forward", "backward"], ["float32"], ["Small-1"],
                     reps=2, budget_ms=1.0, log=lines.append)
    assert [(r["impl"], r["pass"], r["kind"]) for r in rows] == [
        ("flash_mma", "forward", "kernel"), ("torch_cpu", "forward", "cpu"),
        ("flash_mma", "backward", "kernel"), ("torch_cpu", "backward", "cpu")]
    skipped, cpu = rows[0], rows[1]
    assert skipped["status"] == "skipped: flash_mma does not support float32" and "ms" not in skipped
    assert cpu["status"] == "ok" and cpu["rel_l2"] < 1e-6 and 1 <= cpu["reps"] <= 2
    assert cpu["ms_min"] <= cpu["ms"] <= cpu["ms_max"] and cpu["tflops"] > 0
    assert all(r["status"] == "ok" and r["rel_l2"] < 1e-5 for r in rows if r["impl"] == "torch_cpu")
    assert all(r["speed_vs_sdpa_flash"] != r["speed_vs_sdpa_flash"] for r in rows)  # NaN: no SDPA flash row
    assert "skipped: flash_mma does not support float32" in lines[0] and "config done" in lines[-1]


def test_the_fp64_backward_reference_goes_one_batch_element_at_a_time_where_it_would_not_fit(monkeypatch):
    """A long decode backward's fp64 reference (B=8, H=32, Nk=64k: 16 GiB per K/V-shaped tensor) does not fit
    an 80 GB GPU whole: it is computed per batch element, to the same values."""
    import torch

    from flash_kernels import reference

    gen = torch.Generator().manual_seed(1)
    q = torch.randn(3, 4, 5, 16, generator=gen, dtype=torch.float64) + 0.3
    k, v = (torch.randn(3, 2, 37, 16, generator=gen, dtype=torch.float64) + 0.3 for _ in range(2))
    g = torch.randn(3, 4, 5, 16, generator=gen, dtype=torch.float64) + 0.3
    calls = []
    real = reference.reference_backward
    monkeypatch.setattr(bench, "reference_backward", lambda *a, **kw: calls.append(a[0].shape[0]) or real(*a, **kw))
    whole = bench._reference_backward(q, k, v, g, True)
    assert calls == [3]
    calls.clear()
    split = bench._reference_backward(q, k, v, g, True, free=1.0)  # one byte free: nothing fits whole
    assert calls == [1, 1, 1]
    assert all(torch.equal(a, b) for a, b in zip(whole, split, strict=True))
    # results compared where the reference lives
    assert bench._beside(whole[0], split[0]) is whole[0]
    errs = bench._errors(tuple(t.float() for t in whole), split, "backward")
    assert errs["rel_l2"] < 1e-6


def test_the_gpu_wait_ahead_of_a_repeat_covers_the_slowest_host_time_twice():
    assert bench.hold_ms([]) == 0.1
    assert bench.hold_ms([0.03, 0.05]) == pytest.approx(0.12)
    assert bench.hold_ms([40.0]) == 5.0  # capped: a call that slow is not launch-bound


def test_flush_modes_are_checked_and_passed_through(monkeypatch, capsys):
    """The L2 flush mode: an unknown one is refused before any CUDA call, naming the accepted ones; the CLI
    offers exactly those; run() hands its choice to the flusher (read by default)."""
    with pytest.raises(ValueError, match="L2 flush mode 'clear' is not one of read, write, none"):
        bench.L2Flusher("clear")
    with pytest.raises(SystemExit):
        bench._parser().parse_args(["--flush", "clear"])
    assert "invalid choice: 'clear'" in capsys.readouterr().err
    assert bench._parser().parse_args([]).flush == "read"
    seen: list[str] = []
    monkeypatch.setattr(bench, "L2Flusher", lambda mode="read": seen.append(mode))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(bench, "random_attention_inputs",
                        lambda *a, **kw: random_attention_inputs(*a, **kw, device="cpu"))
    bench.run("mixed", [], ["torch_cpu"], ["forward"], ["float32"], ["Small-1"], reps=1, budget_ms=1.0,
              log=lambda s: None)
    bench.run("mixed", [], ["torch_cpu"], ["forward"], ["float32"], ["Small-1"], reps=1, budget_ms=1.0,
              log=lambda s: None, flush="write")
    assert seen == ["read", "write"]


def test_an_interrupted_run_keeps_its_finished_rows(monkeypatch, tmp_path, capsys):
    """SIGINT (a deadline) during a suite: run() hands back the configurations finished before it; main writes
    them with a manifest that says the suite is partial (and how the L2 was flushed), runs no later suite and
    exits 130."""
    calls = []

    def one_config(state, cfg, dtype, impls, passes, log):
        calls.append(cfg.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return [{"suite": state.suite, "config": cfg.name, "dtype": dtype, "pass": "forward", "impl": "torch_cpu",
                 "status": "ok", "ms": 1.0}]

    monkeypatch.setattr(bench, "_run_config", one_config)
    monkeypatch.setattr(bench, "L2Flusher", lambda mode="read": None)
    monkeypatch.setattr(bench, "GpuHold", lambda: None)
    with pytest.raises(bench.Interrupted) as stop:
        bench.run("mixed", [], ["torch_cpu"], ["forward"], ["float32"], ["Small-1", "Small-2"])
    assert [r["config"] for r in stop.value.rows] == ["Small-1"] and calls == ["Small-1", "Small-2"]

    import json

    from flash_kernels import _build

    calls.clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(_build, "build_all", lambda modules=None: {})
    monkeypatch.setattr("nsightlab.core.environment.environment", lambda: {"gpu": {"name": "none (test)"}})
    code = bench.main(["--suite", "mixed,d128", "--refs", "torch_cpu", "--variants", "", "--dtypes", "float32",
                       "--configs", "Small-1,Small-2", "--flush", "write", "--out", str(tmp_path)])
    assert code == 130 and "interrupted during suite mixed" in capsys.readouterr().err
    manifest = json.loads((tmp_path / "mixed.manifest.json").read_text())
    assert manifest["rows"] == 1 and "interrupted" in manifest["partial"] and manifest["timing"]["flush"] == "write"
    assert not (tmp_path / "d128.manifest.json").exists()


def test_interleaved_timing_goes_round_robin(monkeypatch):
    """Each round times every setting once, in order, with its own flusher; each setting's repeats add up."""
    seen = []

    def fake(fn, flush, *, warmup, reps, budget_ms, hold=None):
        seen.append((fn(), flush))
        return bench.Repeats([float(len(seen))] * reps, [])

    monkeypatch.setattr(bench, "time_gpu", fake)
    times = bench.time_interleaved({"a": (lambda: "A", "fa"), "b": (lambda: "B", "fb")}, rounds=3, hold=None, reps=2)
    assert seen == [("A", "fa"), ("B", "fb")] * 3
    assert times == {"a": [1.0, 1.0, 3.0, 3.0, 5.0, 5.0], "b": [2.0, 2.0, 4.0, 4.0, 6.0, 6.0]}


def _gpu_case(impl: str, call_ms: float) -> bench._Case:
    row = {"impl": impl, "status": "ok"}
    return bench._Case(row, lambda: impl, flop=1e9, call_ms=call_ms)


def _timing_run(rounds: int) -> bench._Run:
    return bench._Run("s", {}, bench.Timing(warmup=3, reps=30, budget_ms=400.0, rounds=rounds), bench.Limits(),
                      "flusher", bench.SlowCases(), "hold")


def test_a_configurations_implementations_are_timed_round_robin(monkeypatch):
    """Each round times every GPU case in turn with a third of the repeats and budget (the first round with the full
    warm-up, later ones with one call); a call of 50 ms or more is timed in one go in the first round; a row's
    median, spread, repeat count and retimed repeats come from all its rounds."""
    seen = []

    def fake(fn, flush, *, warmup, reps, budget_ms, hold=None, min_reps=3):
        seen.append((fn(), warmup, reps, round(budget_ms, 1), min_reps))
        n = len(seen)
        return bench.Repeats([float(n)] * min(reps, 2), [0.01] * min(reps, 2), retimed=1, hold_ms=0.1 * n)

    monkeypatch.setattr(bench, "time_gpu", fake)
    cases = [_gpu_case("ours", 0.05), _gpu_case("slow", 80.0), _gpu_case("theirs", 0.04)]
    bench._time_cases(_timing_run(3), cases)
    assert seen == [("ours", 3, 10, 133.3, 1), ("slow", 0, 30, 400.0, 3), ("theirs", 3, 10, 133.3, 1),
                    ("theirs", 1, 10, 133.3, 1), ("ours", 1, 10, 133.3, 1),  # rotated by one: slow's turn skipped
                    ("theirs", 1, 10, 133.3, 1), ("ours", 1, 10, 133.3, 1)]
    cfg = Config("c", 1, 1, 64, 64, False)
    bench._finish(cases[0], cfg, "float16", "forward")
    row = cases[0].row
    assert row["reps"] == 6 and row["ms_min"] == 1.0 and row["ms_max"] == 7.0 and row["ms"] == 5.0
    assert row["retimed"] == 3 and row["hold_ms"] == pytest.approx(0.1)  # the first round's wait
    bench._finish(cases[1], cfg, "float16", "forward")
    assert cases[1].row["reps"] == 2 and cases[1].row["ms"] == 2.0
    seen.clear()
    bench._time_cases(_timing_run(1), [_gpu_case("ours", 0.05), _gpu_case("theirs", 0.04)])
    assert seen == [("ours", 3, 30, 400.0, 3), ("theirs", 3, 30, 400.0, 3)]  # one round: each in one go


def test_repeats_are_dealt_over_the_rounds_without_passing_reps_or_falling_below_three(monkeypatch):
    assert bench._shares(10, 3) == [4, 3, 3] and bench._shares(2, 3) == [1, 1, 0] and bench._shares(3, 1) == [3]
    asked = []

    def fake(fn, flush, *, warmup, reps, budget_ms, hold=None, min_reps=3):
        asked.append((reps, min_reps))
        return bench.Repeats([1.0] * reps, [0.01] * reps)

    monkeypatch.setattr(bench, "time_gpu", fake)
    for reps, total in ((4, 4), (30, 30), (2, 3), (1, 3)):  # at least 3 repeats, as in one go
        asked.clear()
        run = bench._Run("s", {}, bench.Timing(warmup=1, reps=reps, budget_ms=400.0, rounds=3), bench.Limits(),
                         "flusher", bench.SlowCases(), "hold")
        case = _gpu_case("ours", 0.05)
        bench._time_cases(run, [case])
        assert sum(r for r, _ in asked) == total and sum(m for _, m in asked) == 3, (reps, asked)


def test_a_pass_is_checked_whole_then_timed_and_its_calls_freed(monkeypatch):
    """Through _run_config: every implementation of a pass is checked (its first call) before any is timed, the
    GPU ones round-robin and torch_cpu after them; rows keep the implementations' order; a call slower than
    ONE_GO_MS the first time is called again and judged by that second time; the calls are freed on return."""
    import gc
    import weakref

    events: list[tuple[str, str]] = []

    class Call:
        def __init__(self, impl: str):
            self.impl = impl

        def __call__(self):
            return self.impl

    calls: dict[str, Call] = {}

    def implementation_call(impl, cfg, inputs, pass_, options, limits):
        calls[impl] = Call(impl)
        return calls[impl], {}

    first = {"a": 0.05, "b": 80.0}  # b's first call sets up: 80 ms, then 0.04

    def measured_call(fn):
        events.append(("check", fn.impl))
        ms = first.pop(fn.impl, 0.04)
        return fn(), ms, 1.0

    def fake_gpu(fn, flush, *, warmup, reps, budget_ms, hold=None, min_reps=3):
        events.append(("time", fn.impl))
        return bench.Repeats([0.5] * max(reps, 1), [0.01] * max(reps, 1))

    def fake_cpu(fn, *, reps, budget_ms):
        events.append(("time", fn.impl))
        return [2.0]

    monkeypatch.setattr(bench, "implementation_call", implementation_call)
    monkeypatch.setattr(bench, "measured_call", measured_call)
    monkeypatch.setattr(bench, "time_gpu", fake_gpu)
    monkeypatch.setattr(bench, "time_cpu", fake_cpu)
    monkeypatch.setattr(bench, "_errors", lambda result, expected, pass_: {"rel_l2": 0.0})
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(bench, "random_attention_inputs",
                        lambda *a, **kw: random_attention_inputs(*a, **kw, device="cpu"))
    cfg = get_suite("mixed")[0][0]
    run = bench._Run("mixed", {}, bench.Timing(warmup=1, reps=6, budget_ms=400.0, rounds=2), bench.Limits(),
                     "flusher", bench.SlowCases(), "hold")
    rows = bench._run_config(run, cfg, "float32", ["a", "torch_cpu", "b"], ["forward"], lambda s: None)
    assert [r["impl"] for r in rows] == ["a", "torch_cpu", "b"] and all(r["status"] == "ok" for r in rows)
    assert events == [("check", "a"), ("check", "b"), ("check", "b"),  # b called again: its first call set up
                      ("time", "a"), ("time", "b"), ("time", "b"), ("time", "a"), ("time", "torch_cpu")]
    assert [r["reps"] for r in rows] == [6, 1, 6]
    alive = [weakref.ref(c) for c in calls.values()]
    calls.clear()
    gc.collect()
    assert all(ref() is None for ref in alive)


def test_a_case_out_of_memory_while_timed_is_a_skipped_row_and_leaves_the_rounds(monkeypatch):
    seen = []

    def fake(fn, flush, *, warmup, reps, budget_ms, hold=None, min_reps=3):
        seen.append(fn())
        if fn() == "big" and len(seen) > 2:
            raise torch.cuda.OutOfMemoryError("out of memory")
        return bench.Repeats([1.0], [0.01])

    monkeypatch.setattr(bench, "time_gpu", fake)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    cases = [_gpu_case("small", 0.05), _gpu_case("big", 0.05)]
    bench._time_cases(_timing_run(3), cases)
    assert seen == ["small", "big", "big", "small", "small"]  # round 2 rotated: big first, out of memory
    assert cases[1].row["status"] == "skipped: out of GPU memory" and cases[0].row["status"] == "ok"


def test_rounds_below_one_are_refused_with_what_is_accepted(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--rounds", "0"])
    assert "--rounds takes 1 or more (1: each implementation timed in one go); got 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        bench.run("mixed", [], ["torch_cpu"], ["forward"], ["float32"], ["Small-1"], rounds=0)


class _FakeGpu:
    """torch.cuda's events and synchronize, and the host clock, for time_gpu on a machine without a GPU: the i-th
    call takes the host ``host[i]`` ms (the last entry thereafter) and the GPU ``kernel`` ms, and nothing else is
    queued: the GPU reaches a repeat's start event when the wait ahead of it ends, so a call that takes the host
    at least that long finds the start event passed (``query``) and its events time the host's excess too."""

    def __init__(self, host: list[float], kernel: float = 1.0):
        self.host, self.kernel, self.calls, self.now = list(host), kernel, 0, 0.0
        self.waits: list[float] = []
        self.recorded = 0
        self.pending = 0.0
        self.passed = False

    def clock(self) -> float:
        return self.now / 1e3

    def call(self) -> None:
        h = self.host[min(self.calls, len(self.host) - 1)]
        self.calls += 1
        self.now += h
        wait = self.waits[-1] if self.waits else 0.0
        self.passed = h >= wait
        self.pending = self.kernel + (h - wait if h >= wait else 0.0)

    def hold(self, ms: float) -> None:
        self.waits.append(ms)

    def install(self, monkeypatch) -> None:
        gpu = self

        class Event:
            def __init__(self, enable_timing: bool = False):
                self.t = 0.0

            def record(self):
                gpu.recorded += 1
                if gpu.recorded % 2 == 0:  # an end event: its repeat's call has run
                    self.t = gpu.pending

            def elapsed_time(self, end):
                return end.t

            def query(self):
                return gpu.passed

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
        monkeypatch.setattr(bench, "_now", self.clock)


def test_a_repeat_the_host_was_late_for_is_timed_again(monkeypatch):
    """Warm-up calls take 0.05 ms of host time, so the GPU waits 0.12 ms ahead of each repeat; the third timed call
    stalls the host for 0.5 ms, so its events time 1.0 + 0.5 - 0.12 ms. That repeat is timed again behind a wait
    sized by the stall (1.02 ms), and the repeats are the kernel's 1.0 ms alone."""
    gpu = _FakeGpu(host=[0.05, 0.05, 0.05, 0.05, 0.5, 0.05], kernel=1.0)
    gpu.install(monkeypatch)
    reps = bench.time_gpu(gpu.call, lambda: None, warmup=2, reps=4, budget_ms=1e9, hold=gpu.hold)
    assert reps.ms == [1.0] * 4 and reps.retimed == 1 and reps.late == 0
    assert reps.host_ms == pytest.approx([0.05] * 4)  # the re-timed repeat's host time replaces the stalled one
    assert gpu.waits == [pytest.approx(0.12)] * 4 + [pytest.approx(1.02)]
    assert reps.hold_ms == pytest.approx(0.12)  # the wait ahead of the repeats, for the CSV's hold_ms
    assert bench._row_line({"suite": "s", "config": "c", "dtype": "d", "pass": "p", "impl": "i", "status": "ok",
                            "ms": 1.0, "tflops": 1.0, "rel_l2": 0.0, "retimed": 1, "late": 0}).endswith(
        "(1 repeat(s) timed again: the host had not queued the call when the GPU reached it)")


def test_a_host_late_every_time_is_reported_after_the_retries(monkeypatch):
    """A host slower than any wait the cap allows (5 ms) stays late: its repeats are kept, and counted."""
    gpu = _FakeGpu(host=[0.05] + [9.0] * 20, kernel=1.0)
    gpu.install(monkeypatch)
    reps = bench.time_gpu(gpu.call, lambda: None, warmup=1, reps=3, budget_ms=1e9, hold=gpu.hold, retries=2)
    assert reps.late == 3 and reps.retimed == 3 and all(ms > 1.0 for ms in reps.ms)
    assert gpu.waits[-3:] == [5.0] * 3  # the second retry at the cap


def test_without_a_hold_nothing_is_retimed(monkeypatch):
    gpu = _FakeGpu(host=[0.05, 5.0, 5.0, 5.0], kernel=1.0)
    gpu.install(monkeypatch)
    reps = bench.time_gpu(gpu.call, lambda: None, warmup=1, reps=3, budget_ms=1e9, hold=None)
    assert reps.retimed == 0 and reps.late == 0 and len(reps.ms) == 3


def test_the_garbage_collector_is_off_while_calls_are_timed(monkeypatch):
    """A collection inside a warm-up call would size every repeat's wait by its pause: time_gpu turns Python's
    garbage collector off for its calls (as timeit does) and back on after, also when the call raises; a caller
    that had turned it off keeps it off."""
    import gc

    gpu = _FakeGpu(host=[0.05], kernel=1.0)
    gpu.install(monkeypatch)
    seen = []

    def call():
        seen.append(gc.isenabled())
        gpu.call()

    assert gc.isenabled()
    reps = bench.time_gpu(call, lambda: None, warmup=1, reps=3, budget_ms=1e9, hold=gpu.hold)
    assert seen and not any(seen) and gc.isenabled() and reps.ms == [1.0] * 3

    def broken():
        raise RuntimeError("kernel launch failed")

    with pytest.raises(RuntimeError):
        bench.time_gpu(broken, lambda: None, warmup=1, reps=3, budget_ms=1e9, hold=gpu.hold)
    assert gc.isenabled()
    gc.disable()
    try:
        bench.time_gpu(call, lambda: None, warmup=1, reps=3, budget_ms=1e9, hold=None)
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert math.isnan(bench.time_gpu(call, lambda: None, warmup=1, reps=3, budget_ms=1e9, hold=None).hold_ms)


def test_d256_suite_is_the_convention_at_head_dim_256_both_passes():
    cfgs, dtypes, desc = get_suite("d256")
    assert dtypes == ("float16", "bfloat16") and "256" in desc
    assert len(cfgs) == 12 and all(c.D == 256 and c.H == 8 and c.B * c.N == 16384 for c in cfgs)
    assert {(c.N, c.causal) for c in cfgs} == {(n, causal) for n in (512, 1024, 2048, 4096, 8192, 16384)
                                               for causal in (False, True)}
    assert suite_passes("d256", ["forward", "backward"]) == ["forward", "backward"]


def test_fp8_suite_times_the_fp8_calls_beside_the_fp16_forwards_that_matter_to_them():
    from flash_kernels.bench_suites import FP8_IMPLS, SUITE_IMPLS, suite_impls

    cfgs, dtypes, desc = get_suite("fp8")
    assert dtypes == ("float16",) and "FP8" in desc
    assert all(c.B * c.N == 16384 and c.H * c.D == 2048 for c in cfgs)
    assert {c.D for c in cfgs} == {64, 128, 256} and {c.causal for c in cfgs} == {False, True}
    assert {c.N for c in cfgs if c.D == 128} == {1024, 2048, 4096, 8192, 16384}
    assert suite_passes("fp8", ["forward", "backward"]) == ["forward"]
    every = [*bench.VARIANTS, *FP8_IMPLS, *bench.REFERENCES]
    assert suite_impls("fp8", every) == [i for i in every if i in SUITE_IMPLS["fp8"]]
    assert set(suite_impls("fp8", every)) == {*FP8_IMPLS, "flash_wgmma", "sdpa_cudnn", "sdpa_flash"}
    # every other suite leaves the FP8 calls out, whatever the selection
    assert suite_impls("convention", every) == [*bench.VARIANTS, *bench.REFERENCES]


def test_the_fp8_calls_are_selectable_and_an_unknown_name_lists_them():
    a = bench._parser().parse_args(["--suite", "fp8", "--variants", "flash_wgmma_fp8,flash_wgmma"])
    assert bench._selection(a).variants == ["flash_wgmma_fp8", "flash_wgmma"]
    assert "flash_wgmma_fp8_call" in bench._parser().parse_args([]).variants  # the default selects them
    with pytest.raises(ValueError, match="flash_wgmma_fp8_call") as exc:
        bench._selection(bench._parser().parse_args(["--variants", "flash_wgmma_fp9"]))
    assert "flash_wgmma_fp9" in str(exc.value)


def test_an_fp8_call_the_device_or_pass_refuses_is_a_skip_saying_why():
    cfg = get_suite("fp8")[0][0]
    inputs = random_attention_inputs(1, 2, 64, 64, torch.float16, device="cpu")
    for impl in bench.FP8_IMPLS:
        with pytest.raises(bench.Skip, match="forward only"):
            bench._fp8_call(impl, cfg, inputs, "backward")
        with pytest.raises(bench.Skip, match="CUDA tensors only"):
            bench.implementation_call(impl, cfg, inputs, "forward", {}, bench.Limits())


def test_run_times_only_the_suites_implementations_and_says_so(monkeypatch):
    seen = []
    monkeypatch.setattr(bench, "L2Flusher", lambda mode="read": None)
    monkeypatch.setattr(bench, "GpuHold", lambda: None)
    monkeypatch.setattr(bench, "_run_config", lambda run, cfg, dtype, impls, passes, log: seen.append(impls) or [])
    lines: list[str] = []
    bench.run("fp8", ["flash_mma", "flash_wgmma", *bench.FP8_IMPLS], ["sdpa_cudnn", "sdpa_math"], ["forward"],
              configs=["D128-N8192-full"], log=lines.append)
    assert seen == [["flash_wgmma", *bench.FP8_IMPLS, "sdpa_cudnn"]]
    assert any("only (bench_suites.SUITE_IMPLS" in line for line in lines)
    seen.clear()
    bench.run("d128", ["flash_wgmma", *bench.FP8_IMPLS], ["sdpa_cudnn"], ["forward"], configs=["B2-H16-N8192-D128"],
              log=lines.append)
    assert seen == [["flash_wgmma", "sdpa_cudnn"]]


def test_each_fp8_call_times_what_its_name_says(monkeypatch):
    """The kernel alone: quantized, rotated and V transposed once, outside the call; with Vt: attention_fp8 on the
    quantized inputs in the call; the whole call: attention_fp8_from in the call. All by attention_fp8_from's
    defaults."""
    from flash_kernels import fp8

    calls: list[str] = []

    def spy(name, result=None):
        def fn(*a, **kw):
            calls.append(name)
            if name == "_quantized":
                assert (a[3], a[6]) == (fp8.DEFAULT_ROTATE, fp8.DEFAULT_SCALES)
            if name == "attention_fp8_from":
                assert (kw["rotate"], kw["scales"]) == (fp8.DEFAULT_ROTATE, fp8.DEFAULT_SCALES)
            return result
        return fn

    pair = (torch.zeros(1), 1.0)
    monkeypatch.setattr(fp8, "_quantized", spy("_quantized", [pair, pair, pair]))
    monkeypatch.setattr(fp8, "_prepare", spy("_prepare", ("prepared",)))
    monkeypatch.setattr(fp8, "forward_vt", spy("forward_vt"))
    monkeypatch.setattr(fp8, "attention_fp8", spy("attention_fp8"))
    monkeypatch.setattr(fp8, "attention_fp8_from", spy("attention_fp8_from"))
    cfg = get_suite("fp8")[0][0]
    inputs = random_attention_inputs(1, 2, 64, 64, torch.float16, device="cpu")
    timed = {}
    for impl in bench.FP8_IMPLS:
        calls.clear()
        fn, opts = bench._fp8_call(impl, cfg, inputs, "forward")
        # the whole call records how it quantizes: these CPU inputs are not the fused kernels' (a CUDA tensor)
        quant = {"quant": "torch"} if impl == "flash_wgmma_fp8_call" else {}
        assert cfg.D == 64 and opts == {"rotate": fp8.DEFAULT_ROTATE, "scales": fp8.DEFAULT_SCALES, "o_sum": "fp32",
                                        **quant}
        calls.clear()
        fn()
        timed[impl] = list(calls)
    assert timed == {"flash_wgmma_fp8": ["forward_vt"], "flash_wgmma_fp8_vt": ["attention_fp8"],
                     "flash_wgmma_fp8_call": ["attention_fp8_from"]}


def test_fp8_options_reach_the_calls_that_take_them_and_bad_values_are_refused(monkeypatch):
    from flash_kernels import fp8

    seen = {}
    pair = (torch.zeros(1), 1.0)
    monkeypatch.setattr(fp8, "_quantized", lambda *a, **kw: [pair, pair, pair])
    monkeypatch.setattr(fp8, "_prepare", lambda *a, **kw: ("prepared",))
    monkeypatch.setattr(fp8, "forward_vt", lambda *a, **kw: seen.setdefault("forward_vt", kw))
    monkeypatch.setattr(fp8, "attention_fp8", lambda *a, **kw: seen.setdefault("attention_fp8", kw))
    cfg = get_suite("fp8")[0][0]
    inputs = random_attention_inputs(1, 2, 64, 64, torch.float16, device="cpu")
    fn, opts = bench._fp8_call("flash_wgmma_fp8", cfg, inputs, "forward", {"pingpong": 1, "o_sum": "tensor",
                                                                            "block_size": 32})
    fn()
    _, mu = fp8.centered_v(inputs[2])  # O summed in the tensor cores: V centred by default, its mean to the epilogue
    assert seen["forward_vt"].keys() == {"pingpong", "o_sum", "v_mean"} and torch.equal(seen["forward_vt"]["v_mean"],
                                                                                         mu.reshape(-1))
    assert seen.pop("forward_vt")["pingpong"] is True
    assert opts == {"rotate": fp8.DEFAULT_ROTATE, "scales": fp8.DEFAULT_SCALES, "o_sum": "tensor", "pingpong": 1,
                    "center_v": 1}
    fn, opts = bench._fp8_call("flash_wgmma_fp8", cfg, inputs, "forward", {"o_sum": "tensor", "center_v": 0})
    fn()
    assert seen.pop("forward_vt")["v_mean"] is None and "center_v" not in opts
    fn, opts = bench._fp8_call("flash_wgmma_fp8_vt", cfg, inputs, "forward", {"pingpong": 1})
    assert "pingpong" not in opts and seen["attention_fp8"]["o_sum"] is None  # the head dim's default
    assert opts["o_sum"] == "fp32"  # recorded as the call runs it
    d256 = next(c for c in get_suite("fp8")[0] if c.D == 256)
    assert bench._fp8_call("flash_wgmma_fp8_vt", d256, inputs, "forward")[1]["o_sum"] == "tensor"
    with pytest.raises(bench.Skip, match="tensor cores only"):  # the sum D = 256 lacks: the row says why
        bench._fp8_call("flash_wgmma_fp8", d256, inputs, "forward", {"o_sum": "fp32"})
    seen.clear()
    fn, opts = bench._fp8_call("flash_wgmma_fp8_vt", cfg, inputs, "forward", {"center_v": 1})
    assert opts["center_v"] == 1
    _, _, v, _ = inputs
    _, mu = fp8.centered_v(v)
    fn()  # the mean row goes to the kernel (its epilogue adds it), inside the timed call
    assert torch.equal(seen["attention_fp8"]["v_mean"], mu)
    assert "center_v" not in bench._fp8_call("flash_wgmma_fp8_vt", cfg, inputs, "forward")[1]
    bench._fp8_call("flash_wgmma_fp8", cfg, inputs, "forward", {"center_v": 1})[0]()  # the kernel alone: flat fp32
    assert torch.equal(seen["forward_vt"]["v_mean"], mu.reshape(-1))
    for bad, match in ((["--option", "pingpong=2"], "pingpong takes 0 or 1"), (["--option", "o_sum=fp16"], "o_sum"),
                       (["--option", "center_v=2"], "center_v takes 0 or 1")):
        with pytest.raises(ValueError, match=match):
            bench._selection(bench._parser().parse_args(bad))


def test_the_bench_builds_only_the_kernel_modules_its_selection_times():
    """An A/B of one module against a base tree must not rebuild every other module there before its first timing."""
    assert bench.modules_for(["flash_wgmma"], ["d128"]) == ["flash_wgmma_bwd", "flash_wgmma_fwd"]
    assert bench.modules_for(["flash_mma", "flash_wgmma_fp8_vt"], ["fp8"]) == \
        ["flash_wgmma_bwd", "flash_wgmma_fp8", "flash_wgmma_fwd"]  # the FP8 call and its fp16 baseline
    assert bench.modules_for(["flash_decode"], ["decode"]) == ["flash_decode", "flash_decode_wgmma"]
    assert bench.modules_for(["flash_wgmma_fp8"], ["d128"]) == []  # nothing timed: the caller builds every module
