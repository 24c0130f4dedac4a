"""Which Nsight Compute sections keep a kernel from finishing: a bisection over the deep tier's sections.

    nsightlab hang --sweep pipeline --only 'D=128,.*causal=0,.*pipeline=tma-ws-persistent,tail=none,'
    nsightlab hang --sweep mine.toml --only RANGE --timeout 60 --sections SpeedOfLight,SourceCounters

A kernel that runs to the end on its own can stall under a profiler's replay: Nsight Compute then prints
"Launching the workload is taking more time than expected" and waits for ever. This runs the selected
cases (one, ideally) under ``ncu`` with subsets of the sections (default: the deep tier's), each run cut
off at ``--timeout`` seconds or as soon as Nsight Compute prints that warning, and narrows the set down to
one from which no section can be dropped with the stall still there (delta debugging: chunks, then their
complements, then finer chunks). Then it tries that set with application replay and with no cache
control, and narrows the metrics those sections name (read from Nsight Compute's ``.section`` files,
asked for with ``--metrics``) the same way, and prints a verdict line per run and a summary. Each run writes its ncu log to ``--out`` (default
``ncu-hang-<time>/``). Needs a GPU and ncu; ``--dry-run`` prints the commands.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .capture import SLOW_LAUNCH

#: a stall: the run was cut off (timeout or Nsight Compute's slow-launch warning)
STALL, DONE, FAILED = "stalls", "finishes", "fails"


def minimal_stalling(items: Sequence[str], stalls: Callable[[list[str]], bool]) -> list[str]:
    """A subset of ``items`` (sections or metrics) that still stalls and from which no item can be left out
    with the stall kept (1-minimal), given ``stalls(subset)`` (which the caller has seen hold for ``items``
    itself). Delta debugging (Zeller's ddmin): try each of n chunks, then each chunk's complement, and split
    finer (n doubled) when neither stalls; a lone culprit among k items costs about 2 log2 k runs."""
    seen: dict[tuple[str, ...], bool] = {}

    def stalls_once(subset: list[str]) -> bool:  # each subset is run once, however often the search meets it
        key = tuple(subset)
        if key not in seen:
            seen[key] = stalls(subset)
        return seen[key]

    current, n = list(items), 2
    while len(current) > 1:
        size = -(-len(current) // n)
        chunks = [current[i:i + size] for i in range(0, len(current), size)]
        found = next((c for c in chunks if stalls_once(c)), None)
        if found is not None:
            current, n = found, 2
            continue
        if len(chunks) > 2:
            found = next((rest for i in range(len(chunks))
                          if stalls_once(rest := [x for j, c in enumerate(chunks) if j != i for x in c])), None)
            if found is not None:
                current, n = found, max(n - 1, 2)
                continue
        if n >= len(current):
            break
        n = min(2 * n, len(current))
    return current


#: a metric's name in a section file (``Name: "dram__bytes.sum"``; ``breakdown:`` tables included)
_METRIC = re.compile(r'\bName:\s*"((?:breakdown:)?[a-z][a-z0-9_]*__[A-Za-z0-9_.]+)"')
_IDENT = re.compile(r'^\s*Identifier:\s*"([^"]+)"', re.M)


def section_folder(ncu: str | os.PathLike) -> Path | None:
    """The folder of Nsight Compute's ``.section`` files beside ``ncu`` (``<install>/sections``), or None."""
    exe = Path(ncu).resolve()
    for cand in (exe.parent / "sections", *sorted(exe.parent.parent.glob("nsight-compute*/sections"), reverse=True)):
        if cand.is_dir() and any(cand.glob("*.section")):
            return cand
    return None


def _without_blocks(text: str, names: Sequence[str]) -> str:
    """``text`` (protobuf text format) less every ``Name { ... }`` block for each of ``names``."""
    out, i = [], 0
    rx = re.compile(r"\b(?:" + "|".join(map(re.escape, names)) + r")\s*\{")
    while (m := rx.search(text, i)) is not None:
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def section_metrics(folder: str | os.PathLike, section: str) -> list[str]:
    """The metrics that the section with Identifier ``section`` in ``folder`` names, in file order, once
    each; [] when no file there has that identifier. Left out: ``Options`` blocks (a metric's stand-ins for
    other GPU architectures) and ``MetricDefinitions`` (metrics the section derives itself), which
    ``--metrics`` would not take by name."""
    for f in sorted(Path(folder).glob("*.section")):
        text = f.read_text(errors="replace")
        ident = _IDENT.search(text)
        if ident and ident.group(1) == section:
            return list(dict.fromkeys(_METRIC.findall(_without_blocks(text, ("Options", "MetricDefinitions")))))
    return []


def run_ncu(cmd: list[str], log: Path, timeout: float, echo: Callable[[str], None] = print) -> tuple[str, float]:
    """Run ``cmd`` (an ncu command line), its output to ``log``: (STALL | DONE | FAILED, seconds). STALL when
    it runs past ``timeout`` or Nsight Compute says a launch is taking long (the run is then stopped)."""
    t0 = time.monotonic()
    slow = threading.Event()
    with open(log, "w") as lf:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lf.write(line)
                if SLOW_LAUNCH in line:
                    slow.set()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        while proc.poll() is None and not slow.is_set() and time.monotonic() - t0 < timeout:
            time.sleep(0.1)
        stalled = proc.poll() is None
        if stalled:
            _stop(proc)
        reader.join(timeout=10)
    secs = time.monotonic() - t0
    verdict = STALL if stalled else DONE if proc.returncode == 0 else FAILED
    echo(f"  {verdict:9s} {secs:5.1f} s  log {log.name}")
    return verdict, secs


def _stop(proc: subprocess.Popen) -> None:
    """Stop ncu and the workload it started (a process group of their own): SIGINT, then harder."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return
