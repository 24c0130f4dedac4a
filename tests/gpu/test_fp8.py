"""flash_wgmma's FP8 forward (flash_kernels.fp8) against the fp64 reference of its dequantized inputs: every
head dim, causal and not, both output dtypes, grouped-query and cross attention, ragged sizes (1, odd,
not multiples of the 128-row / 128-key tiles or of Vt's 32-key groups), outputs poisoned first; and with Q and K
rotated first (rotate=True, FlashAttention-3's incoherent processing: flash_kernels.hadamard); and with a descale per
block of 128 rows (scales="block")."""

import pytest
import torch

import flash_kernels as fk
from flash_kernels import fp8, hadamard
from flash_kernels.reference import reference_forward
from flash_kernels.testing import error_metrics, poisoned_outputs, random_attention_inputs

pytestmark = pytest.mark.skipif(
    fk.unavailable_reason("flash_wgmma", torch.cuda.get_device_capability()) is not None,
    reason="the FP8 path is flash_wgmma's: compute capability 9.0 only")

#: P is rounded to e4m3 (3 mantissa bits: within 2^-4 of itself) before O += P V, as in FlashAttention-3's
#: FP8 forward; the bounds are on the error against the dequantized inputs' exact attention
OUT_REL_L2, OUT_MAX_REL = 1.5e-2, 1e-1
#: the LSE's error against the same reference, absolute + relative to |LSE|: S = Q K^T is summed by the tensor
#: cores' FP8 path, which keeps fewer bits than fp32 (flash_wgmma_fp8.cu's header)
LSE_ABS, LSE_REL = 2e-3, 2e-4
#: the output bound on inputs whose 128-row blocks differ in magnitude (the per-block tests: _blocky)
OUT_REL_L2_BLOCKY = 2e-2
#: o_sum="tensor" (O summed by the FP8 tensor cores, which keep fewer bits than fp32) on rows of more than LONG_ROW
#: keys: measured 1.9-5.5 % at N = 8192 on an H200, against 1.2-1.6 % with O in fp32
LONG_ROW, TSUM_LONG_REL_L2 = 4096, 8e-2

SHAPES = [  # B, H, Hkv, Nq, Nk
    (1, 1, 1, 1, 1),
    (2, 4, 4, 77, 77),
    (1, 2, 2, 129, 129),
    (2, 8, 2, 300, 519),
    (1, 4, 1, 1000, 1000),
    (1, 2, 2, 513, 33),
    (1, 2, 1, 8192, 8192),  # long rows: O's sum must not lose precision with N
]


def _check_lse(lse, ref_lse):
    excess = (lse.double() - ref_lse).abs() - (LSE_ABS + LSE_REL * ref_lse.abs())
    assert float(excess.max()) <= 0, f"LSE error over the bound by {float(excess.max()):.2e}"


def _quantized(B, H, Hkv, Nq, Nk, D, seed=0, mean=0.5):
    q, k, v, _ = random_attention_inputs(B, H, Nq, D, torch.float32, Hkv=Hkv, Nk=Nk, seed=seed, mean=mean)
    (q8, dq), (k8, dk), (v8, dv) = (fp8.quantize_e4m3(t) for t in (q, k, v))
    real = [x8.double() * d.double() for x8, d in ((q8, dq), (k8, dk), (v8, dv))]
    return (q, k, v), (q8, k8, v8), (dq, dk, dv), real


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-H{}-Hkv{}-Nq{}-Nk{}".format(*s))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_fp8_forward_against_reference(shape, causal, D, out_dtype):
    _, x8, descale, real = _quantized(*shape, D)
    ref_o, ref_lse = reference_forward(*real, causal=causal)
    with poisoned_outputs():
        o, lse = fk.attention_fp8(*x8, *descale, causal=causal, out_dtype=out_dtype, return_lse=True)
    assert o.dtype == out_dtype and o.shape == x8[0].shape and lse.shape == x8[0].shape[:3]
    m = error_metrics(o, ref_o)
    assert m["nonfinite"] == 0, "unwritten or non-finite outputs"
    assert m["rel_l2"] <= OUT_REL_L2 and m["max_rel"] <= OUT_MAX_REL, m
    _check_lse(lse, ref_lse)


