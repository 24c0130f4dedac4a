"""A problem is a plug-in all the way down: nsightlab's generic modules (every module but the problem
plug-ins, :data:`PLUGIN_MODULES`) import no problem module and name no implementation of a problem and no
problem's field as a code key. What they need to know of a problem (its key fields and their order, its
sweep axis, its implementations' colours, its own ceilings, its table columns) they read through the
Problem protocol and the registry (:mod:`nsightlab.problems.problem`).

The checks are plain functions of a source tree (read with ``ast``: docstrings and comments may name
anything, code may not), so the last tests run them on a small tree that breaks each rule, to show they
notice: an import of a problem module, a variant's name, a ``flash_*`` / ``sdpa_*`` name, a field name
used as a key, a default axis of ``"N"``.

Where a module someone else is reworking still names a field, it is listed in :data:`KNOWN` with what is
left to do; the test fails when a new one appears and when a listed one is gone (so the list only
shrinks)."""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from nsightlab.problems import impls
from nsightlab.problems import problem as problems

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "nsightlab"
#: the problem plug-ins inside nsightlab: they may name their fields and implementations (relative paths)
PLUGIN_MODULES = ("problems/attention.py",)
#: generic modules that may import a problem module: the package that registers the built-in problems
MAY_IMPORT_PROBLEMS = ("problems/__init__.py",)
#: the problem modules' generic parts, which every stage may import
GENERIC_PROBLEM_MODULES = ("nsightlab.problems", "nsightlab.problems.problem", "nsightlab.problems.impls")
#: names of implementations that plug-ins own by family, whether or not one is registered here
VARIANT_PATTERN = re.compile(r"\b(?:flash|sdpa)_[a-z0-9_]+\b", re.I)
#: keyword arguments whose string value is no field (argparse's placeholder: metavar="N")
NOT_A_KEY = ("metavar",)


def _builtin(p: problems.Problem) -> bool:
    """Whether problem ``p`` is one of nsightlab's own plug-ins (:data:`PLUGIN_MODULES`)."""
    return any(p.inputs.__module__ == "nsightlab." + m[:-3].replace("/", ".") for m in PLUGIN_MODULES)


def variant_names() -> set[str]:
    """The implementation names the check looks for, whatever else this process registered: those of the
    built-in problems (references, yardsticks, the styles they register: flash_kernels' variants among them)
    and of the GEMM example (examples.gemm.gemm: a problem a user plugs in)."""
    gemm = importlib.import_module("examples.gemm.gemm")
    names = {gemm.IMPL.name, *gemm.PROBLEM.references, *gemm.PROBLEM.styles}
    for p in problems.known().values():
        if _builtin(p):
            names |= {*p.references, *(y for y in p.yardsticks if not y.endswith("*")), *p.styles}
            names |= {n for n, i in impls.known().items() if i.problem == p.name and _builtin(p)
                      and getattr(i.target, "__module__", str(i.target)).startswith("nsightlab.")}
    return {n.lower() for n in names}


def field_names() -> set[str]:
    """The built-in problems' own fields (not those every case has: dtype, pass, ...). A user problem's fields
    (a GEMM's M, N, K) are no names the generic code could have known; one-letter ones are also units."""
    return {f for p in problems.known().values() if _builtin(p) for f in p.key_fields} - set(problems.CASE_FIELDS)


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string nodes that are docstrings (module, class, function)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def _module_name(path: Path, package_root: Path) -> tuple[str, bool]:
    parts = path.relative_to(package_root.parent).with_suffix("").parts
    is_pkg = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_pkg else parts), is_pkg


