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


def test_no_commit_ids_or_log_paths_in_the_documentation_and_sources():
    """README.md, docs/, the CUDA sources and the Python outside tests/ say what the code is, not how the work
    went: no commit of this repository named, no profiles/_logs path (git keeps the history; results/ is generated)."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout

    commits = git("rev-list", "--all").split()
    by_prefix = {}
    for c in commits:
        by_prefix.setdefault(c[:7], []).append(c)
    files = [f for f in git("ls-files", "--cached", "--others", "--exclude-standard").splitlines()
             if (f == "README.md" or f.startswith("docs/") or f.endswith((".cu", ".cuh"))
                 or (f.endswith(".py") and not f.startswith("tests/"))) and (ROOT / f).is_file()]
    assert "README.md" in files and any(f.endswith(".cu") for f in files)
    found = []
    for f in files:
        text = (ROOT / f).read_text(errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            if "_logs/" in line or "_logs`" in line:
                found.append(f"{f}:{n}: a _logs path")
            for word in re.findall(r"\b[0-9a-f]{7,12}\b", line):
                if any(c.startswith(word) for c in by_prefix.get(word[:7], ())):
                    found.append(f"{f}:{n}: commit {word}")
    assert not found, "history belongs in git, not in files:\n" + "\n".join(found[:30])
