"""The one registry of attention kernel variants.

Every entry point (the Python API, the benchmark, the GPU tests, and later the workload and the
notebooks) takes variant names from :data:`VARIANTS`. This module imports neither torch nor CUDA,
so the analysis side can read it on a machine without a GPU.

A variant names its kernel modules (``kernels``): the built-in ones of :data:`flash_kernels.variants.KERNELS` by
name, or a :class:`~flash_kernels.variants.Kernel` contract written in its entry (a new variant's own .cu and
binding: docs/kernels.md, "Adding a variant"). :data:`KERNELS` is every module of both kinds; the build
(sources.MODULES) and the generated CUDA header (csrc/option_codes.h) are made from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .variants import ARCH_CAPABILITY, Kernel
from .variants import KERNELS as BUILTIN_KERNELS

DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float32")
PASSES: tuple[str, ...] = ("forward", "backward")


@dataclass(frozen=True)
class Option:
    """A variant-specific keyword option, e.g. ``block_size`` or ``tile``."""

    name: str
    choices: tuple[Any, ...]
    doc: str
    #: default choice per head dim (the fastest measured; see README)
    default: Mapping[int, Any]
    #: head dims a choice supports; a choice not listed supports every head dim of the variant
    head_dims: Mapping[Any, tuple[int, ...]] = field(default_factory=dict)

    def resolve(self, value: Any, head_dim: int, variant: str) -> Any:
        if value is None:
            return self.default[head_dim]
        if value not in self.choices:
            raise ValueError(
                f"{variant}: option {self.name}={value!r} is not supported; accepted: "
                f"{', '.join(repr(c) for c in self.choices)} ({self.doc})"
            )
        allowed = self.head_dims.get(value)
        if allowed is not None and head_dim not in allowed:
            here = [c for c in self.choices if head_dim in self.head_dims.get(c, (head_dim,))]
            raise ValueError(
                f"{variant}: option {self.name}={value!r} supports head dim {allowed}, not {head_dim}; at head dim "
                f"{head_dim} it takes {', '.join(repr(c) for c in here)} (default {self.default.get(head_dim)!r}, "
                "or leave it out)"
            )
        return value


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    dtypes: tuple[str, ...]
    head_dims: tuple[int, ...]
    passes: tuple[str, ...]
    causal: bool
    options: Mapping[str, Option] = field(default_factory=dict)
    #: materializes the B*H*N*N fp32 score matrix (one for forward, two for backward)
    materializes: bool = False
    #: what the backward / forward pass reuses, if anything (e.g. tiled_uncoalesced forward = tiled)
    forward_of: str | None = None
    #: takes k/v with fewer heads than q (grouped-query / multi-query attention, H % Hkv == 0)
    grouped_query: bool = False
    #: takes k/v with another sequence length than q (cross attention, KV-cache decode)
    cross: bool = False
    #: built for an architecture-specific target (e.g. "sm_90a"): runs only on GPUs of that compute
    #: capability (sources.ARCH_CAPABILITY); see :func:`unavailable_reason`
    arch: str | None = None
    #: its kernel modules: names of flash_kernels.variants.KERNELS entries, or contracts of its own
    #: (:class:`~flash_kernels.variants.Kernel`). A variant whose _ops dispatch is not written out runs the one
    #: module that exports the pass (``fwd`` / ``bwd``), its option code encoded from the options of its fields' names.
    kernels: tuple[Kernel | str, ...] = ()
    #: a pass's head dims where they are fewer than head_dims (a variant whose backward takes fewer than its forward)
    pass_head_dims: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def head_dims_of(self, pass_: str) -> tuple[int, ...]:
        """The head dims ``pass_`` ("forward" / "backward") takes; none for a pass the variant does not have."""
        if pass_ not in self.passes:
            return ()
        return tuple(self.pass_head_dims.get(pass_, self.head_dims))

    def resolve_options(self, options: Mapping[str, Any], head_dim: int) -> dict[str, Any]:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            accepted = ", ".join(sorted(self.options)) or "none"
            raise ValueError(f"{self.name}: unknown option(s) {', '.join(unknown)}; accepted: {accepted}")
        return {k: opt.resolve(options.get(k), head_dim, self.name) for k, opt in self.options.items()}


_ALL = ("float16", "bfloat16", "float32")
_HD = (64, 128)
#: the backward's grouped-query split, shared by flash_mma and flash_wgmma (both read it from option code >> 8)
_GROUP_SPLIT = Option(
    "group_split", ("auto", 1, 2, 4, 8, 16, 32),
    "backward, grouped-query attention: the H/Hkv query heads that share a key block are split over this many "
    "thread blocks (dK, dV summed by fp32 atomics; must divide H/Hkv); auto: the fewest that give 2 blocks per SM "
    "(4 when causal)",
    default={64: "auto", 128: "auto", 256: "auto"},
)
#: flash_wgmma's head dim 256: its forward on the 128x64 tile of the one-tile-per-block warp-specialised pipelines
_WG_D256 = (64, 128)

#: the CUDA-core flash tile (csrc/simt.cuh), shared by flash_fa1 and flash_simt
_SIMT_BLOCK_SIZE = Option(
    "block_size", (4, 8, 16, 32),
    "Br = Bc = rows per Q block = keys per K/V tile (one warp per row)",
    default={64: 16, 128: 16},
)

VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant(
            "naive",
            "textbook: S=QK^T and P=softmax(S) written to global memory, O=PV; one thread per output, "
            "no shared memory",
            _ALL, _HD, PASSES, True, materializes=True, kernels=("naive",),
        ),
        Variant(
            "tiled",
            "the same passes as naive, each matrix product a 32x32 shared-memory tiled GEMM with "
            "coalesced loads; S/P still materialized",
            _ALL, _HD, PASSES, True, materializes=True, kernels=("tiled",),
        ),
        Variant(
            "tiled_uncoalesced",
            "tiled backward with consecutive threads walking the strided dimension (uncoalesced "
            "global loads, the first-attempt mapping); forward = tiled",
            _ALL, _HD, PASSES, True, materializes=True, forward_of="tiled", kernels=("tiled",),
        ),
        Variant(
            "flash_fa1",
            "FlashAttention-1 loop order on flash_simt's tile: outer loop over K/V tiles, inner over Q "
            "blocks, O/m/l rescaled in global memory; CUDA cores",
            _ALL, _HD, ("forward",), True, grouped_query=True, cross=True, kernels=("flash_fa1",),
            options={"block_size": _SIMT_BLOCK_SIZE},
        ),
        Variant(
            "flash_simt",
            "FlashAttention-2 on CUDA cores: online softmax in registers, fp32 accumulation, LSE saved; "
            "backward recomputes P from LSE",
            _ALL, _HD, PASSES, True, grouped_query=True, cross=True, kernels=("flash_simt",),
            options={"block_size": _SIMT_BLOCK_SIZE},
        ),
        Variant(
            "flash_mma",
            "FlashAttention-2 on tensor cores: mma.sync m16n8k16, ldmatrix, swizzled shared memory, "
            "cp.async double buffering, P in registers",
            ("float16", "bfloat16"), _HD, PASSES, True, grouped_query=True, cross=True,
            kernels=("flash_mma_fwd", "flash_mma_bwd"),
            options={
                "tile": Option(
                    "tile", ("128x64", "128x32", "64x64"),
                    "forward tile: query rows x keys per K/V tile (4 warps; 32 rows per warp for BR=128, "
                    "16 for BR=64; at D=128 with 32 rows per warp, Q is re-read from shared memory per k-step)",
                    default={64: "128x64", 128: "128x64"},
                ),
                "bwd_tile": Option(
                    "bwd_tile", ("64x128", "128x128"),
                    "backward tile: query rows per step x keys per block (8 warps)",
                    default={64: "128x128", 128: "64x128"},
                    head_dims={"128x128": (64,)},
                ),
                "group_split": _GROUP_SPLIT,
            },
        ),
        Variant(
            "flash_wgmma",
            "FlashAttention-2 loop on Hopper warpgroup tensor cores (sm_90a): wgmma with Q and K from "
            "128B-swizzled shared memory, P from registers, V read transposed; one warpgroup per 64 query "
            "rows; K/V by cp.async double buffering or by TMA (option pipeline); backward: two warpgroups "
            "own 128 keys with dK, dV in registers, every product a wgmma (P^T, dS^T as register A "
            "operands), dQ = dS K from dS^T in shared memory, added by fp32 atomics or (bwd_pipeline tma-ws, with a "
            "TMA producer warpgroup) by the copy engine's bulk reduce-add; at D = 256 the two warpgroups share 64 "
            "keys and split the head dim",
            ("float16", "bfloat16"), (64, 128, 256), PASSES, True, grouped_query=True, cross=True, arch="sm_90a",
            kernels=("flash_wgmma_fwd", "flash_wgmma_bwd"),
            options={
                "wg_tile": Option(
                    "wg_tile", ("128x128", "128x64", "192x128", "192x64"),
                    "query rows x keys per K/V tile (one consumer warpgroup per 64 rows: 2 or 3); D = 256: 128x64 "
                    "(O takes 128 registers of a consumer thread, a K/V stage 32 KB)",
                    default={64: "192x128", 128: "192x128", 256: "128x64"},
                    head_dims={"128x128": _WG_D256, "192x128": _WG_D256, "192x64": _WG_D256},
                ),
                "pipeline": Option(
                    "pipeline", ("cp.async", "tma", "tma-ws", "tma-ws-overlap", "tma-ws-pingpong", "tma-ws-persistent",
                                 "tma-ws-persistent-pingpong"),
                    "how K/V reach shared memory: cp.async = every thread copies, double-buffered, block "
                    "barriers (step 1); tma = the copy engine (cp.async.bulk.tensor) completing on mbarriers, "
                    "issued by one thread (step 2); tma-ws = a producer warpgroup issuing the copies and "
                    "consumer warpgroups computing, full/empty mbarriers per stage, setmaxnreg (step 3); "
                    "tma-ws-overlap = tma-ws with the softmax overlapping O += P V in each warpgroup; tma-ws-pingpong = "
                    "tma-ws-overlap with the consumer warpgroups taking turns to issue their products (named "
                    "barriers), one's softmax under the other's GEMMs; tma-ws-persistent = tma-ws-overlap with one "
                    "block per SM looping over work tiles handed out by a global counter (the K/V ring running on "
                    "from one tile to the next; two Q buffers, or one where that buys a third K/V stage); "
                    "tma-ws-persistent-pingpong = both. D = 256: tma-ws, tma-ws-overlap, tma-ws-pingpong",
                    default={64: "tma-ws-persistent-pingpong", 128: "tma-ws-persistent-pingpong",
                             256: "tma-ws-pingpong"},
                    head_dims={"cp.async": _WG_D256, "tma": _WG_D256, "tma-ws-persistent": _WG_D256,
                               "tma-ws-persistent-pingpong": _WG_D256},
                ),
                "tail": Option(
                    "tail", ("none", "auto"),
                    "how the last work tiles are balanced over the SMs. Not causal, the persistent pipelines: "
                    "none = every tile the tile's query rows; auto = the host list-schedules the tiles over the SMs "
                    "and cuts the last query blocks of each head into tiles of 64 rows fewer, handed out after "
                    "every whole one, where that shortens the schedule (step 7). Causal, the tma-ws pipelines: "
                    "none = each head's query blocks heaviest first, one head after another; auto = the heads in "
                    "groups whose K and V fit in 16 MiB of L2, each group's tiles heaviest first across its heads, "
                    "so that the last tiles handed out are light ones (step 8). cp.async and tma ignore it",
                    default={64: "auto", 128: "auto", 256: "auto"},
                ),
                "wg_bwd_tile": Option(
                    "wg_bwd_tile", ("64x128", "128x128", "64x64"),
                    "backward tile: query rows per step x keys per block (64x128, 128x128: two warpgroups of 64 "
                    "keys, each with dK, dV of its keys over the whole head dim; 64x64, D = 256: both warpgroups "
                    "over the block's 64 keys, each with dK, dV of half the head dim, P^T and dS^T in shared memory)",
                    default={64: "128x128", 128: "64x128", 256: "64x64"},
                    head_dims={"64x128": _HD, "128x128": (64,), "64x64": (256,)},
                ),
                "bwd_pipeline": Option(
                    "bwd_pipeline", ("cp.async", "tma-ws"),
                    "how the backward's query blocks reach shared memory and dQ leaves it: cp.async = every "
                    "thread copies Q, dO, LSE, Dd double-buffered and adds dQ by red.global.add (step 1); tma-ws = "
                    "a producer warpgroup loads them (TMA, cp.async on an mbarrier ring) for two consumer "
                    "warpgroups (setmaxnreg), each of which adds its dQ piece from shared memory with one bulk "
                    "reduce-add of the copy engine (step 2). D = 256: cp.async",
                    default={64: "tma-ws", 128: "tma-ws", 256: "cp.async"},
                    head_dims={"tma-ws": _HD},
                ),
                "group_split": _GROUP_SPLIT,
            },
        ),
        Variant(
            "flash_decode",
            "flash-decoding on flash_mma's tensor-core tile (mma.sync; on Hopper, wgmma where a k/v head has more "
            "than 32 rows, two warpgroups a block), for a KV cache (few queries, many keys): the query "
            "heads that share a k/v head packed into one block's rows, the keys split over blocks and the "
            "splits' partial O merged by their LSE in a second kernel, K and V streamed through a 2-4 stage "
            "cp.async ring (two warpgroups: a TMA ring filled by a producer warp); forward only",
            ("float16", "bfloat16"), _HD, ("forward",), True, grouped_query=True, cross=True,
            kernels=("flash_decode", "flash_decode_wgmma"),
            options={
                "rows": Option(
                    "rows", ("auto", 16, 32, 64, 128),
                    "rows per block, of the H/Hkv x Nq (query head, query) rows that share a k/v head: 16 = 4 warps "
                    "over the keys of each tile, 32 = 2 x 2, 64 = 4 warps over the rows (one warpgroup on wgmma), "
                    "128 = two warpgroups on wgmma that share each K/V tile, which a producer warp loads by TMA (Hopper only); auto: 16 for up to 32 "
                    "rows (two 16-row blocks), else 64; with mma wgmma 128 where a row sees 64 or more 64-key tiles (about "
                    "4096 keys) and a k/v head has 33-64 or more than 128 rows, else 64",
                    default={64: "auto", 128: "auto"},
                ),
                "splits": Option(
                    "splits", ("auto", 1, 2, 4, 8, 16, 32, 64),
                    "blocks the keys are split over (each writes a partial O and LSE, a second kernel merges "
                    "them), at most one per 64-key tile; auto: one block per SM in one wave (with more than 64 "
                    "rows a k/v head: as many blocks as an SM holds), about 256 keys or more a split",
                    default={64: "auto", 128: "auto"},
                ),
                "mma": Option(
                    "mma", ("auto", "mma.sync", "wgmma"),
                    "the tensor-core instruction of the products: mma.sync = four warps each over the block's tiles "
                    "(any GPU of compute capability 8.0 or later); wgmma = Hopper's warpgroup instruction, each 64 rows "
                    "of a block in one product that reads each K/V tile from shared memory once (compute capability "
                    "9.0, rows auto, 64 or 128); auto: wgmma on a 9.0 GPU where a k/v head has more than 32 rows "
                    "(rows auto or 64), rows is 128 or warpgroups is given, else mma.sync",
                    default={64: "auto", 128: "auto"},
                ),
                "warpgroups": Option(
                    "warpgroups", ("auto", 1, 2),
                    "consumer warpgroups of a wgmma block (Hopper only; given, it takes wgmma): 1 = one warpgroup "
                    "over a 64-row block, K/V copied by its own threads (cp.async); 2 = two warpgroups fed by a "
                    "producer warp over TMA, which at rows 128 take 64 rows each and both read every K/V tile, and at "
                    "rows 64 both take the block's rows and every other K/V tile each, their parts added at the end "
                    "of the block; auto: 2 at rows 128, and at rows 64 where a k/v head has 33-128 rows, else 1",
                    default={64: "auto", 128: "auto"},
                ),
            },
        ),
    ]
}


def kernels_of(variant: Variant | str) -> tuple[Kernel, ...]:
    """A variant's kernel modules' contracts (its ``kernels``, names looked up in flash_kernels.variants.KERNELS)."""
    var = get_variant(variant) if isinstance(variant, str) else variant
    return tuple(BUILTIN_KERNELS[k] if isinstance(k, str) else k for k in var.kernels)


def engine(variant: Variant | str) -> str:
    """What computes a variant's products, in a word: "tensor cores" where a kernel module of it runs on them, else
    "CUDA cores" (from its modules' contracts)."""
    return "tensor cores" if any(k.engine.startswith("tensor cores") for k in kernels_of(variant)) else "CUDA cores"


def _all_kernels() -> dict[str, Kernel]:
    out = dict(BUILTIN_KERNELS)
    for var in VARIANTS.values():
        unknown = [k for k in var.kernels if isinstance(k, str) and k not in BUILTIN_KERNELS]
        if unknown:
            raise ValueError(f"variant {var.name}: no kernel module {', '.join(unknown)} in flash_kernels.variants.KERNELS")
        for k in var.kernels:
            if isinstance(k, Kernel):
                if out.get(k.module, k) != k:
                    raise ValueError(f"variant {var.name}: a second contract for kernel module {k.module}")
                out[k.module] = k
    return out


#: every kernel module: the built-in ones (flash_kernels.variants.KERNELS), then those a variant's entry declares
KERNELS: dict[str, Kernel] = _all_kernels()


def unavailable_reason(variant: Variant | str, capability: tuple[int, int] | None) -> str | None:
    """Why ``variant`` cannot run on a GPU of compute ``capability`` (major, minor), or None when it
    can. ``capability`` None (no GPU known) makes no claim: None."""
    var = get_variant(variant) if isinstance(variant, str) else variant
    if var.arch is None or capability is None:
        return None
    need = ARCH_CAPABILITY[var.arch]
    if tuple(capability) == need:
        return None
    return (f"{var.name} needs a GPU of compute capability {need[0]}.{need[1]} (Hopper: H100, H200; its kernels "
            f"are built for {var.arch}, whose instructions run on no other GPU); this GPU is "
            f"{capability[0]}.{capability[1]}")


def get_variant(name: str) -> Variant:
    """Look a variant up by name; unknown names are errors that list the known ones."""
    if not isinstance(name, str) or name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; known variants: {', '.join(VARIANTS)}")
    return VARIANTS[name]


def describe() -> list[dict[str, Any]]:
    """One plain dict per variant (for tables, manifests and notebooks)."""
    return [
        {
            "variant": v.name,
            "description": v.description,
            "dtypes": ",".join(v.dtypes),
            "head_dims": ",".join(map(str, v.head_dims)),
            "passes": ",".join(v.passes),
            "causal": v.causal,
            "grouped_query": v.grouped_query,
            "cross": v.cross,
            "arch": v.arch or "",
            "options": "; ".join(f"{o.name} in {list(o.choices)}" for o in v.options.values()),
        }
        for v in VARIANTS.values()
    ]
