"""The notebook door: nsightlab.run.capture.profile builds a sweep from its arguments, captures it in a
subprocess and hands back the parsed frames (the capture itself stood in for by a committed one)."""

from pathlib import Path

import pytest

from nsightlab.run import capture as C

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "profiles" / "nvidia-h200" / "triton-example"


def test_profile_hands_back_the_frames(monkeypatch):
    seen = {}

    def fake_capture(sweep, profiles, **kw):
        seen["cases"] = sweep.cases()
        return EXAMPLE

    monkeypatch.setattr(C, "capture", fake_capture)
    out = C.profile(["tests.stand_in:my_attention", "sdpa_flash"], name="nb", N=[1024, 4096], D=128, passes=("forward",))
    assert [c.impl for c in seen["cases"]] == ["my_attention", "my_attention", "sdpa_flash", "sdpa_flash"]
    assert out["path"] == EXAMPLE and out["manifest"]["name"] == "triton-example"
    assert {"triton_fa2", "flash_mma", "sdpa_flash"} <= set(out["ncu"]["variant"])
    k = out["nsys"]["kernels"]
    assert (k.loc[k["range"] != "", "range"].str.startswith("attn:")).all()


def test_profile_refuses_a_function_defined_in_the_notebook_itself():
    def local(q, k, v, *, causal=False, scale=None):
        return q

    local.__module__ = "__main__"
    with pytest.raises(ValueError, match="defined in the notebook itself.*put it in a .py file"):
        C.profile([local], N=128)
