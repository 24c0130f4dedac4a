"""The attention problem, a plug-in of the :class:`~nsightlab.problems.problem.Problem` protocol like
any other: its parameters (the capture command's ``-B -H -N -D --Hkv --Nk --dtype --causal``), range
schema, work model, inputs, PyTorch's SDPA backends as reference implementations, and the softmax
bound the MUFU exp2 ceiling implies for attention.

Parameters of one case: ``B, H, N, D, dtype, causal`` and optionally ``Hkv`` (key/value heads,
grouped-query attention when < H) and ``Nk`` (keys, when not N). Tensors are ``[B, H, N, D]``
like :func:`torch.nn.functional.scaled_dot_product_attention`; an implementation is called as
``fn(q, k, v, causal=..., **options)`` and returns the output (or a tuple whose first item is it).

Work model (FlashAttention's benchmark convention): forward 4·D FLOPs per (query, key) pair that
is computed, for every batch and query head: 4·B·H·N·Nk·D without a mask. Causal masking is
aligned top-left, as SDPA's ``is_causal``: query i sees keys j <= i. When N = Nk a causal case is
credited exactly half, 4·B·H·N·Nk·D / 2 (FlashAttention's convention, not the N(N+1)/2 pairs of the
diagonal); when N != Nk it is credited the pairs the top-left mask leaves visible,
sum over i < N of min(i+1, Nk), so that a causal decode or cross-attention case is not credited
with work it does not do (N = 1 query sees one key). Backward 2.5 × forward. Compulsory bytes:
every input read once, every output written once (LSE in fp32); K and V count Hkv heads of Nk keys.
Softmax bound: every score costs one exp, so ``e`` exponentials per second cap attention at
``e`` × :data:`FLOP_PER_EXP_PER_D` × D FLOP/s (:func:`softmax_bound`): the problem's own ceiling, which the
roofline draws per pass and head dim (:func:`measured_ceilings`) and the ceilings step records beside the
MUFU rate (:func:`ceiling_notes`).

What the generic stages need of attention, this module declares on its :class:`Problem`: the default sweep
axis N, the order labels and tables name its fields in, the fields its kernels tile along (N, Nk), the
colours and markers of the attention implementations this project knows (:data:`STYLES`). It registers
as the default problem: the one a bare callable solves, and the one a capture whose manifest names no
problem holds (every capture recorded before manifests named their problem is an attention capture).
Torch is imported only by the functions that build inputs and run SDPA.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.ranges import RangeSchema
from .impls import Implementation, register
from .problem import Parameter, Problem, WorkModel
from .problem import register as register_problem

NAME = "attention"
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
#: attention FLOPs per exponential (this work model's convention): the forward does 4·D FLOPs per score
#: (2·D for S = Q Kᵀ, 2·D for P V) and one exp per score; the backward is credited 2.5× the forward's FLOPs
#: and recomputes P = exp(S − L) once per score
FLOP_PER_EXP_PER_D = {"forward": 4.0, "backward": 10.0}
PARAMETERS = (
    Parameter("B", "int", "batch", 1),
    Parameter("H", "int", "query heads", 8),
    Parameter("N", "int", "query length, the sequence length; e.g. 1024,4096"),
    Parameter("D", "int", "head dim", 64),
    Parameter("dtype", "str", "element type: float16, bfloat16 or float32", "float16", choices=tuple(DTYPE_BYTES)),
    Parameter("causal", "bool", "causal mask, aligned top-left: no, yes or both", False),
    Parameter("Hkv", "int", "key/value heads (grouped-query attention; default H)", optional=True, same_as="H"),
    Parameter("Nk", "int", "key length (default N)", optional=True, same_as="N"),
)


def _grouped(p: dict[str, Any]) -> dict[str, Any]:
    """``Hkv``/``Nk`` kept only where they differ from H/N; H a multiple of Hkv."""
    if p.get("Hkv") == p["H"]:
        p.pop("Hkv")
    if p.get("Nk") == p["N"]:
        p.pop("Nk")
    if "Hkv" in p and p["H"] % p["Hkv"]:
        raise ValueError(f"H={p['H']} must be a multiple of Hkv={p['Hkv']} (grouped-query attention)")
    return p


def key_length(p: Mapping[str, Any]) -> int:
    """A case's keys: Nk, or N where the case leaves it out (self-attention)."""
    return int(p.get("Nk") or p["N"])


def kv_heads(p: Mapping[str, Any]) -> int:
    """A case's key/value heads: Hkv, or H where the case leaves it out."""
    return int(p.get("Hkv") or p["H"])


