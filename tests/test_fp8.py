"""flash_kernels.fp8 without a GPU: the key order of Vt against the kernel's register fragments, Vt itself,
quantization, and the errors bad input gets (the kernel's results: tests/gpu/test_fp8.py)."""

import math

import pytest

torch = pytest.importorskip("torch")

from flash_kernels import fp8  # noqa: E402


def test_vt_key_order_matches_the_kernels_fragments():
    """Mirror of flash_wgmma_fp8.cu: lane quad index t's register r = 2 hh + h of k-step kk packs, byte i, the
    S accumulator of 8-column block j = 4 kk + 2 hh + (i >> 1), column 2 t + (i & 1) (pack_p_e4m3); the
    e4m3 A fragment puts that byte at column 4 t + i + 16 hh of the k-step (wgmma.cuh). Vt's column there
    must hold the same key, for every slot of a 128-key tile, each key exactly once."""
    seen = set()
    for kk in range(4):
        for t in range(4):
            for r in range(4):
                hh = r >> 1
                for i in range(4):
                    j = 4 * kk + 2 * hh + (i >> 1)
                    key = 8 * j + 2 * t + (i & 1)
                    col = 32 * kk + 16 * hh + 4 * t + i
                    assert fp8.vt_key_of_column(col) == key, (kk, t, r, i)
                    seen.add(key)
    assert seen == set(range(128))


@pytest.mark.parametrize("Nk", [1, 31, 32, 45, 96])
def test_vt_holds_each_key_in_its_column_and_zeros_past_nk(Nk):
    B, Hkv, D = 2, 3, 64
    gen = torch.Generator().manual_seed(Nk)
    v = torch.randn(B, Hkv, Nk, D, generator=gen) + 0.5
    v8 = v.to(torch.float8_e4m3fn)
    vt = fp8.vt_e4m3(v8)  # on the CPU: vt_e4m3_reference
    npad = -(-Nk // 32) * 32
    assert vt.shape == (B, Hkv, D, npad) and vt.dtype == torch.float8_e4m3fn
    u, vu = vt.view(torch.uint8), v8.view(torch.uint8)
    for col in range(npad):
        key = fp8.vt_key_of_column(col)
        if key < Nk:
            assert torch.equal(u[:, :, :, col], vu[:, :, key, :]), col
        else:
            assert not u[:, :, :, col].any(), col


def test_quantize_scales_amax_to_448_and_round_trips():
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(4, 8, 33, 64, generator=gen) + 0.5) * 3.0
    x8, d = fp8.quantize_e4m3(x)
    assert x8.dtype == torch.float8_e4m3fn and d.dtype == torch.float32 and d.dim() == 0
    assert math.isclose(float(d), float(x.abs().max()) / 448.0, rel_tol=1e-6)
    back = x8.float() * d
    # e4m3: 3 mantissa bits, so a normal value rounds within 2^-4 of itself; subnormals (below 2^-6 * d) within
    # half their spacing 2^-10 * d
    err = (back - x).abs()
    assert bool((err <= x.abs() * 2.0**-4 + 2.0**-10 * float(d) + 1e-12).all())
    assert float(x8.float().abs().max()) == 448.0
    z8, dz = fp8.quantize_e4m3(torch.zeros(3, 5))
    assert float(dz) == 1.0 and not z8.float().any()
    _, d2 = fp8.quantize_e4m3(x, amax=100.0)
    assert math.isclose(float(d2), 100.0 / 448.0, rel_tol=1e-6)


@pytest.mark.parametrize("bad, match", [
    (torch.arange(4), "floating-point tensor"),
    ([1.0, 2.0], "floating-point tensor"),
])
def test_quantize_rejects_what_it_cannot_quantize(bad, match):
    with pytest.raises(TypeError, match=match):
        fp8.quantize_e4m3(bad)


@pytest.mark.parametrize("amax", [0.0, -1.0, float("nan"), "1"])
def test_quantize_rejects_a_bad_amax(amax):
    with pytest.raises(ValueError, match="amax must be a positive finite number"):
        fp8.quantize_e4m3(torch.ones(2, 2), amax=amax)


