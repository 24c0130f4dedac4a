"""flash_wgmma smoke test, forward and backward: every chosen tile (and forward pipeline) against the fp64
reference on ragged, grouped-query and cross shapes, with a diagnosis of any failure; then timings beside
flash_mma and SDPA flash (FlashAttention-2). Run from the repository root with the package importable
(`pip install -e .`, or PYTHONPATH=.); the modules it runs are built on first use.

    python scripts/wgmma_smoke.py                                   # both passes, every setting, then timings
    python scripts/wgmma_smoke.py --no-time                         # correctness only
    python scripts/wgmma_smoke.py --passes forward --tiles 128x128  # one forward tile, every pipeline
    python scripts/wgmma_smoke.py --passes forward --pipelines tma,tma-ws,tma-ws-overlap
    python scripts/wgmma_smoke.py --passes forward --tiles 128x128 --head-dims 128 --time-n 4096,16384
    python scripts/wgmma_smoke.py --passes backward --bwd-tiles 64x128
    python scripts/wgmma_smoke.py --passes backward --bwd-pipelines cp.async,tma-ws --time-n 16384
    python scripts/wgmma_smoke.py --passes backward --no-check --time-dtypes float16,bfloat16  # timings only

Correctness: inputs from flash_kernels.testing.random_attention_inputs (normal + 0.5, so relative errors
mean something), outputs poisoned with NaN before each call, errors by flash_kernels.testing.error_metrics
against flash_kernels.reference (fp64), bounds from flash_kernels.testing.TOLERANCES (the GPU tests' table).
The backward runs from the reference's O and LSE (O cast to the input dtype), so a wrong gradient is the
backward's own; grouped-query shapes run with the group swept by one block (group_split=1) and split over
H/Hkv blocks. Where every row sees a single key, dQ and dK are zero up to rounding: an absolute bound there.
A failing line says which output is wrong, in which rows, heads and 64 columns of D, and what to look at.
Timing: flash_kernels.bench's timer and calls (CUDA events per repeat, L2 flushed before each, median of up
to 20 after 5 warm-up calls, argument checks outside the timed call); TFLOP/s from flash_kernels.model
(forward 4 B H N^2 D, backward 2.5 x, halved when causal). Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

import flash_kernels as fk
from flash_kernels import bench, model
from flash_kernels.bench_suites import Config
from flash_kernels.reference import reference_backward, reference_forward
from flash_kernels.testing import TOLERANCES, error_metrics, poisoned_outputs, random_attention_inputs

VARIANT = "flash_wgmma"
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
#: (B, H, Hkv, Nq, Nk): one query/key, ragged sizes, Nq != Nk both ways (causal rows past the last key,
#: key blocks no query sees), grouped-query and multi-query, several key and query blocks
CHECK_SHAPES = [(1, 2, 2, 1, 1), (1, 2, 2, 77, 77), (2, 3, 3, 300, 300), (1, 2, 2, 1000, 1000),
                (1, 4, 2, 77, 300), (1, 4, 1, 300, 77), (2, 4, 4, 1, 1000), (1, 2, 2, 128, 128),
                (1, 8, 2, 1000, 129), (1, 4, 1, 513, 700), (1, 2, 2, 257, 1),
                (2, 16, 4, 1100, 1300)]  # more work tiles than SMs: persistent blocks run several
#: (B, H, N): 16k tokens per batch (FlashAttention's convention); --time-n picks among them
TIME_SHAPES = [(16, 16, 1024), (4, 16, 4096), (2, 16, 8192), (1, 16, 16384)]
#: the bench's GPU-side wait ahead of each timed repeat (host overhead not timed)
HOLD = bench.GpuHold()
#: the options each pass sweeps, by command-line flag
SWEPT = {"forward": {"tiles": "wg_tile", "pipelines": "pipeline", "tails": "tail"}, "backward": {"bwd_tiles": "wg_bwd_tile", "bwd_pipelines": "bwd_pipeline"}}
#: what to look at when an output is wrong; the first wrong output in this order names the place
HINTS = {
    "LSE": "LSE wrong: S = Q K^T (the Q/K descriptors) or the softmax / masking",
    "O": "LSE right, O wrong: O += P V (the V descriptor, the P fragments)",
    "dV": "dV = P^T dO: P^T (S^T = K Q^T descriptors, LSE, masking) or dO read MN-major (wgmma RS, trans-b)",
    "dK": "dK = scale dS^T Q with dV right: dS^T (dP^T = V dO^T, Dd) or Q read MN-major (wgmma RS)",
    "dQ": "dQ = scale dS K with dK, dV right: the dS^T stores to shared memory, the transposed A descriptor, "
          "K read MN-major, or the dQ split between warpgroups / atomics",
}
#: output name -> (what the kernel wrote, the fp64 reference, bounds: error metric -> largest accepted)
Outputs = dict[str, tuple[torch.Tensor, torch.Tensor, dict[str, float]]]


def forward_outputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, causal: bool,
                    options: dict[str, object]) -> Outputs:
    """O (relative bounds) and LSE (absolute: it is a log) of one flash_wgmma forward."""
    tol = TOLERANCES[str(q.dtype).removeprefix("torch.")]
    ref_o, ref_lse = reference_forward(q, k, v, causal=causal)
    with poisoned_outputs():
        o, lse = fk.forward(q, k, v, variant=VARIANT, causal=causal, **options)
    torch.cuda.synchronize()
    return {"O": (o, ref_o, {"rel_l2": tol["out_rel_l2"], "max_rel": tol["out_max_rel"]}),
            "LSE": (lse, ref_lse, {"max_abs": tol["lse_abs"]})}


def backward_outputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, causal: bool,
                     options: dict[str, object]) -> Outputs:
    """dQ, dK, dV of one flash_wgmma backward, run from the reference's O and LSE."""
    tol = TOLERANCES[str(q.dtype).removeprefix("torch.")]
    ref_o, ref_lse = reference_forward(q, k, v, causal=causal)
    refs = reference_backward(q, k, v, g, causal=causal)
    with poisoned_outputs():
        grads = fk.backward(q, k, v, ref_o.to(q.dtype), ref_lse.float(), g, variant=VARIANT, causal=causal,
                            **options)
    torch.cuda.synchronize()
    # every row sees one key (Nk = 1, or causal with Nq = 1): P = 1, so dS = dP - rowsum(dO * O) = 0 and
    # dQ, dK are zero up to rounding, where a relative error means nothing
    one_key = k.shape[2] == 1 or (causal and q.shape[2] == 1)
    relative = {"rel_l2": tol["grad_rel_l2"], "max_rel": tol["grad_max_rel"]}
    return {name: (got, ref, {"max_abs": tol["grad_max_rel"]} if one_key and name != "dV" else relative)
            for name, got, ref in zip(("dQ", "dK", "dV"), grads, refs, strict=True)}


