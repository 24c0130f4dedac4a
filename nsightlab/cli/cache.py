"""The ``nsightlab cache`` command: where the cache is, how large it is, and emptying it.

    nsightlab cache info     # the folder, its size and file count, the size cap
    nsightlab cache clear    # remove every cached file (the folder's other files are left alone)

The cache (nsightlab.core.files: ``$NSIGHTLAB_CACHE``, else ``~/.cache/nsightlab``) holds the uncompressed
copies of the captures' ``.xz`` / ``.gz`` exports that the parsers read, and the frames read from deep
reports (nsightlab.parse.deep). Each new uncompressed copy trims it to its size cap
(``$NSIGHTLAB_CACHE_LIMIT``, e.g. ``500M`` or ``4G``; default 2 GiB), least recently used files first.
Everything in it is made again from the captures when needed: clearing it loses nothing.
"""

from __future__ import annotations

from ..core.args import BAD_INPUT, OK, ArgumentParser, print_error
from ..core.files import CACHE_ENV, CACHE_LIMIT_ENV, DEFAULT_CACHE_LIMIT, cache_dir, cache_files, cache_limit, clear_cache

VERBS = {"info": "print where the cache is, its size and file count, and its size cap",
         "clear": "remove every file the cache holds (it is made again from the captures when needed)"}


def size_text(n: float) -> str:
    """``1536`` -> ``'1.5 KiB'``: bytes in the largest binary unit that keeps the number at least 1."""
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def main(argv: list[str] | None = None, prog: str = "nsightlab cache") -> int:
    verbs = "\n".join(f"  {name:6s} {text}" for name, text in VERBS.items())
    p = ArgumentParser(prog=prog, description=f"Where the cache is and how large it is, or empty it.\n\nverbs:\n{verbs}",
                       epilog=f"The cache is ${CACHE_ENV}, else ~/.cache/nsightlab; its size cap is "
                              f"${CACHE_LIMIT_ENV} (bytes, or with K, M, G, T: e.g. 500M), else "
                              f"{size_text(DEFAULT_CACHE_LIMIT)}; the least recently used files go first.\n\n"
                              "exit status: 0 done, 2 bad input ($NSIGHTLAB_CACHE_LIMIT not a size, the cache "
                              "not a folder or not writable)")
    p.add_argument("verb", choices=tuple(VERBS), metavar="VERB", help=f"one of {', '.join(VERBS)} (above)")
    a = p.parse_args(argv)
    root = cache_dir()
    if root.exists() and not root.is_dir():
        print_error(prog, f"the cache {root} (${CACHE_ENV}) is a file, not a folder; set ${CACHE_ENV} to a folder")
        return BAD_INPUT
    if a.verb == "clear":
        try:
            files, size = clear_cache()
        except OSError as exc:
            print_error(prog, f"the cache {root} could not be emptied ({exc})")
            return BAD_INPUT
        print(f"cleared {root}: {files} file(s), {size_text(size)}")
        return OK
    found = cache_files()
    total = sum(size for _, size, _ in found)
    try:
        cap = size_text(cache_limit())
    except ValueError as exc:
        print_error(prog, str(exc))
        return BAD_INPUT
    print(f"cache:  {root}{'' if root.exists() else ' (not created yet)'}")
    print(f"size:   {size_text(total)} in {len(found)} file(s)")
    print(f"cap:    {cap} (${CACHE_LIMIT_ENV}; least recently used files go first)")
    return OK

