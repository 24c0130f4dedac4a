"""flash_decode without a GPU: its options and errors, how it picks rows per block and key splits, its
sweep. (Its kernels are tested against the reference in tests/gpu/test_decode.py.)"""

import pytest

torch = pytest.importorskip("torch")

import flash_kernels as fk  # noqa: E402
from flash_kernels import _ops  # noqa: E402
from flash_kernels._ops import _decode_mma, _decode_plan  # noqa: E402

#: an H200's SMs and shared memory per SM (two D=128 blocks fit on one SM, three at D=64)
H200 = (132, 228 * 1024)


def qkv(shape=(1, 2, 16, 64), dtype=torch.float16):
    return [torch.randn(shape, dtype=torch.float32).to(dtype) for _ in range(3)]


def test_decode_options_are_checked():
    with pytest.raises(ValueError, match="flash_decode: option rows=48 is not supported; accepted: 'auto', 16, 32, 64, 128"):
        fk.forward(*qkv(), variant="flash_decode", rows=48)
    with pytest.raises(ValueError, match="option splits=3 is not supported; accepted: 'auto', 1, 2, 4, 8, 16, 32, 64"):
        fk.forward(*qkv(), variant="flash_decode", splits=3)
    with pytest.raises(ValueError, match="unknown option.*tile; accepted: mma, rows, splits, warpgroups"):
        fk.forward(*qkv(), variant="flash_decode", tile="128x64")
    with pytest.raises(TypeError, match="flash_decode does not support dtype torch.float32; accepted: torch.float16"):
        fk.forward(*qkv(dtype=torch.float32), variant="flash_decode")


def test_decode_mma_choice():
    """wgmma needs compute capability 9.0 and blocks of 64 rows or 128 (two warpgroups); 128-row blocks need
    wgmma; auto takes it on Hopper where a k/v head has more than 32 rows (the tensor work's shapes) or rows is 128,
    mma.sync elsewhere."""
    hopper, ampere = (9, 0), (8, 0)
    assert _decode_mma("auto", "auto", 32, 1, 4, hopper) == "wgmma"      # 128 rows a k/v head
    assert _decode_mma("auto", 64, 32, 1, 16, hopper) == "wgmma"
    assert _decode_mma("auto", "auto", 32, 8, 16, hopper) == "wgmma"     # 64 rows
    assert _decode_mma("auto", "auto", 32, 8, 8, hopper) == "mma.sync"   # 32 rows
    assert _decode_mma("auto", "auto", 32, 1, 1, hopper) == "mma.sync"   # 32 rows
    assert _decode_mma("auto", 16, 32, 1, 16, hopper) == "mma.sync"      # 16-row blocks are mma.sync's
    assert _decode_mma("auto", "auto", 32, 1, 16, ampere) == "mma.sync"
    assert _decode_mma("auto", "auto", 32, 1, 16, None) == "mma.sync"
    assert _decode_mma("mma.sync", "auto", 32, 1, 16, hopper) == "mma.sync"
    assert _decode_mma("wgmma", "auto", 32, 8, 1, hopper) == "wgmma"     # asked for: kept, whatever the rows
    assert _decode_mma("wgmma", 64, 32, 8, 1, None) == "wgmma"           # no GPU known: no claim
    assert _decode_mma("wgmma", 128, 32, 8, 1, hopper) == "wgmma"
    assert _decode_mma("auto", 128, 32, 8, 1, hopper) == "wgmma"        # two warpgroups: wgmma's only
    assert _decode_mma("auto", 128, 32, 8, 1, None) == "wgmma"
    with pytest.raises(ValueError, match=r"rows=128 \(two warpgroups on wgmma\) needs a GPU of compute capability 9.0 "
                                         r".* this GPU is 8.0"):
        _decode_mma("auto", 128, 32, 1, 16, ampere)
    with pytest.raises(ValueError, match="rows=128 runs two warpgroups on wgmma; got mma='mma.sync'; accepted with "
                                         "mma='mma.sync': rows='auto', 16, 32 or 64"):
        _decode_mma("mma.sync", 128, 32, 1, 16, hopper)
    with pytest.raises(ValueError, match=r"mma='wgmma' needs a GPU of compute capability 9.0 .* this GPU is 8.0; use "
                                         r"mma='mma.sync' or 'auto'"):
        _decode_mma("wgmma", "auto", 32, 1, 16, ampere)
    with pytest.raises(ValueError, match=r"mma='wgmma' runs blocks of 64 rows \(one warpgroup, or two over the keys\) "
                                         r"or 128 \(two over the rows\); got rows=16; accepted with it: rows='auto', 64 "
                                         r"or 128"):
        _decode_mma("wgmma", 16, 32, 1, 16, hopper)
    with pytest.raises(ValueError, match="option mma='wmma' is not supported; accepted: 'auto', 'mma.sync', 'wgmma'"):
        fk.forward(*qkv(), variant="flash_decode", mma="wmma")
    with pytest.raises(ValueError, match="got rows=32; accepted with it"):  # before the tensors' device is looked at
        fk.forward(*qkv(), variant="flash_decode", mma="wgmma", rows=32)
    with pytest.raises(ValueError, match="rows=128 runs two warpgroups on wgmma"):
        fk.forward(*qkv(), variant="flash_decode", mma="mma.sync", rows=128)


