"""Build (or load from cache) the CUDA extension modules with torch.utils.cpp_extension.load_inline.

Each source file is its own module, built on first use; :func:`build_all` builds them all in
parallel threads (each load_inline runs its own ninja/nvcc subprocesses). Warm loads hit
load_inline's cache and take milliseconds.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

from .sources import CSRC, MODULES, NVCC_FLAGS, module_source

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


def load(name: str, verbose: bool = False) -> ModuleType:
    """The compiled module ``name`` (see sources.MODULES), building it if needed."""
    if name in _LOADED:
        return _LOADED[name]
    with _MODULE_LOCKS[name]:
        if name in _LOADED:
            return _LOADED[name]
        from torch.utils.cpp_extension import load_inline

        spec = MODULES[name]
        cpp, cu = module_source(name)
        _arch_flags()
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
            extra_cuda_cflags=list(NVCC_FLAGS),
            extra_include_paths=[str(CSRC)],
            build_directory=str(build_dir) if build_dir else None,
            verbose=verbose,
        )
        BUILD_SECONDS[name] = time.perf_counter() - t0
        with _LOCK:
            _LOADED[name] = mod
        return mod


def build_all(verbose: bool = False) -> dict[str, float]:
    """Build every module in parallel; returns seconds per module (cache hits are fast)."""
    with ThreadPoolExecutor(max_workers=len(MODULES)) as pool:
        list(pool.map(lambda n: load(n, verbose), MODULES))
    return dict(BUILD_SECONDS)
