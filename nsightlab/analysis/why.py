"""``nsightlab why``: why one kernel is slower than another, as a ranked table in the terminal.

    nsightlab why CAPTURE --a flash_mma --b sdpa_flash --case "N=4096,D=128,causal=False,pass=forward"
    nsightlab why OLD --b-capture NEW --a flash_mma --case ...       # one kernel in two captures
    nsightlab why CAPTURE --a flash_decode --b sdpa_cudnn --kernel "combine|reduction"  # not the longest launch

CAPTURE is a capture folder (``profiles/<gpu>/<name>``, or a path) holding a deep report (``deep.ncu-rep``
from the deep capture tier, or an imported ``--set full`` report), or a ``.ncu-rep`` file itself. Each side's
range is the one of its implementation whose fields match ``--case``; the comparison is between the
longest launch of each (a backward pass shows all its launches and their share of the time), or with
``--kernel REGEX`` the longest launch of each whose kernel name (or signature) matches.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..core.args import EXIT_STATUS, ArgumentParser, positive_int, print_error
from ..core.errors import ProfileError
from ..problems import problem as problems
from ..store.captures import capture_tags, find_file, load_manifest
from ..store.read import REPO, capture_schemas, resolve
from . import advice as A
from . import bottleneck as B

DEEP_NAMES = ("deep.ncu-rep", "ncu.ncu-rep")


def deep_report(capture: str | Path) -> tuple[Path, tuple]:
    """(the deep report of a capture folder or a report path, the range schemas to decode it with)."""
    p = Path(capture)
    if p.name.endswith((".ncu-rep", ".ncu-rep.xz", ".ncu-rep.gz")) and p.exists():
        return p, tuple(prob.schema() for prob in problems.known().values())  # a bare report: the known problems' names
    folder = resolve(capture)
    manifest = load_manifest(folder)
    for name in DEEP_NAMES:
        found = find_file(folder, name)
        if found is not None:
            return found, capture_schemas(manifest)
    raise ProfileError(f"{folder}: no deep report (deep.ncu-rep) and no Nsight Compute report; capture one with "
                       "nsightlab capture ... --deep REGEX")


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


def _parser(prog: str) -> argparse.ArgumentParser:
    p = ArgumentParser(prog=prog, description=__doc__, epilog=EXIT_STATUS)
    p.add_argument("capture", help="capture folder (profiles/<gpu>/<name>) or .ncu-rep file with the deep sections")
    p.add_argument("--a", required=True, help="the implementation to explain (a range's variant)")
    p.add_argument("--b", help="the implementation to compare with (default: --a, in --b-capture)")
    p.add_argument("--b-capture", help="a second capture for side b (one kernel in two captures)")
    p.add_argument("--case", default="", help="field=value pairs that pick one range per side, e.g. N=4096,D=128,pass=forward "
                   "(with --b-capture, a field only that capture's range names have narrows side b alone)")
    p.add_argument("--kernel", default="", help="a regular expression: compare the longest launch of each side whose "
                   "kernel name or signature matches it (default: the longest launch of each)")
    p.add_argument("--top", type=positive_int, default=5,
                   help="parts of the gap, rules and opcodes listed (without --full)")
    p.add_argument("--full", action="store_true", help="everything: every term, rule (with its message) and opcode, "
                   "each side's launches, the profile side by side, the line of each stall term, memory accesses "
                   "and predicated instructions beyond the ideal")
    return p


def _fmt(v: object) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
    return str(v)


def _table(header: list[str], rows: list[list[str]], right: set[int], indent: str = "  ") -> list[str]:
    """Rows as aligned text columns, each as wide as its widest cell (no name is cut); ``right``: the columns
    aligned right (numbers)."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    def line(cells: list[str]) -> str:
        return indent + "  ".join(f"{c:>{w}}" if i in right else f"{c:<{w}}"
                                  for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()
    return [line(header), *(line([str(c) for c in r]) for r in rows)]


def _speedup(v: object, kind: object) -> str:
    return "-" if v is None or pd.isna(v) else f"{v:.1f}% {kind}".rstrip()


def render(a_name: str, b_name: str, a: B.Deep, la: pd.DataFrame, b: B.Deep, lb: pd.DataFrame, top: int = 5,
           compared: tuple[int, int] | None = None, full: bool = False,
           commits: tuple[str | None, str | None] = (None, None)) -> str:
    """The terminal text: the verdict, what to try, the gap from a's time to b's with the terms that cancel
    gathered, Nsight Compute's rules side by side, the instruction mix and the throughputs; with ``full``
    every term, rule and opcode, each side's launches, the profile side by side, and the memory accesses and
    predicated instructions beyond the ideal. ``top``: the parts of the gap, rules and opcodes listed (without
    ``full``). ``compared``: the launch of each side to compare (default: the longest of each); ``commits``:
    each side's capture commit, to read its source lines at."""
    ka, kb = compared if compared is not None else (B.pick_launch(la), B.pick_launch(lb))
    ranked, gaps = B.explain(a, ka, b, kb), B.metric_gaps(a, ka, b, kb)
    call = B.call_line(a_name, la, b_name, lb, (ka, kb))
    longest = B.compares_longest((la, lb), (ka, kb))
    side_a, side_b = A.Launch(a_name, a, ka, commits[0]), A.Launch(b_name, b, kb, commits[1])
    out = [*([call] if call else []), B.verdict(a_name, b_name, ranked, gaps), "", "What to try (from the counters and rules below):"]
    out += [f"  - {x}" for x in A.what_to_try(side_a, side_b, ranked, REPO)]
    if full or not longest:
        for name, d, sel, k in ((a_name, a, la, ka), (b_name, b, lb, kb)):
            t = B.launch_table(d, sel)
            out += ["", f"{name}: {sel['range'].iloc[0]}"]
            out += [f"  launch {r.launch:>3}  {r.time_ns / 1e3:>10,.1f} us  {r.share:>5.0%}  {r.kernel}"
                    + ("  <- compared" if r.launch == k and not longest else "") for r in t.itertuples()]
    g = A.grouped(ranked)
    which = "longest launch" if longest else "compared launch"
    gap = ranked.attrs["time_a_ms"] - ranked.attrs["time_b_ms"]
    us = max(ranked.attrs["time_a_ms"], ranked.attrs["time_b_ms"]) < 0.1  # a short kernel: its table in microseconds
    unit, scale = ("us", 1e3) if us else ("ms", 1.0)
    out += ["", f"What explains the gap ({which} of each; from {a_name}'s {A.time_text(ranked.attrs['time_a_ms'], False)} "
                f"to {b_name}'s {A.time_text(ranked.attrs['time_b_ms'], False)}, the terms add up to the whole gap of "
                f"{A.time_text(gap)}):"]
    shown = g if full else g[(g["level"] == 0) | (g["level"] == 1) & g.index.isin(
        g[g["level"] == 1].head(top).index)]
    shares = shown["share"].notna().any()  # shares only where they read plainly (advice.grouped)
    rows = [["  " * int(r.level) + r.term, _fmt(r.a), _fmt(r.b), f"{r.ms * scale:+.{1 if us else 3}f}",
             *([] if not shares else ["" if pd.isna(r.share) else f"{r.share:.0%}"])] for r in shown.itertuples()]
    out += _table(["term", a_name, b_name, unit, *(["of the gap"] if shares else [])], rows, {1, 2, 3, 4})
    hidden = len(g) - len(shown)
    if hidden:
        out.append(f"  ... {hidden} smaller parts (--full lists them; they add up as shown)")
    rules = A.rules_side_by_side(a, ka, b, kb)
    if len(rules):
        r = rules if full else rules[rules[["speedup_a", "speedup_b"]].notna().any(axis=1)].head(top)
        out += ["", "Nsight Compute's rules, by estimated speedup (the guidance of its details page):"]
        out += _table(["rule", a_name, b_name],
                      [[x.name + (f": {x.title}" if x.title else ""), _speedup(x.speedup_a, x.speedup_type_a),
                        _speedup(x.speedup_b, x.speedup_type_b)] for x in r.itertuples()], {1, 2})
        if full:
            for x in r.itertuples():
                for name, msg in ((a_name, x.message_a), (b_name, x.message_b)):
                    if isinstance(msg, str) and msg:
                        out.append(f"    {x.name} ({name}): {msg}")
    mix = A.instruction_mix(a, ka, b, kb)
    sentence = A.mix_sentence(a_name, b_name, mix)
    if sentence:
        m = mix if full else mix.head(top)
        out += ["", sentence]
        out += _table(["opcode", a_name, b_name, "difference", "what it does"],
                      [[x.name, f"{x.a:,.0f}", f"{x.b:,.0f}", f"{x.diff:+,.0f}", x.kind] for x in m.itertuples()], {1, 2, 3})
    q = gaps.set_index("quantity")
    out += ["", "Throughput: " + "; ".join(
        f"{what} {q.at[tb, 'a']:.2f} TB/s ({q.at[pct, 'a']:.0f}% of peak) vs {q.at[tb, 'b']:.2f} TB/s ({q.at[pct, 'b']:.0f}%)"
        for what, tb, pct in (("DRAM", "dram_tbps", "dram_pct"), ("L2", "l2_tbps", "l2_pct"))
        if tb in q.index and not pd.isna(q.at[tb, "a"]) and not pd.isna(q.at[tb, "b"]))
        + " (dram__bytes.sum.per_second; lts__t_sectors.sum.per_second x 32 bytes)."]
    if out[-1].startswith("Throughput:  ("):
        out.pop()
    if not full:
        return "\n".join(out)
    out += ["", *_table(["quantity", a_name, b_name], [[r.quantity, _fmt(r.a), _fmt(r.b)] for r in gaps.itertuples()], {1, 2})]
    sides = ((a_name, a, ka, commits[0]), (b_name, b, kb, commits[1]))
    rows = [B.profile(d).set_index("launch").loc[k] for _, d, k, _ in sides]  # each side's profile row, once
    stall_terms = g[g["reason"].notna() & (g["ms"].abs() > 0)]
    if len(stall_terms) and any(len(d.sass) for _, d, _, _ in sides):
        out += ["", "Where each stall term's samples are (the source line with the most samples of that reason, per side):"]
        for t in stall_terms.itertuples():
            cells = []
            for name, d, k, commit in sides:
                h = A.stall_lines(d, k, t.reason, 1, "line", REPO, commit)
                cells.append(f"{name}: {A.where(h)} ({h.iloc[0]['share']:.0%})" if len(h) else f"{name}: -")
            out.append(f"  {t.term.strip()}: " + "; ".join(cells))
    access = []
    for (name, d, k, commit), row in zip(sides, rows, strict=True):
        hot = B.access_hotspots(d, k, n=3, repo=REPO, commit=commit)
        line = B.access_line(name, row, hot)
        if line:
            access += [f"  {line}", *(f"    {h.file}:{h.line}  {h.sass}: {h.global_sectors_excessive:,.0f} L2 sectors, "
                                      f"{h.shared_wavefronts_excessive:,.0f} shared wavefronts beyond the ideal"
                                      for h in hot.itertuples())]
    if access:
        out += ["", "Memory accesses beyond the ideal (Nsight's per-instruction Excessive counters):", *access]
    predicated, shares = [], []
    for (name, d, k, commit), row in zip(sides, rows, strict=True):
        hot = B.predicated_hotspots(d, k, n=3, repo=REPO, commit=commit)
        line, share = B.predicated_line(name, row, hot), B.predicated_share(row)
        if share is not None and line is None:
            shares.append(f"  {name} ({row['kernel']}): {share:.1%} of its executed warp instructions predicated off "
                          f"(under {B.PREDICATED_AT_LEAST:.0%}: not listed).")
        if line:
            predicated += [f"  {line}", *(f"    {h.file}:{h.line}  {h.issued_predicated_off:,.0f} of {h.inst_executed:,.0f} "
                                          f"warp instructions predicated off ({h.share:.1%} of the kernel's): {h.sass}"
                                          for h in hot.itertuples())]
    if predicated:
        out += ["", "Instructions issued with their threads predicated off (Nsight's per-instruction source counters):",
                *predicated, *shares]
    return "\n".join(out)


def _tags(path_a: Path, path_b: Path) -> tuple[str, str]:
    """:func:`capture_tags` of the captures two reports belong to (a bare report: its file)."""
    def capture(p: Path) -> tuple[dict, Path]:
        folder = Path(p).parent
        try:
            return (load_manifest(folder), folder) if (folder / "manifest.json").exists() else ({}, Path(p))
        except ProfileError:
            return {}, Path(p)
    return capture_tags(*capture(path_a), *capture(path_b))


def main(argv: list[str] | None = None, prog: str = "nsightlab why") -> int:
    p = _parser(prog)
    args = p.parse_args(argv)
    if args.b is None and args.b_capture is None:
        p.error("give --b (another implementation) and/or --b-capture (the same one in another capture)")
    try:
        case = B.parse_case(args.case)
        path_a, schemas_a = deep_report(args.capture)
        path_b, schemas_b = deep_report(args.b_capture) if args.b_capture else (path_a, schemas_a)
        a = B.load(path_a, schemas_a)
        b = None if path_b == path_a else B.load(path_b, schemas_b)
        _, side_a, side_b = pick_sides(a, b, args.a, args.b or "", case, _tags(path_a, path_b), args.kernel,
                                       strict=True)
        if side_b is None:
            raise ValueError(f"{args.a} is the only implementation in {path_a}; give --b-capture to compare it")
        text = render(side_a.name, side_b.name, a, side_a.sel, side_b.deep, side_b.sel, args.top,
                      (side_a.launch, side_b.launch), full=args.full, commits=(_commit(path_a), _commit(path_b)))
    except (ProfileError, ValueError) as exc:
        p.error(str(exc))
    except (OSError, RuntimeError) as exc:  # a folder that can't be read: permissions, a loop of symbolic links
        print_error(prog, f"{args.capture}: cannot be read ({exc})")
        return 2
    print(text)
    return 0


def _commit(report: Path) -> str | None:
    """The commit a report's capture was taken at (its manifest's), to read source lines at; None for a bare report."""
    folder = Path(report).parent
    try:
        return load_manifest(folder).get("git_commit") if (folder / "manifest.json").exists() else None
    except ProfileError:
        return None


if __name__ == "__main__":
    sys.exit(main())