def visible_pairs(N: int, Nk: int, causal: bool) -> float:
    """The (query, key) pairs of one head the work model credits: N·Nk; causal: N·Nk / 2 when N = Nk
    (FlashAttention's convention), else the pairs a top-left mask leaves visible, sum over i < N of
    min(i+1, Nk)."""
    if not causal:
        return float(N * Nk)
    if N == Nk:
        return N * Nk / 2
    m = min(N, Nk)  # rows 0..m-1 see i+1 keys, the rest see all Nk
    return float(m * (m + 1) // 2 + (N - m) * Nk)


def flops(p: Mapping[str, Any], pass_: str) -> float:
    f = 4.0 * p["B"] * p["H"] * p["D"] * visible_pairs(p["N"], key_length(p), bool(p.get("causal")))
    return f * (2.5 if pass_ == "backward" else 1.0)


def compulsory_bytes(p: Mapping[str, Any], pass_: str) -> float:
    """Forward reads Q, K, V and writes O and LSE (fp32); backward reads Q, K, V, O, dO, LSE and
    writes dQ, dK, dV."""
    e = DTYPE_BYTES[p["dtype"]]
    q_like = p["B"] * p["H"] * p["N"] * p["D"] * e
    kv_like = p["B"] * kv_heads(p) * key_length(p) * p["D"] * e
    lse = 4.0 * p["B"] * p["H"] * p["N"]
    if pass_ == "forward":
        return float(2 * q_like + 2 * kv_like + lse)
    return float(4 * q_like + 4 * kv_like + lse)


#: the convention, for any attention implementation that declares no work model of its own
WORK = WorkModel("attention FLOP convention: forward 4·B·H·N·Nk·D (causal: halved when N = Nk; when N != Nk, "
                 "4·B·H·D per visible pair of the top-left mask, sum over i < N of min(i+1, Nk)), backward 2.5x; "
                 "compulsory bytes: inputs read once, outputs written once", flops, compulsory_bytes, compulsory_bytes)


def softmax_bound(exp2_per_s: float, head_dim: int, pass_: str = "forward") -> float:
    """Attention FLOP/s that ``exp2_per_s`` exponentials per second allow when every score's exp
    runs on MUFU: exp/s × FLOP per exp (:data:`FLOP_PER_EXP_PER_D` × D)."""
    return exp2_per_s * FLOP_PER_EXP_PER_D[pass_] * head_dim


# --------------------------------------------------------------------------- run time (torch)


def make_inputs(p: Mapping[str, Any], device: str = "cuda", seed: int | None = None) -> tuple[Any, Any, Any]:
    """q [B, H, N, D], k and v [B, Hkv, Nk, D]: random normal + 0.5, seeded by the shape (the same
    inputs on every run, which Nsight Compute's application replay relies on)."""
    import torch

    dt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[p["dtype"]]
    if seed is None:
        seed = (p["B"] * 1_000_003 + p["H"] * 10_007 + p["N"] * 101 + p["D"] + key_length(p) * 7 + kv_heads(p) * 13) % (2**31)
    gen = torch.Generator(device=device).manual_seed(seed)

    def rnd(*shape: int) -> Any:
        return (torch.randn(*shape, generator=gen, device=device, dtype=torch.float32) + 0.5).to(dt)

    return rnd(p["B"], p["H"], p["N"], p["D"]), rnd(p["B"], kv_heads(p), key_length(p), p["D"]), rnd(p["B"], kv_heads(p), key_length(p), p["D"])


def inputs(p: Mapping[str, Any], device: str = "cuda") -> tuple[tuple[Any, ...], dict[str, Any]]:
    """One case's call: ``fn(q, k, v, causal=...)``."""
    return make_inputs(p, device), {"causal": bool(p.get("causal", False))}


_BACKENDS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_efficient": "EFFICIENT_ATTENTION",
             "sdpa_math": "MATH"}


def _sdpa(backend: str):
    def run(q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None) -> Any:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, **gqa)

    run.__name__ = f"sdpa_{backend.lower()}"
    return run


for _name, _backend in _BACKENDS.items():
    register(Implementation(_name, _sdpa(_backend), NAME,
                            traits={"library": "torch", "materializes": _name == "sdpa_math"},
                            description=f"torch.nn.functional.scaled_dot_product_attention, {_backend} backend"))

def measured_ceilings(measured: Mapping[str, Any], points: Any) -> list[dict[str, Any]]:
    """The attention ceilings a capture's measured MUFU exp2 rate implies (``measured``: the manifest's
    ``ceilings``): the softmax bound of each (pass, D) among the roofline's ``points``, a ceiling that holds
    only for the cases of that pass and head dimension (``where``)."""
    mufu = measured.get("mufu_ex2")
    if not (isinstance(mufu, Mapping) and "exp2_per_s" in mufu) or points is None or not {"D", "pass"} <= set(points):
        return []
    rows = []
    for (d, p), _ in points.groupby(["D", "pass"], sort=True):
        if p not in FLOP_PER_EXP_PER_D or isinstance(d, bool) or not (isinstance(d, (int, float)) or hasattr(d, "dtype")):
            continue
        if not float(d) > 0:
            continue
        rows.append({"name": f"measured MUFU exp2 bound ({p}, D={int(d)})",
                     "value": softmax_bound(float(mufu["exp2_per_s"]), int(d), str(p)),
                     "source": f"{mufu['exp2_per_s'] / 1e12:.2f} T ex2.approx/s (this capture) × "
                               f"{FLOP_PER_EXP_PER_D[p]:g}·D FLOP per exp (attention work model)",
                     "where": {"pass": str(p), "D": int(d)}})
    return rows


