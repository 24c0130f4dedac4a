"""Files of a capture: checksums, compression (.xz written, .xz and .gz read), the uncompressed cache
of compressed exports, atomic writes."""

from __future__ import annotations

import gzip
import hashlib
import lzma
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from .errors import ProfileError

MANIFEST = "manifest.json"
#: how a compressed file's name ends -> (what the compression is called, how to open it for reading);
#: the store writes .xz (a quarter of gzip's size on Nsight Compute reports) and still reads .gz
COMPRESSIONS: dict[str, tuple[str, Callable[[Path], IO[bytes]]]] = {
    ".xz": ("xz", lambda p: lzma.open(p, "rb")),
    ".gz": ("gzip", lambda p: gzip.open(p, "rb")),
}
#: xz -9e: the most compact setting; 26 s for an 85 MB Nsight Compute report, written once, read many times
XZ_PRESET = 9 | lzma.PRESET_EXTREME


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_table(folder: Path) -> dict[str, dict[str, Any]]:
    """Every file of a capture folder but the manifest, with its size and SHA-256."""
    return {p.name: {"bytes": p.stat().st_size, "sha256": sha256(p)}
            for p in sorted(Path(folder).iterdir()) if p.is_file() and p.name != MANIFEST}


def cache_dir() -> Path:
    return Path(os.environ.get("NSIGHTLAB_CACHE", Path.home() / ".cache" / "nsightlab"))


def uncompressed_name(name: str) -> str:
    """``X.xz`` / ``X.gz`` -> ``X``; any other name as it is."""
    suffix = Path(name).suffix
    return name[: -len(suffix)] if suffix in COMPRESSIONS else name


def copy_content(path: Path, out: IO[bytes]) -> tuple[str, int]:
    """Write the content of ``path`` (uncompressed where it is ``X.xz`` or ``X.gz``) to ``out``;
    returns that content's SHA-256 and size. ProfileError when a compressed file is corrupt or cut short."""
    kind, opener = COMPRESSIONS.get(path.suffix, ("", lambda p: open(p, "rb")))
    h = hashlib.sha256()
    size = 0
    try:
        with opener(path) as src:
            for block in iter(lambda: src.read(1 << 20), b""):
                h.update(block)
                size += out.write(block)
    except (EOFError, lzma.LZMAError, gzip.BadGzipFile) as exc:
        raise ProfileError(f"{path}: corrupt or truncated {kind} file ({exc})") from None
    return h.hexdigest(), size


def local_copy(path: Path) -> Path:
    """``path`` itself, or for ``X.xz`` / ``X.gz`` an uncompressed copy in the cache (keyed by content hash)."""
    path = Path(path)
    if path.suffix not in COMPRESSIONS:
        return path
    dest = cache_dir() / sha256(path)[:24] / uncompressed_name(path.name)
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False) as tmp:
        try:
            copy_content(path, tmp)
        except ProfileError:
            os.unlink(tmp.name)
            raise
    os.replace(tmp.name, dest)
    return dest


def write_xz(src: Path, dest: Path) -> tuple[str, int]:
    """``dest`` = ``src`` (uncompressed, or itself .xz / .gz) compressed with xz -9e, written whole
    or not at all; returns the SHA-256 and size of the uncompressed content."""
    tmp = dest.with_name(dest.name + ".tmp")
    try:
        with lzma.open(tmp, "wb", preset=XZ_PRESET) as out:
            content = copy_content(src, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, dest)
    return content


def place(tmp: Path, dest: Path) -> None:
    """Move a complete folder (a capture written into ``tmp``) into place at ``dest``; an earlier
    ``dest`` is removed only after the move succeeded, and restored if it fails."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if dest.exists():
        old = dest.parent / f".old-{dest.name}-{os.getpid()}"
        os.replace(dest, old)
    try:
        os.replace(tmp, dest)
    except OSError:
        if old is not None:
            os.replace(old, dest)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
