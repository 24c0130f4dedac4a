"""The contract of every kernel module: one table (:data:`KERNELS`) of what the Python side and the CUDA side must
agree on.

For each extension module (one ``.cu`` of kernels and its ``.cpp`` binding, built by one load_inline call): its
sources, the functions the binding exports, its architecture-specific target, its engine (what computes its
products), the fields of its option code (the ``int option`` every launch gets: each field's bit offset, width and
allowed values) and the constants both sides use (keys per block, ring stages, ...).

Python encodes option codes through :meth:`Kernel.encode` (``flash_kernels._ops``, ``flash_kernels.fp8``); the CUDA
side reads them through ``csrc/option_codes.h``, which :func:`header` writes from this table (``python -m
flash_kernels.variants`` rewrites it; tests/test_option_codes.py checks that the committed header is what this
module writes). Torch-free: the analysis side and CI read it without a GPU.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CSRC = Path(__file__).resolve().parent / "csrc"
#: the generated header (committed) the .cu files include for their option fields and constants
HEADER = CSRC / "option_codes.h"

#: compute capability (major, minor) of each architecture-specific target: the only GPUs it runs on
ARCH_CAPABILITY: dict[str, tuple[int, int]] = {"sm_90a": (9, 0)}

#: what computes a module's products
CUDA_CORES, MMA_SYNC, WGMMA, WGMMA_FP8 = "CUDA cores", "tensor cores (mma.sync)", "tensor cores (wgmma)", \
    "tensor cores (wgmma, e4m3)"


@dataclass(frozen=True)
class Field:
    """One field of an option code: ``width`` bits from bit ``shift`` (``width`` None: every bit from ``shift`` on,
    a count such as the number of key splits). ``values``: the field's choices and their codes; empty: the field
    holds a non-negative whole number itself."""

    name: str
    shift: int
    width: int | None
    values: Mapping[Any, int] = field(default_factory=dict)
    doc: str = ""

    def __post_init__(self) -> None:
        if self.width is not None and any(not 0 <= c < 1 << self.width for c in self.values.values()):
            raise ValueError(f"option field {self.name}: a code of {dict(self.values)} does not fit {self.width} bits")
        if len(set(self.values.values())) != len(self.values):
            raise ValueError(f"option field {self.name}: two choices share a code: {dict(self.values)}")

    @property
    def mask(self) -> int | None:
        return None if self.width is None else (1 << self.width) - 1

    def code_of(self, value: Any) -> int:
        """The field's code (unshifted) of ``value``: its choice's code, or the number itself."""
        if self.values:
            if isinstance(value, bool) and not all(isinstance(v, bool) for v in self.values):
                raise ValueError(f"option field {self.name}: {value!r} is not one of {list(self.values)}")
            try:
                return self.values[value]
            except (KeyError, TypeError):
                raise ValueError(f"option field {self.name}: {value!r} is not one of {list(self.values)}") from None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"option field {self.name} holds a whole number >= 0; got {value!r}")
        if self.mask is not None and value > self.mask:
            raise ValueError(f"option field {self.name}: {value} does not fit {self.width} bits")
        return value

    def extract(self, code: int) -> int:
        """This field's bits of ``code`` (what the header's accessor returns)."""
        return code >> self.shift if self.mask is None else (code >> self.shift) & self.mask

    def value_of(self, code: int) -> Any:
        """This field's choice in ``code`` (or its number)."""
        raw = self.extract(code)
        if not self.values:
            return raw
        for value, c in self.values.items():
            if c == raw:
                return value
        raise ValueError(f"option field {self.name}: code {raw} names no choice of {list(self.values)}")


@dataclass(frozen=True)
class Kernel:
    """One extension module's contract: sources, exported functions, target, engine, option fields, constants."""

    module: str
    cu: str
    cpp: str
    functions: tuple[str, ...]
    engine: str
    arch: str | None = None
    fields: tuple[Field, ...] = ()
    #: constants the Python side mirrors (the header's k<Name>): keys per block, ring stages, ...
    constants: Mapping[str, int] = field(default_factory=dict)
    doc: str = ""

    def __post_init__(self) -> None:
        used = 0
        for f in sorted(self.fields, key=lambda f: f.shift):
            if used >> f.shift:
                raise ValueError(f"{self.module}: option field {f.name} overlaps an earlier field")
            if f.width is None and f is not max(self.fields, key=lambda f: f.shift):
                raise ValueError(f"{self.module}: only the highest field may take every bit from its offset on")
            used |= ((1 << (f.width or 64)) - 1) << f.shift

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.module} has no option field {name!r}; its fields: {[f.name for f in self.fields]}")

    def encode(self, **values: Any) -> int:
        """The option code of ``values`` (field name -> choice or number); a field left out is 0."""
        unknown = sorted(set(values) - {f.name for f in self.fields})
        if unknown:
            raise ValueError(f"{self.module}: no option field {', '.join(unknown)}; its fields: "
                             f"{[f.name for f in self.fields]}")
        return sum(self.field(k).code_of(v) << self.field(k).shift for k, v in values.items())

    def decode(self, code: int) -> dict[str, Any]:
        """Field name -> choice (or number) of an option code; :meth:`encode`'s inverse."""
        return {f.name: f.value_of(code) for f in self.fields}


