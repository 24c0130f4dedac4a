"""Every .cu file compiles for sm_90 (an architecture-specific module's for its own target, e.g.
sm_90a) with this machine's nvcc (no GPU, no torch headers), and ptxas's report shows no
local-memory spills in any kernel but the measured exceptions of sources.ACCEPTED_SPILLS."""

import os
import re

import pytest

from flash_kernels.sources import (
    MODULES,
    cu_arch,
    cu_files,
    expand_includes,
    find_nvcc,
    module_source,
    parse_ptxas,
    ptxas_report,
    ptxas_reports,
    readable_kernel_name,
    unexpected_spills,
)

NVCC = find_nvcc()
need_nvcc = pytest.mark.skipif(NVCC is None and not os.environ.get("CI"), reason="nvcc not installed")


@pytest.fixture(scope="module")
def compiled():
    """One compile per file for the whole module, in parallel (sources.ptxas_reports): flash_wgmma_fwd.cu takes
    about a minute, and two tests read its report. A compile that failed is raised by the test that reads it."""
    return ptxas_reports(cu_files()) if NVCC is not None else {}


def _report(compiled, path):
    got = compiled[path]
    if isinstance(got, Exception):
        raise got
    return got


@need_nvcc
@pytest.mark.parametrize("path", cu_files(), ids=lambda p: p.name)
def test_compiles_for_sm90(path, compiled):
    assert NVCC is not None, "CI must have nvcc (the CUDA toolkit) to compile the kernels"
    arch = cu_arch(path, "sm_90")
    rows = _report(compiled, path)
    assert rows, f"{path.name}: ptxas reported no kernels"
    assert all(r.arch == arch for r in rows)
    spilled = unexpected_spills(rows)
    assert not spilled, f"local-memory spills beyond sources.ACCEPTED_SPILLS: {spilled}"
    # a wgmma kernel whose products ptxas serialized waits for each before issuing the next (it compiles, passes its
    # tests, and runs slower): every one of ours keeps them asynchronous
    serialized = [f"{r.kernel}: {'; '.join(r.wgmma_serialized)}" for r in rows if r.wgmma_serialized]
    assert not serialized, f"ptxas serialized these kernels' wgmma instructions: {serialized}"


@need_nvcc
def test_flash_wgmma_compiles_for_sm90a_only(compiled):
    """wgmma needs the architecture-specific target: every tile of each pipeline's forward kernel is
    there for sm_90a (2 dtypes x 2 head dims x 4 tiles: cp.async, tma), at most 168 registers at 384
    threads (3 warpgroups)."""
    fwd = next(p for p in cu_files() if p.name == "flash_wgmma_fwd.cu")
    assert cu_arch(fwd) == "sm_90a"
    rows = _report(compiled, fwd)
    kernels = [r for r in rows if r.kernel.startswith(("flash_wgmma_forward_kernel<", "flash_wgmma_tma_forward_kernel<"))]
    assert len(kernels) == 32, [r.kernel for r in rows]
    assert all(r.registers <= (168 if ",192," in r.kernel else 255) for r in kernels), [(r.kernel, r.registers) for r in kernels]
    # tma-ws and tma-ws-overlap: one more warpgroup (the producer), the cap at entry 65536 / threads
    # (setmaxnreg then moves registers from the producer to the consumers); 192x128 at D=128 runs
    # tma-ws-overlap without the overlap: one kernel for both
    ws = [r for r in rows if r.kernel.startswith("flash_wgmma_ws_forward_kernel<")]
    # tma-ws-pingpong, tma-ws-persistent(-pingpong): 16 more each (the 192x128 tile at D=128 without
    # the overlap: 8 of them shared); D = 256: the 128x64 tile of tma-ws, -overlap, -pingpong (2 dtypes x 3)
    assert len(ws) == 78 + 6, [r.kernel for r in ws]
    assert sum(",256," in r.kernel for r in ws) == 6, [r.kernel for r in ws if ",256," in r.kernel]
    assert all(r.registers <= (128 if ",192," in r.kernel else 168) for r in ws), [(r.kernel, r.registers) for r in ws]
    # the same instructions in the backward's file, which compiles in a fifth of the time
    with pytest.raises(RuntimeError, match="wgmma"):
        ptxas_report(next(p for p in cu_files() if p.name == "flash_wgmma_bwd.cu"), "sm_90")


def test_every_module_source_exists_and_inlines_headers():
    for name in MODULES:
        from flash_kernels.sources import module_source

        cpp, cu = module_source(name)
        assert "PYBIND11" not in cpp and "#include \"common.cuh\"" not in cu and "namespace fk" in cu