def test_fp8_scales_fold_in_and_tensor_or_float_descales_agree():
    """The same e4m3 inputs under other descales: the kernel's result follows the real values (scores scaled
    by dq * dk, O by dv), whether the descales come as floats or as device tensors."""
    _, (q8, k8, v8), _, _ = _quantized(2, 4, 2, 200, 333, 128, seed=3)
    dq, dk, dv = 0.01, 0.02, 0.5
    real = [x8.double() * d for x8, d in ((q8, dq), (k8, dk), (v8, dv))]
    ref_o, _ = reference_forward(*real, causal=True)
    o_f = fk.attention_fp8(q8, k8, v8, dq, dk, dv, causal=True)
    t = [torch.tensor(d, device="cuda") for d in (dq, dk, dv)]
    o_t = fk.attention_fp8(q8, k8, v8, *t, causal=True)
    assert torch.equal(o_f, o_t)
    m = error_metrics(o_f, ref_o)
    assert m["rel_l2"] <= OUT_REL_L2 and m["max_rel"] <= OUT_MAX_REL, m


def test_fp8_custom_and_negative_scale():
    _, x8, descale, real = _quantized(1, 2, 2, 150, 150, 64, seed=5)
    for scale in (0.3, -0.2):
        ref_o, ref_lse = reference_forward(*real, scale=scale)
        o, lse = fk.attention_fp8(*x8, *descale, scale=scale, return_lse=True)
        m = error_metrics(o, ref_o)
        assert m["rel_l2"] <= OUT_REL_L2 and m["max_rel"] <= OUT_MAX_REL, (scale, m)
        _check_lse(lse, ref_lse)


def test_fp8_error_against_the_unquantized_inputs_is_quantization_sized():
    """Against the fp64 attention of the original fp32 inputs the error adds Q, K, V's rounding to e4m3: larger
    than against the dequantized inputs, but of the same order (a wrong layout would be O(1))."""
    (q, k, v), x8, descale, real = _quantized(2, 8, 8, 1024, 1024, 128, seed=7)
    o = fk.attention_fp8(*x8, *descale)
    ref_q, _ = reference_forward(*real)
    ref_x, _ = reference_forward(q, k, v)
    e_q, e_x = error_metrics(o, ref_q)["rel_l2"], error_metrics(o, ref_x)["rel_l2"]
    assert e_q <= OUT_REL_L2 and e_x <= 3 * OUT_REL_L2, (e_q, e_x)


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("Nk", [1, 31, 32, 100, 129, 1000])
def test_vt_kernel_matches_the_torch_reference(D, Nk):
    v = torch.randn(2, 3, Nk, D, device="cuda") + 0.5
    v8 = v.to(torch.float8_e4m3fn)
    with poisoned_outputs():
        vt = fp8.vt_e4m3(v8)
    assert torch.equal(vt.view(torch.uint8), fp8.vt_e4m3_reference(v8).view(torch.uint8))


@pytest.mark.parametrize("exp_on_fma", [0.25, 0.5])
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_exponentials_on_the_fma_units(exp_on_fma, causal):
    _, x8, descale, real = _quantized(2, 4, 2, 1000, 777, 128, seed=11)
    ref_o, ref_lse = reference_forward(*real, causal=causal)
    with poisoned_outputs():
        o, lse = fk.attention_fp8(*x8, *descale, causal=causal, return_lse=True, exp_on_fma=exp_on_fma)
    m = error_metrics(o, ref_o)
    assert m["nonfinite"] == 0 and m["rel_l2"] <= OUT_REL_L2 and m["max_rel"] <= OUT_MAX_REL, m
    _check_lse(lse, ref_lse)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128, 256])
