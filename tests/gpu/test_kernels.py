"""Every variant x dtype x head dim x causal x N against the fp64 reference, outputs poisoned."""

from __future__ import annotations

import threading

import pytest
import torch

import flash_kernels as fk
from flash_kernels.reference import reference_backward, reference_forward
from flash_kernels.sources import unexpected_spills
from flash_kernels.testing import TOLERANCES, error_metrics, poisoned_outputs, random_attention_inputs, random_qkv

SEQ_LENS = (1, 17, 100, 128, 1000, 4096)
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
CAPABILITY = torch.cuda.get_device_capability() if torch.cuda.is_available() else None


@pytest.fixture(autouse=True)
def _skip_variants_this_gpu_cannot_run(request: pytest.FixtureRequest) -> None:
    """A test of a variant built for another GPU architecture (flash_wgmma: sm_90a, compute
    capability 9.0 only) is skipped with the registry's reason."""
    callspec = getattr(request.node, "callspec", None)
    name = callspec.params.get("variant") if callspec is not None else None
    why = fk.unavailable_reason(name, CAPABILITY) if name is not None else None
    if why is not None:
        pytest.skip(why)


def _shape(N: int) -> tuple[int, int]:
    # B, H: several heads for short sequences, fewer for long ones (bounds the fp64 reference)
    return (2, 3) if N <= 1000 else (1, 2)


def _cases():
    for name, var in fk.VARIANTS.items():
        for dtype in var.dtypes:
            for D in var.head_dims:
                for causal in (False, True):
                    for N in SEQ_LENS:
                        yield pytest.param(name, dtype, D, causal, N, id=f"{name}-{dtype}-D{D}-{'causal' if causal else 'full'}-N{N}")


def _assert_close(what: str, out: torch.Tensor, ref: torch.Tensor, rel_l2: float, max_rel: float) -> None:
    m = error_metrics(out, ref)
    assert m["nonfinite"] == 0, f"{what}: {m['nonfinite']} non-finite elements (unwritten outputs are NaN-poisoned)"
    assert m["rel_l2"] <= rel_l2 and m["max_rel"] <= max_rel, f"{what}: {m} exceeds rel_l2<={rel_l2}, max_rel<={max_rel}"


def _forward_checked(variant: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                     tol: dict[str, float], **options: object) -> tuple[torch.Tensor, torch.Tensor]:
    """The variant's forward (with its ``options``) on poisoned outputs, O and LSE checked against the fp64
    reference."""
    ref_o, ref_lse = reference_forward(q, k, v, causal=causal)
    with poisoned_outputs():
        o, lse = fk.forward(q, k, v, variant=variant, causal=causal, **options)
    torch.cuda.synchronize()
    _assert_close("O", o, ref_o, tol["out_rel_l2"], tol["out_max_rel"])
    lse_err = (lse.double() - ref_lse).abs().max().item()
    assert lse_err <= tol["lse_abs"], f"LSE max abs error {lse_err} > {tol['lse_abs']}"
    return o, lse


@pytest.mark.parametrize("variant,dtype,D,causal,N", list(_cases()))
def test_against_reference(variant: str, dtype: str, D: int, causal: bool, N: int) -> None:
    B, H = _shape(N)
    tol = TOLERANCES[dtype]
    q, k, v, g = random_qkv(B, H, N, D, DTYPES[dtype], seed=N * 7 + D, n=4)
    o, lse = _forward_checked(variant, q, k, v, causal, tol)
    if D not in fk.VARIANTS[variant].head_dims_of("backward"):  # forward only (or not at this head dim)
        return
    ref_grads = reference_backward(q, k, v, g, causal=causal)
    with poisoned_outputs():
        grads = fk.backward(q, k, v, o, lse, g, variant=variant, causal=causal)
    torch.cuda.synchronize()
    for name, got, ref in zip(("dQ", "dK", "dV"), grads, ref_grads, strict=False):
        _assert_close(name, got, ref, tol["grad_rel_l2"], tol["grad_max_rel"])


