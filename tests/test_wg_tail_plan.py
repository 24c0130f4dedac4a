"""flash_wgmma's tail plan without a GPU (flash_kernels._ops._wg_tail_plan): which query blocks of each head the
persistent forward cuts into shorter tiles handed out last. (The kernel with forced plans is tested against the
reference in tests/gpu/test_kernels.py: test_flash_wgmma_tail_tiles.)"""

import heapq

import pytest

pytest.importorskip("torch")

from flash_kernels._ops import _wg_tail_plan  # noqa: E402

SMS = 132  # an H100 SXM's and an H200's


def schedule(heads: int, Nq: int, BM: int, m: int | None, sms: int = SMS) -> tuple[float, float]:
    """(makespan, mean busy time per SM) of the tiles a plan gives, list-scheduled in the kernel's order with
    each tile costing its query rows (an independent, simpler model than the plan's: no cost for idle
    warpgroups)."""
    m = -(-Nq // BM) if m is None else m
    whole = [min(BM, Nq - j * BM) for j in range(m)]
    tail = [min(BM - 64, Nq - r) for r in range(m * BM, Nq, BM - 64)]
    clocks = [0.0] * sms
    for rows in whole * heads + tail * heads:
        heapq.heapreplace(clocks, clocks[0] + rows)
    return max(clocks), heads * Nq / sms


@pytest.mark.parametrize("B,N", [(4, 4096), (2, 8192), (1, 16384)])
def test_the_convention_shapes_get_tail_tiles_that_even_out_the_last_round(B, N):
    heads = B * 16
    m = _wg_tail_plan(heads, N, 192, SMS)
    n_qb = -(-N // 192)
    assert m is not None and 0 <= m < n_qb
    tail_tiles = heads * -(-(N - m * 192) // 128)
    assert tail_tiles <= 3 * SMS  # at most three rounds of short tiles
    before, mean = schedule(heads, N, 192, None)
    after, _ = schedule(heads, N, 192, m)
    # 1365 blocks of 192 rows on 132 SMs: 10.3 rounds of work run as 11; the plan gets closer to the mean
    assert before / mean > 1.05
    assert after < before and after / mean < 1.04


def test_fewer_tiles_than_sms_are_all_cut():
    # 2 heads x 6 blocks = 12 tiles for 132 SMs: 16 tiles of 128 rows keep 16 SMs busy for less time each
    assert _wg_tail_plan(2, 1000, 192, SMS) == 0
    assert schedule(2, 1000, 192, 0)[0] < schedule(2, 1000, 192, None)[0]


def test_no_tail_where_it_cannot_help():
    # N = 1024: only the 64-row last blocks could move to the end, which measured slower (its docstring)
    assert _wg_tail_plan(256, 1024, 192, SMS) is None
    assert _wg_tail_plan(1, 1, 192, SMS) is None
    assert _wg_tail_plan(4, 4096, 64, SMS) is None  # one warpgroup a tile: nothing shorter to cut
    assert _wg_tail_plan(0, 4096, 192, SMS) is None
    # a whole number of rounds of whole blocks: 132 heads x 2 blocks
    assert _wg_tail_plan(132, 384, 192, SMS) is None


def test_the_plan_follows_the_sm_count():
    # 64 heads x 22 blocks on 132 SMs is ragged; on 64 SMs every SM runs exactly one head's blocks
    assert _wg_tail_plan(64, 4096, 192, SMS) is not None
    assert _wg_tail_plan(64, 4096 - 64, 192, 64) is None
