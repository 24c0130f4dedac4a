"""Sweeps: which implementations run on which shapes, passes and options, under which tools.

A sweep is data, written as TOML (or built from the capture command line) and stored in every
capture's manifest, so that a capture re-runs exactly::

    name = "mine"
    description = "my kernel beside SDPA flash"
    problem = "attention"          # builds the inputs; "custom": each implementation brings its own
    range_prefix = "attn"          # NVTX ranges: attn:<impl>:<pass>:B=..,H=..,...
    tools = ["ncu", "nsys"]
    plugins = ["mypkg.study"]      # modules that register implementations (optional)

    [[grid]]                       # every combination of the listed values (scalars = one value)
    impl = ["mypkg.attn:my_attention", "sdpa_flash"]
    pass = ["forward", "backward"]
    B = 4
    H = 16
    N = [1024, 4096]
    D = 128
    causal = [false, true]
    options = {}                   # implementation options (lists expand too)

The cases of all grids are taken in order, duplicates dropped. A case an implementation cannot run
(its ``supports`` check, or options it rejects) is kept as a skipped case with the reason.
"""

from __future__ import annotations

import itertools
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..core.ranges import LABEL, PASS, RangeSchema
from ..problems.impls import PASSES, Implementation, load_plugins, resolve

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


@dataclass
class Sweep:
    name: str
    grids: list[dict[str, Any]]
    description: str = ""
    problem: str = "attention"
    range_prefix: str = "attn"
    tools: tuple[str, ...] = ("ncu", "nsys")
    plugins: tuple[str, ...] = ()
    #: ncu replay: "application" reruns the (deterministic) workload per counter pass; "kernel" replays each kernel
    replay_mode: str = "application"
    nsys_iters: int = 5
    warmup: int = 1
    #: a benchmark the capture runs as a further step: {"module": "pkg.bench", "args": [...]} (writes CSVs into the capture)
    bench: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        import re

        if not re.fullmatch(r"[A-Za-z0-9_.+-]+", self.name or ""):
            raise ValueError(f"sweep name {self.name!r} may only hold letters, digits and _ . + - (it names the capture folder)")
        bad = [t for t in self.tools if t not in TOOLS]
        if bad or not self.tools:
            raise ValueError(f"tools must be among {TOOLS}, not {list(self.tools)}")
        if self.replay_mode not in REPLAY_MODES:
            raise ValueError(f"replay_mode must be one of {REPLAY_MODES}, not {self.replay_mode!r}")
        if "bench" in self.tools and not (self.bench and self.bench.get("module")):
            raise ValueError("tools has 'bench' but the sweep has no [bench] module")
        if set(self.tools) & {"ncu", "nsys"} and not self.grids:
            raise ValueError(f"sweep {self.name!r} has no [[grid]] of cases for ncu/nsys")
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
        for key in ("tools", "plugins"):
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
        d["tools"], d["plugins"] = list(self.tools), list(self.plugins)
        return {k: v for k, v in d.items() if v is not None}

    def to_toml(self) -> str:
        import tomli_w

        return tomli_w.dumps(self.to_dict())

    # -- cases
    def schema(self) -> RangeSchema:
        if self.problem == "attention":
            from ..problems import attention

            return attention.schema(self.range_prefix)
        # another problem: its cases are named by the fields its grids give, typed by their values
        fields: dict[str, str] = {}
        for grid in self.grids:
            for key, val in grid.items():
                if key in ("impl", "pass", "options"):
                    continue
                first = _as_list(val)[0]
                fields.setdefault(key, "bool" if isinstance(first, bool) else "int" if isinstance(first, int)
                                  else "float" if isinstance(first, float) else "str")
        return RangeSchema(self.range_prefix, (LABEL, PASS), fields, {}, {PASS: PASSES},
                           f"{self.problem} case: implementation, pass, {', '.join(fields) or 'no fields'}")

    def cases(self, *, load: bool = True) -> list[Case]:
        """Every case of every grid, in order, each with its range name, status, work model and traits."""
        if load:
            load_plugins(self.plugins)
        schema = self.schema()
        out: dict[str, Case] = {}
        for gi, grid in enumerate(self.grids):
            g = dict(grid)
            impls = _as_list(g.pop("impl"))
            passes = _as_list(g.pop("pass", list(PASSES)))
            bad = [p for p in passes if p not in PASSES]
            if bad:
                raise ValueError(f"sweep {self.name!r}, grid {gi + 1}: pass must be among {PASSES}, not {bad}")
            opt_grid = g.pop("options", {}) or {}
            if not isinstance(opt_grid, dict):
                raise ValueError(f"sweep {self.name!r}, grid {gi + 1}: options must be a table, not {opt_grid!r}")
            for impl_spec in impls:
                impl = resolve(str(impl_spec))
                for params in _product(g):
                    params = self._normalize(params, gi)
                    for options in _product(opt_grid):
                        for pass_ in passes:
                            case = self._case(schema, impl, params, options, pass_)
                            out.setdefault(case.range, case)
        return list(out.values())

    def _normalize(self, params: dict[str, Any], gi: int) -> dict[str, Any]:
        if self.problem != "attention":
            return params
        from ..problems import attention

        try:
            return attention.normalize(params)
        except ValueError as exc:
            raise ValueError(f"sweep {self.name!r}, grid {gi + 1}: {exc}") from None

    def _case(self, schema: RangeSchema, impl: Implementation, params: dict[str, Any], options: dict[str, Any],
              pass_: str) -> Case:
        status = "planned"
        why = impl.why_not(params, pass_)
        resolved = dict(options)
        if why is None:
            try:
                resolved = impl.options_for(params, options)
            except ValueError as exc:
                why = str(exc)
        if why:
            status = f"skipped: {why}"
        name = schema.name({LABEL: impl.name, PASS: pass_, **params}, resolved)
        work = impl.work
        if work is None and impl.problem == "attention":
            from ..problems import attention

            work = attention.WORK
        model = work.evaluate(params, pass_) if work is not None else None
        return Case(impl.name, pass_, params, resolved, name, status, model, dict(impl.traits))


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
              range_prefix: str = "attn", replay_mode: str = "application", nsys_iters: int = 5) -> Sweep:
    """The sweep a capture command line describes (one grid)."""
    grid = {"impl": list(impls), "pass": list(passes), **{k: v for k, v in params.items() if v is not None}}
    if options:
        grid["options"] = dict(options)
    return Sweep(name, [grid], description or f"{', '.join(impls)}", tools=tuple(tools), plugins=tuple(plugins),
                 range_prefix=range_prefix, replay_mode=replay_mode, nsys_iters=nsys_iters)