def test_decode_warpgroups_choice():
    """warpgroups counts a wgmma block's consumer warpgroups: given, it takes wgmma (mma.sync refuses it, and a GPU
    other than compute 9.0); 128 rows are two; at 64 rows 2 are the blocks whose warpgroups split the keys (option
    code 4); auto: 2 at 128 rows, else 1."""
    from flash_kernels._ops import _decode_block, _decode_code

    hopper, ampere = (9, 0), (8, 0)
    assert _decode_mma("auto", "auto", 32, 8, 16, hopper, 2) == "wgmma"  # 64 rows: given, it takes wgmma
    assert _decode_mma("auto", 64, 32, 8, 1, None, 1) == "wgmma"
    assert _decode_mma("wgmma", 128, 32, 1, 4, hopper, 2) == "wgmma"
    with pytest.raises(ValueError, match="warpgroups=2 counts the warpgroups on wgmma; got mma='mma.sync'; accepted "
                                         "with mma='mma.sync': rows='auto', 16, 32 or 64 and warpgroups='auto'"):
        _decode_mma("mma.sync", "auto", 32, 8, 16, hopper, 2)
    with pytest.raises(ValueError, match="rows=128 runs two warpgroups .*; got warpgroups=1; accepted with rows=128: "
                                         "warpgroups='auto' or 2"):
        _decode_mma("auto", 128, 32, 1, 4, hopper, 1)
    with pytest.raises(ValueError, match=r"warpgroups=2 \(warpgroups on wgmma\) needs a GPU of compute capability 9.0 "
                                         r".* this GPU is 8.0"):
        _decode_mma("auto", "auto", 32, 8, 16, ampere, 2)
    with pytest.raises(ValueError, match=r"warpgroups=1 \(warpgroups on wgmma\) runs blocks of 64 rows .*got "
                                         r"rows=32"):
        _decode_mma("auto", 32, 32, 8, 16, hopper, 1)
    with pytest.raises(ValueError, match="option warpgroups=3 is not supported; accepted: 'auto', 1, 2"):
        fk.forward(*qkv(), variant="flash_decode", warpgroups=3)
    with pytest.raises(ValueError, match="warpgroups=2 counts the warpgroups on wgmma"):  # before any device
        fk.forward(*qkv(), variant="flash_decode", mma="mma.sync", warpgroups=2)
    # (rows, warpgroups) for a k/v head of R rows that sees `tiles` tiles; 0 warpgroups: mma.sync
    assert _decode_block("auto", "auto", "mma.sync", 64, 256) == (64, 0)
    assert _decode_block("auto", "auto", "mma.sync", 32, 256) == (16, 0)
    assert _decode_block(32, "auto", "mma.sync", 512, 256) == (32, 0)
    assert _decode_block("auto", "auto", "wgmma", 128, 16) == (64, 2)    # 33-128 rows: two over the keys
    assert _decode_block("auto", "auto", "wgmma", 128, 256) == (64, 2)
    assert _decode_block("auto", "auto", "wgmma", 64, 16) == (64, 2)
    assert _decode_block("auto", "auto", "wgmma", 64, 64) == (128, 2)    # 33-64 rows from 4096 keys: 128
    assert _decode_block("auto", 2, "wgmma", 64, 64) == (128, 2)
    assert _decode_block("auto", 1, "wgmma", 64, 64) == (64, 1)
    assert _decode_block(64, "auto", "wgmma", 64, 64) == (64, 2)
    assert _decode_block("auto", "auto", "wgmma", 512, 63) == (64, 1)    # more than 128 rows: 128 from 4096 keys
    assert _decode_block("auto", "auto", "wgmma", 512, 64) == (128, 2)
    assert _decode_block("auto", "auto", "wgmma", 32, 256) == (64, 1)    # asked for wgmma at 32 rows
    assert _decode_block(128, "auto", "wgmma", 16, 256) == (128, 2)
    assert [_decode_code(r, w) for r, w in ((16, 0), (32, 0), (64, 0), (64, 1), (128, 2), (64, 2))] == [0, 1, 2, 2, 3, 4]
    # the plan: warpgroups 1 keeps 64-row blocks where auto would take 128; 2 at 64 rows is one block an SM
    assert _decode_plan("auto", "auto", 8, 32, 1, 4, 16384, 128, False, *H200, "wgmma", 1) == (64, 16)  # 264 // 16
    assert _decode_plan("auto", "auto", 8, 32, 1, 4, 16384, 128, False, *H200, "wgmma", 2) == (64, 8)
    assert _decode_plan(64, "auto", 8, 32, 1, 4, 16384, 128, False, *H200, "wgmma", 2) == (64, 8)  # 132 // 16
    assert _decode_plan(64, "auto", 8, 32, 8, 16, 16384, 128, False, *H200, "wgmma", 2) == (64, 2)  # 132 // 64
    assert _decode_plan("auto", "auto", 8, 32, 8, 16, 1024, 128, False, *H200, "wgmma") == (64, 2)


