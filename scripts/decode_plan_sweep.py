"""flash_decode's plan against the measured best: every (rows, splits) option at some decode-suite shapes, beside
the plan "auto" chooses and SDPA's backends, timed by the bench (flash_kernels.bench.run: CUDA events, L2 flushed,
the GPU-side hold, medians). What flash_kernels._ops._decode_plan is tuned from.

    python scripts/decode_plan_sweep.py --configs Nq1-Nk4096-Hkv1,Nq1-Nk16384-Hkv8 --out decode_plan.csv

Prints, per shape, every setting's microseconds, fastest first, with the auto plan's (rows, splits) named; the
rows go to --out as CSV. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import csv
import itertools

import torch

from flash_kernels import VARIANTS, bench
from flash_kernels._ops import _decode_plan
from flash_kernels.bench_suites import SUITES


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = [c.name for c in SUITES["decode"][0]]
    p.add_argument("--configs", default=",".join(names), help="decode-suite configuration names, comma-separated")
    p.add_argument("--rows", default="auto,16,32,64", help="rows options to sweep")
    p.add_argument("--splits", default="auto,1,2,4,8,16,32", help="splits options to sweep")
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    p.add_argument("--out", default="", help="CSV of every row (optional)")
    a = p.parse_args(argv)
    configs = a.configs.split(",")
    bad = [c for c in configs if c not in names]
    if bad:
        p.error(f"--configs: not in the decode suite: {bad}; accepted: {', '.join(names)}")
    opts = VARIANTS["flash_decode"].options
    grid = []
    for r, s in itertools.product(a.rows.split(","), a.splits.split(",")):
        r2 = r if r == "auto" else int(r)
        s2 = s if s == "auto" else int(s)
        if r2 not in opts["rows"].choices or s2 not in opts["splits"].choices:
            p.error(f"rows {r!r} or splits {s!r} is not an option; rows: {opts['rows'].choices}, "
                    f"splits: {opts['splits'].choices}")
        grid.append({"rows": r2, "splits": s2})
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU (torch.cuda.is_available() is False)")
    props = torch.cuda.get_device_properties(0)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {a.dtype}; microseconds, median")
    rows = bench.run("decode", [], ["sdpa_flash", "sdpa_cudnn"], ["forward"], [a.dtype], configs, warmup=2, reps=10,
                     budget_ms=60.0, log=lambda _: None)
    for setting in grid:
        for r in bench.run("decode", ["flash_decode"], [], ["forward"], [a.dtype], configs, options=setting, warmup=2,
                           reps=10, budget_ms=60.0, log=lambda _: None):
            r["impl"] = f"rows={setting['rows']},splits={setting['splits']}"
            rows.append(r)
    cfgs = {c.name: c for c in SUITES["decode"][0]}
    for name in configs:
        c = cfgs[name]
        plan = _decode_plan("auto", "auto", c.B, c.H, c.Hkv, c.N, c.Nk, c.D, False, props.multi_processor_count,
                            props.shared_memory_per_multiprocessor)
        got = sorted((r["ms"] * 1e3, r["impl"]) for r in rows if r["config"] == name and r["status"] == "ok")
        print(f"{name} (auto = rows {plan[0]}, splits {plan[1]}): " + "  ".join(f"{i} {t:.1f}" for t, i in got))
    if a.out:
        with open(a.out, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=bench.CSV_FIELDS, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
