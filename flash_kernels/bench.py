"""Benchmark every variant against PyTorch's SDPA backends (and PyTorch on the CPU) in one run.

    python -m flash_kernels.bench --suite convention --out results/        # CSV + manifest.json
    python -m flash_kernels.bench --suite mixed --variants flash_mma,flash_simt --passes forward

Timing: CUDA events around each launch, after warm-up; the L2 is flushed (a buffer of twice its
size is read, leaving no dirty line for the call to write back: --flush) before every timed repeat,
and a GPU-side wait queued behind the flush lets
the host queue the whole call before the start event is reached, so a short call's time is the
GPU's and not its Python and launch overhead (the host's time per call is its own column,
host_ms); the median is reported. A configuration's implementations are timed round-robin (--rounds,
default 3: each round a share of every implementation's repeats, the order rotated each round; a call of 50 ms
or more in one go, in the first round), so that a drift of the GPU's state between one implementation's repeats
and the next's falls on all of them alike. Correctness is measured
against the fp64 reference in the same run, on the first call, which is also timed by the wall
clock (and its peak memory taken): a case whose call is slower than --max-call-ms (on a second
call too) is skipped, and so is every later case of the same implementation, pass and dtype with
at least as much work (the row says which case decided it). The FLOP and byte model is in
flash_kernels.model.

Shapes: q [B, H, N, D], k and v [B, Hkv, Nk, D] (the suites gqa and decode: grouped-query and
cross attention); SDPA is called with enable_gqa=True where Hkv < H, and a backend or variant that
refuses a shape gives a skipped row with its message. Every CSV row names Hkv and Nk (= H and N
for plain self-attention).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from nsightlab.core.args import ArgumentParser
from nsightlab.core.text import csv_list
from nsightlab.problems.attention import _BACKENDS as SDPA_BACKENDS
from nsightlab.run.timing import FLUSH_MODES, GpuHold, L2Flusher, Repeats, hold_ms  # noqa: F401 - the bench's names
from nsightlab.run.timing import time_gpu as _timing_time_gpu
from nsightlab.store.captures import write_bench

from . import _ops, model
from .bench_suites import FP8_IMPLS, SUITES, Config, get_suite, suite_impls, suite_passes
from .reference import reference_backward, reference_forward
from .registry import VARIANTS, get_variant
from .testing import error_metrics, random_attention_inputs

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def _sdpa_backends() -> dict[str, Any]:
    """The SDPA references by name: nsightlab's attention problem's map (its ``_BACKENDS``: the one definition of
    the names and their torch.nn.attention.SDPBackend members), as SDPBackend values."""
    from torch.nn.attention import SDPBackend

    return {name: getattr(SDPBackend, backend) for name, backend in SDPA_BACKENDS.items()}


REFERENCES = (*SDPA_BACKENDS, "torch_cpu")

CSV_FIELDS = ["suite", "config", "B", "H", "Hkv", "N", "Nk", "D", "causal", "dtype", "impl", "kind", "pass", "options", "status",
              "ms", "ms_min", "ms_max", "reps", "tflops", "gbps", "peak_mem_mb", "max_abs", "mean_abs", "mse",
              "max_rel", "rel_l2", "speed_vs_sdpa_flash", "host_ms", "retimed", "late", "hold_ms"]


#: how the bench times a GPU call (written into every manifest)
TIMING_METHOD = ("CUDA events per repeat, L2 flushed before each (see timing.flush), the repeat queued behind a GPU-side wait so that "
                 "the events time the GPU's work and not the host's launch overhead (host_ms: the host's time per "
                 "call, apart; a repeat the GPU reached before the call was queued is timed again: retimed, late; hold_ms: the "
                 "wait), Python's garbage collector off while a call is timed (as timeit does); a configuration's "
                 "implementations timed round-robin in timing.rounds rounds, each a share of its repeats, the order rotated "
                 "each round, so that a drift of the GPU's state falls on all of them alike (a call of 50 ms or more "
                 "in one go, in the first round); median of all repeats")


class Skip(Exception):
    """A combination this implementation does not run (recorded with its reason)."""


def scores(cfg: Config) -> int:
    """Elements of one score matrix of the configuration: B*H*N*Nk."""
    return cfg.B * cfg.H * cfg.N * cfg.keys


def input_seed(cfg: Config) -> int:
    """The inputs' seed, from the shape: N + D for self-attention (the inputs of every committed
    benchmark capture), plus terms for Nk and Hkv where they differ from N and H."""
    return (cfg.N + cfg.D + (7 * cfg.keys if cfg.keys != cfg.N else 0)
            + (13 * cfg.kv_heads if cfg.kv_heads != cfg.H else 0))


def sdpa_kwargs(cfg: Config) -> dict[str, Any]:
    """Keyword arguments of F.scaled_dot_product_attention for the configuration's shape."""
    return {"is_causal": cfg.causal, **({"enable_gqa": True} if cfg.kv_heads < cfg.H else {})}


# --------------------------------------------------------------------------- timing


