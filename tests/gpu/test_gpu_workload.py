"""The workload on the GPU: built-in variants, SDPA and a user's callable run through the same door;
a case an implementation refuses becomes a skipped row, not a crash."""

from __future__ import annotations

import json

import pytest

from nsightlab.run.sweep import Sweep
from nsightlab.run.workload import main


def _user_attention(q, k, v, *, causal=False, scale=None):  # a user's kernel: plain PyTorch here
    import torch.nn.functional as F

    if q.shape[-1] == 128:
        raise ValueError("this kernel takes head dim 64 only")
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def test_workload_runs_every_kind_of_implementation(tmp_path):
    sweep = Sweep("gpu-test", [{"impl": ["flash_mma", "sdpa_flash", "tests.gpu.test_gpu_workload:_user_attention"],
                                "pass": ["forward", "backward"], "B": 1, "H": 2, "N": [100, 256], "D": [64, 128],
                                "causal": [False, True]}], range_prefix="t", plugins=("flash_kernels.study",))
    path = tmp_path / "sweep.toml"
    path.write_text(sweep.to_toml())
    log = tmp_path / "cases.jsonl"
    assert main(["--sweep", str(path), "--iters", "2", "--log", str(log)]) == 0
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(recs) == 3 * 2 * 2 * 2 * 2
    user = [r for r in recs if r["impl"] == "_user_attention"]
    refused = [r for r in user if ",D=128," in r["range"]]
    assert refused and all(r["status"].startswith("skipped: ValueError: this kernel takes head dim 64") for r in refused)
    others = [r for r in recs if r not in refused]
    bad = [r for r in others if r["status"] != "ok"]
    assert not bad, bad
    assert all(r["range_seconds"] > 0 for r in others)


@pytest.mark.parametrize("pass_", ["forward", "backward"])
def test_gqa_and_cross_attention_cases_reach_sdpa(tmp_path, pass_):
    sweep = Sweep("gpu-gqa", [{"impl": ["sdpa_flash", "flash_mma", "tiled"], "pass": pass_, "B": 1, "H": 8, "Hkv": 2,
                               "N": 128, "Nk": 256, "D": 64}], plugins=("flash_kernels.study",))
    cases = sweep.cases()
    assert [c.runnable for c in cases] == [True, True, False]  # tiled says why it cannot: Hkv/Nk
    path = tmp_path / "s.toml"
    path.write_text(sweep.to_toml())
    log = tmp_path / "l.jsonl"
    assert main(["--sweep", str(path), "--log", str(log)]) == 0
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["impl"] for r in recs] == ["sdpa_flash", "flash_mma"] and all(r["status"] == "ok" for r in recs)


def test_a_custom_problem_runs_with_its_own_inputs(tmp_path):
    """A kernel that is not attention (examples/gemm) through the same door."""
    from nsightlab.run.sweep import find

    sweep = find("examples/gemm/sweep.toml")
    path = tmp_path / "gemm.toml"
    path.write_text(sweep.to_toml())
    log = tmp_path / "g.jsonl"
    assert main(["--sweep", str(path), "--log", str(log)]) == 0
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(recs) == 8 and all(r["status"] == "ok" for r in recs), recs