def _fields(*fields: Field) -> tuple[Field, ...]:
    return fields


_SIMT_BLOCK = Field("block_size", 0, 8, {4: 4, 8: 8, 16: 16, 32: 32},
                    "Br = Bc: rows per Q block = keys per K/V tile (the code is the number itself)")
_GROUP_SPLIT = Field("group_split", 8, None, {}, "thread blocks per grouped-query group (0 = 1)")
#: flash_decode's and flash_decode_wgmma's block: rows (and consumer warpgroups) per block
_DECODE_BLOCK = Field("block", 0, 8, {"rows16": 0, "rows32": 1, "rows64": 2, "rows128": 3, "rows64-split-keys": 4},
                      "rows per block: 16, 32, 64 (flash_decode: 4 warps; wgmma: one warpgroup), 128 (two warpgroups "
                      "that split the rows), 64 over two warpgroups that split the keys")
_DECODE_SPLITS = Field("splits", 8, None, {}, "key splits (grid z)")

#: One entry per extension module, in the ladder's order (sources.MODULES is made from it).
KERNELS: dict[str, Kernel] = {
    k.module: k
    for k in [
        Kernel("naive", "naive.cu", "bind_naive.cpp", ("fwd", "bwd"), CUDA_CORES),
        Kernel("tiled", "tiled.cu", "bind_tiled.cpp", ("fwd", "bwd"), CUDA_CORES,
               fields=_fields(Field("form", 0, 8, {"tiled": 0, "tiled_uncoalesced": 1},
                                    "the backward's thread mapping (the forward is tiled's either way)"))),
        Kernel("flash_fa1", "flash_fa1.cu", "bind_flash_fa1.cpp", ("fwd",), CUDA_CORES, fields=(_SIMT_BLOCK,)),
        Kernel("flash_simt", "flash_simt.cu", "bind_flash_simt.cpp", ("fwd", "bwd"), CUDA_CORES, fields=(_SIMT_BLOCK,)),
        Kernel("flash_mma_fwd", "flash_mma_fwd.cu", "bind_flash_mma_fwd.cpp", ("fwd",), MMA_SYNC,
               fields=_fields(Field("tile", 0, 8, {"128x64": 0, "128x32": 1, "64x64": 2},
                                    "query rows x keys per K/V tile"))),
        Kernel("flash_mma_bwd", "flash_mma_bwd.cu", "bind_flash_mma_bwd.cpp", ("bwd",), MMA_SYNC,
               fields=_fields(Field("tile", 0, 8, {"64x128": 0, "128x128": 1}, "query rows per step x keys per block"),
                              _GROUP_SPLIT),
               constants={"keys": 128}),
        Kernel("flash_wgmma_fwd", "flash_wgmma_fwd.cu", "bind_flash_wgmma_fwd.cpp", ("fwd",), WGMMA, arch="sm_90a",
               fields=_fields(
                   Field("tile", 0, 4, {"128x128": 0, "128x64": 1, "192x128": 2, "192x64": 3},
                         "query rows (64 per consumer warpgroup) x keys per K/V tile"),
                   Field("pipeline", 4, 4, {"cp.async": 0, "tma": 1, "tma-ws": 2, "tma-ws-overlap": 3,
                                            "tma-ws-pingpong": 4, "tma-ws-persistent": 5,
                                            "tma-ws-persistent-pingpong": 6}, "how K/V reach shared memory"),
                   Field("tail", 8, None, {}, "not causal, persistent: 1 + the query blocks of a head that stay whole "
                                              "(0: all); causal: non-zero = the heads dealt in groups (step 8)"))),
        Kernel("flash_wgmma_bwd", "flash_wgmma_bwd.cu", "bind_flash_wgmma_bwd.cpp", ("bwd",), WGMMA, arch="sm_90a",
               fields=_fields(Field("tile", 0, 4, {"64x128": 0, "128x128": 1, "64x64": 2},
                                    "query rows per step x keys per block"),
                              Field("pipeline", 4, 4, {"cp.async": 0, "tma-ws": 1}, "how Q, dO, LSE, Dd arrive"),
                              _GROUP_SPLIT),
               constants={"keys": 128, "keys_d256": 64}),
        Kernel("flash_wgmma_fp8", "flash_wgmma_fp8.cu", "bind_flash_wgmma_fp8.cpp", ("fwd", "vt"), WGMMA_FP8,
               arch="sm_90a",
               fields=_fields(Field("out_dtype", 0, 1, {"bfloat16": 0, "float16": 1}, "the output's dtype"),
                              Field("exp_on_fma", 4, 4, {0.0: 0, 0.25: 1, 0.5: 2},
                                    "the share of the softmax's exponentials computed on the FMA units"),
                              Field("pingpong", 8, 1, {False: 0, True: 1}, "the consumers take turns"),
                              Field("scales", 9, 1, {"tensor": 0, "block": 1},
                                    "descales per tensor, or per block of scale_block rows of Q, K and V"),
                              Field("o_sum", 10, 1, {"fp32": 0, "tensor": 1},
                                    "where O's sum over K/V tiles is kept: fp32 registers (each tile's P V added by "
                                    "the CUDA cores) or the tensor cores' accumulator")),
               constants={"vt_group": 32, "scale_block": 128}),
        Kernel("flash_decode", "flash_decode.cu", "bind_flash_decode.cpp", ("fwd",), MMA_SYNC,
               fields=_fields(_DECODE_BLOCK, _DECODE_SPLITS),
               constants={"keys": 64, "stages_d64": 4, "stages_d128": 3, "stages_d128_many_rows": 2}),
        Kernel("flash_decode_wgmma", "flash_decode_wgmma.cu", "bind_flash_decode_wgmma.cpp", ("fwd",), WGMMA,
               arch="sm_90a", fields=_fields(_DECODE_BLOCK, _DECODE_SPLITS),
               constants={"keys": 64, "stages_d64": 4, "stages_d128": 3, "smem_slack": 1024}),
    ]
}


