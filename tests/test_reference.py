"""The reference implementation against PyTorch's own SDPA on the CPU, forward and backward."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from flash_kernels.reference import reference_attention, reference_backward, reference_forward  # noqa: E402


@pytest.mark.parametrize("N", [1, 17, 100, 128])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("chunked", [False, True])
def test_reference_matches_sdpa(N, D, causal, chunked):
    gen = torch.Generator().manual_seed(N * 131 + D)
    q, k, v, g = (torch.randn(2, 3, N, D, generator=gen, dtype=torch.float64) + 0.5 for _ in range(4))
    # a small max_elems forces the query-chunked path
    kw = {"max_elems": 2 * 3 * N * 7} if chunked else {}
    o, lse = reference_forward(q, k, v, causal=causal, **kw)
    qs, ks, vs = (t.clone().requires_grad_(True) for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
    torch.testing.assert_close(o, ref.detach(), rtol=1e-10, atol=1e-10)
    s = (q @ k.transpose(-1, -2)) / D**0.5
    if causal:
        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(s, -1), rtol=1e-10, atol=1e-10)
    ref.backward(g)
    dq, dk, dv = reference_backward(q, k, v, g, causal=causal, **kw)
    for got, want in ((dq, qs.grad), (dk, ks.grad), (dv, vs.grad)):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


def test_reference_custom_scale_and_fp32():
    q, k, v = (torch.randn(1, 2, 33, 64) + 0.5 for _ in range(3))
    o, _ = reference_forward(q, k, v, scale=0.3, dtype=torch.float32)
    torch.testing.assert_close(o, F.scaled_dot_product_attention(q, k, v, scale=0.3), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(reference_attention(q, k, v, scale=0.3), o, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- grouped-query and cross attention


def _sdpa(q, k, v, causal, **kw):
    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa, **kw)


def _masked_scores(q, k, causal):
    """Scores against k expanded over the query heads, the top-left causal mask applied explicitly."""
    N, Nk, G = q.shape[-2], k.shape[-2], q.shape[1] // k.shape[1]
    s = (q @ k.repeat_interleave(G, dim=1).transpose(-1, -2)) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(~torch.ones(N, Nk, dtype=torch.bool).tril(), float("-inf"))
    return s


@pytest.mark.parametrize("Hkv", [4, 2, 1])
@pytest.mark.parametrize("Nq", [1, 5, 100])
@pytest.mark.parametrize("Nk", [1, 17, 130])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("chunked", [False, True])
def test_reference_gqa_and_cross_match_sdpa(Hkv, Nq, Nk, causal, chunked):
    B, H, D = 2, 4, 40
    gen = torch.Generator().manual_seed(Nq * 1009 + Nk * 31 + Hkv)
    q, g = (torch.randn(B, H, Nq, D, generator=gen, dtype=torch.float64) + 0.5 for _ in range(2))
    k, v = (torch.randn(B, Hkv, Nk, D, generator=gen, dtype=torch.float64) + 0.5 for _ in range(2))
    kw = {"max_elems": B * H * Nk * 3} if chunked else {}  # three query rows per chunk
    o, lse = reference_forward(q, k, v, causal=causal, **kw)
    assert o.shape == q.shape and lse.shape == (B, H, Nq)
    qs, ks, vs = (t.clone().requires_grad_(True) for t in (q, k, v))
    ref = _sdpa(qs, ks, vs, causal)
    torch.testing.assert_close(o, ref.detach(), rtol=1e-10, atol=1e-10)
    s = _masked_scores(q, k, causal)
    assert torch.isfinite(s).any(-1).all()  # top-left: every query sees key 0, no row is fully masked
    torch.testing.assert_close(lse, torch.logsumexp(s, -1), rtol=1e-10, atol=1e-10)
    ref.backward(g)
    dq, dk, dv = reference_backward(q, k, v, g, causal=causal, **kw)
    assert dq.shape == q.shape and dk.shape == dv.shape == k.shape
    for got, want in ((dq, qs.grad), (dk, ks.grad), (dv, vs.grad)):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(("Hkv", "Nq", "Nk", "causal"), [(2, 33, 65, True), (1, 70, 9, True), (4, 16, 300, False)])
def test_reference_attention_gqa_and_cross(Hkv, Nq, Nk, causal):
    q = torch.randn(1, 4, Nq, 32) + 0.5
    k, v = (torch.randn(1, Hkv, Nk, 32) + 0.5 for _ in range(2))
    o32, _ = reference_forward(q, k, v, causal=causal, dtype=torch.float32)
    torch.testing.assert_close(o32, _sdpa(q, k, v, causal), rtol=1e-5, atol=1e-5)
    qs, ks, vs = (t.clone().requires_grad_(True) for t in (q, k, v))
    out = reference_attention(qs, ks, vs, causal=causal)
    torch.testing.assert_close(out, o32, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(q)
    out.backward(g)
    dq, dk, dv = reference_backward(q, k, v, g, causal=causal)
    for got, want in ((qs.grad, dq), (ks.grad, dk), (vs.grad, dv)):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


def test_reference_chunking_does_not_change_the_result():
    q = torch.randn(1, 8, 57, 16, dtype=torch.float64)
    k, v = (torch.randn(1, 2, 23, 16, dtype=torch.float64) for _ in range(2))
    g = torch.randn_like(q)
    whole = (*reference_forward(q, k, v, causal=True), *reference_backward(q, k, v, g, causal=True))
    for max_elems in (1, 8 * 23 * 5, 8 * 23 * 56):  # one row per chunk, five, a ragged last chunk
        parts = (*reference_forward(q, k, v, causal=True, max_elems=max_elems),
                 *reference_backward(q, k, v, g, causal=True, max_elems=max_elems))
        for a, b in zip(parts, whole, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("q_shape", "kv_shape", "match"), [
    ((1, 6, 8, 16), (1, 4, 8, 16), "multiple of k/v's heads Hkv=4"),
    ((1, 4, 8, 16), (2, 4, 8, 16), "k and v must be"),
    ((1, 4, 8, 16), (1, 4, 8, 32), "k and v must be"),
    ((4, 8, 16), (1, 4, 8, 16), "must be 4-D"),
])
def test_reference_rejects_shapes_that_do_not_fit(q_shape, kv_shape, match):
    q, k = torch.zeros(q_shape), torch.zeros(kv_shape)
    for fn in (reference_forward, reference_attention):
        with pytest.raises(ValueError, match=match):
            fn(q, k, k)
    with pytest.raises(ValueError, match=match):
        reference_backward(q, k, k, q)


def test_reference_backward_wants_grad_out_like_q():
    q, k = torch.zeros(1, 4, 8, 16), torch.zeros(1, 2, 5, 16)
    with pytest.raises(ValueError, match="grad_out must be shaped like q"):
        reference_backward(q, k, k, torch.zeros(1, 4, 5, 16))
