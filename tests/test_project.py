"""Project wiring: environment.yml vs pyproject, README commands, .ci/run, notebooks stripped."""

import json
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _names(reqs):
    return {re.split(r"[<>=!~\[ ]", r.strip(), maxsplit=1)[0].lower() for r in reqs if r.strip()}


def test_environment_yml_names_the_pyproject_dependencies():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = _names(py["dependencies"])
    for extra in py["optional-dependencies"].values():
        wanted |= _names(extra)
    lines = (ROOT / "environment.yml").read_text().splitlines()
    pip_start = next(i for i, l in enumerate(lines) if l.strip() == "- pip:")
    have = _names(l.strip()[2:] for l in lines[pip_start + 1:] if l.strip().startswith("- ") and "-e ." not in l)
    assert have == wanted, f"environment.yml differs from pyproject.toml: missing {wanted - have}, extra {have - wanted}"
    assert any("-e ." in l for l in lines), "environment.yml must install the project itself"


def test_readme_opens_with_the_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    first_block = re.search(r"```(?:bash|sh)?\n(.*?)```", readme, re.S).group(1)
    assert "make report" in first_block and "make test" in first_block
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.M)


def test_notebooks_are_committed_without_outputs_and_have_one_parameters_cell():
    for nb_path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(nb_path.read_text())
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert all(not c.get("outputs") and not c.get("execution_count") for c in code), nb_path.name
        tagged = [c for c in code if "parameters" in c.get("metadata", {}).get("tags", [])]
        assert len(tagged) == 1, f"{nb_path.name}: exactly one cell tagged 'parameters'"
