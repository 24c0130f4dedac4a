"""The Problem protocol: what a family of kernels computes, declared once as data.

A :class:`Problem` names its typed parameters (each with its command-line flag, help, default and
whether a case may leave it out), validates and normalizes a case's values, builds a case's inputs,
gives the work model an implementation falls back on, names its reference implementations and
writes its NVTX range schema. Every generic stage reads a problem through this protocol only: the
sweep expands and names cases with it, the workload builds inputs with it, the capture command takes
its shape flags from its parameters (``-B -H -N -D`` for attention, ``-M -N -K`` for a GEMM).

A problem becomes known by :func:`register` (built-ins on import of :mod:`nsightlab.problems`; a
user's from its plug-in module, or from the module of an implementation that solves it).
This module imports neither torch nor any kernel package.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.args import MAX_INT
from ..core.ranges import LABEL, PASS, RangeSchema
from ..core.text import csv_list

PASSES = ("forward", "backward")
#: the problem a bare callable (``--impl module:callable``) solves: ``fn(q, k, v, *, causal=False, scale=None)``
DEFAULT_PROBLEM = "attention"
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
    #: the NVTX range prefix of a sweep that names none
    range_prefix: str = "case"
    #: what a range of this problem names (the range schema's description)
    range_description: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise ValueError(f"problem {self.name}: parameter names repeat: {names}")

    def parameter(self, name: str) -> Parameter:
        return next(p for p in self.parameters if p.name == name)

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


def register(problem: Problem) -> Problem:
    """Make ``problem`` known by name in this process (a later registration of the name replaces it)."""
    _PROBLEMS[problem.name] = problem
    return problem


def known() -> dict[str, Problem]:
    return dict(_PROBLEMS)


def get(name: str) -> Problem:
    """A registered problem; unknown names are errors that list the known ones."""
    if name not in _PROBLEMS:
        raise ValueError(f"unknown problem {name!r}; known: {', '.join(sorted(_PROBLEMS)) or 'none'} (a problem is "
                         "registered by its plug-in module: --plugin MODULE, or the module of an implementation)")
    return _PROBLEMS[name]


def one_of(names: Sequence[str], what: str) -> str:
    """The single problem ``names`` agree on; ValueError when they name several."""
    found = sorted(set(names))
    if len(found) > 1:
        raise ValueError(f"{what} mixes problems {found}; one sweep is one problem")
    return found[0] if found else DEFAULT_PROBLEM
