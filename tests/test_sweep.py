"""Sweeps (TOML, grids, cases, skips, work model) and implementations (resolve, plug-ins); no torch, no GPU."""

import re
import sys

import pytest

from nsightlab.core.ranges import LABEL, PASS, RangeSchema
from nsightlab.problems import attention, impls, problem
from nsightlab.problems.impls import Implementation, load_plugins, resolve
from nsightlab.problems.problem import Parameter
from nsightlab.run.sweep import Sweep, find, from_args, named_sweeps


def _sweep(*grids, **kw):
    return Sweep(kw.pop("name", "t"), [dict(g) for g in grids], **kw)


@pytest.fixture
def registry(monkeypatch):
    """Implementations and plug-ins registered by a test stay in that test."""
    known = impls.known()
    monkeypatch.setattr(impls, "_REGISTRY", dict(known))
    monkeypatch.setattr(impls, "_LOADED", set(impls._LOADED))
    return impls._REGISTRY


# --------------------------------------------------------------------------- TOML


@pytest.mark.parametrize("name", ["seqlen", "blocksize", "bench", "gqa"])
def test_toml_round_trip_gives_the_same_cases(name, tmp_path):
    if name == "gqa":
        sweep = from_args("gqa", ["sdpa_flash", "flash_mma"], {"B": 2, "H": 8, "N": [128, 256], "Hkv": [2], "D": 64,
                                                               "causal": [False, True]},
                          ["forward", "backward"], {"tile": ["128x64", "64x64"]}, ["ncu", "nsys"], description="GQA")
    else:
        sweep = find(name)
    path = tmp_path / "s.toml"
    path.write_text(sweep.to_toml())
    again = Sweep.load(path)
    assert again == sweep and again.to_dict() == sweep.to_dict()
    assert again.cases() == sweep.cases()
    assert find(str(path)) == sweep  # a path works wherever a name does


def test_grid_expansion_order_and_dedup():
    s = _sweep({"impl": ["sdpa_flash", "sdpa_math"], "pass": ["forward", "backward"], "N": [64, 128], "D": [64, 128]},
               {"impl": "sdpa_math", "pass": "backward", "N": [128, 256], "D": 128})  # one case again, one new
    got = [(c.impl, c.params["N"], c.params["D"], c.pass_) for c in s.cases()]
    first = [(i, n, d, p) for i in ("sdpa_flash", "sdpa_math") for n in (64, 128) for d in (64, 128)
             for p in ("forward", "backward")]
    assert got == [*first, ("sdpa_math", 256, 128, "backward")]
    assert len({c.range for c in s.cases()}) == len(got) == 17
    opts = _sweep({"impl": "flash_simt", "pass": "forward", "N": 64, "options": {"block_size": [8, 4, 8]}}).cases()
    assert [c.options["block_size"] for c in opts] == [8, 4]


def test_defaults_and_normalized_parameters():
    (c,) = _sweep({"impl": "sdpa_flash", "pass": "forward", "N": 64, "Hkv": 8, "Nk": 64}).cases()
    assert dict(c.params) == {"B": 1, "H": 8, "D": 64, "dtype": "float16", "causal": False, "N": 64}  # Hkv = H, Nk = N dropped
    assert c.range == "attn:sdpa_flash:forward:B=1,H=8,N=64,D=64,dtype=float16,causal=0"
    assert c.status == "planned" and c.runnable and c.traits["library"] == "torch"


