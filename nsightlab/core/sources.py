"""A repository's CUDA / C++ source text, as the hotspot tables show it beside a line number: the file as it is
in the repository (:func:`repo_path`), read as it was at a capture's commit (``git show``) where that commit is
at hand, else from the working tree. Every ``git`` the analysis needs runs here; the analysis gets the text.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

_LINES: dict[Path, list[str]] = {}
_GIT_LINES: dict[tuple[str, str, str], list[str] | None] = {}


def repo_path(file: str | None, repo: Path) -> str | None:
    """A source file as it is in the repository (its longest suffix that exists under ``repo``), else None."""
    if not isinstance(file, str) or not file:
        return None
    parts = Path(file).parts
    for i in range(1 if Path(file).is_absolute() else 0, len(parts)):  # never the root itself: joined, it wins
        cand = repo.joinpath(*parts[i:])
        if cand.is_file():
            return Path(*parts[i:]).as_posix()
    return None


def rev(commit: object) -> str | None:
    """A capture's commit as git may be given it (``-dirty`` dropped), or None: a commit, never an option."""
    r = commit.removesuffix("-dirty") if isinstance(commit, str) and commit else None
    return r if r and re.fullmatch(r"[0-9a-fA-F]{4,40}", r) else None


def git(repo: Path, *args: str) -> bytes | None:
    """``git -C repo args``'s output, or None where it fails or git is not at hand."""
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def changed_between(repo: str | Path, a: object, b: object, paths: tuple[str, ...]) -> list[str] | None:
    """The files under ``paths`` (repository-relative) that differ between commits ``a`` and ``b``: [] where none
    does; None where either commit is unknown or not at hand (a shallow clone, an imported capture), or git is not."""
    ra, rb = rev(a), rev(b)
    if ra is None or rb is None:
        return None
    out = git(Path(repo), "diff", "--name-only", f"{ra}^{{commit}}", f"{rb}^{{commit}}", "--", *paths)
    return None if out is None else [line for line in out.decode(errors="replace").splitlines() if line]


#: file suffixes :func:`comment_only` reads as C, C++ or CUDA (pygments' CUDA lexer); any other file differs whole
C_LIKE = (".cu", ".cuh", ".h", ".hh", ".hpp", ".c", ".cc", ".cpp", ".cxx")


def _code_tokens(text: str) -> list[tuple[object, str]]:
    """The tokens of C / C++ / CUDA source without its comments and whitespace (preprocessor lines are code)."""
    from pygments.lexers import CudaLexer
    from pygments.token import Comment

    def kept(kind: object, value: str) -> bool:
        if not value.strip():
            return False
        return kind not in Comment or kind in Comment.Preproc or kind in Comment.PreprocFile

    return [(kind, value.strip()) for kind, value in CudaLexer().get_tokens(text) if kept(kind, value)]


def comment_only(repo: str | Path, a: object, b: object, files: list[str]) -> list[str]:
    """Of ``files`` (repository-relative, e.g. :func:`changed_between`'s), those whose two versions at commits ``a``
    and ``b`` differ only in comments and whitespace: the same code, compiled the same. A file that either commit
    lacks, or that is not C-like (:data:`C_LIKE`), is never one; nor is any where a commit is not at hand."""
    ra, rb = rev(a), rev(b)
    if ra is None or rb is None:
        return []
    out = []
    for f in files:
        if not f.endswith(C_LIKE):
            continue
        la, lb = (git_lines(Path(repo), r, f) for r in (ra, rb))
        if la is not None and lb is not None and _code_tokens("\n".join(la)) == _code_tokens("\n".join(lb)):
            out.append(f)
    return out


def source_key(repo: str | Path, commit: object) -> str:
    """Where the hotspot tables will read a capture's source text from: ``commit X`` where that commit is at hand
    in ``repo``, else the working tree (saying so when the commit is not at hand: a shallow clone). A page
    showing hotspots puts this in its inputs' hash, so that it is rendered again when the history arrives."""
    r = rev(commit)
    if r is None:
        return "working tree"
    ok = git(Path(repo), "cat-file", "-e", f"{r}^{{commit}}") is not None
    return f"commit {r}" if ok else f"working tree (commit {r} not at hand)"


def pick(lines: list[str], line: int) -> str:
    """Line ``line`` (1-based) of ``lines``, stripped; '' past either end."""
    return lines[int(line) - 1].strip() if 0 < int(line) <= len(lines) else ""


def line_text(path: Path, line: int) -> str:
    """Line ``line`` of the file ``path`` as it is now (the file read once)."""
    if path not in _LINES:
        _LINES[path] = path.read_text(errors="replace").split("\n")
    return pick(_LINES[path], line)


def git_lines(repo: Path, r: str, file: str) -> list[str] | None:
    """``file`` (repository-relative) as it was at ``r``, split in lines; None where git, the repository or
    that commit is not at hand (a shallow clone, an imported report's unknown commit)."""
    key = (str(repo.resolve()), r, file)
    if key not in _GIT_LINES:
        out = git(repo, "show", f"{r}:./{file}")
        _GIT_LINES[key] = out.decode(errors="replace").split("\n") if out is not None else None
    return _GIT_LINES[key]


def source_line(repo: Path, file: str, line: int, commit: object = None) -> tuple[str, str]:
    """(the text of line ``line`` of the repository file ``file``, where it was read: ``commit X`` or ``working
    tree``): as it was at ``commit`` where that commit is at hand, else as the file is now."""
    r = rev(commit)
    lines = git_lines(repo, r, file) if r else None
    if lines is not None:
        return pick(lines, line), f"commit {r}"
    return line_text(repo / file, line), "working tree"
