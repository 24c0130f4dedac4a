"""Files of a capture: checksums, the uncompressed cache of .gz exports, atomic writes."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .errors import ProfileError

MANIFEST = "manifest.json"


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


def local_copy(path: Path) -> Path:
    """``path`` itself, or for ``X.gz`` an uncompressed copy in the cache (keyed by content hash)."""
    path = Path(path)
    if path.suffix != ".gz":
        return path
    dest = cache_dir() / sha256(path)[:24] / path.name[:-3]
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False) as tmp:
        try:
            with gzip.open(path, "rb") as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    tmp.write(block)
        except (OSError, EOFError) as exc:
            os.unlink(tmp.name)
            raise ProfileError(f"{path}: corrupt or truncated gzip file ({exc})") from None
    os.replace(tmp.name, dest)
    return dest


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
