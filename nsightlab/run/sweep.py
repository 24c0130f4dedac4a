"""Sweeps: which implementations run on which shapes, passes and options, under which tools.

A sweep is data, written as TOML (or built from the capture command line) and stored in every
capture's manifest, so that a capture re-runs exactly::

    name = "mine"
    description = "my kernel beside SDPA flash"
    problem = "attention"          # the Problem its cases are (default: the one its implementations solve)
    range_prefix = "attn"          # NVTX ranges: attn:<impl>:<pass>:B=..,H=..,... (default: the problem's)
    tools = ["ncu", "nsys"]
    plugins = ["mypkg.study"]      # modules that register implementations or problems (optional)
    deep = "mine:forward:.*N=4096" # cases Nsight Compute profiles again with its deep sections (optional)

    [[grid]]                       # every combination of the listed values (scalars = one value)
    impl = ["mypkg.attn:my_attention", "sdpa_flash"]
    pass = ["forward", "backward"]
    B = 4
    H = 16
    N = [1024, 4096]
    D = 128
    causal = [false, true]
    options = {}                   # implementation options (lists expand too)

The grid's other keys are the problem's parameters (:mod:`nsightlab.problems.problem`), checked and
given their defaults by it. The cases of all grids are taken in order, duplicates dropped. A case an implementation cannot run
(its ``supports`` check, or options it rejects) is kept as a skipped case with the reason.
"""

from __future__ import annotations

import itertools
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..core.metrics import DEEP_SECTIONS
from ..core.ranges import LABEL, PASS, RangeSchema
from ..problems import problem as problems
from ..problems.impls import Implementation, load_plugins, resolve
from ..problems.problem import PASSES, Problem

TOOLS = ("ncu", "nsys", "bench")
REPLAY_MODES = ("application", "kernel")


@dataclass(frozen=True)
class Case:
    """One implementation x one set of parameters x one pass x its options: one NVTX range."""

    impl: str
    pass_: str
    params: Mapping[str, Any]
    options: Mapping[str, Any]
    range: str
    status: str = "planned"  # or "skipped: <reason>"
    model: Mapping[str, Any] | None = None
    traits: Mapping[str, Any] = field(default_factory=dict)

    @property
    def runnable(self) -> bool:
        return not self.status.startswith("skipped")

    def to_json(self) -> dict[str, Any]:
        return {"range": self.range, "impl": self.impl, "pass": self.pass_, "shape": dict(self.params),
                "dtype": self.params.get("dtype"), "options": dict(self.options), "status": self.status,
                "model": dict(self.model) if self.model else None, "traits": dict(self.traits)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Case:
        return cls(d["impl"], d["pass"], dict(d.get("shape") or {}), dict(d.get("options") or {}), d["range"],
                   d.get("status", "planned"), d.get("model"), dict(d.get("traits") or {}))


#: the file beside a capture's sweep.toml that holds its plan: the cases it runs, expanded once by the capture
#: (:func:`write_cases`), which every workload it starts reads (:func:`read_cases`) instead of the sweep
CASES_FILE = "cases.json"
#: how many times this process has expanded a sweep into its cases (:meth:`Sweep.cases`; for tests)
EXPANSIONS = 0


@dataclass(frozen=True)
class PlannedCases:
    """A plan as a workload reads it from :data:`CASES_FILE`: the sweep's name, warm-up launches, plug-ins, cases and
    how to resolve their implementations (name -> the sweep's spec, e.g. ``mypkg.attn:my_attention``)."""

    sweep: str
    warmup: int
    plugins: tuple[str, ...]
    cases: list[Case]
    impls: Mapping[str, str] = field(default_factory=dict)


def write_cases(path: str | Path, sweep: Sweep, cases: Sequence[Case]) -> Path:
    """Write ``cases`` (a plan of ``sweep``, already expanded) to ``path`` as JSON (each :meth:`Case.to_json`)."""
    import json

    path = Path(path)
    used = {c.impl for c in cases}
    specs = {impl.name: str(spec) for grid, impls in zip(_impl_specs(sweep), sweep._implementations(False), strict=True)
             for spec, impl in zip(grid, impls, strict=True) if impl.name in used}
    path.write_text(json.dumps({"sweep": sweep.name, "warmup": sweep.warmup, "plugins": list(sweep.plugins),
                                "impls": specs, "cases": [c.to_json() for c in cases]}, indent=1, default=str),
                    encoding="utf-8")
    return path


def _impl_specs(sweep: Sweep) -> list[list[Any]]:
    """Each grid's implementation specs, as written."""
    return [_as_list(g["impl"]) for g in sweep.grids]


def read_cases(path: str | Path) -> PlannedCases:
    """The plan :func:`write_cases` wrote (each case by :meth:`Case.from_json`); ValueError naming the file when it
    is missing or not such a plan. The plan's plug-ins are loaded (they register its implementations)."""
    import json

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"cases file {path} does not exist")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        planned = PlannedCases(str(data["sweep"]), int(data.get("warmup", 1)), tuple(data.get("plugins") or ()),
                               [Case.from_json(c) for c in data["cases"]], dict(data.get("impls") or {}))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{path}: not a plan of cases ({type(exc).__name__}: {exc})") from None
    load_plugins(planned.plugins)
    for spec in planned.impls.values():  # registers a module:callable under its case's name (no case expanded)
        resolve(spec)
    return planned


