"""flash_kernels as an nsightlab study: its variants as implementations, its range schema, its work
model and its sweeps, plugged in through the same public doors a user's package has
(``nsightlab.problems.impls.register``, ``nsightlab.core.ranges.register``, ``nsightlab.run.sweep.register_sweeps``).

nsightlab finds this module through the ``nsightlab.plugins`` entry point (pyproject.toml) or
``--plugin flash_kernels.study``; nsightlab itself imports nothing from flash_kernels. Imports
without torch: the kernels load when a case first runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nsightlab.core.ranges import register as register_schema
from nsightlab.problems import attention
from nsightlab.problems.impls import Implementation, WorkModel
from nsightlab.problems.impls import register as register_impl
from nsightlab.render.documents import Document
from nsightlab.render.documents import register as register_document
from nsightlab.run.sweep import register_sweeps

from . import model
from .registry import VARIANTS, Variant, engine, unavailable_reason

SWEEPS = Path(__file__).resolve().parent / "sweeps"
ROOT = Path(__file__).resolve().parent.parent
#: the ``fk:`` range names of this project's captures: fk:<variant>:<pass>:B=..,H=..,N=..,D=..,dtype=..,causal=..[,options]
SCHEMA = attention.schema("fk", "flash_kernels case: variant, pass, shape [B, H, N, D], dtype, causal, resolved options")


def _runner(name: str) -> Callable[..., Any]:
    def run(q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None, **options: Any) -> Any:
        from . import attention as fk_attention

        return fk_attention(q, k, v, variant=name, causal=causal, scale=scale, **options)

    run.__name__ = name
    return run


def _gpu_capability() -> tuple[int, int] | None:
    """This machine's GPU's compute capability, or None (no torch, no GPU: no claim either way)."""
    try:
        import torch
    except ImportError:
        return None
    return tuple(torch.cuda.get_device_capability()) if torch.cuda.is_available() else None  # type: ignore[return-value]


def _supports(var: Variant) -> Callable[[Mapping[str, Any], str], str | None]:
    def why_not(p: Mapping[str, Any], pass_: str) -> str | None:
        if var.arch is not None:
            why = unavailable_reason(var, _gpu_capability())
            if why is not None:
                return why
        if pass_ == "forward" and var.forward_of:
            return f"{var.name}'s forward is {var.forward_of}'s"
        if p["dtype"] not in var.dtypes:
            return f"{var.name} supports dtypes {', '.join(var.dtypes)}, not {p['dtype']}"
        dims = var.head_dims_of(pass_) or var.head_dims  # a pass it lacks is refused by the implementation's passes
        if p["D"] not in dims:
            return f"{var.name}'s {pass_} supports head dims {dims}, not {p['D']}"
        if p.get("Hkv") is not None and not var.grouped_query:
            return f"{var.name} takes k/v with as many heads as q (Hkv = H)"
        if p.get("Nk") is not None and not var.cross:
            return f"{var.name} takes k/v with as many keys as q has queries (Nk = N)"
        return None

    return why_not


def _working_set(var: Variant) -> Callable[[Mapping[str, Any], str], float]:
    def ws(p: Mapping[str, Any], pass_: str) -> float:
        return model.working_set_bytes(var.materializes, p["B"], p["H"], p["N"], p["D"], p["dtype"], pass_=pass_,
                                       Hkv=p.get("Hkv"), Nk=p.get("Nk"))

    return ws


def _build_kernels() -> None:
    """Every implementation's setup: compile (or load) the kernel modules, outside every range."""
    from . import build as fk_build

    fk_build()


def implementation(var: Variant) -> Implementation:
    work = WorkModel(attention.WORK.source + ("; working set adds the N x N fp32 score matrices (one forward, two "
                                              "backward)" if var.materializes else ""),
                     attention.flops, attention.compulsory_bytes, _working_set(var))

    return Implementation(
        var.name, _runner(var.name), attention.NAME, var.passes, work, _supports(var),
        lambda p, opts: var.resolve_options(opts, p["D"]),
        {"materializes": var.materializes, "engine": engine(var),  # from its kernel modules' contracts (variants.py)
         # under Nsight Compute's application replay the warm-ups would run patched: our kernels need none
         "needs_warmup": False},
        var.description, setup=_build_kernels)


def _fp8_bytes(p: Mapping[str, Any], pass_: str) -> float:
    """Compulsory bytes of the FP8 forward: Q, K, V read as e4m3 (1 byte), O written in the inputs' dtype, LSE."""
    q_like = p["B"] * p["H"] * p["N"] * p["D"]
    kv_like = p["B"] * attention.kv_heads(p) * attention.key_length(p) * p["D"]
    return float(q_like + 2 * kv_like + q_like * attention.DTYPE_BYTES[p["dtype"]] + 4 * p["B"] * p["H"] * p["N"])


def _fp8_supports(p: Mapping[str, Any], pass_: str) -> str | None:
    why = unavailable_reason("flash_wgmma", _gpu_capability())
    if why is not None:
        return why
    if p["dtype"] not in ("float16", "bfloat16"):
        return f"flash_wgmma_fp8 quantizes fp16 or bf16 inputs, not {p['dtype']}"
    return None if p["D"] in (64, 128, 256) else f"flash_wgmma_fp8 supports head dims (64, 128, 256), not {p['D']}"


#: flash_wgmma's FP8 forward (flash_kernels.fp8): the range's dtype is that of the inputs it quantizes (per block of
#: 128 rows, Q and K rotated: fp8.profiled_forward's defaults) before the range (the warm-up call); the range holds the
#: e4m3 kernel alone
FP8 = Implementation(
    "flash_wgmma_fp8", "flash_kernels.fp8:profiled_forward", attention.NAME, ("forward",),
    WorkModel(attention.WORK.source + "; FP8: Q, K, V read as 1-byte e4m3 (quantized before the range), O in the "
              "inputs' dtype", attention.flops, _fp8_bytes, _fp8_bytes),
    _fp8_supports, None,
    {"materializes": False, "engine": "tensor cores (e4m3)", "needs_warmup": True},
    "flash_wgmma's FP8 forward: e4m3 Q, K, V with a scale per block of 128 rows on wgmma's 8-bit path, V transposed, "
    "O summed in fp32 (in the tensor cores at D = 256, V centred there: its mean row added back in the epilogue)",
    setup=_build_kernels)


def _results_page(profiles: Path) -> str:
    from .results import render

    return render(profiles)


#: docs/results.md, rendered by ``nsightlab report`` from the repository's profiles folder (flash_kernels.results)
RESULTS = Document("results", ROOT / "docs" / "results.md", _results_page, ROOT / "profiles")


def register() -> None:
    register_schema(SCHEMA)
    for var in VARIANTS.values():
        register_impl(implementation(var))
    register_impl(FP8)
    register_sweeps(SWEEPS)
    register_document(RESULTS)


register()
