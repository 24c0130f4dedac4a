"""The workload's command line without a GPU: listing, filtering, clear errors."""

import pytest

from nsightlab.run import workload
from nsightlab.run.sweep import find, from_args


def _lines(capsys):
    return capsys.readouterr().out.splitlines()


def test_list_prints_every_range_of_a_sweep(capsys):
    assert workload.main(["--sweep", "seqlen", "--list"]) == 0
    assert _lines(capsys) == [c.range for c in find("seqlen").cases()]


def test_list_shows_skips_with_their_reasons(capsys):
    assert workload.main(["--sweep", "blocksize", "--list"]) == 0
    lines = _lines(capsys)
    cases = find("blocksize").cases()
    assert [line.split()[0] for line in lines] == [c.range for c in cases]
    skipped = [line for line in lines if "[skipped:" in line]
    assert len(skipped) == 2 and all("supports head dim (64,), not 128; at head dim 128 it takes '64x128'" in line
                                     for line in skipped)


def test_a_sweep_file(tmp_path, capsys):
    sweep = from_args("mine", ["tests.stand_in:my_attention", "flash_fa1"], {"N": [64, 128]}, ["forward", "backward"], {},
                      ["nsys"])
    path = tmp_path / "mine.toml"
    path.write_text(sweep.to_toml())
    assert workload.main(["--sweep", str(path), "--list"]) == 0
    lines = _lines(capsys)
    assert len(lines) == 8 and lines[0] == "attn:my_attention:forward:B=1,H=8,N=64,D=64,dtype=float16,causal=0"
    assert sum("[skipped: flash_fa1 has no backward pass" in line for line in lines) == 2


def test_only_filters_by_range_name(capsys):
    assert workload.main(["--sweep", "blocksize", "--only", "flash_simt:forward.*block_size=4$", "--list"]) == 0
    names = _lines(capsys)
    assert len(names) == 4 and all(":forward:" in n and n.endswith("block_size=4") for n in names)


@pytest.mark.parametrize("argv, message", [
    (["--sweep", "seqlen", "--only", "(", "--list"], "--only '(' is not a regular expression"),
    (["--sweep", "seqlen", "--only", "zzz", "--list"], "--only 'zzz' matches no case of sweep seqlen"),
    (["--sweep", "nope", "--list"], "unknown sweep 'nope'; known:"),
    (["--sweep", "missing.toml", "--list"], "sweep file missing.toml does not exist"),
    (["--sweep", "seqlen", "--iters", "0"], "argument --iters: takes a whole number of at least 1"),
    (["--sweep", "seqlen", "--warmup", "-1"], "argument --warmup: takes a whole number of at least 0"),
    (["--list"], "one of the arguments --sweep --cases is required"),
    (["--cases", "missing.json", "--list"], "cases file missing.json does not exist"),
])
def test_bad_arguments_exit_2_saying_what_is_wrong(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        workload.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_sweep_whose_every_case_is_skipped_exits_2_saying_why(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(from_args("s", ["flash_mma"], {"N": 64}, ["forward"], {"bogus": 1}, ["nsys"]).to_toml())
    for argv in (["--sweep", str(path), "--list"], ["--sweep", str(path)]):  # listing, or running (before torch)
        with pytest.raises(SystemExit) as exc:
            workload.main(argv)
        assert exc.value.code == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert "error: no case would run: all 1 case(s) of sweep s are skipped (flash_mma: unknown option(s) bogus" \
            in line, line


def test_without_a_gpu_it_says_so(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU message")
    path = tmp_path / "s.toml"
    path.write_text(from_args("s", ["sdpa_math"], {"N": 64}, ["forward"], {}, ["nsys"]).to_toml())
    assert workload.main(["--sweep", str(path), "--log", str(tmp_path / "log.jsonl")]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "log.jsonl").exists() or (tmp_path / "log.jsonl").read_text() == ""


# --------------------------------------------------------------------------- the plan, handed over (--cases)


def _no_expansion(monkeypatch):
    """Make any expansion of a sweep into cases in this process fail the test."""
    from nsightlab.run import sweep as S

    def expand(self, load):
        raise AssertionError(f"sweep {self.name} was expanded again: the workload must read its cases (--cases)")

    monkeypatch.setattr(S.Sweep, "_expand", expand)


def test_the_workload_runs_the_cases_it_is_handed_and_expands_no_sweep(tmp_path, capsys, monkeypatch):
    """A capture expands the sweep once and hands every workload its cases as JSON (write_cases): the workload reads
    them back (Case.from_json) and never rebuilds the plan from a sweep, though a sweep file lies beside them."""
    from nsightlab.run.sweep import read_cases, write_cases

    sweep = from_args("mine", ["tests.stand_in:my_attention", "flash_fa1"], {"N": [64, 128]}, ["forward", "backward"], {},
                      ["nsys"])
    cases = sweep.cases()
    path = write_cases(tmp_path / "cases.json", sweep, cases)
    (tmp_path / "sweep.toml").write_text("this is not the plan")  # never read
    _no_expansion(monkeypatch)
    assert read_cases(path).cases == cases
    assert workload.main(["--cases", str(path), "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [c.range for c in cases]
    assert workload.main(["--cases", str(path), "--only", "my_attention:forward", "--list"]) == 0
    assert capsys.readouterr().out.splitlines() == [c.range for c in cases if "my_attention:forward" in c.range]


def test_a_plan_names_how_to_resolve_a_user_callable(tmp_path, monkeypatch):
    """A case of ``module:callable`` is named by the callable; the plan keeps the spec, so that a workload in a fresh
    process resolves it without the sweep."""
    import json

    from nsightlab.problems import impls
    from nsightlab.run.sweep import read_cases, write_cases

    sweep = from_args("u", ["tests.stand_in:my_attention"], {"N": [64]}, ["forward"], {}, ["nsys"])
    path = write_cases(tmp_path / "cases.json", sweep, sweep.cases())
    assert json.loads(path.read_text())["impls"] == {"my_attention": "tests.stand_in:my_attention"}
    monkeypatch.setattr(impls, "_REGISTRY", {k: v for k, v in impls._REGISTRY.items() if k != "my_attention"})
    _no_expansion(monkeypatch)
    planned = read_cases(path)
    assert planned.sweep == "u" and impls.resolve("my_attention").target == "tests.stand_in:my_attention"


def test_a_broken_cases_file_is_a_one_line_error(tmp_path, capsys):
    path = tmp_path / "cases.json"
    path.write_text('{"sweep": "s"}')
    with pytest.raises(SystemExit) as exc:
        workload.main(["--cases", str(path), "--list"])
    assert exc.value.code == 2
    assert "not a plan of cases" in capsys.readouterr().err
