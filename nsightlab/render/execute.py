"""Running a notebook into an HTML page: papermill executes it with its parameters (a quiet kernel,
working directory the repository), nbconvert writes the page with nsightlab's template (inputs hidden,
the page's stylesheet and plotly.js shared from the reports folder or carried inside), and the page is
moved into place only when complete. The same inputs give the same bytes.
"""

from __future__ import annotations

import html
import os
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from ..store.read import REPO

PLOTLY_JS = "plotly.min.js"
PAGE_CSS = "nsightlab.css"

CSS = """
:root{--nsl-fg:#1d2433;--nsl-muted:#5b6475;--nsl-line:#dde1e8;--nsl-accent:#1f5fbf}
*{box-sizing:border-box}
body{margin:0;color:var(--nsl-fg);font:15px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;background:#fff}
main{max-width:1240px;margin:0 auto;padding:18px 28px 60px}
h1{font-size:1.75em;margin:.4em 0 .3em} h2{font-size:1.3em;margin:1.6em 0 .4em;padding-bottom:.2em;
border-bottom:1px solid var(--nsl-line)} h3{font-size:1.08em;margin:1.2em 0 .3em}
p{margin:.45em 0} a{color:var(--nsl-accent)} a.anchor-link{display:none}
code{font:.88em/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;background:#f3f4f7;padding:.05em .3em;border-radius:3px}
blockquote{margin:.6em 0;padding:.4em .9em;border-left:4px solid #e0b400;background:#fffbea;color:#4a3b00}
.jp-Cell{margin:0;padding:0} .jp-InputPrompt,.jp-OutputPrompt,.jp-Collapser{display:none}
.jp-OutputArea-output{overflow-x:auto} .jp-RenderedText pre,pre{white-space:pre-wrap;font-size:.85em}
.jp-mod-noOutputs.jp-mod-noInput{display:none}
.nsl-summary{border:1px solid #b9cbe8;background:#f3f7fd;border-radius:6px;padding:.6em 1.1em;margin:.8em 0 .6em}
.nsl-summary-title{font-weight:600;color:#1f4f99;text-transform:uppercase;font-size:.78em;letter-spacing:.06em}
.nsl-summary ul{margin:.3em 0 .1em;padding-left:1.2em} .nsl-summary li{margin:.2em 0}
.nsl-note{color:var(--nsl-muted);font-size:.86em;line-height:1.45}
.nsl-scroll{overflow-x:auto;margin:.4em 0 1em}
table.nsl-table,table.dataframe{border-collapse:collapse;font-size:.84em;margin:0}
table.nsl-table th,table.nsl-table td,table.dataframe th,table.dataframe td{padding:.28em .7em;
border-bottom:1px solid var(--nsl-line);text-align:left;vertical-align:top;max-width:46em}
table.nsl-table thead th,table.dataframe thead th{background:#f5f6f9;font-weight:600;border-bottom:2px solid #c9ced8;
white-space:nowrap} table.nsl-table tbody tr:hover{background:#fafbfd}
.nsl-table-title{font-weight:600;font-size:.9em;margin-top:.8em}
details.nsl-details{margin:.3em 0 1.2em;border:1px solid var(--nsl-line);border-radius:5px;padding:.3em .8em}
details.nsl-details>summary{cursor:pointer;color:var(--nsl-accent);font-size:.9em}
details.nsl-details[open]>summary{margin-bottom:.4em}
.nsl-missing{display:none;background:#fff3cd;border:1px solid #e0b400;padding:.6em 1em;margin:1em auto;
max-width:1180px;font-family:system-ui,sans-serif}
"""

TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block notebook_css -%}{{ resources.nsightlab_head }}{%- endblock notebook_css -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block body_header -%}
<body class="jp-Notebook nsl-page">
{{ resources.nsightlab_banner }}
<main>
{%- endblock body_header -%}
"""


def _banner(js: str) -> str:
    """What a page says when its shared plotly.js is not where it expects it."""
    return (f'<div id="nsl-missing" class="nsl-missing" style="display:none;background:#fff3cd;border:1px solid '
            f'#e0b400;padding:.6em 1em;margin:1em;font-family:sans-serif"><b>The figures on this page did not load.'
            f'</b> They need <code>{html.escape(js)}</code> (shared by every page of the reports folder), which is not '
            f'there: this page was copied or opened without the folder it belongs to. Open it inside that folder, or '
            f'render self-contained pages with <code>python -m nsightlab.report --standalone</code>.</div>'
            '<script>window.addEventListener("load",function(){if(typeof window.Plotly==="undefined"&&'
            'document.querySelector(".plotly-graph-div")){document.getElementById("nsl-missing").style.display='
            '"block";}});</script>')


def write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` atomically unless it already holds it (mtimes of unchanged pages stay); whether it wrote."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return True


def ship_assets(reports: Path) -> None:
    """One copy of plotly.js and of the page stylesheet beside the reports (offline, and each page
    stays small); rewritten only when they change."""
    from plotly.offline import get_plotlyjs

    write_if_changed(reports / PLOTLY_JS, get_plotlyjs())
    write_if_changed(reports / PAGE_CSS, CSS.strip() + "\n")


def _exporter() -> Any:
    import jinja2
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", extra_loaders=[jinja2.DictLoader({"nsightlab.html.j2": TEMPLATE})])
    exporter.template_file = "nsightlab.html.j2"
    exporter.exclude_input = True
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    return exporter


def _page_resources(out_html: Path, reports: Path | None, standalone: bool) -> dict[str, Any]:
    if standalone or reports is None:
        return {"nsightlab_head": f"<style>{CSS}</style>", "nsightlab_banner": ""}
    css = os.path.relpath(reports / PAGE_CSS, out_html.parent)
    js = os.path.relpath(reports / PLOTLY_JS, out_html.parent)
    return {"nsightlab_head": f'<link rel="stylesheet" href="{html.escape(css)}">', "nsightlab_banner": _banner(js)}


#: kernels of notebooks being rendered, so that an interrupt can stop them (they run in their own session)
_KERNELS: set[Any] = set()
_KERNELS_LOCK = threading.Lock()
#: set by stop_kernels: a kernel whose start completes afterwards is killed at once (else its notebook would run
#: to its end, and Ctrl-C wait for it); cleared by allow_kernels when a render run begins
_STOPPING = threading.Event()


def _kernel_manager_class() -> type:
    """A kernel manager that records its kernels (for :func:`stop_kernels`) and provisions CurveZMQ keys
    for kernels that take them: a kernel on TCP without keys warns on every start that its traffic is
    sent in plain text (jupyter_client 8.10 / ipykernel 7 provision and take keys; older ones do neither
    and do not warn)."""
    from jupyter_client.manager import AsyncKernelManager

    class TrackedKernelManager(AsyncKernelManager):
        def __init__(self, **kw: Any) -> None:
            if "transport_encryption" in AsyncKernelManager.class_trait_names():
                kw.setdefault("transport_encryption", "auto")
            super().__init__(**kw)

        async def start_kernel(self, **kw: Any) -> None:  # type: ignore[override]
            # the kernel's own stderr (not its cells': those come back as messages and land on the page) holds
            # only what its C libraries print, e.g. libzmq's "Assertion failed: pfd.revents & POLLIN" when a
            # finished kernel is torn down: a render prints one line per page, nothing else
            kw.setdefault("stderr", subprocess.DEVNULL)
            await super().start_kernel(**kw)
            with _KERNELS_LOCK:
                _KERNELS.add(self)
                stopping = _STOPPING.is_set()
            if stopping:  # Ctrl-C came while this kernel was starting: stop_kernels did not see it
                _kill(self)

        async def shutdown_kernel(self, *a: Any, **kw: Any) -> None:  # type: ignore[override]
            with _KERNELS_LOCK:
                _KERNELS.discard(self)
            await super().shutdown_kernel(*a, **kw)

        async def _async_interrupt_kernel(self) -> None:
            # jupyter_client interrupts a kernel before asking it to shut down; a rendered notebook has
            # nothing left to interrupt, and a kernel that is answering a message then logs
            # "KeyboardInterrupt caught in kernel" as an error. Ctrl-C stops kernels by stop_kernels.
            if not self.shutting_down:
                await super()._async_interrupt_kernel()

    return TrackedKernelManager


def _kill(km: Any) -> None:
    proc = getattr(getattr(km, "provisioner", None), "process", None)
    if proc is not None:
        try:
            proc.kill()
        except OSError:
            pass


def stop_kernels() -> None:
    """Kill the kernels this process started for notebooks still running (by their process ids), and any whose
    start completes from now on (until :func:`allow_kernels`)."""
    with _KERNELS_LOCK:
        _STOPPING.set()
        live = list(_KERNELS)
    for km in live:
        _kill(km)


def allow_kernels() -> None:
    """Let kernels run again after :func:`stop_kernels` (a render run begins)."""
    _STOPPING.clear()


def page_metadata(node: Any) -> dict[str, Any]:
    """What a notebook published for the report beside its page (output metadata ``nsightlab``: its
    ``summary`` lines, a comparison's facts, ...); the first output that names a key gives it."""
    out: dict[str, Any] = {}
    for cell in node.cells:
        for output in cell.get("outputs", []):
            for key, value in ((output.get("metadata") or {}).get("nsightlab") or {}).items():
                if value and key not in out:
                    out[key] = value
    return out


def page_title(node: Any, default: str) -> str:
    for cell in node.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return default


#: what jupyter_client says when a kernel process ends before it answers its first message (two kernels
#: started at once can race for a port): the notebook has not run a cell yet, so it is started once more
KERNEL_START_FAILED = ("Kernel died before replying to kernel_info", "Kernel didn't respond to heartbeats")


def execute(nb: Path, out: Path, params: dict, kernel: str = "python3", cwd: Path | None = None) -> None:
    """Run notebook ``nb`` with ``params`` under papermill into ``out`` (working directory: the repository,
    or ``cwd``), with the kernel manager of :func:`_kernel_manager_class`; a kernel that dies before it
    has run anything is started once more."""
    import papermill as pm

    for attempt in (1, 2):
        try:
            pm.execute_notebook(str(nb), str(out), parameters=params, kernel_name=kernel, progress_bar=False,
                                cwd=str(cwd or REPO), kernel_manager_class=_kernel_manager_class(), log_output=False)
            return
        except RuntimeError as exc:
            if attempt == 2 or not any(m in str(exc) for m in KERNEL_START_FAILED):
                raise


def render_notebook(nb: Path, params: dict, out_html: Path, kernel: str = "python3", *, reports: Path | None = None,
                    standalone: bool = False, stop: threading.Event | None = None) -> dict[str, Any]:
    """Execute ``nb`` with ``params`` (papermill, working directory: the repository) and write its
    page to ``out_html`` atomically. Returns the page's summary, title and :func:`page_metadata`."""
    import nbformat

    out_html.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_html.parent, prefix=".render-") as tmp:
        executed = Path(tmp) / nb.name
        execute(nb, executed, params, kernel)
        node = nbformat.read(executed, as_version=4)
        for i, cell in enumerate(node.cells):  # papermill gives its injected cell a random id: pages must not churn
            if "injected-parameters" in cell.get("metadata", {}).get("tags", []):
                cell["id"] = f"injected-parameters-{i}"
        body, _ = _exporter().from_notebook_node(node, resources=_page_resources(out_html, reports, standalone))
        if stop is not None and stop.is_set():
            raise KeyboardInterrupt
        tmp_html = Path(tmp) / out_html.name
        tmp_html.write_text(body, encoding="utf-8")
        os.replace(tmp_html, out_html)
    meta = page_metadata(node)
    return {"summary": [str(x) for x in meta.get("summary", [])], "title": page_title(node, nb.stem), "metadata": meta}
