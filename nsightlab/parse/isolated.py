"""Reading reports in a process of their own: the ``ncu-report`` package keeps what it decoded of every
launch it was asked for (about 1.4 MB per launch) until its process ends, whether or not the report is
still open, so a 650-launch report costs a gigabyte for good. :func:`call` runs a reader in a helper
process (one per calling process, started on first use), hands back what it returns and raises what it
raised; once the helper holds more than :data:`RECYCLE_MB` it is ended, and with it that memory, and the
next read starts a fresh one. The helper keeps its imports and Nsight's libraries loaded between reads.

The helper is a plain child process spoken to over its stdin/stdout with length-prefixed pickles, not a
``multiprocessing`` pool: a pool's semaphores and resource tracker print warnings on the stderr of every
Jupyter kernel that is shut down while it holds one, and pages must render quietly.

``NSIGHTLAB_IN_PROCESS=1`` runs the readers in the calling process instead (for a debugger).
"""

from __future__ import annotations

import atexit
import importlib
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from ..core.errors import ProfileError

#: a helper that holds more than this after a read is ended (its memory goes with it)
RECYCLE_MB = 384
#: set in the helper, so that a reader it runs is not sent to yet another process
_CHILD = "NSIGHTLAB_ISOLATED_CHILD"
#: where nsightlab is imported from, for the helper's sys.path
_ROOT = str(Path(__file__).resolve().parents[2])
_HEADER = struct.Struct("<Q")

_lock = threading.Lock()
_helper: dict[str, Any] = {}


def _send(fh: IO[bytes], data: bytes) -> None:
    fh.write(_HEADER.pack(len(data)) + data)
    fh.flush()


def _receive(fh: IO[bytes]) -> bytes | None:
    head = fh.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    (n,) = _HEADER.unpack(head)
    data = fh.read(n)
    return data if len(data) == n else None


def _start() -> dict[str, Any]:
    path = [_ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, _CHILD: "1", "PYTHONPATH": os.pathsep.join(dict.fromkeys(path))}
    log = tempfile.TemporaryFile()  # what the helper says on stderr: read back only when it dies
    proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=log, env=env)
    return {"proc": proc, "log": log}


def _stop() -> None:
    """End the helper (it reads no further request and exits); the next read starts another."""
    h = _helper.pop("current", None)
    if h is None:
        return
    try:
        h["proc"].stdin.close()
        h["proc"].wait(timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        _kill(h)
    h["log"].close()


atexit.register(_stop)


def _kill(h: dict[str, Any]) -> int:
    h["proc"].kill()
    return h["proc"].wait()


def _died(h: dict[str, Any], what: str) -> ProfileError:
    status = _kill(h)
    h["log"].seek(0)
    tail = h["log"].read().decode(errors="replace").strip().splitlines()[-3:]
    h["log"].close()
    return ProfileError(f"reading with {what} failed: its process ended with status {status}"
                        + (f" ({' / '.join(tail)})" if tail else ""))


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in the helper process (``fn``: a module-level function; arguments and result
    picklable; relative paths are taken from this process's working directory, with its environment).
    Its exception is raised here; a helper that dies without one is a ProfileError."""
    if os.environ.get(_CHILD) or os.environ.get("NSIGHTLAB_IN_PROCESS"):
        return fn(*args, **kwargs)
    request = pickle.dumps((fn.__module__, fn.__qualname__, args, kwargs, os.getcwd(), dict(os.environ)))
    with _lock:
        h = _helper.get("current")
        if h is None or h["proc"].poll() is not None:
            if h is not None:
                h["log"].close()
            h = _helper["current"] = _start()
        try:
            _send(h["proc"].stdin, request)
            answer = _receive(h["proc"].stdout)
        except OSError:
            answer = None
        except BaseException:  # interrupted between request and answer: this helper is out of step, end it
            _helper.pop("current", None)
            _kill(h)
            h["log"].close()
            raise
        if answer is None:
            _helper.pop("current", None)
            raise _died(h, fn.__qualname__)
        ok, value, rss_mb = pickle.loads(answer)
        if rss_mb > RECYCLE_MB:
            _stop()
    if not ok:
        raise value
    return value


def _rss_mb() -> float:
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024
    except (OSError, StopIteration, ValueError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux: the peak, not now


def _serve() -> None:
    """The helper: answer each request (module, function, args, kwargs, cwd, environment) on stdin with
    (ok, result or exception, its memory in MB) on stdout, until stdin closes."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a reader prints goes to stderr, not into the answers
    requests = sys.stdin.buffer
    while (request := _receive(requests)) is not None:
        module, name, args, kwargs, cwd, env = pickle.loads(request)
        os.environ.clear()
        os.environ.update({**env, _CHILD: "1"})
        try:
            os.chdir(cwd)
            fn: Any = importlib.import_module(module)
            for part in name.split("."):
                fn = getattr(fn, part)
            answer = (True, fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - handed to the caller as it is
            answer = (False, exc)
        try:
            data = pickle.dumps((*answer, _rss_mb()))
        except Exception as exc:  # noqa: BLE001 - a result or exception that does not pickle: its text
            data = pickle.dumps((False, ProfileError(f"{name}: {type(exc).__name__}: {exc}"), _rss_mb()))
        _send(out, data)


if __name__ == "__main__":
    _serve()
