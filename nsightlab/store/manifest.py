"""The manifest of a capture folder: one schema, one writer, for captured and imported folders alike.

``manifest.json`` makes a capture folder self-describing: the GPU, the environment (driver, CUDA,
torch, host, git commit), the tools, the range schemas that decode its NVTX names, the command lines
that made it, and every file with its size and SHA-256. It is written last, so a folder with a
manifest is a complete one; :func:`publish` then moves the folder into place whole.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.files import MANIFEST, file_table, place
from ..core.ranges import RangeSchema
from .captures import compact

SCHEMA = 2


def build(*, name: str, description: str, origin: str, created: str, gpu: Mapping[str, Any],
          environment: Mapping[str, Any], tools: Sequence[str], range_schemas: Iterable[RangeSchema],
          commands: Sequence[Mapping[str, Any]], **fields: Any) -> dict[str, Any]:
    """The fields every manifest has, then ``fields`` (what the origin adds: ncu and nsys facts, cases,
    ceilings, ...). ``origin``: "captured" or "imported". The file table is taken when it is written."""
    return {"schema": SCHEMA, "name": name, "suite": name, "description": description, "origin": origin,
            "created": created, "gpu": dict(gpu), "environment": dict(environment),
            "git_commit": environment.get("git_commit"), "tools": list(tools), **fields,
            "range_schemas": [s.to_json() for s in range_schemas], "commands": [dict(c) for c in commands]}


def write(folder: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Write ``manifest`` into ``folder`` with the table of every other file there (sizes, SHA-256),
    atomically (a reader never sees half a manifest); then compress the large exports, which rewrites the
    table to the compressed files. Returns the manifest as written."""
    folder = Path(folder)
    manifest["files"] = file_table(folder)
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, folder / MANIFEST)
    compact(folder)
    return json.loads((folder / MANIFEST).read_text(encoding="utf-8"))


def publish(folder: Path, dest: Path, manifest: dict[str, Any], *, replace: bool = False) -> dict[str, Any]:
    """:func:`write` the manifest into the finished ``folder``, then move it into place at ``dest``. An
    earlier ``dest`` is replaced only with ``replace``, and only once the move succeeded (it waits in a
    dated backup beside it meanwhile, see nsightlab.core.files.place); without it, ProfileError."""
    written = write(folder, manifest)
    place(Path(folder), Path(dest), replace=replace)
    return written
