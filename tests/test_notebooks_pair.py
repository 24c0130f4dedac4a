"""Each notebook is a jupytext pair: notebooks/<name>.py (percent format, the reviewed source) and
notebooks/<name>.ipynb (what papermill runs), with the same cells; exactly one parameters cell, whose
every parameter is typed and commented (papermill --help-notebook documents it)."""

from pathlib import Path

import jupytext
import papermill as pm
import pytest

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
    assert {"capture", "plotlyjs"} <= set(params)
    for p in params.values():
        assert p["inferred_type_name"] not in ("None", ""), f"{name}: {p['name']} has no type"
        assert p["help"], f"{name}: {p['name']} has no comment"
