"""nsightlab's layout, read from its import statements (every one, those inside functions included):
the stages import only stages above them, no module imports itself round a circle, torch and the
kernel packages stay out, and each stage folder's docstring says what it may import and tells the truth.

The checks are plain functions of a source tree, so the last tests run them on small trees that break
each rule, to show that they notice."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nsightlab.cli import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
#: the pipeline's stages, first to last: a module imports only its own stage or earlier ones
STAGES = ("core", "problems", "parse", "store", "run", "analysis", "render", "cli")
#: ``python -m nsightlab.X`` entry modules, one per subcommand of the nsightlab command that is not a stage's
#: name (and every ``__main__``): above every stage, they may import cli
ENTRY_MODULES = (*(name for name in COMMANDS if name not in STAGES), "__main__")
ENTRY_RANK = len(STAGES)
#: modules that import torch inside functions, for work that runs on the GPU machine only
TORCH_AT_RUN_TIME = {
    "nsightlab.run.workload": "runs the cases",
    "nsightlab.run.ceilings": "the instruction-class microbenchmarks",
    "nsightlab.run.timing": "the one CUDA-event timer (the bench's, the ceilings')",
    "nsightlab.problems.attention": "the attention problem's inputs and reference are tensors",
    "nsightlab.core.environment": "environment() records torch's view of the GPU beside a benchmark",
}
#: packages nsightlab never imports: the kernels plug into it, not the other way round
KERNEL_PACKAGES = ("flash_kernels",)


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    line: int
    target: str  # the imported module, dotted (for a name imported from a module: that module)
    in_function: bool

    def where(self, package_root: Path) -> str:
        return f"{_path_of(self.source, package_root)}:{self.line}"


def _path_of(module: str, package_root: Path) -> str:
    rel = Path(*module.split(".")[1:])
    folder = package_root / rel
    path = folder / "__init__.py" if folder.is_dir() else package_root / rel.with_suffix(".py")
    return str(path.relative_to(package_root.parent))


def modules(package_root: Path) -> dict[str, Path]:
    """Every module of the package under ``package_root``, dotted name -> file (packages as their __init__)."""
    out = {}
    for path in sorted(package_root.rglob("*.py")):
        parts = path.relative_to(package_root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _resolve_from(node: ast.ImportFrom, source: str, is_package: bool, known: set[str]) -> Iterator[str]:
    """The modules a ``from X import a, b`` statement imports: ``X.a`` where that is a module, else ``X``."""
    base = source if is_package else source.rpartition(".")[0]
    for _ in range(node.level - 1 if node.level else 0):
        base = base.rpartition(".")[0]
    target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module or ""
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        yield sub if sub in known else target


class _Imports(ast.NodeVisitor):
    def __init__(self, source: str, is_package: bool, known: set[str]) -> None:
        self.source, self.is_package, self.known = source, is_package, known
        self.depth = 0
        self.found: list[Import] = []

    def _nested(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _nested

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append(Import(self.source, node.lineno, alias.name, self.depth > 0))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for target in _resolve_from(node, self.source, self.is_package, self.known):
            self.found.append(Import(self.source, node.lineno, target, self.depth > 0))


def imports(package_root: Path) -> list[Import]:
    """Every import statement of the package, module-level and inside functions alike."""
    mods = modules(package_root)
    out = []
    for name, path in mods.items():
        visitor = _Imports(name, path.name == "__init__.py", set(mods))
        visitor.visit(ast.parse(path.read_text(), filename=str(path)))
        out.extend(visitor.found)
    return out


def rank(module: str) -> int | None:
    """A module's place in the stage order (the entry modules above cli; the package itself, which
    imports nothing, before every stage); None for a module outside nsightlab."""
    parts = module.split(".")
    if parts[0] != "nsightlab":
        return None
    if len(parts) == 1:
        return -1
    if (parts[1] in ENTRY_MODULES and len(parts) == 2) or parts[-1] == "__main__":
        return ENTRY_RANK
    if parts[1] in STAGES:
        return STAGES.index(parts[1])
    raise AssertionError(f"{module}: in no stage; put it in one of {', '.join(STAGES)}")


def _stage_name(r: int) -> str:
    return STAGES[r] if 0 <= r < len(STAGES) else "entry module" if r == ENTRY_RANK else "the package itself"


def upward_imports(package_root: Path) -> list[str]:
    """Each import of a later stage than the importing module's, as 'file:line imports X (stage b, after a)'."""
    bad = []
    for imp in imports(package_root):
        have, want = rank(imp.source), rank(imp.target)
        if want is not None and have is not None and want > have:
            bad.append(f"{imp.where(package_root)} imports {imp.target} ({_stage_name(want)}, a stage after "
                       f"{_stage_name(have)})")
    return bad