def _option_cases():
    for name, var in fk.VARIANTS.items():
        for opt in var.options.values():
            if opt.name == "group_split":  # needs grouped-query heads: test_flash_mma_group_split
                continue
            for choice in opt.choices:
                for D in opt.head_dims.get(choice, var.head_dims):
                    yield pytest.param(name, opt.name, choice, D, id=f"{name}-{opt.name}={choice}-D{D}")


@pytest.mark.parametrize("variant,option,choice,D", list(_option_cases()))
@pytest.mark.parametrize("causal", [False, True])
def test_every_option(variant: str, option: str, choice: object, D: int, causal: bool) -> None:
    """Every tile shape / block size, at a size that is not a multiple of any tile."""
    N = 333
    dtype = "float16"
    tol = TOLERANCES[dtype]
    q, k, v, g = random_qkv(2, 2, N, D, torch.float16, seed=11, n=4)
    ref_o, _ = reference_forward(q, k, v, causal=causal)
    with poisoned_outputs():
        o, lse = fk.forward(q, k, v, variant=variant, causal=causal, **{option: choice})
    _assert_close("O", o, ref_o, tol["out_rel_l2"], tol["out_max_rel"])
    if D not in fk.VARIANTS[variant].head_dims_of("backward"):  # forward only (or not at this head dim)
        return
    with poisoned_outputs():
        grads = fk.backward(q, k, v, o, lse, g, variant=variant, causal=causal, **{option: choice})
    for name, got, ref in zip(("dQ", "dK", "dV"), grads, reference_backward(q, k, v, g, causal=causal), strict=False):
        _assert_close(name, got, ref, tol["grad_rel_l2"], tol["grad_max_rel"])


@pytest.mark.parametrize("variant,D", [(n, D) for n, v in fk.VARIANTS.items() if "backward" in v.passes
                                       for D in sorted({64, max(v.head_dims_of("backward"))})])
