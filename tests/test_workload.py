"""The profiling workload's command line: listing without a GPU and clear errors on bad arguments."""

import pytest

from flash_kernels import workload
from flash_kernels.configs import CAPTURE_SUITES
from nsightlab.ranges import parse_range


def test_list_prints_every_case_of_a_suite(capsys):
    assert workload.main(["--suite", "seqlen", "--list", "--warmup-refs-only"]) == 0
    names = capsys.readouterr().out.split()
    assert names == [c.range_name() for c in CAPTURE_SUITES["seqlen"].cases]
    assert all(parse_range(n).variant for n in names)


def test_only_filters_by_range_name(capsys):
    assert workload.main(["--suite", "blocksize", "--only", "flash_simt:forward.*block_size=4$", "--list"]) == 0
    names = capsys.readouterr().out.split()
    assert len(names) == 4 and all(":forward:" in n and n.endswith("block_size=4") for n in names)


def test_single_variant_cases(capsys):
    assert workload.main(["--variant", "flash_mma,sdpa_flash", "--pass", "forward,backward", "-N", "333", "-D", "128",
                          "--list"]) == 0
    names = capsys.readouterr().out.split()
    assert len(names) == 4 and "fk:flash_mma:backward:B=1,H=8,N=333,D=128" in names[1]
    with pytest.raises(SystemExit):  # an option SDPA does not take
        workload.main(["--variant", "flash_mma,sdpa_flash", "-N", "64", "--option", "tile=64x64", "--list"])
    assert "sdpa_flash takes no options" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--suite", "nope", "--list"], "unknown capture suite 'nope'"),
    (["--suite", "seqlen", "--variant", "naive", "--list"], "either --suite or --variant"),
    (["--list"], "give --suite NAME or --variant NAME"),
    (["--variant", "flashy", "-N", "64", "--list"], "unknown variant 'flashy'"),
    (["--variant", "naive", "-N", "64", "--pass", "sideways", "--list"], "--pass takes forward, backward"),
    (["--variant", "naive", "--list"], "-N must be a positive integer"),
    (["--variant", "naive", "-N", "0", "--list"], "-N must be a positive integer"),
    (["--variant", "flash_mma", "-N", "64", "-D", "96", "--list"], "supports head dims"),
    (["--variant", "flash_fa1", "-N", "64", "--pass", "backward", "--list"], "flash_fa1 has no backward pass"),
    (["--variant", "flash_mma", "-N", "64", "--dtype", "float32", "--list"], "supports dtypes"),
    (["--variant", "flash_simt", "-N", "64", "--option", "block_size", "--list"], "--option takes name=value"),
    (["--variant", "flash_simt", "-N", "64", "--iters", "0"], "--iters must be >= 1"),
    (["--suite", "seqlen", "--only", "zzz", "--list"], "matches no case"),
])
def test_bad_arguments_exit_2_saying_what_is_wrong(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        workload.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_without_a_gpu_it_says_so(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU message")
    assert workload.main(["--variant", "naive", "-N", "64"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