def test_decode_plan_wgmma():
    """wgmma blocks hold 128 rows (two warpgroups) where a k/v head has more than 128 rows and a row sees 4096 keys,
    64 over two warpgroups that split the keys where it has 33-128 (one an SM), else 64 on one warpgroup, which
    counts its own shared memory: at D = 128 3 stages and a 16 KB Q tile (two an SM); at D = 64 4 stages of 16 KB
    beside an 8 KB Q tile. A block of two warpgroups (288 threads: two warpgroups and the producer warp) is one an
    SM at any D: its registers."""
    assert _decode_plan("auto", "auto", 8, 32, 1, 4, 16384, 128, False, *H200, "wgmma") == (64, 8)  # 132 // 16
    assert _decode_plan("auto", "auto", 8, 32, 1, 16, 4096, 128, False, *H200, "wgmma") == (128, 4)  # 132 // 32
    assert _decode_plan(64, "auto", 8, 32, 1, 4, 16384, 128, False, *H200, "wgmma", 1) == (64, 16)  # 264 // (2 x 8)
    assert _decode_plan(64, "auto", 8, 32, 1, 16, 4096, 128, False, *H200, "wgmma") == (64, 4)  # 264 // 64
    # D = 64: a 128-row block is 81 KB (82 with the reserve), but one an SM by its registers (118 a thread: two
    # blocks of 288 threads would need 96 or fewer); a 64-row block is 73 KB (74): two, and three of mma.sync's 64 KB
    assert _decode_plan("auto", "auto", 8, 32, 1, 16, 4096, 64, False, 132, 195 * 1024, "wgmma") == (128, 4)
    assert _decode_plan(128, "auto", 8, 32, 1, 4, 1024, 128, False, *H200, "wgmma") == (128, 4)  # asked for: kept
    assert _decode_plan(64, "auto", 8, 32, 1, 16, 4096, 64, False, 132, 195 * 1024, "wgmma") == (64, 4)
    assert _decode_plan("auto", "auto", 8, 32, 1, 16, 4096, 64, False, 132, 195 * 1024, "mma.sync") == (64, 6)
    assert _decode_plan("auto", "auto", 8, 32, 8, 1, 16384, 128, False, *H200, "wgmma")[0] == 64  # 32 rows: not 16
    assert _decode_plan("auto", "auto", 8, 32, 8, 2, 16384, 128, False, *H200, "wgmma")[0] == 64  # 8 rows: one WG
    assert _decode_plan("auto", "auto", 8, 32, 8, 16, 16384, 128, False, *H200, "wgmma") == (128, 2)  # 64 rows, 16k
    # short caches keep 64-row blocks (twice the blocks): 128 rows from 4096 visible keys (64 tiles) on
    assert _decode_plan("auto", "auto", 8, 32, 1, 16, 1024, 128, False, *H200, "wgmma") == (64, 4)
    assert _decode_plan("auto", "auto", 8, 32, 1, 16, 4032, 128, False, *H200, "wgmma")[0] == 64
    assert _decode_plan("auto", "auto", 8, 32, 1, 16, 4096, 128, False, *H200, "wgmma")[0] == 128
    assert _decode_plan("auto", "auto", 8, 32, 1, 64, 65536, 128, True, *H200, "wgmma")[0] == 64  # causal: 64 keys


