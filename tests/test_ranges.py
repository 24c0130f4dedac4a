"""NVTX range names: schemas write and read them (torch-free), any other name decodes generically."""

import re

import pytest

from nsightlab.core.ranges import LABEL, PASS, RangeSchema, decode, format_options, generic, schemas_of
from nsightlab.problems import attention
from nsightlab.run.sweep import Sweep, from_args, named_sweeps

FK = attention.schema("fk")
GOOD = "fk:flash_mma:forward:B=1,H=8,N=1024,D=64,dtype=float16,causal=0,tile=128x64"


def _registered_sweeps():
    return {name: Sweep.load(path) for name, path in named_sweeps().items()}


def _gqa_sweep():
    """Optional fields: Hkv/Nk where they differ from H/N, left out where they do not."""
    return from_args("gqa", ["sdpa_flash", "sdpa_math"], {"B": 2, "H": 8, "N": [128, 300], "D": 64, "Hkv": [2, 8],
                                                          "Nk": [128, 512], "causal": [False, True]},
                     ["forward", "backward"], {}, ["ncu"])


def _all_cases():
    sweeps = {**_registered_sweeps(), "gqa": _gqa_sweep()}
    for name, sweep in sweeps.items():
        for case in sweep.cases():
            yield name, sweep.schema(), case


CASES = list(_all_cases())


def test_the_registered_sweeps_are_there():
    assert {"seqlen", "blocksize", "bench"} <= set(named_sweeps())
    assert sum(name == "seqlen" for name, _, _ in CASES) == 224
    assert any(c.options for _, _, c in CASES) and any("Hkv" in c.params for _, _, c in CASES)
    assert any("Nk" in c.params for _, _, c in CASES) and any("Nk" not in c.params for _, _, c in CASES)


def test_round_trip_every_case_of_every_registered_sweep():
    for sweep_name, schema, c in CASES:
        row = schema.parse(c.range)
        assert row is not None, (sweep_name, c.range)
        assert (row[LABEL], row[PASS], row["schema"]) == (c.impl, c.pass_, schema.prefix)
        assert {k: row[k] for k in c.params} == dict(c.params), c.range  # typed: ints, bool causal
        assert {k: row[k] for k in c.options} == dict(c.options), c.range  # options decoded as int/str
        assert row["options"] == format_options(c.options)
        for opt in ("Hkv", "Nk"):
            assert (opt in row) == (opt in c.params)
        assert schema.name({LABEL: row[LABEL], PASS: row[PASS], **{k: row[k] for k in schema.columns if k in row}},
                           c.options) == c.range
        assert decode(c.range, [schema]) == {"range": c.range, **row}
        assert "/" not in c.range  # ncu splits its NVTX filter at '/'


def test_options_and_optional_fields_in_a_name():
    row = FK.parse("fk:flash_simt:backward:B=2,H=8,N=300,D=128,dtype=bfloat16,causal=1,Hkv=2,Nk=77,block_size=32")
    assert row == {"variant": "flash_simt", "pass": "backward", "B": 2, "H": 8, "N": 300, "D": 128, "dtype": "bfloat16",
                   "causal": True, "Hkv": 2, "Nk": 77, "block_size": 32, "options": "block_size=32", "schema": "fk"}
    assert FK.parse(GOOD)["tile"] == "128x64" and "Hkv" not in FK.parse(GOOD)


@pytest.mark.parametrize("name", [
    "fk:broken",
    "fk:flash_mma:sideways:B=1",
    "fk:flash_mma:sideways:B=1,H=8,N=1024,D=64,dtype=float16,causal=0",
    "fk::forward:B=1,H=8,N=1024,D=64,dtype=float16,causal=0",
    "fk:flash_mma:forward:B=x,H=8,N=1024,D=64,dtype=float16,causal=0",
    "fk:flash_mma:forward:B=1.5,H=8,N=1024,D=64,dtype=float16,causal=0",
    "fk:flash_mma:forward:B=1,H=8,N=1024,D=64,dtype=float16,causal=2",
    "fk:flash_mma:forward:B=1,H=8,N=1024,D=64,dtype=float16,causal=0,Hkv=two",
    "fk:flash_mma:forward:B=1,H=8,N=1024,dtype=float16,causal=0",
    "fk:flash_mma:forward:B=1,H=8,N=1024,D=64,dtype=float16",
    "fk:flash_mma:forward",
    "fk:flash_mma:forward:B=1,H=8,N=1024,D=64,dtype=float16,causal=0,junk",
    "attn:flash_mma:forward:B=1,H=8,N=1024,D=64,dtype=float16,causal=0",
    "xfk:flash_mma:forward:B=1,H=8,N=1024,D=64,dtype=float16,causal=0",
    "",
    None,
    42,
    ["fk", "naive"],
])
def test_parse_says_none_for_names_outside_the_grammar_and_decode_keeps_them(name):
    assert FK.parse(name) is None
    if isinstance(name, str):
        row = decode(name, [FK])
        assert row["range"] == name and row.get("schema") != "fk"


