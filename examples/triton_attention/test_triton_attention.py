"""GPU tests of the Triton attention example: forward and backward against a float64 PyTorch reference.

Run on a machine with a CUDA GPU and triton: ``python -m pytest examples/triton_attention -q``.
Without them the whole module is skipped.
"""

import math

import pytest
import torch
import triton_attention
from triton_attention import attention

pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

B, H = 2, 3
SEQ_LENS = [1, 17, 100, 128, 1000, 1024]
HEAD_DIMS = [64, 128]
DTYPES = [torch.float16, torch.bfloat16]
# Bounds on max|out - ref| / max|ref| per dtype. bf16 gradients get 6e-2: dQ is the worst, because
# Delta = rowsum(dO * O) is computed from the bf16-rounded O (as in FlashAttention-2), and with these
# inputs dQ is small (max ~0.5) next to that rounding; N ~ 1000 without the mask measured 2e-2 to 4.5e-2
# (about 1e-2 when O is kept in fp32). fp16 measured about 1e-3.
OUT_TOL = {torch.float16: 1e-2, torch.bfloat16: 2e-2}
GRAD_TOL = {torch.float16: 2e-2, torch.bfloat16: 6e-2}


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every buffer the kernels write is NaN-filled first: an element they skip shows up as NaN."""
    monkeypatch.setattr(triton_attention, "_POISON", True)


def _inputs(N: int, D: int, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """q, k, v, dout ~ N(0.5, 1): a non-zero mean so that relative errors mean something."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return tuple((torch.randn(B, H, N, D, generator=gen, device="cuda") + 0.5).to(dtype) for _ in range(4))


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """softmax(scale * q k^T) v in float64 on the GPU, with the top-left causal mask (query i sees keys j <= i)."""
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        n = q.shape[-2]
        future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(future, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _max_rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max|out - ref| / max|ref|. The floor keeps an all-zero reference (N=1: dq = dk = 0 exactly) finite."""
    assert torch.isfinite(out).all(), f"{int((~torch.isfinite(out)).sum())} non-finite elements (unwritten or overflowed)"
    err = (out.double() - ref).abs().max().item()
    return err / max(ref.abs().max().item(), 1e-2)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D", HEAD_DIMS)
@pytest.mark.parametrize("N", SEQ_LENS)
def test_forward_backward_match_float64_reference(N: int, D: int, causal: bool, dtype: torch.dtype) -> None:
    q, k, v, dout = _inputs(N, D, dtype)
    scale = 1.0 / math.sqrt(D)

    q_t, k_t, v_t = (t.clone().requires_grad_() for t in (q, k, v))
    out = attention(q_t, k_t, v_t, causal=causal)
    out.backward(dout)

    # The reference sees the very same (fp16/bf16) inputs, upcast to float64.
    q_r, k_r, v_r = (t.double().requires_grad_() for t in (q, k, v))
    ref = _reference(q_r, k_r, v_r, causal, scale)
    ref.backward(dout.double())

    assert out.shape == q.shape and out.dtype == dtype
    err = _max_rel(out, ref)
    assert err <= OUT_TOL[dtype], f"forward: max|err|/max|ref| = {err:.3g}"
    for name, got, want in (("dq", q_t.grad, q_r.grad), ("dk", k_t.grad, k_r.grad), ("dv", v_t.grad, v_r.grad)):
        assert got.shape == q.shape and got.dtype == dtype
        err = _max_rel(got, want)
        assert err <= GRAD_TOL[dtype], f"{name}: max|err|/max|ref| = {err:.3g}"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("N", [17, 1000])
def test_lse_matches_reference(N: int, causal: bool) -> None:
    q, k, v, _ = _inputs(N, 64, torch.float16, seed=1)
    scale = 0.125
    _, lse = triton_attention._forward(q, k, v, causal, scale)
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    ref = torch.logsumexp(s, dim=-1)
    assert lse.shape == (B, H, N) and lse.dtype == torch.float32
    assert torch.isfinite(lse).all()
    assert (lse.double() - ref).abs().max().item() <= 2e-3


def test_explicit_scale_and_non_contiguous_inputs() -> None:
    N, D = 100, 64
    q, k, v, _ = _inputs(N, D, torch.float16, seed=2)
    # [B, N, H, D] memory viewed as [B, H, N, D]: non-contiguous, as from a fused QKV projection.
    qt, kt, vt = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    assert not qt.is_contiguous()
    out = attention(qt, kt, vt, causal=True, scale=0.3)
    ref = _reference(q.double(), k.double(), v.double(), True, 0.3)
    assert _max_rel(out, ref) <= OUT_TOL[torch.float16]


def test_backward_is_deterministic() -> None:
    q, k, v, dout = _inputs(1000, 64, torch.float16, seed=3)
    grads = []
    for _ in range(2):
        ts = [t.clone().requires_grad_() for t in (q, k, v)]
        attention(*ts, causal=True).backward(dout)
        grads.append([t.grad for t in ts])
    for a, b in zip(*grads, strict=True):
        assert torch.equal(a, b)


def test_rejects_cpu_tensors() -> None:
    q = torch.randn(B, H, 16, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"cpu.*CUDA"):
        attention(q, q, q)


def test_rejects_float32() -> None:
    q = torch.randn(B, H, 16, 64, device="cuda")
    with pytest.raises(ValueError, match=r"torch\.float32.*torch\.float16 or torch\.bfloat16"):
        attention(q, q, q)


def test_rejects_mixed_dtypes() -> None:
    q = torch.randn(B, H, 16, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="share one dtype"):
        attention(q, q.bfloat16(), q)


def test_rejects_head_dim_100() -> None:
    q = torch.randn(B, H, 16, 100, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match=r"head dim D = 100.*\(64, 128\)"):
        attention(q, q, q)


def test_rejects_different_query_and_key_lengths() -> None:
    q = torch.randn(B, H, 16, 64, device="cuda", dtype=torch.float16)
    kv = torch.randn(B, H, 32, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match=r"same shape.*Nq == Nk"):
        attention(q, kv, kv)


def test_rejects_3d_input() -> None:
    q = torch.randn(H, 16, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match=r"4-D \[B, H, N, D\]"):
        attention(q, q, q)
