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
