"""Measured ceilings of this GPU (torch at run time), run once per capture command.

- cuBLAS through ``torch.matmul``: large GEMMs in bf16, fp16 and fp32 (without TF32), and a
  device-to-device copy (``gemm_*``, ``copy_d2d``);
- instruction-class ceilings from ``nsightlab/csrc/ceilings.cu`` (inline PTX), built here with
  ``torch.utils.cpp_extension.load_inline``: ``mma_sync_fp16`` / ``mma_sync_bf16`` (mma.sync
  m16n8k16, fp32 accumulators, operands in registers), ``wgmma_fp16`` / ``wgmma_bf16`` / ``wgmma_e4m3`` (wgmma
  m64n256k16, or k32 for FP8, from 128-byte-swizzled shared memory; sm_90a, so compute capability 9.0 only),
  ``mufu_ex2`` (ex2.approx throughput, with the softmax bound it implies) and ``read_stream`` (DRAM read
  bandwidth: a 2 GiB buffer read once with 16-byte non-allocating loads, the roof of a kernel that only reads
  its inputs, where the copy's read + write is not).

Each microbenchmark is checked before it is timed: a few iterations on small integer data must
equal a torch reference (a kernel that computes garbage is not a ceiling). Rates are medians of
CUDA-event timings after warm-up; tensor-core FLOPs count 2·M·N·K per MMA. A microbenchmark that
cannot be built or run, or fails its check, is recorded as ``{"status": "not measured", "reason": ...}``
and the other ceilings are still measured.

    python -m nsightlab.run.ceilings --out ceilings.json      # prints one line per ceiling
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..core.args import BAD_INPUT, ArgumentParser, print_error
from ..problems import problem as problems

CSRC = Path(__file__).resolve().parents[1] / "csrc" / "ceilings.cu"
#: the instruction-class ceilings, in the order they are measured and printed
#: (wgmma last: a kernel that faults leaves the CUDA context unusable for whatever runs after it)
INSTRUCTION_KEYS = ("mma_sync_fp16", "mma_sync_bf16", "mufu_ex2", "wgmma_fp16", "wgmma_bf16", "wgmma_e4m3")
#: every microbenchmark of ceilings.cu in the order measured: the instruction-class ones and the DRAM read stream
MICROBENCHMARK_KEYS = ("mma_sync_fp16", "mma_sync_bf16", "mufu_ex2", "read_stream", "wgmma_fp16", "wgmma_bf16",
                       "wgmma_e4m3")
#: wgmma's operand kinds: ceiling key -> (PTX type, ceilings.cu's kind code, elements of K per instruction)
WGMMA_KINDS = {"wgmma_fp16": ("f16", 0, 16), "wgmma_bf16": ("bf16", 1, 16), "wgmma_e4m3": ("e4m3", 2, 32)}
GEMM_KEYS = ("gemm_bf16", "gemm_fp16", "gemm_fp32")
REPS, WARMUP = 10, 3
#: each timed launch of a microbenchmark runs about this long (its iteration count is scaled to it)
TARGET_MS = 20.0

#: the binding: load_inline wraps these declarations (the .cu file defines them, torch-free)
_CPP = """
#include <torch/extension.h>
int64_t nsl_mma_sync(int64_t A, int64_t B, int64_t out, int64_t iters, int64_t blocks, int64_t threads, int64_t bf16,
                     int64_t stream);
int64_t nsl_wgmma(int64_t A, int64_t B, int64_t out, int64_t iters, int64_t blocks, int64_t warpgroups, int64_t kind,
                  int64_t stream);
