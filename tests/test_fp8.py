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


@pytest.mark.parametrize("N", [1, 127, 128, 129, 300])
def test_quantize_per_block_scales_each_block_to_448_and_round_trips(N):
    """scales="block": one descale per 128 rows of every [N, D] plane (the last block ragged), each block's max -> 448;
    a block that stands out (x 1000) leaves the others their own resolution; a zero block gets descale 1."""
    gen = torch.Generator().manual_seed(2)
    x = (torch.randn(2, 3, N, 64, generator=gen) + 0.5) * 3.0
    x[0, 1, : min(N, 5)] *= 1000.0
    x[1, 2] = 0.0
    x8, d = fp8.quantize_e4m3(x, scales="block")
    nb = -(-N // fp8.SCALE_BLOCK)
    assert fp8.SCALE_BLOCK == 128 and x8.shape == x.shape and d.shape == (2, 3, nb) and d.dtype == torch.float32
    for b in range(nb):
        blk = x[..., b * 128:(b + 1) * 128, :]
        want = torch.where(blk.abs().amax((-2, -1)) > 0, blk.abs().amax((-2, -1)) / 448.0, torch.ones(()))
        assert torch.allclose(d[..., b], want, rtol=1e-6)
        assert float(x8[0, 0, b * 128:(b + 1) * 128].float().abs().max()) == 448.0
    assert float(d[1, 2].max()) == 1.0 and not x8[1, 2].float().any()
    back = x8.float() * fp8.block_descales(x8, d)
    err = (back - x).abs()
    assert bool((err <= x.abs() * 2.0**-4 + 2.0**-10 * fp8.block_descales(x8, d) + 1e-12).all())
    if N > 128:  # the outlier block's descale is ~1000x its neighbours'; the next block keeps its own
        assert float(d[0, 1, 0]) > 100 * float(d[0, 1, 1])


def test_quantize_per_block_refuses_what_it_cannot_take():
    with pytest.raises(ValueError, match=r"scales must be one of \['tensor', 'block'\]"):
        fp8.quantize_e4m3(torch.ones(2, 2), scales="row")
    with pytest.raises(ValueError, match="takes each block's own max"):
        fp8.quantize_e4m3(torch.ones(2, 2), amax=1.0, scales="block")
    with pytest.raises(ValueError, match=r"takes x \[..., N, D\]"):
        fp8.quantize_e4m3(torch.ones(4), scales="block")


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
    ({"D": 96}, ValueError, r"head dim \(64, 128, 256\)"),
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
    with pytest.raises(ValueError, match="descale_v must be a positive float, a one-element"):
        fp8.attention_fp8(q, k, v, 1.0, 1.0, torch.ones(2))
    # per block: [B, heads, ceil(N / 128)] of its own tensor, named in the error
    with pytest.raises(ValueError, match=r"descale_k .* tensor of shape \(1, 2, 1\) \(per block of 128 rows"):
        fp8.attention_fp8(q, k, v, 1.0, torch.ones(1, 2, 2), 1.0)
    with pytest.raises(ValueError, match="scales must be one of"):
        fp8.attention_fp8_from(q.float(), k.float(), v.float(), scales="blocks")
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
    assert "head dims (64, 128, 256)" in impl.why_not({**p, "D": 96}, "forward")
    assert "no backward pass" in impl.why_not(p, "backward")
    assert "flash_wgmma_fp8" in (study.SWEEPS / "fp8.toml").read_text()


def test_profiled_forward_refuses_what_it_cannot_quantize():
    with pytest.raises(TypeError, match="fp16 or bf16 tensors to quantize"):
        fp8.profiled_forward(torch.zeros(1, 1, 4, 64), torch.zeros(1, 1, 4, 64), torch.zeros(1, 1, 4, 64))


# --------------------------------------------------------------------------- incoherent processing (rotate=True)

from flash_kernels import hadamard  # noqa: E402

POW2 = [1, 2, 8, 64, 128, 256]


@pytest.mark.parametrize("D", POW2)
def test_sylvester_rows_are_signs_and_mutually_orthogonal(D):
    h = hadamard.sylvester(D)
    assert h.shape == (D, D) and bool((h.abs() == 1).all())
    assert torch.equal(h @ h.T, D * torch.eye(D, dtype=torch.float64))  # small integers: exact in fp64
    if D > 1:  # Sylvester's recursion H_2n = [[H, H], [H, -H]]
        n = D // 2
        s = hadamard.sylvester(n)
        assert torch.equal(h, torch.cat([torch.cat([s, s], 1), torch.cat([s, -s], 1)], 0))


@pytest.mark.parametrize("D", POW2)
def test_rotation_is_orthogonal_with_entries_of_one_magnitude(D):
    m = hadamard.hadamard_rotation(D, seed=3, dtype=torch.float64)
    assert m.shape == (D, D) and m.dtype == torch.float64 and m.device.type == "cpu"
    eye = torch.eye(D, dtype=torch.float64)
    assert float((m @ m.T - eye).abs().max()) <= 1e-6 and float((m.T @ m - eye).abs().max()) <= 1e-6
    assert float((m.abs() - D ** -0.5).abs().max()) <= 1e-15
    # it is diag(s) H / sqrt(D) with the seed's signs
    assert torch.allclose(m, hadamard.signs(D, 3)[:, None] * hadamard.sylvester(D) / D ** 0.5, rtol=0, atol=1e-15)
    m32 = hadamard.hadamard_rotation(D, seed=3)
    assert m32.dtype == torch.float32 and torch.equal(m32, m.float())


def test_same_seed_same_matrix_different_seeds_differ():
    a, b = hadamard.hadamard_rotation(128, seed=7), hadamard.hadamard_rotation(128, seed=7)
    assert torch.equal(a, b) and a is not b
    a[0, 0] = 5.0  # a copy: the cached matrix rotate_qk uses is not the caller's to change
    assert torch.equal(hadamard.hadamard_rotation(128, seed=7), b)
    ms = [hadamard.hadamard_rotation(64, seed=s) for s in range(8)]
    for i in range(len(ms)):
        for j in range(i):
            assert not torch.equal(ms[i], ms[j]), (i, j)
    # the signs come from a CPU generator of their own: the global RNG neither changes them nor is advanced
    torch.manual_seed(123)
    before = torch.get_rng_state()
    assert torch.equal(hadamard.hadamard_rotation(64, seed=0), ms[0])
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("D", [0, 3, 96, 100, 129, -64])
def test_a_head_dim_not_a_power_of_two_is_refused(D):
    with pytest.raises(ValueError, match=rf"D a power of two \(64, 128, 256, ...\).*got D={D}"):
        hadamard.hadamard_rotation(D)


@pytest.mark.parametrize("call, err, match", [
    (lambda: hadamard.hadamard_rotation(64.0), TypeError, "must be an int"),
    (lambda: hadamard.hadamard_rotation(True), TypeError, "must be an int"),
    (lambda: hadamard.hadamard_rotation(64, seed=-1), TypeError, "seed must be a non-negative int"),
    (lambda: hadamard.hadamard_rotation(64, seed=1.5), TypeError, "seed must be a non-negative int"),
    (lambda: hadamard.hadamard_rotation(64, dtype=torch.bfloat16), TypeError, "torch.float32 or torch.float64"),
    (lambda: hadamard.rotate_qk(torch.ones(2, 64, dtype=torch.int32), torch.ones(2, 64)), TypeError,
     "got q in torch.int32"),
    (lambda: hadamard.rotate_qk(torch.ones(2, 64), torch.ones(2, 64).to(torch.float8_e4m3fn)), TypeError,
     "rotate before quantizing"),
    (lambda: hadamard.rotate_qk(torch.ones(2, 64), [1.0]), TypeError, "k must be a torch.Tensor"),
    (lambda: hadamard.rotate_qk(torch.ones(2, 64), torch.ones(2, 128)), ValueError, "share their head dim"),
    (lambda: hadamard.rotate_qk(torch.ones(2, 96), torch.ones(2, 96)), ValueError, "got D=96"),
    (lambda: hadamard.rotate_qk(torch.ones(()), torch.ones(())), ValueError, "0-d"),
    (lambda: hadamard.rotate_qk(torch.ones(2, 64), torch.ones(2, 64), out_dtype=torch.int8), TypeError,
     "out_dtype must be None"),
])
def test_rotation_refuses_bad_arguments_saying_what_it_takes(call, err, match):
    with pytest.raises(err, match=match):
        call()


@pytest.mark.parametrize("D", [64, 128, 256])
def test_rotation_preserves_the_scores(D):
    """(q M)(k M)^T = q k^T: in fp64 to 1e-12; in fp32 within the worst-case rounding of the rotations and of the
    scores' product, at most about D u |q_i| |k_j| (u = 2^-24) each; grouped-query and cross-attention shapes
    (only D has to match)."""
    gen = torch.Generator().manual_seed(D)
    q = torch.randn(2, 4, 37, D, generator=gen) + 0.5
    k = torch.randn(2, 2, 45, D, generator=gen) + 0.5
    qr, kr = hadamard.rotate_qk(q, k, seed=1)
    assert qr.dtype == kr.dtype == torch.float32 and qr.shape == q.shape and kr.shape == k.shape
    g = q.shape[1] // k.shape[1]
    kr_h, k_h = kr.repeat_interleave(g, 1), k.repeat_interleave(g, 1)
    exact = q.double() @ k_h.double().transpose(-1, -2)
    bound = 4 * D * 2.0**-24 * q.double().norm(dim=-1)[..., :, None] * k_h.double().norm(dim=-1)[..., None, :]
    got = qr.double() @ kr_h.double().transpose(-1, -2)  # the rotations rounded to fp32, the scores exact
    assert bool(((got - exact).abs() <= bound).all())
    got32 = qr @ kr_h.transpose(-1, -2)  # and the scores in fp32 too
    assert bool(((got32.double() - exact).abs() <= bound).all())
    qr64, kr64 = hadamard.rotate_qk(q.double(), k.double(), seed=1)
    assert qr64.dtype == torch.float64
    got64 = qr64 @ kr64.repeat_interleave(g, 1).transpose(-1, -2)
    assert float((got64 - exact).abs().max()) <= 1e-12 * float(exact.abs().max())
    # the norms of the rows too (M is orthogonal)
    assert torch.allclose(qr64.norm(dim=-1), q.double().norm(dim=-1), rtol=1e-12, atol=0)


def test_rotate_qk_is_the_product_with_the_matrix_and_keeps_dtypes():
    gen = torch.Generator().manual_seed(2)
    q, k = torch.randn(1, 2, 9, 64, generator=gen), torch.randn(1, 2, 11, 64, generator=gen)
    m = hadamard.hadamard_rotation(64, seed=5)
    qr, kr = hadamard.rotate_qk(q, k, seed=5)
    assert torch.equal(qr, q @ m) and torch.equal(kr, k @ m)
    qb, kh = hadamard.rotate_qk(q.bfloat16(), k.half(), seed=5)
    assert qb.dtype == torch.bfloat16 and kh.dtype == torch.float16
    assert torch.equal(qb, (q.bfloat16().float() @ m).bfloat16()) and torch.equal(kh, (k.half().float() @ m).half())
    q32, k32 = hadamard.rotate_qk(q.bfloat16(), k.half(), seed=5, out_dtype=torch.float32)
    assert q32.dtype == k32.dtype == torch.float32 and torch.equal(q32, q.bfloat16().float() @ m)


@pytest.mark.parametrize("D", [64, 128, 256])
def test_a_lone_outlier_is_spread_over_every_coordinate(D):
    """x = c e_i: every coordinate of x M is +-c/sqrt(D), so max|x M| / ||x|| = 1/sqrt(D), down from 1. For any x,
    ||x M|| = ||x|| gives max|x M| >= ||x|| / sqrt(D), and entries of M of magnitude 1/sqrt(D) give
    max|x M| <= ||x||_1 / sqrt(D): a spike of c over small values of total size r ends up no larger than
    (c + r) / sqrt(D)."""
    m = hadamard.hadamard_rotation(D, seed=11, dtype=torch.float64)
    c = 1000.0
    for i in (0, 1, D // 2, D - 1):
        x = torch.zeros(D, dtype=torch.float64)
        x[i] = c
        y = x @ m
        assert float((y.abs() - c / D ** 0.5).abs().max()) <= 1e-12 * c
        assert math.isclose(float(y.abs().max()) / float(x.norm()), D ** -0.5, rel_tol=1e-12)
    gen = torch.Generator().manual_seed(D)
    x = torch.randn(16, D, generator=gen, dtype=torch.float64) * 0.01
    x[torch.arange(16), torch.randint(0, D, (16,), generator=gen)] += c
    y = x @ m
    peak = y.abs().amax(-1)
    assert bool((peak >= x.norm(dim=-1) / D ** 0.5 * (1 - 1e-12)).all())
    assert bool((peak <= x.abs().sum(-1) / D ** 0.5 * (1 + 1e-12)).all())
    assert bool((peak / x.abs().amax(-1) <= 1.01 * D ** -0.5).all())  # r <= 0.01 c here: within 1 % of 1/sqrt(D)


def test_attention_fp8_from_refuses_before_touching_a_device():
    q = torch.zeros(1, 2, 16, 64)
    with pytest.raises(TypeError, match="takes fp32, fp16 or bf16 q, k, v to quantize"):
        fp8.attention_fp8_from(q.to(torch.float8_e4m3fn), q, q)
    with pytest.raises(TypeError, match="rotate must be a bool"):
        fp8.attention_fp8_from(q, q, q, rotate=1)
    for bad in (torch.zeros(1, 2, 16, 96), torch.zeros(1, 2, 16, 512)):
        with pytest.raises(ValueError, match=r"head dim \(64, 128, 256\)"):
            fp8.attention_fp8_from(bad, bad, bad, rotate=True)
    d256 = torch.zeros(1, 2, 16, 256)
    with pytest.raises(ValueError, match="at head dim 256 the FP8 kernel sums O in the tensor cores only"):
        fp8.attention_fp8_from(d256, d256, d256, o_sum="fp32")
    with pytest.raises(ValueError, match=r"head dim \(64, 128, 256\)"):
        bad = torch.zeros(1, 2, 16, 96)
        fp8.attention_fp8_from(bad, bad, bad)
    for rotate in (False, True):  # everything checked, the CPU tensors are the one thing left to refuse
        with pytest.raises(ValueError, match="flash_kernels runs on CUDA tensors only"):
            fp8.attention_fp8_from(q, q, q, causal=True, rotate=rotate)


def test_profiled_forward_rotate_option():
    q = torch.zeros(1, 1, 4, 64, dtype=torch.float16)
    with pytest.raises(TypeError, match="rotate must be a bool"):
        fp8.profiled_forward(q, q, q, rotate="yes")
    with pytest.raises(ValueError, match="flash_kernels runs on CUDA tensors only"):
        fp8.profiled_forward(q, q, q, rotate=True)


def test_outlier_normal_is_fa3s_distribution_drawn_in_order():
    """randn + randn * 10 * (rand < 0.001) + mean, drawn in that order from the generator."""
    x = hadamard.outlier_normal(300, 200, generator=torch.Generator().manual_seed(4), mean=0.5)
    gen = torch.Generator().manual_seed(4)
    base, spike, u = (torch.randn(300, 200, generator=gen), torch.randn(300, 200, generator=gen) * 10.0,
                      torch.rand(300, 200, generator=gen))
    assert x.dtype == torch.float32 and torch.equal(x, base + spike * (u < 1e-3) + 0.5)
    assert 0 < int((u < 1e-3).sum()) < 300 * 200 // 100
    plain = hadamard.outlier_normal(10, generator=torch.Generator().manual_seed(4), p=0.0)
    assert torch.equal(plain, torch.randn(10, generator=torch.Generator().manual_seed(4)))
    with pytest.raises(ValueError, match="p must be in"):
        hadamard.outlier_normal(3, p=2.0)


def test_the_fused_quantization_says_what_it_cannot_take_and_a_forced_one_is_refused():
    """flash_kernels.quantize takes 16-bit CUDA tensors of head dim 64 or 128 (else the torch path is taken);
    attention_fp8_from(fused=True) on anything else is refused in one sentence, fused of another type too."""
    from flash_kernels import quantize

    x = torch.zeros(1, 1, 4, 64, dtype=torch.float16)
    assert quantize.fused_reason(x) in ("not a CUDA tensor", "triton is not installed")
    with pytest.raises(ValueError, match="fused=True.*cannot take q"):
        fp8.attention_fp8_from(x, x, x, fused=True)
    with pytest.raises(TypeError, match="fused must be None"):
        fp8.attention_fp8_from(x, x, x, fused="yes")
    with pytest.raises(ValueError, match="quantize_e4m3_fused"):
        quantize.quantize_e4m3_fused(x)



def test_o_sum_is_checked_by_name():
    with pytest.raises(ValueError, match=r"o_sum must be one of \['fp32', 'tensor'\]"):
        fp8.check_o_sum("fp16")
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="o_sum must be one of"):
        fp8.attention_fp8(q, k, v, 1.0, 1.0, 1.0, o_sum="registers")


def test_centred_v_gives_the_same_attention_with_its_mean_added_back():
    """centered_v and add_v_mean: attention over V equals attention over V less its mean row plus that row, for
    every query head of a KV head (GQA), causal or not, and a ragged N; V with a large common part."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(3)
    B, H, Hkv, N, Nk, D = 2, 4, 2, 37, 53, 64
    q = torch.randn(B, H, N, D, generator=g, dtype=torch.float64)
    k = torch.randn(B, Hkv, Nk, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, Hkv, Nk, D, generator=g, dtype=torch.float64) + 5.0 + torch.arange(D, dtype=torch.float64)
    vc, mu = fp8.centered_v(v)
    assert mu.shape == (B, Hkv, 1, D) and mu.dtype == torch.float32 and vc.dtype == v.dtype
    assert torch.allclose(vc.mean(dim=-2), torch.zeros(B, Hkv, D, dtype=v.dtype), atol=1e-5)
    assert vc.abs().max() < v.abs().max() / 5  # the common part is gone: e4m3's range goes to what differs
    rep = H // Hkv
    for causal in (False, True):
        want = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                              is_causal=causal)
        got = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), vc.repeat_interleave(rep, 1),
                                             is_causal=causal)
        got = fp8.add_v_mean(got, mu)
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-6)
    o = torch.zeros(B, H, 3, D, dtype=torch.bfloat16)  # each query head gets its own KV head's mean, in o's dtype
    fp8.add_v_mean(o, mu)
    assert torch.equal(o[:, 2, 0], mu[:, 1, 0].to(torch.bfloat16)) and torch.equal(o[:, 1, 0], mu[:, 0, 0].to(torch.bfloat16))


def test_center_v_is_checked_and_takes_the_mean_out_before_quantizing(monkeypatch):
    q = torch.randn(1, 2, 8, 64, dtype=torch.float16)
    with pytest.raises(TypeError, match="center_v must be None .* or a bool"):
        fp8.attention_fp8_from(q, q, q, center_v=1)
    seen = {}

    def fake_quantized(q, k, v, *a, v_mean=None):
        seen["v"], seen["mean"] = v, v_mean
        return [(q, 1.0), (k, 1.0), (v, 1.0)]

    monkeypatch.setattr(fp8, "_quantized", fake_quantized)
    monkeypatch.setattr(fp8, "attention_fp8", lambda *a, **kw: seen.setdefault("v_mean", []).append(kw["v_mean"]))
    v = torch.full((1, 2, 8, 64), 3.0, dtype=torch.float16)
    fp8.attention_fp8_from(q, q, v, center_v=True)
    # the quantization takes V and its mean row (subtracted in its pass); the kernel's epilogue adds it back to O
    assert seen["v"] is v and torch.equal(seen["mean"], torch.full((1, 2, 1, 64), 3.0))
    assert torch.equal(seen["v_mean"][0], torch.full((1, 2, 1, 64), 3.0))
    fp8.attention_fp8_from(q, q, v)
    assert seen["v"] is v and seen["mean"] is None and seen["v_mean"][1] is None


def test_the_torch_quantization_subtracts_v_mean_as_centered_v_does():
    q = torch.randn(2, 4, 33, 64)
    v = torch.randn(2, 2, 33, 64, dtype=torch.float16) + 0.5
    centred, mu = fp8.centered_v(v)
    assert torch.equal(mu, v.float().mean(dim=-2, keepdim=True)) and torch.equal(fp8.mean_row(v), mu)
    got = fp8._quantized(q, q, v, False, 0, False, "block", v_mean=mu)[2]
    want = fp8.quantize_e4m3(centred, scales="block")
    assert torch.equal(got[0].float(), want[0].float()) and torch.equal(got[1], want[1])


def test_v_mean_is_checked_and_handed_to_the_kernel_flat():
    mu = torch.ones(2, 3, 1, 64, dtype=torch.float64)
    flat = fp8._check_v_mean(mu, 2, 3, 64, mu.device)
    assert flat.dtype == torch.float32 and flat.shape == (2 * 3 * 64,) and flat.is_contiguous()
    assert fp8._check_v_mean(mu[:, :, 0], 2, 3, 64, mu.device).shape == (384,) and fp8._check_v_mean(None, 2, 3, 64, mu.device) is None
    with pytest.raises(ValueError, match=r"v_mean must have shape \[B, Hkv, 1, D\] = \[2, 3, 1, 64\] or \[B, Hkv, D\] = \[2, 3, 64\]; got \[2, 3, 64, 1\]"):
        fp8._check_v_mean(mu.transpose(-1, -2), 2, 3, 64, mu.device)
    with pytest.raises(TypeError, match="v_mean must be a torch.Tensor"):
        fp8._check_v_mean([1.0], 2, 3, 64, mu.device)
    with pytest.raises(ValueError, match="v_mean must be on the inputs' device"):
        fp8._check_v_mean(mu, 2, 3, 64, torch.device("meta"))


def test_v_is_centred_by_default_where_o_is_summed_in_the_tensor_cores():
    assert fp8.center_v_for(None, None, 256) and fp8.center_v_for(None, "tensor", 128)
    assert not fp8.center_v_for(None, None, 128) and not fp8.center_v_for(None, "fp32", 64)
    assert fp8.center_v_for(True, "fp32", 64) and not fp8.center_v_for(False, None, 256)
    with pytest.raises(ValueError, match="tensor cores only"):  # the head dim's refusal comes first
        fp8.center_v_for(None, "fp32", 256)


def test_v_mean_of_another_dtype_is_refused_and_a_misaligned_one_copied():
    with pytest.raises(TypeError, match=r"v_mean must be fp32 \(or fp16, bf16, fp64, converted to fp32\); got torch.int64"):
        fp8._check_v_mean(torch.ones(1, 1, 1, 64, dtype=torch.int64), 1, 1, 64, torch.device("cpu"))
    big = torch.zeros(1 + 64)
    odd = big[1:].view(1, 1, 64)  # contiguous, 4 bytes past an 8-byte boundary: the epilogue reads float2
    assert odd.data_ptr() % 8 == 4
    flat = fp8._check_v_mean(odd, 1, 1, 64, big.device)
    assert flat.data_ptr() % 8 == 0 and torch.equal(flat, odd.reshape(-1))
