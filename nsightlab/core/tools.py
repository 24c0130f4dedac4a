"""Finding Nsight Compute (``ncu``) and Nsight Systems (``nsys``), and saying plainly what is wrong.

Search order for each tool: the explicit argument, the environment variable (``NCU`` / ``NSYS``),
``PATH``, the standard install folders, and for ``nsys`` finally the copy that ships inside an
Nsight Compute install. That copy looks for its importer (QdstrmImporter, which turns a capture into
a .nsys-rep) in a sibling folder ``host-linux-x64`` that the install does not have; without it nsys
writes no report, so :func:`arrange_embedded_nsys` links the two folders side by side first.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import ToolError

NCU_DIRS = ("/usr/local/cuda/bin", "/opt/nvidia/nsight-compute/*", "/usr/local/cuda/nsight-compute-*",
            "/usr/local/NVIDIA-Nsight-Compute*", "/opt/nvidia/nsight-compute")
NSYS_DIRS = ("/opt/nvidia/nsight-systems/*/bin", "/usr/local/cuda/bin", "/usr/local/cuda/nsight-systems-*/bin",
             "/opt/nvidia/nsight-systems-cli/*/bin", "/usr/lib/nsight-systems/bin")
#: where Nsight Compute keeps its own nsys CLI and the importer that CLI needs
NCU_NSYS_CLI = "host/target-linux-x64/nsys"
NCU_NSYS_IMPORTER_DIR = "host/linux-desktop-glibc_2_11_3-x64"

PERMISSION_HELP = (
    "Nsight Compute may not read the GPU's performance counters (ERR_NVGPUCTRPERM). Either run as root "
    "(sudo), or allow all users: put 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' in a file under "
    "/etc/modprobe.d/, rebuild the initramfs and reboot; in a container start it with --cap-add=SYS_ADMIN. "
    "See https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)


def _version_key(path: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", path))


def _candidates(patterns: Sequence[str], exe: str) -> list[Path]:
    found: list[Path] = []
    for pat in patterns:
        for d in sorted(glob.glob(pat), key=_version_key, reverse=True):
            p = Path(d) / exe
            if p.is_file() and os.access(p, os.X_OK):
                found.append(p)
    return found


def _find(tool: str, env: str, explicit: str | os.PathLike | None, patterns: Sequence[str],
          which: Callable[[str], str | None]) -> Path:
    for origin, value in (("argument", explicit), (f"${env}", os.environ.get(env))):
        if value:
            p = Path(value)
            if p.is_file() and os.access(p, os.X_OK):
                return p
            raise ToolError(f"{tool} given by {origin} is not an executable file: {p}")
    on_path = which(tool)
    if on_path:
        return Path(on_path)
    found = _candidates(patterns, tool)
    if found:
        return found[0]
    raise ToolError(f"{tool} not found: looked at ${env}, PATH and {', '.join(patterns)}. Install "
                    + ("Nsight Compute (it comes with the CUDA toolkit, or from "
                       "https://developer.nvidia.com/nsight-compute)" if tool == "ncu" else
                       "Nsight Systems (https://developer.nvidia.com/nsight-systems; 'apt install nsight-systems-cli' "
                       "from NVIDIA's CUDA repository)")
                    + f", or set {env}=/path/to/{tool}.")


def find_ncu(explicit: str | os.PathLike | None = None, *, which: Callable[[str], str | None] = shutil.which) -> Path:
    """The ``ncu`` executable, or ToolError saying where it looked and what to install."""
    return _find("ncu", "NCU", explicit, NCU_DIRS, which)


def arrange_embedded_nsys(ncu_root: Path, cache: Path) -> Path:
    """Nsight Compute's own nsys finds its importer only under a sibling folder ``host-linux-x64``:
    make a folder of two symlinks that gives it one, and return the nsys to run from there."""
    cli_dir = ncu_root / Path(NCU_NSYS_CLI).parent
    imp_dir = ncu_root / NCU_NSYS_IMPORTER_DIR
    if not (cli_dir / "nsys").is_file():
        raise ToolError(f"no nsys inside the Nsight Compute install {ncu_root}")
    if not (imp_dir / "QdstrmImporter").is_file():
        raise ToolError(f"{ncu_root}: nsys is there but its importer {imp_dir / 'QdstrmImporter'} is not; "
                        "install Nsight Systems")
    dest = cache / f"nsys-from-ncu-{ncu_root.name}"
    dest.mkdir(parents=True, exist_ok=True)
    for name, target in (("target-linux-x64", cli_dir), ("host-linux-x64", imp_dir)):
        link = dest / name
        if link.is_symlink() and Path(os.readlink(link)) != target:
            link.unlink()
        if not link.exists():
            link.symlink_to(target)
    return dest / "target-linux-x64" / "nsys"


def find_nsys(explicit: str | os.PathLike | None = None, *, which: Callable[[str], str | None] = shutil.which,
              ncu_roots: Sequence[str] = ("/opt/nvidia/nsight-compute/*",),
              cache: Path | None = None) -> Path:
    """The ``nsys`` executable; falls back to the copy inside an Nsight Compute install."""
    try:
        return _find("nsys", "NSYS", explicit, NSYS_DIRS, which)
    except ToolError as missing:
        if explicit or os.environ.get("NSYS"):
            raise
        for pat in ncu_roots:
            for root in sorted(glob.glob(pat), key=_version_key, reverse=True):
                if (Path(root) / NCU_NSYS_CLI).is_file():
                    return arrange_embedded_nsys(Path(root), cache or Path.home() / ".cache" / "nsightlab")
        raise missing


def missing_libraries(binary: Path) -> list[str]:
    """Shared libraries ``ldd`` reports as 'not found' for ``binary`` (empty when ldd is unavailable)."""
    ldd = shutil.which("ldd")
    if not ldd:
        return []
    out = subprocess.run([ldd, str(binary)], capture_output=True, text=True, timeout=30)
    return sorted({line.split("=>")[0].strip() for line in out.stdout.splitlines() if "not found" in line})


def check_nsys_importer(nsys: Path) -> None:
    """Raise ToolError when nsys's importer (QdstrmImporter) is absent or cannot load its libraries."""
    base = nsys.resolve().parent.parent
    candidates = [nsys.parent.parent / "host-linux-x64" / "QdstrmImporter", base / "host-linux-x64" / "QdstrmImporter"]
    importer = next((c for c in candidates if c.is_file()), None)
    if importer is None:
        return  # a normal Nsight Systems install: nsys reports its own problems
    libs = missing_libraries(importer)
    if libs:
        hint = " (Debian/Ubuntu: apt install libdw1 libelf1; or unpack those .debs and add their " \
               "usr/lib/x86_64-linux-gnu to LD_LIBRARY_PATH)" if any("libdw" in x or "libelf" in x for x in libs) else ""
        raise ToolError(f"Nsight Systems' importer {importer} cannot run: missing {', '.join(libs)}{hint}. "
                        "Without it nsys writes no .nsys-rep.")


def tool_version(exe: Path) -> str:
    try:
        out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"
    text = (out.stdout + out.stderr).strip().splitlines()
    return text[-1].strip() if text else "unknown"


def check_ncu_output(text: str, returncode: int) -> None:
    """Turn ncu's known failures into ToolError with what to do; silent when the run was fine."""
    if "ERR_NVGPUCTRPERM" in text:
        raise ToolError(PERMISSION_HELP)
    m = re.search(r"==ERROR== Failed to find metric (\S+)", text) or re.search(r"==ERROR== .*metric.*", text)
    if m:
        raise ToolError(f"ncu rejected the metric list: {m.group(0)}. The metric names live in nsightlab.core.metrics; "
                        "'ncu --query-metrics' lists what this GPU offers.")
    if "==WARNING== No kernels were profiled" in text:
        raise ToolError("ncu profiled no kernel: the NVTX filter matched no range (is the workload using the "
                        "nvtx package, and does it open ranges named by nsightlab.core.ranges?)")
    if returncode != 0:
        errors = [line for line in text.splitlines() if "==ERROR==" in line][-5:]
        raise ToolError(f"ncu exited with status {returncode}: " + (" | ".join(errors) or "see its log"))
