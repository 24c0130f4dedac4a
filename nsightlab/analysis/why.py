"""``nsightlab why``: why one kernel is slower than another, as a ranked table in the terminal.

    nsightlab why CAPTURE --a flash_mma --b sdpa_flash --case "N=4096,D=128,causal=False,pass=forward"
    nsightlab why OLD --b-capture NEW --a flash_mma --case ...       # one kernel in two captures

CAPTURE is a capture folder (``profiles/<gpu>/<name>``, or a path) holding a deep report (``deep.ncu-rep``
from the deep capture tier, or an imported ``--set full`` report), or a ``.ncu-rep`` file itself. Each side's
range is the one of its implementation whose fields match ``--case``; the comparison is between the
longest launch of each (a backward pass shows all its launches and their share of the time).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from ..core.args import ArgumentParser
from ..core.errors import ProfileError
from ..problems import problem as problems
from ..store.captures import find_file, load_manifest
from ..store.read import capture_schemas, resolve
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


def _parser(prog: str) -> argparse.ArgumentParser:
    p = ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("capture", help="capture folder (profiles/<gpu>/<name>) or .ncu-rep file with the deep sections")
    p.add_argument("--a", required=True, help="the implementation to explain (a range's variant)")
    p.add_argument("--b", help="the implementation to compare with (default: --a, in --b-capture)")
    p.add_argument("--b-capture", help="a second capture for side b (one kernel in two captures)")
    p.add_argument("--case", default="", help="field=value pairs that pick one range per side, e.g. N=4096,D=128,pass=forward")
    p.add_argument("--top", type=int, default=10, help="rows of the ranked table (default 10)")
    return p


def _fmt(v: object) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
    return str(v)


def render(a_name: str, b_name: str, a: B.Deep, la: pd.DataFrame, b: B.Deep, lb: pd.DataFrame, top: int) -> str:
    """The terminal text: launches of each side, the verdict, the ranked table, the profile beside."""
    ka, kb = int(la["launch"].iloc[0]), int(lb["launch"].iloc[0])
    ranked, gaps = B.explain(a, ka, b, kb), B.metric_gaps(a, ka, b, kb)
    out = [B.verdict(a_name, b_name, ranked, gaps), ""]
    for name, d, sel in ((a_name, a, la), (b_name, b, lb)):
        t = B.launch_table(d, sel)
        out.append(f"{name}: {sel['range'].iloc[0]}")
        out += [f"  launch {r.launch:>3}  {r.time_ns / 1e3:>10,.1f} us  {r.share:>5.0%}  {r.kernel}" for r in t.itertuples()]
    out += ["", f"What explains the gap (longest launch of each; shares add up to the whole gap of "
                f"{ranked.attrs['time_a_ms'] - ranked.attrs['time_b_ms']:+.3f} ms):",
            f"  {'term':<38} {a_name[:12]:>12} {b_name[:12]:>12} {'share':>7} {'ms':>9}"]
    out += [f"  {r.term[:38]:<38} {_fmt(r.a):>12} {_fmt(r.b):>12} {r.share:>7.0%} {r.ms:>+9.3f}" for r in ranked.head(top).itertuples()]
    out += ["", f"  {'quantity':<30} {a_name[:12]:>12} {b_name[:12]:>12}"]
    out += [f"  {r.quantity:<30} {_fmt(r.a):>12} {_fmt(r.b):>12}" for r in gaps.itertuples()]
    return "\n".join(out)


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
        b = a if path_b == path_a else B.load(path_b, schemas_b)
        b_name = args.b or args.a
        la, lb = B.select_range(a, args.a, case), B.select_range(b, b_name, case)
        text = render(args.a, b_name + (" (b)" if b_name == args.a else ""), a, la, b, lb, args.top)
    except (ProfileError, ValueError) as exc:
        p.error(str(exc))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