OUTPUTS: dict[str, Callable[..., Outputs]] = {"forward": forward_outputs, "backward": backward_outputs}


def where_wrong(name: str, got: torch.Tensor, ref: torch.Tensor, bounds: dict[str, float]) -> str:
    """Which elements break the element-wise bound: how many, in which rows and heads, and the largest
    error in each 64 columns of D."""
    err = torch.nan_to_num((got.double() - ref).abs(), nan=math.inf)
    limit = bounds["max_abs"] if "max_abs" in bounds else bounds["max_rel"] * ref.abs().max().item()
    bad = err > limit
    by_row = bad.any(-1) if bad.dim() == 4 else bad  # [B, H, rows]
    rows = by_row.nonzero()[:, 2].unique().tolist()
    heads = by_row.nonzero()[:, 1].unique().tolist()
    what = "key rows" if name in ("dK", "dV") else "query rows"
    text = (f"{int(bad.sum())} bad, {what} {rows[:8]}{'...' if len(rows) > 8 else ''} (of {got.shape[2]}), "
            f"heads {heads[:8]}")
    if bad.dim() == 4:
        text += "; max error per 64 columns of D " + str([f"{err[..., c:c + 64].max().item():.1e}"
                                                          for c in range(0, got.shape[-1], 64)])
    return text


