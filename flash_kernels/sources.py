"""The CUDA sources, the extension modules built from them, and their ptxas resource report.

Torch-free: CI compiles every ``.cu`` file with the dev machine's ``nvcc`` through
:func:`ptxas_report`, and the kernel module uses :func:`module_source` to feed ``load_inline``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .registry import KERNELS
from .variants import (
    ARCH_CAPABILITY,  # noqa: F401 - the targets' compute capabilities, read from here too
    Kernel,
)

CSRC = Path(__file__).resolve().parent / "csrc"
REPO = CSRC.parents[1]

#: nvcc flags for every kernel module (the build adds the GPU's own -gencode)
NVCC_FLAGS: tuple[str, ...] = ("-O3", "-lineinfo", "-std=c++17")


#: One module per source file (one file per step of the ladder, in the story's order), so that they
#: compile in parallel and rebuild independently: the kernel modules' contracts themselves (registry.KERNELS:
#: flash_kernels.variants.KERNELS and any a variant's entry declares), each a :class:`~flash_kernels.variants.Kernel`
#: (its .cu, its .cpp binding, the functions it exports, and its architecture-specific target, e.g. "sm_90a" for
#: wgmma and setmaxnreg: such a module runs only on GPUs of that exact compute capability).
MODULES: dict[str, Kernel] = dict(KERNELS)

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"[ \t]*$', re.MULTILINE)


def expand_includes(path: Path, _seen: set[Path] | None = None) -> str:
    """The file with its local ``#include "x"`` lines replaced by the files themselves.

    load_inline hashes the source strings it is given, so inlining the headers makes an edit to a
    header rebuild exactly the modules that use it.
    """
    seen = set() if _seen is None else _seen
    path = path.resolve()
    if path in seen:
        return ""
    seen.add(path)
    text = path.read_text()
    # `#line` keeps each line's own file and number in the compiled module, so -lineinfo (and with it
    # Nsight Compute's source view) points at .../flash_kernels/csrc/x.cu:LINE, not at load_inline's cuda.cu.
    # The path is absolute: ncu --import-source resolves a relative one against the build folder and fails.
    here = f'"{path.as_posix()}"'

    def repl(m: re.Match[str]) -> str:
        inc = path.parent / m.group(1)
        if not inc.exists():
            return m.group(0)
        resume = text.count("\n", 0, m.start()) + 2  # the line after the #include
        return f"{expand_includes(inc, seen)}\n#line {resume} {here}"

    return f"#line 1 {here}\n" + _INCLUDE.sub(repl, text).replace("#pragma once\n", "\n")


def module_source(name: str) -> tuple[str, str]:
    """(cpp binding source, cuda source) of a module, headers inlined."""
    spec = MODULES[name]
    return expand_includes(CSRC / spec.cpp), expand_includes(CSRC / spec.cu)


def cu_files() -> list[Path]:
    return sorted(CSRC.glob("*.cu"))




def arch_flags(arch: str) -> list[str]:
    """nvcc flags that compile for ``arch``: ``-arch=sm_90`` for a plain target; the explicit
    ``-gencode=arch=compute_90a,code=sm_90a`` for an architecture-specific one (nvcc 13.0's
    ``-arch=sm_90a`` shorthand also ran a plain sm_90 pass, which rejects wgmma)."""
    if arch.endswith("a"):
        return [f"-gencode=arch=compute_{arch[3:]},code={arch}"]
    return [f"-arch={arch}"]


def cu_arch(path: Path, default: str = "sm_90") -> str:
    """The target a .cu file is compiled for: its module's own ``arch`` where it has one, else ``default``."""
    for spec in MODULES.values():
        if spec.cu == Path(path).name and spec.arch:
            return spec.arch
    return default


# ------------------------------------------------------------------------------ ptxas report


