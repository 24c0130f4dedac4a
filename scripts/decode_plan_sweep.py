"""flash_decode's plan against the measured best: every (rows, splits, mma, warpgroups) option at some decode-suite shapes, beside
the plan "auto" chooses and SDPA's backends, on the same inputs, timed by the bench's timer (CUDA events, L2
flushed, the GPU-side hold) in interleaved rounds, so that a drift between runs does not pass for a difference
between settings (separate bench runs of the same plan differed by up to 13 % on an H100). What
flash_kernels._ops._decode_plan is tuned from.

    python scripts/decode_plan_sweep.py --configs Nq1-Nk4096-Hkv1,Nq1-Nk16384-Hkv8 --out decode_plan.csv
    python scripts/decode_plan_sweep.py --configs Nq4-Nk16384-Hkv1 --rows 64 --mma mma.sync,wgmma
    python scripts/decode_plan_sweep.py --configs Nq16-Nk16384-Hkv8 --rows 64,128 --splits auto --warpgroups auto,1,2

Each setting runs with the options mma (default "auto": on a compute capability 9.0 GPU rows auto / 64 run wgmma
where a k/v head has more than 32 rows, rows 16 / 32 mma.sync) and warpgroups (default "auto"; 1 or 2 run wgmma: at
64 rows one warpgroup, or two that split the keys; 128 rows are two warpgroups that split the rows) given; the
label names the instruction it ran, and the warpgroups where they were given. Combinations the API refuses
(warpgroups with mma.sync, rows 128 with one warpgroup, rows 16 / 32 with wgmma) are left out of the grid. The auto
plan's line names its warpgroups too (0: mma.sync).

Prints, per shape, every setting's microseconds, fastest first, with the auto plan's (rows, splits) named; the
rows go to --out as CSV. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import statistics

import torch

from flash_kernels import VARIANTS, bench
from flash_kernels._ops import _decode_block, _decode_mma, _decode_plan, _decode_tiles
from flash_kernels.bench_suites import SUITES
from flash_kernels.testing import random_attention_inputs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = [c.name for c in SUITES["decode"][0]]
    p.add_argument("--configs", default=",".join(names), help="decode-suite configuration names, comma-separated")
    p.add_argument("--rows", default="auto,16,32,64,128", help="rows options to sweep")
    p.add_argument("--splits", default="auto,1,2,4,8,16,32", help="splits options to sweep")
    p.add_argument("--mma", default="auto", help="mma options to sweep (wgmma only with rows auto, 64 or 128; 128 with wgmma or auto only)")
    p.add_argument("--warpgroups", default="auto", help="warpgroups options to sweep (auto, 1, 2; 1 and 2 run wgmma)")
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    p.add_argument("--rounds", type=int, default=6, help="round-robin rounds of 5 timed repeats per setting")
    p.add_argument("--out", default="", help="CSV of every setting's median (optional)")
    a = p.parse_args(argv)
    configs = a.configs.split(",")
    bad = [c for c in configs if c not in names]
    if bad:
        p.error(f"--configs: not in the decode suite: {bad}; accepted: {', '.join(names)}")
    opts = VARIANTS["flash_decode"].options
    grid = []
    if a.rounds < 1:
        p.error(f"--rounds takes a positive number; got {a.rounds}")
    for r, s, m, w in itertools.product(a.rows.split(","), a.splits.split(","), a.mma.split(","), a.warpgroups.split(",")):
        r2, s2, w2 = bench.option_value(r), bench.option_value(s), bench.option_value(w)
        if (r2 not in opts["rows"].choices or s2 not in opts["splits"].choices or m not in opts["mma"].choices
                or w2 not in opts["warpgroups"].choices):
            p.error(f"rows {r!r}, splits {s!r}, mma {m!r} or warpgroups {w!r} is not an option; rows: "
                    f"{opts['rows'].choices}, splits: {opts['splits'].choices}, mma: {opts['mma'].choices}, "
                    f"warpgroups: {opts['warpgroups'].choices}")
        try:  # the options against each other, as the API checks them before it looks at a GPU
            _decode_mma(m, r2, 1, 1, 1, None, w2)
        except ValueError:
            continue  # wgmma runs blocks of 64 or 128 rows; 128 rows and warpgroups run on wgmma only
        grid.append({"rows": r2, "splits": s2, "mma": m, "warpgroups": w2})
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU (torch.cuda.is_available() is False)")
    props = torch.cuda.get_device_properties(0)
    capability = (props.major, props.minor)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {a.dtype}; microseconds, median of "
          f"{a.rounds} rounds x 5 repeats, the settings interleaved on the same inputs")
    cfgs = {c.name: c for c in SUITES["decode"][0]}
    flush, hold, rows = bench.L2Flusher(), bench.GpuHold(), []
    for name in configs:
        c = cfgs[name]
        inputs = random_attention_inputs(c.B, c.H, c.N, c.D, getattr(torch, a.dtype), Hkv=c.Hkv, Nk=c.Nk,
                                         seed=bench.input_seed(c))
        calls = {}
        for impl, setting in [("sdpa_flash", {}), ("sdpa_cudnn", {}), *(("flash_decode", g) for g in grid)]:
            try:
                label = impl if not setting else (
                    f"rows={setting['rows']},splits={setting['splits']},"
                    f"{_decode_mma(setting['mma'], setting['rows'], c.H, c.Hkv, c.N, capability, setting['warpgroups'])}"
                    + (f",warpgroups={setting['warpgroups']}" if setting["warpgroups"] != "auto" else ""))
            except ValueError as why:  # wgmma off Hopper
                print(f"  {name}: rows={setting['rows']},mma={setting['mma']},warpgroups={setting['warpgroups']} "
                      f"skipped: {why}")
                continue
            try:
                calls[label] = bench.implementation_call(impl, c, inputs, "forward", setting, bench.Limits())[0]
            except bench.Skip as why:
                print(f"  {name}: {label} skipped: {why}")
        times = bench.time_interleaved({label: (fn, flush) for label, fn in calls.items()}, a.rounds, hold)
        mma = _decode_mma("auto", "auto", c.H, c.Hkv, c.N, capability)
        # the block once, then the splits for it, as flash_kernels._ops._decode_forward resolves them
        rows_auto, wgs = _decode_block("auto", "auto", mma, c.H // c.Hkv * c.N, _decode_tiles(c.Nk, c.N, c.causal))
        _, splits = _decode_plan(rows_auto, "auto", c.B, c.H, c.Hkv, c.N, c.Nk, c.D, c.causal,
                                 props.multi_processor_count, props.shared_memory_per_multiprocessor, mma, wgs)
        got = sorted((statistics.median(t) * 1e3, label) for label, t in times.items())
        print(f"{name} (auto = rows {rows_auto}, splits {splits}, {mma}, warpgroups {wgs}): "
              + "  ".join(f"{i} {t:.1f}" for t, i in got), flush=True)
        rows += [{"config": name, "setting": label, "us": statistics.median(t) * 1e3, "us_min": min(t) * 1e3,
                  "repeats": len(t)} for label, t in times.items()]
        del inputs, calls
        torch.cuda.empty_cache()
    if a.out:
        with open(a.out, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=["config", "setting", "us", "us_min", "repeats"])
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