def test_fp8_pingpong_matches_the_free_running_consumers(causal, D):
    """The ping-pong schedule changes when products are issued, not what they compute: the same bits."""
    _, (q8, k8, v8), (dq, dk, dv), _ = _quantized(2, 4, 2, 1000, 777, D, seed=17)
    vt, descale = fp8.vt_e4m3(v8), torch.stack([dq, dk, dv]).float()
    with poisoned_outputs():
        a = fp8.forward_vt(q8, k8, vt, descale, causal, D ** -0.5, torch.bfloat16)
        b = fp8.forward_vt(q8, k8, vt, descale, causal, D ** -0.5, torch.bfloat16, pingpong=True)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_fp8_kernel_alone_matches_the_checked_call():
    _, (q8, k8, v8), (dq, dk, dv), _ = _quantized(1, 4, 4, 256, 256, 128, seed=9)
    o = fk.attention_fp8(q8, k8, v8, dq, dk, dv)
    o2, _ = fp8.forward_vt(q8, k8, fp8.vt_e4m3(v8), torch.stack([dq, dk, dv]).float(), False, 128 ** -0.5,
                           torch.bfloat16)
    assert torch.equal(o, o2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_profiled_forward_is_the_kernel_on_inputs_prepared_once(dtype):
    """nsightlab's flash_wgmma_fp8 (fp8.profiled_forward): the first call quantizes and makes Vt, later calls with
    the same tensors launch the FP8 kernel alone (the capture's range), with the checked call's result."""
    q, k, v, _ = random_attention_inputs(2, 4, 300, 128, dtype, Hkv=2, Nk=333, seed=13)
    o1 = fp8.profiled_forward(q, k, v, causal=True, rotate=False, scales="tensor")
    prepared = next(iter(fp8._PREPARED.values()))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        o2 = fp8.profiled_forward(q, k, v, causal=True, rotate=False, scales="tensor")
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert next(iter(fp8._PREPARED.values())) is prepared
    assert len(kernels) == 1 and "fp8" in kernels[0], kernels
    (q8, dq), (k8, dk), (v8, dv) = (fp8.quantize_e4m3(t) for t in (q, k, v))
    ref = fk.attention_fp8(q8, k8, v8, dq, dk, dv, causal=True, out_dtype=dtype)
    assert o1.dtype == dtype and torch.equal(o1, ref) and torch.equal(o2, ref)


# --------------------------------------------------------------------------- incoherent processing (rotate=True)


def _rotated_quantized(q, k, v, seed=0):
    """What attention_fp8_from(rotate=True) runs: Q and K times the Hadamard rotation (fp32), then all three
    quantized per tensor; and the real (dequantized) values, in fp64."""
    qr, kr = hadamard.rotate_qk(q, k, seed, out_dtype=torch.float32)
    (q8, dq), (k8, dk), (v8, dv) = (fp8.quantize_e4m3(t) for t in (qr, kr, v))
    real = [x8.double() * d.double() for x8, d in ((q8, dq), (k8, dk), (v8, dv))]
    return (q8, k8, v8), (dq, dk, dv), real


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-H{}-Hkv{}-Nq{}-Nk{}".format(*s))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128])
def test_fp8_rotated_forward_against_reference(shape, causal, D):
    """rotate=True: the kernel on the rotated, quantized Q and K is held to the per-tensor bounds against the fp64
    attention of its dequantized inputs, and the rotation leaves that attention the unrotated one's (the
    scores are unchanged in exact arithmetic): attention_fp8_from's output is exactly the kernel's on them."""
    (q, k, v), _, _, _ = _quantized(*shape, D, seed=21)
    x8, descale, real = _rotated_quantized(q, k, v)
    ref_o, ref_lse = reference_forward(*real, causal=causal)
    with poisoned_outputs():
        o, lse = fp8.attention_fp8_from(q, k, v, causal=causal, rotate=True, scales="tensor", return_lse=True)
    assert o.dtype == torch.bfloat16 and o.shape == q.shape and lse.shape == q.shape[:3]
    m = error_metrics(o, ref_o)
    assert m["nonfinite"] == 0, "unwritten or non-finite outputs"
    assert m["rel_l2"] <= OUT_REL_L2 and m["max_rel"] <= OUT_MAX_REL, m
    _check_lse(lse, ref_lse)
    assert torch.equal(o, fk.attention_fp8(*x8, *descale, causal=causal))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128])
def test_fp8_rotated_error_against_the_unquantized_inputs_is_quantization_sized(causal, D):
    """As test_fp8_error_against_the_unquantized_inputs_is_quantization_sized, rotated: the reference is the
    unrotated fp32 inputs' attention (rotation must not change what is computed)."""
    q, k, v, _ = random_attention_inputs(2, 8, 1024, D, torch.float32, Hkv=4, seed=23)
    with poisoned_outputs():
        o = fp8.attention_fp8_from(q, k, v, causal=causal, rotate=True, scales="tensor")
    ref_x, _ = reference_forward(q, k, v, causal=causal)
    m = error_metrics(o, ref_x)
    assert m["nonfinite"] == 0 and m["rel_l2"] <= 3 * OUT_REL_L2, m


