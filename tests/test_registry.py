import pytest

import flash_kernels as fk
from flash_kernels.registry import VARIANTS, get_variant


def test_table_of_the_issue_is_in_the_registry():
    assert list(VARIANTS) == ["naive", "tiled", "tiled_uncoalesced", "flash_fa1", "flash_simt", "flash_mma"]
    for v in VARIANTS.values():
        assert {64, 128} <= set(v.head_dims) and "float16" in v.dtypes and v.description
    assert VARIANTS["flash_fa1"].passes == ("forward",)
    assert "bfloat16" in VARIANTS["flash_mma"].dtypes
    for name in ("naive", "flash_simt"):
        assert "float32" in VARIANTS[name].dtypes
    for name in ("naive", "flash_simt", "flash_mma"):
        assert VARIANTS[name].causal
    assert VARIANTS["flash_simt"].options["block_size"].choices == (4, 8, 16, 32)
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
        mma.resolve_options({"tile": "128x64"}, 128)


def test_every_default_is_a_valid_choice():
    for v in VARIANTS.values():
        for opt in v.options.values():
            for D in v.head_dims:
                assert opt.resolve(None, D, v.name) in opt.choices
                assert D in opt.head_dims.get(opt.default[D], v.head_dims)


def test_describe_is_plain_data():
    rows = fk.describe()
    assert [r["variant"] for r in rows] == list(VARIANTS)
