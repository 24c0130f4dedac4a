"""scripts/clock_watch.py without a GPU: its usage errors, and how it reads nvidia-smi's samples."""


import pytest
from script_module import load_script

pytest.importorskip("torch")

cw = load_script("clock_watch")


@pytest.mark.parametrize("argv,said", [
    (["--dtypes", "float16,fp8"], "--dtypes: unknown ['fp8']; accepted: float16, bfloat16"),
    (["--seconds", "0"], "--seconds must be > 0 and --rounds >= 1; got 0.0, 1"),
    (["--rounds", "0"], "--seconds must be > 0 and --rounds >= 1"),
    (["--pass", "sideways"], "argument --pass: invalid choice: 'sideways'"),
])
def test_usage_errors_say_what_is_accepted(capsys, argv, said):
    with pytest.raises(SystemExit) as exc:
        cw.main(argv)
    assert exc.value.code == 2 and said in capsys.readouterr().err


def test_samples_are_parsed_and_bad_lines_dropped(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nprintf '1650, 699.10, 67, 0x0000000000000004\\n[N/A], 1, 2, 3\\n1605, 697.5, 73, 0x0\\n'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    with cw.Watch() as w:
        import time
        for _ in range(50):
            if len(w.rows) >= 2:
                break
            time.sleep(0.05)
    assert w.rows == [(1650.0, 699.1, 67.0, "0x0000000000000004"), (1605.0, 697.5, 73.0, "0x0")]
