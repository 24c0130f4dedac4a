"""scripts/flush_check.py without a GPU: its usage errors say what was wrong and what is accepted."""


import pytest
from script_module import load_script

pytest.importorskip("torch")

fc = load_script("flush_check")


@pytest.mark.parametrize("argv,said", [
    (["--head-dim", "96"], "argument --head-dim: invalid choice: 96 (choose from 64, 128)"),
    (["--placements", "0"], "--placements takes a whole number of 1 or more; got 0"),
    (["--configs", "Nq3-Nk1-Hkv2"], "--configs: not in the decode suite: ['Nq3-Nk1-Hkv2']; accepted: Nq1-Nk1024-Hkv32"),
    (["--impls", "flash_decode,warp_drive"], "--impls: unknown ['warp_drive']; accepted: "),
    (["--impls", "flash_decode:splits"], "options are option=value pairs joined by '+' after a colon"),
    (["--impls", "flash_decode:tile=64"], "flash_decode has no option ['tile']"),
    (["--modes", "read,scrub"], "--modes takes some of read, write, none; got read,scrub"),
])
def test_usage_errors_say_what_is_accepted(capsys, argv, said):
    with pytest.raises(SystemExit) as exc:
        fc.main(argv)
    assert exc.value.code == 2 and said in capsys.readouterr().err


def test_a_good_command_line_gets_as_far_as_asking_for_a_gpu(capsys, monkeypatch):
    monkeypatch.setattr(fc.torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exc:
        fc.main(["--head-dim", "64", "--configs", "Nq4-Nk16384-Hkv1", "--impls", "flash_decode:splits=8,sdpa_cudnn",
                 "--modes", "read"])
    assert exc.value.code == 2 and "needs a CUDA GPU" in capsys.readouterr().err
