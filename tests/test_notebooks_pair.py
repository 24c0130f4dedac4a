"""Each notebook is a jupytext pair: notebooks/<name>.py (percent format, the reviewed source) and
notebooks/<name>.ipynb (what papermill runs), with the same cells; exactly one parameters cell, whose
every parameter is typed and commented (papermill --help-notebook documents it), and used: a
parameter the notebook ignores is not offered. The capture notebooks check their parameters before
anything else (nsightlab.render.page.check_parameters)."""

from pathlib import Path

import jupytext
import papermill as pm
import pytest

from nsightlab.render.report import NOTEBOOK_ORDER

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))


def test_every_notebook_has_both_halves():
    assert NAMES, "no notebooks"
    assert NAMES == sorted(p.stem for p in NOTEBOOKS.glob("*.py")), "every .ipynb needs its .py and vice versa"


def _cells(nb):
    return [(c.cell_type, c.source.strip(), "parameters" in c.metadata.get("tags", [])) for c in nb.cells]


@pytest.mark.parametrize("name", NAMES)
def test_pair_agrees(name):
    py = jupytext.read(NOTEBOOKS / f"{name}.py")
    ipynb = jupytext.read(NOTEBOOKS / f"{name}.ipynb")
    assert _cells(py) == _cells(ipynb), f"{name}: the .py and the .ipynb differ; run jupytext --sync notebooks/{name}.py"
    assert ipynb.metadata.get("jupytext", {}).get("formats") == "ipynb,py:percent"
    assert py.metadata.get("jupytext", {}).get("formats") == "ipynb,py:percent"


@pytest.mark.parametrize("name", NAMES)
def test_one_documented_parameters_cell(name):
    nb = jupytext.read(NOTEBOOKS / f"{name}.ipynb")
    assert sum("parameters" in c.metadata.get("tags", []) for c in nb.cells) == 1
    params = pm.inspect_notebook(str(NOTEBOOKS / f"{name}.ipynb"))
    assert "plotlyjs" in params
    if name in NOTEBOOK_ORDER:  # the capture notebooks (the report runner renders them on every capture)
        assert {"capture", "style_order"} <= set(params)
    for p in params.values():
        assert p["inferred_type_name"] not in ("None", ""), f"{name}: {p['name']} has no type"
        assert p["help"], f"{name}: {p['name']} has no comment"


@pytest.mark.parametrize("name", [n for n in NAMES if n in NOTEBOOK_ORDER])
def test_every_parameter_is_used_and_checked_first(name):
    nb = jupytext.read(NOTEBOOKS / f"{name}.py")
    cells = [c for c in nb.cells if c.cell_type == "code"]
    i = next(k for k, c in enumerate(cells) if "parameters" in c.metadata.get("tags", []))
    body = "\n".join(c.source for c in cells[i + 1:])
    for p in pm.inspect_notebook(str(NOTEBOOKS / f"{name}.ipynb")):
        assert p in body.replace(f"{p}:", ""), f"{name}: parameter {p} is offered but never used"
    first = cells[i + 1].source
    assert "nb.check_parameters(globals())" in first, f"{name}: parameters are not checked up front"
