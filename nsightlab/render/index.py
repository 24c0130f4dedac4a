"""reports/index.html: a page that fits a screen. The comparisons first (each verdict once), then one line per
capture: what it holds, its headline in the unit that captures' kind is read in (a bandwidth share for a
memory-bound capture, not its "useful TFLOP/s"), and links to its pages; each page's first finding and the
notebooks that do not apply (with the reason) are folded under the line. A filter box hides the lines that do
not match what is typed (a few lines of inline script; the page is the same bytes for the same inputs).

:func:`write_index` takes the reports folder and :class:`nsightlab.render.report.Index` (pages, failures, captions,
skipped notebooks, page summaries, comparisons, title), which ``nsightlab report`` fills as it renders.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.text import plural
from .execute import write_if_changed

#: the order in which a capture's pages lend it a headline (the same as the report's)
SUMMARY_ORDER = ("performance", "roofline", "why", "l2_thrashing", "timeline", "options", "correctness", "device")
#: the order of a capture's page links
PAGE_ORDER = ("device", "correctness", "performance", "roofline", "why", "l2_thrashing", "timeline", "options")
#: a headline longer than this is cut on the line (the whole of it in its tooltip and under the fold)
HEADLINE_CHARS = 190

CSS = """body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2433;margin:0}
main{max-width:1320px;margin:0 auto;padding:14px 24px 40px}
h1{font-size:1.45em;margin:.2em 0 .2em} h2{font-size:1.1em;margin:1.1em 0 .3em;border-bottom:1px solid #dde1e8}
a{color:#1f5fbf;text-decoration:none} a:hover{text-decoration:underline}
.top{color:#5b6475;margin:.2em 0 .6em} .bad{color:#a00}
#nsl-filter{width:28em;max-width:100%;padding:.35em .6em;border:1px solid #b9cbe8;border-radius:5px;font:inherit}
table{border-collapse:collapse;width:100%;table-layout:fixed}
td,th{padding:.3em .5em;border-bottom:1px solid #eceef2;text-align:left;vertical-align:top;overflow-wrap:anywhere}
th{background:#f5f6f9;font-weight:600;font-size:.9em}
td.cap{width:16em} td.what{color:#5b6475;font-size:.88em}
.line{display:block;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.pages a{margin-right:.55em;white-space:nowrap}
details{font-size:.88em;color:#3a4252} details summary{cursor:pointer;color:#1f5fbf}
details ul{margin:.2em 0 .3em;padding-left:1.1em} details li{margin:.15em 0} .na{color:#7a8190}
.verdict-regression{color:#a00;font-weight:600} .verdict-improvement{color:#17692c;font-weight:600}"""

FILTER = """<script>(function(){var box=document.getElementById('nsl-filter');box.addEventListener('input',function(){
var q=box.value.toLowerCase().trim();document.querySelectorAll('tr.nsl-row').forEach(function(r){
r.style.display=!q||r.textContent.toLowerCase().indexOf(q)>=0?'':'none';});});})();</script>"""


def _e(text: object) -> str:
    return html.escape(str(text))


def headline(summaries: Mapping[str, Sequence[str]]) -> tuple[str, str] | None:
    """A capture's headline: (its page, the line). A capture whose roofline places most implementations nearest
    a bandwidth roof is memory-bound, and is read as a share of that bandwidth (the roofline's "Nearest roof"
    line), not in useful TFLOP/s; any other takes the first finding of its pages in :data:`SUMMARY_ORDER`."""
    for line in summaries.get("roofline") or []:
        if line.startswith("Nearest roof"):
            entries = re.findall(r"\d+% of ([^,;.]+)", line)
            if entries and sum("bandwidth" in e for e in entries) * 2 > len(entries):
                return "roofline", line
    for nb in SUMMARY_ORDER:
        lines = summaries.get(nb) or []
        if lines:
            return nb, lines[0]
    return None


def _cut(text: str, n: int = HEADLINE_CHARS) -> str:
    return text if len(text) <= n else text[: n - 1].rsplit(" ", 1)[0] + " …"


def _verdict_class(summary: str) -> str:
    """Red where something got slower, green where something got faster and nothing slower."""
    def count(word: str) -> int:
        return sum(int(n) for n in re.findall(rf"(\d+) (?:ranges? )?{word}", summary))

    slower = count("slower") + count("regress(?:ed|ions?)")
    if slower:
        return "verdict-regression"
    return "verdict-improvement" if count("faster") else ""


def _without_sides(summary: str, c: Mapping[str, str]) -> str:
    """A verdict without the "base -> new: " it starts with (its own column says that)."""
    for arrow in (" -> ", " → "):
        lead = f"{c.get('base', '')}{arrow}{c.get('new', '')}: "
        if summary.startswith(lead):
            return summary[len(lead):]
    return summary


def _comparisons(comparisons: Sequence[Mapping[str, str]]) -> str:
    if not comparisons:
        return ""
    rows = "".join(
        f'<tr class="nsl-row"><td><a href="{_e(c["href"])}">{_e(c["title"])}</a></td>'
        f'<td class="what">{_e(c.get("base", "?"))} → {_e(c.get("new", "?"))}</td>'
        f'<td class="{_verdict_class(str(c.get("summary", "")))}" title="{_e(c.get("summary", ""))}">'
        f'{_e(_without_sides(str(c.get("summary", "")), c))}</td></tr>'
        for c in comparisons)
    return (f'<h2 id="comparisons">Comparisons ({len(comparisons)})</h2><table><colgroup><col style="width:34%">'
            f'<col style="width:22%"><col></colgroup><thead><tr><th>comparison</th><th>base → new</th>'
            f'<th>verdict</th></tr></thead><tbody>{rows}</tbody></table>')


def _capture_row(cap: str, pages: list[tuple[str, str]], index: Any) -> str:
    summaries = {nb: list(index.summaries.get(f"{cap}/{nb}") or []) for nb, _ in pages}
    head = headline(summaries)
    order = {nb: i for i, nb in enumerate(PAGE_ORDER)}
    pages = sorted(pages, key=lambda p: order.get(p[0], len(order)))
    links = "".join(f'<a href="{_e(href)}">{_e(nb)}</a>' for nb, href in pages)
    caption = str(index.captions.get(cap, ""))
    found = [f'<li><a href="{_e(href)}">{_e(nb)}</a>: {_e(summaries[nb][0])}</li>'
             for nb, href in pages if summaries.get(nb)]
    na = [f'<li class="na">{_e(nb)}: not applicable &mdash; {_e(why)}</li>'
          for nb, why in (index.skipped.get(cap) or {}).items()]
    fold = (f'<details><summary>each page\'s first finding{", and what does not apply" if na else ""}</summary>'
            f'<ul>{"".join(found)}{"".join(na)}</ul></details>') if found or na else ""
    line = (f'<span class="line" title="{_e(head[1])}"><b>{_e(head[0])}:</b> {_e(_cut(head[1]))}</span>'
            if head else '<span class="na">no page rendered</span>')
    first = f'<a href="{_e(pages[0][1])}">{_e(cap)}</a>' if pages else _e(cap)
    return (f'<tr class="nsl-row" id="{_e(cap)}"><td class="cap">{first}<div class="what line" title="{_e(caption)}">'
            f'{_e(caption)}</div></td><td>{line}<div class="pages">{links}</div>{fold}</td></tr>')


def render(index: Any) -> str:
    """The index page's HTML for ``index`` (see the module's docstring)."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for label, href in index.pages:
        cap, nb = label.rsplit("/", 1)
        groups.setdefault(cap, []).append((nb, href))
    for cap in index.skipped:
        groups.setdefault(cap, [])
    gpus = sorted({c.split("/", 1)[0] for c in groups if "/" in c})
    n_pages = sum(len(v) for v in groups.values())
    top = (f"{plural(len(groups), 'capture')} on {plural(len(gpus), 'GPU')} ({', '.join(gpus)}), {n_pages} pages"
           + (f", {plural(len(index.comparisons), 'comparison')}" if index.comparisons else "")
           + (f"; <b class='bad'>{len(index.failures)} failed to render</b> (listed at the end)" if index.failures
              else "") + ". Rendered from <code>profiles/</code> by <code>nsightlab report</code>; every page works "
           "offline.")
    rows = "".join(_capture_row(cap, pages, index) for cap, pages in groups.items())
    caps = (f'<h2 id="captures">Captures ({len(groups)})</h2><table><thead><tr><th style="width:16em">capture, '
            f'what it holds</th><th>headline, pages</th></tr></thead><tbody>{rows}</tbody></table>') if groups else ""
    bad = "".join(f"<li><b>{_e(label)}</b>: {_e(err)}</li>" for label, err in sorted(index.failures))
    fails = f'<h2 class="bad" id="failures">Failed to render</h2><ul>{bad}</ul>' if index.failures else ""
    title = _e(index.title)
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">\n<meta name="viewport" '
            f'content="width=device-width, initial-scale=1"><title>{title}</title>\n<style>{CSS}</style></head>\n'
            f'<body><main><h1>{title}</h1>\n<p class="top">{top}</p>\n'
            f'<input id="nsl-filter" type="search" placeholder="filter: a capture, GPU, implementation or verdict" '
            f'aria-label="filter the comparisons and captures">\n{_comparisons(index.comparisons)}\n{caps}\n{fails}\n'
            f'{FILTER}</main></body></html>\n')


def write_index(reports: Path, index: Any) -> bool:
    """Write reports/index.html for ``index`` (the report's ``Index``), only if it changed; whether it did."""
    return write_if_changed(Path(reports) / "index.html", render(index))