@pytest.mark.parametrize("mean", [0.0, 0.5], ids=["mean0", "mean0.5"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128])
def test_fp8_rotation_lowers_the_error_on_outliers(mean, causal, D):
    """FlashAttention-3's outlier inputs (N(0, 1) + N(0, 100) Bernoulli(0.001), its section 4.3; zero mean as
    there, and shifted): against the fp64 attention of the fp32 inputs, Q and K rotated before the per-tensor
    quantization give a lower error than per-tensor quantization alone (a CPU emulation of the kernel's rounding
    gave 0.55-0.88 times the error at 4 heads of 777 rows; FlashAttention-3 reports 2.6x lower with its
    block quantization). Ragged sizes, grouped-query heads."""
    gen = torch.Generator(device="cuda").manual_seed(31 + D)
    B, H, Hkv, N = 2, 8, 4, 1000
    q = hadamard.outlier_normal(B, H, N, D, generator=gen, device="cuda", mean=mean)
    k, v = (hadamard.outlier_normal(B, Hkv, N, D, generator=gen, device="cuda", mean=mean) for _ in range(2))
    ref, _ = reference_forward(q, k, v, causal=causal)
    errs = {}
    for rotate in (False, True):
        with poisoned_outputs():
            o = fp8.attention_fp8_from(q, k, v, causal=causal, rotate=rotate, scales="tensor")
        m = error_metrics(o, ref)
        assert m["nonfinite"] == 0, (rotate, m)
        errs[rotate] = m["rel_l2"]
    assert errs[True] < errs[False], f"rotated {errs[True]:.4f} vs per-tensor {errs[False]:.4f}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_profiled_forward_rotated_is_the_kernel_on_rotated_inputs_prepared_once(dtype):
    """profiled_forward(rotate=True): the rotation is part of the first call's preparation; a later call is the FP8
    kernel alone, with attention_fp8_from(rotate=True)'s result."""
    q, k, v, _ = random_attention_inputs(2, 4, 300, 128, dtype, Hkv=2, Nk=333, seed=29)
    o1 = fp8.profiled_forward(q, k, v, causal=True, rotate=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        o2 = fp8.profiled_forward(q, k, v, causal=True, rotate=True)
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(kernels) == 1 and "fp8" in kernels[0], kernels
    ref = fp8.attention_fp8_from(q, k, v, causal=True, rotate=True)
    assert o1.dtype == dtype and torch.equal(o1, ref) and torch.equal(o2, ref)
    plain = fp8.profiled_forward(q, k, v, causal=True, rotate=False)  # a different preparation
    assert torch.equal(plain, fp8.attention_fp8_from(q, k, v, causal=True, rotate=False))


@pytest.mark.parametrize("rotate", [False, True], ids=["per-tensor", "rotated"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 1), (2, 8, 2, 300, 519), (1, 4, 1, 1000, 1000)],
                         ids=lambda s: "B{}-H{}-Hkv{}-Nq{}-Nk{}".format(*s))
def test_fused_quantization_matches_the_torch_path(shape, D, dtype, rotate):
    """flash_kernels.quantize (two Triton passes, the rotation inside them) against fp8.quantize_e4m3 on rotate_qk's
    fp32 product: the same descale (max|x M| / 448) to fp32 rounding, every e4m3 value within one step of the torch
    path's (the rotation's sums are taken in another order, and near-ties round apart), few different at all; and the whole call, fused or not,
    within the per-tensor bounds of each other and of the unquantized inputs' attention."""
    from flash_kernels import quantize

    B, H, Hkv, Nq, Nk = shape
    q, k, v, _ = random_attention_inputs(B, H, Nq, D, dtype, Hkv=Hkv, Nk=Nk, seed=41, mean=0.5)
    for t in (q, k, v):
        seed = 0 if rotate and t is not v else None
        x8f, df = quantize.quantize_e4m3_fused(t, seed)
        src = hadamard.rotate_qk(t, t, 0, out_dtype=torch.float32)[0] if seed is not None else t
        x8t, dt = fp8.quantize_e4m3(src)
        assert x8f.shape == t.shape and x8f.dtype == torch.float8_e4m3fn
        assert abs(float(df) / float(dt) - 1) < 1e-5, (float(df), float(dt))
        a, b = x8f.float(), x8t.float()
        assert bool(((a - b).abs() <= 0.125 * torch.maximum(a.abs(), b.abs()) + 2.0 ** -9).all())
        # at near-ties the two conversions round apart (measured: at most 1.3 % of the values, bf16 inputs)
        assert float((a != b).float().mean()) < 3e-2
    with poisoned_outputs():
        o_f = fp8.attention_fp8_from(q, k, v, rotate=rotate, fused=True, scales="tensor")
    o_t = fp8.attention_fp8_from(q, k, v, rotate=rotate, fused=False, scales="tensor")
    ref, _ = reference_forward(q.float(), k.float(), v.float())
    for o in (o_f, o_t):
        m = error_metrics(o, ref)
        assert m["nonfinite"] == 0 and m["rel_l2"] <= 3 * OUT_REL_L2, m
    assert error_metrics(o_f, o_t.double())["rel_l2"] <= OUT_REL_L2


# --------------------------------------------------------------------------- per-block scales (scales="block")


