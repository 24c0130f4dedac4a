"""The public API: input validation, dispatch to the compiled kernels, and autograd."""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Callable
from typing import Any

import torch

from . import _build
from .registry import Variant, get_variant, kernels_of, unavailable_reason
from .variants import kernel

_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}
_MAX_BH = 65535  # grid dimension limit of the kernels' batch*head axis

# The kernel modules' contracts (flash_kernels/variants.py): every option code below is encoded through them, and
# the .cu files decode it through csrc/option_codes.h, generated from the same table.
_MMA_FWD, _MMA_BWD = kernel("flash_mma_fwd"), kernel("flash_mma_bwd")
_WG_FWD, _WG_BWD = kernel("flash_wgmma_fwd"), kernel("flash_wgmma_bwd")
_DECODE, _DECODE_WG = kernel("flash_decode"), kernel("flash_decode_wgmma")
#: the materializing variants' (module, option code): tiled_uncoalesced is tiled.cu's form tiled_uncoalesced
_MATERIALIZED = {"naive": ("naive", kernel("naive").encode()),
                 "tiled": ("tiled", kernel("tiled").encode(form="tiled")),
                 "tiled_uncoalesced": ("tiled", kernel("tiled").encode(form="tiled_uncoalesced"))}
#: flash_decode's plan "auto": the fewest 64-key tiles a split gets (_decode_plan)
_DECODE_MIN_TILES_PER_SPLIT = 4
#: ... and where several row blocks read the same k/v head, the fewest tiles a split gets from the extra splits
_DECODE_MIN_TILES_PER_DUP_SPLIT = 16
#: flash_decode.cu: keys per K/V tile, K/V pipeline stages per head dim (the table's constants), shared memory a GPU
#: keeps back per resident block
_DECODE_KEYS = _DECODE.constants["keys"]
#: but stages_d128_many_rows (2) for 64-row blocks at D = 128 with more than 64 rows a k/v head
_DECODE_STAGES = {64: _DECODE.constants["stages_d64"], 128: _DECODE.constants["stages_d128"]}
#: rows "auto" on wgmma takes 128-row blocks (two warpgroups) from this many 64-key tiles a row sees (4096 keys)
_DECODE_WG2_MIN_TILES = 64
_SMEM_RESERVED_PER_BLOCK = 1024

#: When True (see flash_kernels.testing.poisoned_outputs), outputs are filled with NaN before the
#: kernels run, so an element a kernel fails to write shows up as NaN.
POISON = False


def _alloc(shape: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    t = torch.empty(shape, dtype=dtype, device=device)
    if POISON:
        t.fill_(float("nan"))
    return t


def _check_layout(names: tuple[str, ...], tensors: tuple[Any, ...]) -> tuple[int, ...]:
    """The layout every entry point shares: tensors, 4-D, one dtype; q [B, H, Nq, D], k and v [B, Hkv, Nk, D]; any
    further tensor (out, grad_out) like q. Errors name the tensors by ``names``. Returns (B, H, Nq, D, Hkv, Nk)."""
    for name, t in zip(names, tensors, strict=False):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    q, k, v = tensors[:3]
    for name, t in zip(names, tensors, strict=False):
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D [B, H, N, D] (like scaled_dot_product_attention); got shape "
                             f"{tuple(t.shape)}")
        if t.dtype != q.dtype:
            raise TypeError(f"{names[0]} and {name} must have the same dtype; got {q.dtype} and {t.dtype}")
    B, H, Nq, D = q.shape
    if tuple(k.shape) != tuple(v.shape):
        raise ValueError(f"{names[1]} and {names[2]} must have the same shape [B, Hkv, Nk, D]; got {tuple(k.shape)} "
                         f"and {tuple(v.shape)}")
    _, Hkv, Nk, _ = k.shape
    if k.shape[0] != B or k.shape[3] != D:
        raise ValueError(f"{names[1]} must be [B, Hkv, Nk, D] with {names[0]}'s batch B={B} and head dim D={D}; got "
                         f"{tuple(k.shape)}")
    for name, t in zip(names[3:], tensors[3:], strict=False):
        if tuple(t.shape) != tuple(q.shape):
            raise ValueError(f"{name} must have {names[0]}'s shape {tuple(q.shape)}; got {tuple(t.shape)}")
    return B, H, Nq, D, Hkv, Nk