def _imported(node: ast.AST, module: str, is_pkg: bool) -> Iterator[str]:
    """The dotted modules (or module.name) an import statement names."""
    if isinstance(node, ast.Import):
        yield from (a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = module if is_pkg else module.rpartition(".")[0]
        for _ in range(node.level - 1 if node.level else 0):
            base = base.rpartition(".")[0]
        target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module or ""
        for a in node.names:
            yield f"{target}.{a.name}"


def _problem_import(name: str, package: str) -> bool:
    """Whether dotted ``name`` (a module, or module.attribute) is a problem module other than the generic ones."""
    prefix = f"{package}.problems."
    if not name.startswith(prefix):
        return False
    return not any(name == g or name.startswith(g + ".") for g in GENERIC_PROBLEM_MODULES[1:]) and name != prefix[:-1]


#: methods whose string argument is a key (``r.get("N")``)
KEY_METHODS = ("get", "pop", "setdefault", "index", "count")


def _string_uses(tree: ast.AST) -> Iterator[tuple[ast.Constant, bool]]:
    """Each string constant that is not a docstring, with whether it stands where a key does: a subscript, a
    comparison, a dict key, an item of a list / tuple / set, a default value, a keyword's value (but
    :data:`NOT_A_KEY`'s), the argument of ``.get`` and its kin. Elsewhere (``text.removesuffix("B")``, a
    message) a field's one-letter name is no key, but an implementation's name still counts."""
    docs = _docstrings(tree)
    keys: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            keys.add(id(node.slice))
        elif isinstance(node, ast.Compare):
            keys |= {id(node.left), *map(id, node.comparators)}
        elif isinstance(node, ast.Dict):
            keys |= {id(k) for k in node.keys if k is not None}
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            keys |= set(map(id, node.elts))
        elif isinstance(node, ast.arguments):
            keys |= {id(d) for d in (*node.defaults, *node.kw_defaults) if d is not None}
        elif isinstance(node, ast.keyword) and node.arg not in NOT_A_KEY:
            keys.add(id(node.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in KEY_METHODS:
            keys |= set(map(id, node.args))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node, id(node) in keys


def boundary_violations(package_root: Path, variants: Iterable[str], fields: Iterable[str]) -> list[Violation]:
    """Every place a generic module of the package under ``package_root`` imports a problem module, names an
    implementation (any ``flash_*`` / ``sdpa_*``, or one of ``variants``: a compound name such as ``torch_gemm`` in an
    identifier or anywhere in a string that is not a docstring, a plain word such as ``naive`` as a whole string)
    or uses one of ``fields`` as a string where a key stands (:func:`_string_uses`: a subscript, a default, a
    comparison, an item of a literal list)."""
    variants = {v.lower() for v in variants}
    fields = set(fields)
    # a compound name (flash_mma, torch_gemm) counts wherever a string holds it; a plain word (naive, tiled) only as
    # the whole string or identifier, since a message may well say "tiled"
    compound = sorted((v for v in variants if not v.isalpha()), key=len, reverse=True)
    word = re.compile(r"\b(" + "|".join(map(re.escape, compound)) + r")\b", re.I) if compound else None
    out = []
    package = package_root.name
    for path in sorted(package_root.rglob("*.py")):
        rel = path.relative_to(package_root).as_posix()
        if rel in PLUGIN_MODULES:
            continue
        shown = path.relative_to(package_root.parent).as_posix()
        tree = ast.parse(path.read_text(), filename=str(path))
        module, is_pkg = _module_name(path, package_root)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and rel not in MAY_IMPORT_PROBLEMS:
                for name in _imported(node, module, is_pkg):
                    if _problem_import(name, package):
                        out.append(Violation(shown, node.lineno, f"imports the problem module {name}"))
            ident = (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                     else node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     else node.arg if isinstance(node, ast.arg) else None)
            if ident and ((ident in variants and not ident.isalpha()) or VARIANT_PATTERN.fullmatch(ident)):
                out.append(Violation(shown, node.lineno, f"names the implementation {ident!r} (an identifier)"))
        for node, as_key in _string_uses(tree):
            text = node.value
            hit = VARIANT_PATTERN.search(text) or (word.search(text) if word else None)
            name = hit.group(0) if hit else text if text.lower() in variants else None
            if name:
                out.append(Violation(shown, node.lineno, f"names the implementation {name!r} (in {text[:60]!r})"))
            elif as_key and text in fields:
                out.append(Violation(shown, node.lineno, f"uses the problem field {text!r} as a key"))
    return sorted(set(out), key=lambda v: (v.path, v.line, v.what))


#: what generic modules still name, owned by work in progress elsewhere: (path, what) -> what is left to do.
#: Each entry must still be there (the test says when one is gone, so that it is taken off).
KNOWN: dict[tuple[str, str], str] = {}


def _current() -> list[Violation]:
    return boundary_violations(PACKAGE, variant_names(), field_names())


def test_generic_modules_import_no_problem_and_name_no_variant_or_field():
    found = _current()
    new = [str(v) for v in found if (v.path, v.what) not in KNOWN]
    assert not new, "generic modules that know a problem:\n" + "\n".join(new)


def test_the_known_exceptions_are_still_there():
    """Each known exception is still found (in one of the files it is listed for: code being moved)."""
    have = {(v.path, v.what) for v in _current()}
    gone = sorted({w for (_, w) in KNOWN} - {w for (p, w) in have if (p, w) in KNOWN})
    assert not gone, "fixed (take them off KNOWN):\n" + "\n".join(gone)


def test_the_registry_knows_the_builtin_names_the_check_looks_for():
    assert {"sdpa_flash", "sdpa_math", "flash_wgmma", "naive", "torch_cpu", "torch_gemm"} <= variant_names()
    assert field_names() == {"B", "H", "N", "D", "causal", "Hkv", "Nk"}


# --------------------------------------------------------------------------- the check notices a broken rule


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "nsightlab"
    for name, text in {"__init__.py": "", "problems/__init__.py": "from . import attention\n",
                       "problems/attention.py": 'STYLES = {"flash_mma": 1}\nKEY = ["B", "N"]\n',
                       "problems/problem.py": "", "analysis/__init__.py": "", **files}.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    return pkg


def test_a_clean_tree_passes_and_the_plugin_may_name_its_own(tmp_path):
    pkg = _tree(tmp_path, {"analysis/perf.py": '"""KEY was B, H, N, D, causal; flash_mma and sdpa_flash."""\n'
                                               "from ..problems import problem as problems\n\n"
                                               "def key(df):\n    # N last, as attention's\n"
                                               "    return problems.for_fields(df).name_order()\n"
                                               "def f(p, t):\n    p.add_argument('-n', metavar='N')\n    return t.removesuffix('B')\n"})
    assert boundary_violations(pkg, {"flash_mma", "sdpa_flash", "torch_gemm"}, {"B", "H", "N", "D", "causal"}) == []


def test_a_planted_violation_of_each_kind_is_caught(tmp_path):
    pkg = _tree(tmp_path, {
        "analysis/perf.py": "from ..problems import attention\n"
                            'KEY = ["suite", "B", "N"]\n',
        "analysis/roofline.py": "from ..problems.attention import softmax_bound\n",
        "analysis/l2.py": 'def onset(frame, x="N"):\n    return frame[x]\n',
        "render/figures.py": 'STYLE = {"flash_wgmma": 1, "torch_gemm": 2}\n'
                             'def label(r):\n    return "causal" if r.get("causal") else ""\n'
                             'KIND = "naive"\nNOTE = "a naive kernel, tiled"\nnaive = 1\n',
        "store/captures.py": 'def f():\n    import nsightlab.problems.attention\n    sdpa_cudnn = 1\n'
                             '    raise ValueError("is it a flash_kernels.bench CSV?")\n'})
    got = [str(v) for v in boundary_violations(pkg, {"flash_wgmma", "torch_gemm", "naive"}, {"B", "H", "N", "D", "causal"})]
    assert got == [
        "nsightlab/analysis/l2.py:1: uses the problem field 'N' as a key",
        "nsightlab/analysis/perf.py:1: imports the problem module nsightlab.problems.attention",
        "nsightlab/analysis/perf.py:2: uses the problem field 'B' as a key",
        "nsightlab/analysis/perf.py:2: uses the problem field 'N' as a key",
        "nsightlab/analysis/roofline.py:1: imports the problem module nsightlab.problems.attention.softmax_bound",
        "nsightlab/render/figures.py:1: names the implementation 'flash_wgmma' (in 'flash_wgmma')",
        "nsightlab/render/figures.py:1: names the implementation 'torch_gemm' (in 'torch_gemm')",
        "nsightlab/render/figures.py:3: uses the problem field 'causal' as a key",
        "nsightlab/render/figures.py:4: names the implementation 'naive' (in 'naive')",
        "nsightlab/store/captures.py:2: imports the problem module nsightlab.problems.attention",
        "nsightlab/store/captures.py:3: names the implementation 'sdpa_cudnn' (an identifier)",
        "nsightlab/store/captures.py:4: names the implementation 'flash_kernels' (in 'is it a flash_kernels.bench CSV?')",
    ]