def circles(package_root: Path) -> list[list[str]]:
    """The import circles between the package's modules (Tarjan's strongly connected components)."""
    graph: dict[str, set[str]] = {m: set() for m in modules(package_root)}
    for imp in imports(package_root):
        if imp.target in graph and imp.target != imp.source:
            graph[imp.source].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def forbidden_imports(package_root: Path) -> list[str]:
    """Imports of a kernel package anywhere, and of torch at module level or outside TORCH_AT_RUN_TIME."""
    bad = []
    for imp in imports(package_root):
        top = imp.target.split(".")[0]
        if top in KERNEL_PACKAGES:
            bad.append(f"{imp.where(package_root)} imports {imp.target} (a kernel package: it plugs into nsightlab)")
        elif top == "torch" and not imp.in_function:
            bad.append(f"{imp.where(package_root)} imports torch at module level (reports rebuild without torch)")
        elif top == "torch" and imp.source not in TORCH_AT_RUN_TIME:
            bad.append(f"{imp.where(package_root)} imports torch, outside the modules that run GPU work "
                       f"({', '.join(TORCH_AT_RUN_TIME)})")
    return bad


def declared(folder: Path) -> set[str] | None:
    """The stages a stage folder's docstring says it may import ('May import: ...'); None without that line."""
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    m = re.search(r"May import:(.*)", doc, re.S)
    if m is None:
        return None
    text = m.group(1)
    if "every other stage" in text:
        return set(STAGES[:STAGES.index(folder.name)])
    return set(re.findall(r"nsightlab\.(\w+)", text))


def docstring_problems(package_root: Path) -> list[str]:
    """Stage folders whose docstring names no 'May import:', names a later stage, or is not true of the code."""
    bad = []
    used: dict[str, set[str]] = {}
    for imp in imports(package_root):
        src, dst = imp.source.split("."), imp.target.split(".")
        if rank(imp.source) == ENTRY_RANK:
            continue
        if len(src) > 1 and len(dst) > 1 and dst[0] == "nsightlab" and dst[1] in STAGES and dst[1] != src[1]:
            used.setdefault(src[1], set()).add(dst[1])
    for stage in STAGES:
        folder = package_root / stage
        if not folder.is_dir():
            continue
        may = declared(folder)
        if may is None:
            bad.append(f"{stage}/__init__.py: its docstring does not say what the stage may import ('May import: ...')")
            continue
        later = sorted(may - set(STAGES[:STAGES.index(stage)]))
        if later:
            bad.append(f"{stage}/__init__.py: says it may import {', '.join(later)}, not a stage above it")
        unsaid = sorted(used.get(stage, set()) - may)
        if unsaid:
            bad.append(f"{stage}/__init__.py: the stage imports {', '.join(unsaid)}, which its docstring does not list")
    return bad


# --------------------------------------------------------------------------- nsightlab as it is

PACKAGE = ROOT / "nsightlab"


def test_every_module_is_in_a_stage():
    for name in modules(PACKAGE):
        rank(name)


def test_stages_import_only_earlier_stages():
    bad = upward_imports(PACKAGE)
    assert not bad, "\n".join(bad)


def test_no_import_circles():
    found = circles(PACKAGE)
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_no_kernel_package_and_torch_only_at_run_time():
    bad = forbidden_imports(PACKAGE)
    assert not bad, "\n".join(bad)


def test_every_stage_folder_says_what_it_may_import():
    bad = docstring_problems(PACKAGE)
    assert not bad, "\n".join(bad)


#: what only the command layer (nsightlab.cli) does: parse arguments and print; analysis also runs no git
ANALYSIS_NEVER = ("argparse", "subprocess", "sys")