def _check_sizes(names: tuple[str, ...], tensors: tuple[Any, ...], B: int, H: int, Nq: int, Hkv: int, Nk: int) -> None:
    """Every size at least 1, and the query heads a multiple of the key/value heads."""
    if min(B, H, Nq, Hkv, Nk) < 1:
        raise ValueError(f"B, H, N and Hkv, Nk must be >= 1; got {names[0]} {tuple(tensors[0].shape)}, {names[1]} "
                         f"{tuple(tensors[1].shape)}")
    if H % Hkv:
        raise ValueError(f"{names[0]}'s {H} heads must be a multiple of {names[1]}/{names[2]}'s {Hkv} heads "
                         f"(grouped-query attention: each k/v head serves H / Hkv query heads)")


def _check_tensors(variant: Variant, names: tuple[str, ...], tensors: tuple[Any, ...],
                   pass_: str = "forward") -> tuple[int, ...]:
    """:func:`_check_layout`, then what ``variant`` accepts for ``pass_``. Returns (B, H, Nq, D, Hkv, Nk)."""
    B, H, Nq, D, Hkv, Nk = _check_layout(names, tensors)
    q = tensors[0]
    if q.dtype not in _DTYPES or _DTYPES[q.dtype] not in variant.dtypes:
        raise TypeError(f"{variant.name} does not support dtype {q.dtype}; accepted: "
                        f"{', '.join('torch.' + d for d in variant.dtypes)}")
    if D not in variant.head_dims:
        raise ValueError(f"{variant.name} does not support head dim {D}; accepted: {variant.head_dims}")
    if D not in variant.head_dims_of(pass_):
        raise ValueError(f"{variant.name}'s {pass_} does not support head dim {D}; accepted: "
                         f"{variant.head_dims_of(pass_)} (head dims {variant.head_dims} forward)")
    _check_sizes(names, tensors, B, H, Nq, Hkv, Nk)
    if Hkv != H and not variant.grouped_query:
        raise ValueError(f"{variant.name} takes k/v with as many heads as q (got H={H}, Hkv={Hkv}); variants "
                         f"with grouped-query attention: {', '.join(_variants_where(lambda v: v.grouped_query))}")
    if Nk != Nq and not variant.cross:
        raise ValueError(f"{variant.name} takes k/v with as many keys as q has queries (got Nq={Nq}, Nk={Nk}); "
                         f"variants with cross attention: {', '.join(_variants_where(lambda v: v.cross))}")
    if B * H > _MAX_BH:
        raise ValueError(f"B*H = {B * H} exceeds {_MAX_BH}, the kernels' grid limit; split the batch")
    return B, H, Nq, D, Hkv, Nk


def _check_devices(names: tuple[str, ...], tensors: tuple[torch.Tensor, ...]) -> None:
    q = tensors[0]
    for name, t in zip(names, tensors, strict=False):
        if t.device.type != "cuda":
            extra = "" if torch.cuda.is_available() else " (this machine has no CUDA device: torch.cuda.is_available() is False)"
            raise ValueError(f"{name} is on {t.device}; flash_kernels runs on CUDA tensors only{extra}")
        if t.device != q.device:
            raise ValueError(f"{names[0]} is on {q.device} but {name} is on {t.device}; all tensors must share a device")