class _FakeModule:
    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    def fwd(self, code, *args):
        self.calls.append((self.name, code & 0xFF, code >> 8))


def _fake_gpu(monkeypatch, capability):
    """CPU tensors through flash_decode's dispatch as on a GPU of ``capability`` with an H200's SMs and shared
    memory; the kernel modules record (module, rows code, splits) instead of running."""
    import types

    calls = []
    props = types.SimpleNamespace(major=capability[0], minor=capability[1], multi_processor_count=H200[0],
                                  shared_memory_per_multiprocessor=H200[1])
    monkeypatch.setattr(_ops, "_check_devices", lambda names, tensors: None)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(_ops._build, "load", lambda name: _FakeModule(name, calls))
    return calls


@pytest.mark.parametrize("capability,module,code,splits", [((9, 0), "flash_decode_wgmma", 4, 8),
                                                           ((8, 0), "flash_decode", 2, 24)])
def test_decode_dispatches_the_instruction_it_planned(monkeypatch, capability, module, code, splits):
    """One KV head, Nq = 4 (128 rows a head): wgmma's module and its plan (64-row blocks of two warpgroups over the
    keys, 209 KB, one an SM: 132 // 16) on compute 9.0; mma.sync's elsewhere (64-row blocks, three 65 KB ones an SM:
    396 // 16)."""
    calls = _fake_gpu(monkeypatch, capability)
    q = torch.zeros(8, 32, 4, 128, dtype=torch.float16)
    kv = torch.zeros(8, 1, 16384, 128, dtype=torch.float16)
    fk.forward(q, kv, kv, variant="flash_decode")
    assert calls == [(module, code, splits)]  # rows code 2: 64 rows a block, 3: 128


def test_decode_dispatches_two_warpgroups_over_the_keys(monkeypatch):
    """Eight KV heads, Nq = 16 (64 rows a head), 1024 keys: wgmma's module, option code 4 (64 rows, two warpgroups
    that split the keys), one block an SM: 132 // 64 = 2 splits; warpgroups 1 the one-warpgroup block (code 2); 16k
    keys: the 128-row block (code 3)."""
    calls = _fake_gpu(monkeypatch, (9, 0))
    q = torch.zeros(8, 32, 16, 128, dtype=torch.float16)
    kv = torch.zeros(8, 8, 1024, 128, dtype=torch.float16)
    fk.forward(q, kv, kv, variant="flash_decode")
    fk.forward(q, kv, kv, variant="flash_decode", warpgroups=1)
    kv = torch.zeros(8, 8, 16384, 128, dtype=torch.float16)
    fk.forward(q, kv, kv, variant="flash_decode")
    assert calls == [("flash_decode_wgmma", 4, 2), ("flash_decode_wgmma", 2, 2), ("flash_decode_wgmma", 3, 2)]


