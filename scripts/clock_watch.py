"""Run one attention call back to back for a while and watch the GPU's SM clock, power and throttle reasons
(nvidia-smi, sampled every 100 ms) beside the time per call: is a slow cell slow because the GPU clocked down?

    python scripts/clock_watch.py --impl flash_wgmma,sdpa_cudnn --dtypes float16,bfloat16 --pass backward \\
        -B 1 -H 16 -N 16384 -D 128 --seconds 8

Each (impl, dtype) runs for --seconds after a 1 s warm-up, timed by CUDA events per call (no L2 flush: the
calls run back to back, as a long sustained load does). Prints per setting: median ms per call, the median
and minimum SM clock (MHz), median power (W), and the throttle reasons nvidia-smi reported while it ran.
Never changes clocks or power limits; only reads them."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import threading
import time

import torch

from flash_kernels import bench
from flash_kernels.bench_suites import Config
from flash_kernels.testing import random_attention_inputs

FIELDS = "clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"


class Watch:
    """nvidia-smi's samples, every 100 ms, while the context is open."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, float, float, str]] = []
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Watch:
        self._proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits",
                                       "-lms", "100"], stdout=subprocess.PIPE, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            try:
                self.rows.append((float(parts[0]), float(parts[1]), float(parts[2]), parts[3]))
            except (ValueError, IndexError):
                continue

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None
        self._proc.terminate()
        self._proc.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", default="flash_wgmma,sdpa_cudnn", help="comma-separated implementations")
    p.add_argument("--dtypes", default="float16,bfloat16")
    p.add_argument("--pass", dest="pass_", default="backward", choices=("forward", "backward"))
    p.add_argument("-B", type=int, default=1)
    p.add_argument("-H", type=int, default=16)
    p.add_argument("-N", type=int, default=16384)
    p.add_argument("-D", type=int, default=128)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--rounds", type=int, default=1, help="run every setting this many times, interleaved")
    a = p.parse_args(argv)
    dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16}
    bad = [d for d in a.dtypes.split(",") if d not in dtypes]
    if bad:
        p.error(f"--dtypes: unknown {bad}; accepted: {', '.join(dtypes)}")
    if not a.seconds > 0 or a.rounds < 1:
        p.error(f"--seconds must be > 0 and --rounds >= 1; got {a.seconds}, {a.rounds}")
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU (torch.cuda.is_available() is False)")
    cfg = Config(f"B{a.B}-H{a.H}-N{a.N}-D{a.D}", a.B, a.H, a.N, a.D, a.causal)
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; {cfg.name} causal={a.causal} {a.pass_}")
    for rnd in range(a.rounds):
        for dtype in a.dtypes.split(","):
            inputs = random_attention_inputs(a.B, a.H, a.N, a.D, dtypes[dtype], seed=a.N + a.D)
            for impl in a.impl.split(","):
                fn, _ = bench.implementation_call(impl, cfg, inputs, a.pass_, {}, bench.Limits())
                end = time.perf_counter() + 1.0
                while time.perf_counter() < end:  # warm-up
                    fn()
                torch.cuda.synchronize()
                times = []
                with Watch() as w:
                    end = time.perf_counter() + a.seconds
                    while time.perf_counter() < end:
                        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        s.record()
                        fn()
                        e.record()
                        e.synchronize()
                        times.append(s.elapsed_time(e))
                clocks = [r[0] for r in w.rows] or [float("nan")]
                power = [r[1] for r in w.rows] or [float("nan")]
                temp = [r[2] for r in w.rows] or [float("nan")]
                reasons = sorted({r[3] for r in w.rows})
                print(f"round {rnd} {impl:12s} {dtype:8s} {statistics.median(times):8.3f} ms/call ({len(times)} calls)"
                      f"  SM clock median {statistics.median(clocks):6.0f} min {min(clocks):6.0f} MHz  power "
                      f"{statistics.median(power):5.0f} W  temp {max(temp):3.0f} C  reasons {reasons}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