@dataclass(frozen=True)
class KernelResources:
    file: str
    kernel: str  # readable name, e.g. flash_mma_forward_kernel<half, 128, 128, 64>
    mangled: str
    arch: str
    registers: int
    shared_bytes: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    #: ptxas's advisories that it serialized this kernel's wgmma.mma_async instructions (each as "C75xx: why"), e.g.
    #: an accumulator in flight across a branch or the loop's back edge, or too few registers for what is in flight
    wgmma_serialized: tuple[str, ...] = ()


_TYPES = {"6__half": "half", "13__nv_bfloat16": "bf16", "f": "float"}


def readable_kernel_name(mangled: str) -> str:
    """``_ZN2fk24flash_mma_forward_kernelI6__halfLi128ELi128ELi64EEEv...`` -> ``flash_mma_forward_kernel<half,128,128,64>``.

    Only what our own kernels use (namespace fk, type and int template arguments) is decoded.
    """
    m = re.match(r"_ZN2fk(\d+)", mangled)
    if not m:
        return mangled
    n = int(m.group(1))
    start = m.end()
    name = mangled[start : start + n]
    rest = mangled[start + n :]
    if not rest.startswith("I"):
        return name
    args: list[str] = []
    i = 1
    while i < len(rest) and rest[i] != "E":
        if rest.startswith("Li", i):
            j = rest.index("E", i)
            args.append(rest[i + 2 : j])
            i = j + 1
            continue
        if rest.startswith("Lb", i):
            j = rest.index("E", i)
            args.append("true" if rest[i + 2 : j] == "1" else "false")
            i = j + 1
            continue
        for code, readable in _TYPES.items():
            if rest.startswith(code, i):
                args.append(readable)
                i += len(code)
                break
        else:
            break
    return f"{name}<{','.join(args)}>"


def find_nvcc() -> str | None:
    env = os.environ.get("NVCC")
    if env:
        return env
    found = shutil.which("nvcc")
    if found:
        return found
    for cand in ("/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc"):
        if Path(cand).exists():
            return cand
    return None


#: ptxas's advisory that it serialized a function's wgmma.mma_async instructions: its code, why, and the function
_SERIALIZED = re.compile(r"\((C\d+)\) Potential Performance Loss: wgmma\.mma_async instructions are serialized due "
                         r"to (.+?) (?:in|for) the function '([^']+)'")


def parse_ptxas(text: str, file: str, arch: str) -> list[KernelResources]:
    """Parse ``nvcc -Xptxas -v`` output into one record per kernel entry function (with ptxas's advisories that it
    serialized the function's wgmma instructions, wherever in the output they are printed)."""
    serialized: dict[str, list[str]] = {}
    for m in _SERIALIZED.finditer(text):
        serialized.setdefault(m.group(3), []).append(f"{m.group(1)}: {m.group(2)}")
    out: list[KernelResources] = []
    cur: dict[str, object] | None = None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            cur = {"mangled": m.group(1), "stack": 0, "ss": 0, "sl": 0}
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur["stack"], cur["ss"], cur["sl"] = (int(g) for g in m.groups())
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m:
            smem = re.search(r"(\d+) bytes smem", line)
            mangled = str(cur["mangled"])
            out.append(
                KernelResources(
                    file=file, kernel=readable_kernel_name(mangled), mangled=mangled, arch=arch,
                    registers=int(m.group(1)), shared_bytes=int(smem.group(1)) if smem else 0,
                    stack_bytes=int(cur["stack"]), spill_store_bytes=int(cur["ss"]),
                    spill_load_bytes=int(cur["sl"]), wgmma_serialized=tuple(serialized.get(mangled, ())),
                )
            )
            cur = None
    return out


