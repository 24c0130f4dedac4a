"""flash_decode against the fp64 reference at decode shapes: H = 32 query heads over 1, 8 or 32 k/v heads,
Nq = 1, 3, 16 queries against 1 to 65536 keys, every rows / splits / mma choice, causal and not, outputs poisoned
(the splits' fp32 workspaces too). Inputs random normal + 0.5 (random_attention_inputs)."""

from __future__ import annotations

import pytest
import torch

import flash_kernels as fk
from flash_kernels.reference import reference_forward
from flash_kernels.testing import TOLERANCES, random_attention_inputs
from tests.gpu.test_kernels import DTYPES, _assert_close, _forward_checked

DECODE = fk.VARIANTS["flash_decode"]
KEYS = (1, 17, 1000, 4097, 65536)


def _decode_cases():
    for dtype in DECODE.dtypes:
        for D in DECODE.head_dims:
            for Hkv in (1, 8, 32):
                for Nq in (1, 3, 16):
                    for Nk in KEYS:
                        yield pytest.param(dtype, D, Hkv, Nq, Nk, id=f"{dtype}-D{D}-Hkv{Hkv}-Nq{Nq}-Nk{Nk}")


HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
needs_hopper = pytest.mark.skipif(not HOPPER, reason="mma='wgmma' runs on compute capability 9.0 only")


@pytest.mark.parametrize("mma,rows,warpgroups", [
    ("auto", "auto", "auto"), pytest.param("wgmma", "auto", "auto", marks=needs_hopper),
    pytest.param("wgmma", 64, 1, marks=needs_hopper), pytest.param("wgmma", 64, 2, marks=needs_hopper)])
@pytest.mark.parametrize("dtype,D,Hkv,Nq,Nk", list(_decode_cases()))
def test_decode_against_reference(dtype: str, D: int, Hkv: int, Nq: int, Nk: int, mma: str, rows: object,
                                  warpgroups: object) -> None:
    """The default options (rows and splits chosen for the shape and this GPU's SMs; auto takes wgmma on Hopper
    where a k/v head has more than 32 rows, two warpgroups a block), and wgmma at every shape with rows auto (128
    or 64 by the shape: _ops._decode_block), 64 with one warpgroup, and 64 with two that split the keys."""
    B = 1 if Nk > 5000 else 2  # one batch for the long caches bounds the fp64 reference
    q, k, v, _ = random_attention_inputs(B, 32, Nq, D, DTYPES[dtype], Hkv=Hkv, Nk=Nk, seed=Nq * 31 + Nk + D + Hkv)
    _forward_checked("flash_decode", q, k, v, False, TOLERANCES[dtype], mma=mma, rows=rows, warpgroups=warpgroups)


#: (B, H, Hkv, Nq, Nk, D, dtype): 4 packed rows against a ragged cache; 512 packed rows (several row blocks)
#: with Nq > 1 so causal rows differ; one head, one query, 17 keys (one ragged tile, splits clamped to 1);
#: 9 rows in all (odd) over 24 tiles, so that the merge's blocks of 2 rows (8-15 splits) end on a missing row
#: and 24 splits take 4 warps a row; 1100 queries against 1100 keys, so that causal rows are split too (18
#: tiles: 9 or 18 splits, 2 or 4 warps a row in the merge) and the first rows' later splits see no key (LSE
#: -inf), with more than 64 rows a k/v head (the 2-stage ring at D = 128)
OPTION_SHAPES = [(2, 32, 8, 3, 4097, 128, "float16"), (1, 32, 1, 16, 1000, 64, "bfloat16"),
                 (2, 1, 1, 1, 17, 128, "bfloat16"), (1, 3, 1, 3, 1500, 64, "float16"),
                 (1, 2, 2, 1100, 1100, 128, "float16")]


#: every rows choice on mma.sync (128 is wgmma's only), and wgmma's (64 rows: one warpgroup, or two that split the
#: keys; 128: two that split the rows); rows 128 with mma auto takes wgmma, and so does warpgroups 2
ROWS_MMA = [pytest.param(rows, "mma.sync", "auto", id=f"{rows}-mma.sync") for rows in DECODE.options["rows"].choices
            if rows != 128] + [
    pytest.param(rows, mma, wgs, id=f"{rows}-{mma}-wg{wgs}", marks=needs_hopper) for rows, mma, wgs in
    (("auto", "wgmma", "auto"), (64, "wgmma", 1), (64, "wgmma", 2), (128, "wgmma", "auto"), (128, "auto", 2),
     ("auto", "auto", 2))]


@pytest.mark.parametrize("rows,mma,warpgroups", ROWS_MMA)
@pytest.mark.parametrize("splits", DECODE.options["splits"].choices)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_every_rows_and_splits(rows: object, mma: str, warpgroups: object, splits: object, causal: bool) -> None:
    """Every choice of the options, each on shapes that are multiples of no tile; causal is top-left (query i
    sees keys 0..i), as the reference's."""
    for B, H, Hkv, Nq, Nk, D, dtype in OPTION_SHAPES:
        q, k, v, _ = random_attention_inputs(B, H, Nq, D, DTYPES[dtype], Hkv=Hkv, Nk=Nk, seed=Nk + Nq)
        _forward_checked("flash_decode", q, k, v, causal, TOLERANCES[dtype], rows=rows, splits=splits, mma=mma,
                         warpgroups=warpgroups)


@pytest.mark.parametrize("scale", [0.05, -0.3])
def test_decode_custom_scale(scale: float) -> None:
    """A negative scale runs as (-q) * |scale| (the softmax keeps the running max of raw scores)."""
    q, k, v, _ = random_attention_inputs(2, 8, 4, 128, torch.float16, Hkv=2, Nk=3000, seed=5)
    for mma, rows, wgs in ((("mma.sync", "auto", "auto"), ("wgmma", 64, 1), ("wgmma", 64, 2), ("wgmma", 128, 2))
                           if HOPPER else (("mma.sync", "auto", "auto"),)):
        o, _ = fk.forward(q, k, v, variant="flash_decode", scale=scale, splits=8, mma=mma, rows=rows, warpgroups=wgs)
        ref, _ = reference_forward(q, k, v, scale=scale)
        _assert_close("O", o, ref, TOLERANCES["float16"]["out_rel_l2"], TOLERANCES["float16"]["out_max_rel"])


def _misaligned(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a contiguous tensor that starts 2 bytes past a 16-byte boundary (a view into a buffer)."""
    buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    out = buf[1:].view(t.shape)
    out.copy_(t)
    assert out.is_contiguous() and out.data_ptr() % 16 != 0
    return out


def test_inputs_off_a_16_byte_boundary():
    """q, k and v that are contiguous but start off a 16-byte boundary (the kernels' 16-byte loads and TMA's tensor
    maps need one): copied by fk.forward first, so every instruction path gives the reference's result."""
    q, k, v, _ = random_attention_inputs(1, 32, 4, 128, torch.float16, Hkv=1, Nk=4097, seed=11)
    q, k, v = (_misaligned(t) for t in (q, k, v))
    for mma, rows, wgs in ((("mma.sync", "auto", "auto"), ("wgmma", 64, 1), ("wgmma", 64, 2), ("wgmma", 128, 2))
                           if HOPPER else (("mma.sync", "auto", "auto"),)):
        _forward_checked("flash_decode", q, k, v, False, TOLERANCES["float16"], mma=mma, rows=rows, warpgroups=wgs)