int64_t nsl_mufu_ex2(int64_t out, double a, double b, int64_t iters, int64_t blocks, int64_t threads, int64_t stream);
int64_t nsl_read_stream(int64_t in, int64_t n16, int64_t out, int64_t blocks, int64_t threads, int64_t stream);
const char* nsl_error_string(int64_t code);
int64_t nsl_mma_chains();
int64_t nsl_exp_chains();
"""
_FUNCTIONS = ["nsl_mma_sync", "nsl_wgmma", "nsl_mufu_ex2", "nsl_read_stream", "nsl_error_string", "nsl_mma_chains",
              "nsl_exp_chains"]
#: the read stream's buffer: far past any L2, so that every read goes to DRAM
READ_STREAM_BYTES = 2 << 30


def not_measured(reason: str) -> dict[str, str]:
    return {"status": "not measured", "reason": reason}


def _time(fn: Callable[[], Any], reps: int = REPS, warmup: int = WARMUP) -> float:
    """Median milliseconds of ``fn`` by the one CUDA-event timer (nsightlab.run.timing), the L2 not flushed."""
    from .timing import median_ms

    return median_ms(fn, reps=reps, warmup=warmup)


# --------------------------------------------------------------------------- cuBLAS and copy


def library_ceilings() -> dict[str, Any]:
    """cuBLAS GEMMs through torch.matmul and a device-to-device copy."""
    import torch

    out: dict[str, Any] = {}
    torch.backends.cuda.matmul.allow_tf32 = False
    for name, dtype, n in (("gemm_bf16", torch.bfloat16, 8192), ("gemm_fp16", torch.float16, 8192),
                           ("gemm_fp32", torch.float32, 4096)):
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        c = torch.empty(n, n, device="cuda", dtype=dtype)
        ms = _time(lambda a=a, b=b, c=c: torch.matmul(a, b, out=c))
        out[name] = {"n": n, "ms": ms, "flop_per_s": 2.0 * n**3 / (ms * 1e-3)}
        del a, b, c
    n_bytes = 1 << 30
    src = torch.empty(n_bytes, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    ms = _time(lambda: dst.copy_(src))
    out["copy_d2d"] = {"bytes": n_bytes, "ms": ms, "bytes_per_s": 2.0 * n_bytes / (ms * 1e-3),
                       "note": "bytes read + bytes written per second"}
    return out


# --------------------------------------------------------------------------- instruction-class ceilings


def build(capability: tuple[int, int], verbose: bool = False) -> Any:
    """The microbenchmark module for a GPU of this compute capability (load_inline caches it;
    ``$NSIGHTLAB_BUILD_DIR`` names a build folder). On 9.0 it is built for sm_90a only (wgmma
    needs it); elsewhere for load_inline's own target (TORCH_CUDA_ARCH_LIST or this GPU), without
    the wgmma kernels' bodies."""
    from torch.utils.cpp_extension import load_inline

    sm90a = tuple(capability) == (9, 0)
    flags = ["-O3", "-std=c++17", "-lineinfo"]
    if sm90a:  # an explicit -gencode replaces load_inline's own arch flags
        flags.append("-gencode=arch=compute_90a,code=sm_90a")
    name = "nsightlab_ceilings" + ("_sm90a" if sm90a else "")
    build_dir = None
    if os.environ.get("NSIGHTLAB_BUILD_DIR"):
        build_dir = Path(os.environ["NSIGHTLAB_BUILD_DIR"]) / name
        build_dir.mkdir(parents=True, exist_ok=True)
    return load_inline(name=name, cpp_sources=[_CPP], cuda_sources=[CSRC.read_text()], functions=_FUNCTIONS,
                       extra_cflags=["-O2", "-std=c++17"], extra_cuda_cflags=flags,
                       build_directory=str(build_dir) if build_dir else None, verbose=verbose)


def _launched(mod: Any, code: int, what: str) -> None:
    if code:
        raise RuntimeError(f"{what} did not launch: {mod.nsl_error_string(code)}")