def command_problems(package_root: Path) -> list[str]:
    """Each subcommand whose module is not in nsightlab.cli, each ``main`` or argument parser outside it (the
    subprocess scripts of run excepted: the workload and the ceilings are processes of their own, not commands),
    and each import of argparse / subprocess / sys or call of print in nsightlab.analysis."""
    bad = [f"nsightlab {name}: its module {module} is not in nsightlab.cli"
           for name, (module, _) in COMMANDS.items() if not module.startswith("nsightlab.cli.")]
    for imp in imports(package_root):
        if imp.source.startswith("nsightlab.analysis") and imp.target.split(".")[0] in ANALYSIS_NEVER:
            bad.append(f"{imp.where(package_root)} imports {imp.target} (analysis is plain functions: no arguments, "
                       "no printing, no git)")
    for name, path in modules(package_root).items():
        tree = ast.parse(path.read_text(), filename=str(path))
        calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        if name.startswith("nsightlab.analysis") and "print" in calls:
            bad.append(f"{_path_of(name, package_root)} prints (the commands' text is nsightlab.cli's)")
        top = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        if "main" in top and name.split(".")[1] in STAGES[:-1] and name not in SCRIPTS:
            bad.append(f"{_path_of(name, package_root)} has a main() (a command's belongs in nsightlab.cli)")
    return bad


#: the modules of a stage that are a process of their own (``python -m``), started by a capture, not commands
SCRIPTS = {"nsightlab.run.workload", "nsightlab.run.ceilings"}


def test_commands_live_in_cli_and_analysis_is_plain_functions():
    bad = command_problems(PACKAGE)
    assert not bad, "\n".join(bad)


# --------------------------------------------------------------------------- the checks notice a broken rule


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package ``nsightlab`` under ``tmp_path`` with every stage folder (docstrings as nsightlab's) and ``files``."""
    pkg = tmp_path / "nsightlab"
    for stage in STAGES[:-1]:
        (pkg / stage).mkdir(parents=True)
        (pkg / stage / "__init__.py").write_text((PACKAGE / stage / "__init__.py").read_text())
    (pkg / "__init__.py").write_text('"""root"""\n')
    for name, text in files.items():
        (pkg / name).write_text(text)
    return pkg


def test_an_upward_import_is_caught_even_inside_a_function(tmp_path):
    pkg = _tree(tmp_path, {"core/files.py": "def f():\n    from ..render import page\n", "render/page.py": ""})
    assert upward_imports(pkg) == ["nsightlab/core/files.py:2 imports nsightlab.render.page (render, a stage after core)"]
    assert docstring_problems(pkg) == ["core/__init__.py: the stage imports render, which its docstring does not list"]


def test_an_import_circle_is_caught(tmp_path):
    pkg = _tree(tmp_path, {"problems/a.py": "from . import b\n", "problems/b.py": "def f():\n    from .a import x\n"})
    assert circles(pkg) == [["nsightlab.problems.a", "nsightlab.problems.b"]]
    assert upward_imports(pkg) == []


def test_torch_and_kernel_packages_are_caught(tmp_path):
    pkg = _tree(tmp_path, {"run/workload.py": "import torch\n", "parse/ncu.py": "def f():\n    import torch.nn\n",
                           "store/x.py": "def f():\n    from flash_kernels import registry\n"})
    assert forbidden_imports(pkg) == [
        "nsightlab/parse/ncu.py:2 imports torch, outside the modules that run GPU work "
        f"({', '.join(TORCH_AT_RUN_TIME)})",
        "nsightlab/run/workload.py:1 imports torch at module level (reports rebuild without torch)",
        "nsightlab/store/x.py:2 imports flash_kernels (a kernel package: it plugs into nsightlab)"]


def test_a_command_outside_cli_and_printing_analysis_are_caught(tmp_path):
    pkg = _tree(tmp_path, {"analysis/x.py": "import subprocess\n\n\ndef f():\n    print('hi')\n",
                           "render/y.py": "def main(argv=None, prog='y'):\n    return 0\n"})
    assert command_problems(pkg) == [
        "nsightlab/analysis/x.py:1 imports subprocess (analysis is plain functions: no arguments, no printing, no git)",
        "nsightlab/analysis/x.py prints (the commands' text is nsightlab.cli's)",
        "nsightlab/render/y.py has a main() (a command's belongs in nsightlab.cli)"]


@pytest.mark.parametrize("doc, problem", [
    ('"""parse: frames."""\n', "parse/__init__.py: its docstring does not say what the stage may import"),
    ('"""parse.\n\nMay import: nsightlab.core, nsightlab.store.\n"""\n', "parse/__init__.py: says it may import store"),
])
def test_a_docstring_that_is_missing_or_untrue_is_caught(tmp_path, doc, problem):
    pkg = _tree(tmp_path, {})
    (pkg / "parse" / "__init__.py").write_text(doc)
    assert [p for p in docstring_problems(pkg) if p.startswith(problem)], docstring_problems(pkg)
