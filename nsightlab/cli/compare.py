"""The ``nsightlab compare`` command: two captures, range by range, with a verdict.

    nsightlab compare BASE NEW [--threshold 5%] [--only REGEX] [--reports OUT]

BASE and NEW are capture folders or ``gpu/name`` labels of the store (``--profiles``, default
``profiles/``). The comparison itself (matching, noise, verdicts) is nsightlab.analysis.comparison's, the
page nsightlab.render.compare's; here are the options, the lines the command prints, and its exit status:
1 when a matched range is slower beyond threshold and noise, 2 for bad input or too little compared.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..analysis.comparison import COUNTERS, SOURCE_TEXT, UNMOVED, Comparison, compare_captures, parse_threshold
from ..core.args import BAD_INPUT, ArgumentParser, non_negative_float, positive_int, print_error
from ..core.errors import ProfileError
from ..render.compare import Declared, page_name, publish, write_index
from ..store.read import PROFILES

#: the --help description
DESCRIPTION = "The comparison page and the ``nsightlab compare`` command: two captures, range by range, with a verdict."


def _parser(prog: str) -> argparse.ArgumentParser:
    p = ArgumentParser(prog=prog, description=DESCRIPTION,
                       epilog="exit status: 0 no regression, 1 a matched range is slower than the threshold "
                              "beyond its noise, 2 bad input or too little compared: no range matched, or fewer "
                              "than --min-matched (a gate that compared nothing does not pass)")
    p.add_argument("base", help="the base capture: a folder, or a gpu/name label under --profiles")
    p.add_argument("new", help="the new capture, the same way")
    p.add_argument("--threshold", default="5%", help="regression threshold on the time (default 5%%; 0.05 works too)")
    p.add_argument("--only", default="", help="compare only ranges whose raw name matches this regular expression")
    p.add_argument("--min-ms", type=non_negative_float, default=0.0,
                   help="ranges faster than this in base (ms) are reported but do not fail the run (default 0: every "
                        "range gates)")
    p.add_argument("--min-matched", type=positive_int, default=1, metavar="N",
                   help="fail (exit 2) when fewer than N ranges matched between the two captures (default 1: a "
                        "comparison that matched nothing fails)")
    p.add_argument("--profiles", default=str(PROFILES), help="where labels are looked up (default profiles/)")
    p.add_argument("--reports", default="", help="render the comparison page into this folder (<name>.html, a "
                                                 "<name>.json sidecar, index.json)")
    p.add_argument("--name", default="", help="the page's file name without .html (default from the labels, e.g. "
                                              "h100-to-h200-seqlen)")
    p.add_argument("--title", default="", help="the page's title (default: 'BASE → NEW')")
    p.add_argument("--kernels", action="store_true", help="also print every kernel that moved beyond its noise")
    return p


def _report(cmp: Comparison, kernels: bool) -> None:
    """What the comparison found, as the command line prints it."""
    print(f"base {cmp.base.label} ({cmp.base.gpu}, {cmp.base.path})")
    print(f"new  {cmp.new.label} ({cmp.new.gpu}, {cmp.new.path})")
    print(f"timing: {SOURCE_TEXT[cmp.source]}")
    for r in cmp.compat:
        print(f"differs: {r['aspect']}: {r['base']} vs {r['new']} -- {r['consequence']}")
    for n in cmp.notes:
        print(f"note: {n}")
    for col, why in cmp.marks.items():
        print(f"marked: {COUNTERS[col][0]}: {why}")
    for side in ("base", "new"):
        u = cmp.unmatched[cmp.unmatched["side"] == side] if len(cmp.unmatched) else cmp.unmatched
        if len(u):
            shown = ", ".join(u["range"].astype(str).head(5))
            print(f"only in {side} ({len(u)}): {shown}{', ...' if len(u) > 5 else ''}")
    if kernels and len(cmp.kernels):
        for r in cmp.kernels[~cmp.kernels["verdict"].isin(UNMOVED)].itertuples():
            print(f"kernel {r.verdict} {r.change:+.1%} (noise ±{r.noise:.1%}) {r.label} / {r.kernel}")
    print(cmp.summary())
    for line in cmp.regression_lines():
        print(line)


def too_few_matched(cmp: Comparison, least: int = 1) -> str | None:
    """Why ``cmp`` compared too little to judge (fewer than ``least`` ranges matched): what each side held,
    what ``--only`` left of it, what did not match; None when enough matched."""
    if len(cmp.ranges) >= least:
        return None
    held = {side: len(getattr(cmp, side).samples[cmp.source]["key"].unique()) for side in ("base", "new")}
    only = f" matching --only {cmp.only!r}" if cmp.only else ""
    kept = {side: int((cmp.unmatched["side"] == side).sum()) if len(cmp.unmatched) else 0 for side in held}
    text = (f"{len(cmp.ranges)} range(s) matched between {cmp.base.label} and {cmp.new.label} ({cmp.source} timing)"
            + (f", fewer than --min-matched {least}" if least > 1 else ""))
    if cmp.only and not len(cmp.ranges) and not sum(kept.values()):
        return (f"{text}: --only {cmp.only!r} matches none of base's {held['base']} range(s) or new's {held['new']}; "
                "accepted: a regular expression over the raw range names")
    parts = []
    for side in ("base", "new"):
        names = cmp.unmatched[cmp.unmatched["side"] == side]["range"].astype(str) if len(cmp.unmatched) else []
        shown = ", ".join(list(names)[:3]) + (", ..." if len(names) > 3 else "")
        parts.append(f"{kept[side]} of {side}'s {held[side]}{only} only in {side}" + (f" ({shown})" if shown else ""))
    return f"{text}: {'; '.join(parts)} (ranges match by implementation, pass, shape, dtype and options)"


def main(argv: list[str] | None = None, prog: str = "nsightlab compare") -> int:
    a = _parser(prog).parse_args(argv)
    try:
        cmp = compare_captures(a.base, a.new, parse_threshold(a.threshold), a.only, a.profiles, min_ms=a.min_ms)
    except (ProfileError, ValueError) as exc:  # NotApplicable is a ValueError: nothing both captures hold
        print_error(prog, str(exc))
        return BAD_INPUT
    few = too_few_matched(cmp, a.min_matched)
    if few:
        print_error(prog, few)
        return BAD_INPUT
    _report(cmp, a.kernels)
    if a.reports:
        out_dir = Path(a.reports)
        shared = out_dir.parent / "plotly.min.js"
        page = Declared(a.name or page_name(cmp.base, cmp.new), a.title or f"{cmp.base.label} → {cmp.new.label}",
                        a.base, a.new, f"{cmp.threshold:.4g}", a.only, a.min_ms)
        try:
            publish(page, out_dir, profiles=a.profiles,
                    plotlyjs=os.path.relpath(shared, out_dir) if shared.exists() else "inline")
            write_index(out_dir)
        except Exception as exc:  # noqa: BLE001 - papermill / nbconvert raise their own kinds
            print_error(prog, f"rendering the page failed: {exc}")
            return BAD_INPUT
        print(f"page: {out_dir / (page.name + '.html')}")
    return cmp.exit_status
