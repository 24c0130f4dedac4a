"""The range columns every parsed kernel row has, whichever Nsight tool wrote it.

``range`` is the raw innermost push/pop range name as pushed ("" outside every range) and ``domain``
its NVTX domain; the fields :func:`nsightlab.core.ranges.decode` reads from the name follow as
further columns: with a schema the caller passes (a capture's manifest records its own) or a
registered one, else generic ``key=value`` decoding. Names outside every grammar are kept, never
fatal; nothing is guessed from kernel names.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from ..core.ranges import RangeSchema, decode

#: the columns every parsed kernel row has, whatever the range names say
RANGE_COLUMNS = ["range", "domain", "variant", "pass"]
DEFAULT_DOMAIN = "<default domain>"  # what Nsight Compute calls NVTX's unnamed domain


def fill_range_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every range column present (None where absent) and ``range``/``domain`` "" where unknown."""
    for c in RANGE_COLUMNS:
        if c not in frame:
            frame[c] = None
    frame["range"] = frame["range"].fillna("")
    frame["domain"] = frame["domain"].fillna("")
    return frame


def fill_same_as(dec: pd.DataFrame, schemas: Iterable[RangeSchema]) -> pd.DataFrame:
    """Decoded range fields with each schema's optional fields filled where its names left them out, from the
    field they equal then (``RangeSchema.same_as``: attention's Hkv from H), in the rows of that schema, and
    only where some name gave the field (a capture whose names never do keeps no such column)."""
    for sch in schemas:
        rows = dec["schema"] == sch.prefix if "schema" in dec else pd.Series(False, index=dec.index)
        for key, other in sch.same_as.items():
            if key in dec and other in dec and rows.any():
                gap = rows & dec[key].isna()
                if gap.any():
                    col = dec[key].astype(object)
                    col[gap] = dec.loc[gap, other]
                    dec[key] = pd.to_numeric(col) if sch.optional.get(key) in ("int", "float") else col
    return dec


def with_ranges(rows: list[dict[str, Any]], schemas: Iterable[RangeSchema]) -> pd.DataFrame:
    """Rows with raw ``range``/``domain`` -> a frame with the decoded fields as further columns."""
    schemas = tuple(schemas)
    cache: dict[str, dict[str, Any]] = {}
    decoded = []
    for r in rows:
        name = r.get("range") or ""
        if name not in cache:
            cache[name] = decode(name, schemas)
        decoded.append(cache[name])
    dec = fill_same_as(pd.DataFrame(decoded, index=range(len(rows))), schemas)
    df = pd.DataFrame(rows, index=range(len(rows)))
    extra = [c for c in dec.columns if c not in df.columns]
    out = fill_range_columns(pd.concat([df, dec[extra]], axis=1))
    lead = [*RANGE_COLUMNS, *[c for c in extra if c not in RANGE_COLUMNS]]
    return out[lead + [c for c in out.columns if c not in lead]]
