"""Every page of a rendered report, read as a kernel engineer reads it: headless Chromium at 1400 px measures how
long each page's first figure takes to draw and finds anything wider than the page; nsightlab.render.checks walks
each figure for a point above a limit, a roof at a clock no range ran at, and a line through categories.

    python scripts/check_pages.py reports/ [--first-figure-ms 3000] [--only REGEX]

One line per page; exit status 1 when a page breaks a rule, 2 on bad arguments. make test runs the same checks
on a representative set of pages (tests/test_pages.py); this runs them on all of them, after ``make report``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from pathlib import Path

from nsightlab.render import checks
from nsightlab.render.browser import chromium, measure


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", type=Path, help="a folder nsightlab report wrote")
    ap.add_argument("--first-figure-ms", type=float, default=3000.0, help="the most a first figure may take (default 3000)")
    ap.add_argument("--only", default="", help="a regular expression the pages' paths must match")
    a = ap.parse_args(argv)
    if not a.reports.is_dir():
        print(f"check_pages: {a.reports} is not a folder of rendered pages", file=sys.stderr)
        return 2
    if chromium() is None:
        print("check_pages: headless Chromium is not installed (Debian: apt install chromium)", file=sys.stderr)
        return 2
    pages = sorted(p for p in a.reports.rglob("*.html") if not any(part.startswith((".", "_")) for part in p.parts)
                   and re.search(a.only, str(p)))
    bad = 0
    for page in pages:
        rel = page.relative_to(a.reports)
        wrong = checks.page_problems(page.read_text(encoding="utf-8"))
        res = asyncio.run(measure(page))
        first = res["first_figure_ms"]
        if first is not None and first > a.first_figure_ms:
            wrong.append(f"first figure after {first:.0f} ms (> {a.first_figure_ms:.0f})")
        if res["page"] > res["window"] or res["over"]:
            o = res["over"][0] if res["over"] else {}
            wrong.append(f"wider than the page: {res['page']} px, e.g. <{o.get('tag')} class={o.get('cls')!r}> "
                         f"to {o.get('right')} px")
        shown = "no figure" if first is None else f"first figure {first:5.0f} ms"
        print(f"{'ok  ' if not wrong else 'FAIL'} {rel}  {shown}, {res['height']} px tall"
              + "".join(f"\n     {w}" for w in wrong), flush=True)
        bad += bool(wrong)
    print(f"{len(pages)} page(s), {bad} breaking a rule")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