def test_decode_wgmma_off_hopper_is_refused_through_the_api(monkeypatch):
    calls = _fake_gpu(monkeypatch, (8, 9))
    with pytest.raises(ValueError, match="mma='wgmma' needs a GPU of compute capability 9.0 .* this GPU is 8.9"):
        fk.forward(*qkv(), variant="flash_decode", mma="wgmma")
    with pytest.raises(ValueError, match=r"rows=128 \(two warpgroups on wgmma\) needs a GPU of compute capability 9.0 "
                                         r".* this GPU is 8.9"):
        fk.forward(*qkv(), variant="flash_decode", rows=128)  # mma auto: wgmma is what 128 rows need
    fk.forward(*qkv(), variant="flash_decode", mma="auto")  # auto runs mma.sync there
    assert [c[0] for c in calls] == ["flash_decode"]


def test_decode_is_forward_only(monkeypatch):
    q, k, v = qkv()
    with pytest.raises(ValueError, match="flash_decode implements the forward pass only; variants with a backward pass: "
                                         "naive"):
        fk.backward(q, k, v, q, torch.zeros(1, 2, 16), q, variant="flash_decode")
    monkeypatch.setattr(_ops, "_check_devices", lambda names, tensors: None)  # CPU tensors through, as on a GPU
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    with pytest.raises(ValueError, match="flash_decode has no backward pass, but an input requires grad"):
        fk.attention(*(t.requires_grad_(True) for t in qkv()), variant="flash_decode")


@pytest.mark.parametrize("Hkv,Nq,rows", [(32, 1, 16), (8, 4, 16), (1, 1, 16), (8, 16, 64), (1, 16, 64), (8, 8, 16),
                                          (2, 3, 64)])
def test_rows_auto_hold_the_rows_of_a_kv_head(Hkv, Nq, rows):
    """H / Hkv x Nq rows share a k/v head: 16 rows per block for up to 32 of them (two blocks for 17-32), else 64."""
    assert _decode_plan("auto", 1, 8, 32, Hkv, Nq, 16384, 128, False, *H200)[0] == rows
    assert _decode_plan(32, 1, 8, 32, Hkv, Nq, 16384, 128, False, *H200)[0] == 32  # a choice is kept


@pytest.mark.parametrize("B,Hkv,Nq,Nk,D,splits", [
    (8, 8, 1, 16384, 128, 2),    # 64 blocks of 16 rows: 2 splits give one block per SM (128 <= 132)
    (8, 32, 1, 16384, 128, 1),   # 256 blocks already fill the SMs
    (8, 8, 1, 16384, 64, 2),     # D = 64 likewise: one block per SM while a block holds few rows
    (1, 8, 1, 131072, 128, 16),  # one sequence: 8 blocks, 132 // 8
    (8, 1, 1, 4096, 128, 8),     # 32 rows: two 16-row blocks per k/v head, 16 blocks a split
    (8, 1, 1, 16384, 128, 16),   # ... which read the same K/V: 8 distinct heads, 132 // 8, with 16 tiles a split
    (8, 1, 1, 65536, 128, 16),
    (8, 2, 1, 65536, 128, 8),    # 16 rows a k/v head: one block, no shared reads: 132 // 16
    (8, 1, 1, 1024, 128, 4),     # ... but at least 4 tiles (256 keys) a split: 16 tiles
    (1, 1, 1, 1000, 128, 4),     # 16 tiles (the last one short)
    (8, 1, 16, 4096, 128, 6),    # 512 rows: the tensor work's, 3 blocks of 64 rows per SM (2 stages): 396 // 64
    (8, 1, 16, 4096, 64, 6),     # D = 64 keeps 4 stages (64 KB): 3 blocks an SM as well
    (8, 1, 4, 1024, 128, 4),     # 128 rows: 396 // 16 = 24, but at least 4 tiles a split
    (8, 8, 1, 1, 128, 1),        # one key
    (8, 8, 1, 200, 128, 1),      # 4 tiles: one split
])
def test_splits_auto_fill_the_sms_in_one_wave(B, Hkv, Nq, Nk, D, splits):
    assert _decode_plan("auto", "auto", B, 32, Hkv, Nq, Nk, D, False, *H200)[1] == splits