@pytest.mark.parametrize("data, message", [
    ({"name": "x", "grid": [{"impl": "sdpa_flash", "N": 64}], "bogus": 1}, "unknown key(s) ['bogus']; accepted: grid, bench"),
    ({"name": "x", "grid": [{"impl": "sdpa_flash", "N": 64}], "tools": ["foo"]}, "tools must be among ('ncu', 'nsys', 'bench')"),
    ({"name": "x", "grid": [{"impl": "sdpa_flash", "N": 64}], "tools": []}, "tools must be among"),
    ({"name": "x", "grid": [{"impl": "sdpa_flash", "N": 64}], "replay_mode": "fast"}, "replay_mode must be one of"),
    ({"name": "x", "grid": [{"impl": "sdpa_flash", "N": 64, "pass": "sideways"}]}, "pass must be among ('forward', 'backward')"),
    ({"name": "x", "grid": [{"N": 64}]}, "grid 1: no impl"),
    ({"name": "x", "grid": [{"impl": "sdpa_flash", "N": -5}]}, "N must be a positive integer, not -5"),
    ({"name": "x", "grid": [{"impl": "sdpa_flash", "N": "abc"}]}, "N must be a positive integer, not 'abc'"),
    ({"name": "x", "grid": [{"impl": "sdpa_flash", "N": 0}]}, "N must be a positive integer"),
    ({"name": "x", "grid": [{"impl": "sdpa_flash", "D": 64}]}, "need N"),
    ({"name": "x", "grid": [{"impl": "sdpa_flash", "N": 64, "X": 1}]}, "unknown attention parameter(s) ['X']; accepted: B, H, N, D"),
    ({"name": "x", "grid": [{"impl": "sdpa_flash", "N": 64, "dtype": "float8"}]}, "dtype must be one of float16"),
    ({"name": "x", "grid": [{"impl": "sdpa_flash", "N": 64, "causal": "maybe"}]}, "causal must be true or false"),
    ({"name": "x", "grid": [{"impl": "sdpa_flash", "N": 64, "H": 8, "Hkv": 3}]}, "H=8 must be a multiple of Hkv=3"),
    ({"name": "x", "grid": [{"impl": "sdpa_flash", "N": 64, "options": 3}]}, "options must be a table"),
    ({"name": "x", "grid": [{"impl": "nope", "N": 64}]}, "unknown implementation 'nope'; known:"),
    ({"name": "x", "grid": {"impl": "sdpa_flash"}}, "[[grid]] must be a list of tables"),
    ({"name": "x", "grid": []}, "no [[grid]] of cases"),
    ({"name": "x", "tools": ["bench"]}, "no [bench] module"),
    ({"name": "a/b", "grid": [{"impl": "sdpa_flash", "N": 64}]}, "sweep name 'a/b' may only hold"),
    ({"name": "x", "grid": [{"impl": "sdpa_flash", "N": 64}], "deep": "("}, "sweep 'x': deep '(' is not a regular expression"),
    ({"name": "x", "tools": ["bench"], "bench": {"module": "m"}, "deep": "N=64"}, "no [[grid]] of cases"),
    ({"name": "x", "grid": [{"impl": "examples.gemm.gemm:IMPL", "M": 8, "N": 8}]}, "gemm cases need K"),
    ({"name": "x", "grid": [{"impl": "examples.gemm.gemm:IMPL", "M": 8, "N": 8, "K": 8, "B": 1}]},
     "unknown gemm parameter(s) ['B']; accepted: M, N, K, dtype"),
    ({"name": "x", "grid": [{"impl": ["sdpa_flash", "examples.gemm.gemm:IMPL"], "N": 8}]},
     "sweep 'x' mixes problems ['attention', 'gemm']"),
    ({"name": "x", "problem": "gemm", "grid": [{"impl": "sdpa_flash", "N": 8}]},
     "sweep 'x': implementation sdpa_flash solves attention, not gemm"),
    ({"name": "x", "problem": "nope", "grid": [{"impl": "sdpa_flash", "N": 8}]}, "unknown problem 'nope'; known: attention"),
])
def test_bad_sweeps_say_what_is_accepted(data, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Sweep.from_dict(data).cases()


def test_bad_files(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        Sweep.load(tmp_path / "none.toml")
    (tmp_path / "bad.toml").write_text("name = \n")
    with pytest.raises(ValueError, match="not valid TOML"):
        Sweep.load(tmp_path / "bad.toml")
    with pytest.raises(ValueError, match="unknown sweep 'nope'; known: .*seqlen"):
        find("nope")


@pytest.mark.parametrize("grid, reason", [
    ({"impl": "naive", "pass": "forward", "N": 128, "H": 8, "Hkv": 2}, "naive takes k/v with as many heads as q"),
    ({"impl": "tiled", "pass": "forward", "N": 128, "Nk": 256}, "tiled takes k/v with as many keys as q has queries"),
    ({"impl": "flash_mma", "pass": "backward", "N": 128, "D": 128, "options": {"bwd_tile": "128x128"}},
     "flash_mma: option bwd_tile='128x128' supports head dim (64,), not 128"),
    ({"impl": "flash_mma", "pass": "forward", "N": 128, "options": {"tile": "1x1"}}, "is not supported; accepted:"),
    ({"impl": "flash_mma", "pass": "forward", "N": 128, "dtype": "float32"}, "flash_mma supports dtypes"),
    ({"impl": "flash_mma", "pass": "forward", "N": 128, "D": 96}, "flash_mma's forward supports head dims"),
    ({"impl": "flash_fa1", "pass": "backward", "N": 128}, "flash_fa1 has no backward pass (it has forward)"),
    ({"impl": "tiled_uncoalesced", "pass": "forward", "N": 128}, "tiled_uncoalesced's forward is tiled's"),
])
def test_a_case_an_implementation_rejects_is_skipped_with_the_reason(grid, reason):
    (c,) = _sweep(grid).cases()
    assert not c.runnable and c.status.startswith("skipped: ") and reason in c.status
    assert c.range.startswith(f"attn:{grid['impl']}:{grid['pass']}:")


def test_work_model_on_cases():
    B, H, N, D = 2, 8, 256, 64
    cases = {(c.impl, c.pass_, c.params["causal"], c.params.get("Hkv"), c.params.get("Nk")): c for c in _sweep(
        {"impl": ["sdpa_flash", "naive"], "B": B, "H": H, "N": N, "D": D, "causal": [False, True]},
        {"impl": "sdpa_flash", "B": B, "H": H, "N": N, "D": D, "Hkv": 2, "Nk": 512}).cases()}
    fwd = 4.0 * B * H * N * N * D
    for impl in ("sdpa_flash", "naive"):
        assert cases[impl, "forward", False, None, None].model["flop"] == fwd
        assert cases[impl, "forward", True, None, None].model["flop"] == fwd / 2
        assert cases[impl, "backward", False, None, None].model["flop"] == 2.5 * fwd
        assert cases[impl, "backward", True, None, None].model["flop"] == 2.5 * fwd / 2
    gqa_f, gqa_b = cases["sdpa_flash", "forward", False, 2, 512], cases["sdpa_flash", "backward", False, 2, 512]
    assert gqa_f.model["flop"] == 4.0 * B * H * N * 512 * D
    q, kv, lse = B * H * N * D * 2, B * 2 * 512 * D * 2, 4 * B * H * N  # fp16; K, V with Hkv=2 heads of Nk=512 keys
    assert gqa_f.model["bytes"] == 2 * q + 2 * kv + lse and gqa_b.model["bytes"] == 4 * q + 4 * kv + lse
    same = cases["sdpa_flash", "forward", False, None, None].model
    assert same["bytes"] == 4 * B * H * N * D * 2 + lse == same["working_set"]
    assert "FLOP convention" in same["source"]
    naive = cases["naive", "forward", False, None, None].model  # materializes: its working set adds the N x N scores
    assert naive["working_set"] > naive["bytes"] == same["bytes"]


def test_the_built_in_sweeps():
    assert {"seqlen", "blocksize", "bench"} <= set(named_sweeps())
    seqlen = find("seqlen").cases()
    assert sum(c.runnable for c in seqlen) == 224 and all(c.runnable for c in seqlen)
    assert all(c.range.startswith("fk:") for c in seqlen)
    # the materializing variants' one-head sweeps run well past the L2 (50 MiB on an H100, 60 on an
    # H200): at least three points beyond it, the last four times it, so the onset shows as a curve
    for impl, pass_ in [("naive", "forward"), ("naive", "backward"), ("tiled", "forward"), ("tiled", "backward"),
                        ("tiled_uncoalesced", "backward")]:
        ws = sorted(c.model["working_set"] for c in seqlen if c.impl == impl and c.pass_ == pass_
                    and c.params["H"] == 1)
        assert ws[0] < 50 * 2**20 and sum(w > 60 * 2**20 for w in ws) >= 3 and ws[-1] > 4 * 60 * 2**20, (impl, pass_)
    block = find("blocksize").cases()
    skipped = [c for c in block if not c.runnable]
    assert sum(c.runnable for c in block) == 82 and len(skipped) == 2
    assert all("supports head dim (64,), not 128" in c.status for c in skipped)
    assert find("blocksize").replay_mode == "kernel" and find("seqlen").tools == ("ncu", "nsys")
    bench = find("bench")
    assert bench.tools == ("bench",) and bench.bench["module"] == "flash_kernels.bench" and bench.cases() == []


# --------------------------------------------------------------------------- implementations


def _module(tmp_path, monkeypatch, name, text):
    (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


def test_resolve_registered_names(registry):
    assert resolve("sdpa_flash").name == "sdpa_flash" and resolve(" sdpa_math ").traits["materializes"]
    load_plugins()  # flash_kernels.study: its entry point
    mma = resolve("flash_mma")
    assert mma.traits["engine"] == "tensor cores" and mma.passes == ("forward", "backward")
    assert resolve("flash_fa1").passes == ("forward",)


def test_resolve_module_callable_and_renamed(registry):
    from tests.stand_in import my_attention

    impl = resolve("tests.stand_in:my_attention")
    assert impl.name == "my_attention" and impl.target == "tests.stand_in:my_attention" and impl.callable() is my_attention
    assert impl.problem == "attention" and impl.passes == ("forward", "backward") and impl.work is None
    assert resolve("my_attention") is impl  # registered under its name (the workload looks it up so)
    fast = resolve("fast=tests.stand_in:my_attention")
    assert fast.name == "fast" and fast.callable() is my_attention


def test_resolve_a_module_attribute_that_is_an_implementation(tmp_path, monkeypatch, registry):
    mod = _module(tmp_path, monkeypatch, "nsl_test_impl_mod", (
        "from nsightlab.problems.impls import Implementation\n"
        "def run(q, k, v, *, causal=False, scale=None):\n    return q\n"
        "IMPL = Implementation('mine_impl', run, traits={'materializes': True}, passes=('forward',))\n"
        "NOT_CALLABLE = 3\n"))
    impl = resolve(f"{mod}:IMPL")
    assert impl.name == "mine_impl" and impl.traits == {"materializes": True} and resolve("mine_impl") is impl
    renamed = resolve(f"other={mod}:IMPL")
    assert renamed.name == "other" and renamed.target is impl.target and renamed.passes == ("forward",)
    with pytest.raises(ValueError, match="neither callable nor an nsightlab Implementation"):
        resolve(f"{mod}:NOT_CALLABLE")
    with pytest.raises(ValueError, match=f"module '{mod}' has no attribute 'nope'"):
        resolve(f"{mod}:nope")


@pytest.mark.parametrize("spec, message", [
    ("nope", "unknown implementation 'nope'; known: .*sdpa_flash.* \\(or give module:callable"),
    ("fast=nope", "unknown implementation 'fast=nope'"),
    ("no_such_module_xyz:fn", "cannot import 'no_such_module_xyz'"),
    ("tests.stand_in:", "is not 'module:callable'"),
    ("bad name=tests.stand_in:my_attention", "implementation name 'bad name' may only hold"),
])
def test_resolve_errors(spec, message, registry):
    with pytest.raises(ValueError, match=message):
        resolve(spec)


def test_implementation_checks():
    with pytest.raises(ValueError, match="passes must be among"):
        Implementation("x", "m:f", passes=("sideways",))
    impl = Implementation("x", "m:f", passes=("forward",), supports=lambda p, s: "too big" if p["N"] > 10 else None)
    assert impl.why_not({"N": 5}, "backward") == "x has no backward pass (it has forward)"
    assert impl.why_not({"N": 50}, "forward") == "too big" and impl.why_not({"N": 5}, "forward") is None
    assert attention.WORK.evaluate({"B": 1, "H": 1, "N": 2, "D": 4, "dtype": "float32"}, "forward")["flop"] == 64.0


def test_load_plugins_from_the_environment(tmp_path, monkeypatch, registry):
    mod = _module(tmp_path, monkeypatch, "nsl_test_plugin_mod", (
        "from nsightlab.problems.impls import Implementation, register as reg\n"
        "CALLS = []\n"
        "def register():\n"
        "    CALLS.append(1)\n"
        "    reg(Implementation('plugged_in', 'tests.stand_in:my_attention'))\n"))
    monkeypatch.setenv("NSIGHTLAB_PLUGINS", f" {mod} ,")
    assert load_plugins(entry_points=False) == [mod]
    assert resolve("plugged_in").target == "tests.stand_in:my_attention"
    assert load_plugins(entry_points=False) == [] and sys.modules[mod].CALLS == [1]  # once per process
    monkeypatch.setenv("NSIGHTLAB_PLUGINS", "no_such_plugin_xyz")
    with pytest.raises(ValueError, match="plug-in 'no_such_plugin_xyz' cannot be imported"):
        load_plugins(entry_points=False)
    with pytest.raises(ValueError, match="plug-in 'no_such_plugin_abc' cannot be imported"):
        load_plugins(["no_such_plugin_abc"], entry_points=False)


# --------------------------------------------------------------------------- problems


def test_attention_is_a_problem_like_any_other():
    assert problem.get("attention") is attention.PROBLEM and "sdpa_flash" in attention.PROBLEM.references
    assert attention.schema("fk") == RangeSchema(
        "fk", (LABEL, PASS), {"B": "int", "H": "int", "N": "int", "D": "int", "dtype": "str", "causal": "bool"},
        {"Hkv": "int", "Nk": "int"}, {PASS: ("forward", "backward")},
        "attention case: implementation, pass, shape [B, H, N, D], dtype, causal", {"Hkv": "H", "Nk": "N"})
    assert [q.cli_flags()[0] for q in attention.PARAMETERS] == ["-B", "-H", "-N", "-D", "--dtype", "--causal", "--Hkv", "--Nk"]
    assert attention.PROBLEM.shapes_needed() == "at least -N (and -B -H -D, default 1, 8, 64)"
    assert attention.softmax_bound(1e12, 64, "backward") == 1e12 * 10 * 64  # 2.5x the forward's 4·D FLOPs per exp


def test_parameters_from_the_command_line():
    n, causal, dtype = (attention.PROBLEM.parameter(k) for k in ("N", "causal", "dtype"))
    assert n.from_cli("1024, 4096") == [1024, 4096] and dtype.from_cli("float16,bfloat16") == ["float16", "bfloat16"]
    assert causal.from_cli("both") == [False, True] and causal.from_cli("YES") == [True]
    for bad in ("abc", "-5", "0", ""):
        with pytest.raises(ValueError, match=re.escape(f"-N takes positive integers, comma-separated (e.g. 1024,4096), not {bad!r}")):
            n.from_cli(bad)
    with pytest.raises(ValueError, match="--causal takes both, yes or no, not 'maybe'"):
        causal.from_cli("maybe")
    with pytest.raises(ValueError, match="type must be one of int, float, str, bool"):
        Parameter("x", "complex", "no such type")


def test_a_problem_of_its_own_gemm(registry):
    sweep = find("examples/gemm/sweep.toml")
    cases = sweep.cases()
    assert sweep.schema().prefix == "gemm" and sweep.problem_of().name == "gemm"
    assert [c.range for c in cases[:2]] == ["gemm:torch_gemm:forward:M=1024,N=4096,K=1024,dtype=float16",
                                            "gemm:torch_gemm:backward:M=1024,N=4096,K=1024,dtype=float16"]
    # the problem's work model, which the implementation does not repeat
    assert cases[0].model["flop"] == 2.0 * 1024 * 4096 * 1024 and cases[1].model["flop"] == 2 * cases[0].model["flop"]
    assert cases[0].model["source"].startswith("GEMM: 2·M·N·K") and all(c.runnable for c in cases)
    # the sweep names no problem: its implementations' is taken
    again = Sweep.from_dict({**sweep.to_dict(), "problem": None})
    assert again.cases() == cases


def test_deep_cases_of_a_sweep():
    s = _sweep({"impl": ["sdpa_flash", "naive"], "N": [64, 128]}, deep=r"sdpa_flash:forward:.*N=128,")
    assert [c.range for c in s.deep_cases(s.cases())] == ["attn:sdpa_flash:forward:B=1,H=8,N=128,D=64,dtype=float16,causal=0"]
    assert s.deep_cases(s.cases(), "naive:backward") == [c for c in s.cases() if c.range.startswith("attn:naive:backward")]
    assert _sweep({"impl": "sdpa_flash", "N": 64}).deep_cases([]) == []
    assert find("seqlen").deep and find("blocksize").deep is None


# --------------------------------------------------------------------------- the plan, computed once


def test_every_case_survives_its_json_round_trip():
    """What a capture hands its workloads (Case.to_json) is what they run (Case.from_json): every case of the
    registered sweeps and of a user's command line comes back equal."""
    import json

    from nsightlab.run.sweep import Case

    sweeps = [find(name) for name in named_sweeps()]
    sweeps.append(from_args("mine", ["tests.stand_in:my_attention", "sdpa_flash"], {"N": [64, 128], "causal": [False, True]},
                            ["forward", "backward"], {}, ["nsys"]))
    for sweep in sweeps:
        for case in sweep.cases():
            assert Case.from_json(json.loads(json.dumps(case.to_json()))) == case, case.range


def test_a_sweep_is_expanded_once_however_often_its_cases_are_asked_for(monkeypatch):
    from nsightlab.run import sweep as S

    calls = []
    real = S.Sweep._expand
    monkeypatch.setattr(S.Sweep, "_expand", lambda self, load: calls.append(self.name) or real(self, load))
    sweep = from_args("once", ["sdpa_flash"], {"N": [64, 128]}, ["forward"], {}, ["nsys"])
    first = sweep.cases()
    assert sweep.cases() == first and sweep.cases(load=False) == first and calls == ["once"]
    first.clear()  # a caller's list is its own
    assert len(sweep.cases()) == 2 and calls == ["once"]
    sweep.grids[0]["N"] = [64, 128, 256]  # the sweep changed: its cases are expanded again
    assert len(sweep.cases()) == 3 and calls == ["once", "once"]
