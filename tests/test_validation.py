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


def test_group_split_must_divide_the_group():
    q, k, v = qkv((1, 6, 16, 64))
    with pytest.raises(ValueError, match=r"group_split=4 must divide H/Hkv = 3 .*accepted here: \[1, 3\] or 'auto'"):
        fk.backward(q, k[:, :2], v[:, :2], q, None, q, variant="flash_mma", group_split=4)
    with pytest.raises(ValueError, match="group_split=5 is not supported; accepted: 'auto', 1, 2, 4, 8, 16, 32"):
        fk.backward(q, k[:, :2], v[:, :2], q, None, q, variant="flash_mma", group_split=5)


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


def _pretend_gpu(monkeypatch, capability):
    """CPU tensors through the checks as if they sat on a GPU of compute ``capability``."""
    from flash_kernels import _ops

    monkeypatch.setattr(_ops, "_check_devices", lambda names, tensors: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Pretend GPU")


def test_hopper_variant_refused_elsewhere(monkeypatch):
    _pretend_gpu(monkeypatch, (8, 0))
    with pytest.raises(ValueError, match=r"flash_wgmma needs a GPU of compute capability 9\.0 .*this GPU is 8\.0"):
        fk.forward(*qkv(), variant="flash_wgmma")


def test_flash_wgmma_options_and_dtypes(monkeypatch):
    _pretend_gpu(monkeypatch, (9, 0))
    q, k, v = qkv()
    with pytest.raises(ValueError, match="wg_bwd_tile='128x128' supports head dim \\(64,\\), not 128"):
        q128, k128, v128 = qkv((1, 2, 16, 128))
        fk.backward(q128, k128, v128, q128, torch.zeros(1, 2, 16), q128, variant="flash_wgmma", wg_bwd_tile="128x128")
    with pytest.raises(TypeError, match="flash_wgmma does not support dtype torch.float32"):
        fk.forward(*qkv(dtype=torch.float32), variant="flash_wgmma")
    with pytest.raises(ValueError, match="wg_tile='96x64' is not supported"):
        fk.forward(*qkv(), variant="flash_wgmma", wg_tile="96x64")


def test_sm90a_module_is_not_built_for_another_gpu(monkeypatch):
    from flash_kernels import _build

    _pretend_gpu(monkeypatch, (8, 9))
    with pytest.raises(RuntimeError, match=r"not building module flash_wgmma_fwd is built for sm_90a.*9\.0 only; "
                                           r"this GPU \(Pretend GPU\) is 8\.9"):
        _build.load("flash_wgmma_fwd")
    built: list[str] = []
    monkeypatch.setattr(_build, "load", lambda name, verbose=False: built.append(name))
    _build.build_all()
    assert "flash_wgmma_fwd" not in built and "flash_mma_fwd" in built
    _pretend_gpu(monkeypatch, (9, 0))
    built.clear()
    _build.build_all()
    assert "flash_wgmma_fwd" in built
    built.clear()
    _build.build_all(modules=["flash_wgmma_bwd", "flash_mma_fwd"])
    assert sorted(built) == ["flash_mma_fwd", "flash_wgmma_bwd"]
    with pytest.raises(ValueError, match=r"no module named flash_wgmma; the modules are naive, tiled, .*flash_wgmma_bwd"):
        _build.build_all(modules=["flash_wgmma", "flash_mma_fwd"])