def test_splits_are_dealt_out_with_none_empty():
    for Nk in (1, 17, 64, 65, 320, 1000, 4097, 65536):
        for choice in (*fk.VARIANTS["flash_decode"].options["splits"].choices[1:], "auto"):
            for causal in (False, True):
                _, splits = _decode_plan("auto", choice, 2, 32, 8, 3, Nk, 128, causal, *H200)
                tiles = -(-(min(Nk, 3) if causal else Nk) // 64)
                per_split = -(-tiles // splits)
                assert 1 <= splits <= tiles and (splits - 1) * per_split < tiles, (Nk, choice, causal, splits)
    assert _decode_plan(16, 4, 1, 1, 1, 1, 5 * 64, 128, False, *H200)[1] == 3  # 5 tiles over 4: 2 + 2 + 1
    assert _decode_plan(16, "auto", 8, 32, 8, 1, 131072, 128, True, *H200)[1] == 1  # causal Nq=1: key 0 only


def test_decode_sweep():
    from nsightlab.run.sweep import find

    cases = find("decode").cases()
    assert len(cases) == 43 and all(c.runnable and c.pass_ == "forward" for c in cases)
    ours = [c for c in cases if c.impl == "flash_decode"]
    assert {c.params.get("Hkv", c.params["H"]) for c in ours} == {1, 8, 32}
    assert {c.params["N"] for c in ours} == {1, 4, 16} and {c.params["D"] for c in ours} == {64, 128}
    assert {c.params["Nk"] for c in ours} == {1024, 8192, 16384, 65536, 131072}
    assert {c.params["dtype"] for c in ours} == {"float16", "bfloat16"}
    assert all(c.traits["engine"] == "tensor cores" for c in ours)
    deep = find("decode").deep_cases(cases)  # the deep tier: ours and cuDNN where ours is furthest from HBM's bandwidth
    assert sorted((c.impl, c.params["Hkv"], c.params["N"], c.params["Nk"]) for c in deep) == [
        ("flash_decode", 1, 1, 16384), ("sdpa_cudnn", 1, 1, 16384)]



def test_sanitize_case_skips_what_the_option_checks_refuse_on_this_gpu():
    """The sanitizer's program runs every option choice its variant's own check takes on this GPU: flash_decode's
    wgmma and 128-row blocks on Hopper only; the rest everywhere."""
    from flash_kernels.sanitize_case import refused

    dec, mma = fk.VARIANTS["flash_decode"], fk.VARIANTS["flash_mma"]
    for opts in ({"mma": "wgmma"}, {"rows": 128}):
        assert refused(dec, opts, 128, 2, 2, 75, (9, 0)) is None
        assert "needs a GPU of compute capability 9.0" in refused(dec, opts, 128, 2, 2, 75, (8, 0))
    assert "rows=128" in refused(dec, {"rows": 128}, 64, 2, 2, 75, (8, 9))
    for opts in ({}, {"mma": "mma.sync"}, {"rows": 64}, {"splits": 8}):
        assert refused(dec, opts, 128, 2, 2, 75, (8, 0)) is None
    assert refused(mma, {"group_split": 32}, 128, 32, 1, 75, (8, 0)) is None
    assert "must divide H/Hkv" in refused(mma, {"group_split": 4}, 128, 2, 2, 75, (8, 0))


def test_inputs_the_kernels_cannot_read_in_place_are_copied():
    """The kernels read dense [B, H, N, D] tensors from a 16-byte boundary (16-byte loads, cp.async, TMA's tensor
    maps): a view that starts mid-row of a buffer, or a non-contiguous one, is copied; a tensor that is both dense
    and aligned is used as it is."""
    from flash_kernels._ops import _dense

    buf = torch.arange(1 + 2 * 3 * 4 * 8, dtype=torch.float16)
    odd = buf[1:].view(2, 3, 4, 8)
    assert odd.is_contiguous() and odd.data_ptr() % 16 == 2
    fixed = _dense(odd)
    assert fixed.data_ptr() % 16 == 0 and torch.equal(fixed, odd)
    ok = torch.zeros(2, 3, 4, 8, dtype=torch.float16)
    assert _dense(ok) is ok
    moved = _dense(ok.transpose(1, 2))
    assert moved.is_contiguous() and torch.equal(moved, ok.transpose(1, 2))
