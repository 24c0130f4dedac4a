"""GPU tests of the Triton GEMM example: forward and backward against a float64 reference, at sizes that are
not multiples of any block, on inputs with a non-zero mean, with C poisoned (NaN) before each kernel runs.

Run on a machine with a CUDA GPU and triton: ``python -m pytest examples/gemm -q``. Without them the module is skipped.
"""

import pytest
import torch

pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from examples.gemm import triton_gemm  # noqa: E402

SHAPES = [(1, 1, 1), (17, 33, 65), (128, 128, 32), (300, 200, 1000), (1024, 4096, 1024)]
#: max|out - ref| / max|ref|; fp32 accumulation over K <= 1000 measured ~1e-3 in fp16 (the output's own rounding)
TOL = {torch.float16: 5e-3, torch.bfloat16: 2e-2}


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton_gemm, "_POISON", True)


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert torch.isfinite(out).all(), f"{int((~torch.isfinite(out)).sum())} non-finite elements (unwritten?)"
    return (out.double() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_and_backward_match_float64(shape, dtype):
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(M * 7 + N * 3 + K)
    a, b, dc = ((torch.randn(*s, generator=gen, device="cuda") + 0.5).to(dtype) for s in ((M, K), (K, N), (M, N)))
    a.requires_grad_(True)
    b.requires_grad_(True)
    c = triton_gemm.gemm(a, b)
    c.backward(dc)
    a64, b64, dc64 = a.detach().double(), b.detach().double(), dc.double()
    assert _rel(c.detach(), a64 @ b64) < TOL[dtype]
    assert _rel(a.grad, dc64 @ b64.t()) < TOL[dtype]
    assert _rel(b.grad, a64.t() @ dc64) < TOL[dtype]


def test_shapes_that_do_not_chain_are_refused():
    with pytest.raises(ValueError, match="A \\[M, K\\] and B \\[K, N\\]"):
        triton_gemm.matmul(torch.zeros(4, 5, device="cuda", dtype=torch.float16),
                           torch.zeros(6, 7, device="cuda", dtype=torch.float16))