#: Local-memory spills that were measured and kept, as (spill store bytes, spill load bytes, stack
#: frame bytes) at most, per kernel instantiation. Every other kernel must not spill. flash_mma's 128x64 tile at D = 128
#: spills the row sums (4 stores and 5 loads per 64-key tile) and is still faster than the 128x32 tile,
#: which does not spill: 1.528 vs 1.912 ms (profiles/nvidia-h200/mma-fwd-d128-deep against
#: bottleneck-deep; the header of flash_mma_fwd.cu has the numbers).
ACCEPTED_SPILLS: dict[str, tuple[int, int, int]] = {
    "flash_mma_forward_kernel<half,128,128,64,2>": (52, 36, 24),
    "flash_mma_forward_kernel<bf16,128,128,64,2>": (52, 36, 24),
    # flash_wgmma backward, 128x128 tile at D = 64 (P^T, dS^T of 128 queries beside dK, dV): the tma-ws kernel's
    # consumers, at 240 registers (the cp.async kernel has 255 and does not spill). Since the mask became a
    # branch around two copies of the softmax loop (stores 92 -> 116, loads 100 -> 88, stack 96 -> 64), which
    # made the kernel 1.3x faster on the H100 (flash_wgmma_bwd.cu, bwd_p_ds)
    # The warpgroup index as a warp-uniform value (warpgroup_index(): descriptors in uniform registers) moved it to
    # stores 148, loads 112, stack 80; the D = 64 default (64x128) does not spill
    "flash_wgmma_ws_backward_kernel<half,64,128>": (148, 112, 80),
    "flash_wgmma_ws_backward_kernel<bf16,64,128>": (148, 112, 80),
    # flash_wgmma forward, 128x128 tile on the persistent overlap pipelines (not a default): 4 bytes since the
    # warp-uniform warpgroup index; the defaults (192x128 persistent ping-pong, 128x64 at D = 256) do not spill
    **{f"flash_wgmma_ws_forward_kernel<{t},128,128,128,3,true,{pp},1,true>": (4, 4, 8)
       for t in ("half", "bf16") for pp in ("true", "false")},
}


def unexpected_spills(rows) -> list[str]:
    """Kernels of ``rows`` (KernelResources or their dicts) that spill beyond ACCEPTED_SPILLS or use a
    stack frame, each as 'kernel: N bytes spill stores, M loads, S stack'."""
    bad = []
    for r in rows:
        get = r.get if isinstance(r, dict) else lambda k, r=r: getattr(r, k)
        ss, sl, st = get("spill_store_bytes"), get("spill_load_bytes"), get("stack_bytes")
        max_ss, max_sl, max_st = ACCEPTED_SPILLS.get(get("kernel"), (0, 0, 0))
        if ss > max_ss or sl > max_sl or st > max_st:
            bad.append(f"{get('kernel')}: {ss} bytes spill stores, {sl} loads, {st} stack")
    return bad


def ptxas_report(path: Path, arch: str = "sm_90", nvcc: str | None = None) -> list[KernelResources]:
    """Compile one .cu file for ``arch`` (no torch, no GPU needed) and return ptxas's resource report.

    Raises RuntimeError with the compiler's output when compilation fails, FileNotFoundError when
    no nvcc is found.
    """
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise FileNotFoundError("nvcc not found: set NVCC=/path/to/nvcc or put the CUDA toolkit's bin on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [nvcc, *arch_flags(arch), *NVCC_FLAGS, "-Xptxas", "-v", "-c", str(path), "-o", str(Path(tmp) / "k.o")]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return parse_ptxas(proc.stdout + proc.stderr, path.name, arch)


def ptxas_reports(files: list[Path], arch: str = "sm_90") -> dict[Path, list[KernelResources] | Exception]:
    """:func:`ptxas_report` of each file for :func:`cu_arch` (file, ``arch``), as many compiles at once as there
    are cores (nvcc and ptxas use one each), the largest file first; a file whose compile failed holds its
    exception. In the order of ``files``."""
    from concurrent.futures import ThreadPoolExecutor

    def one(path: Path) -> list[KernelResources] | Exception:
        try:
            return ptxas_report(path, cu_arch(path, arch))
        except (RuntimeError, FileNotFoundError) as exc:
            return exc

    largest_first = sorted(files, key=lambda p: p.stat().st_size, reverse=True)
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        done = dict(zip(largest_first, pool.map(one, largest_first), strict=True))
    return {f: done[f] for f in files}
