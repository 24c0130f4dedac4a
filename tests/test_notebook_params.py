"""Bad notebook parameters: each one stops the notebook, under papermill, with a one-line error that
names what is accepted (from the capture's own data), before anything is drawn. And the notebooks
run alike from the repository (papermill, the report runner) and from notebooks/ (JupyterLab's
kernel working directory)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import papermill as pm
import pytest

from nsightlab.render import page as nb
from nsightlab.render.execute import execute

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SEQLEN = "profiles/nvidia-h200/seqlen"
BLOCKSIZE = "profiles/nvidia-h200/blocksize"
BENCH = "profiles/nvidia-h200/bench"
TRITON = "profiles/nvidia-h200/triton-example"
DEEP = "profiles/nvidia-h200/bottleneck-deep"

#: (notebook, parameters, words the one-line error must hold)
BAD = [
    ("roofline", {"capture": BLOCKSIZE, "variants": "flash_mmma"},
     ["variants='flash_mmma'", "flash_simt, flash_mma", "did you mean flash_mma"]),
    ("roofline", {"capture": BLOCKSIZE, "D": 100}, ["unknown parameter D=100", "where 'D == 100'", "variants"]),
    ("roofline", {"capture": BLOCKSIZE, "N": -5}, ["unknown parameter N=-5"]),
    ("roofline", {"capture": BLOCKSIZE, "N": 0}, ["unknown parameter N=0"]),
    ("l2_thrashing", {"capture": SEQLEN, "causal": False}, ["unknown parameter causal=False"]),
    ("roofline", {"capture": BLOCKSIZE, "where": "D == 100"},
     ["where='D == 100' matches no range", "D takes 64, 128"]),
    ("roofline", {"capture": BLOCKSIZE, "where": "E > 3"}, ["no field 'E'", "its fields:", "N, D"]),
    ("roofline", {"capture": BLOCKSIZE, "where": "D =="}, ["where='D ==' is not a query"]),
    ("roofline", {"capture": BLOCKSIZE, "mode": "dry"}, ["mode='dry'", "replay, live"]),
    ("roofline", {"capture": BLOCKSIZE, "plotlyjs": "cdn"}, ["plotlyjs='cdn'", "inline"]),
    ("options", {"capture": BLOCKSIZE, "variants": "naive"}, ["variants='naive'", "flash_simt", "flash_mma"]),
    ("l2_thrashing", {"capture": SEQLEN, "sweep": "Q"}, ["sweep='Q'", "N, D"]),
    ("timeline", {"capture": TRITON, "reference": "cudnn"}, ["reference='cudnn'", "sdpa_flash"]),
    ("timeline", {"capture": TRITON, "show": "N == 3"}, ["show='N == 3' matches no range", "N takes"]),
    ("performance", {"capture": BENCH, "dtype": "fp8"}, ["dtype='fp8'", "float16"]),
    ("performance", {"capture": BENCH, "impl": 123}, ["impl='123'", "flash_mma"]),
    ("performance", {"capture": BENCH, "reference": "sdpa"}, ["reference='sdpa'", "sdpa_flash"]),
    ("performance", {"capture": BENCH, "impl": "flash_mma", "targets": "forward=abc"},
     ["targets='forward=abc'", "pass:ratio", "forward, backward"]),
    ("performance", {"capture": BENCH, "impl": "flash_mma", "targets": "fwd:0.8"}, ["'fwd'", "forward, backward"]),
    ("performance", {"capture": BENCH, "targets": "forward:0.8"}, ["targets needs the implementation"]),
    ("why", {"capture": DEEP, "a": "flash_mmma"}, ["a='flash_mmma'", "sdpa_flash", "did you mean flash_mma"]),
    ("why", {"capture": DEEP, "a": "flash_mma", "b": "flash_mma"}, ["both 'flash_mma'", "sdpa_cudnn"]),
    ("why", {"capture": DEEP, "case": "causal"}, ["case='causal'", "field=value"]),
    ("why", {"capture": DEEP, "case": "E=3"}, ["field(s) E", "causal", "pass"]),
    ("why", {"capture": DEEP, "case": "D=64"}, ["flash_mma: no range matches", "D=128"]),
    ("why", {"capture": DEEP, "a": "flash_wgmma", "b": "sdpa_flash", "case": "pipeline=tma-ws-pingpong"},
     ["flash_wgmma: no range matches", "pipeline=tma-ws-overlap"]),
    ("why", {"capture": TRITON}, ["WarpStateStats", "--deep", "--set full"]),
    ("why", {"capture": DEEP, "top": "many"}, ["top takes a whole number"]),
    ("why", {"capture": DEEP, "b_capture": "nvidia-h200/no-such-capture"}, ["b_capture='nvidia-h200/no-such-capture'"]),
    ("why", {"capture": DEEP, "b_capture": DEEP, "b": "flash_mmma"}, ["b (b_capture)='flash_mmma'", "did you mean flash_mma"]),
    ("device", {"capture": "profiles/nowhere"}, ["capture='profiles/nowhere'", "looked at", "nvidia-h200/seqlen"]),
]


def _run(case: tuple[str, dict, list[str]], cwd: Path = ROOT, out: Path | None = None) -> Exception | None:
    name, params, _ = case
    try:  # as the report runner does: its kernel manager, a kernel that dies at start started once more
        execute(NOTEBOOKS / f"{name}.ipynb", out or Path("/dev/null"), params, cwd=cwd)
    except pm.PapermillExecutionError as exc:
        return exc
    return None


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("params")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(_run, case, ROOT, tmp / f"{i}.ipynb") for i, case in enumerate(BAD)]
        return [f.result() for f in futures]


@pytest.mark.parametrize("i", range(len(BAD)), ids=[f"{n}-{'-'.join(map(str, p.items()))}"[:60] for n, p, _ in BAD])
def test_a_bad_parameter_gets_a_one_line_error(results, i):
    name, params, words = BAD[i]
    exc = results[i]
    assert exc is not None, f"{name} {params}: the notebook ran"
    assert exc.ename == "ParameterError", f"{name} {params}: {exc.ename}: {exc.evalue}"
    assert "\n" not in exc.evalue and len(exc.traceback) == 1, exc.traceback
    for w in words:
        assert w in exc.evalue, f"{name} {params}: {w!r} not in {exc.evalue!r}"


def test_checks_without_a_kernel():
    import pandas as pd

    assert nb.choose("dtype", "fp16", ["float16", "float32"], aliases={"fp16": "float16"}) == "float16"
    assert nb._coerce("only", 1024, str) == "1024"
    assert nb._coerce("flag", "False", bool) is False
    with pytest.raises(nb.ParameterError, match="takes true or false"):
        nb._coerce("flag", "maybe", bool)
    with pytest.raises(nb.ParameterError, match="takes a whole number"):
        nb._coerce("n", "x", int)
    df = pd.DataFrame({"range": ["a", "b"], "variant": ["k", "k"], "N": [1, 2]})
    assert len(nb.select(df, "k", "N > 1")) == 1
    ns = {"__annotations__": {"x": str}, "x": 3, "In": ["", "# Parameters\nx = 3\ny = 'q'\n"]}
    with pytest.raises(nb.ParameterError, match="unknown parameter y='q'"):
        nb.check_parameters(ns)
    ns["In"] = ["", "# Parameters\nx = 3\n"]
    nb.check_parameters(ns)
    assert ns["x"] == "3"


def test_notebooks_run_from_the_notebooks_folder_as_jupyterlab_runs_them(tmp_path):
    """JupyterLab starts the kernel in notebooks/: the default capture (relative to the repository)
    and a path relative to notebooks/ both resolve; from elsewhere the error says where it looked."""
    assert _run(("device", {}, []), NOTEBOOKS, tmp_path / "a.ipynb") is None
    assert _run(("options", {"capture": "../" + BLOCKSIZE}, []), NOTEBOOKS, tmp_path / "b.ipynb") is None
    exc = _run(("device", {"capture": "profiles/nope"}, []), tmp_path, tmp_path / "c.ipynb")
    assert exc is not None and str(tmp_path / "profiles" / "nope") in exc.evalue
    assert str(ROOT / "profiles" / "nope") in exc.evalue


@pytest.mark.parametrize("name", sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")))
def test_every_parameter_is_listed_by_help_notebook(name, caplog):
    """papermill reads a parameters cell line by line (a comment holding ``=`` or a quote it cannot pair makes it
    skip the line: "Unable to parse line 5", then "Passed unknown parameter"): every name the cell assigns is
    listed by ``papermill --help-notebook``, with its comment, and papermill warns of nothing."""
    import ast
    import logging

    import jupytext
    from click.testing import CliRunner
    from papermill.cli import papermill

    cell = next(c for c in jupytext.read(NOTEBOOKS / f"{name}.py").cells if "parameters" in c.metadata.get("tags", []))
    declared = [n.target.id for n in ast.parse(cell.source).body if isinstance(n, ast.AnnAssign)]
    assert declared, f"{name}: no typed parameter"
    with caplog.at_level(logging.WARNING, logger="papermill"):
        inspected = pm.inspect_notebook(str(NOTEBOOKS / f"{name}.ipynb"))
    assert list(inspected) == declared, f"{name}: papermill reads {list(inspected)}, the cell declares {declared}"
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    out = CliRunner().invoke(papermill, ["--help-notebook", str(NOTEBOOKS / f"{name}.ipynb")])
    assert out.exit_code == 0, out.output
    for p in declared:
        assert f"  {p}: " in out.output, f"{name}: --help-notebook does not list {p}"
