"""The Problem protocol: what a family of kernels computes, declared once as data.

A :class:`Problem` names its typed parameters (each with its command-line flag, help, default and
whether a case may leave it out), validates and normalizes a case's values, builds a case's inputs,
gives the work model an implementation falls back on, names its reference implementations and
writes its NVTX range schema. It also declares what the generic analysis and report stages need to
know of it, so that none of them names a problem, a field or an implementation:

- its key fields and their order (:attr:`Problem.key_fields`, :meth:`Problem.name_order`,
  :meth:`Problem.sort_order`: how a range's label names its fields, how tables sort rows);
- its default sweep axis (:attr:`Problem.sweep_axis`: the x of a figure that sweeps one field);
- the columns a table of its cases shows (:meth:`Problem.table_columns`);
- the fields its kernels tile along (:attr:`Problem.tile_fields`: a value off the tile grid means padded tiles);
- its own ceilings, computed from what a capture measured (:attr:`Problem.ceilings`; attention's
  softmax bound from the MUFU exp2 rate) and what it records beside a measured ceiling
  (:attr:`Problem.ceiling_notes`);
- the colour and marker of its implementations (:attr:`Problem.styles`, and :func:`register_style` for
  a plug-in's own), which every figure looks up by name (:func:`style_of`).

Every generic stage reads a problem through this protocol only: the sweep expands and names cases
with it, the workload builds inputs with it, the capture command takes its shape flags from its
parameters (``-M -N -K`` for a GEMM), the store checks a benchmark CSV's columns against its key
fields, the analysis orders and labels fields with it.

A problem becomes known by :func:`register` (built-ins on import of :mod:`nsightlab.problems`; a
user's from its plug-in module, or from the module of an implementation that solves it). One
registered problem is the default (``register(..., default=True)``; the built-in attention problem):
the one a bare callable solves, and the one a capture recorded before captures named their problem
holds (:func:`of_manifest`). This module imports neither torch nor any kernel package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.args import MAX_INT
from ..core.ranges import LABEL, PASS, RangeSchema
from ..core.text import csv_list, impl_key

PASSES = ("forward", "backward")
#: fields every case has whatever its problem (a problem's orders may name them)
CASE_FIELDS = ("suite", "config", "dtype", "pass", "variant", "impl", "options")
TYPES = ("int", "float", "str", "bool")
_BOOL_WORDS: dict[str, list[bool]] = {"both": [False, True], "yes": [True], "true": [True], "no": [False],
                                      "false": [False]}


@dataclass(frozen=True)
class Parameter:
    """One typed parameter of a problem's cases. ``int`` values are positive (shapes, counts);
    ``default`` None with ``optional`` False makes it required; an optional parameter is written
    into range names only where a case gives it."""

    name: str
    type: str
    help: str
    default: Any = None
    optional: bool = False
    #: accepted values (empty: any value of the type)
    choices: tuple[Any, ...] = ()
    #: command-line flags (default: -X for a one-letter name, --name otherwise)
    flags: tuple[str, ...] = ()
    #: an optional parameter a case leaves out equals this parameter (attention's Hkv: "H"); the range
    #: schema's same_as, so that frames show the value rather than a gap
    same_as: str = ""

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"parameter {self.name}: type must be one of {', '.join(TYPES)}, not {self.type!r}")

    @property
    def required(self) -> bool:
        return self.default is None and not self.optional

    def cli_flags(self) -> tuple[str, ...]:
        return self.flags or ((f"-{self.name}",) if len(self.name) == 1 else (f"--{self.name}",))

    def cli_help(self) -> str:
        return self.help + (f" (default {self._shown(self.default)})" if self.default is not None else "")

    def _shown(self, value: Any) -> str:
        return ("yes" if value else "no") if self.type == "bool" else str(value)

    def from_cli(self, text: str) -> list[Any]:
        """The values of one comma-separated command-line value; ValueError says what is accepted."""
        flag = self.cli_flags()[0]
        if self.type == "bool":
            if text.lower() not in _BOOL_WORDS:
                raise ValueError(f"{flag} takes both, yes or no, not {text!r}")
            return _BOOL_WORDS[text.lower()]
        items = csv_list(text)
        if self.type == "str":
            if not items:
                raise ValueError(f"{flag} takes one or more values, comma-separated, not {text!r}")
            return items
        try:
            vals = [int(x) if self.type == "int" else float(x) for x in items]
        except ValueError:
            vals = []
        if not vals or (self.type == "int" and any(not 1 <= v <= MAX_INT for v in vals)) or (
                self.type == "float" and any(v != v or abs(v) == float("inf") for v in vals)):
            what = "positive integers" if self.type == "int" else "finite numbers"
            most = f" (at most {MAX_INT} each)" if self.type == "int" else ""
            raise ValueError(f"{flag} takes {what}, comma-separated (e.g. 1024,4096), not {text!r}{most}")
        return vals

    def why_not(self, value: Any) -> str | None:
        """None if ``value`` is one this parameter accepts, else what is wrong and what is accepted."""
        if self.type == "int" and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT):
            return f"{self.name} must be a positive integer, not {value!r} (at most {MAX_INT})"
        if self.type == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"{self.name} must be a number, not {value!r}"
        if self.type == "bool" and not isinstance(value, bool):
            return f"{self.name} must be true or false, not {value!r}"
        if self.type == "str" and not isinstance(value, str):
            return f"{self.name} must be text, not {value!r}"
        if self.choices and value not in self.choices:
            return f"{self.name} must be one of {', '.join(map(str, self.choices))}, not {value!r}"
        return None


@dataclass(frozen=True)
class WorkModel:
    """A case's analytic work, as functions of its parameters (a dict of the shape fields, dtype,
    causal, ...) and pass. Any of them may be None (that quantity is then unknown)."""

    source: str
    flops: Callable[[Mapping[str, Any], str], float] | None = None
    bytes: Callable[[Mapping[str, Any], str], float] | None = None
    working_set: Callable[[Mapping[str, Any], str], float] | None = None

    def evaluate(self, params: Mapping[str, Any], pass_: str) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source}
        for key in ("flops", "bytes", "working_set"):
            fn = getattr(self, key)
            if fn is not None:
                out["flop" if key == "flops" else key] = float(fn(params, pass_))
        return out


#: params, device -> (positional arguments, keyword arguments) of an implementation's call
Inputs = Callable[[Mapping[str, Any], str], tuple[tuple[Any, ...], dict[str, Any]]]


@dataclass(frozen=True)
class Problem:
    name: str
    parameters: tuple[Parameter, ...]
    #: builds one case's inputs (torch at run time only)
    inputs: Inputs
    #: the work model of an implementation that declares none (None: the hardware counters say)
    work: WorkModel | None = None
    #: cross-parameter rules, applied after each value is checked: the normalized parameters, or ValueError
    rules: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    #: registered implementation names that compute the problem's reference answers
    references: tuple[str, ...] = ()
    #: other names of implementations that are yardsticks of this problem, not code under test (a trailing ``*``:
    #: every name with that prefix; e.g. another library's backends, a benchmark's CPU reference)
    yardsticks: tuple[str, ...] = ()
    #: the NVTX range prefix of a sweep that names none
    range_prefix: str = "case"
    #: what a range of this problem names (the range schema's description)
    range_description: str = ""
    description: str = ""
    #: the field a figure sweeps along by default ("": the first required integer parameter)
    axis: str = ""
    #: the order a range's label names its fields in (fields not listed: by name, before the axis); default:
    #: the parameters' order with the axis last
    naming: tuple[str, ...] = ()
    #: the order tables sort rows in (shape fields before the axis, say); default: :attr:`naming`
    sorting: tuple[str, ...] = ()
    #: the fields a table of cases shows, in order (default: :attr:`naming`)
    columns: tuple[str, ...] = ()
    #: the fields its kernels tile along: a value that is not a multiple of the tile means padded tiles
    tile_fields: tuple[str, ...] = ()
    #: implementation name -> (colour, plotly marker) of the implementations it knows (its references and
    #: the plug-ins it ships with); registered with the problem (see :func:`register_style`)
    styles: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    #: (a capture's measured ceilings, the roofline's points or None) -> the problem's own compute ceilings,
    #: as rows ``{"name", "value" (FLOP/s), "source", "where" (field -> value the ceiling holds for)}``
    ceilings: Callable[[Mapping[str, Any], Any], list[dict[str, Any]]] | None = None
    #: (ceiling key, measured entry) -> fields recorded beside that measured ceiling (what it means for
    #: this problem); {} where it means nothing
    ceiling_notes: Callable[[str, Mapping[str, Any]], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise ValueError(f"problem {self.name}: parameter names repeat: {names}")
        named = {*self.naming, *self.sorting, *self.columns, *self.tile_fields, *([self.axis] if self.axis else [])}
        unknown = sorted(named - set(names) - set(CASE_FIELDS))
        if unknown:
            raise ValueError(f"problem {self.name}: {unknown} are not among its parameters {names}")

    def parameter(self, name: str) -> Parameter:
        """The parameter called ``name``; KeyError naming the problem's parameters where it has none."""
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(f"problem {self.name} has no parameter {name!r}; its parameters: "
                       f"{[p.name for p in self.parameters]}")

    @property
    def key_fields(self) -> tuple[str, ...]:
        """The parameters that tell its cases apart, in declaration order (optional ones included)."""
        return tuple(p.name for p in self.parameters)

    @property
    def required_fields(self) -> tuple[str, ...]:
        """The parameters every case has (a benchmark CSV's shape columns)."""
        return tuple(p.name for p in self.parameters if not p.optional)

    @property
    def sweep_axis(self) -> str:
        """The field a figure sweeps along by default: :attr:`axis`, else the first required integer parameter."""
        return self.axis or next((p.name for p in self.parameters if p.type == "int" and not p.optional),
                                 self.parameters[0].name if self.parameters else "")

    @property
    def yes_no_fields(self) -> tuple[str, ...]:
        """Its boolean parameters (named when true in a label: no axis to sweep along)."""
        return tuple(p.name for p in self.parameters if p.type == "bool")

    def name_order(self) -> tuple[str, ...]:
        """:attr:`naming`, else the parameters' order with the sweep axis last."""
        if self.naming:
            return self.naming
        axis = self.sweep_axis
        return (*(n for n in self.key_fields if n != axis), axis)

    def sort_order(self) -> tuple[str, ...]:
        return self.sorting or self.name_order()

    def table_columns(self) -> tuple[str, ...]:
        return self.columns or self.name_order()

    def schema(self, prefix: str | None = None, description: str = "") -> RangeSchema:
        """The range grammar of this problem's cases: ``prefix:impl:pass:<fields>[,<optional fields>][,options]``."""
        fields = {p.name: p.type for p in self.parameters if not p.optional}
        optional = {p.name: p.type for p in self.parameters if p.optional}
        text = description or self.range_description or f"{self.name} case: implementation, pass, {', '.join(fields)}"
        same_as = {p.name: p.same_as for p in self.parameters if p.optional and p.same_as}
        return RangeSchema(prefix or self.range_prefix, (LABEL, PASS), fields, optional, {PASS: PASSES}, text, same_as)

    def normalize(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Validated parameters with defaults filled in (then the problem's rules). ValueError says
        what is wrong and what is accepted."""
        given = {k: v for k, v in params.items() if v is not None}
        p = {q.name: q.default for q in self.parameters if q.default is not None} | given
        names = [q.name for q in self.parameters]
        unknown = sorted(set(p) - set(names))
        if unknown:
            raise ValueError(f"unknown {self.name} parameter(s) {unknown}; accepted: {', '.join(names)}")
        for q in self.parameters:
            if q.required and q.name not in p:
                raise ValueError(f"{self.name} cases need {q.name} ({q.help})")
            why = q.why_not(p[q.name]) if q.name in p else None
            if why:
                raise ValueError(why)
        return self.rules(p) if self.rules else p

    def cli_values(self, given: Mapping[str, str | None]) -> dict[str, list[Any] | None]:
        """Each parameter's values from its command-line text (None where not given)."""
        return {q.name: None if given.get(q.name) is None else q.from_cli(str(given[q.name])) for q in self.parameters}

    def shapes_needed(self) -> str:
        """What a command line without the required parameters lacks, e.g. ``at least -N (and -B -H -D,
        default 1, 8, 64)``."""
        need = " ".join(q.cli_flags()[0] for q in self.parameters if q.required)
        sized = [q for q in self.parameters if q.type == "int" and q.default is not None]
        rest = (f" (and {' '.join(q.cli_flags()[0] for q in sized)}, default "
                f"{', '.join(str(q.default) for q in sized)})") if sized else ""
        return f"at least {need}{rest}"


_PROBLEMS: dict[str, Problem] = {}
#: the default problem's name (the last registered with default=True)
_DEFAULT: list[str] = []
#: implementation name -> (colour, marker): the registered problems' styles and the plug-ins' own
_STYLES: dict[str, tuple[str, str]] = {}


def register(problem: Problem, *, default: bool = False) -> Problem:
    """Make ``problem`` known by name in this process (a later registration of the name replaces it), with
    its implementations' styles; ``default``: it is the problem a bare callable solves and the one a capture
    that names none holds (the built-in attention problem registers so)."""
    _PROBLEMS[problem.name] = problem
    for name, (color, symbol) in problem.styles.items():
        register_style(name, color, symbol)
    if default:
        _DEFAULT[:] = [problem.name]
    return problem


def known() -> dict[str, Problem]:
    return dict(_PROBLEMS)


def get(name: str) -> Problem:
    """A registered problem; unknown names are errors that list the known ones."""
    if name not in _PROBLEMS:
        raise ValueError(f"unknown problem {name!r}; known: {', '.join(sorted(_PROBLEMS)) or 'none'} (a problem is "
                         "registered by its plug-in module: --plugin MODULE, or the module of an implementation)")
    return _PROBLEMS[name]


def default_name() -> str:
    """The default problem's name: the one a bare callable (``--impl module:callable``) solves, and the one a
    capture that names no problem holds. ValueError if no problem registered as the default."""
    if not _DEFAULT:
        raise ValueError("no default problem is registered (nsightlab.problems registers the built-in one on import)")
    return _DEFAULT[0]


def default() -> Problem:
    return get(default_name())


def __getattr__(name: str) -> Any:
    # DEFAULT_PROBLEM, read when imported: the registered default's name (kept for callers written when it was a
    # constant)
    if name == "DEFAULT_PROBLEM":
        return default_name()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def one_of(names: Sequence[str], what: str) -> str:
    """The single problem ``names`` agree on (none: the default); ValueError when they name several."""
    found = sorted(set(names))
    if len(found) > 1:
        raise ValueError(f"{what} mixes problems {found}; one sweep is one problem")
    return found[0] if found else default_name()


def matching(fields: Iterable[str]) -> Problem | None:
    """The registered problem whose every required parameter is among ``fields`` (a frame's columns, a
    range's decoded fields), the one with the most such parameters (ties: the default first, then by
    name); None if none matches."""
    have = set(fields)
    fits = [p for p in _PROBLEMS.values() if p.required_fields and set(p.required_fields) <= have]
    if not fits:
        return None
    return max(fits, key=lambda p: (len(p.required_fields), p.name in _DEFAULT, p.name))


def for_fields(fields: Iterable[str]) -> Problem:
    """:func:`matching`, else the default problem."""
    return matching(fields) or default()


def axis_for(fields: Iterable[str], x: str | None = None) -> str:
    """``x``, else the sweep axis of the problem whose fields ``fields`` (a frame: its columns) are
    (:func:`for_fields`): where a generic stage sweeps along "its problem's" field."""
    return x or for_fields(fields).sweep_axis


def _named_in(manifest: Mapping[str, Any]) -> str | None:
    for where in (manifest, manifest.get("sweep")):
        name = where.get("problem") if isinstance(where, Mapping) else None
        if isinstance(name, str) and name in _PROBLEMS:
            return name
    return None


def load_named(manifest: Mapping[str, Any]) -> None:
    """Import the plug-ins a manifest names (``plugins``, its sweep's ``plugins``) and the modules of its sweep's
    implementations (registering its problem, its implementations and their colours); modules that do not import
    are passed over (the capture is then read as the default problem's or by its fields, its implementations drawn
    in spare colours)."""
    import importlib

    sweep = manifest.get("sweep") if isinstance(manifest.get("sweep"), Mapping) else {}
    mods = [m for m in [*(manifest.get("plugins") or []), *(sweep.get("plugins") or [])] if isinstance(m, str)]
    for grid in sweep.get("grid") or []:
        specs = grid.get("impl") if isinstance(grid, Mapping) else None
        for spec in [specs] if isinstance(specs, str) else specs or []:
            if isinstance(spec, str) and ":" in spec:
                mods.append(spec.split("=", 1)[-1].split(":", 1)[0])
    for mod in dict.fromkeys(mods):
        try:
            importlib.import_module(mod)
        except Exception:  # noqa: BLE001 - any failure of a user's module leaves the problem to the fields
            continue


def of_manifest(manifest: Mapping[str, Any] | None, fields: Iterable[str] = (), *, load: bool = True) -> Problem:
    """The problem a capture's cases are: the one its manifest names (``problem``, else ``sweep.problem``)
    where that is registered (``load``: importing the plug-ins it names and its sweep's implementation modules
    first, when it is not); else the registered problem the capture's range fields (``fields``, else those of
    its range schemas) match; else the default problem, which is what a capture recorded before captures
    named their problem holds."""
    man = manifest if isinstance(manifest, Mapping) else {}
    name = _named_in(man)
    if name is None and load and man:
        load_named(man)
        name = _named_in(man)
    if name is not None:
        return _PROBLEMS[name]
    fields = list(fields)
    if not fields:
        for schema in man.get("range_schemas") or []:
            if isinstance(schema, Mapping):
                fields += [*(schema.get("fields") or {}), *(schema.get("optional") or {})]
    return for_fields(fields) if fields else default()


# --------------------------------------------------------------------------- implementation styles


def register_style(name: str, color: str, symbol: str) -> None:
    """The colour (``#RRGGBB``) and plotly marker of implementation ``name`` on every figure (a plug-in calls
    this for its implementations; a problem's :attr:`Problem.styles` register with it). A later registration
    of the name replaces it."""
    if not (isinstance(color, str) and len(color) == 7 and color.startswith("#")):
        raise ValueError(f"style of {name!r}: colour must be #RRGGBB, not {color!r}")
    _STYLES[impl_key(name)] = (color.upper(), str(symbol))


def is_yardstick(name: str) -> bool:
    """Whether implementation ``name`` is a registered problem's reference or yardstick (compared by its key,
    :func:`nsightlab.core.text.impl_key`: an imported report's spelling of the name counts)."""
    key = impl_key(name)
    for problem in _PROBLEMS.values():
        for ref in (*problem.references, *problem.yardsticks):
            r = impl_key(ref)
            if key == r or (r.endswith("*") and key.startswith(r[:-1])):
                return True
    return False


def style_of(name: str) -> tuple[str, str] | None:
    """The registered (colour, marker) of implementation ``name`` (its key as :func:`nsightlab.core.text.impl_key`
    gives it), None if none is registered."""
    return _STYLES.get(impl_key(name))


def styles() -> dict[str, tuple[str, str]]:
    """Every registered implementation style, by name."""
    return dict(_STYLES)