def test_one_module_per_step_of_the_ladder():
    """naive -> tiled -> FA1 -> FA2 on CUDA cores -> FA2 on tensor cores: one .cu file (one module) each,
    in the story's order."""
    ladder = ["naive", "tiled", "flash_fa1", "flash_simt", "flash_mma_fwd"]
    assert [m for m in MODULES if m in ladder] == ladder
    assert [MODULES[m].cu for m in ladder] == [f"{m}.cu" for m in ladder]
    assert "materialized" not in MODULES


def test_fa1_and_fa2_on_cuda_cores_share_the_tile():
    """flash_fa1.cu and flash_simt.cu differ in their loops, not in the tile: both forward kernels load,
    score, mask, exponentiate and accumulate through simt.cuh's helpers."""
    from flash_kernels.sources import CSRC

    helpers = ("SimtTile<BS, D>::carve", "load_q_block<BS, D>", "load_kv_tile<BS, D>", "tile_score<BS, D>",
               "online_softmax_step(", "accumulate_pv<BS, D>", "write_row<D>", "by_block_size(")
    for name in ("flash_fa1.cu", "flash_simt.cu"):
        text = (CSRC / name).read_text()
        assert '#include "simt.cuh"' in text, name
        assert [h for h in helpers if h not in text] == [], name
        start = text.index("_forward_kernel(")
        kernel = text[start : text.index("\n}\n", start)]
        assert "fast_exp2(" not in kernel and "warp_max(" not in kernel, f"{name}: softmax math outside simt.cuh"


#: the Hopper forward's parts, one file per job (FlashAttention-3's hopper/ layout)
HOPPER_FWD_PARTS = ("wgmma_fwd_producer.cuh", "wgmma_fwd_consumer.cuh", "wgmma_fwd_epilogue.cuh",
                    "wgmma_tile_scheduler.cuh")


def _function_lengths(text: str) -> dict[str, int]:
    """Lines of each __global__ / __device__ function definition of a CUDA source (brace-matched)."""
    out = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if ("__global__" in lines[i] or "__device__" in lines[i]) and not lines[i].lstrip().startswith("//"):
            j = i
            while j < len(lines) and "{" not in lines[j] and ";" not in lines[j]:
                j += 1
            if j < len(lines) and "{" in lines[j] and ";" not in lines[j].split("{")[0]:
                depth, k = 0, j
                while k < len(lines):
                    depth += lines[k].count("{") - lines[k].count("}")
                    if depth <= 0:
                        break
                    k += 1
                decl = re.sub(r"__launch_bounds__\([^)]*\)", "", " ".join(lines[i:j + 1]))
                name = decl.split("(")[0].split()[-1]
                out[f"{name}:{i + 1}"] = k - i + 1
                i = k
        i += 1
    return out


def test_hopper_forward_is_split_into_parts():
    """The warp-specialised forward is composed from its parts (producer, consumer, epilogue, tile scheduler), the
    flags pick parts, FP8 runs the shared consumer loop, and no kernel or device function is over 120 lines."""
    from flash_kernels.sources import CSRC

    fwd = (CSRC / "flash_wgmma_fwd.cu").read_text()
    fp8 = (CSRC / "flash_wgmma_fp8.cu").read_text()
    _, module = module_source("flash_wgmma_fwd")
    for part in HOPPER_FWD_PARTS:
        assert (CSRC / part).exists(), part
        assert f'/csrc/{part}"' in module, f"{part} is not part of the flash_wgmma_fwd module"
    for picked in ("OverlapMainloop, PlainMainloop", "PingPongTurns<", "PersistentSchedule, OneTileSchedule"):
        assert picked in fwd, picked
    assert "OverlapMainloop::tiles(" in fp8 and '#include "wgmma_fwd_consumer.cuh"' in fp8
    long = {}
    for name in ("flash_wgmma_fwd.cu", "flash_wgmma_fp8.cu", "wgmma_softmax.cuh", *HOPPER_FWD_PARTS):
        text = (CSRC / name).read_text()
        header = text[: text.index("#")].count("\n")
        assert header <= 32, f"{name}: a {header}-line header"
        long.update({f"{name}:{f}": n for f, n in _function_lengths(text).items() if n > 120})
    assert not long, long


def test_expand_includes_inlines_once(tmp_path):
    (tmp_path / "a.cuh").write_text('#pragma once\nint a;\n')
    (tmp_path / "b.cuh").write_text('#pragma once\n#include "a.cuh"\nint b;\n')
    (tmp_path / "k.cu").write_text('#include "a.cuh"\n#include "b.cuh"\nint k;\n')
    text = expand_includes(tmp_path / "k.cu")
    assert text.count("int a;") == 1 and "int b;" in text and "#include" not in text


