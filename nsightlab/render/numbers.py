"""How values read on a page: numbers (three significant digits, thousands separated, ``—`` for none),
changes (``+4.2%``), table cells, field values (``64``, not ``64.0``) and the order they sort in
(``block_size=4`` before ``block_size=16``). Figures, tables and comparison pages all write values
through these, so one number reads the same everywhere."""

from __future__ import annotations

import base64
import math
import re
from typing import Any

import numpy as np
import pandas as pd

from ..core.text import plain_value  # noqa: F401 - re-exported: the pages' and figures' formatter

MISSING = "—"
#: significant digits a page keeps of the numbers inside its figures: the last digits of a computed float can
#: differ between two CPUs or numpy builds, and a page must not
PAGE_DIGITS = 6


def is_missing(v: Any) -> bool:
    """None, NA, NaT or a float NaN."""
    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, (float, np.floating)) and math.isnan(v))


def fmt_num(v: float | None) -> str:
    """A number for people: thousands separated, three significant digits, an exponent only for
    very small or very large values, ``—`` for none."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return MISSING
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1e7 or a < 1e-3:
        return f"{v:.1e}"
    if a >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def fmt_change(v: float | None) -> str:
    """A relative change with its sign (``+4.2%``), ``—`` for none."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return MISSING
    return f"{v:+.1%}"


def fmt_value(v: Any) -> str:
    """One table cell for people: thousands separators, three significant digits, ``—`` for
    missing, yes/no for booleans."""
    if is_missing(v):
        return MISSING
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        if float(v).is_integer() and abs(v) < 1e7:
            return f"{int(v):,}"
        return fmt_num(float(v))
    return str(v)


def no_empty_brackets(text: str) -> str:
    """``text`` without empty brackets after a word: ``gemm:fwd ()`` reads ``gemm:fwd`` (a label whose
    fields are all empty); a call such as ``f()`` is left alone."""
    return re.sub(r"\s+\(\s*\)", "", str(text))


def natural_key(text: object) -> tuple:
    """Sort key that orders ``block_size=4`` before ``block_size=16`` and ``64x64`` by its numbers."""
    parts = re.split(r"(\d+(?:\.\d+)?)", str(text))
    return tuple((0, float(p)) if re.fullmatch(r"\d+(?:\.\d+)?", p) else (1, p) for p in parts if p != "")


def _round_float(x: float, digits: int) -> float:
    # through the shortest decimal string: correctly rounded by Python itself, the same on every machine
    return float(f"{x:.{digits}g}") if math.isfinite(x) else x


def rounded(value: Any, digits: int = PAGE_DIGITS) -> Any:
    """``value`` (JSON-like: dicts, lists, numbers; a figure as plotly's JSON, its typed arrays
    ``{"dtype": "f8", "bdata": <base64>}`` included) with every float rounded to ``digits`` significant
    digits; integers, strings and the rest as they are. What a page writes of a figure, so that values
    that differ only in their last digits give the same bytes."""
    if isinstance(value, float):
        return _round_float(value, digits)
    if isinstance(value, dict):
        if isinstance(value.get("bdata"), str) and str(value.get("dtype", "")).lstrip("<").startswith("f"):
            arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
            out = np.array([_round_float(x, digits) for x in arr.tolist()], dtype=arr.dtype)
            return {**value, "bdata": base64.b64encode(out.tobytes()).decode("ascii")}
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    return value
