"""One contract per kernel module (flash_kernels/variants.py): the option codes Python encodes are the ones the .cu
files decode (through the generated csrc/option_codes.h), the constants both sides use come from one table, and
a variant whose dispatch is not written out runs through its contract. No GPU; torch only for the dispatch test."""

import itertools
import re
from pathlib import Path

import pytest

from flash_kernels import registry, sources, variants
from flash_kernels.variants import HEADER, KERNELS, Field, Kernel

CSRC = Path(variants.__file__).resolve().parent / "csrc"


def test_the_committed_header_is_what_the_table_writes():
    assert HEADER.read_text() == variants.header(), (
        "csrc/option_codes.h is stale: run `python -m flash_kernels.variants` and commit it")


def _samples(field: Field) -> list:
    if field.values:
        return list(field.values)
    return [0, 1, 7, 255] if field.width is None or field.width >= 8 else list(range(1 << field.width))


@pytest.mark.parametrize("name", list(registry.KERNELS))
def test_every_combination_of_a_modules_fields_round_trips(name):
    k = registry.KERNELS[name]
    for combo in itertools.product(*(_samples(f) for f in k.fields)):
        values = dict(zip([f.name for f in k.fields], combo, strict=True))
        code = k.encode(**values)
        assert k.decode(code) == values, (name, values, code)
        for f in k.fields:  # what the header's accessor returns is the field's code
            assert f.extract(code) == f.code_of(values[f.name])


def test_the_codes_keep_the_layout_the_compiled_kernels_read():
    """The bit layout of every option code, spelled out (a change here is a change of every .cu's decoding)."""
    k = KERNELS
    assert k["flash_wgmma_fwd"].encode(tile="192x64", pipeline="tma-ws-persistent-pingpong", tail=5) == 3 | 6 << 4 | 5 << 8
    assert k["flash_wgmma_fwd"].encode(tile="128x128", pipeline="cp.async") == 0
    assert k["flash_wgmma_bwd"].encode(tile="128x128", pipeline="tma-ws", group_split=4) == 1 | 1 << 4 | 4 << 8
    assert k["flash_mma_bwd"].encode(tile="128x128", group_split=2) == 1 | 2 << 8
    assert [k["flash_mma_fwd"].encode(tile=t) for t in ("128x64", "128x32", "64x64")] == [0, 1, 2]
    assert k["flash_wgmma_fp8"].encode(out_dtype="float16", exp_on_fma=0.5, pingpong=True) == 1 | 2 << 4 | 1 << 8
    assert k["flash_decode"].encode(block="rows64-split-keys", splits=8) == 4 | 8 << 8
    assert [k["flash_simt"].encode(block_size=b) for b in (4, 8, 16, 32)] == [4, 8, 16, 32]
    assert k["tiled"].encode(form="tiled_uncoalesced") == 1 and k["naive"].encode() == 0


def test_bad_values_are_errors_that_name_the_choices():
    with pytest.raises(ValueError, match=r"pipeline: 'tma-ws-turbo' is not one of \['cp.async'"):
        KERNELS["flash_wgmma_fwd"].encode(pipeline="tma-ws-turbo")
    with pytest.raises(ValueError, match="no option field bogus"):
        KERNELS["flash_mma_fwd"].encode(bogus=1)
    with pytest.raises(ValueError, match="whole number >= 0"):
        KERNELS["flash_decode"].encode(splits=-1)
    with pytest.raises(ValueError, match="does not fit 4 bits"):
        Field("x", 0, 4, {"a": 16})
    with pytest.raises(ValueError, match="overlaps"):
        Kernel("m", "m.cu", "bind_m.cpp", ("fwd",), variants.CUDA_CORES, fields=(Field("a", 0, 8), Field("b", 4, 4)))


#: each registry option that reaches an option code, and the field of the module that encodes it
_OPTION_FIELDS = {
    ("flash_fa1", "block_size"): ("flash_fa1", "block_size"),
    ("flash_simt", "block_size"): ("flash_simt", "block_size"),
    ("flash_mma", "tile"): ("flash_mma_fwd", "tile"),
    ("flash_mma", "bwd_tile"): ("flash_mma_bwd", "tile"),
    ("flash_wgmma", "wg_tile"): ("flash_wgmma_fwd", "tile"),
    ("flash_wgmma", "pipeline"): ("flash_wgmma_fwd", "pipeline"),
    ("flash_wgmma", "wg_bwd_tile"): ("flash_wgmma_bwd", "tile"),
    ("flash_wgmma", "bwd_pipeline"): ("flash_wgmma_bwd", "pipeline"),
}


@pytest.mark.parametrize("variant, option", list(_OPTION_FIELDS))
def test_every_choice_of_a_variant_option_has_its_code(variant, option):
    module, name = _OPTION_FIELDS[(variant, option)]
    assert set(registry.VARIANTS[variant].options[option].choices) == set(KERNELS[module].field(name).values)
    assert module in [k.module for k in registry.kernels_of(variant)]


def test_the_build_and_the_registry_read_one_table():
    assert list(sources.MODULES) == list(registry.KERNELS)
    for name, spec in sources.MODULES.items():
        k = registry.KERNELS[name]
        assert (spec.cu, spec.cpp, spec.functions, spec.arch) == (k.cu, k.cpp, k.functions, k.arch)
        assert (CSRC / k.cu).exists() and (CSRC / k.cpp).exists()
    used = {k.module for v in registry.VARIANTS.values() for k in registry.kernels_of(v)}
    assert used | {"flash_wgmma_fp8"} == set(registry.KERNELS)  # fp8.py drives the last one
    assert {v: registry.engine(v) for v in ("flash_simt", "flash_mma", "flash_wgmma", "flash_decode")} == {
        "flash_simt": "CUDA cores", "flash_mma": "tensor cores", "flash_wgmma": "tensor cores", "flash_decode": "tensor cores"}


