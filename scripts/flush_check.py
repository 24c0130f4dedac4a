"""Does the way the L2 is flushed change a decode call's time? Times decode-suite shapes with each of the
bench's flush modes (flash_kernels.bench.FLUSH_MODES: "write" overwrites a buffer of twice the L2, leaving it
full of dirty lines that the timed call's reads must first write back; "read" reads such a buffer, leaving
clean lines; "none"), the modes and implementations interleaved in rounds on the same inputs, with the bench's
timer (CUDA events, the GPU-side hold). Memory-bound calls that read less than a few times the L2 are the ones
the write-back can slow.

    python scripts/flush_check.py --configs Nq1-Nk16384-Hkv1,Nq1-Nk1024-Hkv8 --impls flash_decode,sdpa_cudnn
    python scripts/flush_check.py --modes read --impls flash_decode:mma=mma.sync,flash_decode:mma=wgmma
    python scripts/flush_check.py --modes read --floor --impls flash_decode:splits=16,flash_decode:splits=64
    python scripts/flush_check.py --modes read --placements 3 --configs Nq16-Nk4096-Hkv32 --impls flash_decode,sdpa_cudnn
    python scripts/flush_check.py --modes read --head-dim 64 --configs Nq4-Nk16384-Hkv1 --impls flash_decode,sdpa_cudnn

An implementation may carry a variant's options after a colon (name:option=value, several joined by "+").
--floor adds rows that only read as many bytes as K and V hold (one contiguous copy of both, made once), with
PyTorch's reduction kernels, timed the same way: kv_sum (torch.sum to one fp32 value), kv_sum_cols (column sums
of a [*, 4096] view, as the bench's read flush does) and kv_amax, and with a kernel that only reads
(scripts/read_floor.cu, built here with load_inline): kv_stream[b x t, uU] with b blocks an SM of t threads, each
with U 16-byte loads in flight, for several grid shapes. They tell what streaming those bytes costs on this GPU
when nothing else is done, fixed costs (launch, ramp, tail) included; the fastest kv_stream row is the floor.

Prints, per shape and implementation, the median microseconds and the GB/s of compulsory K+V bytes under
each mode. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

import numpy
import torch

from flash_kernels import bench
from flash_kernels.bench_suites import SUITES
from flash_kernels.testing import random_attention_inputs

#: kv_stream's grid shapes: (blocks an SM, threads a block, 16-byte loads in flight a thread)
STREAM_SHAPES = ((1, 1024, 4), (1, 1024, 8), (2, 1024, 2), (2, 1024, 4), (2, 512, 8), (4, 512, 4), (8, 256, 4),
                 (16, 128, 8))


def read_stream_module():
    """scripts/read_floor.cu as a module with read_stream(buf, blocks, threads, unroll, sink, check)."""
    from torch.utils.cpp_extension import load_inline

    cpp = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
cudaError_t read_stream_launch(const void* p, long long bytes, int blocks, int threads, int unroll, unsigned* sink,
                               bool check, cudaStream_t stream);
void read_stream(torch::Tensor buf, int64_t blocks, int64_t threads, int64_t unroll, torch::Tensor sink, bool check) {
  TORCH_CHECK(buf.is_cuda() && buf.is_contiguous(), "read_stream: buf must be a contiguous CUDA tensor");
  const long long bytes = buf.numel() * buf.element_size();
  TORCH_CHECK(bytes % 16 == 0 && reinterpret_cast<uintptr_t>(buf.data_ptr()) % 16 == 0,
              "read_stream: buf must hold a multiple of 16 bytes at a 16-byte aligned address; got ", bytes, " bytes");
  TORCH_CHECK(sink.is_cuda() && sink.numel() >= 1 && sink.element_size() == 4, "read_stream: sink: one 4-byte word");
  const cudaError_t e = read_stream_launch(buf.data_ptr(), bytes, blocks, threads, unroll,
                                           static_cast<unsigned*>(sink.data_ptr()), check,
                                           at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(e == cudaSuccess, "read_stream: ", cudaGetErrorString(e), " (unroll takes 1, 2, 4 or 8)");
}
"""
    cu = (Path(__file__).with_name("read_floor.cu")).read_text()
    return load_inline(name="fk_read_floor", cpp_sources=[cpp], cuda_sources=[cu], functions=["read_stream"],
                       extra_cuda_cflags=["-O3"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = [c.name for c in SUITES["decode"][0]]
    p.add_argument("--configs", default="Nq1-Nk1024-Hkv1,Nq1-Nk16384-Hkv1,Nq1-Nk65536-Hkv1,Nq1-Nk1024-Hkv8,"
                   "Nq1-Nk16384-Hkv8,Nq1-Nk1024-Hkv32", help="decode-suite configuration names, comma-separated")
    p.add_argument("--impls", default="flash_decode,sdpa_flash,sdpa_cudnn",
                   help="implementations, comma-separated; a variant may carry options: flash_decode:mma=wgmma+splits=8")
    p.add_argument("--modes", default=",".join(bench.FLUSH_MODES))
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    p.add_argument("--floor", action="store_true",
                   help="also time passes that only read as many bytes as K and V (kv_sum, kv_sum_cols, kv_amax)")
    p.add_argument("--rounds", type=int, default=6, help="round-robin rounds of 5 timed repeats per setting")
    p.add_argument("--placements", type=int, default=1,
                   help="copies of each shape's inputs at distinct addresses, each timed as settings of their own "
                        "(impl@0, impl@1, ...): does a call's time depend on where its buffers fell?")
    p.add_argument("--head-dim", type=int, default=None, choices=(64, 128),
                   help="time the shapes at this head dim instead of the decode suite's D=128 (flash_decode takes 64 "
                        "or 128)")
    a = p.parse_args(argv)
    if a.placements < 1:
        p.error(f"--placements takes a whole number of 1 or more; got {a.placements}")
    configs, modes = a.configs.split(","), a.modes.split(",")
    bad = [c for c in configs if c not in names]
    if bad:
        p.error(f"--configs: not in the decode suite: {bad}; accepted: {', '.join(names)}")
    impls = a.impls.split(",")
    known = [*bench.VARIANTS, *bench.REFERENCES]
    if any(i.split(":")[0] not in known for i in impls):
        p.error(f"--impls: unknown {[i for i in impls if i.split(':')[0] not in known]}; accepted: {', '.join(known)}")
    options = {}
    for i in impls:
        pairs = [kv for kv in i.partition(":")[2].split("+") if kv]
        if any("=" not in kv for kv in pairs):
            p.error(f"--impls: {i!r}: options are option=value pairs joined by '+' after a colon")
        options[i] = {k: bench.option_value(v) for k, v in (kv.split("=", 1) for kv in pairs)}
        name = i.split(":")[0]
        have = bench.VARIANTS[name].options if name in bench.VARIANTS else {}
        if set(options[i]) - set(have):  # bench drops options a variant lacks: a typo would time the default
            p.error(f"--impls: {i!r}: {name} has no option {sorted(set(options[i]) - set(have))}; "
                    f"its options: {', '.join(have) or 'none'}")
    if any(m not in bench.FLUSH_MODES for m in modes):
        p.error(f"--modes takes some of {', '.join(bench.FLUSH_MODES)}; got {a.modes}")
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU (torch.cuda.is_available() is False)")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {a.dtype}, D={a.head_dim or 128}; microseconds (GB/s of compulsory "
          f"K+V), median of {a.rounds} rounds x 5 repeats, modes and implementations interleaved")
    cfgs = {c.name: c if a.head_dim is None else dataclasses.replace(c, D=a.head_dim) for c in SUITES["decode"][0]}
    flushers = {m: bench.L2Flusher(m) for m in modes}
    stream = read_stream_module() if a.floor else None
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    hold = bench.GpuHold()
    for name in configs:
        c = cfgs[name]
        inputs = random_attention_inputs(c.B, c.H, c.N, c.D, getattr(torch, a.dtype), Hkv=c.Hkv, Nk=c.Nk,
                                         seed=bench.input_seed(c))
        kv_bytes = 2 * c.B * c.Hkv * c.Nk * c.D * inputs[0].element_size()
        calls = {}
        # every copy stays alive while all are timed, so that each sits at addresses of its own
        copies = [inputs, *(tuple(t.clone() for t in inputs) for _ in range(a.placements - 1))]
        for i, placed in enumerate(copies):
            at = f"@{i}" if a.placements > 1 else ""
            if at:
                print(f"{name:20s} placement {i}: q, k, v at " + ", ".join(f"{t.data_ptr():#x}" for t in placed[:3]))
            for impl in impls:
                try:
                    calls[impl + at] = bench.implementation_call(impl.split(":")[0], c, placed, "forward",
                                                                 options[impl], bench.Limits())[0]
                except bench.Skip as why:
                    print(f"{name:20s} {impl + at:13s} skipped: {why}")
        if a.floor:  # one contiguous copy of K and V, made once: the floor reads the same number of bytes
            buf = torch.cat((inputs[1].reshape(-1), inputs[2].reshape(-1)))
            cols = torch.empty(4096, dtype=torch.float32, device=buf.device)
            calls["kv_sum"] = lambda buf=buf: torch.sum(buf, dtype=torch.float32)
            calls["kv_sum_cols"] = lambda buf=buf, cols=cols: torch.sum(buf.view(-1, 4096), dim=0, out=cols)
            calls["kv_amax"] = lambda buf=buf: torch.amax(buf)
            sink = torch.zeros(1, dtype=torch.int32, device=buf.device)
            words = buf.view(torch.int32).cpu().numpy()
            want = int(numpy.bitwise_xor.reduce(words)) & 0xFFFFFFFF
            for bps, threads, unroll in STREAM_SHAPES:
                sink.zero_()
                stream.read_stream(buf, bps * sms, threads, unroll, sink, True)
                got = int(sink.item()) & 0xFFFFFFFF
                if got != want:  # the floor must read every byte: a kernel that skips some would time too fast
                    raise SystemExit(f"kv_stream[{bps}x{threads},u{unroll}] read a XOR of {got:#x}, the buffer's is "
                                     f"{want:#x}: it did not read every word once")
                calls[f"kv_stream[{bps}x{threads},u{unroll}]"] = (
                    lambda buf=buf, g=bps * sms, t=threads, u=unroll, sink=sink:
                    stream.read_stream(buf, g, t, u, sink, False))
        times = bench.time_interleaved({(i, m): (calls[i], flushers[m]) for i in calls for m in modes}, a.rounds,
                                       hold)
        width = max(13, *(len(i) for i in calls))
        for impl in calls:
            cells = []
            for mode in modes:
                us = statistics.median(times[impl, mode]) * 1e3
                cells.append(f"{mode} {us:7.1f} ({kv_bytes / us / 1e3:5.0f})")
            print(f"{name:20s} {impl:{width}s} " + "  ".join(cells), flush=True)
        del inputs, copies, calls
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
