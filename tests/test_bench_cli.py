import pytest

torch = pytest.importorskip("torch")

from flash_kernels import bench  # noqa: E402
from flash_kernels.bench_suites import SUITES, get_suite  # noqa: E402


def test_suites_are_the_issue_s():
    mixed, _, _ = get_suite("mixed")
    assert [c.name for c in mixed][:2] == ["Small-1", "Small-2"] and len(mixed) == 10
    assert {c.N for c in mixed} >= {32, 100}
    d128, _, _ = get_suite("d128")
    assert all(c.B * c.N == 16384 and c.H == 16 and c.D == 128 for c in d128)
    conv, _, _ = get_suite("convention")
    assert len(conv) == 24 and all(c.B * c.N == 16384 and c.H * c.D == 2048 for c in conv)
    with pytest.raises(ValueError, match="known suites"):
        get_suite("nope")
    assert set(SUITES) == {"mixed", "d128", "convention"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cli_without_gpu_says_so(capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--suite", "mixed"])
    assert exc.value.code == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_slow_cases_skip_only_cases_with_no_less_work():
    slow = bench.SlowCases()
    key = ("naive", "backward", "float16")
    slow.check(key, 1e9)  # nothing recorded yet: runs
    slow.record(key, 2e9, "B4-H16-N4096-D128", 1492.0)
    slow.check(key, 1.9e9)  # less work than the slow case: still runs
    with pytest.raises(bench.Skip, match=r"B4-H16-N4096-D128 \(no more work\) took 1492 ms"):
        slow.check(key, 2e9)
    with pytest.raises(bench.Skip):
        slow.check(key, 8e9)
    slow.check(("naive", "forward", "float16"), 8e9)  # another pass is judged on its own
    slow.check(("naive", "backward", "float32"), 8e9)  # and another dtype
    slow.record(key, 1e9, "smaller", 900.0)  # a smaller slow case lowers the bar
    with pytest.raises(bench.Skip, match="smaller"):
        slow.check(key, 1.5e9)