def test_autograd_matches_raw_passes(variant: str, D: int) -> None:
    """fk.attention's autograd is the raw passes, at D = 64 and at the largest head dim the backward takes."""
    q, k, v, g = random_qkv(1, 2, 77, D, torch.float16, seed=3, n=4)
    qs, ks, vs = (t.clone().requires_grad_(True) for t in (q, k, v))
    out = fk.attention(qs, ks, vs, variant=variant, causal=True)
    out.backward(g)
    o, lse = fk.forward(q, k, v, variant=variant, causal=True)
    dq, dk, dv = fk.backward(q, k, v, o, lse, g, variant=variant, causal=True)
    assert torch.equal(out.detach(), o)
    for a, b in ((qs.grad, dq), (ks.grad, dk), (vs.grad, dv)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("D", [64, 128])
def test_hopper_kernels_run_from_a_thread_without_a_current_context(D: int) -> None:
    """flash_wgmma's TMA launchers build tensor maps with a driver call, which needs the context current in the
    calling thread; autograd runs backward on its own thread, where no runtime call may have made it current
    yet (the tensor-map encoder failed there: 'invalid argument')."""
    if fk.unavailable_reason("flash_wgmma", torch.cuda.get_device_capability()) is not None:
        pytest.skip("flash_wgmma needs compute capability 9.0")
    q, k, v, g = random_qkv(1, 2, 77, D, torch.float16, seed=4, n=4)
    ref_o, ref_lse = fk.forward(q, k, v, variant="flash_wgmma")
    ref_grads = fk.backward(q, k, v, ref_o, ref_lse, g, variant="flash_wgmma")
    torch.cuda.synchronize()
    got: dict[str, object] = {}

    def run() -> None:  # a fresh thread: no CUDA call has been made from it
        try:
            o, lse = fk.forward(q, k, v, variant="flash_wgmma")
            got["out"] = (o, *fk.backward(q, k, v, o, lse, g, variant="flash_wgmma"))
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - re-raised below, in the test's thread
            got["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert "error" not in got, f"flash_wgmma failed in a fresh thread: {got.get('error')!r}"
    for name, a, b in zip(("O", "dQ", "dK", "dV"), got["out"], (ref_o, *ref_grads), strict=True):
        assert torch.equal(a, b), name


def test_non_contiguous_inputs_are_accepted() -> None:
    # [B, N, H, D] storage viewed as [B, H, N, D]: the layout attention code usually has
    q, k, v = (t.transpose(1, 2) for t in random_qkv(2, 100, 4, 64, torch.float16, seed=5))
    assert not q.is_contiguous()
    o, _ = fk.forward(q, k, v, variant="flash_mma")
    ref, _ = reference_forward(q, k, v)
    _assert_close("O", o, ref, TOLERANCES["float16"]["out_rel_l2"], TOLERANCES["float16"]["out_max_rel"])


def test_custom_scale() -> None:
    q, k, v = random_qkv(1, 2, 200, 128, torch.bfloat16, seed=9)
    for scale in (0.05, -0.3):
        o, _ = fk.forward(q, k, v, variant="flash_mma", scale=scale)
        ref, _ = reference_forward(q, k, v, scale=scale)
        _assert_close("O", o, ref, TOLERANCES["bfloat16"]["out_rel_l2"], TOLERANCES["bfloat16"]["out_max_rel"])


def test_fa1_rejects_grad() -> None:
    q, k, v = (t.requires_grad_(True) for t in random_qkv(1, 1, 16, 64, torch.float16))
    with pytest.raises(ValueError, match="no backward pass"):
        fk.attention(q, k, v, variant="flash_fa1")


def test_flash_mma_has_no_spills() -> None:
    """flash_mma (for this GPU's target) and flash_wgmma (for sm_90a, whatever the GPU); the one
    measured exception (sources.ACCEPTED_SPILLS) may not grow."""
    rows = [r for r in fk.resource_usage() if r["file"].startswith(("flash_mma", "flash_wgmma"))]
    assert {r["file"] for r in rows} >= {"flash_mma_fwd.cu", "flash_wgmma_fwd.cu"}, "kernels missing from the report"
    spills = unexpected_spills(rows)
    assert not spills, f"tensor-core kernels with local-memory spills beyond sources.ACCEPTED_SPILLS: {spills}"


# --------------------------------------------------------------------------- grouped-query and cross attention

#: (B, H, Hkv, Nq, Nk): multi-query, grouped-query, decode against a long cache, queries past the
#: last key (causal rows that see every key), a single key, ragged sizes that match no tile
GQA_CROSS_SHAPES = [
    (2, 4, 1, 100, 100),
    (1, 6, 2, 77, 300),
    (2, 8, 2, 16, 4096),
    (3, 4, 4, 1, 1000),
    (1, 4, 2, 300, 45),
    (1, 2, 1, 257, 1),
    (1, 8, 8, 129, 2000),
]


def _gqa_cases():
    for name, var in fk.VARIANTS.items():
        if not (var.grouped_query and var.cross):
            continue
        for dtype in var.dtypes:
            for D in var.head_dims:
                for causal in (False, True):
                    for B, H, Hkv, Nq, Nk in GQA_CROSS_SHAPES:
                        yield pytest.param(name, dtype, D, causal, (B, H, Hkv, Nq, Nk),
                                           id=f"{name}-{dtype}-D{D}-{'causal' if causal else 'full'}-H{H}/{Hkv}-Nq{Nq}-Nk{Nk}")


@pytest.mark.parametrize("variant,dtype,D,causal,shape", list(_gqa_cases()))
def test_grouped_query_and_cross_against_reference(variant: str, dtype: str, D: int, causal: bool,
                                                   shape: tuple[int, ...]) -> None:
    B, H, Hkv, Nq, Nk = shape
    tol = TOLERANCES[dtype]
    q, k, v, g = random_attention_inputs(B, H, Nq, D, DTYPES[dtype], Hkv=Hkv, Nk=Nk, seed=Nq * 31 + Nk + D)
    o, lse = _forward_checked(variant, q, k, v, causal, tol)
    if D not in fk.VARIANTS[variant].head_dims_of("backward"):  # forward only (or not at this head dim)
        return
    with poisoned_outputs():
        dq, dk, dv = fk.backward(q, k, v, o, lse, g, variant=variant, causal=causal)
    torch.cuda.synchronize()
    assert dk.shape == k.shape and dv.shape == v.shape and dq.shape == q.shape
    ref_dq, ref_dk, ref_dv = reference_backward(q, k, v, g, causal=causal)
    if Nk == 1:
        # one key: P = 1 whatever q and k are, so dS = dP - rowsum(dO * O) = 0 and dQ, dK are zero up
        # to rounding, with no relative error to speak of; bound their absolute error (inputs are O(1))
        for name, got, ref in (("dQ", dq, ref_dq), ("dK", dk, ref_dk)):
            err = (got.double() - ref).abs().max().item()
            assert err <= tol["grad_max_rel"], f"{name} (exactly 0): max abs error {err}"
    else:
        _assert_close("dQ", dq, ref_dq, tol["grad_rel_l2"], tol["grad_max_rel"])
        _assert_close("dK", dk, ref_dk, tol["grad_rel_l2"], tol["grad_max_rel"])
    _assert_close("dV", dv, ref_dv, tol["grad_rel_l2"], tol["grad_max_rel"])


@pytest.mark.parametrize("variant", [n for n, v in fk.VARIANTS.items() if v.grouped_query and v.cross])
def test_grouped_query_matches_sdpa_enable_gqa(variant: str) -> None:
    """Against PyTorch's own SDPA (enable_gqa=True, is_causal), forward and autograd backward."""
    import torch.nn.functional as F

    q, k, v, g = random_attention_inputs(2, 8, 200, 64, torch.float16, Hkv=2, Nk=333, seed=1)
    ref_in = [t.float().requires_grad_(True) for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*ref_in, is_causal=True, enable_gqa=True)
    ref.backward(g.float())
    has_bwd = "backward" in fk.VARIANTS[variant].passes
    ins = [t.clone().requires_grad_(has_bwd) for t in (q, k, v)]
    out = fk.attention(*ins, variant=variant, causal=True)
    tol = TOLERANCES["float16"]
    _assert_close("O", out, ref, tol["out_rel_l2"], tol["out_max_rel"])
    if has_bwd:
        out.backward(g)
        for name, a, b in zip(("dQ", "dK", "dV"), ins, ref_in, strict=True):
            _assert_close(name, a.grad, b.grad, tol["grad_rel_l2"], tol["grad_max_rel"])


@pytest.mark.parametrize("tile", fk.VARIANTS["flash_mma"].options["tile"].choices)
@pytest.mark.parametrize("bwd_tile", fk.VARIANTS["flash_mma"].options["bwd_tile"].choices)
def test_flash_mma_tiles_with_grouped_query_and_cross(tile: str, bwd_tile: str) -> None:
    q, k, v, g = random_attention_inputs(1, 4, 190, 64, torch.bfloat16, Hkv=2, Nk=211, seed=7)
    tol = TOLERANCES["bfloat16"]
    for causal in (False, True):
        with poisoned_outputs():
            o, lse = fk.forward(q, k, v, variant="flash_mma", causal=causal, tile=tile)
            grads = fk.backward(q, k, v, o, lse, g, variant="flash_mma", causal=causal, bwd_tile=bwd_tile)
        _assert_close("O", o, reference_forward(q, k, v, causal=causal)[0], tol["out_rel_l2"], tol["out_max_rel"])
        for name, got, ref in zip(("dQ", "dK", "dV"), grads, reference_backward(q, k, v, g, causal=causal),
                                  strict=True):
            _assert_close(name, got, ref, tol["grad_rel_l2"], tol["grad_max_rel"])


@pytest.mark.parametrize("block_size", fk.VARIANTS["flash_fa1"].options["block_size"].choices)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fa1_and_flash_simt_agree_at_every_block_size(block_size: int, causal: bool) -> None:
    """flash_fa1 and flash_simt share the tile and its arithmetic (csrc/simt.cuh) and differ only in loop order
    and in where O_i, m_i, l_i live between K/V tiles (global memory or registers): at the same block size
    they do the same fp32 operations per row, so they agree to fp32 rounding (grouped-query, Nq > Nk)."""
    q, k, v, _ = random_attention_inputs(2, 4, 203, 64, torch.float32, Hkv=2, Nk=150, seed=13)
    with poisoned_outputs():
        o1, lse1 = fk.forward(q, k, v, variant="flash_fa1", causal=causal, block_size=block_size)
        o2, lse2 = fk.forward(q, k, v, variant="flash_simt", causal=causal, block_size=block_size)
    torch.testing.assert_close(o1, o2, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse1, lse2, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("split", fk.VARIANTS["flash_mma"].options["group_split"].choices)
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_mma_group_split(split: object, D: int, causal: bool) -> None:
    """Multi-query backward with the 32 query heads of the one k/v head swept by 1..32 blocks per key
    block (dK, dV added by fp32 atomics when more than one), ragged sizes, Nq != Nk."""
    dtype = "bfloat16" if D == 64 else "float16"
    tol = TOLERANCES[dtype]
    q, k, v, g = random_attention_inputs(1, 32, 150, D, DTYPES[dtype], Hkv=1, Nk=290, seed=D + 3)
    o, lse = _forward_checked("flash_mma", q, k, v, causal, tol)
    with poisoned_outputs():
        grads = fk.backward(q, k, v, o, lse, g, variant="flash_mma", causal=causal, group_split=split)
    torch.cuda.synchronize()
    for name, got, ref in zip(("dQ", "dK", "dV"), grads, reference_backward(q, k, v, g, causal=causal), strict=True):
        _assert_close(name, got, ref, tol["grad_rel_l2"], tol["grad_max_rel"])


#: (B, H, Hkv, Nq, Nk): one query and key, ragged sizes that match no tile, Nq != Nk both ways,
#: grouped-query and multi-query heads; the last one has more work tiles (query blocks x heads) than an
#: H100/H200 has SMs at every tile, so each block of a persistent launch runs several (the K/V ring and
#: the Q buffers run on from one tile to the next)
WGMMA_SHAPES = [
    (1, 2, 2, 1, 1),
    (1, 2, 2, 77, 77),
    (2, 3, 3, 300, 300),
    (1, 2, 2, 1000, 1000),
    (1, 4, 2, 77, 300),
    (1, 4, 1, 300, 77),
    (1, 8, 2, 1000, 129),
    (2, 4, 4, 1, 1000),
    (2, 16, 4, 1100, 1300),
]


_WG = fk.VARIANTS["flash_wgmma"]
_WS = [p for p in _WG.options["pipeline"].choices if p.startswith("tma-ws")]


def _wg_combos(pipelines, tiles):
    """(pipeline, wg_tile, D) for every head dim both choices take (D = 256: the 128x64 tile of the
    one-tile-per-block warp-specialised pipelines)."""
    def takes(option, choice):
        return _WG.options[option].head_dims.get(choice, _WG.head_dims)
    return [(p, t, D) for p in pipelines for t in tiles for D in _WG.head_dims
            if D in takes("pipeline", p) and D in takes("wg_tile", t)]


@pytest.mark.parametrize("pipeline,wg_tile,D", [c for c in _wg_combos(_WS, ["128x128", "192x128", "128x64"])
                                                 if c[1] != "128x64" or c[2] == 256])  # D = 256's one tile
@pytest.mark.parametrize("dtype", _WG.dtypes)
def test_flash_wgmma_causal_head_groups(pipeline: str, wg_tile: str, dtype: str, D: int) -> None:
    """Causal, tail="auto" (step 8): the heads dealt in groups whose K and V fit in 16 MiB, each group's tiles
    heaviest first across its heads. Keys long enough that a group holds fewer heads than the call, and the
    last group fewer than the others (6 heads in groups of 4: 4 + 2), two query heads per K/V head, ragged sizes;
    tail="none" (one head after another) beside it."""
    tol = TOLERANCES[dtype]
    B, H, Hkv, Nq = 1, 6, 3, 1000
    Nk = (16 << 20) // (18 * D) + 77  # four heads' K and V (4 Nk D bytes each) fit in 16 MiB, not five
    group = (16 << 20) // (2 * Nk * D * 2)
    assert group == 4 and (B * H) % group == 2
    q, k, v, _ = random_attention_inputs(B, H, Nq, D, DTYPES[dtype], Hkv=Hkv, Nk=Nk, seed=Nk + D)
    ref_o, ref_lse = reference_forward(q, k, v, causal=True)
    for tail in ("none", "auto"):
        with poisoned_outputs():
            o, lse = fk.forward(q, k, v, variant="flash_wgmma", causal=True, wg_tile=wg_tile, pipeline=pipeline,
                                tail=tail)
        torch.cuda.synchronize()
        where = f"{B, H, Hkv, Nq, Nk} tail={tail}"
        _assert_close(f"O {where}", o, ref_o, tol["out_rel_l2"], tol["out_max_rel"])
        lse_err = (lse.double() - ref_lse).abs().max().item()
        assert lse_err <= tol["lse_abs"], f"{where}: LSE max abs error {lse_err} > {tol['lse_abs']}"


@pytest.mark.parametrize("variant", ["flash_wgmma"])
@pytest.mark.parametrize("pipeline,wg_tile,D", _wg_combos(_WG.options["pipeline"].choices, _WG.options["wg_tile"].choices))
@pytest.mark.parametrize("dtype", _WG.dtypes)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_wgmma_tiles_on_ragged_gqa_and_cross_shapes(variant: str, pipeline: str, wg_tile: str, dtype: str,
                                                          D: int, causal: bool) -> None:
    """Every (pipeline, tile) against the fp64 reference: rows past a head's end (ragged Nq, Nk; several
    heads per k/v head) arrive as zeros by cp.async's predicated copies and by the copy engine's
    out-of-bounds fill, never as the next head's rows."""
    tol = TOLERANCES[dtype]
    for B, H, Hkv, Nq, Nk in WGMMA_SHAPES:
        q, k, v, _ = random_attention_inputs(B, H, Nq, D, DTYPES[dtype], Hkv=Hkv, Nk=Nk, seed=Nq * 5 + Nk + D)
        ref_o, ref_lse = reference_forward(q, k, v, causal=causal)
        with poisoned_outputs():
            o, lse = fk.forward(q, k, v, variant=variant, causal=causal, wg_tile=wg_tile, pipeline=pipeline)
        torch.cuda.synchronize()
        _assert_close(f"O {B, H, Hkv, Nq, Nk}", o, ref_o, tol["out_rel_l2"], tol["out_max_rel"])
        lse_err = (lse.double() - ref_lse).abs().max().item()
        assert lse_err <= tol["lse_abs"], f"{B, H, Hkv, Nq, Nk}: LSE max abs error {lse_err} > {tol['lse_abs']}"


_PERSISTENT = [p for p in fk.VARIANTS["flash_wgmma"].options["pipeline"].choices if "persistent" in p]


@pytest.mark.parametrize("pipeline,wg_tile,D", _wg_combos(_PERSISTENT, _WG.options["wg_tile"].choices))
@pytest.mark.parametrize("dtype", _WG.dtypes)
def test_flash_wgmma_tail_tiles(monkeypatch, pipeline: str, wg_tile: str, dtype: str, D: int) -> None:
    """tail="auto" with the plan forced (whatever this GPU's SM count would choose): every head's rows from
    query block m on cut into tiles of 64 rows fewer, handed out after all whole blocks, for m = 0 (tail tiles
    only), 1 and the last block; causal calls ignore the plan. Rows of a tail tile's idle warpgroup belong to
    the next tile and must not be written by this one (outputs poisoned first)."""
    from flash_kernels import _ops

    tol = TOLERANCES[dtype]
    rows = int(wg_tile.split("x")[0])
    planned = []
    for B, H, Hkv, Nq, Nk in WGMMA_SHAPES:
        q, k, v, _ = random_attention_inputs(B, H, Nq, D, DTYPES[dtype], Hkv=Hkv, Nk=Nk, seed=Nq * 3 + Nk + D)
        n_qb = -(-Nq // rows)
        for m in sorted({0, 1, n_qb - 1} - {n_qb}):
            monkeypatch.setattr(_ops, "_wg_tail_plan", lambda *args, m=m: m)
            for causal in (False, True):
                ref_o, ref_lse = reference_forward(q, k, v, causal=causal)
                with poisoned_outputs():
                    o, lse = fk.forward(q, k, v, variant="flash_wgmma", causal=causal, wg_tile=wg_tile,
                                        pipeline=pipeline, tail="auto")
                torch.cuda.synchronize()
                where = f"{B, H, Hkv, Nq, Nk} main blocks {m} causal={causal}"
                _assert_close(f"O {where}", o, ref_o, tol["out_rel_l2"], tol["out_max_rel"])
                lse_err = (lse.double() - ref_lse).abs().max().item()
                assert lse_err <= tol["lse_abs"], f"{where}: LSE max abs error {lse_err} > {tol['lse_abs']}"
            planned.append(m)
    assert 0 in planned and len(planned) > len(WGMMA_SHAPES)  # the forced plans ran, not the default


@pytest.mark.parametrize("variant", ["flash_wgmma"])
def test_flash_wgmma_custom_scale(variant: str) -> None:
    q, k, v, g = random_qkv(1, 2, 200, 128, torch.bfloat16, seed=9, n=4)
    tol = TOLERANCES["bfloat16"]
    for scale in (0.05, -0.3):
        o, lse = fk.forward(q, k, v, variant=variant, scale=scale)
        ref, _ = reference_forward(q, k, v, scale=scale)
        _assert_close("O", o, ref, tol["out_rel_l2"], tol["out_max_rel"])
        grads = fk.backward(q, k, v, o, lse, g, variant=variant, scale=scale)
        for name, got, r in zip(("dQ", "dK", "dV"), grads, reference_backward(q, k, v, g, scale=scale), strict=True):
            _assert_close(f"{name} scale={scale}", got, r, tol["grad_rel_l2"], tol["grad_max_rel"])


_WG_BWD = fk.VARIANTS["flash_wgmma"].options["wg_bwd_tile"]


_WG_BWD_PIPE = fk.VARIANTS["flash_wgmma"].options["bwd_pipeline"]


@pytest.mark.parametrize("variant", ["flash_wgmma"])
@pytest.mark.parametrize("wg_bwd_tile,bwd_pipeline,D", [
    (t, p, D) for t in _WG_BWD.choices for p in _WG_BWD_PIPE.choices
    for D in _WG_BWD.head_dims.get(t, _WG.head_dims_of("backward"))
    if D in _WG_BWD_PIPE.head_dims.get(p, _WG.head_dims_of("backward"))])
@pytest.mark.parametrize("dtype", fk.VARIANTS["flash_wgmma"].dtypes)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_wgmma_backward_on_ragged_gqa_and_cross_shapes(variant: str, wg_bwd_tile: str, bwd_pipeline: str,
                                                             dtype: str, D: int, causal: bool) -> None:
    """Every backward tile and pipeline against the fp64 reference, with O and LSE from the reference too (so a
    wrong gradient is the backward's), the grouped-query group swept by one block and split over H/Hkv blocks."""
    tol = TOLERANCES[dtype]
    for B, H, Hkv, Nq, Nk in WGMMA_SHAPES:
        q, k, v, g = random_attention_inputs(B, H, Nq, D, DTYPES[dtype], Hkv=Hkv, Nk=Nk, seed=Nq * 3 + Nk + D)
        ref_o, ref_lse = reference_forward(q, k, v, causal=causal)
        o, lse = ref_o.to(q.dtype), ref_lse.float()
        refs = reference_backward(q, k, v, g, causal=causal)
        for split in sorted({1, H // Hkv}):
            with poisoned_outputs():
                grads = fk.backward(q, k, v, o, lse, g, variant=variant, causal=causal, wg_bwd_tile=wg_bwd_tile,
                                    bwd_pipeline=bwd_pipeline, group_split=split)
            torch.cuda.synchronize()
            for name, got, ref in zip(("dQ", "dK", "dV"), grads, refs, strict=True):
                where = f"{name} {B, H, Hkv, Nq, Nk} split={split}"
                if Nk == 1 and name != "dV":  # exactly zero up to rounding (see the GQA matrix test)
                    err = (got.double() - ref).abs().max().item()
                    assert err <= tol["grad_max_rel"], f"{where}: max abs error {err}"
                else:
                    _assert_close(where, got, ref, tol["grad_rel_l2"], tol["grad_max_rel"])
