"""Build (or load from cache) the CUDA extension modules with torch.utils.cpp_extension.load_inline.

Each source file is its own module, built on first use; :func:`build_all` builds them all in
parallel threads (each load_inline runs its own ninja/nvcc subprocesses). Warm loads hit
load_inline's cache and take milliseconds. A module with an architecture-specific target
(``Kernel.arch``, e.g. sm_90a for wgmma) is built for that target only, and only on a GPU of
its compute capability; :func:`build_all` leaves it out elsewhere.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

from .sources import ARCH_CAPABILITY, CSRC, MODULES, NVCC_FLAGS, arch_flags, module_source

_LOCK = threading.Lock()
_LOADED: dict[str, ModuleType] = {}
_MODULE_LOCKS = {name: threading.Lock() for name in MODULES}
BUILD_SECONDS: dict[str, float] = {}


def build_root() -> Path | None:
    env = os.environ.get("FLASH_KERNELS_BUILD_DIR")
    return Path(env) if env else None


def _arch_flags() -> list[str]:
    import torch

    major, minor = torch.cuda.get_device_capability()
    # Hopper-only instructions (wgmma, setmaxnreg) would need the 90a target; mma.sync does not.
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
    return []


def unavailable(name: str) -> str | None:
    """Why module ``name`` cannot be built for this process's GPU, or None when it can."""
    spec = MODULES[name]
    if spec.arch is None:
        return None
    import torch

    need = ARCH_CAPABILITY[spec.arch]
    have = tuple(torch.cuda.get_device_capability())
    if have != need:
        return (f"module {name} is built for {spec.arch}, whose instructions run on GPUs of compute capability "
                f"{need[0]}.{need[1]} only; this GPU ({torch.cuda.get_device_name()}) is {have[0]}.{have[1]}")
    return None


def load(name: str, verbose: bool = False) -> ModuleType:
    """The compiled module ``name`` (see sources.MODULES), building it if needed."""
    if name in _LOADED:
        return _LOADED[name]
    with _MODULE_LOCKS[name]:
        if name in _LOADED:
            return _LOADED[name]
        from torch.utils.cpp_extension import load_inline

        spec = MODULES[name]
        why = unavailable(name)
        if why is not None:
            raise RuntimeError(f"flash_kernels: not building {why}")
        cpp, cu = module_source(name)
        _arch_flags()
        # a -gencode among the flags also stops torch from adding its own (TORCH_CUDA_ARCH_LIST) ones
        target = arch_flags(spec.arch) if spec.arch else []
        build_dir = None
        root = build_root()
        if root is not None:
            build_dir = root / f"fk_{name}"
            build_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        mod = load_inline(
            name=f"fk_{name}",
            cpp_sources=[cpp],
            cuda_sources=[cu],
            functions=list(spec.functions),
            extra_cflags=["-O2", "-std=c++17"],
            extra_cuda_cflags=[*NVCC_FLAGS, *target],
            extra_include_paths=[str(CSRC)],
            build_directory=str(build_dir) if build_dir else None,
            verbose=verbose,
        )
        BUILD_SECONDS[name] = time.perf_counter() - t0
        with _LOCK:
            _LOADED[name] = mod
        return mod


def build_all(verbose: bool = False, modules: list[str] | tuple[str, ...] | None = None) -> dict[str, float]:
    """Build every module this GPU can run (or only ``modules``), in parallel; returns seconds per module
    (cache hits are fast). Modules for another GPU architecture (see :func:`unavailable`) are left out."""
    unknown = sorted(set(modules or ()) - set(MODULES))
    if unknown:
        raise ValueError(f"flash_kernels.build: no module named {', '.join(unknown)}; the modules are {', '.join(MODULES)}")
    names = [n for n in (modules or MODULES) if unavailable(n) is None]
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        list(pool.map(lambda n: load(n, verbose), names))
    return dict(BUILD_SECONDS)