# the one CUDA-event timer is nsightlab.run.timing's (imported above): the L2 flush, the GPU-side wait, the repeats

#: the host's clock for a call's time (a module attribute, so that a test can drive it)
_now = time.perf_counter


def time_gpu(fn: Callable[[], Any], flush: L2Flusher, *, warmup: int, reps: int, budget_ms: float,
             hold: GpuHold | None = None, retries: int = 2, min_reps: int = 3) -> Repeats:
    """nsightlab.run.timing.time_gpu on this module's host clock (:data:`_now`): per-repeat milliseconds from
    CUDA events, L2 flushed before each repeat, warm-up calls first, a GPU-side wait with ``hold``; see there."""
    return _timing_time_gpu(fn, flush, warmup=warmup, reps=reps, budget_ms=budget_ms, hold=hold, retries=retries,
                            min_reps=min_reps, clock=lambda: _now())


def time_interleaved(settings: Mapping[Any, tuple[Callable[[], Any], L2Flusher]], rounds: int, hold: GpuHold,
                     reps: int = 5) -> dict[Any, list[float]]:
    """Each setting's (call, flusher) per-repeat milliseconds from :func:`time_gpu`, over ``rounds`` round-robin
    rounds of one warm-up call and ``reps`` timed repeats per setting, so that a drift of the GPU's state (clock,
    power) between runs falls on every setting alike instead of passing for a difference between them."""
    times: dict[Any, list[float]] = {k: [] for k in settings}
    for _ in range(rounds):
        for k, (fn, flush) in settings.items():
            times[k] += time_gpu(fn, flush, warmup=1, reps=reps, budget_ms=1e9, hold=hold).ms
    return times


def time_cpu(fn: Callable[[], Any], *, reps: int, budget_ms: float) -> list[float]:
    fn()
    t0 = time.perf_counter()
    fn()
    probe = (time.perf_counter() - t0) * 1e3
    n = int(max(1, min(reps, budget_ms / max(probe, 1e-3))))
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def measured_call(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """One synchronized call: (result, wall milliseconds, peak memory in MiB above what was
    allocated before it, result included)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    result = fn()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3
    return result, ms, (torch.cuda.max_memory_allocated() - base) / 2**20


class SlowCases:
    """Remembers which cases were skipped for time, so that a case of the same implementation,
    pass and dtype with at least as much work (FLOPs) is skipped without running it."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str, str], tuple[float, str, float]] = {}

    def check(self, key: tuple[str, str, str], flop: float) -> None:
        hit = self._seen.get(key)
        if hit is not None and flop >= hit[0]:
            raise Skip(f"{hit[1]} (no more work) took {hit[2]:.0f} ms per call > --max-call-ms")

    def record(self, key: tuple[str, str, str], flop: float, config: str, ms: float) -> None:
        if key not in self._seen or flop < self._seen[key][0]:
            self._seen[key] = (flop, config, ms)


# --------------------------------------------------------------------------- implementations

#: one case's tensors: q, k, v and the output gradient g
Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Limits:
    """Sizes and times above which a case is skipped instead of run (the --max-* flags)."""

    #: B*H*N*Nk above which a materializing variant or SDPA's math backend is skipped
    max_score_elems: int = 1 << 31
    #: B*H*N*Nk above which torch_cpu is skipped
    max_cpu_elems: int = 1 << 24
    #: a GPU case whose call takes longer (twice) is skipped, and so is every later one with no less work
    max_call_ms: float = 1500.0


def _kernel_call(impl: str, cfg: Config, inputs: Inputs, pass_: str, options: dict[str, Any],
                 max_score_elems: int) -> tuple[Callable[[], Any], dict[str, Any]]:
    q, k, v, g = inputs
    var = get_variant(impl)
    if pass_ not in var.passes:
        raise Skip(f"{impl} has no {pass_} pass")
    dtype = str(q.dtype).replace("torch.", "")
    if dtype not in var.dtypes:
        raise Skip(f"{impl} does not support {dtype}")
    if var.materializes and scores(cfg) > max_score_elems:
        raise Skip(f"materializes {scores(cfg):.2e} scores > --max-score-elems")
    own = {k_: v_ for k_, v_ in options.items() if k_ in var.options}  # --option applies where it exists
    try:
        # the pass's own checks (a head dim its backward lacks), then the forward's tensors for the call
        _ops._check_tensors(var, ("q", "k", "v"), (q, k, v), pass_)
        variant, (q, k, v), scale, opts = _ops._prepare(impl, ("q", "k", "v"), (q, k, v), cfg.causal, None, own,
                                                        "forward")
    except ValueError as exc:  # a shape (grouped-query, cross), causal mode or option this variant refuses
        raise Skip(" ".join(str(exc).split())) from None

    def fwd() -> Any:
        return _ops._forward(variant, q, k, v, cfg.causal, scale, opts)

    if pass_ == "forward":
        return fwd, opts
    o, lse = fwd()

    def bwd() -> Any:
        return _ops._backward(variant, q, k, v, o, lse, g, cfg.causal, scale, opts)

    return bwd, opts


def _sdpa_call(impl: str, cfg: Config, inputs: Inputs, pass_: str, max_score_elems: int) -> Callable[[], Any]:
    from torch.nn.attention import sdpa_kernel

    q, k, v, g = inputs
    backend = _sdpa_backends()[impl]
    if impl == "sdpa_math" and scores(cfg) > max_score_elems:
        raise Skip(f"math backend materializes {scores(cfg):.2e} scores > --max-score-elems")
    kw = sdpa_kwargs(cfg)

    def fwd() -> Any:
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, **kw)

    try:
        with torch.no_grad():
            fwd()
        torch.cuda.synchronize()
    except RuntimeError as exc:  # backend refuses this dtype / shape / GPU
        torch.cuda.synchronize()
        raise Skip(f"{impl}: {str(exc).splitlines()[0][:160]}") from None
    if pass_ == "forward":
        def fwd_ng() -> Any:
            with torch.no_grad():
                return fwd()
        return fwd_ng
    qs, ks, vs = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel(backend):
        o = F.scaled_dot_product_attention(qs, ks, vs, **kw)

    def bwd() -> Any:
        return torch.autograd.grad(o, (qs, ks, vs), g, retain_graph=True)

    return bwd


