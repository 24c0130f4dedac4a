"""The benchmark's run loop on the GPU: rows, timings, correctness columns and the skip rules."""

from __future__ import annotations

import math

from flash_kernels import bench


def test_run_times_checks_and_compares():
    rows = bench.run("mixed", ["flash_mma", "naive"], ["sdpa_flash"], ["forward", "backward"], ["float16"],
                     ["Small-2", "Edge-NonPowerOf2"], warmup=1, reps=4, budget_ms=5.0, log=lambda _: None)
    assert len(rows) == 2 * 2 * 3
    for r in rows:
        assert r["status"] == "ok", r
        assert r["reps"] >= 3 and 0 < r["ms_min"] <= r["ms"] <= r["ms_max"]
        assert r["tflops"] > 0 and r["peak_mem_mb"] > 0
        assert r["rel_l2"] < 5e-3, r  # fp16 against the fp64 reference
        assert r["speed_vs_sdpa_flash"] > 0
    assert {r["N"] for r in rows} == {256, 100}


def test_slow_cases_are_skipped_and_later_ones_predicted():
    rows = bench.run("mixed", ["flash_mma"], [], ["forward"], ["float16"], ["Small-2", "Edge-NonPowerOf2"],
                     warmup=0, reps=3, budget_ms=1.0, max_call_ms=0.0, log=lambda _: None)
    first, second = rows
    assert first["status"].startswith("skipped: one call took"), first
    # Edge-NonPowerOf2 has more work than Small-2: skipped without being run
    assert second["status"].startswith("skipped: Small-2 (no more work) took"), second
    assert math.isnan(second["speed_vs_sdpa_flash"])


def test_grouped_query_and_decode_rows():
    """The gqa and decode suites: k/v with Hkv heads and Nk keys, SDPA with enable_gqa, every row names
    its shape; a variant that refuses the shape is a skipped row with its reason."""
    rows = []
    for suite, configs in (("decode", ["Nq1-Nk1024-Hkv8", "Nq16-Nk1024-Hkv32"]), ("gqa", ["Hkv1-N2048-causal"])):
        rows += bench.run(suite, ["flash_mma"], ["sdpa_flash", "sdpa_math"], ["forward", "backward"], ["float16"], configs,
                          warmup=0, reps=3, budget_ms=5.0, log=lambda _: None)
    # (decode: 2 configs x 1 pass (forward only) + gqa: 1 config x 2 passes) x 3 implementations
    assert len(rows) == (2 * 1 + 1 * 2) * 3
    assert {r["pass"] for r in rows if r["suite"] == "decode"} == {"forward"}
    shapes = {(r["config"], r["H"], r["Hkv"], r["N"], r["Nk"]) for r in rows}
    assert shapes == {("Nq1-Nk1024-Hkv8", 32, 8, 1, 1024), ("Nq16-Nk1024-Hkv32", 32, 32, 16, 1024),
                      ("Hkv1-N2048-causal", 32, 1, 2048, 2048)}
    for r in rows:
        if r["impl"].startswith("sdpa_"):
            assert r["status"] == "ok", r
        if r["status"] == "ok":
            assert r["rel_l2"] < 1e-2, r  # fp16 against the fp64 reference (dK, dV summed over 4 or 32 heads)
            assert r["tflops"] > 0
        else:
            assert r["impl"] == "flash_mma" and r["status"].startswith("skipped: ") and len(r["status"]) > 12, r


def test_the_gpu_hold_keeps_host_overhead_out_of_the_timed_interval():
    """A call that spends 2 ms on the host before queueing a tiny kernel: without the hold the events time
    the host's 2 ms (the GPU idles between the start event and the launch); with it, only the kernel. The
    host's time is reported apart either way."""
    import time

    import torch

    x = torch.zeros(1024, device="cuda")

    def call() -> None:
        time.sleep(0.002)
        x.add_(1)

    flush = bench.L2Flusher()
    free = bench.time_gpu(call, flush, warmup=2, reps=5, budget_ms=100.0)
    held = bench.time_gpu(call, flush, warmup=2, reps=5, budget_ms=100.0, hold=bench.GpuHold())
    # un-held, a repeat times the host's 2 ms whenever the GPU is otherwise idle (under other processes' kernels,
    # as with pytest -n, the start event can itself wait past the launch: so at least one, not every one)
    assert max(free.ms) > 1.5, free
    assert max(held.ms) < 0.5, held
    assert min(held.host_ms) > 1.9 and len(held.host_ms) == len(held.ms)


def test_rows_report_the_hosts_time_per_call():
    rows = bench.run("mixed", ["flash_mma"], ["sdpa_flash"], ["forward"], ["float16"], ["Small-2"], warmup=1, reps=3,
                     budget_ms=5.0, log=lambda _: None)
    assert all(r["host_ms"] > 0 for r in rows), rows
