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

import pandas as pd

from ..analysis import advice as A
from ..analysis import bottleneck as B
from ..analysis import why
from ..core.args import EXIT_STATUS, ArgumentParser, positive_int, print_error
from ..core.errors import ProfileError
from ..store import find
from ..store.read import REPO


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


def main(argv: list[str] | None = None, prog: str = "nsightlab why") -> int:
    p = _parser(prog)
    args = p.parse_args(argv)
    if args.b is None and args.b_capture is None:
        p.error("give --b (another implementation) and/or --b-capture (the same one in another capture)")
    try:
        side_a, side_b, (path_a, path_b) = why.sides_in(args.capture, args.a, args.b or "", args.case,
                                                        args.b_capture, args.kernel)
        if side_b is None:
            raise ValueError(f"{args.a} is the only implementation in {path_a}; give --b-capture to compare it")
        text = render(side_a.name, side_b.name, side_a.deep, side_a.sel, side_b.deep, side_b.sel, args.top,
                      (side_a.launch, side_b.launch), full=args.full,
                      commits=(find.report_commit(path_a), find.report_commit(path_b)))
    except (ProfileError, ValueError) as exc:
        p.error(str(exc))
    except (OSError, RuntimeError) as exc:  # a folder that can't be read: permissions, a loop of symbolic links
        print_error(prog, f"{args.capture}: cannot be read ({exc})")
        return 2
    print(text)
    return 0