def kernel(module: str) -> Kernel:
    if module not in KERNELS:
        raise ValueError(f"no kernel module {module!r}; the modules: {', '.join(KERNELS)}")
    return KERNELS[module]


# ------------------------------------------------------------------------------ the CUDA header


def cname(value: Any) -> str:
    """A choice as part of a C++ identifier: ``"tma-ws-persistent"`` -> ``TmaWsPersistent``, ``0.25`` -> ``0p25``,
    ``True`` -> ``On``."""
    if isinstance(value, bool):
        return "On" if value else "Off"
    if isinstance(value, float):
        return f"{value:g}".replace(".", "p")
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[^A-Za-z0-9]+", str(value)) if p)


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


def header() -> str:
    """``csrc/option_codes.h`` as this table writes it."""
    from .registry import KERNELS as every  # the built-in modules and any a variant's entry declares

    out = ["// Generated from flash_kernels/variants.py (KERNELS) by `python -m flash_kernels.variants`: do not edit.",
           "// Each kernel module's option-code fields (accessors and the codes of their choices) and the constants",
           "// flash_kernels mirrors in Python; tests/test_option_codes.py checks this file against the table.",
           "#pragma once", "", "namespace fk {", "namespace codes {"]
    for k in every.values():
        out += ["", f"// {k.module} ({k.cu}): {k.engine}", f"namespace {k.module} {{"]
        for f in k.fields:
            mask = "" if f.mask is None else f" & {f.mask:#x}"
            out.append(f"// {f.name}: bits {f.shift}..{'' if f.width is None else f.shift + f.width - 1}"
                       + (f" -- {f.doc}" if f.doc else ""))
            out.append(f"constexpr int {f.name}(int option) {{ return (option >> {f.shift}){mask}; }}")
            for value, code in f.values.items():
                out.append(f"constexpr int k{_camel(f.name)}{cname(value)} = {code};")
        for name, value in k.constants.items():
            out.append(f"constexpr int k{_camel(name)} = {value};")
        out.append(f"}}  // namespace {k.module}")
    out += ["", "}  // namespace codes", "}  // namespace fk", ""]
    return "\n".join(out)


def write_header(path: Path = HEADER) -> Path:
    path.write_text(header())
    return path


if __name__ == "__main__":
    print(write_header(Path(sys.argv[1]) if len(sys.argv) > 1 else HEADER))
