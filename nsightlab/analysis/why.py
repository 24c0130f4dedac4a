"""The why page's and the why command's choices, as plain functions of loaded deep reports: which range and
launch each side is (:func:`pick_sides`, by the case, the implementation and a kernel pattern), the case line
that names them, and each side's rows of a bottleneck frame. Finding the reports is nsightlab.store.find's;
the terminal text is nsightlab.cli.why's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..store import find
from . import bottleneck as B


@dataclass
class Side:
    """One side of a why comparison: the implementation ``impl`` as it is called on the page (``name``:
    the implementation, or with its capture's tag where one kernel is compared across two captures), its
    report, its range's launches (``sel``, longest first) and the one compared (``launch``: the longest, or the
    longest whose kernel matches the page's ``kernel``)."""
    name: str
    impl: str
    deep: B.Deep
    sel: pd.DataFrame
    launch: int


def pick_sides(deep_a: B.Deep, deep_b: B.Deep | None, a: str, b: str, wanted: dict[str, str],
               tags: tuple[str, str] = ("a", "b"), kernel: str = "", strict: bool = False,
               ) -> tuple[dict[str, str], Side, Side | None]:
    """The case and the two sides of a why page. ``deep_b`` None: both sides from ``deep_a`` (two
    implementations; ``b`` empty: the report's next one after ``a``). Else side b is from ``deep_b``, by
    default the same implementation as ``a`` (one kernel before and after a change: each side then named
    ``impl @ tag``), selected by the fields of the case that report knows, or, where side a's range names options
    no range of that report has (the implementation captured with other options), by the case as given. ``a``
    empty: the report's first implementation. Returns (the case completed from ``a``'s ranges, side a, side b
    or None where there is nothing to compare with). ``kernel``: a regular expression that picks each side's
    launch (:func:`bottleneck.pick_launch`). ``strict``: a case that leaves a field open where side a's ranges
    differ in it is refused, naming the field and its values (:func:`bottleneck.complete_case`), instead of
    taking the first. ValueError says what is wrong and what is held."""
    held_a = list(dict.fromkeys(deep_a.launches["variant"].dropna()))
    held_b = held_a if deep_b is None else list(dict.fromkeys(deep_b.launches["variant"].dropna()))
    if not held_a or not held_b:
        raise ValueError(f"{'the report' if not held_a else 'b_capture'} holds no range of an implementation "
                         "(its ranges do not decode: capture it through nsightlab, or import it with its range names)")
    for what, got, held in (("a", a, held_a), ("b", b, held_b)):
        if got and got not in held:
            where = "the report" if what == "a" or deep_b is None else "b_capture"
            raise ValueError(f"{what}={got!r}: no implementation {got!r} in {where}; held: {', '.join(held) or 'none'}")
    a = a or held_a[0]
    if deep_b is None:
        b = b or next((v for v in held_b if v != a), a)
        if b == a and len(held_a) > 1:
            raise ValueError(f"a and b are both {a!r}; choose two of: {', '.join(held_a)} (or give b_capture)")
    else:
        if not b and a not in held_b:
            raise ValueError(f"a={a!r} has no range in b_capture, so side b needs its implementation named (b); "
                             f"held there: {', '.join(held_b)}")
        b = b or a
    cross = deep_b is not None
    cols_a = deep_a.launches.columns
    cols_b = deep_b.launches.columns if cross else cols_a
    # two reports: a field of the case that only side b's range names have (an option added between the two
    # captures) picks side b's range alone; one neither has is refused (by side a's selection, naming its fields)
    only_b = {k: v for k, v in wanted.items() if cross and k not in cols_a and k in cols_b}
    at = B.complete_case(deep_a, a, {k: v for k, v in wanted.items() if k not in only_b}, strict=strict)
    la = B.select_range(deep_a, a, at)
    # side b of another report: the same implementation at side a's completed case (the fields that report
    # knows) and the fields only it has; another implementation by the case as given, as in its own report
    at_b = {k: v for k, v in ({**at, **only_b} if a == b else wanted).items() if k in cols_b} if cross else at
    try:
        lb = B.select_range(deep_b if cross else deep_a, b, at_b)
    except ValueError as exc:
        failed = ValueError(f"{'b_capture: ' if cross else ''}{exc}")
        # the same implementation run with other options in b_capture (a change of plan between the two
        # captures: side a's completed case names its own options): side b by the case as given, where that
        # picks one range there
        by_case = {k: v for k, v in wanted.items() if k in cols_b}
        if not (cross and a == b and by_case != at_b):
            raise failed from None
        try:
            lb = B.select_range(deep_b, b, by_case)
        except ValueError:
            raise failed from None
    if cross and tags[0] == tags[1]:
        tags = (f"{tags[0]} (a)", f"{tags[1]} (b)")
    # one implementation in two captures: each side named with its capture's tag
    name_a, name_b = (f"{a} @ {tags[0]}", f"{b} @ {tags[1]}") if cross and a == b else (a, b)
    side_a = Side(name_a, a, deep_a, la, B.pick_launch(la, kernel))
    if not cross and b == a:
        return at, side_a, None
    side_b = Side(name_b, b, deep_b if cross else deep_a, lb, B.pick_launch(lb, kernel))
    return at, side_a, side_b


def _range_fields(rng: str) -> dict[str, str] | None:
    """The pass and the field=value pairs of a range name ``prefix:impl:pass:k=v,...``; None for a name of
    another form (a foreign report's)."""
    parts = str(rng).split(":", 3)
    if len(parts) < 4 or not parts[3]:
        return None
    out = {"pass": parts[2]}
    for kv in parts[3].split(","):
        if "=" not in kv:
            return None
        k, v = kv.split("=", 1)
        out[k] = v
    return out


def case_line(at: dict[str, str], sides: list[Side]) -> str:
    """The case a why page is at, as ``k=v, ...``: side a's completed case, or, where the two sides' ranges are
    named with other fields (the same implementation with other options in two captures, or an option added
    between them), the fields both share and then, per side, the ones it names otherwise."""
    where = ", ".join(f"{k}={v}" for k, v in at.items())
    if len(sides) < 2:
        return where
    fa, fb = (_range_fields(s.sel["range"].iloc[0]) for s in sides)
    if not fa or not fb or fa == fb:
        return where
    common = ", ".join(f"{k}={v}" for k, v in at.items() if fa.get(k) == v and fb.get(k) == v)
    own = [(s.name, ", ".join(f"{k}={v}" for k, v in f.items() if g.get(k) != v))
           for s, f, g in ((sides[0], fa, fb), (sides[1], fb, fa))]
    return f"{common} ({'; '.join(f'{name}: {d}' for name, d in own if d)})"


def at_case(sides: list[Side], at: dict[str, str]) -> pd.DataFrame:
    """:func:`bottleneck.at_case` for the page's sides: every implementation of the report at the case where
    both sides come from one report; where they come from two, each side's own row, named as the side."""
    if len(sides) < 2 or sides[0].deep is sides[1].deep:
        return B.at_case(sides[0].deep, at)
    # each side's own range (its report may name the case with other fields: an option added between captures)
    return pd.DataFrame([B.range_row(B.profile(s.deep).set_index("launch"), s.name, s.sel) for s in sides])


def per_side(frame_of, sides: list[Side]) -> pd.DataFrame:
    """The rows of ``frame_of(deep)`` (:func:`bottleneck.stalls`, :func:`bottleneck.pipes`) of each side's
    compared launch, with ``variant`` set to the side's name."""
    return pd.concat([(f := frame_of(s.deep))[f["launch"] == s.launch].assign(variant=s.name) for s in sides],
                     ignore_index=True)


def sides_in(capture: str | Path, a: str, b: str = "", case: str = "", b_capture: str | Path | None = None,
             kernel: str = "") -> tuple[Side, Side | None, tuple[Path, Path]]:
    """Side a and side b of ``capture``'s deep report (side b from ``b_capture``'s where given), picked as
    :func:`pick_sides` picks them (strictly) for ``case`` (``field=value,...``); and the two reports' paths.
    ProfileError where a capture holds no deep report; ValueError where the case picks no side."""
    path_a, schemas_a = find.deep_report(capture)
    path_b, schemas_b = find.deep_report(b_capture) if b_capture else (path_a, schemas_a)
    deep_a = B.load(path_a, schemas_a)
    deep_b = None if path_b == path_a else B.load(path_b, schemas_b)
    _, side_a, side_b = pick_sides(deep_a, deep_b, a, b, B.parse_case(case), find.report_tags(path_a, path_b), kernel,
                                   strict=True)
    return side_a, side_b, (path_a, path_b)

