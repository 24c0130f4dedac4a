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
