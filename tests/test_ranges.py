"""The NVTX range naming function and its inverse (torch-free)."""

import re

import pytest

from flash_kernels.configs import CAPTURE_SUITES, SDPA_REFERENCES, Case
from flash_kernels.registry import VARIANTS
from nsightlab.ranges import NCU_NVTX_INCLUDE, parse_range, range_name


def _cases():
    for name, var in VARIANTS.items():
        for pass_ in var.passes:
            for D in var.head_dims:
                opts = [{}] + [{o.name: c} for o in var.options.values() for c in o.choices
                               if D in o.head_dims.get(c, (D,))]
                for o in opts:
                    yield Case(name, pass_, 2, 3, 1000, D, var.dtypes[0], True, tuple(o.items()))
    for ref in SDPA_REFERENCES:
        yield Case(ref, "backward", 1, 8, 4096, 128, "bfloat16", False)


@pytest.mark.parametrize("case", list(_cases()), ids=lambda c: f"{c.variant}-{c.pass_}-{c.D}-{c.options}")
def test_round_trip_every_variant_and_option(case):
    name = case.range_name()
    spec = parse_range(name)
    assert (spec.variant, spec.pass_, spec.B, spec.H, spec.N, spec.D, spec.dtype, spec.causal) == (
        case.variant, case.pass_, case.B, case.H, case.N, case.D, case.dtype, case.causal)
    assert spec.options == case.resolved_options()  # defaults filled in: the range says what ran
    assert range_name(spec.variant, spec.pass_, spec.B, spec.H, spec.N, spec.D, spec.dtype, spec.causal,
                      spec.options) == name
    assert "/" not in name  # ncu splits its NVTX filter at '/'


def test_ncu_filter_selects_only_measured_ranges():
    rx = re.compile(NCU_NVTX_INCLUDE.removeprefix("regex:").removesuffix("/"))
    for suite in CAPTURE_SUITES.values():
        for c in suite.cases:
            assert rx.search(c.range_name())
    assert not rx.search("warmup") and not rx.search("xfk:naive")


@pytest.mark.parametrize("bad, msg", [
    ("naive:forward:B=1", "not a flash_kernels range"),
    ("fk:naive:sideways:B=1,H=1,N=1,D=64,dtype=float16,causal=0", "pass"),
    ("fk:naive:forward:B=1,H=1,N=1,dtype=float16,causal=0", "missing field"),
    ("fk:naive:forward:B=x,H=1,N=1,D=64,dtype=float16,causal=0", "integers"),
    ("fk:naive:forward:B=1,H=1,N=1,D=64,dtype=float16,causal=2", "causal"),
    ("fk:naive:forward:B=1,H=1,N=1,D=64,dtype=float16,causal=0,junk", "key=value"),
])
def test_parse_errors_say_what_is_wrong(bad, msg):
    with pytest.raises(ValueError, match=msg):
        parse_range(bad)


def test_naming_rejects_bad_values():
    with pytest.raises(ValueError, match="positive int"):
        range_name("naive", "forward", 0, 1, 1, 64, "float16", False)
    with pytest.raises(ValueError, match="may only hold"):
        range_name("naive", "forward", 1, 1, 1, 64, "float16", False, {"tile": "a/b"})
    with pytest.raises(ValueError, match="unknown variant"):
        Case("nope", "forward", 1, 1, 1, 64).range_name()
    with pytest.raises(ValueError, match="not supported"):
        Case("flash_mma", "forward", 1, 1, 1, 128, options=(("tile", "1x1"),)).range_name()