def _scale(scale: float | None, D: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(D)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale == 0:
        raise ValueError(f"scale must be a finite non-zero number or None (= 1/sqrt(D)); got {scale!r}")
    return float(scale)


def _check_workspace(variant: Variant, B: int, H: int, N: int, device: torch.device, matrices: int) -> None:
    need = 4 * B * H * N * N * matrices
    free, _ = torch.cuda.mem_get_info(device)
    if need > free:
        raise ValueError(f"{variant.name} materializes {matrices} fp32 B*H*N*N matrices: {need / 2**30:.1f} GiB, "
                         f"but the GPU has {free / 2**30:.1f} GiB free; use a flash variant or a smaller B*H*N")


def _check_group_split(name: str, opts: dict[str, Any], H: int, Hkv: int, Nq: int,
                       capability: tuple[int, int] | None) -> None:
    """flash_mma's and flash_wgmma's backward option group_split must divide the query heads per k/v head."""
    split = opts.get("group_split", "auto")
    if split != "auto" and (H // Hkv) % split:
        raise ValueError(f"{name}: group_split={split} must divide H/Hkv = {H // Hkv} (query heads per k/v "
                         f"head); accepted here: {[s for s in range(1, H // Hkv + 1) if (H // Hkv) % s == 0]} or 'auto'")


def _check_decode(name: str, opts: dict[str, Any], H: int, Hkv: int, Nq: int,
                  capability: tuple[int, int] | None) -> None:
    """flash_decode's rows and warpgroups against its mma, and all against the GPU (_decode_mma)."""
    _decode_mma(opts["mma"], opts["rows"], H, Hkv, Nq, capability, opts["warpgroups"])


#: Option checks that need the problem's shape or the GPU, per variant: called by _prepare with the resolved
#: options, H, Hkv, Nq and the GPU's compute capability, first as None (before the tensors' device is looked at:
#: the options against each other and the shape), then with the tensors' GPU's. Each raises a ValueError that
#: says what is accepted.
_OPTION_CHECKS: dict[str, Callable[[str, dict[str, Any], int, int, int, tuple[int, int] | None], None]] = {
    "flash_mma": _check_group_split,
    "flash_wgmma": _check_group_split,
    "flash_decode": _check_decode,
}


def _prepare(variant_name: str, names: tuple[str, ...], tensors: tuple[Any, ...], causal: Any, scale: Any,
             options: dict[str, Any], pass_: str) -> tuple[Variant, tuple[torch.Tensor, ...], float, dict[str, Any]]:
    variant = get_variant(variant_name)
    if pass_ not in variant.passes:
        have = _variants_where(lambda v: pass_ in v.passes)
        raise ValueError(f"{variant.name} implements the {', '.join(variant.passes)} pass only; "
                         f"variants with a {pass_} pass: {', '.join(have)}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if causal and not variant.causal:
        raise ValueError(f"{variant.name} does not support causal=True")
    B, H, _, D, Hkv, _ = _check_tensors(variant, names, tensors, pass_)
    opts = variant.resolve_options(options, D)
    check = _OPTION_CHECKS.get(variant.name)
    Nq = tensors[0].shape[2]
    if check is not None:  # the options against the shape, before the tensors' device is looked at
        check(variant.name, opts, H, Hkv, Nq, None)
    _check_devices(names, tensors)
    capability = torch.cuda.get_device_capability(tensors[0].device)
    if check is not None:  # ... and against this GPU
        check(variant.name, opts, H, Hkv, Nq, capability)
    if variant.arch is not None:  # an sm_90a variant runs on compute capability 9.0 only
        why = unavailable_reason(variant, capability)
        if why is not None:
            raise ValueError(why)
    tensors = tuple(_dense(t) for t in tensors)
    return variant, tensors, _scale(scale, D), opts


def _dense(t: torch.Tensor) -> torch.Tensor:
    """``t`` as the kernels read it: contiguous [B, H, N, D] (the kernels index densely) and starting on a 16-byte
    boundary (their 16-byte loads, cp.async and the tensor maps of TMA need it; a view that starts mid-row of a
    larger buffer may not). Either is a copy where ``t`` is not so already (documented)."""
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _variants_where(pred: Callable[[Variant], bool]) -> list[str]:
    """Names of the registry's variants for which ``pred`` holds (for messages that list alternatives)."""
    from .registry import VARIANTS

    return [n for n, v in VARIANTS.items() if pred(v)]


_NONE = torch.empty(0)


def _forward(variant: Variant, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
             opts: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    B, H, N, D = q.shape
    dev = q.device
    o = _alloc(q.shape, q.dtype, dev)
    lse = _alloc((B, H, N), torch.float32, dev)
    name = variant.forward_of or variant.name
    if variant.materializes:
        _check_workspace(variant, B, H, N, dev, 1)
        S = torch.empty((B * H, N, N), dtype=torch.float32, device=dev)
        module, kind = _MATERIALIZED[name]
        _build.load(module).fwd(kind, q, k, v, o, lse, [S], scale, causal)
    elif name == "flash_fa1":
        ws = [torch.empty(q.shape, dtype=torch.float32, device=dev),  # O, m, l between K/V blocks
              torch.empty((B, H, N), dtype=torch.float32, device=dev),
              torch.empty((B, H, N), dtype=torch.float32, device=dev)]
        _build.load("flash_fa1").fwd(opts["block_size"], q, k, v, o, lse, ws, scale, causal)
    elif name == "flash_simt":
        _build.load("flash_simt").fwd(opts["block_size"], q, k, v, o, lse, [], scale, causal)
    elif name == "flash_mma":
        # the kernel's softmax keeps the running max of the raw scores, so it takes scale > 0; a
        # negative scale runs as (-q) * |scale|, the same scores exactly
        if scale < 0:
            q, scale = -q, -scale
        _build.load("flash_mma_fwd").fwd(_MMA_FWD.encode(tile=opts["tile"]), q, k, v, o, lse, [], scale, causal)
    elif name == "flash_wgmma":
        if scale < 0:  # the same softmax convention as flash_mma's (running max of raw scores)
            q, scale = -q, -scale
        tail = 0
        # the persistent pipelines hand out work tiles from a counter that starts at zero each launch
        counter = [torch.zeros(1, dtype=torch.float32, device=dev)] if "persistent" in opts["pipeline"] else []
        if counter and opts["tail"] == "auto" and not causal:
            rows = int(opts["wg_tile"].split("x")[0])
            main = _wg_tail_plan(q.shape[0] * q.shape[1], q.shape[2], rows,
                                 torch.cuda.get_device_properties(dev).multi_processor_count)
            tail = main + 1 if main is not None else 0
        elif causal and opts["tail"] == "auto" and opts["pipeline"].startswith("tma-ws"):
            tail = 1  # step 8: the heads dealt in groups, each group's tiles heaviest first
        code = _WG_FWD.encode(tile=opts["wg_tile"], pipeline=opts["pipeline"], tail=tail)
        _build.load("flash_wgmma_fwd").fwd(code, q, k, v, o, lse, counter, scale, causal)
    elif name == "flash_decode":
        _decode_forward(q, k, v, o, lse, causal, scale, opts)
    else:  # a variant of its own module: its one module with fwd, the options of its fields' names encoded
        module, code = _generic(variant, "fwd", opts)
        _build.load(module).fwd(code, q, k, v, o, lse, [], scale, causal)
    return o, lse


def _generic(variant: Variant, function: str, opts: dict[str, Any]) -> tuple[str, int]:
    """(module, option code) of a variant whose dispatch is not written out: the one kernel module of its
    ``kernels`` that exports ``function``, the code encoded from the resolved options named as its fields."""
    mods = [k for k in kernels_of(variant) if function in k.functions]
    if len(mods) != 1:  # pragma: no cover - registry and dispatch disagree
        raise AssertionError(f"{variant.name}: no dispatch written for {function}, and {len(mods)} of its kernel "
                             f"modules export it (one is needed)")
    k = mods[0]
    return k.module, k.encode(**{f.name: opts[f.name] for f in k.fields if f.name in opts})


def _backward(variant: Variant, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
              lse: torch.Tensor, g: torch.Tensor, causal: bool, scale: float,
              opts: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    B, H, N, D = q.shape
    dev = q.device
    dq = _alloc(q.shape, q.dtype, dev)
    dk, dv = (_alloc(k.shape, k.dtype, dev) for _ in range(2))
    if variant.materializes:
        _check_workspace(variant, B, H, N, dev, 2)
        P = torch.empty((B * H, N, N), dtype=torch.float32, device=dev)
        dP = torch.empty_like(P)
        module, kind = _MATERIALIZED[variant.name]
        _build.load(module).bwd(kind, q, k, v, o, lse, g, _NONE, _NONE, dq, dk, dv, [P, dP], scale, causal)
        return dq, dk, dv
    Dd = torch.empty((B, H, N), dtype=torch.float32, device=dev)
    if variant.name == "flash_wgmma" and (opts["bwd_pipeline"] == "tma-ws" or D == 256):
        # its dQ accumulator holds whole 128-row tiles (flash_wgmma_bwd.cu: dq_piece_offset; D = 256: 64-row ones)
        dq_acc = torch.empty(B * H * -(-N // 128) * 128 * D, dtype=torch.float32, device=dev)
    else:
        dq_acc = torch.empty(q.shape, dtype=torch.float32, device=dev)
    if variant.name == "flash_simt":
        _build.load("flash_simt").bwd(opts["block_size"], q, k, v, o, lse, g, Dd, dq_acc, dq, dk, dv, [], scale,
                                      causal)
    elif variant.name == "flash_mma":
        split = _group_split(opts["group_split"], B, H, k.shape[1], k.shape[2], causal, dev)
        ws = [torch.empty(k.shape, dtype=torch.float32, device=dev) for _ in range(2)] if split > 1 else []
        _build.load("flash_mma_bwd").bwd(_MMA_BWD.encode(tile=opts["bwd_tile"], group_split=split), q, k, v, o, lse,
                                         g, Dd, dq_acc, dq, dk, dv, ws, scale, causal)
    elif variant.name == "flash_wgmma":
        keys = _WG_BWD.constants["keys_d256"] if D == 256 else _BWD_KEYS
        split = _group_split(opts["group_split"], B, H, k.shape[1], k.shape[2], causal, dev, keys)
        ws = [torch.empty(k.shape, dtype=torch.float32, device=dev) for _ in range(2)] if split > 1 else []
        code = _WG_BWD.encode(tile=opts["wg_bwd_tile"], pipeline=opts["bwd_pipeline"], group_split=split)
        _build.load("flash_wgmma_bwd").bwd(code, q, k, v, o, lse, g, Dd, dq_acc, dq, dk, dv, ws, scale, causal)
    else:  # a variant of its own module (see _generic)
        module, code = _generic(variant, "bwd", opts)
        _build.load(module).bwd(code, q, k, v, o, lse, g, Dd, dq_acc, dq, dk, dv, [], scale, causal)
    return dq, dk, dv


#: keys per backward block of flash_mma and flash_wgmma (the table's constant "keys" of both; kBwdKeys, kWgBwdKeys)
_BWD_KEYS = _MMA_BWD.constants["keys"]
assert _BWD_KEYS == _WG_BWD.constants["keys"], "_group_split counts both backwards' key blocks alike"


def _group_split(choice: Any, B: int, H: int, Hkv: int, Nk: int, causal: bool, dev: torch.device,
                 keys: int = _BWD_KEYS) -> int:
    """Thread blocks per grouped-query group in flash_mma's and flash_wgmma's backward: ``choice`` if an int (it must divide
    H / Hkv), else the fewest divisors' worth that give 2 blocks per SM (4 when causal: key blocks near the
    end see few queries), a block owning ``keys`` keys."""
    G = H // Hkv
    if choice != "auto":  # validated in _prepare
        return choice
    blocks = -(-Nk // keys) * B * Hkv
    target = (4 if causal else 2) * torch.cuda.get_device_properties(dev).multi_processor_count
    return next((s for s in range(1, G + 1) if G % s == 0 and blocks * s >= target), G)


@functools.lru_cache(maxsize=256)
def _wg_tail_plan(heads: int, Nq: int, BM: int, sms: int) -> int | None:
    """flash_wgmma's persistent forward, tail "auto" (not causal): how many of each head's BM-row query blocks
    stay whole (the rest of the head's rows become tiles of BM - 64 rows, every head's handed out after all
    whole ones), or None to keep every block whole. The SMs take tiles in order as they free (a global
    counter): with equal tiles, the last round leaves SMs idle (at B*N = 16k, H = 16, 192 rows: 1365 blocks on
    132 SMs, 10.3 rounds run as 11). Each choice is list-scheduled over ``sms`` with a tile of k of the BM / 64
    warpgroups busy costing (k + 1) / (BM / 64 + 1) of a whole one (a tile streams every K/V tile whatever its
    rows: with (k + 1/2) / (BM / 64 + 1/2) the plan moved N = 1024's 64-row last blocks to the end, which
    measured 4 % slower on an H100), from no tail tiles to three rounds of them; the shortest schedule wins,
    fewer tail tiles on a tie."""
    nwg, tb = BM // 64, BM - 64
    n_qb = -(-Nq // BM)
    if tb <= 0 or heads <= 0 or Nq <= 0:
        return None

    def cost(rows: int) -> float:
        return (-(-rows // 64) + 1) / (nwg + 1)

    def makespan(m: int) -> float:
        clocks = [0.0] * sms
        for c in [cost(min(BM, Nq - j * BM)) for j in range(m)] * heads:
            heapq.heapreplace(clocks, clocks[0] + c)
        tail = [cost(min(tb, Nq - r)) for r in range(m * BM, Nq, tb)]
        for c in tail * heads:
            heapq.heapreplace(clocks, clocks[0] + c)
        return max(clocks)

    best, best_m = makespan(n_qb), n_qb
    for m in range(n_qb - 1, -1, -1):
        if heads * -(-(Nq - m * BM) // tb) > 3 * sms:
            break
        t = makespan(m)
        if t < best * (1 - 1e-3):
            best, best_m = t, m
    return None if best_m == n_qb else best_m


def _decode_mma(choice: str, rows: Any, H: int, Hkv: int, Nq: int, capability: tuple[int, int] | None,
                warpgroups: Any = "auto") -> str:
    """flash_decode's tensor-core instruction (option mma) on a GPU of compute ``capability`` (None: not known yet,
    only the options are checked): "wgmma" needs 9.0 and blocks of 64 rows or 128; 128-row blocks and a number of
    ``warpgroups`` need "wgmma"; 128 rows are two warpgroups; "auto" takes wgmma on 9.0 where a k/v head has more
    than 32 rows (H / Hkv x Nq; 64 before the blocks of two warpgroups over the keys: _decode_block), rows is 128 or
    warpgroups is given, else "mma.sync". Bad combinations are errors that say what is accepted."""
    hopper = capability is not None and tuple(capability) == (9, 0)
    if choice == "mma.sync" and (rows == 128 or warpgroups != "auto"):
        what = "rows=128 runs two warpgroups" if rows == 128 else f"warpgroups={warpgroups!r} counts the warpgroups"
        raise ValueError(f"flash_decode: {what} on wgmma; got mma='mma.sync'; accepted with mma='mma.sync': "
                         f"rows='auto', 16, 32 or 64 and warpgroups='auto'")
    if rows == 128 and warpgroups == 1:
        raise ValueError("flash_decode: rows=128 runs two warpgroups (64 rows each); got warpgroups=1; accepted with "
                         "rows=128: warpgroups='auto' or 2")
    if choice == "wgmma" or rows == 128 or warpgroups != "auto":
        if choice == "wgmma":
            why = "mma='wgmma'"
        elif rows == 128:
            why = "rows=128 (two warpgroups on wgmma)"
        else:
            why = f"warpgroups={warpgroups!r} (warpgroups on wgmma)"
        if capability is not None and not hopper:
            raise ValueError(f"flash_decode: {why} needs a GPU of compute capability 9.0 (Hopper: H100, H200; "
                             f"sm_90a instructions); this GPU is {capability[0]}.{capability[1]}; use mma='mma.sync' "
                             f"or 'auto' with rows 'auto', 16, 32 or 64 and warpgroups 'auto'")
        if rows not in ("auto", 64, 128):
            raise ValueError(f"flash_decode: {why} runs blocks of 64 rows (one warpgroup, or two over the keys) or "
                             f"128 (two over the rows); got rows={rows!r}; accepted with it: rows='auto', 64 or 128")
        return "wgmma"
    if choice == "auto":
        return "wgmma" if hopper and rows in ("auto", 64) and H // Hkv * Nq > 32 else "mma.sync"
    return choice


def _decode_block(rows: Any, warpgroups: Any, mma: str, R: int, tiles: int) -> tuple[int, int]:
    """flash_decode's block: (rows, consumer warpgroups; 0 on mma.sync) for the choices of rows and warpgroups,
    where a k/v head has ``R`` rows and a row sees ``tiles`` 64-key tiles. mma.sync: rows "auto" 16 for up to 32
    rows (two 16-row blocks beat one of 32), else 64. wgmma: 128 rows are two warpgroups that split the rows; rows
    "auto" takes 128 where a row sees 64 or more tiles (4096 keys) and a k/v head has more than 128 rows or 33-64
    (there the 128-row block, half of it padding, measured level with or faster than 64 rows over two
    warpgroups), else 64; at 64 rows warpgroups "auto" is 2 (the two split the keys) where a k/v head has 33-128
    rows, else 1. At 32 rows or fewer mma.sync's 16-row blocks are faster than either wgmma block (the design
    notes of docs/kernels.md)."""
    if mma != "wgmma":
        return ((64 if R > 32 else 16) if rows == "auto" else rows), 0
    if rows == "auto":
        long = tiles >= _DECODE_WG2_MIN_TILES
        rows = 128 if warpgroups != 1 and long and (R > 128 or 32 < R <= 64) else 64
    if rows == 128:
        return 128, 2
    if warpgroups == "auto":
        warpgroups = 2 if 32 < R <= 128 else 1
    return 64, int(warpgroups)


def _decode_block_choice(rows: int, warpgroups: int) -> str:
    """flash_decode's block as its option field names it (variants.py): rows<rows>, or rows64-split-keys for 64 rows
    of two warpgroups that split the keys (flash_decode_wgmma.cu)."""
    return "rows64-split-keys" if rows == 64 and warpgroups == 2 else f"rows{rows}"


def _decode_code(rows: int, warpgroups: int) -> int:
    """flash_decode's option code of a block (the field block, bits 0..7)."""
    return _DECODE.encode(block=_decode_block_choice(rows, warpgroups))


def _decode_tiles(Nk: int, Nq: int, causal: bool) -> int:
    """The 64-key tiles a row of flash_decode can see: all of Nk, or (causal, top-left) min(Nk, Nq)."""
    return -(-(min(Nk, Nq) if causal else Nk) // _DECODE_KEYS)


def _decode_stages(D: int, rows: int, R: int) -> int:
    """The K/V ring's stages of flash_decode's blocks of ``rows`` rows at head dim ``D`` where a k/v head has ``R``
    rows (flash_decode.cu: decode_stages, decode_rows)."""
    return _DECODE.constants["stages_d128_many_rows"] if D == 128 and rows == 64 and R > 64 else _DECODE_STAGES[D]


def _decode_wg_smem(D: int) -> int:
    """Dynamic shared memory of a flash_decode_wgmma block of one warpgroup (64 rows) at head dim ``D``
    (flash_decode_wgmma.cu: decode_wg_stages, decode_wg_smem): the K/V ring (3 stages at D = 128, 4 at D = 64), the
    Q tile and 1 KB of alignment slack. (A block of two warpgroups is one an SM by its registers: _decode_plan.)"""
    c = _DECODE_WG.constants
    stages = c["stages_d128"] if D == 128 else c["stages_d64"]
    return stages * 2 * c["keys"] * D * 2 + 64 * D * 2 + c["smem_slack"]


def _decode_plan(rows: Any, splits: Any, B: int, H: int, Hkv: int, Nq: int, Nk: int, D: int, causal: bool,
                 sms: int, smem_per_sm: int, mma: str = "mma.sync", warpgroups: Any = "auto") -> tuple[int, int]:
    """flash_decode's (rows per block, key splits) on a GPU of ``sms`` SMs of ``smem_per_sm`` bytes of shared
    memory. rows and warpgroups "auto": _decode_block (on wgmma, 128-row blocks of two warpgroups from 4096 keys
    where a k/v head has more than 64 rows: below 4096 keys 64-row blocks give twice the blocks and are faster).
    splits "auto": as many as give every SM one block, in one
    wave (with more than 64 rows a k/v head, the tensor work's, as many blocks as its shared memory holds), but
    no more than leave 4 key tiles (256 keys) a split (the last split may hold fewer). Where a k/v head's rows
    take several blocks (17-64 rows: two 16-row blocks), those blocks read the same K/V, so half the SMs' loads go
    to DRAM: then as many splits as give every SM one block of distinct K/V, while a split keeps 16 tiles (1024
    keys). Either way at most one
    split per 64-key tile of the keys a row can see (min(Nk, Nq) when causal), dealt out so that no split is
    empty. (Tuned by timing every rows x splits setting interleaved on the same inputs: while a block streams K/V
    for few rows, partial results and their merge cost more than a second block per SM buys.) ``mma`` "wgmma"
    counts its own shared memory
    (_decode_wg_smem: its ring, a Q tile and 1 KB of alignment slack a block); its blocks of two warpgroups (128
    rows, or 64 with ``warpgroups`` 2) are one an SM at any D (their registers and the 6-stage ring of the 64-row
    ones), whatever their shared memory would allow."""
    R, tiles = H // Hkv * Nq, _decode_tiles(Nk, Nq, causal)
    rows, wgs = _decode_block(rows, warpgroups, mma, R, tiles)
    if splits == "auto":
        per_sm = 1
        if R > 64 and wgs != 2:  # two warpgroups: 288 threads of 110-156 registers, one an SM
            if mma == "wgmma":
                smem = _decode_wg_smem(D)
            else:
                smem = _decode_stages(D, rows, R) * 2 * _DECODE_KEYS * D * 2  # decode_smem in decode.cuh
            per_sm = max(1, smem_per_sm // (smem + _SMEM_RESERVED_PER_BLOCK))
        row_blocks = -(-R // rows)
        splits = max(1, min(per_sm * sms // (row_blocks * B * Hkv), tiles // _DECODE_MIN_TILES_PER_SPLIT))
        if row_blocks > 1 and R <= 64:
            # the row blocks of a k/v head read the same K/V (L2 serves all but one): count the head once, so that
            # the distinct K/V streams fill the SMs, while each split keeps 1024 keys
            splits = max(splits, min(sms // (B * Hkv), tiles // _DECODE_MIN_TILES_PER_DUP_SPLIT))
    per_split = -(-tiles // min(splits, tiles))
    return rows, -(-tiles // per_split)


def _decode_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                    causal: bool, scale: float, opts: dict[str, Any]) -> None:
    """flash_decode into (o, lse), with fp32 workspaces for the splits' partial O and LSE when there are several."""
    if scale < 0:  # flash_mma's softmax convention (running max of raw scores): scale > 0
        q, scale = -q, -scale
    B, H, Nq, D = q.shape
    props = torch.cuda.get_device_properties(q.device)
    Hkv, Nk = k.shape[1], k.shape[2]
    mma = _decode_mma(opts["mma"], opts["rows"], H, Hkv, Nq, (props.major, props.minor), opts["warpgroups"])
    # the block once (the plan, given it resolved, keeps it)
    rows, wgs = _decode_block(opts["rows"], opts["warpgroups"], mma, H // Hkv * Nq, _decode_tiles(Nk, Nq, causal))
    _, splits = _decode_plan(rows, opts["splits"], B, H, Hkv, Nq, Nk, D, causal, props.multi_processor_count,
                             props.shared_memory_per_multiprocessor, mma, wgs)
    ws = [_alloc((splits, B * H * Nq, D), torch.float32, q.device),
          _alloc((splits, B * H * Nq), torch.float32, q.device)] if splits > 1 else []
    contract = _DECODE_WG if mma == "wgmma" else _DECODE
    code = contract.encode(block=_decode_block_choice(rows, wgs), splits=splits)
    _build.load(contract.module).fwd(code, q, k, v, o, lse, ws, scale, causal)


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, variant: str = "flash_mma", causal: bool = False,
            scale: float | None = None, **options: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a variant's forward pass on q [B, H, Nq, D] and k, v [B, Hkv, Nk, D]: returns (out [B, H, Nq, D],
    lse [B, H, Nq] fp32, natural log). Hkv < H is grouped-query attention (query head h reads k/v head
    h // (H // Hkv)); causal masking is aligned top-left, as scaled_dot_product_attention's is_causal."""
    var, (q, k, v), sc, opts = _prepare(variant, ("q", "k", "v"), (q, k, v), causal, scale, options, "forward")
    return _forward(var, q, k, v, causal, sc, opts)


def backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
             grad_out: torch.Tensor, *, variant: str = "flash_mma", causal: bool = False, scale: float | None = None,
             **options: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run a variant's backward pass from the forward's (out, lse): returns (dq, dk, dv), dk and dv shaped
    like k and v (summed over the query heads that share them)."""
    var, (q, k, v, out, grad_out), sc, opts = _prepare(
        variant, ("q", "k", "v", "out", "grad_out"), (q, k, v, out, grad_out), causal, scale, options, "backward")
    B, H, N, _ = q.shape
    if not isinstance(lse, torch.Tensor) or tuple(lse.shape) != (B, H, N) or lse.dtype != torch.float32:
        got = f"{tuple(lse.shape)} {lse.dtype}" if isinstance(lse, torch.Tensor) else type(lse).__name__
        raise ValueError(f"lse must be the forward's fp32 [B, H, N] = {(B, H, N)} tensor; got {got}")
    if lse.device != q.device:
        raise ValueError(f"lse is on {lse.device} but q is on {q.device}")
    return _backward(var, q, k, v, out, lse.contiguous(), grad_out, causal, sc, opts)


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, variant: Variant, causal: bool,
                scale: float, opts: dict[str, Any]) -> torch.Tensor:
        o, lse = _forward(variant, q, k, v, causal, scale, opts)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.cfg = (variant, causal, scale, opts)
        return o

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        q, k, v, o, lse = ctx.saved_tensors
        variant, causal, scale, opts = ctx.cfg
        dq, dk, dv = _backward(variant, q, k, v, o, lse, grad_out.contiguous(), causal, scale, opts)
        return dq, dk, dv, None, None, None, None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, variant: str = "flash_mma",
              causal: bool = False, scale: float | None = None, **options: Any) -> torch.Tensor:
    """softmax(scale * q k^T) v for CUDA tensors shaped like torch.nn.functional.scaled_dot_product_attention's:
    q [B, H, Nq, D], k and v [B, Hkv, Nk, D] (Hkv < H: grouped-query attention, as SDPA's enable_gqa=True;
    causal aligned top-left, as its is_causal); ``out.backward(g)`` runs the variant's backward.

    Non-contiguous inputs, and ones that do not start on a 16-byte boundary, are copied first. ``options`` are
    the variant's own (see flash_kernels.VARIANTS[variant].options)."""
    var, (q, k, v), sc, opts = _prepare(variant, ("q", "k", "v"), (q, k, v), causal, scale, options, "forward")
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if needs_grad and "backward" not in var.passes:
        have = ", ".join(_variants_where(lambda v: "backward" in v.passes))
        raise ValueError(f"{var.name} has no backward pass, but an input requires grad; use torch.no_grad() or "
                         f"one of: {have}")
    D = q.shape[-1]
    if needs_grad and D not in var.head_dims_of("backward"):
        raise ValueError(f"{var.name}'s backward does not support head dim {D} (accepted: "
                         f"{var.head_dims_of('backward')}), but an input requires grad; use torch.no_grad() for its "
                         f"forward")
    return _Attention.apply(q, k, v, var, causal, sc, opts)
