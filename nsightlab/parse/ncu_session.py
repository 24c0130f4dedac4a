"""What a ``.ncu-rep`` records about the session that wrote it: Nsight Compute's version, CUDA's, the
ncu command line, the host, and when. ncu-report's Python API exposes none of it (its
``get_version()`` is the *reading* library's version), so this reads the report's own session blocks.

Layout (report file version 7, Nsight Compute 2025.3): ``NVR\\0``, a uint32 header length, the
header, then blocks of a uint32 length and a protobuf message; session entries are messages whose
field 3 holds one of: 8 {1: name, 2: version}, 11 command line, 4 system {1: OS, 3: CPU, 5: host
name}, 2 start time (Unix seconds).
"""

from __future__ import annotations

import os
import shlex
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from ..core.errors import ProfileError
from ..core.files import local_copy

#: ncu's own defaults, for a report whose command line does not set them
NCU_DEFAULTS = {"clock_control": "base", "replay_mode": "kernel", "cache_control": "all"}
#: kernel binaries and results are larger than this; no session entry is
_LARGEST_SESSION_BLOCK = 1 << 20
#: system-info field -> session key
_SYSTEM_FIELDS = ((1, "os"), (3, "cpu"), (5, "host"))
#: a start time outside these Unix seconds (2014 .. 2099) is some other integer
_PLAUSIBLE_START = (1_400_000_000, 4_100_000_000)


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("bad varint")
        c = buf[i]
        i += 1
        out |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return out, i


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """The top-level fields of one protobuf message (number, varint or bytes); ValueError if malformed."""
    out: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            val, i = _varint(buf, i)
            out.append((num, val))
        elif wire == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise ValueError("field runs past the message")
            out.append((num, buf[i:i + n]))
            i += n
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise ValueError(f"wire type {wire}")
    return out


def _text(v: int | bytes | None) -> str | None:
    if not isinstance(v, bytes):
        return None
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _blocks(fh: IO[bytes], max_blocks: int) -> Iterator[bytes]:
    """The report's length-prefixed blocks small enough to be session entries (the header skipped)."""
    if fh.read(4) != b"NVR\0":
        return
    (hlen,) = struct.unpack("<I", fh.read(4))
    fh.seek(hlen, os.SEEK_CUR)
    for _ in range(max_blocks):
        head = fh.read(4)
        if len(head) < 4:
            return
        (n,) = struct.unpack("<I", head)
        if n > _LARGEST_SESSION_BLOCK:
            fh.seek(n, os.SEEK_CUR)
            continue
        block = fh.read(n)
        if len(block) < n:
            return
        yield block


def _entries(block: bytes) -> Iterator[tuple[int, int | bytes]]:
    """The fields of every session entry (field 3) of one block; blocks of another shape give none."""
    try:
        top = _fields(block)
    except ValueError:
        return
    for num, val in top:
        if num != 3 or not isinstance(val, bytes):
            continue
        try:
            yield from _fields(val)
        except ValueError:
            continue


def _record(key: int, value: int | bytes, out: dict[str, Any], versions: dict[str, str]) -> None:
    """Note one session entry in ``out`` (or ``versions``); the first of each kind wins."""
    if key == 8 and isinstance(value, bytes):
        kv = dict(_fields(value))
        name, version = _text(kv.get(1)), _text(kv.get(2))
        if name and version:
            versions[name] = version
    elif key == 11 and (command := _text(value)):
        out.setdefault("command", command.strip())
    elif key == 4 and isinstance(value, bytes):
        system = dict(_fields(value))
        for num, name in _SYSTEM_FIELDS:
            if text := _text(system.get(num)):
                out.setdefault(name, text)
    elif key == 2 and isinstance(value, int) and _PLAUSIBLE_START[0] < value < _PLAUSIBLE_START[1]:
        out.setdefault("captured_utc", time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(value)))


def ncu_session(path: str | Path, max_blocks: int = 256) -> dict[str, Any]:
    """``version`` ("Nsight Compute Target"), ``cuda`` ("CUDA Version"), ``command`` (the ncu command
    line), ``os``, ``cpu``, ``host``, ``captured_utc`` of the session that wrote a report. Best effort:
    keys the report does not hold are absent, and an unknown layout gives ``{}`` (never raises)."""
    out: dict[str, Any] = {}
    versions: dict[str, str] = {}
    try:
        with open(local_copy(Path(path)), "rb") as fh:
            for block in _blocks(fh, max_blocks):
                for key, value in _entries(block):
                    _record(key, value, out, versions)
    except (OSError, ValueError, struct.error, ProfileError):
        return {}
    for key, name in (("version", "Nsight Compute Target"), ("cuda", "CUDA Version")):
        if name in versions:
            out[key] = versions[name]
    return out


def ncu_settings(command: str | None) -> dict[str, Any]:
    """clock_control, replay_mode, cache_control and section set from an ncu command line: the
    option's value, ncu's default where the command line is known but does not set it, else None."""
    out: dict[str, Any] = {k: None for k in (*NCU_DEFAULTS, "set")}
    if not command:
        return out
    try:
        argv = shlex.split(command)
    except ValueError:
        argv = command.split()
    opts: dict[str, str] = {}
    for i, a in enumerate(argv):
        if a.startswith("--") and "=" in a:
            opts.setdefault(a[2:].split("=", 1)[0], a.split("=", 1)[1])
        elif a.startswith("--") and i + 1 < len(argv):
            opts.setdefault(a[2:], argv[i + 1])
    for key, default in NCU_DEFAULTS.items():
        out[key] = opts.get(key.replace("_", "-"), default)
    out["set"] = opts.get("set")
    return out