def _cpu_call(cfg: Config, inputs: Inputs, pass_: str, max_cpu_elems: int) -> Callable[[], Any]:
    if scores(cfg) > max_cpu_elems:
        raise Skip(f"{scores(cfg):.2e} scores > --max-cpu-elems")
    kw = sdpa_kwargs(cfg)
    qc, kc, vc, gc = (t.detach().float().cpu() for t in inputs)
    if pass_ == "forward":
        def fwd() -> Any:
            with torch.no_grad():
                return F.scaled_dot_product_attention(qc, kc, vc, **kw)
        return fwd
    qs, ks, vs = (t.clone().requires_grad_(True) for t in (qc, kc, vc))
    o = F.scaled_dot_product_attention(qs, ks, vs, **kw)

    def bwd() -> Any:
        return torch.autograd.grad(o, (qs, ks, vs), gc, retain_graph=True)

    return bwd


#: the --option keys the FP8 calls take: where O is summed (all three), the consumers' ping-pong (0 or 1: the
#: kernel alone; the other two take the default for the head dim, fp8.PINGPONG_HEAD_DIMS)
FP8_OPTIONS = ("o_sum", "pingpong", "center_v")


def _fp8_call(impl: str, cfg: Config, inputs: Inputs, pass_: str,
              options: Mapping[str, Any] | None = None) -> tuple[Callable[[], Any], dict[str, Any]]:
    """One of the FP8 forward's calls (bench_suites.FP8_IMPLS) on the fp16 or bf16 ``inputs``, quantized as
    attention_fp8_from quantizes them by default: ``flash_wgmma_fp8`` the kernel alone (quantized, rotated and V
    transposed before the timed call), ``flash_wgmma_fp8_vt`` attention_fp8 on the quantized inputs (V's transpose
    and the checks in the call), ``flash_wgmma_fp8_call`` attention_fp8_from (everything in the call). The output
    is in the inputs' dtype, so its error is against the same fp64 reference as the fp16 calls'. ``options``: the
    run's --option values; those in :data:`FP8_OPTIONS` apply (and are recorded in the row, o_sum always: the sum
    the call runs)."""
    from . import fp8

    q, k, v, _ = inputs
    if pass_ != "forward":
        raise Skip("the FP8 path is forward only")
    opts: dict[str, Any] = {"rotate": fp8.DEFAULT_ROTATE, "scales": fp8.DEFAULT_SCALES}
    given = {key: val for key, val in (options or {}).items() if key in FP8_OPTIONS}
    o_sum = given.get("o_sum")  # None: the head dim's default (fp8.o_sum_for)
    pingpong = given.get("pingpong")  # checked with the command line (_selection)
    center_v = given.get("center_v")  # V's mean row out before quantizing, added back in the kernel's epilogue
    if impl == "flash_wgmma_fp8" and pingpong is not None:
        opts["pingpong"] = pingpong
    try:
        opts["o_sum"] = fp8.o_sum_for(o_sum, cfg.D)  # the sum the call runs, given or the head dim's default
        center = fp8.center_v_for(None if center_v is None else bool(center_v), o_sum, cfg.D)
        if center:  # recorded where the call centres V (given, or the default where O is summed in the tensor cores)
            opts["center_v"] = 1
        if impl == "flash_wgmma_fp8_call":
            from . import quantize  # how the whole call quantizes, recorded in the row: the fused kernels or torch

            opts["quant"] = "fused" if all(quantize.fused_reason(t) is None for t in (q, k, v)) else "torch"

            def whole() -> Any:
                return fp8.attention_fp8_from(q, k, v, causal=cfg.causal, rotate=opts["rotate"], scales=opts["scales"],
                                              o_sum=o_sum, center_v=center)

            whole()  # its checks, before the call is timed
            return whole, opts
        mu = fp8.mean_row(v) if center else None
        (q8, dq), (k8, dk), (v8, dv) = fp8._quantized(q, k, v, opts["rotate"], 0, None, opts["scales"], v_mean=mu)

        if impl == "flash_wgmma_fp8_vt":
            def with_vt() -> Any:
                return fp8.attention_fp8(q8, k8, v8, dq, dk, dv, causal=cfg.causal, out_dtype=q.dtype, o_sum=o_sum,
                                         v_mean=mu)

            with_vt()
            return with_vt, opts
        prepared = fp8._prepare(q8, k8, v8, dq, dk, dv, cfg.causal, None, q.dtype, 0.0)
        mean = fp8._check_v_mean(mu, v.shape[0], v.shape[1], v.shape[-1], v.device)
        fp8.check_o_sum(o_sum)
    except (ValueError, TypeError) as exc:  # a head dim, dtype, GPU or option the FP8 path refuses
        raise Skip(" ".join(str(exc).split())) from None
    flag = None if pingpong is None else bool(pingpong)

    def kernel_alone() -> Any:
        return fp8.forward_vt(*prepared, pingpong=flag, o_sum=o_sum, v_mean=mean)

    return kernel_alone, opts


