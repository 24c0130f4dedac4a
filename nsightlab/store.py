"""The profile store: profiles/<gpu>/<suite>/ folders, each self-described by a manifest."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd


class ProfileError(ValueError):
    """A capture folder that is missing, incomplete or corrupt (the message says which and how)."""


@dataclass(frozen=True)
class Capture:
    gpu: str
    suite: str
    path: Path

    @property
    def label(self) -> str:
        return f"{self.gpu}/{self.suite}"


def list_captures(root: Path) -> list[Capture]:
    """Every <gpu>/<suite> folder under ``root`` that holds benchmark results or a manifest."""
    root = Path(root)
    if not root.is_dir():
        raise ProfileError(f"profile folder {root} does not exist")
    out = []
    for gpu in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        for suite in sorted(p for p in gpu.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
            out.append(Capture(gpu.name, suite.name, suite))
    return out


REQUIRED_COLUMNS = ("suite", "config", "B", "H", "N", "D", "causal", "dtype", "impl", "kind", "pass", "status",
                    "ms", "tflops")


def load_bench(capture: Path) -> tuple[pd.DataFrame, dict[str, dict]]:
    """All benchmark CSVs of a capture folder as one frame, and their manifests by suite name.

    Raises ProfileError naming the file when a CSV has no manifest, cannot be parsed or lacks columns.
    """
    capture = Path(capture)
    csvs = sorted(capture.glob("*.csv"))
    if not csvs:
        raise ProfileError(f"{capture}: no benchmark CSV (expected <suite>.csv with <suite>.manifest.json beside it)")
    frames, manifests = [], {}
    for csv in csvs:
        man = csv.with_suffix(".manifest.json")
        if not man.exists():
            raise ProfileError(f"{csv}: its manifest {man.name} is missing; re-run the benchmark to capture both")
        try:
            manifests[csv.stem] = json.loads(man.read_text())
        except json.JSONDecodeError as exc:
            raise ProfileError(f"{man}: not valid JSON ({exc})") from None
        try:
            df = pd.read_csv(csv)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise ProfileError(f"{csv}: cannot be read as CSV ({exc})") from None
        missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
        if missing:
            raise ProfileError(f"{csv}: missing columns {missing}; is it a flash_kernels.bench CSV?")
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    df["causal"] = df["causal"].astype(str).str.lower().eq("true")
    df["options"] = df["options"].fillna("")
    return df, manifests
