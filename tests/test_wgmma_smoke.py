"""scripts/wgmma_smoke.py without a GPU: its diagnosis of a wrong output and its usage errors."""


import pytest
from script_module import load_script

torch = pytest.importorskip("torch")

from flash_kernels.reference import reference_forward  # noqa: E402
from flash_kernels.testing import TOLERANCES, random_attention_inputs  # noqa: E402

smoke = load_script("wgmma_smoke")


def _forward_outputs(o: torch.Tensor, lse: torch.Tensor, ref_o: torch.Tensor, ref_lse: torch.Tensor):
    tol = TOLERANCES["float16"]
    return {"O": (o, ref_o, {"rel_l2": tol["out_rel_l2"], "max_rel": tol["out_max_rel"]}),
            "LSE": (lse, ref_lse, {"max_abs": tol["lse_abs"]})}


def test_a_wrong_output_is_located_and_explained():
    q, k, v, _ = random_attention_inputs(1, 2, 40, 128, torch.float16, seed=3, device="cpu")
    ref_o, ref_lse = reference_forward(q, k, v)
    metrics, diagnosis = smoke.judge(_forward_outputs(ref_o.half(), ref_lse.float(), ref_o, ref_lse))
    assert diagnosis == "" and set(metrics) == {"O", "LSE"}
    o = ref_o.half()
    o[0, 1, 7, 64:70] += 1  # head 1, query row 7, the second 64 columns of D
    metrics, diagnosis = smoke.judge(_forward_outputs(o, ref_lse.float(), ref_o, ref_lse))
    first, hint = diagnosis.split("\n")
    assert first.startswith("O: 6 bad, query rows [7] (of 40), heads [1]; max error per 64 columns of D ['")
    assert first.endswith("'1.0e+00']; nonfinite 0")
    assert hint.strip() == f"look at: {smoke.HINTS['O']}"
    o[0, 0, 0, 0] = float("nan")
    metrics, diagnosis = smoke.judge(_forward_outputs(o, ref_lse.float() + 1, ref_o, ref_lse))
    assert metrics["O"]["nonfinite"] == 1 and "nonfinite 1" in diagnosis
    assert diagnosis.endswith(smoke.HINTS["LSE"])  # a wrong LSE points at the scores, before O


def test_usage_errors_say_what_is_accepted(capsys):
    for argv, said in ((["--passes", "sideways"], "--passes takes forward, backward or forward,backward"),
                       (["--tiles", "100x100"], "--tiles: unknown wg_tile ['100x100']; accepted: 128x128,"),
                       (["--passes", "backward", "--bwd-tiles", "192x64"], "unknown wg_bwd_tile ['192x64']"),
                       (["--time-n", "4096,5000"], "--time-n takes comma-separated values of 1024, 4096, 8192, 16384; "
                                                   "got '4096,5000'"),
                       (["--time-n", "big"], "--time-n takes comma-separated values of"),
                       (["--head-dims", "96"], "--head-dims takes comma-separated values of 64, 128; got '96'"),
                       (["--head-dims", "128,x"], "--head-dims takes comma-separated values of 64, 128; got '128,x'"),
                       (["--time-dtypes", "float16,fp8"], "--time-dtypes takes comma-separated values of float16, "
                                                          "bfloat16; got 'float16,fp8'"),
                       (["--no-time", "--no-check"], "--no-time and --no-check together leave nothing to run")):
        with pytest.raises(SystemExit) as exc:
            smoke.main(argv)
        assert exc.value.code == 2 and said in capsys.readouterr().err