def implementation_call(impl: str, cfg: Config, inputs: Inputs, pass_: str, options: dict[str, Any],
                        limits: Limits) -> tuple[Callable[[], Any], dict[str, Any]]:
    """One pass of ``impl`` (a registry variant, one of the FP8 calls, one of SDPA's backends, or torch_cpu) on ``inputs`` as a
    call with no argument checks left in it, and the variant options it resolved to (empty for the
    references; ``options`` apply where the variant has them). Raises Skip saying why a combination
    does not run (pass, dtype, shape, size over ``limits``, a backend that refuses it)."""
    if impl in VARIANTS:
        return _kernel_call(impl, cfg, inputs, pass_, options, limits.max_score_elems)
    if impl in FP8_IMPLS:
        return _fp8_call(impl, cfg, inputs, pass_, options)
    if impl == "torch_cpu":
        return _cpu_call(cfg, inputs, pass_, limits.max_cpu_elems), {}
    return _sdpa_call(impl, cfg, inputs, pass_, limits.max_score_elems), {}


# --------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class Timing:
    """How the timed repeats run: ``warmup`` calls first, then at most ``reps`` repeats within ``budget_ms``, in
    ``rounds`` round-robin rounds over a configuration's implementations (each round a share of the repeats and of
    the budget)."""

    warmup: int = 3
    reps: int = 30
    budget_ms: float = 400.0
    rounds: int = 3


@dataclass(frozen=True)
class _Run:
    """What every case of one suite's run shares."""

    suite: str
    options: dict[str, Any]
    timing: Timing
    limits: Limits
    flush: L2Flusher
    slow: SlowCases
    hold: GpuHold


def _worst(metrics: list[dict[str, float]]) -> dict[str, float]:
    return {k: max(m[k] for m in metrics) for k in ("max_abs", "mean_abs", "mse", "max_rel", "rel_l2")}


def _row(suite: str, cfg: Config, dtype: str, impl: str, pass_: str) -> dict[str, Any]:
    """A result row's identifying columns; its status is ok until a step says otherwise."""
    kind = "kernel" if impl in VARIANTS or impl in FP8_IMPLS else ("cpu" if impl == "torch_cpu" else "sdpa")
    return {"suite": suite, "config": cfg.name, "B": cfg.B, "H": cfg.H, "Hkv": cfg.kv_heads, "N": cfg.N,
            "Nk": cfg.keys, "D": cfg.D, "causal": cfg.causal, "dtype": dtype, "impl": impl, "kind": kind,
            "pass": pass_, "options": "", "status": "ok"}


def _errors(result: Any, expected: tuple[torch.Tensor, ...], pass_: str) -> dict[str, float]:
    """The worst error metrics of a call's outputs against the reference's: O for the forward (the
    kernels return (O, LSE), SDPA O alone), dQ, dK and dV for the backward."""
    if pass_ == "forward":
        return _worst([error_metrics(_beside(result[0] if isinstance(result, tuple) else result, expected[0]),
                                     expected[0])])
    return _worst([error_metrics(_beside(a, b), b) for a, b in zip(result, expected, strict=False)])