def regex(text: str, what: str) -> re.Pattern[str]:
    """``text`` compiled; ValueError naming ``what`` (e.g. "--only") when it is not a regular expression."""
    try:
        return re.compile(text)
    except re.error as exc:
        raise ValueError(f"{what} {text!r} is not a regular expression: {exc}") from None


def nothing_to_run(sweep: str, cases: Sequence[Case]) -> str | None:
    """None if some case of ``cases`` (a sweep's, after any --only) would run; else the line that says no case
    would run and why (the implementations' reasons for skipping them, each once)."""
    if any(c.runnable for c in cases):
        return None
    if not cases:
        return f"no case would run: sweep {sweep} has no case"
    reasons = list(dict.fromkeys(c.status.removeprefix("skipped:").strip() for c in cases))
    why = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} other reason(s)" if len(reasons) > 3 else "")
    return f"no case would run: all {len(cases)} case(s) of sweep {sweep} are skipped ({why})"


@dataclass
class Sweep:
    name: str
    grids: list[dict[str, Any]]
    description: str = ""
    #: the problem its cases are (None: the one its implementations solve)
    problem: str | None = None
    #: the NVTX range prefix (None: the problem's)
    range_prefix: str | None = None
    tools: tuple[str, ...] = ("ncu", "nsys")
    plugins: tuple[str, ...] = ()
    #: ncu replay: "application" reruns the (deterministic) workload per counter pass; "kernel" replays each kernel
    replay_mode: str = "application"
    nsys_iters: int = 5
    warmup: int = 1
    #: a benchmark the capture runs as a further step: {"module": "pkg.bench", "args": [...]} (writes CSVs into the capture)
    bench: dict[str, Any] | None = None
    #: a regex over range names: the cases the capture profiles a second time with Nsight Compute's deep sections
    deep: str | None = None
    #: deep-tier sections to leave out (each one of DEEP_SECTIONS): for a kernel that stalls under one of them
    #: (``nsightlab hang`` finds which)
    deep_skip: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.+-]+", self.name or ""):
            raise ValueError(f"sweep name {self.name!r} may only hold letters, digits and _ . + - (it names the capture folder)")
        bad = [t for t in self.tools if t not in TOOLS]
        if bad or not self.tools:
            raise ValueError(f"tools must be among {TOOLS}, not {list(self.tools)}")
        if self.replay_mode not in REPLAY_MODES:
            raise ValueError(f"replay_mode must be one of {REPLAY_MODES}, not {self.replay_mode!r}")
        if "bench" in self.tools and not (self.bench and self.bench.get("module")):
            raise ValueError("tools has 'bench' but the sweep has no [bench] module")
        if (set(self.tools) & {"ncu", "nsys"} or self.deep) and not self.grids:
            raise ValueError(f"sweep {self.name!r} has no [[grid]] of cases for ncu/nsys")
        if self.deep is not None:
            regex(self.deep, f"sweep {self.name!r}: deep")
        if isinstance(self.deep_skip, str) or not all(isinstance(x, str) for x in self.deep_skip):
            raise ValueError(f"sweep {self.name!r}: deep_skip must be a list of section names, not {self.deep_skip!r}")
        self.deep_skip = tuple(dict.fromkeys(self.deep_skip))
        unknown = [x for x in self.deep_skip if x not in DEEP_SECTIONS]
        if unknown:
            raise ValueError(f"sweep {self.name!r}: deep_skip names {unknown}, which are not deep-tier sections; "
                             f"accepted: {', '.join(DEEP_SECTIONS)}")
        if not self.deep_sections():
            raise ValueError(f"sweep {self.name!r}: deep_skip leaves out every deep-tier section")
        for i, g in enumerate(self.grids):
            if not g.get("impl"):
                raise ValueError(f"sweep {self.name!r}, grid {i + 1}: no impl")

    # -- files
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], origin: str = "sweep") -> Sweep:
        data = dict(data)
        grids = data.pop("grid", data.pop("grids", []))
        known = {f for f in cls.__dataclass_fields__ if f != "grids"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{origin}: unknown key(s) {unknown}; accepted: grid, {', '.join(sorted(known))}")
        if not isinstance(grids, list) or not all(isinstance(g, dict) for g in grids):
            raise ValueError(f"{origin}: [[grid]] must be a list of tables")
        for key in ("tools", "plugins", "deep_skip"):
            if key in data:
                data[key] = tuple(data[key])
        try:
            return cls(grids=[dict(g) for g in grids], **data)
        except TypeError as exc:
            raise ValueError(f"{origin}: {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> Sweep:
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"sweep file {path} does not exist")
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: not valid TOML ({exc})") from None
        return cls.from_dict(data, str(path))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["grid"] = d.pop("grids")
        d["tools"], d["plugins"], d["deep_skip"] = list(self.tools), list(self.plugins), list(self.deep_skip)
        if not self.deep_skip:
            del d["deep_skip"]
        return {k: v for k, v in d.items() if v is not None}

    def deep_sections(self) -> tuple[str, ...]:
        """The deep tier's Nsight Compute sections for this sweep: DEEP_SECTIONS less ``deep_skip``."""
        return tuple(s for s in DEEP_SECTIONS if s not in self.deep_skip)

    def to_toml(self) -> str:
        import tomli_w

        return tomli_w.dumps(self.to_dict())

    # -- cases
    def _implementations(self, load: bool) -> list[list[Implementation]]:
        """Each grid's implementations, resolved (importing their modules registers their problems)."""
        if load:
            load_plugins(self.plugins)
        return [[resolve(str(spec)) for spec in _as_list(g["impl"])] for g in self.grids]

    def problem_of(self, *, load: bool = True) -> Problem:
        """The problem the cases are: the sweep's own, else the one its implementations solve. An
        implementation of another problem is an error."""
        impls = [i for grid in self._implementations(load) for i in grid]
        problem = problems.get(self.problem or problems.one_of([i.problem for i in impls], f"sweep {self.name!r}"))
        for impl in impls:
            if impl.problem != problem.name:
                raise ValueError(f"sweep {self.name!r}: implementation {impl.name} solves {impl.problem}, not {problem.name}")
        return problem

    def schema(self, *, load: bool = True) -> RangeSchema:
        return self.problem_of(load=load).schema(self.range_prefix)

    def cases(self, *, load: bool = True) -> list[Case]:
        """Every case of every grid, in order, each with its range name, status, work model and traits.

        Expanded once per sweep object (the plan of a capture: its listing, checks and steps all read the same
        cases; a workload it starts reads them from :data:`CASES_FILE` and expands nothing): later calls return
        the first expansion again, unless the sweep's data changed since."""
        key = repr(self.to_dict())
        memo = getattr(self, "_expanded", None)
        if memo is not None and memo[0] == key:
            if load:
                load_plugins(self.plugins)
            return list(memo[1])
        cases = self._expand(load)
        self._expanded = (key, tuple(cases))
        return cases

    def _expand(self, load: bool) -> list[Case]:
        global EXPANSIONS
        EXPANSIONS += 1
        problem = self.problem_of(load=load)
        schema = problem.schema(self.range_prefix)
        out: dict[str, Case] = {}
        for gi, (grid, impls) in enumerate(zip(self.grids, self._implementations(False), strict=True)):
            g = {k: v for k, v in grid.items() if k != "impl"}
            passes = _as_list(g.pop("pass", list(PASSES)))
            bad = [p for p in passes if p not in PASSES]
            if bad:
                raise ValueError(f"sweep {self.name!r}, grid {gi + 1}: pass must be among {PASSES}, not {bad}")
            opt_grid = g.pop("options", {}) or {}
            if not isinstance(opt_grid, dict):
                raise ValueError(f"sweep {self.name!r}, grid {gi + 1}: options must be a table, not {opt_grid!r}")
            for impl in impls:
                for params in _product(g):
                    try:
                        params = problem.normalize(params)
                    except ValueError as exc:
                        raise ValueError(f"sweep {self.name!r}, grid {gi + 1}: {exc}") from None
                    for options in _product(opt_grid):
                        for pass_ in passes:
                            case = _case(schema, problem, impl, params, options, pass_)
                            out.setdefault(case.range, case)
        return list(out.values())

    def deep_cases(self, cases: Sequence[Case], deep: str | None = None) -> list[Case]:
        """The runnable ``cases`` whose range name matches ``deep`` (default: the sweep's own regex)."""
        text = deep if deep is not None else self.deep
        if not text:
            return []
        rx = regex(text, "--deep")
        return [c for c in cases if c.runnable and rx.search(c.range)]


def _case(schema: RangeSchema, problem: Problem, impl: Implementation, params: dict[str, Any],
          options: dict[str, Any], pass_: str) -> Case:
    why = impl.why_not(params, pass_)
    resolved = dict(options)
    if why is None:
        try:
            resolved = impl.options_for(params, options)
        except ValueError as exc:
            why = str(exc)
    name = schema.name({LABEL: impl.name, PASS: pass_, **params}, resolved)
    work = impl.work or problem.work
    model = work.evaluate(params, pass_) if work is not None else None
    return Case(impl.name, pass_, params, resolved, name, f"skipped: {why}" if why else "planned", model,
                dict(impl.traits))


def _as_list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _product(grid: Mapping[str, Any]) -> list[dict[str, Any]]:
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(_as_list(grid[k]) for k in keys))]


