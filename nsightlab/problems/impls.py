"""Implementations: what the workload runs inside its ranges, and how much work each case is.

An :class:`Implementation` is a name, a callable (or ``"module:callable"``, imported only when the
workload runs it), the name of the :class:`~nsightlab.problems.problem.Problem` it solves (which builds
its inputs; a bare callable solves the default problem, :func:`nsightlab.problems.problem.default_name`),
optionally a work model, a ``supports`` check and traits. Built-in references register themselves; packages plug theirs in
through the same doors a user has:

- ``--impl mypkg.attn:my_attention``: any callable ``fn(q, k, v, *, causal=False, scale=None)``,
  backward through autograd; or a module attribute that *is* an :class:`Implementation`.
- ``--impl fast=mypkg.attn:my_attention``: the same, under another name.
- a plug-in module (``--plugin mypkg.study``, ``plugins = [...]`` in a sweep file, the
  ``NSIGHTLAB_PLUGINS`` environment variable, or a ``nsightlab.plugins`` entry point) that calls
  :func:`register` (and :func:`nsightlab.problems.problem.register` for a problem of its own,
  :func:`register_style` for its implementations' colour and marker on every figure,
  :func:`nsightlab.run.sweep.register_sweeps`, :func:`nsightlab.core.ranges.register`).

This module imports neither torch nor any kernel package.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .problem import PASSES, WorkModel, default_name
from .problem import register_style as register_style  # noqa: F401 - a plug-in registers its implementations' colours here too

_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")


@dataclass(frozen=True)
class Implementation:
    name: str
    #: the callable, or "module:attribute" (imported at run time only)
    target: Callable[..., Any] | str
    #: the name of the problem it solves (which builds its inputs and names its ranges); "": the default
    #: problem (:func:`nsightlab.problems.problem.default_name`)
    problem: str = ""
    passes: tuple[str, ...] = PASSES
    #: None: the problem's own work model; see WorkModel
    work: WorkModel | None = None
    #: params, pass -> None if the case can run, else the reason it cannot (recorded as a skip)
    supports: Callable[[Mapping[str, Any], str], str | None] | None = None
    #: params, options -> the options the kernel will run with (defaults filled in, validated)
    resolve_options: Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]] | None = None
    #: facts a report may use (e.g. materializes=True), recorded with every case
    traits: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    #: called once before the workload's first case, outside every range (e.g. build the kernels)
    setup: Callable[[], Any] | None = None

    def __post_init__(self) -> None:
        if not self.problem:
            object.__setattr__(self, "problem", default_name())
        if not _NAME.match(self.name):
            raise ValueError(f"implementation name {self.name!r} may only hold letters, digits and _ . + -")
        bad = [p for p in self.passes if p not in PASSES]
        if bad:
            raise ValueError(f"{self.name}: passes must be among {PASSES}, not {bad}")

    def callable(self) -> Callable[..., Any]:
        """The function itself (imports its module now)."""
        return self.target if callable(self.target) else _load_attr(self.target)

    def why_not(self, params: Mapping[str, Any], pass_: str) -> str | None:
        if pass_ not in self.passes:
            return f"{self.name} has no {pass_} pass (it has {', '.join(self.passes)})"
        return self.supports(params, pass_) if self.supports else None

    def options_for(self, params: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
        if self.resolve_options is not None:
            return self.resolve_options(params, options)
        return dict(options)


_REGISTRY: dict[str, Implementation] = {}


def register(impl: Implementation) -> Implementation:
    """Make ``impl`` known by name in this process (a later registration of the name replaces it)."""
    _REGISTRY[impl.name] = impl
    return impl


def known() -> dict[str, Implementation]:
    """Every registered implementation (the built-in references register when :mod:`nsightlab.problems` imports)."""
    return dict(_REGISTRY)


def _load_attr(spec: str) -> Any:
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"{spec!r} is not 'module:callable' (e.g. mypkg.attn:my_attention)")
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise ValueError(_import_failure(module, spec, exc)) from None
    obj: Any = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"module {module!r} has no attribute {attr!r} (for {spec!r})")
        obj = getattr(obj, part)
    return obj


def _import_failure(module: str, spec: str, exc: ImportError) -> str:
    """Why ``module`` does not import, in one line: the module itself is not found (PYTHONPATH), or it
    is there but imports a package that is not installed here (torch, most often: say so)."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if not missing or module == missing or module.startswith(missing + "."):
        return f"cannot import {module!r} for {spec!r}: {exc} (is it on PYTHONPATH, or run from its folder?)"
    top = missing.split(".")[0]
    if top == "torch":
        return (f"{module!r} (for {spec!r}) needs torch, which is not installed here: pip install torch "
                "(listing the cases needs no GPU, but it imports the implementation's module)")
    return (f"{module!r} (for {spec!r}) needs the module {missing!r}, which is not installed here: install the "
            f"package that provides it (often pip install {top})")


def resolve(spec: str) -> Implementation:
    """An implementation by registered name, ``module:callable`` or ``name=module:callable``.
    Unknown names are errors that list the known ones."""
    spec = spec.strip()
    if spec in _REGISTRY:
        return _REGISTRY[spec]
    name, eq, target = spec.partition("=") if "=" in spec.split(":", 1)[0] else ("", "", spec)
    if ":" not in target:
        raise ValueError(f"unknown implementation {spec!r}; known: {', '.join(sorted(_REGISTRY)) or 'none'} "
                         "(or give module:callable, e.g. mypkg.attn:my_attention; plug-ins: --plugin MODULE)")
    obj = _load_attr(target)
    if isinstance(obj, Implementation):
        impl = obj if not name else Implementation(**{**obj.__dict__, "name": name})
    elif callable(obj):
        impl = Implementation(name or target.rsplit(":", 1)[1].rsplit(".", 1)[-1], target,
                              description=f"{target} (a user callable; backward through autograd)")
    else:
        raise ValueError(f"{target!r} is neither callable nor an nsightlab Implementation")
    return register(impl)


# --------------------------------------------------------------------------- plug-ins

ENTRY_POINT_GROUP = "nsightlab.plugins"
_LOADED: set[str] = set()


def load_plugins(modules: tuple[str, ...] | list[str] = (), *, entry_points: bool = True) -> list[str]:
    """Import plug-in modules: ``modules``, then ``$NSIGHTLAB_PLUGINS`` (comma-separated), then the
    installed ``nsightlab.plugins`` entry points. A module registers on import or through a
    ``register()`` function. Returns the modules loaded."""
    names = list(modules) + [m for m in os.environ.get("NSIGHTLAB_PLUGINS", "").split(",") if m.strip()]
    if entry_points:
        from importlib.metadata import entry_points as eps

        names += [ep.value.split(":")[0] for ep in eps(group=ENTRY_POINT_GROUP)]
    done = []
    for mod_name in dict.fromkeys(n.strip() for n in names):
        if mod_name in _LOADED:
            continue
        try:
            mod = importlib.import_module(mod_name)
        except ImportError as exc:
            raise ValueError(f"plug-in {mod_name!r} cannot be imported: {exc}") from None
        if callable(getattr(mod, "register", None)):
            mod.register()
        _LOADED.add(mod_name)
        done.append(mod_name)
    return done