_LITERAL_DECODE = re.compile(r"\boption\s*(>>|&)\s*\d|case\s+\d+\s*:")


@pytest.mark.parametrize("name", [n for n, k in KERNELS.items() if k.fields and n not in ("flash_fa1", "flash_simt")])
def test_a_modules_cu_decodes_its_option_through_the_generated_header(name):
    """No literal shifts, masks or case codes for the option left in the .cu (simt.cuh's block-size switch is on
    the number itself: its code is the block size); the header is included, through the sources load_inline gets."""
    k = KERNELS[name]
    text = (CSRC / k.cu).read_text()
    code_lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("//")]
    assert not [ln for ln in code_lines if _LITERAL_DECODE.search(ln) and "option" in ln or
                re.search(r"\ba\.option\s*(>>|&|==\s*\d)", ln)], name
    assert f"codes::{name}" in text
    assert "namespace codes" in sources.module_source(name)[1]


def test_constants_the_python_side_mirrors_come_from_the_table():
    from flash_kernels import _ops, fp8

    assert _ops._BWD_KEYS == KERNELS["flash_mma_bwd"].constants["keys"] == KERNELS["flash_wgmma_bwd"].constants["keys"]
    assert _ops._DECODE_KEYS == KERNELS["flash_decode"].constants["keys"]
    c = KERNELS["flash_decode_wgmma"].constants
    assert _ops._decode_wg_smem(128) == c["stages_d128"] * 2 * c["keys"] * 128 * 2 + 64 * 128 * 2 + c["smem_slack"]
    assert _ops._decode_stages(128, 64, 65) == KERNELS["flash_decode"].constants["stages_d128_many_rows"]
    assert fp8.VT_GROUP == KERNELS["flash_wgmma_fp8"].constants["vt_group"]
    assert fp8.EXP_ON_FMA == {0.0: 0, 0.25: 1, 0.5: 2}


def test_a_variant_of_its_own_module_is_one_registry_entry(monkeypatch):
    """A new variant declares its module's contract in its registry entry: the build, the header and the dispatch
    take it from there (docs/kernels.md, "Adding a variant")."""
    from flash_kernels import _ops

    mine = Kernel("flash_mine", "flash_mine.cu", "bind_flash_mine.cpp", ("fwd",), variants.MMA_SYNC,
                  fields=(Field("tile", 0, 8, {"64x64": 0, "128x64": 1}),))
    var = registry.Variant("flash_mine", "a test variant", ("float16",), (64,), ("forward",), True,
                           options={"tile": registry.Option("tile", ("64x64", "128x64"), "tile", {64: "64x64"})},
                           kernels=(mine,))
    monkeypatch.setitem(registry.VARIANTS, "flash_mine", var)
    every = registry._all_kernels()
    assert every["flash_mine"] is mine and list(every)[-1] == "flash_mine"
    monkeypatch.setattr(registry, "KERNELS", every)
    assert "namespace flash_mine {" in variants.header() and "constexpr int kTile128x64 = 1;" in variants.header()
    assert _ops._generic(var, "fwd", var.resolve_options({"tile": "128x64"}, 64)) == ("flash_mine", 1)
    assert registry.engine(var) == "tensor cores"
    bad = registry.Variant("flash_bad", "", ("float16",), (64,), ("forward",), True, kernels=("no_such_module",))
    monkeypatch.setitem(registry.VARIANTS, "flash_bad", bad)
    with pytest.raises(ValueError, match="no kernel module no_such_module"):
        registry._all_kernels()


def test_the_bench_reads_the_one_sdpa_map_and_writes_every_column_a_capture_needs():
    bench = pytest.importorskip("flash_kernels.bench")
    from nsightlab.problems import attention
    from nsightlab.store.captures import REQUIRED_COLUMNS

    assert bench.REFERENCES[:-1] == tuple(attention._BACKENDS) and bench.REFERENCES[-1] == "torch_cpu"
    assert set(REQUIRED_COLUMNS) <= set(bench.CSV_FIELDS)
    assert set(attention.PROBLEM.required_fields) <= set(bench.CSV_FIELDS)  # the store checks the shape columns too


def test_one_cuda_event_timer(monkeypatch):
    """The bench's and the ceilings' timings are nsightlab.run.timing's (the bench keeps its own host clock)."""
    bench = pytest.importorskip("flash_kernels.bench")
    from nsightlab.run import ceilings, timing

    assert bench._timing_time_gpu is timing.time_gpu and bench.L2Flusher is timing.L2Flusher
    seen = []

    def fake(fn, flush, **kw):
        seen.append((flush, kw))
        return timing.Repeats([3.0, 1.0, 2.0], [])

    monkeypatch.setattr(timing, "time_gpu", fake)
    assert ceilings._time(lambda: None, reps=3, warmup=2) == 2.0
    ((flush, kw),) = seen
    assert flush is timing.no_flush and kw["warmup"] == 2 and kw["reps"] == kw["min_reps"] == 3 and kw.get("hold") is None
