"""The one naming function for NVTX ranges, and its inverse.

The workload (flash_kernels.workload) opens one range per measured launch group with
:func:`range_name`; the parsers turn range names back into columns with :func:`parse_range`.
No parser guesses anything from kernel names.

    fk:flash_mma:forward:B=1,H=8,N=1024,D=64,dtype=float16,causal=0,tile=128x64

The prefix ``fk:`` lets Nsight Compute filter the measured ranges with
``--nvtx-include "regex:^fk:.*/"`` (ncu splits the filter at every ``/``, regex included) (see :data:`NCU_NVTX_INCLUDE`). Fields never contain ``/`` (the
NVTX filter's range-stack separator), ``:`` after the third one, or ``,`` inside values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

PREFIX = "fk"
PASSES = ("forward", "backward")
#: the columns every parsed range yields, in this order (options follow as extra columns)
COLUMNS = ("variant", "pass", "B", "H", "N", "D", "dtype", "causal", "options")
#: the --nvtx-include filter that selects the measured ranges and nothing else (push/pop ranges)
NCU_NVTX_INCLUDE = f"regex:^{PREFIX}:.*/"
_VALUE = re.compile(r"^[A-Za-z0-9_.+-]+$")


@dataclass(frozen=True)
class RangeSpec:
    variant: str
    pass_: str
    B: int
    H: int
    N: int
    D: int
    dtype: str
    causal: bool
    options: dict[str, Any] = field(default_factory=dict)

    def as_row(self) -> dict[str, Any]:
        return {"variant": self.variant, "pass": self.pass_, "B": self.B, "H": self.H, "N": self.N, "D": self.D,
                "dtype": self.dtype, "causal": self.causal, "options": format_options(self.options)}


def format_options(options: dict[str, Any]) -> str:
    """Options as one sorted ``a=1;b=x`` string (the form the benchmark CSVs use)."""
    return ";".join(f"{k}={options[k]}" for k in sorted(options))


def _check_token(what: str, value: str) -> str:
    if not _VALUE.match(value):
        raise ValueError(f"NVTX range {what} {value!r} may only hold letters, digits and _ . + -")
    return value


def range_name(variant: str, pass_: str, B: int, H: int, N: int, D: int, dtype: str, causal: bool,
               options: dict[str, Any] | None = None) -> str:
    """The NVTX range name of one measured launch group (see the module docstring)."""
    if pass_ not in PASSES:
        raise ValueError(f"pass must be one of {PASSES}, not {pass_!r}")
    for what, val in (("B", B), ("H", H), ("N", N), ("D", D)):
        if isinstance(val, bool) or not isinstance(val, int) or val <= 0:
            raise ValueError(f"NVTX range {what} must be a positive int, not {val!r}")
    _check_token("variant", variant)
    _check_token("dtype", dtype)
    fields = [f"B={B}", f"H={H}", f"N={N}", f"D={D}", f"dtype={dtype}", f"causal={int(bool(causal))}"]
    for key in sorted(options or {}):
        if key in ("B", "H", "N", "D", "dtype", "causal"):
            raise ValueError(f"option name {key!r} clashes with a range field")
        fields.append(f"{_check_token('option name', key)}={_check_token('option value', str(options[key]))}")
    return f"{PREFIX}:{variant}:{pass_}:{','.join(fields)}"


def _num(s: str) -> Any:
    return int(s) if re.fullmatch(r"-?\d+", s) else s


def parse_range(name: str) -> RangeSpec:
    """Invert :func:`range_name`; a name that is not one raises ValueError saying what is wrong."""
    parts = name.split(":", 3)
    if len(parts) != 4 or parts[0] != PREFIX:
        raise ValueError(f"not a flash_kernels range name (expected '{PREFIX}:variant:pass:fields'): {name!r}")
    _, variant, pass_, rest = parts
    if pass_ not in PASSES:
        raise ValueError(f"range {name!r}: pass {pass_!r} is not one of {PASSES}")
    kv: dict[str, str] = {}
    for item in rest.split(","):
        key, sep, val = item.partition("=")
        if not sep or not key or not val:
            raise ValueError(f"range {name!r}: field {item!r} is not key=value")
        kv[key] = val
    missing = [k for k in ("B", "H", "N", "D", "dtype", "causal") if k not in kv]
    if missing:
        raise ValueError(f"range {name!r}: missing field(s) {missing}")
    try:
        B, H, N, D = (int(kv.pop(k)) for k in ("B", "H", "N", "D"))
    except ValueError:
        raise ValueError(f"range {name!r}: B, H, N, D must be integers") from None
    causal = kv.pop("causal")
    if causal not in ("0", "1"):
        raise ValueError(f"range {name!r}: causal must be 0 or 1, not {causal!r}")
    dtype = kv.pop("dtype")
    return RangeSpec(variant, pass_, B, H, N, D, dtype, causal == "1", {k: _num(v) for k, v in kv.items()})


def is_range_name(name: str) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX + ":")
