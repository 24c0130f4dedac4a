import dataclasses

import pytest

import flash_kernels as fk
from flash_kernels.registry import VARIANTS, get_variant, unavailable_reason


def test_table_of_the_issue_is_in_the_registry():
    assert list(VARIANTS) == ["naive", "tiled", "tiled_uncoalesced", "flash_fa1", "flash_simt", "flash_mma",
                              "flash_wgmma", "flash_decode"]
    for v in VARIANTS.values():
        assert {64, 128} <= set(v.head_dims) and "float16" in v.dtypes and v.description
    assert VARIANTS["flash_fa1"].passes == ("forward",)
    assert "bfloat16" in VARIANTS["flash_mma"].dtypes
    for name in ("naive", "flash_simt"):
        assert "float32" in VARIANTS[name].dtypes
    for name in ("naive", "flash_simt", "flash_mma"):
        assert VARIANTS[name].causal
    assert VARIANTS["flash_simt"].options["block_size"].choices == (4, 8, 16, 32)
    assert VARIANTS["flash_fa1"].options == VARIANTS["flash_simt"].options  # one tile, two loop orders
    assert len(VARIANTS["flash_mma"].options["tile"].choices) >= 2


def test_unknown_variant_lists_the_known_ones():
    with pytest.raises(ValueError, match="known variants: naive, tiled"):
        get_variant("flash3")


def test_options_resolve_and_reject():
    mma = get_variant("flash_mma")
    assert mma.resolve_options({}, 64)["tile"] == mma.options["tile"].default[64]
    with pytest.raises(ValueError, match="unknown option.*block_size"):
        mma.resolve_options({"block_size": 8}, 64)
    with pytest.raises(ValueError, match="accepted: '128x64'"):
        mma.resolve_options({"tile": "7x7"}, 64)
    with pytest.raises(ValueError, match="supports head dim"):
        mma.resolve_options({"bwd_tile": "128x128"}, 128)


def test_every_default_is_a_valid_choice():
    for v in VARIANTS.values():
        for opt in v.options.values():
            for D in v.head_dims:
                assert opt.resolve(None, D, v.name) in opt.choices
                assert D in opt.head_dims.get(opt.default[D], v.head_dims)


def test_describe_is_plain_data():
    rows = fk.describe()
    assert [r["variant"] for r in rows] == list(VARIANTS)


def test_flash_wgmma_is_a_hopper_variant():
    v = get_variant("flash_wgmma")
    assert v.passes == ("forward", "backward") and v.arch == "sm_90a" and v.dtypes == ("float16", "bfloat16")
    assert v.grouped_query and v.cross and v.causal and v.head_dims == (64, 128, 256)
    assert v.head_dims_of("forward") == v.head_dims_of("backward") == (64, 128, 256)
    # a pass the variant lacks has no head dims; one without a narrower list has the variant's; a narrower list holds
    assert get_variant("flash_fa1").head_dims_of("backward") == () and get_variant("flash_mma").head_dims_of(
        "backward") == get_variant("flash_mma").head_dims
    narrow = dataclasses.replace(v, pass_head_dims={"backward": (64, 128)})
    assert narrow.head_dims_of("backward") == (64, 128) and narrow.head_dims_of("forward") == (64, 128, 256)
    # the backward at D = 256: the 64x64 tile on the cp.async pipeline, nothing else
    assert v.resolve_options({}, 256)["wg_bwd_tile"] == "64x64" and v.resolve_options({}, 256)["bwd_pipeline"] == "cp.async"
    for bad, there in (({"wg_bwd_tile": "64x128"}, "'64x64'"), ({"bwd_pipeline": "tma-ws"}, "'cp.async'")):
        # the refusal names what the option takes at this head dim, so that the caller can fix the call
        with pytest.raises(ValueError, match=rf"supports head dim \(64, 128\), not 256; at head dim 256 it takes "
                                             rf"{there} \(default {there}, or leave it out\)"):
            v.resolve_options(bad, 256)
    with pytest.raises(ValueError, match=r"wg_bwd_tile='64x64' supports head dim \(256,\)"):
        v.resolve_options({"wg_bwd_tile": "64x64"}, 128)
    # D = 256: the 128x64 tile of the one-tile-per-block warp-specialised pipelines, nothing else
    assert v.resolve_options({}, 256)["wg_tile"] == "128x64" and v.resolve_options({}, 256)["pipeline"] == "tma-ws-pingpong"
    for bad in ({"wg_tile": "128x128"}, {"wg_tile": "192x128"}, {"pipeline": "tma"},
                {"pipeline": "tma-ws-persistent-pingpong"}):
        with pytest.raises(ValueError, match=r"supports head dim \(64, 128\), not 256"):
            v.resolve_options(bad, 256)
    assert v.resolve_options({}, 128) == {"wg_tile": "192x128", "pipeline": "tma-ws-persistent-pingpong",
                                          "tail": "auto", "wg_bwd_tile": "64x128", "bwd_pipeline": "tma-ws",
                                          "group_split": "auto"}
    assert v.resolve_options({}, 64) == {"wg_tile": "192x128", "pipeline": "tma-ws-persistent-pingpong", "tail": "auto",
                                         "wg_bwd_tile": "128x128", "bwd_pipeline": "tma-ws", "group_split": "auto"}
    with pytest.raises(ValueError, match="wg_bwd_tile='128x128' supports head dim"):
        v.resolve_options({"wg_bwd_tile": "128x128"}, 128)
    with pytest.raises(ValueError, match="wg_tile='64x64' is not supported; accepted: '128x128'"):
        v.resolve_options({"wg_tile": "64x64"}, 64)
    with pytest.raises(ValueError, match="pipeline='tcgen05' is not supported; accepted: 'cp.async', 'tma'"):
        v.resolve_options({"pipeline": "tcgen05"}, 64)
    with pytest.raises(ValueError, match="unknown option.*tile; accepted: bwd_pipeline, group_split, pipeline, tail, "
                                         "wg_bwd_tile, wg_tile"):
        v.resolve_options({"tile": "128x64"}, 64)
    assert {r["variant"]: r["arch"] for r in fk.describe()}["flash_wgmma"] == "sm_90a"


