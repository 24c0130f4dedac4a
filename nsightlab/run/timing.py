"""One CUDA-event timer for every GPU measurement (the benchmark of flash_kernels, the ceilings' microbenchmarks,
scripts that watch the clock): CUDA events around each repeat, after warm-up calls, optionally the L2 flushed
(:class:`L2Flusher`) and a GPU-side wait queued (:class:`GpuHold`) before each repeat; the caller takes the median
of :attr:`Repeats.ms`. Python's garbage collector is off while a call is timed.

Torch is imported inside the functions only (nsightlab imports without torch: tests/test_layout.py).
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: How L2Flusher empties the L2: "write" overwrites a buffer of twice its size (it is then full of that
#: buffer's dirty lines, which the timed call's first reads must write back to DRAM), "read" reads such a
#: buffer (the L2 is left holding clean lines: nothing to write back), "none" leaves it as the last call left it.
#: Measured (H100, the modes interleaved on the same inputs): "write" adds 8-10 us to every implementation's decode call that reads
#: more than the L2 holds (one k/v head, 16k keys: 43.1 against 35.3 us), 0.5-4.5 us to smaller ones; the bench reads.
FLUSH_MODES = ("read", "write", "none")


class L2Flusher:
    def __init__(self, mode: str = "read") -> None:
        if mode not in FLUSH_MODES:
            raise ValueError(f"L2 flush mode {mode!r} is not one of {', '.join(FLUSH_MODES)}")
        import torch

        self.mode = mode
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20) or (64 << 20)
        self.buf = torch.empty(2 * l2 // 4, dtype=torch.float32, device="cuda")
        self.buf.fill_(1.0)
        self.sink = torch.empty((), dtype=torch.float32, device="cuda")

    def __call__(self) -> None:
        import torch

        if self.mode == "write":
            self.buf.fill_(1.0)
        elif self.mode == "read":
            torch.sum(self.buf, dim=0, out=self.sink)


class GpuHold:
    """A GPU-side wait (``torch.cuda._sleep``, a spin on the SM clock) queued between the L2 flush and a
    repeat's start event, so that the CPU has queued every launch of the call before the GPU reaches the
    start event: the events then time the GPU's work and the gaps between its kernels, not the host's
    Python and launch overhead (nvbench's "blocking kernel" does the same). The spin's clock rate is
    measured once, on the first use."""

    def __init__(self) -> None:
        self._cycles_per_ms: float | None = None

    def cycles_per_ms(self) -> float:
        import torch

        if self._cycles_per_ms is None:
            torch.cuda._sleep(1000)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            torch.cuda._sleep(1 << 22)
            e.record()
            torch.cuda.synchronize()
            self._cycles_per_ms = (1 << 22) / max(s.elapsed_time(e), 1e-3)
        return self._cycles_per_ms

    def __call__(self, ms: float) -> None:
        import torch

        torch.cuda._sleep(max(1, int(ms * self.cycles_per_ms())))


@dataclass(frozen=True)
class Repeats:
    """The timed repeats of one call: GPU milliseconds (CUDA events) and host milliseconds (the wall time
    for the call to return, the GPU's work queued but not waited for). ``retimed``: repeats timed again
    because the host had not queued the call before the GPU reached it (:func:`time_gpu`); ``late``: repeats
    still so after the retries (their milliseconds may include host time); ``hold_ms``: the GPU-side wait queued
    ahead of each repeat (NaN without one; a repeat timed again waits longer)."""

    ms: list[float]
    host_ms: list[float]
    retimed: int = 0
    late: int = 0
    hold_ms: float = math.nan

#: the host's clock for a call's time (a module attribute, so that a test can drive it)
_now = time.perf_counter


def hold_ms(host_ms: list[float]) -> float:
    """How long the GPU waits ahead of a repeat: twice the slowest host time seen, plus 20 us (0.1 ms when
    none was seen), at most 5 ms."""
    return min(5.0, 2 * max(host_ms) + 0.02) if host_ms else 0.1


def time_gpu(fn: Callable[[], Any], flush: Callable[[], Any], *, warmup: int, reps: int, budget_ms: float,
             hold: GpuHold | None = None, retries: int = 2, min_reps: int = 3,
             clock: Callable[[], float] | None = None) -> Repeats:
    """Per-repeat milliseconds from CUDA events, L2 flushed before each repeat, and the host's time per
    call. With ``hold``, a GPU-side wait is queued after the flush (:func:`hold_ms` of the warm-up calls'
    host times; with ``warmup=0``, of one untimed call's), so that the events time the GPU alone.

    A repeat whose start event the GPU had already passed when the host returned from the call (the host took
    longer than the wait and whatever the GPU still had queued ahead of it) may have timed the host too: its
    events timed an idle GPU waiting for the call's launches. Such repeats are timed again behind a wait sized
    by the slowest host time seen, up to ``retries`` times.

    The first timed repeat also sizes the number of repeats to the time budget (at least ``min_reps``, at
    most ``reps``).

    Python's garbage collector is off meanwhile (as ``timeit`` keeps it): a collection inside a warm-up call would
    size every repeat's wait by its pause, and one inside a timed call would have that repeat timed again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _time_gpu(fn, flush, warmup=warmup, reps=reps, budget_ms=budget_ms, hold=hold, retries=retries,
                         min_reps=min_reps, clock=clock or (lambda: _now()))
    finally:
        if enabled:
            gc.enable()


def _time_gpu(fn: Callable[[], Any], flush: Callable[[], Any], *, warmup: int, reps: int, budget_ms: float,
              hold: GpuHold | None, retries: int, min_reps: int, clock: Callable[[], float]) -> Repeats:
    import torch

    _now = clock
    warm: list[float] = []
    # with no warm-up, one untimed call still sizes the wait (a first call slowed by set-up, which skips the
    # warm-up, may be followed by short ones)
    for _ in range(warmup if warmup > 0 or hold is None else 1):
        t0 = _now()
        fn()
        warm.append((_now() - t0) * 1e3)
    torch.cuda.synchronize()

    def once(wait: float) -> tuple[Any, Any, float, bool]:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush()
        if hold is not None:
            hold(wait)
        s.record()
        t0 = _now()
        fn()
        host = (_now() - t0) * 1e3
        late = hold is not None and s.query()  # the GPU reached the start event before the call was queued
        e.record()
        return s, e, host, late

    wait = first_wait = hold_ms(warm)
    first = once(wait)
    torch.cuda.synchronize()
    probe = first[0].elapsed_time(first[1])
    n = int(max(min_reps, min(reps, budget_ms / max(probe, 1e-3))))
    runs = [first, *(once(wait) for _ in range(n - 1))]
    torch.cuda.synchronize()
    ms = [s.elapsed_time(e) for s, e, _, _ in runs]
    host = [h for _, _, h, _ in runs]
    late = [x for *_, x in runs]
    retimed: set[int] = set()
    for _ in range(retries):
        again_at = [i for i in range(n) if late[i]]
        if not again_at:
            break
        wait = hold_ms(host)
        again = [once(wait) for _ in again_at]
        torch.cuda.synchronize()
        for i, (s, e, h, x) in zip(again_at, again, strict=True):
            ms[i], host[i], late[i] = s.elapsed_time(e), h, x
        retimed.update(again_at)
    return Repeats(ms, host, len(retimed), sum(late), first_wait if hold is not None else math.nan)


def no_flush() -> None:
    """The flush of a measurement that leaves the L2 as the last call left it."""


def median_ms(fn: Callable[[], Any], *, reps: int, warmup: int) -> float:
    """The median of ``reps`` repeats of ``fn`` by :func:`time_gpu` after ``warmup`` calls, the L2 not flushed and no
    GPU-side wait (a microbenchmark whose call is long against its launch)."""
    return statistics.median(time_gpu(fn, no_flush, warmup=warmup, reps=reps, budget_ms=math.inf, min_reps=reps).ms)