def _blocky(B, H, Hkv, Nq, Nk, D, seed):
    """Inputs whose 128-row blocks differ in magnitude (x 1/4 .. x 2, by block), so that per-block descales differ
    from block to block and from the per-tensor one."""
    q, k, v, _ = random_attention_inputs(B, H, Nq, D, torch.float32, Hkv=Hkv, Nk=Nk, seed=seed, mean=0.5)
    out = []
    for t in (q, k, v):
        rows = torch.arange(t.shape[-2], device=t.device)
        out.append(t * (2.0 ** ((rows // fp8.SCALE_BLOCK) % 4 - 2)).view(-1, 1))
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-H{}-Hkv{}-Nq{}-Nk{}".format(*s))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128])
def test_fp8_per_block_forward_against_reference(shape, causal, D):
    """scales="block": the kernel's per-block variant (Q's block descale in the exp2 scale, K's per tile with the
    running max in exp2 units, V's on each tile's P V) against the fp64 attention of its dequantized inputs, at the
    per-tensor bounds; outputs poisoned first."""
    q, k, v = _blocky(*shape, D, seed=31)
    x8, ds = zip(*(fp8.quantize_e4m3(t, scales="block") for t in (q, k, v)), strict=True)
    assert ds[0].shape == (*q.shape[:2], -(-q.shape[2] // 128)) and ds[1].shape == (*k.shape[:2], -(-k.shape[2] // 128))
    real = [x.double() * fp8.block_descales(x, d).double() for x, d in zip(x8, ds, strict=True)]
    ref_o, ref_lse = reference_forward(*real, causal=causal)
    with poisoned_outputs():
        o, lse = fk.attention_fp8(*x8, *ds, causal=causal, return_lse=True)
    m = error_metrics(o, ref_o)
    assert m["nonfinite"] == 0, "unwritten or non-finite outputs"
    # the blocks' larger scores (up to 4x) make the softmax sharper, so P's e4m3 rounding weighs more: measured up
    # to 1.6 % at N = 8192 (H200); a wrong block descale costs far more
    assert m["rel_l2"] <= OUT_REL_L2_BLOCKY and m["max_rel"] <= OUT_MAX_REL, m
    # the LSE: S = Q K^T is summed by the FP8 tensor cores, whose error grows with the scores (here up to 4x the
    # per-tensor test's); per block it must stay within the per-tensor kernel's own error on the same inputs
    t8, td = zip(*(fp8.quantize_e4m3(t) for t in (q, k, v)), strict=True)
    _, t_lse = fk.attention_fp8(*t8, *td, causal=causal, return_lse=True)
    _, t_ref = reference_forward(*(x.double() * d.double() for x, d in zip(t8, td, strict=True)), causal=causal)
    err_b, err_t = float((lse.double() - ref_lse).abs().max()), float((t_lse.double() - t_ref).abs().max())
    assert err_b <= 2 * err_t + LSE_ABS, (err_b, err_t)


def test_fp8_per_tensor_descales_beside_per_block_ones_stand_for_all_their_blocks():
    """A per-tensor descale (float or one-element tensor) beside per-block ones is expanded to its blocks: the same
    bits as the call with every descale given per block."""
    q, k, v = _blocky(2, 4, 2, 300, 519, 128, seed=33)
    (q8, dq), (k8, dk) = (fp8.quantize_e4m3(t, scales="block") for t in (q, k))
    v8, dv = fp8.quantize_e4m3(v)
    with poisoned_outputs():
        mixed = fk.attention_fp8(q8, k8, v8, dq, dk, float(dv), causal=True)
    full = fk.attention_fp8(q8, k8, v8, dq, dk, dv.expand(2, 2, 5).contiguous(), causal=True)
    assert torch.equal(mixed, full)
    # all per tensor, given as per-block arrays of equal descales: the per-tensor kernel's result to rounding
    (q8, dq), (k8, dk) = (fp8.quantize_e4m3(t) for t in (q, k))
    a = fk.attention_fp8(q8, k8, v8, dq, dk, dv)
    b = fk.attention_fp8(q8, k8, v8, dq.expand(2, 4, 3).contiguous(), dk, dv)
    assert error_metrics(a, b.double())["rel_l2"] <= 1e-3


@pytest.mark.parametrize("causal", [False, True])
def test_fp8_per_block_keeps_blocks_that_a_loud_block_would_flush(causal):
    """One block of query rows 10^5 times louder than the rest: per tensor, the other rows of Q fall below e4m3's
    subnormals (most round to 0 or one step of 2^-9) and their scores, so their outputs, are far off; per block each
    block keeps its own range. Against the unquantized inputs' attention. (At 10^4 the quiet rows' rounding errors,
    uncorrelated over D, still averaged out: 1.2-2.2 % against per-block's 0.9-1.7 %, measured on an H200.)"""
    q, k, v, _ = random_attention_inputs(1, 4, 640, 128, torch.float32, Hkv=4, seed=35, mean=0.5)
    q[:, :, 256:384] *= 1e5
    ref, _ = reference_forward(q, k, v, causal=causal)
    with poisoned_outputs():
        blk = fp8.attention_fp8_from(q, k, v, causal=causal, scales="block", rotate=False)
    per_tensor = fp8.attention_fp8_from(q, k, v, causal=causal, scales="tensor", rotate=False)
    # the loud rows' softmax is one-hot on their largest score (ill-conditioned for any quantization): the other rows
    quiet = torch.cat([torch.arange(0, 256), torch.arange(384, 640)]).cuda()
    ref_q = ref[:, :, quiet]
    e_blk = error_metrics(blk[:, :, quiet], ref_q)["rel_l2"]
    e_t = error_metrics(per_tensor[:, :, quiet], ref_q)["rel_l2"]
    assert e_blk <= 0.08 and e_blk * 3 < e_t, (e_blk, e_t)


@pytest.mark.parametrize("rotate", [False, True], ids=["plain", "rotated"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 1), (2, 8, 2, 300, 519), (1, 4, 1, 1000, 1000)],
                         ids=lambda s: "B{}-H{}-Hkv{}-Nq{}-Nk{}".format(*s))
def test_fused_per_block_quantization_matches_the_torch_path(shape, D, dtype, rotate):
    """quantize_e4m3_fused(scales="block") (one Triton pass, the rotation inside) against quantize_e4m3(scales=
    "block") on rotate_qk's fp32 product: the same descales to fp32 rounding, every e4m3 value within one step; and
    attention_fp8_from(scales="block") fused or not within the bounds of each other."""
    from flash_kernels import quantize

    B, H, Hkv, Nq, Nk = shape
    q, k, v = (t.to(dtype) for t in _blocky(B, H, Hkv, Nq, Nk, D, seed=43))
    for t in (q, k, v):
        seed = 0 if rotate and t is not v else None
        with poisoned_outputs():
            x8f, df = quantize.quantize_e4m3_fused(t, seed, "block")
        src = hadamard.rotate_qk(t, t, 0, out_dtype=torch.float32)[0] if seed is not None else t
        x8t, dt = fp8.quantize_e4m3(src, scales="block")
        assert x8f.shape == t.shape and df.shape == dt.shape
        assert bool(((df / dt - 1).abs() < 1e-5).all())
        a, b = x8f.float(), x8t.float()
        assert bool(((a - b).abs() <= 0.125 * torch.maximum(a.abs(), b.abs()) + 2.0 ** -9).all())
        # near-ties round apart (x * 448/amax against torch's x / (amax/448)); a count where a block is one row of D
        # values (N = 1: 64-256; measured 9 of 256 at D = 256, bf16, unrotated, on the H200)
        assert int((a != b).sum()) <= max(16, 0.03 * a.numel())
    with poisoned_outputs():
        o_f = fp8.attention_fp8_from(q, k, v, rotate=rotate, fused=True, scales="block")
    o_t = fp8.attention_fp8_from(q, k, v, rotate=rotate, fused=False, scales="block")
    # a one-key output is one V row: the few values that round apart (one e4m3 step, up to 6 %) are all of it
    assert error_metrics(o_f, o_t.double())["rel_l2"] <= 3 * OUT_REL_L2


@pytest.mark.parametrize("scales", ["tensor", "block"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("D", [64, 128, 256])
def test_fused_quantization_subtracts_the_mean_row_as_centered_v_does(D, dtype, scales):
    """quantize_e4m3_fused(mean=...) (in fp32 inside the pass at D = 256, by torch before it at 64 and 128) against
    quantize_e4m3 of V less mu: descales to fp32 rounding, e4m3 values within one step, few apart; a mean of
    the wrong shape or beside a rotation is refused."""
    from flash_kernels import quantize

    v = _blocky(2, 4, 2, 300, 519, D, seed=47)[2].to(dtype)
    centred, mu = fp8.centered_v(v)
    with poisoned_outputs():
        x8f, df = quantize.quantize_e4m3_fused(v, None, scales, mean=mu)
    # at D = 256 the pass subtracts in fp32 and never rounds V - mu to V's dtype (bf16's 2^-8 would move a block's
    # descale by up to 0.4 %): the reference is V - mu in fp32 there, centered_v's V where torch subtracts first
    x8t, dt = fp8.quantize_e4m3(v.float() - mu if D == 256 else centred, scales=scales)
    assert x8f.shape == v.shape and df.shape == dt.shape
    assert bool(((df / dt - 1).abs() < 1e-5).all())
    a, b = x8f.float(), x8t.float()
    assert bool(((a - b).abs() <= 0.125 * torch.maximum(a.abs(), b.abs()) + 2.0 ** -9).all())
    assert float((a != b).float().mean()) < 3e-2
    with pytest.raises(ValueError, match=r"mean must be fp32 \[\.\.\., 1, D\]"):
        quantize.quantize_e4m3_fused(v, None, scales, mean=mu[:, :1])
    with pytest.raises(ValueError, match="with a rotation"):
        quantize.quantize_e4m3_fused(v, 0, scales, mean=mu)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_profiled_forward_per_block_is_the_kernel_on_inputs_prepared_once(dtype):
    q, k, v, _ = random_attention_inputs(2, 4, 300, 128, dtype, Hkv=2, Nk=333, seed=45)
    o1 = fp8.profiled_forward(q, k, v, causal=True, scales="block")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        o2 = fp8.profiled_forward(q, k, v, causal=True, scales="block")
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(kernels) == 1 and "fp8" in kernels[0], kernels
    ref = fp8.attention_fp8_from(q, k, v, causal=True, scales="block")
    assert torch.equal(o1, ref) and torch.equal(o2, ref)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_profiled_forward_at_head_dim_256_is_the_centred_kernel_on_inputs_prepared_once(dtype):
    """At D = 256 (O in the tensor cores) profiled_forward centres V by default: the range holds the FP8 kernel alone
    (V's mean added in its epilogue, no other launch), and its output is attention_fp8_from's, bit for bit."""
    q, k, v, _ = random_attention_inputs(2, 4, 300, 256, dtype, Hkv=2, Nk=333, seed=46, mean=0.5)
    o1 = fp8.profiled_forward(q, k, v, causal=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        o2 = fp8.profiled_forward(q, k, v, causal=True)
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(kernels) == 1 and "fp8" in kernels[0], kernels
    ref = fp8.attention_fp8_from(q, k, v, causal=True)
    assert torch.equal(o1, ref) and torch.equal(o2, ref)
    assert not torch.equal(ref, fp8.attention_fp8_from(q, k, v, causal=True, center_v=False))  # it did centre


# --------------------------------------------------------------------------- O summed in the tensor cores (o_sum)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-H{}-Hkv{}-Nq{}-Nk{}".format(*s))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("scales", ["tensor", "block"])
def test_fp8_o_summed_in_the_tensor_cores_against_reference(shape, causal, D, scales):
    """o_sum="tensor": O += P V in the wgmma accumulator (per-block V descales through O's units, rescaled from tile
    to tile), held to the same bounds against the fp64 attention of the dequantized inputs up to 4096 keys, and to
    TSUM_LONG_REL_L2 on longer rows (its measured cost)."""
    q, k, v = _blocky(*shape, D, seed=51) if scales == "block" else _quantized(*shape, D, seed=51)[0]
    x8, ds = zip(*(fp8.quantize_e4m3(t, scales=scales) for t in (q, k, v)), strict=True)
    real = [x.double() * (fp8.block_descales(x, d) if scales == "block" else d).double()
            for x, d in zip(x8, ds, strict=True)]
    ref_o, _ = reference_forward(*real, causal=causal)
    with poisoned_outputs():
        o = fk.attention_fp8(*x8, *ds, causal=causal, o_sum="tensor")
    m = error_metrics(o, ref_o)
    assert m["nonfinite"] == 0, "unwritten or non-finite outputs"
    if shape[4] > LONG_ROW:  # the tensor cores' short sums lose accuracy as rows grow: the cost of this option
        assert m["rel_l2"] <= TSUM_LONG_REL_L2, m
    else:
        bound = OUT_REL_L2_BLOCKY if scales == "block" else OUT_REL_L2
        assert m["rel_l2"] <= bound and m["max_rel"] <= OUT_MAX_REL, m


# --------------------------------------------------------------------------- head dim 256 (O in the tensor cores only)


@pytest.mark.parametrize("causal", [False, True])
def test_fp8_head_dim_256_sums_o_in_the_tensor_cores_by_default_and_refuses_the_rest(causal):
    """At D = 256 the kernel sums O in the tensor cores only: the default call is the o_sum="tensor" one, bit for bit
    (its accuracy: test_fp8_o_summed_in_the_tensor_cores_against_reference), and o_sum="fp32" or exponentials on the
    FMA units are refused by name."""
    (q, k, v), x8, descale, real = _quantized(2, 4, 2, 300, 519, 256, seed=61)
    with poisoned_outputs():
        o, lse = fk.attention_fp8(*x8, *descale, causal=causal, return_lse=True)
        o_t, lse_t = fk.attention_fp8(*x8, *descale, causal=causal, return_lse=True, o_sum="tensor")
    assert torch.equal(o, o_t) and torch.equal(lse, lse_t)
    ref_o, ref_lse = reference_forward(*real, causal=causal)
    m = error_metrics(o, ref_o)
    assert m["nonfinite"] == 0 and m["rel_l2"] <= OUT_REL_L2 and m["max_rel"] <= OUT_MAX_REL, m
    _check_lse(lse, ref_lse)
    with pytest.raises(ValueError, match="sums O in the tensor cores only"):
        fk.attention_fp8(*x8, *descale, causal=causal, o_sum="fp32")
    with pytest.raises(ValueError, match="exp_on_fma must be 0"):
        fk.attention_fp8(*x8, *descale, causal=causal, exp_on_fma=0.25)
    # the whole call from 16-bit inputs, per block and rotated by default: within the rotated path's bound
    qh, kh, vh = (t.to(torch.float16) for t in (q, k, v))
    with poisoned_outputs():
        o_from = fp8.attention_fp8_from(qh, kh, vh, causal=causal)
    e = error_metrics(o_from, reference_forward(qh.double(), kh.double(), vh.double(), causal=causal)[0])
    assert e["nonfinite"] == 0 and e["rel_l2"] <= 3 * OUT_REL_L2, e



@pytest.mark.parametrize("scales", ["tensor", "block"])
@pytest.mark.parametrize("D", [64, 128, 256])
def test_fp8_epilogue_adds_v_mean_to_every_row_of_each_kv_heads_query_heads(D, scales):
    """v_mean (V's mean row per batch entry and KV head, fp32): the kernel's epilogue adds it to O's normalised rows,
    as add_v_mean does to the output without it, over grouped heads, causal and not, every way of summing O, ragged
    sizes (the last query block half empty); the LSE is unchanged."""
    B, H, Hkv, Nq, Nk = 2, 8, 2, 300, 519
    q, k, v, _ = random_attention_inputs(B, H, Nq, D, torch.float32, Hkv=Hkv, Nk=Nk, seed=61)
    x8, ds = zip(*(fp8.quantize_e4m3(t, scales=scales) for t in (q, k, v)), strict=True)
    mu = torch.randn(B, Hkv, 1, D, device=q.device) * 2 + 1  # non-zero mean, a different row per KV head
    for causal in (False, True):
        for o_sum in fp8.O_SUMS if D not in fp8.O_SUM_ONLY else (fp8.O_SUM_ONLY[D],):
            plain, lse0 = fk.attention_fp8(*x8, *ds, causal=causal, o_sum=o_sum, out_dtype=torch.float16,
                                           return_lse=True)
            with poisoned_outputs():
                o, lse = fk.attention_fp8(*x8, *ds, causal=causal, o_sum=o_sum, out_dtype=torch.float16,
                                          return_lse=True, v_mean=mu)
            want = fp8.add_v_mean(plain.float(), mu)
            torch.testing.assert_close(o.float(), want, rtol=2e-3, atol=2e-3)
            assert torch.equal(lse, lse0)
    with pytest.raises(ValueError, match="v_mean must have shape"):
        fk.attention_fp8(*x8, *ds, v_mean=mu[:, :1])


@pytest.mark.parametrize("shape", [(1, 2, 1, 8192, 8192), (2, 8, 2, 300, 519)],
                         ids=lambda s: "B{}-H{}-Hkv{}-Nq{}-Nk{}".format(*s))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [128, 256])
def test_centred_v_keeps_o_summed_in_the_tensor_cores_accurate_on_long_rows(shape, causal, D):
    """center_v=True (V's mean row out before quantizing, added back to O) with O summed in the tensor cores (the
    only sum at D = 256), against fp64 attention of the unquantized inputs (mean 0.5, as the benchmarks draw them):
    within the whole call's bound (Q, K and V quantized: 3 x OUT_REL_L2, as above), never worse than without
    centring, on rows of 8192 keys at most half the uncentred error (the accumulator's loss of V's common part, which
    grows with the row), and at D = 128 close to O summed in fp32."""
    B, H, Hkv, Nq, Nk = shape
    q, k, v, _ = random_attention_inputs(B, H, Nq, D, torch.float16, Hkv=Hkv, Nk=Nk, seed=5, mean=0.5)
    ref, _ = reference_forward(q.double(), k.double(), v.double(), causal=causal)
    errs = {}
    for center, o_sum in ((False, "tensor"), (True, "tensor")) + (((False, "fp32"),) if D == 128 else ()):
        with poisoned_outputs():
            o = fp8.attention_fp8_from(q, k, v, causal=causal, o_sum=o_sum, center_v=center)
        assert o.dtype == torch.float16 and torch.isfinite(o).all()
        errs[(center, o_sum)] = error_metrics(o.double(), ref)["rel_l2"]
    centred, plain = errs[(True, "tensor")], errs[(False, "tensor")]
    assert centred <= 3 * OUT_REL_L2, errs
    assert centred <= plain * 1.1 + 1e-4, errs
    if Nk >= 8192:
        assert centred <= 0.5 * plain, errs
    if D == 128:
        assert centred <= 1.25 * errs[(False, "fp32")] + 2e-3, errs