def judge(outputs: Outputs) -> tuple[dict[str, dict[str, float]], str]:
    """Error metrics per output, and a diagnosis of the outputs out of bounds ('' when none is)."""
    metrics: dict[str, dict[str, float]] = {}
    wrong: dict[str, str] = {}
    for name, (got, ref, bounds) in outputs.items():
        m = metrics[name] = error_metrics(got, ref)
        if m["nonfinite"] or any(m[key] > bound for key, bound in bounds.items()):
            wrong[name] = f"{name}: {where_wrong(name, got, ref, bounds)}; nonfinite {int(m['nonfinite'])}"
    if not wrong:
        return metrics, ""
    first = next(n for n in HINTS if n in wrong)
    return metrics, "\n       ".join([*wrong.values(), f"look at: {HINTS[first]}"])


def fmt(metrics: dict[str, dict[str, float]]) -> str:
    return "  ".join(f"{n} rel_l2 {m['rel_l2']:8.2e} max_rel {m['max_rel']:8.2e} max_abs {m['max_abs']:8.2e}"
                     for n, m in metrics.items())


def worse(a: float, b: float) -> float:
    """The worse of two metric values; NaN (a non-finite output) is worst."""
    return b if math.isnan(b) or b > a else a


@dataclass
class Tally:
    """Failures so far, and how many were printed in full (the first few)."""

    failures: int = 0
    shown: int = 0

    def fail(self, where: str, metrics: dict[str, dict[str, float]], diagnosis: str) -> None:
        self.failures += 1
        if self.shown < 12:
            self.shown += 1
            print(f"  FAIL {where}: {fmt(metrics)}\n       {diagnosis}")


def settings(chosen: dict[str, list[str]], D: int) -> list[dict[str, object]]:
    """Every combination of the chosen option values that supports head dim D."""
    options = fk.VARIANTS[VARIANT].options
    combos = [dict(zip(chosen, values, strict=True)) for values in itertools.product(*chosen.values())]
    return [c for c in combos if all(D in options[n].head_dims.get(x, (D,)) for n, x in c.items())]


def label(setting: dict[str, object]) -> str:
    return " ".join(str(x) for x in setting.values())