#: the head dims whose softmax bound is recorded beside a measured MUFU exp2 rate
SOFTMAX_HEAD_DIMS = (64, 128)


def ceiling_notes(key: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """Beside the measured MUFU exp2 rate (``mufu_ex2``): the attention FLOP/s it allows at the usual head dims."""
    if key != "mufu_ex2" or not isinstance(entry.get("exp2_per_s"), (int, float)):
        return {}
    rate = float(entry["exp2_per_s"])
    return {"softmax_bound_flop_per_s": {f"{p}, D={d}": softmax_bound(rate, d, p)
                                         for p in FLOP_PER_EXP_PER_D for d in SOFTMAX_HEAD_DIMS},
            "softmax_bound_note": "attention FLOP/s if every score's exp runs on MUFU at this rate: forward 4·D FLOPs "
                                  "per exp, backward 10·D (2.5 × the forward's FLOPs, P recomputed once)"}


#: the colour and marker of the attention implementations this project knows, the same on every page: the SDPA
#: references, flash_kernels' variants, the Triton example and the benchmark's CPU reference. Greys and black
#: are never an implementation's (kept for ceilings, bands, base / new, option settings); every colour here is
#: at least ΔE 20 (CIELAB) from nsightlab.render.figures.SPARE_COLORS, the colours of names without a style.
STYLES: dict[str, tuple[str, str]] = {
    # flash_kernels' variants
    "naive": ("#1F77B4", "circle"),
    "tiled": ("#FF7F0E", "square"),
    "tiled_uncoalesced": ("#2CA02C", "diamond"),
    "flash_fa1": ("#D62728", "triangle-up"),
    "flash_simt": ("#9467BD", "cross"),
    "flash_mma": ("#8C564B", "x"),
    "flash_wgmma": ("#00897B", "hexagram"),
    "flash_decode": ("#F9A825", "bowtie"),
    # its FP8 forward: the range (the kernel alone) and the benchmark's two other calls (flash_kernels.bench_suites:
    # with V's transpose, the whole call from fp16), each at least ΔE 30 (CIELAB) from the colours here and 22 from
    # figures.SPARE_COLORS and the before-grey
    "flash_wgmma_fp8": ("#0022CC", "hexagram-open"),
    "flash_wgmma_fp8_vt": ("#A55200", "diamond-open"),
    "flash_wgmma_fp8_call": ("#00CC00", "star-open"),
    # the references and other libraries
    "sdpa_flash": ("#E377C2", "triangle-down"),
    "sdpa_cudnn": ("#1A237E", "pentagon"),
    "sdpa_efficient": ("#BCBD22", "star"),
    "sdpa_math": ("#17BECF", "hexagon"),
    "triton_fa2": ("#6A1B9A", "star-triangle-up"),
    "torch_cpu": ("#827717", "circle-x"),
}

PROBLEM = register_problem(Problem(
    NAME, PARAMETERS, inputs, WORK, _grouped, tuple(_BACKENDS), range_prefix="attn",
    range_description="attention case: implementation, pass, shape [B, H, N, D], dtype, causal",
    description="softmax(Q Kᵀ · scale) V over [B, H, N, D] tensors, as scaled_dot_product_attention",
    axis="N",
    # labels name the shape, then the sequence length last; rows sort by head dim and mask first, N before
    # the batch (which a constant-work sweep varies against N)
    naming=("suite", "config", "dtype", "causal", "B", "H", "Hkv", "D", "Nk", "N"),
    sorting=("suite", "dtype", "D", "causal", "Hkv", "Nk", "N", "B", "H", "config"),
    columns=("D", "causal", "N", "B", "H"),
    tile_fields=("N", "Nk"),
    styles=STYLES, ceilings=measured_ceilings, ceiling_notes=ceiling_notes,
    yardsticks=("sdpa_*", "torch_cpu")),  # every SDPA backend, and flash_kernels.bench's CPU reference
    default=True)  # a bare callable is an attention, and captures recorded before they named their problem hold attention


def schema(prefix: str = "attn", description: str = "") -> RangeSchema:
    """The range grammar of attention cases: ``prefix:impl:pass:B=..,H=..,N=..,D=..,dtype=..,causal=0|1[,Hkv=..][,Nk=..][,options]``."""
    return PROBLEM.schema(prefix, description)


def normalize(params: Mapping[str, Any]) -> dict[str, Any]:
    """Validated parameters with defaults; ``Hkv``/``Nk`` kept only where they differ from H/N.
    ValueError says what is wrong and what is accepted."""
    return PROBLEM.normalize(params)
