"""What the notebooks share: their parameters' meaning, live/replay preparation, selection, headers.

The notebooks hold narrative and figures only; everything they compute comes from here, from
nsightlab.analysis and from nsightlab.figures.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import figures
from .store import ProfileError, load_manifest, short_commit

pd.set_option("display.max_colwidth", 200)  # the tables' explanation columns are sentences

MODES = ("replay", "live")


def prepare(capture: str, mode: str = "replay", suite: str = "", only: str = "", live_profiles: str = "profiles_live",
            plotlyjs: str = "inline") -> tuple[Path, dict]:
    """The capture folder to analyse and its manifest. ``replay`` reads ``capture`` as it is;
    ``live`` first captures ``suite`` (restricted to the ranges matching ``only``) on this machine's
    GPU through nsightlab.capture, into ``live_profiles``, and analyses that."""
    figures.set_plotlyjs(plotlyjs)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if mode == "live":
        from .capture import capture as run_capture

        if not suite:
            raise ValueError("live mode needs the suite to capture (parameter 'suite')")
        path = run_capture(suite, live_profiles, only=only or None)
    else:
        path = Path(capture)
        if not path.is_dir():
            raise ProfileError(f"capture folder {path} does not exist; see profiles/ for the committed ones "
                               "(python -m nsightlab.store list)")
    return path, load_manifest(path)


def csv_list(text: str, cast=str) -> list:
    return [cast(x.strip()) for x in str(text).split(",") if x.strip()]


def select(df: pd.DataFrame, variants: str = "", N: str = "", D: str = "", dtype: str = "", causal: bool | None = None,
           passes: str = "") -> pd.DataFrame:
    """Rows of a range-keyed frame that match the notebook's sweep parameters ("" = all)."""
    m = pd.Series(True, index=df.index)
    if variants:
        m &= df["variant"].isin(csv_list(variants))
    if N:
        m &= df["N"].isin(csv_list(N, int))
    if D:
        m &= df["D"].isin(csv_list(D, int))
    if dtype:
        m &= df["dtype"] == dtype
    if causal is not None:
        m &= df["causal"].astype(bool) == bool(causal)
    if passes:
        m &= df["pass"].isin(csv_list(passes))
    return df[m]


def header(manifest: dict, path: Path) -> str:
    """One Markdown paragraph: where and how the capture was made."""
    g = manifest.get("gpu", {})
    env = manifest.get("environment", {})
    ncu = manifest.get("ncu") or {}
    nsys = manifest.get("nsys") or {}
    t = manifest.get("timings_seconds", {})
    shown = Path(*Path(path).parts[-3:]) if len(Path(path).parts) >= 3 else path  # profiles/<gpu>/<suite>
    parts = [f"**Capture** `{shown}` (suite *{manifest.get('suite')}*, {manifest.get('created')})",
             f"**GPU** {g.get('name')} (CC {g.get('compute_capability')}, {g.get('sm_count')} SMs, "
             f"L2 {g.get('l2_bytes', 0) / 2**20:.0f} MiB, driver {g.get('nvidia_smi', {}).get('driver_version')})",
             f"**torch** {env.get('torch')} · **CUDA** {env.get('cuda_runtime')} · **commit** `{short_commit(manifest.get('git_commit'))}`"]
    if ncu:
        parts.append(f"**Nsight Compute** {ncu.get('version')}: {ncu.get('kernels_profiled')} kernels, "
                     f"{ncu.get('max_passes_per_kernel')} replay passes each ({ncu.get('replay_mode', 'kernel')} replay), "
                     f"clock control `{ncu.get('clock_control')}`")
    if nsys:
        parts.append(f"**Nsight Systems** {nsys.get('version')}, {nsys.get('iters')} measured launches per range")
    if t:
        parts.append(f"capture took {t.get('total', 0):.0f} s")
    if manifest.get("provenance_note"):
        parts.append(f"*{manifest['provenance_note']}*")
    return " · ".join(parts)
