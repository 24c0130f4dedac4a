"""Files of a capture: checksums, compression (.xz written, .xz and .gz read), the uncompressed cache
of compressed exports, atomic writes."""

from __future__ import annotations

import gzip
import hashlib
import lzma
import os
import re
import shutil
import stat
import tempfile
import time
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


#: the environment variables that say where the cache is and how large it may grow
CACHE_ENV, CACHE_LIMIT_ENV = "NSIGHTLAB_CACHE", "NSIGHTLAB_CACHE_LIMIT"
#: the cache's size cap when $NSIGHTLAB_CACHE_LIMIT does not set one: a few uncompressed deep reports
DEFAULT_CACHE_LIMIT = 2 << 30
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def cache_dir() -> Path:
    """Where uncompressed copies of compressed exports and the deep reports' parsed frames are kept:
    ``$NSIGHTLAB_CACHE``, else ``~/.cache/nsightlab``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "nsightlab")


def parse_size(text: str) -> int:
    """``'2G'`` -> 2147483648: bytes, or a number with K, M, G or T (powers of 1024; a trailing B or iB
    is allowed); ValueError says what is accepted."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    try:
        value = float(t[: len(t) - len(unit)])
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{text!r} is not a size; accepted: bytes, or a number with K, M, G or T (e.g. 2G, 500M)")
    return int(value * _UNITS[unit])


def cache_limit() -> int:
    """The cache's size cap in bytes: ``$NSIGHTLAB_CACHE_LIMIT`` (e.g. ``2G``, ``500M``; 0 keeps nothing
    but the file in use), else :data:`DEFAULT_CACHE_LIMIT`. ValueError when the variable is not a size."""
    text = os.environ.get(CACHE_LIMIT_ENV, "").strip()
    if not text:
        return DEFAULT_CACHE_LIMIT
    try:
        return parse_size(text)
    except ValueError as exc:
        raise ValueError(f"${CACHE_LIMIT_ENV}: {exc}") from None


#: the cache's own folders: ``<first 24 hex digits of a compressed file's SHA-256>/`` (its uncompressed copy,
#: :func:`local_copy`) and ``deep-frames/`` (nsightlab.parse.deep); nothing else under the cache folder is
#: touched, so that a $NSIGHTLAB_CACHE pointed at a folder holding other files loses none of them
_CACHE_FOLDER = re.compile(r"^(?:[0-9a-f]{24}|deep-frames)$")


def cache_files(folder: Path | None = None) -> list[tuple[float, int, Path]]:
    """Every file in the cache's own folders as (last use, bytes, path), least recently used first. The last
    use is the later of its access and modification times (a cache hit touches its file, see :func:`local_copy`)."""
    folder = cache_dir() if folder is None else Path(folder)
    out = []
    try:
        subs = [p for p in folder.iterdir() if _CACHE_FOLDER.match(p.name) and p.is_dir() and not p.is_symlink()]
    except OSError:  # no cache yet, or not a folder
        return []
    for sub in subs:
        try:
            entries = list(sub.iterdir())
        except OSError:
            continue
        for path in entries:
            try:
                st = path.lstat()
            except OSError:  # removed meanwhile by another process trimming the same cache
                continue
            if stat.S_ISREG(st.st_mode):
                out.append((max(st.st_atime, st.st_mtime), st.st_size, path))
    return sorted(out, key=lambda t: (t[0], str(t[2])))


def trim_cache(limit: int | None = None, keep: Path | None = None) -> list[Path]:
    """Remove the least recently used files of the cache until it holds at most ``limit`` bytes
    (default :func:`cache_limit`), never ``keep`` (the file just written, about to be read); folders left
    empty go too. Returns the files removed. A file another process is reading stays readable to it."""
    limit = cache_limit() if limit is None else limit
    found = cache_files()
    total = sum(size for _, size, _ in found)
    removed = []
    for _, size, path in found:
        if total <= limit:
            break
        if keep is not None and path == keep:
            continue
        try:
            path.unlink()
        except OSError:
            continue
        total -= size
        removed.append(path)
        if path.parent.name != "deep-frames":
            try:
                path.parent.rmdir()  # only when empty
            except OSError:
                pass
    return removed


def clear_cache() -> tuple[int, int]:
    """Empty the cache's own folders (:func:`cache_files`) and remove them; returns the files and bytes
    removed. Nothing else under the cache folder is touched."""
    found = cache_files()
    for _, _, path in found:
        path.unlink(missing_ok=True)
    for folder in {path.parent for _, _, path in found}:
        try:
            folder.rmdir()  # only when empty
        except OSError:
            pass
    return len(found), sum(size for _, size, _ in found)


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
    """``path`` itself, or for ``X.xz`` / ``X.gz`` an uncompressed copy in the cache (keyed by content hash);
    writing a new copy trims the cache to its size cap (:func:`trim_cache`), the new copy kept."""
    path = Path(path)
    if path.suffix not in COMPRESSIONS:
        return path
    dest = cache_dir() / sha256(path)[:24] / uncompressed_name(path.name)
    if dest.exists():
        try:
            os.utime(dest)  # its last use, which decides what trim_cache removes first
        except OSError:
            pass
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False) as tmp:
        try:
            copy_content(path, tmp)
        except ProfileError:
            os.unlink(tmp.name)
            raise
    os.replace(tmp.name, dest)
    try:
        trim_cache(keep=dest)
    except ValueError:  # $NSIGHTLAB_CACHE_LIMIT is not a size (nsightlab cache info says so): the default cap
        trim_cache(DEFAULT_CACHE_LIMIT, keep=dest)
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


def backup_name(dest: Path) -> Path:
    """Where :func:`place` keeps the capture it replaces while the new one moves in: a dated hidden folder
    beside it, ``.replaced-<name>-<YYYYmmdd-HHMMSS>`` (the store's listings skip names starting with a dot)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup = dest.parent / f".replaced-{dest.name}-{stamp}"
    return backup if not backup.exists() else dest.parent / f".replaced-{dest.name}-{stamp}-{os.getpid()}"


def place(tmp: Path, dest: Path, *, replace: bool = False) -> None:
    """Move a complete folder (a capture written into ``tmp``) into place at ``dest``.

    An existing ``dest`` is never replaced unless ``replace``: ProfileError says it exists and ``tmp``
    stays as it is. With ``replace``, the old ``dest`` is moved to a dated backup beside it
    (:func:`backup_name`), the new folder moved in, and only then the backup removed; if the move
    fails the old folder is moved back. An interrupted replace leaves the backup, never nothing."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if dest.exists() or dest.is_symlink():
        if not replace:
            raise ProfileError(f"{dest} already exists; nothing was replaced (give another name, or --replace to "
                               "replace it)")
        old = backup_name(dest)
        os.replace(dest, old)
    try:
        # os.rename of a folder onto a folder that holds files fails (ENOTEMPTY): a capture placed meanwhile by
        # another process is not replaced either
        os.rename(tmp, dest)
    except OSError as exc:
        if old is not None:
            os.replace(old, dest)
        if dest.exists():
            raise ProfileError(f"{dest} already exists (written meanwhile by another process); nothing was "
                               "replaced") from exc
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