@pytest.mark.parametrize("name, expected", [
    ("gemm:fwd M=4096 K=1024", {"variant": "gemm:fwd", "M": 4096, "K": 1024}),
    ("reduce: sum", {"variant": "reduce: sum"}),
    ("elementwise mul n=4194304;alpha=0.5", {"variant": "elementwise mul", "n": 4194304, "alpha": 0.5}),
    ("step,lr=1e-3,tag=warm", {"variant": "step", "lr": 1e-3, "tag": "warm"}),
    ("variant=x only", {"variant": "variant=x only"}),  # a reserved column name stays in the label
])
def test_generic_decoding_of_foreign_names(name, expected):
    row = decode(name)
    assert {k: row[k] for k in expected} == expected and row["range"] == name and row["schema"] == ""
    assert row[PASS] is None and generic(name)[LABEL] == expected["variant"]


def test_empty_names():
    assert decode("") == {"range": "", "variant": None, "pass": None}
    assert decode(None) == {"range": "", "variant": None, "pass": None}
    assert generic("   ")["variant"] is None


def test_nvtx_include_ends_with_a_slash_and_escapes_the_prefix():
    s = RangeSchema("a.b+c")
    inc = s.nvtx_include()
    assert inc.startswith("regex:") and inc.endswith("/")
    rx = re.compile(inc.removeprefix("regex:").removesuffix("/"))
    assert rx.search("a.b+c:impl:forward:N=1")
    assert not rx.search("axb+c:impl:forward:N=1") and not rx.search("aa.b+c:impl:forward") and not rx.search("warmup")
    fk = re.compile(FK.nvtx_include().removeprefix("regex:").removesuffix("/"))
    assert all(fk.search(c.range) for _, s, c in CASES if s.prefix == "fk")
    assert not fk.search("xfk:naive:forward") and not fk.search("attn:sdpa_flash:forward")


def _values(**over):
    return {LABEL: "naive", PASS: "forward", "B": 1, "H": 8, "N": 64, "D": 64, "dtype": "float16", "causal": False,
            **over}


@pytest.mark.parametrize("values, options, message", [
    (_values(B=-1), None, "B must be a non-negative int, not -1"),
    (_values(N=True), None, "N must be a non-negative int"),
    (_values(N="64"), None, "N must be a non-negative int"),
    (_values(Hkv=2.5), None, "Hkv must be a non-negative int"),
    (_values(variant="a/b"), None, "may only hold letters"),
    (_values(dtype="float 16"), None, "may only hold letters"),
    (_values(**{PASS: "sideways"}), None, "pass must be one of"),
    ({PASS: "forward"}, None, "missing positional field 'variant'"),
    ({k: v for k, v in _values().items() if k != "D"}, None, "missing field 'D'"),
    (_values(), {"N": 3}, "option name 'N' clashes with a range field"),
    (_values(), {"tile": "a/b"}, "option value 'a/b' may only hold"),
    (_values(), {"bad key": 1}, "option name 'bad key' may only hold"),
])
def test_name_rejects_bad_values_saying_which(values, options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        FK.name(values, options)


def test_schema_definition_errors_and_manifest_round_trip():
    with pytest.raises(ValueError, match="prefix"):
        RangeSchema("my prefix")
    with pytest.raises(ValueError, match="field types must be one of"):
        RangeSchema("p", fields={"x": "complex"})
    assert RangeSchema.from_json(FK.to_json()) == FK
    with pytest.raises(ValueError, match="not a range schema"):
        RangeSchema.from_json({"positional": ["variant"]})
    assert schemas_of({"range_schemas": [FK.to_json(), {"nonsense": 1}]}) == (FK,)
    assert schemas_of(None) == () and schemas_of({"range_schemas": None}) == ()
    assert FK.name(_values(causal=True, Hkv=None)) == "fk:naive:forward:B=1,H=8,N=64,D=64,dtype=float16,causal=1"


def test_optional_fields_left_out_of_a_name_take_the_field_they_equal():
    """attention's Hkv and Nk equal H and N where a name leaves them out: a frame of mixed names shows the value
    rather than a gap; a capture whose names never give the field keeps no such column; a schema recorded before
    same_as existed takes the registered problem's."""
    from nsightlab.parse.range_columns import with_ranges
    from nsightlab.store.read import capture_schemas

    assert FK.same_as == {"Hkv": "H", "Nk": "N"} and RangeSchema.from_json(FK.to_json()) == FK
    with pytest.raises(ValueError, match="same_as maps optional fields to fields"):
        RangeSchema("p", fields={"H": "int"}, optional={"Hkv": "int"}, same_as={"H": "Hkv"})
    gqa = FK.name(_values(H=8, Hkv=2))
    plain = FK.name(_values(H=8))
    df = with_ranges([{"range": gqa}, {"range": plain}, {"range": "outside:any:grammar"}], [FK])
    assert df["Hkv"].tolist()[:2] == [2, 8] and df["Hkv"].isna().iloc[2] and "Nk" not in df
    assert "Hkv" not in with_ranges([{"range": plain}], [FK])
    old = {k: v for k, v in FK.to_json().items() if k != "same_as"}
    assert RangeSchema.from_json(old).same_as == {}
    assert capture_schemas({"range_schemas": [old], "sweep": {"problem": "attention"}})[0].same_as == FK.same_as
    assert capture_schemas({"range_schemas": [old], "sweep": {"problem": "nope"}})[0].same_as == {}
    assert capture_schemas({"range_schemas": [old]})[0].same_as == {}