def shape_options(pass_: str, H: int, Hkv: int) -> list[dict[str, object]]:
    """The backward's group split: whole (1) and over every query head of the group (H / Hkv)."""
    return [{"group_split": s} for s in sorted({1, H // Hkv})] if pass_ == "backward" else [{}]


def check_line(pass_: str, setting: dict[str, object], dtype: str, D: int, causal: bool, tally: Tally) -> None:
    """One setting on every CHECK_SHAPES case; one PASS/FAIL line with the worst metrics over them."""
    worst: dict[str, dict[str, float]] = {}
    runs = bad = 0
    for B, H, Hkv, Nq, Nk in CHECK_SHAPES:
        q, k, v, g = random_attention_inputs(B, H, Nq, D, DTYPES[dtype], Hkv=Hkv, Nk=Nk, seed=Nq * 7 + Nk + D)
        for extra in shape_options(pass_, H, Hkv):
            runs += 1
            metrics, diagnosis = judge(OUTPUTS[pass_](q, k, v, g, causal, {**setting, **extra}))
            for name, m in metrics.items():
                w = worst.setdefault(name, {})
                w.update({key: worse(w.get(key, 0.0), x) for key, x in m.items()})
            if diagnosis:
                bad += 1
                split = "".join(f" group_split={x}" for x in extra.values())
                tally.fail(f"{label(setting)}{split} {dtype} D={D} causal={causal} B={B} H={H} Hkv={Hkv} Nq={Nq} "
                           f"Nk={Nk}", metrics, diagnosis)
    print(f"  {'FAIL' if bad else 'PASS'} {label(setting):24s} {dtype:8s} D={D:<3d} {'causal' if causal else 'full  '} "
          f"{fmt(worst)}" + (f"  ({bad}/{runs} cases failed)" if bad else ""))


def correctness(pass_: str, chosen: dict[str, list[str]], tally: Tally) -> None:
    print(f"\n== {pass_} correctness (fp64 reference; outputs NaN-poisoned); worst over the shapes per line ==")
    print("   shapes (B, H, Hkv, Nq, Nk): " + ", ".join(map(str, CHECK_SHAPES)))
    for dtype, D, causal in itertools.product(DTYPES, (64, 128), (False, True)):
        for setting in settings(chosen, D):
            check_line(pass_, setting, dtype, D, causal, tally)


def median_ms(impl: str, cfg: Config, inputs: bench.Inputs, pass_: str, options: dict[str, object],
              flush: bench.L2Flusher) -> float:
    fn, _ = bench.implementation_call(impl, cfg, inputs, pass_, options, bench.Limits())
    return statistics.median(bench.time_gpu(fn, flush, warmup=5, reps=20, budget_ms=1000.0, hold=HOLD).ms)


def timing(pass_: str, chosen: dict[str, list[str]], tally: Tally, shapes: list[tuple[int, int, int]],
           head_dims: tuple[int, ...] = (64, 128), dtypes: tuple[str, ...] = ("float16",)) -> None:
    """Each setting, flash_mma, SDPA flash and cuDNN at ``shapes`` (of TIME_SHAPES) in ``dtypes``, each setting
    first checked on one head of the same inputs."""
    print(f"\n== {pass_} timing, {', '.join(dtypes)} (TFLOP/s; median of up to 20, L2 flushed; x/cudnn: SDPA cuDNN's "
          "time over it) ==")
    flush = bench.L2Flusher()
    for dtype, D, causal, (B, H, N) in itertools.product(dtypes, head_dims, (False, True), shapes):
        cfg = Config(f"B{B}-H{H}-N{N}-D{D}", B, H, N, D, causal)
        inputs = random_attention_inputs(B, H, N, D, DTYPES[dtype], seed=N + D)
        one_head = tuple(t[:1, :1] for t in inputs)
        ms = {}
        for setting in settings(chosen, D):
            metrics, diagnosis = judge(OUTPUTS[pass_](*one_head, causal, setting))
            if diagnosis:
                tally.fail(f"{label(setting)} D={D} causal={causal} N={N} (B=1, H=1 slice)", metrics, diagnosis)
            ms[label(setting)] = median_ms(VARIANT, cfg, inputs, pass_, setting, flush)
        for ref in ("flash_mma", "sdpa_flash", "sdpa_cudnn"):
            ms[ref] = median_ms(ref, cfg, inputs, pass_, {}, flush)
        flop = model.flops(B, H, N, D, causal=causal, pass_=pass_)
        cols = "  ".join(f"{n} {model.tflops(flop, t):6.1f}" for n, t in ms.items())
        ratios = "  ".join(f"{n}/cudnn {ms['sdpa_cudnn'] / t:4.2f}" for n, t in ms.items() if n != "sdpa_cudnn")
        print(f"  {dtype:8s} D={D:<3d} {'causal' if causal else 'full  '} B={B:<2d} H={H} N={N:<5d} {cols}  {ratios}")


def chosen_options(p: argparse.ArgumentParser, a: argparse.Namespace, pass_: str) -> dict[str, list[str]]:
    """Option name -> the values its flag chose ("all": every choice); an unknown value is a usage error."""
    options = fk.VARIANTS[VARIANT].options
    chosen = {}
    for flag, name in SWEPT[pass_].items():
        given = getattr(a, flag)
        values = list(options[name].choices) if given == "all" else given.split(",")
        bad = [x for x in values if x not in options[name].choices]
        if bad:
            p.error(f"--{flag.replace('_', '-')}: unknown {name} {bad}; accepted: {', '.join(options[name].choices)}")
        chosen[name] = values
    return chosen


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--passes", default="forward,backward", help="forward, backward or both, comma-separated")
    p.add_argument("--tiles", default="all", help="forward: comma-separated wg_tile values, or all")
    p.add_argument("--pipelines", default="all", help="forward: comma-separated pipeline values, or all")
    p.add_argument("--tails", default="all", help="forward: comma-separated tail values, or all")
    p.add_argument("--bwd-tiles", default="all", help="backward: comma-separated wg_bwd_tile values, or all")
    p.add_argument("--bwd-pipelines", default="all", help="backward: comma-separated bwd_pipeline values, or all")
    p.add_argument("--no-time", action="store_true", help="correctness only")
    p.add_argument("--no-check", action="store_true",
                   help="timings only (each timed setting is still checked on one head of the timed inputs)")
    p.add_argument("--time-n", default="4096,8192,16384",
                   help=f"sequence lengths to time, comma-separated, of {', '.join(str(n) for *_, n in TIME_SHAPES)} "
                        "(B x N = 16k)")
    p.add_argument("--head-dims", default="64,128", help="head dims to time, comma-separated, of 64, 128")
    p.add_argument("--time-dtypes", default="float16", help=f"dtypes to time, comma-separated, of {', '.join(DTYPES)}")
    a = p.parse_args(argv)
    dtypes = tuple(x for x in a.time_dtypes.split(",") if x)
    if not dtypes or any(x not in DTYPES for x in dtypes):
        p.error(f"--time-dtypes takes comma-separated values of {', '.join(DTYPES)}; got {a.time_dtypes!r}")
    try:
        head_dims = tuple(int(x) for x in a.head_dims.split(","))
    except ValueError:
        head_dims = ()
    if not head_dims or any(d not in (64, 128) for d in head_dims):
        p.error(f"--head-dims takes comma-separated values of 64, 128; got {a.head_dims!r}")
    by_n = {n: (b, h, n) for b, h, n in TIME_SHAPES}
    try:
        shapes = [by_n[int(x)] for x in a.time_n.split(",")]
    except (KeyError, ValueError):
        p.error(f"--time-n takes comma-separated values of {', '.join(map(str, by_n))}; got {a.time_n!r}")
    passes = [x for x in a.passes.split(",") if x]
    if not passes or any(x not in OUTPUTS for x in passes):
        p.error(f"--passes takes forward, backward or forward,backward; got {a.passes!r}")
    chosen = {pass_: chosen_options(p, a, pass_) for pass_ in passes}
    if a.no_time and a.no_check:
        p.error("--no-time and --no-check together leave nothing to run")
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU (torch.cuda.is_available() is False)")
    cap = torch.cuda.get_device_capability()
    print(f"GPU: {torch.cuda.get_device_name()} (compute capability {cap[0]}.{cap[1]}), torch {torch.__version__}")
    why = fk.unavailable_reason(VARIANT, cap)
    if why:
        print(f"FAIL: {why}")
        return 1
    tally = Tally()
    for pass_ in passes:
        if not a.no_check:
            correctness(pass_, chosen[pass_], tally)
        if not a.no_time:
            timing(pass_, chosen[pass_], tally, shapes, head_dims, dtypes)
    print(f"\n{'PASS' if tally.failures == 0 else 'FAIL'}: {VARIANT} {' and '.join(passes)}, "
          f"{tally.failures} failing checks")
    return 0 if tally.failures == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
