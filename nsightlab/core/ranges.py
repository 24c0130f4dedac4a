"""NVTX range names: schemas that write and read them, and a decoder for any name.

A :class:`RangeSchema` is a prefix, positional fields and typed ``key=value`` fields::

    fk:flash_mma:forward:B=1,H=8,N=1024,D=64,dtype=float16,causal=0,tile=128x64
    ^^ prefix    ^^^^^^^ positional (variant, pass)    ^^^^^^^^^^ typed fields, then options

The workload names each measured case with the sweep's schema; the parsers keep every raw name
(column ``range``) and decode it with :func:`decode`: with the first schema whose prefix and grammar
match, else generically (``key=value`` tokens become columns, the rest of the name is the label).
Decoding never raises: a name outside every grammar is still kept and labelled.

Schemas travel with the capture (its manifest records them), so a report decodes a capture's names
without importing the package that made them; packages may also :func:`register` theirs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: the canonical columns every decoded range has (None where a name does not say)
LABEL = "variant"  # the implementation: one colour per value in every figure
PASS = "pass"
_TYPES: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}
_VALUE = re.compile(r"^[A-Za-z0-9_.+-]+$")
_KV = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)=(.+)$")


def _check_token(what: str, value: str) -> str:
    if not _VALUE.match(value):
        raise ValueError(f"NVTX range {what} {value!r} may only hold letters, digits and _ . + -")
    return value


def _convert(text: str, typ: type) -> Any:
    if typ is bool:
        if text in ("1", "true", "True"):
            return True
        if text in ("0", "false", "False"):
            return False
        raise ValueError(f"{text!r} is not a boolean (0/1)")
    return typ(text)


def _guess(text: str) -> Any:
    """A generic field value: int, then float, else the text."""
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", text):
        return float(text)
    return text


def format_options(options: Mapping[str, Any]) -> str:
    """Options as one sorted ``a=1;b=x`` string (the form the benchmark CSVs use)."""
    return ";".join(f"{k}={options[k]}" for k in sorted(options))


@dataclass(frozen=True)
class RangeSchema:
    """A range-name grammar: ``prefix:pos1:pos2:key=value,key=value,...`` with typed fields.

    ``positional`` name the colon-separated parts after the prefix (the first is the label, one
    colour per value). ``fields`` are required typed key=value pairs; any further pair is an
    option (kept as a column and in the ``options`` string)."""

    prefix: str
    positional: tuple[str, ...] = (LABEL, PASS)
    fields: Mapping[str, str] = field(default_factory=dict)  # name -> "int" | "float" | "str" | "bool"
    #: typed fields that a name may leave out (written only when given)
    optional: Mapping[str, str] = field(default_factory=dict)
    #: values a positional field may take (e.g. pass: forward, backward); empty = any token
    choices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    description: str = ""
    #: optional field -> the field whose value it takes where a name leaves it out (attention: Hkv -> H,
    #: Nk -> N); filled in a frame's column wherever some name gave the field (with_ranges)
    same_as: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_token("prefix", self.prefix)
        bad = {k: v for k, v in {**self.fields, **self.optional}.items() if v not in _TYPES}
        if bad:
            raise ValueError(f"schema {self.prefix!r}: field types must be one of {sorted(_TYPES)}, not {bad}")
        wrong = {k: v for k, v in self.same_as.items() if k not in self.optional or v not in {**self.fields, **self.optional}}
        if wrong:
            raise ValueError(f"schema {self.prefix!r}: same_as maps optional fields to fields; "
                             f"not {wrong} (optional: {sorted(self.optional)})")

    # -- writing
    def name(self, values: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> str:
        """The range name of one case; ValueError says which value does not fit the grammar."""
        parts = [self.prefix]
        for p in self.positional:
            if p not in values:
                raise ValueError(f"schema {self.prefix!r}: missing positional field {p!r}")
            val = str(values[p])
            allowed = self.choices.get(p)
            if allowed and val not in allowed:
                raise ValueError(f"{p} must be one of {allowed}, not {val!r}")
            parts.append(_check_token(p, val))
        kv = []
        typed = {**self.fields, **{k: t for k, t in self.optional.items() if values.get(k) is not None}}
        for key, typ in typed.items():
            if key not in values:
                raise ValueError(f"schema {self.prefix!r}: missing field {key!r}")
            val = values[key]
            if typ == "int" and (isinstance(val, bool) or not isinstance(val, int) or val < 0):
                raise ValueError(f"NVTX range field {key} must be a non-negative int, not {val!r}")
            text = str(int(bool(val))) if typ == "bool" else str(val)
            kv.append(f"{key}={_check_token(key, text)}")
        for key in sorted(options or {}):
            if key in self.fields or key in self.optional or key in self.positional:
                raise ValueError(f"option name {key!r} clashes with a range field")
            kv.append(f"{_check_token('option name', key)}={_check_token('option value', str(options[key]))}")  # type: ignore[index]
        return ":".join(parts) + (":" + ",".join(kv) if kv else "")

    # -- reading
    def parse(self, name: str) -> dict[str, Any] | None:
        """The decoded columns of ``name``, or None if it is not in this grammar (never raises)."""
        if not isinstance(name, str):
            return None
        parts = name.split(":", len(self.positional) + 1)
        if parts[0] != self.prefix or len(parts) < len(self.positional) + 1:
            return None
        row: dict[str, Any] = {}
        for p, val in zip(self.positional, parts[1:], strict=False):
            allowed = self.choices.get(p)
            if not val or (allowed and val not in allowed):
                return None
            row[p] = val
        rest = parts[len(self.positional) + 1] if len(parts) > len(self.positional) + 1 else ""
        kv: dict[str, str] = {}
        for item in filter(None, rest.split(",")):
            m = _KV.match(item)
            if not m:
                return None
            kv[m.group(1)] = m.group(2)
        try:
            for key, typ in self.fields.items():
                if key not in kv:
                    return None
                row[key] = _convert(kv.pop(key), _TYPES[typ])
            for key, typ in self.optional.items():
                if key in kv:
                    row[key] = _convert(kv.pop(key), _TYPES[typ])
        except ValueError:
            return None
        options = {k: _guess(v) for k, v in kv.items()}
        row.update(options)
        row["options"] = format_options(options)
        row["schema"] = self.prefix
        return row

    @property
    def columns(self) -> tuple[str, ...]:
        return (*self.positional, *self.fields, *self.optional)

    # -- manifests
    def to_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "positional": list(self.positional), "fields": dict(self.fields),
                "optional": dict(self.optional),
                "choices": {k: list(v) for k, v in self.choices.items()}, "description": self.description,
                **({"same_as": dict(self.same_as)} if self.same_as else {})}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RangeSchema:
        try:
            return cls(str(data["prefix"]), tuple(data.get("positional", (LABEL, PASS))), dict(data.get("fields", {})),
                       dict(data.get("optional") or {}), {k: tuple(v) for k, v in (data.get("choices") or {}).items()},
                       str(data.get("description", "")), dict(data.get("same_as") or {}))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a range schema ({exc}): {data!r}") from None

    def nvtx_include(self) -> str:
        """Nsight Compute's ``--nvtx-include`` filter for this schema's ranges (ncu splits the filter
        at every ``/``, so the regex ends with one)."""
        return f"regex:^{re.escape(self.prefix)}:.*/"


_REGISTERED: dict[str, RangeSchema] = {}


def register(schema: RangeSchema) -> RangeSchema:
    """Make ``schema`` known to :func:`decode` in this process (a package's own naming)."""
    _REGISTERED[schema.prefix] = schema
    return schema


def registered() -> tuple[RangeSchema, ...]:
    return tuple(_REGISTERED.values())


def generic(name: str) -> dict[str, Any]:
    """Decode any name: ``key=value`` tokens (split at whitespace, ``,`` and ``;``) become fields,
    the remaining text is the label. ``gemm:fwd M=4096 K=1024`` -> variant 'gemm:fwd', M, K."""
    row: dict[str, Any] = {}
    label = []
    for tok in re.split(r"[\s,;]+", name.strip()):
        m = _KV.match(tok)
        if m and m.group(1) not in (LABEL, "range", "domain", "schema"):
            row[m.group(1)] = _guess(m.group(2))
        elif tok:
            label.append(tok)
    row[LABEL] = " ".join(label) or name.strip() or None
    row["schema"] = ""
    return row


def decode(name: str | None, schemas: Iterable[RangeSchema] = ()) -> dict[str, Any]:
    """The columns of one raw range name: ``range`` (the name itself, "" for none), the label
    (``variant``), ``pass`` and every field. Tries ``schemas`` then the registered ones, else
    :func:`generic`. Never raises."""
    if not name:
        return {"range": "", LABEL: None, PASS: None}
    for s in (*schemas, *_REGISTERED.values()):
        row = s.parse(name)
        if row is not None:
            return {"range": name, PASS: None, **row}
    return {"range": name, PASS: None, **generic(name)}


def schemas_of(manifest: Mapping[str, Any] | None) -> tuple[RangeSchema, ...]:
    """The range schemas a capture's manifest records (none for imported captures)."""
    out = []
    for data in (manifest or {}).get("range_schemas", []) or []:
        try:
            out.append(RangeSchema.from_json(data))
        except ValueError:
            continue
    return tuple(out)


def innermost(stack: Iterable[str]) -> str:
    """The innermost (last pushed) non-empty name of a push/pop range stack."""
    names = [s for s in stack if s]
    return names[-1] if names else ""
