"""Finding a capture's reports: the deep report of a capture folder (or a bare ``.ncu-rep``) with the range
schemas that decode it, and what the capture a report sits in says about it (its commit, its tag). The why
command and the why page find their reports here; the analysis gets the reports loaded."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import ProfileError
from ..core.ranges import RangeSchema
from ..problems import problem as problems
from .captures import capture_tags, find_file, load_manifest
from .read import capture_schemas, resolve

#: the reports a capture's deep sections are read from, first found first
DEEP_NAMES = ("deep.ncu-rep", "ncu.ncu-rep")


def deep_report(capture: str | Path) -> tuple[Path, tuple[RangeSchema, ...]]:
    """(the deep report of a capture folder or a report path, the range schemas to decode it with)."""
    p = Path(capture)
    if p.name.endswith((".ncu-rep", ".ncu-rep.xz", ".ncu-rep.gz")) and p.exists():
        return p, tuple(prob.schema() for prob in problems.known().values())  # a bare report: the known problems' names
    folder = resolve(capture)
    manifest = load_manifest(folder)
    for name in DEEP_NAMES:
        found = find_file(folder, name)
        if found is not None:
            return found, capture_schemas(manifest)
    raise ProfileError(f"{folder}: no deep report (deep.ncu-rep) and no Nsight Compute report; capture one with "
                       "nsightlab capture ... --deep REGEX")


def _capture_of(report: Path) -> tuple[dict, Path]:
    """(the manifest of the capture a report sits in, its folder); ({}, the report) for a bare report."""
    folder = Path(report).parent
    try:
        return (load_manifest(folder), folder) if (folder / "manifest.json").exists() else ({}, Path(report))
    except ProfileError:
        return {}, Path(report)


def report_tags(path_a: Path, path_b: Path) -> tuple[str, str]:
    """:func:`capture_tags` of the captures two reports belong to (a bare report: its file)."""
    return capture_tags(*_capture_of(path_a), *_capture_of(path_b))


def report_commit(report: Path) -> str | None:
    """The commit a report's capture was taken at (its manifest's), to read source lines at; None for a bare report."""
    folder = Path(report).parent
    try:
        return load_manifest(folder).get("git_commit") if (folder / "manifest.json").exists() else None
    except ProfileError:
        return None
