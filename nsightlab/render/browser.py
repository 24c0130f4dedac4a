"""Pages read as a kernel engineer reads them: in headless Chromium at :data:`WIDTH` px, through the DevTools
protocol (tornado's websocket client, installed with Jupyter). For each page: how long its first figure takes to
draw (ms after navigation starts), and every element wider than the window or scrolling sideways; optionally a
screenshot. Chromium is found on PATH (``chromium``, ``chromium-browser``, ``google-chrome``).

    python scripts/check_pages.py reports/          every page of a rendered report, one line each
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

#: the width the pages are read at
WIDTH = 1400

#: recorded in the page from its first byte on: when the first figure's SVG appeared (ms after navigation start)
FIRST_FIGURE = """new MutationObserver(function(ms,o){if(document.querySelector('.plotly-graph-div .main-svg')){
window.__nslFirstFigure=performance.now();o.disconnect();}}).observe(document,{childList:true,subtree:true});"""

#: the page's widest elements: those whose right edge passes the window, and the boxes that scroll sideways (inside
#: an SVG only the SVG itself counts: plotly clips what lies past its plot area, e.g. a zoomed timeline's bars)
WIDEST = """(function(){var W=document.documentElement.clientWidth,out=[],seen=0;
document.querySelectorAll('body *').forEach(function(e){if(e.parentElement&&e.parentElement.closest('svg'))return;
var r=e.getBoundingClientRect();if(!r.width)return;
var cs=getComputedStyle(e);var scrolls=(cs.overflowX=='auto'||cs.overflowX=='scroll')&&e.scrollWidth>e.clientWidth+1;
if(r.right>W+1||scrolls){out.push({tag:e.tagName.toLowerCase(),cls:String(e.className).slice(0,60),
right:Math.round(r.right),scroll:scrolls?e.scrollWidth-e.clientWidth:0,text:(e.innerText||'').slice(0,60)});}});
return {window:W,page:document.documentElement.scrollWidth,height:document.documentElement.scrollHeight,
over:out.slice(0,20)};})()"""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class Page:
    """One page in a fresh headless Chromium (no network), read at :data:`WIDTH` px."""

    def __init__(self, path: Path, height: int = 1000) -> None:
        self.path, self.height = Path(path), height

    async def __aenter__(self) -> Page:
        from tornado.websocket import websocket_connect

        self._profile = tempfile.TemporaryDirectory(prefix="nsl-chrome-", ignore_cleanup_errors=True)
        self._proc = subprocess.Popen(
            [chromium() or "chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND", "--remote-debugging-port=0",
             f"--user-data-dir={self._profile.name}", f"--window-size={WIDTH},{self.height}", "about:blank"],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        port = None
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            m = re.search(r"ws://127\.0\.0\.1:(\d+)/", line)
            if m:
                port = int(m.group(1))
                break
        assert port, "Chromium did not open its DevTools port"
        tabs = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30))
        url = next(t for t in tabs if t["type"] == "page")["webSocketDebuggerUrl"]
        self._ws = await websocket_connect(url, max_message_size=1 << 28)
        self._n = 0
        await self.call("Page.enable")
        await self.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=self.height, deviceScaleFactor=1,
                        mobile=False)
        await self.call("Page.addScriptToEvaluateOnNewDocument", source=FIRST_FIGURE)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._ws.close()
        self._proc.kill()
        self._proc.wait()
        self._profile.cleanup()

    async def call(self, method: str, **params: Any) -> dict:
        self._n += 1
        me = self._n
        await self._ws.write_message(json.dumps({"id": me, "method": method, "params": params}))
        while True:
            raw = await asyncio.wait_for(self._ws.read_message(), 120)
            assert raw is not None, "Chromium closed the connection"
            msg = json.loads(raw)
            if msg.get("id") == me:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    async def js(self, expression: str) -> Any:
        r = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return r.get("result", {}).get("value")

    async def open(self, timeout: float = 30.0) -> float | None:
        """Navigate to the page; the first figure's draw time in ms after navigation start (None: no figure
        drew within ``timeout``)."""
        await self.call("Page.navigate", url=self.path.resolve().as_uri())
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            first = await self.js("window.__nslFirstFigure||0")
            if first:
                return float(first)
            if await self.js("document.readyState=='complete'&&!document.querySelector('.plotly-graph-div')"):
                return None
            await asyncio.sleep(0.05)
        return None

    async def settle(self, timeout: float = 60.0) -> None:
        """Scroll through the page (so that figures drawn when scrolled to are drawn) and wait until every
        figure has its SVG."""
        h = int(await self.js("document.documentElement.scrollHeight") or 0)
        for y in range(0, h + self.height, self.height // 2):
            await self.js(f"window.scrollTo(0,{y})")
            await asyncio.sleep(0.05)
        end = time.monotonic() + timeout
        while time.monotonic() < end and await self.js(
                "Array.from(document.querySelectorAll('.plotly-graph-div')).some(d=>!d.querySelector('.main-svg'))"):
            await asyncio.sleep(0.2)
        await self.js("window.scrollTo(0,0)")
        await asyncio.sleep(0.3)

    async def widest(self) -> dict:
        return await self.js(WIDEST)

    async def screenshot(self, out: Path, height: int | None = None) -> None:
        full = int(await self.js("document.documentElement.scrollHeight") or self.height)
        h = min(full, height or full)
        r = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                            clip={"x": 0, "y": 0, "width": WIDTH, "height": h, "scale": 1})
        Path(out).write_bytes(base64.b64decode(r["data"]))


async def measure(path: Path, shot: Path | None = None, shot_height: int | None = None) -> dict:
    """First figure's draw time (ms), the widest elements, and optionally a screenshot, of one page."""
    async with Page(path) as p:
        first = await p.open()
        await p.settle()
        wide = await p.widest()
        if shot is not None:
            await p.screenshot(shot, shot_height)
    return {"first_figure_ms": first, **wide}