def _calibrated(run: Callable[[int], None], iters0: int, multiple: int = 4) -> tuple[int, float]:
    """(iterations, median ms): the launch is scaled from ``iters0`` iterations to about 2 ms, then
    to about :data:`TARGET_MS` (two steps, so that launch overhead does not skew the estimate), then
    timed."""
    iters = iters0
    for target in (2.0, TARGET_MS):
        t = _time(lambda n=iters: run(n), reps=3, warmup=1)
        iters = max(iters0, int(round(iters * target / max(t, 1e-3) / multiple)) * multiple)
    return iters, _time(lambda: run(iters))


def _sm_clock() -> str | None:
    from ..core.environment import nvidia_smi

    return nvidia_smi().get("clocks.sm")


def _small_ints(torch: Any, shape: tuple[int, ...], dtype: Any, seed: int) -> Any:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-2, 3, shape, generator=g).to(dtype).cuda()


def _bits(t: Any) -> int:
    """The device address of a 16-bit tensor's data (the kernels read raw bits)."""
    return int(t.data_ptr())


def mma_sync_ceiling(mod: Any, bf16: bool, sm_count: int) -> dict[str, Any]:
    """mma.sync m16n8k16 fp32 += {fp16, bf16}: checked, then timed over a few warps-per-SM settings."""
    import torch

    dtype = torch.bfloat16 if bf16 else torch.float16
    chains, threads = int(mod.nsl_mma_chains()), 256
    stream = torch.cuda.current_stream().cuda_stream
    A, B = _small_ints(torch, (16, 16), dtype, 1), _small_ints(torch, (16, 8), dtype, 2)

    def run(out: Any, iters: int, blocks: int) -> None:
        _launched(mod, mod.nsl_mma_sync(_bits(A), _bits(B), out.data_ptr(), iters, blocks, threads, int(bf16), stream),
                  "mma_sync_kernel")

    # check: 5 iterations (the unrolled loop body and its remainder) of every chain of every warp = 5 · A @ B
    check_iters, blocks = 5, 2
    out = torch.empty(blocks * threads * chains * 4, device="cuda", dtype=torch.float32)
    run(out, check_iters, blocks)
    ref = check_iters * (A.float() @ B.float()).cpu()  # [16, 8]
    lane = torch.arange(32)
    g, t = lane // 4, lane % 4
    rows = torch.stack([g, g, g + 8, g + 8], 1)  # the C/D fragment: c0, c1 row g; c2, c3 row g + 8
    cols = torch.stack([2 * t, 2 * t + 1, 2 * t, 2 * t + 1], 1)
    want = ref[rows, cols]  # [32 lanes, 4]
    got = out.view(-1, 32, chains, 4).cpu()
    err = (got - want[None, :, None, :]).abs()
    if float(err.max()) > 1e-3:
        raise ValueError(f"check failed: {check_iters} iterations differ from {check_iters}·(A @ B) (torch) in "
                         f"{int((err > 1e-3).sum())} of {err.numel()} accumulators, max |error| {float(err.max()):g}")
    flop_per_launch_iter = 2.0 * 16 * 8 * 16 * chains  # per warp per loop iteration
    configs = []
    for per_sm in (1, 2, 4):
        blocks = sm_count * per_sm
        out = torch.empty(blocks * threads * chains * 4, device="cuda", dtype=torch.float32)
        iters, ms = _calibrated(lambda n, out=out, blocks=blocks: run(out, n, blocks), 256)
        flop = flop_per_launch_iter * iters * (blocks * threads // 32)
        configs.append({"blocks": blocks, "blocks_per_sm": per_sm, "threads_per_block": threads,
                        "warps_per_sm": per_sm * threads // 32, "iters": iters, "ms": ms, "flop": flop,
                        "flop_per_s": flop / (ms * 1e-3)})
        del out
    best = max(configs, key=lambda c: c["flop_per_s"])
    kind = "bf16" if bf16 else "f16"
    return {
        "what": f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32, A and B fragments in registers, "
                f"{chains} independent accumulators per warp",
        "flop_per_s": best["flop_per_s"], "ms": best["ms"], "iters": best["iters"], "flop": best["flop"],
        "config": {k: best[k] for k in ("blocks", "blocks_per_sm", "threads_per_block", "warps_per_sm")}
        | {"chains_per_warp": chains},
        "flop_per_instruction": 2 * 16 * 8 * 16, "configs": configs, "sm_clock_after": _sm_clock(),
        "check": f"{check_iters} iterations on integer data in [-2, 2] equal {check_iters}·(A @ B) from torch in "
                 "every accumulator of 16 warps",
        "source": "nsightlab/csrc/ceilings.cu (mma_sync_kernel)",
    }


def wgmma_ceiling(mod: Any, key: str, sm_count: int) -> dict[str, Any]:
    """wgmma m64n256 fp32 += {fp16, bf16: k16; e4m3: k32} (:data:`WGMMA_KINDS`) from shared memory: checked, then
    timed over a few warpgroup / CTA settings. Each operand row is 128 bytes: K = 64 16-bit or 128 e4m3 elements."""
    import torch

    ptx, code, k_step = WGMMA_KINDS[key]
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn}[ptx]
    K = 128 // dtype.itemsize  # elements of a 128-byte row
    stream = torch.cuda.current_stream().cuda_stream
    A, B = _small_ints(torch, (64, K), dtype, 3), _small_ints(torch, (256, K), dtype, 4)  # K-major: [m, k], [n, k]

    def run(out: Any, iters: int, blocks: int, wgs: int) -> None:
        _launched(mod, mod.nsl_wgmma(_bits(A), _bits(B), out.data_ptr(), iters, blocks, wgs, code, stream),
                  "wgmma_kernel")

    check_iters, blocks, wgs = 5, 2, 2
    out = torch.empty(blocks * 128 * wgs * 128, device="cuda", dtype=torch.float32)
    run(out, check_iters, blocks, wgs)
    ref = check_iters * (A.float() @ B.float().T).cpu()  # [64, 256]
    lane, i = torch.arange(32)[:, None], torch.arange(128)[None, :]
    g, t = lane // 4, lane % 4
    warp = torch.arange(4)[:, None, None]
    rows = 16 * warp + (g + 8 * ((i // 2) % 2))[None]  # the wgmma D fragment: warp w owns rows 16w .. 16w + 15
    cols = (8 * (i // 4) + 2 * t + i % 2)[None].expand(4, 32, 128)
    want = ref[rows, cols]  # [4 warps, 32 lanes, 128]
    got = out.view(-1, 4, 32, 128).cpu()
    err = (got - want[None]).abs()
    if float(err.max()) > 1e-3:
        raise ValueError(f"check failed: {check_iters} iterations differ from {check_iters}·(A @ Bᵀ) (torch) in "
                         f"{int((err > 1e-3).sum())} of {err.numel()} accumulators, max |error| {float(err.max()):g}")
    flop_per_iter = 2.0 * 64 * 256 * K  # per warpgroup per loop iteration: 4 wgmma of K / 4 each
    configs = []
    for wgs, per_sm in ((1, 1), (2, 1), (1, 2)):
        blocks = sm_count * per_sm
        out = torch.empty(blocks * 128 * wgs * 128, device="cuda", dtype=torch.float32)
        iters, ms = _calibrated(lambda n, out=out, blocks=blocks, wgs=wgs: run(out, n, blocks, wgs), 64)
        flop = flop_per_iter * iters * blocks * wgs
        configs.append({"blocks": blocks, "blocks_per_sm": per_sm, "warpgroups_per_block": wgs,
                        "threads_per_block": 128 * wgs, "iters": iters, "ms": ms, "flop": flop,
                        "flop_per_s": flop / (ms * 1e-3)})
        del out
    best = max(configs, key=lambda c: c["flop_per_s"])
    return {
        "what": f"wgmma.mma_async.sync.aligned.m64n256k{k_step}.f32.{ptx}.{ptx}, A [64, {K}] and B [256, {K}] K-major "
                f"in shared memory (128-byte swizzle), 4 k{k_step} steps per commit group, one group in flight",
        "flop_per_s": best["flop_per_s"], "ms": best["ms"], "iters": best["iters"], "flop": best["flop"],
        "config": {k: best[k] for k in ("blocks", "blocks_per_sm", "warpgroups_per_block", "threads_per_block")},
        "flop_per_instruction": 2 * 64 * 256 * k_step, "configs": configs, "sm_clock_after": _sm_clock(),
        "check": f"{check_iters} iterations on integer data in [-2, 2] equal {check_iters}·(A @ Bᵀ) from torch in "
                 "every accumulator of 4 warpgroups",
        "source": "nsightlab/csrc/ceilings.cu (wgmma_kernel)",
    }


def mufu_ceiling(mod: Any, sm_count: int) -> dict[str, Any]:
    """ex2.approx.ftz.f32 (after one FFMA, as a softmax's exp2(s·scale − m)) per second, and what the registered
    problems record beside it (:attr:`nsightlab.problems.problem.Problem.ceiling_notes`: the attention FLOP/s it
    allows)."""
    import torch

    chains, threads = int(mod.nsl_exp_chains()), 256
    stream = torch.cuda.current_stream().cuda_stream
    a, b = -1.0, 0.0  # x <- 2^(−x): stays in (0, 1)

    def run(out: Any, iters: int, blocks: int) -> None:
        _launched(mod, mod.nsl_mufu_ex2(out.data_ptr(), a, b, iters, blocks, threads, stream), "mufu_ex2_kernel")

    check_iters, blocks = 5, 2
    out = torch.empty(blocks * threads, device="cuda", dtype=torch.float32)
    run(out, check_iters, blocks)
    x = torch.arange(1, chains + 1, dtype=torch.float64) / 16
    for _ in range(check_iters):
        x = torch.exp2(x * a + b)
    want = float(x.sum())
    got = out.cpu().double()
    rel = float(((got - want).abs() / want).max())
    if rel > 1e-5:
        raise ValueError(f"check failed: {check_iters} iterations of x <- 2^(-x) differ from float64 by {rel:.2g} "
                         "(relative; ex2.approx is good to about 1e-7)")
    configs = []
    for per_sm in (4, 8):
        blocks = sm_count * per_sm
        out = torch.empty(blocks * threads, device="cuda", dtype=torch.float32)
        iters, ms = _calibrated(lambda n, out=out, blocks=blocks: run(out, n, blocks), 1024)
        n_exp = float(iters) * chains * blocks * threads
        configs.append({"blocks": blocks, "blocks_per_sm": per_sm, "threads_per_block": threads,
                        "warps_per_sm": per_sm * threads // 32, "iters": iters, "ms": ms, "exp2": n_exp,
                        "exp2_per_s": n_exp / (ms * 1e-3)})
        del out
    best = max(configs, key=lambda c: c["exp2_per_s"])
    rate = best["exp2_per_s"]
    entry = {
        "what": f"ex2.approx.ftz.f32 after one FFMA, {chains} independent chains per thread",
        "exp2_per_s": rate, "ms": best["ms"], "iters": best["iters"],
        "config": {k: best[k] for k in ("blocks", "blocks_per_sm", "threads_per_block", "warps_per_sm")}
        | {"chains_per_thread": chains},
    }
    return entry | problem_notes("mufu_ex2", entry) | {
        "configs": configs, "sm_clock_after": _sm_clock(),
        "check": f"{check_iters} iterations of x <- 2^(-x) agree with float64 to 1e-5 in 512 threads",
        "source": "nsightlab/csrc/ceilings.cu (mufu_ex2_kernel)",
    }


def problem_notes(key: str, entry: dict[str, Any]) -> dict[str, Any]:
    """What the registered problems record beside measured ceiling ``key`` (their
    :attr:`~nsightlab.problems.problem.Problem.ceiling_notes`; the attention problem: the softmax bound)."""
    out: dict[str, Any] = {}
    for problem in problems.known().values():
        if problem.ceiling_notes is not None:
            out |= problem.ceiling_notes(key, entry)
    return out


def read_stream_ceiling(mod: Any, sm_count: int, n_bytes: int = READ_STREAM_BYTES) -> dict[str, Any]:
    """Bytes read per second by :data:`READ_STREAM_BYTES` read once with 16-byte non-allocating loads (the best
    of a few grid shapes), after checking that each shape reads every word exactly once (the XOR of the threads'
    results is the buffer's)."""
    import torch

    stream = torch.cuda.current_stream().cuda_stream
    words = torch.randint(-(2**31), 2**31, (n_bytes // 4,), dtype=torch.int32, device="cuda")
    want = int(np.bitwise_xor.reduce(words[: 1 << 22].cpu().numpy().view(np.uint32)))  # the check's 16 MiB
    configs = []
    for per_sm, threads in ((1, 1024), (2, 1024), (4, 512), (8, 256)):
        blocks = sm_count * per_sm
        out = torch.empty(blocks * threads, dtype=torch.int32, device="cuda")

        def run(n16: int, out: Any = out, blocks: int = blocks, threads: int = threads) -> None:
            _launched(mod, mod.nsl_read_stream(words.data_ptr(), n16, out.data_ptr(), blocks, threads, stream),
                      "read_stream_kernel")
        run(1 << 20)  # the first 16 MiB: every word read once, XORed
        got = int(np.bitwise_xor.reduce(out.cpu().numpy().view(np.uint32)))
        if got != want:
            raise ValueError(f"check failed: {blocks} blocks x {threads} threads read 16 MiB to XOR {got:#x}, "
                             f"not the buffer's {want:#x}")
        ms = _time(lambda run=run: run(n_bytes // 16))
        configs.append({"blocks": blocks, "blocks_per_sm": per_sm, "threads_per_block": threads, "ms": ms,
                        "bytes_per_s": n_bytes / (ms * 1e-3)})
        del out
    best = max(configs, key=lambda c: c["bytes_per_s"])
    return {"what": "bytes read per second: a buffer read once with 16-byte ld.global.nc.L1::no_allocate loads",
            "bytes": n_bytes, "bytes_per_s": best["bytes_per_s"], "ms": best["ms"], "iters": 1,
            "config": {k: best[k] for k in ("blocks", "blocks_per_sm", "threads_per_block")}, "configs": configs,
            "note": "bytes read per second (no writes): the roof of a kernel that only reads its inputs",
            "check": "each grid shape's XOR of its threads' results equals the XOR of the 16 MiB it read",
            "source": "nsightlab/csrc/ceilings.cu (read_stream_kernel)"}


def instruction_ceilings(builder: Callable[[tuple[int, int]], Any] | None = None) -> dict[str, Any]:
    """The microbenchmarks' ceilings (:data:`MICROBENCHMARK_KEYS`: the instruction-class ones and the DRAM read
    stream); any of them that cannot be built, run or checked is recorded as not measured, with the reason.
    ``builder``: capability -> module (default :func:`build`)."""
    builder = builder or build
    try:
        import torch

        capability = tuple(torch.cuda.get_device_capability())
        sm_count = torch.cuda.get_device_properties(0).multi_processor_count
        mod = builder(capability)
    except Exception as exc:  # no GPU, no compiler, a build error: every entry says so
        reason = f"the microbenchmarks could not be built ({type(exc).__name__}: {str(exc).strip()[-400:]})"
        return {k: not_measured(reason) for k in MICROBENCHMARK_KEYS}
    out: dict[str, Any] = {}
    for key in MICROBENCHMARK_KEYS:
        if key.startswith("wgmma") and capability != (9, 0):
            out[key] = not_measured(f"needs sm_90a (compute capability 9.0); this GPU is {capability[0]}.{capability[1]}")
            continue
        try:
            if key.startswith("mma_sync"):
                out[key] = mma_sync_ceiling(mod, key.endswith("bf16"), sm_count)
            elif key.startswith("wgmma"):
                out[key] = wgmma_ceiling(mod, key, sm_count)
            elif key == "read_stream":
                out[key] = read_stream_ceiling(mod, sm_count)
            else:
                out[key] = mufu_ceiling(mod, sm_count)
        except Exception as exc:
            out[key] = not_measured(f"{type(exc).__name__}: {str(exc).strip()[-400:]}")
    return out


def measure() -> dict[str, Any]:
    """Every ceiling: the library ones (:func:`library_ceilings`), then the instruction-class ones."""
    out: dict[str, Any] = {"method": f"median of {REPS} CUDA-event timings after {WARMUP} warm-up calls; "
                                     f"microbenchmarks checked first, each launch about {TARGET_MS:g} ms"}
    out.update(library_ceilings())
    out.update(instruction_ceilings())
    return out


def describe(key: str, entry: Any) -> str:
    """One line for a ceiling (what main prints)."""
    if not isinstance(entry, dict):
        return f"{key:14s} {entry}"
    if "flop_per_s" not in entry and "bytes_per_s" not in entry and "exp2_per_s" not in entry:
        return f"{key:14s} {entry.get('status', 'not measured')}: {entry.get('reason', '?')}"
    if "bytes_per_s" in entry and key == "read_stream":
        c = entry.get("config", {})
        return (f"{key:14s} {entry['bytes_per_s'] / 1e12:8.2f} TB/s     {entry['bytes'] / 2**30:.0f} GiB read once; "
                f"{c.get('blocks')} blocks ({c.get('blocks_per_sm')}/SM) x {c.get('threads_per_block')} threads, "
                f"{entry.get('ms', float('nan')):.2f} ms; check passed")
    if "bytes_per_s" in entry:
        return f"{key:14s} {entry['bytes_per_s'] / 1e12:8.2f} TB/s     device-to-device copy of {entry['bytes'] / 2**30:.0f} GiB, read + write"
    if "exp2_per_s" in entry:
        b = entry.get("softmax_bound_flop_per_s", {})
        bounds = ", ".join(f"{k} {v / 1e12:,.0f}" for k, v in b.items())
        return (f"{key:14s} {entry['exp2_per_s'] / 1e12:8.2f} Texp2/s   {_config_text(entry)}; softmax bound "
                f"[TFLOP/s]: {bounds}")
    if "n" in entry:
        return f"{key:14s} {entry['flop_per_s'] / 1e12:8.1f} TFLOP/s  cuBLAS (torch.matmul) {entry['n']}^3"
    return f"{key:14s} {entry['flop_per_s'] / 1e12:8.1f} TFLOP/s  {_config_text(entry)}"


def _config_text(entry: dict) -> str:
    c = entry.get("config", {})
    per = (f"{c['warpgroups_per_block']} warpgroup(s)" if "warpgroups_per_block" in c else
           f"{c.get('threads_per_block')} threads")
    return (f"{c.get('blocks')} blocks ({c.get('blocks_per_sm')}/SM) x {per}, {entry.get('iters')} iterations, "
            f"{entry.get('ms', float('nan')):.1f} ms; check passed")


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m nsightlab.run.ceilings", description=__doc__,
                       epilog="exit status: 0 measured, 2 bad input (arguments, no CUDA device)")
    p.add_argument("--out", required=True, help="the JSON file to write ({'ceilings': ..., 'environment': ...})")
    a = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print_error(p.prog, "no CUDA device (torch.cuda.is_available() is False)")
        return BAD_INPUT
    from ..core.environment import environment

    env = environment()  # before the microbenchmarks: a failed kernel may leave the CUDA context unusable
    res = {"ceilings": measure(), "environment": env}
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=2, default=str)
    for key, entry in res["ceilings"].items():
        if key != "method":
            print(describe(key, entry))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
