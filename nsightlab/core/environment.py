"""What a result needs to say about where it was measured: GPU, driver, versions, commit (torch at run time)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any


def git_commit(where: str | Path | None = None) -> str:
    """The commit of the git work tree at ``where`` (default: the current directory, i.e. the project
    being profiled), marked ``-dirty`` when tracked files differ from it; ``$NSIGHTLAB_GIT_COMMIT``
    overrides (a copy of a tree without its .git); "unknown" outside any repository."""
    env = os.environ.get("NSIGHTLAB_GIT_COMMIT") or os.environ.get("FK_GIT_COMMIT")
    if env:
        return env
    where = str(where or Path.cwd())
    try:
        out = subprocess.run(["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            dirty = subprocess.run(["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def nvidia_smi() -> dict[str, str]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    fields = ["name", "driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
              "power.limit", "memory.total"]
    try:
        out = subprocess.run([exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return {}
    if out.returncode != 0 or not out.stdout.strip():
        return {}
    vals = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(fields, vals, strict=False))


def environment() -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "git_commit": git_commit(),
        "host": platform.node(),
    }
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env["gpu"] = {
            "name": p.name,
            "compute_capability": f"{p.major}.{p.minor}",
            "sm_count": p.multi_processor_count,
            "l2_bytes": int(getattr(p, "L2_cache_size", 0)),
            "total_memory_bytes": int(p.total_memory),
            "shared_memory_per_block_optin": int(getattr(p, "shared_memory_per_block_optin", 0)),
            "shared_memory_per_sm": int(getattr(p, "shared_memory_per_multiprocessor", 0)),
            "registers_per_sm": int(getattr(p, "regs_per_multiprocessor", 0)),
            "nvidia_smi": nvidia_smi(),
        }
    return env
