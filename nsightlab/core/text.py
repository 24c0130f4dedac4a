"""Small pieces of wording every stage shares: counted nouns, and the key implementation names are
compared by."""

from __future__ import annotations

import re


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 file``, ``2 files``; ``many`` for a word whose plural is not ``word + "s"`` (``study``, ``studies``)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def impl_key(name: object) -> str:
    """The key an implementation's name is looked up by: lower case, blanks and dashes as ``_`` (an imported
    report's ``SDPA flash`` range is ``sdpa_flash``)."""
    return re.sub(r"[\s\-]+", "_", str(name).strip().lower())
