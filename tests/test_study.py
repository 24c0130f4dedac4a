"""flash_kernels.study: the colours it registers through nsightlab's public door (register_style)."""

from flash_kernels import study
from nsightlab.problems.impls import load_plugins
from nsightlab.render.figures import impl_style


def test_the_fp8_calls_have_colours_and_markers_of_their_own():
    load_plugins(["flash_kernels.study"])
    got = {n: (impl_style(n)["color"], impl_style(n)["symbol"]) for n in study.FP8_STYLES}
    assert got == {n: (c.upper(), m) for n, (c, m) in study.FP8_STYLES.items()}
    others = {impl_style(n)["color"] for n in ("flash_wgmma", "sdpa_cudnn", "sdpa_flash", "flash_mma")}
    assert len({c for c, _ in got.values()}) == 3 and not others & {c for c, _ in got.values()}