def _beside(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``out`` on the reference's device where the reference was kept in host memory (too large for the
    GPU beside the inputs): compared there, instead of copying the fp64 reference back to the GPU."""
    return out.to(ref.device) if ref.device.type == "cpu" and out.device != ref.device else out


#: a call at least this slow is timed in one go, in the first round: a drift of the GPU's state between rounds is
#: small beside it, and each round would cost it an untimed call more (the one that sizes its GPU-side wait)
ONE_GO_MS = 50.0


@dataclass
class _Case:
    """An implementation's pass on one configuration, checked against the reference and ready to time: its row so
    far, its call, its first call's wall-clock milliseconds, and its timed repeats, a round's at a time."""

    row: dict[str, Any]
    fn: Callable[[], Any]
    flop: float
    call_ms: float
    repeats: list[Repeats] = field(default_factory=list)


def _check(run: _Run, cfg: Config, dtype: str, impl: str, pass_: str, inputs: Inputs,
           expected: tuple[torch.Tensor, ...]) -> tuple[dict[str, Any], _Case | None]:
    """``impl``'s pass checked against ``expected`` on its first call (on the GPU also timed by the wall clock and
    its peak memory taken): its row and, where it is to be timed, its case; a row that does not run says why in its
    status. A GPU case whose first call took ONE_GO_MS or more is called once more (the first may set up), and its
    case keeps that second call's time; slower than --max-call-ms both times, it is recorded as slow and skipped."""
    row = _row(run.suite, cfg, dtype, impl, pass_)
    flop = model.flops(cfg.B, cfg.H, cfg.N, cfg.D, causal=cfg.causal, pass_=pass_, Hkv=cfg.Hkv, Nk=cfg.Nk)
    try:
        run.slow.check((impl, pass_, dtype), flop)
        fn, opts = implementation_call(impl, cfg, inputs, pass_, run.options, run.limits)
        row["options"] = ";".join(f"{a}={b}" for a, b in opts.items())
        if impl == "torch_cpu":
            result, call_ms, peak = fn(), 0.0, float("nan")
        else:
            result, call_ms, peak = measured_call(fn)
        row.update(_errors(result, expected, pass_))
        del result
        row["peak_mem_mb"] = peak
        if impl != "torch_cpu" and call_ms >= min(ONE_GO_MS, run.limits.max_call_ms):
            _, call_ms, _ = measured_call(fn)  # the first may have set up (a module load, a cuDNN plan)
            if call_ms > run.limits.max_call_ms:
                run.slow.record((impl, pass_, dtype), flop, cfg.name, call_ms)
                raise Skip(f"one call took {call_ms:.0f} ms > --max-call-ms")
        return row, _Case(row, fn, flop, call_ms)
    except Skip as why:
        row["status"] = f"skipped: {why}"
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        row["status"] = "skipped: out of GPU memory"
    return row, None


def _shares(n: int, rounds: int) -> list[int]:
    """``n`` dealt over ``rounds`` as evenly as it goes, the first rounds taking the remainder: 10 over 3 is
    4, 3, 3."""
    return [n // rounds + (1 if r < n % rounds else 0) for r in range(rounds)]


def _time_cases(run: _Run, cases: list[_Case]) -> None:
    """The cases' timed repeats. On the GPU round-robin: ``run.timing.rounds`` rounds of every case in turn, the
    order rotated by one each round (no case always first after the host's pause between rounds), each round a
    share of the repeats (:func:`_shares` of ``reps``, and of the 3 every case gets at least) and of the budget; the
    first round with the full warm-up, later ones with one call. Calls of ONE_GO_MS and more are timed in one go,
    in the first round. torch_cpu's repeats on the host come after, in one go. A case that runs out of GPU memory
    while timed is a skipped row."""
    t = run.timing
    rounds = max(1, t.rounds)
    gpu = [c for c in cases if c.row["impl"] != "torch_cpu"]
    reps, least = _shares(t.reps, rounds), _shares(3, rounds)
    for r in range(rounds if gpu else 0):
        turn = r % len(gpu)
        for case in gpu[turn:] + gpu[:turn]:
            one_go = case.call_ms >= ONE_GO_MS
            if case.row["status"] != "ok" or (one_go and r > 0):
                continue
            n, at_least = (t.reps, 3) if one_go else (reps[r], least[r])
            if max(n, at_least) == 0:
                continue
            # slow cases are already warm after their first calls
            warmup = 0 if one_go else (t.warmup if r == 0 else min(1, t.warmup))
            try:
                case.repeats.append(time_gpu(case.fn, run.flush, warmup=warmup, reps=max(n, at_least),
                                             budget_ms=t.budget_ms if one_go else t.budget_ms / rounds,
                                             hold=run.hold, min_reps=at_least))
            except torch.cuda.OutOfMemoryError:
                torch.cuda.empty_cache()
                case.row["status"] = "skipped: out of GPU memory"
    for case in cases:
        if case.row["impl"] == "torch_cpu":
            case.repeats.append(Repeats(time_cpu(case.fn, reps=min(t.reps, 5), budget_ms=t.budget_ms * 4), []))


def _finish(case: _Case, cfg: Config, dtype: str, pass_: str) -> None:
    """The row's timing columns from its case's repeats: the median of all rounds' repeats, their spread, the
    host's median, the repeats timed again (and still late) over all rounds, the first round's GPU-side wait
    (later rounds size theirs from one warm-up call), and throughput."""
    row = case.row
    times = [ms for rep in case.repeats for ms in rep.ms]
    host = [ms for rep in case.repeats for ms in rep.host_ms]
    ms = statistics.median(times)
    row["host_ms"] = statistics.median(host) if host else float("nan")
    row["retimed"] = sum(rep.retimed for rep in case.repeats)
    row["late"] = sum(rep.late for rep in case.repeats)
    row["hold_ms"] = case.repeats[0].hold_ms
    nbytes = model.compulsory_bytes(cfg.B, cfg.H, cfg.N, cfg.D, dtype, pass_=pass_, Hkv=cfg.Hkv, Nk=cfg.Nk)
    row.update(ms=ms, ms_min=min(times), ms_max=max(times), reps=len(times), tflops=model.tflops(case.flop, ms),
               gbps=model.gbps(nbytes, ms))


def _row_line(row: dict[str, Any]) -> str:
    head = f"{row['suite']:10s} {row['config']:22s} {row['dtype']:8s} {row['pass']:8s} {row['impl']:18s}"
    if row["status"] != "ok":
        return f"{head} {row['status']}"
    line = f"{head} {row['ms']:9.3f} ms {row['tflops']:7.1f} TFLOP/s  rel_l2 {row['rel_l2']:.1e}"
    if row.get("retimed"):
        line += (f"  ({row['retimed']} repeat(s) timed again: the host had not queued the call when the GPU reached it"
                 + (f"; {row['late']} still late, their times may include the host's)" if row.get("late") else ")"))
    return line


def _reference_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                        causal: bool, free: float | None = None) -> tuple[torch.Tensor, ...]:
    """The fp64 reference of the backward, one batch element at a time where the whole batch would not fit
    in half of the GPU's free memory: a long decode backward (B=8, H=32, Nk=64k, D=128) holds 16 GiB per
    fp64 K/V-shaped tensor (k, v, dK, dV and their temporaries: about 75 GB, more than an H100 has). Where
    the results themselves would take more than a quarter of it, they are kept in host memory (and the
    implementations' gradients are compared there)."""
    per_kv = 8 * k.numel()
    need = 8 * (3 * q.numel()) + 6 * per_kv
    if free is None:  # bytes free on the inputs' device
        free = torch.cuda.mem_get_info(q.device)[0] if q.is_cuda else float("inf")
    if need < free / 2 or q.shape[0] == 1:
        return reference_backward(q, k, v, g, causal=causal)
    # the results (dQ, dK, dV in fp64) alone would crowd out the implementations' own buffers: host memory
    keep = "cpu" if 8 * (q.numel() + 2 * k.numel()) > free / 4 else q.device
    parts = [tuple(t.to(keep) for t in reference_backward(q[b:b + 1], k[b:b + 1], v[b:b + 1], g[b:b + 1],
                                                          causal=causal))
             for b in range(q.shape[0])]
    return tuple(torch.cat(ts, dim=0) for ts in zip(*parts, strict=True))