def test_parse_ptxas_and_names():
    log = """ptxas info    : Compiling entry function '_ZN2fk24flash_mma_forward_kernelI6__halfLi128ELi128ELi32ELi2EEEvPKT_S4_S4_PS2_Pfifi' for 'sm_90'
ptxas info    : Function properties for _ZN2fk24flash_mma_forward_kernelI6__halfLi128ELi128ELi32ELi2EEEvPKT_S4_S4_PS2_Pfifi
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 249 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]
"""
    (r,) = parse_ptxas(log, "x.cu", "sm_90")
    assert r.kernel == "flash_mma_forward_kernel<half,128,128,32,2>"
    assert (r.registers, r.shared_bytes, r.stack_bytes, r.spill_store_bytes, r.spill_load_bytes) == (249, 1024, 8, 4, 12)
    assert readable_kernel_name("_ZN2fk17tiled_gemm_kernelIfLb1EEvv") == "tiled_gemm_kernel<float,true>"


def test_parse_ptxas_keeps_its_advisory_that_a_kernels_wgmma_were_serialized():
    """ptxas prints the advisory apart from the kernel's resource lines (here after them), naming the function."""
    k = "_ZN2fk30flash_wgmma_ws_backward_kernelI6__halfLi128ELi64ELb1EEEv14CUtensorMap_stS2_S2_S2_PKfS4_PfPT_S7_S5_S5_NS_4DimsEfi"
    other = "_ZN2fk17tiled_gemm_kernelIfLb1EEvv"
    adv, loss = "ptxas info    : ", "Potential Performance Loss: wgmma.mma_async instructions are serialized due to"
    log = f"""ptxas info    : Compiling entry function '{k}' for 'sm_90a'
ptxas info    : Function properties for {k}
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 2 barriers
ptxas info    : Compiling entry function '{other}' for 'sm_90a'
ptxas info    : Used 32 registers
{adv}(C7512) {loss} insufficient register resources for the function '{k}'
{adv}(C7515) {loss} non wgmma instructions defining accumulator registers of a wgmma between start and end of the \
pipeline stage in the function '{k}'
"""
    got, plain = parse_ptxas(log, "x.cu", "sm_90a")
    assert got.kernel == "flash_wgmma_ws_backward_kernel<half,128,64,true>"
    assert got.wgmma_serialized == (
        "C7512: insufficient register resources",
        "C7515: non wgmma instructions defining accumulator registers of a wgmma between start and end of the "
        "pipeline stage")
    assert plain.wgmma_serialized == ()


def test_every_module_is_built_with_line_info(monkeypatch):
    """-lineinfo on every module's nvcc line, so that Nsight Compute maps SASS to the CUDA source lines
    (the deep capture tier's source view); it changes no generated code."""
    pytest.importorskip("torch")
    import torch.utils.cpp_extension as cpp_extension

    from flash_kernels import _build

    calls = {}
    monkeypatch.setattr(cpp_extension, "load_inline", lambda **kw: calls.setdefault(kw["name"], kw))
    monkeypatch.setattr(_build, "unavailable", lambda name: None)  # every module, whatever GPU this is
    monkeypatch.setattr(_build, "_arch_flags", lambda: [])
    monkeypatch.setattr(_build, "_LOADED", {})
    monkeypatch.setattr(_build, "BUILD_SECONDS", {})
    for name in MODULES:
        _build.load(name)
    assert set(calls) == {f"fk_{name}" for name in MODULES}
    assert [n for n, kw in calls.items() if "-lineinfo" not in kw["extra_cuda_cflags"]] == []


def test_unexpected_spills_allows_only_the_measured_exception():
    from flash_kernels.sources import KernelResources

    def row(kernel, ss, sl, st):
        return KernelResources(file="f.cu", kernel=kernel, mangled=kernel, arch="sm_90", registers=255,
                               shared_bytes=0, stack_bytes=st, spill_store_bytes=ss, spill_load_bytes=sl)

    ok = "flash_mma_forward_kernel<half,128,128,64,2>"
    assert unexpected_spills([row(ok, 52, 36, 24), row("other", 0, 0, 0)]) == []
    assert unexpected_spills([row(ok, 56, 36, 24)]) == [f"{ok}: 56 bytes spill stores, 36 loads, 24 stack"]
    assert unexpected_spills([row("other", 0, 0, 8)]) == ["other: 0 bytes spill stores, 0 loads, 8 stack"]
    assert unexpected_spills([asdict_row for asdict_row in [{"kernel": "k", "spill_store_bytes": 4,
                                                              "spill_load_bytes": 0, "stack_bytes": 0}]]) == [
        "k: 4 bytes spill stores, 0 loads, 0 stack"]