def _qkv(B=1, H=2, N=16, D=64, Hkv=None, Nk=None, dtype=torch.float8_e4m3fn):
    Hkv, Nk = Hkv or H, Nk or N
    q = torch.zeros(B, H, N, D).to(dtype)
    k = torch.zeros(B, Hkv, Nk, D).to(dtype)
    return q, k, torch.zeros(B, Hkv, Nk, D).to(dtype)


@pytest.mark.parametrize("kwargs, err, match", [
    ({"dtype": torch.float16}, TypeError, "must be torch.float8_e4m3fn"),
    ({"D": 96}, ValueError, r"head dim \(64, 128\)"),
    ({"H": 3, "Hkv": 2}, ValueError, "multiple of k8/v8's 2 heads"),
])
def test_attention_fp8_rejects_bad_tensors(kwargs, err, match):
    with pytest.raises(err, match=match):
        fp8.attention_fp8(*_qkv(**kwargs), 1.0, 1.0, 1.0)


def test_attention_fp8_rejects_bad_options_before_touching_a_device():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="k8 and v8 must have the same shape"):
        fp8.attention_fp8(q, k, v[:, :, :8], 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="out_dtype must be torch.bfloat16 or torch.float16"):
        fp8.attention_fp8(q, k, v, 1.0, 1.0, 1.0, out_dtype=torch.float32)
    with pytest.raises(ValueError, match=r"exp_on_fma must be one of \[0.0, 0.25, 0.5\]"):
        fp8.attention_fp8(q, k, v, 1.0, 1.0, 1.0, exp_on_fma=0.3)
    with pytest.raises(TypeError, match="causal must be a bool"):
        fp8.attention_fp8(q, k, v, 1.0, 1.0, 1.0, causal=1)
    with pytest.raises(ValueError, match="scale must be a finite non-zero number"):
        fp8.attention_fp8(q, k, v, 1.0, 1.0, 1.0, scale=0.0)
    for bad in (0.0, -2.0, float("inf"), True):
        with pytest.raises(ValueError, match="descale_k must be a positive finite float"):
            fp8.attention_fp8(q, k, v, 1.0, bad, 1.0)
    with pytest.raises(ValueError, match="descale_v must be a positive float or a one-element"):
        fp8.attention_fp8(q, k, v, 1.0, 1.0, torch.ones(2))
    # everything checked, the CPU tensors are the one thing left to refuse
    with pytest.raises(ValueError, match="flash_kernels runs on CUDA tensors only"):
        fp8.attention_fp8(q, k, v, 1.0, 1.0, torch.ones(()))


def test_fp8_dense_peak():
    assert math.isclose(fp8.fp8_dense_peak_tflops(132), 1978.9, rel_tol=1e-4)  # H100 SXM / H200, published
    with pytest.raises(ValueError):
        fp8.fp8_dense_peak_tflops(0)


def test_fp8_is_an_attention_implementation_of_the_study():
    """flash_kernels.study registers the FP8 forward as ``flash_wgmma_fp8``: forward only, Q, K, V counted as one
    byte each in its compulsory traffic, refusing what the kernel cannot run (with the reason), and a sweep
    (fp8.toml) that names it."""
    import flash_kernels.study as study
    from nsightlab.problems import attention
    from nsightlab.problems.impls import resolve

    impl = resolve("flash_wgmma_fp8")
    assert impl is study.FP8 and impl.passes == ("forward",) and impl.problem == attention.NAME
    p = {"B": 2, "H": 4, "N": 100, "D": 128, "dtype": "float16", "causal": False}
    qkv = 2 * 4 * 100 * 128
    assert impl.work.bytes(p, "forward") == 3 * qkv + 2 * qkv + 4 * 2 * 4 * 100
    assert impl.work.flops(p, "forward") == attention.flops(p, "forward")
    assert "float32" in impl.why_not({**p, "dtype": "float32"}, "forward")
    assert "head dims (64, 128)" in impl.why_not({**p, "D": 96}, "forward")
    assert "no backward pass" in impl.why_not(p, "backward")
    assert "flash_wgmma_fp8" in (study.SWEEPS / "fp8.toml").read_text()


def test_profiled_forward_refuses_what_it_cannot_quantize():
    with pytest.raises(TypeError, match="fp16 or bf16 tensors to quantize"):
        fp8.profiled_forward(torch.zeros(1, 1, 4, 64), torch.zeros(1, 1, 4, 64), torch.zeros(1, 1, 4, 64))