def _run_pass(run: _Run, cfg: Config, dtype: str, impls: list[str], pass_: str, inputs: Inputs,
              expected: tuple[torch.Tensor, ...], log: Callable[[str], None]) -> list[dict[str, Any]]:
    """One pass's rows: every implementation checked, then the checked ones timed together (:func:`_time_cases`).
    Its own function so that the calls (and what they hold: an SDPA backward its autograd graph) are freed on
    return, before the next pass or configuration."""
    checked = [_check(run, cfg, dtype, impl, pass_, inputs, expected) for impl in impls]
    cases = [case for _, case in checked if case is not None]
    _time_cases(run, cases)
    for case in cases:
        if case.row["status"] == "ok":
            _finish(case, cfg, dtype, pass_)
    for row, _ in checked:
        log(_row_line(row))
    return [row for row, _ in checked]


def _run_config(run: _Run, cfg: Config, dtype: str, impls: list[str], passes: list[str],
                log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Every implementation and pass on one configuration's inputs, drawn once and checked against one
    fp64 reference (O of the forward; dQ, dK, dV of the backward); a pass's implementations are checked first, then
    timed together, round-robin (:func:`_time_cases`)."""
    t_cfg = time.perf_counter()
    inputs = random_attention_inputs(cfg.B, cfg.H, cfg.N, cfg.D, TORCH_DTYPES[dtype], Hkv=cfg.Hkv, Nk=cfg.Nk,
                                     seed=input_seed(cfg))
    q, k, v, g = inputs
    expected: dict[str, tuple[torch.Tensor, ...]] = {}
    if "forward" in passes:
        expected["forward"] = reference_forward(q, k, v, causal=cfg.causal)[:1]
    if "backward" in passes:
        expected["backward"] = _reference_backward(q, k, v, g, cfg.causal)
    torch.cuda.synchronize()
    t_ref = time.perf_counter() - t_cfg
    rows = []
    for pass_ in passes:
        rows += _run_pass(run, cfg, dtype, impls, pass_, inputs, expected[pass_], log)
    del q, k, v, g, inputs, expected
    torch.cuda.empty_cache()
    log(f"{run.suite:10s} {cfg.name:22s} {dtype:8s} config done in {time.perf_counter() - t_cfg:.1f} s "
        f"(fp64 reference {t_ref:.1f} s)")
    return rows


def run(suite: str, variants: list[str], refs: list[str], passes: list[str], dtypes: list[str] | None = None,
        configs: list[str] | None = None, options: dict[str, Any] | None = None, warmup: int = 3, reps: int = 30,
        budget_ms: float = 400.0, max_score_elems: int = 1 << 31, max_cpu_elems: int = 1 << 24,
        max_call_ms: float = 1500.0, log: Callable[[str], None] = print, flush: str = "read",
        rounds: int = 3) -> list[dict[str, Any]]:
    """One row (CSV_FIELDS) per dtype, configuration, pass and implementation of ``suite`` (``configs``:
    only these), each checked against the fp64 reference and timed, or skipped with its reason."""
    cfgs, suite_dtypes, _ = get_suite(suite)
    timed = suite_passes(suite, passes)
    if timed != passes:
        log(f"{suite}: passes {', '.join(timed) or 'none'} only (bench_suites.SUITE_PASSES)")
        passes = timed
    if configs:
        unknown = sorted(set(configs) - {c.name for c in cfgs})
        if unknown:
            raise ValueError(f"unknown config(s) {unknown} in suite {suite}; known: {[c.name for c in cfgs]}")
        cfgs = [c for c in cfgs if c.name in configs]
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1 (1: each implementation timed in one go); got {rounds}")
    impls = suite_impls(suite, [*variants, *refs])
    if impls != [*variants, *refs]:
        log(f"{suite}: implementations {', '.join(impls) or 'none'} only (bench_suites.SUITE_IMPLS, FP8_IMPLS)")
    state = _Run(suite, options or {}, Timing(warmup, reps, budget_ms, rounds),
                 Limits(max_score_elems, max_cpu_elems, max_call_ms), L2Flusher(flush), SlowCases(), GpuHold())
    rows: list[dict[str, Any]] = []
    try:
        for dtype in dtypes or list(suite_dtypes):
            for cfg in cfgs:
                rows += _run_config(state, cfg, dtype, impls, passes, log)
    except KeyboardInterrupt:
        _add_ratios(rows)
        raise Interrupted(rows) from None
    _add_ratios(rows)
    return rows


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGINT during :func:`run`: ``rows`` holds the configurations finished before it (the one in
    flight is lost), with their ratios."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        super().__init__(f"interrupted after {len(rows)} rows")
        self.rows = rows


def _add_ratios(rows: list[dict[str, Any]]) -> None:
    key = ("suite", "config", "dtype", "pass")
    flash = {tuple(r[k] for k in key): r["ms"] for r in rows if r["impl"] == "sdpa_flash" and r["status"] == "ok"}
    for r in rows:
        ref = flash.get(tuple(r[k] for k in key))
        r["speed_vs_sdpa_flash"] = ref / r["ms"] if ref and r.get("ms") else float("nan")


def write_results(rows: list[dict[str, Any]], out_dir: Path, name: str, manifest: dict[str, Any]) -> Path:
    """CSV + manifest written to a temporary file and renamed into place (no half-written results), as the
    store reads them (:func:`nsightlab.store.captures.write_bench`)."""
    return write_bench(rows, out_dir, name, CSV_FIELDS, manifest)


def option_value(text: str) -> Any:
    """A variant option's value as a command line gives it: a whole number as an int (``splits=8``), else the
    text (``mma=wgmma``, ``rows=auto``)."""
    return int(text) if text.isdigit() else text


@dataclass(frozen=True)
class Selection:
    """What the command runs, each list checked against what exists."""

    suites: list[str]
    variants: list[str]
    refs: list[str]
    passes: list[str]
    dtypes: list[str] | None
    options: dict[str, Any]


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m flash_kernels.bench", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="convention", help=f"one of {', '.join(SUITES)} (comma-separated for several)")
    p.add_argument("--variants", default=",".join([*VARIANTS, *FP8_IMPLS]),
                   help=f"comma-separated registry names, and the FP8 forward's calls ({', '.join(FP8_IMPLS)}: the "
                        f"suites that time them only)")
    p.add_argument("--refs", default=",".join(REFERENCES), help=f"comma-separated, from {', '.join(REFERENCES)}")
    p.add_argument("--passes", default="forward,backward")
    p.add_argument("--dtypes", default="", help="override the suite's dtypes")
    p.add_argument("--configs", default="", help="only these config names")
    p.add_argument("--option", action="append", default=[],
                   help="variant option, e.g. --option block_size=32; the FP8 calls take o_sum=fp32|tensor, "
                        "pingpong=0|1 (the kernel alone) and center_v=0|1 (V's mean row out before quantizing, "
                        "added back to O in the kernel's epilogue; default: where O is summed in the tensor cores)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--budget-ms", type=float, default=400.0, help="time budget per case for the timed repeats")
    p.add_argument("--rounds", type=int, default=3,
                   help="round-robin rounds over a configuration's implementations, each a share of the repeats "
                        "(1: each timed in one go)")
    p.add_argument("--flush", default="read", choices=FLUSH_MODES,
                   help="how the L2 is emptied before each timed repeat: read a buffer of twice its size (default; "
                        "no dirty lines left), overwrite one (the call first writes back its dirty lines), or none")
    p.add_argument("--max-score-elems", type=float, default=2**31, help="skip materializing runs above B*H*N*Nk")
    p.add_argument("--max-cpu-elems", type=float, default=2**24, help="skip torch_cpu above B*H*N*Nk")
    p.add_argument("--max-call-ms", type=float, default=1500.0, help="skip a case whose single call is slower")
    p.add_argument("--out", default="bench_results", help="output folder (CSV + manifest per suite)")
    return p


def modules_for(variants: list[str], suites: list[str]) -> list[str]:
    """The kernel modules a run of ``variants`` over ``suites`` loads: each timed registry variant's ``kernels``, and
    the FP8 module where a suite times an FP8 call (whose fp16 baseline is flash_wgmma's). Built before the first
    timing; a module left out is still built when first called, in a warm-up, never inside a timed repeat."""
    timed = {i for s in suites for i in suite_impls(s, variants)}
    names = {k for v in timed if v in VARIANTS for k in get_variant(v).kernels if isinstance(k, str)}
    if timed & set(FP8_IMPLS):
        names |= {"flash_wgmma_fp8", *get_variant("flash_wgmma").kernels}
    return sorted(names)


def _selection(a: argparse.Namespace) -> Selection:
    """The command's lists; ValueError naming what is unknown and what is accepted."""
    variants = csv_list(a.variants)
    unknown = [v for v in variants if v not in VARIANTS and v not in FP8_IMPLS]
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; known: {', '.join([*VARIANTS, *FP8_IMPLS])}")
    refs = csv_list(a.refs)
    bad = [r for r in refs if r not in REFERENCES]
    if bad:
        raise ValueError(f"unknown reference(s) {bad}; known: {', '.join(REFERENCES)}")
    passes = csv_list(a.passes)
    if any(x not in ("forward", "backward") for x in passes):
        raise ValueError(f"--passes takes forward,backward; got {a.passes}")
    dtypes = csv_list(a.dtypes) or None
    if dtypes and any(d not in TORCH_DTYPES for d in dtypes):
        raise ValueError(f"--dtypes takes {', '.join(TORCH_DTYPES)}; got {a.dtypes}")
    options: dict[str, Any] = {}
    for o in a.option:
        key, _, val = o.partition("=")
        options[key] = option_value(val)
    if options.get("pingpong", 0) not in (0, 1):
        raise ValueError(f"--option pingpong takes 0 or 1 (the FP8 kernel's consumers taking turns); got "
                         f"{options['pingpong']!r}")
    if options.get("center_v", 0) not in (0, 1):
        raise ValueError(f"--option center_v takes 0 or 1 (the FP8 calls: V's mean row out before quantizing, added "
                         f"back to O); got {options['center_v']!r}")
    if "o_sum" in options:
        from .fp8 import check_o_sum

        check_o_sum(options["o_sum"])
    suites = csv_list(a.suite)
    for s in suites:
        get_suite(s)
    return Selection(suites, variants, refs, passes, dtypes, options)


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    a = p.parse_args(argv)
    if a.rounds < 1:
        p.error(f"--rounds takes 1 or more (1: each implementation timed in one go); got {a.rounds}")
    if not torch.cuda.is_available():
        p.error("no CUDA device: the benchmark needs a GPU (torch.cuda.is_available() is False)")
    try:
        sel = _selection(a)
    except ValueError as exc:
        p.error(str(exc))
    from nsightlab.core.environment import environment

    from . import _build

    build_s = _build.build_all(modules=modules_for(sel.variants, sel.suites) or None)
    for suite in sel.suites:
        t0 = time.perf_counter()
        stopped = False
        try:
            rows = run(suite, sel.variants, sel.refs, sel.passes, sel.dtypes, csv_list(a.configs), sel.options,
                       a.warmup, a.reps, a.budget_ms, int(a.max_score_elems), int(a.max_cpu_elems), a.max_call_ms,
                       flush=a.flush, rounds=a.rounds)
        except Interrupted as stop:  # keep what was finished, say so, and stop
            rows, stopped = stop.rows, True
        manifest = {"suite": suite, "description": SUITES[suite][2], "command": [sys.executable, "-m",
                    "flash_kernels.bench", *(argv if argv is not None else sys.argv[1:])],
                    "environment": environment(), "build_seconds": build_s,
                    "timing": {"method": TIMING_METHOD, "flush": a.flush,
                               "warmup": a.warmup, "max_reps": a.reps, "budget_ms": a.budget_ms,
                               "rounds": a.rounds, "one_go_ms": ONE_GO_MS},
                    "seconds": time.perf_counter() - t0, "rows": len(rows),
                    **({"partial": "interrupted during this suite: only the configurations finished before it"}
                       if stopped else {})}
        path = write_results(rows, Path(a.out), suite, manifest)
        print(f"wrote {path} ({len(rows)} rows, {manifest['seconds']:.0f} s)")
        if stopped:
            print(f"interrupted during suite {suite}: its finished rows are written, later suites are not run",
                  file=sys.stderr)
            return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
