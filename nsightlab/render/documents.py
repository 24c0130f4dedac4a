"""Documents a plug-in renders from a profiles folder: a study's results page, generated from its captures.

A plug-in registers a :class:`Document` (its name, the file it writes, the profiles folder it is rendered from,
and a function from that folder to the text); ``nsightlab report --profiles P`` writes every registered document
whose profiles folder is ``P``, atomically and only when its text changed, so the same captures and code give the
same bytes. Imports no pandas and no plug-in: the render function does its own imports when called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..problems.impls import load_plugins


@dataclass(frozen=True)
class Document:
    name: str
    #: the file it writes (absolute, or relative to the current folder)
    path: Path
    #: the profiles folder -> the document's text
    render: Callable[[Path], str]
    #: the profiles folder it is rendered from (absolute, or relative to the current folder)
    profiles: Path


_DOCUMENTS: dict[str, Document] = {}


def register(doc: Document) -> None:
    """Register ``doc`` under its name (a second registration of the name replaces the first)."""
    _DOCUMENTS[doc.name] = doc


def registered() -> list[Document]:
    return [_DOCUMENTS[k] for k in sorted(_DOCUMENTS)]


def for_profiles(profiles: Path) -> list[Document]:
    """The registered documents (after loading the plug-ins) rendered from ``profiles``."""
    load_plugins()
    here = Path(profiles).resolve()
    return [d for d in registered() if Path(d.profiles).resolve() == here]


def write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` atomically (a temporary file beside it, then a rename) unless it already holds
    it; whether it wrote."""
    path = Path(path)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return True


def write_documents(profiles: Path) -> list[tuple[str, str]]:
    """Render and write every document of ``profiles``, saying which (the report's progress line); returns the
    failures as (document, message), a document that fails keeping its previous file."""
    import sys
    import traceback

    failures = []
    for doc in for_profiles(profiles):
        try:
            wrote = write_if_changed(Path(doc.path), doc.render(Path(profiles)))
        except Exception as exc:  # noqa: BLE001 - one document's failure is reported, the report goes on
            traceback.print_exc(file=sys.stderr)
            failures.append((f"document {doc.name}", f"{type(exc).__name__}: {exc}"))
            continue
        print(f"document {doc.name}: {doc.path}{' written' if wrote else ' (unchanged)'}", flush=True)
    return failures
