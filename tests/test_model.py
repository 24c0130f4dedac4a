import pytest

from flash_kernels import model


def test_flop_convention():
    assert model.flops(4, 16, 4096, 128) == 4 * 4 * 16 * 4096**2 * 128
    assert model.flops(4, 16, 4096, 128, causal=True) == 2 * 4 * 16 * 4096**2 * 128
    assert model.flops(1, 1, 10, 64, pass_="backward") == 2.5 * 4 * 100 * 64


def test_compulsory_bytes():
    # forward: Q, K, V read + O written (2 bytes each) + LSE (fp32)
    assert model.compulsory_bytes(1, 1, 10, 64, "float16") == 4 * 640 * 2 + 40
    # backward: Q, K, V, O, dO read + dQ, dK, dV written + LSE
    assert model.compulsory_bytes(1, 1, 10, 64, "float32", pass_="backward") == 8 * 640 * 4 + 40


def test_working_set_counts_score_matrices():
    flash = model.working_set_bytes(False, 1, 1, 1024, 64, "float16")
    naive = model.working_set_bytes(True, 1, 1, 1024, 64, "float16")
    assert naive - flash == 4 * 1024 * 1024
    assert model.working_set_bytes(True, 1, 1, 1024, 64, "float16", pass_="backward") - model.compulsory_bytes(
        1, 1, 1024, 64, "float16", pass_="backward") == 2 * 4 * 1024 * 1024


def test_rates():
    assert model.tflops(1e12, 1000.0) == pytest.approx(1.0)
    assert model.gbps(1e9, 1.0) == pytest.approx(1000.0)


def test_bad_pass():
    with pytest.raises(ValueError, match="pass must be"):
        model.flops(1, 1, 1, 64, pass_="sideways")


def test_defaults_are_the_self_attention_numbers():
    for kw in ({"Hkv": None, "Nk": None}, {"Hkv": 16, "Nk": 4096}):
        assert model.flops(4, 16, 4096, 128, causal=True, **kw) == 2 * 4 * 16 * 4096**2 * 128
        assert model.compulsory_bytes(4, 16, 4096, 128, "float16", pass_="backward", **kw) == model.compulsory_bytes(
            4, 16, 4096, 128, "float16", pass_="backward")
        assert model.working_set_bytes(True, 4, 16, 4096, 128, "float16", **kw) == model.working_set_bytes(
            True, 4, 16, 4096, 128, "float16")


def test_gqa_changes_bytes_not_flops():
    B, H, N, D = 2, 32, 1024, 128
    for Hkv in (8, 1):
        assert model.flops(B, H, N, D, Hkv=Hkv) == 4 * B * H * N * N * D
        assert model.flops(B, H, N, D, causal=True, Hkv=Hkv) == 2 * B * H * N * N * D
        q, kv, lse = B * H * N * D * 2, B * Hkv * N * D * 2, 4 * B * H * N
        assert model.compulsory_bytes(B, H, N, D, "float16", Hkv=Hkv) == 2 * q + 2 * kv + lse
        assert model.compulsory_bytes(B, H, N, D, "float16", pass_="backward", Hkv=Hkv) == 4 * q + 4 * kv + lse
    with pytest.raises(ValueError, match="multiple of Hkv=3"):
        model.flops(B, H, N, D, Hkv=3)


def test_cross_and_decode_flops():
    B, H, D = 8, 32, 128
    # no mask: every query against every key
    assert model.flops(B, H, 1, D, Nk=4096) == 4 * B * H * 1 * 4096 * D
    assert model.flops(B, H, 16, D, Nk=16384, Hkv=8, pass_="backward") == 2.5 * 4 * B * H * 16 * 16384 * D
    # causal, top-left: a single query sees one key, not half of them
    assert model.flops(B, H, 1, D, causal=True, Nk=4096) == 4 * B * H * D
    # N < Nk: rows see 1..N keys; N > Nk: the rows past Nk see all Nk keys
    assert model.flops(1, 1, 5, 1, causal=True, Nk=17) == 4 * (1 + 2 + 3 + 4 + 5)
    assert model.flops(1, 1, 100, 1, causal=True, Nk=17) == 4 * (17 * 18 // 2 + 83 * 17)
    assert model.flops(1, 1, 130, 1, causal=True, Nk=1) == 4 * 130
    # ... which is sum_i min(i+1, Nk), counted
    for N, Nk in ((1, 2), (5, 17), (100, 17), (17, 100), (130, 129), (129, 130)):
        assert model.flops(1, 1, N, 1, causal=True, Nk=Nk) == 4 * sum(min(i + 1, Nk) for i in range(N))
    # N == Nk keeps FlashAttention's exact half, given Nk or not
    assert model.flops(1, 1, 130, 1, causal=True, Nk=130) == model.flops(1, 1, 130, 1, causal=True) == 2 * 130**2


def test_cross_bytes_and_working_set():
    B, H, N, D, Hkv, Nk = 8, 32, 4, 128, 8, 4096
    q, kv, lse = B * H * N * D * 2, B * Hkv * Nk * D * 2, 4 * B * H * N
    assert model.compulsory_bytes(B, H, N, D, "bfloat16", Hkv=Hkv, Nk=Nk) == 2 * q + 2 * kv + lse
    assert model.score_matrix_bytes(B, H, N, Nk=Nk) == 4 * B * H * N * Nk
    base = model.compulsory_bytes(B, H, N, D, "bfloat16", pass_="backward", Hkv=Hkv, Nk=Nk)
    assert model.working_set_bytes(False, B, H, N, D, "bfloat16", pass_="backward", Hkv=Hkv, Nk=Nk) == base
    assert model.working_set_bytes(True, B, H, N, D, "bfloat16", pass_="backward", Hkv=Hkv, Nk=Nk) == (
        base + 2 * 4 * B * H * N * Nk)


def test_model_is_the_work_model_of_nsightlab():
    from nsightlab.problems import attention

    p = {"B": 2, "H": 8, "N": 33, "D": 64, "dtype": "float16", "causal": True, "Hkv": 2, "Nk": 70}
    for pass_ in ("forward", "backward"):
        assert model.flops(2, 8, 33, 64, causal=True, pass_=pass_, Hkv=2, Nk=70) == attention.WORK.flops(p, pass_)
        assert model.compulsory_bytes(2, 8, 33, 64, "float16", pass_=pass_, Hkv=2, Nk=70) == attention.WORK.bytes(
            p, pass_)
    assert "min(i+1, Nk)" in attention.WORK.source and "halved when N = Nk" in attention.WORK.source
