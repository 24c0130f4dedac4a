"""Small pieces of wording every stage shares: counted nouns, the key implementation names are compared by,
and field values as range names write them."""

from __future__ import annotations

import re
from typing import Any

import numpy as np


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 file``, ``2 files``; ``many`` for a word whose plural is not ``word + "s"`` (``study``, ``studies``)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def impl_key(name: object) -> str:
    """The key an implementation's name is looked up by: lower case, blanks and dashes as ``_`` (an imported
    report's ``SDPA flash`` range is ``sdpa_flash``)."""
    return re.sub(r"[\s\-]+", "_", str(name).strip().lower())


def plain_value(v: object) -> str:
    """A field value as written in a range name: whole floats without their ``.0`` (a column with gaps is float)."""
    return str(int(v)) if isinstance(v, (float, np.floating)) and float(v).is_integer() else str(v)


def csv_list(text: str, cast: Any = str) -> list:
    """A comma-separated argument as a list: items stripped, empty ones dropped, each passed through ``cast``."""
    return [cast(x.strip()) for x in str(text).split(",") if x.strip()]