# --------------------------------------------------------------------------- named sweeps

_SWEEP_DIRS: list[Path] = []


def register_sweeps(folder: str | Path) -> None:
    """Make the ``*.toml`` sweeps in ``folder`` known by their file names (``--suite NAME``)."""
    folder = Path(folder)
    if folder not in _SWEEP_DIRS:
        _SWEEP_DIRS.append(folder)


def named_sweeps() -> dict[str, Path]:
    load_plugins()
    return {p.stem: p for d in _SWEEP_DIRS for p in sorted(d.glob("*.toml"))}


def find(name_or_path: str) -> Sweep:
    """A sweep by registered name or by path to a TOML file."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        return Sweep.load(p)
    known = named_sweeps()
    if name_or_path not in known:
        raise ValueError(f"unknown sweep {name_or_path!r}; known: {', '.join(known) or 'none'} (or give a .toml file; "
                         "sweeps are registered by plug-ins: --plugin MODULE or NSIGHTLAB_PLUGINS)")
    return Sweep.load(known[name_or_path])


def from_args(name: str, impls: Sequence[str], params: Mapping[str, Any], passes: Sequence[str],
              options: Mapping[str, Any], tools: Sequence[str], *, description: str = "", plugins: Sequence[str] = (),
              problem: str | None = None, range_prefix: str | None = None, replay_mode: str = "application",
              nsys_iters: int = 5, deep: str | None = None) -> Sweep:
    """The sweep a capture command line describes (one grid)."""
    grid = {"impl": list(impls), "pass": list(passes), **{k: v for k, v in params.items() if v is not None}}
    if options:
        grid["options"] = dict(options)
    return Sweep(name, [grid], description or f"{', '.join(impls)}", problem=problem, range_prefix=range_prefix,
                 tools=tuple(tools), plugins=tuple(plugins), replay_mode=replay_mode, nsys_iters=nsys_iters, deep=deep)
