"""Bad input gets a clear error naming the problem and what is accepted (no GPU needed)."""

import pytest

torch = pytest.importorskip("torch")

import flash_kernels as fk  # noqa: E402


def qkv(shape=(1, 2, 16, 64), dtype=torch.float16, device="cpu"):
    return [torch.randn(shape, dtype=torch.float32, device=device).to(dtype) for _ in range(3)]


def test_cpu_tensors_are_refused():
    with pytest.raises(ValueError, match="q is on cpu; flash_kernels runs on CUDA tensors only"):
        fk.forward(*qkv())


def test_no_cuda_device_is_said():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="no CUDA device"):
        fk.attention(*qkv())


def test_unknown_variant():
    with pytest.raises(ValueError, match="unknown variant 'fast'; known variants"):
        fk.forward(*qkv(), variant="fast")


def test_unknown_option():
    with pytest.raises(ValueError, match="unknown option"):
        fk.forward(*qkv(), variant="flash_simt", tile="128x64")


def test_bad_option_value():
    with pytest.raises(ValueError, match="block_size=5 is not supported; accepted: 4, 8, 16, 32"):
        fk.forward(*qkv(), variant="flash_simt", block_size=5)


def test_dtype_unsupported_by_variant():
    with pytest.raises(TypeError, match="flash_mma does not support dtype torch.float32; accepted: torch.float16"):
        fk.forward(*qkv(dtype=torch.float32), variant="flash_mma")


def test_mismatched_dtypes():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="same dtype"):
        fk.forward(q, k.float(), v)


def test_mismatched_shapes():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="k and v must have the same shape"):
        fk.forward(q, k[:, :, :8], v)
    q, k, v = qkv((2, 2, 16, 64))
    with pytest.raises(ValueError, match="q's batch B=2 and head dim D=64"):
        fk.forward(q, k[:1], v[:1])


def test_grouped_query_and_cross_shapes_are_checked():
    q, k, v = qkv((2, 4, 16, 64))
    with pytest.raises(ValueError, match="4 heads must be a multiple of k/v's 3 heads"):
        fk.forward(q, k[:, :3], v[:, :3], variant="flash_simt")
    with pytest.raises(ValueError, match="naive takes k/v with as many heads as q .*grouped-query attention: flash_fa1, "
                                         "flash_simt, flash_mma"):
        fk.forward(q, k[:, :2], v[:, :2], variant="naive")
    with pytest.raises(ValueError, match="tiled takes k/v with as many keys .*cross attention: flash_fa1"):
        fk.forward(q, k[:, :, :8], v[:, :, :8], variant="tiled")
    with pytest.raises(ValueError, match="grad_out must have q's shape"):
        fk.backward(q, k, v, q, None, q[:, :, :3], variant="flash_mma")


def test_wrong_rank():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="4-D"):
        fk.forward(q[0], k[0], v[0])


def test_not_a_tensor():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="k must be a torch.Tensor"):
        fk.forward(q, k.numpy(), v)


def test_head_dim():
    with pytest.raises(ValueError, match="does not support head dim 32; accepted: \\(64, 128\\)"):
        fk.forward(*qkv((1, 1, 8, 32)), variant="flash_simt")


def test_causal_must_be_bool():
    with pytest.raises(TypeError, match="causal must be a bool"):
        fk.forward(*qkv(), causal=1)


def test_backward_of_forward_only_variant():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="flash_fa1 implements the forward pass only; variants with a backward"):
        fk.backward(q, k, v, q, torch.zeros(1, 2, 16), q, variant="flash_fa1")
