"""The workload: run a sweep's cases, warm-up outside any NVTX range, the measured launches inside
one range per case (named by the sweep's range schema). What ``ncu`` and ``nsys`` run.

    python -m nsightlab.run.workload --cases capture/cases.json --iters 5 --log cases.jsonl
    python -m nsightlab.run.workload --sweep sweep.toml --list          # range names and skips (no GPU)

A capture expands its sweep into cases once and hands them to every workload it starts as ``--cases`` (the
JSON file :func:`nsightlab.run.sweep.write_cases` writes beside the capture's sweep.toml: each case's
:meth:`~nsightlab.run.sweep.Case.to_json`); ``--sweep`` expands a sweep here, for a run by hand.

Progress goes to stderr as it happens (case k of n, elapsed, estimate of what is left); one line of
JSON per finished case goes to ``--log``; an interrupted run says how many cases it finished.
Torch is imported when cases run, not before.

Backward passes run through autograd (``torch.autograd.grad`` of the output), with the range opened
and closed *inside* autograd by two identity functions around the implementation: PyTorch runs CUDA
backward nodes on its autograd device thread, NVTX push/pop ranges belong to a thread, and a range
around ``autograd.grad`` on the main thread would enclose none of the backward kernels.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.args import BAD_INPUT, ArgumentParser, non_negative_int, positive_int, print_error
from ..problems import problem as problems
from ..problems.impls import Implementation, resolve
from .sweep import Case, find, nothing_to_run, read_cases, regex

#: how this command is called (the capture runs it as a subprocess)
PROG = "python -m nsightlab.run.workload"


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, (tuple, list)) else out


def _bracketed_backward(fn: Callable[..., Any], inputs: tuple[Any, ...], kwargs: dict[str, Any], name: str,
                        seed: int) -> tuple[Callable[[], Any], Callable[[bool], None]]:
    import nvtx
    import torch

    state = {"on": False}

    class _Open(torch.autograd.Function):  # on the output side: its backward runs first
        @staticmethod
        def forward(ctx: Any, o: Any) -> Any:
            return o.view_as(o)

        @staticmethod
        def backward(ctx: Any, go: Any) -> Any:
            if state["on"]:
                nvtx.push_range(name, color="green")
            return go

    class _Close(torch.autograd.Function):  # on the inputs: its backward runs last
        @staticmethod
        def forward(ctx: Any, *xs: Any) -> Any:
            return tuple(x.view_as(x) for x in xs)

        @staticmethod
        def backward(ctx: Any, *gs: Any) -> Any:
            if state["on"]:
                nvtx.pop_range()
            return gs

    leaves = tuple(x.detach().clone().requires_grad_(True) for x in inputs)
    out = _Open.apply(_first(fn(*_Close.apply(*leaves), **kwargs)))
    gen = torch.Generator(device=out.device).manual_seed(seed)
    grad = (torch.randn(out.shape, generator=gen, device=out.device, dtype=torch.float32) + 0.5).to(out.dtype)

    def run() -> Any:
        return torch.autograd.grad(out, leaves, grad, retain_graph=True)

    def arm(on: bool) -> None:
        state["on"] = on

    return run, arm


def case_callable(impl: Implementation, case: Case, device: str = "cuda") -> tuple[Callable[[], Any], Callable[[bool], None] | None]:
    """(run, arm) for one case: ``run()`` launches the pass once; ``arm`` (backward only) turns the
    range inside autograd on and off. Any exception here is the implementation refusing the case."""
    import torch

    fn = impl.callable()
    inputs, call_kwargs = problems.get(impl.problem).inputs(dict(case.params), device)
    kwargs = {**call_kwargs, **case.options}
    if case.pass_ == "forward":
        def run() -> Any:
            with torch.no_grad():
                return fn(*inputs, **kwargs)
        return run, None
    floats = tuple(x for x in inputs if torch.is_tensor(x) and x.is_floating_point())
    if len(floats) != len(inputs):
        raise ValueError(f"{impl.name}: backward needs every input to be a floating-point tensor")
    return _bracketed_backward(fn, inputs, kwargs, case.range, seed=len(case.range))


def _skip_reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}".rstrip(": ")


def run_setups(cases: list[Case], echo: Callable[[str], None] | None = None) -> int:
    """Each implementation's setup among ``cases``' (runnable ones), once, timed; 2 with the error if one fails."""
    echo = echo or (lambda s: print(s, flush=True))
    seen: set[str] = set()
    for c in cases:
        if not c.runnable or c.impl in seen:
            continue
        seen.add(c.impl)
        impl = resolve(c.impl)
        if impl.setup is None:
            continue
        t = time.perf_counter()
        try:
            impl.setup()
        except Exception as exc:  # noqa: BLE001 - any failure of a user's setup is reported, with its type
            print_error(PROG, f"the setup of {impl.name} failed: {type(exc).__name__}: {exc}")
            return BAD_INPUT
        echo(f"setup: {impl.name} in {time.perf_counter() - t:.1f} s")
    return 0


def run_cases(cases: list[Case], *, warmup: int = 1, iters: int = 1, warmup_only: str = "all", log: Any = None,
              echo: Callable[[str], None] | None = None, running: Path | None = None) -> list[dict[str, Any]]:
    """Run each runnable case; ``warmup_only="needed"`` warms up only implementations whose traits do
    not say ``needs_warmup = False`` (what Nsight Compute's application replay wants: there every
    launch of the instruction-counting pass runs patched). ``running``: a file that holds the range name
    of the case in flight while it runs (removed when every case has finished), so that whoever stops a
    run that hangs (a kernel stuck under a profiler's replay) can say which case it was."""
    import nvtx
    import torch

    echo = echo or (lambda s: print(s, file=sys.stderr, flush=True))
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device: the workload needs a GPU (torch.cuda.is_available() is False)")
    impls = {c.impl: resolve(c.impl) for c in cases}
    for impl in impls.values():
        if impl.setup is not None:
            impl.setup()
    todo = [c for c in cases if c.runnable]
    results: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    for i, c in enumerate(todo, 1):
        impl = impls[c.impl]
        rec: dict[str, Any] = {"range": c.range, "impl": c.impl, "pass": c.pass_, "status": "ok", "started_unix": time.time()}
        if running is not None:
            running.write_text(c.range + "\n")
        t0 = time.perf_counter()
        try:
            run, arm = case_callable(impl, c)
            run()  # the probe: an implementation that refuses the case raises here, outside every range
            n_warm = warmup if (warmup_only == "all" or impl.traits.get("needs_warmup", True)) else 0
            for _ in range(max(0, n_warm - 1)):
                run()
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            for _ in range(iters):
                if arm is not None:
                    arm(True)
                    run()
                    torch.cuda.synchronize()
                    arm(False)
                else:
                    with nvtx.annotate(c.range, color="green"):
                        run()
                        torch.cuda.synchronize()
            rec["range_seconds"] = (time.perf_counter() - t1) / max(iters, 1)
            del run, arm
        except torch.cuda.OutOfMemoryError:
            rec["status"] = "skipped: out of GPU memory"
        except Exception as exc:  # noqa: BLE001 - an implementation that rejects a case is a skipped row, not a crash
            rec["status"] = f"skipped: {_skip_reason(exc)}"
            torch.cuda.synchronize()
        torch.cuda.empty_cache()
        rec["seconds"] = time.perf_counter() - t0
        results.append(rec)
        if log is not None:
            log.write(json.dumps(rec) + "\n")
            log.flush()
        elapsed = time.perf_counter() - t_start
        eta = elapsed / i * (len(todo) - i)
        echo(f"[{i}/{len(todo)}] {rec['status'][:40]:8s} {rec['seconds']:6.2f} s  elapsed {elapsed:5.0f} s, "
             f"~{eta:4.0f} s left  {c.range}")
    if running is not None:
        running.unlink(missing_ok=True)
    return results


def running_file(log: str | os.PathLike) -> Path:
    """Where a workload that logs to ``log`` keeps the range name of the case in flight."""
    return Path(f"{log}.running")


def selected(cases: list[Case], only: list[str], sweep: str) -> list[Case]:
    """The cases whose range name matches every regex of ``only``; ValueError if none does."""
    for text in only:
        rx = regex(text, "--only")
        cases = [c for c in cases if rx.search(c.range)]
        if not cases:
            raise ValueError(f"--only {' --only '.join(map(repr, only))} matches no case of sweep {sweep}")
    return cases


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog=PROG, description=__doc__,
                       epilog="exit status: 0 every case ran (or was listed), 2 bad input (arguments, sweep, no CUDA "
                              "device, a setup or a case that failed), 130 interrupted")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--sweep", help="a sweep TOML file, or the name of a registered sweep (its cases expanded here)")
    src.add_argument("--cases", help="a plan's cases as JSON (what a capture writes beside its sweep.toml and hands "
                                     "its workloads: the cases are read, not expanded again)")
    p.add_argument("--only", action="append", default=[],
                   help="only cases whose NVTX range name matches this regex (repeated: matches every one)")
    p.add_argument("--warmup", type=non_negative_int, default=None, help="launches per case before its range (default: the sweep's)")
    p.add_argument("--warmup-only", choices=("all", "needed"), default="all",
                   help="'needed': warm up only implementations that need it (under ncu's application replay)")
    p.add_argument("--iters", type=positive_int, default=1, help="measured launches per case, inside its range")
    p.add_argument("--log", help="append one JSON line per finished case to this file")
    p.add_argument("--list", action="store_true", help="print the range names (and skips) and exit; no GPU needed")
    p.add_argument("--setup-only", action="store_true",
                   help="run the selected cases' implementations' setup (e.g. build their kernels) and exit: a "
                        "capture does this outside the profilers first")
    a = p.parse_args(argv)
    try:
        if a.cases:
            planned = read_cases(a.cases)
            name, warmup, cases = planned.sweep, planned.warmup, planned.cases
        else:
            sweep = find(a.sweep)
            name, warmup, cases = sweep.name, sweep.warmup, sweep.cases()
        cases = selected(cases, a.only, name)
    except ValueError as exc:
        p.error(str(exc))
    if a.list:
        for c in cases:
            print(c.range + ("" if c.runnable else f"    [{c.status}]"))
    idle = nothing_to_run(name, cases)
    if idle:  # after the listing, which shows each case's reason
        p.error(idle)
    if a.list:
        return 0
    if a.setup_only:
        return run_setups(cases)
    import torch

    if not torch.cuda.is_available():
        print_error(PROG, "no CUDA device: the workload needs a GPU (torch.cuda.is_available() is False); "
                          "use --list to see the range names without one")
        return BAD_INPUT
    log = open(a.log, "a") if a.log else None  # noqa: SIM115
    done: list[dict[str, Any]] = []
    try:
        done = run_cases(cases, warmup=warmup if a.warmup is None else a.warmup, iters=a.iters,
                         warmup_only=a.warmup_only, log=log, running=running_file(a.log) if a.log else None)
    except KeyboardInterrupt:
        n = sum(1 for _ in open(a.log)) if a.log else "?"
        print(f"interrupted: {n} case(s) finished (see {a.log or 'the log'})", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print_error(PROG, str(exc))
        return BAD_INPUT
    finally:
        if log:
            log.close()
    bad = [r for r in done if r["status"] != "ok"]
    skipped = sum(1 for c in cases if not c.runnable)
    print(f"{len(done) - len(bad)} cases ran, {len(bad)} refused by their implementation, {skipped} skipped by the sweep",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