def test_unavailable_reason_names_the_needed_gpu():
    assert unavailable_reason("flash_wgmma", (9, 0)) is None
    assert unavailable_reason("flash_wgmma", None) is None  # no GPU known: no claim
    for cap in ((8, 0), (8, 9), (10, 0), (12, 0)):
        why = unavailable_reason("flash_wgmma", cap)
        assert why is not None and "compute capability 9.0" in why and f"this GPU is {cap[0]}.{cap[1]}" in why
    for name in VARIANTS:
        if name != "flash_wgmma":
            assert unavailable_reason(name, (8, 0)) is None and unavailable_reason(name, (9, 0)) is None
    with pytest.raises(ValueError, match="unknown variant"):
        unavailable_reason("flash4", (9, 0))


def test_arch_modules_build_for_their_own_target():
    from flash_kernels.sources import ARCH_CAPABILITY, MODULES, arch_flags, cu_arch

    assert MODULES["flash_wgmma_fwd"].arch == "sm_90a" and ARCH_CAPABILITY["sm_90a"] == (9, 0)
    assert arch_flags("sm_90a") == ["-gencode=arch=compute_90a,code=sm_90a"] and arch_flags("sm_90") == ["-arch=sm_90"]
    assert cu_arch(MODULES["flash_wgmma_fwd"].cu, "sm_80") == "sm_90a" and cu_arch("flash_mma_fwd.cu", "sm_80") == "sm_80"
    for v in VARIANTS.values():  # a variant's arch is one the build knows
        assert v.arch is None or v.arch in ARCH_CAPABILITY


def test_a_pass_that_lacks_a_head_dim_is_refused_by_name_before_any_device(monkeypatch):
    """A variant whose backward takes fewer head dims than its forward (here flash_wgmma narrowed to 64, 128 for the
    test; its backward takes 256 too): fk.backward says which pass and which head dims before looking at the device
    (the forward gets as far as the device)."""
    import torch

    monkeypatch.setitem(VARIANTS, "flash_wgmma",
                        dataclasses.replace(VARIANTS["flash_wgmma"], pass_head_dims={"backward": (64, 128)}))
    q = torch.zeros(1, 2, 16, 256, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"flash_wgmma's backward does not support head dim 256; accepted: \(64, 128\)"):
        fk.backward(q, q, q, q, torch.zeros(1, 2, 16), q, variant="flash_wgmma")
    # the forward passes the head-dim check and stops at the device (this machine's tensors are on the CPU)
    with pytest.raises(ValueError, match="CUDA tensors only"):
        fk.forward(q, q, q, variant="flash_wgmma")
